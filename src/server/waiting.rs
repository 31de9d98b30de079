//! `BLOCK`: clients waiting inside the server, served first come, first
//! served, the moment their lock is free.
//!
//! Redis 7.0's key-blocking API cannot wake anyone when a key is deleted or
//! expires, so the module keeps its own queue per lock and grants to the
//! head of it directly: in the command that freed the lock (release), or
//! from the scheduler when Redis unlinks a lock (DEL, expiry, eviction, an
//! overwrite) or flushes a database, since writing from inside those is
//! unsafe. The data type's unlink callback fires only for locks, so other
//! keys' writes and expiries never call into the module. While clients
//! wait, the scheduler also looks at the lock just after the holder's
//! expiry, so the handoff is prompt even when nobody touches the key. A
//! newcomer never overtakes: `LOCK.ACQUIRE` on a free lock with waiters
//! serves the head first.
//!
//! No borrow of the queue is held across a call into Redis: opening a key
//! can expire it and run our unlink callback re-entrantly.

use std::cell::RefCell;
use std::ffi::c_int;

use redis_module::{raw, Context, RedisString};

use crate::core::errors::LockError;
use crate::core::grant::{self, Decision, Want};
use crate::core::lock;
use crate::core::waiters::{Refusal, Stage, Waiter, Waiters};
use crate::server::ffi::{self, BlockedHandle, KeyKind, LockKey};
use crate::server::held;
use crate::server::scheduler::{self, Job};
use crate::server::{cluster, ephemeral, guard, lockops, reply, state, stats};

/// A lock by database and key name.
pub type LockId = (i32, Vec<u8>);

/// What a waiter asked for.
pub struct Request {
    token: Vec<u8>,
    ttl_ms: u64,
    /// Exclusive, shared, or a semaphore place.
    want: Want,
    /// With `EPHEMERAL`: the waiting connection, which the grant is bound to.
    bind_to: Option<u64>,
}

impl Request {
    pub fn new(token: &[u8], want: Want, ttl_ms: u64, bind_to: Option<u64>) -> Request {
        Request {
            token: token.to_vec(),
            ttl_ms,
            want,
            bind_to,
        }
    }
}

thread_local! {
    // Redis calls modules on its main thread only.
    static WAITERS: RefCell<Waiters<BlockedHandle, LockId, Request>> =
        RefCell::new(Waiters::default());
}

fn with<R>(f: impl FnOnce(&mut Waiters<BlockedHandle, LockId, Request>) -> R) -> R {
    WAITERS.with(|w| f(&mut w.borrow_mut()))
}

pub fn lock_id(ctx: &Context, name: &[u8]) -> LockId {
    (ffi::selected_db(ctx), name.to_vec())
}

/// Clients waiting for the lock `name` in the context's database.
pub fn count(ctx: &Context, name: &[u8]) -> usize {
    if with(|w| w.is_empty()) {
        return 0;
    }
    with(|w| w.count(&lock_id(ctx, name)))
}

/// Total number of waiting clients.
pub fn total() -> usize {
    with(|w| w.total())
}

/// Forgets a waiter that was answered or left, with its deadline; and the
/// lock's pending look-again once nobody waits for it.
fn forget(handle: BlockedHandle) -> Option<Waiter<LockId, Request>> {
    scheduler::cancel(&Job::Deadline(handle));
    let waiter = with(|w| w.remove(handle))?;
    if with(|w| w.count(&waiter.lock)) == 0 {
        scheduler::cancel(&Job::Serve(waiter.lock.clone()));
    }
    Some(waiter)
}

