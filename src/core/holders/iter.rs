//! Walks over the holds of a key, in the order their leases end.

use super::compact::{self, Entry};
use super::hold::Hold;
use super::indexed;

/// The holds of a key, in the order the leases end.
#[derive(Clone)]
pub struct Iter<'a>(pub(super) Entries<'a>);

/// The holds of a key with their public data, in the order the leases end.
#[derive(Clone)]
pub struct Entries<'a>(pub(super) Walk<'a>);

#[derive(Clone)]
pub(super) enum Walk<'a> {
    Compact(compact::Iter<'a>),
    Indexed(indexed::Iter<'a>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], Hold);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(t, h, _)| (t, h))
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            Walk::Compact(c) => c.next(),
            Walk::Indexed(x) => x.next(),
        }
    }
}
