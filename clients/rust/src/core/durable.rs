//! Durable grants, without I/O: what a lock made with `replicas(n, timeout)`, `aof_local` or
//! `aof_replicas` asks of the server after a grant or an extension, and what the answer means.
//!
//! After a grant (direct or waited) and after an extension, the lock sends `WAIT n timeout` (and
//! `WAITAOF numlocal numreplicas timeout`) on the connection that carried it: both count the
//! acknowledgements of that connection's latest write, and a connection that wrote nothing is
//! answered at once, so they must follow the write on its own connection. A grant that is not
//! acknowledged in time is released and fails with `Error::NotReplicated`; an extension that is
//! not acknowledged fails with it too and leaves the lease clock where it was (the hold is
//! kept); a renewal that is not acknowledged does not count for the lease clock
//! (`Renewed::Failed`). Before the first grant that asks for `WAITAOF`, the server is asked
//! whether it can answer it (`probe`): where it has no `WAITAOF` (Redis 7.0) or `aof_local` meets
//! `appendonly no`, the acquire fails with `Error::Unsupported` and nothing is taken.

use std::time::Duration;

use redis::Value;

use super::error::{is_unsupported, reply_text, Error};

/// How long the acknowledgements of one grant or extension may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long after a WAIT's own timeout its answer may still come (one crossing of the network).
pub const ANSWER_GRACE: Duration = Duration::from_millis(450);

/// The follow-up commands of a write, sent in one pipeline on its connection, and the bound of
/// their answers.
pub type Follow = (Vec<Vec<Vec<u8>>>, Duration);

/// The acknowledgements a lock asks for: `replicas` replicas (`WAIT`), the master's own AOF
/// fsync (`aof_local`) and `aof_replicas` replicas' AOF fsyncs (`WAITAOF`), within `timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    pub replicas: u64,
    pub timeout: Duration,
    pub aof_local: bool,
    pub aof_replicas: u64,
}

impl Default for Replicas {
    fn default() -> Replicas {
        Replicas {
            replicas: 0,
            timeout: DEFAULT_TIMEOUT,
            aof_local: false,
            aof_replicas: 0,
        }
    }
}

impl Replicas {
    /// What a lock asks for with `WAIT` alone; `None` when nothing is (no WAIT is ever sent).
    pub fn new(replicas: u64, timeout: Duration) -> Option<Replicas> {
        Replicas {
            replicas,
            timeout,
            ..Replicas::default()
        }
        .asked()
    }

    /// Itself if it asks for anything; `None` when nothing is asked.
    pub fn asked(self) -> Option<Replicas> {
        (self.replicas > 0 || self.aof()).then_some(self)
    }

    /// `WAITAOF` is asked for.
    pub fn aof(&self) -> bool {
        self.aof_local || self.aof_replicas > 0
    }

    fn timeout_ms(&self, left: Option<Duration>) -> u64 {
        let mut ms = self.timeout.as_millis().min(u128::from(u64::MAX)) as u64;
        if let Some(left) = left {
            ms = ms.min(left.as_millis().min(u128::from(u64::MAX)) as u64);
        }
        ms.max(1) // never 0: that waits forever
    }

    /// `WAIT n timeout` and/or `WAITAOF numlocal numreplicas timeout`, waiting no longer than
    /// `left` (the lease's time), and the bound of their answers.
    pub fn wait(&self, left: Option<Duration>) -> Follow {
        let ms = self.timeout_ms(left).to_string().into_bytes();
        let mut lines = Vec::new();
        if self.replicas > 0 {
            let n = self.replicas.to_string().into_bytes();
            lines.push(vec![b"WAIT".to_vec(), n, ms.clone()]);
        }
        if self.aof() {
            lines.push(vec![
                b"WAITAOF".to_vec(),
                if self.aof_local { b"1" } else { b"0" }.to_vec(),
                self.aof_replicas.to_string().into_bytes(),
                ms,
            ]);
        }
        let bound = Duration::from_millis(self.timeout_ms(left)) + ANSWER_GRACE;
        (lines, bound)
    }

