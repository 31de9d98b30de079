//! A flag set once, that blocking and async waiters can wait for: a run's stop, and the end of
//! one of its terms.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    set: Mutex<bool>,
    cv: Condvar,
    notify: tokio::sync::Notify,
}

#[derive(Clone, Default)]
pub(crate) struct Cancel {
    state: Arc<State>,
}

impl Cancel {
    pub fn is_set(&self) -> bool {
        *self.state.set.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the flag; true the first time.
    pub fn fire(&self) -> bool {
        let mut set = self.state.set.lock().unwrap_or_else(|e| e.into_inner());
        if *set {
            return false;
        }
        *set = true;
        drop(set);
        self.state.cv.notify_all();
        self.state.notify.notify_waiters();
        true
    }

    /// Blocks until set, at most `timeout`: true if set.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut set = self.state.set.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if *set {
                return true;
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return false;
            }
            set = self
                .state
                .cv
                .wait_timeout(set, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits (async) until set.
    pub async fn wait(&self) {
        loop {
            let notified = self.state.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

/// What a run shares with its stopper and with the term's loss callback.
#[derive(Default)]
pub(crate) struct RunState {
    pub stopped: Cancel,
    pub current: Mutex<Option<Cancel>>,
}

impl RunState {
    /// The term now worked in ends (lost, or the run stopped).
    pub fn end_current(&self) {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(c) = current {
            c.fire();
        }
    }

    /// A term's loss callback: the term worked in ends, then `user`'s callback runs.
    pub fn on_lost(self: &Arc<Self>, user: Option<crate::hold::OnLost>) -> crate::hold::OnLost {
        let run = self.clone();
        Arc::new(move |l: &crate::lost::Lost| {
            run.end_current();
            if let Some(f) = &user {
                f(l);
            }
        })
    }

    pub fn set_current(&self, c: Option<Cancel>) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = c;
    }
}

/// Stops a run (`Election::run`) from anywhere: it campaigns no more, a campaign under way
/// ends, and the term now worked in ends at once.
#[derive(Clone)]
pub struct Stopper {
    pub(crate) run: Arc<RunState>,
}

impl Stopper {
    pub fn stop(&self) {
        self.run.stopped.fire();
        self.run.end_current();
    }

    /// True once stopped.
    pub fn is_stopped(&self) -> bool {
        self.run.stopped.is_set()
    }
}

/// One term of a run, given to the work: it ends (once) when leadership is lost, the run is
/// stopped, or the work returned.
#[derive(Clone)]
pub struct Term {
    pub(crate) term: u64,
    pub(crate) ended: Cancel,
}

impl Term {
    /// The term (the fence of the leader's grant).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// True once the term ended: stop working as the leader.
    pub fn is_ended(&self) -> bool {
        self.ended.is_set()
    }

    /// Blocks until the term ends, at most `timeout`: true if it ended.
    pub fn wait_ended(&self, timeout: Duration) -> bool {
        self.ended.wait_timeout(timeout)
    }

    /// Waits (async) until the term ends.
    pub async fn ended(&self) {
        self.ended.wait().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_ends_once_whoever_ends_it() {
        let run = Arc::new(RunState::default());
        let stopper = Stopper { run: run.clone() };
        let term = Term {
            term: 7,
            ended: Cancel::default(),
        };
        run.set_current(Some(term.ended.clone()));
        assert!(!term.is_ended() && !term.wait_ended(Duration::from_millis(1)));
        run.end_current(); // lost
        assert!(term.is_ended() && term.wait_ended(Duration::ZERO));
        assert!(!term.ended.fire(), "once");
        assert!(!stopper.is_stopped());
        let next = Cancel::default();
        run.set_current(Some(next.clone()));
        stopper.stop();
        assert!(stopper.is_stopped() && next.is_set());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let later = Cancel::default();
            let fired = later.clone();
            tokio::spawn(async move { fired.fire() });
            later.wait().await;
        });
    }
}
