//! `MultiLock` and `MultiHold` of the tokio front end (see the blocking [`crate::MultiLock`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::core::acquire::Attempt;
use crate::core::args::{self, Mode, Token, Ttl};
use crate::core::error::{Error, Result};
use crate::core::multi;
use crate::core::reply::{self, LockInfo};
use crate::core::take::Take;
use crate::core::verdict;
use crate::hold::{OnLost, Plan, Shared};
use crate::owned;
use crate::renewer::{runtime_keeper, Keeper};
use crate::{COMMAND_TIMEOUT, DEFAULT_LEASE};

use super::Locker;

/// Several keys locked together (see the blocking [`crate::MultiLock`]).
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
    /// The lock of every key of `names` at once (see the blocking [`crate::Locker::multi_lock`]).
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

impl MultiLock {
    pub fn shared(mut self, on: bool) -> MultiLock {
        self.mode = if on { Mode::Shared } else { Mode::Exclusive };
        self
    }

    pub fn names(&self) -> &[Vec<u8>] {
        &self.names
    }

    /// `LOCK.INFO` of each key, in the order of the names.
    pub async fn info(&self) -> Result<Vec<Option<LockInfo>>> {
        let mut all = Vec::with_capacity(self.names.len());
        for n in &self.names {
            all.push(self.locker.info(n).await?);
        }
        Ok(all)
    }

    /// Takes every key if all are free now: `None` if not.
    pub async fn try_acquire(&self) -> Result<Option<MultiHold>> {
        self.take(None).await
    }

    /// Takes every key at once, waiting in the server up to `wait`; `Error::Busy` if not
    /// granted by then.
    pub async fn acquire(&self, wait: Duration) -> Result<MultiHold> {
        self.take(Some(Instant::now() + wait))
            .await?
            .ok_or_else(|| Error::Busy {
                name: multi::label(&self.names),
            })
    }

    async fn take(&self, deadline: Option<Instant>) -> Result<Option<MultiHold>> {
        let inner = &self.locker.inner;
        let token = self.token.clone().unwrap_or_else(Token::random);
        let take = Take::all(
            &self.names,
            token,
            self.ttl,
            self.mode,
            Attempt::new(deadline),
        );
        let keeper = runtime_keeper();
        let plan = Plan::all(&self.names, self.ttl).renewed(self.auto_renew, self.on_lost.clone());
        let (state, fences) = if self.ephemeral {
            let Some(g) = owned::acquire_as(inner.target(), take.ephemeral(None)).await? else {
                return Ok(None);
            };
            let fences = g.fences.clone();
            (g.schedule(&plan, &keeper), fences)
        } else {
            let Some(g) = inner.acquire(take).await? else {
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
            locker: self.locker.clone(),
            keeper,
            done: false,
        }))
    }
}

/// A grant of every key of a `MultiLock` (see the blocking [`crate::MultiHold`]). Dropped
/// unreleased, it is released by a task spawned on the current runtime.
pub struct MultiHold {
    state: Shared,
    fences: Vec<u64>,
    ttl: Ttl,
    locker: Locker,
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

    async fn send(&self, line: &[Vec<u8>], bound: Duration, what: &'static str) -> Result<Value> {
        self.locker
            .inner
            .send(line, bound, &self.label(), what)
            .await
    }

    /// Sets every key's lease to `ttl` from now (see the blocking [`crate::MultiHold::extend`]).
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.extend_to(Ttl::from_duration(ttl), "extend").await
    }

    /// Every key's lease back to the lock's `ttl`.
    pub async fn reacquire(&mut self) -> Result<()> {
        self.extend_to(self.ttl, "reacquire").await
    }

    async fn extend_to(&mut self, ttl: Ttl, what: &'static str) -> Result<()> {
        self.state.live(self.done)?;
        let sent = Instant::now();
        let bound = self.lease_left().max(Duration::from_secs(1));
        let mut verdict = Ok(());
        for line in multi::extend_lines(self.names(), self.token(), ttl) {
            let answer = self
                .locker
                .inner
                .send_hold(&self.state, &line, bound, what)
                .await;
            verdict = verdict::extension(answer, None, None, &self.label());
            if verdict.is_err() {
                break;
            }
        }
        self.state
            .extended(&self.keeper, sent, ttl.millis(), verdict)
    }

    /// Asks the server whether every key still has this grant.
    pub async fn owned(&self) -> Result<bool> {
        if !self.is_held() {
            return Ok(false);
        }
        for (name, fence) in self.names().iter().zip(&self.fences) {
            let v = self
                .send(&args::info(name), COMMAND_TIMEOUT, "owned")
                .await?;
            if !verdict::owns(reply::info(&v)?, self.token(), *fence) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `LOCK.INFO` of each key, in the order of the names.
    pub async fn info(&self) -> Result<Vec<Option<LockInfo>>> {
        let mut all = Vec::with_capacity(self.fences.len());
        for n in self.names() {
            all.push(reply::info(
                &self.send(&args::info(n), COMMAND_TIMEOUT, "info").await?,
            )?);
        }
        Ok(all)
    }

    /// Gives every key back (see the blocking [`crate::MultiHold::release`]).
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        release(
            self.state.clone(),
            self.locker.clone(),
            self.keeper.clone(),
            self.fences.len(),
        )
        .await
    }
}

async fn release(state: Shared, locker: Locker, keeper: Arc<Keeper>, keys: usize) -> Result<()> {
    let bound = state.left().max(Duration::from_secs(1));
    let lost = state.ending(&keeper);
    let label = state.name_lossy();
    let line = multi::release_all(&state.keys, &state.token);
    let count = if verdict::release_sent(lost, state.channel.is_owned()) {
        let answer = locker
            .inner
            .send_hold(&state, &line, bound, "release")
            .await;
        Some(answer.and_then(|v| multi::released(&v)))
    } else {
        None
    };
    state.close_owned();
    verdict::released(lost, count, keys as u64, &label)
}

impl Drop for MultiHold {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        self.keeper.remove(&self.state);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release(
                self.state.clone(),
                self.locker.clone(),
                self.keeper.clone(),
                self.fences.len(),
            ));
        }
    }
}

crate::surface::lock_builders!(MultiLock);
crate::surface::hold_accessors!(many MultiHold);
