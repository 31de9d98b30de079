//! Replication of locks (SPEC "Persistence and replication", "Fencing tokens", "Errors"):
//! replicas mirror token, fence and absolute expiry; writes on a replica are refused; a promoted
//! replica issues fences above everything its old master issued.

use std::time::Duration;

use crate::common::*;
use redis::{Connection, Value};

fn digest_value(con: &mut Connection, key: &str) -> Value {
    ok(con, &rcmd!("DEBUG", "DIGEST-VALUE", key))
}

fn digest(con: &mut Connection) -> Vec<u8> {
    as_bytes(&ok(con, &rcmd!("DEBUG", "DIGEST")))
}

/// Asserts that `key` looks the same on master and replica.
#[track_caller]
fn assert_same_lock(m: &mut Connection, r: &mut Connection, key: &str, what: &str) {
    let mi = info(m, key);
    let ri = info(r, key);
    match (&mi, &ri) {
        (None, None) => {
            assert!(
                !exists(r, key),
                "{what}: {key} should not exist on the replica"
            );
        }
        (Some(a), Some(b)) => {
            assert_eq!(b.token, a.token, "{what}: token of {key} on replica");
            assert_eq!(b.fence, a.fence, "{what}: fence of {key} on replica");
            assert_eq!(
                pexpiretime(r, key),
                pexpiretime(m, key),
                "{what}: absolute expiry (PEXPIRETIME) of {key} on replica"
            );
            let (pm, pr) = (pttl(m, key), pttl(r, key));
            assert!(
                (pm - pr).abs() <= 200,
                "{what}: PTTL of {key}: master {pm}, replica {pr}"
            );
            assert!(
                (a.ttl - b.ttl).abs() <= 200,
                "{what}: LOCK.INFO ttl {a:?} vs {b:?}"
            );
            assert_eq!(type_of(r, key), "redislock");
            assert_eq!(
                digest_value(r, key),
                digest_value(m, key),
                "{what}: DEBUG DIGEST-VALUE {key}"
            );
        }
        _ => panic!("{what}: {key} differs: master {mi:?}, replica {ri:?}"),
    }
}

#[test]
fn replica_mirrors_every_change() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    let mut rc = r.conn();

    // Acquire: plain, generated, binary.
    let (_, fa) = grant(&mut mc, "a", b"owner-a", 60_000);
    let (gen, _) = grant(&mut mc, "g", b"*", 60_000);
    assert_eq!(gen.len(), 32);
    let bin: &[u8] = b"\x00\xff\r\nbin";
    grant(&mut mc, "b", bin, 60_000);
    wait_replicas(&mut mc, 1);
    for k in ["a", "g", "b"] {
        assert_same_lock(&mut mc, &mut rc, k, "after acquire");
    }
    assert_eq!(
        info_some(&mut rc, "g").token,
        gen,
        "replica holds the concrete token"
    );
    assert_eq!(info_some(&mut rc, "b").token, bin);

    // Refused acquire: nothing to replicate, nothing changes.
    assert_eq!(acquire(&mut mc, "a", b"intruder", 90_000), None);
    wait_replicas(&mut mc, 1);
    assert_same_lock(&mut mc, &mut rc, "a", "after refused acquire");

    // Re-grant with a new TTL.
    assert_eq!(
        grant(&mut mc, "a", b"owner-a", 90_000),
        (b"owner-a".to_vec(), fa)
    );
    wait_replicas(&mut mc, 1);
    assert_same_lock(&mut mc, &mut rc, "a", "after re-grant");
    assert_ttl_close(
        pttl(&mut rc, "a"),
        90_000,
        1_000,
        "replica PTTL after re-grant",
    );

    // Extend.
    assert_eq!(extend_px(&mut mc, "g", &gen, 120_000), 1);
    wait_replicas(&mut mc, 1);
    assert_same_lock(&mut mc, &mut rc, "g", "after extend");
    assert_ttl_close(
        pttl(&mut rc, "g"),
        120_000,
        1_000,
        "replica PTTL after extend",
    );
    assert_eq!(extend_px(&mut mc, "g", b"nobody", 1_000), 0);
    wait_replicas(&mut mc, 1);
    assert_same_lock(&mut mc, &mut rc, "g", "after refused extend");

    // Release.
    assert_eq!(release(&mut mc, "b", bin), 1);
    assert_eq!(release(&mut mc, "a", b"wrong"), 0);
    wait_replicas(&mut mc, 1);
    assert_same_lock(&mut mc, &mut rc, "b", "after release");
    assert_same_lock(&mut mc, &mut rc, "a", "after refused release");

    // A new grant after release: the replica sees the new, larger fence.
    let (_, fb2) = grant(&mut mc, "b", b"second", 60_000);
    wait_replicas(&mut mc, 1);
    assert_same_lock(&mut mc, &mut rc, "b", "after re-acquire");
    assert_eq!(info_some(&mut rc, "b").fence, fb2);

    // DEL and expiry propagate.
    assert_eq!(as_int(&ok(&mut mc, &rcmd!("DEL", "b"))), 1);
    grant(&mut mc, "short", b"s", 150);
    wait_replicas(&mut mc, 1);
    sleep_past_expiry(&mut mc, "short");
    assert_eq!(info(&mut mc, "short"), None);
    wait_replicas(&mut mc, 1);
    assert_same_lock(&mut mc, &mut rc, "b", "after DEL");
    assert_eq!(info(&mut rc, "short"), None, "expired lock on replica");

    assert_eq!(
        digest(&mut rc),
        digest(&mut mc),
        "DEBUG DIGEST of the whole dataset"
    );
    assert_eq!(dbsize(&mut rc), dbsize(&mut mc));
}

