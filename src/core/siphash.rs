//! SipHash over a lock's name and database, in one pass.
//!
//! The same function `std`'s hash maps use (SipHash-1-3 with a random key),
//! worked out over the message `name ‖ db` at once: `std`'s streaming
//! hasher buffers each write and costs about twice as much for the short
//! names locks have, and every command that names a lock hashes it.

/// A SipHash key: 128 bits, random per process.
#[derive(Clone, Copy, Debug)]
pub struct SipKey(pub u64, pub u64);

impl SipKey {
    pub fn random() -> SipKey {
        SipKey(rand::random(), rand::random())
    }
}

/// SipHash-1-3 of `name` followed by `db`'s four bytes, little-endian.
pub fn hash_name_db(key: SipKey, name: &[u8], db: i32) -> u64 {
    sip::<1, 3>(key, name, db)
}

/// SipHash-c-d of `name ‖ db.to_le_bytes()`.
fn sip<const C: usize, const D: usize>(key: SipKey, name: &[u8], db: i32) -> u64 {
    let mut v = [
        key.0 ^ 0x736f_6d65_7073_6575,
        key.1 ^ 0x646f_7261_6e64_6f6d,
        key.0 ^ 0x6c79_6765_6e65_7261,
        key.1 ^ 0x7465_6462_7974_6573,
    ];
    let compress = |v: &mut [u64; 4], m: u64| {
        v[3] ^= m;
        for _ in 0..C {
            round(v);
        }
        v[0] ^= m;
    };
    let mut blocks = name.chunks_exact(8);
    for block in &mut blocks {
        compress(
            &mut v,
            u64::from_le_bytes(block.try_into().unwrap_or_default()),
        );
    }
    // What is left of the name (0 to 7 bytes), then the database (4): 4
    // to 11 bytes, so one more full block at most, then the last one.
    let rest = blocks.remainder();
    let mut tail = u128::from(load_short(rest)) | (u128::from(db as u32) << (8 * rest.len()));
    let mut tail_len = rest.len() + 4;
    if tail_len >= 8 {
        compress(&mut v, tail as u64);
        tail >>= 64;
        tail_len -= 8;
    }
    debug_assert!(tail_len < 8 && tail >> (8 * tail_len) == 0);
    let total = (name.len() + 4) as u64;
    compress(&mut v, tail as u64 | (total << 56));
    v[2] ^= 0xff;
    for _ in 0..D {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// Up to 7 bytes as a little-endian number, in two loads that may
/// overlap (the bytes they share are the same), not one per byte.
#[inline(always)]
fn load_short(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    debug_assert!(n < 8);
    let word = |at: usize| {
        u64::from(u32::from_le_bytes(
            bytes[at..at + 4].try_into().unwrap_or_default(),
        ))
    };
    match n {
        0 => 0,
        1..=3 => {
            u64::from(bytes[0])
                | (u64::from(bytes[n / 2]) << (8 * (n / 2)))
                | (u64::from(bytes[n - 1]) << (8 * (n - 1)))
        }
        _ => word(0) | (word(n - 4) << (8 * (n - 4))),
    }
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hasher;

    /// SipHash-2-4 against `std`'s (deprecated, still the reference
    /// implementation) for every name length across the block edges, so
    /// the message layout and rounds are SipHash's; 1-3 only runs fewer
    /// rounds of the same code.
    #[test]
    #[allow(deprecated)]
    fn the_same_as_std_siphash_2_4() {
        let key = SipKey(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
        let bytes: Vec<u8> = (0..40u8).map(|b| b.wrapping_mul(37)).collect();
        for len in 0..bytes.len() {
            for db in [0, 1, 15, -1, i32::MAX] {
                let name = &bytes[..len];
                let mut reference = std::hash::SipHasher::new_with_keys(key.0, key.1);
                reference.write(name);
                reference.write(&db.to_le_bytes());
                assert_eq!(sip::<2, 4>(key, name, db), reference.finish(), "{len} {db}");
            }
        }
    }

    #[test]
    fn short_loads_read_every_byte_in_place() {
        for n in 0..8usize {
            let bytes: Vec<u8> = (1..=n as u8).map(|b| b * 17).collect();
            let expect = bytes
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            assert_eq!(load_short(&bytes), expect, "{n} bytes");
        }
    }

    #[test]
    fn the_key_and_every_part_of_the_message_count() {
        let (a, b) = (SipKey(1, 2), SipKey(1, 3));
        assert_ne!(hash_name_db(a, b"lock", 0), hash_name_db(b, b"lock", 0));
        assert_ne!(hash_name_db(a, b"lock", 0), hash_name_db(a, b"lock", 1));
        assert_ne!(hash_name_db(a, b"lock", 0), hash_name_db(a, b"lock\0", 0));
        assert_ne!(hash_name_db(a, b"", 0), hash_name_db(a, b"\0\0\0\0", 0));
        assert_eq!(hash_name_db(a, b"lock", 7), hash_name_db(a, b"lock", 7));
    }
}
