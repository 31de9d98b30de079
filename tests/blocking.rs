//! `LOCK.ACQUIRE … BLOCK` (SPEC "Commands"): waiting in the server, first come first served,
//! handoff on release, deletion, flush and expiry, timeouts, disconnects, and replication of
//! handed-off grants.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

/// What a waiter's `LOCK.ACQUIRE` answered (`(token, fence)` or nil), and how long it took.
type Answer = (Option<(Vec<u8>, i64)>, Duration);

/// Starts a client that blocks on `key` with `token`; its reply arrives on the returned channel.
fn spawn_waiter(
    server: &Server,
    key: &str,
    token: &str,
    px: i64,
    block_ms: i64,
) -> (mpsc::Receiver<Answer>, i64) {
    let mut con = server.conn();
    let id = as_int(&ok(&mut con, &rcmd!("CLIENT", "ID")));
    let (tx, rx) = mpsc::channel();
    let (key, token) = (key.to_string(), token.to_string());
    thread::spawn(move || {
        let start = Instant::now();
        let r = run(
            &mut con,
            &rcmd!("LOCK.ACQUIRE", &key, &token, "PX", px, "BLOCK", block_ms),
        );
        let grant = match r {
            Ok(v) => parse_grant(&v),
            Err(_) => None,
        };
        let _ = tx.send((grant, start.elapsed()));
    });
    (rx, id)
}

fn recv(rx: &mpsc::Receiver<Answer>) -> Answer {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("waiter never answered")
}

#[test]
fn five_waiters_are_served_in_arrival_order() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "fifo", b"holder", 60_000);
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (rx, _) = spawn_waiter(&s, "fifo", &format!("w{i}"), 60_000, 10_000);
        wait_waiters(&mut c, "fifo", i + 1);
        waiters.push(rx);
    }
    assert_eq!(release(&mut c, "fifo", b"holder"), 1);
    let mut last = f0;
    for (i, rx) in waiters.iter().enumerate() {
        let (g, _) = recv(rx);
        let (token, fence) = g.unwrap_or_else(|| panic!("w{i} got nil"));
        assert_eq!(token, format!("w{i}").as_bytes(), "grant order");
        assert!(fence > last, "fences increase along the queue");
        last = fence;
        let held = info_some(&mut c, "fifo");
        assert_eq!((held.token, held.fence), (token.clone(), fence));
        assert_eq!(held.waiters, 4 - i as i64);
        assert_eq!(release(&mut c, "fifo", &token), 1);
    }
    assert!(info(&mut c, "fifo").is_none());
}

#[test]
fn handoff_on_release_del_unlink_flush() {
    let s = Server::start();
    let mut c = s.conn();
    let frees: [(&str, redis::Cmd); 5] = [
        ("release", rcmd!("LOCK.RELEASE", "h", "holder")),
        ("del", rcmd!("DEL", "h")),
        ("unlink", rcmd!("UNLINK", "h")),
        ("flushall", rcmd!("FLUSHALL")),
        ("flushdb", rcmd!("FLUSHDB")),
    ];
    for (what, free) in frees {
        let (_, f0) = grant(&mut c, "h", b"holder", 60_000);
        let (rx, _) = spawn_waiter(&s, "h", "next", 60_000, 10_000);
        wait_waiters(&mut c, "h", 1);
        ok(&mut c, &free);
        let (g, _) = recv(&rx);
        let (token, fence) = g.unwrap_or_else(|| panic!("{what}: waiter got nil"));
        assert_eq!(token, b"next", "{what}");
        assert!(fence > f0, "{what}: fence must increase");
        let held = info_some(&mut c, "h");
        assert_eq!(
            (held.token, held.fence, held.waiters),
            (b"next".to_vec(), fence, 0),
            "{what}"
        );
        assert!(
            pttl(&mut c, "h") > 59_000,
            "{what}: the waiter's own TTL applies"
        );
        assert_eq!(release(&mut c, "h", b"next"), 1);
    }
}

