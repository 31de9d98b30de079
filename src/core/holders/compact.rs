//! The compact form of a small set of holds, and the byte encoding of
//! holds that it shares with RDB files and `DUMP` payloads.
//!
//! Holds are written one after another in (lease end, fence) order, each
//! against the one before it (the first against zero):
//!
//! - the lease end's increase, as an unsigned LEB128 varint;
//! - the fence's change, zigzag-encoded, as a varint;
//! - the token's length, as a varint, then the token.
//!
//! Holders granted around the same time with the same TTL differ by a few
//! milliseconds and a few fences, so a hold costs its token plus 3–5 bytes.
//! In memory the holds follow a one-byte count, in one exact-size
//! allocation; any change writes a new one (the set is small).

use super::hold::Hold;

/// The most bytes a varint of a `u64` takes.
const MAX_VARINT: usize = 10;

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

fn varint_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
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

    fn entry_len(&self, token: &[u8], hold: Hold) -> usize {
        let (end, fence) = self.deltas(hold);
        varint_len(end) + varint_len(fence) + varint_len(token.len() as u64) + token.len()
    }

    fn write(&mut self, out: &mut Vec<u8>, token: &[u8], hold: Hold) {
        let (end, fence) = self.deltas(hold);
        put_varint(out, end);
        put_varint(out, fence);
        put_varint(out, token.len() as u64);
        out.extend_from_slice(token);
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
}

/// What is wrong with encoded holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Cut short, a varint longer than a `u64`'s or not in its shortest
    /// form, or a token longer than what follows.
    Bytes,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader {
            rest: bytes,
            previous: Previous::default(),
        }
    }

    /// A varint in its shortest form, as [`put_varint`] writes it.
    fn varint(&mut self) -> Result<u64, Malformed> {
        // Most fields (token lengths, lease-end steps) fit one byte.
        if let Some((&b, rest)) = self.rest.split_first() {
            if b < 0x80 {
                self.rest = rest;
                return Ok(u64::from(b));
            }
        }
        let mut n = 0u64;
        for (i, &b) in self.rest.iter().take(MAX_VARINT).enumerate() {
            let bits = u64::from(b & 0x7f);
            if i == MAX_VARINT - 1 && b > 1 {
                return Err(Malformed::Bytes);
            }
            n |= bits << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err(Malformed::Bytes);
                }
                self.rest = &self.rest[i + 1..];
                return Ok(n);
            }
        }
        Err(Malformed::Bytes)
    }

    /// The next hold; `None` at the end.
    pub fn next_hold(&mut self) -> Option<Result<(&'a [u8], Hold), Malformed>> {
        if self.rest.is_empty() {
            return None;
        }
        Some(self.read_hold())
    }

    fn read_hold(&mut self) -> Result<(&'a [u8], Hold), Malformed> {
        let end = self.varint()?;
        let fence = self.varint()?;
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| Malformed::Bytes)?;
        if len > self.rest.len() {
            return Err(Malformed::Bytes);
        }
        let (token, rest) = self.rest.split_at(len);
        self.rest = rest;
        let hold = Hold {
            expire_at: self.previous.expire_at.wrapping_add(end as i64),
            fence: self.previous.fence.wrapping_add(unzigzag(fence) as u64),
        };
        self.previous = Previous {
            expire_at: hold.expire_at,
            fence: hold.fence,
        };
        Ok((token, hold))
    }
}

/// Holds to encode: calls its argument with each, in (lease end, fence)
/// order; as often as asked.
type EachHold<'a> = &'a dyn Fn(&mut dyn FnMut(&[u8], Hold));

/// Encodes holds after `prefix`. `each` is called twice: once to size the
/// buffer, once to fill it.
fn encode(prefix: &[u8], each: EachHold<'_>) -> Vec<u8> {
    let mut len = prefix.len();
    let mut previous = Previous::default();
    each(&mut |token, hold| {
        len += previous.entry_len(token, hold);
        previous = Previous {
            expire_at: hold.expire_at,
            fence: hold.fence,
        };
    });
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(prefix);
    let mut previous = Previous::default();
    each(&mut |token, hold| previous.write(&mut out, token, hold));
    debug_assert_eq!(out.len(), len, "sized as written");
    out
}

/// Holds as stored in RDB files and `DUMP` payloads.
pub fn encode_stored<'a>(holds: impl Iterator<Item = (&'a [u8], Hold)> + Clone) -> Vec<u8> {
    encode(&[], &|f| holds.clone().for_each(|(t, h)| f(t, h)))
}

/// A small set of holds in one allocation: a count, then the holds in
/// (lease end, fence) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compact {
    bytes: Box<[u8]>,
}

impl Compact {
    /// The most holds this form can count (it switches form well before).
    pub const MAX_COUNT: usize = u8::MAX as usize;

    pub fn new() -> Compact {
        Compact {
            bytes: Box::new([0]),
        }
    }

