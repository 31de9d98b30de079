//! Read/write locks (`SHARED`) and semaphores (`LIMIT n`): one hold per token with its own
//! fence and lease, one first-come-first-served queue per key with batch grants, and exact
//! persistence and replication per holder.

use std::time::Duration;

use redis::{Connection, Value};

use crate::common::*;

/// One holder as `LOCK.INFO` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    pub token: Vec<u8>,
    pub fence: i64,
    pub ttl: i64,
    pub client: i64,
}

/// `LOCK.INFO` of any kind: its fields, and its holders.
#[derive(Debug, Clone)]
pub struct KindInfo {
    pub fields: Vec<(String, Value)>,
    pub holders: Vec<HolderInfo>,
}

impl KindInfo {
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    pub fn text(&self, name: &str) -> String {
        lossy(&as_bytes(
            self.get(name)
                .unwrap_or_else(|| panic!("no {name} in {self:?}")),
        ))
    }

    pub fn int(&self, name: &str) -> i64 {
        as_int(
            self.get(name)
                .unwrap_or_else(|| panic!("no {name} in {self:?}")),
        )
    }

    pub fn tokens(&self) -> Vec<String> {
        self.holders.iter().map(|h| lossy(&h.token)).collect()
    }

    pub fn fence_of(&self, token: &str) -> i64 {
        self.holders
            .iter()
            .find(|h| h.token == token.as_bytes())
            .unwrap_or_else(|| panic!("{token} holds nothing: {self:?}"))
            .fence
    }
}

fn pairs(v: &Value) -> Vec<(String, Value)> {
    field_pairs(v)
        .into_iter()
        .map(|(k, v)| (lossy(&k), v))
        .collect()
}

pub fn kind_info(con: &mut Connection, key: &str) -> Option<KindInfo> {
    let v = ok(con, &rcmd!("LOCK.INFO", key));
    if v == Value::Nil {
        return None;
    }
    let fields = pairs(&v);
    let holders = match fields.iter().find(|(k, _)| k == "holders") {
        Some((_, Value::Array(list))) => list
            .iter()
            .map(|h| {
                let p = pairs(h);
                let get = |n: &str| p.iter().find(|(k, _)| k == n).unwrap().1.clone();
                HolderInfo {
                    token: as_bytes(&get("token")),
                    fence: as_int(&get("fence")),
                    ttl: as_int(&get("ttl")),
                    client: as_int(&get("client")),
                }
            })
            .collect(),
        other => panic!("LOCK.INFO {key} should list holders, got {other:?}"),
    };
    Some(KindInfo { fields, holders })
}

#[track_caller]
pub fn info_of(con: &mut Connection, key: &str) -> KindInfo {
    kind_info(con, key).unwrap_or_else(|| panic!("LOCK.INFO {key} should show a lock"))
}

/// `LOCK.ACQUIRE key token PX px <options…>`: the grant, or None for nil.
pub fn acquire_with(
    con: &mut Connection,
    key: &str,
    token: &str,
    px: i64,
    options: &[&str],
) -> Option<i64> {
    let mut cmd = rcmd!("LOCK.ACQUIRE", key, token, "PX", px);
    for o in options {
        cmd.arg(*o);
    }
    parse_grant(&ok(con, &cmd)).map(|(t, fence)| {
        if token != "*" {
            assert_eq!(t, token.as_bytes());
        }
        fence
    })
}

#[track_caller]
pub fn shared(con: &mut Connection, key: &str, token: &str, px: i64) -> i64 {
    acquire_with(con, key, token, px, &["SHARED"])
        .unwrap_or_else(|| panic!("{token} should get a shared hold of {key}"))
}

#[track_caller]
pub fn place(con: &mut Connection, key: &str, token: &str, px: i64, limit: u32) -> i64 {
    acquire_with(con, key, token, px, &["LIMIT", &limit.to_string()])
        .unwrap_or_else(|| panic!("{token} should get a place of {key}"))
}

fn digest(con: &mut Connection) -> Vec<u8> {
    as_bytes(&ok(con, &rcmd!("DEBUG", "DIGEST")))
}

