//! The holders of a shared (read/write) lock or of a semaphore: one hold
//! per token, each with its own fence and lease.
//!
//! Two indexes over the same holds: by token, for the holder's own calls
//! (O(1)), and by lease end, so the next lease to end is found and removed
//! in O(log H). Nothing here scans all holders except listing them.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};

use super::fence;
use super::token::MAX_TOKEN_LEN;

/// The kind of a key with holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Read holds of a read/write lock.
    Shared,
    /// Places of a counted semaphore.
    Semaphore { limit: u32 },
}

pub use super::limits::MAX_LIMIT;

/// One holder's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub fence: u64,
    /// Absolute Unix milliseconds; the hold ends once the clock passes it.
    pub expire_at: i64,
}

/// Whether a lease ending at `expire_at` has ended at `now_ms`. Same rule
/// as Redis's key expiry: a key is gone once the clock is past its time.
pub fn ended(expire_at: i64, now_ms: i64) -> bool {
    expire_at < now_ms
}

#[derive(Debug, PartialEq, Eq)]
pub struct Holders {
    kind: Kind,
    by_token: HashMap<Box<[u8]>, Hold>,
    /// (lease end, fence) → token. Fences are unique within a key.
    by_expiry: BTreeMap<(i64, u64), Box<[u8]>>,
    /// The latest time a look at the next lease end is known to be
    /// scheduled for, under the key's current name; `None` when nothing is
    /// (new, copied, or moved to another name). Lets a new hold that ends
    /// after the first one skip the scheduler.
    watched_by: Cell<Option<i64>>,
}

impl Clone for Holders {
    /// A copy is not watched: it will live under another name.
    fn clone(&self) -> Holders {
        Holders {
            kind: self.kind,
            by_token: self.by_token.clone(),
            by_expiry: self.by_expiry.clone(),
            watched_by: Cell::new(None),
        }
    }
}

/// Why stored holders could not be read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldersError {
    BadLimit,
    BadToken,
    BadFence,
    DuplicateToken,
    DuplicateFence,
    OverLimit,
    Empty,
    /// A lease end before the Unix epoch, or later than a lease granted now
    /// with the longest TTL could end.
    BadLeaseEnd,
}

impl Holders {
    pub fn new(kind: Kind) -> Holders {
        Holders {
            kind,
            by_token: HashMap::new(),
            by_expiry: BTreeMap::new(),
            watched_by: Cell::new(None),
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }

    pub fn get(&self, token: &[u8]) -> Option<Hold> {
        self.by_token.get(token).copied()
    }

    /// Adds a hold for a token that holds nothing yet.
    pub fn insert(&mut self, token: &[u8], hold: Hold) {
        self.remove(token);
        self.by_token.insert(token.into(), hold);
        self.by_expiry
            .insert((hold.expire_at, hold.fence), token.into());
    }

    /// Moves a holder's lease end; false if the token holds nothing.
    pub fn set_expiry(&mut self, token: &[u8], expire_at: i64) -> bool {
        let Some(hold) = self.by_token.get_mut(token) else {
            return false;
        };
        let moved = self.by_expiry.remove(&(hold.expire_at, hold.fence));
        hold.expire_at = expire_at;
        let key = (expire_at, hold.fence);
        self.by_expiry
            .insert(key, moved.unwrap_or_else(|| token.into()));
        true
    }

    pub fn remove(&mut self, token: &[u8]) -> Option<Hold> {
        let hold = self.by_token.remove(token)?;
        self.by_expiry.remove(&(hold.expire_at, hold.fence));
        Some(hold)
    }

    /// The first lease to end.
    pub fn earliest(&self) -> Option<i64> {
        self.by_expiry.first_key_value().map(|((at, _), _)| *at)
    }

    /// The last lease to end: the key's own expiry.
    pub fn latest(&self) -> Option<i64> {
        self.by_expiry.last_key_value().map(|((at, _), _)| *at)
    }

    /// Takes out the next hold whose lease has ended at `now_ms`, if any.
    pub fn pop_ended(&mut self, now_ms: i64) -> Option<(Box<[u8]>, Hold)> {
        let (&(at, fence), _) = self.by_expiry.first_key_value()?;
        if !ended(at, now_ms) {
            return None;
        }
        let (_, token) = self.by_expiry.pop_first()?;
        self.by_token.remove(&token);
        Some((
            token,
            Hold {
                fence,
                expire_at: at,
            },
        ))
    }

    /// When the next lease end must be looked at (just after it ends), if
    /// that is not already scheduled: the caller schedules it and this
    /// remembers it. `None` when a look is due no later than needed.
    pub fn look_needed(&self) -> Option<i64> {
        let at = self.earliest()?.saturating_add(1);
        match self.watched_by.get() {
            Some(w) if w <= at => None,
            _ => {
                self.watched_by.set(Some(at));
                Some(at)
            }
        }
    }

    /// A scheduled look ran (`next`: the one it set up, if any), or none is
    /// scheduled any more (`None`: the key moved, or its job was dropped).
    pub fn set_watched(&self, next: Option<i64>) {
        self.watched_by.set(next);
    }

    /// The highest fence of any holder.
    pub fn highest_fence(&self) -> u64 {
        self.by_token.values().map(|h| h.fence).max().unwrap_or(0)
    }

    /// Every hold, in the order the leases end.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Hold)> + '_ {
        self.by_expiry
            .iter()
            .map(|(&(expire_at, fence), token)| (&token[..], Hold { fence, expire_at }))
    }

