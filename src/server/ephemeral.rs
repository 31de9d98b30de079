//! `EPHEMERAL`: holds bound to the connection that asked for them, released
//! the moment it closes.
//!
//! The bookkeeping is the core's ([`Bindings`]). A closing connection's
//! holds count as gone at once: the disconnect only marks them orphans (a
//! server event is no place to write from, and a connection may hold
//! 100,000 of them); a command that writes a lock first releases that
//! lock's orphans, and the scheduler releases the rest in time-sliced
//! passes. Each release is a revoke of the exact grant (token and fence),
//! the same path as `LOCK.RELEASE` (replicated as a release, handed to
//! waiters, notified), and does nothing if the lock has moved on. The
//! binding lives in this server's memory only: a restart, `DEBUG RELOAD` or
//! failover leaves the hold with its lease.

use std::cell::RefCell;
use std::ffi::c_void;

use redis_module::{raw, Context};

use crate::core::bindings::Bindings;
use crate::server::waiting::LockId;
use crate::server::{ffi, guard, lockops, scheduler, stats};

thread_local! {
    // Redis calls modules on its main thread only.
    static BINDINGS: RefCell<Bindings> = RefCell::new(Bindings::default());
}

fn with<R>(f: impl FnOnce(&mut Bindings) -> R) -> R {
    BINDINGS.with(|b| f(&mut b.borrow_mut()))
}

/// Binds the grant `(token, fence)` of `lock` to `client`, replacing any
/// earlier binding of that holder.
pub fn bind(lock: LockId, client: u64, token: &[u8], fence: u64) {
    with(|b| b.bind(lock, client, token, fence));
}

/// Whether any hold is bound at all (the common case is none, and then
/// callers need not even name the lock).
pub fn any() -> bool {
    with(|b| !b.is_empty())
}

/// No hold of the lock is bound any more (released, gone from the keyspace).
pub fn unbind(lock: &LockId) {
    with(|b| b.unbind(lock));
}

/// `token`'s hold of the lock is no longer bound (released, re-granted
/// without `EPHEMERAL`, lease ended).
pub fn unbind_holder(lock: &LockId, token: &[u8]) {
    with(|b| b.unbind_holder(lock, token));
}

/// Drops the bindings of a flushed or swapped database (`db` -1: all).
pub fn unbind_db(db: i32) {
    with(|b| {
        if db == -1 {
            b.clear();
        } else if !b.is_empty() {
            b.unbind_db(db);
        }
    });
}

/// Drops every binding: a replica writes only what its master sends.
pub fn unbind_all() {
    with(Bindings::clear);
}

/// The live connection `lock`'s grant `(token, fence)` is bound to; 0 if none.
pub fn client_of(lock: &LockId, token: &[u8], fence: u64) -> u64 {
    with(|b| b.client_of(lock, token, fence).unwrap_or(0))
}

/// Whether that grant's connection closed and its release is pending.
pub fn is_orphan(lock: &LockId, token: &[u8], fence: u64) -> bool {
    with(|b| b.is_orphan(lock, token, fence))
}

/// Number of holds bound to live connections, for `INFO redislock`.
pub fn count() -> usize {
    with(|b| b.live())
}

/// Holds of closed connections still to be released, for `INFO redislock`.
pub fn orphans() -> usize {
    with(|b| b.orphans())
}

/// Releases `lock`'s holds whose connection closed, now: a command about
/// to write the lock sees them gone. Call only where writing is allowed.
pub fn release_orphans_of(ctx: &Context, lock: &LockId) {
    if with(|b| b.orphans()) == 0 {
        return;
    }
    let taken = with(|b| b.take_orphans(lock));
    if taken.is_empty() {
        return;
    }
    let db = ffi::selected_db(ctx);
    for (token, fence) in taken {
        stats::EPHEMERAL_RELEASES.bump();
        lockops::revoke(ctx, lock, &token, fence);
    }
    // The command goes on in the database it was sent to.
    ffi::select_db(ctx, db);
}

/// Releases the next hold of a closed connection, from a scheduler pass
/// that checked the server's state; false if none is left.
pub fn release_next_orphan(ctx: &Context) -> bool {
    let Some((lock, token, fence)) = with(Bindings::next_orphan) else {
        return false;
    };
    stats::EPHEMERAL_RELEASES.bump();
    lockops::revoke(ctx, &lock, &token, fence);
    true
}

/// Subscribes to client changes; false if Redis refused.
pub fn subscribe(ctx: &Context) -> bool {
    ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_CLIENT_CHANGE, on_client_change)
}

unsafe extern "C" fn on_client_change(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    guard::callback((), || {
        if sub != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED || with(|b| b.live() == 0) {
            return;
        }
        // A connection closed: its holds are orphans from now on, released
        // by the scheduler in slices.
        if with(|b| b.close(ffi::changed_client_id(data))) > 0 {
            scheduler::orphans_pending(&Context::new(ctx));
        }
    })
}
