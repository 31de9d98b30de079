//! Mutual exclusion under stress (reliability spec): many clients, each on its own connection,
//! contend for a few locks with `BLOCK`, short TTLs, extensions, re-grants and releases, and some
//! holders deliberately overrun their TTL. Every holder writes to an in-process resource that
//! checks fences (per lock, a write whose fence is lower than the highest seen is refused).
//!
//! Checked, conservatively (only what the timestamps prove is flagged):
//! - no two holders of one lock are live at once: a holder is live from the arrival of its grant
//!   until it sends its release or its lease ends, and its lease ends at the absolute expiry the
//!   server reports (`LOCK.INFO` and `PEXPIRETIME` in one transaction right after the grant or a
//!   successful extension) less a margin of a couple of milliseconds; that expiry must itself be
//!   the grant (or extension) time plus the TTL asked for;
//! - a `BLOCK` that answers nil has waited its whole timeout;
//! - fences are unique and increase in grant order (a grant whose reply arrived before another
//!   grant was requested has the smaller fence);
//! - a live holder's writes, extensions and release succeed; a holder that overran its TTL gets
//!   `0` from `LOCK.EXTEND` and `LOCK.RELEASE`, and its write is refused once a later holder has
//!   written;
//! - grants are spread fairly over the workers.
//!
//! `make test` runs it for 8 s with 12 workers. `REDISLOCK_STRESS_SECS` (seconds),
//! `REDISLOCK_STRESS_WORKERS` and `REDISLOCK_STRESS_SEED` make the long run of `make stress`,
//! which reads the `TORTURE-SUMMARY` line it prints.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

const LOCKS: usize = 3;
/// How far inside its lease, as the server reports it, a holder must be before a conflict counts
/// as a violation: the error of placing the server's wall-clock expiry on this process's
/// monotonic clock. A handoff even a few milliseconds early is caught.
const MARGIN: Duration = Duration::from_millis(2);
/// Grants per worker, most over fewest, allowed.
const FAIRNESS_BOUND: f64 = 3.0;

struct Config {
    secs: u64,
    workers: usize,
    seed: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn config() -> Config {
    Config {
        secs: env_u64("REDISLOCK_STRESS_SECS").unwrap_or(8).max(1),
        workers: env_u64("REDISLOCK_STRESS_WORKERS").unwrap_or(12).max(2) as usize,
        seed: env_u64("REDISLOCK_STRESS_SEED").unwrap_or_else(|| now_ms() as u64),
    }
}

/// The fencing-checked resource one lock protects.
#[derive(Default)]
struct Resource {
    /// Highest fence accepted so far.
    highest: i64,
    accepted: u64,
    rejected: u64,
    /// Latest acquire-request time of any holder that has tried to write.
    latest_writer_sent: Option<Instant>,
    /// The holder that last entered, with the end of its safe window.
    occupant: Option<(i64, usize, Instant)>,
}

/// One grant, as the worker saw it.
#[derive(Clone, Debug)]
struct Hold {
    lock: usize,
    worker: usize,
    fence: i64,
    /// When the acquire was sent (a lower bound of the grant time).
    sent: Instant,
    /// When the grant arrived (an upper bound of the grant time).
    granted: Instant,
    /// End of the interval in which the holder provably held the lock, `None` if never shown.
    live_end: Option<Instant>,
}

#[derive(Default)]
struct Stats {
    grants: AtomicU64,
    blocked_grants: AtomicU64,
    timeouts: AtomicU64,
    extends: AtomicU64,
    regrants: AtomicU64,
    releases: AtomicU64,
    overruns: AtomicU64,
    stale_rejected: AtomicU64,
    stale_unverified: AtomicU64,
    /// Grants whose lock was gone before the holder could read its expiry.
    unverified: AtomicU64,
    writes: AtomicU64,
    checks: AtomicU64,
}

/// What a run found wrong, with times counted from its start.
struct Findings {
    start: Instant,
    violations: Mutex<Vec<String>>,
}

impl Findings {
    fn new() -> Findings {
        Findings {
            start: Instant::now(),
            violations: Mutex::default(),
        }
    }

    fn violation(&self, msg: String) {
        let mut v = self.violations.lock().unwrap();
        if v.len() < 1000 {
            v.push(msg);
        }
    }

    fn at(&self, t: Instant) -> String {
        format!(
            "{:.1}ms",
            t.duration_since(self.start).as_secs_f64() * 1000.0
        )
    }

    fn count(&self) -> usize {
        self.violations.lock().unwrap().len()
    }

    /// Fails the test if anything was found, showing the first findings and the server's log.
    fn assert_none(&self, seed: u64, server: &Server) {
        let violations = self.violations.lock().unwrap();
        assert!(
            violations.is_empty(),
            "{} violations (seed {seed}); first ones:\n{}\n{}",
            violations.len(),
            violations
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
            server.log_tail(20)
        );
    }
}

struct Shared {
    found: Findings,
    resources: Vec<Mutex<Resource>>,
    stats: Stats,
}

impl std::ops::Deref for Shared {
    type Target = Findings;

