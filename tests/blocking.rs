//! `LOCK.ACQUIRE … BLOCK` (SPEC "Commands"): waiting in the server, first come first served,
//! handoff on release, deletion, flush and expiry, timeouts, disconnects, and replication of
//! handed-off grants.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use redis::Value;

#[test]
fn five_waiters_are_served_in_arrival_order() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "fifo", b"holder", 60_000);
    let mut waiters = Vec::new();
    for i in 0..5 {
        let w = spawn_waiter(&s, "fifo", &format!("w{i}"), 60_000, 10_000);
        wait_waiters(&mut c, "fifo", i + 1);
        waiters.push(w);
    }
    assert_eq!(release(&mut c, "fifo", b"holder"), 1);
    let mut last = f0;
    for (i, w) in waiters.iter().enumerate() {
        let (token, fence) = w.granted();
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

/// A release hands the lock on in the releasing command itself: no timer pass per handoff
/// (each would cost the server a wake-up and a pass over its schedule), for an exclusive lock
/// (the key goes) and for a semaphore (a holder leaves it).
#[test]
fn handoffs_on_release_run_no_timer_pass() {
    const N: usize = 30;
    let s = Server::start();
    let mut c = s.conn();
    for (key, options) in [("hot", &[][..]), ("hot-sem", &["LIMIT", "1"][..])] {
        let mut acquire = rcmd!("LOCK.ACQUIRE", key, "w-first", "PX", 60_000);
        for o in options {
            acquire.arg(*o);
        }
        ok(&mut c, &acquire);
        // No BLOCK timeout: no deadline job either.
        let waiters: Vec<Waiter> = (0..N)
            .map(|i| {
                let w = spawn_waiter_with(&s, key, &format!("w{i}"), 60_000, 0, options);
                wait_waiters(&mut c, key, i as i64 + 1);
                w
            })
            .collect();
        let passes = stat(&s, "timer_passes");
        let mut holder = b"w-first".to_vec();
        for w in &waiters {
            assert_eq!(release(&mut c, key, &holder), 1);
            holder = w.granted().0;
        }
        assert_eq!(release(&mut c, key, &holder), 1);
        let ran = stat(&s, "timer_passes") - passes;
        assert!(
            ran <= 2,
            "{key}: {ran} timer passes for {N} handoffs on release"
        );
    }
}

/// A release that hands the lock straight to an exclusive waiter writes one effect, the
/// waiter's grant, which replaces the lock on the replica and in the AOF as it did here; a
/// release to a shared waiter writes its `DEL` first. Either way the replica and a restart
/// from the AOF have exactly the new holder.
#[test]
fn a_release_handing_on_writes_the_new_grant_in_place_of_the_release() {
    let mut s = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&s);
    let mut c = s.conn();
    for (key, options) in [("ex", &[][..]), ("to-shared", &["SHARED"][..])] {
        grant(&mut c, key, b"a", 60_000);
        let w = spawn_waiter_with(&s, key, "b", 60_000, 10_000, options);
        wait_waiters(&mut c, key, 1);
        let before = s.aof_text().len();
        assert_eq!(release(&mut c, key, b"a"), 1);
        let (_, fence) = w.granted();
        let written = s.aof_text()[before..].to_string();
        let grant_effect = if options.is_empty() {
            "LOCK._APPLY"
        } else {
            "LOCK._HOLD"
        };
        assert!(written.contains(grant_effect), "{key}: {written:?}");
        assert_eq!(
            written.contains("DEL"),
            !options.is_empty(),
            "{key}: the release's DEL {}: {written:?}",
            if options.is_empty() {
                "written before a grant that replaces it"
            } else {
                "missing"
            }
        );
        wait_replica_caught_up(&s, &r);
        let value = rcmd!("DEBUG", "DIGEST-VALUE", key);
        assert_eq!(
            ok(&mut r.conn(), &value),
            ok(&mut c, &value),
            "{key} on the replica"
        );
        let shown = ok(&mut r.conn(), &rcmd!("LOCK.INFO", key));
        assert!(
            format!("{shown:?}").contains(&fence.to_string()),
            "{shown:?}"
        );
    }
    let digest = ok(&mut c, &rcmd!("DEBUG", "DIGEST"));
    s.kill9_and_restart();
    assert_eq!(ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST")), digest);
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
        let w = spawn_waiter(&s, "h", "next", 60_000, 10_000);
        wait_waiters(&mut c, "h", 1);
        ok(&mut c, &free);
        let (token, fence) = w.granted();
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

/// Shortens the lease of `key` (held by `holder`, with waiters queued) to `px` ms and returns the
/// absolute expiry (Unix ms) the server set.
fn shorten(c: &mut redis::Connection, key: &str, holder: &[u8], px: i64) -> i64 {
    assert_eq!(extend_px(c, key, holder, px), 1);
    pexpiretime(c, key)
}

#[test]
fn handoff_on_expiry_without_any_client_touching_the_key() {
    let s = Server::start();
    let mut c = s.conn();
    // With Redis's own active expiry off, only the module's timer can notice the expiry.
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    let (_, f0) = grant(&mut c, "exp", b"holder", 60_000);
    let w = spawn_waiter(&s, "exp", "next", 60_000, 5_000);
    wait_waiters(&mut c, "exp", 1);
    let handoffs = stat(&s, "handoffs");
    let expiry = shorten(&mut c, "exp", b"holder", 150);
    let (token, fence) = w.granted();
    let granted_at = now_ms();
    assert_eq!(token, b"next");
    assert!(fence > f0);
    assert!(
        granted_at > expiry,
        "handed on at {granted_at}, before the holder's expiry {expiry}"
    );
    assert_eq!(
        stat(&s, "handoffs"),
        handoffs + 1,
        "one handoff, by the timer"
    );
    assert_eq!(info_some(&mut c, "exp").token, b"next");
}

#[test]
fn extend_and_regrant_push_the_handoff_back() {
    let s = Server::start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    grant(&mut c, "ext", b"holder", 60_000);
    let w = spawn_waiter(&s, "ext", "next", 60_000, 10_000);
    wait_waiters(&mut c, "ext", 1);
    let handoffs = stat(&s, "handoffs");
    // The waiter is queued: a short lease arms the expiry timer, then a longer one follows.
    shorten(&mut c, "ext", b"holder", 300);
    assert_eq!(extend_px(&mut c, "ext", b"holder", 60_000), 1);
    // Past the original expiry (and its timer) the holder still holds it and the waiter still
    // waits. Nothing to await here: the point is that nothing happens.
    thread::sleep(Duration::from_millis(500) * time_scale());
    let held = info_some(&mut c, "ext");
    assert_eq!((held.token.as_slice(), held.waiters), (&b"holder"[..], 1));
    assert!(w.try_recv().is_none(), "the waiter was answered");
    // Shortening the lease makes the handoff happen at the new, earlier expiry.
    let expiry = shorten(&mut c, "ext", b"holder", 100);
    assert_eq!(w.granted().0, b"next");
    assert!(now_ms() > expiry, "handed on before the new expiry");
    assert_eq!(stat(&s, "handoffs"), handoffs + 1);
}

#[test]
fn pexpire_lengthening_a_lock_with_waiters_defers_the_handoff() {
    // The expiry timer armed for the old expiry must notice the lock is still held and wait for
    // the new one: handing off then would make two holders.
    let s = Server::start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    let (_, f0) = grant(&mut c, "pe", b"holder", 60_000);
    let w = spawn_waiter(&s, "pe", "next", 60_000, 10_000);
    wait_waiters(&mut c, "pe", 1);
    // The waiter is queued: a short lease arms the expiry timer.
    let old_expiry = shorten(&mut c, "pe", b"holder", 300);
    let handoffs = stat(&s, "handoffs");
    assert_eq!(as_int(&ok(&mut c, &rcmd!("PEXPIRE", "pe", 60_000))), 1);
    // Past the old expiry: nothing to await, the point is that nothing happens.
    let past = (old_expiry - now_ms()).max(0) as u64 + 200;
    thread::sleep(Duration::from_millis(past) * time_scale());
    let held = info_some(&mut c, "pe");
    assert_eq!(
        (held.token.as_slice(), held.fence, held.waiters),
        (&b"holder"[..], f0, 1),
        "PEXPIRE lengthened the lease"
    );
    assert!(w.try_recv().is_none(), "the waiter was answered");
    assert_eq!(stat(&s, "handoffs"), handoffs, "no handoff");
    assert_eq!(extend_px(&mut c, "pe", b"holder", 1000), 1);
    // Shortened again with PEXPIRE: the timer of the last extension serves the waiter.
    assert_eq!(as_int(&ok(&mut c, &rcmd!("PEXPIRE", "pe", 100))), 1);
    let (token, fence) = w.granted();
    assert_eq!(token, b"next");
    assert!(fence > f0);
    assert_eq!(stat(&s, "handoffs"), handoffs + 1);
}

#[test]
fn timeout_answers_nil_on_time_and_leaves_the_lock_alone() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "t", b"holder", 60_000);
    let w = spawn_waiter(&s, "t", "late", 1_000, 200);
    let answer = w.recv();
    answer.assert_nil();
    let waited = answer.took;
    assert!(
        waited >= Duration::from_millis(195),
        "answered early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1_500) * time_scale(),
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
    let gone = spawn_waiter(&s, "dc", "gone", 60_000, 0);
    wait_waiters(&mut c, "dc", 1);
    let w = spawn_waiter(&s, "dc", "next", 60_000, 10_000);
    wait_waiters(&mut c, "dc", 2);
    assert_eq!(
        as_int(&ok(&mut c, &rcmd!("CLIENT", "KILL", "ID", gone.id))),
        1
    );
    wait_waiters(&mut c, "dc", 1);
    assert_eq!(release(&mut c, "dc", b"holder"), 1);
    assert_eq!(w.granted().0, b"next");
    ping(&mut c);
}

#[test]
fn client_unblock_is_a_timeout() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "ub", b"holder", 60_000);
    let w = spawn_waiter(&s, "ub", "w", 60_000, 0);
    wait_waiters(&mut c, "ub", 1);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("CLIENT", "UNBLOCK", w.id))), 1);
    w.recv().assert_nil();
    // With ERROR, the documented error.
    let w = spawn_waiter(&s, "ub", "w", 60_000, 0);
    wait_waiters(&mut c, "ub", 1);
    assert_eq!(
        as_int(&ok(&mut c, &rcmd!("CLIENT", "UNBLOCK", w.id, "ERROR"))),
        1
    );
    assert_eq!(
        w.recv().error(),
        "UNBLOCKED client unblocked via CLIENT UNBLOCK"
    );
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
    // A function too.
    let library = "#!lua name=blocklib\n\
                   redis.register_function('acquire_blocking', function(keys, args) \
                   return redis.call('LOCK.ACQUIRE', keys[1], 'other', 'PX', 1000, 'BLOCK', 0) \
                   end)";
    assert_eq!(
        as_bytes(&ok(&mut c, &rcmd!("FUNCTION", "LOAD", library))),
        b"blocklib"
    );
    let r = ok(&mut c, &rcmd!("FCALL", "acquire_blocking", 1, "m"));
    assert_eq!(r, Value::Nil, "a function answers as if timed out");
    assert!(started.elapsed() < Duration::from_secs(5));
    let held = info_some(&mut c, "m");
    assert_eq!((held.token.as_slice(), held.waiters), (&b"holder"[..], 0));
    assert_eq!(stat(&s, "waits"), 0, "nothing waited");
}

