//! ACL categories and hidden tokens (SPEC "Operations"): where the server lets a module set
//! them (Redis 7.2+, Valkey 8+) the commands are in `@read`/`@write`, `@blocking`, `@fast` or
//! `@slow`, and `@redislock` where modules may define categories; a user with `+@all -@write`
//! can neither take nor give back a lock, nor write through a guard, but may observe one;
//! `LOCK.INFO` shows a token only to a caller who may release the lock.

use crate::common::*;
use redis::{Connection, Value};

/// What the server under test can do, from `INFO server`.
struct Flavour {
    valkey: bool,
    major: u32,
    minor: u32,
}

fn server_kind(c: &mut Connection) -> Flavour {
    let info = as_text(&ok(c, &rcmd!("INFO", "server")));
    let valkey = field(&info, "valkey_version").is_some();
    let version = field(&info, "valkey_version")
        .or_else(|| field(&info, "redis_version"))
        .expect("a version in INFO server");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    Flavour {
        valkey,
        major: parts.next().unwrap_or(0),
        minor: parts.next().unwrap_or(0),
    }
}

fn as_text(v: &redis::Value) -> String {
    String::from_utf8_lossy(&as_bytes(v)).into_owned()
}

impl Flavour {
    fn has_command_categories(&self) -> bool {
        self.valkey || (self.major, self.minor) >= (7, 2)
    }
    fn has_module_categories(&self) -> bool {
        self.valkey || (self.major, self.minor) >= (7, 4)
    }
}

fn category(c: &mut Connection, name: &str) -> Vec<String> {
    let v: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .arg(name)
        .query(c)
        .unwrap_or_default();
    let mut lock: Vec<String> = v.into_iter().filter(|n| n.starts_with("lock.")).collect();
    lock.sort();
    lock
}

