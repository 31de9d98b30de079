//! `Observer` of the tokio front end (see the blocking [`crate::Observer`]).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::core::args;
use crate::core::election::{Leader, Observation, Step, OBSERVE_BLOCK};
use crate::core::error::Result;
use crate::node_of::NodeOf;

/// The changes of leader, awaited one by one with `next()` (see the blocking
/// [`crate::Observer`]).
pub struct Observer {
    client: NodeOf,
    /// The client the connection was opened from.
    opened: Option<redis::Client>,
    name: Vec<u8>,
    obs: Observation,
    conn: Option<MultiplexedConnection>,
    done: bool,
}

impl Observer {
    pub(crate) fn new(client: impl Into<NodeOf>, name: Vec<u8>) -> Observer {
        Observer {
            client: client.into(),
            opened: None,
            name,
            obs: Observation::new(),
            conn: None,
            done: false,
        }
    }

    async fn send(&mut self, line: &[Vec<u8>], bound: Duration) -> redis::RedisResult<Value> {
        let (client, opened) = (&self.client, &mut self.opened);
        let slot = &mut self.conn;
        let run = async {
            let conn = match slot.as_mut() {
                Some(c) => c,
                None => {
                    let client = opened.insert(client.client().await?);
                    slot.insert(crate::renewer::connect(client).await?)
                }
            };
            args::cmd(line).query_async::<Value>(conn).await
        };
        let answer = match tokio::time::timeout(bound, run).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
        };
        if let Err(e) = &answer {
            if self.client.reopen(e, self.opened.as_ref()) {
                self.conn = None;
            }
        }
        answer
    }

    /// The next change: `Some(Ok(Some(leader)))`, `Some(Ok(None))` when nobody leads after a
    /// leader; `None` after an error that waiting cannot mend was given out.
    pub async fn next(&mut self) -> Option<Result<Option<Leader>>> {
        if self.done {
            return None;
        }
        loop {
            let (line, bound) = self.obs.next_request(&self.name, OBSERVE_BLOCK);
            let answer = self.send(&line, bound).await;
            match self.obs.step(answer, &self.name) {
                Step::Give(given) => {
                    self.done = self.obs.ended();
                    return Some(given);
                }
                Step::Again => {}
                Step::Pause(pause) => tokio::time::sleep(pause).await,
            }
        }
    }
}
