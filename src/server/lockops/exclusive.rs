//! Writes of an exclusive lock: grant, re-grant with new data, handoff in
//! place, new expiry, release.

use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::core::errors::LockError;
use crate::core::lock::LockRef;
use crate::server::ffi::{self, LockKey};
use crate::server::state;

use super::settle::delete;

/// Grants the free lock `name` (open for writing as `key`) to `token` until
/// `expire_at`, with a new fence and its public `data`, and propagates it.
/// `event` is the notification: `lock.acquired` or `lock.handoff`.
pub fn grant(
    ctx: &Context,
    name: &RedisString,
    key: LockKey,
    token: &[u8],
    data: Option<&[u8]>,
    expire_at: i64,
    event: &CStr,
) -> Result<u64, LockError> {
    let fence =
        state::with_clock(|c| c.next_fence(ffi::now_ms())).ok_or(LockError::FenceExhausted)?;
    let lock = LockRef::new(token, fence).with_data(data);
    store_grant(ctx, name, key, lock, expire_at)?;
    ffi::notify(ctx, event, name);
    Ok(fence)
}

/// A re-grant that gives the held lock `name` new public data: the whole
/// grant is written again, its fence kept.
pub fn regrant_with_data(
    ctx: &Context,
    name: &RedisString,
    key: LockKey,
    lock: LockRef<'_>,
    expire_at: i64,
) -> Result<(), LockError> {
    store_grant(ctx, name, key, lock, expire_at)?;
    ffi::notify(ctx, c"lock.extended", name);
    Ok(())
}

fn store_grant(
    ctx: &Context,
    name: &RedisString,
    mut key: LockKey,
    lock: LockRef<'_>,
    expire_at: i64,
) -> Result<(), LockError> {
    if !key.set_lock(lock) {
        return Err(LockError::Internal);
    }
    key.set_expire_at(expire_at);
    drop(key);
    ffi::replicate_grant(ctx, name, lock, expire_at);
    Ok(())
}

/// Propagates and notifies a handoff written in place (`LockKey::replace_lock`):
/// the grant's effect replaces the lock on a replica as it did here; one with
/// `DATA` follows a `DEL`, which a previous-release replica applies though
/// it refuses the grant.
pub fn propagate_handoff(ctx: &Context, name: &RedisString, lock: LockRef<'_>, expire_at: i64) {
    if lock.data().is_some() {
        ffi::replicate_delete(ctx, name);
    }
    ffi::replicate_grant(ctx, name, lock, expire_at);
    ffi::notify(ctx, c"lock.handoff", name);
}

/// Moves the expiry of the held lock `name` (re-grant, extend).
pub fn set_expiry(ctx: &Context, name: &RedisString, mut key: LockKey, expire_at: i64) {
    key.set_expire_at(expire_at);
    drop(key);
    ffi::replicate_expire_at(ctx, name, expire_at);
    ffi::notify(ctx, c"lock.extended", name);
}

/// Deletes the lock `name`. With `hold_back` (a handoff may replace it)
/// its `DEL` is held back (see `ffi::hold_back_delete`): the caller sends
/// it once it has served the waiters (`ffi::SendHeldBack`).
pub fn delete_lock(ctx: &Context, name: &RedisString, mut key: LockKey, hold_back: bool) {
    delete(&mut key);
    drop(key);
    match hold_back {
        true => ffi::hold_back_delete(ctx, name),
        false => ffi::replicate_delete(ctx, name),
    }
    ffi::notify(ctx, c"lock.released", name);
}
