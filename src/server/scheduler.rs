//! Everything the module does later runs from one Redis timer, armed for
//! the earliest job of one schedule: a lock to look at again (a holder's
//! expiry while clients wait, a handoff after a deletion or a flush), the
//! next lease to end among a shared lock's or semaphore's holders, a
//! waiter's deadline, a grant to revoke, an epoch to propagate.
//!
//! One job per lock and per waiter at most, replaced rather than added to,
//! and forgotten with the lock or waiter; one timer for all of them,
//! whose period is clamped (a far deadline is reached by re-arming, never
//! by a period that wraps around). Writing jobs check the server's state
//! first and wait while it forbids writes; they never run in the same pass
//! that scheduled them, so no job can spin the event loop.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::ffi::c_void;

use redis_module::{raw, Context};

use crate::core::schedule::Schedule;
use crate::server::ffi::{self, BlockedHandle, TimerId};
use crate::server::gate::{self, Hold};
use crate::server::waiting::{self, LockId};
use crate::server::{guard, lockops, state};

/// How soon a write held back by the server's state is tried again.
pub const RETRY_MS: i64 = 10;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Job {
    /// Look at a lock again and hand it to its first waiter if it is free.
    Serve(LockId),
    /// End the holds of a shared lock or semaphore whose leases ran out,
    /// and hand their room on.
    Leases(LockId),
    /// A waiter's `BLOCK` timeout.
    Deadline(BlockedHandle),
    /// Give back a grant whose client left before its reply: lock, token, fence.
    Revoke(LockId, Vec<u8>, u64),
    /// Propagate a promoted master's fence epoch.
    Epoch(u64),
}

thread_local! {
    // Redis calls modules on its main thread only.
    static SCHEDULE: RefCell<Schedule<Job>> = RefCell::new(Schedule::default());
    /// The one Redis timer: when it fires, and its id.
    static ARMED: Cell<Option<(i64, TimerId)>> = const { Cell::new(None) };
    /// Lease ends that fell due while this server was a replica (its master
    /// ends them): looked at again if it is promoted.
    static PARKED: RefCell<HashSet<LockId>> = RefCell::new(HashSet::new());
}

fn with<R>(f: impl FnOnce(&mut Schedule<Job>) -> R) -> R {
    SCHEDULE.with(|s| f(&mut s.borrow_mut()))
}

/// Runs `job` at Unix time `at_ms`, or earlier if it was due earlier.
pub fn at(ctx: &Context, job: Job, at_ms: i64) {
    with(|s| s.set_earlier(job, at_ms));
    rearm(ctx);
}

/// Runs `job` in the next pass of the event loop.
pub fn soon(ctx: &Context, job: Job) {
    at(ctx, job, ffi::now_ms());
}

/// Forgets `job`; the timer goes too once nothing is pending. (A timer armed
/// for a job cancelled while others remain fires once, finds nothing due,
/// and is re-armed for what is left.)
pub fn cancel(job: &Job) {
    if let Job::Leases(id) = job {
        PARKED.with(|p| {
            let mut p = p.borrow_mut();
            if !p.is_empty() {
                p.remove(id);
            }
        });
    }
    let emptied = with(|s| s.cancel(job) && s.is_empty());
    if emptied && ARMED.with(Cell::get).is_some() {
        if let Some(ctx) = state::detached_context() {
            rearm(&ctx);
        }
    }
}

/// Forgets the lease-end jobs of the locks in the flushed database(s)
/// (`db` -1: all); the holders went with the flush.
pub fn forget_leases_in(db: i32) {
    let flushed = |id: &LockId| db == -1 || id.0 == db;
    with(|s| s.cancel_where(|job| matches!(job, Job::Leases(id) if flushed(id))));
    PARKED.with(|p| p.borrow_mut().retain(|id| !flushed(id)));
    if with(|s| s.is_empty()) && ARMED.with(Cell::get).is_some() {
        if let Some(ctx) = state::detached_context() {
            rearm(&ctx);
        }
    }
}

