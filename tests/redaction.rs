//! Owner tokens are credentials (SPEC "Server safety"): `SLOWLOG` and `MONITOR` show
//! `(redacted)` in their place — on the master for `LOCK.ACQUIRE`/`EXTEND`/`RELEASE`, including
//! an acquire that waits with `BLOCK` and is handed the lock, and on a replica for the
//! `LOCK._APPLY` effects it receives — and the token bytes appear nowhere in those outputs.

use std::time::{Duration, Instant};

use crate::common::*;
use rand::Rng;
use redis::Value;

const REDACTED: &[u8] = b"(redacted)";

/// Distinctive tokens for one test: `secret-token-<random>-<role>`.
struct Secrets(String);

impl Secrets {
    fn new() -> Secrets {
        Secrets(format!(
            "secret-token-{:016x}",
            rand::thread_rng().gen::<u64>()
        ))
    }

    fn token(&self, role: &str) -> String {
        format!("{}-{role}", self.0)
    }

    /// The part every token of this test shares.
    fn stem(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every string inside a reply, depth first.
fn strings(v: &Value, out: &mut Vec<Vec<u8>>) {
    match v {
        Value::BulkString(b) => out.push(b.clone()),
        Value::SimpleString(s) => out.push(s.as_bytes().to_vec()),
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            strings(k, out);
            strings(v, out);
        }),
        _ => {}
    }
}

/// The lock commands the master runs, with every token a distinct secret; the waiter's
/// `BLOCK` acquire is handed the lock by the release. Returns the generated token (`*`).
fn lock_traffic(s: &Server, secrets: &Secrets) -> Vec<u8> {
    let mut c = s.conn();
    let holder = secrets.token("holder");
    let waiter = secrets.token("waiter");
    let (_, fence) = grant(&mut c, "r:k", holder.as_bytes(), 60_000);
    assert_eq!(
        grant(&mut c, "r:k", holder.as_bytes(), 60_000).1,
        fence,
        "re-grant"
    );
    assert_eq!(extend_px(&mut c, "r:k", holder.as_bytes(), 90_000), 1);
    let other = secrets.token("other");
    assert_eq!(extend_px(&mut c, "r:k", other.as_bytes(), 90_000), 0);
    assert_eq!(release(&mut c, "r:k", other.as_bytes()), 0);
    assert!(acquire(&mut c, "r:k", other.as_bytes(), 1000).is_none());
    let bad = secrets.token("bad-ttl");
    err(&mut c, &rcmd!("LOCK.ACQUIRE", "r:k", &bad, "PX", 0));
    let mut w = RawConn::connect(s);
    w.send(&[
        "LOCK.ACQUIRE",
        "r:k",
        &waiter,
        "PX",
        "60000",
        "BLOCK",
        "5000",
    ]);
    wait_waiters(&mut c, "r:k", 1);
    assert_eq!(release(&mut c, "r:k", holder.as_bytes()), 1);
    match w.read() {
        Ok(Resp::Array(items)) => assert_eq!(items[0], Resp::Bulk(waiter.clone().into_bytes())),
        other => panic!("the waiter was not handed the lock: {other:?}"),
    }
    assert_eq!(release(&mut c, "r:k", waiter.as_bytes()), 1);
    let (generated, _) = grant(&mut c, "r:gen", b"*", 60_000);
    assert_eq!(release(&mut c, "r:gen", &generated), 1);
    generated
}

#[test]
fn slowlog_shows_redacted_tokens() {
    let s = Server::start();
    let mut c = s.conn();
    ok(
        &mut c,
        &rcmd!("CONFIG", "SET", "slowlog-log-slower-than", 0),
    );
    ok(&mut c, &rcmd!("CONFIG", "SET", "slowlog-max-len", 1000));
    ok(&mut c, &rcmd!("SLOWLOG", "RESET"));
    let secrets = Secrets::new();
    let generated = lock_traffic(&s, &secrets);
    let log = ok(&mut c, &rcmd!("SLOWLOG", "GET", -1));
    let Value::Array(entries) = &log else {
        panic!("SLOWLOG GET answered {log:?}")
    };
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for entry in entries {
        let Value::Array(fields) = entry else {
            panic!("slowlog entry {entry:?}")
        };
        let Some(Value::Array(argv)) = fields.get(3) else {
            panic!("slowlog entry without arguments: {entry:?}")
        };
        let argv: Vec<Vec<u8>> = argv.iter().map(as_bytes).collect();
        let name = lossy(&argv[0]).to_ascii_lowercase();
        if ["lock.acquire", "lock.release", "lock.extend"].contains(&name.as_str()) {
            let shown: Vec<String> = argv.iter().map(|a| lossy(a)).collect();
            assert_eq!(argv[2], REDACTED, "{name}: {shown:?}");
            *seen.entry(name).or_default() += 1;
        }
    }
    // grant, re-grant, busy, bad TTL, the waiter, the generated one; extend twice; four
    // releases (the waiter's acquire is logged once it is answered).
    assert_eq!(seen.get("lock.acquire"), Some(&6), "{seen:?}");
    assert_eq!(seen.get("lock.extend"), Some(&2), "{seen:?}");
    assert_eq!(seen.get("lock.release"), Some(&4), "{seen:?}");
    let mut all = Vec::new();
    strings(&log, &mut all);
    for s in &all {
        assert!(
            !contains(s, secrets.stem()) && !contains(s, &generated),
            "a token in SLOWLOG: {:?}",
            lossy(s)
        );
    }
}