#[test]
fn handoff_on_expiry_without_any_client_touching_the_key() {
    let s = Server::start();
    let mut c = s.conn();
    // With Redis's own active expiry off, only the module's timer can notice the expiry.
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    let (_, f0) = grant(&mut c, "exp", b"holder", 150);
    let (rx, _) = spawn_waiter(&s, "exp", "next", 60_000, 5_000);
    let (g, waited) = recv(&rx);
    let (token, fence) = g.expect("waiter should be handed the expired lock");
    assert_eq!(token, b"next");
    assert!(fence > f0);
    assert!(
        waited < Duration::from_millis(5_000),
        "granted before its own timeout"
    );
    assert_eq!(info_some(&mut c, "exp").token, b"next");
}

#[test]
fn extend_and_regrant_push_the_handoff_back() {
    let s = Server::start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    grant(&mut c, "ext", b"holder", 300);
    let (rx, _) = spawn_waiter(&s, "ext", "next", 60_000, 10_000);
    wait_waiters(&mut c, "ext", 1);
    assert_eq!(extend_px(&mut c, "ext", b"holder", 60_000), 1);
    // Past the original expiry the holder still holds it and the waiter still waits.
    thread::sleep(Duration::from_millis(500));
    let held = info_some(&mut c, "ext");
    assert_eq!((held.token.as_slice(), held.waiters), (&b"holder"[..], 1));
    // Shortening the lease makes the handoff happen at the new, earlier expiry.
    assert_eq!(extend_px(&mut c, "ext", b"holder", 100), 1);
    let (g, _) = recv(&rx);
    assert_eq!(g.expect("handoff after shortened lease").0, b"next");
}

#[test]
fn timeout_answers_nil_on_time_and_leaves_the_lock_alone() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "t", b"holder", 60_000);
    let (rx, _) = spawn_waiter(&s, "t", "late", 1_000, 200);
    let (g, waited) = recv(&rx);
    assert!(g.is_none(), "timed-out waiter gets nil");
    assert!(
        waited >= Duration::from_millis(195),
        "answered early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(700),
        "answered late: {waited:?}"
    );
    let held = info_some(&mut c, "t");
    assert_eq!(
        (held.token, held.fence, held.waiters),
        (b"holder".to_vec(), f0, 0)
    );
}

#[test]
fn a_disconnected_waiter_is_skipped() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "dc", b"holder", 60_000);
    let (_gone, id) = spawn_waiter(&s, "dc", "gone", 60_000, 0);
    wait_waiters(&mut c, "dc", 1);
    let (rx, _) = spawn_waiter(&s, "dc", "next", 60_000, 10_000);
    wait_waiters(&mut c, "dc", 2);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("CLIENT", "KILL", "ID", id))), 1);
    wait_waiters(&mut c, "dc", 1);
    assert_eq!(release(&mut c, "dc", b"holder"), 1);
    let (g, _) = recv(&rx);
    assert_eq!(g.expect("second waiter served").0, b"next");
    ping(&mut c);
}

#[test]
fn client_unblock_is_a_timeout() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "ub", b"holder", 60_000);
    let (rx, id) = spawn_waiter(&s, "ub", "w", 60_000, 0);
    wait_waiters(&mut c, "ub", 1);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("CLIENT", "UNBLOCK", id))), 1);
    let (g, _) = recv(&rx);
    assert!(g.is_none(), "unblocked waiter gets nil");
    let held = info_some(&mut c, "ub");
    assert_eq!((held.token.as_slice(), held.waiters), (&b"holder"[..], 0));
}

#[test]
fn multi_and_scripts_never_block() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "m", b"holder", 60_000);
    let started = Instant::now();
    let r: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("m")
        .arg("other")
        .arg("PX")
        .arg(1000)
        .arg("BLOCK")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        r,
        Value::Array(vec![Value::Nil]),
        "MULTI answers as if timed out"
    );
    let script = "return redis.call('LOCK.ACQUIRE', KEYS[1], 'other', 'PX', 1000, 'BLOCK', 0)";
    let r = ok(&mut c, &rcmd!("EVAL", script, 1, "m"));
    assert_eq!(r, Value::Nil, "a script answers as if timed out");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(info_some(&mut c, "m").waiters, 0);
}