    fn deref(&self) -> &Findings {
        &self.found
    }
}

impl Shared {
    /// The holder `(fence, worker)` with safe window ending at `safe_until` enters the
    /// resource of `lock`: another occupant still inside its own safe window is a violation.
    fn enter(&self, lock: usize, fence: i64, worker: usize, safe_until: Instant) {
        let mut r = self.resources[lock].lock().unwrap();
        let now = Instant::now();
        if now < safe_until {
            self.stats.checks.fetch_add(1, Ordering::Relaxed);
            if let Some((f, w, until)) = r.occupant {
                if f != fence && now < until {
                    self.violation(format!(
                        "lock {lock}: worker {worker} (fence {fence}, safe until {}) entered at {} \
                         while worker {w} (fence {f}) is safe until {}",
                        self.at(safe_until),
                        self.at(now),
                        self.at(until)
                    ));
                }
            }
        }
        r.occupant = Some((fence, worker, safe_until));
    }

    fn leave(&self, lock: usize, fence: i64) {
        let mut r = self.resources[lock].lock().unwrap();
        if r.occupant.is_some_and(|(f, _, _)| f == fence) {
            r.occupant = None;
        }
    }

    /// A fenced write; returns whether the resource accepted it and when it was decided.
    fn write(&self, lock: usize, fence: i64, sent: Instant) -> (bool, Instant) {
        let mut r = self.resources[lock].lock().unwrap();
        let now = Instant::now();
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        r.latest_writer_sent = Some(r.latest_writer_sent.map_or(sent, |t| t.max(sent)));
        if fence >= r.highest {
            r.highest = fence;
            r.accepted += 1;
            (true, now)
        } else {
            r.rejected += 1;
            (false, now)
        }
    }

    fn latest_writer_sent(&self, lock: usize) -> Option<Instant> {
        self.resources[lock].lock().unwrap().latest_writer_sent
    }
}

fn key(lock: usize) -> String {
    format!("torture:{lock}")
}

/// The wall clock in microseconds since the Unix epoch (the clock the server's expiries use).
fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// Where the server's absolute expiry `at_ms` (Unix milliseconds, as `PEXPIRETIME` reports it)
/// falls on this process's monotonic clock, read at once so the two clocks cannot drift apart.
/// The server keeps the key until its clock has passed `at_ms`.
fn wall_to_instant(at_ms: i64) -> Instant {
    let now = Instant::now();
    let ahead_us = at_ms * 1000 - wall_us();
    if ahead_us >= 0 {
        now + Duration::from_micros(ahead_us as u64)
    } else {
        now.checked_sub(Duration::from_micros(ahead_us.unsigned_abs()))
            .unwrap_or(now)
    }
}

/// A hold the server showed: its fence and absolute expiry (Unix ms).
type HeldUntil = (i64, i64);

/// `cmd`, then `LOCK.INFO key` and `PEXPIRETIME key`, in one transaction: the reply of `cmd` and,
/// if the lock is then held by `token` with `fence` (any fence if `None`), its fence and absolute
/// expiry (Unix ms).
fn with_expiry(
    con: &mut Connection,
    cmd: Option<&redis::Cmd>,
    key: &str,
    token: &str,
    fence: Option<i64>,
) -> Result<(Option<Value>, Option<HeldUntil>), String> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    if let Some(c) = cmd {
        pipe.add_command(c.clone());
    }
    pipe.cmd("LOCK.INFO").arg(key).cmd("PEXPIRETIME").arg(key);
    let mut replies: Vec<Value> = pipe.query(con).map_err(|e| err_text(&e))?;
    let expiry = as_int(&replies.pop().ok_or("short EXEC reply")?);
    let info = parse_info(&replies.pop().ok_or("short EXEC reply")?);
    let first = replies.pop();
    let held = info
        .filter(|i| i.token == token.as_bytes() && fence.is_none_or(|f| f == i.fence))
        .map(|i| (i.fence, expiry));
    Ok((first, held))
}