    /// The follow-up of a reply: the acknowledgements after a grant (`grant`) or an extension
    /// answered 1, waiting no longer than `left`; nothing after anything else.
    pub fn after(
        replicas: Option<Replicas>,
        grant: bool,
        left: Duration,
    ) -> impl FnOnce(&Value) -> Option<Follow> {
        move |v: &Value| {
            let written = if grant {
                matches!(super::reply::grant(v), Ok(Some(_)))
            } else {
                matches!(v, Value::Int(1))
            };
            replicas.filter(|_| written).map(|r| r.wait(Some(left)))
        }
    }

    /// How many replicas the follow-ups' answer counts (the fewest of `WAIT`'s and
    /// `WAITAOF`'s), if it is an answer; whether every count asked for was reached.
    pub fn acks(&self, answer: Option<&Value>) -> (Option<u64>, bool) {
        let count = |v: &Value| match v {
            Value::Int(n) if *n >= 0 => Some(*n as u64),
            _ => None,
        };
        let (wait, aof) = match (self.replicas > 0, self.aof(), answer) {
            (_, _, None) => return (None, false),
            (true, false, Some(v)) => (Some(v), None),
            (false, true, Some(v)) => (None, Some(v)),
            (true, true, Some(Value::Array(both))) if both.len() == 2 => {
                (Some(&both[0]), Some(&both[1]))
            }
            _ => return (None, false),
        };
        let mut fewest: Option<u64> = None;
        let mut ok = true;
        if let Some(v) = wait {
            let n = count(v);
            ok &= n.is_some_and(|n| n >= self.replicas);
            fewest = n;
        }
        if let Some(v) = aof {
            let (local, n) = match v {
                Value::Array(pair) if pair.len() == 2 => (count(&pair[0]), count(&pair[1])),
                _ => (None, None),
            };
            ok &= local.is_some_and(|l| l >= u64::from(self.aof_local))
                && n.is_some_and(|n| n >= self.aof_replicas);
            fewest = match (fewest, n) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        (fewest, ok)
    }

    /// The error of a grant or an extension of `name` not acknowledged: `count` replicas did.
    pub fn shortfall(&self, name: &str, count: Option<u64>) -> Error {
        Error::NotReplicated {
            name: name.to_string(),
            replicas: count,
            needed: self.replicas.max(self.aof_replicas),
        }
    }

    /// The command that checks, before the first grant, that the server can answer `WAITAOF`:
    /// `WAITAOF numlocal 0 1`, answered at once where it can; `None` when `WAITAOF` is not asked.
    pub fn probe(&self) -> Option<Vec<Vec<u8>>> {
        self.aof().then(|| {
            let local = if self.aof_local { b"1" } else { b"0" };
            vec![
                b"WAITAOF".to_vec(),
                local.to_vec(),
                b"0".to_vec(),
                b"1".to_vec(),
            ]
        })
    }

    /// The probe of `name` failed with `err`: `Error::Unsupported` where the server has no
    /// `WAITAOF` or `aof_local` meets `appendonly no`; else the error as it came.
    pub fn probe_failed(&self, err: redis::RedisError, name: &str) -> Error {
        let Some(text) = reply_text(&err) else {
            return super::error::translate(err, name, "acquire");
        };
        if is_unsupported(&text) {
            return Error::Unsupported(format!(
                "{name}: aof_local/aof_replicas need WAITAOF, which this server does not have \
                 (Redis 7.2 or newer, Valkey 8 or newer): {text}"
            ));
        }
        if text.to_ascii_lowercase().contains("appendonly") {
            return Error::Unsupported(format!(
                "{name}: aof_local needs appendonly yes on the master: {text}"
            ));
        }
        super::error::translate(err, name, "acquire")
    }
}

/// The answers of a pipeline of follow-ups as one value: the answer itself for one command, an
/// array of the answers for several.
pub fn joined(mut answers: Vec<Value>) -> Value {
    if answers.len() == 1 {
        answers.pop().unwrap_or(Value::Nil)
    } else {
        Value::Array(answers)
    }
}

#[cfg(test)]
#[path = "durable_tests.rs"]
mod tests;