    /// From holds in (lease end, fence) order, at most [`Compact::MAX_COUNT`].
    pub fn from_sorted<'a>(holds: impl Iterator<Item = (&'a [u8], Hold)> + Clone) -> Compact {
        Compact::build(&|f| holds.clone().for_each(|(t, h)| f(t, h)))
    }

    fn build(each: EachHold<'_>) -> Compact {
        let mut count = 0usize;
        each(&mut |_, _| count += 1);
        debug_assert!(count <= Compact::MAX_COUNT, "switched form before");
        let count = u8::try_from(count).unwrap_or(u8::MAX);
        Compact {
            bytes: encode(&[count], each).into_boxed_slice(),
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.bytes.first().copied().unwrap_or(0))
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
            reader: Reader::new(self.stored()),
        }
    }

    /// The position and hold of `token`.
    pub fn find(&self, token: &[u8]) -> Option<(usize, Hold)> {
        self.iter()
            .enumerate()
            .find(|(_, (t, _))| *t == token)
            .map(|(i, (_, h))| (i, h))
    }

    pub fn first(&self) -> Option<(&[u8], Hold)> {
        self.iter().next()
    }

    /// The last hold's lease end: the lease-end steps summed, tokens and
    /// fences skipped.
    pub fn last_expire_at(&self) -> Option<i64> {
        let mut reader = Reader::new(self.stored());
        let mut at = None;
        while !reader.rest.is_empty() {
            let end = reader.varint().ok()?;
            reader.varint().ok()?;
            let len = usize::try_from(reader.varint().ok()?).ok()?;
            reader.rest = reader.rest.get(len..)?;
            at = Some(at.unwrap_or(0i64).wrapping_add(end as i64));
        }
        at
    }

    /// These holds without the one at `skip`, and with `add` at its place
    /// in the order.
    pub fn rebuilt(&self, skip: Option<usize>, add: Option<(&[u8], Hold)>) -> Compact {
        // Decoded once: the new block is sized, counted and written from
        // the list (each pass over the encoded bytes would decode them all).
        let mut holds: Vec<(&[u8], Hold)> = Vec::with_capacity(self.len() + 1);
        let mut add = add;
        for (i, (token, hold)) in self.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            if let Some((t, h)) = add {
                if (h.expire_at, h.fence) < (hold.expire_at, hold.fence) {
                    holds.push((t, h));
                    add = None;
                }
            }
            holds.push((token, hold));
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
    type Item = (&'a [u8], Hold);

    fn next(&mut self) -> Option<Self::Item> {
        // The bytes were written by `encode`: they always read back.
        self.reader.next_hold()?.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(fence: u64, expire_at: i64) -> Hold {
        Hold { fence, expire_at }
    }

    #[test]
    fn varints_and_zigzag_round_trip_at_their_edges() {
        for n in [0, 1, 127, 128, 16_383, 16_384, u64::MAX >> 1, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, n);
            assert_eq!(out.len(), varint_len(n), "{n}");
            assert_eq!(Reader::new(&out).varint(), Ok(n), "{n}");
        }
        for n in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(n)), n);
        }
        assert_eq!((zigzag(0), zigzag(-1), zigzag(1)), (0, 1, 2));
    }

    #[test]
    fn only_shortest_varints_are_read() {
        let bad: [&[u8]; 5] = [
            &[0x80],
            &[0x80, 0x00],
            &[0xff; 10],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            &[0x80; 11],
        ];
        for b in bad {
            assert_eq!(Reader::new(b).varint(), Err(Malformed::Bytes), "{b:?}");
        }
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Reader::new(&max).varint(), Ok(u64::MAX));
    }

    #[test]
    fn holds_read_back_as_written_whatever_their_numbers() {
        let holds: Vec<(&[u8], Hold)> = vec![
            (b"a", hold(u64::MAX, i64::MIN)),
            (b"", hold(0, -1)),
            (&[7; 300], hold(1, 0)),
            (b"z", hold(1 << 40, 1_800_000_000_000)),
            (b"y", hold(5, i64::MAX)),
        ];
        let stored = encode_stored(holds.iter().copied());
        let mut r = Reader::new(&stored);
        let mut back = Vec::new();
        while let Some(h) = r.next_hold() {
            back.push(h.unwrap());
        }
        assert_eq!(back, holds);
        let c = Compact::from_sorted(holds.iter().copied());
        assert_eq!(c.iter().collect::<Vec<_>>(), holds);
        assert_eq!((c.len(), c.stored()), (5, &stored[..]));
    }

    #[test]
    fn a_hold_costs_its_token_and_a_few_bytes() {
        let t = [b'x'; 32];
        let now = 1_780_000_000_000;
        let fence = 0x0000_2000_0000_0000;
        let one = Compact::from_sorted([(&t[..], hold(fence, now))].into_iter());
        assert_eq!(one.byte_len(), 1 + 6 + 7 + 1 + 32);
        let ten: Vec<(&[u8], Hold)> = (0..10)
            .map(|i| (&t[..], hold(fence + i, now + i as i64)))
            .collect();
        let ten = Compact::from_sorted(ten.into_iter());
        assert_eq!(ten.byte_len(), one.byte_len() + 9 * (1 + 1 + 1 + 32));
    }

    #[test]
    fn rebuilt_drops_and_places_in_order() {
        let c = Compact::from_sorted(
            [
                (&b"a"[..], hold(1, 10)),
                (b"b", hold(2, 20)),
                (b"c", hold(3, 30)),
            ]
            .into_iter(),
        );
        let tokens = |c: &Compact| c.iter().map(|(t, _)| t.to_vec()).collect::<Vec<_>>();
        assert_eq!(c.find(b"b"), Some((1, hold(2, 20))));
        assert_eq!(c.find(b"zz"), None);
        let r = c.rebuilt(Some(1), Some((b"d", hold(4, 25))));
        assert_eq!(tokens(&r), [b"a".to_vec(), b"d".to_vec(), b"c".to_vec()]);
        let r = c.rebuilt(None, Some((b"e", hold(0, 10))));
        assert_eq!(tokens(&r)[0], b"e");
        let r = c.rebuilt(None, Some((b"f", hold(9, 99))));
        assert_eq!((r.len(), tokens(&r)[3].as_slice()), (4, &b"f"[..]));
        let r = c.rebuilt(Some(0), None).rebuilt(Some(0), None);
        assert_eq!((r.len(), r.first()), (1, Some((&b"c"[..], hold(3, 30)))));
        assert_eq!(r.rebuilt(Some(0), None), Compact::new());
    }
}
