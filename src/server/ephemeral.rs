//! `EPHEMERAL`: holds bound to the connection that asked for them, released
//! the moment it closes.
//!
//! Two small indexes, kept only for bound holds: lock → binding, and client
//! → its bound locks, so a disconnect looks at that client's holds only (no
//! scan of all locks). A binding names the exact grant (token and fence):
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

struct Binding {
    client: u64,
    token: Vec<u8>,
    fence: u64,
}

#[derive(Default)]
struct Bindings {
    by_lock: HashMap<LockId, Binding>,
    by_client: HashMap<u64, HashSet<LockId>>,
}

impl Bindings {
    fn unbind(&mut self, lock: &LockId) {
        if let Some(b) = self.by_lock.remove(lock) {
            if let Some(locks) = self.by_client.get_mut(&b.client) {
                locks.remove(lock);
                if locks.is_empty() {
                    self.by_client.remove(&b.client);
                }
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
/// earlier binding of the lock.
pub fn bind(lock: LockId, client: u64, token: &[u8], fence: u64) {
    with(|b| {
        b.unbind(&lock);
        b.by_client.entry(client).or_default().insert(lock.clone());
        b.by_lock.insert(
            lock,
            Binding {
                client,
                token: token.to_vec(),
                fence,
            },
        );
    });
}

/// The lock is no longer bound (released, re-granted without `EPHEMERAL`,
/// gone from the keyspace).
pub fn unbind(lock: &LockId) {
    if with(|b| b.by_lock.is_empty()) {
        return;
    }
    with(|b| b.unbind(lock));
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
            .filter(|b| b.fence == fence && b.token == token)
            .map_or(0, |b| b.client)
    })
}

/// Number of bound holds, for `INFO redislock`.
pub fn count() -> usize {
    with(|b| b.by_lock.len())
}

/// A connection closed: each of its bound holds is released through the
/// scheduler (a server event is no place to write from).
fn on_client_gone(ctx: &Context, client: u64) {
    let bound: Vec<(LockId, Vec<u8>, u64)> = with(|b| {
        let Some(locks) = b.by_client.remove(&client) else {
            return Vec::new();
        };
        locks
            .into_iter()
            .filter_map(|lock| {
                let binding = b.by_lock.remove(&lock)?;
                Some((lock, binding.token, binding.fence))
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