/// Blocks the calling client until it is granted `name` or `timeout_ms`
/// passes (0: no limit). `held_until` is when the key's holds may next
/// change by themselves (the holder's expiry, the first lease to end).
///
/// The deadline is the module's own, not Redis's blocked-client timeout: on
/// Redis 7.0 a client whose timeout is processed in the same event-loop
/// pass as its grant is unblocked with no reply at all. With the scheduler
/// deciding, every wait ends through exactly one `unblock_client`, and the
/// reply callback answers the grant or nil from the waiter's stage.
pub fn block(
    ctx: &Context,
    name: &RedisString,
    request: Request,
    timeout_ms: u64,
    held_until: Option<i64>,
) {
    let id = lock_id(ctx, name);
    let handle = ffi::block_client(ctx, on_reply, on_unblock, on_disconnect);
    with(|w| w.enqueue(handle, id.clone(), request));
    stats::WAITS.bump();
    if let Some(at) = held_until {
        scheduler::at(ctx, Job::Serve(id), at.saturating_add(1));
    }
    if timeout_ms > 0 {
        let deadline = ffi::now_ms().saturating_add(timeout_ms as i64);
        scheduler::at(ctx, Job::Deadline(handle), deadline);
    }
}

/// A waiter's deadline: if it is still waiting, it leaves the queue and its
/// reply callback answers nil.
pub fn on_deadline(handle: BlockedHandle) {
    let waiting = with(|w| w.get(handle).is_some_and(|w| w.stage == Stage::Waiting));
    if waiting {
        forget(handle);
        stats::WAIT_TIMEOUTS.bump();
        ffi::unblock_client(handle);
    }
}

/// The lock `name`, held until `expire_at`, is to be looked at again just
/// after that if clients wait for it (a re-grant or extend moved it).
pub fn watch_expiry(ctx: &Context, name: &RedisString, expire_at: i64) {
    if with(|w| w.is_empty()) {
        return;
    }
    let id = lock_id(ctx, name);
    if with(|w| w.count(&id)) > 0 {
        scheduler::at(ctx, Job::Serve(id), expire_at.saturating_add(1));
    }
}

/// Grants `name` (in the context's database) to the waiters at the head of
/// its queue that fit now, in order, as the core's plan says: the first
/// waiter, then each following one while it fits (consecutive shared
/// waiters; semaphore waiters while places are free). Call only where
/// writing is allowed: a command, or a scheduler job that checked the
/// server's state.
pub fn serve(ctx: &Context, name: &RedisString) {
    if with(|w| w.is_empty()) {
        return;
    }
    let id = lock_id(ctx, name);
    if with(|w| w.count(&id)) == 0 {
        return;
    }
    // Holds whose connection closed are gone: their room goes to the
    // waiters now, not when the scheduler comes to them.
    ephemeral::release_orphans_of(ctx, &id);
    if with(|w| w.count(&id)) == 0 {
        return;
    }
    let key = LockKey::open(ctx, name, true);
    if key.kind() == KeyKind::Empty && !cluster::may_hand_off_here(ctx, name) {
        drop(key);
        refuse_all(&id, Refusal::SlotMoved);
        return;
    }
    if key.kind() == KeyKind::Other || key.gate().is_some() {
        // Another type, or a fence gate, took the name (SET, RENAME,
        // RESTORE): the waiters get the answer a new acquire gets, rather
        // than waiting on a key that may never be a lock again.
        drop(key);
        refuse_all(&id, Refusal::WrongType);
        return;
    }
    let key = lockops::end_leases(ctx, name, key);
    let now = ffi::now_ms();
    let Ok(current) = held::held(&key) else {
        return;
    };
    // The plan reads the queue only as far as it grants (and one more).
    let steps: Vec<(BlockedHandle, Decision)> = with(|w| {
        let decisions = grant::plan(
            current.occupancy(),
            w.queue(&id)
                .map(|(_, r)| (r.want, current.holding(&r.token, now))),
        );
        w.queue(&id).map(|(h, _)| h).zip(decisions).collect()
    });
    let next_change = current.next_change(&key);
    drop(key);
    for (handle, decision) in steps {
        apply(ctx, name, &id, handle, decision);
    }
    if with(|w| w.count(&id)) > 0 {
        let key = LockKey::open(ctx, name, false);
        let next = held::held(&key).ok().and_then(|h| h.next_change(&key));
        drop(key);
        if let Some(at) = next.or(next_change) {
            scheduler::at(ctx, Job::Serve(id), at.saturating_add(1));
        }
    }
}

