//! `Election` of the blocking front end: candidates wait in the server for the lock `name`
//! (`EPHEMERAL`, on a connection the library opens for the term alone, with the candidate's
//! `DATA`); the grant's fence is the term.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cancel::{Cancel, RunState, Stopper, Term};
use crate::core::acquire::Attempt;
use crate::core::args::{self, Mode, Token, Ttl};
use crate::core::election::{self, Leader, Proclaimed};
use crate::core::error::{translate, Error, Result};
use crate::follow::{Follow, OnElected, OnNewLeader};
use crate::hold::{OnLost, Plan};
use crate::owned;
use crate::renewer::{blocking_keeper, run_blocking};
use crate::COMMAND_TIMEOUT;

use super::observe::Observer;
use super::{Hold, Locker};

/// A candidate in the election `name`: made by `Locker::election`.
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
    /// A candidate in the election `name` (a lock key), with a lease of 10 s renewed every
    /// third of it while it leads.
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

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("term", &self.term())
            .finish()
    }
}

impl Election {
    /// Waits in the server to lead (first come, first served among the candidates), up to
    /// `wait` (`None`: without limit): the term. At once if this candidate leads already;
    /// `Error::Busy` if not elected in time.
    pub fn campaign(&mut self, wait: Option<Duration>) -> Result<u64> {
        let deadline = wait.map(|w| Instant::now() + w);
        self.elect(deadline, false)?
            .ok_or_else(|| Error::Busy { name: self.label() })
    }

    /// A campaign; `None` when not granted by `deadline` or, with `stoppable`, stopped.
    fn elect(&mut self, deadline: Option<Instant>, stoppable: bool) -> Result<Option<u64>> {
        if let Some(term) = self.term() {
            return Ok(Some(term));
        }
        if let Some(d) = &self.data {
            election::check_data(d)?;
        }
        loop {
            // Without limit: `BLOCK 0`.
            let attempt = deadline.map_or_else(Attempt::forever, |d| Attempt::new(Some(d)));
            let (client, name, ttl, data) = (
                self.locker.inner.conns.target(),
                self.name.clone(),
                self.lease,
                self.data.clone(),
            );
            let stopped = self.run.stopped.clone();
            let granted = run_blocking(async move {
                let token = Token::random();
                let spec = owned::Spec {
                    name: &name,
                    token: &token,
                    ttl,
                    mode: Mode::Exclusive,
                    data: data.as_deref(),
                };
                tokio::select! {
                    g = owned::acquire(client, spec, attempt) => g.map(Some),
                    _ = stopped.wait(), if stoppable => Ok(None),
                }
            })?;
            match granted {
                None => return Ok(None), // stopped: the wait's connection closed with it
                Some(None) if deadline.is_none() => continue,
                Some(None) => return Ok(None),
                Some(Some(g)) => {
                    let on_lost = self.run.on_lost(self.on_lost.clone());
                    let keeper = blocking_keeper();
                    let fence = g.fences[0];
                    let state = g.schedule(
                        &Plan::one(&self.name, self.lease).renewed(true, Some(on_lost)),
                        &keeper,
                    );
                    self.hold = Some(Hold {
                        state,
                        locker: self.locker.inner.clone(),
                        keeper,
                        done: false,
                    });
                    return Ok(Some(fence));
                }
            }
        }
    }

    /// Gives leadership up: true if this candidate led until the release; false if it did not
    /// lead, or its term was lost meanwhile.
    pub fn resign(&mut self) -> Result<bool> {
        let Some(hold) = self.hold.take() else {
            return Ok(false);
        };
        election::resigned(hold.release())
    }

    /// Who leads now (`LOCK.OBSERVE name`): `None` when nobody does.
    pub fn leader(&self) -> Result<Option<Leader>> {
        let line = vec![b"LOCK.OBSERVE".to_vec(), self.name.clone()];
        let v = self
            .locker
            .inner
            .conns
            .send(&line, COMMAND_TIMEOUT)
            .map_err(|e| translate(e, &self.label(), "leader"))?;
        election::leader_of(&v)
    }

    /// The leader's data becomes `data`, in the same term (a re-grant with the term's token
    /// and the new `DATA`, on the term's connection): observers see the new value. Later
    /// campaigns send it too. `Error::NotOwner` if this candidate does not lead.
    pub fn proclaim(&mut self, data: impl Into<Vec<u8>>) -> Result<()> {
        let value = data.into();
        election::check_data(&value)?;
        let name = self.label();
        let Some(hold) = self.hold.as_ref().filter(|h| h.is_held()) else {
            return Err(Error::NotOwner { name });
        };
        let line = election::proclamation(&self.name, hold.token(), self.lease, &value);
        let sent = Instant::now();
        let v = hold.send(line, COMMAND_TIMEOUT, "proclaim")?;
        match election::proclamation_reply(&v, hold.fence())? {
            Proclaimed::Done => {
                let ttl_ms = self.lease.millis();
                hold.state.extended(&hold.keeper, sent, ttl_ms, Ok(()))?;
                self.data = Some(value);
                Ok(())
            }
            Proclaimed::GiveBack => {
                let back = args::release(&self.name, hold.token());
                let _ = hold.send(back, COMMAND_TIMEOUT, "proclaim");
                Err(Error::NotOwner { name })
            }
            Proclaimed::Lost => Err(Error::NotOwner { name }),
        }
    }

    /// The changes of leader, as they come (see [`Observer`]).
    pub fn observe(&self) -> Observer {
        Observer::new(self.locker.node_of(&self.name), self.name.clone())
    }

    /// Stops `run` from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            run: self.run.clone(),
        }
    }

    /// Campaigns, calls `work` with the term while leading, resigns when it returns, and
    /// campaigns again, until stopped (`stopper().stop()`). The term ends (`Term::is_ended`)
    /// when leadership is lost or the run is stopped: `work` should then return. A campaign
    /// the server does not answer (restarting, unreachable) is tried again after 50 ms,
    /// doubling up to 1 s; errors that waiting cannot mend end the run.
    pub fn run(&mut self, work: impl FnMut(&Term)) -> Result<()> {
        let follow = self.on_new_leader.clone().map(Follow::new);
        if let Some(follow) = &follow {
            let mut observer = Observer::following(
                self.locker.node_of(&self.name),
                self.name.clone(),
                follow.wake.clone(),
            );
            let follow = follow.clone();
            std::thread::Builder::new()
                .name("redislock-follow".into())
                .spawn(move || {
                    for change in observer.by_ref() {
                        let Ok(change) = change else { return };
                        if !follow.deliver(change.as_ref()) {
                            return;
                        }
                    }
                })
                .map_err(|e| Error::Redis(e.into()))?;
        }
        let ran = self.terms(work);
        if let Some(follow) = &follow {
            follow.end();
        }
        ran
    }

    fn terms(&mut self, mut work: impl FnMut(&Term)) -> Result<()> {
        let mut retries = election::Retries::default();
        loop {
            if self.run.stopped.is_set() {
                return Ok(());
            }
            let ended = Cancel::default();
            self.run.set_current(Some(ended.clone()));
            match self.elect(None, true) {
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
                        work(&handle);
                    }
                    ended.fire();
                    let _ = self.resign();
                }
                Err(e) => {
                    let pause = retries.failed(e)?;
                    self.run.stopped.wait_timeout(pause);
                }
            }
            self.run.set_current(None);
        }
    }
}

crate::surface::election_surface!(Election);
