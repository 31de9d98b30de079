//! Faults (reliability spec): crashes under load, split brain, memory pressure, clients dying
//! while blocked, `SHUTDOWN` and `DEBUG RELOAD` with waiters. The server must stay up and
//! consistent, and must not lose an acknowledged grant or revive an acknowledged release.
//!
//! `lifecycle_mix` is also the scenario that `make stress` runs under valgrind (many waiters that
//! time out, disconnect, are unblocked or are handed the lock, plus persistence round trips).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Connection;

#[track_caller]
fn assert_no_crash(s: &Server) {
    let lines = s.crash_lines();
    assert!(
        lines.is_empty(),
        "crash signs in the server's log:\n{}\n{}",
        lines.join("\n"),
        s.log_tail(40)
    );
}

fn used_memory(s: &Server) -> i64 {
    s.info_field("memory", "used_memory")
        .and_then(|v| v.parse().ok())
        .expect("used_memory")
}

/// A raw connection that sent `LOCK.ACQUIRE key token PX px BLOCK block`, returned once the
/// server has run that command (so that it queues after every earlier waiter), with its client
/// id. (The server's `cmd` field for the client shows it; a waiter count could be fooled by a
/// grant to an earlier waiter meanwhile.)
fn raw_waiter(s: &Server, key: &str, token: &str, px: i64, block: i64) -> (RawConn, i64) {
    let mut w = RawConn::connect(s);
    let id = w.client_id();
    w.send(&[
        "LOCK.ACQUIRE",
        key,
        token,
        "PX",
        &px.to_string(),
        "BLOCK",
        &block.to_string(),
    ]);
    let mut admin = RawConn::connect(s);
    let deadline = Instant::now() + Duration::from_secs(10) * time_scale();
    loop {
        let list = match admin.call(&["CLIENT", "LIST", "ID", &id.to_string()]) {
            Resp::Bulk(b) => b,
            other => panic!("CLIENT LIST answered {other:?}"),
        };
        if lossy(&list).contains("cmd=lock.acquire") {
            return (w, id);
        }
        assert!(
            Instant::now() < deadline,
            "{token} never ran: {}",
            lossy(&list)
        );
        thread::sleep(Duration::from_millis(1));
    }
}