#[test]
fn many_readers_hold_at_once_each_with_a_fence_and_a_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let fences: Vec<i64> = (0..5)
        .map(|i| shared(&mut c, "rw", &format!("r{i}"), 10_000 + i * 1_000))
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    let info = info_of(&mut c, "rw");
    assert_eq!(info.text("mode"), "shared");
    assert_eq!(info.int("waiters"), 0);
    assert!(info.get("limit").is_none() && info.get("token").is_none());
    assert_eq!(info.tokens(), ["r0", "r1", "r2", "r3", "r4"]);
    for (i, h) in info.holders.iter().enumerate() {
        assert_eq!(h.fence, fences[i]);
        assert_ttl_close(h.ttl, 10_000 + i as i64 * 1_000, 200, "holder ttl");
        assert_eq!(h.client, 0);
    }
    // The key lives as long as its latest lease.
    assert_ttl_close(pttl(&mut c, "rw"), 14_000, 200, "PTTL is the latest lease");
    assert_eq!(type_of(&mut c, "rw"), "redislock");
    // Extend and release act on one holder only.
    assert_eq!(extend_px(&mut c, "rw", b"r0", 30_000), 1);
    assert_ttl_close(pttl(&mut c, "rw"), 30_000, 200, "PTTL follows an extend");
    assert_eq!(release(&mut c, "rw", b"r0"), 1);
    assert_eq!(release(&mut c, "rw", b"r0"), 0);
    assert_eq!(extend_px(&mut c, "rw", b"r0", 1_000), 0);
    assert_ttl_close(
        pttl(&mut c, "rw"),
        14_000,
        200,
        "PTTL after the latest left",
    );
    assert_eq!(info_of(&mut c, "rw").tokens(), ["r1", "r2", "r3", "r4"]);
    // A re-grant keeps the fence and resets the lease.
    assert_eq!(shared(&mut c, "rw", "r1", 50_000), fences[1]);
    assert_ttl_close(pttl(&mut c, "rw"), 50_000, 200, "PTTL after a re-grant");
    for t in ["r1", "r2", "r3", "r4"] {
        assert_eq!(release(&mut c, "rw", t.as_bytes()), 1);
    }
    assert!(!exists(&mut c, "rw"), "the key goes with its last holder");
}

#[test]
fn a_writer_waits_for_every_reader() {
    let s = Server::start();
    let mut c = s.conn();
    let readers: Vec<i64> = (0..3)
        .map(|i| shared(&mut c, "rw", &format!("r{i}"), 60_000))
        .collect();
    assert_eq!(acquire_with(&mut c, "rw", "w", 10_000, &[]), None);
    let writer = spawn_waiter(&s, "rw", "w", 10_000, 20_000);
    wait_waiters(&mut c, "rw", 1);
    for t in ["r0", "r1"] {
        assert_eq!(release(&mut c, "rw", t.as_bytes()), 1);
        // The release serves the queue in the same command: still held.
        let info = info_of(&mut c, "rw");
        assert_eq!(
            (info.text("mode"), info.int("waiters")),
            ("shared".into(), 1)
        );
    }
    assert!(writer.try_recv().is_none());
    assert_eq!(release(&mut c, "rw", b"r2"), 1);
    let (_, fence) = writer.granted();
    assert!(fence > readers[2]);
    let info = info_of(&mut c, "rw");
    assert_eq!(info.text("mode"), "exclusive");
    assert_eq!(info.tokens(), ["w"]);
    assert_eq!(info.fence_of("w"), fence);
}

