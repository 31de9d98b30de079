//! Persistence of locks (SPEC "Persistence and replication", "Fencing tokens"): DEBUG RELOAD,
//! RDB, AOF (with and without rewrite / RDB preamble), key-level commands (DUMP/RESTORE, COPY,
//! RENAME, MOVE, MEMORY USAGE); and of keys with holders, in both of the forms the module keeps
//! them in and across the switch between them.

use crate::common::*;
use crate::kinds::{info_of, place, shared};
use redis::{Connection, Value};

/// One held lock as seen before a reload.
#[derive(Clone, Debug)]
struct Held {
    key: String,
    token: Vec<u8>,
    fence: i64,
    /// Absolute expiry (PEXPIRETIME).
    expire_at: i64,
}

/// The locks created by `populate`.
#[derive(Debug)]
struct Scenario {
    held: Vec<Held>,
    /// Released or expired before the reload.
    gone: Vec<String>,
    /// Largest fence granted before the reload, on any key.
    max_fence: i64,
}

fn held(con: &mut Connection, key: &str, token: &[u8], px: i64) -> Held {
    let (t, fence) = grant(con, key, token, px);
    Held {
        key: key.to_string(),
        token: t,
        fence,
        expire_at: pexpiretime(con, key),
    }
}

/// Creates: plain, generated (`*`), binary and re-granted/extended locks that stay held; a
/// released lock; a lock that expires; all with different fences. Returns after the short lock
/// has expired.
fn populate(con: &mut Connection) -> Scenario {
    let mut max_fence = 0;
    let mut hs = Vec::new();

    // A released lock with several grants on it (its fences are the highest so far at the time).
    for i in 0..5 {
        let t = format!("r{i}");
        let (_, f) = grant(con, "released", t.as_bytes(), 60_000);
        max_fence = max_fence.max(f);
        assert_eq!(release(con, "released", t.as_bytes()), 1);
    }

    hs.push(held(con, "plain", b"owner-plain", 120_000));
    hs.push(held(con, "generated", b"*", 120_000));
    hs.push(held(con, "binary", b"\x00\xffbin\r\n", 120_000));
    // Re-granted and extended: the stored expiry must be the latest one.
    let mut h = held(con, "regranted", b"rg", 5_000);
    assert_eq!(grant(con, "regranted", b"rg", 90_000).1, h.fence);
    h.expire_at = pexpiretime(con, "regranted");
    hs.push(h);
    let mut h = held(con, "extended", b"ex", 5_000);
    assert_eq!(extend_px(con, "extended", b"ex", 100_000), 1);
    h.expire_at = pexpiretime(con, "extended");
    hs.push(h);

    let (_, f) = grant(con, "short", b"s", 150);
    max_fence = max_fence.max(f);
    for h in &hs {
        max_fence = max_fence.max(h.fence);
    }
    // The newest grant is on a lock that is released before the reload.
    let (_, f) = grant(con, "last-released", b"z", 60_000);
    assert!(f > 0);
    max_fence = max_fence.max(f);
    assert_eq!(release(con, "last-released", b"z"), 1);

    sleep_past_expiry(con, "short");
    assert!(
        !exists(con, "short"),
        "PX 150 lock should be gone after its expiry"
    );
    Scenario {
        held: hs,
        gone: vec!["released".into(), "last-released".into(), "short".into()],
        max_fence,
    }
}

