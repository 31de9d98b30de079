//! The holders of a shared (read/write) lock or of a semaphore: one hold
//! per token, each with its own fence and lease.
//!
//! Two forms of the same holds. A small set (most keys: a few readers, a
//! few places taken) is [`compact`]: one allocation with the holds in
//! lease-end order, found by a scan, rewritten on each change. A large one
//! is indexed twice: by token, for the holder's own calls (O(1)), and by
//! lease end, so the next lease to end is found and removed in O(log H).
//! A set switches to the indexed form once it grows past [`COMPACT_MAX`]
//! holds and back only once it is down to [`COMPACT_AGAIN`], so a key
//! that hovers around one size does not switch on every call.
//!
//! The holders are the record of their key ([`super::record`]): `Holders`
//! starts with the record's header, so a key with holders is this one
//! small block plus the holds.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::{btree_map, BTreeMap, HashMap, HashSet};

use super::fence;
use super::record;
use super::token::MAX_TOKEN_LEN;

mod compact;

use compact::Compact;

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

/// A set of holds takes the indexed form once it has more holds than this…
pub const COMPACT_MAX: usize = 16;
/// …or once its compact form would take more bytes than this (long tokens).
const COMPACT_MAX_BYTES: usize = 4096;
/// An indexed set takes the compact form again once it is down to this
/// many holds…
pub const COMPACT_AGAIN: usize = 8;
/// …whose compact form takes at most this many bytes.
const COMPACT_AGAIN_BYTES: usize = 2048;

/// `watched_by` when no look is scheduled. No look is ever due then: a
/// look is due just after a lease end, so never at `i64::MIN`.
const NOT_WATCHED: i64 = i64::MIN;

/// The holds and what they are of. `repr(C)`: it is the record of its key,
/// whose bytes 8 and 9 tell it from an exclusive lock's record (see
/// [`record`]); the layout keeps it one 32-byte block.
#[repr(C)]
pub struct Holders {
    /// The latest time a look at the next lease end is known to be
    /// scheduled for, under the key's current name; [`NOT_WATCHED`] when
    /// nothing is (new, copied, or moved to another name). Lets a new hold
    /// that ends after the first one skip the scheduler.
    watched_by: Cell<i64>,
    /// Always [`record::MULTI`], where an exclusive record has its token
    /// length.
    record_mark: [u8; 2],
    semaphore: bool,
    limit: u32,
    body: Body,
}

const _: () = assert!(std::mem::offset_of!(Holders, record_mark) == record::MARK_AT);

enum Body {
    Compact(Compact),
    Indexed(Box<Indexed>),
}

#[derive(Clone)]
struct Indexed {
    by_token: HashMap<Box<[u8]>, Hold>,
    /// (lease end, fence) → token. Fences are unique within a key.
    by_expiry: BTreeMap<(i64, u64), Box<[u8]>>,
}

impl Clone for Holders {
    /// A copy is not watched: it will live under another name.
    fn clone(&self) -> Holders {
        Holders {
            watched_by: Cell::new(NOT_WATCHED),
            record_mark: self.record_mark,
            semaphore: self.semaphore,
            limit: self.limit,
            body: match &self.body {
                Body::Compact(c) => Body::Compact(c.clone()),
                Body::Indexed(x) => Body::Indexed(x.clone()),
            },
        }
    }
}

impl PartialEq for Holders {
    /// The same kind and the same holds, whatever their form.
    fn eq(&self, other: &Holders) -> bool {
        self.kind() == other.kind() && self.iter().eq(other.iter())
    }
}

impl Eq for Holders {}

impl std::fmt::Debug for Holders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holders")
            .field("kind", &self.kind())
            .field("compact", &self.is_compact())
            .field("holds", &self.iter().collect::<Vec<_>>())
            .finish()
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
    /// Encoded holds cut short or with bytes that do not read as holds,
    /// or fewer or more of them than the count says.
    Malformed,
    /// Encoded holds not in the order of their lease ends (and fences).
    Unordered,
}

impl Holders {
    pub fn new(kind: Kind) -> Holders {
        Holders::with_body(kind, Body::Compact(Compact::new()))
    }

