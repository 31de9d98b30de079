//! A multi-key request waiting through a client pause (`CLIENT PAUSE … ALL` and `… WRITE`),
//! whatever frees its keys meanwhile (a release the pause holds back, a lease that ends): no
//! grant and nothing written or replicated while paused, every key granted at the pause's end;
//! and through a replica's full sync (a restarted replica, a promoted replica taken back): the
//! replica ends with exactly the master's locks and fences.

use std::io::Write;
use std::time::{Duration, Instant};

use super::waiting::{fences_of, spawn_all};
use super::*;

fn digest(server: &Server) -> Vec<u8> {
    as_bytes(&ok(&mut server.conn(), &rcmd!("DEBUG", "DIGEST")))
}

/// The replication offset a replica has processed.
fn processed(replica: &Server) -> i64 {
    replica
        .info_field("replication", "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .expect("master_repl_offset")
}

/// `(token, fence)` of each key's lock, as `LOCK.INFO` shows it.
fn locks_of(server: &Server, keys: &[&str]) -> Vec<Option<(Vec<u8>, i64)>> {
    let mut c = server.conn();
    keys.iter()
        .map(|k| info(&mut c, k).map(|i| (i.token, i.fence)))
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Freed {
    /// The holder releases during the pause: the pause holds the release back.
    Release,
    /// The holder's lease ends during the pause.
    Expiry,
}

fn paused_multi_wait(pause: &str, freed: Freed) {
    let what = format!("{freed:?} during CLIENT PAUSE {pause}");
    let m = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        // No pings to the replica: its offset moves only with what the master writes.
        .set("repl-ping-replica-period", "3600")
        .start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let keys = ["{p}:a", "{p}:b", "{p}:c"];
    let (_, before) = grant(&mut c, keys[1], b"holder", 60_000);
    let w = spawn_all(&m, &keys, "multi", 60_000, 0, &[]);
    wait_waiters(&mut c, keys[1], 1);
    wait_replica_caught_up(&m, &r);
    let pause_ms: u64 = 2_000;
    let pause_for = pause_ms.to_string();
    let mut admin = RawConn::connect(&m);
    let paused_at = Instant::now();
    let mut commands: Vec<Vec<&str>> = Vec::new();
    if let Freed::Expiry = freed {
        commands.push(vec!["LOCK.EXTEND", keys[1], "holder", "PX", "150"]);
    }
    commands.push(vec!["CLIENT", "PAUSE", &pause_for, pause]);
    admin
        .stream()
        .write_all(&resp_commands(&commands))
        .expect("write");
    for _ in &commands {
        admin.read().expect("a reply");
    }
    // Once the replica has what came before the pause, nothing more reaches it or the AOF.
    if let Freed::Expiry = freed {
        wait_until(
            "the replica has the shorter lease",
            Duration::from_secs(10),
            || pttl(&mut r.conn(), keys[1]) <= 150,
        );
    }
    let (offset, aof) = (processed(&r), m.aof_text().len());
    let mut releaser = RawConn::connect(&m);
    if let Freed::Release = freed {
        releaser.send(&["LOCK.RELEASE", keys[1], "holder"]);
    }
    let quiet = Duration::from_millis(pause_ms - 400).saturating_sub(paused_at.elapsed());
    if let Some(a) = w.recv_within(quiet / time_scale()) {
        panic!("{what}: answered during the pause: {a:?}");
    }
    let (offset_now, aof_now) = (processed(&r), m.aof_text().len());
    // Read before the pause ended (a slow machine may have let it end): only then they count.
    if paused_at.elapsed() < Duration::from_millis(pause_ms - 100) {
        assert_eq!(offset_now, offset, "{what}: replicated during the pause");
        assert_eq!(aof_now, aof, "{what}: written during the pause");
    } else {
        eprintln!("{what}: the pause ended before the replica and the AOF were read");
    }
    let fences = fences_of(&w);
    let at = paused_at.elapsed();
    assert!(
        at >= Duration::from_millis(pause_ms - 50),
        "{what}: granted {at:?} after the pause began"
    );
    assert_eq!(fences.len(), 3);
    assert!(fences.iter().all(|f| *f > before), "{what}: {fences:?}");
    if let Freed::Release = freed {
        assert_eq!(releaser.read(), Ok(Resp::Int(1)), "{what}");
    }
    for (k, f) in keys.iter().zip(&fences) {
        let i = info_some(&mut c, k);
        assert_eq!((i.token.as_slice(), i.fence), (&b"multi"[..], *f), "{what}");
    }
    wait_replica_caught_up(&m, &r);
    assert_eq!(digest(&r), digest(&m), "{what}: the replica");
    assert_eq!(
        locks_of(&r, &keys),
        locks_of(&m, &keys),
        "{what}: the replica"
    );
}

#[test]
fn a_release_held_back_by_client_pause_all_grants_at_its_end() {
    paused_multi_wait("ALL", Freed::Release);
}

#[test]
fn a_lease_ending_during_client_pause_all_grants_at_its_end() {
    paused_multi_wait("ALL", Freed::Expiry);
}

#[test]
fn a_release_held_back_by_client_pause_write_grants_at_its_end() {
    paused_multi_wait("WRITE", Freed::Release);
}

#[test]
fn a_lease_ending_during_client_pause_write_grants_at_its_end() {
    paused_multi_wait("WRITE", Freed::Expiry);
}

/// `INFO stats` `sync_full` of a master: how many full syncs it served.
fn full_syncs(master: &Server) -> i64 {
    master
        .info_field("stats", "sync_full")
        .and_then(|v| v.parse().ok())
        .expect("sync_full")
}

/// How the replica leaves and comes back.
#[derive(Clone, Copy, Debug)]
enum Away {
    /// Killed, its RDB deleted, started again: a full sync.
    Restarted,
    /// Promoted (granting on its own meanwhile), then made a replica again.
    Promoted,
}

fn multi_wait_across_a_full_sync(away: Away) {
    let m = Server::start();
    let mut r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let keys = ["{f}:a", "{f}:b", "{f}:c"];
    for i in 0..10 {
        let k = format!("{{f}}:old{i}");
        grant(&mut c, &k, b"old", 60_000);
        if i % 2 == 0 {
            assert_eq!(release(&mut c, &k, b"old"), 1);
        }
    }
    grant(&mut c, keys[1], b"holder", 60_000);
    let first = spawn_all(&m, &keys, "first", 60_000, 0, &[]);
    wait_waiters(&mut c, keys[1], 1);
    let second = spawn_all(&m, &keys[..2], "second", 60_000, 0, &[]);
    wait_total_waiters(&m, 2);
    wait_replica_caught_up(&m, &r);
    let syncs = full_syncs(&m);
    match away {
        Away::Restarted => {
            r.stop(Stop::Kill);
            let _ = std::fs::remove_file(r.dir().join("dump.rdb"));
        }
        Away::Promoted => {
            ok(&mut r.conn(), &rcmd!("REPLICAOF", "NO", "ONE"));
            r.wait_info("replication", "role", "master");
            // Split brain: what the promoted replica grants is discarded when it syncs again.
            let mut rc = r.conn();
            assert!(acquire_all(&mut rc, &["{f}:x", "{f}:y"], "stray", 60_000).is_some());
        }
    }
    // While the replica is away, the first request is granted; the second waits on.
    assert_eq!(release(&mut c, keys[1], b"holder"), 1);
    let f1 = fences_of(&first);
    assert!(second.try_recv().is_none());
    match away {
        Away::Restarted => r.restart(Stop::Kill),
        Away::Promoted => {
            ok(&mut r.conn(), &rcmd!("REPLICAOF", "127.0.0.1", m.port()));
        }
    }
    r.wait_info("replication", "role", "slave");
    r.wait_info("replication", "master_link_status", "up");
    assert!(full_syncs(&m) > syncs, "{away:?}: a full sync");
    // After the sync, the second request is granted through the replication stream.
    assert_eq!(release_all(&mut c, &keys, "first"), 3);
    let f2 = fences_of(&second);
    assert!(
        f2.iter().all(|f| f > f1.iter().max().unwrap()),
        "{f1:?} {f2:?}"
    );
    wait_replica_caught_up(&m, &r);
    let mut all: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    all.extend((0..10).map(|i| format!("{{f}}:old{i}")));
    all.extend(["{f}:x".to_string(), "{f}:y".to_string()]);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    assert_eq!(locks_of(&r, &all), locks_of(&m, &all), "{away:?}");
    assert_eq!(digest(&r), digest(&m), "{away:?}");
    assert!(
        !exists(&mut r.conn(), "{f}:x"),
        "{away:?}: the stray grant is gone"
    );
    // Promoted now, the replica grants above every fence the master issued.
    let max = locks_of(&m, &all)
        .into_iter()
        .flatten()
        .map(|(_, f)| f)
        .max()
        .unwrap();
    ok(&mut r.conn(), &rcmd!("REPLICAOF", "NO", "ONE"));
    r.wait_info("replication", "role", "master");
    let fences = acquire_all(&mut r.conn(), &["{f}:c", "{f}:z"], "after", 60_000).unwrap();
    assert!(fences.iter().all(|f| *f > max), "{max} then {fences:?}");
}

#[test]
fn a_restarted_replica_syncs_the_multi_key_grants_exactly() {
    multi_wait_across_a_full_sync(Away::Restarted);
}

#[test]
fn a_promoted_replica_taken_back_syncs_the_multi_key_grants_exactly() {
    multi_wait_across_a_full_sync(Away::Promoted);
}