#[test]
fn a_newcomer_never_overtakes_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "q", b"holder", 60_000);
    let w = spawn_waiter(&s, "q", "first", 60_000, 10_000);
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
    assert_eq!(w.granted().0, b"first");
    assert_eq!(info_some(&mut c, "q").token, b"first");
    // Outside a transaction too: free with DEL, then acquire at once.
    let w = spawn_waiter(&s, "q", "second", 60_000, 10_000);
    wait_waiters(&mut c, "q", 1);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("DEL", "q"))), 1);
    assert!(acquire(&mut c, "q", b"newcomer", 1000).is_none());
    assert_eq!(w.granted().0, b"second");
}

#[test]
fn a_grant_and_a_timeout_in_the_same_pass_never_lose_the_reply() {
    let s = Server::start();
    let mut c = s.conn();
    for round in 0..5 {
        let key = format!("race{round}");
        grant(&mut c, &key, b"holder", 60_000);
        let w = spawn_waiter(&s, &key, "w", 60_000, 100);
        wait_waiters(&mut c, &key, 1);
        // The server sleeps past the waiter's deadline, then releases in the same pass.
        let replies: Value = redis::pipe()
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.3")
            .cmd("LOCK.RELEASE")
            .arg(&key)
            .arg("holder")
            .query(&mut c)
            .unwrap();
        assert_eq!(
            replies,
            Value::Array(vec![Value::Okay, Value::Int(1)]),
            "DEBUG SLEEP, LOCK.RELEASE"
        );
        let answer = w.recv();
        let held = info(&mut c, &key);
        match answer.reply.as_ref().map(parse_grant) {
            Ok(Some((token, fence))) => {
                let held = held.expect("the waiter was told it holds the lock");
                assert_eq!(
                    (held.token, held.fence),
                    (token, fence),
                    "reply matches the lock"
                );
            }
            Ok(None) => assert!(
                held.is_none_or(|h| h.token != b"w"),
                "the waiter got nil but holds the lock"
            ),
            Err(e) => panic!("the waiter got an error: {e}"),
        }
        ping(&mut c);
    }
}

