//! Observers under the server states that hold writes back or change roles: client pauses, a
//! replica, loading, a failover. Observers only read: they answer and time out on time in every
//! state, and never hang past their timeout.

use std::io::Write;
use std::time::{Duration, Instant};

use super::*;
use crate::common::*;

/// Within `limit` (scaled), from `start`.
#[track_caller]
fn within(start: Instant, limit: Duration, what: &str) {
    let took = start.elapsed();
    assert!(took < limit * time_scale(), "{what}: took {took:?}");
}

#[test]
fn a_client_pause_neither_holds_observers_back_nor_makes_them_hang() {
    for pause in ["WRITE", "ALL"] {
        let s = Server::start();
        let mut c = s.conn();
        let (_, f) = grant(&mut c, "k", b"a", 60_000);
        let (_, g) = grant(&mut c, "stays", b"a", 60_000);
        let timing_out = spawn_observer(&s, "stays", g, 200);
        let expiring = spawn_observer(&s, "k", f, 10_000);
        // The lease is cut short in the same read as the pause: it ends during the pause.
        let mut pipe = RawConn::connect(&s);
        pipe.stream()
            .write_all(&resp_commands(&[
                &["LOCK.EXTEND", "k", "a", "PX", "150"][..],
                &["CLIENT", "PAUSE", "3000", pause][..],
            ]))
            .unwrap();
        let paused_at = Instant::now();
        assert_eq!(pipe.read(), Ok(Resp::Int(1)));
        assert_eq!(pipe.read(), Ok(Resp::Simple(b"OK".to_vec())));
        // The deadline is kept.
        let r = timing_out.recv();
        r.assert_nil();
        assert!(
            r.took < Duration::from_millis(200 + 500) * time_scale(),
            "{pause}: {:?}",
            r.took
        );
        // The lease ended: the lock is gone for every reader, though the pause keeps the
        // server from deleting it.
        assert_eq!(fence_of(&expiring.recv()), 0, "{pause}");
        assert!(
            paused_at.elapsed() < Duration::from_millis(2500),
            "{pause}: answered during the pause"
        );
        if pause == "WRITE" {
            // A read: it runs during a write pause.
            let mut r = RawConn::connect(&s);
            let t = Instant::now();
            assert_eq!(
                r.call(&["LOCK.OBSERVE", "k"]),
                Resp::Array(vec![Resp::Int(0), Resp::Nil])
            );
            within(
                t,
                Duration::from_millis(500),
                "OBSERVE during CLIENT PAUSE WRITE",
            );
        }
        ok(&mut c, &rcmd!("CLIENT", "UNPAUSE"));
        assert_eq!(observers(&s), 0);
    }
}

#[test]
fn a_replica_answers_observers_with_its_master_s_changes() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let mut rc = r.conn();
    assert_eq!(observe(&mut rc, "k"), (0, None));
    // A grant, replayed.
    let o = spawn_observer(&r, "k", 0, 10_000);
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    assert_eq!(fence_of(&o.recv()), f, "the master's grant");
    assert_eq!(observe(&mut rc, "k"), (f, None));
    // A release handing the lock to a waiter reaches the replica as one effect: one change.
    for _ in 0..5 {
        let held = observe(&mut rc, "k").0;
        let w = spawn_waiter(&m, "k", "b", 60_000, 10_000);
        wait_waiters(&mut c, "k", 1);
        let obs: Vec<Observer> = (0..4)
            .map(|_| spawn_observer(&r, "k", held, 10_000))
            .collect();
        let holder = info_some(&mut c, "k").token;
        assert_eq!(release(&mut c, "k", &holder), 1);
        let (_, g) = w.granted();
        for o in &obs {
            assert_eq!(fence_of(&o.recv()), g, "never [0, nil] between");
        }
        // b hands back to a for the next round.
        let w = spawn_waiter(&m, "k", "a", 60_000, 10_000);
        wait_waiters(&mut c, "k", 1);
        assert_eq!(release(&mut c, "k", b"b"), 1);
        w.granted();
        wait_replica_caught_up(&m, &r);
    }
    // A release with nobody waiting: no holder. An expiry, decided by the master.
    let held = observe(&mut rc, "k").0;
    let o = spawn_observer(&r, "k", held, 10_000);
    assert_eq!(release(&mut c, "k", b"a"), 1);
    assert_eq!(fence_of(&o.recv()), 0, "the release");
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    wait_replica_caught_up(&m, &r);
    let o = spawn_observer(&r, "k", f, 10_000);
    assert_eq!(extend_px(&mut c, "k", b"a", 100), 1);
    assert_eq!(fence_of(&o.recv()), 0, "the expiry");
    // Shared holds replayed one by one.
    let o = spawn_observer(&r, "rw", 0, 10_000);
    let r1 = crate::kinds::acquire_with(&mut c, "rw", "r1", 60_000, &["SHARED"]).unwrap();
    assert_eq!(fence_of(&o.recv()), r1);
    let o = spawn_observer(&r, "rw", r1, 10_000);
    assert_eq!(release(&mut c, "rw", b"r1"), 1);
    assert_eq!(fence_of(&o.recv()), 0);
    // Timeouts on a replica.
    let o = spawn_observer(&r, "k", 0, 100);
    o.recv().assert_nil();
    assert_eq!(observers(&r), 0);
}