/// One worker: contends until `deadline`; returns its grants.
fn worker(
    shared: &Shared,
    con: &mut Connection,
    id: usize,
    seed: u64,
    deadline: Instant,
) -> Vec<Hold> {
    let mut rng = StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut holds = Vec::new();
    let mut seq = 0u64;
    while Instant::now() < deadline {
        seq += 1;
        let lock = rng.gen_range(0..LOCKS);
        let key = key(lock);
        let token = format!("w{id}-{seq}");
        let ttl: u64 = rng.gen_range(40..=150);
        let block: u64 = rng.gen_range(200..=1500);
        let sent_wall_ms = wall_us().div_euclid(1000);
        let sent = Instant::now();
        let reply = run(
            con,
            &rcmd!("LOCK.ACQUIRE", &key, &token, "PX", ttl, "BLOCK", block),
        );
        let granted = Instant::now();
        let granted_wall_ms = wall_us().div_euclid(1000) + 1;
        let grant = match reply {
            Ok(v) => parse_grant(&v),
            Err(e) => {
                shared.violation(format!("worker {id}: LOCK.ACQUIRE failed: {e}"));
                return holds;
            }
        };
        let Some((tok, fence)) = grant else {
            shared.stats.timeouts.fetch_add(1, Ordering::Relaxed);
            // The deadline timer starts when the command runs, after `sent`.
            if granted + Duration::from_millis(1) < sent + Duration::from_millis(block) {
                shared.violation(format!(
                    "lock {lock}: worker {id} BLOCK {block} answered nil after {:?}",
                    granted.duration_since(sent)
                ));
            }
            continue;
        };
        shared.stats.grants.fetch_add(1, Ordering::Relaxed);
        if granted.duration_since(sent) > Duration::from_millis(5) {
            shared.stats.blocked_grants.fetch_add(1, Ordering::Relaxed);
        }
        if tok != token.as_bytes() {
            shared.violation(format!(
                "worker {id}: granted token {:?}, asked for {token}",
                lossy(&tok)
            ));
        }
        let mut hold = Hold {
            lock,
            worker: id,
            fence,
            sent,
            granted,
            live_end: None,
        };
        // The lease, as the server reports it: from the grant's arrival here until the absolute
        // expiry the server holds the key to.
        let info_sent = Instant::now();
        let expiry = match with_expiry(con, None, &key, &token, Some(fence)) {
            Ok((_, held)) => held.map(|(_, at)| at),
            Err(e) => {
                shared.violation(format!("worker {id}: LOCK.INFO/PEXPIRETIME failed: {e}"));
                return holds;
            }
        };
        let Some(expiry) = expiry else {
            // Gone already: only possible if the lease could have ended. The grant happened
            // after `sent`, so the lease lasted at least until `sent + ttl`.
            shared.stats.unverified.fetch_add(1, Ordering::Relaxed);
            if info_sent + MARGIN < sent + Duration::from_millis(ttl) {
                shared.violation(format!(
                    "lock {lock}: worker {id} (fence {fence}) lost the lock within its TTL: \
                     gone at {}",
                    shared.at(info_sent)
                ));
            }
            holds.push(hold);
            continue;
        };
        // The server's expiry is the grant time plus the TTL: the grant ran between the
        // request and the reply.
        let ttl = ttl as i64;
        if expiry < sent_wall_ms + ttl || expiry > granted_wall_ms + ttl {
            shared.violation(format!(
                "lock {lock}: worker {id} (fence {fence}) PX {ttl}: the server's expiry is \
                 {} ms after the request was sent and {} ms after the grant arrived",
                expiry - sent_wall_ms,
                expiry - granted_wall_ms
            ));
        }
        let lease_end = wall_to_instant(expiry);
        let mut safe_until = lease_end.checked_sub(MARGIN).unwrap_or(granted);
        let overrun = rng.gen_range(0..100) < 10;
        shared.enter(lock, fence, id, safe_until);
        let (ok, at) = shared.write(lock, fence, sent);
        if !ok && at < safe_until {
            shared.violation(format!(
                "lock {lock}: worker {id} (fence {fence}) within its lease had its write refused \
                 at {}: a larger fence was written",
                shared.at(at)
            ));
        }
        if overrun {
            shared.stats.overruns.fetch_add(1, Ordering::Relaxed);
            hold.live_end = Some(safe_until);
            overrun_and_check(shared, con, id, &hold, &token, lease_end);
            holds.push(hold);
            continue;
        }
        // Work, with an extension or a re-grant now and then.
        let action = rng.gen_range(0..100);
        thread::sleep(Duration::from_millis(rng.gen_range(0..6)));
        if action < 40 {
            let ttl2: i64 = rng.gen_range(40..=150);
            let regrant = action < 10;
            let t0_wall_ms = wall_us().div_euclid(1000);
            let t0 = Instant::now();
            let cmd = if regrant {
                rcmd!("LOCK.ACQUIRE", &key, &token, "PX", ttl2)
            } else {
                rcmd!("LOCK.EXTEND", &key, &token, "PX", ttl2)
            };
            let r = with_expiry(con, Some(&cmd), &key, &token, None);
            let t1 = Instant::now();
            let t1_wall_ms = wall_us().div_euclid(1000) + 1;
            let (r, held) = match r {
                Ok((Some(v), held)) => (v, held),
                Ok((None, _)) => unreachable!("the pipeline has three commands"),
                Err(e) => {
                    shared.violation(format!("worker {id}: extend/re-grant failed: {e}"));
                    return holds;
                }
            };
            let success = if regrant {
                match parse_grant(&r) {
                    Some((t, f)) if t == token.as_bytes() && f == fence => true,
                    Some((t, f)) => {
                        // A new grant with a new fence: only right if the lease had ended.
                        if t1 < safe_until || t != token.as_bytes() {
                            shared.violation(format!(
                                "lock {lock}: worker {id} re-grant at {} answered ({:?}, {f}), \
                                 expected ({token}, {fence}) (safe until {})",
                                shared.at(t1),
                                lossy(&t),
                                shared.at(safe_until)
                            ));
                        }
                        shared.stats.grants.fetch_add(1, Ordering::Relaxed);
                        let live_end = held
                            .filter(|&(hf, _)| hf == f)
                            .map(|(_, at)| wall_to_instant(at).checked_sub(MARGIN).unwrap_or(t1));
                        holds.push(Hold {
                            lock,
                            worker: id,
                            fence: f,
                            sent: t0,
                            granted: t1,
                            live_end: live_end.map(|e| e.max(t1)),
                        });
                        false
                    }
                    None => false,
                }
            } else {
                as_int(&r) == 1
            };
            if success {
                if regrant {
                    shared.stats.regrants.fetch_add(1, Ordering::Relaxed);
                } else {
                    shared.stats.extends.fetch_add(1, Ordering::Relaxed);
                }
                // The lease ran continuously up to the extension and now ends at the expiry the
                // server reports (which may be sooner than before), between the request and the
                // reply plus the new TTL.
                let Some((_, at)) = held else {
                    shared.violation(format!(
                        "lock {lock}: worker {id} (fence {fence}) extended, but in the same \
                         transaction LOCK.INFO does not show its hold"
                    ));
                    return holds;
                };
                if at < t0_wall_ms + ttl2 || at > t1_wall_ms + ttl2 {
                    shared.violation(format!(
                        "lock {lock}: worker {id} (fence {fence}) extended with PX {ttl2}: the \
                         server's expiry is {} ms after the request",
                        at - t0_wall_ms
                    ));
                }
                safe_until = wall_to_instant(at).checked_sub(MARGIN).unwrap_or(t1);
                shared.enter(lock, fence, id, safe_until);
            } else {
                if t1 < safe_until {
                    shared.violation(format!(
                        "lock {lock}: worker {id} (fence {fence}) {} refused at {} within its \
                         lease (safe until {})",
                        if regrant { "re-grant" } else { "extend" },
                        shared.at(t1),
                        shared.at(safe_until)
                    ));
                }
                // The lease may be over: stop here, as a holder that lost its lock would.
                shared.leave(lock, fence);
                hold.live_end = Some(safe_until.min(t0).max(granted));
                holds.push(hold);
                let _ = run(con, &rcmd!("LOCK.RELEASE", &key, &token));
                continue;
            }
            thread::sleep(Duration::from_millis(rng.gen_range(0..4)));
            let (ok, at) = shared.write(lock, fence, sent);
            if !ok && at < safe_until {
                shared.violation(format!(
                    "lock {lock}: worker {id} (fence {fence}) had its write refused at {} after \
                     extending (safe until {})",
                    shared.at(at),
                    shared.at(safe_until)
                ));
            }
        }
        shared.leave(lock, fence);
        let rel_sent = Instant::now();
        let released = match run(con, &rcmd!("LOCK.RELEASE", &key, &token)) {
            Ok(v) => as_int(&v),
            Err(e) => {
                shared.violation(format!("worker {id}: LOCK.RELEASE failed: {e}"));
                return holds;
            }
        };
        let rel_recv = Instant::now();
        if released == 1 {
            shared.stats.releases.fetch_add(1, Ordering::Relaxed);
        } else if rel_recv < safe_until {
            shared.violation(format!(
                "lock {lock}: worker {id} (fence {fence}) LOCK.RELEASE answered 0 at {} within \
                 its lease (safe until {})",
                shared.at(rel_recv),
                shared.at(safe_until)
            ));
        }
        hold.live_end = Some(safe_until.min(rel_sent).max(granted));
        holds.push(hold);
    }
    holds
}

