//! Requests through a `Route`: each to the master of its key, following redirects within its
//! bound; a wait sent once on a connection of its own (see the module above).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

use super::{server_error, within, Followed, Route, Then};
use crate::core::args;
use crate::core::durable::joined;
use crate::core::error::{reply_text, Error};
use crate::core::redirect::{self, Redirect};

/// Sleeps `pause` if it ends before `until`; `Err(err)` if not.
async fn pause(pause: Duration, until: Option<Instant>, err: redis::RedisError) -> RedisResult<()> {
    if until.is_some_and(|u| Instant::now() + pause >= u) {
        return Err(err);
    }
    tokio::time::sleep(pause).await;
    Ok(())
}

async fn query(
    conn: &mut MultiplexedConnection,
    line: &[Vec<u8>],
    asking: bool,
) -> RedisResult<Value> {
    if !asking {
        return args::cmd(line).query_async::<Value>(conn).await;
    }
    // One pipeline, so that nothing else goes between `ASKING` and the request.
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").ignore().add_command(args::cmd(line));
    let mut answers: Vec<Value> = pipe.query_async(conn).await?;
    answers.pop().ok_or_else(|| server_error("ERR no reply"))
}

/// The follow-ups `then` makes of `v`, on `conn` (one pipeline): their answers joined.
async fn follow(conn: &mut MultiplexedConnection, v: &Value, then: impl Then) -> Followed {
    let (lines, bound) = then(v)?;
    let until = Instant::now().checked_add(bound);
    let answers = within(until, args::pipe(&lines).query_async::<Vec<Value>>(conn)).await;
    Some(answers.map(joined))
}

impl Route {
    /// Sends `line` to the master of its key, its reply within `bound`, then on the same
    /// connection the follow-up `then` makes of it. A timeout is an I/O `TimedOut` error.
    pub async fn send(
        &self,
        line: &[Vec<u8>],
        bound: Duration,
        then: impl Then,
    ) -> RedisResult<(Value, Followed)> {
        let slot = redirect::slot_of(line).map_err(server_error)?;
        self.send_to(slot, line, bound, then).await
    }

    /// `send` to the master of `slot`.
    async fn send_to(
        &self,
        slot: Option<u16>,
        line: &[Vec<u8>],
        bound: Duration,
        then: impl Then,
    ) -> RedisResult<(Value, Followed)> {
        let until = Instant::now().checked_add(bound);
        if redirect::is_wait(line) {
            return self.wait(line, slot, until, then).await;
        }
        let once = redirect::is_guarded(line);
        let mut hops = 0;
        loop {
            let (addr, asking) = match within(until, self.target(slot)).await {
                Ok(t) => t,
                Err(e) if e.is_timeout() => return Err(e),
                Err(e) => {
                    pause(redirect::DOWN_PAUSE, until, e).await?;
                    continue;
                }
            };
            let mut conn = match within(until, self.shared(&addr)).await {
                Ok(c) => c,
                Err(e) if e.is_timeout() => return Err(e),
                Err(e) => {
                    // Not sent: a node that is gone (a failover), or not up yet.
                    self.forget(&addr).await;
                    pause(redirect::DOWN_PAUSE, until, e).await?;
                    continue;
                }
            };
            let e = match within(until, query(&mut conn, line, asking)).await {
                Ok(v) => {
                    let followed = follow(&mut conn, &v, then).await;
                    return Ok((v, followed));
                }
                Err(e) => e,
            };
            if reply_text(&e).is_none() {
                self.forget(&addr).await;
                if once || e.is_timeout() {
                    return Err(e);
                }
                pause(redirect::DOWN_PAUSE, until, e).await?;
                continue;
            }
            match self.learn(&e, &addr) {
                None => return Err(e),
                Some(Redirect::Moved { .. } | Redirect::Ask { .. }) => {
                    hops += 1;
                    if hops > redirect::MAX_HOPS {
                        return Err(e);
                    }
                }
                Some(Redirect::TryAgain) => pause(redirect::TRYAGAIN_PAUSE, until, e).await?,
                Some(Redirect::Down) => pause(redirect::DOWN_PAUSE, until, e).await?,
            }
        }
    }

    /// A wait, sent once on a new connection to the master of its slot. A redirect is learnt
    /// and returned; a node that fails or refuses the connection is `NODE_LOST`.
    async fn wait(
        &self,
        line: &[Vec<u8>],
        slot: Option<u16>,
        until: Option<Instant>,
        then: impl Then,
    ) -> RedisResult<(Value, Followed)> {
        let (addr, asking) = match within(until, self.target(slot)).await {
            Ok(t) => t,
            Err(e) if e.is_timeout() => return Err(e),
            Err(_) => return Err(server_error(redirect::NODE_LOST)),
        };
        let client = self.client_of(&addr)?;
        let answer = within(until, async {
            let mut conn = crate::renewer::connect(&client).await?;
            let v = query(&mut conn, line, asking).await?;
            Ok((v, conn))
        })
        .await;
        match answer {
            Ok((v, mut conn)) => {
                let followed = follow(&mut conn, &v, then).await;
                Ok((v, followed))
            }
            Err(e) if e.is_timeout() => Err(e),
            Err(e) => match self.learn(&e, &addr) {
                Some(_) => Err(e),
                None if reply_text(&e).is_some() => Err(e),
                None => Err(server_error(redirect::NODE_LOST)),
            },
        }
    }
}

/// `Route::send` for a `Channel`: a timeout is `Error::Timeout`.
pub(crate) async fn channel_send(
    route: &Route,
    line: &[Vec<u8>],
    bound: Duration,
    name: &str,
    what: &'static str,
    then: impl Then,
) -> Result<(Value, Option<Result<Value, Error>>), Error> {
    let timeout = || Error::Timeout {
        name: name.to_string(),
        what,
    };
    match route.send(line, bound, then).await {
        Ok((v, followed)) => Ok((
            v,
            followed.map(|f| {
                f.map_err(|e| {
                    if e.is_timeout() {
                        timeout()
                    } else {
                        Error::Redis(e)
                    }
                })
            }),
        )),
        Err(e) if e.is_timeout() => Err(timeout()),
        Err(e) => Err(Error::Redis(e)),
    }
}

/// `Route::send` of a request without keys (the `WAITAOF` probe) to the master of `key`.
pub(crate) async fn send_about(
    route: &Route,
    key: &[u8],
    line: &[Vec<u8>],
    bound: Duration,
) -> RedisResult<Value> {
    let slot = Some(redirect::key_slot(key));
    let none = |_: &Value| None;
    route.send_to(slot, line, bound, none).await.map(|(v, _)| v)
}

/// `send_about` from a thread outside any runtime.
pub(crate) fn send_blocking_about(
    route: &Arc<Route>,
    key: &[u8],
    line: &[Vec<u8>],
    bound: Duration,
) -> RedisResult<Value> {
    let (route, key, line) = (route.clone(), key.to_vec(), line.to_vec());
    crate::renewer::run_blocking(async move { send_about(&route, &key, &line, bound).await })
}

/// `Route::send` from a thread outside any runtime (the blocking front end), on the renewal
/// thread's runtime.
pub(crate) fn send_blocking(
    route: &Arc<Route>,
    line: &[Vec<u8>],
    bound: Duration,
    then: impl Then + Send + 'static,
) -> RedisResult<(Value, Followed)> {
    let (route, line) = (route.clone(), line.to_vec());
    crate::renewer::run_blocking(async move { route.send(&line, bound, then).await })
}
