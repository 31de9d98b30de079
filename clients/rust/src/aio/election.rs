//! `Election` and `Observer` of the tokio front end (see the blocking [`crate::Election`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cancel::{Cancel, RunState, Stopper, Term};
use crate::core::acquire::Attempt;
use crate::core::args::{self, Acquire, Mode, Token, Ttl, Wait};
use crate::core::election::{self, Leader, Proclaimed};
use crate::core::error::{Error, Result};
use crate::core::lease::Leased;
use crate::core::reply;
use crate::follow::{Follow, OnElected, OnNewLeader};
use crate::hold::{HoldState, OnLost};
use crate::lost::{Lost, LostSignal};
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
    pub fn lease(mut self, lease: Duration) -> Election {
        self.lease = Ttl::from_duration(lease);
        self
    }

    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Election {
        self.data = Some(data.into());
        self
    }

    /// Called once per loss of leadership, in the runtime's renewal task.
    pub fn on_lost(mut self, f: impl Fn(&Lost) + Send + Sync + 'static) -> Election {
        self.on_lost = Some(Arc::new(f));
        self
    }

    /// `run` calls this with each term it is elected in, before the work (see the blocking
    /// [`crate::Election::on_elected`]).
    pub fn on_elected(mut self, f: impl Fn(u64) + Send + Sync + 'static) -> Election {
        self.on_elected = Some(Arc::new(f));
        self
    }

    /// `run` calls this with each change of leader an observer of its own (a task of the
    /// runtime) sees, never after `run` returned (see the blocking
    /// [`crate::Election::on_new_leader`]).
    pub fn on_new_leader(
        mut self,
        f: impl Fn(Option<&Leader>) + Send + Sync + 'static,
    ) -> Election {
        self.on_new_leader = Some(Arc::new(f));
        self
    }

    pub fn name(&self) -> &[u8] {
        &self.name
    }

    fn label(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    pub fn is_leader(&self) -> bool {
        self.hold.as_ref().is_some_and(Hold::is_held)
    }

    pub fn term(&self) -> Option<u64> {
        self.hold.as_ref().filter(|h| h.is_held()).map(Hold::fence)
    }

    pub fn lease_left(&self) -> Duration {
        self.hold.as_ref().map_or(Duration::ZERO, Hold::lease_left)
    }

    /// The lost signal of the last term granted (`None` before the first).
    pub fn lost(&self) -> Option<LostSignal> {
        self.hold.as_ref().map(Hold::lost)
    }

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
            let run = self.run.clone();
            let user = self.on_lost.clone();
            let on_lost: OnLost = Arc::new(move |l: &Lost| {
                run.end_current();
                if let Some(f) = &user {
                    f(l);
                }
            });
            let state = HoldState::new(
                self.name.clone(),
                g.token,
                g.fence,
                self.lease.millis(),
                g.sent,
                true,
                Some(on_lost),
                g.channel,
            );
            let keeper = runtime_keeper();
            keeper.add(&state);
            g.watch.attach(&state, keeper.clone());
            self.hold = Some(Hold {
                state,
                locker: self.locker.clone(),
                keeper,
                done: false,
            });
            return Ok(Some(g.fence));
        }
    }

    /// Gives leadership up: true if this candidate led until the release.
    pub async fn resign(&mut self) -> Result<bool> {
        let Some(hold) = self.hold.take() else {
            return Ok(false);
        };
        match hold.release().await {
            Ok(()) => Ok(true),
            Err(Error::NotOwner { .. } | Error::Lost { .. }) => Ok(false),
            Err(e) => Err(e),
        }
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
        let token = Token::Given(hold.token().to_vec());
        let line = Acquire {
            name: &self.name,
            token: &token,
            ttl: self.lease,
            mode: Mode::Exclusive,
            ephemeral: true,
            wait: Wait::No,
            data: Some(&value),
        }
        .args();
        let sent = Instant::now();
        let inner = &self.locker.inner;
        let v = inner
            .send_hold(&hold.state, &line, COMMAND_TIMEOUT, "proclaim")
            .await?;
        match election::proclaimed(reply::grant(&v)?, hold.fence()) {
            Proclaimed::Done => {
                let moved = {
                    let mut lease = hold.state.lease();
                    (!lease.ended).then(|| lease.extended(sent, self.lease.millis()))
                };
                if moved.is_some() {
                    hold.keeper.add(&hold.state);
                }
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
        let mut failures = 0;
        loop {
            if self.run.stopped.is_set() {
                return Ok(());
            }
            let ended = Cancel::default();
            self.run.set_current(Some(ended.clone()));
            match self.elect(None, true).await {
                Ok(None) => return Ok(()),
                Ok(Some(term)) => {
                    failures = 0;
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
                Err(e) if election::run_retries(&e) => {
                    let pause = election::retry_pause(failures);
                    failures = failures.saturating_add(1);
                    let _ = tokio::time::timeout(pause, self.run.stopped.wait()).await;
                }
                Err(e) => return Err(e),
            }
            self.run.set_current(None);
        }
    }
}