/// `LOCK.ACQUIRE` inside MULTI/EXEC: returns the reply of the single queued command.
fn acquire_in_multi(con: &mut Connection, cmd: &redis::Cmd) -> Value {
    assert_eq!(ok(con, &rcmd!("MULTI")), Value::Okay);
    let q = ok(con, cmd);
    assert_eq!(as_bytes(&q), b"QUEUED", "{}", describe(cmd));
    match ok(con, &rcmd!("EXEC")) {
        Value::Array(mut items) if items.len() == 1 => items.remove(0),
        other => panic!("EXEC answered {other:?}"),
    }
}

#[test]
fn generated_tokens_from_scripts_and_transactions_replicate_concretely() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    let v = ok(
        &mut mc,
        &rcmd!(
            "EVAL",
            "return redis.call('LOCK.ACQUIRE', KEYS[1], '*', 'PX', 60000)",
            1,
            "script"
        ),
    );
    let (ts, fs) = parse_grant(&v).expect("granted from a script");
    assert_eq!(ts.len(), 32);
    let v = acquire_in_multi(
        &mut mc,
        &rcmd!("LOCK.ACQUIRE", "multi", "*", "PX", 60_000, "BLOCK", 100),
    );
    let (tm, fm) = parse_grant(&v).expect("granted in MULTI");
    assert_eq!(tm.len(), 32);
    assert!(fm > fs);
    wait_replicas(&mut mc, 1);
    let mut rc = r.conn();
    for k in ["script", "multi"] {
        assert_same_lock(&mut mc, &mut rc, k, "acquired with `*` in a script / MULTI");
    }
    assert_eq!(info_some(&mut rc, "script").token, ts);
    assert_eq!(info_some(&mut rc, "multi").token, tm);
    assert_eq!(digest(&mut rc), digest(&mut mc));
}

#[test]
fn writes_on_a_replica_are_refused() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    let (tok, fence) = grant(&mut mc, "k", b"owner", 60_000);
    wait_replicas(&mut mc, 1);
    let mut rc = r.conn();
    for cmd in [
        rcmd!("LOCK.ACQUIRE", "new", "t", "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "k", "owner", "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "new", "*", "EX", 1, "BLOCK", 10),
        rcmd!("LOCK.RELEASE", "k", "owner"),
        rcmd!("LOCK.EXTEND", "k", "owner", "PX", 1000),
    ] {
        let e = err(&mut rc, &cmd);
        assert!(
            e.starts_with("READONLY"),
            "{} on replica: {e}",
            describe(&cmd)
        );
    }
    // Reading works and nothing changed.
    let i = info_some(&mut rc, "k");
    assert_eq!((i.token, i.fence), (tok, fence));
    assert!(pttl(&mut rc, "k") > 50_000);
    assert!(!exists(&mut rc, "new"));
    assert_same_lock(&mut mc, &mut rc, "k", "after refused writes");
}

#[test]
fn internal_apply_is_refused_on_a_replica_client() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut rc = r.conn();
    let e = err(
        &mut rc,
        &rcmd!("LOCK._APPLY", "k", "tok", 5, now_ms() + 60_000),
    );
    assert!(
        [
            "READONLY You can't write against a read only replica.",
            "ERR this command is internal to redislock replication and persistence"
        ]
        .contains(&e.as_str()),
        "LOCK._APPLY from a client on a replica: {e}"
    );
    assert!(!exists(&mut rc, "k"));
}

