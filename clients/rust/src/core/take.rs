//! The steps of an acquire, for both front ends and every kind of lock (one key, bound or not;
//! several keys): which request goes out next, what each answer means, when the lease is renewed
//! at once, when a grant is given back. The front ends carry out each `Step` and report what
//! came back; they decide nothing.

use std::time::{Duration, Instant};

use redis::Value;

use super::acquire::{Attempt, Next};
use super::args::{self, Acquire, Mode, Token, Ttl, Wait};
use super::durable::{Follow, Replicas};
use super::error::{Error, Result};
use super::lease::Renewed;
use super::{multi, reply};

/// What is taken: one key, or several at once.
#[derive(Clone, Debug)]
enum Target {
    One {
        name: Vec<u8>,
        data: Option<Vec<u8>>,
    },
    All(Vec<Vec<u8>>),
}

/// A grant, before the front end schedules its hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub token: Vec<u8>,
    /// One fence per key, in the order of the names.
    pub fences: Vec<u64>,
    /// When the request that set the lease was sent: the lease clock counts from it.
    pub sent: Instant,
}

/// What the front end does next.
#[derive(Debug)]
pub enum Step {
    /// Send the acquire `line`: a wait in the server unless `wait` is `Wait::No` (its reply
    /// bounded by `Attempt::bound`), then `Take::follow_up` of its reply on the same
    /// connection. Report with `answered`.
    Send { line: Vec<Vec<u8>>, wait: Wait },
    /// Pause, then `next`.
    Pause(Duration),
    /// Send each `LOCK.EXTEND` in turn; report each outcome (`outcome`) with `renewed`.
    Renew(Vec<Vec<Vec<u8>>>),
    /// Send this release (its answer does not matter), then `next`.
    Release(Vec<Vec<u8>>),
    /// The acquire is over: granted, not granted (`None`), or failed.
    Done(Result<Option<Grant>>),
}

/// One acquire in progress.
#[derive(Debug)]
pub struct Take {
    target: Target,
    token: Token,
    ttl: Ttl,
    mode: Mode,
    ephemeral: bool,
    replicas: Option<Replicas>,
    label: String,
    attempt: Attempt,
    sent: Instant,
    renew_sent: Instant,
    granted: Option<(Vec<u8>, Vec<u64>)>,
    failure: Option<Error>,
}

/// The outcome of one `LOCK.EXTEND` sent at once after a grant (`None`: no answer).
pub fn outcome(answer: Option<&Value>) -> Renewed {
    match answer.map(|v| reply::one(v, "LOCK.EXTEND")) {
        Some(Ok(true)) => Renewed::Extended,
        Some(Ok(false)) => Renewed::Gone,
        _ => Renewed::Failed,
    }
}

impl Take {
    fn new(target: Target, token: Token, ttl: Ttl, mode: Mode, attempt: Attempt) -> Take {
        let label = match &target {
            Target::One { name, .. } => String::from_utf8_lossy(name).into_owned(),
            Target::All(names) => multi::label(names),
        };
        let now = Instant::now();
        Take {
            target,
            token,
            ttl,
            mode,
            ephemeral: false,
            replicas: None,
            label,
            attempt,
            sent: now,
            renew_sent: now,
            granted: None,
            failure: None,
        }
    }

    /// The lock `name` (`ephemeral`: bound to the connection the grant comes on; `data`: an
    /// election's candidate).
    pub fn one(name: &[u8], token: Token, ttl: Ttl, mode: Mode, attempt: Attempt) -> Take {
        let target = Target::One {
            name: name.to_vec(),
            data: None,
        };
        Take::new(target, token, ttl, mode, attempt)
    }

    /// Bound to the connection of the grant (`EPHEMERAL`), with `DATA` if given (one key).
    pub fn ephemeral(mut self, data: Option<&[u8]>) -> Take {
        self.ephemeral = true;
        if let Target::One { data: d, .. } = &mut self.target {
            *d = data.map(<[u8]>::to_vec);
        }
        self
    }

    /// A grant acknowledged by replicas (`WAIT` after it), or given back and failed.
    pub fn replicas(mut self, replicas: Option<Replicas>) -> Take {
        self.replicas = replicas;
        self
    }

    /// Every key of `names` at once (`LOCK.ACQUIREALL`; the names checked first).
    pub fn all(names: &[Vec<u8>], token: Token, ttl: Ttl, mode: Mode, attempt: Attempt) -> Take {
        Take::new(Target::All(names.to_vec()), token, ttl, mode, attempt)
    }

    /// How the lock is named in errors.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The error of a wait whose answer did not come in time.
    pub fn timed_out(&self) -> Error {
        Error::Timeout {
            name: self.label.clone(),
            what: "acquire",
        }
    }