fn names(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

const PUBLIC_WRITES: [&str; 7] = [
    "lock.acquire",
    "lock.acquireall",
    "lock.release",
    "lock.releaseall",
    "lock.extend",
    "lock.call",
    "lock.fence",
];
const INTERNAL: [&str; 4] = ["lock._apply", "lock._hold", "lock._gate", "lock._epoch"];

#[test]
fn commands_are_in_the_categories_an_operator_expects() {
    let s = Server::start();
    let mut c = s.conn();
    let kind = server_kind(&mut c);
    if !kind.has_command_categories() {
        // Redis 7.0 has no API for it: no category lists the module's commands.
        for cat in ["read", "write", "fast", "slow", "blocking"] {
            assert!(category(&mut c, cat).is_empty(), "@{cat} on Redis 7.0");
        }
        return;
    }
    let writes: Vec<&str> = PUBLIC_WRITES
        .iter()
        .chain(INTERNAL.iter())
        .copied()
        .collect();
    assert_eq!(category(&mut c, "write"), names(&writes));
    assert_eq!(
        category(&mut c, "read"),
        names(&["lock.info", "lock.observe"])
    );
    assert_eq!(
        category(&mut c, "blocking"),
        names(&["lock.acquire", "lock.acquireall", "lock.observe"])
    );
    assert_eq!(
        category(&mut c, "fast"),
        names(&["lock.extend", "lock.release", "lock.releaseall"])
    );
    let slow: Vec<&str> = [
        "lock.acquire",
        "lock.acquireall",
        "lock.info",
        "lock.observe",
        "lock.call",
        "lock.fence",
    ]
    .into_iter()
    .chain(INTERNAL)
    .collect();
    assert_eq!(category(&mut c, "slow"), names(&slow));
    if kind.has_module_categories() {
        let all: Vec<&str> = writes
            .iter()
            .copied()
            .chain(["lock.info", "lock.observe"])
            .collect();
        assert_eq!(category(&mut c, "redislock"), names(&all));
    }
}

#[test]
fn a_user_without_write_rights_cannot_change_a_lock_nor_see_its_token() {
    let s = Server::start();
    let mut admin = s.conn();
    let kind = server_kind(&mut admin);
    let (_, fence) = grant(&mut admin, "app:job", b"owner", 60_000);
    ok(
        &mut admin,
        &rcmd!("LOCK.FENCE", "gate", fence, "SET", "x", "1"),
    );
    ok(
        &mut admin,
        &rcmd!(
            "ACL",
            "SETUSER",
            "ro",
            "on",
            ">pw",
            "+@all",
            "-@write",
            "-@dangerous",
            "~*"
        ),
    );
    let mut ro = s.conn_as("ro", "pw");
    let info = info_some(&mut ro, "app:job");
    if !kind.has_command_categories() {
        // Redis 7.0: the user may run every module command; the docs say so.
        assert_eq!(info.token, b"owner".to_vec());
        return;
    }
    assert_eq!(
        info.token,
        b"(hidden)".to_vec(),
        "LOCK.INFO to a read-only user"
    );
    assert_eq!(info.fence, fence);
    // Observing is reading: allowed.
    let seen = ok(&mut ro, &rcmd!("LOCK.OBSERVE", "app:job"));
    assert_eq!(seen, Value::Array(vec![Value::Int(fence), Value::Nil]));
    for cmd in [
        rcmd!("LOCK.RELEASE", "app:job", "owner"),
        rcmd!("LOCK.EXTEND", "app:job", "owner", "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "app:other", "t", "PX", 1000),
        rcmd!("LOCK.CALL", "app:job", "owner", "GET", "x"),
        rcmd!("LOCK.FENCE", "gate", i64::MAX, "GET", "x"),
    ] {
        let e = err(&mut ro, &cmd);
        assert!(e.starts_with("NOPERM"), "{}: {e}", describe(&cmd));
    }
    // Nothing changed: the lock is held by its owner, the gate did not move.
    assert_eq!(info_some(&mut admin, "app:job").token, b"owner".to_vec());
    let gate = field_pairs(&ok(&mut admin, &rcmd!("LOCK.INFO", "gate")));
    let highest = gate
        .iter()
        .find(|(k, _)| k == b"fence")
        .map(|(_, v)| as_int(v));
    assert_eq!(highest, Some(fence));
}

#[test]
fn a_user_with_read_and_write_categories_uses_locks_on_its_keys() {
    let s = Server::start();
    let mut admin = s.conn();
    let kind = server_kind(&mut admin);
    if !kind.has_command_categories() {
        return;
    }
    ok(
        &mut admin,
        &rcmd!("ACL", "SETUSER", "app", "on", ">pw", "+@read", "+@write", "~app:*"),
    );
    let mut app = s.conn_as("app", "pw");
    let (_, fence) = grant(&mut app, "app:job", b"w1", 60_000);
    assert_eq!(info_some(&mut app, "app:job").token, b"w1".to_vec());
    ok(
        &mut app,
        &rcmd!("LOCK.CALL", "app:job", "w1", "SET", "app:data", "1"),
    );
    ok(
        &mut app,
        &rcmd!("LOCK.FENCE", "app:gate", fence, "SET", "app:data", "2"),
    );
    assert_eq!(release(&mut app, "app:job", b"w1"), 1);
    // Keys outside its pattern stay out of reach.
    let e = err(
        &mut app,
        &rcmd!("LOCK.ACQUIRE", "other:job", "w1", "PX", 1000),
    );
    assert!(e.starts_with("NOPERM"), "{e}");
    // A user who may read the key but not release locks sees no token, for every holder.
    ok(
        &mut admin,
        &rcmd!("ACL", "SETUSER", "reader", "on", ">pw", "+@read", "~app:*"),
    );
    for r in ["r1", "r2"] {
        let v = ok(
            &mut app,
            &rcmd!("LOCK.ACQUIRE", "app:shared", r, "PX", 60_000, "SHARED"),
        );
        assert!(parse_grant(&v).is_some());
    }
    let mut reader = s.conn_as("reader", "pw");
    let shown = as_text_all(&ok(&mut reader, &rcmd!("LOCK.INFO", "app:shared")));
    assert!(!shown.contains("r1") && !shown.contains("r2"), "{shown}");
    assert_eq!(shown.matches("(hidden)").count(), 2, "{shown}");
    let own = as_text_all(&ok(&mut app, &rcmd!("LOCK.INFO", "app:shared")));
    assert!(own.contains("r1") && own.contains("r2"), "{own}");
}

/// Every string in a reply, flattened, for looking for tokens in it.
fn as_text_all(v: &redis::Value) -> String {
    match v {
        redis::Value::Array(items) | redis::Value::Set(items) => {
            items.iter().map(as_text_all).collect::<Vec<_>>().join(" ")
        }
        redis::Value::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| format!("{} {}", as_text_all(k), as_text_all(v)))
            .collect::<Vec<_>>()
            .join(" "),
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}