/// Checks every lock of `sc` after a reload/restart, then that new grants exceed all old fences.
fn verify(con: &mut Connection, sc: &Scenario, what: &str) {
    for h in &sc.held {
        let i = info(con, &h.key)
            .unwrap_or_else(|| panic!("{what}: lock {} lost (expected {h:?})", h.key));
        assert_eq!(i.token, h.token, "{what}: token of {}", h.key);
        assert_eq!(i.fence, h.fence, "{what}: fence of {}", h.key);
        assert_eq!(type_of(con, &h.key), "redislock", "{what}: TYPE {}", h.key);
        let at = pexpiretime(con, &h.key);
        assert_eq!(
            at, h.expire_at,
            "{what}: absolute expiry (PEXPIRETIME) of {}",
            h.key
        );
        let remaining = h.expire_at - now_ms();
        assert_ttl_close(
            i.ttl,
            remaining + 200,
            2_000,
            &format!("{what}: ttl of {}", h.key),
        );
        assert_ttl_close(
            pttl(con, &h.key),
            remaining + 200,
            2_000,
            &format!("{what}: PTTL of {}", h.key),
        );
        // Still owned: others are refused, the owner re-grants with the same fence.
        assert_eq!(
            acquire(con, &h.key, b"intruder", 1_000),
            None,
            "{what}: {}",
            h.key
        );
        assert_eq!(
            extend_px(con, &h.key, b"intruder", 1_000),
            0,
            "{what}: {}",
            h.key
        );
    }
    for k in &sc.gone {
        assert_eq!(info(con, k), None, "{what}: {k} should not hold a lock");
        assert!(!exists(con, k), "{what}: {k} should not exist");
    }
    assert_eq!(
        dbsize(con),
        sc.held.len() as i64,
        "{what}: only the held locks remain"
    );

    // New grants: on fresh names, on released/expired names, and after releasing a held lock.
    let mut fences = Vec::new();
    fences.push((
        "brand-new".to_string(),
        grant(con, "brand-new", b"n", 60_000).1,
    ));
    for k in &sc.gone {
        fences.push((k.clone(), grant(con, k, b"n", 60_000).1));
    }
    for h in &sc.held {
        assert_eq!(
            release(con, &h.key, &h.token),
            1,
            "{what}: release {}",
            h.key
        );
        fences.push((h.key.clone(), grant(con, &h.key, b"n", 60_000).1));
    }
    for (k, f) in fences {
        assert!(
            f > sc.max_fence,
            "{what}: new fence {f} on {k} must exceed every earlier fence (max {})",
            sc.max_fence
        );
    }
}

#[test]
fn debug_reload_keeps_locks() {
    let s = Server::start();
    let mut c = s.conn();
    let sc = populate(&mut c);
    assert_eq!(ok(&mut c, &rcmd!("DEBUG", "RELOAD")), Value::Okay);
    verify(&mut c, &sc, "DEBUG RELOAD");
}

#[test]
fn rdb_save_then_crash_restart_keeps_locks() {
    let mut s = Server::start();
    let mut c = s.conn();
    let sc = populate(&mut c);
    assert_eq!(ok(&mut c, &rcmd!("SAVE")), Value::Okay);
    s.kill9_and_restart();
    let mut c = s.conn();
    verify(&mut c, &sc, "SAVE + kill -9 + restart");
}

#[test]
fn shutdown_save_restart_keeps_locks() {
    let mut s = Server::start();
    let mut c = s.conn();
    let sc = populate(&mut c);
    s.restart(Stop::Save);
    let mut c = s.conn();
    verify(&mut c, &sc, "SHUTDOWN SAVE + restart");
}

#[test]
fn bgsave_restart_keeps_locks() {
    let mut s = Server::start();
    let mut c = s.conn();
    let sc = populate(&mut c);
    ok(&mut c, &rcmd!("BGSAVE"));
    s.wait_bgsave_done();
    s.kill9_and_restart();
    let mut c = s.conn();
    verify(&mut c, &sc, "BGSAVE + kill -9 + restart");
}

pub(crate) fn aof_server(preamble: bool) -> Server {
    Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .set("aof-use-rdb-preamble", if preamble { "yes" } else { "no" })
        .start()
}

#[test]
fn aof_crash_restart_keeps_locks() {
    let mut s = aof_server(true);
    let mut c = s.conn();
    let sc = populate(&mut c);
    s.kill9_and_restart();
    let mut c = s.conn();
    verify(&mut c, &sc, "AOF + kill -9 + restart");
}