/// A holder that sleeps past its lease: its lock must be gone for it, and once a later holder has
/// written, the resource must refuse its write.
fn overrun_and_check(
    shared: &Shared,
    con: &mut Connection,
    id: usize,
    hold: &Hold,
    token: &str,
    lease_end: Instant,
) {
    let (lock, fence) = (hold.lock, hold.fence);
    let key = key(lock);
    // The server keeps the key until its clock passes the expiry millisecond.
    let lease_ceiling = lease_end + Duration::from_millis(1) + MARGIN;
    let past = lease_ceiling + Duration::from_millis(25);
    thread::sleep(past.saturating_duration_since(Instant::now()));
    for cmd in [
        rcmd!("LOCK.EXTEND", &key, token, "PX", 1000),
        rcmd!("LOCK.RELEASE", &key, token),
    ] {
        match run(con, &cmd) {
            Ok(v) if as_int(&v) == 0 => {}
            other => shared.violation(format!(
                "lock {lock}: worker {id} (fence {fence}) past its TTL: {} answered {other:?}, \
                 expected 0",
                describe(&cmd)
            )),
        }
    }
    shared.leave(lock, fence);
    // Wait (bounded) for a holder that asked for the lock after this lease ended to write.
    let give_up = Instant::now() + Duration::from_millis(400);
    loop {
        if shared
            .latest_writer_sent(lock)
            .is_some_and(|t| t > lease_ceiling)
        {
            let (ok, at) = shared.write(lock, fence, hold.sent);
            if ok {
                shared.violation(format!(
                    "lock {lock}: stale worker {id} (fence {fence}, lease over by {}) had its \
                     write accepted at {} after a later holder wrote",
                    shared.at(lease_ceiling),
                    shared.at(at)
                ));
            } else {
                shared.stats.stale_rejected.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        if Instant::now() > give_up {
            shared
                .stats
                .stale_unverified
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Offline checks over every worker's grants.
fn analyse(shared: &Shared, holds: &[Hold], workers: usize) -> (usize, usize, f64) {
    // Fences are unique over all locks (one fence clock per server).
    let mut seen = HashSet::new();
    for h in holds {
        if !seen.insert(h.fence) {
            shared.violation(format!("fence {} granted twice", h.fence));
        }
    }
    for lock in 0..LOCKS {
        let mut on: Vec<&Hold> = holds.iter().filter(|h| h.lock == lock).collect();
        // Live intervals [granted, live_end) must not overlap.
        on.sort_by_key(|h| h.granted);
        let mut prev: Option<&Hold> = None;
        for h in &on {
            let Some(end) = h.live_end else { continue };
            if let Some(p) = prev {
                let p_end = p.live_end.unwrap();
                if h.granted < p_end {
                    shared.violation(format!(
                        "lock {lock}: worker {} (fence {}) live {}..{} overlaps worker {} \
                         (fence {}) live {}..{}",
                        h.worker,
                        h.fence,
                        shared.at(h.granted),
                        shared.at(end),
                        p.worker,
                        p.fence,
                        shared.at(p.granted),
                        shared.at(p_end)
                    ));
                }
                if end > p_end {
                    prev = Some(h);
                }
            } else {
                prev = Some(h);
            }
        }
        // Grant order: a grant that arrived before another was requested has a smaller fence.
        let mut by_sent = on.clone();
        by_sent.sort_by_key(|h| h.sent);
        let mut i = 0;
        let mut max_before: Option<&Hold> = None;
        for h in &by_sent {
            while i < on.len() && on[i].granted < h.sent {
                if max_before.is_none_or(|m| on[i].fence > m.fence) {
                    max_before = Some(on[i]);
                }
                i += 1;
            }
            if let Some(m) = max_before {
                if m.fence >= h.fence {
                    shared.violation(format!(
                        "lock {lock}: fence {} (worker {}, requested {}) is not above fence {} \
                         (worker {}, granted by {})",
                        h.fence,
                        h.worker,
                        shared.at(h.sent),
                        m.fence,
                        m.worker,
                        shared.at(m.granted)
                    ));
                }
            }
        }
    }
    // Fairness.
    let mut per_worker: BTreeMap<usize, usize> = (0..workers).map(|w| (w, 0)).collect();
    for h in holds {
        *per_worker.get_mut(&h.worker).unwrap() += 1;
    }
    let max = per_worker.values().copied().max().unwrap_or(0);
    let min = per_worker.values().copied().min().unwrap_or(0);
    let ratio = if min == 0 {
        f64::INFINITY
    } else {
        max as f64 / min as f64
    };
    if ratio > FAIRNESS_BOUND {
        shared.violation(format!(
            "unfair: grants per worker {per_worker:?} (max/min {ratio:.2} > {FAIRNESS_BOUND})"
        ));
    }
    (min, max, ratio)
}

#[test]
fn mutual_exclusion_under_contention() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = config();
    eprintln!(
        "torture: {} s, {} workers, {LOCKS} locks, seed {} (REDISLOCK_STRESS_SEED)",
        cfg.secs, cfg.workers, cfg.seed
    );
    let server = Server::start();
    let shared = Arc::new(Shared {
        found: Findings::new(),
        resources: (0..LOCKS).map(|_| Mutex::default()).collect(),
        stats: Stats::default(),
    });
    let deadline = Instant::now() + Duration::from_secs(cfg.secs);
    let handles: Vec<_> = (0..cfg.workers)
        .map(|id| {
            let shared = Arc::clone(&shared);
            let mut con = server.conn();
            let seed = cfg.seed;
            thread::spawn(move || worker(&shared, &mut con, id, seed, deadline))
        })
        .collect();
    let mut holds = Vec::new();
    for h in handles {
        match h.join() {
            Ok(v) => holds.extend(v),
            Err(_) => shared.violation("a worker panicked".into()),
        }
    }
    let (min, max, ratio) = analyse(&shared, &holds, cfg.workers);

    // The server is up and idle: no waiter left behind.
    let mut con = server.conn();
    ping(&mut con);
    let waiters = server
        .info_field("redislock", "redislock_waiters")
        .unwrap_or_default();
    if waiters != "0" {
        shared.violation(format!("{waiters} waiters left after every worker stopped"));
    }
    let (accepted, rejected) = shared.resources.iter().fold((0, 0), |(a, r), res| {
        let res = res.lock().unwrap();
        (a + res.accepted, r + res.rejected)
    });
    let handoffs = stat(&server, "handoffs");
    let s = &shared.stats;
    println!(
        "TORTURE-SUMMARY secs={} workers={} locks={LOCKS} seed={} grants={} blocked_grants={} \
         timeouts={} extends={} regrants={} releases={} overruns={} stale_rejected={} \
         stale_unverified={} unverified={} handoffs={handoffs} writes={} accepted={accepted} \
         rejected={rejected} checks={} \
         per_worker_min={min} per_worker_max={max} fairness={ratio:.2} violations={}",
        cfg.secs,
        cfg.workers,
        cfg.seed,
        s.grants.load(Ordering::Relaxed),
        s.blocked_grants.load(Ordering::Relaxed),
        s.timeouts.load(Ordering::Relaxed),
        s.extends.load(Ordering::Relaxed),
        s.regrants.load(Ordering::Relaxed),
        s.releases.load(Ordering::Relaxed),
        s.overruns.load(Ordering::Relaxed),
        s.stale_rejected.load(Ordering::Relaxed),
        s.stale_unverified.load(Ordering::Relaxed),
        s.unverified.load(Ordering::Relaxed),
        s.writes.load(Ordering::Relaxed),
        s.checks.load(Ordering::Relaxed),
        shared.count()
    );
    assert!(
        s.grants.load(Ordering::Relaxed) >= (cfg.workers as u64) * 5,
        "too few grants to mean anything"
    );
    // Every scenario the checks are about happened: grants after waiting (handed off by the
    // server), holders that overran their TTL, stale writes refused, re-grants.
    for (what, n) in [
        (
            "grants after waiting",
            s.blocked_grants.load(Ordering::Relaxed),
        ),
        ("handoffs (INFO redislock)", handoffs as u64),
        ("TTL overruns", s.overruns.load(Ordering::Relaxed)),
        (
            "stale writes refused",
            s.stale_rejected.load(Ordering::Relaxed),
        ),
        ("re-grants", s.regrants.load(Ordering::Relaxed)),
        ("extensions", s.extends.load(Ordering::Relaxed)),
    ] {
        assert!(
            n > 0,
            "no {what} in the run: the checks proved nothing about them"
        );
    }
    shared.assert_none(cfg.seed, &server);
}

// ---------------------------------------------------------------------------------------------
// Semaphores: never more holders than places
// ---------------------------------------------------------------------------------------------

/// The two tests of this binary load the machine; they take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const SEMAPHORES: usize = 2;
const PLACES: usize = 3;

/// A resource that `PLACES` holders may use at once, checking fences: it knows each holder's
/// fence and the end of its provable lease.
#[derive(Default)]
struct Places {
    /// fence → (worker, end of the holder's provable lease)
    inside: BTreeMap<i64, (usize, Instant)>,
    accepted: u64,
    rejected: u64,
}

#[derive(Default)]
struct SemStats {
    grants: AtomicU64,
    blocked_grants: AtomicU64,
    timeouts: AtomicU64,
    extends: AtomicU64,
    releases: AtomicU64,
    overruns: AtomicU64,
    stale_rejected: AtomicU64,
    stale_unverified: AtomicU64,
    writes: AtomicU64,
    checks: AtomicU64,
    most_inside: AtomicU64,
}

struct SemShared {
    found: Findings,
    places: Vec<Mutex<Places>>,
    stats: SemStats,
    /// (semaphore, fence, grant sent, grant arrived)
    grants: Mutex<Vec<(usize, i64, Instant, Instant)>>,
}

impl std::ops::Deref for SemShared {
    type Target = Findings;

    fn deref(&self) -> &Findings {
        &self.found
    }
}

impl SemShared {
    /// A fenced write by holder `fence`, whose provable lease ends at `until`. Holders still
    /// inside their own provable lease are live: more than `PLACES` of them at once is a
    /// violation. A write from a holder past its lease is refused once `PLACES` newer holders are
    /// live (it has lost its place), and cannot be judged otherwise.
    fn write(&self, sem: usize, fence: i64, worker: usize, until: Instant) {
        let mut p = self.places[sem].lock().unwrap();
        let now = Instant::now();
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        p.inside.retain(|_, (_, end)| *end > now);
        let newer = p.inside.range(fence + 1..).count();
        if now < until {
            p.inside.insert(fence, (worker, until));
            self.stats.checks.fetch_add(1, Ordering::Relaxed);
            let live = p.inside.len();
            self.stats
                .most_inside
                .fetch_max(live as u64, Ordering::Relaxed);
            if live > PLACES {
                let who: Vec<String> = p
                    .inside
                    .iter()
                    .map(|(f, (w, end))| format!("worker {w} fence {f} until {}", self.at(*end)))
                    .collect();
                self.violation(format!(
                    "semaphore {sem}: {live} live holders at {} (limit {PLACES}): {}",
                    self.at(now),
                    who.join(", ")
                ));
            }
            p.accepted += 1;
        } else if newer >= PLACES {
            p.rejected += 1;
            self.stats.stale_rejected.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.stale_unverified.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn leave(&self, sem: usize, fence: i64) {
        self.places[sem].lock().unwrap().inside.remove(&fence);
    }
}

fn sem_key(sem: usize) -> String {
    format!("torture:sem:{sem}")
}

/// The end of `token`'s lease as the server reports it, as a lower bound on this process's
/// clock: `LOCK.INFO`'s `ttl` counts from the server's clock when it answered, which is no
/// earlier than when the request was sent.
fn holder_lease_end(con: &mut Connection, key: &str, token: &str) -> Option<Instant> {
    let sent_ms = wall_us().div_euclid(1000);
    let v = run(con, &rcmd!("LOCK.INFO", key)).ok()?;
    let Value::Array(fields) = v else {
        return None;
    };
    let Some(Value::Array(holders)) = fields.last() else {
        return None;
    };
    holders.iter().find_map(|h| {
        let Value::Array(p) = h else { return None };
        (as_bytes(&p[1]) == token.as_bytes()).then(|| {
            let ttl = as_int(&p[5]);
            // The server keeps the hold until its clock has passed the lease end.
            wall_to_instant(sent_ms + ttl) - MARGIN
        })
    })
}

fn sem_worker(shared: &SemShared, con: &mut Connection, id: usize, seed: u64, deadline: Instant) {
    let mut rng = StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut seq = 0u64;
    while Instant::now() < deadline {
        seq += 1;
        let sem = rng.gen_range(0..SEMAPHORES);
        let key = sem_key(sem);
        let token = format!("s{id}-{seq}");
        let ttl: u64 = rng.gen_range(30..=120);
        let block: u64 = rng.gen_range(100..=800);
        let sent = Instant::now();
        let reply = run(
            con,
            &rcmd!(
                "LOCK.ACQUIRE",
                &key,
                &token,
                "PX",
                ttl,
                "LIMIT",
                PLACES,
                "BLOCK",
                block
            ),
        );
        let arrived = Instant::now();
        let fence = match reply.map(|v| parse_grant(&v)) {
            Ok(Some((_, fence))) => fence,
            Ok(None) => {
                shared.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                if arrived + Duration::from_millis(1) < sent + Duration::from_millis(block) {
                    shared.violation(format!(
                        "semaphore {sem}: worker {id} BLOCK {block} answered nil after {:?}",
                        arrived.duration_since(sent)
                    ));
                }
                continue;
            }
            Err(e) => {
                shared.violation(format!(
                    "worker {id}: LOCK.ACQUIRE failed: {}",
                    err_text(&e)
                ));
                return;
            }
        };
        shared.stats.grants.fetch_add(1, Ordering::Relaxed);
        if arrived.duration_since(sent) > Duration::from_millis(5) {
            shared.stats.blocked_grants.fetch_add(1, Ordering::Relaxed);
        }
        shared
            .grants
            .lock()
            .unwrap()
            .push((sem, fence, sent, arrived));
        let Some(mut until) = holder_lease_end(con, &key, &token) else {
            continue;
        };
        shared.write(sem, fence, id, until);
        if rng.gen_bool(0.3) && Instant::now() + Duration::from_millis(5) < until {
            let extended = as_int(&ok(con, &rcmd!("LOCK.EXTEND", &key, &token, "PX", ttl)));
            if extended != 1 {
                shared.violation(format!(
                    "semaphore {sem}: worker {id} (fence {fence}) could not extend a live hold"
                ));
            }
            shared.stats.extends.fetch_add(1, Ordering::Relaxed);
            if let Some(u) = holder_lease_end(con, &key, &token) {
                until = u;
            }
            shared.write(sem, fence, id, until);
        }
        if rng.gen_bool(0.15) {
            // Overrun: keep working past the lease, then try a stale write and a release.
            shared.stats.overruns.fetch_add(1, Ordering::Relaxed);
            thread::sleep(
                until.saturating_duration_since(Instant::now()) + Duration::from_millis(20),
            );
            shared.write(sem, fence, id, until);
            let released = as_int(&ok(con, &rcmd!("LOCK.RELEASE", &key, &token)));
            if released != 0 {
                shared.violation(format!(
                    "semaphore {sem}: worker {id} (fence {fence}) released a hold 20 ms past its lease"
                ));
            }
            continue;
        }
        thread::sleep(Duration::from_millis(rng.gen_range(0..=10)));
        // Leave the resource before the release is sent: the place is free from then on.
        shared.leave(sem, fence);
        if Instant::now() < until {
            let released = as_int(&ok(con, &rcmd!("LOCK.RELEASE", &key, &token)));
            if released != 1 && Instant::now() < until {
                shared.violation(format!(
                    "semaphore {sem}: worker {id} (fence {fence}) could not release a live hold"
                ));
            }
            shared.stats.releases.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn a_semaphore_never_has_more_holders_than_places() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = config();
    let workers = env_u64("REDISLOCK_STRESS_SEM_WORKERS").unwrap_or(16) as usize;
    eprintln!(
        "semaphore torture: {} s, {workers} workers, {SEMAPHORES} semaphores of {PLACES} places, \
         seed {}",
        cfg.secs, cfg.seed
    );
    let server = Server::start();
    let shared = Arc::new(SemShared {
        found: Findings::new(),
        places: (0..SEMAPHORES).map(|_| Mutex::default()).collect(),
        stats: SemStats::default(),
        grants: Mutex::default(),
    });
    let deadline = Instant::now() + Duration::from_secs(cfg.secs);
    let handles: Vec<_> = (0..workers)
        .map(|id| {
            let shared = Arc::clone(&shared);
            let mut con = server.conn();
            let seed = cfg.seed;
            thread::spawn(move || sem_worker(&shared, &mut con, id, seed, deadline))
        })
        .collect();
    for h in handles {
        if h.join().is_err() {
            shared.violation("a worker panicked".into());
        }
    }
    // Fences are unique and follow the order of the grants: one whose reply arrived before
    // another was asked for is smaller.
    let grants = shared.grants.lock().unwrap().clone();
    let fences: HashSet<i64> = grants.iter().map(|g| g.1).collect();
    if fences.len() != grants.len() {
        shared.violation("a fence was granted twice".into());
    }
    let mut by_arrival = grants.clone();
    by_arrival.sort_by_key(|g| g.3);
    let mut highest_done: BTreeMap<usize, (i64, Instant)> = BTreeMap::new();
    let mut by_sent = grants.clone();
    by_sent.sort_by_key(|g| g.2);
    let mut i = 0;
    for &(sem, fence, sent, _) in &by_sent {
        while i < by_arrival.len() && by_arrival[i].3 < sent {
            let (s, f, _, a) = by_arrival[i];
            let e = highest_done.entry(s).or_insert((f, a));
            if f > e.0 {
                *e = (f, a);
            }
            i += 1;
        }
        if let Some(&(f, _)) = highest_done.get(&sem) {
            if fence <= f {
                shared.violation(format!(
                    "semaphore {sem}: fence {fence} granted after fence {f} had been received"
                ));
            }
        }
    }
    let mut con = server.conn();
    ping(&mut con);
    let waiters = stat(&server, "waiters");
    let lease_ends = stat(&server, "lease_ends");
    let handoffs = stat(&server, "handoffs");
    let s = &shared.stats;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "SEMAPHORE-TORTURE-SUMMARY secs={} workers={workers} places={PLACES} seed={} grants={} \
         blocked_grants={} timeouts={} extends={} releases={} overruns={} stale_rejected={} \
         stale_unverified={} writes={} checks={} most_inside={} lease_ends={lease_ends} \
         handoffs={handoffs} violations={}",
        cfg.secs,
        cfg.seed,
        load(&s.grants),
        load(&s.blocked_grants),
        load(&s.timeouts),
        load(&s.extends),
        load(&s.releases),
        load(&s.overruns),
        load(&s.stale_rejected),
        load(&s.stale_unverified),
        load(&s.writes),
        load(&s.checks),
        load(&s.most_inside),
        shared.count()
    );
    assert_eq!(waiters, 0, "waiters left after every worker stopped");
    for (what, n) in [
        ("grants after waiting", load(&s.blocked_grants)),
        ("handoffs (INFO redislock)", handoffs as u64),
        ("lease ends (INFO redislock)", lease_ends as u64),
        ("TTL overruns", load(&s.overruns)),
        ("stale writes refused", load(&s.stale_rejected)),
        ("extensions", load(&s.extends)),
    ] {
        assert!(
            n > 0,
            "no {what} in the run: the checks proved nothing about them"
        );
    }
    assert_eq!(
        load(&s.most_inside),
        PLACES as u64,
        "the places were never all taken at once: the limit was not tested"
    );
    shared.assert_none(cfg.seed, &server);
}
