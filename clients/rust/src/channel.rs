//! A `Channel`: where the requests of a locker's holds go (renewals, extensions, releases), on
//! one multiplexed connection of the locker's own, a bound hold's own connection, or, on a
//! Cluster, the locker's route.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::core::args;
use crate::core::durable::Follow;
use crate::core::error::{reply_text, Error};
use crate::renewer::connect;

/// Where the renewals of a locker's holds go: one multiplexed connection of the locker's own,
/// opened when first needed and again after a failure.
///
/// A bound hold's channel is its owned connection (`owned`): never opened again, and closed
/// only when the hold ends (closing it ends the hold in the server).
pub(crate) struct Channel {
    client: Option<redis::Client>,
    /// On a Cluster: every request goes through the locker's route instead.
    route: Option<Arc<crate::route::Route>>,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// When the last request went out on it (the keep-alive of a bound hold's connection).
    last_used: Mutex<Instant>,
}

impl Channel {
    pub fn new(client: redis::Client) -> Arc<Channel> {
        Arc::new(Channel {
            client: Some(client),
            route: None,
            conn: tokio::sync::Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// The channel of a bound hold: the connection it was granted on.
    pub fn owned(conn: MultiplexedConnection) -> Arc<Channel> {
        Arc::new(Channel {
            client: None,
            route: None,
            conn: tokio::sync::Mutex::new(Some(conn)),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// The channel of a locker on a Cluster: each request to the master of its key.
    pub fn routed(route: Arc<crate::route::Route>) -> Arc<Channel> {
        Arc::new(Channel {
            client: None,
            route: Some(route),
            conn: tokio::sync::Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
        })
    }

    pub fn is_owned(&self) -> bool {
        self.client.is_none() && self.route.is_none()
    }

    /// When a request last went out on it.
    pub fn last_used(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// The connection if it is open (none is opened), counted as used now.
    pub async fn current(&self) -> Option<MultiplexedConnection> {
        let conn = self.conn.lock().await.clone();
        if conn.is_some() {
            self.touch();
        }
        conn
    }

    /// Closes the connection (of a bound hold: the server releases what is left of the hold).
    pub async fn close(&self) {
        *self.conn.lock().await = None;
    }

    /// Sends `args`, within `bound`: `Error::Timeout` past it (the connection is then dropped:
    /// the next request opens another).
    pub async fn send(
        &self,
        args: &[Vec<u8>],
        bound: Duration,
        name: &str,
        what: &'static str,
    ) -> Result<Value, Error> {
        let none = |_: &Value| None;
        let (v, _) = self.send_then(args, bound, name, what, none).await?;
        Ok(v)
    }

    /// `send` of a request without keys about `key` (the `WAITAOF` probe): on a Cluster, to
    /// the master of `key`.
    pub async fn send_about(
        &self,
        key: &[u8],
        args: &[Vec<u8>],
        bound: Duration,
        name: &str,
        what: &'static str,
    ) -> Result<Value, Error> {
        let Some(route) = &self.route else {
            return self.send(args, bound, name, what).await;
        };
        match crate::route::send_about(route, key, args, bound).await {
            Ok(v) => Ok(v),
            Err(e) if e.is_timeout() => Err(Error::Timeout {
                name: name.to_string(),
                what,
            }),
            Err(e) => Err(Error::Redis(e)),
        }
    }

    /// `send`, never sent twice (a guarded write: its inner command might run twice).
    pub async fn send_once(
        &self,
        args: &[Vec<u8>],
        bound: Duration,
        name: &str,
        what: &'static str,
    ) -> Result<Value, Error> {
        if let Some(route) = &self.route {
            // A guarded write is never sent twice by the route either.
            self.touch();
            let none = |_: &Value| None;
            let (v, _) = crate::route::channel_send(route, args, bound, name, what, none).await?;
            return Ok(v);
        }
        let (v, _) = self.request(args, bound, name, what, true).await?;
        Ok(v)
    }

    /// `send`, then, on the same connection, the follow-up `then` makes of the reply (a line
    /// and its bound), if any: both replies.
    pub async fn send_then(
        &self,
        args: &[Vec<u8>],
        bound: Duration,
        name: &str,
        what: &'static str,
        then: impl FnOnce(&Value) -> Option<Follow>,
    ) -> Result<(Value, Option<Result<Value, Error>>), Error> {
        if let Some(route) = &self.route {
            self.touch();
            return crate::route::channel_send(route, args, bound, name, what, then).await;
        }
        let (v, mut conn) = self.request(args, bound, name, what, false).await?;
        let Some((lines, bound)) = then(&v) else {
            return Ok((v, None));
        };
        let follow = args::pipe(&lines);
        let follow = follow.query_async::<Vec<Value>>(&mut conn);
        let follow = match tokio::time::timeout(bound, follow).await {
            Ok(answer) => answer
                .map(crate::core::durable::joined)
                .map_err(Error::Redis),
            Err(_) => Err(Error::Timeout {
                name: name.to_string(),
                what,
            }),
        };
        Ok((v, Some(follow)))
    }

    /// Sends `args` within `bound`: its reply and the connection it came on. The locker's
    /// connection found closed by the server while idle (its `timeout`, a restart) is replaced,
    /// and the request sent again on the new one (unless `once`): for the lock commands, whose
    /// repetition with the same token changes nothing more. A connection that failed otherwise
    /// is dropped, never reused; a bound hold's is never replaced.
    async fn request(
        &self,
        args: &[Vec<u8>],
        bound: Duration,
        name: &str,
        what: &'static str,
        once: bool,
    ) -> Result<(Value, MultiplexedConnection), Error> {
        self.touch();
        let deadline = tokio::time::Instant::now() + bound;
        let mut again = !once && !self.is_owned();
        loop {
            let (opened, answer) =
                match tokio::time::timeout_at(deadline, self.try_once(args)).await {
                    Ok(x) => x,
                    Err(_) => {
                        if !self.is_owned() {
                            *self.conn.lock().await = None;
                        }
                        return Err(Error::Timeout {
                            name: name.to_string(),
                            what,
                        });
                    }
                };
            match answer {
                Ok(answer) => return Ok(answer),
                Err(e) if reply_text(&e).is_some() || self.is_owned() => {
                    return Err(Error::Redis(e))
                }
                Err(e) => {
                    *self.conn.lock().await = None;
                    if !(again && !opened && e.is_connection_dropped()) {
                        return Err(Error::Redis(e));
                    }
                    again = false;
                }
            }
        }
    }

    /// One try of a request: whether its connection was opened for it, and the answer.
    async fn try_once(
        &self,
        args: &[Vec<u8>],
    ) -> (bool, redis::RedisResult<(Value, MultiplexedConnection)>) {
        let (mut conn, opened) = {
            let mut slot = self.conn.lock().await;
            match slot.as_ref() {
                Some(c) => (c.clone(), false),
                None => {
                    let Some(client) = &self.client else {
                        let closed = std::io::Error::new(
                            std::io::ErrorKind::NotConnected,
                            "the hold's own connection is closed",
                        );
                        return (false, Err(closed.into()));
                    };
                    match connect(client).await {
                        Ok(c) => {
                            *slot = Some(c.clone());
                            (c, true)
                        }
                        Err(e) => return (true, Err(e)),
                    }
                }
            }
        };
        let answer = args::cmd(args).query_async::<Value>(&mut conn).await;
        (opened, answer.map(|v| (v, conn)))
    }
}