#[test]
fn promoted_replica_issues_larger_fences_than_its_old_master() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    let mut rc = r.conn();

    let (_, f0) = grant(&mut mc, "a", b"old", 60_000);
    wait_replicas(&mut mc, 1);
    assert_eq!(info_some(&mut rc, "a").fence, f0);

    assert_eq!(ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE")), Value::Okay);
    r.wait_info("replication", "role", "master");

    // The old master keeps granting; none of this reaches the promoted replica.
    let mut f1 = f0;
    for i in 0..200 {
        let (_, f) = grant(&mut mc, &format!("m{i}"), b"m", 60_000);
        assert!(f > f1);
        f1 = f;
    }
    assert_eq!(release(&mut mc, "a", b"old"), 1);
    let (_, f) = grant(&mut mc, "a", b"m", 60_000);
    f1 = f1.max(f);
    assert!(
        !exists(&mut rc, "m0"),
        "promoted replica must not receive the old master's writes"
    );

    // The promoted replica's grants exceed every fence the old master issued, whatever the old
    // master's clock does later: they are in the next epoch.
    let (_, f2) = grant(&mut rc, "m0", b"r", 60_000);
    assert!(
        f2 > f1,
        "fence {f2} from the promoted replica must exceed {f1}"
    );
    assert_eq!(
        (epoch_of(f1), epoch_of(f2)),
        (0, 1),
        "a promotion starts the next epoch: {f1} then {f2}"
    );
    let (_, f3) = grant(&mut rc, "fresh", b"r", 60_000);
    assert!(f3 > f1, "fence {f3} must exceed {f1}");
    assert_eq!(epoch_of(f3), 1);
    // The lock it received from the old master is still held there; re-granting after release.
    let i = info_some(&mut rc, "a");
    assert_eq!((i.token.as_slice(), i.fence), (&b"old"[..], f0));
    assert_eq!(release(&mut rc, "a", b"old"), 1);
    let (_, f4) = grant(&mut rc, "a", b"r", 60_000);
    assert!(f4 > f1, "fence {f4} on `a` must exceed {f1}");
}

#[test]
fn promoted_replica_beats_old_master_after_master_reloads() {
    // The old master's own history moves on (DEBUG RELOAD twice) without any grant the replica
    // could observe; after promotion, the replica's fences must still exceed the old master's.
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    let (_, f0) = grant(&mut mc, "a", b"old", 60_000);
    ok(&mut mc, &rcmd!("DEBUG", "RELOAD"));
    ok(&mut mc, &rcmd!("DEBUG", "RELOAD"));
    wait_replicas(&mut mc, 1);
    let mut rc = r.conn();
    assert_eq!(info_some(&mut rc, "a").fence, f0);
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    r.wait_info("replication", "role", "master");

    let mut f1 = f0;
    for i in 0..5 {
        let (_, f) = grant(&mut mc, &format!("m{i}"), b"m", 60_000);
        f1 = f1.max(f);
    }
    let (_, f2) = grant(&mut rc, "m0", b"r", 60_000);
    assert!(
        f2 > f1,
        "fence {f2} from the promoted replica must exceed {f1}"
    );
    assert!(
        epoch_of(f2) > epoch_of(f1),
        "the promoted replica grants in a higher epoch: {f1} then {f2}"
    );
}

#[test]
fn promoted_replica_after_failover_then_new_replica_follows() {
    // Failover chain: M -> R promoted; a new replica of R mirrors R's new locks.
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    let (_, f0) = grant(&mut mc, "k", b"m", 60_000);
    wait_replicas(&mut mc, 1);
    let mut rc = r.conn();
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    r.wait_info("replication", "role", "master");
    let (_, f1) = grant(&mut rc, "j", b"r", 60_000);
    assert!(f1 > f0);
    assert_eq!((epoch_of(f0), epoch_of(f1)), (0, 1), "{f0} then {f1}");

    let r2 = Server::start_replica_of(&r);
    let mut r2c = r2.conn();
    for k in ["k", "j"] {
        assert_same_lock(&mut rc, &mut r2c, k, "new replica of the promoted server");
    }
}

