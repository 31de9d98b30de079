//! Everything the module does later runs from one Redis timer, armed for
//! the earliest job of one schedule: a lock to look at again (a holder's
//! expiry while clients wait, a handoff after a deletion or a flush), the
//! next lease to end among a shared lock's or semaphore's holders, a
//! waiter's deadline, a grant to revoke, an epoch to propagate; and the
//! release of closed connections' `EPHEMERAL` holds; and the reads that
//! answer observers: locks they watch looked at when they changed or when
//! their holds are due to end.
//!
//! One job per lock and per waiter at most, replaced rather than added to,
//! and forgotten with the lock or waiter; one timer for all of them,
//! whose period is clamped (a far deadline is reached by re-arming, never
//! by a period that wraps around).
//!
//! A pass is time-sliced like Redis's own active expiry: it runs due work
//! for about a millisecond and leaves the rest where it is, for the next
//! pass in the next turn of the event loop, so clients are served in
//! between. Whether the server's state allows writing is decided once per
//! pass; while it does not, writing jobs stay in the schedule untouched and
//! the timer looks again a little later (deadlines and observers' reads,
//! which write nothing, keep their times). Reads come last in a pass, after
//! the writes, so an observer sees what a pass's handoffs made of a lock,
//! never the moment between a release and its handoff. A pass runs only
//! jobs scheduled before it began, so no job can spin the event loop.

mod pass;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::ffi::{c_int, c_void};

use redis_module::{raw, Context};

use crate::core::budget::Budget;
use crate::core::deadlines::Deadlines;
use crate::core::schedule::Schedule;
use crate::core::swapdb;
use crate::server::ffi::{self, BlockedId, LockId, TimerId};
use crate::server::{catch_panic, state};

/// How soon writes held back by the server's state are tried again.
pub const RETRY_MS: i64 = 10;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Job {
    /// Look at a lock again and hand it to its first waiter if it is free.
    Serve(LockId),
    /// End the holds of a shared lock or semaphore whose leases ran out,
    /// and hand their room on.
    Leases(LockId),
    /// A waiter's or an observer's `BLOCK` timeout.
    Deadline(BlockedId),
    /// Look at a lock that observers watch, whose holds are due to end.
    Look(LockId),
    /// Give back a grant whose client left before its reply: lock, token,
    /// fence (boxed: every job is as large as the largest, and a lock with
    /// holders keeps one for as long as it lives).
    Revoke(Box<(LockId, Vec<u8>, u64)>),
    /// Propagate a promoted master's fence epoch.
    Epoch(u64),
}

/// What the jobs do: the layers above the scheduler, registered once at
/// load, so the timer knows when things run and not what they are.
pub struct Runner {
    /// Runs one due writing job (never a deadline).
    pub job: fn(&Context, Job),
    /// A waiter's deadline passed.
    pub deadline: fn(BlockedId),
    /// Whether background work is pending (closed connections' holds).
    pub background_pending: fn() -> bool,
    /// Does one piece of background work; false if none was left.
    pub background: fn(&Context) -> bool,
    /// A pass found this server a replica: it forgets what only a master
    /// keeps (connection bindings).
    pub on_replica: fn(),
    /// Whether a job hands a lock to a waiter: it is timed to the
    /// microsecond (see `arm`).
    pub urgent: fn(&Job) -> bool,
    /// A lock's look (`Job::Look`) fell due.
    pub look: fn(LockId),
    /// Whether reads are pending (observers to look at or answer).
    pub reads_pending: fn() -> bool,
    /// Does the pending reads, in any server state, for one slice; true if
    /// the slice ended with some left.
    pub reads: fn(&Context, &Budget) -> bool,
    /// Whether handles of waits whose connection closed are to be released.
    pub leaving_pending: fn() -> bool,
    /// Releases a batch of them, in any server state; true if some are left.
    pub release_leaving: fn() -> bool,
}

