//! Server-wide module state: the fence clock, and a context for work that
//! starts where Redis gives the module none (the unlink callback).

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, PoisonError};

use redis_module::{raw, Context};

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

static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Keeps a context that lives as long as the module.
pub fn set_detached_context(ctx: *mut raw::RedisModuleCtx) {
    DETACHED.store(ctx, Ordering::Relaxed);
}

/// The module's long-lived context, for creating timers.
pub fn detached_context() -> Option<Context> {
    let ctx = DETACHED.load(Ordering::Relaxed);
    (!ctx.is_null()).then(|| Context::new(ctx))
}
