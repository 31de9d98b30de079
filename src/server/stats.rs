//! Counters for `INFO redislock`: plain atomics bumped where things happen,
//! so INFO costs nothing but reading them.

use std::cell::Cell;
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::{raw, RedisString};

use crate::server::{catch_panic, ffi};

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    pub fn bump(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// New grants made by `LOCK.ACQUIRE` itself.
pub static GRANTS: Counter = Counter::new();
/// Acquires by the holder's own token (expiry reset, same fence).
pub static REGRANTS: Counter = Counter::new();
/// Acquires answered nil at once because another token held the lock.
pub static REFUSED: Counter = Counter::new();
pub static RELEASES: Counter = Counter::new();
pub static RELEASES_NOT_OWNER: Counter = Counter::new();
pub static EXTENDS: Counter = Counter::new();
pub static EXTENDS_NOT_OWNER: Counter = Counter::new();
/// Acquires that started waiting (`BLOCK`).
pub static WAITS: Counter = Counter::new();
/// Grants made to a waiting client.
pub static HANDOFFS: Counter = Counter::new();
/// Holds of shared locks and semaphores ended by their lease.
pub static LEASE_ENDS: Counter = Counter::new();
/// Waits that ended without the lock (timeout or `CLIENT UNBLOCK`).
pub static WAIT_TIMEOUTS: Counter = Counter::new();
/// Holds released because their `EPHEMERAL` connection closed.
pub static EPHEMERAL_RELEASES: Counter = Counter::new();
/// `LOCK.CALL` commands run, and refused because the token did not hold the lock.
pub static CALLS: Counter = Counter::new();
pub static CALLS_NOT_OWNER: Counter = Counter::new();
/// `LOCK.FENCE` commands run, and refused for a stale fence.
pub static FENCES_ACCEPTED: Counter = Counter::new();
pub static FENCES_STALE: Counter = Counter::new();
/// Passes of the module's timer; those cut short when their time slice
/// was spent (the rest followed in the next pass); those in which the
/// server's state held every write back (nothing was taken out).
pub static TIMER_PASSES: Counter = Counter::new();
pub static TIMER_PASSES_CUT: Counter = Counter::new();
pub static TIMER_PASSES_HELD: Counter = Counter::new();
/// Writing jobs taken out of the schedule by the timer.
pub static TIMER_JOBS: Counter = Counter::new();
/// `LOCK.OBSERVE` calls that waited (`BLOCK`), and those that ended
/// without a change (timeout or `CLIENT UNBLOCK`).
pub static OBSERVES: Counter = Counter::new();
pub static OBSERVE_TIMEOUTS: Counter = Counter::new();
/// Locks removed by Redis because their TTL passed.
pub static EXPIRED: Counter = Counter::new();

thread_local! {
    /// The key a lock was last unlinked under, by the address of its name:
    /// Redis unlinks an expiring key and then raises `expired` for the same
    /// name object, which is how an expiry is told to be a lock's.
    static UNLINKED: Cell<usize> = const { Cell::new(0) };
}

/// Notes the name object of a lock being unlinked.
pub fn note_unlink(key: &[u8]) {
    UNLINKED.with(|u| u.set(key.as_ptr() as usize));
}

/// Subscribes to `expired` events, the only key events the module needs.
pub fn subscribe(ctx: &redis_module::Context) -> bool {
    ffi::subscribe_key_events(ctx, redis_module::NotifyEvent::EXPIRED, on_expired)
}

unsafe extern "C" fn on_expired(
    _ctx: *mut raw::RedisModuleCtx,
    _class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    catch_panic::callback((), || {
        // SAFETY: Redis passes the event name as a C string.
        let event = unsafe { CStr::from_ptr(event) }.to_bytes();
        note_key_event(event, RedisString::string_as_slice(key));
    });
    raw::REDISMODULE_OK as c_int
}

/// Called for every key event we see; counts the expiry if the key that
/// just expired was the lock unlinked a moment ago.
pub fn note_key_event(event: &[u8], key: &[u8]) {
    let unlinked = UNLINKED.with(|u| u.replace(0));
    if unlinked != 0 && event == b"expired" && unlinked == key.as_ptr() as usize {
        EXPIRED.bump();
    }
}

/// Forgets an unlink that raises no event (the module's own deletions).
pub fn forget_unlink() {
    UNLINKED.with(|u| u.set(0));
}