fn aof_rewrite_case(preamble: bool) {
    let what = if preamble {
        "BGREWRITEAOF (RDB preamble) + restart"
    } else {
        "BGREWRITEAOF (no preamble) + restart"
    };
    let mut s = aof_server(preamble);
    let mut c = s.conn();
    let mut sc = populate(&mut c);
    ok(&mut c, &rcmd!("BGREWRITEAOF"));
    s.wait_aof_rewrite_done();
    // Writes after the rewrite land in the incremental file.
    let (_, f) = grant(&mut c, "after-rewrite", b"ar", 60_000);
    sc.held.push(Held {
        key: "after-rewrite".into(),
        token: b"ar".to_vec(),
        fence: f,
        expire_at: pexpiretime(&mut c, "after-rewrite"),
    });
    sc.max_fence = sc.max_fence.max(f);
    s.kill9_and_restart();
    let mut c = s.conn();
    verify(&mut c, &sc, what);
}

#[test]
fn aof_rewrite_with_rdb_preamble_keeps_locks() {
    aof_rewrite_case(true);
}

#[test]
fn aof_rewrite_without_rdb_preamble_keeps_locks() {
    aof_rewrite_case(false);
}

#[test]
fn generated_token_is_identical_after_aof_restart() {
    let mut s = aof_server(false);
    let mut c = s.conn();
    let (tok, fence) = grant(&mut c, "g", b"*", 60_000);
    assert_eq!(tok.len(), 32);
    s.kill9_and_restart();
    let mut c = s.conn();
    let i = info_some(&mut c, "g");
    assert_eq!(
        i.token, tok,
        "the AOF must hold the concrete token, not `*`"
    );
    assert_eq!(i.fence, fence);
    // And again after a command-format rewrite.
    ok(&mut c, &rcmd!("BGREWRITEAOF"));
    s.wait_aof_rewrite_done();
    s.kill9_and_restart();
    let mut c = s.conn();
    let i = info_some(&mut c, "g");
    assert_eq!((i.token, i.fence), (tok.clone(), fence));
    assert_eq!(release(&mut c, "g", &tok), 1);
}

#[test]
fn generated_tokens_from_scripts_and_transactions_survive_aof_restart() {
    let mut s = aof_server(true);
    let mut c = s.conn();
    let v = ok(
        &mut c,
        &rcmd!(
            "EVAL",
            "return redis.call('LOCK.ACQUIRE', KEYS[1], '*', 'PX', 60000)",
            1,
            "script"
        ),
    );
    let (ts, fs) = parse_grant(&v).expect("granted from a script");
    assert_eq!(ok(&mut c, &rcmd!("MULTI")), Value::Okay);
    ok(&mut c, &rcmd!("LOCK.ACQUIRE", "multi", "*", "PX", 60_000));
    let v = match ok(&mut c, &rcmd!("EXEC")) {
        Value::Array(mut items) if items.len() == 1 => items.remove(0),
        other => panic!("EXEC answered {other:?}"),
    };
    let (tm, fm) = parse_grant(&v).expect("granted in MULTI");
    s.kill9_and_restart();
    let mut c = s.conn();
    let i = info_some(&mut c, "script");
    assert_eq!((i.token, i.fence), (ts, fs));
    let i = info_some(&mut c, "multi");
    assert_eq!((i.token, i.fence), (tm, fm));
}

