//! The lost signal of a hold: set once, when the hold is lost, for blocking and async waiters.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::core::lease::LostReason;

/// A loss, as recorded when it was signalled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// The lock's name.
    pub name: Vec<u8>,
    /// The fence of the grant that was lost.
    pub fence: u64,
    pub reason: LostReason,
    /// The lease clock's conservative local end: for a lease that ran out, the moment the
    /// server could free the lock at the earliest (minus the drift margin); for a hold found
    /// gone, no later than the moment it was found.
    pub lease_end: Instant,
}

#[derive(Default)]
struct State {
    lost: Mutex<Option<Lost>>,
    cv: Condvar,
    notify: tokio::sync::Notify,
}

/// Set when the hold is lost; read it, or wait for it (blocking or `.await`). Clones share
/// the signal.
#[derive(Clone, Default)]
pub struct LostSignal {
    state: Arc<State>,
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal")
            .field("lost", &self.get())
            .finish()
    }
}

impl LostSignal {
    /// The loss, once signalled.
    pub fn get(&self) -> Option<Lost> {
        self.state
            .lost
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// True once the hold was signalled lost.
    pub fn is_set(&self) -> bool {
        self.get().is_some()
    }

    /// Blocks until the loss is signalled, at most `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Lost> {
        let deadline = Instant::now() + timeout;
        let mut lost = self.state.lost.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(l) = lost.as_ref() {
                return Some(l.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            lost = self
                .state
                .cv
                .wait_timeout(lost, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits (async) until the loss is signalled.
    pub async fn wait(&self) -> Lost {
        loop {
            let notified = self.state.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(l) = self.get() {
                return l;
            }
            notified.await;
        }
    }

    /// Sets the signal; true the first time.
    pub(crate) fn set(&self, lost: Lost) -> bool {
        let mut slot = self.state.lost.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return false;
        }
        *slot = Some(lost);
        drop(slot);
        self.state.cv.notify_all();
        self.state.notify.notify_waiters();
        true
    }
}