    /// Every hold, in grant order (by fence): for listing.
    pub fn by_fence(&self) -> Vec<(&[u8], Hold)> {
        let mut all: Vec<_> = self.iter().collect();
        all.sort_unstable_by_key(|(_, h)| h.fence);
        all
    }

    /// Heap bytes the holds take, for `MEMORY USAGE` (an estimate: the
    /// tokens twice, and each index's per-entry overhead, spare capacity
    /// and node slack included; checked against `used_memory` by a test).
    pub fn heap_size(&self) -> usize {
        const HASH_ENTRY: usize = 64;
        const TREE_ENTRY: usize = 64;
        self.by_token
            .keys()
            .map(|t| 2 * t.len() + HASH_ENTRY + TREE_ENTRY)
            .sum::<usize>()
            + std::mem::size_of::<Holders>()
    }

    /// Checks a set of holds read back from storage: anything the module
    /// could not have written is refused.
    pub fn validate(&self) -> Result<(), HoldersError> {
        if let Kind::Semaphore { limit } = self.kind {
            if !(1..=MAX_LIMIT).contains(&limit) {
                return Err(HoldersError::BadLimit);
            }
            if self.len() > limit as usize {
                return Err(HoldersError::OverLimit);
            }
        }
        if self.is_empty() {
            return Err(HoldersError::Empty);
        }
        Ok(())
    }

