//! `BLOCK`: clients waiting inside the server, first come, first served —
//! the queue per lock, the blocked clients, their deadlines and replies.
//!
//! Redis 7.0's key-blocking API cannot wake anyone when a key is deleted or
//! expires, so the module keeps its own queue per lock; the lock-lifecycle
//! layer (`locks`) decides when its head is granted and tells this queue
//! the outcome. Every wait ends through exactly one unblock, and the reply
//! callback answers the grant, nil or an error from the waiter's stage.
//!
//! A multi-key request (`multi.rs`) waits in every one of its locks'
//! queues at once and is answered with all of its fences.
//!
//! No borrow of the queue is held across a call into Redis: opening a key
//! can expire it and run our unlink callback re-entrantly.

use std::cell::RefCell;
use std::ffi::c_int;
use std::rc::Rc;

use redis_module::{raw, Context, RedisString};

use crate::core::errors::LockError;
use crate::core::grant::Want;
use crate::core::lock_id::PrehashedState;
use crate::core::short_bytes::ShortBytes;
use crate::core::waiters::{Head, Refusal, Stage, Waiter, Waiters};
use crate::server::ffi::{self, BlockedClient, BlockedId, LockId};
use crate::server::scheduler::{self, Job};
use crate::server::{catch_panic, reply, state, stats};

pub mod leaving;
mod multi;

use multi::serve_locks_of;
pub use multi::*;

/// Tokens up to this long are kept in the request itself: a generated
/// token (32 bytes) and a UUID (36) need no allocation per wait.
const INLINE_TOKEN: usize = 38;

/// What a waiter asked for. Cheap to copy when the lock layer reads it to
/// grant it: a long token or data is shared, not copied.
#[derive(Clone)]
pub struct Request {
    pub token: ShortBytes<INLINE_TOKEN>,
    pub ttl_ms: u64,
    /// Exclusive, shared, or a semaphore place.
    pub want: Want,
    /// With `EPHEMERAL`: the waiting connection, which the grant is bound to.
    pub bind_to: Option<u64>,
    /// Public data for the hold (`DATA`).
    pub data: Option<Rc<[u8]>>,
}

impl Request {
    pub fn new(
        token: &[u8],
        want: Want,
        ttl_ms: u64,
        bind_to: Option<u64>,
        data: Option<&[u8]>,
    ) -> Request {
        Request {
            token: ShortBytes::new(token),
            ttl_ms,
            want,
            bind_to,
            data: data.map(Rc::from),
        }
    }
}

/// A wait: what was asked for, and the blocked client's handle until its
/// wait is ended.
struct Wait {
    asked: Request,
    client: Option<BlockedClient>,
    /// A multi-key request's fences once granted, one per lock in the
    /// order named.
    fences: Vec<u64>,
    /// Asked by `LOCK.ACQUIREALL` (of one key or more): answered
    /// `[token, [fence, …]]`.
    all: bool,
    /// It waits with a deadline (`BLOCK` with a timeout).
    deadline: bool,
}

impl Wait {
    /// Tells Redis this wait ended; at most once, since the handle is taken.
    fn unblock(&mut self) {
        if let Some(client) = self.client.take() {
            client.unblock();
        }
    }
}

type Queue = Waiters<BlockedId, LockId, Wait, PrehashedState>;

thread_local! {
    // Redis calls modules on its main thread only.
    static WAITERS: RefCell<Queue> = RefCell::new(Waiters::default());
}

fn with<R>(f: impl FnOnce(&mut Queue) -> R) -> R {
    WAITERS.with(|w| f(&mut w.borrow_mut()))
}

/// Ends the wait of `handle`, still in the table (granted or refused).
fn unblock(handle: BlockedId) {
    let client = with(|w| w.request_mut(handle).and_then(|x| x.client.take()));
    if let Some(client) = client {
        client.unblock();
    }
}

/// Clients waiting for the lock `name` in the context's database.
pub fn count(ctx: &Context, name: &[u8]) -> usize {
    if with(|w| w.is_empty()) {
        return 0;
    }
    with(|w| w.count(&ffi::lock_id(ctx, name)))
}

/// Total number of waiting clients.
pub fn total() -> usize {
    with(|w| w.total())
}

