//! The compact form of a small set of holds, and the byte encoding of
//! holds that it shares with RDB files and `DUMP` payloads.
//!
//! Holds are written one after another in (lease end, fence) order, each
//! against the one before it (the first against zero):
//!
//! - the lease end's increase, as an unsigned LEB128 varint;
//! - the fence's change, zigzag-encoded, as a varint;
//! - the token's length, as a varint, then the token;
//! - only in holds written "with data" (a set where some holder has public
//!   data): the data's length as a varint (0: none), then the data.
//!
//! Holders granted around the same time with the same TTL differ by a few
//! milliseconds and a few fences, so a hold costs its token plus 3–5 bytes
//! (and its data plus one or two with data). In memory the holds follow a
//! one-byte count, whose top bit says they are written with data, in one
//! exact-size allocation; any change writes a new one (the set is small).

use super::hold::Hold;
use crate::core::varint::{self, len as varint_len, put as put_varint};

/// Set in the count byte of holds written with data.
const WITH_DATA: u8 = 0x80;

/// A hold as the encoding carries it: token, grant, public data.
pub type Entry<'a> = (&'a [u8], Hold, Option<&'a [u8]>);

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

/// Where the next hold is written from or read against.
#[derive(Debug, Clone, Copy, Default)]
struct Previous {
    expire_at: i64,
    fence: u64,
}

impl Previous {
    fn deltas(&self, hold: Hold) -> (u64, u64) {
        (
            hold.expire_at.wrapping_sub(self.expire_at) as u64,
            zigzag(hold.fence.wrapping_sub(self.fence) as i64),
        )
    }

    fn entry_len(&self, (token, hold, data): Entry<'_>, with_data: bool) -> usize {
        let (end, fence) = self.deltas(hold);
        let data_len = data.map_or(0, <[u8]>::len);
        let data = match with_data {
            true => varint_len(data_len as u64) + data_len,
            false => 0,
        };
        varint_len(end) + varint_len(fence) + varint_len(token.len() as u64) + token.len() + data
    }

    fn write(&mut self, out: &mut Vec<u8>, (token, hold, data): Entry<'_>, with_data: bool) {
        let (end, fence) = self.deltas(hold);
        put_varint(out, end);
        put_varint(out, fence);
        put_varint(out, token.len() as u64);
        out.extend_from_slice(token);
        if with_data {
            let data = data.unwrap_or_default();
            put_varint(out, data.len() as u64);
            out.extend_from_slice(data);
        }
        *self = Previous {
            expire_at: hold.expire_at,
            fence: hold.fence,
        };
    }
}

/// Bytes read one hold at a time.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
    previous: Previous,
    with_data: bool,
}

/// What is wrong with encoded holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Cut short, a varint longer than a `u64`'s or not in its shortest
    /// form, or a token or data longer than what follows.
    Bytes,
}

impl<'a> Reader<'a> {
    /// Holds written without data (`with_data` false) or with it.
    pub fn new(bytes: &'a [u8], with_data: bool) -> Reader<'a> {
        Reader {
            rest: bytes,
            previous: Previous::default(),
            with_data,
        }
    }

    /// A varint in its shortest form, as [`put_varint`] writes it.
    fn varint(&mut self) -> Result<u64, Malformed> {
        varint::take(&mut self.rest).ok_or(Malformed::Bytes)
    }

    /// A length, then that many bytes.
    fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| Malformed::Bytes)?;
        if len > self.rest.len() {
            return Err(Malformed::Bytes);
        }
        let (bytes, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(bytes)
    }

    /// The next hold; `None` at the end.
    pub fn next_hold(&mut self) -> Option<Result<Entry<'a>, Malformed>> {
        if self.rest.is_empty() {
            return None;
        }
        Some(self.read_hold())
    }

    fn read_hold(&mut self) -> Result<Entry<'a>, Malformed> {
        let end = self.varint()?;
        let fence = self.varint()?;
        let token = self.bytes()?;
        let data = match self.with_data {
            true => Some(self.bytes()?).filter(|d| !d.is_empty()),
            false => None,
        };
        let hold = Hold {
            expire_at: self.previous.expire_at.wrapping_add(end as i64),
            fence: self.previous.fence.wrapping_add(unzigzag(fence) as u64),
        };
        self.previous = Previous {
            expire_at: hold.expire_at,
            fence: hold.fence,
        };
        Ok((token, hold, data))
    }
}

