//! The blocking locker's own connections: a few idle ones kept for its commands, each call
//! bounded; a wait (`BLOCK`) reads for as long as it waits, on a connection no other command
//! shares meanwhile.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::core::acquire::Attempt;
use crate::core::args;
use crate::core::durable::Follow;
use crate::core::error::{reply_text, Result};
use crate::core::take::{self, Grant, Step, Take};
use crate::route::{self, Route};

/// How many idle connections a locker keeps.
const IDLE: usize = 4;

pub(crate) struct Conns {
    client: redis::Client,
    idle: Mutex<Vec<Connection>>,
    /// On a Cluster: every request goes through the locker's route instead.
    route: Option<Arc<Route>>,
}

impl Conns {
    pub fn new(client: redis::Client) -> Conns {
        Conns {
            client,
            idle: Mutex::new(Vec::new()),
            route: None,
        }
    }

    /// The connections of a locker on a Cluster (`client` is its first node's).
    pub fn routed(client: redis::Client, route: Arc<Route>) -> Conns {
        Conns {
            route: Some(route),
            ..Conns::new(client)
        }
    }

    pub fn route(&self) -> Option<&Arc<Route>> {
        self.route.as_ref()
    }

    /// Where a connection-bound hold's own connection goes.
    pub fn target(&self) -> crate::node_of::Target {
        match &self.route {
            Some(r) => crate::node_of::Target::Cluster(r.clone()),
            None => crate::node_of::Target::One(self.client.clone()),
        }
    }