    /// The first step, and the step after a `Pause` or a `Release`.
    pub fn next(&mut self, now: Instant) -> Step {
        if let Some(e) = self.failure.take() {
            return Step::Done(Err(e));
        }
        if let Target::All(names) = &self.target {
            if let Err(e) = multi::check_names(names) {
                return Step::Done(Err(e));
            }
        }
        let Some(wait) = self.attempt.wait(now) else {
            return Step::Done(Ok(None));
        };
        self.sent = now;
        let line = match &self.target {
            Target::One { name, data } => Acquire {
                name,
                token: &self.token,
                ttl: self.ttl,
                mode: self.mode,
                ephemeral: self.ephemeral,
                wait,
                data: data.as_deref(),
            }
            .args(),
            Target::All(names) => {
                let token = self.token.as_arg();
                if self.ephemeral {
                    multi::acquire_all_bound(names, token, self.ttl, self.mode, wait)
                } else {
                    multi::acquire_all(names, token, self.ttl, self.mode, wait)
                }
            }
        };
        Step::Send { line, wait }
    }

    /// The follow-up of the acquire's reply on its connection (`WAIT` after a grant, when
    /// replicas are asked for).
    pub fn follow_up(&self) -> impl FnOnce(&Value) -> Option<Follow> {
        let lease = Duration::from_millis(self.ttl.millis());
        Replicas::after(self.replicas, true, lease)
    }

    /// The answer of a `Send` at `now`: the reply and the follow-up's (if any), or the error.
    pub fn answered(
        &mut self,
        answer: redis::RedisResult<(Value, Option<Value>)>,
        now: Instant,
    ) -> Step {
        let (v, acks) = match answer {
            Ok(x) => x,
            Err(e) => {
                return match self.attempt.failed(e, &self.label, now) {
                    Next::Again => self.next(now),
                    Next::Pause(d) => Step::Pause(d),
                    Next::NotGranted => Step::Done(Ok(None)),
                    Next::Fail(e) => Step::Done(Err(e)),
                }
            }
        };
        let granted = match &self.target {
            Target::One { .. } => reply::grant(&v).map(|g| g.map(|(t, f)| (t, vec![f]))),
            Target::All(names) => multi::grant_all(&v, names.len()),
        };
        let (token, fences) = match granted {
            Err(e) => return Step::Done(Err(e)),
            Ok(None) if self.attempt.wait_on(now) => return self.next(now), // cut short
            Ok(None) => return Step::Done(Ok(None)),
            Ok(Some(g)) => g,
        };
        if let Some(r) = self.replicas {
            let (count, ok) = r.acks(acks.as_ref());
            if !ok {
                self.failure = Some(r.shortfall(&self.label, count));
                return Step::Release(self.release_line(&token));
            }
        }
        if self
            .attempt
            .renew_at_once(self.sent, now, self.ttl.millis())
        {
            // Granted after a wait: the lease began at the grant; renew now so that the lease
            // clock starts from a known moment.
            self.renew_sent = now;
            let lines = match &self.target {
                Target::One { name, .. } => vec![args::extend(name, &token, self.ttl)],
                Target::All(names) => multi::extend_lines(names, &token, self.ttl),
            };
            self.granted = Some((token, fences));
            return Step::Renew(lines);
        }
        self.done(token, fences, self.sent)
    }

    /// The outcomes of a `Renew`, in order.
    pub fn renewed(&mut self, outcomes: &[Renewed], now: Instant) -> Step {
        let Some((token, fences)) = self.granted.take() else {
            return self.next(now);
        };
        let keys = fences.len();
        match multi::renewal(outcomes, keys) {
            Renewed::Extended => self.done(token, fences, self.renew_sent),
            // Unknown: the clock counts from the request.
            Renewed::Failed => self.done(token, fences, self.sent),
            // Gone already (a lease shorter than the trip): the rest back, wait on.
            Renewed::Gone => match &self.target {
                Target::One { .. } => self.next(now),
                Target::All(names) => Step::Release(multi::release_all(names, &token)),
            },
        }
    }

    fn release_line(&self, token: &[u8]) -> Vec<Vec<u8>> {
        match &self.target {
            Target::One { name, .. } => args::release(name, token),
            Target::All(names) => multi::release_all(names, token),
        }
    }

    fn done(&self, token: Vec<u8>, fences: Vec<u64>, sent: Instant) -> Step {
        Step::Done(Ok(Some(Grant {
            token,
            fences,
            sent,
        })))
    }
}

#[cfg(test)]
#[path = "take_tests.rs"]
mod tests;