/// A `LOCK.ACQUIRE` reply read from a raw connection: `Some((token, fence))` or `None` for nil.
#[track_caller]
fn raw_grant(reply: &Resp) -> Option<(Vec<u8>, i64)> {
    match reply {
        Resp::Nil => None,
        Resp::Array(items) => match items.as_slice() {
            [Resp::Bulk(t), Resp::Int(f)] if *f > 0 => Some((t.clone(), *f)),
            _ => panic!("malformed grant {reply:?}"),
        },
        other => panic!("unexpected LOCK.ACQUIRE reply {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// kill -9 under load
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum KeyState {
    Free,
    Held { token: String, fence: i64 },
}

#[derive(Clone, Debug)]
enum Op {
    Acquire { key: String, token: String },
    Release { key: String },
}

/// What one client thread had acknowledged when the server died.
#[derive(Default)]
struct ClientLog {
    state: HashMap<String, KeyState>,
    /// Highest acknowledged fence per key.
    max_fence: HashMap<String, i64>,
    /// Sent, not acknowledged.
    in_flight: Option<Op>,
    grants: u64,
    releases: u64,
}

/// A client that owns `keys`: acquires (long TTL), re-grants and releases them until its
/// connection breaks, recording every acknowledged result.
fn crash_client(
    mut con: Connection,
    keys: Vec<String>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> ClientLog {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut log = ClientLog::default();
    for k in &keys {
        log.state.insert(k.clone(), KeyState::Free);
    }
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) {
        let key = keys[rng.gen_range(0..keys.len())].clone();
        let state = log.state[&key].clone();
        let (op, cmd) = match &state {
            KeyState::Held { token, .. } if rng.gen_bool(0.7) => (
                Op::Release { key: key.clone() },
                rcmd!("LOCK.RELEASE", &key, token),
            ),
            KeyState::Held { token, .. } => (
                Op::Acquire {
                    key: key.clone(),
                    token: token.clone(),
                },
                rcmd!("LOCK.ACQUIRE", &key, token, "PX", 120_000),
            ),
            KeyState::Free => {
                seq += 1;
                let token = format!("{key}/{seq}/{}", rng.gen::<u32>());
                (
                    Op::Acquire {
                        key: key.clone(),
                        token: token.clone(),
                    },
                    rcmd!("LOCK.ACQUIRE", &key, &token, "PX", 120_000),
                )
            }
        };
        log.in_flight = Some(op.clone());
        let reply = match run(&mut con, &cmd) {
            Ok(v) => v,
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                return log;
            }
            Err(e) => panic!("{} answered {e}", describe(&cmd)),
        };
        log.in_flight = None;
        match op {
            Op::Acquire { key, token } => {
                let (t, fence) = parse_grant(&reply).unwrap_or_else(|| {
                    panic!("{} answered nil on a key only we use", describe(&cmd))
                });
                assert_eq!(t, token.as_bytes());
                if let KeyState::Held { fence: old, .. } = &state {
                    assert_eq!(fence, *old, "a re-grant changed the fence");
                }
                let max = log.max_fence.entry(key.clone()).or_insert(0);
                if !matches!(state, KeyState::Held { .. }) {
                    assert!(fence > *max, "{key}: fence {fence} not above {max}");
                }
                *max = (*max).max(fence);
                log.state.insert(key, KeyState::Held { token, fence });
                log.grants += 1;
            }
            Op::Release { key, .. } => {
                assert_eq!(as_int(&reply), 1, "{} answered {reply:?}", describe(&cmd));
                log.state.insert(key, KeyState::Free);
                log.releases += 1;
            }
        }
    }
    log
}

#[test]
fn kill9_under_load_keeps_every_acknowledged_grant_and_release() {
    let mut s = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    const CLIENTS: usize = 4;
    const KEYS_EACH: usize = 6;
    let mut max_fence: HashMap<String, i64> = HashMap::new();
    let (mut grants, mut releases) = (0, 0);
    for round in 0..2u64 {
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let keys: Vec<String> = (0..KEYS_EACH).map(|k| format!("crash:{c}:{k}")).collect();
                let con = s.conn();
                let stop = Arc::clone(&stop);
                thread::spawn(move || crash_client(con, keys, round * 100 + c as u64, stop))
            })
            .collect();
        thread::sleep(Duration::from_millis(1200));
        // SIGKILL while every client has a command on the way.
        s.stop(Stop::Kill);
        stop.store(true, Ordering::Relaxed);
        let logs: Vec<ClientLog> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        s.restart(Stop::Kill);
        let mut con = s.conn();
        for log in &logs {
            grants += log.grants;
            releases += log.releases;
            for (key, state) in &log.state {
                let got = info(&mut con, key);
                let in_flight = log.in_flight.as_ref().filter(|op| match op {
                    Op::Acquire { key: k, .. } | Op::Release { key: k, .. } => k == key,
                });
                let prev_max =
                    (*max_fence.get(key).unwrap_or(&0)).max(*log.max_fence.get(key).unwrap_or(&0));
                match (state, in_flight, &got) {
                    // Acknowledged grant: still there, exactly (a re-grant in flight keeps it).
                    (KeyState::Held { token, fence }, None | Some(Op::Acquire { .. }), Some(i)) => {
                        assert_eq!(
                            (lossy(&i.token), i.fence),
                            (token.clone(), *fence),
                            "round {round}: {key} after the crash"
                        );
                        assert!(i.ttl > 0 && i.ttl <= 120_000, "{key}: ttl {}", i.ttl);
                    }
                    // A release in flight may or may not have happened.
                    (KeyState::Held { token, fence }, Some(Op::Release { .. }), Some(i)) => {
                        assert_eq!((lossy(&i.token), i.fence), (token.clone(), *fence), "{key}");
                    }
                    (KeyState::Held { .. }, Some(Op::Release { .. }), None) => {}
                    (KeyState::Held { token, fence }, _, None) => panic!(
                        "round {round}: acknowledged grant {key} {token} (fence {fence}) lost in \
                         the crash\n{}",
                        s.log_tail(20)
                    ),
                    // Acknowledged release: gone, unless a new acquire in flight made it.
                    (KeyState::Free, _, None) => {}
                    (KeyState::Free, Some(Op::Acquire { token, .. }), Some(i)) => {
                        assert_eq!(lossy(&i.token), *token, "{key}: unexpected holder");
                        assert!(
                            i.fence > prev_max,
                            "{key}: fence {} not above {prev_max}",
                            i.fence
                        );
                    }
                    (KeyState::Free, _, Some(i)) => panic!(
                        "round {round}: {key} was released (acknowledged) but is held by {:?} \
                         (fence {}) after the crash",
                        lossy(&i.token),
                        i.fence
                    ),
                }
                let entry = max_fence.entry(key.clone()).or_insert(0);
                *entry = (*entry).max(*log.max_fence.get(key).unwrap_or(&0));
                if let Some(i) = &got {
                    *entry = (*entry).max(i.fence);
                }
            }
        }
        // The next grant on each name exceeds every fence that name had before the crash.
        for (key, max) in &max_fence {
            if let Some(i) = info(&mut con, key) {
                assert_eq!(release(&mut con, key, &i.token), 1);
            }
            let (_, fence) = grant(&mut con, key, b"after-crash", 60_000);
            assert!(
                fence > *max,
                "round {round}: {key} granted fence {fence} after the crash, not above {max}"
            );
            assert_eq!(release(&mut con, key, b"after-crash"), 1);
        }
        assert_no_crash(&s);
    }
    assert!(
        grants > 50 && releases > 20,
        "too little load: {grants} grants, {releases} releases"
    );
    eprintln!("kill -9 under load: {grants} acknowledged grants, {releases} releases, 2 crashes");
}