/// Holds to encode: calls its argument with each, in (lease end, fence)
/// order; as often as asked.
type EachHold<'a> = &'a dyn Fn(&mut dyn FnMut(Entry<'_>));

/// Encodes holds after `prefix`, with their data or without. `each` is
/// called twice: once to size the buffer, once to fill it.
fn encode(prefix: &[u8], with_data: bool, each: EachHold<'_>) -> Vec<u8> {
    let mut len = prefix.len();
    let mut previous = Previous::default();
    each(&mut |entry| {
        len += previous.entry_len(entry, with_data);
        previous = Previous {
            expire_at: entry.1.expire_at,
            fence: entry.1.fence,
        };
    });
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(prefix);
    let mut previous = Previous::default();
    each(&mut |entry| previous.write(&mut out, entry, with_data));
    debug_assert_eq!(out.len(), len, "sized as written");
    out
}

/// Whether any of `holds` carries public data.
fn any_data<'a>(holds: impl Iterator<Item = Entry<'a>>) -> bool {
    holds.into_iter().any(|(_, _, d)| d.is_some())
}

/// Holds as stored in RDB files and `DUMP` payloads, and whether they are
/// written with data (only when some holder has data: a set without any
/// is stored as releases before per-holder data stored it).
pub fn encode_stored<'a>(holds: impl Iterator<Item = Entry<'a>> + Clone) -> (Vec<u8>, bool) {
    let with_data = any_data(holds.clone());
    let bytes = encode(&[], with_data, &|f| holds.clone().for_each(&mut *f));
    (bytes, with_data)
}

/// A small set of holds in one allocation: a count (its top bit: written
/// with data), then the holds in (lease end, fence) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compact {
    bytes: Box<[u8]>,
}

impl Compact {
    /// The most holds this form can count (it switches form well before).
    pub const MAX_COUNT: usize = (WITH_DATA - 1) as usize;

    pub fn new() -> Compact {
        Compact {
            bytes: Box::new([0]),
        }
    }

    /// From holds in (lease end, fence) order, at most [`Compact::MAX_COUNT`].
    pub fn from_sorted<'a>(holds: impl Iterator<Item = Entry<'a>> + Clone) -> Compact {
        Compact::build(any_data(holds.clone()), &|f| {
            holds.clone().for_each(&mut *f)
        })
    }

    fn build(with_data: bool, each: EachHold<'_>) -> Compact {
        let mut count = 0usize;
        each(&mut |_| count += 1);
        debug_assert!(count <= Compact::MAX_COUNT, "switched form before");
        let count = count.min(Compact::MAX_COUNT) as u8;
        let head = if with_data { count | WITH_DATA } else { count };
        Compact {
            bytes: encode(&[head], with_data, each).into_boxed_slice(),
        }
    }

    fn head(&self) -> u8 {
        self.bytes.first().copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        usize::from(self.head() & !WITH_DATA)
    }

    /// Whether the holds are written with data (some holder has data).
    pub fn has_data(&self) -> bool {
        self.head() & WITH_DATA != 0
    }

    /// Bytes of its allocation.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// The holds as stored in RDB files: the same bytes.
    pub fn stored(&self) -> &[u8] {
        self.bytes.get(1..).unwrap_or_default()
    }

    /// Every hold, in (lease end, fence) order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            reader: Reader::new(self.stored(), self.has_data()),
        }
    }

    /// The position and hold of `token`, and its data.
    pub fn find(&self, token: &[u8]) -> Option<(usize, Hold, Option<&[u8]>)> {
        self.iter()
            .enumerate()
            .find(|(_, (t, _, _))| *t == token)
            .map(|(i, (_, h, d))| (i, h, d))
    }

    pub fn first(&self) -> Option<Entry<'_>> {
        self.iter().next()
    }

    /// The last hold's lease end: the lease-end steps summed, tokens,
    /// fences and data skipped.
    pub fn last_expire_at(&self) -> Option<i64> {
        let mut reader = Reader::new(self.stored(), self.has_data());
        let mut at = None;
        while !reader.rest.is_empty() {
            let end = reader.varint().ok()?;
            reader.varint().ok()?;
            reader.bytes().ok()?;
            if reader.with_data {
                reader.bytes().ok()?;
            }
            at = Some(at.unwrap_or(0i64).wrapping_add(end as i64));
        }
        at
    }

    /// These holds without the one at `skip`, and with `add` at its place
    /// in the order.
    pub fn rebuilt(&self, skip: Option<usize>, add: Option<Entry<'_>>) -> Compact {
        // Decoded once: the new block is sized, counted and written from
        // the list (each pass over the encoded bytes would decode them all).
        let mut holds: Vec<Entry<'_>> = Vec::with_capacity(self.len() + 1);
        let mut add = add;
        for (i, entry) in self.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            if let Some(new) = add {
                if (new.1.expire_at, new.1.fence) < (entry.1.expire_at, entry.1.fence) {
                    holds.push(new);
                    add = None;
                }
            }
            holds.push(entry);
        }
        holds.extend(add);
        Compact::from_sorted(holds.iter().copied())
    }
}

/// The holds of a [`Compact`], in (lease end, fence) order.
#[derive(Clone)]
pub struct Iter<'a> {
    reader: Reader<'a>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        // The bytes were written by `encode`: they always read back.
        self.reader.next_hold()?.ok()
    }
}

#[cfg(test)]
mod tests;
