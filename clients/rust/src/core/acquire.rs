//! The decisions of an acquire, for both front ends: what each send says and how long its
//! reply may take, what an error or an empty reply means, when the lease is renewed at once.

use std::time::{Duration, Instant};

use super::args::Wait;
use super::error::{is_wrong_type, reply_text, translate, Error};
use super::redirect::{self, Redirect};

/// How long after its own timeout the answer to a wait may still come (one crossing of the
/// network): past it, `Error::Timeout`.
pub const WAIT_GRACE: Duration = Duration::from_millis(450);

/// A wait answered empty this much before its end was cut short: it goes on.
pub const CUT_SHORT: Duration = Duration::from_millis(20);

/// The pause between tries while the key holds a plain string.
pub const POLL_PAUSE: Duration = Duration::from_millis(100);

/// One acquire in progress: a try (`deadline` None), a wait in the server until `deadline`, or
/// a wait without limit (`forever`: `BLOCK 0`).
#[derive(Clone, Debug)]
pub struct Attempt {
    pub deadline: Option<Instant>,
    /// A wait without limit (`BLOCK 0`); `deadline` is then None.
    pub forever: bool,
    /// The wait was sent again once after its connection dropped.
    pub requeued: bool,
    /// Cluster redirects followed so far.
    pub hops: u32,
}

/// What to do after a failed send.
#[derive(Debug)]
pub enum Next {
    /// Send again (with the time left).
    Again,
    /// Pause, then send again.
    Pause(Duration),
    /// Not granted.
    NotGranted,
    /// The acquire fails.
    Fail(Error),
}

impl Attempt {
    pub fn new(deadline: Option<Instant>) -> Attempt {
        Attempt {
            deadline,
            forever: false,
            requeued: false,
            hops: 0,
        }
    }

    /// A wait without limit: every send is `BLOCK 0`.
    pub fn forever() -> Attempt {
        Attempt {
            deadline: None,
            forever: true,
            requeued: false,
            hops: 0,
        }
    }

    /// A wait (bounded or not), not a try.
    fn waits(&self) -> bool {
        self.forever || self.deadline.is_some()
    }

    /// The `BLOCK` of the next send at `now`; `None` when the wait is over.
    pub fn wait(&self, now: Instant) -> Option<Wait> {
        if self.forever {
            return Some(Wait::Forever);
        }
        match self.deadline {
            None => Some(Wait::No),
            Some(d) => Wait::left(d.saturating_duration_since(now)),
        }
    }

    /// How long the reply of a send with `wait` may take: a wait reads as long as it waits.
    pub fn bound(wait: Wait, command_timeout: Duration) -> Duration {
        match wait {
            Wait::Millis(ms) => Duration::from_millis(ms) + WAIT_GRACE,
            Wait::Forever => Duration::MAX,
            Wait::No => command_timeout,
        }
    }

    /// An empty reply at `now`: true to wait on (a wait cut short by a read bound).
    pub fn wait_on(&self, now: Instant) -> bool {
        self.forever
            || self
                .deadline
                .is_some_and(|d| d.saturating_duration_since(now) > CUT_SHORT)
    }

    /// What an error of a send means. A plain string under the name is not granted (a wait
    /// polls until it is gone); a wait whose connection dropped is sent once more (at the back
    /// of the queue).
    /// On a Cluster, a wait redirected (`MOVED`, `ASK`) or refused for now (`TRYAGAIN`,
    /// `CLUSTERDOWN`, its node lost) is sent again with the time it has left.
    pub fn failed(&mut self, err: redis::RedisError, name: &str, now: Instant) -> Next {
        let text = reply_text(&err);
        if let Some(r) = text.as_deref().and_then(redirect::parse) {
            if self.waits() {
                let left = self.deadline.map(|d| d.saturating_duration_since(now));
                match redirect::after(&r, self.hops, left) {
                    Some(pause) if matches!(r, Redirect::Moved { .. } | Redirect::Ask { .. }) => {
                        self.hops += 1;
                        return if pause.is_zero() {
                            Next::Again
                        } else {
                            Next::Pause(pause)
                        };
                    }
                    Some(pause) => return Next::Pause(pause),
                    None if self.hops < redirect::MAX_HOPS => return Next::NotGranted,
                    None => {}
                }
            }
        }
        if text.as_deref().is_some_and(is_wrong_type) {
            if self.forever {
                return Next::Pause(POLL_PAUSE);
            }
            return match self.deadline {
                Some(d) if d > now + POLL_PAUSE => Next::Pause(POLL_PAUSE),
                _ => Next::NotGranted,
            };
        }
        if text.is_none() && self.waits() && !self.requeued && !err.is_timeout() {
            self.requeued = true;
            return Next::Again;
        }
        Next::Fail(translate(err, name, "acquire"))
    }