    fn with_body(kind: Kind, body: Body) -> Holders {
        let (semaphore, limit) = match kind {
            Kind::Shared => (false, 0),
            Kind::Semaphore { limit } => (true, limit),
        };
        Holders {
            watched_by: Cell::new(NOT_WATCHED),
            record_mark: record::MULTI.to_le_bytes(),
            semaphore,
            limit,
            body,
        }
    }

    pub fn kind(&self) -> Kind {
        if self.semaphore {
            Kind::Semaphore { limit: self.limit }
        } else {
            Kind::Shared
        }
    }

    pub fn len(&self) -> usize {
        match &self.body {
            Body::Compact(c) => c.len(),
            Body::Indexed(x) => x.by_token.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the holds are in their compact form (small sets).
    pub fn is_compact(&self) -> bool {
        matches!(self.body, Body::Compact(_))
    }

    pub fn get(&self, token: &[u8]) -> Option<Hold> {
        match &self.body {
            Body::Compact(c) => c.find(token).map(|(_, h)| h),
            Body::Indexed(x) => x.by_token.get(token).copied(),
        }
    }

    /// Adds a hold for a token that holds nothing yet.
    pub fn insert(&mut self, token: &[u8], hold: Hold) {
        match &mut self.body {
            Body::Compact(c) => {
                let at = c.find(token).map(|(i, _)| i);
                *c = c.rebuilt(at, Some((token, hold)));
            }
            Body::Indexed(x) => x.insert(token, hold),
        }
        self.fit();
    }

    /// Moves a holder's lease end; false if the token holds nothing.
    pub fn set_expiry(&mut self, token: &[u8], expire_at: i64) -> bool {
        let moved = match &mut self.body {
            Body::Compact(c) => match c.find(token) {
                Some((i, hold)) => {
                    let hold = Hold { expire_at, ..hold };
                    *c = c.rebuilt(Some(i), Some((token, hold)));
                    true
                }
                None => false,
            },
            Body::Indexed(x) => x.set_expiry(token, expire_at),
        };
        self.fit();
        moved
    }

    pub fn remove(&mut self, token: &[u8]) -> Option<Hold> {
        let hold = match &mut self.body {
            Body::Compact(c) => {
                let (i, hold) = c.find(token)?;
                *c = c.rebuilt(Some(i), None);
                hold
            }
            Body::Indexed(x) => x.remove(token)?,
        };
        self.fit();
        Some(hold)
    }

    /// The first lease to end.
    pub fn earliest(&self) -> Option<i64> {
        match &self.body {
            Body::Compact(c) => c.first().map(|(_, h)| h.expire_at),
            Body::Indexed(x) => x.by_expiry.first_key_value().map(|((at, _), _)| *at),
        }
    }

    /// The last lease to end: the key's own expiry.
    pub fn latest(&self) -> Option<i64> {
        match &self.body {
            Body::Compact(c) => c.last_expire_at(),
            Body::Indexed(x) => x.by_expiry.last_key_value().map(|((at, _), _)| *at),
        }
    }

    /// Takes out the next hold whose lease has ended at `now_ms`, if any.
    pub fn pop_ended(&mut self, now_ms: i64) -> Option<(Box<[u8]>, Hold)> {
        let popped = match &mut self.body {
            Body::Compact(c) => {
                let (token, hold) = c.first()?;
                if !ended(hold.expire_at, now_ms) {
                    return None;
                }
                let token: Box<[u8]> = token.into();
                *c = c.rebuilt(Some(0), None);
                (token, hold)
            }
            Body::Indexed(x) => x.pop_ended(now_ms)?,
        };
        self.fit();
        Some(popped)
    }

    /// When the next lease end must be looked at (just after it ends), if
    /// that is not already scheduled: the caller schedules it and this
    /// remembers it. `None` when a look is due no later than needed.
    pub fn look_needed(&self) -> Option<i64> {
        let earliest = self.earliest()?;
        let all_end_together = match &self.body {
            // Stops at the first lease that ends later: no full decode.
            Body::Compact(c) => c.iter().all(|(_, h)| h.expire_at == earliest),
            Body::Indexed(_) => Some(earliest) == self.latest(),
        };
        if all_end_together {
            // Every lease ends with the last one: the key's own TTL (the
            // latest lease) ends them all, as it ends an exclusive lock, and
            // a look per key would cost more memory than the key. Waiters
            // ask for their own look at that moment.
            return None;
        }
        let at = earliest.saturating_add(1);
        match self.watched_by.get() {
            w if w != NOT_WATCHED && w <= at => None,
            _ => {
                self.watched_by.set(at);
                Some(at)
            }
        }
    }

    /// A scheduled look ran (`next`: the one it set up, if any), or none is
    /// scheduled any more (`None`: the key moved, or its job was dropped).
    pub fn set_watched(&self, next: Option<i64>) {
        self.watched_by.set(next.unwrap_or(NOT_WATCHED));
    }

    /// The highest fence of any holder.
    pub fn highest_fence(&self) -> u64 {
        self.iter().map(|(_, h)| h.fence).max().unwrap_or(0)
    }

    /// Every hold, in the order the leases end.
    pub fn iter(&self) -> Iter<'_> {
        Iter(match &self.body {
            Body::Compact(c) => Walk::Compact(c.iter()),
            Body::Indexed(x) => Walk::Indexed(x.by_expiry.iter()),
        })
    }

    /// Every hold, in grant order (by fence): for listing.
    pub fn by_fence(&self) -> Vec<(&[u8], Hold)> {
        let mut all: Vec<_> = self.iter().collect();
        all.sort_unstable_by_key(|(_, h)| h.fence);
        all
    }

    /// Bytes the holders take, themselves included, for `MEMORY USAGE`: the
    /// compact form's block as the allocator rounds it; for the indexed
    /// form an estimate (the tokens twice, and each index's per-entry
    /// overhead, spare capacity and node slack included; checked against
    /// `used_memory` by a test).
    pub fn heap_size(&self) -> usize {
        const HASH_ENTRY: usize = 64;
        const TREE_ENTRY: usize = 64;
        std::mem::size_of::<Holders>()
            + match &self.body {
                Body::Compact(c) => allocation(c.byte_len()),
                Body::Indexed(x) => {
                    std::mem::size_of::<Indexed>()
                        + x.by_token
                            .keys()
                            .map(|t| 2 * t.len() + HASH_ENTRY + TREE_ENTRY)
                            .sum::<usize>()
                }
            }
    }

    /// The holds as RDB files and `DUMP` payloads store them (encoding
    /// version 3): in lease-end order, each against the one before it (see
    /// [`compact`]). Read back by [`Holders::from_encoded`].
    pub fn encoded(&self) -> Cow<'_, [u8]> {
        match &self.body {
            Body::Compact(c) => Cow::Borrowed(c.stored()),
            Body::Indexed(x) => Cow::Owned(compact::encode_stored(x.iter())),
        }
    }

