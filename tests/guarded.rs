//! Guarded writes (SPEC "Guarded writes"): `LOCK.CALL` runs a command only for the lock's
//! holder, `LOCK.FENCE` only for a fence not older than its gate's; atomically, as the calling
//! user (ACL), refused for memory as usual, never for what cannot run inside a command, keys in
//! the guard key's slot in Cluster, and replicated exactly.

use std::time::Duration;

use crate::common::*;
use redis::Connection;

fn digest(con: &mut Connection) -> Vec<u8> {
    as_bytes(&ok(con, &rcmd!("DEBUG", "DIGEST")))
}

#[track_caller]
fn assert_err_starts(con: &mut Connection, cmd: &redis::Cmd, prefix: &str) {
    let e = err(con, cmd);
    assert!(e.starts_with(prefix), "{}: {e}", describe(cmd));
}

fn get(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    match ok(con, &rcmd!("GET", key)) {
        redis::Value::Nil => None,
        v => Some(as_bytes(&v)),
    }
}

#[test]
fn lock_call_runs_only_for_the_holder() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "lock", b"me", 60_000);
    assert_eq!(
        ok(
            &mut c,
            &rcmd!("LOCK.CALL", "lock", "me", "SET", "data", "v1")
        ),
        redis::Value::Okay
    );
    assert_eq!(get(&mut c, "data"), Some(b"v1".to_vec()));
    // Replies come back as they are, errors included.
    assert_eq!(
        as_bytes(&ok(
            &mut c,
            &rcmd!("LOCK.CALL", "lock", "me", "GET", "data")
        )),
        b"v1"
    );
    assert_eq!(
        err(&mut c, &rcmd!("LOCK.CALL", "lock", "me", "INCR", "data")),
        "ERR value is not an integer or out of range"
    );
    // Another token, a missing lock, an expired holder: nothing runs.
    let not_owner = "NOTOWNER the lock is not held by this token";
    assert_eq!(
        err(
            &mut c,
            &rcmd!("LOCK.CALL", "lock", "thief", "SET", "data", "x")
        ),
        not_owner
    );
    assert_eq!(
        err(
            &mut c,
            &rcmd!("LOCK.CALL", "nolock", "me", "SET", "data", "x")
        ),
        not_owner
    );
    grant(&mut c, "short", b"me", 1);
    wait_until("short expired", Duration::from_secs(2), || {
        !exists(&mut c, "short")
    });
    assert_eq!(
        err(
            &mut c,
            &rcmd!("LOCK.CALL", "short", "me", "SET", "data", "x")
        ),
        not_owner
    );
    // A stale holder: the lock was released and taken by someone else.
    assert_eq!(release(&mut c, "lock", b"me"), 1);
    grant(&mut c, "lock", b"you", 60_000);
    assert_eq!(
        err(
            &mut c,
            &rcmd!("LOCK.CALL", "lock", "me", "SET", "data", "x")
        ),
        not_owner
    );
    assert_eq!(get(&mut c, "data"), Some(b"v1".to_vec()));
    // Bad input and other types.
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.CALL", "lock", "you"),
        "ERR wrong number",
    );
    ok(&mut c, &rcmd!("SET", "str", "x"));
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.CALL", "str", "you", "GET", "x"),
        "WRONGTYPE",
    );
}

#[test]
fn what_cannot_run_inside_a_command_is_refused() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "lock", b"me", 60_000);
    for inner in [
        vec!["MULTI"],
        vec!["EXEC"],
        vec!["WATCH", "x"],
        vec!["SUBSCRIBE", "ch"],
        vec!["BLPOP", "list", "0"],
        vec!["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        vec!["WAIT", "1", "0"],
        vec!["LOCK.RELEASE", "lock", "me"],
        vec!["lock.acquire", "other", "t", "PX", "100"],
        vec!["LOCK.CALL", "lock", "me", "GET", "x"],
        vec!["NOSUCHCOMMAND"],
        vec!["GET"],
    ] {
        let mut cmd = rcmd!("LOCK.CALL", "lock", "me");
        for a in &inner {
            cmd.arg(*a);
        }
        assert_err_starts(&mut c, &cmd, "ERR");
    }
    // The lock is untouched and the connection is not in a transaction.
    assert_eq!(info_some(&mut c, "lock").token, b"me".to_vec());
    ping(&mut c);
}