#[test]
fn restore_from_another_server_keeps_fences_increasing() {
    // A lock DUMPed on a server a promotion ahead (its fences are in epoch 1, above anything a
    // fresh server's clock reaches) and RESTOREd on a fresh one: later grants on that name must
    // still exceed the restored fence, which only the restored fence itself can make happen.
    let a = Server::start();
    promote_times(&a, 1);
    let mut ac = a.conn();
    let (tok, high) = grant(&mut ac, "k", b"owner", 60_000);
    assert_eq!(epoch_of(high), 1, "fence {high} of a server promoted once");
    let payload = as_bytes(&ok(&mut ac, &rcmd!("DUMP", "k")));

    let b = Server::start();
    let mut bc = b.conn();
    let (_, local) = grant(&mut bc, "local", b"l", 60_000);
    assert_eq!(epoch_of(local), 0);
    assert_eq!(
        ok(&mut bc, &rcmd!("RESTORE", "k", 60_000, payload.as_slice())),
        Value::Okay
    );
    let i = info_some(&mut bc, "k");
    assert_eq!((i.token.as_slice(), i.fence), (tok.as_slice(), high));
    assert_eq!(release(&mut bc, "k", &tok), 1);
    let (_, f) = grant(&mut bc, "k", b"next", 60_000);
    assert!(
        f > high,
        "fence {f} after RESTORE must exceed the restored fence {high}"
    );
    // The clock was raised for every name, not just this one.
    let (_, other) = grant(&mut bc, "other", b"o", 60_000);
    assert!(other > f, "fence {other} after RESTORE must exceed {f}");
}

#[test]
fn aof_restart_replays_release_and_extend() {
    let mut s = aof_server(true);
    let mut c = s.conn();
    let (_, f1) = grant(&mut c, "a", b"t", 5_000);
    assert_eq!(extend_px(&mut c, "a", b"t", 80_000), 1);
    let at = pexpiretime(&mut c, "a");
    let (_, f2) = grant(&mut c, "b", b"t", 60_000);
    assert_eq!(release(&mut c, "b", b"t"), 1);
    s.kill9_and_restart();
    let mut c = s.conn();
    let i = info_some(&mut c, "a");
    assert_eq!((i.token.as_slice(), i.fence), (&b"t"[..], f1));
    assert_eq!(
        pexpiretime(&mut c, "a"),
        at,
        "extended expiry replayed exactly"
    );
    assert_eq!(info(&mut c, "b"), None, "release replayed");
    let (_, f3) = grant(&mut c, "b", b"u", 60_000);
    assert!(f3 > f2.max(f1));
}

#[test]
fn stale_rdb_restart_still_issues_larger_fences() {
    // SPEC: a restart can lose the last writes (an RDB snapshot older than the last grants);
    // fences issued after the restart still exceed every fence issued before it.
    let mut s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "a", b"t", 60_000);
    assert_eq!(ok(&mut c, &rcmd!("SAVE")), Value::Okay);
    let mut max = f0;
    for i in 0..20 {
        let (_, f) = grant(&mut c, &format!("later{i}"), b"t", 60_000);
        max = max.max(f);
    }
    assert_eq!(release(&mut c, "a", b"t"), 1);
    let (_, f) = grant(&mut c, "a", b"u", 60_000);
    max = max.max(f);
    s.kill9_and_restart();
    let mut c = s.conn();
    // The snapshot's state is back ...
    let i = info_some(&mut c, "a");
    assert_eq!((i.token.as_slice(), i.fence), (&b"t"[..], f0));
    assert!(!exists(&mut c, "later0"));
    // ... but new fences exceed the lost ones.
    let (_, g) = grant(&mut c, "later0", b"v", 60_000);
    assert!(
        g > max,
        "fence {g} after stale-RDB restart must exceed {max}"
    );
    assert_eq!(release(&mut c, "a", b"t"), 1);
    let (_, g2) = grant(&mut c, "a", b"v", 60_000);
    assert!(g2 > max, "fence {g2} on `a` must exceed {max}");
}

#[test]
fn empty_snapshot_restart_still_issues_larger_fences() {
    // The extreme stale snapshot: taken before any grant.
    let mut s = Server::start();
    let mut c = s.conn();
    assert_eq!(ok(&mut c, &rcmd!("SAVE")), Value::Okay);
    let mut max = 0;
    for i in 0..10 {
        let (_, f) = grant(&mut c, "k", format!("t{i}").as_bytes(), 60_000);
        assert!(f > max);
        max = f;
        assert_eq!(release(&mut c, "k", format!("t{i}").as_bytes()), 1);
    }
    s.kill9_and_restart();
    let mut c = s.conn();
    assert_eq!(dbsize(&mut c), 0);
    let (_, g) = grant(&mut c, "k", b"new", 60_000);
    assert!(g > max, "fence {g} after restart must exceed {max}");
}

