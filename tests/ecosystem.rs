//! How the module fits Redis: settings, `INFO redislock`, keyspace notifications and command docs.

use std::time::Duration;

use crate::common::*;
use redis::{Connection, Value};

fn config_get(con: &mut Connection, name: &str) -> String {
    match ok(con, &rcmd!("CONFIG", "GET", name)) {
        Value::Array(items) if items.len() == 2 => lossy(&as_bytes(&items[1])),
        Value::Map(pairs) if pairs.len() == 1 => lossy(&as_bytes(&pairs[0].1)),
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

#[test]
fn settings_from_module_arguments_config_file_and_config_set() {
    // Module arguments.
    let s = Server::builder()
        .module_args(&["max-ttl", "5000", "max-block", "300"])
        .start();
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "5000");
    assert_eq!(config_get(&mut c, "redislock.max-block"), "300");
    let e = err(&mut c, &rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 5001));
    assert_eq!(e, "ERR TTL exceeds redislock.max-ttl (5000 ms)");
    assert!(!exists(&mut c, "k"));
    grant(&mut c, "k", b"t", 5000);
    let e = err(&mut c, &rcmd!("LOCK.EXTEND", "k", "t", "EX", 6));
    assert_eq!(e, "ERR TTL exceeds redislock.max-ttl (5000 ms)");
    assert_eq!(extend_px(&mut c, "k", b"t", 4000), 1);
    // BLOCK 0 waits only as long as max-block allows.
    let started = std::time::Instant::now();
    let v = ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "k", "other", "PX", 100, "BLOCK", 0),
    );
    assert_eq!(v, Value::Nil);
    assert!(
        started.elapsed() >= Duration::from_millis(290),
        "{:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // CONFIG SET at run time, with range checks.
    ok(&mut c, &rcmd!("CONFIG", "SET", "redislock.max-ttl", "0"));
    grant(&mut c, "long", b"t", 86_400_000);
    let e = err(&mut c, &rcmd!("CONFIG", "SET", "redislock.max-ttl", "-1"));
    assert!(e.starts_with("ERR"), "{e}");
    let e = err(
        &mut c,
        &rcmd!("CONFIG", "SET", "redislock.max-block", "soon"),
    );
    assert!(e.starts_with("ERR"), "{e}");
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "0");
}

#[test]
fn module_arguments_override_redis_conf() {
    // Both set: the module arguments are applied after the redis.conf lines and win.
    let s = Server::builder()
        .set("redislock.max-ttl", "1000")
        .set("redislock.max-block", "100")
        .module_args(&["max-ttl", "5000"])
        .start();
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "5000");
    assert_eq!(config_get(&mut c, "redislock.max-block"), "100");
    grant(&mut c, "k", b"t", 4000);
    assert_eq!(
        err(&mut c, &rcmd!("LOCK.ACQUIRE", "j", "t", "PX", 5001)),
        "ERR TTL exceeds redislock.max-ttl (5000 ms)"
    );
}

#[test]
fn settings_from_redis_conf_lines() {
    let s = Server::builder().set("redislock.max-ttl", "1000").start();
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "1000");
    assert_eq!(
        err(&mut c, &rcmd!("LOCK.ACQUIRE", "k", "t", "EX", 2)),
        "ERR TTL exceeds redislock.max-ttl (1000 ms)"
    );
}

#[test]
fn a_bad_module_argument_refuses_to_load() {
    let s = Server::builder()
        .without_module()
        .set("enable-module-command", "yes")
        .start();
    let mut c = s.conn();
    let path = module_path();
    let e = err(
        &mut c,
        &rcmd!("MODULE", "LOAD", path.to_str().unwrap(), "max-ttl"),
    );
    assert!(e.starts_with("ERR"), "{e}");
    let e = err(
        &mut c,
        &rcmd!("MODULE", "LOAD", path.to_str().unwrap(), "colour", "blue"),
    );
    assert!(e.starts_with("ERR"), "{e}");
    assert!(s.log().contains("unknown module argument 'colour'"));
    let e = err(
        &mut c,
        &rcmd!(
            "MODULE",
            "LOAD",
            path.to_str().unwrap(),
            "rdb-encoding",
            "2"
        ),
    );
    assert!(e.starts_with("ERR"), "{e}");
    assert!(s.log().contains("rdb-encoding must be 3 or 4"));
    // A failed load leaves nothing behind that key events or flushes could call into.
    ok(&mut c, &rcmd!("SET", "x", "1", "PX", "1"));
    ok(&mut c, &rcmd!("DEL", "x"));
    ok(&mut c, &rcmd!("FLUSHALL"));
    ping(&mut c);
    ok(
        &mut c,
        &rcmd!("MODULE", "LOAD", path.to_str().unwrap(), "max-block", "100"),
    );
    assert_eq!(config_get(&mut c, "redislock.max-block"), "100");
    grant(&mut c, "k", b"t", 1000);
}