#[test]
fn readers_queue_behind_a_waiting_writer_and_are_granted_together() {
    let s = Server::start();
    let mut c = s.conn();
    shared(&mut c, "rw", "r1", 60_000);
    let writer = spawn_waiter(&s, "rw", "w", 60_000, 20_000);
    wait_waiters(&mut c, "rw", 1);
    // No writer starvation: a reader does not join the readers while a writer waits.
    assert_eq!(
        acquire_with(&mut c, "rw", "late", 10_000, &["SHARED"]),
        None
    );
    let r2 = spawn_waiter_with(&s, "rw", "r2", 60_000, 20_000, &["SHARED"]);
    wait_waiters(&mut c, "rw", 2);
    let r3 = spawn_waiter_with(&s, "rw", "r3", 60_000, 20_000, &["SHARED"]);
    wait_waiters(&mut c, "rw", 3);
    let w2 = spawn_waiter(&s, "rw", "w2", 60_000, 20_000);
    wait_waiters(&mut c, "rw", 4);
    let r4 = spawn_waiter_with(&s, "rw", "r4", 60_000, 20_000, &["SHARED"]);
    wait_waiters(&mut c, "rw", 5);
    let handoffs = stat(&s, "handoffs");
    assert_eq!(release(&mut c, "rw", b"r1"), 1);
    let (_, wf) = writer.granted();
    assert_eq!(info_of(&mut c, "rw").int("waiters"), 4);
    // The two readers after the writer, together, in the releasing command itself (seen from
    // inside the same MULTI); not the writer behind them, nor the reader behind that writer.
    let (released, during): (i64, Value) = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("rw")
        .arg("w")
        .cmd("LOCK.INFO")
        .arg("rw")
        .query(&mut c)
        .unwrap();
    assert_eq!(released, 1);
    let holders: Vec<String> = match &during {
        Value::Array(fields) => match fields.last() {
            Some(Value::Array(hs)) => hs
                .iter()
                .map(|h| lossy(&as_bytes(&pairs(h)[0].1)))
                .collect(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(holders, ["r2", "r3"], "granted together by the release");
    let (_, f2) = r2.granted();
    let (_, f3) = r3.granted();
    assert!(wf < f2 && f2 < f3, "{wf} {f2} {f3}");
    let info = info_of(&mut c, "rw");
    assert_eq!(info.tokens(), ["r2", "r3"]);
    assert_eq!(info.int("waiters"), 2);
    assert_eq!(stat(&s, "handoffs") - handoffs, 3);
    assert!(w2.try_recv().is_none() && r4.try_recv().is_none());
    release(&mut c, "rw", b"r2");
    release(&mut c, "rw", b"r3");
    let (_, fw2) = w2.granted();
    release(&mut c, "rw", b"w2");
    let (_, f4) = r4.granted();
    assert!(f3 < fw2 && fw2 < f4);
}

#[test]
fn a_semaphore_never_grants_more_than_its_limit() {
    let s = Server::start();
    let mut c = s.conn();
    let fences: Vec<i64> = (0..3)
        .map(|i| place(&mut c, "sem", &format!("p{i}"), 60_000, 3))
        .collect();
    assert_eq!(
        acquire_with(&mut c, "sem", "p3", 60_000, &["LIMIT", "3"]),
        None
    );
    let info = info_of(&mut c, "sem");
    assert_eq!(
        (info.text("mode"), info.int("limit")),
        ("semaphore".into(), 3)
    );
    assert_eq!(
        info.holders.iter().map(|h| h.fence).collect::<Vec<_>>(),
        fences
    );
    // Waiters take places in order as they free up.
    let a = spawn_waiter_with(&s, "sem", "a", 60_000, 20_000, &["LIMIT", "3"]);
    wait_waiters(&mut c, "sem", 1);
    let b = spawn_waiter_with(&s, "sem", "b", 60_000, 20_000, &["LIMIT", "3"]);
    wait_waiters(&mut c, "sem", 2);
    // A newcomer never overtakes, even for a place that frees up.
    assert_eq!(release(&mut c, "sem", b"p1"), 1);
    let (_, fa) = a.granted();
    assert!(fa > fences[2]);
    assert_eq!(
        acquire_with(&mut c, "sem", "c", 60_000, &["LIMIT", "3"]),
        None
    );
    assert_eq!(info_of(&mut c, "sem").holders.len(), 3);
    assert_eq!(release(&mut c, "sem", b"p0"), 1);
    b.granted();
    assert_eq!(info_of(&mut c, "sem").tokens(), ["p2", "a", "b"]);
    // A batch: three places free at once go to the three waiters at the head.
    let waiters: Vec<Waiter> = ["x", "y", "z", "late"]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let w = spawn_waiter_with(&s, "sem", t, 60_000, 20_000, &["LIMIT", "3"]);
            wait_waiters(&mut c, "sem", i as i64 + 1);
            w
        })
        .collect();
    ok(&mut c, &rcmd!("DEL", "sem"));
    for w in &waiters[..3] {
        w.granted();
    }
    let info = info_of(&mut c, "sem");
    assert_eq!(
        (info.tokens(), info.int("waiters")),
        (vec!["x".into(), "y".into(), "z".into()], 1)
    );
    assert!(waiters[3].try_recv().is_none());
}

#[test]
fn kind_and_limit_mismatches_answer_err_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    place(&mut c, "sem", "a", 60_000, 2);
    shared(&mut c, "rw", "r", 60_000);
    acquire_with(&mut c, "ex", "e", 60_000, &[]).unwrap();
    let before = digest(&mut c);
    let sem_err = "ERR the key is a semaphore with LIMIT 2: acquire it with LIMIT 2";
    let rw_err =
        "ERR the key is a read/write lock (exclusive or SHARED holds), not a semaphore: LIMIT does not apply";
    for (key, opts, want) in [
        ("sem", &["LIMIT", "3"][..], sem_err),
        ("sem", &["LIMIT", "1"][..], sem_err),
        ("sem", &[][..], sem_err),
        ("sem", &["SHARED"][..], sem_err),
        ("sem", &["SHARED", "BLOCK", "100"][..], sem_err),
        ("rw", &["LIMIT", "2"][..], rw_err),
        ("ex", &["LIMIT", "2", "BLOCK", "0"][..], rw_err),
    ] {
        for token in ["b", "a", "r", "e"] {
            let mut cmd = rcmd!("LOCK.ACQUIRE", key, token, "PX", 1000);
            for o in opts {
                cmd.arg(*o);
            }
            assert_eq!(err(&mut c, &cmd), want, "{key} {token} {opts:?}");
        }
    }
    // The same token asking for another mode while holding.
    let other = "ERR this token already holds the key in another mode: release it first";
    assert_eq!(
        err(&mut c, &rcmd!("LOCK.ACQUIRE", "rw", "r", "PX", 1000)),
        other
    );
    assert_eq!(
        err(
            &mut c,
            &rcmd!("LOCK.ACQUIRE", "ex", "e", "PX", 1000, "SHARED")
        ),
        other
    );
    for bad in ["0", "1000001", "-1", "18446744073709551615", "1.5", "x"] {
        assert_eq!(
            err(
                &mut c,
                &rcmd!("LOCK.ACQUIRE", "new", "t", "PX", 1000, "LIMIT", bad)
            ),
            "ERR invalid LIMIT: must be an integer from 1 to 1000000"
        );
    }
    assert_eq!(
        err(
            &mut c,
            &rcmd!(
                "LOCK.ACQUIRE",
                "new",
                "t",
                "PX",
                1000,
                "SHARED",
                "LIMIT",
                "2"
            )
        ),
        "ERR syntax error: SHARED and LIMIT are mutually exclusive"
    );
    assert_eq!(digest(&mut c), before, "a refused acquire changes nothing");
    assert!(!exists(&mut c, "new"));
    // LIMIT 1000000 is the largest.
    assert!(acquire_with(&mut c, "big", "t", 1000, &["LIMIT", "1000000"]).is_some());
    // LOCK.CALL works for any kind of holder; a gate is none of them.
    ok(
        &mut c,
        &rcmd!("LOCK.CALL", "sem", "a", "SET", "{sem}x", "1"),
    );
    ok(&mut c, &rcmd!("LOCK.CALL", "rw", "r", "SET", "{rw}x", "1"));
    assert!(err(
        &mut c,
        &rcmd!("LOCK.CALL", "sem", "zz", "SET", "{sem}x", "1")
    )
    .starts_with("NOTOWNER"));
    assert!(err(
        &mut c,
        &rcmd!("LOCK.FENCE", "sem", "5", "SET", "{sem}x", "1")
    )
    .starts_with("WRONGTYPE"));
}