#[test]
fn waiter_counts_in_lock_info() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "n", b"holder", 60_000);
    let short = spawn_waiter(&s, "n", "a", 1000, 300);
    let _long1 = spawn_waiter(&s, "n", "b", 1000, 0);
    let _long2 = spawn_waiter(&s, "n", "c", 1000, 0);
    wait_waiters(&mut c, "n", 3);
    short.recv().assert_nil();
    wait_waiters(&mut c, "n", 2);
}

#[test]
fn renamed_lock_frees_the_old_name_for_its_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "old", b"holder", 60_000);
    let w = spawn_waiter(&s, "old", "w", 60_000, 10_000);
    wait_waiters(&mut c, "old", 1);
    assert_eq!(ok(&mut c, &rcmd!("RENAME", "old", "new")), Value::Okay);
    let (token, fence) = w.granted();
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
    let handoffs = stat(&m, "handoffs");
    grant(&mut mc, "rel", b"holder", 60_000);
    let w1 = spawn_waiter(&m, "rel", "w1", 60_000, 10_000);
    wait_waiters(&mut mc, "rel", 1);
    assert_eq!(release(&mut mc, "rel", b"holder"), 1);
    let (t1, f1) = w1.granted();
    grant(&mut mc, "exp", b"holder", 60_000);
    let w2 = spawn_waiter(&m, "exp", "w2", 60_000, 10_000);
    wait_waiters(&mut mc, "exp", 1);
    shorten(&mut mc, "exp", b"holder", 100);
    let (t2, f2) = w2.granted();
    assert_eq!(stat(&m, "handoffs"), handoffs + 2, "both were handoffs");
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
    let w = spawn_waiter(&s, "mv", "w", 60_000, 10_000);
    wait_waiters(&mut c, "mv", 1);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("MOVE", "mv", 1))), 1);
    let (token, fence) = w.granted();
    assert_eq!(token, b"w");
    assert!(fence > f0);
    // SWAPDB raises no key events: the waiter in db 0 is served all the same.
    grant(&mut c, "sw", b"holder", 60_000);
    let w = spawn_waiter(&s, "sw", "w", 60_000, 10_000);
    wait_waiters(&mut c, "sw", 1);
    ok(&mut c, &rcmd!("SWAPDB", 0, 1));
    let (token, _) = w.granted();
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
        [
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> \
             replica?)",
            "READONLY You can't write against a read only replica."
        ]
        .contains(&text.as_str()),
        "{text}"
    );
    ok(&mut c, &rcmd!("REPLICAOF", "NO", "ONE"));
}