fn late_replica_case(diskless: bool) {
    let m = Server::builder()
        .set("repl-diskless-sync", if diskless { "yes" } else { "no" })
        .start();
    let mut mc = m.conn();
    let (_, _) = grant(&mut mc, "plain", b"owner", 60_000);
    let (gen, _) = grant(&mut mc, "gen", b"*", 60_000);
    grant(&mut mc, "bin", b"\x00\xff", 60_000);
    grant(&mut mc, "ext", b"e", 5_000);
    assert_eq!(extend_px(&mut mc, "ext", b"e", 100_000), 1);
    grant(&mut mc, "rel", b"r", 60_000);
    assert_eq!(release(&mut mc, "rel", b"r"), 1);
    ok(&mut mc, &rcmd!("SET", "str", "v"));

    let r = Server::start_replica_of(&m);
    let mut rc = r.conn();
    for k in ["plain", "gen", "bin", "ext", "rel"] {
        assert_same_lock(&mut mc, &mut rc, k, "after full sync");
    }
    assert_eq!(info_some(&mut rc, "gen").token, gen);
    assert_eq!(
        digest(&mut rc),
        digest(&mut mc),
        "DEBUG DIGEST after full sync"
    );

    // Later changes keep flowing.
    assert_eq!(release(&mut mc, "plain", b"owner"), 1);
    grant(&mut mc, "plain", b"next", 60_000);
    wait_replicas(&mut mc, 1);
    assert_same_lock(&mut mc, &mut rc, "plain", "after full sync + re-acquire");
}

#[test]
fn late_replica_full_sync_diskless() {
    late_replica_case(true);
}

#[test]
fn late_replica_full_sync_disk() {
    late_replica_case(false);
}

#[test]
fn replica_keeps_locks_across_its_own_restart() {
    // A replica restarted from its own RDB and re-synced still matches.
    let m = Server::start();
    let mut r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    grant(&mut mc, "a", b"x", 60_000);
    wait_replicas(&mut mc, 1);
    r.restart(Stop::Save);
    r.wait_info("replication", "master_link_status", "up");
    grant(&mut mc, "b", b"y", 60_000);
    wait_replicas(&mut mc, 1);
    let mut rc = r.conn();
    for k in ["a", "b"] {
        assert_same_lock(&mut mc, &mut rc, k, "after replica restart");
    }
}

#[test]
fn a_promotion_epoch_reaches_the_promoted_servers_own_replicas() {
    // Chained replication M -> A -> B. A is promoted and grants nothing; its replica B learns
    // A's new epoch from the replication stream alone, so when B is promoted in turn, B's
    // fences exceed everything A goes on granting.
    let m = Server::start();
    let a = Server::start_replica_of(&m);
    let b = Server::start_replica_of(&a);
    let mut mc = m.conn();
    grant(&mut mc, "seed", b"m", 60_000);
    wait_replicas(&mut mc, 1);
    let mut ac = a.conn();
    ok(&mut ac, &rcmd!("REPLICAOF", "NO", "ONE"));
    a.wait_info("replication", "role", "master");
    // A's replica B must have received the epoch record before it is cut loose. A sends it from
    // a timer after REPLICAOF returns, so a WAIT on `ac` (whose offset predates it) may return
    // first, as it sometimes does on Valkey 8.1: wait for B to reach A's offset instead.
    wait_replica_caught_up(&a, &b);
    let mut bc = b.conn();
    ok(&mut bc, &rcmd!("REPLICAOF", "NO", "ONE"));
    b.wait_info("replication", "role", "master");
    let mut fa = 0;
    for i in 0..50 {
        let (_, f) = grant(&mut ac, &format!("a{i}"), b"a", 60_000);
        fa = fa.max(f);
    }
    let (_, fb) = grant(&mut bc, "b0", b"b", 60_000);
    assert!(
        fb > fa,
        "fence {fb} from the second promotion must exceed {fa}"
    );
    // A's epoch reached B through the stream, so B's promotion went one further.
    assert_eq!(
        (epoch_of(fa), epoch_of(fb)),
        (1, 2),
        "epochs of A's grants ({fa}) and of B's ({fb})"
    );
}

