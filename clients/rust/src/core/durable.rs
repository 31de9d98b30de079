//! Durable grants, without I/O: what a lock made with `replicas(n, timeout)` asks of the server
//! after a grant or an extension, and what the answer means.
//!
//! After a grant (direct or waited) and after an extension, the lock sends `WAIT n timeout` on
//! the connection that carried it: WAIT counts the acknowledgements of that connection's latest
//! write, and a connection that wrote nothing is answered at once, so it must follow the write
//! on its own connection. A grant that is not acknowledged in time is released and fails with
//! `Error::NotReplicated`; an extension that is not acknowledged fails with it too and leaves
//! the lease clock where it was (the hold is kept); a renewal that is not acknowledged does not
//! count for the lease clock (`Renewed::Failed`).

use std::time::Duration;

use redis::Value;

use super::error::Error;

/// How long the acknowledgements of one grant or extension may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long after a WAIT's own timeout its answer may still come (one crossing of the network).
pub const ANSWER_GRACE: Duration = Duration::from_millis(450);

/// The acknowledgements a lock asks for: `replicas` replicas within `timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    pub replicas: u64,
    pub timeout: Duration,
}

impl Replicas {
    /// What a lock asks for; `None` when nothing is (no WAIT is ever sent).
    pub fn new(replicas: u64, timeout: Duration) -> Option<Replicas> {
        (replicas > 0).then_some(Replicas { replicas, timeout })
    }

    fn timeout_ms(&self, left: Option<Duration>) -> u64 {
        let mut ms = self.timeout.as_millis().min(u128::from(u64::MAX)) as u64;
        if let Some(left) = left {
            ms = ms.min(left.as_millis().min(u128::from(u64::MAX)) as u64);
        }
        ms.max(1) // never 0: that waits forever
    }

    /// `WAIT n timeout`, waiting no longer than `left` (the lease's time), and the bound of its
    /// answer.
    pub fn wait(&self, left: Option<Duration>) -> (Vec<Vec<u8>>, Duration) {
        let ms = self.timeout_ms(left);
        let line = vec![
            b"WAIT".to_vec(),
            self.replicas.to_string().into_bytes(),
            ms.to_string().into_bytes(),
        ];
        (line, Duration::from_millis(ms) + ANSWER_GRACE)
    }

    /// The follow-up of a reply: `WAIT` after a grant (`grant`) or an extension answered 1,
    /// waiting no longer than `left`; nothing after anything else.
    pub fn after(
        replicas: Option<Replicas>,
        grant: bool,
        left: Duration,
    ) -> impl FnOnce(&Value) -> Option<(Vec<Vec<u8>>, Duration)> {
        move |v: &Value| {
            let written = if grant {
                matches!(super::reply::grant(v), Ok(Some(_)))
            } else {
                matches!(v, Value::Int(1))
            };
            replicas.filter(|_| written).map(|r| r.wait(Some(left)))
        }
    }

    /// The replicas WAIT's answer counts, if it is an answer; whether they are enough.
    pub fn acks(&self, answer: Option<&Value>) -> (Option<u64>, bool) {
        let count = match answer {
            Some(Value::Int(n)) if *n >= 0 => Some(*n as u64),
            _ => None,
        };
        (count, count.is_some_and(|n| n >= self.replicas))
    }

    /// The error of a grant or an extension of `name` not acknowledged: `count` replicas did.
    pub fn shortfall(&self, name: &str, count: Option<u64>) -> Error {
        Error::NotReplicated {
            name: name.to_string(),
            replicas: count,
            needed: self.replicas,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_asked_sends_nothing() {
        assert_eq!(Replicas::new(0, DEFAULT_TIMEOUT), None);
    }

    #[test]
    fn wait_is_bounded_by_the_lease_left_and_never_zero() {
        let r = Replicas::new(2, Duration::from_millis(1500)).unwrap();
        let (line, bound) = r.wait(None);
        assert_eq!(line, [b"WAIT".to_vec(), b"2".to_vec(), b"1500".to_vec()]);
        assert_eq!(bound, Duration::from_millis(1500) + ANSWER_GRACE);
        assert_eq!(r.wait(Some(Duration::from_millis(300))).0[2], b"300");
        assert_eq!(r.wait(Some(Duration::ZERO)).0[2], b"1");
    }

    #[test]
    fn acknowledgements_are_counted() {
        let r = Replicas::new(2, DEFAULT_TIMEOUT).unwrap();
        assert_eq!(r.acks(Some(&Value::Int(2))), (Some(2), true));
        assert_eq!(r.acks(Some(&Value::Int(3))), (Some(3), true));
        assert_eq!(r.acks(Some(&Value::Int(1))), (Some(1), false));
        assert_eq!(r.acks(None), (None, false));
        assert!(matches!(
            r.shortfall("x", Some(1)),
            Error::NotReplicated {
                replicas: Some(1),
                needed: 2,
                ..
            }
        ));
    }
}