    /// The moment the lease clock starts for a grant of a request sent at `sent`, answered at
    /// `received`: a grant after a long wait is renewed at once (`true`), and its clock then
    /// starts at that renewal's sending, if answered 1.
    pub fn renew_at_once(&self, sent: Instant, received: Instant, ttl_ms: u64) -> bool {
        self.waits() && super::lease::renew_at_once(sent, received, ttl_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(text: &str) -> redis::RedisError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(e)) => e.into(),
            other => panic!("{other:?}"),
        }
    }

    fn dropped() -> redis::RedisError {
        std::io::Error::from(std::io::ErrorKind::ConnectionReset).into()
    }

    #[test]
    fn waits_and_tries() {
        let now = Instant::now();
        let try_ = Attempt::new(None);
        assert_eq!(try_.wait(now), Some(Wait::No));
        assert!(!try_.wait_on(now));
        let wait = Attempt::new(Some(now + Duration::from_millis(500)));
        assert_eq!(wait.wait(now), Some(Wait::Millis(500)));
        assert_eq!(wait.wait(now + Duration::from_millis(500)), None);
        assert!(wait.wait_on(now + Duration::from_millis(400)));
        assert!(!wait.wait_on(now + Duration::from_millis(490)));
        assert_eq!(
            Attempt::bound(Wait::Millis(100), Duration::from_secs(5)),
            Duration::from_millis(550)
        );
        assert!(wait.renew_at_once(now, now + Duration::from_millis(200), 1000));
        assert!(!try_.renew_at_once(now, now + Duration::from_millis(200), 1000));
        let forever = Attempt::forever();
        assert_eq!(forever.wait(now), Some(Wait::Forever));
        assert_eq!(
            forever.wait(now + Duration::from_secs(400 * 24 * 3600)),
            Some(Wait::Forever)
        );
        assert_eq!(
            Attempt::bound(Wait::Forever, Duration::from_secs(5)),
            Duration::MAX
        );
        assert!(forever.wait_on(now));
        assert!(forever.renew_at_once(now, now + Duration::from_millis(200), 1000));
        let mut forever = Attempt::forever();
        assert!(matches!(forever.failed(dropped(), "k", now), Next::Again));
        assert!(matches!(forever.failed(dropped(), "k", now), Next::Fail(_)));
    }

    #[test]
    fn errors() {
        let now = Instant::now();
        let mut wait = Attempt::new(Some(now + Duration::from_secs(1)));
        assert!(matches!(wait.failed(dropped(), "k", now), Next::Again));
        assert!(matches!(
            wait.failed(dropped(), "k", now),
            Next::Fail(Error::Redis(_))
        ));
        let wrong = || server_error("WRONGTYPE Operation against a key");
        assert!(matches!(wait.failed(wrong(), "k", now), Next::Pause(_)));
        let mut try_ = Attempt::new(None);
        assert!(matches!(try_.failed(wrong(), "k", now), Next::NotGranted));
        assert!(matches!(try_.failed(dropped(), "k", now), Next::Fail(_)));
        assert!(matches!(
            try_.failed(
                server_error("ERR the key is a semaphore with LIMIT 2: x"),
                "k",
                now
            ),
            Next::Fail(Error::Kind { limit: Some(2), .. })
        ));
    }

    /// A wait redirected by a slot move is sent again with the time it has left, never its
    /// first timeout; one that runs out of time during a move ends not granted.
    #[test]
    fn redirected_waits_keep_their_deadline() {
        let start = Instant::now();
        let mut wait = Attempt::new(Some(start + Duration::from_millis(1000)));
        assert_eq!(wait.wait(start), Some(Wait::Millis(1000)));
        let at = start + Duration::from_millis(300);
        let moved = server_error("MOVED 12182 127.0.0.1:7001");
        assert!(matches!(wait.failed(moved, "k", at), Next::Again));
        assert_eq!(wait.wait(at), Some(Wait::Millis(700)));
        let ask = server_error("ASK 12182 127.0.0.1:7002");
        assert!(matches!(wait.failed(ask, "k", at), Next::Again));
        let busy = server_error("TRYAGAIN the lock's slot is moving");
        assert!(matches!(
            wait.failed(busy, "k", at),
            Next::Pause(redirect::TRYAGAIN_PAUSE)
        ));
        let lost = server_error(redirect::NODE_LOST);
        assert!(matches!(
            wait.failed(lost, "k", at),
            Next::Pause(redirect::DOWN_PAUSE)
        ));
        // Less time left than the pause: the pause ends at the deadline, and so does the wait.
        let late = start + Duration::from_millis(980);
        let busy = server_error("TRYAGAIN x");
        assert!(matches!(
            wait.failed(busy, "k", late),
            Next::Pause(d) if d == Duration::from_millis(20)
        ));
        assert_eq!(wait.wait(start + Duration::from_millis(1000)), None);
        let busy = server_error("TRYAGAIN x");
        let over = start + Duration::from_millis(1000);
        assert!(matches!(wait.failed(busy, "k", over), Next::NotGranted));
        // The requeue after a dropped connection is still there.
        assert!(!wait.requeued);
        // A try does not follow a redirect by itself (its transport does).
        let mut try_ = Attempt::new(None);
        let moved = server_error("MOVED 1 h:1");
        assert!(matches!(try_.failed(moved, "k", at), Next::Fail(_)));
        // Nor does a wait forever.
        let mut forever = Attempt::forever();
        for _ in 0..redirect::MAX_HOPS {
            let moved = server_error("MOVED 1 h:1");
            assert!(matches!(forever.failed(moved, "k", at), Next::Again));
        }
        let moved = server_error("MOVED 1 h:1");
        assert!(matches!(forever.failed(moved, "k", at), Next::Fail(_)));
    }
}