#[test]
fn the_promotion_epoch_survives_a_restart_from_the_aof() {
    // R is promoted and grants nothing, so only the epoch record in its AOF carries the new
    // epoch. After a crash and restart, R's fences must still exceed what the old master grants
    // later, at later wall-clock times.
    let m = Server::start();
    let mut r = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let mut rc = r.conn();
    ok(&mut rc, &rcmd!("REPLICAOF", "127.0.0.1", m.port()));
    r.wait_info("replication", "master_link_status", "up");
    let mut mc = m.conn();
    grant(&mut mc, "seed", b"m", 60_000);
    wait_replicas(&mut mc, 1);
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    r.wait_info("replication", "role", "master");
    r.wait_aof_rewrite_done();
    // The epoch record is written from a timer just after the promotion.
    wait_until(
        "an epoch record in the AOF",
        Duration::from_secs(10),
        || aof_text(&r).contains("LOCK._EPOCH"),
    );
    drop(rc);
    r.kill9_and_restart();
    let mut fm = 0;
    for i in 0..20 {
        fm = fm.max(grant(&mut mc, &format!("m{i}"), b"m", 60_000).1);
    }
    let mut rc = r.conn();
    let (_, after) = grant(&mut rc, "x", b"r", 60_000);
    assert!(
        after > fm,
        "fence {after} must exceed the old master's {fm}"
    );
    assert_eq!(
        (epoch_of(fm), epoch_of(after)),
        (0, 1),
        "the epoch survived the restart: {fm} then {after}"
    );
}

/// Everything in a server's AOF directory, as text.
fn aof_text(s: &Server) -> String {
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(s.dir().join("appendonlydir")) {
        for e in entries.flatten() {
            text.push_str(&String::from_utf8_lossy(
                &std::fs::read(e.path()).unwrap_or_default(),
            ));
        }
    }
    text
}

#[test]
fn internal_epoch_record_is_refused_to_clients() {
    let s = Server::start();
    let mut c = s.conn();
    let e = err(&mut c, &rcmd!("LOCK._EPOCH", 7));
    assert_eq!(
        e,
        "ERR this command is internal to redislock replication and persistence"
    );
    let (_, f1) = grant(&mut c, "k", b"t", 60_000);
    assert_eq!(release(&mut c, "k", b"t"), 1);
    let (_, f2) = grant(&mut c, "k", b"t", 60_000);
    assert!(f2 > f1);
    assert_eq!(
        epoch_of(f2),
        0,
        "a refused epoch record must not move the epoch: {f2}"
    );
}

#[test]
fn holder_sets_of_both_forms_replicate_and_full_sync_exactly() {
    use crate::kinds::{info_of, place, shared};
    use crate::persistence::{holder_sets, populate_holder_sets, HOLDER_KEYS};
    let m = Server::builder().set("repl-diskless-sync", "yes").start();
    let r = Server::start_replica_of(&m);
    let mut mc = m.conn();
    populate_holder_sets(&mut mc);
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    let on_master = holder_sets(&mut mc, &HOLDER_KEYS);
    assert_eq!(holder_sets(&mut rc, &HOLDER_KEYS), on_master, "replicated");
    // A full sync, diskless and from disk.
    let late = Server::start_replica_of(&m);
    wait_replica_caught_up(&m, &late);
    assert_eq!(
        holder_sets(&mut late.conn(), &HOLDER_KEYS),
        on_master,
        "diskless full sync"
    );
    ok(&mut mc, &rcmd!("CONFIG", "SET", "repl-diskless-sync", "no"));
    let from_disk = Server::start_replica_of(&m);
    wait_replica_caught_up(&m, &from_disk);
    assert_eq!(
        holder_sets(&mut from_disk.conn(), &HOLDER_KEYS),
        on_master,
        "full sync from disk"
    );
    // Sets that change form after the sync: the large one down to 3 holds, the small one up to
    // 30.
    for i in 0..37 {
        assert_eq!(
            release(&mut mc, "hs:large", format!("p{i:02}").as_bytes()),
            1
        );
    }
    for i in 3..30 {
        shared(&mut mc, "hs:small", &format!("r{i}"), 60_000);
    }
    place(&mut mc, "hs:shrunk", "new", 60_000, 30);
    assert_eq!(info_of(&mut mc, "hs:large").holders.len(), 3);
    let changed = holder_sets(&mut mc, &HOLDER_KEYS);
    for (replica, what) in [(&r, "replica"), (&late, "late"), (&from_disk, "from disk")] {
        wait_replica_caught_up(&m, replica);
        assert_eq!(
            holder_sets(&mut replica.conn(), &HOLDER_KEYS),
            changed,
            "{what}: after the sets changed form"
        );
        assert_eq!(
            digest(&mut replica.conn()),
            digest(&mut mc),
            "{what}: DEBUG DIGEST"
        );
    }
}