/// Forgets a waiter that was answered or left, with its deadline; and the
/// lock's pending look-again once nobody waits for it.
fn forget(handle: BlockedId) -> Option<Waiter<LockId, Wait>> {
    let Some(left) = with(|w| w.leave(handle)) else {
        scheduler::cancel(&Job::Deadline(handle));
        return None;
    };
    let waiter = left.waiter;
    // A wait that was granted or refused lost its deadline then.
    if waiter.stage == Stage::Waiting && waiter.request.deadline {
        scheduler::cancel(&Job::Deadline(handle));
    }
    for (i, lock) in waiter.locks().enumerate() {
        let bit = 1 << i.min(63);
        if left.others & bit == 0 {
            scheduler::cancel(&Job::Serve(lock.clone()));
        } else if waiter.stage == Stage::Waiting && left.headed & bit != 0 {
            // A waiter that leaves (timeout, closed connection) first in a
            // queue may have kept others there that fit now: that lock is
            // looked at again at once. Behind the first, it kept nobody.
            if let Some(ctx) = state::detached_context() {
                scheduler::soon(&ctx, Job::Serve(lock.clone()));
            }
        }
    }
    Some(waiter)
}

/// Blocks the calling client until it is granted `name` or `timeout_ms`
/// passes (0: no limit). `held_until` tells when the key's holds may next
/// change by themselves (the holder's expiry, the first lease to end); it
/// is asked only if the client is the lock's first waiter.
///
/// The deadline is the module's own, not Redis's blocked-client timeout: on
/// Redis 7.0 a client whose timeout is processed in the same event-loop
/// pass as its grant is unblocked with no reply at all. With the scheduler
/// deciding, every wait ends through exactly one unblock (the handle's
/// `unblock` takes it), and the reply callback answers the grant or nil
/// from the waiter's stage. False if Redis could not block the client.
#[must_use]
pub fn block(
    ctx: &Context,
    name: &RedisString,
    request: Request,
    timeout_ms: u64,
    held_until: impl FnOnce() -> Option<i64>,
) -> bool {
    let id = ffi::lock_id(ctx, name);
    let Some(client) = ffi::block_client(ctx, on_reply, on_unblock, on_disconnect) else {
        return false;
    };
    let handle = client.id();
    let wait = Wait {
        asked: request,
        client: Some(client),
        fences: Vec::new(),
        all: false,
        deadline: timeout_ms > 0,
    };
    // The queue keeps the id; the first waiter's look below copies it.
    let first = with(|w| w.enqueue(handle, id, wait));
    stats::WAITS.bump();
    // While a lock has waiters, a look at it is due by the time its holds
    // next change (set by the first, kept by every handoff and pass).
    if let Some(at) = first.then(held_until).flatten() {
        if let Some(id) = with(|w| w.get(handle).map(|x| x.lock.clone())) {
            scheduler::at(ctx, Job::Serve(id), at.saturating_add(1));
        }
    }
    if timeout_ms > 0 {
        scheduler::timeout_after(ctx, handle, timeout_ms);
    }
    true
}

/// A waiter's deadline: if it is still waiting, it leaves the queue and its
/// reply callback answers nil.
pub fn on_deadline(handle: BlockedId) {
    let waiting = with(|w| w.get(handle).is_some_and(|w| w.stage == Stage::Waiting));
    if waiting {
        let waiter = forget(handle);
        stats::WAIT_TIMEOUTS.bump();
        if let Some(mut w) = waiter {
            w.request.unblock();
        }
    }
}

/// Whether nobody waits at all (the common case: callers then need not
/// even name the lock).
pub fn is_empty() -> bool {
    with(|w| w.is_empty())
}

/// Clients waiting for the lock `id`.
pub fn count_of(id: &LockId) -> usize {
    if with(|w| w.is_empty()) {
        return 0;
    }
    with(|w| w.count(id))
}

/// The locks with waiters that `filter` picks.
pub fn locks_where(filter: impl Fn(&LockId) -> bool) -> Vec<LockId> {
    with(|w| w.locks_where(filter))
}

/// The waiters of `id`, first come first, each with what `plan` decides
/// for it; `plan` reads the requests only as far as it needs.
pub fn plan<D>(
    id: &LockId,
    plan: impl FnOnce(&mut dyn Iterator<Item = &Request>) -> Vec<D>,
) -> Vec<(BlockedId, D)> {
    with(|w| {
        // One walk of the queue: the handles of the requests `plan` read.
        let mut handles = Vec::new();
        // Single-key waiters only: a multi-key one is `head`'s to decide.
        let decisions = plan(&mut w.singles(id).map(|(h, x)| {
            handles.push(h);
            &x.asked
        }));
        handles.into_iter().zip(decisions).collect()
    })
}

