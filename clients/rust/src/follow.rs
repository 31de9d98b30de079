//! A run's callbacks (`Election::on_elected`, `Election::on_new_leader`) and the follower that
//! calls `on_new_leader` with each change an observer of the run sees, never after the run ended.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cancel::Cancel;
use crate::core::election::Leader;

/// Called with each term a run is elected in, before its work.
pub type OnElected = Arc<dyn Fn(u64) + Send + Sync>;

/// Called with each change of leader a run's observer sees: `Some(leader)`, or `None` when
/// nobody leads after a leader.
pub type OnNewLeader = Arc<dyn Fn(Option<&Leader>) + Send + Sync>;

/// The longest one `LOCK.OBSERVE … BLOCK` of a run's follower waits: the blocking follower's
/// thread leaves within this (and a crossing of the network) once the run ended.
pub(crate) const FOLLOW_BLOCK: Duration = Duration::from_secs(1);

/// One run's follower: the callback, and whether the run ended (then it is not called again).
pub(crate) struct Follow {
    f: OnNewLeader,
    ended: Mutex<bool>,
    /// Fired when the run ends: the follower stops waiting.
    pub wake: Cancel,
}

impl Follow {
    pub fn new(f: OnNewLeader) -> Arc<Follow> {
        Arc::new(Follow {
            f,
            ended: Mutex::new(false),
            wake: Cancel::default(),
        })
    }

    /// Calls the callback with `change`, unless the run ended; false once it ended. A
    /// callback that panics is the application's own: the follower goes on.
    pub fn deliver(&self, change: Option<&Leader>) -> bool {
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        if *ended {
            return false;
        }
        let f = &self.f;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(change)));
        true
    }

    /// The run is over: once this returns, the callback is not running and is not called again.
    pub fn end(&self) {
        *self.ended.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.fire();
    }
}