/// Runs nothing: until the module's runner is registered.
static IDLE_RUNNER: Runner = Runner {
    job: |_, _| {},
    deadline: |_| {},
    background_pending: || false,
    background: |_| false,
    on_replica: || {},
    urgent: |_| false,
    look: |_| {},
    reads_pending: || false,
    reads: |_, _| false,
    leaving_pending: || false,
    release_leaving: || false,
};

thread_local! {
    // Redis calls modules on its main thread only.
    static RUNNER: Cell<&'static Runner> = const { Cell::new(&IDLE_RUNNER) };
    /// Every job but the deadlines: they write, so they wait while the
    /// server's state forbids writing.
    static WRITES: RefCell<Schedule<Job>> = RefCell::new(Schedule::default());
    /// Waiters' deadlines: answering nil writes nothing, so they run in
    /// any state.
    static DEADLINES: RefCell<Deadlines<BlockedId>> = RefCell::new(Deadlines::default());
    /// Looks at locks that observers watch: reads, run in any state.
    static LOOKS: RefCell<Schedule<LockId>> = RefCell::new(Schedule::default());
    /// The one Redis timer: when it fires, and its id.
    static ARMED: Cell<Option<(i64, TimerId)>> = const { Cell::new(None) };
    /// The kernel timer is set for an urgent job (see `arm`), at this time.
    static WAKE_AT: Cell<Option<i64>> = const { Cell::new(None) };
    /// The server's state held writes back: not looked at again before then.
    static HELD_UNTIL: Cell<Option<i64>> = const { Cell::new(None) };
    /// Lease ends that fell due while this server was a replica (its master
    /// ends them): looked at again if it is promoted.
    static PARKED: RefCell<BTreeSet<LockId>> = const { RefCell::new(BTreeSet::new()) };
}

/// Registers what the jobs do; once, at load.
pub fn set_runner(runner: &'static Runner) {
    RUNNER.with(|r| r.set(runner));
}

fn runner() -> &'static Runner {
    RUNNER.with(Cell::get)
}

fn writes<R>(f: impl FnOnce(&mut Schedule<Job>) -> R) -> R {
    WRITES.with(|s| f(&mut s.borrow_mut()))
}

fn deadlines<R>(f: impl FnOnce(&mut Deadlines<BlockedId>) -> R) -> R {
    DEADLINES.with(|s| f(&mut s.borrow_mut()))
}

fn looks<R>(f: impl FnOnce(&mut Schedule<LockId>) -> R) -> R {
    LOOKS.with(|s| f(&mut s.borrow_mut()))
}

/// Runs `job` at Unix time `at_ms`, or earlier if it was due earlier.
pub fn at(ctx: &Context, job: Job, at_ms: i64) {
    match job {
        Job::Deadline(handle) => deadlines(|s| s.set_earlier(handle, at_ms)),
        Job::Look(id) => looks(|s| s.set_earlier(id, at_ms)),
        job => writes(|s| s.set_earlier(job, at_ms)),
    };
    // A timer that fires by then covers the new job: it re-arms for what
    // is left when it runs.
    let covered = ARMED
        .with(Cell::get)
        .is_some_and(|(fires, _)| fires <= at_ms)
        || WAKE_AT.with(Cell::get).is_some_and(|wake| wake <= at_ms);
    if !covered {
        rearm(ctx);
    }
}

/// Ends the wait `handle` once `timeout_ms` have passed, never before:
/// the clock counts whole milliseconds, so the one it reads now may be all
/// but spent, and the wait is given the next one too (as the server's own
/// blocking commands end a wait only once their deadline has passed).
pub fn timeout_after(ctx: &Context, handle: BlockedId, timeout_ms: u64) {
    let deadline = ffi::now_ms()
        .saturating_add(i64::try_from(timeout_ms).unwrap_or(i64::MAX))
        .saturating_add(1);
    at(ctx, Job::Deadline(handle), deadline);
}

