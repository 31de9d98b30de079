//! A multi-key request waiting on a master that fails over: its connection is dropped (the
//! master dies, as Sentinel finds it) or it is answered with an error or a redirect (a Cluster
//! failover demotes the master); it is never granted what the new master does not hold, and a
//! new request on the promoted replica is granted every key with fences above every fence
//! seen before.

use std::time::Duration;

use redis::Value;

use super::waiting::{fences_of, spawn_all};
use super::*;
use crate::cluster::{conn_to, key_slot, redirect, Cluster};

/// `REPLICAOF NO ONE` on `s`, waiting for the role change.
fn promote(s: &Server) {
    assert_eq!(
        ok(&mut s.conn(), &rcmd!("REPLICAOF", "NO", "ONE")),
        Value::Okay
    );
    s.wait_info("replication", "role", "master");
}

/// The master dies (`kill -9`) while a multi-key request waits on it; Sentinel promotes its
/// replica. The waiter's connection is dropped, and the promoted replica holds nothing for it;
/// a new request there waits for the inherited holder, then gets every key above the old
/// master's fences.
#[test]
fn a_waiter_on_a_master_that_dies_is_dropped_and_the_promoted_replica_grants_above() {
    let mut a = Server::start();
    let b = Server::start_replica_of(&a);
    let mut ac = a.conn();
    let mut seen = Vec::new();
    for i in 0..20 {
        let keys = [format!("{{s}}:c{}", i % 3), format!("{{s}}:d{}", i % 2)];
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        seen.extend(acquire_all(&mut ac, &keys, "cycle", 60_000).unwrap());
        assert_eq!(release_all(&mut ac, &keys, "cycle"), 2);
    }
    seen.push(grant(&mut ac, "{s}:held", b"holder", 60_000).1);
    let keys = ["{s}:held", "{s}:free", "{s}:c0"];
    let w = spawn_all(&a, &keys, "gone", 60_000, 0, &[]);
    wait_waiters(&mut ac, "{s}:held", 1);
    wait_replicas(&mut ac, 1);
    let max_a = *seen.iter().max().unwrap();

    a.stop(Stop::Kill);
    let answer = w.recv();
    assert!(
        answer.reply.is_err(),
        "a waiter on a dead master gets an error, not {:?}",
        answer.reply
    );
    promote(&b);
    let mut bc = b.conn();
    assert_eq!(holder(&mut bc, "{s}:held"), Some(b"holder".to_vec()));
    for k in &keys[1..] {
        assert!(!exists(&mut bc, k), "{k}: nothing held for the gone waiter");
    }
    // A new request on the promoted replica waits for the inherited holder, then gets all.
    let w = spawn_all(&b, &keys, "new", 60_000, 0, &[]);
    wait_waiters(&mut bc, "{s}:held", 1);
    assert!(w.try_recv().is_none());
    assert_eq!(release(&mut bc, "{s}:held", b"holder"), 1);
    let fences = fences_of(&w);
    assert_eq!(fences.len(), 3);
    for f in &fences {
        assert!(
            *f > max_a,
            "fence {f} after the failover must exceed {max_a}"
        );
        assert!(epoch_of(*f) > epoch_of(max_a), "{max_a} then {f}");
    }
    for k in keys {
        assert_eq!(holder(&mut bc, k), Some(b"new".to_vec()), "{k}");
    }
}

/// `CLUSTER FAILOVER` while a multi-key request waits on the master serving its keys' slot:
/// the waiter is answered (UNBLOCKED, READONLY or MOVED) promptly and granted nothing; the
/// old master redirects the request to the promoted replica, which grants every key above
/// every fence of the shard.
#[test]
fn a_waiter_through_a_cluster_failover_is_answered_and_the_new_master_grants_above() {
    let c = Cluster::start(3, 1);
    let m = c.masters()[0];
    let r = c.replicas_of(m)[0];
    let tag = (0..)
        .map(|n| format!("mf{n}"))
        .find(|t| c.owner(key_slot(t)) == m)
        .unwrap();
    let names: Vec<String> = ["held", "free", "other"]
        .iter()
        .map(|k| format!("{{{tag}}}:{k}"))
        .collect();
    let keys: Vec<&str> = names.iter().map(String::as_str).collect();
    let slot = key_slot(keys[0]);
    let mut mc = conn_to(c.nodes[m].port());
    let mut seen = Vec::new();
    for _ in 0..10 {
        seen.extend(acquire_all(&mut mc, &keys, "cycle", 60_000).unwrap());
        assert_eq!(release_all(&mut mc, &keys, "cycle"), 3);
    }
    seen.push(grant(&mut mc, keys[0], b"holder", 60_000).1);
    let max_before = *seen.iter().max().unwrap();
    let w = spawn_all(&c.nodes[m], &keys, "waiter", 60_000, 0, &[]);
    wait_waiters(&mut mc, keys[0], 1);
    wait_replicas(&mut mc, 1);

    let mut rc = conn_to(c.nodes[r].port());
    assert_eq!(ok(&mut rc, &rcmd!("CLUSTER", "FAILOVER")), Value::Okay);
    c.nodes[r].wait_info("replication", "role", "master");
    let answer = w.recv();
    match &answer.reply {
        Err(e) => assert!(
            e.starts_with("UNBLOCKED")
                || e.starts_with("READONLY")
                || e.starts_with(&format!("MOVED {slot} ")),
            "the waiter on the demoted master: {e}"
        ),
        Ok(v) => panic!("the waiter on the demoted master must not be granted: {v:?}"),
    }
    assert!(
        answer.took < Duration::from_secs(30) * time_scale(),
        "answered after {:?}",
        answer.took
    );
    c.nodes[m].wait_info("replication", "role", "slave");
    c.wait_stable();
    assert_eq!(c.owner(slot), r);

    // The old master redirects; the new one holds the holder's lock and nothing of the waiter.
    let e = run(
        &mut conn_to(c.nodes[m].port()),
        &acquire_all_cmd(&keys, "x", 60_000, &[]),
    )
    .unwrap_err();
    let (kind, moved_slot, to) = redirect(&e).expect("a redirect");
    assert_eq!(
        (kind.as_str(), moved_slot, to),
        ("MOVED", slot, c.nodes[r].port())
    );
    let mut rc = conn_to(c.nodes[r].port());
    assert_eq!(holder(&mut rc, keys[0]), Some(b"holder".to_vec()));
    for k in &keys[1..] {
        assert!(
            !exists(&mut rc, k),
            "{k}: nothing held for the answered waiter"
        );
    }
    let w = spawn_all(&c.nodes[r], &keys, "new", 60_000, 0, &[]);
    wait_waiters(&mut rc, keys[0], 1);
    assert_eq!(release(&mut rc, keys[0], b"holder"), 1);
    let fences = fences_of(&w);
    assert_eq!(fences.len(), 3);
    for f in &fences {
        assert!(*f > max_before, "fence {f} must exceed {max_before}");
        assert!(epoch_of(*f) > epoch_of(max_before), "{max_before} then {f}");
    }
}
