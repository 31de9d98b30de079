//! The operations between commands: restarts from the AOF (with or without the RDB preamble,
//! after a rewrite or not, ended by `SHUTDOWN` or `kill -9`) and from an RDB snapshot, `DEBUG
//! RELOAD`, `DEBUG LOADAOF`, `BGREWRITEAOF`, the replica's full and partial syncs, a restart of
//! the replica, and `FAILOVER` with the roles swapped. Each is followed by every check.

use redis::Value;

use crate::common::*;

use super::pick::Draws;
use super::{rdb_encoding, Soak, R};

#[derive(Clone, Copy, Debug)]
pub enum Op {
    AofRestart {
        preamble: bool,
        rewrite: bool,
        kill: bool,
    },
    RdbRestart {
        bgsave: bool,
    },
    DebugReload,
    LoadAof,
    Rewrite {
        preamble: bool,
    },
    NewReplica,
    Reattach,
    PartialSync,
    ReplicaRestart,
    Failover,
    /// Cluster only: the soak's slots move to the other shard.
    MoveSlots,
}

pub fn pick(d: &mut Draws) -> Op {
    let (a, b, c) = (d.chance(50), d.chance(50), d.chance(50));
    match d.below(100) {
        0..=29 => Op::AofRestart {
            preamble: a,
            rewrite: b,
            kill: c,
        },
        30..=39 => Op::RdbRestart { bgsave: a },
        40..=49 => Op::DebugReload,
        50..=54 => Op::LoadAof,
        55..=64 => Op::Rewrite { preamble: a },
        65..=71 => Op::NewReplica,
        72..=77 => Op::Reattach,
        78..=85 => Op::PartialSync,
        86..=89 => Op::ReplicaRestart,
        _ => Op::Failover,
    }
}

/// The operations of the Cluster soak: no `REPLICAOF` there, and `DEBUG RELOAD` would need a
/// new replica (see `Op::DebugReload`).
pub fn pick_in_cluster(d: &mut Draws) -> Op {
    match d.below(100) {
        0..=34 => Op::MoveSlots,
        35..=49 => Op::Failover,
        50..=64 => match pick(d) {
            restart @ Op::AofRestart { .. } => restart,
            _ => Op::AofRestart {
                preamble: true,
                rewrite: false,
                kill: true,
            },
        },
        65..=72 => Op::RdbRestart {
            bgsave: d.chance(50),
        },
        73..=82 => Op::Rewrite {
            preamble: d.chance(50),
        },
        83..=87 => Op::LoadAof,
        88..=93 => Op::PartialSync,
        _ => Op::ReplicaRestart,
    }
}

/// Replaces a directive among the server's start arguments (used by its restarts), so that a
/// restart starts the way `CONFIG SET` left it.
fn set_arg(s: &mut Server, name: &str, values: &[&str]) {
    let flag = format!("--{name}");
    while let Some(i) = s.args.iter().position(|a| *a == flag) {
        let end = (i + 1..s.args.len())
            .find(|&j| s.args[j].starts_with("--"))
            .unwrap_or(s.args.len());
        s.args.drain(i..end);
    }
    if !values.is_empty() {
        s.args.push(flag);
        s.args.extend(values.iter().map(|v| v.to_string()));
    }
}

fn config_set(s: &Server, name: &str, value: &str) {
    assert_eq!(
        ok(&mut s.conn(), &rcmd!("CONFIG", "SET", name, value)),
        Value::Okay
    );
}

