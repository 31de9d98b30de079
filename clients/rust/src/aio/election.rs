//! `Election` and `Observer` of the tokio front end (see the blocking [`crate::Election`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cancel::{Cancel, RunState, Stopper, Term};
use crate::core::acquire::Attempt;
use crate::core::args::{self, Mode, Token, Ttl};
use crate::core::election::{self, Leader, Proclaimed};
use crate::core::error::{Error, Result};
use crate::follow::{Follow, OnElected, OnNewLeader};
use crate::hold::{OnLost, Plan};
use crate::owned;
use crate::renewer::runtime_keeper;
use crate::COMMAND_TIMEOUT;

use super::{Hold, Locker, Observer};

/// A candidate in the election `name` (see the blocking [`crate::Election`]).
pub struct Election {
    locker: Locker,
    name: Vec<u8>,
    lease: Ttl,
    data: Option<Vec<u8>>,
    on_lost: Option<OnLost>,
    on_elected: Option<OnElected>,
    on_new_leader: Option<OnNewLeader>,
    hold: Option<Hold>,
    run: Arc<RunState>,
}

impl Locker {
    /// A candidate in the election `name`, with a lease of 10 s.
    pub fn election(&self, name: impl Into<Vec<u8>>) -> Election {
        Election {
            locker: self.clone(),
            name: name.into(),
            lease: Ttl::from_duration(election::DEFAULT_LEASE),
            data: None,
            on_lost: None,
            on_elected: None,
            on_new_leader: None,
            hold: None,
            run: Arc::default(),
        }
    }
}

impl Election {
    /// Waits in the server to lead, up to `wait` (`None`: without limit): the term;
    /// `Error::Busy` if not elected in time. Dropping the future leaves the queue at once.
    pub async fn campaign(&mut self, wait: Option<Duration>) -> Result<u64> {
        let deadline = wait.map(|w| Instant::now() + w);
        let name = self.label();
        self.elect(deadline, false)
            .await?
            .ok_or(Error::Busy { name })
    }

    async fn elect(&mut self, deadline: Option<Instant>, stoppable: bool) -> Result<Option<u64>> {
        if let Some(term) = self.term() {
            return Ok(Some(term));
        }
        if let Some(d) = &self.data {
            election::check_data(d)?;
        }
        loop {
            // Without limit: `BLOCK 0`.
            let attempt = deadline.map_or_else(Attempt::forever, |d| Attempt::new(Some(d)));
            let token = Token::random();
            let spec = owned::Spec {
                name: &self.name,
                token: &token,
                ttl: self.lease,
                mode: Mode::Exclusive,
                data: self.data.as_deref(),
            };
            let stopped = self.run.stopped.clone();
            let client = self.locker.inner.target();
            let granted = tokio::select! {
                g = owned::acquire(client, spec, attempt) => g?,
                _ = stopped.wait(), if stoppable => return Ok(None),
            };
            let Some(g) = granted else {
                if deadline.is_none() {
                    continue;
                }
                return Ok(None);
            };
            let on_lost = self.run.on_lost(self.on_lost.clone());
            let keeper = runtime_keeper();
            let fence = g.fences[0];
            let state = g.schedule(
                &Plan::one(&self.name, self.lease).renewed(true, Some(on_lost)),
                &keeper,
            );
            self.hold = Some(Hold {
                state,
                locker: self.locker.clone(),
                keeper,
                done: false,
            });
            return Ok(Some(fence));
        }
    }

    /// Gives leadership up: true if this candidate led until the release.
    pub async fn resign(&mut self) -> Result<bool> {
        let Some(hold) = self.hold.take() else {
            return Ok(false);
        };
        election::resigned(hold.release().await)
    }

    /// Who leads now: `None` when nobody does.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let line = vec![b"LOCK.OBSERVE".to_vec(), self.name.clone()];
        let v = self
            .locker
            .inner
            .send(&line, COMMAND_TIMEOUT, &self.label(), "leader")
            .await?;
        election::leader_of(&v)
    }

    /// The leader's data becomes `data`, in the same term (see the blocking
    /// [`crate::Election::proclaim`]).
    pub async fn proclaim(&mut self, data: impl Into<Vec<u8>>) -> Result<()> {
        let value = data.into();
        election::check_data(&value)?;
        let name = self.label();
        let Some(hold) = self.hold.as_ref().filter(|h| h.is_held()) else {
            return Err(Error::NotOwner { name });
        };
        let line = election::proclamation(&self.name, hold.token(), self.lease, &value);
        let sent = Instant::now();
        let inner = &self.locker.inner;
        let v = inner
            .send_hold(&hold.state, &line, COMMAND_TIMEOUT, "proclaim")
            .await?;
        match election::proclamation_reply(&v, hold.fence())? {
            Proclaimed::Done => {
                let ttl_ms = self.lease.millis();
                hold.state.extended(&hold.keeper, sent, ttl_ms, Ok(()))?;
                self.data = Some(value);
                Ok(())
            }
            Proclaimed::GiveBack => {
                let back = args::release(&self.name, hold.token());
                let _ = inner
                    .send_hold(&hold.state, &back, COMMAND_TIMEOUT, "proclaim")
                    .await;
                Err(Error::NotOwner { name })
            }
            Proclaimed::Lost => Err(Error::NotOwner { name }),
        }
    }

    /// The changes of leader (see the blocking [`crate::Observer`]): `observer.next().await`.
    pub fn observe(&self) -> Observer {
        Observer::new(self.locker.inner.node_of(&self.name), self.name.clone())
    }

    /// Stops `run` from anywhere.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            run: self.run.clone(),
        }
    }

    /// Campaigns, runs `work(term)` while leading (dropped at once when the term ends: lost,
    /// or the run stopped), resigns, and campaigns again until stopped (see the blocking
    /// [`crate::Election::run`]).
    pub async fn run<F, Fut>(&mut self, work: F) -> Result<()>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = ()>,
    {
        let follow = self.on_new_leader.clone().map(Follow::new);
        if let Some(follow) = &follow {
            let mut observer = self.observe();
            let follow = follow.clone();
            tokio::spawn(async move {
                loop {
                    let change = tokio::select! {
                        c = observer.next() => c,
                        _ = follow.wake.wait() => return,
                    };
                    let Some(Ok(change)) = change else { return };
                    if !follow.deliver(change.as_ref()) {
                        return;
                    }
                }
            });
        }
        let ran = self.terms(work).await;
        if let Some(follow) = &follow {
            follow.end();
        }
        ran
    }

    async fn terms<F, Fut>(&mut self, mut work: F) -> Result<()>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut retries = election::Retries::default();
        loop {
            if self.run.stopped.is_set() {
                return Ok(());
            }
            let ended = Cancel::default();
            self.run.set_current(Some(ended.clone()));
            match self.elect(None, true).await {
                Ok(None) => return Ok(()),
                Ok(Some(term)) => {
                    retries.elected();
                    if !self.is_leader() || self.run.stopped.is_set() {
                        ended.fire();
                    }
                    let handle = Term {
                        term,
                        ended: ended.clone(),
                    };
                    if let Some(f) = &self.on_elected {
                        f(term);
                    }
                    if !ended.is_set() {
                        tokio::select! {
                            _ = work(handle.clone()) => {}
                            _ = handle.ended() => {}
                        }
                    }
                    ended.fire();
                    let _ = self.resign().await;
                }
                Err(e) => {
                    let pause = retries.failed(e)?;
                    let _ = tokio::time::timeout(pause, self.run.stopped.wait()).await;
                }
            }
            self.run.set_current(None);
        }
    }
}

crate::surface::election_surface!(Election);
