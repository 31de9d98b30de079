//! The one place a lock is written: grant, new expiry, release — of an
//! exclusive lock, or of one holder of a shared lock or a semaphore, whose
//! leases also end here. Commands, handoffs to waiters, revoked grants and
//! scheduled lease ends all go through here, so every write is stored,
//! propagated to replicas and the AOF, notified and followed up (waiters
//! served, expiry watched) the same way.

use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::core::errors::LockError;
use crate::core::holders::{self, Hold, Holders, Kind};
use crate::core::lock::LockRef;
use crate::core::record::Stored;
use crate::server::ffi::{self, LockKey};
use crate::server::scheduler::{self, Job};
use crate::server::waiting::{self, LockId};
use crate::server::{ephemeral, state, stats};

/// Grants the free lock `name` (open for writing as `key`) to `token` until
/// `expire_at`, with a new fence, and propagates it. `event` is the
/// notification: `lock.acquired` or `lock.handoff`.
pub fn grant(
    ctx: &Context,
    name: &RedisString,
    mut key: LockKey,
    token: &[u8],
    expire_at: i64,
    event: &CStr,
) -> Result<u64, LockError> {
    let fence =
        state::with_clock(|c| c.next_fence(ffi::now_ms())).ok_or(LockError::FenceExhausted)?;
    if !key.set_lock(LockRef::new(token, fence)) {
        return Err(LockError::Internal);
    }
    key.set_expire_at(expire_at);
    drop(key);
    ffi::replicate_grant(ctx, name, token, fence, expire_at);
    ffi::notify(ctx, event, name);
    Ok(fence)
}

/// Moves the expiry of the held lock `name` (re-grant, extend).
pub fn set_expiry(ctx: &Context, name: &RedisString, mut key: LockKey, expire_at: i64) {
    key.set_expire_at(expire_at);
    drop(key);
    ffi::replicate_expire_at(ctx, name, expire_at);
    waiting::watch_expiry(ctx, name, expire_at);
    ffi::notify(ctx, c"lock.extended", name);
}

/// Deletes the lock `name` and hands it to its first waiter.
pub fn release(ctx: &Context, name: &RedisString, mut key: LockKey) {
    if ephemeral::any() {
        ephemeral::unbind(&waiting::lock_id(ctx, name));
    }
    delete(&mut key);
    drop(key);
    ffi::replicate_delete(ctx, name);
    ffi::notify(ctx, c"lock.released", name);
    waiting::serve(ctx, name);
}

/// Releases a grant whose client disconnected before its reply, if the
/// lock is still that grant.
pub fn revoke(ctx: &Context, id: &LockId, token: &[u8], fence: u64) {
    if !ffi::select_db(ctx, id.0) {
        return;
    }
    let name = ctx.create_string(id.1.as_slice());
    let key = LockKey::open(ctx, &name, true);
    match key.stored() {
        Some(Stored::Single(l)) if l.fence() == fence && l.is_held_by(token) => {
            release(ctx, &name, key)
        }
        Some(Stored::Multi(h)) if h.get(token).is_some_and(|h| h.fence == fence) => {
            release_holder(ctx, &name, key, token)
        }
        _ => {}
    }
}

/// Gives `token` a new hold on the key `name` (free, or holding `kind`
/// holders with room), with a new fence, and propagates it.
pub fn grant_holder(
    ctx: &Context,
    name: &RedisString,
    mut key: LockKey,
    kind: Kind,
    token: &[u8],
    expire_at: i64,
    event: &CStr,
) -> Result<u64, LockError> {
    let fence =
        state::with_clock(|c| c.next_fence(ffi::now_ms())).ok_or(LockError::FenceExhausted)?;
    let hold = Hold { fence, expire_at };
    let after = match key.holders_mut() {
        Some(holders) => {
            let before = holders.latest();
            holders.insert(token, hold);
            After::change(holders, true, before)
        }
        None => {
            let mut holders = Holders::new(kind);
            holders.insert(token, hold);
            let after = After::change(&holders, true, None);
            if !key.set_holders(holders) {
                return Err(LockError::Internal);
            }
            after
        }
    };
    settle(ctx, name, key, after);
    ffi::replicate_hold(ctx, name, kind, token, hold);
    ffi::notify(ctx, event, name);
    Ok(fence)
}

/// Moves the lease of `token`'s hold (re-grant, extend); its fence stays.
pub fn set_holder_expiry(
    ctx: &Context,
    name: &RedisString,
    mut key: LockKey,
    token: &[u8],
    expire_at: i64,
) {
    let Some(holders) = key.holders_mut() else {
        return;
    };
    let before = holders.latest();
    if !holders.set_expiry(token, expire_at) {
        return;
    }
    let kind = holders.kind();
    let Some(hold) = holders.get(token) else {
        return;
    };
    let after = After::change(holders, true, before);
    settle(ctx, name, key, after);
    ffi::replicate_hold(ctx, name, kind, token, hold);
    ffi::notify(ctx, c"lock.extended", name);
}