/// Carries out the plan's decision for one waiter.
fn apply(
    ctx: &Context,
    name: &RedisString,
    id: &LockId,
    handle: BlockedHandle,
    decision: Decision,
) {
    let Some((token, ttl_ms, want, bind_to)) = with(|w| {
        w.get(handle).map(|x| {
            (
                x.request.token.clone(),
                x.request.ttl_ms,
                x.request.want,
                x.request.bind_to,
            )
        })
    }) else {
        return;
    };
    let refusal = match decision {
        Decision::Busy => return,
        Decision::Mismatch(kind) => Some(Refusal::Mismatch(kind)),
        Decision::OtherMode => Some(Refusal::OtherMode),
        Decision::Grant | Decision::Regrant => None,
    };
    if let Some(why) = refusal {
        with(|w| w.refuse(handle, why));
        scheduler::cancel(&Job::Deadline(handle));
        ffi::unblock_client(handle);
        return;
    }
    // Requests were checked against the TTL bound, so this cannot fail.
    let Some(expire_at) = lock::expiry_at(ffi::now_ms(), ttl_ms) else {
        return;
    };
    let key = LockKey::open(ctx, name, true);
    let fence = if decision == Decision::Regrant {
        let fence = held::held(&key)
            .ok()
            .and_then(|h| h.fence_of(&token, ffi::now_ms()));
        match (fence, want) {
            (Some(fence), Want::Exclusive) => {
                lockops::set_expiry(ctx, name, key, expire_at);
                fence
            }
            (Some(fence), _) => {
                lockops::set_holder_expiry(ctx, name, key, &token, expire_at);
                fence
            }
            (None, _) => return,
        }
    } else {
        let granted = match want.creates() {
            None => lockops::grant(ctx, name, key, &token, expire_at, c"lock.handoff"),
            Some(kind) => {
                lockops::grant_holder(ctx, name, key, kind, &token, expire_at, c"lock.handoff")
            }
        };
        // Exhausted fences: nobody can be granted; waiters time out.
        let Ok(fence) = granted else {
            return;
        };
        fence
    };
    stats::HANDOFFS.bump();
    match bind_to {
        Some(client) => ephemeral::bind(id.clone(), client, &token, fence),
        None => ephemeral::unbind_holder(id, &token),
    }
    scheduler::cancel(&Job::Deadline(handle));
    with(|w| w.grant(handle, fence));
    ffi::unblock_client(handle);
}

/// Serves a lock from a scheduler job.
pub fn serve_id(ctx: &Context, id: &LockId) {
    if ffi::select_db(ctx, id.0) {
        serve(ctx, &ctx.create_string(id.1.as_slice()));
    }
}

/// Answers every waiter of `id` with `why`, at once.
fn refuse_all(id: &LockId, why: Refusal) {
    let refused = with(|w| w.refuse_all(id, why));
    scheduler::cancel(&Job::Serve(id.clone()));
    for handle in refused {
        scheduler::cancel(&Job::Deadline(handle));
        ffi::unblock_client(handle);
    }
}

/// Schedules a look at `id` if clients wait for it.
fn serve_soon(id: LockId) {
    if with(|w| w.count(&id)) == 0 {
        return;
    }
    if let Some(ctx) = state::detached_context() {
        scheduler::soon(&ctx, Job::Serve(id));
    }
}

