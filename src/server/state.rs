//! Server-wide module state: the fence clock.

use std::sync::{Mutex, PoisonError};

use crate::core::fence::FenceClock;

static CLOCK: Mutex<FenceClock> = Mutex::new(FenceClock {
    epoch: 0,
    high_water: 0,
});

/// Runs `f` on the fence clock. Redis calls modules from its main thread
/// (and from a forked child for saving), so the lock is never contended; it
/// is here so the static is sound, not for speed.
pub fn with_clock<R>(f: impl FnOnce(&mut FenceClock) -> R) -> R {
    let mut clock = CLOCK.lock().unwrap_or_else(PoisonError::into_inner);
    f(&mut clock)
}
