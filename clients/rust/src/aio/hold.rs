//! `Hold` of the tokio front end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::args::{self, Ttl};
use crate::core::durable::Replicas;
use crate::core::error::Result;
use crate::core::verdict;
use crate::hold::Shared;
use crate::renewer::Keeper;

use super::Locker;

/// A grant (see the blocking [`crate::Hold`]). Dropped unreleased, it is released by a task
/// spawned on the current runtime.
pub struct Hold {
    pub(super) state: Shared,
    pub(super) locker: Locker,
    pub(super) keeper: Arc<Keeper>,
    pub(super) done: bool,
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
    fn bound(&self) -> Duration {
        self.lease_left().max(Duration::from_secs(1))
    }

    /// Sets the lease to `ttl` from now (see the blocking [`crate::Hold::extend`]).
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.state.live(self.done)?;
        let ttl = Ttl::from_duration(ttl);
        let sent = Instant::now();
        let line = args::extend(&self.state.name, &self.state.token, ttl);
        let replicas = self.state.replicas.get().copied();
        let then = Replicas::after(replicas, false, Duration::from_millis(ttl.millis()));
        let answer = self
            .locker
            .inner
            .send_hold_then(&self.state, &line, self.bound(), "extend", then)
            .await;
        let (answer, acks) = match answer {
            Ok((v, acks)) => (Ok(v), acks.and_then(|a| a.ok())),
            Err(e) => (Err(e), None),
        };
        let name = self.state.name_lossy();
        let verdict = verdict::extension(answer, acks.as_ref(), replicas, &name);
        self.state
            .extended(&self.keeper, sent, ttl.millis(), verdict)
    }

    /// LOCK.CALL (see the blocking [`crate::Hold::call`]).
    pub async fn call<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T> {
        let line = args::guarded_cmd(
            &[b"LOCK.CALL", &self.state.name, &self.state.token],
            command,
        );
        self.locker
            .inner
            .guarded(&line, &self.state.name_lossy(), "call")
            .await
    }

    /// Gives the lock back (see the blocking [`crate::Hold::release`]).
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        release(
            self.state.clone(),
            self.locker.clone(),
            self.keeper.clone(),
            self.bound(),
        )
        .await
    }
}

async fn release(
    state: Shared,
    locker: Locker,
    keeper: Arc<Keeper>,
    bound: Duration,
) -> Result<()> {
    let lost = state.ending(&keeper);
    let line = args::release(&state.name, &state.token);
    let released = if verdict::release_sent(lost, state.channel.is_owned()) {
        let answer = locker
            .inner
            .send_hold(&state, &line, bound, "release")
            .await;
        Some(answer.and_then(|v| verdict::released_one(&v)))
    } else {
        None
    };
    state.close_owned();
    verdict::released(lost, released, 1, &state.name_lossy())
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        self.keeper.remove(&self.state);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let bound = self.bound();
            rt.spawn(release(
                self.state.clone(),
                self.locker.clone(),
                self.keeper.clone(),
                bound,
            ));
        }
    }
}

crate::surface::hold_accessors!(one Hold);
