//! Writes of one holder of a shared lock or a semaphore: a new hold, a new
//! lease, a hold's end, and the leases that ran out.

use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::core::errors::LockError;
use crate::core::holders::{self, Hold, Holders, Kind};
use crate::server::ffi::{self, LockKey};
use crate::server::{state, stats};

use super::settle::{settle, After, Look};

/// Gives `token` a new hold on the key `name` (free, or holding `kind`
/// holders with room), with a new fence and its public `data`, and
/// propagates it. Returns the fence and the look to set up.
#[allow(clippy::too_many_arguments)]
pub fn grant_holder(
    ctx: &Context,
    name: &RedisString,
    mut key: LockKey,
    kind: Kind,
    token: &[u8],
    data: Option<&[u8]>,
    expire_at: i64,
    event: &CStr,
) -> Result<(u64, Look), LockError> {
    let fence =
        state::with_clock(|c| c.next_fence(ffi::now_ms())).ok_or(LockError::FenceExhausted)?;
    let hold = Hold { fence, expire_at };
    let after = match key.holders_mut() {
        Some(holders) => {
            let before = holders.latest();
            holders.insert_with_data(token, hold, data);
            After::change(holders, true, before)
        }
        None => {
            let mut holders = Holders::new(kind);
            holders.insert_with_data(token, hold, data);
            let after = After::change(&holders, true, None);
            if !key.set_holders(holders) {
                return Err(LockError::Internal);
            }
            after
        }
    };
    let look = settle(key, after);
    ffi::replicate_hold(ctx, name, kind, token, hold, data);
    ffi::notify(ctx, event, name);
    Ok((fence, look))
}

/// Moves the lease of `token`'s hold (re-grant, extend); its fence stays,
/// and so does its public data unless `data` gives new data (a re-grant
/// with `DATA`). Returns the look to set up.
#[must_use]
pub fn set_holder_expiry(
    ctx: &Context,
    name: &RedisString,
    mut key: LockKey,
    token: &[u8],
    expire_at: i64,
    data: Option<&[u8]>,
) -> Look {
    let holders = key.holders_mut()?;
    let before = holders.latest();
    if !holders.set_expiry(token, expire_at) {
        return None;
    }
    if data.is_some() {
        holders.set_data(token, data);
    }
    let kind = holders.kind();
    let hold = holders.get(token)?;
    let after = After::change(holders, true, before);
    let look = settle(key, after);
    // With the data only when it changes: a replica keeps a grant's data through the effects
    // of the same grant that have none (`replay_hold`), so renewals do not resend it.
    ffi::replicate_hold(ctx, name, kind, token, hold, data);
    ffi::notify(ctx, c"lock.extended", name);
    look
}

/// Ends `token`'s hold.
pub fn end_hold(ctx: &Context, name: &RedisString, mut key: LockKey, token: &[u8]) {
    let Some(holders) = key.holders_mut() else {
        return;
    };
    let before = holders.latest();
    if holders.remove(token).is_none() {
        return;
    }
    let after = After::change(holders, false, before);
    settle(key, after);
    ffi::replicate_hold_end(ctx, name, token);
    ffi::notify(ctx, c"lock.released", name);
}

/// Whether a hold of the open key has a lease that ran out already.
pub fn leases_due(key: &LockKey) -> bool {
    key.holders()
        .and_then(|h| h.earliest())
        .is_some_and(|at| holders::ended(at, ffi::now_ms()))
}

/// Ends every hold of `name` whose lease has run out, as the holders'
/// own releases would (propagated, notified), and returns the key open
/// again with the tokens whose holds ended.
pub fn end_leases(ctx: &Context, name: &RedisString, key: LockKey) -> (LockKey, Vec<Box<[u8]>>) {
    let now = ffi::now_ms();
    if !leases_due(&key) {
        return (key, Vec::new());
    }
    let mut key = key;
    let mut ended = Vec::new();
    let Some(holders) = key.holders_mut() else {
        return (key, ended);
    };
    let before = holders.latest();
    while let Some((token, _)) = holders.pop_ended(now) {
        ended.push(token);
    }
    let after = After::change(holders, false, before);
    settle(key, after);
    for token in &ended {
        ffi::replicate_hold_end(ctx, name, token);
        stats::LEASE_ENDS.bump();
    }
    ffi::notify(ctx, c"lock.expired", name);
    (LockKey::open(ctx, name, true), ended)
}

/// A key with holders has its latest lease as its TTL, whatever TTL a
/// `RESTORE` gave it: set here and replicated. Returns the next lease end
/// to watch (the look that ran is used up).
#[must_use]
pub fn keep_ttl_at_latest(ctx: &Context, name: &RedisString, mut key: LockKey) -> Look {
    if let Some(latest) = key.holders().and_then(Holders::latest) {
        if key.expire_at() != Some(latest) {
            key.set_expire_at(latest);
            ffi::replicate_expire_at(ctx, name, latest);
        }
    }
    key.holders().and_then(|h| {
        h.set_watched(None);
        h.look_needed()
    })
}
