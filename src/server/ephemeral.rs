//! `EPHEMERAL`: holds bound to the connection that asked for them, released
//! the moment it closes.
//!
//! The bookkeeping is the core's ([`Bindings`]); this file keeps it for the
//! server's one thread. A closing connection's holds count as gone at
//! once: the disconnect only marks them orphans (a server event is no place
//! to write from, and a connection may hold 100,000 of them); the
//! lock-lifecycle layer (`locks`) releases a lock's orphans before a
//! command writes it, and the rest from the scheduler in time-sliced
//! passes, each as a revoke of the exact grant (token and fence). The
//! binding lives in this server's memory only: a restart, `DEBUG RELOAD` or
//! failover leaves the hold with its lease. Ends still owed (a connection
//! closed while the server let the module write nothing, a client pause)
//! go into RDB files, and are owed again once the file is loaded.

use std::cell::RefCell;

use crate::core::bindings::{Bindings, LockId};

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

/// Takes `lock`'s holds whose connection closed, to be released now: a
/// command about to write the lock sees them gone.
pub fn take_orphans(lock: &LockId) -> Vec<(Vec<u8>, u64)> {
    if with(|b| b.orphans()) == 0 {
        return Vec::new();
    }
    with(|b| b.take_orphans(lock))
}

/// Takes the next hold of a closed connection, to be released.
pub fn next_orphan() -> Option<(LockId, Vec<u8>, u64)> {
    with(Bindings::next_orphan)
}

/// A connection closed: its holds are orphans from now on. Returns how
/// many there are.
pub fn close(client: u64) -> usize {
    with(|b| if b.live() == 0 { 0 } else { b.close(client) })
}

/// The ends still owed: holds of closed connections not released yet, as
/// (lock, token, fence).
pub fn owed() -> Vec<(LockId, Vec<u8>, u64)> {
    with(|b| b.orphan_holds())
}

/// Ends owed by the file just loaded: released as a closed connection's
/// holds are. Returns how many.
pub fn restore_owed(holds: Vec<(LockId, Vec<u8>, u64)>) -> usize {
    with(|b| b.restore_orphans(holds))
}
