//! The blocking locker's own connections: a few idle ones kept for its commands, each call
//! bounded; a wait (`BLOCK`) reads for as long as it waits, on a connection no other command
//! shares meanwhile.

use std::sync::Mutex;
use std::time::Duration;

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
            None => self.client.get_connection_with_timeout(bound),
        }
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE && redis::ConnectionLike::is_open(&conn) {
            idle.push(conn);
        }
    }

    /// Sends `args` on one of the locker's connections; its reply must come within `bound`.
    /// A connection that failed (not a server's error reply) is closed, never reused.
    pub fn send(&self, args: &[Vec<u8>], bound: Duration) -> redis::RedisResult<Value> {
        let bound = bound.max(Duration::from_millis(1));
        let mut conn = self.take(bound)?;
        conn.set_read_timeout(Some(bound))?;
        conn.set_write_timeout(Some(bound))?;
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
