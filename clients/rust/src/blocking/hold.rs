//! `Hold`: a grant of the blocking front end, released when dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::args::{self, Ttl};
use crate::core::durable::Follow;
use crate::core::durable::Replicas;
use crate::core::error::{translate, translate_guarded, Error, Result};
use crate::core::reply;
use crate::core::verdict;
use crate::hold::Shared;
use crate::renewer::Keeper;

use super::LockerInner;

/// The reply of a follow-up (`WAIT`).
type Followed = Result<redis::Value>;

/// The bound of a release or an extension: the lease time left, at least this.
const MIN_BOUND: Duration = Duration::from_secs(1);

/// A grant: its token, fence and lease clock. Renewed in the background (unless the lock was made
/// with `auto_renew(false)`); released by `release()`, or when dropped.
pub struct Hold {
    pub(crate) state: Shared,
    pub(crate) locker: Arc<LockerInner>,
    pub(crate) keeper: Arc<Keeper>,
    pub(crate) done: bool,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("name", &self.state.name_lossy())
            .field("fence", &self.state.fence)
            .finish()
    }
}

impl Hold {
    fn name_lossy(&self) -> String {
        self.state.name_lossy()
    }

    fn bound(&self) -> Duration {
        self.lease_left().max(MIN_BOUND)
    }

    /// Sets the lease to `ttl` from now (and the renewals to that lease). `Error::NotOwner` if
    /// the hold is gone (it is then signalled lost), `Error::Lost` if it was lost already,
    /// `Error::Timeout` without an answer within the lease left (at least 1 s).
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.state.live(self.done)?;
        let ttl = Ttl::from_duration(ttl);
        let sent = Instant::now();
        let line = args::extend(&self.state.name, &self.state.token, ttl);
        let replicas = self.state.replicas.get().copied();
        let then = Replicas::after(replicas, false, Duration::from_millis(ttl.millis()));
        let (answer, acks) = match self.send_then(line, self.bound(), "extend", then) {
            Ok((v, acks)) => (Ok(v), acks.and_then(|a| a.ok())),
            Err(e) => (Err(e), None),
        };
        let verdict = verdict::extension(answer, acks.as_ref(), replicas, &self.name_lossy());
        self.state
            .extended(&self.keeper, sent, ttl.millis(), verdict)
    }

    /// Sends a request of the hold: on its own connection if it is bound (`EPHEMERAL`), else
    /// on the locker's.
    pub(crate) fn send(
        &self,
        line: Vec<Vec<u8>>,
        bound: Duration,
        what: &'static str,
    ) -> Result<redis::Value> {
        let (v, _) = self.send_then(line, bound, what, |_| None)?;
        Ok(v)
    }

    /// `send`, then the follow-up `then` makes of its reply on the same connection, if any.
    fn send_then(
        &self,
        line: Vec<Vec<u8>>,
        bound: Duration,
        what: &'static str,
        then: impl FnOnce(&redis::Value) -> Option<Follow> + Send + 'static,
    ) -> Result<(redis::Value, Option<Followed>)> {
        let name = self.name_lossy();
        if !self.state.channel.is_owned() {
            let (v, follow) = self
                .locker
                .conns
                .send_then(&line, bound, then)
                .map_err(|e| translate(e, &name, what))?;
            return Ok((v, follow.map(|f| f.map_err(Error::Redis))));
        }
        let channel = self.state.channel.clone();
        let label = name.clone();
        match crate::renewer::run_blocking(async move {
            channel.send_then(&line, bound, &label, what, then).await
        }) {
            Err(Error::Redis(e)) => Err(translate(e, &name, what)),
            other => other,
        }
    }

    /// Asks the server whether this grant is still the lock's (its token among the holders
    /// with this fence); false without asking once the lease clock ran out.
    pub fn owned(&self) -> Result<bool> {
        if !self.is_held() {
            return Ok(false);
        }
        let name = self.name_lossy();
        let v = self
            .locker
            .conns
            .send(&args::info(&self.state.name), self.locker.timeout)
            .map_err(|e| translate(e, &name, "info"))?;
        let info = reply::info(&v)?;
        Ok(verdict::owns(info, &self.state.token, self.state.fence))
    }

    /// Runs `command` in the server atomically if this hold is still the lock's (LOCK.CALL),
    /// sent once: its reply as the redis crate gives it for the command sent directly, or its
    /// error as an `Error::Redis`; `Error::NotOwner` if the hold is gone (nothing ran).
    pub fn call<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T> {
        let name = self.name_lossy();
        let line = args::guarded_cmd(
            &[b"LOCK.CALL", &self.state.name, &self.state.token],
            command,
        );
        let v = self
            .locker
            .conns
            .send_once(&line, self.locker.timeout)
            .map_err(|e| translate_guarded(e, &name, "call"))?;
        reply::inner(v)
    }

    /// Gives the lock back. `Error::NotOwner` if the server no longer had it, `Error::Lost` if
    /// the lease clock had given it up (what the server still had is released all the same);
    /// `Error::Timeout` with no answer within the lease left (at least 1 s): the hold is then
    /// ended here, and its lease ends it in the server.
    pub fn release(mut self) -> Result<()> {
        self.release_now()
    }

    fn release_now(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let bound = self.bound();
        self.done = true;
        let lost = self.state.ending(&self.keeper);
        let line = args::release(&self.state.name, &self.state.token);
        let released = verdict::release_sent(lost, self.state.channel.is_owned()).then(|| {
            self.send(line, bound, "release")
                .and_then(|v| verdict::released_one(&v))
        });
        self.state.close_owned();
        verdict::released(lost, released, 1, &self.name_lossy())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let _ = self.release_now();
    }
}

crate::surface::hold_accessors!(one Hold);
