//! Handing a lock to its waiters: the head of its queue and each following
//! waiter that fits, as the core's plan says, in the command that freed
//! the lock (release) or from the scheduler (after an unlink, a flush, a
//! holder's expiry). A newcomer never overtakes: `LOCK.ACQUIRE` on a free
//! lock with waiters serves the head first.

use redis_module::{Context, RedisString};

use crate::core::grant::{self, Decision, Occupancy, Want};
use crate::core::lock::{self, LockRef};
use crate::core::waiters::{Head, Refusal};
use crate::server::ffi::{self, BlockedId, KeyKind, LockId, LockKey};
use crate::server::held;
use crate::server::scheduler::{self, Job};
use crate::server::{cluster, ephemeral, lockops, state, stats, waiting};

use super::{bind_grant, carry_out, end_leases, observed, release_orphans_of_id, serve_all, Grant};

/// Grants `name` (in the context's database) to the waiters at the head of
/// its queue that fit now, in order: the first waiter, then each following
/// one while it fits (consecutive shared waiters; semaphore waiters while
/// places are free). Call only where writing is allowed: a command, or a
/// scheduler job that checked the server's state.
pub fn serve(ctx: &Context, name: &RedisString) {
    if waiting::is_empty() {
        return;
    }
    let id = ffi::lock_id(ctx, name);
    if waiting::count_of(&id) == 0 {
        return;
    }
    // Holds whose connection closed are gone: their room goes to the
    // waiters now, not when the scheduler comes to them.
    release_orphans_of_id(ctx, &id);
    if waiting::count_of(&id) == 0 {
        return;
    }
    let key = LockKey::open(ctx, name, true);
    if key.kind() == KeyKind::Empty && !cluster::may_hand_off_here(ctx, name) {
        drop(key);
        waiting::refuse_all(&id, Refusal::SlotMoved);
        return;
    }
    if key.kind() == KeyKind::Other || key.gate().is_some() {
        // Another type, or a fence gate, took the name (SET, RENAME,
        // RESTORE): the waiters get the answer a new acquire gets, rather
        // than waiting on a key that may never be a lock again.
        drop(key);
        waiting::refuse_all(&id, Refusal::WrongType);
        return;
    }
    let mut key = end_leases(ctx, name, key);
    let next_change = loop {
        let now = ffi::now_ms();
        let Ok(current) = held::held(&key) else {
            return;
        };
        // The plan reads the queue only as far as it grants (and one
        // more), up to a multi-key waiter.
        let steps = waiting::plan(&id, |queue| {
            grant::plan(
                current.occupancy(),
                queue.map(|r| (r.want, current.holding(&r.token, now))),
            )
        });
        let next_change = current.next_change(&key);
        drop(key);
        for (handle, decision) in steps {
            serve_one(ctx, name, handle, decision);
        }
        // A multi-key waiter first in all its queues: granted all its
        // locks if each has room, or refused; then the queue goes on.
        let Head::Ready(handle) = waiting::head(&id) else {
            break next_change;
        };
        if !serve_all::serve_multi(ctx, handle) {
            break next_change;
        }
        key = LockKey::open(ctx, name, true);
    };
    if waiting::count_of(&id) > 0 {
        let key = LockKey::open(ctx, name, false);
        let next = held::held(&key).ok().and_then(|h| h.next_change(&key));
        drop(key);
        if let Some(at) = next.or(next_change) {
            scheduler::at(ctx, Job::Serve(id), at.saturating_add(1));
        }
    }
}

/// Hands the exclusive lock `name` (open as `key`), which its holder is
/// releasing, to the first waiter if that waiter takes it alone and
/// exclusively: the key's value is replaced where it is (no delete and
/// create, one effect propagated), and the notifications, replication and
/// bookkeeping are those of a release followed by a handoff. Returns the
/// key untouched when the waiters are to be served the general way.
pub fn hand_on(ctx: &Context, name: &RedisString, mut key: LockKey) -> Option<LockKey> {
    if waiting::is_empty() || ephemeral::orphans() > 0 {
        return Some(key);
    }
    let id = ffi::lock_id(ctx, name);
    let Some((handle, request, waiters)) = waiting::head_single(&id) else {
        return Some(key);
    };
    // Exclusive: nobody behind it is granted with it.
    let free = grant::decide(Occupancy::Free, request.want, None);
    if request.want != Want::Exclusive || free != Decision::Grant {
        return Some(key);
    }
    let now = ffi::now_ms();
    let Some(expire_at) = lock::expiry_at(now, request.ttl_ms) else {
        return Some(key);
    };
    cluster::follow_config_epoch(ctx);
    // Exhausted fences: the general way releases the lock and grants nobody.
    let Some(fence) = state::with_clock(|c| c.next_fence(now)) else {
        return Some(key);
    };
    let lock = LockRef::new(&request.token, fence).with_data(request.data.as_deref());
    if !key.replace_lock(lock) {
        return Some(key);
    }
    key.set_expire_at(expire_at);
    drop(key);
    ffi::notify(ctx, c"lock.released", name);
    lockops::propagate_handoff(ctx, name, lock, expire_at);
    bind_grant(
        ctx,
        name,
        &Grant::to_waiter(&request, expire_at, now),
        fence,
    );
    observed::changed(ctx, name);
    stats::HANDOFFS.bump();
    waiting::granted(handle, fence);
    if waiters > 1 {
        scheduler::at(ctx, Job::Serve(id), expire_at.saturating_add(1));
    }
    None
}

/// Carries out the plan's decision for one waiter.
fn serve_one(ctx: &Context, name: &RedisString, handle: BlockedId, decision: Decision) {
    let Some(request) = waiting::request(handle) else {
        return;
    };
    let refusal = match decision {
        Decision::Busy => return,
        Decision::Mismatch(kind) => Some(Refusal::Mismatch(kind)),
        Decision::OtherMode => Some(Refusal::OtherMode),
        Decision::Grant | Decision::Regrant => None,
    };
    if let Some(why) = refusal {
        waiting::refuse(handle, why);
        return;
    }
    // Requests were checked against the TTL bound, so this cannot fail.
    let Some(expire_at) = lock::expiry_at(ffi::now_ms(), request.ttl_ms) else {
        return;
    };
    let key = LockKey::open(ctx, name, true);
    let grant = Grant::to_waiter(&request, expire_at, ffi::now_ms());
    // Exhausted fences: nobody can be granted; waiters time out.
    let Ok(fence) = carry_out(ctx, name, key, decision, &grant) else {
        return;
    };
    stats::HANDOFFS.bump();
    waiting::granted(handle, fence);
}

/// Serves a lock from a scheduler job.
pub fn serve_id(ctx: &Context, id: &LockId) {
    if ffi::select_db(ctx, id.db()) {
        serve(ctx, &ctx.create_string(id.name()));
    }
}
