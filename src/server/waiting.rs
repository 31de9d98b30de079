//! `BLOCK`: clients waiting inside the server, served first come, first
//! served, the moment their lock is free.
//!
//! Redis 7.0's key-blocking API cannot wake anyone when a key is deleted or
//! expires, so the module keeps its own queue per lock and grants to the
//! head of it directly: in the command that freed the lock (release), or in
//! a 0 ms timer scheduled when Redis unlinks a lock (DEL, expiry, eviction)
//! or flushes a database, since writing from inside those is unsafe. The
//! data type's unlink callback fires only for locks, so other keys' writes
//! and expiries never call into the module. A
//! timer armed at the holder's expiry makes the handoff prompt even when
//! nobody touches the key. A newcomer never overtakes: `LOCK.ACQUIRE` on a
//! free lock with waiters serves the head first.
//!
//! No borrow of the queue is held across a call into Redis: opening a key
//! can expire it and run our key-event handler re-entrantly.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::time::Duration;

use redis_module::{raw, Context, RedisString};

use crate::core::errors::LockError;
use crate::core::lock::{self, LockRef};
use crate::core::waiters::{Refusal, Stage, Waiter, Waiters};
use crate::server::ffi::{self, BlockedHandle, KeyKind, LockKey};
use crate::server::{cluster, guard, reply, state, stats};

/// A lock by database and key name.
pub type LockId = (i32, Vec<u8>);

/// What a waiter asked for.
pub struct Request {
    token: Vec<u8>,
    ttl_ms: u64,
    /// Tells this wait apart from a later one that reuses the same handle.
    seq: u64,
}

#[derive(Default)]
struct Registry {
    next_seq: u64,
    waiters: Waiters<BlockedHandle, LockId, Request>,
    /// The expiry time each lock's pending timer is armed for.
    armed: HashMap<LockId, i64>,
}

thread_local! {
    // Redis calls modules on its main thread only.
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    REGISTRY.with(|r| f(&mut r.borrow_mut()))
}

/// Clients waiting for the lock `name` in the context's database.
pub fn count(ctx: &Context, name: &[u8]) -> usize {
    with(|r| {
        if r.waiters.is_empty() {
            return 0;
        }
        r.waiters.count(&(ffi::selected_db(ctx), name.to_vec()))
    })
}

/// Total number of waiting clients.
pub fn total() -> usize {
    with(|r| r.waiters.total())
}

/// Blocks the calling client until it is granted `name` or `timeout_ms`
/// passes (0: no limit). `expire_at` is the current holder's expiry.
///
/// The deadline is the module's own timer, not Redis's blocked-client
/// timeout: on Redis 7.0 a client whose timeout is processed in the same
/// event-loop pass as its grant is unblocked with no reply at all. With one
/// timer deciding, every wait ends through exactly one `unblock_client`, and
/// the reply callback answers the grant or nil from the waiter's stage.
pub fn block(
    ctx: &Context,
    name: &RedisString,
    token: &[u8],
    ttl_ms: u64,
    timeout_ms: u64,
    expire_at: Option<i64>,
) {
    let id: LockId = (ffi::selected_db(ctx), name.to_vec());
    let handle = ffi::block_client(ctx, on_reply, on_unblock, on_disconnect);
    let seq = with(|r| {
        r.next_seq += 1;
        let seq = r.next_seq;
        r.waiters.enqueue(
            handle,
            id.clone(),
            Request {
                token: token.to_vec(),
                ttl_ms,
                seq,
            },
        );
        seq
    });
    stats::WAITS.bump();
    if let Some(at) = expire_at {
        arm_expiry(ctx, &id, at);
    }
    if timeout_ms > 0 {
        ctx.create_timer(
            Duration::from_millis(timeout_ms),
            on_deadline,
            (handle, seq),
        );
    }
}

/// A waiter's deadline: if it is still waiting, it leaves the queue and its
/// reply callback answers nil.
fn on_deadline(_ctx: &Context, (handle, seq): (BlockedHandle, u64)) {
    guard::callback((), || {
        let timed_out = with(|r| {
            let waiting = r
                .waiters
                .get(handle)
                .is_some_and(|w| w.request.seq == seq && w.stage == Stage::Waiting);
            if waiting {
                r.waiters.remove(handle);
            }
            waiting
        });
        if timed_out {
            stats::WAIT_TIMEOUTS.bump();
            ffi::unblock_client(handle);
        }
    })
}