    /// New connections to the same server, or the same Cluster.
    pub fn again(&self) -> Conns {
        Conns {
            route: self.route.as_ref().map(|r| r.again()),
            ..Conns::new(self.client.clone())
        }
    }

    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// An idle connection (`true`), or else a new one.
    fn take(&self, bound: Duration) -> redis::RedisResult<(Connection, bool)> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match pooled {
            Some(c) => Ok((c, true)),
            None => Ok((open_within(&self.client, bound)?, false)),
        }
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE && redis::ConnectionLike::is_open(&conn) {
            idle.push(conn);
        }
    }

    /// Sends `args` on one of the locker's connections; its reply must come within `bound`.
    /// A connection that failed (not a server's error reply) is closed, never reused. An idle
    /// connection found closed by the server (its `timeout`, a restart) is replaced by a new
    /// one, and the request sent again on it: for the lock commands, whose repetition with the
    /// same token changes nothing more.
    pub fn send(&self, args: &[Vec<u8>], bound: Duration) -> redis::RedisResult<Value> {
        self.send_then(args, bound, |_| None).map(|(v, _)| v)
    }

    /// `send` of a request without keys about `key` (the `WAITAOF` probe): on a Cluster, to
    /// the master of `key`.
    pub fn send_about(
        &self,
        key: &[u8],
        args: &[Vec<u8>],
        bound: Duration,
    ) -> redis::RedisResult<Value> {
        match &self.route {
            Some(route) => route::send_blocking_about(route, key, args, bound),
            None => self.send(args, bound),
        }
    }

    /// `send`, never sent twice (a guarded write: its inner command might run twice).
    pub fn send_once(&self, args: &[Vec<u8>], bound: Duration) -> redis::RedisResult<Value> {
        if let Some(route) = &self.route {
            return route::send_blocking(route, args, bound, |_: &Value| None).map(|(v, _)| v);
        }
        let started = Instant::now();
        let (mut conn, _) = self.take(bound.max(Duration::from_millis(1)))?;
        let answer = Self::query(&mut conn, args, left(bound, started));
        if answer.as_ref().is_ok() || answer.as_ref().is_err_and(|e| reply_text(e).is_some()) {
            self.give_back(conn);
        }
        answer
    }

    /// `send`, then, on the same connection, the follow-up `then` makes of the reply (a line
    /// and its bound), if any: both replies.
    pub fn send_then(
        &self,
        args: &[Vec<u8>],
        bound: Duration,
        then: impl FnOnce(&Value) -> Option<Follow> + Send + 'static,
    ) -> redis::RedisResult<(Value, Option<redis::RedisResult<Value>>)> {
        if let Some(route) = &self.route {
            return route::send_blocking(route, args, bound, then);
        }
        // The bound counts from the call: opening a connection takes its part.
        let started = Instant::now();
        let (mut conn, pooled) = self.take(bound.max(Duration::from_millis(1)))?;
        let mut answer = Self::query(&mut conn, args, left(bound, started));
        if pooled && answer.as_ref().is_err_and(|e| e.is_connection_dropped()) {
            conn = open_within(&self.client, left(bound, started))?;
            answer = Self::query(&mut conn, args, left(bound, started));
        }
        let v = match answer {
            Ok(v) => v,
            Err(e) => {
                if reply_text(&e).is_some() {
                    self.give_back(conn);
                }
                return Err(e);
            }
        };
        let follow = then(&v).map(|(lines, bound)| Self::query_all(&mut conn, &lines, bound));
        let sound = match &follow {
            Some(Err(e)) => reply_text(e).is_some(),
            _ => true,
        };
        if sound {
            self.give_back(conn);
        }
        Ok((v, follow))
    }

    /// Carries out the steps of an acquire; `timeout` bounds what has no tighter bound.
    pub fn acquire(&self, mut take: Take, timeout: Duration) -> Result<Option<Grant>> {
        let mut step = take.next(Instant::now());
        loop {
            step = match step {
                Step::Send { line, wait } => {
                    let bound = Attempt::bound(wait, timeout);
                    let answer = self
                        .send_then(&line, bound, take.follow_up())
                        .map(|(v, acks)| (v, acks.and_then(|a| a.ok())));
                    take.answered(answer, Instant::now())
                }
                Step::Pause(d) => {
                    std::thread::sleep(d);
                    take.next(Instant::now())
                }
                Step::Renew(lines) => {
                    let outcomes: Vec<_> = lines
                        .iter()
                        .map(|l| take::outcome(self.send(l, timeout).ok().as_ref()))
                        .collect();
                    take.renewed(&outcomes, Instant::now())
                }
                Step::Release(line) => {
                    let _ = self.send(&line, timeout);
                    take.next(Instant::now())
                }
                Step::Done(done) => return done,
            }
        }
    }

    /// The follow-ups `lines` in one pipeline: their answers joined.
    fn query_all(
        conn: &mut Connection,
        lines: &[Vec<Vec<u8>>],
        bound: Duration,
    ) -> redis::RedisResult<Value> {
        let bound = bound.max(Duration::from_millis(1));
        conn.set_read_timeout(Some(bound))?;
        conn.set_write_timeout(Some(bound))?;
        let answers = args::pipe(lines).query::<Vec<Value>>(conn)?;
        Ok(crate::core::durable::joined(answers))
    }

    fn query(
        conn: &mut Connection,
        args: &[Vec<u8>],
        bound: Duration,
    ) -> redis::RedisResult<Value> {
        let bound = bound.max(Duration::from_millis(1));
        conn.set_read_timeout(Some(bound))?;
        conn.set_write_timeout(Some(bound))?;
        args::cmd(args).query::<Value>(conn)
    }
}

/// What is left of `bound` since `started` (at least 1 ms: a bound of 0 means none to the crate).
fn left(bound: Duration, started: Instant) -> Duration {
    bound
        .saturating_sub(started.elapsed())
        .max(Duration::from_millis(1))
}

/// A new connection within `bound`. The redis crate bounds each read of its setup (HELLO,
/// CLIENT SETINFO) by the time left, one after the other, which adds up to several times that
/// against a stopped server: the connection is opened on a thread of its own, given up here at
/// `bound` (the thread ends with the crate's own bounds).
fn open_within(client: &redis::Client, bound: Duration) -> redis::RedisResult<Connection> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let client = client.clone();
    std::thread::Builder::new()
        .name("redislock-connect".into())
        .spawn(move || {
            let _ = tx.send(client.get_connection_with_timeout(bound));
        })
        .map_err(redis::RedisError::from)?;
    match rx.recv_timeout(bound) {
        Ok(opened) => opened,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no connection within the bound",
        )
        .into()),
    }
}
