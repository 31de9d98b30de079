//! Which form a set of holds takes (`compact` or `indexed`, see the
//! module's documentation), and the bytes it takes.

use super::compact::{Compact, Entry};
use super::indexed::Indexed;
use super::{
    Body, Holders, Kind, COMPACT_AGAIN, COMPACT_AGAIN_BYTES, COMPACT_MAX, COMPACT_MAX_BYTES,
};

impl Holders {
    /// Bytes the holders take, themselves included, for `MEMORY USAGE`: the
    /// compact form's block as the allocator rounds it; for the indexed
    /// form an estimate (see `Indexed::heap_size`).
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Holders>()
            + match &self.body {
                Body::Compact(c) => allocation(c.byte_len()),
                Body::Indexed(x) => x.heap_size(),
            }
    }

    /// Holders of `holds`, given in (lease end, fence) order, in the form
    /// that fits their number.
    pub(super) fn from_sorted<'a>(
        kind: Kind,
        holds: impl Iterator<Item = Entry<'a>> + Clone,
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
    pub(super) fn fit(&mut self) {
        let switched = match &self.body {
            Body::Compact(c) if c.len() > COMPACT_MAX || c.byte_len() > COMPACT_MAX_BYTES => {
                Body::Indexed(Box::new(Indexed::from_holds(c.iter())))
            }
            Body::Indexed(x)
                if x.len() <= COMPACT_AGAIN && x.stored_len_bound() <= COMPACT_AGAIN_BYTES =>
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
pub(super) fn allocation(n: usize) -> usize {
    match n {
        0..=8 => 8,
        9..=128 => n.next_multiple_of(16),
        _ => {
            let below = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            n.next_multiple_of(below / 4)
        }
    }
}