fn config_get(s: &Server, name: &str) -> String {
    match ok(&mut s.conn(), &rcmd!("CONFIG", "GET", name)) {
        Value::Array(v) if v.len() == 2 => lossy(&as_bytes(&v[1])),
        Value::Map(m) if m.len() == 1 => lossy(&as_bytes(&m[0].1)),
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

/// A replica of `master` that can take over: AOF on, as on the master.
pub fn start_replica(master: &Server, rdb_encoding: &str) -> Server {
    Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .module_args(&["rdb-encoding", rdb_encoding])
        .replica_of(master)
        .start()
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

impl Soak {
    pub fn operation(&mut self, d: &mut Draws) -> R {
        let op = if self.spare.is_some() {
            pick_in_cluster(d)
        } else {
            pick(d)
        };
        self.note(format!("== {op:?}"));
        // Observers do not wait through operations.
        self.end_observers(None)?;
        self.model.tally.operations += 1;
        let name = format!("{op:?}");
        let name = name
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_string();
        *self.model.tally.ops.entry(name).or_default() += 1;
        match op {
            Op::AofRestart {
                preamble,
                rewrite,
                kill,
            } => {
                self.aof_on()?;
                self.preamble(preamble);
                if rewrite {
                    self.background("BGREWRITEAOF")?;
                }
                self.restart_master(if kill { Stop::Kill } else { Stop::NoSave })?;
            }
            Op::RdbRestart { bgsave } => {
                if config_get(&self.master, "appendonly") == "yes" {
                    config_set(&self.master, "appendonly", "no");
                }
                set_arg(&mut self.master, "appendonly", &["no"]);
                // Nothing may be acknowledged after the snapshot: the waiters go first.
                self.drain_waiters()?;
                self.background(if bgsave { "BGSAVE" } else { "SAVE" })?;
                self.restart_master(Stop::Kill)?;
            }
            Op::DebugReload => {
                ok(&mut self.mc, &rcmd!("DEBUG", "RELOAD"));
                self.model.unbind_all();
                // The reload leaves out the keys expired by then without telling the replica,
                // which keeps them (expired) and then cannot replay a new lock of another kind
                // on such a name: Redis's doing, for any type. A full sync clears them.
                self.replica = start_replica(&self.master, rdb_encoding(self.seed, 1));
            }
            Op::LoadAof => {
                self.aof_on()?;
                // As for a restart: an AOF turned on again holds nothing until rewritten.
                self.master.wait_aof_rewrite_done();
                ok(&mut self.mc, &rcmd!("DEBUG", "LOADAOF"));
                self.model.unbind_all();
            }
            Op::Rewrite { preamble } => {
                self.aof_on()?;
                self.preamble(preamble);
                self.background("BGREWRITEAOF")?;
            }
            Op::NewReplica => {
                // A full sync: the old replica goes once the new one is in sync.
                let new = start_replica(&self.master, rdb_encoding(self.seed, 1));
                self.replica = new;
            }
            Op::Reattach => {
                let mut rc = self.replica.conn();
                ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
                let port = self.master.port();
                ok(&mut rc, &rcmd!("REPLICAOF", "127.0.0.1", port));
                self.replica
                    .wait_info("replication", "master_link_status", "up");
            }
            Op::PartialSync => {
                // After a restart of the master the replica's next sync is a full one.
                self.replica
                    .wait_info("replication", "master_link_status", "up");
                wait_replica_caught_up(&self.master, &self.replica);
                let partial = |s: &Server| s.info_field("stats", "sync_partial_ok");
                let before = partial(&self.master);
                ok(
                    &mut self.replica.conn(),
                    &rcmd!("CLIENT", "KILL", "TYPE", "master"),
                );
                self.replica
                    .wait_info("replication", "master_link_status", "up");
                let after = partial(&self.master);
                let n = |v: Option<String>| v.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
                if n(after.clone()) <= n(before.clone()) {
                    return Err(format!(
                        "the replica did not resync partially (sync_partial_ok {before:?} -> {after:?})"
                    ));
                }
            }
            Op::ReplicaRestart => {
                self.replica.restart(Stop::Kill);
                self.replica
                    .wait_info("replication", "master_link_status", "up");
            }
            Op::Failover if self.spare.is_some() => self.cluster_failover()?,
            Op::Failover => self.failover()?,
            Op::MoveSlots => self.move_slots(d)?,
        }
        self.cluster_settled();
        // The replica reconnects to a restarted master within a second or so: the next
        // periodic check compares it, and the soak goes on meanwhile.
        let restarted = matches!(op, Op::AofRestart { .. } | Op::RdbRestart { .. });
        self.check_all_but(restarted)
    }

    /// `SAVE`, `BGSAVE` or `BGREWRITEAOF`, once no other child (an automatic rewrite, a full
    /// sync's snapshot) runs, and until it is done.
    fn background(&mut self, command: &str) -> R {
        let busy = |s: &Server| {
            let info = s.info_text("persistence");
            [
                "rdb_bgsave_in_progress",
                "aof_rewrite_in_progress",
                "aof_rewrite_scheduled",
            ]
            .iter()
            .any(|f| field(&info, f).as_deref() != Some("0"))
        };
        let deadline = std::time::Instant::now() + startup_deadline();
        loop {
            wait_until(
                "no background save or rewrite",
                std::time::Duration::from_secs(10),
                || !busy(&self.master),
            );
            match run(&mut self.mc, &rcmd!(command)) {
                Ok(_) => break,
                Err(e)
                    if (err_text(&e).contains("in progress")
                        || err_text(&e).contains("child process"))
                        && std::time::Instant::now() < deadline => {}
                Err(e) => return Err(format!("{command}: {}", err_text(&e))),
            }
        }
        wait_until(
            &format!("{command} done"),
            std::time::Duration::from_secs(10),
            || !busy(&self.master),
        );
        let status = match command {
            "BGSAVE" => "rdb_last_bgsave_status",
            "BGREWRITEAOF" => "aof_last_bgrewrite_status",
            _ => return Ok(()),
        };
        match self.master.info_field("persistence", status).as_deref() {
            Some("ok") => Ok(()),
            other => Err(format!("{command}: {status} {other:?}")),
        }
    }

    /// AOF on (turned on at run time after an RDB restart: a rewrite writes the base).
    fn aof_on(&mut self) -> R {
        if config_get(&self.master, "appendonly") != "yes" {
            config_set(&self.master, "appendonly", "yes");
            self.master.wait_aof_rewrite_done();
        }
        set_arg(&mut self.master, "appendonly", &["yes"]);
        set_arg(&mut self.master, "appendfsync", &["always"]);
        Ok(())
    }

    fn preamble(&mut self, on: bool) {
        config_set(&self.master, "aof-use-rdb-preamble", yes(on));
        set_arg(&mut self.master, "aof-use-rdb-preamble", &[yes(on)]);
    }

    /// Stops the master as `how` says and starts it again from its files. Its connections are
    /// gone, and with them the waiters (answered first) and the bindings (SPEC: a restart
    /// leaves the hold with its lease).
    fn restart_master(&mut self, how: Stop) -> R {
        self.drain_waiters()?;
        // An AOF turned on (at run time, or again after a replica's full sync) holds nothing
        // until its first rewrite is done: Redis's rule, which a restart must wait for.
        self.master.wait_aof_rewrite_done();
        self.master.restart(how);
        self.model.tally.restarts += 1;
        self.model.unbind_all();
        self.connect_slots();
        Ok(())
    }

    /// `FAILOVER`: the replica takes over, the master becomes its replica.
    fn failover(&mut self) -> R {
        self.drain_waiters()?;
        // FAILOVER needs the replica connected (it may still be reconnecting after a restart).
        self.replica
            .wait_info("replication", "master_link_status", "up");
        let reply = ok(&mut self.mc, &rcmd!("FAILOVER", "TIMEOUT", 10_000));
        if reply != Value::Okay {
            return Err(format!("FAILOVER answered {reply:?}"));
        }
        self.replica.wait_info("replication", "role", "master");
        self.master.wait_info("replication", "role", "slave");
        self.master
            .wait_info("replication", "master_link_status", "up");
        std::mem::swap(&mut self.master, &mut self.replica);
        set_arg(&mut self.master, "replicaof", &[]);
        let port = self.master.port().to_string();
        set_arg(&mut self.replica, "replicaof", &["127.0.0.1", &port]);
        for name in ["appendonly", "aof-use-rdb-preamble", "appendfsync"] {
            let v = config_get(&self.master, name);
            set_arg(&mut self.master, name, &[&v]);
        }
        self.model.tally.restarts += 1;
        self.model.unbind_all();
        self.connect_slots();
        Ok(())
    }
}