/// `DEBUG RELOAD` empties the dataset and loads it again: no change for an observer. A load slow
/// enough to outlast an observer's timeout ends its wait as soon as it is done, and a command
/// sent meanwhile is answered `LOADING` (the server's rule for reads while loading).
#[test]
fn a_reload_is_no_change_and_a_slow_load_ends_waits_on_time() {
    let s = Server::builder()
        .set("loading-process-events-interval-bytes", "1024")
        .start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    let o = spawn_observer(&s, "k", f, 10_000);
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    still_waiting(
        &o,
        Duration::from_millis(200),
        "the same lock after DEBUG RELOAD",
    );
    assert_eq!(release(&mut c, "k", b"a"), 1);
    assert_eq!(fence_of(&o.recv()), 0);
    // A slow load: 4000 keys at 250 µs each.
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    ok(&mut c, &rcmd!("DEBUG", "POPULATE", 4000));
    ok(&mut c, &rcmd!("CONFIG", "SET", "key-load-delay", 250));
    let o = spawn_observer(&s, "k", f, 200);
    let mut reloading = RawConn::connect(&s);
    reloading.send(&["DEBUG", "RELOAD"]);
    let mut during = RawConn::connect(&s);
    let seen = during.call(&["LOCK.OBSERVE", "k"]);
    assert!(
        matches!(&seen, Resp::Error(e) if e.starts_with(b"LOADING")),
        "during the load: {seen:?}"
    );
    assert_eq!(reloading.read(), Ok(Resp::Simple(b"OK".to_vec())));
    let loaded = Instant::now();
    let r = o.recv();
    r.assert_nil();
    assert!(r.took > Duration::from_millis(200));
    let late = r.at.saturating_duration_since(loaded);
    assert!(
        late < Duration::from_millis(300) * time_scale(),
        "answered {late:?} after the load"
    );
    ok(&mut c, &rcmd!("CONFIG", "SET", "key-load-delay", 0));
}

/// FAILOVER: the old master ends every blocked call when it becomes a replica (the server's
/// `UNBLOCKED`), observers included; observers of the new master keep watching and see its
/// changes; none hangs.
#[test]
fn a_failover_answers_every_observer() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    wait_replica_caught_up(&m, &r);
    let on_old: Vec<Observer> = (0..3).map(|_| spawn_observer(&m, "k", f, 20_000)).collect();
    let on_new: Vec<Observer> = (0..3).map(|_| spawn_observer(&r, "k", f, 20_000)).collect();
    let t = Instant::now();
    ok(&mut c, &rcmd!("FAILOVER", "TIMEOUT", 10_000));
    r.wait_info("replication", "role", "master");
    m.wait_info("replication", "role", "slave");
    for o in &on_old {
        match o.recv_within(Duration::from_secs(5)).map(|a| a.reply) {
            Some(Err(e)) => assert!(e.starts_with("UNBLOCKED"), "{e}"),
            Some(Ok(v)) => assert_eq!(seen_of(&v).map(|x| x.0), Some(f), "{v:?}"),
            None => panic!("an observer of the old master hangs"),
        }
    }
    within(t, Duration::from_secs(8), "the old master's observers");
    m.wait_info("replication", "master_link_status", "up");
    // The new master: the same lock, no change; its release is one.
    for o in &on_new {
        still_waiting(
            o,
            Duration::from_millis(50),
            "the new master holds the same lock",
        );
    }
    let on_replica = spawn_observer(&m, "k", f, 20_000);
    assert_eq!(release(&mut r.conn(), "k", b"a"), 1);
    for o in on_new.iter().chain([&on_replica]) {
        assert_eq!(fence_of(&o.recv()), 0);
    }
    assert_eq!(observers(&m) + observers(&r), 0);
}
