//! `LOCK.OBSERVE … AFTER fence [SEEN data] BLOCK timeout`: clients waiting
//! in the server for a lock's holder to change — the registry (the core's
//! `Observers`), the blocked clients, their deadlines and their answers.
//!
//! Observers are not waiters: they stand in no lock's queue, hold no grant
//! back, and only read. The lock-lifecycle layer marks the locks that
//! changed (`changed`), and from the scheduler's pass reads each marked
//! lock once and hands what it saw to `settle`, which wakes the observers
//! to whom it is news (another fence; with `SEEN`, other data). Woken observers are unblocked a slice at a time
//! (`unblock_some`): each unblock costs the server a reply callback and a
//! write to the client's socket, which the module's clock never sees, so a
//! pass unblocks a bounded number of them. Reads and answers go on whatever
//! the server's state (a pause, a replica), as deadlines do.
//!
//! An observer is blocked on its lock's key, so the server treats it as a
//! blocked `BLPOP` on that key: in Cluster, once the key's slot is served
//! by another node the server answers it `MOVED` (or `CLUSTERDOWN`) and
//! ends the wait itself, whether or not the key exists. Every end the
//! server makes (that one, a closed connection, `CLIENT UNBLOCK`) frees the
//! handle too; the module releases only the handles of the observers it
//! answers, and the answer is written by the unblock callback.
//!
//! No borrow of the registry is held across a call into Redis.

use std::cell::RefCell;
use std::ffi::c_int;
use std::rc::Rc;

use redis_module::{raw, Context, RedisString};

use crate::core::args::observe::Saw;
use crate::core::errors::LockError;
use crate::core::observers::{Observers, Stage};
use crate::server::ffi::{self, BlockedClient, BlockedId, LockId};
use crate::server::scheduler::{self, Job};
use crate::server::{blocked, reply, state, stats};

/// What a look at an observed lock saw.
#[derive(Debug)]
pub enum Seen {
    /// The holder's fence and public data; fence 0 and no data: no lock.
    Holder { fence: u64, data: Option<Box<[u8]>> },
    /// The key can no longer be observed here (another type, a gate, a
    /// slot moving away): every observer is answered this error.
    Refused(LockError),
    /// The key's slot is served by another node (or none): the server
    /// answers its observers itself, as it answers a blocked `BLPOP`, and
    /// the module does not, lest both answer.
    Redirected,
}

impl Seen {
    /// The holder observers compare with what they saw, if any.
    fn holder(&self) -> Option<(u64, Option<&[u8]>)> {
        match self {
            Seen::Holder { fence, data } => Some((*fence, data.as_deref())),
            Seen::Refused(_) | Seen::Redirected => None,
        }
    }
}

/// An observer's blocked client, until the module or the server ends its
/// wait.
struct Watch {
    client: Option<BlockedClient>,
}

type Registry = Observers<BlockedId, LockId, Watch, Rc<Seen>>;

thread_local! {
    // Redis calls modules on its main thread only.
    static OBSERVERS: RefCell<Registry> = RefCell::new(Observers::default());
    /// Lock values unlinked while observers exist and not (yet) freed: a
    /// value still here once the command is done moved to another name.
    static UNLINKED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    OBSERVERS.with(|o| f(&mut o.borrow_mut()))
}

/// Whether nobody observes anything (callers then need not even name the
/// lock).
pub fn is_empty() -> bool {
    with(|o| o.is_empty())
}

/// Observers blocked now, for `INFO redislock`.
pub fn total() -> usize {
    with(|o| o.total())
}

/// Observers still watching the lock `id`.
pub fn count_of(id: &LockId) -> usize {
    with(|o| o.watching(id))
}

/// Blocks the calling client on the key `name` (the lock `id`) until the
/// holder of `id` differs from `saw`, or `timeout_ms` passes (0: no
/// limit). False if Redis could not block the client.
#[must_use]
pub fn block(ctx: &Context, name: &RedisString, id: LockId, saw: Saw, timeout_ms: u64) -> bool {
    let Some(client) = ffi::block_client_on_key(ctx, name, on_ready, on_unblock, on_disconnect)
    else {
        return false;
    };
    let handle = client.id();
    let watch = Watch {
        client: Some(client),
    };
    with(|o| o.add(handle, id, saw, watch));
    stats::OBSERVES.bump();
    if timeout_ms > 0 {
        scheduler::timeout_after(ctx, handle, timeout_ms);
    }
    true
}

/// The lock `id` may have changed: its observers are looked at in the next
/// pass of the scheduler.
pub fn changed(id: &LockId) {
    if is_empty() || !with(|o| o.mark(id)) {
        return;
    }
    pending();
}

/// Every observed lock `filter` picks may have changed (a flush, SWAPDB,
/// a load, a role change).
pub fn changed_where(filter: impl Fn(&LockId) -> bool) {
    if is_empty() || with(|o| o.mark_where(filter)) == 0 {
        return;
    }
    pending();
}

fn pending() {
    if let Some(ctx) = state::detached_context() {
        scheduler::reads_pending(&ctx);
    }
}

