//! The effects replayed from a master or the AOF, stored exactly as they
//! were recorded and passed on as they came (a replica's own AOF and
//! sub-replicas).

use redis_module::Context;

use crate::core::effects::HoldEffect;
use crate::core::errors::LockError;
use crate::core::grant::LockKind;
use crate::core::holders::{Hold, Holders};
use crate::core::lock::LockRef;
use crate::server::ffi::LockKey;
use crate::server::held::{held, Held};
use crate::server::state;

use super::settle::{settle, After, Look};

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
