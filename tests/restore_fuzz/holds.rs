//! Holds packed into one string (encoding versions 3 and 4), written and read back.

/// Whether any of `holds` has public data: the module then packs them with data.
pub(super) fn any_data(holds: &[Hold]) -> bool {
    holds.iter().any(|h| h.data.is_some())
}

/// One holder of a read/write lock or of a semaphore, as the module writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Hold {
    pub(super) fence: u64,
    /// Unix milliseconds; the lease has ended once the clock is past it.
    pub(super) expire_at: i64,
    pub(super) token: Vec<u8>,
    /// Public data (versions 3 and 4, packed with data).
    pub(super) data: Option<Vec<u8>>,
}

pub(super) fn hold(token: &[u8], fence: u64, expire_at: i64) -> Hold {
    Hold {
        fence,
        expire_at,
        token: token.to_vec(),
        data: None,
    }
}

/// An unsigned LEB128 varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// The holds of a key as encoding versions 3 and 4 pack them into one string, in the order given
/// (the module writes them in the order of (lease end, fence)): each hold against the one before
/// it, the first against zero — the lease end's increase as a varint, the fence's change zigzag-
/// encoded as a varint, the token's length as a varint, the token; when any hold has data (the
/// record's mode says so), each hold's data's length as a varint (0: none) and its data.
pub(super) fn encode_holds(holds: &[Hold]) -> Vec<u8> {
    let with_data = any_data(holds);
    let mut out = Vec::new();
    let (mut end, mut fence) = (0i64, 0u64);
    for h in holds {
        put_varint(&mut out, h.expire_at.wrapping_sub(end) as u64);
        let change = h.fence.wrapping_sub(fence) as i64;
        put_varint(&mut out, ((change << 1) ^ (change >> 63)) as u64);
        put_varint(&mut out, h.token.len() as u64);
        out.extend_from_slice(&h.token);
        if with_data {
            let data = h.data.as_deref().unwrap_or_default();
            put_varint(&mut out, data.len() as u64);
            out.extend_from_slice(data);
        }
        (end, fence) = (h.expire_at, h.fence);
    }
    out
}

/// A varint as the module writes one (at most 10 bytes, no more bits than a `u64`, in its
/// shortest form), read at `*at`.
pub(super) fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    for i in 0..10 {
        let byte = *b.get(*at + i)?;
        if i == 9 && byte > 1 {
            return None;
        }
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if i > 0 && byte == 0 {
                return None;
            }
            *at += i + 1;
            return Some(n);
        }
    }
    None
}

/// A hold as read from a payload: fence, lease end, token (`None`: an LZF string not decoded
/// here), public data.
pub(super) type ReadHold = (u64, i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// The holds packed as `encode_holds` packs them (`with_data`: with each hold's data), in the
/// order read; `None` when the bytes do not read as holds.
pub(super) fn decode_holds(b: &[u8], with_data: bool) -> Option<Vec<ReadHold>> {
    let (mut at, mut end, mut fence) = (0usize, 0i64, 0u64);
    let mut out = Vec::new();
    let bytes = |at: &mut usize| {
        let len = usize::try_from(read_varint(b, at)?).ok()?;
        let got = b.get(*at..at.checked_add(len)?)?;
        *at += len;
        Some(got.to_vec())
    };
    while at < b.len() {
        let increase = read_varint(b, &mut at)?;
        let change = read_varint(b, &mut at)?;
        let token = bytes(&mut at)?;
        let data = match with_data {
            true => Some(bytes(&mut at)?).filter(|d| !d.is_empty()),
            false => None,
        };
        end = end.wrapping_add(increase as i64);
        fence = fence.wrapping_add((((change >> 1) as i64) ^ -((change & 1) as i64)) as u64);
        out.push((fence, end, Some(token), data));
    }
    Some(out)
}