/// Whether locks are to be looked at or observers answered.
pub fn has_work() -> bool {
    with(|o| o.has_work()) || UNLINKED.with(|u| !u.borrow().is_empty())
}

/// A lock's value was unlinked from its name while observers exist.
pub fn unlinked(value: usize) {
    UNLINKED.with(|u| u.borrow_mut().push(value));
    pending();
}

/// A lock's value was freed.
pub fn freed(value: usize) {
    UNLINKED.with(|u| {
        let mut u = u.borrow_mut();
        if let Some(at) = u.iter().position(|&v| v == value) {
            u.swap_remove(at);
        }
    });
}

/// Whether a lock's value moved to another name since the last call
/// (unlinked, and not freed once its command was done).
pub fn take_moved() -> bool {
    UNLINKED.with(|u| {
        let mut u = u.borrow_mut();
        let moved = !u.is_empty();
        u.clear();
        u.shrink_to(16);
        moved
    })
}

/// The next lock to look at.
pub fn next_changed() -> Option<LockId> {
    with(|o| o.next_marked())
}

/// A look at `id` saw `seen`: the observers to whom it is news are woken
/// (all of them for a refusal), to be answered by `unblock_some`.
pub fn settle(id: &LockId, seen: Seen) {
    if matches!(seen, Seen::Redirected) {
        return;
    }
    let seen = Rc::new(seen);
    let woken = with(|o| o.wake(id, seen.holder(), &seen));
    if woken > 0 && count_of(id) == 0 {
        scheduler::cancel(&Job::Look(id.clone()));
    }
}

/// Unblocks up to `limit` woken observers, oldest first; how many it did.
/// Their answers are sent by Redis from the reply callback.
pub fn unblock_some(limit: usize) -> usize {
    let mut done = 0;
    while done < limit {
        let Some(handle) = with(|o| o.next_woken()) else {
            break;
        };
        scheduler::cancel(&Job::Deadline(handle));
        let client = with(|o| o.get_mut(handle).and_then(|x| x.value.client.take()));
        if let Some(client) = client {
            client.unblock();
            done += 1;
        }
    }
    done
}

/// An observer's deadline; false if `handle` is no observer (a waiter's).
/// A still watching observer is woken with no answer: nil.
pub fn on_deadline(handle: BlockedId) -> bool {
    let (known, timed_out) = with(|o| (o.get(handle).is_some(), o.time_out(handle)));
    if timed_out {
        stats::OBSERVE_TIMEOUTS.bump();
        let lock = with(|o| o.get(handle).map(|x| x.lock.clone()));
        if let Some(lock) = lock.filter(|l| count_of(l) == 0) {
            scheduler::cancel(&Job::Look(lock));
        }
        pending();
    }
    known
}

/// Forgets an observer that was answered or left, with its deadline, and
/// the look at its lock once nobody watches it.
fn forget(handle: BlockedId) -> Option<Stage<Rc<Seen>>> {
    scheduler::cancel(&Job::Deadline(handle));
    let observer = with(|o| o.remove(handle))?;
    if observer.stage.is_watching() && count_of(&observer.lock) == 0 {
        scheduler::cancel(&Job::Look(observer.lock.clone()));
    }
    // Where the server ended the wait itself (CLIENT UNBLOCK, a closed
    // connection, a redirect) before the module did, it frees the handle.
    if let Some(client) = observer.value.client {
        client.ended_by_server();
    }
    Some(observer.stage)
}

/// Sends a finished observation its answer: the holder, an error, or nil.
fn answer(ctx: &Context, stage: Option<Stage<Rc<Seen>>>) {
    match stage {
        Some(Stage::Woken(Some(seen))) => match &*seen {
            Seen::Holder { fence, data } => {
                reply::observed(ctx, *fence, data.as_deref());
            }
            Seen::Refused(e) => {
                reply::error(ctx, e);
            }
            Seen::Redirected => {
                raw::reply_with_null(ctx.ctx);
            }
        },
        Some(Stage::Woken(None) | Stage::Watching) | None => {
            raw::reply_with_null(ctx.ctx);
        }
    }
}

/// The server signalled the observed key ready (a key was added under its
/// name): the observer stays blocked. Changes reach observers through the
/// module's own looks.
unsafe extern "C" fn on_ready(
    _ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    raw::REDISMODULE_ERR as c_int
}

/// The answer of an observer whose wait ended (Redis calls it the timeout
/// callback): woken by a change or its deadline, once the module released
/// its handle; or `CLIENT UNBLOCK`, which ends the wait like a timeout
/// unless a change woke the observer already, whose answer is delivered.
unsafe extern "C" fn on_unblock(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    blocked::reply(ctx, |ctx, handle| {
        let stage = forget(handle);
        if matches!(stage, Some(Stage::Watching)) {
            stats::OBSERVE_TIMEOUTS.bump();
        }
        answer(ctx, stage);
    })
}

/// An observer's connection closed, or the server ended its wait with an
/// answer of its own (a redirect of a slot that left, every blocked call
/// ended on becoming a replica): it leaves at once.
unsafe extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    blocked::disconnect(ctx, bc, |_, handle| {
        forget(handle);
    });
}