#[test]
fn the_inner_command_runs_as_the_calling_user() {
    let s = Server::start();
    let mut admin = s.conn();
    ok(
        &mut admin,
        &rcmd!(
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">pw",
            "resetkeys",
            "~app:*",
            "+lock.acquire",
            "+lock.call",
            "+lock.fence",
            "+get",
            "+set"
        ),
    );
    let mut app = s.conn_as("app", "pw");
    grant(&mut app, "app:lock", b"me", 60_000);
    ok(
        &mut app,
        &rcmd!("LOCK.CALL", "app:lock", "me", "SET", "app:data", "1"),
    );
    // A key or a command the user may not reach directly stays out of reach.
    assert_err_starts(
        &mut app,
        &rcmd!("LOCK.CALL", "app:lock", "me", "SET", "secret", "1"),
        "NOPERM",
    );
    assert_err_starts(
        &mut app,
        &rcmd!("LOCK.CALL", "app:lock", "me", "DEL", "app:data"),
        "NOPERM",
    );
    assert_err_starts(
        &mut app,
        &rcmd!("LOCK.FENCE", "app:gate", 5, "FLUSHALL"),
        "NOPERM",
    );
    // A refused command moves no gate.
    assert!(!exists(&mut admin, "app:gate"));
    assert!(!exists(&mut admin, "secret"));
    assert_eq!(get(&mut admin, "app:data"), Some(b"1".to_vec()));
    // The guard key itself is checked too.
    assert_err_starts(
        &mut app,
        &rcmd!("LOCK.CALL", "other:lock", "me", "GET", "app:data"),
        "NOPERM",
    );
}

#[test]
fn memory_refusals_apply_to_the_inner_command() {
    let s = Server::builder()
        .set("maxmemory-policy", "noeviction")
        .start();
    let mut c = s.conn();
    grant(&mut c, "lock", b"me", 60_000);
    ok(&mut c, &rcmd!("SET", "data", "old"));
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", "1"));
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.CALL", "lock", "me", "SET", "data", "new"),
        "OOM",
    );
    // Reading and freeing still work under the guard.
    assert_eq!(
        as_bytes(&ok(
            &mut c,
            &rcmd!("LOCK.CALL", "lock", "me", "GET", "data")
        )),
        b"old"
    );
    assert_eq!(
        ok(&mut c, &rcmd!("LOCK.CALL", "lock", "me", "DEL", "data")),
        redis::Value::Int(1)
    );
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", "0"));
}

#[test]
fn guarded_writes_reach_replicas_and_the_aof_exactly() {
    let m = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    grant(&mut c, "lock", b"me", 60_000);
    ok(
        &mut c,
        &rcmd!("LOCK.CALL", "lock", "me", "MSET", "a", "1", "b", "2"),
    );
    ok(
        &mut c,
        &rcmd!("LOCK.CALL", "lock", "me", "INCRBYFLOAT", "f", "1.5"),
    );
    ok(&mut c, &rcmd!("LOCK.CALL", "lock", "me", "SPOP", "noset"));
    ok(
        &mut c,
        &rcmd!("LOCK.FENCE", "gate", 7, "RPUSH", "list", "x", "y"),
    );
    ok(
        &mut c,
        &rcmd!("LOCK.FENCE", "gate", 9, "EXPIRE", "list", 1000),
    );
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    assert_eq!(digest(&mut c), digest(&mut rc));
    assert_eq!(get(&mut rc, "b"), Some(b"2".to_vec()));
    let gate = ok(&mut rc, &rcmd!("LOCK.INFO", "gate"));
    assert_eq!(
        gate,
        redis::Value::Array(vec![
            redis::Value::BulkString(b"mode".to_vec()),
            redis::Value::BulkString(b"gate".to_vec()),
            redis::Value::BulkString(b"fence".to_vec()),
            redis::Value::Int(9),
        ])
    );
    // The AOF replays to the same data, gate included; so does a rewrite.
    let mut m = m;
    m.restart(Stop::Kill);
    let mut c = m.conn();
    assert_eq!(digest(&mut c), digest(&mut rc));
    ok(&mut c, &rcmd!("BGREWRITEAOF"));
    m.wait_aof_rewrite_done();
    m.restart(Stop::Kill);
    let mut c = m.conn();
    assert_eq!(digest(&mut c), digest(&mut rc));
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.FENCE", "gate", 8, "SET", "x", "1"),
        "STALEFENCE fence 8 is older than 9",
    );
}

