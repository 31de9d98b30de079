//! `LOCK.OBSERVE key [AFTER fence] [SEEN data] [BLOCK timeout]` (SPEC "Election and observation"): the
//! holder's `[fence, data]` at once, or a wait in the server until the fence differs from the one
//! the caller saw. This file: the helpers, and the replies that come at once. `data.rs`: the
//! holder's public data in them. `seen.rs`: `SEEN data`, new data under the same fence.
//! `events.rs`: what wakes an observer, and that observers are not
//! waiters. `states.rs`: pauses, replicas, loading and failover. `many.rs`: thousands of
//! observers woken by one release.

mod data;
mod events;
mod many;
mod seen;
mod states;

use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::common::*;

/// What `LOCK.OBSERVE` answered: the fence (0: no holder) and the data, or None for nil.
pub type Seen = Option<(i64, Option<Vec<u8>>)>;

/// Reads a `LOCK.OBSERVE` reply, checking its shape.
#[track_caller]
pub fn seen_of(v: &Value) -> Seen {
    match v {
        Value::Nil => None,
        Value::Array(items) => {
            assert_eq!(items.len(), 2, "LOCK.OBSERVE answers [fence, data]: {v:?}");
            let fence = match items[0] {
                Value::Int(f) => f,
                _ => panic!("the fence is an integer: {v:?}"),
            };
            let data = match &items[1] {
                Value::Nil => None,
                Value::BulkString(b) => Some(b.clone()),
                _ => panic!("the data is a bulk string or nil: {v:?}"),
            };
            assert!(fence > 0 || data.is_none(), "no holder, no data: {v:?}");
            Some((fence, data))
        }
        other => panic!("unexpected LOCK.OBSERVE reply {other:?}"),
    }
}

/// `LOCK.OBSERVE key` (no option): the fence and data now.
#[track_caller]
pub fn observe(con: &mut Connection, key: &str) -> (i64, Option<Vec<u8>>) {
    seen_of(&ok(con, &rcmd!("LOCK.OBSERVE", key))).expect("LOCK.OBSERVE without AFTER is never nil")
}

/// `LOCK.OBSERVE key AFTER fence` (no BLOCK).
#[track_caller]
pub fn observe_after(con: &mut Connection, key: &str, after: i64) -> Seen {
    seen_of(&ok(con, &rcmd!("LOCK.OBSERVE", key, "AFTER", after)))
}

/// The fence of what an observer was answered; nil or an error fails the test.
#[track_caller]
pub fn fence_of(reply: &WaitReply) -> i64 {
    match &reply.reply {
        Ok(v) => {
            seen_of(v)
                .unwrap_or_else(|| panic!("the observer was answered nil"))
                .0
        }
        Err(e) => panic!("the observer was answered {e}"),
    }
}

/// The fence `o` is answered within 5 s (scaled); `what` names the step if none comes.
#[track_caller]
pub fn answered(o: &Observer, what: &str) -> i64 {
    let r = o
        .recv_within(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("{what}: the observer was never answered"));
    fence_of(&r)
}

/// A client blocked in `LOCK.OBSERVE … AFTER … BLOCK …` on a thread of its own (the waiters'
/// harness, whose reply is a `WaitReply`).
pub type Observer = Waiter;

/// Starts a client on `server` (database `db`) that sends `LOCK.OBSERVE key AFTER after BLOCK
/// block_ms` and returns once the server counts one more blocked observer.
pub fn spawn_observer_db(
    server: &Server,
    db: i64,
    key: &str,
    after: i64,
    block_ms: i64,
) -> Observer {
    let before = observers(server);
    let o = spawn_observer_unwaited(server, db, key, after, block_ms);
    wait_observers(server, before + 1);
    o
}

pub fn spawn_observer(server: &Server, key: &str, after: i64, block_ms: i64) -> Observer {
    spawn_observer_db(server, 0, key, after, block_ms)
}