#[test]
fn repeated_crashes_from_the_same_stale_snapshot() {
    // Each restart loses the grants made since the (same) snapshot; the fences issued after
    // every restart must still exceed all fences issued before it, including those issued after
    // the previous restart.
    let mut s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "base", b"b", 600_000);
    assert_eq!(ok(&mut c, &rcmd!("SAVE")), Value::Okay);
    let mut max = 0;
    for round in 0..3 {
        let mut c = s.conn();
        for i in 0..3 {
            let (_, f) = grant(
                &mut c,
                &format!("k{i}"),
                format!("r{round}").as_bytes(),
                60_000,
            );
            assert!(
                f > max,
                "round {round}: fence {f} must exceed every earlier fence (max {max})"
            );
            max = f;
        }
        s.kill9_and_restart();
    }
}

#[test]
fn restart_without_any_persistence_still_issues_larger_fences() {
    // No RDB, no AOF: the restart loses every write. SPEC: fences issued after a restart still
    // exceed every fence issued before it.
    let mut s = Server::start();
    let mut c = s.conn();
    let mut max = 0;
    for i in 0..5 {
        let (_, f) = grant(&mut c, &format!("k{i}"), b"t", 60_000);
        max = max.max(f);
    }
    s.kill9_and_restart();
    let mut c = s.conn();
    assert_eq!(dbsize(&mut c), 0);
    let (_, f) = grant(&mut c, "k0", b"u", 60_000);
    assert!(f > max, "fence {f} after restart must exceed {max}");
    s.restart(Stop::NoSave);
    let mut c = s.conn();
    let (_, g) = grant(&mut c, "k0", b"v", 60_000);
    assert!(g > f, "fence {g} after second restart must exceed {f}");
}

#[test]
fn fences_increase_across_repeated_restarts() {
    let mut s = aof_server(true);
    let mut last = 0;
    for round in 0..3 {
        let mut c = s.conn();
        let (_, f) = grant(&mut c, "k", format!("r{round}").as_bytes(), 60_000);
        assert!(f > last, "round {round}: fence {f} should exceed {last}");
        last = f;
        assert_eq!(release(&mut c, "k", format!("r{round}").as_bytes()), 1);
        if round == 1 {
            assert_eq!(ok(&mut c, &rcmd!("DEBUG", "RELOAD")), Value::Okay);
        } else {
            s.kill9_and_restart();
        }
    }
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"final", 60_000);
    assert!(f > last);
}

#[test]
fn dump_restore_keeps_token_fence_and_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    let (tok, fence) = grant(&mut c, "src", b"\x00owner\xff", 60_000);
    let at = pexpiretime(&mut c, "src");
    let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", "src")));
    assert!(!payload.is_empty());

    // To a new key, with the same absolute expiry.
    let r = ok(
        &mut c,
        &rcmd!("RESTORE", "dst", at, payload.as_slice(), "ABSTTL"),
    );
    assert_eq!(r, Value::Okay);
    let i = info_some(&mut c, "dst");
    assert_eq!((i.token.as_slice(), i.fence), (tok.as_slice(), fence));
    assert_eq!(pexpiretime(&mut c, "dst"), at);
    assert_eq!(type_of(&mut c, "dst"), "redislock");
    assert_ttl_close(i.ttl, 60_000, 2_000, "restored ttl");

    // With a relative TTL.
    let r = ok(
        &mut c,
        &rcmd!("RESTORE", "dst2", 30_000, payload.as_slice()),
    );
    assert_eq!(r, Value::Okay);
    let i = info_some(&mut c, "dst2");
    assert_eq!((i.token.as_slice(), i.fence), (tok.as_slice(), fence));
    assert_ttl_close(pttl(&mut c, "dst2"), 30_000, 1_000, "RESTORE ttl 30000");

    // REPLACE over the original after it was released.
    assert_eq!(release(&mut c, "src", &tok), 1);
    let r = ok(
        &mut c,
        &rcmd!(
            "RESTORE",
            "src",
            at,
            payload.as_slice(),
            "ABSTTL",
            "REPLACE"
        ),
    );
    assert_eq!(r, Value::Okay);
    let i = info_some(&mut c, "src");
    assert_eq!((i.token.as_slice(), i.fence), (tok.as_slice(), fence));

    // The restored locks behave as locks.
    assert_eq!(acquire(&mut c, "dst", b"other", 1_000), None);
    assert_eq!(extend_px(&mut c, "dst", &tok, 10_000), 1);
    assert_eq!(release(&mut c, "dst", &tok), 1);
    assert!(!exists(&mut c, "dst"));
    ping(&mut c);
}