#[test]
fn a_lock_overwritten_with_set_answers_its_waiters_wrongtype() {
    // SET replaces the lock with a string: the name now holds another type, so the waiter gets
    // at once what a new LOCK.ACQUIRE would get, WRONGTYPE, instead of waiting on a name that
    // may never be a lock again; the string is left alone, and nothing is granted.
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "ow", b"holder", 60_000);
    let w = spawn_waiter(&s, "ow", "next", 60_000, 0);
    wait_waiters(&mut c, "ow", 1);
    let handoffs = stat(&s, "handoffs");
    assert_eq!(ok(&mut c, &rcmd!("SET", "ow", "v")), Value::Okay);
    let answer = w.recv();
    assert_eq!(
        answer.error(),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(stat(&s, "handoffs"), handoffs);
    assert_eq!(as_bytes(&ok(&mut c, &rcmd!("GET", "ow"))), b"v");
    assert_eq!(
        err(&mut c, &rcmd!("LOCK.ACQUIRE", "ow", "t", "PX", 1000)),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(stat(&s, "waiters"), 0);
    // Once the string is gone the name is an ordinary free lock again.
    assert_eq!(as_int(&ok(&mut c, &rcmd!("DEL", "ow"))), 1);
    grant(&mut c, "ow", b"later", 1000);
}

#[test]
fn a_grant_whose_waiter_disconnected_before_the_reply_is_revoked() {
    // The waiter is granted (its reply queued) and killed in the same transaction, before the
    // reply can be written: the module gives the lock back and hands it to the next waiter.
    // Leases are long, so only the revocation, not an expiry, can serve the next waiter in time.
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "rv", b"holder", 60_000);
    let doomed = spawn_waiter(&s, "rv", "doomed", 60_000, 0);
    wait_waiters(&mut c, "rv", 1);
    let next = spawn_waiter(&s, "rv", "next", 60_000, 5_000);
    wait_waiters(&mut c, "rv", 2);
    let handoffs = stat(&s, "handoffs");
    let replies: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("rv")
        .arg("holder")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(doomed.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, Value::Array(vec![Value::Int(1), Value::Int(1)]));
    assert!(
        doomed.recv().reply.is_err(),
        "the killed waiter's connection closes without a grant"
    );
    let answer = next.recv();
    let (token, fence) = answer.granted();
    assert_eq!(token, b"next");
    assert!(fence > f0);
    assert!(
        answer.took < Duration::from_millis(5_000),
        "served before its timeout"
    );
    // Two handoffs: to the doomed waiter (revoked), then to the next one.
    assert_eq!(stat(&s, "handoffs"), handoffs + 2);
    let held = info_some(&mut c, "rv");
    assert_eq!(
        (held.token, held.fence, held.waiters),
        (b"next".to_vec(), fence, 0)
    );
    assert!(
        held.ttl > 50_000,
        "the next waiter's own lease: {}",
        held.ttl
    );
}