#[test]
fn a_fence_gate_accepts_equal_and_newer_fences_only() {
    let mut s = Server::builder().set("appendonly", "no").start();
    let mut c = s.conn();
    assert_eq!(
        ok(
            &mut c,
            &rcmd!("LOCK.FENCE", "gate", 100, "SET", "data", "a")
        ),
        redis::Value::Okay
    );
    ok(
        &mut c,
        &rcmd!("LOCK.FENCE", "gate", 100, "SET", "data", "b"),
    );
    ok(
        &mut c,
        &rcmd!("LOCK.FENCE", "gate", 101, "SET", "data", "c"),
    );
    assert_eq!(
        err(
            &mut c,
            &rcmd!("LOCK.FENCE", "gate", 100, "SET", "data", "stale")
        ),
        "STALEFENCE fence 100 is older than 101"
    );
    assert_eq!(get(&mut c, "data"), Some(b"c".to_vec()));
    // A command that fails moves the gate no further.
    ok(&mut c, &rcmd!("SET", "str", "x"));
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.FENCE", "gate", 200, "LPUSH", "str", "y"),
        "WRONGTYPE",
    );
    ok(&mut c, &rcmd!("LOCK.FENCE", "gate", 150, "GET", "data"));
    // Bad fences, wrong kinds of key.
    for bad in ["0", "-5", "abc", "9223372036854775808"] {
        assert_eq!(
            err(&mut c, &rcmd!("LOCK.FENCE", "gate", bad, "GET", "x")),
            "ERR invalid fence: must be a positive integer of at most 9223372036854775807"
        );
    }
    grant(&mut c, "lock", b"me", 60_000);
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.FENCE", "lock", 5, "GET", "x"),
        "WRONGTYPE",
    );
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "gate", "t", "PX", 100),
        "WRONGTYPE",
    );
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.CALL", "gate", "t", "GET", "x"),
        "WRONGTYPE",
    );
    assert_eq!(type_of(&mut c, "gate"), "redislock");
    // The gate survives a restart from RDB, and its fence never feeds the fence clock.
    ok(
        &mut c,
        &rcmd!("LOCK.FENCE", "gate", i64::MAX, "GET", "data"),
    );
    s.restart(Stop::Save);
    let mut c = s.conn();
    assert_err_starts(
        &mut c,
        &rcmd!("LOCK.FENCE", "gate", 150, "GET", "data"),
        &format!("STALEFENCE fence 150 is older than {}", i64::MAX),
    );
    let (_, fence) = grant(&mut c, "fresh", b"t", 1000);
    assert!(
        fence < i64::MAX / 2,
        "the gate's fence raised the clock: {fence}"
    );
}

#[test]
fn a_paused_holder_writes_too_late_and_is_refused() {
    // The classic failure of TTL locks: A takes the lock, stalls past its lease, B takes it and
    // writes; A wakes up and writes with its old grant. With the fence gate, A's write is refused.
    let s = Server::start();
    let mut a = s.conn();
    let mut b = s.conn();
    let (_, fence_a) = grant(&mut a, "job", b"a", 100);
    wait_until("job expired", Duration::from_secs(2), || {
        !exists(&mut b, "job")
    });
    let (_, fence_b) = grant(&mut b, "job", b"b", 60_000);
    assert!(fence_b > fence_a);
    ok(
        &mut b,
        &rcmd!("LOCK.FENCE", "job:gate", fence_b, "SET", "result", "from b"),
    );
    assert_eq!(
        err(
            &mut a,
            &rcmd!("LOCK.FENCE", "job:gate", fence_a, "SET", "result", "from a")
        ),
        format!("STALEFENCE fence {fence_a} is older than {fence_b}")
    );
    // LOCK.CALL refuses A as well: it no longer holds the lock.
    assert_err_starts(
        &mut a,
        &rcmd!("LOCK.CALL", "job", "a", "SET", "result", "from a"),
        "NOTOWNER",
    );
    assert_eq!(get(&mut b, "result"), Some(b"from b".to_vec()));
}

