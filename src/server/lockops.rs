//! The one place a lock is written: grant, new expiry, release — of an
//! exclusive lock, or of one holder of a shared lock or a semaphore, whose
//! leases also end here — and the effects replayed from a master or the
//! AOF, and a fence gate's raise. Each write is stored, propagated to
//! replicas and the AOF and notified, in that order, the same way for
//! every caller. What follows a write (waiters served, bindings changed,
//! a lease end watched) is the lock-lifecycle layer's (`locks`): a write
//! that leaves a lease end to watch returns when.

use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::core::effects::HoldEffect;
use crate::core::errors::LockError;
use crate::core::grant::LockKind;
use crate::core::holders::{self, Hold, Holders, Kind};
use crate::core::lock::LockRef;
use crate::server::ffi::{self, KeyKind, LockKey};
use crate::server::held::{held, Held};
use crate::server::{state, stats};

/// When the next lease end of a key's holders is to be looked at, if a
/// write needs a look set up for it.
pub type Look = Option<i64>;

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

/// What a change of holders leaves to do on the key: its TTL is the
/// latest lease (set only when that moved), the key goes with its last
/// holder, and with `watch` (a lease was set) the next lease end is looked
/// at; removing holds never brings it earlier, and the look already set up
/// for it runs anyway.
struct After {
    latest: Option<i64>,
    latest_moved: bool,
    look: Look,
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

/// Carries out `after` on the key, closes it, and returns its look.
fn settle(mut key: LockKey, after: After) -> Look {
    match after.latest {
        None => delete(&mut key),
        Some(at) if after.latest_moved => key.set_expire_at(at),
        Some(_) => {}
    }
    after.look
}

/// Deletes a lock's key. Redis raises no key event for a deletion through
/// the module API, so the note of its unlink must not be taken for the next
/// expiry's.
fn delete(key: &mut LockKey) {
    key.delete();
    stats::forget_unlink();
}

/// Stores a grant exactly as the master (or the AOF) recorded it, and
/// passes the effect on as it came (a replica's own AOF and sub-replicas).
pub fn replay_grant(
    ctx: &Context,
    mut key: LockKey,
    lock: LockRef<'_>,
    expire_at: Option<i64>,
) -> Result<(), LockError> {
    // A shared lock or semaphore here is replaced, as the master replaced it: the master grants
    // an exclusive lock over one only once all its holds have ended, and a holder set whose
    // leases ran out before its timer ended them leaves no effect of its own behind.
    held(&key)?;
    if !key.set_lock(lock) {
        return Err(LockError::Internal);
    }
    if let Some(at) = expire_at {
        key.set_expire_at(at);
    }
    drop(key);
    state::with_clock(|c| c.observe(lock.fence()));
    ctx.replicate_verbatim();
    Ok(())
}

/// Stores one holder's effect exactly as the master (or the AOF) recorded
/// it, and passes it on as it came. The key's TTL is its latest lease;
/// returns the look to set up (its master ends the leases; should this
/// server be promoted, it watches them itself).
pub fn replay_hold(ctx: &Context, mut key: LockKey, effect: HoldEffect) -> Result<Look, LockError> {
    let current_kind = match held(&key)? {
        Held::Free => None,
        Held::Multi(h) => Some(h.kind()),
        // An exclusive lock here is replaced by a grant, as the master replaced it: its lease
        // ran out (the key's expiry not yet propagated) before the master granted this hold.
        Held::Exclusive(_) if matches!(effect, HoldEffect::Grant { .. }) => None,
        Held::Exclusive(_) => return Err(LockKind::ReadWrite.mismatch()),
    };
    match effect {
        HoldEffect::Grant {
            kind,
            token,
            fence,
            expire_at_ms,
            data,
        } => {
            let hold = Hold {
                fence,
                expire_at: expire_at_ms,
            };
            match current_kind {
                Some(k) if k == kind => {
                    if let Some(h) = key.holders_mut() {
                        // No data for the same grant (a renewal, a re-grant without DATA): it
                        // keeps what it has, as on the master (a grant's data only changes by
                        // a re-grant with DATA).
                        let kept = match data {
                            None if h.get(token).is_some_and(|old| old.fence == fence) => {
                                h.data_of(token).map(Box::<[u8]>::from)
                            }
                            _ => None,
                        };
                        h.insert_with_data(token, hold, data.or(kept.as_deref()));
                    }
                }
                // Holders of another kind here are replaced, as the master replaced them: it
                // grants another kind only once all their leases have run out, and the
                // previous release did not send their end first.
                _ => {
                    let mut h = Holders::new(kind);
                    h.insert_with_data(token, hold, data);
                    if !key.set_holders(h) {
                        return Err(LockError::Internal);
                    }
                }
            }
            state::with_clock(|c| c.observe(fence));
        }
        HoldEffect::End { token } => {
            if let Some(h) = key.holders_mut() {
                h.remove(token);
            }
        }
    }
    let after = match key.holders() {
        // The TTL is set whether or not the latest lease moved.
        Some(h) => After {
            latest: h.latest(),
            latest_moved: true,
            look: h.look_needed(),
        },
        None => After {
            latest: None,
            latest_moved: true,
            look: None,
        },
    };
    let look = settle(key, after);
    ctx.replicate_verbatim();
    Ok(look)
}

/// Raises the fence gate `name` to `fence` after a command it guarded ran,
/// unless the key moved on meanwhile (a higher gate, or another type the
/// command itself put under the name).
pub fn raise_gate(ctx: &Context, name: &RedisString, mut key: LockKey, fence: u64) {
    let may_set = match key.kind() {
        KeyKind::Empty => true,
        KeyKind::Lock => key.lock().is_some_and(|g| g.is_gate() && g.fence() < fence),
        KeyKind::Other => false,
    };
    if may_set && key.set_lock(LockRef::gate(fence)) {
        drop(key);
        ffi::replicate_gate(ctx, name, fence);
    }
}

/// Stores a gate's highest fence as the master (or the AOF) recorded it,
/// and passes the effect on as it came.
pub fn replay_gate(ctx: &Context, mut key: LockKey, fence: u64) -> Result<(), LockError> {
    match key.kind() {
        KeyKind::Other => return Err(LockError::WrongType),
        KeyKind::Lock if key.gate().is_none() => return Err(LockError::LockNotGate),
        _ => {}
    }
    if !key.set_lock(LockRef::gate(fence)) {
        return Err(LockError::Internal);
    }
    drop(key);
    ctx.replicate_verbatim();
    Ok(())
}
