//! A reference decoder: what the server must answer to a payload.

use super::*;

/// What the server must do with a payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// `OK`, and the key is this lock, with this public data.
    Lock {
        token: Vec<u8>,
        fence: u64,
        data: Option<Vec<u8>>,
    },
    /// `OK`, and the key is a fence gate (kind 1, no token) with this fence. A gate's fence is
    /// not bounded: it never feeds the fence clock.
    Gate { fence: u64 },
    /// `OK`, and the key has these holders (in the payload's order). `LOCK.INFO` lists those
    /// whose lease has not ended, in fence order.
    Holders { kind: Kind, holds: Vec<Hold> },
    /// An error reply; no key.
    Refused,
    /// Either, as long as what is accepted is a valid lock (LZF-compressed tokens, trailing
    /// bytes, fences at the edge of the restore bounds).
    Either,
}

pub(super) struct Reader<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok()?;
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    pub(super) fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }

    /// An RDB length, and whether it was a special encoding (`11xxxxxx`); `None` when short or
    /// of an unknown form.
    pub(super) fn len(&mut self) -> Option<(u64, bool)> {
        let first = self.byte()?;
        Some(match first >> 6 {
            0 => (u64::from(first & 0x3f), false),
            1 => (
                (u64::from(first & 0x3f) << 8) | u64::from(self.byte()?),
                false,
            ),
            3 => (u64::from(first & 0x3f), true),
            _ if first == 0x80 => (
                u64::from(u32::from_be_bytes(self.take(4)?.try_into().ok()?)),
                false,
            ),
            _ if first == 0x81 => (u64::from_be_bytes(self.take(8)?.try_into().ok()?), false),
            _ => return None,
        })
    }

    /// A length where Redis ignores the special-encoding flag (module ids, opcodes, numbers).
    pub(super) fn value(&mut self) -> Option<u64> {
        self.len().map(|(v, _)| v)
    }

    /// A number field: the unsigned opcode (a signed number is saved the same way), then the
    /// number.
    pub(super) fn uint(&mut self) -> Option<u64> {
        (self.value()? == OPCODE_UINT).then_some(())?;
        self.value()
    }

    /// A string field: `None` when Redis cannot read one, `Some(None)` for an LZF string.
    pub(super) fn string_field(&mut self) -> Option<Option<Vec<u8>>> {
        (self.value()? == OPCODE_STRING).then_some(())?;
        self.string().ok()
    }

    /// A string: `Ok(Some(bytes))`, `Ok(None)` for an LZF string that does not decompress here to
    /// exactly its length (Redis refuses it, or reads it in a way not modelled here), `Err` when
    /// Redis cannot read one.
    pub(super) fn string(&mut self) -> Result<Option<Vec<u8>>, ()> {
        let (n, special) = self.len().ok_or(())?;
        if !special {
            return self.take(n).map(|s| Some(s.to_vec())).ok_or(());
        }
        let int = match n {
            0 => i64::from(self.take(1).ok_or(())?[0] as i8),
            1 => i64::from(i16::from_le_bytes(
                self.take(2).ok_or(())?.try_into().unwrap(),
            )),
            2 => i64::from(i32::from_le_bytes(
                self.take(4).ok_or(())?.try_into().unwrap(),
            )),
            3 => {
                // Compressed and uncompressed lengths, then the compressed bytes.
                let compressed = self.value().ok_or(())?;
                let len = self.value().ok_or(())?;
                let data = self.take(compressed).ok_or(())?;
                return Ok(lzf_decompress(data, len));
            }
            _ => return Err(()),
        };
        Ok(Some(int.to_string().into_bytes()))
    }
}

/// `data` decompressed as Redis's LZF does (liblzf: a control byte below 32 is a run of that
/// many plus one literal bytes; above, the top 3 bits (7: plus the next byte) plus 2 bytes are
/// copied from the output, 1 + the low 5 bits and the next byte back), if that makes exactly
/// `len` bytes; `None` otherwise, and for the edge cases of no input or no output.
pub(super) fn lzf_decompress(data: &[u8], len: u64) -> Option<Vec<u8>> {
    if data.is_empty() || len == 0 {
        return None;
    }
    let len = usize::try_from(len).ok()?;
    let mut out: Vec<u8> = Vec::new();
    let mut ip = 0;
    while ip < data.len() {
        let ctrl = usize::from(data[ip]);
        ip += 1;
        if ctrl < 32 {
            let run = data.get(ip..ip + ctrl + 1)?;
            if out.len() + run.len() > len {
                return None;
            }
            out.extend_from_slice(run);
            ip += run.len();
        } else {
            let mut n = ctrl >> 5;
            if n == 7 {
                n += usize::from(*data.get(ip)?);
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*data.get(ip)?) + 1;
            ip += 1;
            if out.len() + n + 2 > len || back > out.len() {
                return None;
            }
            let from = out.len() - back;
            for k in 0..n + 2 {
                out.push(out[from + k]);
            }
        }
    }
    (out.len() == len).then_some(out)
}

