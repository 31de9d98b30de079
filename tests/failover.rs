//! Failover without Cluster, the way Sentinel does it (SPEC "Fencing tokens", README
//! "Failover"): the replica is promoted with `REPLICAOF NO ONE`, the old master is later demoted
//! with `REPLICAOF <new master>` and rejoins as a replica.
//!
//! `tests/replication.rs` covers the fence order of a single promotion; this file follows whole
//! failovers: holders keep their locks across them, split-brain grants of the old master lose
//! when it rejoins, waiters on the demoted master are answered, and failing back raises fences
//! again.

use std::time::Duration;

use crate::common::*;
use redis::{Connection, Value};

/// `REPLICAOF NO ONE` on `s`, waiting for the role change.
fn promote(s: &Server) {
    assert_eq!(
        ok(&mut s.conn(), &rcmd!("REPLICAOF", "NO", "ONE")),
        Value::Okay
    );
    s.wait_info("replication", "role", "master");
}

/// `REPLICAOF 127.0.0.1 <master>` on `s`, waiting until it is synced.
fn demote(s: &Server, master: &Server) {
    assert_eq!(
        ok(
            &mut s.conn(),
            &rcmd!("REPLICAOF", "127.0.0.1", master.port())
        ),
        Value::Okay
    );
    s.wait_info("replication", "role", "slave");
    s.wait_info("replication", "master_link_status", "up");
    wait_replicas(&mut master.conn(), 1);
}

fn digest(con: &mut Connection) -> Vec<u8> {
    as_bytes(&ok(con, &rcmd!("DEBUG", "DIGEST")))
}

#[test]
fn sentinel_style_failover_old_master_rejoins_and_fail_back() {
    let a = Server::start();
    let b = Server::start_replica_of(&a);
    let mut ac = a.conn();

    // History on A: grant/release cycles, then locks that stay held across the failover.
    let mut fences_a = Vec::new();
    for round in 0..20 {
        let k = format!("cycle{}", round % 4);
        fences_a.push(grant(&mut ac, &k, b"c", 60_000).1);
        assert_eq!(release(&mut ac, &k, b"c"), 1);
    }
    let (_, f_held) = grant(&mut ac, "held", b"holder", 60_000);
    let (gen, f_gen) = grant(&mut ac, "generated", b"*", 60_000);
    let (_, f_short) = grant(&mut ac, "short", b"short-holder", 60_000);
    fences_a.extend([f_held, f_gen, f_short]);
    wait_replicas(&mut ac, 1);

    // Sentinel promotes B. A does not know yet and keeps granting (split brain).
    promote(&b);
    let mut bc = b.conn();
    let (_, f_stale) = grant(&mut ac, "contested", b"stale-client", 60_000);
    fences_a.push(f_stale);
    for i in 0..50 {
        fences_a.push(grant(&mut ac, &format!("a-only{i}"), b"a", 60_000).1);
    }
    assert_eq!(
        release(&mut ac, "held", b"holder"),
        1,
        "A releases in its own world"
    );
    fences_a.push(grant(&mut ac, "held", b"stale-client", 60_000).1);
    let max_a = *fences_a.iter().max().unwrap();

    // On B, holders still hold, with the same token and fence, and their tokens work.
    let i = info_some(&mut bc, "held");
    assert_eq!((i.token.as_slice(), i.fence), (&b"holder"[..], f_held));
    assert!(i.ttl > 50_000, "TTL kept: {}", i.ttl);
    assert_eq!(info_some(&mut bc, "generated").token, gen);
    assert_eq!(
        grant(&mut bc, "held", b"holder", 60_000),
        (b"holder".to_vec(), f_held),
        "the holder's retry re-grants with the same fence"
    );
    assert_eq!(acquire(&mut bc, "held", b"stale-client", 60_000), None);
    assert_eq!(extend_px(&mut bc, "generated", &gen, 90_000), 1);
    assert_eq!(info_some(&mut bc, "generated").fence, f_gen);

    // New grants on B exceed every fence A issued, including A's split-brain grants.
    let (_, f_contested) = grant(&mut bc, "contested", b"new-client", 60_000);
    assert!(
        f_contested > max_a,
        "fence {f_contested} on the promoted server must exceed {max_a}"
    );
    assert_eq!(
        (epoch_of(max_a), epoch_of(f_contested)),
        (0, 1),
        "B grants in the next epoch: {max_a} then {f_contested}"
    );
    let mut fences_b = vec![f_contested];
    for i in 0..4 {
        let (_, f) = grant(&mut bc, &format!("cycle{i}"), b"b", 60_000);
        assert!(f > max_a, "fence {f} must exceed {max_a}");
        fences_b.push(f);
    }
    // A lock inherited from A expires on B and its waiter is served there, above A's fences.
    let w = spawn_waiter(&b, "short", "short-waiter", 30_000, 5_000);
    wait_waiters(&mut bc, "short", 1);
    let handoffs = stat(&b, "handoffs");
    assert_eq!(extend_px(&mut bc, "short", b"short-holder", 300), 1);
    let answer = w.recv();
    let (_, f_short2) = answer.granted();
    let took = answer.took;
    assert!(
        took < Duration::from_secs(2) * time_scale(),
        "served at the inherited lock's expiry: {took:?}"
    );
    assert!(f_short2 > max_a);
    assert_eq!(stat(&b, "handoffs"), handoffs + 1, "served by a handoff");
    fences_b.push(f_short2);

    // A waiter blocked on A when Sentinel demotes A is answered at once, and not granted.
    let w = spawn_waiter(&a, "contested", "waiter-on-a", 30_000, 10_000);
    wait_waiters(&mut ac, "contested", 1);
    demote(&a, &b);
    let answer = w.recv();
    let (r, took) = (&answer.reply, answer.took);
    eprintln!("waiter on the demoted master answered {r:?} after {took:?}");
    // Redis answers UNBLOCKED; the module may answer first (READONLY).
    assert!(
        [
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> \
             replica?)",
            "READONLY You can't write against a read only replica."
        ]
        .contains(&answer.error()),
        "waiter on the demoted master: {r:?}"
    );
    assert!(
        took < Duration::from_secs(3) * time_scale(),
        "answered after {took:?}: {r:?}"
    );

    // A rejoined: it holds B's locks, its split-brain grants are gone, writes are refused.
    let mut ac = a.conn();
    let i = info_some(&mut ac, "contested");
    assert_eq!(
        (i.token.as_slice(), i.fence),
        (&b"new-client"[..], f_contested)
    );
    let i = info_some(&mut ac, "held");
    assert_eq!((i.token.as_slice(), i.fence), (&b"holder"[..], f_held));
    assert!(
        !exists(&mut ac, "a-only0"),
        "A's split-brain grants are discarded"
    );
    assert_eq!(info_some(&mut ac, "short").token, b"short-waiter");
    assert_eq!(digest(&mut ac), digest(&mut bc), "A mirrors B");
    let e = err(&mut ac, &rcmd!("LOCK.RELEASE", "held", "holder"));
    assert_eq!(e, "READONLY You can't write against a read only replica.");

    // The holder releases on B; the release reaches A.
    assert_eq!(release(&mut bc, "held", b"holder"), 1);
    let (_, f) = grant(&mut bc, "held", b"next", 60_000);
    assert!(f > max_a);
    fences_b.push(f);
    wait_replicas(&mut bc, 1);
    assert_eq!(info_some(&mut ac, "held").token, b"next");
    let max_b = *fences_b.iter().max().unwrap();

    // Fail back: A is promoted again, B demoted. A's fences now exceed B's (and its own old
    // ones); B's locks are still held on A.
    promote(&a);
    demote(&b, &a);
    let mut ac = a.conn();
    let i = info_some(&mut ac, "contested");
    assert_eq!(
        (i.token.as_slice(), i.fence),
        (&b"new-client"[..], f_contested)
    );
    assert_eq!(release(&mut ac, "contested", b"new-client"), 1);
    let (_, f_back) = grant(&mut ac, "contested", b"after-fail-back", 60_000);
    assert!(
        f_back > max_b && f_back > max_a,
        "fence {f_back} after failing back must exceed B's {max_b} and A's {max_a}"
    );
    assert_eq!(
        (epoch_of(max_a), epoch_of(max_b), epoch_of(f_back)),
        (0, 1, 2),
        "each promotion moves to a higher epoch: {max_a} < {max_b} < {f_back}"
    );
    wait_replicas(&mut ac, 1);
    let mut bc = b.conn();
    assert_eq!(info_some(&mut bc, "contested").fence, f_back);
}