/// Grants `name` (in the context's database) to its first waiter if the
/// lock is free. Call only where writing is allowed: a command or a timer.
pub fn serve(ctx: &Context, name: &RedisString) {
    let id: LockId = (ffi::selected_db(ctx), name.to_vec());
    let Some((handle, token, ttl_ms)) = with(|r| {
        r.waiters
            .head(&id)
            .map(|(h, req)| (h, req.token.clone(), req.ttl_ms))
    }) else {
        return;
    };
    let mut key = LockKey::open(ctx, name, true);
    match key.kind() {
        KeyKind::Empty if !cluster::may_hand_off_here(ctx, name) => {
            drop(key);
            let refused = with(|r| r.waiters.refuse_all(&id, Refusal::SlotMoved));
            refused.into_iter().for_each(ffi::unblock_client);
            return;
        }
        KeyKind::Empty => {}
        KeyKind::Lock => {
            // Still held (extended, or freed and retaken): wait for its expiry.
            if let Some(at) = key.expire_at() {
                drop(key);
                arm_expiry(ctx, &id, at);
            }
            return;
        }
        // Something else took the name; waiters wait for it to go.
        KeyKind::Other => return,
    }
    let Some(expire_at) = lock::expiry_at(ffi::now_ms(), ttl_ms) else {
        return;
    };
    // Exhausted fences: nobody can be granted; waiters time out.
    let Some(fence) = state::with_clock(|c| c.next_fence(ffi::now_ms())) else {
        return;
    };
    key.set_lock(LockRef::new(&token, fence));
    key.set_expire_at(expire_at);
    drop(key);
    ffi::replicate_grant(ctx, name, &token, fence, expire_at);
    ffi::notify(ctx, c"lock.handoff", name);
    stats::HANDOFFS.bump();
    let more = with(|r| {
        r.waiters.grant(handle, fence);
        r.waiters.count(&id) > 0
    });
    ffi::unblock_client(handle);
    if more {
        arm_expiry(ctx, &id, expire_at);
    }
}

/// Makes sure a timer fires just after `expire_at` (Redis expires a key once
/// the clock is past its expiry) to hand the lock on if nobody touches it.
pub fn arm_expiry(ctx: &Context, id: &LockId, expire_at: i64) {
    let needed = with(|r| {
        if r.waiters.count(id) == 0 {
            return false;
        }
        match r.armed.get(id) {
            Some(&at) if at <= expire_at => false,
            _ => {
                r.armed.insert(id.clone(), expire_at);
                true
            }
        }
    });
    if needed {
        let delay = (expire_at + 1 - ffi::now_ms()).max(0) as u64;
        ctx.create_timer(
            Duration::from_millis(delay),
            on_expiry_timer,
            (id.clone(), expire_at),
        );
    }
}

fn on_expiry_timer(ctx: &Context, (id, at): (LockId, i64)) {
    guard::callback((), || {
        with(|r| {
            if r.armed.get(&id) == Some(&at) {
                r.armed.remove(&id);
            }
        });
        serve_later_now(ctx, &id);
    })
}

/// Serves `id` from a timer's context.
fn serve_later_now(ctx: &Context, id: &LockId) {
    if ffi::select_db(ctx, id.0) {
        serve(ctx, &ctx.create_string(id.1.as_slice()));
    }
}

/// Schedules a handoff for a lock freed where writing is not allowed (a key
/// event, a flush).
fn serve_soon(ctx: &Context, id: LockId) {
    ctx.create_timer(
        Duration::ZERO,
        |ctx: &Context, id: LockId| guard::callback((), || serve_later_now(ctx, &id)),
        id,
    );
}

/// A lock left the keyspace (release, DEL, UNLINK, expiry, eviction, the
/// source side of RENAME, MOVE and MIGRATE): Redis is in the middle of
/// deleting it, so any handoff is scheduled, not made here.
pub fn on_lock_unlinked(db: i32, key: &[u8]) {
    if with(|r| r.waiters.is_empty()) {
        return;
    }
    let id: LockId = (db, key.to_vec());
    if with(|r| r.waiters.count(&id) > 0) {
        if let Some(ctx) = state::detached_context() {
            serve_soon(&ctx, id);
        }
    }
}

