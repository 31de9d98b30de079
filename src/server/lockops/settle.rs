//! What a write leaves on its key: the TTL of a key with holders (its
//! latest lease), the key deleted with its last holder, and the next lease
//! end to look at.

use crate::core::holders::Holders;
use crate::server::ffi::LockKey;
use crate::server::stats;

/// When the next lease end of a key's holders is to be looked at, if a
/// write needs a look set up for it.
pub type Look = Option<i64>;

/// What a change of holders leaves to do on the key: its TTL is the
/// latest lease (set only when that moved), the key goes with its last
/// holder, and with `watch` (a lease was set) the next lease end is looked
/// at; removing holds never brings it earlier, and the look already set up
/// for it runs anyway.
pub struct After {
    pub latest: Option<i64>,
    pub latest_moved: bool,
    pub look: Look,
}

impl After {
    pub fn change(holders: &Holders, watch: bool, latest_before: Option<i64>) -> After {
        let latest = holders.latest();
        After {
            latest,
            latest_moved: latest != latest_before,
            look: if watch { holders.look_needed() } else { None },
        }
    }
}

/// Carries out `after` on the key, closes it, and returns its look.
pub fn settle(mut key: LockKey, after: After) -> Look {
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
pub fn delete(key: &mut LockKey) {
    key.delete();
    stats::forget_unlink();
}