#[test]
fn copy_rename_move_and_memory_usage() {
    let s = Server::start();
    let mut c = s.conn();
    let (tok, fence) = grant(&mut c, "a", b"owner", 60_000);
    let at = pexpiretime(&mut c, "a");

    let usage = ok(&mut c, &rcmd!("MEMORY", "USAGE", "a"));
    assert!(
        matches!(usage, Value::Int(n) if n > 0),
        "MEMORY USAGE should be a positive integer: {usage:?}"
    );

    // COPY: both keys hold the same lock data and expiry; they are independent afterwards.
    assert_eq!(as_int(&ok(&mut c, &rcmd!("COPY", "a", "b"))), 1);
    for k in ["a", "b"] {
        let i = info_some(&mut c, k);
        assert_eq!(
            (i.token.as_slice(), i.fence),
            (tok.as_slice(), fence),
            "{k}"
        );
        assert_eq!(pexpiretime(&mut c, k), at, "COPY keeps the expiry of {k}");
    }
    assert_eq!(release(&mut c, "b", &tok), 1);
    assert!(!exists(&mut c, "b"));
    let i = info_some(&mut c, "a");
    assert_eq!((i.token.as_slice(), i.fence), (tok.as_slice(), fence));

    // RENAME.
    ok(&mut c, &rcmd!("RENAME", "a", "renamed"));
    assert!(!exists(&mut c, "a"));
    assert_eq!(info(&mut c, "a"), None);
    let i = info_some(&mut c, "renamed");
    assert_eq!((i.token.as_slice(), i.fence), (tok.as_slice(), fence));
    assert_eq!(pexpiretime(&mut c, "renamed"), at);
    assert_eq!(acquire(&mut c, "renamed", b"x", 1_000), None);
    assert_eq!(extend_px(&mut c, "renamed", &tok, 50_000), 1);
    let at = pexpiretime(&mut c, "renamed");

    // MOVE to db 1.
    assert_eq!(as_int(&ok(&mut c, &rcmd!("MOVE", "renamed", 1))), 1);
    // Valkey 8.1 leaves the client on the destination db after a MOVE or COPY … DB when any
    // module subscribes to generic keyspace events (a server bug, valkey-io/valkey#4024).
    // redislock subscribes only to `expired`, but another module may not: select db 0 again (a
    // no-op otherwise) so the check below looks at the source db.
    ok(&mut c, &rcmd!("SELECT", 0));
    assert!(!exists(&mut c, "renamed"));
    let mut c1 = s.conn();
    ok(&mut c1, &rcmd!("SELECT", 1));
    let i = info_some(&mut c1, "renamed");
    assert_eq!((i.token.as_slice(), i.fence), (tok.as_slice(), fence));
    assert_eq!(pexpiretime(&mut c1, "renamed"), at);
    assert_eq!(type_of(&mut c1, "renamed"), "redislock");
    let usage = ok(&mut c1, &rcmd!("MEMORY", "USAGE", "renamed"));
    assert!(matches!(usage, Value::Int(n) if n > 0), "{usage:?}");
    assert_eq!(release(&mut c1, "renamed", &tok), 1);
    assert!(!exists(&mut c1, "renamed"));

    // COPY into another db, too.
    grant(&mut c, "x", b"o", 60_000);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("COPY", "x", "x", "DB", 1))), 1);
    assert_eq!(info_some(&mut c1, "x").token, b"o");
    ping(&mut c);
}