/// Ends `token`'s hold and hands the freed room to the waiters.
pub fn release_holder(ctx: &Context, name: &RedisString, key: LockKey, token: &[u8]) {
    if ephemeral::any() {
        ephemeral::unbind_holder(&waiting::lock_id(ctx, name), token);
    }
    end_hold(ctx, name, key, token, c"lock.released");
    waiting::serve(ctx, name);
}

/// Ends every hold of `name` whose lease has run out, as the holders'
/// own releases would (propagated, notified, unbound), and returns the key
/// open again. Does not serve the waiters: the caller does.
pub fn end_leases(ctx: &Context, name: &RedisString, key: LockKey) -> LockKey {
    let now = ffi::now_ms();
    let due = key
        .holders()
        .and_then(|h| h.earliest())
        .is_some_and(|at| holders::ended(at, now));
    if !due {
        return key;
    }
    let mut key = key;
    let id = ephemeral::any().then(|| waiting::lock_id(ctx, name));
    let mut ended = Vec::new();
    let Some(holders) = key.holders_mut() else {
        return key;
    };
    let before = holders.latest();
    while let Some((token, _)) = holders.pop_ended(now) {
        ended.push(token);
    }
    let after = After::change(holders, false, before);
    settle(ctx, name, key, after);
    for token in ended {
        if let Some(id) = &id {
            ephemeral::unbind_holder(id, &token);
        }
        ffi::replicate_hold_end(ctx, name, &token);
        stats::LEASE_ENDS.bump();
    }
    ffi::notify(ctx, c"lock.expired", name);
    LockKey::open(ctx, name, true)
}

/// Ends `token`'s hold without serving anyone.
fn end_hold(ctx: &Context, name: &RedisString, mut key: LockKey, token: &[u8], event: &CStr) {
    let Some(holders) = key.holders_mut() else {
        return;
    };
    let before = holders.latest();
    if holders.remove(token).is_none() {
        return;
    }
    let after = After::change(holders, false, before);
    settle(ctx, name, key, after);
    ffi::replicate_hold_end(ctx, name, token);
    ffi::notify(ctx, event, name);
}

/// What a change of holders leaves to do on the key: its TTL is the
/// latest lease (set only when that moved), the key goes with its last
/// holder, and with `watch` (a lease was set) the next lease end is looked
/// at; removing holds never brings it earlier, and the look already set up
/// for it runs anyway.
struct After {
    latest: Option<i64>,
    latest_moved: bool,
    look: Option<i64>,
}

impl After {
    fn change(holders: &Holders, watch: bool, latest_before: Option<i64>) -> After {
        let latest = holders.latest();
        After {
            latest,
            latest_moved: latest != latest_before,
            look: if watch { holders.look_needed() } else { None },
        }
    }
}

/// Carries out `after` on the key `name`, and closes it.
fn settle(ctx: &Context, name: &RedisString, mut key: LockKey, after: After) {
    match after.latest {
        None => delete(&mut key),
        Some(at) if after.latest_moved => key.set_expire_at(at),
        Some(_) => {}
    }
    drop(key);
    if let Some(at) = after.look {
        scheduler::at(ctx, Job::Leases(waiting::lock_id(ctx, name)), at);
    }
}

/// Looks at the holders of a lock from a scheduler job: ends the leases
/// that ran out and hands their room on.
pub fn tend(ctx: &Context, id: &LockId) {
    if !ffi::select_db(ctx, id.0) {
        return;
    }
    let name = ctx.create_string(id.1.as_slice());
    let key = LockKey::open(ctx, &name, true);
    let mut key = end_leases(ctx, &name, key);
    // A key with holders has its latest lease as its TTL, whatever TTL a
    // `RESTORE` gave it: set here (the restore looks at once) and replicated.
    if let Some(latest) = key.holders().and_then(Holders::latest) {
        if key.expire_at() != Some(latest) {
            key.set_expire_at(latest);
            ffi::replicate_expire_at(ctx, &name, latest);
        }
    }
    // Still holding: watch the next lease to end (this look is used up).
    let look = key.holders().and_then(|h| {
        h.set_watched(None);
        h.look_needed()
    });
    drop(key);
    if let Some(at) = look {
        scheduler::at(ctx, Job::Leases(id.clone()), at);
    }
    waiting::serve(ctx, &name);
}

/// Deletes a lock's key. Redis raises no key event for a deletion through
/// the module API, so the note of its unlink must not be taken for the next
/// expiry's.
pub fn delete(key: &mut LockKey) {
    key.delete();
    stats::forget_unlink();
}