#[test]
fn a_lease_that_ends_hands_its_place_on_at_once_and_not_before() {
    let s = Server::start();
    let mut c = s.conn();
    place(&mut c, "sem", "short", 300, 2);
    // By the server's clock: the key lives as long as its latest lease, the short one for now.
    let ends_at = pexpiretime(&mut c, "sem");
    place(&mut c, "sem", "long", 60_000, 2);
    assert_eq!(info_of(&mut c, "sem").holders[0].token, b"short");
    let w = spawn_waiter_with(&s, "sem", "next", 60_000, 20_000, &["LIMIT", "2"]);
    wait_waiters(&mut c, "sem", 1);
    w.recv().granted();
    // The grant's time by the server's clock, not by when this thread got to read the reply
    // (a loaded machine can run it late): "next" holds the latest lease, 60 s from its grant.
    let granted_at = pexpiretime(&mut c, "sem") - 60_000;
    // Never before the lease ends (1 ms of clock granularity), and within a few ms after.
    assert!(
        granted_at >= ends_at,
        "granted {} ms early",
        ends_at - granted_at
    );
    assert!(
        granted_at - ends_at < 100 * i64::from(time_scale()),
        "granted {} ms late",
        granted_at - ends_at
    );
    assert_eq!(stat(&s, "lease_ends"), 1);
    assert_eq!(info_of(&mut c, "sem").tokens(), ["long", "next"]);
    assert_eq!(release(&mut c, "sem", b"short"), 0);
}

#[test]
fn a_lease_ends_with_nobody_waiting_and_the_replica_sees_it() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    shared(&mut c, "rw", "brief", 100);
    shared(&mut c, "rw", "stays", 60_000);
    wait_until("the brief lease to end", Duration::from_secs(5), || {
        stat(&m, "lease_ends") == 1
    });
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    assert_eq!(info_of(&mut rc, "rw").tokens(), ["stays"]);
    assert_eq!(info_of(&mut c, "rw").tokens(), ["stays"]);
    assert_eq!(digest(&mut c), digest(&mut rc));
    // The replica's key lives exactly as long as the master's.
    assert_eq!(pexpiretime(&mut c, "rw"), pexpiretime(&mut rc, "rw"));
    assert_eq!(
        scheduled(&m),
        0,
        "one lease left: the key's TTL ends it, as an exclusive lock's"
    );
}

#[test]
fn a_lone_holder_s_lease_ends_with_the_key_and_a_waiter_is_handed_it_on_time() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    // Nobody waits: the key's TTL, its one lease, ends it; nothing is scheduled.
    let first = shared(&mut c, "one", "brief", 100);
    assert_eq!(scheduled(&m), 0, "one lease: the key's TTL ends it");
    wait_until("the lone lease to end", Duration::from_secs(5), || {
        !exists(&mut c, "one")
    });
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    assert_eq!(dbsize(&mut rc), 0, "the replica dropped the key too");
    let (_, next) = grant(&mut c, "one", b"writer", 60_000);
    assert!(next > first, "fence {next} after {first}");
    release(&mut c, "one", b"writer");
    // A writer waits behind a lone reader: handed the lock when the lease
    // ends, never before, and within a few ms.
    let reader = shared(&mut c, "solo", "reader", 300);
    let ends_at = pexpiretime(&mut c, "solo");
    let w = spawn_waiter_with(&m, "solo", "writer", 60_000, 20_000, &[]);
    wait_waiters(&mut c, "solo", 1);
    let (token, fence) = w.granted();
    // The grant's time by the server's clock: the writer's lease is the key's, 60 s from it.
    let granted_at = pexpiretime(&mut c, "solo") - 60_000;
    assert_eq!(token, b"writer");
    assert!(fence > reader, "fence {fence} after {reader}");
    assert!(
        granted_at >= ends_at,
        "granted {} ms early",
        ends_at - granted_at
    );
    assert!(
        granted_at - ends_at < 100 * i64::from(time_scale()),
        "granted {} ms late",
        granted_at - ends_at
    );
    wait_replica_caught_up(&m, &r);
    assert_eq!(digest(&mut c), digest(&mut rc));
}

fn scheduled(s: &Server) -> i64 {
    stat(s, "scheduled_jobs")
}