/// The encoding version in a `DUMP` payload of a lock: the low 10 bits of the module id (a
/// 64-bit RDB length after the type byte: 0x81 and 8 big-endian bytes).
fn payload_encoding(payload: &[u8]) -> u64 {
    assert_eq!(payload[1], 0x81, "module id as a 64-bit length");
    u64::from_be_bytes(payload[2..10].try_into().unwrap()) & 1023
}

/// `rdb-encoding 3` writes records as the previous release reads them (a field each), and they
/// read back exactly: after `DEBUG RELOAD` on the same server, and restored into a server
/// writing the current version, which writes them as version 4.
#[test]
fn rdb_encoding_3_writes_records_that_read_back_exactly() {
    let old = Server::builder()
        .module_args(&["rdb-encoding", "3"])
        .start();
    let new = Server::start();
    let (mut o, mut n) = (old.conn(), new.conn());
    assert_eq!(
        field(&old.info_text("redislock"), "redislock_rdb_encoding").as_deref(),
        Some("3")
    );
    let lock = |c: &mut Connection, key: &str, token: &str, opts: &[&str]| {
        let mut cmd = rcmd!("LOCK.ACQUIRE", key, token, "PX", 600_000);
        cmd.arg(opts);
        assert!(parse_grant(&ok(c, &cmd)).is_some(), "{key}");
    };
    lock(&mut o, "ex", "tok", &[]);
    lock(&mut o, "ex-data", "tok", &["DATA", "host:1"]);
    lock(&mut o, "sh", "r1", &["SHARED"]);
    lock(&mut o, "sh", "r2", &["SHARED", "DATA", "d"]);
    lock(&mut o, "sem", "p1", &["LIMIT", "3"]);
    let fence = grant(&mut o, "fenced", b"t", 600_000).1;
    ok(&mut o, &rcmd!("LOCK.FENCE", "gate", fence, "SET", "x", "1"));
    let keys = ["ex", "ex-data", "sh", "sem", "fenced", "gate"];
    // Each key's digest (an array of one).
    let digests = |c: &mut Connection| keys.map(|k| ok(c, &rcmd!("DEBUG", "DIGEST-VALUE", k)));
    let before = digests(&mut o);
    ok(&mut o, &rcmd!("DEBUG", "RELOAD"));
    assert_eq!(digests(&mut o), before);
    for key in keys {
        let payload = as_bytes(&ok(&mut o, &rcmd!("DUMP", key)));
        assert_eq!(payload_encoding(&payload), 3, "{key}");
        // With its expiry as it is (a gate has none).
        let at = pexpiretime(&mut o, key).max(0);
        let restore = rcmd!("RESTORE", key, at, payload.as_slice(), "ABSTTL");
        assert_eq!(ok(&mut n, &restore), Value::Okay, "{key}");
        let again = as_bytes(&ok(&mut n, &rcmd!("DUMP", key)));
        assert_eq!(payload_encoding(&again), 4, "{key}");
    }
    assert_eq!(digests(&mut n), before);
}

