//! `EPHEMERAL`: holds bound to the connection that asked for them, released
//! the moment it closes.
//!
//! Two small indexes, kept only for bound holds: lock → its bound holders,
//! and client → its bound holds, so a disconnect looks at that client's
//! holds only (no scan of all locks). A binding names the exact grant (token and fence):
//! the release on disconnect goes through the scheduler as a revoke of that
//! grant, the same path as `LOCK.RELEASE` (replicated as a release, handed
//! to waiters, notified), and does nothing if the lock has moved on. The
//! binding lives in this server's memory only: a restart, `DEBUG RELOAD` or
//! failover leaves the hold with its lease.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;

use redis_module::{raw, Context};

use crate::server::scheduler::{self, Job};
use crate::server::waiting::LockId;
use crate::server::{ffi, guard, stats};

/// One bound hold: a holder of a lock, by token.
type HoldId = (LockId, Vec<u8>);

#[derive(Default)]
struct Bindings {
    /// lock → token → (client, fence)
    by_lock: HashMap<LockId, HashMap<Vec<u8>, (u64, u64)>>,
    by_client: HashMap<u64, HashSet<HoldId>>,
    bound: usize,
}

impl Bindings {
    fn unbind_holder(&mut self, lock: &LockId, token: &[u8]) {
        let Some(holds) = self.by_lock.get_mut(lock) else {
            return;
        };
        let removed = holds.remove(token);
        if holds.is_empty() {
            self.by_lock.remove(lock);
        }
        if let Some((client, _)) = removed {
            self.bound -= 1;
            self.forget_client_hold(client, &(lock.clone(), token.to_vec()));
        }
    }

    fn unbind(&mut self, lock: &LockId) {
        let Some(holds) = self.by_lock.remove(lock) else {
            return;
        };
        self.bound -= holds.len();
        for (token, (client, _)) in holds {
            self.forget_client_hold(client, &(lock.clone(), token));
        }
    }

    fn forget_client_hold(&mut self, client: u64, hold: &HoldId) {
        if let Some(holds) = self.by_client.get_mut(&client) {
            holds.remove(hold);
            if holds.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }
}

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
    with(|b| {
        b.unbind_holder(&lock, token);
        b.by_client
            .entry(client)
            .or_default()
            .insert((lock.clone(), token.to_vec()));
        b.by_lock
            .entry(lock)
            .or_default()
            .insert(token.to_vec(), (client, fence));
        b.bound += 1;
    });
}

/// Whether any hold is bound at all (the common case is none, and then
/// callers need not even name the lock).
pub fn any() -> bool {
    with(|b| b.bound > 0)
}

/// No hold of the lock is bound any more (released, gone from the keyspace).
pub fn unbind(lock: &LockId) {
    if with(|b| b.by_lock.is_empty()) {
        return;
    }
    with(|b| b.unbind(lock));
}

/// `token`'s hold of the lock is no longer bound (released, re-granted
/// without `EPHEMERAL`, lease ended).
pub fn unbind_holder(lock: &LockId, token: &[u8]) {
    if with(|b| b.by_lock.is_empty()) {
        return;
    }
    with(|b| b.unbind_holder(lock, token));
}

/// Drops the bindings of locks matching `filter` (a flushed or swapped
/// database, or every lock when the server becomes a replica).
pub fn unbind_where(filter: impl Fn(&LockId) -> bool) {
    with(|b| {
        let gone: Vec<LockId> = b.by_lock.keys().filter(|l| filter(l)).cloned().collect();
        for lock in gone {
            b.unbind(&lock);
        }
    });
}

/// The connection `lock`'s grant `(token, fence)` is bound to; 0 if none.
pub fn client_of(lock: &LockId, token: &[u8], fence: u64) -> u64 {
    with(|b| {
        b.by_lock
            .get(lock)
            .and_then(|holds| holds.get(token))
            .filter(|(_, f)| *f == fence)
            .map_or(0, |(client, _)| *client)
    })
}

/// Number of bound holds, for `INFO redislock`.
pub fn count() -> usize {
    with(|b| b.bound)
}

/// A connection closed: each of its bound holds is released through the
/// scheduler (a server event is no place to write from).
fn on_client_gone(ctx: &Context, client: u64) {
    let bound: Vec<(LockId, Vec<u8>, u64)> = with(|b| {
        let Some(holds) = b.by_client.remove(&client) else {
            return Vec::new();
        };
        holds
            .into_iter()
            .filter_map(|(lock, token)| {
                let lock_holds = b.by_lock.get_mut(&lock)?;
                let (_, fence) = lock_holds.remove(&token)?;
                if lock_holds.is_empty() {
                    b.by_lock.remove(&lock);
                }
                b.bound -= 1;
                Some((lock, token, fence))
            })
            .collect()
    });
    for (lock, token, fence) in bound {
        stats::EPHEMERAL_RELEASES.bump();
        scheduler::soon(ctx, Job::Revoke(lock, token, fence));
    }
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
        if sub != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED
            || with(|b| b.by_client.is_empty())
        {
            return;
        }
        on_client_gone(&Context::new(ctx), ffi::changed_client_id(data));
    })
}
