//! Module timers. They carry no data: a timer stopped or fired owns
//! nothing to free (the scheduler keeps what is due).

use std::ffi::c_void;

use redis_module::{raw, Context};

pub type TimerId = raw::RedisModuleTimerID;

/// Signature of a timer callback.
pub type TimerCallback = unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void);

/// The longest period handed to Redis. `RedisModule_CreateTimer` adds the
/// period, in microseconds, to the clock: a huge one wraps around and the
/// timer is always due. Later deadlines are reached by re-arming.
pub const MAX_TIMER_PERIOD_MS: i64 = 60_000;

/// Arms a timer `delay_ms` from now (clamped to `0..=MAX_TIMER_PERIOD_MS`).
pub fn create_timer(ctx: &Context, delay_ms: i64, callback: TimerCallback) -> TimerId {
    let period = delay_ms.clamp(0, MAX_TIMER_PERIOD_MS);
    // SAFETY: `ctx` is live; the callback has the signature Redis calls and
    // ignores its (null) data.
    unsafe {
        raw::RedisModule_CreateTimer.unwrap()(ctx.ctx, period, Some(callback), std::ptr::null_mut())
    }
}

/// Stops a pending timer; false if it already fired or never existed.
pub fn stop_timer(ctx: &Context, id: TimerId) -> bool {
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: `ctx` is live; Redis checks the id; there is no data to free.
    unsafe {
        raw::RedisModule_StopTimer.unwrap()(ctx.ctx, id, &mut data) == raw::REDISMODULE_OK as i32
    }
}

/// Signature of a callback run on the event loop's next turn.
pub type TurnCallback = unsafe extern "C" fn(*mut c_void);

/// Runs `callback` on the event loop's next turn, at once: a timer made
/// inside a timer's callback fires no sooner than a millisecond later
/// (Redis still counts the firing timer as the first one). False if Redis
/// could not take it.
pub fn next_turn(callback: TurnCallback) -> bool {
    // SAFETY: the callback has the signature Redis calls and ignores its
    // (null) data; the function is available from Redis 7.0.
    unsafe {
        raw::RedisModule_EventLoopAddOneShot.unwrap()(Some(callback), std::ptr::null_mut())
            == raw::REDISMODULE_OK as i32
    }
}