// ---------------------------------------------------------------------------------------------
// Split brain
// ---------------------------------------------------------------------------------------------

/// Grants and releases on `keys` until `stop`; returns every fence granted.
fn granting_client(
    mut con: Connection,
    keys: Vec<String>,
    tag: &'static str,
    stop: Arc<AtomicBool>,
) -> Vec<i64> {
    let mut fences = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = &keys[n % keys.len()];
        let token = format!("{tag}-{n}");
        if let Some((_, f)) = acquire(&mut con, key, token.as_bytes(), 5000) {
            fences.push(f);
            assert_eq!(release(&mut con, key, token.as_bytes()), 1, "{key} {token}");
        }
    }
    fences
}

#[test]
fn split_brain_promoted_replica_outranks_a_master_that_keeps_granting() {
    let master = Server::start();
    let replica = Server::start_replica_of(&master);
    let keys: Vec<String> = (0..4).map(|i| format!("split:{i}")).collect();
    let stop_master = Arc::new(AtomicBool::new(false));
    let master_threads: Vec<_> = (0..2)
        .map(|i| {
            let (con, keys, stop) = (master.conn(), keys.clone(), Arc::clone(&stop_master));
            thread::spawn(move || {
                granting_client(con, keys, if i == 0 { "m0" } else { "m1" }, stop)
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    // The split: the replica is promoted while the old master carries on granting.
    let mut rc = replica.conn();
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    let stop_replica = Arc::new(AtomicBool::new(false));
    let replica_threads: Vec<_> = (0..2)
        .map(|i| {
            let (con, keys, stop) = (replica.conn(), keys.clone(), Arc::clone(&stop_replica));
            thread::spawn(move || {
                granting_client(con, keys, if i == 0 { "r0" } else { "r1" }, stop)
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(700));
    stop_replica.store(true, Ordering::Relaxed);
    let new_fences: Vec<i64> = replica_threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    // The old master grants a while longer, at later wall-clock times.
    thread::sleep(Duration::from_millis(100));
    stop_master.store(true, Ordering::Relaxed);
    let old_fences: Vec<i64> = master_threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert!(
        old_fences.len() > 50 && new_fences.len() > 20,
        "too little load"
    );
    let old_max = *old_fences.iter().max().unwrap();
    let new_min = *new_fences.iter().min().unwrap();
    assert!(
        new_min > old_max,
        "a promoted replica granted fence {new_min}, not above the old master's {old_max}"
    );
    assert!(
        epoch_of(new_min) > epoch_of(old_max),
        "the promoted replica grants in a higher epoch: {old_max} then {new_min}"
    );
    assert!(
        replica.log().contains("promoted to master"),
        "{}",
        replica.log_tail(20)
    );
    eprintln!(
        "split brain: old master {} grants (max {old_max}), new master {} grants (min {new_min})",
        old_fences.len(),
        new_fences.len()
    );
    assert_no_crash(&master);
    assert_no_crash(&replica);
}

// ---------------------------------------------------------------------------------------------
// Memory pressure
// ---------------------------------------------------------------------------------------------

/// Sets `maxmemory` to `over` bytes above what is used now and writes big strings, under an
/// evicting policy, until `until` says stop; returns the number of writes.
fn fill_memory(
    s: &Server,
    con: &mut Connection,
    over: i64,
    chunk: usize,
    mut until: impl FnMut() -> bool,
) -> usize {
    let max = used_memory(s) + over;
    ok(con, &rcmd!("CONFIG", "SET", "maxmemory", max));
    let value = vec![b'x'; chunk];
    for i in 0..20_000 {
        if until() {
            return i;
        }
        ok(con, &rcmd!("SET", format!("filler:{i}"), &value[..]));
    }
    20_000
}

#[test]
fn at_maxmemory_with_noeviction_acquire_is_refused_but_release_and_extend_work() {
    let s = Server::builder()
        .set("maxmemory-policy", "noeviction")
        .start();
    let mut c = s.conn();
    let (_, fa) = grant(&mut c, "mem:a", b"ta", 60_000);
    grant(&mut c, "mem:b", b"tb", 60_000);
    let (_, fc) = grant(&mut c, "mem:c", b"tc", 60_000);
    // A waiter queued before memory runs out.
    let (mut waiter, _) = raw_waiter(&s, "mem:c", "waiter", 60_000, 20_000);
    // 2 MB of strings, then a maxmemory below what is used: full, whatever a command's own
    // arguments add.
    let value = vec![b'x'; 256 << 10];
    for i in 0..8 {
        ok(&mut c, &rcmd!("SET", format!("filler:{i}"), &value[..]));
    }
    let max = used_memory(&s) - (64 << 10);
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", max));
    assert!(used_memory(&s) >= max);
    let e = err(&mut c, &rcmd!("SET", "one-more", "x"));
    assert!(e.starts_with("OOM "), "{e}");

    for cmd in [
        rcmd!("LOCK.ACQUIRE", "mem:new", "t", "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "mem:new", "*", "EX", 1, "BLOCK", 10),
        rcmd!("LOCK.ACQUIRE", "mem:a", "ta", "PX", 60_000),
        rcmd!("LOCK.ACQUIRE", "mem:b", "other", "PX", 1000, "BLOCK", 100),
    ] {
        let e = err(&mut c, &cmd);
        assert!(e.starts_with("OOM "), "{}: {e}", describe(&cmd));
    }
    assert!(info(&mut c, "mem:new").is_none());
    // Holders can extend and let go.
    assert_eq!(extend_px(&mut c, "mem:b", b"tb", 90_000), 1);
    assert!(info_some(&mut c, "mem:b").ttl > 60_000);
    assert_eq!(extend_px(&mut c, "mem:b", b"nope", 90_000), 0);
    assert_eq!(release(&mut c, "mem:a", b"ta"), 1);
    assert!(info(&mut c, "mem:a").is_none());
    assert_eq!(release(&mut c, "mem:b", b"nope"), 0);
    // Releasing hands the lock to the waiter, even at maxmemory.
    assert_eq!(release(&mut c, "mem:c", b"tc"), 1);
    let (t, f) = raw_grant(&waiter.read().expect("waiter reply")).expect("waiter granted");
    assert_eq!((t.as_slice(), f > fc), (&b"waiter"[..], true));
    assert_eq!(s.info_field("stats", "evicted_keys").as_deref(), Some("0"));

    // With room again, grants resume above every earlier fence.
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", 0));
    let (_, f2) = grant(&mut c, "mem:a", b"ta2", 1000);
    assert!(f2 > fa && f2 > f);
    assert_no_crash(&s);
}

#[test]
fn an_evicted_lock_is_a_silent_release_and_its_waiter_is_served() {
    let s = Server::builder()
        .set("maxmemory-policy", "allkeys-lru")
        .start();
    let mut c = s.conn();
    let (_, f1) = grant(&mut c, "evict:lock", b"holder", 60_000);
    let (tx, rx) = mpsc::channel();
    let mut wc = s.conn();
    thread::spawn(move || {
        let r = run(
            &mut wc,
            &rcmd!(
                "LOCK.ACQUIRE",
                "evict:lock",
                "waiter",
                "PX",
                60_000,
                "BLOCK",
                30_000
            ),
        );
        let _ = tx.send(r);
    });
    wait_total_waiters(&s, 1);
    // Fill memory (without touching the lock key) until the lock is evicted and handed on.
    let mut reply = None;
    let writes = fill_memory(&s, &mut c, 1 << 20, 64 << 10, || {
        reply = rx.try_recv().ok();
        reply.is_some()
    });
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", 0));
    let reply = reply.unwrap_or_else(|| {
        panic!(
            "the waiter was not served after {writes} writes\n{}",
            s.log_tail(20)
        )
    });
    let (t, f2) = parse_grant(&reply.expect("waiter reply")).expect("waiter granted");
    assert_eq!(t, b"waiter");
    assert!(f2 > f1);
    let evicted: i64 = s
        .info_field("stats", "evicted_keys")
        .unwrap()
        .parse()
        .unwrap();
    assert!(evicted > 0);
    // The old holder was not told; its lock is simply gone.
    assert_eq!(extend_px(&mut c, "evict:lock", b"holder", 60_000), 0);
    assert_eq!(release(&mut c, "evict:lock", b"holder"), 0);
    assert_eq!(stat(&s, "handoffs"), 1, "the waiter was handed the lock");
    // The writes that were still filling memory when the waiter was served may have evicted its
    // lock in turn; if it is there, it is the waiter's.
    if let Some(i) = info(&mut c, "evict:lock") {
        assert_eq!((i.token.as_slice(), i.fence), (&b"waiter"[..], f2));
    }
    assert_eq!(stat(&s, "waiters"), 0);
    assert_no_crash(&s);
}

// ---------------------------------------------------------------------------------------------
// Clients dying mid-BLOCK, SHUTDOWN and DEBUG RELOAD with waiters
// ---------------------------------------------------------------------------------------------

/// Hands the lock down a queue of live raw waiters: the first is served by whatever ends the
/// current grant (the caller's business); then each must be granted in turn, with a larger
/// fence, and releases for the next one. Returns the last fence and the connections (kept open:
/// the last one still holds the lock).
#[track_caller]
fn serve_in_order(
    key: &str,
    mut fence: i64,
    waiters: Vec<(String, RawConn)>,
) -> (i64, Vec<RawConn>) {
    let mut prev: Option<(String, RawConn)> = None;
    let mut done = Vec::new();
    for (token, mut w) in waiters {
        if let Some((pt, mut pc)) = prev.take() {
            assert_eq!(
                pc.call(&["LOCK.RELEASE", key, &pt]),
                Resp::Int(1),
                "{pt} releases"
            );
            done.push(pc);
        }
        let reply = w.read().unwrap_or_else(|e| panic!("{token}: {e}"));
        let (t, f) = raw_grant(&reply).unwrap_or_else(|| panic!("{token} answered nil"));
        assert_eq!(lossy(&t), token, "the lock went to the wrong waiter");
        assert!(f > fence, "{token}: fence {f} not above {fence}");
        fence = f;
        prev = Some((token, w));
    }
    done.extend(prev.map(|(_, c)| c));
    (fence, done)
}

#[test]
fn waiters_that_die_mid_block_leave_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    let key = "dying";
    let (_, f0) = grant(&mut c, key, b"holder", 60_000);
    let mut waiters: Vec<(String, RawConn, i64)> = (0..12)
        .map(|i| {
            let token = format!("w{i}");
            let (w, id) = raw_waiter(&s, key, &token, 60_000, 0);
            (token, w, id)
        })
        .collect();
    assert_eq!(info_some(&mut c, key).waiters, 12);
    let mut alive = Vec::new();
    for (i, (token, w, id)) in waiters.drain(..).enumerate() {
        match i % 4 {
            0 => {
                assert_eq!(as_int(&ok(&mut c, &rcmd!("CLIENT", "KILL", "ID", id))), 1);
                drop(w);
            }
            1 => w.close(),
            2 if i == 10 => {
                // CLIENT UNBLOCK ends the wait like a timeout.
                let mut w = w;
                assert_eq!(as_int(&ok(&mut c, &rcmd!("CLIENT", "UNBLOCK", id))), 1);
                assert_eq!(w.read().unwrap(), Resp::Nil);
            }
            _ => alive.push((token, w)),
        }
    }
    // w2 w3 w6 w7 w11 are left (w10 was unblocked).
    wait_waiters(&mut c, key, alive.len() as i64);
    assert_eq!(release(&mut c, key, b"holder"), 1);
    let tokens: Vec<String> = alive.iter().map(|(t, _)| t.clone()).collect();
    assert_eq!(tokens, ["w2", "w3", "w6", "w7", "w11"]);
    let (last, _conns) = serve_in_order(key, f0, alive);
    let i = info_some(&mut c, key);
    assert_eq!(
        (lossy(&i.token), i.fence, i.waiters),
        ("w11".to_string(), last, 0)
    );
    assert_eq!(release(&mut c, key, b"w11"), 1);

    // Waiters die around the holder's expiry, while the module's timer hands the lock on. A
    // doomed waiter may be served just before it dies: its short lease then passes it on.
    let (_, f1) = grant(&mut c, key, b"short", 60_000);
    let mut queue: Vec<(String, RawConn, i64)> = (0..10)
        .map(|i| {
            let token = format!("x{i}");
            let px = if i < 8 { 100 } else { 60_000 };
            let (w, id) = raw_waiter(&s, key, &token, px, 5000);
            (token, w, id)
        })
        .collect();
    let survivors: Vec<(String, RawConn)> = queue
        .split_off(8)
        .into_iter()
        .map(|(t, w, _)| (t, w))
        .collect();
    // Everyone is queued: now the holder's lease ends in 300 ms, while they die.
    assert_eq!(extend_px(&mut c, key, b"short", 300), 1);
    for (i, (_, w, id)) in queue.into_iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(as_int(&ok(&mut c, &rcmd!("CLIENT", "KILL", "ID", id))), 1);
            drop(w);
        } else {
            w.close();
        }
        thread::sleep(Duration::from_millis(30));
    }
    let (last, _conns2) = serve_in_order(key, f1.max(last), survivors);
    assert_eq!(info_some(&mut c, key).fence, last);
    wait_total_waiters(&s, 0);
    ping(&mut c);
    assert_no_crash(&s);
}

#[test]
fn shutdown_with_waiters_exits_cleanly() {
    let mut s = Server::builder().set("appendonly", "yes").start();
    let mut c = s.conn();
    let (_, fence) = grant(&mut c, "sd:a", b"holder", 60_000);
    grant(&mut c, "sd:b", b"holder", 60_000);
    let mut waiters = Vec::new();
    for i in 0..6 {
        let key = if i % 2 == 0 { "sd:a" } else { "sd:b" };
        let (w, _) = raw_waiter(
            &s,
            key,
            if i == 5 { "*" } else { "w" },
            60_000,
            if i < 3 { 0 } else { 100_000 },
        );
        waiters.push(w);
    }
    drop(c);
    s.restart(Stop::Save);
    let log = s.log();
    assert!(
        log.contains("ready to exit"),
        "no clean exit in the log:\n{}",
        s.log_tail(40)
    );
    assert_no_crash(&s);
    for mut w in waiters {
        // The connection closes; it must not carry a grant.
        match w.read() {
            Err(_) => {}
            Ok(r) => assert!(
                !matches!(r, Resp::Array(_)),
                "a waiter got {r:?} at shutdown"
            ),
        }
    }
    let mut c = s.conn();
    let i = info_some(&mut c, "sd:a");
    assert_eq!(
        (i.token.as_slice(), i.fence, i.waiters),
        (&b"holder"[..], fence, 0)
    );
    // And once more without saving, with waiters queued on a fresh server process.
    let _w1 = raw_waiter(&s, "sd:a", "again", 60_000, 0);
    let _w2 = raw_waiter(&s, "sd:b", "again", 60_000, 5000);
    drop(c);
    s.stop(Stop::NoSave);
    assert_eq!(
        s.log().matches("ready to exit").count(),
        2,
        "{}",
        s.log_tail(40)
    );
    assert_no_crash(&s);
}

#[test]
fn debug_reload_with_waiters_still_serves_them() {
    let s = Server::start();
    let mut c = s.conn();
    let key = "reload";
    // Long enough to check the queue after two reloads, even on a slow machine.
    let (_, f0) = grant(&mut c, key, b"holder", 2500);
    let mut queue = Vec::new();
    for i in 0..4 {
        let token = format!("r{i}");
        let (w, _) = raw_waiter(&s, key, &token, 60_000, 0);
        queue.push((token, w));
    }
    // One more that times out after the reload.
    let (mut short, _) = raw_waiter(&s, key, "short", 60_000, 400);
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    let i = info_some(&mut c, key);
    assert_eq!(
        (i.token.as_slice(), i.fence, i.waiters),
        (&b"holder"[..], f0, 5)
    );
    assert_eq!(
        short.read().unwrap(),
        Resp::Nil,
        "the short waiter times out"
    );
    // No one touches the key: the holder's expiry (timer re-armed by the reload) serves r0.
    let (last, _conns) = serve_in_order(key, f0, queue);
    let i = info_some(&mut c, key);
    assert_eq!(
        (lossy(&i.token), i.fence, i.waiters),
        ("r3".to_string(), last, 0)
    );
    wait_total_waiters(&s, 0);
    assert_no_crash(&s);
}

// ---------------------------------------------------------------------------------------------
// A mix of every way a lock and a waiter can end (also the valgrind scenario of `make stress`)
// ---------------------------------------------------------------------------------------------

#[test]
fn lifecycle_mix() {
    let rounds: usize = std::env::var("REDISLOCK_LIFECYCLE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let s = Server::builder().set("appendonly", "yes").start();
    let mut c = s.conn();
    let mut c3 = s.conn_resp3();
    for round in 0..rounds {
        let key = format!("mix:{round}");
        let key = key.as_str();
        // Generated token, waiters that time out, disconnect, are unblocked, or are served.
        let (tok, f0) = grant(&mut c, key, b"*", 60_000);
        let mut timeout = RawConn::connect(&s);
        timeout.send(&["LOCK.ACQUIRE", key, "timeout", "PX", "1000", "BLOCK", "30"]);
        assert_eq!(timeout.read().unwrap(), Resp::Nil);
        let (gone, _) = raw_waiter(&s, key, "gone", 1000, 0);
        let (mut unblocked, uid) = raw_waiter(&s, key, "*", 1000, 0);
        let (mut served, _) = raw_waiter(&s, key, "*", 5000, 0);
        let (mut by_expiry, _) = raw_waiter(&s, key, "by-expiry", 100, 0);
        let (mut by_del, _) = raw_waiter(&s, key, "by-del", 60_000, 0);
        let (mut killed_after, kid) = raw_waiter(&s, key, "killed", 60_000, 0);
        gone.close();
        assert_eq!(
            as_int(&ok(&mut c, &rcmd!("CLIENT", "UNBLOCK", uid, "ERROR"))),
            1
        );
        assert!(matches!(unblocked.read().unwrap(), Resp::Error(_)));
        wait_waiters(&mut c3, key, 4);
        assert_eq!(release(&mut c, key, &tok), 1);
        let (t1, f1) = raw_grant(&served.read().unwrap()).expect("served");
        assert!(f1 > f0 && t1.len() == 32);
        assert_eq!(
            served.call(&["LOCK.RELEASE".as_bytes(), key.as_bytes(), &t1]),
            Resp::Int(1)
        );
        let (_, f2) = raw_grant(&by_expiry.read().unwrap()).expect("by-expiry");
        assert!(f2 > f1);
        // by-expiry's 100 ms lease runs out; by-del is next.
        let (_, f3) = raw_grant(&by_del.read().unwrap()).expect("by-del");
        assert!(f3 > f2);
        assert_eq!(as_int(&ok(&mut c, &rcmd!("DEL", key))), 1);
        let (_, f4) = raw_grant(&killed_after.read().unwrap()).expect("killed");
        assert!(f4 > f3);
        assert_eq!(as_int(&ok(&mut c, &rcmd!("CLIENT", "KILL", "ID", kid))), 1);
        drop(killed_after);

        // Persistence and key commands on a held lock with a waiter.
        let other = format!("mix:other:{round}");
        grant(&mut c, &other, b"holder", 60_000);
        let (mut w, _) = raw_waiter(&s, &other, "w", 60_000, 0);
        let dump = ok(&mut c, &rcmd!("DUMP", &other));
        ok(
            &mut c,
            &rcmd!("RESTORE", format!("{other}:copy"), 0, as_bytes(&dump)),
        );
        assert_eq!(
            as_int(&ok(
                &mut c,
                &rcmd!("COPY", &other, format!("{other}:copy2"))
            )),
            1
        );
        ok(&mut c, &rcmd!("BGREWRITEAOF"));
        s.wait_aof_rewrite_done();
        ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
        ok(&mut c, &rcmd!("DEBUG", "LOADAOF"));
        ok(&mut c, &rcmd!("RENAME", &other, format!("{other}:renamed")));
        let (_, _) = raw_grant(&w.read().unwrap()).expect("w served after RENAME");
        ok(
            &mut c,
            &rcmd!("MEMORY", "USAGE", format!("{other}:renamed")),
        );
        ok(
            &mut c,
            &rcmd!("DEBUG", "DIGEST-VALUE", format!("{other}:renamed")),
        );
        // Transactions and errors.
        ok(&mut c, &rcmd!("MULTI"));
        ok(
            &mut c,
            &rcmd!("LOCK.ACQUIRE", &other, "*", "PX", 100, "BLOCK", 10),
        );
        ok(&mut c, &rcmd!("LOCK.EXTEND", &other, "w", "PX", 100));
        // w holds the lock: the acquire answers nil at once, the extension succeeds.
        assert_eq!(
            ok(&mut c, &rcmd!("EXEC")),
            redis::Value::Array(vec![redis::Value::Nil, redis::Value::Int(1)])
        );
        assert_eq!(
            err(&mut c, &rcmd!("LOCK.ACQUIRE", &other, "", "PX", 100)),
            "ERR invalid token: must be 1 to 512 bytes"
        );
        assert_eq!(
            err(&mut c, &rcmd!("LOCK.ACQUIRE", &other, "x", "PX", 100, "NX")),
            "ERR syntax error: unknown option 'NX' (LOCK.ACQUIRE takes EX, PX, SHARED, LIMIT, EPHEMERAL, BLOCK and DATA)"
        );
        assert_eq!(
            err(&mut c, &rcmd!("LOCK._APPLY", &other, "x", 5)),
            "ERR this command is internal to redislock replication and persistence"
        );
        ok(&mut c, &rcmd!("FLUSHALL"));
    }
    ping(&mut c);
    wait_total_waiters(&s, 0);
    // Servers that flush lazily (Valkey 9 by default) free the records in a background thread.
    wait_until(
        "FLUSHALL frees every lock record",
        Duration::from_secs(10),
        || stat(&s, "locks") == 0,
    );
    assert_no_crash(&s);
}
