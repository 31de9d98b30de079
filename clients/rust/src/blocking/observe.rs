//! `Observer`: the blocking iterator of an election's changes of leader.

use std::time::Duration;

use redis::{Connection, Value};

use crate::cancel::Cancel;
use crate::core::args;
use crate::core::election::{Leader, Observation, Step, OBSERVE_BLOCK};
use crate::core::error::Result;
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
            let (line, bound) = self.obs.next_request(&self.name, self.block);
            let answer = self.send(&line, bound);
            match self.obs.step(answer, &self.name) {
                Step::Give(given) => {
                    self.done = self.obs.ended();
                    return Some(given);
                }
                Step::Again => {}
                Step::Pause(pause) => match &self.stop {
                    Some(stop) => drop(stop.wait_timeout(pause)),
                    None => std::thread::sleep(pause),
                },
            }
        }
    }
}
