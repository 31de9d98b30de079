//! `Observer`: the blocking iterator of an election's changes of leader.

use std::time::Duration;

use redis::{Connection, Value};

use crate::cancel::Cancel;
use crate::core::acquire::WAIT_GRACE;
use crate::core::args;
use crate::core::election::{self, Change, Leader, Observation, OBSERVE_BLOCK};
use crate::core::error::{reply_text, translate, Result};
use crate::follow::FOLLOW_BLOCK;
use crate::node_of::NodeOf;
use crate::COMMAND_TIMEOUT;

/// Each change of leader: `Ok(Some(leader))` for a new leader (terms strictly increasing) or
/// a new value of the leader given out last (`proclaim`), `Ok(None)` once when nobody leads
/// after a leader. It waits in the server (`LOCK.OBSERVE … AFTER … SEEN … BLOCK`) on a
/// connection of its own; a connection that fails or a server that is not ready is waited out
/// (50 ms doubling up to 1 s) and the wait sent again, so a change made meanwhile is seen at
/// once. It ends after an error waiting cannot mend (`WRONGTYPE`, a server without the
/// command), given out first.
pub struct Observer {
    client: NodeOf,
    /// The client the connection was opened from.
    opened: Option<redis::Client>,
    name: Vec<u8>,
    obs: Observation,
    conn: Option<Connection>,
    block: Duration,
    done: bool,
    /// A run's follower ends when this is fired (within one `block`).
    stop: Option<Cancel>,
}

impl Observer {
    pub(crate) fn new(client: impl Into<NodeOf>, name: Vec<u8>) -> Observer {
        Observer {
            client: client.into(),
            opened: None,
            name,
            obs: Observation::new(),
            conn: None,
            block: OBSERVE_BLOCK,
            done: false,
            stop: None,
        }
    }

    /// The observer of a run's follower: it ends (`None`) once `stop` is fired.
    pub(crate) fn following(client: impl Into<NodeOf>, name: Vec<u8>, stop: Cancel) -> Observer {
        Observer {
            block: FOLLOW_BLOCK,
            stop: Some(stop),
            ..Observer::new(client, name)
        }
    }

    fn stopped(&mut self) -> bool {
        if self.stop.as_ref().is_some_and(Cancel::is_set) {
            self.done = true;
        }
        self.done
    }

    fn send(&mut self, line: &[Vec<u8>], bound: Duration) -> redis::RedisResult<Value> {
        let conn = match self.conn.as_mut() {
            Some(c) => c,
            None => {
                let client = self.opened.insert(self.client.client_blocking()?);
                self.conn
                    .insert(client.get_connection_with_timeout(COMMAND_TIMEOUT)?)
            }
        };
        conn.set_read_timeout(Some(bound))?;
        let answer = args::cmd(line).query::<Value>(conn);
        if let Err(e) = &answer {
            if self.client.reopen(e, self.opened.as_ref()) {
                self.conn = None;
            }
        }
        answer
    }
}

impl Iterator for Observer {
    type Item = Result<Option<Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            if self.stopped() {
                return None;
            }
            let (line, block) = self.obs.request(&self.name, self.block);
            let bound = block.map_or(COMMAND_TIMEOUT, |b| b + WAIT_GRACE);
            let failure = match self.send(&line, bound) {
                Ok(v) => match self.obs.answer(&v) {
                    Ok(Change::Leader(l)) => return Some(Ok(Some(l))),
                    Ok(Change::Vacant) => return Some(Ok(None)),
                    Ok(Change::Unchanged) => continue,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                },
                Err(e) => e,
            };
            if reply_text(&failure).is_some_and(|t| !election::not_now(&t)) {
                self.done = true;
                let name = String::from_utf8_lossy(&self.name).into_owned();
                return Some(Err(translate(failure, &name, "observe")));
            }
            let pause = self.obs.failed();
            match &self.stop {
                Some(stop) => drop(stop.wait_timeout(pause)),
                None => std::thread::sleep(pause),
            }
        }
    }
}