/// SWAPDB exchanged two databases: the looks at lease ends follow their
/// keys.
pub fn swap_leases(first: i32, second: i32) {
    let swapped = |db: i32| if db == first { second } else { first };
    let moved = with(|s| {
        s.cancel_where(|job| matches!(job, Job::Leases((d, _)) if *d == first || *d == second))
    });
    for (job, at) in moved {
        if let Job::Leases((db, name)) = job {
            with(|s| s.set_earlier(Job::Leases((swapped(db), name)), at));
        }
    }
    PARKED.with(|p| {
        let mut p = p.borrow_mut();
        let moved: Vec<LockId> = p
            .iter()
            .filter(|(d, _)| *d == first || *d == second)
            .cloned()
            .collect();
        for id in moved {
            p.remove(&id);
            p.insert((swapped(id.0), id.1));
        }
    });
}

/// This server was promoted: the lease ends it left to its old master are
/// its own again.
pub fn unpark(ctx: &Context) {
    let parked = PARKED.with(|p| std::mem::take(&mut *p.borrow_mut()));
    for id in parked {
        soon(ctx, Job::Leases(id));
    }
}

/// Jobs pending, and Redis timers armed (0 or 1), for `INFO redislock`.
pub fn pending() -> (usize, usize) {
    (
        with(|s| s.len()),
        ARMED.with(|a| usize::from(a.get().is_some())),
    )
}

/// Makes the one timer fire at the earliest job; stops it when none is left.
fn rearm(ctx: &Context) {
    let earliest = with(|s| s.earliest());
    let armed = ARMED.with(Cell::get);
    match (armed, earliest) {
        (Some((fires, _)), Some(next)) if fires <= next => {}
        (Some((_, id)), next) => {
            ffi::stop_timer(ctx, id);
            ARMED.with(|a| a.set(None));
            if let Some(next) = next {
                arm(ctx, next);
            }
        }
        (None, Some(next)) => arm(ctx, next),
        (None, None) => {}
    }
}

fn arm(ctx: &Context, next: i64) {
    let now = ffi::now_ms();
    let delay = next.saturating_sub(now).clamp(0, ffi::MAX_TIMER_PERIOD_MS);
    let id = ffi::create_timer(ctx, delay, on_timer);
    ARMED.with(|a| a.set(Some((now + delay, id))));
}

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let ctx = Context::new(ctx);
    guard::callback((), || {
        ARMED.with(|a| a.set(None));
        // Only what is due now: a job scheduled while these run waits for
        // the next pass.
        let jobs = with(|s| s.pop_due(ffi::now_ms()));
        for job in jobs {
            guard::callback((), || run(&ctx, job));
        }
    });
    guard::callback((), || rearm(&ctx));
}

fn run(ctx: &Context, job: Job) {
    if let Job::Deadline(handle) = job {
        // Answering nil writes nothing: allowed in any state.
        waiting::on_deadline(handle);
        return;
    }
    match gate::may_write(ctx) {
        Ok(()) => {}
        // A replica writes only what its master sends: its waiters were
        // already answered on demotion, a grant it made is its master's
        // business now, and the epoch is its master's. Lease ends wait for
        // a promotion.
        Err(Hold::Replica) => {
            if let Job::Leases(id) = job {
                PARKED.with(|p| p.borrow_mut().insert(id));
            }
            return;
        }
        Err(_) => {
            let retry = ffi::now_ms().saturating_add(RETRY_MS);
            with(|s| s.set_earlier(job, retry));
            return;
        }
    }
    match job {
        Job::Serve(id) => waiting::serve_id(ctx, &id),
        Job::Leases(id) => lockops::tend(ctx, &id),
        Job::Revoke(id, token, fence) => lockops::revoke(ctx, &id, &token, fence),
        Job::Epoch(epoch) => {
            // Only the newest epoch matters.
            if state::with_clock(|c| c.epoch) == epoch {
                ffi::replicate_epoch(ctx, epoch);
            }
        }
        Job::Deadline(_) => {}
    }
}
