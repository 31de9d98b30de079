//! Waiting for several locks at once (`LOCK.ACQUIREALL … BLOCK`): the
//! request joins every one of its locks' queues together, and is granted
//! all of them in one step once it is first in each queue and each has
//! room (the core's `waiters::multi` says whose turn it is). Serving any
//! of its locks (`serve.rs`) comes here when it is first everywhere.
//!
//! A lock of the request that is deleted, flushed or expires meanwhile is
//! simply free; one that becomes another type, a fence gate, a lock of
//! another kind, or moves to another cluster node refuses the whole
//! request, as it refuses a single-key waiter.

use redis_module::{Context, RedisString};

use crate::core::grant::{self, Decision};
use crate::core::lock;
use crate::core::waiters::Refusal;
use crate::server::ffi::{self, BlockedId, KeyKind, LockKey};
use crate::server::held::held;
use crate::server::{cluster, state, stats, waiting};

use super::{carry_out, end_leases, release, Grant};

/// Whether the fence clock has a fence for each new grant among
/// `decisions` (a re-grant keeps its fence): a multi-key request that
/// needs more than are left is granted none, rather than some of its keys.
pub fn fences_left(ctx: &Context, decisions: &[Decision]) -> bool {
    let new = decisions.iter().filter(|d| **d == Decision::Grant).count();
    if new == 0 {
        return true;
    }
    cluster::follow_config_epoch(ctx);
    let now = ffi::now_ms();
    state::with_clock(|c| {
        let mut trial = *c;
        (0..new).all(|_| trial.next_fence(now).is_some())
    })
}

/// Makes the calling client wait for every one of `names` at once; false
/// if it could not be blocked.
pub fn wait_all(
    ctx: &Context,
    names: &[RedisString],
    request: waiting::Request,
    timeout_ms: u64,
) -> bool {
    let ids = names.iter().map(|n| ffi::lock_id(ctx, n)).collect();
    let held_until: Vec<Option<i64>> = names
        .iter()
        .map(|name| {
            let key = LockKey::open(ctx, name, false);
            held(&key).ok().and_then(|h| h.next_change(&key))
        })
        .collect();
    waiting::block_all(ctx, ids, request, timeout_ms, &held_until)
}

/// What one lock says to a multi-key waiter first in every queue.
enum Verdict {
    Room(Decision),
    Busy,
    Refuse(Refusal),
}

fn verdict(ctx: &Context, name: &RedisString, request: &waiting::Request, now: i64) -> Verdict {
    let key = LockKey::open(ctx, name, true);
    if key.kind() == KeyKind::Empty && !cluster::may_hand_off_here(ctx, name) {
        return Verdict::Refuse(Refusal::SlotMoved);
    }
    if key.kind() == KeyKind::Other || key.gate().is_some() {
        return Verdict::Refuse(Refusal::WrongType);
    }
    let key = end_leases(ctx, name, key);
    let Ok(h) = held(&key) else {
        return Verdict::Refuse(Refusal::WrongType);
    };
    let holding = h.holding(&request.token, now);
    match grant::decide(h.occupancy(), request.want, holding) {
        Decision::Busy => Verdict::Busy,
        Decision::Mismatch(kind) => Verdict::Refuse(Refusal::Mismatch(kind)),
        Decision::OtherMode => Verdict::Refuse(Refusal::OtherMode),
        d => Verdict::Room(d),
    }
}

/// Serves the multi-key waiter `handle`, first in every one of its
/// queues: grants it every lock if each has room, or refuses it if one
/// cannot be granted to it at all. Whether it left the queues.
pub(super) fn serve_multi(ctx: &Context, handle: BlockedId) -> bool {
    let (Some(request), ids) = (waiting::request(handle), waiting::locks_of(handle)) else {
        return false;
    };
    let now = ffi::now_ms();
    let names: Vec<RedisString> = ids.iter().map(|id| ctx.create_string(id.name())).collect();
    let mut decisions = Vec::with_capacity(names.len());
    for name in &names {
        match verdict(ctx, name, &request, now) {
            Verdict::Room(d) => decisions.push(d),
            Verdict::Busy => return false,
            Verdict::Refuse(why) => {
                waiting::refuse(handle, why);
                return true;
            }
        }
    }
    // Requests were checked against the TTL bound, so this cannot fail.
    let Some(expire_at) = lock::expiry_at(now, request.ttl_ms) else {
        return false;
    };
    // Exhausted fences: nobody can be granted all its locks; the request
    // waits on untouched, and leaves at its timeout.
    if !fences_left(ctx, &decisions) {
        return false;
    }
    let grant = Grant::to_waiter(&request, expire_at, now);
    let mut fences = Vec::with_capacity(names.len());
    for (at, (name, decision)) in names.iter().zip(&decisions).enumerate() {
        let key = LockKey::open(ctx, name, true);
        match carry_out(ctx, name, key, *decision, &grant) {
            Ok(fence) => fences.push(fence),
            Err(_) => {
                // Nothing is granted in part: the new holds made already
                // are given back.
                for (name, _) in names[..at]
                    .iter()
                    .zip(&decisions)
                    .filter(|(_, d)| **d == Decision::Grant)
                {
                    let key = LockKey::open(ctx, name, true);
                    let multi = key.holders().is_some();
                    release(ctx, name, key, &request.token, multi);
                }
                return false;
            }
        }
    }
    stats::HANDOFFS.bump();
    waiting::granted_all(handle, fences);
    true
}
