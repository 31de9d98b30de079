//! Seeded random operations soak (SPEC "Wave 2", "Wave 4 > Operations"): random sequences of
//! every command and option — exclusive, `SHARED` and `LIMIT n` holds, `EPHEMERAL` holds,
//! generated tokens, `DATA`, re-grants, releases, extends, `LOCK.ACQUIREALL` and
//! `LOCK.RELEASEALL` over overlapping key sets (`multi.rs`), `LOCK.OBSERVE` with `AFTER`, `SEEN`
//! and `BLOCK` (`observe.rs`), `LOCK.CALL` and `LOCK.FENCE` writes, `BLOCK`
//! waits served by handoff, leases that end by themselves, `DEL` of locks and gates, closed and
//! killed connections — interleaved with operations: restarts from the AOF and from RDB
//! snapshots, `DEBUG RELOAD`, `DEBUG LOADAOF`, `BGREWRITEAOF`, the replica's full and partial
//! syncs and restarts, and `FAILOVER`. A second soak runs the same in Redis Cluster, where the
//! keys' slots move between two shards with locks held and waiters waiting (`cluster.rs`; in
//! `make stress`). Each server writes the record encoding the seed draws for it (`rdb_encoding`:
//! version 4, or version 3 for about one in three).
//!
//! A model (`model.rs`) follows what the clients were told; after every operation, and every
//! `CHECK_EVERY` steps, the servers must be up with no crash in their logs, every lock, gate and
//! data key must be as the model says (TTLs never beyond the lease granted), and master and
//! replica must have equal digests. Every grant's fence must exceed all earlier ones of its
//! name, over the whole run.
//!
//! `SEED` (default: the time) replays a run; `SOAK_SECS` (default 18, and 12 in Cluster; 0: no
//! limit) and
//! `SOAK_STEPS` (default: no limit) bound it, whichever ends first:
//! `SEED=n SOAK_STEPS=m SOAK_SECS=0 cargo test --release --test suite soak`. A failure names
//! the seed, the step and the steps before it. `make stress` runs it longer.

// The fuzz crate's generator stands alone so that tests can include it; the soak uses part.
#[allow(dead_code)]
#[path = "../../fuzz/src/gen.rs"]
mod gen;

mod check;
mod cluster;
mod cluster_failover;
mod cmds;
mod draws;
mod model;
mod multi;
mod observe;
mod ops;
mod other;
mod pick;
mod serve;
mod serve_all;
mod slots;

mod found;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use redis::Connection;

use crate::common::*;

use gen::Rng;
use model::Model;
use slots::Slot;

pub type R<T = ()> = Result<T, String>;

/// A full check every this many steps (operations are always followed by one).
const CHECK_EVERY: u64 = 25;
/// Percent of steps that are operations rather than client commands.
const OPERATION_PERCENT: usize = 3;

struct Config {
    seed: u64,
    steps: Option<u64>,
    secs: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Config {
    /// `secs`: the default length of this run (each soak has its own).
    fn from_env(secs: u64) -> Config {
        Config {
            seed: env_u64("SEED").unwrap_or_else(|| now_ms() as u64),
            steps: env_u64("SOAK_STEPS"),
            secs: env_u64("SOAK_SECS").unwrap_or(secs),
        }
    }
}

pub struct Soak {
    pub master: Server,
    pub replica: Server,
    /// A connection to the master for checks and operations.
    pub mc: Connection,
    pub slots: Vec<Slot>,
    /// The connection of the odd commands (`Cmd::Odd`), if open.
    pub odd: Option<RawConn>,
    pub model: Model,
    /// In the Cluster soak: the other shard (taken out while a move uses it).
    pub spare: Option<cluster::Spare>,
    /// The Cluster soak.
    in_cluster: bool,
    /// The soak's slots are migrating to the spare shard.
    pub migrating: bool,
    pub step: u64,
    seed: u64,
    rng: Rng,
    /// The steps so far, for a failure message (the latest) and its log file (all).
    recent: Vec<String>,
}

/// The record encoding server `server` of the run writes (`rdb-encoding`: 0 the master, 1 its
/// replica, 2 and 3 the Cluster's other nodes), drawn from the seed but not from the steps' draws,
/// so that a seed replays the same steps: one server in three or so writes version 3 (what the
/// previous release reads), so that restarts, full syncs and slot moves read both versions.
pub fn rdb_encoding(seed: u64, server: u64) -> &'static str {
    // splitmix64 of the seed and the server's number.
    let mut z = seed.wrapping_add(server.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    if (z ^ (z >> 31)).is_multiple_of(3) {
        "3"
    } else {
        "4"
    }
}

impl Soak {
    fn new(seed: u64) -> Soak {
        let master = Server::builder()
            .set("appendonly", "yes")
            .set("appendfsync", "always")
            .set("aof-use-rdb-preamble", "yes")
            .module_args(&["rdb-encoding", rdb_encoding(seed, 0)])
            .start();
        let replica = ops::start_replica(&master, rdb_encoding(seed, 1));
        Soak::with(master, replica, None, seed)
    }

