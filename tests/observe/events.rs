//! What wakes an observer blocked in `LOCK.OBSERVE … AFTER fence BLOCK …`: grants, releases,
//! handoffs (one change, never `[0, nil]` between), lease ends and expiries, deletions,
//! flushes, SWAPDB, RENAME, MOVE, RESTORE, another type taking the name; timeouts, CLIENT
//! UNBLOCK and closed connections; and that observers are not waiters.

use std::time::{Duration, Instant};

use redis::Value;

use super::*;
use crate::common::*;

#[test]
fn a_grant_and_a_release_wake_observers() {
    let s = Server::start();
    let mut c = s.conn();
    let o = spawn_observer(&s, "k", 0, 10_000);
    still_waiting(&o, Duration::from_millis(50), "nothing changed");
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    assert_eq!(fence_of(&o.recv()), f, "the grant");
    let o = spawn_observer(&s, "k", f, 10_000);
    // A re-grant and an extend keep the fence: no change.
    grant(&mut c, "k", b"a", 60_000);
    assert_eq!(extend_px(&mut c, "k", b"a", 50_000), 1);
    still_waiting(&o, Duration::from_millis(50), "same fence");
    assert_eq!(release(&mut c, "k", b"a"), 1);
    assert_eq!(fence_of(&o.recv()), 0, "the release");
    // Shared holds: a new reader is a new highest fence; the last one leaving, no holder.
    let o = spawn_observer(&s, "rw", 0, 10_000);
    let r1 = crate::kinds::acquire_with(&mut c, "rw", "r1", 60_000, &["SHARED"]).unwrap();
    assert_eq!(fence_of(&o.recv()), r1);
    let o = spawn_observer(&s, "rw", r1, 10_000);
    let r2 = crate::kinds::acquire_with(&mut c, "rw", "r2", 60_000, &["SHARED"]).unwrap();
    assert_eq!(fence_of(&o.recv()), r2, "a higher fence");
    let o = spawn_observer(&s, "rw", r2, 10_000);
    // r1 leaves: the highest fence is still r2's, no change.
    assert_eq!(release(&mut c, "rw", b"r1"), 1);
    still_waiting(&o, Duration::from_millis(50), "r2 still holds");
    assert_eq!(release(&mut c, "rw", b"r2"), 1);
    assert_eq!(fence_of(&o.recv()), 0, "the last reader left");
    assert_eq!(observers(&s), 0);
}

/// Holds `key` with `a`, queues `b` for it, and blocks `n` observers on `a`'s fence.
fn contended(s: &Server, key: &str, n: usize) -> (i64, Waiter, Vec<Observer>) {
    let mut c = s.conn();
    let (_, f) = grant(&mut c, key, b"a", 60_000);
    let w = spawn_waiter(s, key, "b", 60_000, 10_000);
    wait_waiters(&mut c, key, 1);
    let obs = (0..n).map(|_| spawn_observer(s, key, f, 10_000)).collect();
    (f, w, obs)
}

/// A release, a deletion or an expiry that hands the lock straight to a waiter is one change:
/// every observer sees the new holder, none sees `[0, nil]`.
#[test]
fn a_handoff_is_one_change() {
    let s = Server::start();
    let mut c = s.conn();
    // Expiry: with Redis's active expiry off, the module's own look finds it.
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    for round in 0..3 {
        for how in ["release", "del", "unlink", "flushall", "expiry"] {
            let what = format!("{how}, round {round}");
            let (f, w, obs) = contended(&s, "k", 8);
            match how {
                "release" => assert_eq!(release(&mut c, "k", b"a"), 1),
                "del" => assert_eq!(as_int(&ok(&mut c, &rcmd!("DEL", "k"))), 1),
                "unlink" => assert_eq!(as_int(&ok(&mut c, &rcmd!("UNLINK", "k"))), 1),
                "flushall" => drop(ok(&mut c, &rcmd!("FLUSHALL"))),
                _ => assert_eq!(extend_px(&mut c, "k", b"a", 30), 1),
            }
            let (_, next) = w.granted();
            assert!(next > f, "{what}");
            for o in &obs {
                assert_eq!(
                    fence_of(&o.recv()),
                    next,
                    "{what}: the new holder, in one change"
                );
            }
            assert_eq!(release(&mut c, "k", b"b"), 1);
        }
    }
    // A semaphore whose holder's lease ends, its place handed to a waiter.
    let p1 = crate::kinds::place(&mut c, "sem", "p1", 60_000, 1);
    let w = spawn_waiter_with(&s, "sem", "p2", 60_000, 10_000, &["LIMIT", "1"]);
    wait_waiters(&mut c, "sem", 1);
    let o = spawn_observer(&s, "sem", p1, 10_000);
    assert_eq!(extend_px(&mut c, "sem", b"p1", 30), 1);
    let (_, p2) = w.granted();
    assert_eq!(
        fence_of(&o.recv()),
        p2,
        "the lease end and its handoff, one change"
    );
}