#[test]
fn config_set_max_block_caps_waits_at_run_time() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "mb", b"holder", 60_000);
    assert_eq!(
        ok(&mut c, &rcmd!("CONFIG", "SET", "redislock.max-block", 200)),
        Value::Okay
    );
    // BLOCK 0 and a longer BLOCK are both cut to 200 ms.
    for block in [0, 60_000] {
        let w = spawn_waiter(&s, "mb", "w", 1000, block);
        let answer = w.recv();
        answer.assert_nil();
        assert!(
            answer.took >= Duration::from_millis(195)
                && answer.took < Duration::from_millis(5_000) * time_scale(),
            "BLOCK {block} under max-block 200 answered after {:?}",
            answer.took
        );
    }
    // Back to no limit: a waiter outlasts the old cap and is served by the release.
    assert_eq!(
        ok(&mut c, &rcmd!("CONFIG", "SET", "redislock.max-block", 0)),
        Value::Okay
    );
    let w = spawn_waiter(&s, "mb", "w", 1000, 0);
    wait_waiters(&mut c, "mb", 1);
    assert!(
        w.recv_within(Duration::from_millis(400)).is_none(),
        "answered although max-block is 0 again"
    );
    assert_eq!(release(&mut c, "mb", b"holder"), 1);
    assert_eq!(w.granted().0, b"w");
}

