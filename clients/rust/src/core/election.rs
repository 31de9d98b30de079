//! The decisions of an election: the candidate's data, who leads (`LOCK.OBSERVE`), what an
//! observer sends next and which answers are a change, what a proclamation's re-grant means,
//! and the pauses of a run through a server that does not answer.

use std::time::Duration;

use redis::Value;

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
mod tests {
    use super::*;

    fn reply(fence: i64, data: Option<&str>) -> Value {
        Value::Array(vec![
            Value::Int(fence),
            data.map_or(Value::Nil, |d| Value::BulkString(d.as_bytes().to_vec())),
        ])
    }

    fn text(args: &[Vec<u8>]) -> String {
        let words: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        words.join(" ")
    }

    fn leader(term: u64, data: &str) -> Change {
        Change::Leader(Leader {
            term,
            data: Some(data.as_bytes().to_vec()),
        })
    }

    #[test]
    fn an_observation_gives_out_each_change_once() {
        let mut o = Observation::new();
        let (first, block) = o.request(b"e", Duration::from_secs(5));
        assert_eq!((text(&first).as_str(), block), ("LOCK.OBSERVE e", None));
        assert_eq!(o.answer(&reply(0, None)).unwrap(), Change::Unchanged);
        let (next, block) = o.request(b"e", Duration::from_secs(5));
        assert_eq!(text(&next), "LOCK.OBSERVE e AFTER 0 SEEN  BLOCK 5000");
        assert_eq!(block, Some(Duration::from_secs(5)));
        assert_eq!(o.answer(&reply(7, Some("a"))).unwrap(), leader(7, "a"));
        assert_eq!(o.answer(&Value::Nil).unwrap(), Change::Unchanged);
        assert_eq!(o.answer(&reply(7, Some("a"))).unwrap(), Change::Unchanged);
        assert_eq!(o.answer(&reply(7, Some("b"))).unwrap(), leader(7, "b"));
        let (next, _) = o.request(b"e", Duration::from_millis(10));
        assert_eq!(text(&next), "LOCK.OBSERVE e AFTER 7 SEEN b BLOCK 10");
        assert_eq!(o.answer(&reply(0, None)).unwrap(), Change::Vacant);
        assert_eq!(o.answer(&reply(0, None)).unwrap(), Change::Unchanged);
        assert_eq!(o.answer(&reply(5, Some("old"))).unwrap(), Change::Unchanged);
        assert_eq!(
            o.answer(&reply(9, None)).unwrap(),
            Change::Leader(Leader {
                term: 9,
                data: None
            })
        );
        assert!(o.answer(&Value::Int(3)).is_err());
    }

    #[test]
    fn pauses_double_up_to_a_second() {
        let mut o = Observation::new();
        let pauses: Vec<u128> = (0..7).map(|_| o.failed().as_millis()).collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(retry_pause(40), RETRY_MOST);
        o.answer(&Value::Nil).unwrap();
        assert_eq!(o.failed(), RETRY_FIRST);
    }

    #[test]
    fn leaders_data_and_proclamations() {
        assert_eq!(leader_of(&reply(0, None)).unwrap(), None);
        assert_eq!(
            leader_of(&reply(3, Some("x"))).unwrap(),
            Some(Leader {
                term: 3,
                data: Some(b"x".to_vec())
            })
        );
        assert!(check_data(b"").is_err());
        assert!(check_data(&[0; 4096]).is_ok());
        assert!(matches!(check_data(&[0; 4097]), Err(Error::Invalid(_))));
        assert_eq!(proclaimed(Some((b"t".to_vec(), 4)), 4), Proclaimed::Done);
        assert_eq!(
            proclaimed(Some((b"t".to_vec(), 8)), 4),
            Proclaimed::GiveBack
        );
        assert_eq!(proclaimed(None, 4), Proclaimed::Lost);
        let io: redis::RedisError =
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert!(run_retries(&Error::Redis(io)));
        assert!(run_retries(&Error::Timeout {
            name: "e".into(),
            what: "acquire"
        }));
        assert!(!run_retries(&Error::NotOwner { name: "e".into() }));
        assert!(not_now("LOADING Redis is loading"));
        assert!(!not_now("WRONGTYPE x"));
    }
}