/// As `spawn_observer_db`, without waiting for the server to count it.
pub fn spawn_observer_unwaited(
    server: &Server,
    db: i64,
    key: &str,
    after: i64,
    block_ms: i64,
) -> Observer {
    let url = format!("redis://127.0.0.1:{}/{db}", server.port());
    let client = redis::Client::open(url).expect("client url");
    let con = client.get_connection_with_timeout(io_timeout()).unwrap();
    let read_timeout = io_timeout().max(Duration::from_millis(block_ms as u64 + 10_000));
    con.set_read_timeout(Some(read_timeout)).unwrap();
    spawn_blocked(
        con,
        rcmd!("LOCK.OBSERVE", key, "AFTER", after, "BLOCK", block_ms),
    )
}

/// Clients blocked in `LOCK.OBSERVE` (`INFO redislock`).
pub fn observers(server: &Server) -> i64 {
    stat(server, "observers")
}

#[track_caller]
pub fn wait_observers(server: &Server, n: i64) {
    wait_until(&format!("{n} observers"), Duration::from_secs(10), || {
        observers(server) == n
    });
}

/// Nothing arrives for `window`: an observer that must still be waiting.
#[track_caller]
pub fn still_waiting(o: &Observer, window: Duration, why: &str) {
    if let Some(r) = o.recv_within(window / time_scale()) {
        panic!("{why}: the observer was answered {r:?}");
    }
}

#[test]
fn replies_with_the_holder_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(observe(&mut c, "k"), (0, None), "no lock");
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    assert_eq!(observe(&mut c, "k"), (f, None));
    // Shared locks and semaphores: the live holder with the highest fence.
    for (key, option) in [("rw", &["SHARED"][..]), ("sem", &["LIMIT", "3"][..])] {
        let mut fences = Vec::new();
        for (token, px) in [("r1", 60_000), ("r2", 300), ("r3", 60_000)] {
            let mut acquire = rcmd!("LOCK.ACQUIRE", key, token, "PX", px);
            for o in option {
                acquire.arg(*o);
            }
            fences.push(parse_grant(&ok(&mut c, &acquire)).unwrap().1);
        }
        assert_eq!(observe(&mut c, key), (fences[2], None), "{key}");
        assert_eq!(release(&mut c, key, b"r3"), 1);
        assert_eq!(
            observe(&mut c, key).0,
            fences[1],
            "{key}: r2, its lease running"
        );
        // r2's lease ends: it counts as gone at once, as in LOCK.INFO.
        sleep_until_wall_ms(now_ms() + 310);
        assert_eq!(observe(&mut c, key).0, fences[0], "{key}: r1");
    }
    assert_eq!(release(&mut c, "k", b"a"), 1);
    assert_eq!(observe(&mut c, "k"), (0, None), "released");
}

#[test]
fn after_answers_a_different_fence_at_once_and_nil_for_the_same() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(observe_after(&mut c, "k", 0), None, "no lock, as seen");
    assert_eq!(observe_after(&mut c, "k", 7), Some((0, None)));
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    assert_eq!(observe_after(&mut c, "k", 0), Some((f, None)));
    assert_eq!(observe_after(&mut c, "k", f - 1), Some((f, None)));
    assert_eq!(observe_after(&mut c, "k", f), None, "nothing new, no BLOCK");
    // BLOCK without AFTER: there is nothing to compare with, so the holder now.
    let v = ok(&mut c, &rcmd!("LOCK.OBSERVE", "k", "BLOCK", 5000));
    assert_eq!(seen_of(&v), Some((f, None)));
    let v = ok(
        &mut c,
        &rcmd!("LOCK.OBSERVE", "k", "block", 0, "after", f - 1),
    );
    assert_eq!(
        seen_of(&v),
        Some((f, None)),
        "options in any order and case"
    );
    // A different fence answers at once even with BLOCK.
    let t = Instant::now();
    let v = ok(&mut c, &rcmd!("LOCK.OBSERVE", "k", "AFTER", 1, "BLOCK", 0));
    assert_eq!(seen_of(&v), Some((f, None)));
    assert!(t.elapsed() < Duration::from_secs(2) * time_scale());
    assert_eq!(observers(&s), 0);
}

