//! The decisions of an election: the candidate's data, who leads (`LOCK.OBSERVE`), what an
//! observer sends next and which answers are a change, what a proclamation's re-grant means,
//! and the pauses of a run through a server that does not answer.

use std::time::Duration;

use redis::Value;

use super::args::{Acquire, Mode, Token, Ttl, Wait};
use super::error::Error;

/// The most bytes of `DATA`.
pub const MAX_DATA: usize = 4096;

/// The lease of a term unless the election is given another.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The longest one `LOCK.OBSERVE … BLOCK` waits before it is sent again (a silent connection is
/// found out within this, plus the read's grace).
pub const OBSERVE_BLOCK: Duration = Duration::from_secs(5);

/// The first pause after a failure (of an observation, or a run's campaign), doubled each time
/// up to `RETRY_MOST`.
pub const RETRY_FIRST: Duration = Duration::from_millis(50);
pub const RETRY_MOST: Duration = Duration::from_secs(1);

/// Who leads: the term (the fence of the leader's grant) and its data (`None` when it gave none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    pub term: u64,
    pub data: Option<Vec<u8>>,
}

/// A candidate's data, checked: 1 to 4096 bytes.
pub fn check_data(data: &[u8]) -> Result<(), Error> {
    if (1..=MAX_DATA).contains(&data.len()) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "data must be 1 to {MAX_DATA} bytes, not {}",
            data.len()
        )))
    }
}

fn unexpected(v: &Value) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("LOCK.OBSERVE: {v:?}"),
    )))
}

/// A holder as `LOCK.OBSERVE` shows it: its fence and data.
pub type Observed = (u64, Option<Vec<u8>>);

/// `LOCK.OBSERVE`: `Some((fence, data))` (`(0, None)`: nobody holds the key), `None` when the
/// wait ended without a change (nil).
pub fn observed(v: &Value) -> Result<Option<Observed>, Error> {
    match v {
        Value::Nil => Ok(None),
        Value::Array(items) if items.len() == 2 => {
            let fence = match &items[0] {
                Value::Int(i) => u64::try_from(*i).map_err(|_| unexpected(v))?,
                _ => return Err(unexpected(v)),
            };
            let data = match &items[1] {
                Value::Nil => None,
                Value::BulkString(b) => Some(b.clone()),
                Value::SimpleString(s) => Some(s.clone().into_bytes()),
                _ => return Err(unexpected(v)),
            };
            Ok(Some((fence, data)))
        }
        _ => Err(unexpected(v)),
    }
}

/// `leader()`: who holds the key now, from `LOCK.OBSERVE key`.
pub fn leader_of(v: &Value) -> Result<Option<Leader>, Error> {
    Ok(match observed(v)? {
        Some((term, data)) if term > 0 => Some(Leader { term, data }),
        _ => None,
    })
}

/// What an observation gives out next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new leader (a higher term), or the leader given out last with new data (`proclaim`).
    Leader(Leader),
    /// Nobody leads, after a leader was given out (once per vacancy).
    Vacant,
    /// Nothing to give out: send the next request.
    Unchanged,
}

/// Where one observer stands: the holder it saw last (sent as `AFTER` and `SEEN`), what it
/// gave out last, and its failures in a row.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    seen: Option<Observed>,
    last: u64,
    last_data: Option<Vec<u8>>,
    leading: bool,
    failures: u32,
    ended: bool,
}

/// What an observer does after a request.
#[derive(Debug)]
pub enum Step {
    /// Give this out (`Err`: the observer ends after it).
    Give(Result<Option<Leader>, Error>),
    /// Send the next request at once.
    Again,
    /// Pause, then send the next request.
    Pause(Duration),
}

impl Observation {
    pub fn new() -> Observation {
        Observation::default()
    }

    /// The next request: first the holder now; then a wait in the server (up to `block`) until
    /// the holder differs from the one seen last (its fence or its data).
    pub fn request(&self, name: &[u8], block: Duration) -> (Vec<Vec<u8>>, Option<Duration>) {
        let mut args = vec![b"LOCK.OBSERVE".to_vec(), name.to_vec()];
        let Some((fence, data)) = &self.seen else {
            return (args, None);
        };
        args.push(b"AFTER".to_vec());
        args.push(fence.to_string().into_bytes());
        args.push(b"SEEN".to_vec());
        args.push(data.clone().unwrap_or_default());
        args.push(b"BLOCK".to_vec());
        args.push(block.as_millis().max(1).to_string().into_bytes());
        (args, Some(block))
    }

    /// What a reply means: terms strictly increase (a lower fence, after a failover, is not a
    /// change), the same term with other data is a new value, a free key after a leader is one
    /// vacancy.
    pub fn answer(&mut self, v: &Value) -> Result<Change, Error> {
        self.failures = 0;
        let Some((fence, data)) = observed(v)? else {
            return Ok(Change::Unchanged);
        };
        self.seen = Some((fence, data.clone()));
        if fence == 0 {
            if !self.leading {
                return Ok(Change::Unchanged);
            }
            self.leading = false;
            return Ok(Change::Vacant);
        }
        if fence < self.last || (fence == self.last && (!self.leading || data == self.last_data)) {
            return Ok(Change::Unchanged);
        }
        self.last = fence;
        self.last_data = data.clone();
        self.leading = true;
        Ok(Change::Leader(Leader { term: fence, data }))
    }