#[test]
fn promoted_replica_that_missed_the_last_grants_still_fences_above_them() {
    // The replica's link is cut (as in a partition), the master goes on granting, then the
    // replica is promoted: it never saw those grants, yet its fences exceed them.
    let a = Server::start();
    let b = Server::start_replica_of(&a);
    let mut ac = a.conn();
    grant(&mut ac, "k", b"before", 60_000);
    wait_replicas(&mut ac, 1);
    // Cut the link from the master's side: B stays a replica, disconnected, while A grants.
    ok(&mut ac, &rcmd!("CONFIG", "SET", "requirepass", "partition"));
    ok(&mut ac, &rcmd!("CLIENT", "KILL", "TYPE", "replica"));
    b.wait_info("replication", "master_link_status", "down");
    let mut max_a = 0;
    for i in 0..100 {
        max_a = max_a.max(grant(&mut ac, &format!("lost{i}"), b"a", 60_000).1);
    }
    assert_eq!(release(&mut ac, "k", b"before"), 1);
    max_a = max_a.max(grant(&mut ac, "k", b"lost", 60_000).1);

    promote(&b);
    let mut bc = b.conn();
    assert!(!exists(&mut bc, "lost0"), "B never saw the last grants");
    assert_eq!(info_some(&mut bc, "k").token, b"before");
    assert_eq!(release(&mut bc, "k", b"before"), 1);
    let (_, f) = grant(&mut bc, "k", b"after", 60_000);
    assert!(f > max_a, "fence {f} must exceed the unseen {max_a}");
    assert!(
        epoch_of(f) > epoch_of(max_a),
        "the unseen grants are outranked by the epoch: {max_a} then {f}"
    );
    let (_, f) = grant(&mut bc, "lost0", b"after", 60_000);
    assert!(f > max_a, "fence {f} must exceed the unseen {max_a}");

    // A, demoted, drops what B never had.
    ok(&mut ac, &rcmd!("CONFIG", "SET", "requirepass", ""));
    demote(&a, &b);
    let mut ac = a.conn();
    assert_eq!(info_some(&mut ac, "k").token, b"after");
    assert!(!exists(&mut ac, "lost1"));
    assert_eq!(digest(&mut ac), digest(&mut bc));
}
