//! The holders of a shared (read/write) lock or of a semaphore: one hold
//! per token, each with its own fence and lease, and public data if it was
//! granted some (`DATA`).
//!
//! Two forms of the same holds. A small set (most keys: a few readers, a
//! few places taken) is [`compact`]: one allocation with the holds in
//! lease-end order, found by a scan, rewritten on each change. A large one
//! is `indexed`: twice, by token, for the holder's own calls (O(1)), and
//! by lease end, so the next lease to end is found and removed in O(log H).
//! A set switches to the indexed form once it grows past [`COMPACT_MAX`]
//! holds and back only once it is down to [`COMPACT_AGAIN`], so a key
//! that hovers around one size does not switch on every call.
//!
//! The holders are the record of their key ([`super::record`]): `Holders`
//! starts with the record's header, so a key with holders is this one
//! small block plus the holds. How holds are `stored` in RDB files and
//! read back is beside it; `leases` has the holds' lease ends, `form`
//! the switch between the two forms, `iter` the walks over the holds.

use std::cell::Cell;

use super::mark::{MARK_AT, MULTI};

mod compact;
mod form;
mod hold;
mod indexed;
mod iter;
mod leases;
mod stored;
#[cfg(test)]
mod tests;

use compact::Compact;
use indexed::Indexed;

pub use compact::Entry;
pub use hold::{ended, Hold};
use iter::Walk;
pub use iter::{Entries, Iter};

/// The kind of a key with holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Read holds of a read/write lock.
    Shared,
    /// Places of a counted semaphore.
    Semaphore { limit: u32 },
}

pub use super::limits::MAX_LIMIT;

/// A set of holds takes the indexed form once it has more holds than this…
pub const COMPACT_MAX: usize = 16;
/// …or once its compact form would take more bytes than this (long tokens,
/// or data).
pub(super) const COMPACT_MAX_BYTES: usize = 4096;
/// An indexed set takes the compact form again once it is down to this
/// many holds…
pub const COMPACT_AGAIN: usize = 8;
/// …whose compact form takes at most this many bytes.
pub(super) const COMPACT_AGAIN_BYTES: usize = 2048;

/// `watched_by` when no look is scheduled. No look is ever due then: a
/// look is due just after a lease end, so never at `i64::MIN`.
const NOT_WATCHED: i64 = i64::MIN;

/// The holds and what they are of. `repr(C)`: it is the record of its key,
/// whose bytes 8 and 9 tell it from an exclusive lock's record (see
/// [`super::record`]); the layout keeps it one 32-byte block.
#[repr(C)]
pub struct Holders {
    /// The latest time a look at the next lease end is known to be
    /// scheduled for, under the key's current name; [`NOT_WATCHED`] when
    /// nothing is (new, copied, or moved to another name). Lets a new hold
    /// that ends after the first one skip the scheduler.
    watched_by: Cell<i64>,
    /// Always [`MULTI`], where an exclusive record has its token length.
    record_mark: [u8; 2],
    semaphore: bool,
    limit: u32,
    body: Body,
}

const _: () = assert!(std::mem::offset_of!(Holders, record_mark) == MARK_AT);

enum Body {
    Compact(Compact),
    Indexed(Box<Indexed>),
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
        self.kind() == other.kind() && self.entries().eq(other.entries())
    }
}

impl Eq for Holders {}

impl std::fmt::Debug for Holders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holders")
            .field("kind", &self.kind())
            .field("compact", &self.is_compact())
            .field("holds", &self.entries().collect::<Vec<_>>())
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
    /// Public data longer than a hold can carry, or holds written with
    /// data of which none has any.
    BadData,
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
            record_mark: MULTI.to_le_bytes(),
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
            Body::Indexed(x) => x.len(),
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
            Body::Compact(c) => c.find(token).map(|(_, h, _)| h),
            Body::Indexed(x) => x.get(token),
        }
    }

    /// The public data of `token`'s hold, if it holds and has some.
    pub fn data_of(&self, token: &[u8]) -> Option<&[u8]> {
        match &self.body {
            Body::Compact(c) => c.find(token).and_then(|(_, _, d)| d),
            Body::Indexed(x) => x.data_of(token),
        }
    }

    /// Whether any holder has public data.
    pub fn has_data(&self) -> bool {
        match &self.body {
            Body::Compact(c) => c.has_data(),
            Body::Indexed(x) => x.has_data(),
        }
    }

    /// Adds a hold without public data for a token that holds nothing yet.
    pub fn insert(&mut self, token: &[u8], hold: Hold) {
        self.insert_with_data(token, hold, None);
    }

    /// Adds a hold with its public data (if any) for a token that holds
    /// nothing yet.
    pub fn insert_with_data(&mut self, token: &[u8], hold: Hold, data: Option<&[u8]>) {
        match &mut self.body {
            Body::Compact(c) => {
                let at = c.find(token).map(|(i, _, _)| i);
                *c = c.rebuilt(at, Some((token, hold, data)));
            }
            Body::Indexed(x) => x.insert(token, hold, data),
        }
        self.fit();
    }

    /// Moves a holder's lease end; false if the token holds nothing.
    pub fn set_expiry(&mut self, token: &[u8], expire_at: i64) -> bool {
        let moved = match &mut self.body {
            Body::Compact(c) => match c.find(token) {
                Some((i, hold, data)) => {
                    let hold = Hold { expire_at, ..hold };
                    *c = c.rebuilt(Some(i), Some((token, hold, data)));
                    true
                }
                None => false,
            },
            Body::Indexed(x) => x.set_expiry(token, expire_at),
        };
        self.fit();
        moved
    }

    /// Replaces a holder's public data (`None`: it has none); false if the
    /// token holds nothing.
    pub fn set_data(&mut self, token: &[u8], data: Option<&[u8]>) -> bool {
        let set = match &mut self.body {
            Body::Compact(c) => match c.find(token) {
                Some((i, hold, _)) => {
                    *c = c.rebuilt(Some(i), Some((token, hold, data)));
                    true
                }
                None => false,
            },
            Body::Indexed(x) => x.set_data(token, data),
        };
        self.fit();
        set
    }

    pub fn remove(&mut self, token: &[u8]) -> Option<Hold> {
        let hold = match &mut self.body {
            Body::Compact(c) => {
                let (i, hold, _) = c.find(token)?;
                *c = c.rebuilt(Some(i), None);
                hold
            }
            Body::Indexed(x) => x.remove(token)?,
        };
        self.fit();
        Some(hold)
    }

    /// The highest fence of any holder.
    pub fn highest_fence(&self) -> u64 {
        self.iter().map(|(_, h)| h.fence).max().unwrap_or(0)
    }

    /// Every hold, in the order the leases end.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries())
    }

    /// Every hold with its public data, in the order the leases end.
    pub fn entries(&self) -> Entries<'_> {
        Entries(match &self.body {
            Body::Compact(c) => Walk::Compact(c.iter()),
            Body::Indexed(x) => Walk::Indexed(x.iter()),
        })
    }

    /// Every hold with its public data, in grant order (by fence): for
    /// listing.
    pub fn by_fence(&self) -> Vec<Entry<'_>> {
        let mut all: Vec<_> = self.entries().collect();
        all.sort_unstable_by_key(|(_, h, _)| h.fence);
        all
    }
}