    /// Checks a set of holds read back from storage: anything the module
    /// could not have written is refused.
    pub fn validate(&self) -> Result<(), HoldersError> {
        if let Kind::Semaphore { limit } = self.kind() {
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
        Holders::from_checked(kind, stored.into_iter().collect(), latest_end)
    }

    /// Rebuilds holds stored as [`Holders::encoded`] wrote them, `count`
    /// of them, refusing anything the module could not have written: as
    /// [`Holders::from_stored`], and bytes that do not read back as exactly
    /// `count` holds in lease-end order.
    pub fn from_encoded(
        kind: Kind,
        count: u64,
        bytes: &[u8],
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        let mut reader = compact::Reader::new(bytes);
        let mut holds = Vec::new();
        while let Some(hold) = reader.next_hold() {
            holds.push(hold.map_err(|_| HoldersError::Malformed)?);
        }
        if holds.len() as u64 != count {
            return Err(HoldersError::Malformed);
        }
        let order = |h: &Hold| (h.expire_at, h.fence);
        if holds.windows(2).any(|w| order(&w[0].1) >= order(&w[1].1)) {
            return Err(HoldersError::Unordered);
        }
        Holders::from_checked(kind, holds, latest_end)
    }

    fn from_checked<T: AsRef<[u8]>>(
        kind: Kind,
        mut holds: Vec<(T, Hold)>,
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        {
            let mut tokens = HashSet::new();
            let mut fences = HashSet::new();
            for (token, hold) in &holds {
                let token = token.as_ref();
                if token.is_empty() || token.len() > MAX_TOKEN_LEN {
                    return Err(HoldersError::BadToken);
                }
                if !fence::is_valid(hold.fence) {
                    return Err(HoldersError::BadFence);
                }
                if !(0..=latest_end).contains(&hold.expire_at) {
                    return Err(HoldersError::BadLeaseEnd);
                }
                if !tokens.insert(token) {
                    return Err(HoldersError::DuplicateToken);
                }
                if !fences.insert(hold.fence) {
                    return Err(HoldersError::DuplicateFence);
                }
            }
        }
        holds.sort_unstable_by_key(|(_, h)| (h.expire_at, h.fence));
        let holders = Holders::from_sorted(kind, holds.iter().map(|(t, h)| (t.as_ref(), *h)));
        holders.validate()?;
        Ok(holders)
    }

    /// Holders of `holds`, given in (lease end, fence) order, in the form
    /// that fits their number.
    fn from_sorted<'a>(
        kind: Kind,
        holds: impl Iterator<Item = (&'a [u8], Hold)> + Clone,
    ) -> Holders {
        let body = if holds.clone().count() <= COMPACT_MAX {
            Some(Compact::from_sorted(holds.clone()))
                .filter(|c| c.byte_len() <= COMPACT_MAX_BYTES)
                .map(Body::Compact)
        } else {
            None
        };
        let body = body.unwrap_or_else(|| Body::Indexed(Box::new(Indexed::from_holds(holds))));
        Holders::with_body(kind, body)
    }

    /// Switches form after a change, if the set crossed a threshold.
    fn fit(&mut self) {
        let switched = match &self.body {
            Body::Compact(c) if c.len() > COMPACT_MAX || c.byte_len() > COMPACT_MAX_BYTES => {
                Body::Indexed(Box::new(Indexed::from_holds(c.iter())))
            }
            Body::Indexed(x)
                if x.by_token.len() <= COMPACT_AGAIN
                    && x.stored_len_bound() <= COMPACT_AGAIN_BYTES =>
            {
                Body::Compact(Compact::from_sorted(x.iter()))
            }
            _ => return,
        };
        self.body = switched;
    }
}

/// The block the allocator hands out for `n` bytes: jemalloc's size
/// classes, which Redis uses (multiples of 16 up to 128, then four classes
/// per doubling).
fn allocation(n: usize) -> usize {
    match n {
        0..=8 => 8,
        9..=128 => n.next_multiple_of(16),
        _ => {
            let below = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            n.next_multiple_of(below / 4)
        }
    }
}

impl Indexed {
    fn from_holds<'a>(holds: impl Iterator<Item = (&'a [u8], Hold)>) -> Indexed {
        let mut x = Indexed {
            by_token: HashMap::new(),
            by_expiry: BTreeMap::new(),
        };
        for (token, hold) in holds {
            x.insert(token, hold);
        }
        x
    }

    fn insert(&mut self, token: &[u8], hold: Hold) {
        self.remove(token);
        self.by_token.insert(token.into(), hold);
        self.by_expiry
            .insert((hold.expire_at, hold.fence), token.into());
    }

    fn set_expiry(&mut self, token: &[u8], expire_at: i64) -> bool {
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

    fn remove(&mut self, token: &[u8]) -> Option<Hold> {
        let hold = self.by_token.remove(token)?;
        self.by_expiry.remove(&(hold.expire_at, hold.fence));
        Some(hold)
    }

    fn pop_ended(&mut self, now_ms: i64) -> Option<(Box<[u8]>, Hold)> {
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

    fn iter(&self) -> impl Iterator<Item = (&[u8], Hold)> + Clone + '_ {
        self.by_expiry
            .iter()
            .map(|(&(expire_at, fence), token)| (&token[..], Hold { fence, expire_at }))
    }

    /// At least the bytes of the holds' compact form.
    fn stored_len_bound(&self) -> usize {
        // Two varints of at most 10 bytes and a token length of at most 2.
        1 + self.by_token.keys().map(|t| t.len() + 22).sum::<usize>()
    }
}