/// A release handing an exclusive lock to the next exclusive waiter rewrites the key where it
/// stands: each new holder has its own token (of any length), data, lease and a higher fence,
/// as a grant of a free key would give it, here, on the replica and after a restart from the
/// AOF.
#[test]
fn handoffs_in_place_carry_each_waiter_s_own_token_data_and_lease() {
    let mut s = Server::builder().set("appendonly", "yes").start();
    let r = Server::start_replica_of(&s);
    let mut c = s.conn();
    let long = "L".repeat(300);
    // (token, lease, DATA)
    let chain: [(&str, i64, Option<&str>); 4] = [
        ("a", 5_000, Some("first data")),
        (&long, 40_000, None),
        ("bb", 20_000, Some("x")),
        ("c", 7_000, None),
    ];
    let (_, mut fence) = grant(&mut c, "chain", b"holder", 60_000);
    let waiters: Vec<Waiter> = chain
        .iter()
        .enumerate()
        .map(|(i, (token, px, data))| {
            let options: Vec<&str> = data.map(|d| vec!["DATA", d]).unwrap_or_default();
            let w = spawn_waiter_with(&s, "chain", token, *px, 30_000, &options);
            wait_waiters(&mut c, "chain", i as i64 + 1);
            w
        })
        .collect();
    let mut holder = b"holder".to_vec();
    for (i, ((token, px, data), w)) in chain.iter().zip(&waiters).enumerate() {
        assert_eq!(release(&mut c, "chain", &holder), 1);
        let (got, got_fence) = w.granted();
        assert_eq!(got, token.as_bytes());
        assert!(got_fence > fence, "fence {got_fence} after {fence}");
        fence = got_fence;
        let shown = info_some(&mut c, "chain");
        assert_eq!(
            (shown.token.as_slice(), shown.fence, shown.waiters),
            (token.as_bytes(), fence, (chain.len() - i - 1) as i64)
        );
        let ttl = pttl(&mut c, "chain");
        assert!(
            ttl <= *px && ttl > px - 3_000,
            "{token}: PTTL {ttl} of {px}"
        );
        let pairs = field_pairs(&ok(&mut c, &rcmd!("LOCK.INFO", "chain")));
        let shown_data = pairs
            .iter()
            .find(|(k, _)| k == b"data")
            .map(|(_, v)| as_bytes(v));
        assert_eq!(
            shown_data.as_deref(),
            data.map(str::as_bytes),
            "{token}'s data"
        );
        holder = got;
    }
    wait_replica_caught_up(&s, &r);
    let value = rcmd!("DEBUG", "DIGEST-VALUE", "chain");
    assert_eq!(ok(&mut r.conn(), &value), ok(&mut c, &value), "the replica");
    let digest = ok(&mut c, &rcmd!("DEBUG", "DIGEST"));
    s.kill9_and_restart();
    assert_eq!(
        ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST")),
        digest,
        "the AOF"
    );
}
