//! `MultiLock` and `MultiHold` of the blocking front end: several keys taken in one atomic step
//! (`LOCK.ACQUIREALL`), one token, a fence per key, one lease clock for the set.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::core::acquire::Attempt;
use crate::core::args::{self, Mode, Token, Ttl};
use crate::core::error::{translate, Error, Result};
use crate::core::multi;
use crate::core::reply::{self, LockInfo};
use crate::core::take::Take;
use crate::core::verdict;
use crate::hold::{OnLost, Plan, Shared};
use crate::owned;
use crate::renewer::{blocking_keeper, run_blocking, Keeper};
use crate::DEFAULT_LEASE;

use super::{Locker, LockerInner};

/// Several keys locked together: made by `Locker::multi_lock`, set up with the builder
/// methods, taken with `acquire` or `try_acquire`. The names must be 1 to 64 distinct keys in
/// one hash slot (one hash tag, `{acct}:a` and `{acct}:b`): checked before anything is sent.
///
/// ```no_run
/// use std::time::Duration;
/// use redislock_client::Locker;
///
/// let locker = Locker::open("redis://127.0.0.1:6379/")?;
/// let both = locker.multi_lock(["{acct}:alice", "{acct}:bob"]).ephemeral(true);
/// let hold = both.acquire(Duration::from_secs(5))?;
/// println!("fences {:?}", hold.fences());
/// hold.release()?;
/// # Ok::<(), redislock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct MultiLock {
    locker: Locker,
    names: Vec<Vec<u8>>,
    ttl: Ttl,
    mode: Mode,
    auto_renew: bool,
    on_lost: Option<OnLost>,
    token: Option<Token>,
    ephemeral: bool,
}

impl Locker {
    /// The lock of every key of `names` at once: exclusive, a lease of 30 s renewed every third
    /// of it, until changed with its builder methods.
    pub fn multi_lock<N: Into<Vec<u8>>>(&self, names: impl IntoIterator<Item = N>) -> MultiLock {
        MultiLock {
            locker: self.clone(),
            names: names.into_iter().map(Into::into).collect(),
            ttl: Ttl::from_duration(DEFAULT_LEASE),
            mode: Mode::Exclusive,
            auto_renew: true,
            on_lost: None,
            token: None,
            ephemeral: false,
        }
    }
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &multi::label(&self.names))
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl MultiLock {
    /// Shared holds of every key (`SHARED`) instead of exclusive ones.
    pub fn shared(mut self, on: bool) -> MultiLock {
        self.mode = if on { Mode::Shared } else { Mode::Exclusive };
        self
    }

    /// The names, as given.
    pub fn names(&self) -> &[Vec<u8>] {
        &self.names
    }

    /// `LOCK.INFO` of each key, in the order of the names.
    pub fn info(&self) -> Result<Vec<Option<LockInfo>>> {
        self.names.iter().map(|n| self.locker.info(n)).collect()
    }

    /// Takes every key if all are free now: `None` if not.
    pub fn try_acquire(&self) -> Result<Option<MultiHold>> {
        self.take(None)
    }

    /// Takes every key at once, waiting in the server up to `wait` (queued on every key, first
    /// come, first served); `Error::Busy` if not granted by then.
    pub fn acquire(&self, wait: Duration) -> Result<MultiHold> {
        self.take(Some(Instant::now() + wait))?
            .ok_or_else(|| Error::Busy {
                name: multi::label(&self.names),
            })
    }

    fn take(&self, deadline: Option<Instant>) -> Result<Option<MultiHold>> {
        let inner = &self.locker.inner;
        let token = self.token.clone().unwrap_or_else(Token::random);
        let take = Take::all(
            &self.names,
            token,
            self.ttl,
            self.mode,
            Attempt::new(deadline),
        );
        let keeper = blocking_keeper();
        let plan = Plan::all(&self.names, self.ttl).renewed(self.auto_renew, self.on_lost.clone());
        let (state, fences) = if self.ephemeral {
            let target = inner.conns.target();
            let take = take.ephemeral(None);
            let Some(g) = run_blocking(async move { owned::acquire_as(target, take).await })?
            else {
                return Ok(None);
            };
            let fences = g.fences.clone();
            (g.schedule(&plan, &keeper), fences)
        } else {
            let Some(g) = inner.conns.acquire(take, inner.timeout)? else {
                return Ok(None);
            };
            let channel = inner.channel.clone();
            let state = plan.schedule(g.token, g.fences[0], g.sent, channel, &keeper);
            (state, g.fences)
        };
        Ok(Some(MultiHold {
            state,
            fences,
            ttl: self.ttl,
            locker: inner.clone(),
            keeper,
            done: false,
        }))
    }
}