#[test]
fn a_newcomer_never_overtakes_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "q", b"holder", 60_000);
    let (rx, _) = spawn_waiter(&s, "q", "first", 60_000, 10_000);
    wait_waiters(&mut c, "q", 1);
    // DEL frees the lock inside a transaction; the newcomer runs right after it, before any
    // deferred work could run, and must still lose to the waiter.
    let r: Value = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("q")
        .cmd("LOCK.ACQUIRE")
        .arg("q")
        .arg("newcomer")
        .arg("PX")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(r, Value::Array(vec![Value::Int(1), Value::Nil]));
    let (g, _) = recv(&rx);
    assert_eq!(g.expect("the waiter is served").0, b"first");
    assert_eq!(info_some(&mut c, "q").token, b"first");
    // Outside a transaction too: free with DEL, then acquire at once.
    let (rx, _) = spawn_waiter(&s, "q", "second", 60_000, 10_000);
    wait_waiters(&mut c, "q", 1);
    ok(&mut c, &rcmd!("DEL", "q"));
    assert!(acquire(&mut c, "q", b"newcomer", 1000).is_none());
    assert_eq!(recv(&rx).0.expect("served").0, b"second");
}

#[test]
fn a_grant_and_a_timeout_in_the_same_pass_never_lose_the_reply() {
    let s = Server::start();
    let mut c = s.conn();
    for round in 0..5 {
        let key = format!("race{round}");
        grant(&mut c, &key, b"holder", 60_000);
        let (rx, _) = spawn_waiter(&s, &key, "w", 60_000, 100);
        wait_waiters(&mut c, &key, 1);
        // The server sleeps past the waiter's deadline, then releases in the same pass.
        let _: Value = redis::pipe()
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.3")
            .cmd("LOCK.RELEASE")
            .arg(&key)
            .arg("holder")
            .query(&mut c)
            .unwrap();
        let (g, _) = recv(&rx);
        let held = info(&mut c, &key);
        match g {
            Some((token, fence)) => {
                let held = held.expect("the waiter was told it holds the lock");
                assert_eq!(
                    (held.token, held.fence),
                    (token, fence),
                    "reply matches the lock"
                );
            }
            None => assert!(
                held.is_none_or(|h| h.token != b"w"),
                "the waiter got nil but holds the lock"
            ),
        }
        ping(&mut c);
    }
}

#[test]
fn waiter_counts_in_lock_info() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "n", b"holder", 60_000);
    let (short, _) = spawn_waiter(&s, "n", "a", 1000, 300);
    let (_long1, _) = spawn_waiter(&s, "n", "b", 1000, 0);
    let (_long2, _) = spawn_waiter(&s, "n", "c", 1000, 0);
    wait_waiters(&mut c, "n", 3);
    assert!(recv(&short).0.is_none());
    wait_waiters(&mut c, "n", 2);
}

#[test]
fn renamed_lock_frees_the_old_name_for_its_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "old", b"holder", 60_000);
    let (rx, _) = spawn_waiter(&s, "old", "w", 60_000, 10_000);
    wait_waiters(&mut c, "old", 1);
    ok(&mut c, &rcmd!("RENAME", "old", "new"));
    let (g, _) = recv(&rx);
    let (token, fence) = g.expect("the waiter is granted the freed name");
    assert_eq!(token, b"w");
    assert!(fence > f0);
    assert_eq!(info_some(&mut c, "new").token, b"holder");
}

