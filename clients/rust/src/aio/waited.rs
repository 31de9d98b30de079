//! The I/O of an acquire: a try on the locker's connection, a wait in the server
//! (`LOCK.ACQUIRE … BLOCK`) on a connection of its own (dropping the future closes it, and the
//! server drops the waiter at once). A follow-up (`WAIT`) goes on the same connection.

use std::time::{Duration, Instant};

use redis::Value;

use crate::core::acquire::Attempt;
use crate::core::args::{self, Wait};
use crate::core::durable::Follow;
use crate::core::error::{Error, Result};
use crate::core::take::{self, Grant, Step, Take};
use crate::COMMAND_TIMEOUT;

impl super::Inner {
    /// Carries out the steps of an acquire.
    pub(super) async fn acquire(&self, mut take: Take) -> Result<Option<Grant>> {
        let label = take.label().to_string();
        let mut step = take.next(Instant::now());
        loop {
            step = match step {
                Step::Send { line, wait } => {
                    let then = take.follow_up();
                    let answer = if wait == Wait::No {
                        let sent = self
                            .channel
                            .send_then(&line, COMMAND_TIMEOUT, &label, "acquire", then)
                            .await;
                        match sent {
                            Ok((v, acks)) => Ok((v, acks.and_then(|a| a.ok()))),
                            Err(Error::Redis(e)) => Err(e),
                            Err(e) => return Err(e),
                        }
                    } else {
                        let bound = Attempt::bound(wait, COMMAND_TIMEOUT);
                        match send_waiting(self, &line, bound, then).await {
                            Ok(Some(v)) => Ok(v),
                            Ok(None) => return Err(take.timed_out()),
                            Err(e) => Err(e),
                        }
                    };
                    take.answered(answer, Instant::now())
                }
                Step::Pause(d) => {
                    tokio::time::sleep(d).await;
                    take.next(Instant::now())
                }
                Step::Renew(lines) => {
                    let mut outcomes = Vec::with_capacity(lines.len());
                    for l in &lines {
                        let v = self.send(l, COMMAND_TIMEOUT, &label, "acquire").await;
                        outcomes.push(take::outcome(v.ok().as_ref()));
                    }
                    take.renewed(&outcomes, Instant::now())
                }
                Step::Release(line) => {
                    let _ = self.send(&line, COMMAND_TIMEOUT, &label, "release").await;
                    take.next(Instant::now())
                }
                Step::Done(done) => return done,
            }
        }
    }
}

/// Sends `line` on a new connection (on a Cluster, to the master of its key), its reply within
/// `bound` (`None` past it), then on it the follow-up `then` makes of the reply, if any (its
/// answer, or `None` if it failed). A redirect or a lost node comes back as an error, for the
/// acquire to build the wait again with the time it has left.
async fn send_waiting(
    inner: &super::Inner,
    line: &[Vec<u8>],
    bound: Duration,
    then: impl FnOnce(&Value) -> Option<Follow>,
) -> redis::RedisResult<Option<(Value, Option<Value>)>> {
    if let Some(route) = &inner.route {
        // On a Cluster: to the master of the key, on a new connection as here.
        return match route.send(line, bound, then).await {
            Ok((v, followed)) => Ok(Some((v, followed.and_then(|f| f.ok())))),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        };
    }
    let client = &inner.client;
    let run = async {
        // Without the crate's default response timeout: the wait has its own bound.
        let mut conn = crate::renewer::connect(client).await?;
        let v = args::cmd(line).query_async::<Value>(&mut conn).await?;
        Ok::<_, redis::RedisError>((v, conn))
    };
    let answer = if bound == Duration::MAX {
        Some(run.await?)
    } else {
        tokio::time::timeout(bound, run).await.ok().transpose()?
    };
    let Some((v, mut conn)) = answer else {
        return Ok(None);
    };
    let Some((follow, bound)) = then(&v) else {
        return Ok(Some((v, None)));
    };
    let follow = args::pipe(&follow);
    let acks = tokio::time::timeout(bound, follow.query_async::<Vec<Value>>(&mut conn)).await;
    let acks = acks
        .ok()
        .and_then(|a| a.ok())
        .map(crate::core::durable::joined);
    Ok(Some((v, acks)))
}
