//! Waiting for several locks at once: a request in every one of its
//! locks' queues, granted all of them together.

use redis_module::Context;

use crate::core::waiters::Head;
use crate::server::ffi::{self, BlockedId, LockId};
use crate::server::scheduler::{self, Job};
use crate::server::{state, stats};

use super::{count_of, on_disconnect, on_reply, on_unblock, unblock, with, Request, Wait};

/// Blocks the calling client until it is granted every lock of `ids` at
/// once (distinct locks of the context's database, in the order named) or
/// `timeout_ms` passes (0: no limit). `held_until` is, per lock, when its
/// holds may next change by themselves. As `block` otherwise.
#[must_use]
pub fn block_all(
    ctx: &Context,
    ids: Vec<LockId>,
    request: Request,
    timeout_ms: u64,
    held_until: &[Option<i64>],
) -> bool {
    let Some(client) = ffi::block_client(ctx, on_reply, on_unblock, on_disconnect) else {
        return false;
    };
    let handle = client.id();
    let wait = Wait {
        asked: request,
        client: Some(client),
        fences: Vec::new(),
        all: true,
        deadline: timeout_ms > 0,
    };
    let mut ids = ids.into_iter();
    let Some(first) = ids.next() else {
        return false;
    };
    let also: Vec<LockId> = ids.collect();
    let locks: Vec<LockId> = std::iter::once(first.clone()).chain(also.clone()).collect();
    with(|w| w.enqueue_all(handle, first, also, wait));
    stats::WAITS.bump();
    for (id, at) in locks.into_iter().zip(held_until) {
        if let Some(at) = at {
            scheduler::at(ctx, Job::Serve(id), at.saturating_add(1));
        }
    }
    if timeout_ms > 0 {
        scheduler::timeout_after(ctx, handle, timeout_ms);
    }
    true
}

/// The first waiter of `id`, and whether it may be served now.
pub fn head(id: &LockId) -> Head<BlockedId> {
    with(|w| w.head_of(id))
}

/// Every lock the waiter `handle` waits for, in the order named.
pub fn locks_of(handle: BlockedId) -> Vec<LockId> {
    with(|w| w.locks_of(handle))
}

/// The multi-key waiter `handle` was granted every lock, with these
/// fences (in the order named): it is answered.
pub fn granted_all(handle: BlockedId, fences: Vec<u64>) {
    scheduler::cancel(&Job::Deadline(handle));
    let first = fences.first().copied().unwrap_or(0);
    with(|w| {
        if let Some(x) = w.request_mut(handle) {
            x.fences = fences;
        }
    });
    if with(|w| w.grant(handle, first)) {
        serve_locks_of(handle);
        unblock(handle);
    }
}

/// A multi-key request left its queues (granted or refused): those who
/// waited behind it on its locks may fit now, so each is looked at again.
pub(super) fn serve_locks_of(handle: BlockedId) {
    let locks = with(|w| match w.get(handle) {
        Some(x) if x.is_multi() => x.locks().cloned().collect(),
        _ => Vec::new(),
    });
    let Some(ctx) = state::detached_context() else {
        return;
    };
    for lock in locks {
        if count_of(&lock) > 0 {
            scheduler::soon(&ctx, Job::Serve(lock));
        }
    }
}