#[test]
fn handed_off_grants_reach_the_replica_and_the_aof() {
    let mut m = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    let mut rc = r.conn();
    ok(&mut mc, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    // Handoff by release (inside the command) and by expiry (from a timer).
    grant(&mut mc, "rel", b"holder", 60_000);
    let (rx1, _) = spawn_waiter(&m, "rel", "w1", 60_000, 10_000);
    wait_waiters(&mut mc, "rel", 1);
    release(&mut mc, "rel", b"holder");
    let (t1, f1) = recv(&rx1).0.expect("release handoff");
    grant(&mut mc, "exp", b"holder", 100);
    let (rx2, _) = spawn_waiter(&m, "exp", "w2", 60_000, 10_000);
    let (t2, f2) = recv(&rx2).0.expect("expiry handoff");
    wait_replicas(&mut mc, 1);
    for (key, token, fence) in [("rel", &t1, f1), ("exp", &t2, f2)] {
        let on_replica = info_some(&mut rc, key);
        assert_eq!(
            (&on_replica.token, on_replica.fence),
            (token, fence),
            "{key} on the replica"
        );
        let diff = (pexpiretime(&mut mc, key) - pexpiretime(&mut rc, key)).abs();
        assert_eq!(diff, 0, "{key}: same absolute expiry");
    }
    drop(rc);
    drop(r);
    m.kill9_and_restart();
    let mut mc = m.conn();
    for (key, token, fence) in [("rel", &t1, f1), ("exp", &t2, f2)] {
        let back = info_some(&mut mc, key);
        assert_eq!(
            (&back.token, back.fence),
            (token, fence),
            "{key} after AOF replay"
        );
    }
}

#[test]
fn blocking_workers_never_overlap_and_fences_increase() {
    const WORKERS: usize = 8;
    const ROUNDS: usize = 40;
    let s = Server::start();
    let busy = Arc::new(AtomicBool::new(false));
    let last_fence = Arc::new(Mutex::new(0i64));
    let mut handles = Vec::new();
    for w in 0..WORKERS {
        let mut con = s.conn();
        let (busy, last_fence) = (busy.clone(), last_fence.clone());
        handles.push(thread::spawn(move || {
            let token = format!("worker{w}");
            let mut grants = 0;
            for _ in 0..ROUNDS {
                let v = ok(
                    &mut con,
                    &rcmd!("LOCK.ACQUIRE", "res", &token, "PX", 10_000, "BLOCK", 10_000),
                );
                let (_, fence) = parse_grant(&v).expect("BLOCK 10000 should be granted");
                assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                {
                    // The protected resource: rejects any fence not above the last one seen.
                    let mut last = last_fence.lock().unwrap();
                    assert!(fence > *last, "stale fence {fence} after {}", *last);
                    *last = fence;
                }
                grants += 1;
                busy.store(false, Ordering::SeqCst);
                assert_eq!(release(&mut con, "res", token.as_bytes()), 1);
            }
            grants
        }));
    }
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, WORKERS * ROUNDS);
}

#[test]
fn move_and_swapdb_free_the_name_for_its_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    // MOVE takes the lock to db 1; the name in db 0 is free for the waiter.
    let (_, f0) = grant(&mut c, "mv", b"holder", 60_000);
    let (rx, _) = spawn_waiter(&s, "mv", "w", 60_000, 10_000);
    wait_waiters(&mut c, "mv", 1);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("MOVE", "mv", 1))), 1);
    let (token, fence) = recv(&rx).0.expect("MOVE frees the name");
    assert_eq!(token, b"w");
    assert!(fence > f0);
    // SWAPDB raises no key events: the waiter in db 0 is served all the same.
    grant(&mut c, "sw", b"holder", 60_000);
    let (rx, _) = spawn_waiter(&s, "sw", "w", 60_000, 10_000);
    wait_waiters(&mut c, "sw", 1);
    ok(&mut c, &rcmd!("SWAPDB", 0, 1));
    let (token, _) = recv(&rx).0.expect("SWAPDB freed the name in db 0");
    assert_eq!(token, b"w");
    ok(&mut c, &rcmd!("SELECT", 1));
    assert_eq!(info_some(&mut c, "sw").token, b"holder");
}

#[test]
fn waiters_are_told_when_their_server_becomes_a_replica() {
    let other = Server::start();
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "d", b"holder", 60_000);
    let mut w = s.conn();
    let handle = thread::spawn(move || {
        run(
            &mut w,
            &rcmd!("LOCK.ACQUIRE", "d", "w", "PX", 1000, "BLOCK", 0),
        )
    });
    wait_waiters(&mut c, "d", 1);
    ok(&mut c, &rcmd!("REPLICAOF", "127.0.0.1", other.port()));
    // Redis itself ends blocked waits on demotion (UNBLOCKED); the module's
    // own answer, for servers that do not, is READONLY. Either way: no grant.
    let e = handle
        .join()
        .unwrap()
        .expect_err("a demoted server grants nothing");
    let text = err_text(&e);
    assert!(
        text.starts_with("UNBLOCKED") || text.starts_with("READONLY"),
        "{text}"
    );
    ok(&mut c, &rcmd!("REPLICAOF", "NO", "ONE"));
}