#[test]
fn a_gate_survives_failover() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    ok(&mut c, &rcmd!("LOCK.FENCE", "gate", 42, "SET", "x", "1"));
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    assert_eq!(
        err(&mut rc, &rcmd!("LOCK.FENCE", "gate", 41, "SET", "x", "2")),
        "STALEFENCE fence 41 is older than 42"
    );
    ok(&mut rc, &rcmd!("LOCK.FENCE", "gate", 42, "SET", "x", "3"));
}

#[test]
fn in_cluster_every_key_must_share_the_guard_keys_slot() {
    let s = Server::builder().cluster_enabled().start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("CLUSTER", "ADDSLOTSRANGE", 0, 16383));
    wait_until("cluster_state:ok", Duration::from_secs(10), || {
        String::from_utf8_lossy(&as_bytes(&ok(&mut c, &rcmd!("CLUSTER", "INFO"))))
            .contains("cluster_state:ok")
    });
    grant(&mut c, "{user:1}:lock", b"me", 60_000);
    ok(
        &mut c,
        &rcmd!(
            "LOCK.CALL",
            "{user:1}:lock",
            "me",
            "MSET",
            "{user:1}:a",
            "1",
            "{user:1}:b",
            "2"
        ),
    );
    let cross = "CROSSSLOT Keys in request don't hash to the same slot as the lock key";
    assert_eq!(
        err(
            &mut c,
            &rcmd!(
                "LOCK.CALL",
                "{user:1}:lock",
                "me",
                "MSET",
                "{user:1}:a",
                "1",
                "other",
                "2"
            )
        ),
        cross
    );
    assert_eq!(
        err(
            &mut c,
            &rcmd!("LOCK.FENCE", "{user:1}:gate", 5, "SET", "elsewhere", "1")
        ),
        cross
    );
    assert!(!exists(&mut c, "{user:1}:gate"));
    assert!(!exists(&mut c, "other"));
    // Shard channels live in slots too, though Redis does not count them as keys.
    for cmd in ["SPUBLISH", "spublish"] {
        assert_eq!(
            err(
                &mut c,
                &rcmd!("LOCK.CALL", "{user:1}:lock", "me", cmd, "other", "m")
            ),
            cross
        );
    }
    assert_eq!(
        ok(
            &mut c,
            &rcmd!(
                "LOCK.CALL",
                "{user:1}:lock",
                "me",
                "SPUBLISH",
                "{user:1}:news",
                "m"
            )
        ),
        redis::Value::Int(0)
    );
}

#[test]
fn the_token_of_lock_call_stays_out_of_the_slowlog() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "lock", b"secret-call-token", 60_000);
    ok(
        &mut c,
        &rcmd!("CONFIG", "SET", "slowlog-log-slower-than", 0),
    );
    ok(&mut c, &rcmd!("SLOWLOG", "RESET"));
    ok(
        &mut c,
        &rcmd!("LOCK.CALL", "lock", "secret-call-token", "SET", "x", "1"),
    );
    let log = ok(&mut c, &rcmd!("SLOWLOG", "GET", 10));
    let text = format!("{log:?}");
    assert!(text.contains("(redacted)"), "{text}");
    assert!(!text.contains("secret-call-token"), "{text}");
}

/// The reply of a command, sent directly and through each guard, read off the wire.
fn direct_and_guarded(raw: &mut RawConn, cmd: &[&str]) -> [Resp; 3] {
    let direct = raw.call(cmd);
    let called = raw.call(&[&["LOCK.CALL", "lock", "me"][..], cmd].concat());
    let fenced = raw.call(&[&["LOCK.FENCE", "gate", "1"][..], cmd].concat());
    [direct, called, fenced]
}

