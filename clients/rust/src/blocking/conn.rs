//! The blocking locker's own connections: a few idle ones kept for its commands, each call
//! bounded; a wait (`BLOCK`) reads for as long as it waits, on a connection no other command
//! shares meanwhile.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::core::args;
use crate::core::error::reply_text;

/// How many idle connections a locker keeps.
const IDLE: usize = 4;

pub(crate) struct Conns {
    client: redis::Client,
    idle: Mutex<Vec<Connection>>,
}

impl Conns {
    pub fn new(client: redis::Client) -> Conns {
        Conns {
            client,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    fn take(&self, bound: Duration) -> redis::RedisResult<Connection> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match pooled {
            Some(c) => Ok(c),
            None => open_within(&self.client, bound),
        }
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE && redis::ConnectionLike::is_open(&conn) {
            idle.push(conn);
        }
    }

    /// Sends `args` on one of the locker's connections; its reply must come within `bound`
    /// (counted from the call: opening a connection takes its part). A connection that failed
    /// (not a server's error reply) is closed, never reused.
    pub fn send(&self, args: &[Vec<u8>], bound: Duration) -> redis::RedisResult<Value> {
        let started = Instant::now();
        let bound = bound.max(Duration::from_millis(1));
        let mut conn = self.take(bound)?;
        let left = bound
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        conn.set_read_timeout(Some(left))?;
        conn.set_write_timeout(Some(left))?;
        match args::cmd(args).query::<Value>(&mut conn) {
            Ok(v) => {
                self.give_back(conn);
                Ok(v)
            }
            Err(e) => {
                if reply_text(&e).is_some() {
                    self.give_back(conn);
                }
                Err(e)
            }
        }
    }
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