/// A mix of every kind, with re-grants, extends, releases and a lease end.
fn busy_keys(c: &mut Connection) {
    shared(c, "rw", "r1", 60_000);
    shared(c, "rw", "r2", 70_000);
    shared(c, "rw", "r3", 200);
    assert_eq!(extend_px(c, "rw", b"r1", 90_000), 1);
    place(c, "sem", "a", 60_000, 3);
    place(c, "sem", "b", 80_000, 3);
    place(c, "sem", "c", 80_000, 3);
    assert_eq!(release(c, "sem", b"b"), 1);
    place(c, "sem", "a", 100_000, 3);
    acquire_with(c, "ex", "e", 60_000, &[]).unwrap();
    acquire_with(c, "bin", "\u{0}\r\n *", 60_000, &["LIMIT", "7"]).unwrap();
    acquire_with(c, "gen", "*", 60_000, &["SHARED"]);
}

#[test]
fn replicas_and_the_aof_hold_every_holder_exactly() {
    let m = Server::builder().config("appendonly", &["yes"]).start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    busy_keys(&mut c);
    wait_until("r3's lease to end", Duration::from_secs(5), || {
        stat(&m, "lease_ends") == 1
    });
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    let want = digest(&mut c);
    assert_eq!(digest(&mut rc), want, "replica");
    for key in ["rw", "sem", "ex", "bin", "gen"] {
        let (mi, ri) = (info_of(&mut c, key), info_of(&mut rc, key));
        let strip = |i: &KindInfo| {
            i.holders
                .iter()
                .map(|h| (h.token.clone(), h.fence))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&mi), strip(&ri), "{key}");
        assert_eq!(pexpiretime(&mut c, key), pexpiretime(&mut rc, key), "{key}");
    }
    assert_eq!(info_of(&mut c, "rw").tokens(), ["r1", "r2"]);
    assert_eq!(info_of(&mut c, "sem").tokens(), ["a", "c"]);
    let aof = m.aof_text();
    assert!(aof.contains("LOCK._HOLD"), "{aof}");
    drop(rc);
    // Restart from the AOF as written, then from a rewritten one, then from RDB.
    let mut m = m;
    m.restart(Stop::Kill);
    let mut c = m.conn();
    assert_eq!(digest(&mut c), want, "AOF replay");
    ok(&mut c, &rcmd!("BGREWRITEAOF"));
    m.wait_aof_rewrite_done();
    m.restart(Stop::Kill);
    let mut c = m.conn();
    assert_eq!(digest(&mut c), want, "rewritten AOF");
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    assert_eq!(digest(&mut c), want, "DEBUG RELOAD");
    // New grants after all that still get higher fences.
    let top = info_of(&mut c, "sem")
        .holders
        .iter()
        .map(|h| h.fence)
        .max()
        .unwrap();
    assert!(place(&mut c, "sem", "d", 1000, 3) > top);
}

#[test]
fn dump_restore_copy_rename_and_move_keep_every_holder() {
    let s = Server::start();
    let mut c = s.conn();
    busy_keys(&mut c);
    let strip = |i: &KindInfo| -> Vec<(Vec<u8>, i64)> {
        i.holders
            .iter()
            .map(|h| (h.token.clone(), h.fence))
            .collect()
    };
    let sem = strip(&info_of(&mut c, "sem"));
    let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", "sem")));
    let at = pexpiretime(&mut c, "sem");
    ok(
        &mut c,
        &rcmd!("RESTORE", "sem2", at, &payload[..], "ABSTTL"),
    );
    assert_eq!(strip(&info_of(&mut c, "sem2")), sem);
    assert_eq!(info_of(&mut c, "sem2").int("limit"), 3);
    ok(&mut c, &rcmd!("COPY", "sem", "sem3"));
    ok(&mut c, &rcmd!("RENAME", "sem3", "sem4"));
    assert_eq!(strip(&info_of(&mut c, "sem4")), sem);
    ok(&mut c, &rcmd!("MOVE", "sem4", 1));
    ok(&mut c, &rcmd!("SELECT", 1));
    assert_eq!(strip(&info_of(&mut c, "sem4")), sem);
    // Each copy is its own semaphore.
    assert_eq!(release(&mut c, "sem4", b"a"), 1);
    ok(&mut c, &rcmd!("SELECT", 0));
    assert_eq!(strip(&info_of(&mut c, "sem")), sem);
    let usage = |c: &mut Connection| as_int(&ok(c, &rcmd!("MEMORY", "USAGE", "sem")));
    let two = usage(&mut c);
    assert!(
        two > 64,
        "MEMORY USAGE {two}: the key, its holders' block and their holds"
    );
    // A third holder's 100-byte token is counted (in allocator size classes).
    place(&mut c, "sem", &"t".repeat(100), 60_000, 3);
    let three = usage(&mut c);
    assert!(three > two + 64, "MEMORY USAGE {two}, then {three}");
}

