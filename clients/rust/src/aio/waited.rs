//! A wait in the server (`LOCK.ACQUIRE … BLOCK`) on a connection of its own: dropping the
//! future closes it, and the server drops the waiter at once. A follow-up (`WAIT`) goes on the
//! same connection.

use std::time::Duration;

use redis::Value;

use crate::core::args;

/// Sends `line` on a new connection, its reply within `bound` (`None` past it), then on it the
/// follow-up `then` makes of the reply, if any (its answer, or `None` if it failed).
pub(super) async fn wait(
    inner: &super::Inner,
    line: &[Vec<u8>],
    bound: Duration,
    then: impl FnOnce(&Value) -> Option<(Vec<Vec<u8>>, Duration)>,
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
    let follow = args::cmd(&follow);
    let acks = tokio::time::timeout(bound, follow.query_async::<Value>(&mut conn)).await;
    Ok(Some((v, acks.ok().and_then(|a| a.ok()))))
}