    /// Rebuilds holds read back from storage, refusing anything the module
    /// could not have written: among that, a lease end after `latest_end`
    /// (now plus the longest TTL), which would make a hold that never ends.
    pub fn from_stored(
        kind: Kind,
        stored: impl IntoIterator<Item = (Vec<u8>, Hold)>,
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        let mut holders = Holders::new(kind);
        let mut fences = std::collections::HashSet::new();
        for (token, hold) in stored {
            if token.is_empty() || token.len() > MAX_TOKEN_LEN {
                return Err(HoldersError::BadToken);
            }
            if !fence::is_valid(hold.fence) {
                return Err(HoldersError::BadFence);
            }
            if !(0..=latest_end).contains(&hold.expire_at) {
                return Err(HoldersError::BadLeaseEnd);
            }
            if holders.by_token.contains_key(&token[..]) {
                return Err(HoldersError::DuplicateToken);
            }
            if !fences.insert(hold.fence) {
                return Err(HoldersError::DuplicateFence);
            }
            holders.insert(&token, hold);
        }
        holders.validate()?;
        Ok(holders)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(fence: u64, expire_at: i64) -> Hold {
        Hold { fence, expire_at }
    }

    #[test]
    fn leases_end_in_order_of_expiry() {
        let mut h = Holders::new(Kind::Shared);
        h.insert(b"a", hold(1, 300));
        h.insert(b"b", hold(2, 100));
        h.insert(b"c", hold(3, 200));
        assert_eq!(
            (h.earliest(), h.latest(), h.len()),
            (Some(100), Some(300), 3)
        );
        assert_eq!(
            h.pop_ended(100),
            None,
            "a lease ends once the clock is past it"
        );
        let (t, x) = h.pop_ended(101).unwrap();
        assert_eq!((&t[..], x), (&b"b"[..], hold(2, 100)));
        assert_eq!(h.pop_ended(101), None);
        assert_eq!(h.get(b"b"), None);
        assert_eq!(h.earliest(), Some(200));
    }

    #[test]
    fn extending_moves_the_lease_in_the_order() {
        let mut h = Holders::new(Kind::Semaphore { limit: 3 });
        h.insert(b"a", hold(1, 100));
        h.insert(b"b", hold(2, 200));
        assert!(h.set_expiry(b"a", 500));
        assert!(!h.set_expiry(b"zz", 500));
        assert_eq!((h.earliest(), h.latest()), (Some(200), Some(500)));
        assert_eq!(h.get(b"a"), Some(hold(1, 500)));
        assert_eq!(
            h.iter().map(|(t, _)| t.to_vec()).collect::<Vec<_>>(),
            [b"b".to_vec(), b"a".to_vec()]
        );
        assert_eq!(
            h.by_fence()
                .iter()
                .map(|(_, x)| x.fence)
                .collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(h.remove(b"a"), Some(hold(1, 500)));
        assert_eq!(
            (h.earliest(), h.latest(), h.len()),
            (Some(200), Some(200), 1)
        );
        assert_eq!(h.highest_fence(), 2);
        assert_eq!(h.remove(b"a"), None);
    }

    #[test]
    fn loading_refuses_what_could_not_be_written() {
        let sem = Kind::Semaphore { limit: 2 };
        let load = |kind, holds: &[(&[u8], u64)]| {
            Holders::from_stored(
                kind,
                holds.iter().map(|(t, f)| (t.to_vec(), hold(*f, 9))),
                9,
            )
            .map(|h| h.len())
        };
        assert_eq!(load(sem, &[]), Err(HoldersError::Empty));
        assert_eq!(load(sem, &[(b"", 1)]), Err(HoldersError::BadToken));
        assert_eq!(load(sem, &[(&[1; 513], 1)]), Err(HoldersError::BadToken));
        assert_eq!(load(sem, &[(&[1; 512], 1)]), Ok(1));
        assert_eq!(load(sem, &[(b"a", 0)]), Err(HoldersError::BadFence));
        assert_eq!(
            load(sem, &[(b"a", 1), (b"a", 2)]),
            Err(HoldersError::DuplicateToken)
        );
        assert_eq!(
            load(sem, &[(b"a", 1), (b"b", 1)]),
            Err(HoldersError::DuplicateFence)
        );
        assert_eq!(load(sem, &[(b"a", 1), (b"b", 2)]), Ok(2));
        assert_eq!(
            load(sem, &[(b"a", 1), (b"b", 2), (b"c", 3)]),
            Err(HoldersError::OverLimit)
        );
        assert_eq!(
            load(Kind::Shared, &[(b"a", 1), (b"b", 2), (b"c", 3)]),
            Ok(3)
        );
        assert_eq!(
            load(Kind::Semaphore { limit: 0 }, &[(b"a", 1)]),
            Err(HoldersError::BadLimit)
        );
        let over = Kind::Semaphore {
            limit: MAX_LIMIT + 1,
        };
        assert_eq!(load(over, &[(b"a", 1)]), Err(HoldersError::BadLimit));
        let ending = |at: i64| {
            Holders::from_stored(Kind::Shared, [(b"a".to_vec(), hold(1, at))], 100).map(|h| h.len())
        };
        assert_eq!(ending(100), Ok(1));
        assert_eq!(ending(0), Ok(1));
        assert_eq!(ending(101), Err(HoldersError::BadLeaseEnd));
        assert_eq!(ending(i64::MAX), Err(HoldersError::BadLeaseEnd));
        assert_eq!(ending(-1), Err(HoldersError::BadLeaseEnd));
    }

    #[test]
    fn a_look_is_scheduled_only_when_the_first_lease_end_moves_earlier() {
        let mut h = Holders::new(Kind::Shared);
        assert_eq!(h.look_needed(), None, "no holders, nothing to look at");
        h.insert(b"a", hold(1, 100));
        assert_eq!(h.look_needed(), Some(101));
        assert_eq!(h.look_needed(), None);
        h.insert(b"b", hold(2, 200));
        assert_eq!(h.look_needed(), None, "a later lease is covered");
        h.insert(b"c", hold(3, 50));
        assert_eq!(h.look_needed(), Some(51));
        assert_eq!(h.clone().look_needed(), Some(51), "a copy is not watched");
        h.set_watched(None);
        assert_eq!(
            h.look_needed(),
            Some(51),
            "a key that moved is looked at again"
        );
        h.set_watched(Some(300));
        assert_eq!(h.look_needed(), Some(51));
    }

    #[test]
    fn memory_grows_with_holders() {
        let mut h = Holders::new(Kind::Shared);
        let empty = h.heap_size();
        assert_eq!(empty, std::mem::size_of::<Holders>());
        h.insert(&[7; 32], hold(1, 1));
        h.insert(&[8; 3], hold(2, 1));
        assert_eq!(h.heap_size(), empty + (2 * 32 + 128) + (2 * 3 + 128));
    }
}