#[test]
fn a_guard_answers_in_the_callers_protocol() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "lock", b"me", 600_000);
    ok(&mut c, &rcmd!("HSET", "h", "f", "v"));
    ok(&mut c, &rcmd!("ZADD", "z", "1.5", "m"));
    ok(&mut c, &rcmd!("SADD", "set", "a"));
    ok(&mut c, &rcmd!("SET", "str", "v"));
    // Replies whose RESP3 form differs (null, map, double, set), errors, and the errors that
    // Valkey's call API loses (GETDEL and GETSET of a hash).
    let commands: &[&[&str]] = &[
        &["GET", "missing"],
        &["HGETALL", "h"],
        &["ZSCORE", "z", "m"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        &["SMEMBERS", "set"],
        &["HGET", "h", "nofield"],
        &["LPOP", "missing"],
        &["GETDEL", "h"],
        &["GETSET", "h", "x"],
        &["INCR", "str"],
        &["GET", "str"],
    ];
    for proto in ["2", "3"] {
        let mut raw = RawConn::connect(&s);
        assert!(!matches!(raw.call(&["HELLO", proto]), Resp::Error(_)));
        for cmd in commands {
            let [direct, called, fenced] = direct_and_guarded(&mut raw, cmd);
            assert_eq!(called, direct, "RESP{proto}: LOCK.CALL {cmd:?}");
            assert_eq!(fenced, direct, "RESP{proto}: LOCK.FENCE {cmd:?}");
        }
    }
    // The forms differ indeed: a RESP3 caller gets RESP3 replies.
    let mut raw = RawConn::connect(&s);
    raw.call(&["HELLO", "3"]);
    let [_, missing, _] = direct_and_guarded(&mut raw, &["GET", "missing"]);
    let [_, map, _] = direct_and_guarded(&mut raw, &["HGETALL", "h"]);
    let [_, double, _] = direct_and_guarded(&mut raw, &["ZSCORE", "z", "m"]);
    assert_eq!(missing, Resp::Nil);
    assert!(matches!(map, Resp::Other(b'%', _)), "{map:?}");
    assert_eq!(
        double,
        Resp::Other(b',', vec![Resp::Simple(b"1.5".to_vec())])
    );
}

#[test]
fn every_guarded_call_gets_exactly_one_reply() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    grant(&mut c, "lock", b"me", 600_000);
    ok(&mut c, &rcmd!("HSET", "h", "f", "v"));
    let commands: &[&[&str]] = &[
        &["LOCK.CALL", "lock", "me", "GETDEL", "h"],
        &["LOCK.CALL", "lock", "me", "GETSET", "h", "x"],
        &["LOCK.FENCE", "gX", "7", "GETSET", "h", "x"],
        &["PING"],
        &["LOCK.CALL", "lock", "me", "GET", "missing"],
        &["LOCK.FENCE", "gY", "7", "GET", "missing"],
        &["LOCK.FENCE", "gZ", "7", "GETDEL", "h"],
        &["GET", "missing"],
    ];
    // Pipelined in one write: a missing reply would pair every later reply with the wrong
    // request.
    let mut raw = RawConn::connect(&m);
    std::io::Write::write_all(&mut raw.stream(), &resp_commands(commands)).unwrap();
    let wrongtype =
        Resp::Error(b"WRONGTYPE Operation against a key holding the wrong kind of value".to_vec());
    let want = [
        wrongtype.clone(),
        wrongtype.clone(),
        wrongtype.clone(),
        Resp::Simple(b"PONG".to_vec()),
        Resp::Nil,
        Resp::Nil,
        wrongtype,
        Resp::Nil,
    ];
    for (cmd, want) in commands.iter().zip(want) {
        assert_eq!(
            raw.read().unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
            want,
            "{cmd:?}"
        );
    }
    // A gate moves only for a command that succeeded, on the master and its replica alike.
    assert!(!exists(&mut c, "gX") && !exists(&mut c, "gZ"));
    assert!(exists(&mut c, "gY"));
    assert_eq!(type_of(&mut c, "h"), "hash");
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    assert!(!exists(&mut rc, "gX") && !exists(&mut rc, "gZ"));
    assert_eq!(digest(&mut rc), digest(&mut c));
}