    fn new_cluster(seed: u64) -> Soak {
        let (master, replica, spare) = cluster::start_cluster(seed);
        Soak::with(master, replica, Some(spare), seed)
    }

    fn with(master: Server, replica: Server, spare: Option<cluster::Spare>, seed: u64) -> Soak {
        let mc = master.conn();
        let mut soak = Soak {
            master,
            replica,
            mc,
            slots: Vec::new(),
            odd: None,
            model: Model::default(),
            in_cluster: spare.is_some(),
            spare,
            migrating: false,
            step: 0,
            seed,
            rng: Rng::new(seed),
            recent: Vec::new(),
        };
        soak.connect_slots();
        soak
    }

    pub fn note(&mut self, line: String) {
        self.recent.push(format!("[{}] {line}", self.step));
    }

    fn one_step(&mut self) -> R {
        let mut d = pick::draws(&mut self.rng);
        if d.chance(OPERATION_PERCENT) {
            let t0 = now_ms();
            let r = self.operation(&mut d);
            self.model.tally.operation_ms += now_ms() - t0;
            return r;
        }
        self.command(&mut d)?;
        if self.step.is_multiple_of(CHECK_EVERY) {
            self.check_all()?;
        }
        Ok(())
    }

    fn run(&mut self, cfg: &Config) -> R<String> {
        let started = Instant::now();
        let time_up = |s: u64| cfg.secs > 0 && started.elapsed() >= Duration::from_secs(s);
        while cfg.steps.is_none_or(|n| self.step < n) && !time_up(cfg.secs) {
            self.step += 1;
            let outcome = catch_unwind(AssertUnwindSafe(|| self.one_step()));
            let failed = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(panic) => panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into()),
            };
            return Err(self.failure(&failed));
        }
        self.check_all().map_err(|e| self.failure(&e))?;
        let t = &self.model.tally;
        Ok(format!(
            "SOAK-SUMMARY seed={} steps={} secs={} commands={} operations={} restarts={} \
             grants={} regrants={} refused={} waits={} handoffs={} wait_timeouts={} \
             lease_ends={} ephemeral_releases={} guarded_writes={} stale_fences={} moves={} \
             moved_locks={} moved_waiters={} checks={} operation_ms={} waited_ms={} kinds={} \
             ops={} multi_observe={}",
            self.seed,
            self.step,
            started.elapsed().as_secs(),
            t.commands,
            t.operations,
            t.restarts,
            t.grants,
            t.regrants,
            t.refused,
            t.waits,
            t.handoffs,
            t.wait_timeouts,
            t.lease_ends,
            t.ephemeral_releases,
            t.guarded_writes,
            t.stale_fences,
            t.moves,
            t.moved_locks,
            t.moved_waiters,
            t.checks,
            t.operation_ms,
            t.waited_ms,
            model::Tally::list(&t.kinds),
            model::Tally::list(&t.ops),
            model::Tally::list(&t.more)
        ))
    }

    fn failure(&self, msg: &str) -> String {
        let file = std::env::temp_dir().join(format!("redislock-soak-{}.log", self.seed));
        let written = std::fs::write(&file, self.recent.join("\n") + "\n").is_ok();
        let first = self.recent.len().saturating_sub(40);
        format!(
            "soak failed at step {}: {msg}\n\
             replay: SEED={} SOAK_STEPS={} SOAK_SECS=0 cargo test --release --test suite {}\n\
             --- the steps before (all of them in {}) ---\n{}\n--- master ---\n{}\n\
             --- replica ---\n{}",
            self.step,
            self.seed,
            self.step,
            if self.in_cluster {
                "soak::random_commands_while_slots_move (with REDISLOCK_LONG_TESTS=1)"
            } else {
                "soak::random_commands_and_operations"
            },
            if written {
                file.display().to_string()
            } else {
                "(not written)".into()
            },
            self.recent[first..].join("\n"),
            self.master.log_tail(15),
            self.replica.log_tail(15)
        )
    }
}

fn soak(cluster: bool, secs: u64) {
    let cfg = Config::from_env(secs);
    eprintln!(
        "soak: seed {} (SEED), {} s (SOAK_SECS), {} steps (SOAK_STEPS), rdb-encoding {:?}",
        cfg.seed,
        cfg.secs,
        cfg.steps.map_or("unlimited".into(), |n| n.to_string()),
        (0..4)
            .map(|i| rdb_encoding(cfg.seed, i))
            .collect::<Vec<_>>()
    );
    let mut soak = if cluster {
        Soak::new_cluster(cfg.seed)
    } else {
        Soak::new(cfg.seed)
    };
    match soak.run(&cfg) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn random_commands_and_operations() {
    soak(false, 18);
}

/// The same in Redis Cluster, with slot moves between shards (`cluster.rs`). Four nodes whose
/// cluster bus and elections share the machine with the rest of the suite: `make stress` runs
/// it (REDISLOCK_LONG_TESTS=1), `make test` leaves it out.
#[test]
fn random_commands_while_slots_move() {
    if std::env::var_os("REDISLOCK_LONG_TESTS").is_none() {
        eprintln!("skipped: set REDISLOCK_LONG_TESTS=1 to run it (make stress does)");
        return;
    }
    soak(true, 12);
}