#[test]
fn an_rdb_written_before_holders_existed_still_loads() {
    // Written by the release before shared locks and semaphores (record encoding version 1):
    // three exclusive locks leased until 2058 and a fence gate.
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/exclusive-encver1.rdb");
    let mut s = Server::start();
    std::fs::copy(&fixture, s.dir().join("dump.rdb")).unwrap();
    s.restart(Stop::Kill);
    let mut c = s.conn();
    for (key, token, fence) in [
        ("legacy:a", "owner-a", 61_808_606_836_736),
        ("legacy:b", "owner-b", 61_808_606_840_832),
        ("legacy:a2", "owner-c", 61_808_606_844_928),
    ] {
        let info = info_of(&mut c, key);
        assert_eq!(
            (info.text("mode"), info.text("token")),
            ("exclusive".into(), token.into())
        );
        assert_eq!(info.int("fence"), fence);
        assert_eq!(info.fence_of(token), fence);
    }
    assert_eq!(pexpiretime(&mut c, "legacy:a"), 2_796_049_567_614);
    let gate = pairs(&ok(&mut c, &rcmd!("LOCK.INFO", "legacy:gate")));
    assert_eq!(
        gate[0],
        ("mode".into(), Value::BulkString(b"gate".to_vec()))
    );
    assert_eq!(as_int(&gate[1].1), 41);
    assert_eq!(release(&mut c, "legacy:b", b"owner-b"), 1);
    // The fence clock came back too.
    assert!(shared(&mut c, "legacy:b", "new", 1000) > 61_808_606_844_928);
}

#[test]
fn ephemeral_holds_end_one_by_one_with_their_connections() {
    let s = Server::start();
    let mut c = s.conn();
    let mut own1 = s.conn();
    let mut own2 = s.conn();
    let id1 = as_int(&ok(&mut own1, &rcmd!("CLIENT", "ID")));
    acquire_with(&mut own1, "rw", "one", 60_000, &["SHARED", "EPHEMERAL"]).unwrap();
    acquire_with(&mut own2, "rw", "two", 60_000, &["SHARED", "EPHEMERAL"]).unwrap();
    let w = spawn_waiter(&s, "rw", "writer", 60_000, 20_000);
    wait_waiters(&mut c, "rw", 1);
    let info = info_of(&mut c, "rw");
    assert_eq!(info.holders[0].client, id1);
    assert_eq!(stat(&s, "ephemeral_holds"), 2);
    drop(own1);
    wait_client_gone(&mut c, id1);
    wait_until("one's hold to end", Duration::from_secs(5), || {
        info_of(&mut c, "rw").tokens() == ["two"]
    });
    assert!(w.try_recv().is_none());
    drop(own2);
    w.granted();
    assert_eq!(stat(&s, "ephemeral_holds"), 0);
    // A waiter granted a shared hold with EPHEMERAL is bound to its own connection: it ends
    // with it (the harness's waiter closes its connection once answered).
    let reader = spawn_waiter_with(&s, "rw", "reader", 60_000, 20_000, &["SHARED", "EPHEMERAL"]);
    wait_waiters(&mut c, "rw", 1);
    assert_eq!(release(&mut c, "rw", b"writer"), 1);
    reader.granted();
    wait_until(
        "the waiter's bound hold to end",
        Duration::from_secs(5),
        || !exists(&mut c, "rw"),
    );
    assert_eq!(stat(&s, "ephemeral_releases"), 3);
}

#[test]
fn waiters_refused_when_the_key_becomes_another_kind() {
    let s = Server::start();
    let mut c = s.conn();
    acquire_with(&mut c, "k", "x", 60_000, &[]).unwrap();
    let w = spawn_waiter_with(&s, "k", "r", 60_000, 20_000, &["SHARED"]);
    wait_waiters(&mut c, "k", 1);
    place(&mut c, "other", "p", 60_000, 4);
    ok(&mut c, &rcmd!("RENAME", "other", "k"));
    assert_eq!(
        w.recv().error(),
        "ERR the key is a semaphore with LIMIT 4: acquire it with LIMIT 4"
    );
    assert_eq!(info_of(&mut c, "k").tokens(), ["p"]);
}

#[test]
fn ten_thousand_holders() {
    let s = Server::start();
    let mut c = s.conn();
    let n = 10_000;
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("LOCK.ACQUIRE")
            .arg("big")
            .arg(format!("holder-{i:05}"))
            .arg("PX")
            .arg(60_000 + i)
            .arg("LIMIT")
            .arg(n);
    }
    // The last lease is granted between these two readings of the clock (the server's is the
    // same): however long the pipeline takes on a loaded machine, the key expires with it.
    let sent_at = now_ms();
    let replies: Vec<Value> = pipe.query(&mut c).unwrap();
    let answered_at = now_ms();
    assert!(replies.iter().all(|r| parse_grant(r).is_some()));
    assert_eq!(
        acquire_with(&mut c, "big", "one-more", 1000, &["LIMIT", &n.to_string()]),
        None
    );
    let info = info_of(&mut c, "big");
    assert_eq!(info.holders.len(), n as usize);
    let expires = pexpiretime(&mut c, "big") - (60_000 + n - 1);
    assert!(
        (sent_at..=answered_at + 1).contains(&expires),
        "latest lease granted at {expires}, outside [{sent_at}, {answered_at}]"
    );
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("LOCK.RELEASE")
            .arg("big")
            .arg(format!("holder-{i:05}"));
    }
    let replies: Vec<i64> = pipe.query(&mut c).unwrap();
    assert!(replies.iter().all(|&r| r == 1));
    assert!(!exists(&mut c, "big"));
    assert_eq!(scheduled(&s), 0);
}

