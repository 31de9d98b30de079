//! What an open key holds, in the terms the core's grant rules use.

use crate::core::errors::LockError;
use crate::core::grant::{Holding, Occupancy, Want};
use crate::core::holders::{self, Holders, Kind};
use crate::core::lock::LockRef;
use crate::core::record::Stored;
use crate::server::ffi::{KeyKind, LockKey};

#[derive(Clone, Copy)]
pub enum Held<'a> {
    Free,
    Exclusive(LockRef<'a>),
    Multi(&'a Holders),
}

/// The lock on an open key, or WRONGTYPE if it holds something else (a
/// fence gate included).
pub fn held(key: &LockKey) -> Result<Held<'_>, LockError> {
    match key.stored() {
        Some(Stored::Single(l)) if l.is_gate() => Err(LockError::GateNotLock),
        Some(Stored::Single(l)) => Ok(Held::Exclusive(l)),
        Some(Stored::Multi(h)) => Ok(Held::Multi(h)),
        None if key.kind() == KeyKind::Other => Err(LockError::WrongType),
        None => Ok(Held::Free),
    }
}

/// The request a holder of a key of `kind` made.
pub fn want_of(kind: Kind) -> Want {
    match kind {
        Kind::Shared => Want::Shared,
        Kind::Semaphore { limit } => Want::Place { limit },
    }
}

impl<'a> Held<'a> {
    pub fn occupancy(&self) -> Occupancy {
        match self {
            Held::Free => Occupancy::Free,
            Held::Exclusive(_) => Occupancy::Exclusive,
            Held::Multi(h) => Occupancy::of(h.kind(), h.len()),
        }
    }

    /// How `token` holds the key now (a hold whose lease ran out holds
    /// nothing, even before it is removed).
    pub fn holding(&self, token: &[u8], now_ms: i64) -> Holding {
        self.fence_of(token, now_ms).map(|_| match self {
            Held::Multi(h) => want_of(h.kind()),
            _ => Want::Exclusive,
        })
    }

    /// The fence of `token`'s live hold.
    pub fn fence_of(&self, token: &[u8], now_ms: i64) -> Option<u64> {
        match self {
            Held::Free => None,
            Held::Exclusive(l) => l.is_held_by(token).then(|| l.fence()),
            Held::Multi(h) => h
                .get(token)
                .filter(|x| !holders::ended(x.expire_at, now_ms))
                .map(|x| x.fence),
        }
    }

    /// What `LOCK.OBSERVE` shows of the key: the fence and public data of
    /// its exclusive holder, or of its live holder with the highest fence
    /// (holds whose lease ran out count as gone, as everywhere); fence 0
    /// and no data when nothing holds it.
    pub fn observed(&self, now_ms: i64) -> (u64, Option<&'a [u8]>) {
        match self {
            Held::Free => (0, None),
            Held::Exclusive(l) => (l.fence(), l.data()),
            Held::Multi(h) => h
                .entries()
                .filter(|(_, x, _)| !holders::ended(x.expire_at, now_ms))
                .max_by_key(|(_, x, _)| x.fence)
                .map_or((0, None), |(_, x, data)| (x.fence, data)),
        }
    }

    /// When the key's holds may next change by themselves: the exclusive
    /// lock's expiry, or the first holder's lease end.
    pub fn next_change(&self, key: &LockKey) -> Option<i64> {
        match self {
            Held::Free => None,
            Held::Exclusive(_) => key.expire_at(),
            Held::Multi(h) => h.earliest(),
        }
    }
}