/// The holds of a key, in the order the leases end.
#[derive(Clone)]
pub struct Iter<'a>(Walk<'a>);

#[derive(Clone)]
enum Walk<'a> {
    Compact(compact::Iter<'a>),
    Indexed(btree_map::Iter<'a, (i64, u64), Box<[u8]>>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], Hold);

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            Walk::Compact(c) => c.next(),
            Walk::Indexed(x) => x
                .next()
                .map(|(&(expire_at, fence), token)| (&token[..], Hold { fence, expire_at })),
        }
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
        assert_eq!(
            h.look_needed(),
            None,
            "one lease: the key's TTL ends it, as an exclusive lock's"
        );
        h.insert(b"z", hold(9, 100));
        assert_eq!(h.look_needed(), None, "leases that all end together");
        h.remove(b"z");
        h.insert(b"b", hold(2, 200));
        assert_eq!(h.look_needed(), Some(101), "a lease ends before the key's");
        assert_eq!(h.look_needed(), None);
        h.insert(b"d", hold(4, 150));
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
        let block = std::mem::size_of::<Holders>();
        assert_eq!(h.heap_size(), block + 8, "a count, in the smallest block");
        let now = 1_780_000_000_000;
        let fence = 0x2000_0000_0000;
        h.insert(&[0; 32], hold(fence, now));
        assert_eq!(
            h.heap_size(),
            block + 48,
            "count, 6 + 7 + 1 bytes, token: 47"
        );
        for i in 1..10 {
            h.insert(&[i; 32], hold(fence + u64::from(i), now + i64::from(i)));
        }
        assert_eq!(h.heap_size(), block + 384, "47 + 9 * 35 = 362 bytes");
        // The indexed form: the tokens twice and both indexes' entries.
        for i in 10..=COMPACT_MAX as u8 {
            h.insert(&[i; 3], hold(fence + u64::from(i), now));
        }
        assert!(!h.is_compact());
        let indexed = block + std::mem::size_of::<Indexed>();
        assert_eq!(
            h.heap_size(),
            indexed + 10 * (2 * 32 + 128) + 7 * (2 * 3 + 128)
        );
    }

    #[test]
    fn allocations_round_to_jemalloc_size_classes() {
        let classes = [
            (1, 8),
            (8, 8),
            (9, 16),
            (17, 32),
            (47, 48),
            (128, 128),
            (129, 160),
            (256, 256),
            (257, 320),
            (362, 384),
            (385, 448),
            (513, 640),
            (4097, 5120),
        ];
        for (n, class) in classes {
            assert_eq!(allocation(n), class, "{n}");
        }
    }

    #[test]
    fn a_set_switches_form_past_a_threshold_and_back_well_below() {
        let mut h = Holders::new(Kind::Semaphore { limit: 100 });
        let token = |i: usize| format!("holder-{i}").into_bytes();
        for i in 0..COMPACT_MAX {
            h.insert(&token(i), hold(i as u64 + 1, 1000 + i as i64));
            assert!(h.is_compact(), "{i}");
        }
        h.insert(&token(99), hold(99, 500));
        assert!(!h.is_compact(), "past the threshold");
        // Around the threshold it stays indexed.
        for _ in 0..3 {
            assert!(h.remove(&token(99)).is_some());
            assert!(!h.is_compact());
            h.insert(&token(99), hold(99, 500));
            assert!(!h.is_compact());
        }
        assert_eq!(h.earliest(), Some(500));
        while h.len() > COMPACT_AGAIN + 1 {
            h.pop_ended(i64::MAX).unwrap();
            assert!(!h.is_compact());
        }
        assert_eq!(h.pop_ended(i64::MAX).map(|(_, x)| x.fence), Some(8));
        assert!(h.is_compact(), "well below");
        assert_eq!(h.len(), COMPACT_AGAIN);
        assert_eq!(h.earliest(), Some(1008));
        assert_eq!(h.get(&token(15)), Some(hold(16, 1015)));
        // Long tokens take the indexed form sooner, and keep it.
        let mut long = Holders::new(Kind::Shared);
        for i in 0..8u8 {
            long.insert(&[i; MAX_TOKEN_LEN], hold(u64::from(i) + 1, 10));
        }
        assert!(!long.is_compact(), "8 tokens of 512 bytes");
        long.remove(&[0; MAX_TOKEN_LEN]);
        assert!(!long.is_compact());
        for i in 1..5u8 {
            long.remove(&[i; MAX_TOKEN_LEN]);
        }
        assert!(long.is_compact(), "3 of them");
    }

    #[test]
    fn stored_holds_round_trip_and_refuse_what_could_not_be_written() {
        let sem = Kind::Semaphore { limit: 40 };
        let mut h = Holders::new(sem);
        for i in 0..30u64 {
            h.insert(
                format!("t{i}").as_bytes(),
                hold(100 + i, 1000 + (i as i64 % 7)),
            );
            let bytes = h.encoded();
            let back = Holders::from_encoded(sem, h.len() as u64, &bytes, 2000).unwrap();
            assert_eq!(back, h, "{i}");
            assert_eq!(back.is_compact(), h.len() <= COMPACT_MAX, "{i}");
            // The first holder alone ends with the key's TTL: no look.
            assert_eq!(
                back.look_needed(),
                (i > 0).then_some(1001),
                "a set read back is not watched"
            );
        }
        let one = |token: &[u8], fence: u64, at: i64| {
            compact::encode_stored([(token, hold(fence, at))].into_iter())
        };
        let load = |count: u64, bytes: &[u8]| {
            Holders::from_encoded(sem, count, bytes, 2000).map(|h| h.len())
        };
        let a = one(b"a", 5, 10);
        assert_eq!(load(1, &a), Ok(1));
        assert_eq!(load(2, &a), Err(HoldersError::Malformed));
        assert_eq!(load(0, &a), Err(HoldersError::Malformed));
        assert_eq!(load(0, &[]), Err(HoldersError::Empty));
        assert_eq!(load(1, &a[..a.len() - 1]), Err(HoldersError::Malformed));
        assert_eq!(
            load(1, &[&a[..], &[0]].concat()),
            Err(HoldersError::Malformed)
        );
        // The second hold against the first: same lease end, fence +1, and
        // then the same fence or one lower: not in order.
        let two = |fence_delta: u8| [&a[..], &[0, fence_delta, 1, b'b']].concat();
        assert_eq!(load(2, &two(2)), Ok(2));
        assert_eq!(load(2, &two(0)), Err(HoldersError::Unordered));
        assert_eq!(load(2, &two(1)), Err(HoldersError::Unordered));
        assert_eq!(load(1, &one(b"", 5, 10)), Err(HoldersError::BadToken));
        let long = one(&[1; MAX_TOKEN_LEN + 1], 5, 10);
        assert_eq!(load(1, &long), Err(HoldersError::BadToken));
        assert_eq!(load(1, &one(b"a", 0, 10)), Err(HoldersError::BadFence));
        assert_eq!(
            load(1, &one(b"a", u64::MAX, 10)),
            Err(HoldersError::BadFence)
        );
        assert_eq!(load(1, &one(b"a", 5, -1)), Err(HoldersError::BadLeaseEnd));
        assert_eq!(load(1, &one(b"a", 5, 2001)), Err(HoldersError::BadLeaseEnd));
        let dup = [&a[..], &[1, 2, 1, b'a']].concat();
        assert_eq!(load(2, &dup), Err(HoldersError::DuplicateToken));
        // A fence delta back to the same fence, a later lease end.
        let dup_fence = [&a[..], &[1, 0, 1, b'b']].concat();
        assert_eq!(load(2, &dup_fence), Err(HoldersError::DuplicateFence));
        let full: Vec<u8> = (0..41u64)
            .flat_map(|i| {
                if i == 0 {
                    a.clone()
                } else {
                    vec![0, 2, 1, i as u8]
                }
            })
            .collect();
        assert_eq!(load(41, &full), Err(HoldersError::OverLimit));
        let bad_limit = Holders::from_encoded(Kind::Semaphore { limit: 0 }, 1, &a, 2000);
        assert_eq!(bad_limit.map(|h| h.len()), Err(HoldersError::BadLimit));
    }

    /// A random sequence of operations gives the same answers as the
    /// indexed form alone (the reference: it never switches), whatever form
    /// the set is in; and the form follows the thresholds.
    #[test]
    fn both_forms_answer_alike() {
        use rand::{Rng, SeedableRng};
        let seed = rand::random::<u64>();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut switches = 0;
        for _ in 0..20 {
            let kind = Kind::Semaphore { limit: 64 };
            let mut h = Holders::new(kind);
            let mut model = Indexed::from_holds(std::iter::empty());
            let mut model_watch: Option<i64> = None;
            let mut compact = true;
            let mut fence = 1u64 << 45;
            let tokens: Vec<Vec<u8>> = (0..40)
                .map(|i| {
                    let len = if i % 5 == 0 {
                        rng.gen_range(1..200)
                    } else {
                        32
                    };
                    (0..len).map(|j| (i * 7 + j) as u8).collect()
                })
                .collect();
            for step in 0..400 {
                let what = format!("seed {seed} step {step}");
                let token = &tokens[rng.gen_range(0..tokens.len())];
                let at = 1_780_000_000_000 + rng.gen_range(0..50);
                match rng.gen_range(0..10) {
                    0..=3 => {
                        fence += rng.gen_range(1..3000);
                        h.insert(token, hold(fence, at));
                        model.insert(token, hold(fence, at));
                    }
                    4 => assert_eq!(
                        h.set_expiry(token, at),
                        model.set_expiry(token, at),
                        "{what}"
                    ),
                    5 | 6 => assert_eq!(h.remove(token), model.remove(token), "{what}"),
                    7 => {
                        let now = at - 20;
                        loop {
                            let (got, want) = (h.pop_ended(now), model.pop_ended(now));
                            assert_eq!(got, want, "{what}");
                            if got.is_none() {
                                break;
                            }
                        }
                    }
                    8 => {
                        let last = model.by_expiry.last_key_value().map(|((e, _), _)| *e);
                        let want = model
                            .by_expiry
                            .first_key_value()
                            .filter(|((e, _), _)| Some(*e) != last)
                            .map(|((e, _), _)| e.saturating_add(1))
                            .filter(|&e| model_watch.is_none_or(|w| w > e));
                        if want.is_some() {
                            model_watch = want;
                        }
                        assert_eq!(h.look_needed(), want, "{what}");
                    }
                    _ => {
                        let next = rng.gen_bool(0.5).then_some(at);
                        h.set_watched(next);
                        model_watch = next;
                    }
                }
                let was = compact;
                compact = if compact {
                    model.by_token.len() <= COMPACT_MAX
                } else {
                    model.by_token.len() <= COMPACT_AGAIN
                };
                switches += usize::from(was != compact);
                assert_eq!(
                    h.is_compact(),
                    compact,
                    "{what}: form at {}",
                    model.by_token.len()
                );
                assert_eq!(h.len(), model.by_token.len(), "{what}");
                assert_eq!(
                    h.get(token),
                    model.by_token.get(&token[..]).copied(),
                    "{what}"
                );
                assert!(h.iter().eq(model.iter()), "{what}");
                let first = model.by_expiry.first_key_value().map(|((e, _), _)| *e);
                let last = model.by_expiry.last_key_value().map(|((e, _), _)| *e);
                assert_eq!((h.earliest(), h.latest()), (first, last), "{what}");
                let top = model.by_token.values().map(|x| x.fence).max().unwrap_or(0);
                assert_eq!(h.highest_fence(), top, "{what}");
                let by_fence: Vec<_> = h.by_fence().into_iter().map(|(_, x)| x.fence).collect();
                assert!(by_fence.windows(2).all(|w| w[0] < w[1]), "{what}");
                let copy = h.clone();
                assert_eq!(copy, h, "{what}");
                if !h.is_empty() {
                    assert_eq!(
                        copy.look_needed().is_some(),
                        first != last,
                        "{what}: a copy is not watched (and a set whose leases all end \
                         with the key's TTL needs no look)"
                    );
                    let back = Holders::from_encoded(kind, h.len() as u64, &h.encoded(), i64::MAX)
                        .unwrap();
                    assert_eq!(back, h, "{what}: stored and read back");
                    assert_eq!(
                        h.encoded(),
                        compact::encode_stored(model.iter()),
                        "{what}: one stored form for both"
                    );
                }
            }
        }
        assert!(
            switches >= 20,
            "seed {seed}: the sets switched form {switches} times"
        );
    }
}