#[test]
fn expired_lock_is_gone_after_restart() {
    let mut s = aof_server(true);
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "short", b"s", 200);
    grant(&mut c, "long", b"l", 60_000);
    ok(&mut c, &rcmd!("SAVE"));
    sleep_past_expiry(&mut c, "short");
    s.kill9_and_restart();
    let mut c = s.conn();
    assert_eq!(info(&mut c, "short"), None);
    assert!(!exists(&mut c, "short"));
    assert_eq!(info_some(&mut c, "long").token, b"l");
    let (_, g) = grant(&mut c, "short", b"t", 60_000);
    assert!(g > f);
}

#[test]
fn lock_changes_count_towards_rdb_save_points() {
    // `save <seconds> <changes>` only fires if lock writes count as changes.
    let s = Server::start();
    let mut c = s.conn();
    let changes = |c: &mut redis::Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
        field(&info, "rdb_changes_since_last_save")
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = changes(&mut c);
    grant(&mut c, "k", b"t", 60_000);
    let after_grant = changes(&mut c);
    assert!(after_grant > before, "a grant is a change");
    assert_eq!(extend_px(&mut c, "k", b"t", 60_000), 1);
    let after_extend = changes(&mut c);
    assert!(after_extend > after_grant, "an extend is a change");
    assert_eq!(release(&mut c, "k", b"t"), 1);
    assert!(changes(&mut c) > after_extend, "a release is a change");
}

// ---------------------------------------------------------------------------------------------
// Keys with holders, in both of the forms the module keeps them in
// ---------------------------------------------------------------------------------------------

/// What a reload must keep of a key with holders: its holders as `LOCK.INFO` lists them (token,
/// fence), its absolute expiry, and `DEBUG DIGEST-VALUE` (every lease end).
#[derive(Debug, PartialEq)]
pub struct HolderSet {
    key: String,
    holders: Vec<(Vec<u8>, i64)>,
    expire_at: i64,
    digest: Value,
}

pub fn holder_sets(con: &mut Connection, keys: &[&str]) -> Vec<HolderSet> {
    keys.iter()
        .map(|key| HolderSet {
            key: key.to_string(),
            holders: info_of(con, key)
                .holders
                .iter()
                .map(|h| (h.token.clone(), h.fence))
                .collect(),
            expire_at: pexpiretime(con, key),
            digest: ok(con, &rcmd!("DEBUG", "DIGEST-VALUE", key)),
        })
        .collect()
}

pub const HOLDER_KEYS: [&str; 5] = ["hs:small", "hs:large", "hs:shrunk", "hs:hover", "hs:long"];

/// Keys with holders of every size (a small set is packed in one block; past 16 holds the
/// module indexes it, and packs it again only once it is down to 8): a few readers; 40 places;
/// 20 places of which 14 were released (packed again); a set that went back and forth between
/// 16 and 17 holders; 10 readers with 500-byte tokens (indexed for their size). Re-grants and
/// extends move leases within each. Returns the highest fence granted.
pub fn populate_holder_sets(c: &mut Connection) -> i64 {
    let mut top = 0;
    for i in 0..3 {
        top = top.max(shared(c, "hs:small", &format!("r{i}"), 120_000 + i));
    }
    for i in 0..40 {
        let px = 120_000 + i % 5;
        top = top.max(place(c, "hs:large", &format!("p{i:02}"), px, 50));
    }
    assert_eq!(extend_px(c, "hs:large", b"p03", 150_000), 1);
    for i in 0..20 {
        top = top.max(place(c, "hs:shrunk", &format!("t{i:02}"), 120_000, 30));
    }
    for i in 0..14 {
        assert_eq!(release(c, "hs:shrunk", format!("t{i:02}").as_bytes()), 1);
    }
    for i in 0..16 {
        top = top.max(shared(c, "hs:hover", &format!("h{i:02}"), 120_000 - i));
    }
    for _ in 0..3 {
        top = top.max(shared(c, "hs:hover", "h16", 90_000));
        assert_eq!(release(c, "hs:hover", b"h16"), 1);
        top = top.max(shared(c, "hs:hover", "h17", 130_000));
    }
    // Re-granted: same fence, later lease.
    shared(c, "hs:hover", "h05", 140_000);
    for i in 0..10 {
        let token = format!("{i}{}", "L".repeat(499));
        top = top.max(shared(c, "hs:long", &token, 120_000 + i));
    }
    top
}