#[test]
fn a_lease_end_waits_for_a_client_pause() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    place(&mut c, "sem", "short", 300, 1);
    let w = spawn_waiter_with(&m, "sem", "next", 60_000, 20_000, &["LIMIT", "1"]);
    wait_waiters(&mut c, "sem", 1);
    ok(&mut c, &rcmd!("CLIENT", "PAUSE", 1500, "WRITE"));
    let paused_at = now_ms();
    let reply = w.recv();
    assert!(
        now_ms() - paused_at >= 1400,
        "granted during the pause: {:?}",
        reply.reply
    );
    reply.granted();
    ping(&mut c);
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    assert_eq!(digest(&mut c), digest(&mut rc));
    assert_eq!(info_of(&mut rc, "sem").tokens(), ["next"]);
}

#[test]
fn extreme_numbers_with_holders_and_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    let max_ttl = 1_000_000_000_000i64;
    shared(&mut c, "rw", "far", max_ttl);
    shared(&mut c, "rw", "near", 1);
    let w = spawn_waiter(&s, "rw", "w", max_ttl, 0);
    wait_waiters(&mut c, "rw", 1);
    let near_max = (i64::MAX - now_ms()).to_string();
    for ttl in [
        "0",
        "-1",
        "1000000000001",
        "9223372036854775807",
        "18446744073709551615",
        &near_max,
    ] {
        assert!(err(&mut c, &rcmd!("LOCK.EXTEND", "rw", "far", "PX", ttl)).starts_with("ERR"));
        assert!(err(
            &mut c,
            &rcmd!("LOCK.ACQUIRE", "rw", "x", "PX", ttl, "SHARED")
        )
        .starts_with("ERR"));
    }
    for limit in ["2147483648", "9007199254740992", "9223372036854775807"] {
        assert!(err(
            &mut c,
            &rcmd!("LOCK.ACQUIRE", "s", "x", "PX", 10, "LIMIT", limit)
        )
        .starts_with("ERR"));
    }
    let _ = run(&mut c, &rcmd!("PEXPIRE", "rw", "18446744073709551"));
    wait_until("the 1 ms lease to end", Duration::from_secs(5), || {
        ping(&mut c);
        stat(&s, "lease_ends") == 1
    });
    assert_eq!(info_of(&mut c, "rw").tokens(), ["far"]);
    assert_eq!(release(&mut c, "rw", b"far"), 1);
    w.granted();
    assert_ttl_close(pttl(&mut c, "rw"), max_ttl, 1000, "max TTL");
}

#[test]
fn restored_reloaded_and_copied_holders_still_have_their_leases_ended() {
    let s = Server::start();
    let mut c = s.conn();
    place(&mut c, "sem", "short", 400, 2);
    place(&mut c, "sem", "long", 60_000, 2);
    let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", "sem")));
    let at = pexpiretime(&mut c, "sem");
    ok(
        &mut c,
        &rcmd!("RESTORE", "copy", at, &payload[..], "ABSTTL"),
    );
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    ok(&mut c, &rcmd!("COPY", "sem", "copied"));
    // Nobody touches the keys: the module ends the three short leases by itself.
    wait_until("the short leases to end", Duration::from_secs(5), || {
        stat(&s, "lease_ends") == 3
    });
    for key in ["sem", "copy", "copied"] {
        assert_eq!(info_of(&mut c, key).tokens(), ["long"], "{key}");
    }
}

#[test]
fn a_promoted_replica_ends_the_leases_its_master_left() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    shared(&mut c, "rw", "ends-while-replica", 1_000);
    shared(&mut c, "rw", "ends-after-promotion", 2_500);
    shared(&mut c, "rw", "stays", 60_000);
    wait_replica_caught_up(&m, &r);
    // The master stops (SIGSTOP) before the first lease ends: no lease end reaches the replica.
    let pid = m.pid().expect("master runs");
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let mut rc = r.conn();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut rc)
        .unwrap();
    assert!(
        field(&stats, "cmdstat_lock._hold").is_some_and(|v| v.starts_with("calls=3,")),
        "the replica should have the three grants and nothing else: {stats}"
    );
    // The first lease ends while the server is still a replica.
    wait_until("the first lease to pass", Duration::from_secs(5), || {
        info_of(&mut rc, "rw").holders.len() == 2
    });
    assert_eq!(stat(&r, "lease_ends"), 0, "a replica ends nothing itself");
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    wait_until(
        "the promoted server to end the lease that passed",
        Duration::from_secs(5),
        || stat(&r, "lease_ends") >= 1,
    );
    wait_until("the second lease to end", Duration::from_secs(5), || {
        stat(&r, "lease_ends") == 2
    });
    assert_eq!(info_of(&mut rc, "rw").tokens(), ["stays"]);
    let resumed = std::process::Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(resumed.success());
}