/// Holds that end by themselves wake their observers without any client touching the key:
/// an exclusive lock's expiry (Redis's active expiry off), a holder's lease end.
#[test]
fn expiries_and_lease_ends_wake_observers() {
    let s = Server::start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    let o = spawn_observer(&s, "k", f, 10_000);
    assert_eq!(extend_px(&mut c, "k", b"a", 100), 1);
    let expiry = pexpiretime(&mut c, "k");
    let r = o.recv();
    assert_eq!(fence_of(&r), 0);
    let late = now_ms() - expiry;
    assert!(
        late < 100 * time_scale() as i64,
        "answered {late} ms after the expiry"
    );
    // One reader's lease ends: the highest live fence is the other's.
    let r1 = crate::kinds::acquire_with(&mut c, "rw", "r1", 60_000, &["SHARED"]).unwrap();
    let r2 = crate::kinds::acquire_with(&mut c, "rw", "r2", 60_000, &["SHARED"]).unwrap();
    let o = spawn_observer(&s, "rw", r2, 10_000);
    assert_eq!(extend_px(&mut c, "rw", b"r2", 50), 1);
    assert_eq!(fence_of(&o.recv()), r1);
    // The last one's: no holder.
    let o = spawn_observer(&s, "rw", r1, 10_000);
    assert_eq!(extend_px(&mut c, "rw", b"r1", 50), 1);
    assert_eq!(fence_of(&o.recv()), 0);
}

/// Keyspace changes made by Redis's own commands: the lock leaves a name, or comes to one.
#[test]
fn deletions_flushes_and_moves_wake_observers() {
    let s = Server::start();
    let mut c = s.conn();
    // The lock leaves: observers of its name see no holder.
    for free in [
        rcmd!("DEL", "k"),
        rcmd!("UNLINK", "k"),
        rcmd!("FLUSHDB"),
        rcmd!("FLUSHALL", "ASYNC"),
        rcmd!("SWAPDB", 0, 1),
        rcmd!("RENAME", "k", "k2"),
        rcmd!("MOVE", "k", 1),
    ] {
        let what = describe(&free);
        ok(&mut c, &rcmd!("FLUSHALL"));
        let (_, f) = grant(&mut c, "k", b"a", 60_000);
        let o = spawn_observer(&s, "k", f, 10_000);
        ok(&mut c, &free);
        assert_eq!(answered(&o, &what), 0, "{what}");
    }
    // The lock comes: observers of the new name (AFTER 0) see it, with its fence.
    let moves: [(&str, i64, redis::Cmd); 4] = [
        ("k2", 0, rcmd!("RENAME", "k", "k2")),
        ("k", 1, rcmd!("MOVE", "k", 1)),
        ("k", 1, rcmd!("SWAPDB", 0, 1)),
        ("k2", 0, rcmd!("COPY", "k", "k2")),
    ];
    for (name, db, cmd) in moves {
        let what = describe(&cmd);
        ok(&mut c, &rcmd!("FLUSHALL"));
        let (_, f) = grant(&mut c, "k", b"a", 60_000);
        let o = spawn_observer_db(&s, db, name, 0, 10_000);
        ok(&mut c, &cmd);
        assert_eq!(answered(&o, &what), f, "{what}");
    }
    // The same name in another database is another lock: its observer stays.
    ok(&mut c, &rcmd!("FLUSHALL"));
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    let other_db = spawn_observer_db(&s, 1, "k2", 0, 10_000);
    let here = spawn_observer_db(&s, 0, "k2", 0, 10_000);
    ok(&mut c, &rcmd!("RENAME", "k", "k2"));
    assert_eq!(answered(&here, "RENAME to k2 of database 0"), f);
    still_waiting(&other_db, Duration::from_millis(100), "k2 of database 1");
    ok(&mut c, &rcmd!("MOVE", "k2", 1));
    assert_eq!(answered(&other_db, "MOVE to database 1"), f);
    // RESTORE of a lock's DUMP under a watched name, onto nothing and over another lock.
    ok(&mut c, &rcmd!("FLUSHALL"));
    let (_, f) = grant(&mut c, "src", b"a", 60_000);
    let dump = as_bytes(&ok(&mut c, &rcmd!("DUMP", "src")));
    let o = spawn_observer(&s, "k", 0, 10_000);
    ok(&mut c, &rcmd!("RESTORE", "k", 60_000, &dump));
    assert_eq!(answered(&o, "RESTORE"), f);
    assert_eq!(release(&mut c, "k", b"a"), 1);
    let (_, g) = grant(&mut c, "k", b"b", 60_000);
    let o = spawn_observer(&s, "k", g, 10_000);
    ok(&mut c, &rcmd!("RESTORE", "k", 60_000, &dump, "REPLACE"));
    assert_eq!(answered(&o, "RESTORE REPLACE"), f);
}

