//! Waiters and counters: clients blocked on threads of their own, the waiters and counters the
//! server shows, and polling for a state a test can only observe.

use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use super::*;

/// Polls `LOCK.INFO` until `key` has `n` waiters: a state change in the server that a test can
/// only observe, within a bounded deadline.
/// The `waiters` field of `LOCK.INFO key`, for a lock of any kind (0 when there is no lock).
pub fn waiters_of(con: &mut Connection, key: &str) -> i64 {
    let v = ok(con, &rcmd!("LOCK.INFO", key));
    if v == Value::Nil {
        return 0;
    }
    field_pairs(&v)
        .iter()
        .find(|(k, _)| k == b"waiters")
        .map_or(0, |(_, v)| as_int(v))
}

#[track_caller]
pub fn wait_waiters(con: &mut Connection, key: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10) * time_scale();
    loop {
        let now = waiters_of(con, key);
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key}: {now} waiters, expected {n}"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

/// Polls `f` until it answers `true`, at most `limit` times `time_scale()`: for a state change in
/// the server that a test can only observe.
#[track_caller]
pub fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit * time_scale();
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// What a waiter's `LOCK.ACQUIRE … BLOCK` answered: the reply (a server error as its full text),
/// how long it took, and when it arrived.
#[derive(Clone, Debug)]
pub struct WaitReply {
    pub reply: Result<Value, String>,
    pub took: Duration,
    pub at: Instant,
}

impl WaitReply {
    /// The grant `(token, fence)`; anything else (nil, an error) fails the test.
    #[track_caller]
    pub fn granted(&self) -> (Vec<u8>, i64) {
        match &self.reply {
            Ok(v @ Value::Array(_)) => parse_grant(v).unwrap(),
            other => panic!("the waiter should be granted, got {other:?}"),
        }
    }

    /// The reply is nil (a timeout), not a grant and not an error.
    #[track_caller]
    pub fn assert_nil(&self) {
        assert!(
            matches!(self.reply, Ok(Value::Nil)),
            "the waiter should get nil, got {:?}",
            self.reply
        );
    }

    /// The full error text; anything else fails the test.
    #[track_caller]
    pub fn error(&self) -> &str {
        match &self.reply {
            Err(e) => e,
            Ok(v) => panic!("the waiter should get an error, got {v:?}"),
        }
    }
}

/// A client blocked (or about to block) in `LOCK.ACQUIRE … BLOCK` on a thread of its own.
pub struct Waiter {
    rx: std::sync::mpsc::Receiver<WaitReply>,
    /// `CLIENT ID` of the waiter's connection.
    pub id: i64,
    /// When the command was about to be sent.
    pub started: Instant,
}

impl Waiter {
    /// The reply; fails the test if none arrives within 10 s (times `time_scale()`).
    #[track_caller]
    pub fn recv(&self) -> WaitReply {
        self.recv_within(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("the waiter never answered"))
    }

    /// The reply, if it arrives within `limit` (times `time_scale()`).
    pub fn recv_within(&self, limit: Duration) -> Option<WaitReply> {
        self.rx.recv_timeout(limit * time_scale()).ok()
    }

    /// The reply, if it has arrived already.
    pub fn try_recv(&self) -> Option<WaitReply> {
        self.rx.try_recv().ok()
    }

    /// Shorthand for `recv().granted()`.
    #[track_caller]
    pub fn granted(&self) -> (Vec<u8>, i64) {
        self.recv().granted()
    }
}

/// Starts a client on 127.0.0.1:`port` that sends `LOCK.ACQUIRE key token PX px BLOCK block_ms`
/// from a thread of its own. It returns at once: wait for the server to count the waiter
/// (`wait_waiters`, `wait_total_waiters`) before relying on its place in the queue.
pub fn spawn_waiter_on(port: u16, key: &str, token: &str, px: i64, block_ms: i64) -> Waiter {
    spawn_waiter_with_on(port, key, token, px, block_ms, &[])
}

/// `spawn_waiter` with more options (`SHARED`, `LIMIT n`, `EPHEMERAL`).
pub fn spawn_waiter_with(
    server: &Server,
    key: &str,
    token: &str,
    px: i64,
    block_ms: i64,
    options: &[&str],
) -> Waiter {
    spawn_waiter_with_on(server.port(), key, token, px, block_ms, options)
}

pub fn spawn_waiter_with_on(
    port: u16,
    key: &str,
    token: &str,
    px: i64,
    block_ms: i64,
    options: &[&str],
) -> Waiter {
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client url");
    let mut con = client
        .get_connection_with_timeout(io_timeout())
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    // Long enough for the longest wait a test asks for.
    let read_timeout = io_timeout().max(Duration::from_millis(block_ms as u64 + 10_000));
    con.set_read_timeout(Some(read_timeout)).unwrap();
    con.set_write_timeout(Some(io_timeout())).unwrap();
    let id = as_int(&ok(&mut con, &rcmd!("CLIENT", "ID")));
    let (tx, rx) = std::sync::mpsc::channel();
    let (key, token) = (key.to_string(), token.to_string());
    let started = Instant::now();
    thread::spawn(move || {
        let t = Instant::now();
        let mut cmd = rcmd!("LOCK.ACQUIRE", &key, &token, "PX", px, "BLOCK", block_ms);
        for o in &options {
            cmd.arg(o);
        }
        let reply = run(&mut con, &cmd).map_err(|e| err_text(&e));
        let _ = tx.send(WaitReply {
            reply,
            took: t.elapsed(),
            at: Instant::now(),
        });
    });
    Waiter { rx, id, started }
}

/// Runs `cmd` (a blocking command) on `con`, from a thread of its own; the reply arrives as a
/// waiter's does. `con`'s read timeout must outlast the wait.
pub fn spawn_blocked(mut con: Connection, cmd: redis::Cmd) -> Waiter {
    let id = as_int(&ok(&mut con, &rcmd!("CLIENT", "ID")));
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    thread::spawn(move || {
        let t = Instant::now();
        let reply = run(&mut con, &cmd).map_err(|e| err_text(&e));
        let _ = tx.send(WaitReply {
            reply,
            took: t.elapsed(),
            at: Instant::now(),
        });
    });
    Waiter { rx, id, started }
}

/// `spawn_waiter_on` the server's port.
pub fn spawn_waiter(server: &Server, key: &str, token: &str, px: i64, block_ms: i64) -> Waiter {
    spawn_waiter_on(server.port(), key, token, px, block_ms)
}

/// The counter `redislock_<name>` of `INFO redislock`.
pub fn stat(server: &Server, name: &str) -> i64 {
    stat_in(&server.info_text("redislock"), name)
}

/// The counter `redislock_<name>` in the text of `INFO redislock`.
#[track_caller]
pub fn stat_in(info: &str, name: &str) -> i64 {
    field(info, &format!("redislock_{name}"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO redislock lacks redislock_{name}:\n{info}"))
}

/// Waits until the server counts `n` blocked `LOCK.ACQUIRE` clients in all (`INFO`, so that no
/// key is touched).
#[track_caller]
pub fn wait_total_waiters(s: &Server, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10) * time_scale();
    loop {
        let now = stat(s, "waiters");
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{now} waiters in all, expected {n}\n{}",
            s.log_tail(20)
        );
        thread::sleep(Duration::from_millis(2));
    }
}

impl Server {
    /// The whole text of `INFO <section>`.
    pub fn info_text(&self, section: &str) -> String {
        let mut con = self.conn();
        redis::cmd("INFO").arg(section).query(&mut con).unwrap()
    }
}
