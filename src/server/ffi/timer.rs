//! Module timers. They carry no data: a timer stopped or fired owns
//! nothing to free (the scheduler keeps what is due).

use std::ffi::{c_int, c_void};

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

/// Signature of the wake-up callback (run by the event loop, no context).
pub type WakeCallback = unsafe extern "C" fn(c_int, *mut c_void, c_int);

thread_local! {
    /// The wake-up's kernel timer, registered with the event loop once.
    static WAKE_FD: std::cell::Cell<Option<c_int>> = const { std::cell::Cell::new(None) };
}

/// Makes the event loop call `callback` at the wall-clock microsecond
/// `at_us`, replacing the time set before. Module timers count whole
/// milliseconds and the loop sleeps in whole milliseconds, rounded up, so
/// they fire up to 2 ms late; a kernel timer on the loop wakes it on time.
/// False if the kernel or the server could not take it (then a module
/// timer does).
pub fn wake_at(at_us: i64, callback: WakeCallback) -> bool {
    let Some(fd) = wake_fd(callback) else {
        return false;
    };
    let at = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        // A zero time would disarm it: the earliest is the epoch's first µs.
        it_value: libc::timespec {
            tv_sec: at_us.max(1).div_euclid(1_000_000),
            tv_nsec: at_us.max(1).rem_euclid(1_000_000) * 1_000,
        },
    };
    // SAFETY: `fd` is our timerfd; `at` is a valid itimerspec; the old
    // value is not asked for.
    unsafe { libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &at, std::ptr::null_mut()) == 0 }
}

/// Stops the wake-up, if one is set.
pub fn cancel_wake() {
    if let Some(fd) = WAKE_FD.with(std::cell::Cell::get) {
        let off = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        // SAFETY: as in `wake_at`; a zero time disarms the timer.
        unsafe { libc::timerfd_settime(fd, 0, &off, std::ptr::null_mut()) };
    }
}

/// Takes the wake-up's expiry count off its descriptor (in its callback).
pub fn clear_wake(fd: c_int) {
    let mut expirations = 0u64;
    // SAFETY: reads at most 8 bytes into a u64 from a non-blocking fd.
    unsafe { libc::read(fd, (&mut expirations as *mut u64).cast(), 8) };
}

fn wake_fd(callback: WakeCallback) -> Option<c_int> {
    if let Some(fd) = WAKE_FD.with(std::cell::Cell::get) {
        return Some(fd);
    }
    // SAFETY: plain system call; the descriptor is ours from here on.
    let fd = unsafe {
        libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: the callback has the signature Redis calls and ignores its
    // (null) data; the function is available from Redis 7.0.
    let added = unsafe {
        raw::RedisModule_EventLoopAdd.unwrap()(
            fd,
            raw::REDISMODULE_EVENTLOOP_READABLE as c_int,
            Some(callback),
            std::ptr::null_mut(),
        )
    };
    if added != raw::REDISMODULE_OK as c_int {
        // SAFETY: closes the descriptor made above, used by nobody.
        unsafe { libc::close(fd) };
        return None;
    }
    WAKE_FD.with(|w| w.set(Some(fd)));
    Some(fd)
}