#[test]
fn memory_usage_counts_the_holders_and_a_flush_leaves_no_job_behind() {
    let s = Server::start();
    let mut c = s.conn();
    let used = |c: &mut Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
        field(&info, "used_memory").unwrap().parse().unwrap()
    };
    let before = used(&mut c);
    let n = 2_000;
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("LOCK.ACQUIRE")
            .arg("sem")
            .arg(format!("holder-token-{i:010}"))
            .arg("PX")
            .arg(600_000)
            .arg("LIMIT")
            .arg(n)
            .ignore();
    }
    pipe.query::<()>(&mut c).unwrap();
    let grown = used(&mut c) - before;
    let reported = as_int(&ok(&mut c, &rcmd!("MEMORY", "USAGE", "sem", "SAMPLES", 0)));
    let ratio = reported as f64 / grown as f64;
    assert!(
        (0.7..=1.3).contains(&ratio),
        "MEMORY USAGE {reported} against used_memory growth {grown}"
    );
    assert!(scheduled(&s) >= 1);
    ok(&mut c, &rcmd!("FLUSHALL"));
    assert_eq!(scheduled(&s), 0, "the flushed key's lease-end job is gone");
    assert_eq!(stat(&s, "timers"), 0);
}

#[test]
fn memory_usage_of_small_holder_sets_follows_used_memory() {
    // 2,000 keys whose holder sets grow from one holder to ten (packed in one block each) and
    // then to twenty (indexed): the later leases need no new lease-end job, so used_memory grows
    // by what the sets grew, and MEMORY USAGE must say so.
    let s = Server::start();
    let mut c = s.conn();
    let n = 2_000;
    let used = |c: &mut Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
        field(&info, "used_memory").unwrap().parse().unwrap()
    };
    let usage = |c: &mut Connection| -> i64 {
        let mut pipe = redis::pipe();
        for i in 0..n {
            pipe.cmd("MEMORY")
                .arg("USAGE")
                .arg(format!("k{i}"))
                .arg("SAMPLES")
                .arg(0);
        }
        pipe.query::<Vec<i64>>(c).unwrap().iter().sum()
    };
    let grow = |c: &mut Connection, holders: std::ops::Range<i64>| {
        let mut pipe = redis::pipe();
        for i in 0..n {
            for j in holders.clone() {
                pipe.cmd("LOCK.ACQUIRE")
                    .arg(format!("k{i}"))
                    .arg(format!("{i:016}{j:016}"))
                    .arg("PX")
                    .arg(600_000 + j)
                    .arg("LIMIT")
                    .arg(100)
                    .ignore();
            }
        }
        pipe.query::<()>(c).unwrap();
    };
    // From two holders on, each key has its look at the next lease end
    // scheduled (outside the key, so MEMORY USAGE leaves it out).
    grow(&mut c, 0..2);
    let (m1, u1) = (used(&mut c), usage(&mut c));
    grow(&mut c, 2..10);
    let (m10, u10) = (used(&mut c), usage(&mut c));
    grow(&mut c, 10..20);
    let (m20, u20) = (used(&mut c), usage(&mut c));
    for (what, grown, reported) in [
        ("two to ten holders", m10 - m1, u10 - u1),
        ("ten to twenty holders", m20 - m10, u20 - u10),
    ] {
        let ratio = reported as f64 / grown as f64;
        assert!(
            (0.85..=1.15).contains(&ratio),
            "{what}: MEMORY USAGE grew by {reported}, used_memory by {grown}"
        );
    }
}

#[test]
fn after_a_rename_the_next_grant_watches_the_leases_again() {
    let s = Server::start();
    let mut c = s.conn();
    place(&mut c, "sem", "short", 300, 3);
    place(&mut c, "sem", "long", 60_000, 3);
    ok(&mut c, &rcmd!("RENAME", "sem", "moved"));
    // A later lease than the first: only the key's new name needs a look at the first.
    place(&mut c, "moved", "later", 60_000, 3);
    wait_until("the short lease to end", Duration::from_secs(5), || {
        stat(&s, "lease_ends") == 1
    });
    assert_eq!(info_of(&mut c, "moved").tokens(), ["long", "later"]);
}

#[test]
fn swapdb_and_move_keep_the_leases_watched() {
    let s = Server::start();
    let mut c = s.conn();
    place(&mut c, "swapped", "short", 300, 2);
    place(&mut c, "swapped", "long", 60_000, 2);
    ok(&mut c, &rcmd!("SWAPDB", 0, 1));
    // Nobody touches the key in its new database.
    wait_until(
        "the swapped key's short lease to end",
        Duration::from_secs(5),
        || stat(&s, "lease_ends") == 1,
    );
    ok(&mut c, &rcmd!("SELECT", 1));
    assert_eq!(info_of(&mut c, "swapped").tokens(), ["long"]);
    place(&mut c, "moved", "short", 300, 2);
    place(&mut c, "moved", "long", 60_000, 2);
    ok(&mut c, &rcmd!("MOVE", "moved", 2));
    ok(&mut c, &rcmd!("SELECT", 2));
    extend_px(&mut c, "moved", b"long", 70_000);
    wait_until(
        "the moved key's short lease to end",
        Duration::from_secs(5),
        || stat(&s, "lease_ends") == 2,
    );
    assert_eq!(info_of(&mut c, "moved").tokens(), ["long"]);
}
