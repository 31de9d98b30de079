//! Unsigned LEB128 varints, written and read in their shortest form only:
//! how packed holds and lock records (encoding version 4) carry numbers.

/// The most bytes a varint of a `u64` takes.
pub const MAX_LEN: usize = 10;

/// How many bytes `put` writes for `n`.
pub fn len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// Appends `n`, seven bits a byte, low bits first.
pub fn put(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a varint from the front of `rest` and moves past it; `None` if it
/// is cut short, longer than its shortest form, or wider than 64 bits
/// (bytes the module could not have written).
pub fn take(rest: &mut &[u8]) -> Option<u64> {
    // Most numbers (token lengths, lease-end steps) fit one byte.
    if let Some((&b, tail)) = rest.split_first() {
        if b < 0x80 {
            *rest = tail;
            return Some(u64::from(b));
        }
    }
    let mut n = 0u64;
    for (i, &b) in rest.iter().take(MAX_LEN).enumerate() {
        if i == MAX_LEN - 1 && b > 1 {
            return None;
        }
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if i > 0 && b == 0 {
                return None;
            }
            *rest = &rest[i + 1..];
            return Some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_at_the_edges() {
        for n in [0, 1, 127, 128, 16_383, 16_384, u64::MAX >> 1, u64::MAX] {
            let mut out = Vec::new();
            put(&mut out, n);
            assert_eq!(out.len(), len(n), "{n}");
            out.push(0xaa);
            let mut rest = &out[..];
            assert_eq!(take(&mut rest), Some(n), "{n}");
            assert_eq!(rest, &[0xaa], "{n}");
        }
    }

    #[test]
    fn only_the_shortest_form_of_64_bits_is_read() {
        let bad: [&[u8]; 6] = [
            &[],
            &[0x80],
            &[0x80, 0x00],
            &[0xff; 10],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            &[0x80; 11],
        ];
        for b in bad {
            let mut rest = b;
            assert_eq!(take(&mut rest), None, "{b:?}");
            assert_eq!(rest, b, "moved on over {b:?}");
        }
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(take(&mut &max[..]), Some(u64::MAX));
    }
}