#[test]
fn errors_and_key_declaration() {
    let s = Server::start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("SET", "str", "v"));
    ok(&mut c, &rcmd!("LOCK.FENCE", "gate", 5, "SET", "x", "1"));
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let gate = "WRONGTYPE the key is a fence gate (LOCK.FENCE), not a lock";
    for (key, extra, want) in [
        ("str", &[][..], wrongtype),
        ("str", &["AFTER", "0", "BLOCK", "100"][..], wrongtype),
        ("gate", &[][..], gate),
        ("gate", &["AFTER", "5", "BLOCK", "100"][..], gate),
        ("k", &["AFTER", "-1"][..], "ERR invalid AFTER fence: must be 0 (no holder) or a positive integer of at most 9223372036854775807"),
        ("k", &["AFTER", "x"][..], "ERR invalid AFTER fence: must be 0 (no holder) or a positive integer of at most 9223372036854775807"),
        ("k", &["AFTER"][..], "ERR syntax error: option AFTER needs a value"),
        ("k", &["BLOCK", "-1"][..], "ERR invalid BLOCK timeout: must be 0 (no limit) or a positive integer of at most 1000000000000 milliseconds"),
        ("k", &["AFTER", "1", "AFTER", "1"][..], "ERR syntax error: option AFTER given more than once"),
        ("k", &["PX", "1"][..], "ERR syntax error: unknown option 'PX' (LOCK.OBSERVE takes AFTER, SEEN and BLOCK)"),
    ] {
        let mut cmd = rcmd!("LOCK.OBSERVE", key);
        for a in extra {
            cmd.arg(*a);
        }
        assert_eq!(err(&mut c, &cmd), want, "{}", describe(&cmd));
    }
    // Arguments are checked before the key is looked at.
    let e = err(&mut c, &rcmd!("LOCK.OBSERVE", "str", "AFTER", "-1"));
    assert!(e.starts_with("ERR invalid AFTER"), "{e}");
    let e = err(&mut c, &rcmd!("LOCK.OBSERVE"));
    assert!(e.contains("wrong number of arguments"), "{e}");
    let keys = ok(
        &mut c,
        &rcmd!(
            "COMMAND",
            "GETKEYS",
            "LOCK.OBSERVE",
            "mykey",
            "AFTER",
            1,
            "BLOCK",
            5
        ),
    );
    assert_eq!(
        keys,
        Value::Array(vec![Value::BulkString(b"mykey".to_vec())])
    );
    let info = ok(&mut c, &rcmd!("COMMAND", "INFO", "lock.observe"));
    let Value::Array(entries) = &info else {
        panic!("{info:?}")
    };
    let Value::Array(entry) = &entries[0] else {
        panic!("{info:?}")
    };
    assert_eq!(as_int(&entry[1]), -2, "arity");
    assert_eq!(
        (as_int(&entry[3]), as_int(&entry[4]), as_int(&entry[5])),
        (1, 1, 1)
    );
    let flags = format!("{:?}", entry[2]);
    assert!(
        flags.contains("readonly") && !flags.contains("write"),
        "{flags}"
    );
    let docs = format!(
        "{:?}",
        ok(&mut c, &rcmd!("COMMAND", "DOCS", "lock.observe"))
    );
    for word in [
        "summary",
        "complexity",
        "AFTER",
        "SEEN",
        "BLOCK",
        "optional",
        "key",
    ] {
        assert!(docs.contains(word), "COMMAND DOCS lacks {word}: {docs}");
    }
}

