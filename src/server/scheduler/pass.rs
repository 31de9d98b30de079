//! One pass of the timer: what is due, for one slice of time, in order —
//! deadlines, then the writes the server's state allows, then the reads
//! that answer observers.

use std::cell::Cell;

use redis_module::Context;

use crate::core::budget::{Budget, SLICE};
use crate::server::ffi;
use crate::server::writable::{self, NotWritable};
use crate::server::{catch_panic, state, stats};

use super::{deadlines, looks, runner, writes, Job, HELD_UNTIL, PARKED, RETRY_MS};

/// One pass: what is due, for one slice of time. What is left is due
/// still, so the timer is re-armed for the next turn of the event loop.
pub(super) fn pass(ctx: &Context) {
    let budget = Budget::new(SLICE);
    let now = ffi::now_ms();
    stats::TIMER_PASSES.bump();
    // Handles of waits whose connection closed: a batch, in any state (it
    // writes nothing); the server's cost of each comes after the pass.
    if (runner().leaving_pending)() {
        catch_panic::callback(false, runner().release_leaving);
    }
    // Deadlines first: they are cheap, and a wait must not outlive its
    // timeout because writes queue up. Reads last: they show observers
    // what the writes made of their locks.
    let cut = deadline_slice(now, &budget)
        || write_pass(ctx, now, &budget)
        || read_slice(ctx, now, &budget);
    if cut {
        stats::TIMER_PASSES_CUT.bump();
    }
}

/// Runs due deadlines until the budget is spent; true if it was.
fn deadline_slice(now: i64, budget: &Budget) -> bool {
    let mark = deadlines(|s| s.mark());
    loop {
        if budget.spent() {
            return true;
        }
        let Some(handle) = deadlines(|s| s.pop_before(now, mark)) else {
            return false;
        };
        (runner().deadline)(handle);
    }
}

/// The writing work, if any is due and the server's state allows it;
/// true if the budget was spent with some left.
fn write_pass(ctx: &Context, now: i64, budget: &Budget) -> bool {
    let writes_due =
        writes(|s| s.earliest()).is_some_and(|at| at <= now) || (runner().background_pending)();
    let held = HELD_UNTIL.with(Cell::get).is_some_and(|h| h > now);
    if !writes_due || held {
        return false;
    }
    // The server's state, once for the whole pass.
    match writable::may_write(ctx) {
        Ok(()) => {
            HELD_UNTIL.with(|h| h.set(None));
            write_slice(ctx, now, budget)
        }
        // A replica writes only what its master sends: its waiters were
        // already answered on demotion, a grant it made is its master's
        // business now, and the epoch is its master's. Lease ends wait for
        // a promotion.
        Err(NotWritable::Replica) => {
            HELD_UNTIL.with(|h| h.set(None));
            (runner().on_replica)();
            park_slice(now, budget)
        }
        // Paused, loading, too few replicas: everything stays as it is,
        // looked at again a little later.
        Err(_) => {
            stats::TIMER_PASSES_HELD.bump();
            HELD_UNTIL.with(|h| h.set(Some(now.saturating_add(RETRY_MS))));
            false
        }
    }
}

/// Runs due looks and the observers' reads, in any state, until the
/// budget is spent; true if it was, with work left.
fn read_slice(ctx: &Context, now: i64, budget: &Budget) -> bool {
    let mark = looks(|s| s.mark());
    while let Some(id) = looks(|s| s.pop_before(now, mark)) {
        (runner().look)(id);
        if budget.spent() {
            return true;
        }
    }
    if !(runner().reads_pending)() {
        return false;
    }
    catch_panic::callback(false, || (runner().reads)(ctx, budget))
}

/// Runs due writing jobs and releases closed connections' holds, one of
/// each in turn, until the budget is spent; true if it was, with work left.
fn write_slice(ctx: &Context, now: i64, budget: &Budget) -> bool {
    let mark = writes(|s| s.mark());
    loop {
        let job = writes(|s| s.pop_before(now, mark));
        let ran_job = job.is_some();
        if let Some(job) = job {
            stats::TIMER_JOBS.bump();
            catch_panic::callback((), || run(ctx, job));
        }
        let released = catch_panic::callback(false, || (runner().background)(ctx));
        if !ran_job && !released {
            return false;
        }
        if budget.spent() {
            return true;
        }
    }
}

/// On a replica: due lease ends are parked, other due jobs dropped, until
/// the budget is spent; true if it was, with work left.
fn park_slice(now: i64, budget: &Budget) -> bool {
    let mark = writes(|s| s.mark());
    while let Some(job) = writes(|s| s.pop_before(now, mark)) {
        stats::TIMER_JOBS.bump();
        if let Job::Leases(id) = job {
            PARKED.with(|p| p.borrow_mut().insert(id));
        }
        if budget.spent() {
            return true;
        }
    }
    false
}

fn run(ctx: &Context, job: Job) {
    match job {
        Job::Epoch(epoch) => {
            // Only the newest epoch matters.
            if state::with_clock(|c| c.epoch) == epoch {
                ffi::replicate_epoch(ctx, epoch);
            }
        }
        // Kept in their own schedules.
        Job::Deadline(handle) => (runner().deadline)(handle),
        Job::Look(id) => (runner().look)(id),
        job => (runner().job)(ctx, job),
    }
}
