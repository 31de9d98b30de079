//! The one place a lock is written: grant, new expiry, release. Commands,
//! handoffs to waiters and revoked grants all go through here, so every
//! write is stored, propagated to replicas and the AOF, notified and
//! followed up (waiters served, expiry watched) the same way.

use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::core::errors::LockError;
use crate::core::lock::LockRef;
use crate::server::ffi::{self, LockKey};
use crate::server::waiting::{self, LockId};
use crate::server::{ephemeral, state};

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
    ephemeral::unbind(&waiting::lock_id(ctx, name));
    key.delete();
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
    let ours = key
        .lock()
        .is_some_and(|l| l.fence() == fence && l.is_held_by(token));
    if ours {
        release(ctx, &name, key);
    }
}