/// Another type taking a lock's name ends the observation with the error an OBSERVE of that key
/// gets. A value of another type put where no lock was has no fence: observers waiting for a
/// lock there (AFTER 0) go on waiting.
#[test]
fn another_type_taking_the_name_answers_wrongtype() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    let o = spawn_observer(&s, "k", f, 10_000);
    ok(&mut c, &rcmd!("SET", "k", "v"));
    assert_eq!(
        o.recv().error(),
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "SET over the lock"
    );
    // A fence gate restored over the lock.
    ok(&mut c, &rcmd!("LOCK.FENCE", "g", 5, "SET", "x", "1"));
    let gate = as_bytes(&ok(&mut c, &rcmd!("DUMP", "g")));
    let (_, f) = grant(&mut c, "k2", b"a", 60_000);
    let o = spawn_observer(&s, "k2", f, 10_000);
    ok(&mut c, &rcmd!("RESTORE", "k2", 0, &gate, "REPLACE"));
    assert_eq!(
        o.recv().error(),
        "WRONGTYPE the key is a fence gate (LOCK.FENCE), not a lock"
    );
    // Where no lock was.
    let list = spawn_observer(&s, "free", 0, 300);
    let g = spawn_observer(&s, "g2", 0, 300);
    ok(&mut c, &rcmd!("RPUSH", "free", "v"));
    ok(&mut c, &rcmd!("LOCK.FENCE", "g2", 5, "SET", "x", "1"));
    list.recv().assert_nil();
    g.recv().assert_nil();
}

#[test]
fn a_timeout_and_client_unblock_answer_nil() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    // Not waited for: on a loaded machine its 150 ms may end before a poll sees it wait.
    let o = spawn_observer_unwaited(&s, 0, "k", f, 150);
    let r = o.recv();
    r.assert_nil();
    assert!(r.took >= Duration::from_millis(150), "{:?}", r.took);
    assert!(
        r.took < Duration::from_millis(150 + 500) * time_scale(),
        "{:?}",
        r.took
    );
    assert_eq!(stat(&s, "observe_timeouts"), 1);
    // redislock.max-block caps BLOCK 0 as it caps LOCK.ACQUIRE's.
    ok(&mut c, &rcmd!("CONFIG", "SET", "redislock.max-block", 100));
    spawn_observer(&s, "k", f, 0).recv().assert_nil();
    ok(&mut c, &rcmd!("CONFIG", "SET", "redislock.max-block", 0));
    let o = spawn_observer(&s, "k", f, 0);
    ok(&mut c, &rcmd!("CLIENT", "UNBLOCK", o.id));
    o.recv().assert_nil();
    let o = spawn_observer(&s, "k", f, 0);
    ok(&mut c, &rcmd!("CLIENT", "UNBLOCK", o.id, "ERROR"));
    assert!(o.recv().error().starts_with("UNBLOCKED"));
    assert_eq!(observers(&s), 0);
    // The lock is untouched; the fence has not moved.
    assert_eq!(info_some(&mut c, "k").fence, f);
}

#[test]
fn a_closed_connection_leaves_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    let mut raws: Vec<RawConn> = (0..20).map(|_| RawConn::connect(&s)).collect();
    let ids: Vec<i64> = raws.iter_mut().map(RawConn::client_id).collect();
    for r in &mut raws {
        r.send(&["LOCK.OBSERVE", "k", "AFTER", &f.to_string(), "BLOCK", "0"]);
    }
    wait_observers(&s, 20);
    let kept = raws.pop().unwrap();
    for r in raws {
        r.close();
    }
    for id in &ids[..19] {
        wait_client_gone(&mut c, *id);
    }
    assert_eq!(observers(&s), 1, "the closed ones left, the open one stays");
    assert_eq!(release(&mut c, "k", b"a"), 1);
    let mut kept = kept;
    assert_eq!(kept.read(), Ok(Resp::Array(vec![Resp::Int(0), Resp::Nil])));
    assert_eq!(observers(&s), 0);
    assert_eq!(stat(&s, "scheduled_jobs"), 0, "nothing left behind");
}

/// Observers take no place in the queue: LOCK.INFO does not count them, a newcomer is granted a
/// free lock at once whatever observes it, a release hands the lock to the first waiter in the
/// releasing command itself.
#[test]
fn observers_are_not_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    let obs: Vec<Observer> = (0..50)
        .map(|_| spawn_observer(&s, "k", 0, 10_000))
        .collect();
    assert_eq!(waiters_of(&mut c, "k"), 0);
    assert_eq!(stat(&s, "waiters"), 0);
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    for o in &obs {
        assert_eq!(fence_of(&o.recv()), f);
    }
    let obs: Vec<Observer> = (0..50)
        .map(|_| spawn_observer(&s, "k", f, 10_000))
        .collect();
    let w = spawn_waiter(&s, "k", "b", 60_000, 10_000);
    wait_waiters(&mut c, "k", 1);
    assert_eq!(info_some(&mut c, "k").waiters, 1, "the waiter alone");
    // The release answers after the handoff it made: the lock is b's when it returns.
    let t = Instant::now();
    assert_eq!(release(&mut c, "k", b"a"), 1);
    assert_eq!(info_some(&mut c, "k").token, b"b".to_vec());
    let (_, g) = w.granted();
    for o in &obs {
        assert_eq!(fence_of(&o.recv()), g);
    }
    assert!(t.elapsed() < Duration::from_secs(2) * time_scale());
    let v = ok(&mut c, &rcmd!("LOCK.INFO", "k"));
    assert_ne!(v, Value::Nil);
}