/// A server that becomes a replica grants nothing: its waiters are told so.
pub fn on_demoted() {
    let refused = with(|r| r.waiters.refuse_everyone(Refusal::Demoted));
    refused.into_iter().for_each(ffi::unblock_client);
}

/// SWAPDB exchanges two databases without key events: every lock with
/// waiters in either is looked at again.
pub fn on_swapped(ctx: &Context, first: i32, second: i32) {
    let ids = with(|r| r.waiters.locks_where(|(d, _)| *d == first || *d == second));
    for id in ids {
        serve_soon(ctx, id);
    }
}

/// FLUSHDB / FLUSHALL raise no key events: serve every lock with waiters in
/// the flushed database(s) once the flush is done.
pub fn on_flushed(ctx: &Context, db: i32) {
    let ids = with(|r| r.waiters.locks_where(|(d, _)| db == -1 || *d == db));
    for id in ids {
        serve_soon(ctx, id);
    }
}

/// Sends a finished wait its answer: the grant, nil, or a redirect.
fn answer(ctx: &Context, waiter: Option<&Waiter<LockId, Request>>) {
    match waiter.map(|w| (w.stage, &w.request.token)) {
        Some((Stage::Granted { fence }, token)) => {
            reply::grant(ctx, token, fence);
        }
        Some((Stage::Refused(why), _)) => {
            let error = match why {
                Refusal::SlotMoved => LockError::SlotMoved,
                Refusal::Demoted => LockError::ReadOnly,
            };
            reply::error(ctx, &error);
        }
        Some((Stage::Waiting, _)) | None => {
            raw::reply_with_null(ctx.ctx);
        }
    }
}

/// The reply of a client whose wait ended: granted, timed out at its
/// deadline, or redirected.
unsafe extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Context::new(ctx);
    guard::callback(raw::REDISMODULE_OK as c_int, || {
        let handle = ffi::blocked_handle(&ctx);
        answer(&ctx, with(|r| r.waiters.remove(handle)).as_ref());
        raw::REDISMODULE_OK as c_int
    })
}

/// `CLIENT UNBLOCK` (Redis calls it the timeout callback; the module's own
/// deadline timer never goes through it). Redis calls it only for a client
/// not unblocked yet, so the waiter is normally still in the queue; if it
/// was granted after all, the grant is delivered, never dropped.
unsafe extern "C" fn on_unblock(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Context::new(ctx);
    guard::callback(raw::REDISMODULE_OK as c_int, || {
        let handle = ffi::blocked_handle(&ctx);
        let waiter = with(|r| r.waiters.remove(handle));
        answer(&ctx, waiter.as_ref());
        if waiter.is_some_and(|w| w.stage == Stage::Waiting) {
            stats::WAIT_TIMEOUTS.bump();
            ffi::unblock_client(handle);
        }
        raw::REDISMODULE_OK as c_int
    })
}

/// A waiting client went away. If it had been granted the lock but not yet
/// told, give the lock back so the next waiter does not wait for its expiry.
unsafe extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let ctx = Context::new(ctx);
    guard::callback((), || {
        let handle = bc as BlockedHandle;
        let Some(w) = with(|r| r.waiters.remove(handle)) else {
            return;
        };
        match w.stage {
            Stage::Waiting => ffi::unblock_client(handle),
            // Already unblocked; nothing to give back.
            Stage::Refused(_) => {}
            Stage::Granted { fence } => {
                let revoke = (w.lock, w.request.token, fence);
                ctx.create_timer(
                    Duration::ZERO,
                    |ctx: &Context, r: (LockId, Vec<u8>, u64)| {
                        guard::callback((), || revoke_undelivered(ctx, r))
                    },
                    revoke,
                );
            }
        }
    })
}

/// Releases a grant whose client disconnected before the reply.
fn revoke_undelivered(ctx: &Context, (id, token, fence): (LockId, Vec<u8>, u64)) {
    if !ffi::select_db(ctx, id.0) {
        return;
    }
    let name = ctx.create_string(id.1.as_slice());
    let mut key = LockKey::open(ctx, &name, true);
    let ours = key
        .lock()
        .is_some_and(|l| l.fence() == fence && l.is_held_by(&token));
    if ours {
        key.delete();
        drop(key);
        ffi::replicate_delete(ctx, &name);
        ffi::notify(ctx, c"lock.released", &name);
        serve(ctx, &name);
    }
}