/// The first waiter of `id` and what it asked for, if it waits for this
/// lock alone, and how many wait for the lock (it included).
pub fn head_single(id: &LockId) -> Option<(BlockedId, Request, usize)> {
    with(|w| {
        let (head, count) = w.head_and_count(id);
        match head {
            Head::Single(handle) => w
                .get(handle)
                .map(|x| (handle, x.request.asked.clone(), count)),
            _ => None,
        }
    })
}

/// What the waiter `handle` asked for, if it still waits.
pub fn request(handle: BlockedId) -> Option<Request> {
    with(|w| w.get(handle).map(|x| x.request.asked.clone()))
}

/// The waiter `handle` was granted the lock with `fence`: it is answered.
pub fn granted(handle: BlockedId, fence: u64) {
    scheduler::cancel(&Job::Deadline(handle));
    // A wait that ended already has given up its handle.
    let client = with(|w| w.grant_request(handle, fence).and_then(|x| x.client.take()));
    if let Some(client) = client {
        client.unblock();
    }
}

/// The waiter `handle` is sent away with `why`.
pub fn refuse(handle: BlockedId, why: Refusal) {
    let refused = with(|w| w.refuse(handle, why));
    scheduler::cancel(&Job::Deadline(handle));
    if refused {
        serve_locks_of(handle);
        unblock(handle);
    }
}

/// Answers every waiter of `id` with `why`, at once.
pub fn refuse_all(id: &LockId, why: Refusal) {
    let refused = with(|w| w.refuse_all(id, why));
    scheduler::cancel(&Job::Serve(id.clone()));
    for handle in refused {
        scheduler::cancel(&Job::Deadline(handle));
        serve_locks_of(handle);
        unblock(handle);
    }
}

/// Answers every waiter with `why` (a server that became a replica).
pub fn refuse_everyone(why: Refusal) {
    let refused = with(|w| w.refuse_everyone(why));
    for handle in refused {
        scheduler::cancel(&Job::Deadline(handle));
        unblock(handle);
    }
}

/// Sends a finished wait its answer: the grant, nil, or an error.
fn answer(ctx: &Context, waiter: Option<&Waiter<LockId, Wait>>) {
    match waiter.map(|w| (w.stage, &w.request.asked.token)) {
        Some((Stage::Granted { fence }, token)) if waiter.is_some_and(|w| w.request.all) => {
            // A request for one key is granted as single-key requests are.
            let fences = match waiter.map_or(&[][..], |w| &w.request.fences[..]) {
                [] => &[fence][..],
                fences => fences,
            };
            reply::grant_all(ctx, token, fences);
        }
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
    catch_panic::callback(raw::REDISMODULE_OK as c_int, || {
        let handle = ffi::blocked_id(&ctx);
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
    catch_panic::callback(raw::REDISMODULE_OK as c_int, || {
        let handle = ffi::blocked_id(&ctx);
        let waiter = forget(handle);
        answer(&ctx, waiter.as_ref());
        if let Some(mut w) = waiter.filter(|w| w.stage == Stage::Waiting) {
            stats::WAIT_TIMEOUTS.bump();
            w.request.unblock();
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
    catch_panic::callback((), || {
        let Some(mut w) = forget(BlockedId::of(bc)) else {
            return;
        };
        match w.stage {
            // It left its queues above; its handle is released now or, when
            // many leave together, by a later pass (`leaving`).
            Stage::Waiting => {
                if let Some(client) = w.request.client.take() {
                    if leaving::let_go(client) {
                        scheduler::leaving_pending(&ctx);
                    }
                }
            }
            // Already unblocked; nothing to give back.
            Stage::Refused(_) => {}
            Stage::Granted { fence } if !w.is_multi() => {
                let grant = (w.lock, w.request.asked.token.to_vec(), fence);
                scheduler::soon(&ctx, Job::Revoke(Box::new(grant)));
            }
            // Every key of a multi-key grant is given back.
            Stage::Granted { .. } => {
                let locks: Vec<LockId> = w.locks().cloned().collect();
                for (lock, fence) in locks.into_iter().zip(w.request.fences.iter()) {
                    let grant = (lock, w.request.asked.token.to_vec(), *fence);
                    scheduler::soon(&ctx, Job::Revoke(Box::new(grant)));
                }
            }
        }
    })
}