/// What the server must answer to `RESTORE` of `payload` (sealed), at Unix time `now`. Redis
/// reads the value from the whole payload: a damaged body may run on into the trailer.
pub(super) fn expect(payload: &[u8], module_name_bits: u64, now: i64) -> Expect {
    let mut r = Reader { b: payload, at: 0 };
    let Some(TYPE_MODULE_2) = r.byte() else {
        return Expect::Either;
    };
    let Some(id) = r.value() else {
        return Expect::Refused;
    };
    let version = id & 1023;
    if id >> 10 != module_name_bits
        || !(LEGACY_ENCODING_VERSION..=ENCODING_VERSION).contains(&version)
    {
        return Expect::Refused;
    }
    if version == ENCODING_VERSION {
        return packed::expect_record(&mut r, now);
    }
    let packed = version == HOLDS_PACKED_ENCODING_VERSION;
    match r.uint() {
        Some(mode @ (MODE_EXCLUSIVE | MODE_GATE)) => expect_single(&mut r, mode, now),
        Some(MODE_EXCLUSIVE_WITH_DATA) if packed => expect_with_data(&mut r, now),
        Some(mode @ (MODE_SHARED | MODE_SEMAPHORE)) if packed => {
            expect_packed_holders(&mut r, mode, false, now)
        }
        Some(mode @ (MODE_SHARED_WITH_DATA | MODE_SEMAPHORE_WITH_DATA)) if packed => {
            expect_packed_holders(&mut r, mode - WITH_DATA_OFFSET, true, now)
        }
        Some(mode @ (MODE_SHARED | MODE_SEMAPHORE)) if version == FIELDS_ENCODING_VERSION => {
            expect_holders(&mut r, mode, now)
        }
        // Holders in a version 1 record, an unknown mode, or no mode at all.
        _ => Expect::Refused,
    }
}

/// Whether the reader ended exactly where the body does (before the RDB version and CRC).
pub(super) fn at_trailer(r: &Reader) -> bool {
    r.at == r.b.len() - 10
}

pub(super) fn valid_fence(fence: u64) -> bool {
    (1..=i64::MAX as u64).contains(&fence)
}

/// Whether the restore bounds admit `fence` at Unix time `now`; `None` within a minute of the
/// time bound, where the server's clock and this one may disagree.
pub(super) fn restorable(fence: u64, now: i64) -> Option<bool> {
    if !valid_fence(fence) || fence >> EPOCH_SHIFT > 64 {
        return Some(false);
    }
    let ms = ((fence >> 10) & ((1 << 41) - 1)) as i64;
    let limit = now - TIME_BASE_MS + DAY_MS;
    if ms > limit + 60_000 {
        Some(false)
    } else if ms > limit - 60_000 {
        None
    } else {
        Some(true)
    }
}

/// An exclusive lock or a fence gate (the same in versions 1, 2 and 3): fence, token.
pub(super) fn expect_single(r: &mut Reader, mode: u64, now: i64) -> Expect {
    let fields = (|| {
        let fence = r.uint()?;
        let token = r.string_field()?;
        (r.value()? == OPCODE_EOF).then_some(())?;
        Some((fence, token))
    })();
    let Some((fence, token)) = fields else {
        return Expect::Refused;
    };
    let Some(token) = token else {
        // An LZF string: whatever it holds, a fence no record of this mode may carry is refused.
        let bad_fence = if mode == MODE_GATE {
            !valid_fence(fence)
        } else {
            restorable(fence, now) == Some(false)
        };
        return if bad_fence {
            Expect::Refused
        } else {
            Expect::Either
        };
    };
    if mode == MODE_GATE && token.is_empty() {
        if !valid_fence(fence) {
            return Expect::Refused;
        }
        if !at_trailer(r) {
            return Expect::Either;
        }
        return Expect::Gate { fence };
    }
    if mode != MODE_EXCLUSIVE || token.is_empty() || token.len() > MAX_TOKEN {
        return Expect::Refused;
    }
    match restorable(fence, now) {
        Some(false) => Expect::Refused,
        Some(true) if at_trailer(r) => Expect::Lock {
            token,
            fence,
            data: None,
        },
        _ => Expect::Either,
    }
}

/// An exclusive lock with public data (version 3, its own code): fence, token, data.
pub(super) fn expect_with_data(r: &mut Reader, now: i64) -> Expect {
    let fields = (|| {
        let fence = r.uint()?;
        let token = r.string_field()?;
        let data = r.string_field()?;
        (r.value()? == OPCODE_EOF).then_some(())?;
        Some((fence, token, data))
    })();
    let Some((fence, token, data)) = fields else {
        return Expect::Refused;
    };
    if restorable(fence, now) == Some(false) {
        return Expect::Refused;
    }
    let (Some(token), Some(data)) = (token, data) else {
        // An LZF string: whatever it holds, the rest decides.
        return Expect::Either;
    };
    if token.is_empty() || token.len() > MAX_TOKEN || !(1..=MAX_DATA).contains(&data.len()) {
        return Expect::Refused;
    }
    match restorable(fence, now) {
        Some(true) if at_trailer(r) => Expect::Lock {
            token,
            fence,
            data: Some(data),
        },
        _ => Expect::Either,
    }
}