/// Runs `job` in the next pass of the event loop.
pub fn soon(ctx: &Context, job: Job) {
    at(ctx, job, ffi::now_ms());
}

/// Closed connections left holds to release: the next pass starts on them.
pub fn orphans_pending(ctx: &Context) {
    rearm(ctx);
}

/// Observers are to be looked at or answered: the next pass does it.
pub fn reads_pending(ctx: &Context) {
    rearm(ctx);
}

/// Handles of waits whose connection closed are to be released: the next
/// pass starts on them.
pub fn leaving_pending(ctx: &Context) {
    rearm(ctx);
}

/// Forgets `job`; the timer goes too once nothing is pending. (A timer armed
/// for a job cancelled while others remain fires once, finds nothing due,
/// and is re-armed for what is left.)
pub fn cancel(job: &Job) {
    let cancelled = match job {
        Job::Deadline(handle) => deadlines(|s| s.cancel(handle)),
        Job::Look(id) => looks(|s| s.cancel(id)),
        Job::Leases(id) => {
            PARKED.with(|p| {
                let mut p = p.borrow_mut();
                if !p.is_empty() {
                    p.remove(id);
                }
            });
            writes(|s| s.cancel(job))
        }
        job => writes(|s| s.cancel(job)),
    };
    if cancelled {
        stop_if_idle();
    }
}

fn idle() -> bool {
    writes(|s| s.is_empty())
        && deadlines(|s| s.is_empty())
        && looks(|s| s.is_empty())
        && !(runner().background_pending)()
        && !(runner().reads_pending)()
        && !(runner().leaving_pending)()
}

fn stop_if_idle() {
    let armed = ARMED.with(Cell::get).is_some() || WAKE_AT.with(Cell::get).is_some();
    if idle() && armed {
        if let Some(ctx) = state::detached_context() {
            rearm(&ctx);
        }
    }
}

fn lease_lock(job: &Job) -> Option<&LockId> {
    match job {
        Job::Leases(id) => Some(id),
        _ => None,
    }
}

/// Forgets the lease-end jobs of the locks in the flushed database(s)
/// (`db` -1: all); the holders went with the flush.
pub fn forget_leases_in(db: i32) {
    writes(|s| swapdb::take_db(s, db, lease_lock, Job::Leases));
    PARKED.with(|p| {
        let mut p = p.borrow_mut();
        if db == -1 {
            p.clear();
        } else {
            swapdb::take_set_db(&mut p, db);
        }
    });
    stop_if_idle();
}

/// SWAPDB exchanged two databases: the looks at lease ends follow their
/// keys.
pub fn swap_leases(first: i32, second: i32) {
    writes(|s| swapdb::swap_jobs(s, first, second, lease_lock, Job::Leases));
    PARKED.with(|p| swapdb::swap_set(&mut p.borrow_mut(), first, second));
}

/// This server was promoted: the lease ends it left to its old master are
/// its own again.
pub fn unpark(ctx: &Context) {
    let parked = PARKED.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let now = ffi::now_ms();
    writes(|s| {
        for id in parked {
            s.set_earlier(Job::Leases(id), now);
        }
    });
    rearm(ctx);
}

/// Jobs pending, and Redis timers armed (0 or 1), for `INFO redislock`.
pub fn pending() -> (usize, usize) {
    (
        writes(|s| s.len()) + deadlines(|s| s.len()) + looks(|s| s.len()),
        usize::from(ARMED.with(Cell::get).is_some() || WAKE_AT.with(Cell::get).is_some()),
    )
}

/// When the writing work is next to run: its earliest job (now, if
/// orphans wait), not before the server's state is looked at again.
fn next_write() -> Option<i64> {
    let next = writes(|s| s.earliest());
    let next = if (runner().background_pending)() {
        Some(next.map_or(ffi::now_ms(), |at| at.min(ffi::now_ms())))
    } else {
        next
    };
    let held = HELD_UNTIL.with(Cell::get);
    next.map(|at| held.map_or(at, |h| at.max(h)))
}

