//! What the upgrade tests share: the previous release's module, servers on it, the locks they
//! hold, and what must be equal on two servers.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::common::*;

/// The previous release's library, if REDISLOCK_PREVIOUS_MODULE names it.
pub fn given_previous() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("REDISLOCK_PREVIOUS_MODULE")?);
    assert!(
        path.is_file(),
        "REDISLOCK_PREVIOUS_MODULE={path:?} is not a file"
    );
    Some(path)
}

/// `given_previous`, with a note when the tests that need it are skipped.
pub fn previous_module() -> Option<PathBuf> {
    let path = given_previous();
    if path.is_none() {
        eprintln!(
            "upgrade: skipped; set REDISLOCK_PREVIOUS_MODULE=$(scripts/previous-module.sh) \
             or run make upgrade-test"
        );
    }
    path
}

/// Starts a stopped server again, on its port and files, with the module file set last.
pub fn relaunch(s: &mut Server) {
    match s.launch(s.port()) {
        Ok(()) => {}
        Err(LaunchError::Failed(why)) => panic!("restart failed: {why}"),
        Err(LaunchError::PortInUse) => panic!("port {} taken", s.port()),
    }
}

/// `ver` of redislock in `MODULE LIST`.
pub fn module_ver(s: &Server) -> i64 {
    let Value::Array(modules) = ok(&mut s.conn(), &rcmd!("MODULE", "LIST")) else {
        panic!("MODULE LIST is not an array");
    };
    modules
        .iter()
        .map(field_pairs)
        .find(|m| {
            m.iter()
                .any(|(k, v)| k == b"name" && as_bytes(v) == b"redislock")
        })
        .and_then(|m| m.into_iter().find(|(k, _)| k == b"ver"))
        .map(|(_, v)| as_int(&v))
        .expect("redislock in MODULE LIST")
}

/// A server on the previous release (checked: its `ver` is below this build's).
pub fn start_previous(previous: &Path, builder: ServerBuilder) -> Server {
    let s = builder.module_file(previous).start();
    assert!(
        module_ver(&s) < release_number(),
        "REDISLOCK_PREVIOUS_MODULE is not an earlier release than this build"
    );
    s
}

pub const TTL: i64 = 600_000;
pub const KEYS: &[&str] = &["up:ex", "up:shared", "up:sem", "up:gate", "up:data"];

pub fn acquire_with(c: &mut Connection, key: &str, token: &str, px: i64, opts: &[&str]) -> i64 {
    let mut cmd = rcmd!("LOCK.ACQUIRE", key, token, "PX", px);
    cmd.arg(opts);
    parse_grant(&ok(c, &cmd)).expect("granted").1
}

/// Locks of every kind: exclusive, two SHARED holders, two places of a LIMIT 3 semaphore (the
/// holders' leases end at different times), and a gate that accepted the exclusive lock's fence.
/// Returns the highest fence granted.
pub fn populate(c: &mut Connection) -> i64 {
    let ex = acquire_with(c, "up:ex", "tok-ex", TTL, &[]);
    let fences = [
        ex,
        acquire_with(c, "up:shared", "reader-1", TTL, &["SHARED"]),
        acquire_with(c, "up:shared", "reader-2", TTL / 2, &["SHARED"]),
        acquire_with(c, "up:sem", "place-1", TTL, &["LIMIT", "3"]),
        acquire_with(c, "up:sem", "place-2", TTL / 3, &["LIMIT", "3"]),
    ];
    let set = rcmd!("LOCK.FENCE", "up:gate", ex, "SET", "up:data", "v1");
    assert_eq!(ok(c, &set), Value::Okay);
    fences.into_iter().max().unwrap()
}

