//! Command helpers: build and run commands, and read their replies (grants, `LOCK.INFO`, TTLs).

use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, RedisError, Value};

use super::*;

/// Value of `name:` in an INFO text.
pub fn field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    })
}

/// Builds a `redis::Cmd`: `rcmd!("LOCK.ACQUIRE", key, token, "PX", 1000)`.
#[macro_export]
macro_rules! rcmd {
    ($name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut c = redis::cmd($name);
        $( c.arg($arg); )*
        c
    }};
}

/// Runs a command and returns the raw reply (server errors as `Err`).
pub fn run(con: &mut Connection, cmd: &redis::Cmd) -> Result<Value, RedisError> {
    cmd.query::<Value>(con)
}

/// Runs a command that must succeed.
pub fn ok(con: &mut Connection, cmd: &redis::Cmd) -> Value {
    cmd.query::<Value>(con)
        .unwrap_or_else(|e| panic!("{} failed: {e}", describe(cmd)))
}

/// Runs a command that must answer an error reply; returns the full error text
/// (`"<CODE> <message>"`).
pub fn err(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Ok(v) => panic!("{} should fail, but answered {v:?}", describe(cmd)),
        Err(e) => {
            assert!(
                !e.is_io_error() && !e.is_connection_dropped() && !e.is_timeout(),
                "{} broke the connection: {e}",
                describe(cmd)
            );
            err_text(&e)
        }
    }
}

/// Full server error text (`"<CODE> <message>"`).
pub fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// Human-readable form of a command for failure messages.
pub fn describe(cmd: &redis::Cmd) -> String {
    let packed = cmd.get_packed_command();
    // Parse the RESP array of bulk strings back into words.
    let mut words = Vec::new();
    let mut rest: &[u8] = &packed;
    let next_line = |buf: &[u8]| -> Option<(Vec<u8>, usize)> {
        let pos = buf.windows(2).position(|w| w == b"\r\n")?;
        Some((buf[..pos].to_vec(), pos + 2))
    };
    if let Some((_, n)) = next_line(rest) {
        rest = &rest[n..];
        while let Some((hdr, n)) = next_line(rest) {
            let len: usize = String::from_utf8_lossy(&hdr[1..]).parse().unwrap_or(0);
            rest = &rest[n..];
            let word = &rest[..len.min(rest.len())];
            let shown = if word.len() > 40 {
                format!("<{} bytes>", word.len())
            } else {
                format!("{:?}", String::from_utf8_lossy(word))
            };
            words.push(shown);
            rest = &rest[(len + 2).min(rest.len())..];
        }
    }
    words.join(" ")
}

pub fn as_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.as_bytes().to_vec(),
        Value::VerbatimString { text, .. } => text.as_bytes().to_vec(),
        Value::Okay => b"OK".to_vec(),
        other => panic!("expected a string, got {other:?}"),
    }
}

pub fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::BulkString(b) => String::from_utf8_lossy(b)
            .parse()
            .unwrap_or_else(|_| panic!("expected an integer, got {v:?}")),
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Parses a `LOCK.ACQUIRE` reply: `Some((token, fence))` or `None` for nil.
pub fn parse_grant(v: &Value) -> Option<(Vec<u8>, i64)> {
    match v {
        Value::Nil => None,
        Value::Array(items) => {
            assert_eq!(
                items.len(),
                2,
                "LOCK.ACQUIRE reply should have 2 elements: {v:?}"
            );
            assert!(
                matches!(items[0], Value::BulkString(_)),
                "token should be a bulk string: {v:?}"
            );
            assert!(
                matches!(items[1], Value::Int(_)),
                "fence should be an integer: {v:?}"
            );
            let fence = as_int(&items[1]);
            assert!(fence > 0, "fence must be positive: {v:?}");
            Some((as_bytes(&items[0]), fence))
        }
        other => panic!("unexpected LOCK.ACQUIRE reply {other:?}"),
    }
}

/// `LOCK.ACQUIRE key token PX ms` (plus extra args), must not error.
pub fn acquire(con: &mut Connection, key: &str, token: &[u8], px: i64) -> Option<(Vec<u8>, i64)> {
    let v = ok(con, &rcmd!("LOCK.ACQUIRE", key, token, "PX", px));
    parse_grant(&v)
}

/// `LOCK.ACQUIRE` that must grant; returns `(token, fence)`.
pub fn grant(con: &mut Connection, key: &str, token: &[u8], px: i64) -> (Vec<u8>, i64) {
    acquire(con, key, token, px).unwrap_or_else(|| {
        panic!(
            "LOCK.ACQUIRE {key} {:?} PX {px} should grant",
            String::from_utf8_lossy(token)
        )
    })
}

