//! Bytes kept inline when short, shared on the heap when long.
//!
//! Every wait copies its token, and every command that names a lock makes
//! an id holding the name: on a hot lock that is an allocation and a free
//! per handoff for each. Lock names and tokens are mostly short (a
//! generated token is 32 bytes, a UUID 36), so they live inside the value;
//! a longer one is shared, so a copy is a count, not an allocation.

use std::fmt;
use std::ops::Deref;
use std::rc::Rc;

/// At most `N` bytes inline (`N` < 256), more on the heap.
#[derive(Clone)]
pub enum ShortBytes<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Shared(Rc<[u8]>),
}

impl<const N: usize> ShortBytes<N> {
    pub fn new(from: &[u8]) -> ShortBytes<N> {
        const { assert!(N <= u8::MAX as usize, "the inline length is a u8") };
        if from.len() > N {
            return ShortBytes::Shared(Rc::from(from));
        }
        let mut bytes = [0u8; N];
        bytes[..from.len()].copy_from_slice(from);
        ShortBytes::Inline {
            len: from.len() as u8,
            bytes,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            ShortBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            ShortBytes::Shared(b) => b,
        }
    }
}

impl<const N: usize> Deref for ShortBytes<N> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl<const N: usize> PartialEq for ShortBytes<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<const N: usize> Eq for ShortBytes<N> {}

impl<const N: usize> fmt::Debug for ShortBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_bytes_stay_inline_and_long_ones_are_shared() {
        for len in [0, 1, 7, 8] {
            let b: Vec<u8> = (0..len as u8).collect();
            let s = ShortBytes::<8>::new(&b);
            assert!(matches!(s, ShortBytes::Inline { .. }), "{len}");
            assert_eq!(&*s, &b[..]);
            assert_eq!(s.clone(), s);
        }
        let long = [9u8; 9];
        let s = ShortBytes::<8>::new(&long);
        let ShortBytes::Shared(rc) = &s else {
            panic!("9 bytes do not fit in 8");
        };
        let copy = s.clone();
        assert_eq!(Rc::strong_count(rc), 2, "a copy shares the bytes");
        assert_eq!((&*copy, &*s), (&long[..], &long[..]));
        assert_ne!(ShortBytes::<8>::new(b"ab"), ShortBytes::<8>::new(b"ab\0"));
    }

    #[test]
    fn the_sizes_the_tables_count_on() {
        #[cfg(target_pointer_width = "64")]
        {
            assert_eq!(std::mem::size_of::<ShortBytes<30>>(), 32);
            assert_eq!(std::mem::size_of::<ShortBytes<38>>(), 40);
        }
    }
}