/// Reads `MONITOR` lines until one contains `marker`; returns every line read.
fn monitor_until(m: &mut RawConn, marker: &[u8], s: &Server) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(10) * time_scale();
    let mut lines = Vec::new();
    loop {
        let line = match m.read() {
            Ok(Resp::Simple(l)) => l,
            other => panic!("MONITOR sent {other:?}\n{}", s.log_tail(20)),
        };
        let done = contains(&line, marker);
        lines.push(line);
        if done {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "no {:?} in MONITOR",
            lossy(marker)
        );
    }
}

fn start_monitor(s: &Server) -> RawConn {
    let mut m = RawConn::connect(s);
    assert_eq!(m.call(&["MONITOR"]), Resp::Simple(b"OK".to_vec()));
    m
}

#[track_caller]
fn assert_redacted(lines: &[Vec<u8>], command: &str, secrets: &Secrets, generated: &[u8]) -> usize {
    let quoted = format!("\"{}\"", command.to_ascii_lowercase());
    let mut n = 0;
    for line in lines {
        assert!(
            !contains(line, secrets.stem()) && !contains(line, generated),
            "a token in MONITOR: {}",
            lossy(line)
        );
        if lossy(line).to_ascii_lowercase().contains(&quoted) {
            assert!(
                contains(line, b"\"(redacted)\""),
                "not redacted: {}",
                lossy(line)
            );
            n += 1;
        }
    }
    n
}

#[test]
fn monitor_on_master_and_replica_never_shows_tokens() {
    let master = Server::start();
    let replica = Server::start_replica_of(&master);
    let mut on_master = start_monitor(&master);
    let mut on_replica = start_monitor(&replica);
    let secrets = Secrets::new();
    let generated = lock_traffic(&master, &secrets);
    // A write after the traffic marks its end on both monitors.
    let mut c = master.conn();
    ok(&mut c, &rcmd!("SET", "r:end-marker", 1));
    wait_replicas(&mut c, 1);

    let lines = monitor_until(&mut on_master, b"r:end-marker", &master);
    assert_eq!(
        assert_redacted(&lines, "LOCK.ACQUIRE", &secrets, &generated),
        6
    );
    assert_eq!(
        assert_redacted(&lines, "LOCK.EXTEND", &secrets, &generated),
        2
    );
    assert_eq!(
        assert_redacted(&lines, "LOCK.RELEASE", &secrets, &generated),
        4
    );

    // The replica receives each grant as LOCK._APPLY key token fence ms: the holder's, its
    // re-grant, the handoff to the waiter, the generated token's.
    let lines = monitor_until(&mut on_replica, b"r:end-marker", &replica);
    let applied = assert_redacted(&lines, "LOCK._APPLY", &secrets, &generated);
    assert!(applied >= 3, "{applied} LOCK._APPLY seen by the replica");

    for (name, s) in [("master", &master), ("replica", &replica)] {
        let text = s.log() + &s.stderr_log();
        assert!(
            !text.contains(&secrets.0) && !contains(text.as_bytes(), &generated),
            "{name}: a token in the server log"
        );
    }
}

#[test]
fn holders_and_their_effects_never_show_tokens() {
    let master = Server::start();
    let replica = Server::start_replica_of(&master);
    let mut rc = replica.conn();
    ok(
        &mut rc,
        &rcmd!("CONFIG", "SET", "slowlog-log-slower-than", 0),
    );
    ok(&mut rc, &rcmd!("SLOWLOG", "RESET"));
    let mut on_master = start_monitor(&master);
    let mut on_replica = start_monitor(&replica);
    let secrets = Secrets::new();
    let mut c = master.conn();
    let (reader, brief, place) = (
        secrets.token("reader"),
        secrets.token("brief"),
        secrets.token("place"),
    );
    // A shared grant, its re-grant, an extend and a release; a semaphore place, and one whose
    // lease ends on its own (an END effect made by the module, not by a command).
    for _ in 0..2 {
        crate::kinds::shared(&mut c, "r:rw", &reader, 60_000);
    }
    assert_eq!(extend_px(&mut c, "r:rw", reader.as_bytes(), 90_000), 1);
    crate::kinds::place(&mut c, "r:sem", &place, 60_000, 2);
    crate::kinds::place(&mut c, "r:sem", &brief, 50, 2);
    wait_until("the brief lease to end", Duration::from_secs(5), || {
        stat(&master, "lease_ends") == 1
    });
    assert_eq!(release(&mut c, "r:rw", reader.as_bytes()), 1);
    ok(&mut c, &rcmd!("SET", "r:end-marker", 1));
    wait_replicas(&mut c, 1);

    let lines = monitor_until(&mut on_master, b"r:end-marker", &master);
    assert_eq!(
        assert_redacted(&lines, "LOCK.ACQUIRE", &secrets, secrets.stem()),
        4
    );
    // Every change of a holder reaches the replica as a LOCK._HOLD effect: four grants (the
    // re-grant and the extend included) and two ends.
    let lines = monitor_until(&mut on_replica, b"r:end-marker", &replica);
    assert_eq!(
        assert_redacted(&lines, "LOCK._HOLD", &secrets, secrets.stem()),
        7
    );
    let mut all = Vec::new();
    strings(&ok(&mut rc, &rcmd!("SLOWLOG", "GET", -1)), &mut all);
    assert!(
        all.iter().any(|s| s == REDACTED),
        "no LOCK._HOLD in the replica's SLOWLOG"
    );
    for s in &all {
        assert!(
            !contains(s, secrets.stem()),
            "a token in SLOWLOG: {:?}",
            lossy(s)
        );
    }
    for (name, s) in [("master", &master), ("replica", &replica)] {
        let text = s.log() + &s.stderr_log();
        assert!(
            !text.contains(&secrets.0),
            "{name}: a token in the server log"
        );
    }
}
