//! Locks that leave or move without a command of ours — an unlink (DEL,
//! UNLINK, expiry, eviction, an overwrite, the source side of RENAME, MOVE
//! and MIGRATE), a flush, SWAPDB — and a demotion: their bindings and
//! lease-end looks go, and their waiters are served from the scheduler,
//! since Redis is in the middle of changing the keyspace and writing from
//! inside its callbacks is unsafe. The data type's unlink callback fires
//! only for locks, so other keys' writes and expiries never call in here.
//! Observers of the names involved look again, as they do when a lock is
//! restored or copied, a load ends or the server's role changes.

use std::cell::Cell;

use crate::core::waiters::Refusal;
use crate::server::ffi::LockId;
use crate::server::scheduler::{self, Job};
use crate::server::{ephemeral, observing, state, waiting};

use super::observed;

thread_local! {
    /// Our own command is unlinking a lock and serves its waiters itself
    /// right after (a release, ended leases): no look is scheduled, which
    /// would cost a timer pass per handoff.
    static CALLER_SERVES: Cell<bool> = const { Cell::new(false) };
}

/// Restores the flag when the unlinking code returns (or unwinds).
struct CallerServes(bool);

impl Drop for CallerServes {
    fn drop(&mut self) {
        CALLER_SERVES.with(|c| c.set(self.0));
    }
}

/// Runs `unlink`, after which the caller serves the lock's waiters itself.
pub fn then_caller_serves<R>(unlink: impl FnOnce() -> R) -> R {
    let _restore = CallerServes(CALLER_SERVES.with(|c| c.replace(true)));
    unlink()
}

/// Schedules a look at `id` if clients wait for it.
fn serve_soon(id: LockId) {
    if waiting::count_of(&id) == 0 {
        return;
    }
    if let Some(ctx) = state::detached_context() {
        scheduler::soon(&ctx, Job::Serve(id));
    }
}

/// A lock left the keyspace: any handoff is scheduled, not made here.
pub fn on_lock_unlinked(db: i32, key: &[u8], with_holders: bool, value: usize) {
    if !observing::is_empty() {
        // If the value is not freed, it moved under a name no event
        // tells (RENAME, MOVE): every observer looks again.
        observing::unlinked(value);
        observed::changed_id(&LockId::new(db, key));
    }
    if !with_holders && !ephemeral::any() && waiting::is_empty() {
        // The common case, on every expiry and release: nothing to do.
        return;
    }
    let id = LockId::new(db, key);
    ephemeral::unbind(&id);
    if with_holders {
        scheduler::cancel(&Job::Leases(id.clone()));
    }
    if waiting::is_empty() || CALLER_SERVES.with(Cell::get) {
        return;
    }
    serve_soon(id);
}

/// A server that becomes a replica grants nothing: its waiters are told so.
pub fn on_demoted() {
    ephemeral::unbind_all();
    waiting::refuse_everyone(Refusal::Demoted);
    observed::changed_in(-1);
}

/// A promotion: observers look again (their locks' ends are this
/// server's to watch now).
pub fn on_promoted() {
    observed::changed_in(-1);
}

/// Whether anyone observes a lock (the callbacks then need not even name
/// it).
pub fn any_observer() -> bool {
    !observing::is_empty()
}

/// A lock was stored under `id` without a command of ours (`RESTORE`,
/// `COPY`, a load): its observers look again.
pub fn on_lock_stored(id: &LockId) {
    observed::changed_id(id);
}

/// A lock's value was freed: it did not move to another name.
pub fn on_lock_freed(value: usize) {
    observing::freed(value);
}

/// A load ended (start-up, `DEBUG RELOAD`, a full sync): observers look
/// again at whatever is there now.
pub fn on_loaded() {
    observed::changed_in(-1);
}

/// SWAPDB exchanges two databases without key events: every lock with
/// waiters in either is looked at again.
pub fn on_swapped(first: i32, second: i32) {
    ephemeral::unbind_db(first);
    ephemeral::unbind_db(second);
    scheduler::swap_leases(first, second);
    observed::changed_in(first);
    observed::changed_in(second);
    if waiting::is_empty() {
        return;
    }
    let ids = waiting::locks_where(|id| id.db() == first || id.db() == second);
    ids.into_iter().for_each(serve_soon);
}

/// FLUSHDB / FLUSHALL raise no key events: serve every lock with waiters in
/// the flushed database(s) once the flush is done.
pub fn on_flushed(db: i32) {
    ephemeral::unbind_db(db);
    scheduler::forget_leases_in(db);
    observed::changed_in(db);
    if waiting::is_empty() {
        return;
    }
    let ids = waiting::locks_where(|id| db == -1 || id.db() == db);
    ids.into_iter().for_each(serve_soon);
}