/// A read/write lock or a semaphore (version 2): limit, count, then each holder's fence, lease
/// end and token. The module reads every holder before it checks any; only the highest fence
/// meets the restore bounds.
pub(super) fn expect_holders(r: &mut Reader, mode: u64, now: i64) -> Expect {
    let Some(limit) = r.uint() else {
        return Expect::Refused;
    };
    let Some(count) = r.uint() else {
        return Expect::Refused;
    };
    // A count larger than the payload ends at the first holder that cannot be read.
    let mut read = Vec::new();
    for _ in 0..count {
        let one = (|| Some((r.uint()?, r.uint()? as i64, r.string_field()?, None)))();
        let Some(one) = one else {
            return Expect::Refused;
        };
        read.push(one);
    }
    if r.value() != Some(OPCODE_EOF) {
        return Expect::Refused;
    }
    judge_holders(r, mode, limit, read, now)
}

/// A read/write lock or a semaphore (version 3): limit, count, then the holds packed into one
/// string.
pub(super) fn expect_packed_holders(
    r: &mut Reader,
    mode: u64,
    with_data: bool,
    now: i64,
) -> Expect {
    let fields = (|| {
        let limit = r.uint()?;
        let count = r.uint()?;
        let packed = r.string_field()?;
        (r.value()? == OPCODE_EOF).then_some((limit, count, packed))
    })();
    let Some((limit, count, packed)) = fields else {
        return Expect::Refused;
    };
    // An LZF string that does not decompress here.
    let Some(packed) = packed else {
        return Expect::Either;
    };
    judge_packed(r, mode, limit, count, &packed, with_data, now)
}

/// Holds packed as `encode_holds` packs them (versions 3 and 4, `with_data` or not): exactly
/// `count` of them, in the order of (lease end, fence); packed with data, at least one of them
/// has some.
pub(super) fn judge_packed(
    r: &Reader,
    mode: u64,
    limit: u64,
    count: u64,
    packed: &[u8],
    with_data: bool,
    now: i64,
) -> Expect {
    let Some(read) = decode_holds(packed, with_data) else {
        return Expect::Refused;
    };
    let order = |h: &ReadHold| (h.1, h.0);
    if read.len() as u64 != count || read.windows(2).any(|w| order(&w[0]) >= order(&w[1])) {
        return Expect::Refused;
    }
    if with_data && read.iter().all(|h| h.3.is_none()) {
        return Expect::Refused;
    }
    judge_holders(r, mode, limit, read, now)
}

/// What the server must do with the holders read, once every field was read.
pub(super) fn judge_holders(
    r: &Reader,
    mode: u64,
    limit: u64,
    read: Vec<ReadHold>,
    now: i64,
) -> Expect {
    let count = read.len() as u64;
    let kind = match mode {
        MODE_SHARED if limit == 0 => Kind::Shared,
        MODE_SEMAPHORE if (1..=MAX_LIMIT).contains(&limit) => Kind::Semaphore { limit },
        _ => return Expect::Refused,
    };
    if count == 0 || matches!(kind, Kind::Semaphore { limit } if count > limit) {
        return Expect::Refused;
    }
    let (mut fences, mut tokens) = (HashSet::new(), HashSet::new());
    for (fence, _, token, data) in &read {
        if !valid_fence(*fence) || !fences.insert(*fence) {
            return Expect::Refused;
        }
        if data.as_ref().is_some_and(|d| d.len() > MAX_DATA) {
            return Expect::Refused;
        }
        if let Some(token) = token {
            if token.is_empty() || token.len() > MAX_TOKEN || !tokens.insert(token.clone()) {
                return Expect::Refused;
            }
        }
    }
    let highest = fences.iter().copied().max().unwrap_or(0);
    match restorable(highest, now) {
        Some(false) => return Expect::Refused,
        None => return Expect::Either,
        Some(true) => {}
    }
    // A lease end before the epoch, or beyond one granted now with the longest TTL, is forged
    // (within a minute of that bound, the server's clock decides).
    for (_, expire_at, _, _) in &read {
        if *expire_at < 0 || *expire_at > now + MAX_TTL_MS + 60_000 {
            return Expect::Refused;
        }
        if *expire_at > now + MAX_TTL_MS - 60_000 {
            return Expect::Either;
        }
    }
    let mut holds = Vec::new();
    for (fence, expire_at, token, data) in read {
        // An LZF token: not decoded here.
        let Some(token) = token else {
            return Expect::Either;
        };
        holds.push(Hold {
            fence,
            expire_at,
            token,
            data,
        });
    }
    if !at_trailer(r) {
        return Expect::Either;
    }
    Expect::Holders { kind, holds }
}