/// A grant of every key of a `MultiLock`: one token, a fence per key, one lease clock. Renewed
/// in the background (each key's `LOCK.EXTEND` in turn; the clock moves once every key
/// answered); released by `release()` or when dropped.
pub struct MultiHold {
    state: Shared,
    fences: Vec<u64>,
    ttl: Ttl,
    locker: Arc<LockerInner>,
    keeper: Arc<Keeper>,
    done: bool,
}

impl std::fmt::Debug for MultiHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiHold")
            .field("names", &self.state.name_lossy())
            .field("fences", &self.fences)
            .finish()
    }
}

impl MultiHold {
    fn label(&self) -> String {
        self.state.name_lossy()
    }

    fn send(&self, line: &[Vec<u8>], bound: Duration, what: &'static str) -> Result<redis::Value> {
        self.locker
            .conns
            .send(line, bound)
            .map_err(|e| translate(e, &self.label(), what))
    }

    /// A request of the set: on its own connection if it is bound, else on the locker's.
    fn send_held(&self, line: &[Vec<u8>], bound: Duration, what: &'static str) -> Result<Value> {
        if !self.state.channel.is_owned() {
            return self.send(line, bound, what);
        }
        let (channel, line, label) = (self.state.channel.clone(), line.to_vec(), self.label());
        match run_blocking(async move { channel.send(&line, bound, &label, what).await }) {
            Err(Error::Redis(e)) => Err(translate(e, &self.label(), what)),
            other => other,
        }
    }

    /// Sets every key's lease to `ttl` from now; the lease clock moves once every key answered 1.
    /// `Error::NotOwner` if a key is gone (the set is then signalled lost).
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.extend_to(Ttl::from_duration(ttl), "extend")
    }

    /// Every key's lease back to the lock's `ttl`.
    pub fn reacquire(&mut self) -> Result<()> {
        self.extend_to(self.ttl, "reacquire")
    }

    fn extend_to(&mut self, ttl: Ttl, what: &'static str) -> Result<()> {
        self.state.live(self.done)?;
        let sent = Instant::now();
        let bound = self.lease_left().max(Duration::from_secs(1));
        let mut verdict = Ok(());
        for line in multi::extend_lines(self.names(), self.token(), ttl) {
            let answer = self.send_held(&line, bound, what);
            verdict = verdict::extension(answer, None, None, &self.label());
            if verdict.is_err() {
                break;
            }
        }
        self.state
            .extended(&self.keeper, sent, ttl.millis(), verdict)
    }

    /// Asks the server whether every key still has this grant (the token among its holders,
    /// with the key's fence); false without asking once the lease clock ran out.
    pub fn owned(&self) -> Result<bool> {
        if !self.is_held() {
            return Ok(false);
        }
        for (name, fence) in self.names().iter().zip(&self.fences) {
            let v = self.send(&args::info(name), self.locker.timeout, "owned")?;
            if !verdict::owns(reply::info(&v)?, self.token(), *fence) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `LOCK.INFO` of each key, in the order of the names.
    pub fn info(&self) -> Result<Vec<Option<LockInfo>>> {
        self.names()
            .iter()
            .map(|n| reply::info(&self.send(&args::info(n), self.locker.timeout, "info")?))
            .collect()
    }

    /// Gives every key back (`LOCK.RELEASEALL`). `Error::NotOwner` if some key was no longer
    /// held (the others are released all the same), `Error::Lost` if the set was lost.
    pub fn release(mut self) -> Result<()> {
        self.release_now()
    }

    fn release_now(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let bound = self.lease_left().max(Duration::from_secs(1));
        self.done = true;
        let lost = self.state.ending(&self.keeper);
        let line = multi::release_all(self.names(), self.token());
        let count = verdict::release_sent(lost, self.state.channel.is_owned()).then(|| {
            self.send_held(&line, bound, "release")
                .and_then(|v| multi::released(&v))
        });
        self.state.close_owned();
        let keys = self.fences.len() as u64;
        verdict::released(lost, count, keys, &self.label())
    }
}

impl Drop for MultiHold {
    fn drop(&mut self) {
        let _ = self.release_now();
    }
}

crate::surface::lock_builders!(MultiLock);
crate::surface::hold_accessors!(many MultiHold);
