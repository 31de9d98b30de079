//! A replica on the previous release under a master of this release that hands locks on with
//! `DATA` (docs/operations.md, "Upgrades and downgrades"): the previous release does not know
//! `LOCK._APPLY … DATA` and refuses it, so the new holder's grant is missing there, as
//! documented; but the release that came before it is an effect of its own, which the replica
//! applies. It never keeps the holder that the master released, so a failover to it cannot
//! give the lock back to that holder.

use redis::Value;

use crate::common::*;

use super::setup::*;

/// `key`'s holder on `s`, if any: its token (the first holder's, for a shared lock).
fn holder(s: &Server, key: &str) -> Option<Vec<u8>> {
    let v = ok(&mut s.conn(), &rcmd!("LOCK.INFO", key));
    if v == Value::Nil {
        return None;
    }
    let pairs = field_pairs(&v);
    let get = |pairs: &[(Vec<u8>, Value)], name: &[u8]| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    if let Some(token) = get(&pairs, b"token") {
        return Some(as_bytes(&token));
    }
    match get(&pairs, b"holders") {
        Some(Value::Array(holders)) => holders
            .first()
            .and_then(|h| get(&field_pairs(h), b"token"))
            .map(|t| as_bytes(&t)),
        _ => None,
    }
}

#[test]
fn a_previous_release_replica_never_keeps_a_holder_released_by_a_handoff_with_data() {
    let Some(previous) = previous_module() else {
        return;
    };
    // The replica follows the upgraded master by partial resync (it cannot full-sync from it).
    let mut master = start_previous(&previous, Server::builder());
    let replica = Server::builder()
        .module_file(&previous)
        .replica_of(&master)
        .start();
    wait_replica_caught_up(&master, &replica);
    master.set_module_file(&module_path());
    master.restart(Stop::Save);
    replica.wait_info("replication", "master_link_status", "up");
    assert_eq!(info_number(&master, "stats", "sync_full"), 0);
    let mut m = master.conn();
    // Held without data: the replica has each holder.
    acquire_with(&mut m, "h:release", "a", TTL, &[]);
    acquire_with(&mut m, "h:lease", "a", 1_000, &[]);
    acquire_with(&mut m, "h:shared", "a", TTL, &["SHARED"]);
    wait_replica_caught_up(&master, &replica);
    for key in ["h:release", "h:lease", "h:shared"] {
        assert_eq!(holder(&replica, key).as_deref(), Some(&b"a"[..]), "{key}");
    }

    // Each is handed to a waiter whose grant carries DATA: by a release, by the end of the
    // lease, by the release of the last shared holder.
    let waiters: Vec<Waiter> = ["h:release", "h:lease", "h:shared"]
        .iter()
        .map(|key| {
            let w = spawn_waiter_with(&master, key, "b", TTL, 10_000, &["DATA", "payload"]);
            wait_waiters(&mut master.conn(), key, 1);
            w
        })
        .collect();
    assert_eq!(release(&mut m, "h:release", b"a"), 1);
    assert_eq!(release(&mut m, "h:shared", b"a"), 1);
    for w in &waiters {
        assert_eq!(w.granted().0, b"b");
    }
    wait_replica_caught_up(&master, &replica);
    for key in ["h:release", "h:lease", "h:shared"] {
        assert_eq!(holder(&master, key).as_deref(), Some(&b"b"[..]), "{key}");
        // The new grant is missing on the previous release (documented); the released holder
        // is gone all the same.
        assert_eq!(holder(&replica, key), None, "{key} on the previous release");
        assert!(
            !exists(&mut replica.conn(), key),
            "{key} on the previous release"
        );
    }

    // A failover to that replica: the released holder cannot get its lock back, and cannot
    // release or extend what it no longer holds.
    let mut r = replica.conn();
    ok(&mut r, &rcmd!("REPLICAOF", "NO", "ONE"));
    for key in ["h:release", "h:lease"] {
        assert_eq!(release(&mut r, key, b"a"), 0, "{key}");
        assert_eq!(extend_px(&mut r, key, b"a", TTL), 0, "{key}");
    }
    assert!(acquire_with(&mut r, "h:release", "c", TTL, &[]) > 0);
}
