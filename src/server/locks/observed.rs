//! What observers of a lock see (`LOCK.OBSERVE`), and when they look.
//!
//! Every change this layer makes or learns of marks the lock (`changed`):
//! grants, re-grants that give new data, releases, lease ends, replayed
//! grants and holds, unlinks, flushes, SWAPDB,
//! keys that appear under a watched name (`RENAME`, `MOVE`, `RESTORE`,
//! `COPY`, a replayed grant), a load, a role change. The scheduler's reads
//! then look at each marked lock once — after the pass's writes, so a
//! release that hands the lock on is seen as one change, the new holder —
//! and settle its observers (`observing`; the looks are `looks.rs`'s). A
//! lock whose holds end by themselves (an expiry, a lease end) is also
//! looked at just after they end, on a master: a replica learns of the end
//! from its master.

use redis_module::{Context, ContextFlags, RedisString};

use crate::core::args::observe::Saw;
use crate::core::errors::LockError;
use crate::core::slot::SlotState;
use crate::server::cluster;
use crate::server::ffi::{self, KeyKind, LockId, LockKey};
use crate::server::held::{held, Held};
use crate::server::observing::{self, Seen};
use crate::server::scheduler::{self, Job};

/// The lock `name` (in the context's database) may have changed.
pub fn changed(ctx: &Context, name: &[u8]) {
    if !observing::is_empty() {
        observing::changed(&ffi::lock_id(ctx, name));
    }
}

/// The lock `id` may have changed.
pub fn changed_id(id: &LockId) {
    if !observing::is_empty() {
        observing::changed(id);
    }
}

/// Every observed lock of database `db` (-1: all) may have changed.
pub fn changed_in(db: i32) {
    observing::changed_where(|id| db == -1 || id.db() == db);
}

/// The holds of `name` may next end by themselves at `at` (a grant, an
/// extend): its observers look just after, if it has any.
pub fn watch_end(ctx: &Context, name: &[u8], at: Option<i64>) {
    if observing::is_empty() {
        return;
    }
    watch_end_of(ctx, ffi::lock_id(ctx, name), at);
}

pub(super) fn watch_end_of(ctx: &Context, id: LockId, at: Option<i64>) {
    let Some(at) = at else {
        return;
    };
    // A replica's holds end by its master's effects, never by its clock.
    if observing::count_of(&id) > 0 && !ctx.get_flags().contains(ContextFlags::SLAVE) {
        scheduler::at(ctx, Job::Look(id), at.saturating_add(1));
    }
}

/// What an observer of the open key `name` sees now: the holder's fence
/// and data, or why the key cannot be observed. With the time its holds
/// next end by themselves.
pub fn seen(ctx: &Context, key: &LockKey, name: &[u8]) -> (Seen, Option<i64>) {
    let h = match held(key) {
        Ok(h) => h,
        Err(e) => return (Seen::Refused(e), None),
    };
    if matches!(h, Held::Free) && key.kind() == KeyKind::Empty {
        if let Some(seen) = slot_left(ctx, name) {
            return (seen, None);
        }
    }
    let (fence, data) = h.observed(ffi::now_ms());
    let data = data.map(Box::from);
    (Seen::Holder { fence, data }, h.next_change(key))
}

/// What observers of the free lock `name` see if this node no longer
/// serves its slot (a replica serves its master's): `TRYAGAIN` while the
/// slot moves; once another node (or none) serves it, nothing from the
/// module — the server answers the observers, blocked on the key, as it
/// answers a `BLPOP` there (`MOVED`, `CLUSTERDOWN`).
fn slot_left(ctx: &Context, name: &[u8]) -> Option<Seen> {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return None;
    }
    match cluster::slot_here(ctx, name) {
        SlotState::Owned => None,
        SlotState::Migrating | SlotState::Importing => Some(Seen::Refused(LockError::SlotMoved)),
        SlotState::NotOwned => Some(Seen::Redirected),
    }
}

/// Blocks the calling client as an observer of `name` that saw `saw`,
/// until the holder differs from it or `timeout_ms` passes; `ends` is when
/// the key's holds next end by themselves. False if it could not block.
#[must_use]
pub fn observe(
    ctx: &Context,
    name: &RedisString,
    saw: Saw,
    timeout_ms: u64,
    ends: Option<i64>,
) -> bool {
    let id = ffi::lock_id(ctx, name);
    if !observing::block(ctx, name, id.clone(), saw, timeout_ms) {
        return false;
    }
    watch_end_of(ctx, id, ends);
    true
}