    /// The next request (see `request`) and how long its answer may take.
    pub fn next_request(&self, name: &[u8], block: Duration) -> (Vec<Vec<u8>>, Duration) {
        let (line, block) = self.request(name, block);
        let bound = block.map_or(crate::COMMAND_TIMEOUT, |b| b + super::acquire::WAIT_GRACE);
        (line, bound)
    }

    /// The answer of a request of the lock `name`: a change to give out, or the next request
    /// (after a pause when it failed in a way waiting mends: a dropped connection, a server not
    /// ready). An error waiting cannot mend (`WRONGTYPE`, a server without the command) is
    /// given out, and the observation ends.
    pub fn step(&mut self, answer: redis::RedisResult<Value>, name: &[u8]) -> Step {
        let failure = match answer {
            Ok(v) => {
                return match self.answer(&v) {
                    Ok(Change::Leader(l)) => Step::Give(Ok(Some(l))),
                    Ok(Change::Vacant) => Step::Give(Ok(None)),
                    Ok(Change::Unchanged) => Step::Again,
                    Err(e) => self.end(e),
                }
            }
            Err(e) => e,
        };
        if super::error::reply_text(&failure).is_some_and(|t| !not_now(&t)) {
            let name = String::from_utf8_lossy(name);
            return self.end(super::error::translate(failure, &name, "observe"));
        }
        Step::Pause(self.failed())
    }

    fn end(&mut self, e: Error) -> Step {
        self.ended = true;
        Step::Give(Err(e))
    }

    /// It gave out an error waiting cannot mend: nothing more.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// A failure that waiting mends (no connection, a server loading): the pause before the
    /// next try.
    pub fn failed(&mut self) -> Duration {
        let pause = retry_pause(self.failures);
        self.failures = self.failures.saturating_add(1);
        pause
    }
}

/// The pause after `failures` failures in a row: 50 ms doubling up to 1 s.
pub fn retry_pause(failures: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1u32 << failures.min(16))
        .min(RETRY_MOST)
}

/// A server answer that says "not now": waited out, as a dropped connection.
pub fn not_now(text: &str) -> bool {
    [
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "MOVED",
        "ASK",
    ]
    .iter()
    .any(|w| text.starts_with(w))
}

/// What a proclamation's re-grant (`LOCK.ACQUIRE` with the term's token and new `DATA`)
/// answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proclaimed {
    /// The same term: the new data is the leader's.
    Done,
    /// Not granted: the term is gone.
    Lost,
    /// A new term (the old one had ended and the key was free): release it at once, not taken.
    GiveBack,
}

pub fn proclaimed(grant: Option<(Vec<u8>, u64)>, term: u64) -> Proclaimed {
    match grant {
        None => Proclaimed::Lost,
        Some((_, fence)) if fence == term => Proclaimed::Done,
        Some(_) => Proclaimed::GiveBack,
    }
}

/// `LOCK.ACQUIRE name token PX lease EPHEMERAL DATA data`: a proclamation, the re-grant of the
/// term held with `token` with new data.
pub fn proclamation(name: &[u8], token: &[u8], lease: Ttl, data: &[u8]) -> Vec<Vec<u8>> {
    Acquire {
        name,
        token: &Token::Given(token.to_vec()),
        ttl: lease,
        mode: Mode::Exclusive,
        ephemeral: true,
        wait: Wait::No,
        data: Some(data),
    }
    .args()
}

/// What a proclamation's reply means for the term `term`.
pub fn proclamation_reply(v: &Value, term: u64) -> Result<Proclaimed, Error> {
    Ok(proclaimed(super::reply::grant(v)?, term))
}

/// A resignation's release: true if the candidate led until it; false if the term was gone
/// or lost already.
pub fn resigned(released: Result<(), Error>) -> Result<bool, Error> {
    match released {
        Ok(()) => Ok(true),
        Err(Error::NotOwner { .. } | Error::Lost { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A run's campaigns that failed in a row: the pause before the next, or the end of the run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Retries {
    failures: u32,
}

impl Retries {
    /// A campaign was granted: the count starts again.
    pub fn elected(&mut self) {
        self.failures = 0;
    }

    /// A campaign failed with `err`: the pause before the next (`run_retries`), or the error
    /// that ends the run.
    pub fn failed(&mut self, err: Error) -> Result<Duration, Error> {
        if !run_retries(&err) {
            return Err(err);
        }
        let pause = retry_pause(self.failures);
        self.failures = self.failures.saturating_add(1);
        Ok(pause)
    }
}

/// A run's campaign failed with `err`: true if the run goes on (after a pause) — a server that
/// does not answer, is restarting or loading; false for what waiting cannot mend.
pub fn run_retries(err: &Error) -> bool {
    match err {
        Error::Timeout { .. } => true,
        Error::Redis(e) => match super::error::reply_text(e) {
            Some(text) => not_now(&text),
            None => true,
        },
        _ => false,
    }
}

#[cfg(test)]
#[path = "election_tests.rs"]
mod tests;