/// After a reload: every set is as it was; then sets change form again (the large one down to
/// 5 holds, the small one up to 20) and new grants get higher fences.
fn verify_holder_sets(c: &mut Connection, before: &[HolderSet], top: i64, what: &str) {
    assert_eq!(holder_sets(c, &HOLDER_KEYS), before, "{what}");
    for i in 0..35 {
        assert_eq!(
            release(c, "hs:large", format!("p{i:02}").as_bytes()),
            1,
            "{what}"
        );
    }
    assert_eq!(
        info_of(c, "hs:large").tokens(),
        ["p35", "p36", "p37", "p38", "p39"],
        "{what}"
    );
    for i in 3..20 {
        assert!(
            shared(c, "hs:small", &format!("r{i}"), 120_000) > top,
            "{what}"
        );
    }
    let small: Vec<String> = (0..20).map(|i| format!("r{i}")).collect();
    assert_eq!(info_of(c, "hs:small").tokens(), small, "{what}");
    assert!(place(c, "hs:shrunk", "new", 60_000, 30) > top, "{what}");
    assert_eq!(info_of(c, "hs:shrunk").holders.len(), 7, "{what}");
    // And the changed sets reload as they are.
    let changed = holder_sets(c, &HOLDER_KEYS);
    assert_eq!(ok(c, &rcmd!("DEBUG", "RELOAD")), Value::Okay);
    assert_eq!(
        holder_sets(c, &HOLDER_KEYS),
        changed,
        "{what}, then DEBUG RELOAD"
    );
}

#[test]
fn holder_sets_of_both_forms_survive_debug_reload_and_rdb_restarts() {
    let mut s = Server::start();
    let mut c = s.conn();
    let top = populate_holder_sets(&mut c);
    let before = holder_sets(&mut c, &HOLDER_KEYS);
    assert_eq!(ok(&mut c, &rcmd!("DEBUG", "RELOAD")), Value::Okay);
    assert_eq!(holder_sets(&mut c, &HOLDER_KEYS), before, "DEBUG RELOAD");
    assert_eq!(ok(&mut c, &rcmd!("SAVE")), Value::Okay);
    s.kill9_and_restart();
    let mut c = s.conn();
    verify_holder_sets(&mut c, &before, top, "SAVE + kill -9 + restart");
}

#[test]
fn holder_sets_of_both_forms_survive_aof_replay_and_rewrites() {
    let mut s = aof_server(false);
    let mut c = s.conn();
    let top = populate_holder_sets(&mut c);
    let before = holder_sets(&mut c, &HOLDER_KEYS);
    // Replayed effect by effect, as they crossed between the forms.
    s.kill9_and_restart();
    let mut c = s.conn();
    assert_eq!(holder_sets(&mut c, &HOLDER_KEYS), before, "AOF replay");
    for preamble in ["no", "yes"] {
        ok(
            &mut c,
            &rcmd!("CONFIG", "SET", "aof-use-rdb-preamble", preamble),
        );
        ok(&mut c, &rcmd!("BGREWRITEAOF"));
        s.wait_aof_rewrite_done();
        s.kill9_and_restart();
        c = s.conn();
        let what = format!("BGREWRITEAOF (preamble {preamble}) + restart");
        assert_eq!(holder_sets(&mut c, &HOLDER_KEYS), before, "{what}");
    }
    verify_holder_sets(&mut c, &before, top, "AOF");
}