/// A lock left the keyspace (release, DEL, UNLINK, expiry, eviction, an
/// overwrite, the source side of RENAME, MOVE and MIGRATE): Redis is in the
/// middle of deleting it, so any handoff is scheduled, not made here.
pub fn on_lock_unlinked(db: i32, key: &[u8], with_holders: bool) {
    if !with_holders && !ephemeral::any() && with(|w| w.is_empty()) {
        // The common case, on every expiry and release: nothing to do.
        return;
    }
    let id = (db, key.to_vec());
    ephemeral::unbind(&id);
    if with_holders {
        scheduler::cancel(&Job::Leases(id.clone()));
    }
    if with(|w| w.is_empty()) {
        return;
    }
    serve_soon(id);
}

/// A server that becomes a replica grants nothing: its waiters are told so.
pub fn on_demoted() {
    ephemeral::unbind_all();
    let refused = with(|w| w.refuse_everyone(Refusal::Demoted));
    for handle in refused {
        scheduler::cancel(&Job::Deadline(handle));
        ffi::unblock_client(handle);
    }
}

/// SWAPDB exchanges two databases without key events: every lock with
/// waiters in either is looked at again.
pub fn on_swapped(first: i32, second: i32) {
    ephemeral::unbind_db(first);
    ephemeral::unbind_db(second);
    scheduler::swap_leases(first, second);
    if with(|w| w.is_empty()) {
        return;
    }
    let ids = with(|w| w.locks_where(|(d, _)| *d == first || *d == second));
    ids.into_iter().for_each(serve_soon);
}

/// FLUSHDB / FLUSHALL raise no key events: serve every lock with waiters in
/// the flushed database(s) once the flush is done.
pub fn on_flushed(db: i32) {
    ephemeral::unbind_db(db);
    scheduler::forget_leases_in(db);
    if with(|w| w.is_empty()) {
        return;
    }
    let ids = with(|w| w.locks_where(|(d, _)| db == -1 || *d == db));
    ids.into_iter().for_each(serve_soon);
}

/// Sends a finished wait its answer: the grant, nil, or an error.
fn answer(ctx: &Context, waiter: Option<&Waiter<LockId, Request>>) {
    match waiter.map(|w| (w.stage, &w.request.token)) {
        Some((Stage::Granted { fence }, token)) => {
            reply::grant(ctx, token, fence);
        }
        Some((Stage::Refused(why), _)) => {
            let error = match why {
                Refusal::SlotMoved => LockError::SlotMoved,
                Refusal::Demoted => LockError::ReadOnly,
                Refusal::WrongType => LockError::WrongType,
                Refusal::Mismatch(kind) => kind.mismatch(),
                Refusal::OtherMode => LockError::OtherMode,
            };
            reply::error(ctx, &error);
        }
        Some((Stage::Waiting, _)) | None => {
            raw::reply_with_null(ctx.ctx);
        }
    }
}

/// The reply of a client whose wait ended: granted, timed out at its
/// deadline, or refused.
unsafe extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Context::new(ctx);
    guard::callback(raw::REDISMODULE_OK as c_int, || {
        let handle = ffi::blocked_handle(&ctx);
        answer(&ctx, forget(handle).as_ref());
        raw::REDISMODULE_OK as c_int
    })
}

/// `CLIENT UNBLOCK` (Redis calls it the timeout callback; the module's own
/// deadline never goes through it). Redis calls it only for a client not
/// unblocked yet, so the waiter is normally still in the queue; if it was
/// granted after all, the grant is delivered, never dropped.
unsafe extern "C" fn on_unblock(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Context::new(ctx);
    guard::callback(raw::REDISMODULE_OK as c_int, || {
        let handle = ffi::blocked_handle(&ctx);
        let waiter = forget(handle);
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
        let Some(w) = forget(handle) else {
            return;
        };
        match w.stage {
            Stage::Waiting => ffi::unblock_client(handle),
            // Already unblocked; nothing to give back.
            Stage::Refused(_) => {}
            Stage::Granted { fence } => {
                scheduler::soon(&ctx, Job::Revoke(w.lock, w.request.token, fence));
            }
        }
    })
}