/// After `populate`: one more lock, a holder more and one fewer, an extend, a gate raised.
pub fn more_of_every_kind(c: &mut Connection) {
    let fence = acquire_with(c, "up:more", "tok-more", TTL, &[]);
    acquire_with(c, "up:shared", "reader-3", TTL, &["SHARED"]);
    acquire_with(c, "up:sem", "place-3", TTL, &["LIMIT", "3"]);
    assert_eq!(release(c, "up:shared", b"reader-1"), 1);
    assert_eq!(extend_px(c, "up:ex", b"tok-ex", TTL), 1);
    let gated = rcmd!("LOCK.FENCE", "up:gate", fence, "SET", "up:data", "v2");
    assert_eq!(ok(c, &gated), Value::Okay);
}

/// A reply without its `ttl` fields (remaining times; the absolute ends are in the digest).
pub fn without_ttl(v: &Value) -> Value {
    let Value::Array(items) = v else {
        return v.clone();
    };
    let named = items.len() % 2 == 0
        && items
            .iter()
            .step_by(2)
            .all(|k| matches!(k, Value::BulkString(_)));
    if !named {
        return Value::Array(items.iter().map(without_ttl).collect());
    }
    let pairs = items.chunks(2).filter(|p| as_bytes(&p[0]) != b"ttl");
    Value::Array(
        pairs
            .flat_map(|p| [p[0].clone(), without_ttl(&p[1])])
            .collect(),
    )
}

/// What must be equal on two servers: the digest of the whole data set, each key's expiry, and
/// each lock as `LOCK.INFO` shows it (each other key's value).
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    pub digest: Value,
    pub keys: Vec<(String, Value, i64)>,
}

pub fn snapshot(s: &Server) -> Snapshot {
    let mut c = s.conn();
    let mut names: Vec<String> = match ok(&mut c, &rcmd!("KEYS", "*")) {
        Value::Array(keys) => keys.iter().map(|k| lossy(&as_bytes(k))).collect(),
        other => panic!("KEYS: {other:?}"),
    };
    names.sort();
    let keys = names
        .into_iter()
        .map(|k| {
            let shown = match type_of(&mut c, &k).as_str() {
                "redislock" => without_ttl(&ok(&mut c, &rcmd!("LOCK.INFO", &k))),
                _ => ok(&mut c, &rcmd!("DUMP", &k)),
            };
            let at = pexpiretime(&mut c, &k);
            (k, shown, at)
        })
        .collect();
    Snapshot {
        digest: ok(&mut c, &rcmd!("DEBUG", "DIGEST")),
        keys,
    }
}

pub fn info_number(s: &Server, section: &str, name: &str) -> i64 {
    let v = s.info_field(section, name).unwrap_or_else(|| "0".into());
    v.parse().unwrap_or_else(|_| panic!("{name}:{v}"))
}

/// Calls of `command` in `INFO commandstats`.
pub fn calls(s: &Server, command: &str) -> i64 {
    let info = s.info_text("commandstats");
    let stats = field(&info, &format!("cmdstat_{command}")).unwrap_or_default();
    stats
        .strip_prefix("calls=")
        .and_then(|r| r.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Waits for the server process to exit on its own; its exit status.
pub fn exit_status(s: &mut Server) -> ExitStatus {
    let child = s.child.as_mut().expect("a running server");
    let deadline = Instant::now() + Duration::from_secs(20) * time_scale();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            s.child = None;
            return status;
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The log lines a server on the previous release writes when it meets this release's RDB file.
pub const REFUSED_FILE: &[&str] = &[
    "The RDB file contains module AUX data for the module type 'redislock', that the responsible \
     module is not able to load. Check for modules log above for additional clues.",
    "Short read or OOM loading DB. Unrecoverable error, aborting now.",
    "Unexpected EOF reading RDB file",
];

pub fn assert_refused_file(log: &str) {
    for line in REFUSED_FILE {
        assert!(log.contains(line), "no log line {line:?} in:\n{log}");
    }
    // The previous release says nothing of its own about the file.
    let load = log
        .find("Loading RDB produced by")
        .expect("the load in the log");
    assert!(!log[load..].contains("<redislock>"), "{log}");
}

/// This build's release as `MODULE LIST` shows it.
pub fn release_number() -> i64 {
    let v: Vec<i64> = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    v[0] * 10_000 + v[1] * 100 + v[2]
}