/// The exact bytes of each reply, under RESP2 and RESP3: `[fence, nil]`, `[fence, nil]` of no
/// holder, and a timeout's nil, which is the nil `LOCK.ACQUIRE … BLOCK` answers on its timeout.
#[test]
fn resp2_and_resp3_replies() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    for resp3 in [false, true] {
        let mut raw = RawConn::connect(&s);
        if resp3 {
            assert!(matches!(raw.call(&["HELLO", "3"]), Resp::Other(b'%', _)));
        }
        let nil_data = Resp::Nil;
        assert_eq!(
            raw.call(&["LOCK.OBSERVE", "k"]),
            Resp::Array(vec![Resp::Int(f), nil_data.clone()])
        );
        assert_eq!(
            raw.call(&["LOCK.OBSERVE", "free"]),
            Resp::Array(vec![Resp::Int(0), nil_data])
        );
        let observe_nil = raw.call(&["LOCK.OBSERVE", "k", "AFTER", &f.to_string(), "BLOCK", "20"]);
        let acquire_nil = raw.call(&["LOCK.ACQUIRE", "k", "b", "PX", "100", "BLOCK", "20"]);
        assert_eq!(
            observe_nil, acquire_nil,
            "resp3 {resp3}: timeouts answer the same nil"
        );
        assert_eq!(observe_nil, Resp::Nil);
        let now_nil = raw.call(&["LOCK.OBSERVE", "k", "AFTER", &f.to_string()]);
        let busy_nil = raw.call(&["LOCK.ACQUIRE", "k", "b", "PX", "100"]);
        assert_eq!(
            now_nil, busy_nil,
            "resp3 {resp3}: without BLOCK, the same nil"
        );
    }
    // The wire itself: RESP2 `$-1` for the data and the timeout, RESP3 `_`.
    for (hello, nil) in [("2", &b"$-1\r\n"[..]), ("3", &b"_\r\n"[..])] {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", s.port())).unwrap();
        stream.set_read_timeout(Some(io_timeout())).unwrap();
        let after = f.to_string();
        let cmds: [&[&str]; 3] = [
            &["HELLO", hello],
            &["LOCK.OBSERVE", "k"],
            &["LOCK.OBSERVE", "k", "AFTER", &after, "BLOCK", "10"],
        ];
        stream.write_all(&resp_commands(&cmds)).unwrap();
        let mut reader = std::io::BufReader::new(stream);
        read_resp(&mut reader, 0).unwrap();
        let expected = [format!("*2\r\n:{f}\r\n").as_bytes(), nil, nil].concat();
        let mut got = vec![0u8; expected.len()];
        reader.read_exact(&mut got).unwrap();
        assert_eq!(lossy(&got), lossy(&expected), "HELLO {hello}");
    }
}

/// Inside MULTI/EXEC and in scripts, BLOCK never blocks: an unchanged fence answers nil at once,
/// as LOCK.ACQUIRE … BLOCK answers a busy lock there; a changed one answers the holder.
#[test]
fn multi_and_scripts_answer_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"a", 60_000);
    let t = Instant::now();
    let v: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.OBSERVE")
        .arg("k")
        .arg("AFTER")
        .arg(f)
        .arg("BLOCK")
        .arg(0)
        .cmd("LOCK.OBSERVE")
        .arg("k")
        .arg("AFTER")
        .arg(0)
        .arg("BLOCK")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        v,
        vec![Value::Nil, Value::Array(vec![Value::Int(f), Value::Nil])]
    );
    let script = "return redis.call('LOCK.OBSERVE', KEYS[1], 'AFTER', ARGV[1], 'BLOCK', 0)";
    let v = ok(&mut c, &rcmd!("EVAL", script, 1, "k", f));
    assert_eq!(v, Value::Nil);
    let v = ok(&mut c, &rcmd!("EVAL", script, 1, "k", 0));
    assert_eq!(seen_of(&v), Some((f, None)));
    assert!(
        t.elapsed() < Duration::from_secs(2) * time_scale(),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(observers(&s), 0);
}