pub fn release(con: &mut Connection, key: &str, token: &[u8]) -> i64 {
    as_int(&ok(con, &rcmd!("LOCK.RELEASE", key, token)))
}

pub fn extend_px(con: &mut Connection, key: &str, token: &[u8], px: i64) -> i64 {
    as_int(&ok(con, &rcmd!("LOCK.EXTEND", key, token, "PX", px)))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub token: Vec<u8>,
    pub fence: i64,
    pub ttl: i64,
    pub waiters: i64,
}

/// Field/value pairs of a reply (a flat array under RESP2, a map under RESP3).
#[track_caller]
pub fn field_pairs(v: &Value) -> Vec<(Vec<u8>, Value)> {
    match v {
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd-length field list {v:?}");
            items
                .chunks(2)
                .map(|c| (as_bytes(&c[0]), c[1].clone()))
                .collect()
        }
        Value::Map(items) => items
            .iter()
            .map(|(k, v)| (as_bytes(k), v.clone()))
            .collect(),
        other => panic!("expected field/value pairs, got {other:?}"),
    }
}

/// Parses a `LOCK.INFO` reply (flat field/value array under RESP2, map under RESP3).
pub fn parse_info(v: &Value) -> Option<LockInfo> {
    if *v == Value::Nil {
        return None;
    }
    let pairs = field_pairs(v);
    let get = |name: &str| -> Value {
        pairs
            .iter()
            .find(|(k, _)| k == name.as_bytes())
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("LOCK.INFO reply lacks `{name}`: {v:?}"))
    };
    let token = get("token");
    assert!(
        matches!(token, Value::BulkString(_)),
        "LOCK.INFO token should be a bulk string: {v:?}"
    );
    for name in ["fence", "ttl", "waiters"] {
        assert!(
            matches!(get(name), Value::Int(_)),
            "LOCK.INFO {name} should be an integer: {v:?}"
        );
    }
    Some(LockInfo {
        token: as_bytes(&token),
        fence: as_int(&get("fence")),
        ttl: as_int(&get("ttl")),
        waiters: as_int(&get("waiters")),
    })
}

pub fn info(con: &mut Connection, key: &str) -> Option<LockInfo> {
    parse_info(&ok(con, &rcmd!("LOCK.INFO", key)))
}

/// `LOCK.INFO` that must show a lock.
pub fn info_some(con: &mut Connection, key: &str) -> LockInfo {
    info(con, key).unwrap_or_else(|| panic!("LOCK.INFO {key} should show a lock"))
}

pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    as_int(&ok(con, &rcmd!("PTTL", key)))
}

pub fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    as_int(&ok(con, &rcmd!("PEXPIRETIME", key)))
}

pub fn exists(con: &mut Connection, key: &str) -> bool {
    as_int(&ok(con, &rcmd!("EXISTS", key))) == 1
}

pub fn dbsize(con: &mut Connection) -> i64 {
    as_int(&ok(con, &rcmd!("DBSIZE")))
}

pub fn type_of(con: &mut Connection, key: &str) -> String {
    String::from_utf8(as_bytes(&ok(con, &rcmd!("TYPE", key)))).unwrap()
}

pub fn ping(con: &mut Connection) {
    let v = ok(con, &rcmd!("PING"));
    assert_eq!(as_bytes(&v), b"PONG", "PING answered {v:?}");
}

/// `WAIT n 5000` on `con` (the connection that did the writes) must report at least `n`.
pub fn wait_replicas(con: &mut Connection, n: i64) {
    let got = as_int(&ok(con, &rcmd!("WAIT", n, 5000)));
    assert!(got >= n, "WAIT {n} 5000 answered {got}");
}

/// Waits until `replica` has processed everything `master` has put in its replication stream so
/// far, whoever wrote it: a client, or the module from a timer (the epoch record after a
/// promotion), which a `WAIT` on a client's connection does not cover.
pub fn wait_replica_caught_up(master: &Server, replica: &Server) {
    let offset = |s: &Server| -> i64 {
        s.info_field("replication", "master_repl_offset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1)
    };
    let target = offset(master);
    let deadline = Instant::now() + startup_deadline();
    loop {
        let got = offset(replica);
        if got >= target {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "replica at offset {got}, master at {target}\n{}",
                replica.log_tail(30)
            );
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Current Unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Asserts that `got` is within `[want - slack, want]` (remaining TTLs only go down).
#[track_caller]
pub fn assert_ttl_close(got: i64, want: i64, slack: i64, what: &str) {
    assert!(
        got <= want && got >= want - slack,
        "{what}: TTL {got} ms, expected within {slack} ms below {want} ms"
    );
}

pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