#[test]
fn info_section_counts_what_happened() {
    let s = Server::start();
    let mut c = s.conn();
    let before = s.info_text("redislock");
    assert_eq!(stat_in(&before, "locks"), 0);
    assert_eq!(stat_in(&before, "waiters"), 0);
    grant(&mut c, "a", b"t", 60_000);
    grant(&mut c, "a", b"t", 60_000);
    assert!(acquire(&mut c, "a", b"u", 60_000).is_none());
    assert_eq!(extend_px(&mut c, "a", b"t", 60_000), 1);
    assert_eq!(extend_px(&mut c, "a", b"u", 60_000), 0);
    assert_eq!(release(&mut c, "a", b"u"), 0);
    grant(&mut c, "b", b"t", 100);
    assert_eq!(stat(&s, "locks"), 2);
    assert_eq!(release(&mut c, "a", b"t"), 1);
    // A wait that times out, and the expiry of b noticed by active expiry.
    grant(&mut c, "c", b"t", 60_000);
    assert_eq!(
        ok(
            &mut c,
            &rcmd!("LOCK.ACQUIRE", "c", "w", "PX", 10, "BLOCK", 50)
        ),
        Value::Nil
    );
    wait_until("b to expire", Duration::from_secs(10), || {
        !exists(&mut c, "b") && stat(&s, "expired") > 0
    });
    let after = s.info_text("redislock");
    for (name, want) in [
        ("grants", 3),
        ("regrants", 1),
        ("refused", 1),
        ("releases", 1),
        ("releases_not_owner", 1),
        ("extends", 1),
        ("extends_not_owner", 1),
        ("waits", 1),
        ("wait_timeouts", 1),
        ("handoffs", 0),
        ("expired", 1),
        ("locks", 1),
    ] {
        assert_eq!(stat_in(&after, name), want, "{name}:\n{after}");
    }
    // INFO everything includes the section.
    let all = String::from_utf8(as_bytes(&ok(&mut c, &rcmd!("INFO", "everything")))).unwrap();
    assert!(all.contains("# redislock"), "{all}");
}

#[test]
fn lock_events_reach_keyspace_subscribers() {
    let s = Server::builder()
        .set("notify-keyspace-events", "Kd")
        .start();
    let mut sub = s.conn();
    let mut c = s.conn();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:ev").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    grant(&mut c, "ev", b"t", 60_000);
    assert_eq!(extend_px(&mut c, "ev", b"t", 60_000), 1);
    let w = spawn_waiter(&s, "ev", "w", 1000, 5000);
    wait_waiters(&mut c, "ev", 1);
    assert_eq!(release(&mut c, "ev", b"t"), 1);
    assert_eq!(w.granted().0, b"w");
    let events: Vec<String> = (0..4)
        .map(|_| {
            pubsub
                .get_message()
                .unwrap()
                .get_payload::<String>()
                .unwrap()
        })
        .collect();
    assert_eq!(
        events,
        [
            "lock.acquired",
            "lock.extended",
            "lock.released",
            "lock.handoff"
        ]
    );
}

#[test]
fn command_docs_describe_every_command() {
    let s = Server::start();
    let mut c = s.conn();
    for (cmd, arity) in [
        ("lock.acquire", -3),
        ("lock.release", 3),
        ("lock.extend", -3),
        ("lock.info", 2),
    ] {
        let docs = format!("{:?}", ok(&mut c, &rcmd!("COMMAND", "DOCS", cmd)));
        for word in ["summary", "complexity", "since", "arguments", "key"] {
            assert!(
                docs.contains(word),
                "COMMAND DOCS {cmd} lacks {word}: {docs}"
            );
        }
        let info = ok(&mut c, &rcmd!("COMMAND", "INFO", cmd));
        let Value::Array(entries) = info else {
            panic!("{info:?}")
        };
        let Value::Array(entry) = &entries[0] else {
            panic!("{entries:?}")
        };
        assert_eq!(as_int(&entry[1]), arity, "{cmd} arity");
        assert_eq!(
            (as_int(&entry[3]), as_int(&entry[4]), as_int(&entry[5])),
            (1, 1, 1),
            "{cmd} keys"
        );
    }
    let docs = format!(
        "{:?}",
        ok(&mut c, &rcmd!("COMMAND", "DOCS", "lock.acquire"))
    );
    for token in ["EX", "PX", "BLOCK", "optional", "oneof"] {
        assert!(
            docs.contains(token),
            "LOCK.ACQUIRE docs lack {token}: {docs}"
        );
    }
}