/// When the reads are next to run: the earliest look, now if observers
/// are to be looked at or answered. Never held back by the server's state.
fn next_read() -> Option<i64> {
    let next = looks(|s| s.earliest());
    match (runner().reads_pending)() {
        true => Some(next.map_or(ffi::now_ms(), |at| at.min(ffi::now_ms()))),
        false => next,
    }
}

/// Makes the one timer fire at the earliest job; stops it when none is left.
fn rearm(ctx: &Context) {
    let leaving = (runner().leaving_pending)().then(ffi::now_ms);
    let earliest = [
        deadlines(|s| s.earliest()),
        next_write(),
        next_read(),
        leaving,
    ]
    .into_iter()
    .flatten()
    .min();
    let (armed, wake) = (ARMED.with(Cell::get), WAKE_AT.with(Cell::get));
    let covered = earliest.is_some_and(|next| {
        armed.is_some_and(|(fires, _)| fires <= next) || wake.is_some_and(|at| at <= next)
    });
    if covered {
        return;
    }
    if let Some((_, id)) = ARMED.with(Cell::take) {
        ffi::stop_timer(ctx, id);
    }
    if WAKE_AT.with(Cell::take).is_some() {
        ffi::cancel_wake();
    }
    if let Some(next) = earliest {
        arm(ctx, next);
    }
}

fn arm(ctx: &Context, next: i64) {
    let now = ffi::now_ms();
    let urgent = HELD_UNTIL.with(Cell::get).is_none()
        && writes(|s| {
            s.first()
                .is_some_and(|(job, at)| at <= next && (runner().urgent)(job))
        });
    // A job that hands a lock to a waiter runs on the microsecond it is due
    // (the module timer could be 2 ms late): a kernel timer wakes the loop,
    // which then runs the timer at once.
    if urgent
        && state::detached_context().is_some()
        && ffi::wake_at(next.saturating_mul(1000), on_wake)
    {
        WAKE_AT.with(|w| w.set(Some(next)));
        return;
    }
    let delay = next.saturating_sub(now).clamp(0, ffi::MAX_TIMER_PERIOD_MS);
    let id = ffi::create_timer(ctx, delay, on_timer);
    ARMED.with(|a| a.set(Some((now + delay, id))));
}

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let ctx = Context::new(ctx);
    catch_panic::callback((), || {
        ARMED.with(|a| a.set(None));
        pass::pass(&ctx);
        settle_freed_memory();
    });
    catch_panic::callback((), || rearm(&ctx));
}

/// The kernel timer set by `arm` went off: the module timer runs on the
/// loop's next turn. (Made here, outside a timer's callback, a timer of no
/// delay is the first one due, and the loop does not sleep before it.)
unsafe extern "C" fn on_wake(fd: c_int, _data: *mut c_void, _mask: c_int) {
    catch_panic::callback((), || {
        ffi::clear_wake(fd);
        WAKE_AT.with(|w| w.set(None));
        if let Some(ctx) = state::detached_context() {
            if let Some((_, id)) = ARMED.with(Cell::take) {
                ffi::stop_timer(&ctx, id);
            }
            let id = ffi::create_timer(&ctx, 0, on_timer);
            ARMED.with(|a| a.set(Some((ffi::now_ms(), id))));
        }
    });
}

/// A pass frees many small blocks (released holds, deleted keys). With
/// glibc's malloc (Valkey's default build) they pile up in its fast bins,
/// and the next large free anywhere in the server merges them all at once:
/// 50 ms after 85,000 released holds. A request above the small-bin range
/// makes glibc merge them now, a pass's worth at a time; other allocators
/// just serve and free one block.
fn settle_freed_memory() {
    drop(std::hint::black_box(Vec::<u8>::with_capacity(4096)));
}
