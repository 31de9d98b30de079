//! The `record` target: what an RDB file or a `RESTORE` payload hands to the core is accepted
//! exactly when the module could have written it, and an accepted record round-trips through
//! `Record` (and its raw-pointer hand-over to Redis) and its stored encoding.

use redislock::core::grant::{decide, Decision, LockKind, Occupancy, Want};
use redislock::core::holders::{Hold, Holders, HoldersError, Kind};
use redislock::core::lock::{
    decide_gate, owned_by, DecodeError, GateDecision, LockRef, Mode, ENCODING_VERSION,
};
use redislock::core::record::{Record, Stored};
use redislock::core::{fence, limits};

use crate::holders::check_grants;
use crate::token_ok;

/// The latest lease end a loaded hold may have: "now" (fixed, for reproducible runs) plus the
/// longest TTL, as the module bounds it.
pub const LATEST_END: i64 = fence::TIME_BASE_MS + limits::MAX_TTL_MS as i64;

/// Input: `[encver: i32 LE][mode: u64 LE][field: u64 LE][rest…]`, the fields an RDB record or a
/// `RESTORE` payload holds. For an exclusive lock or a gate, `field` is the fence and `rest` the
/// token. For holders (modes 2 and 3, versions 2 and 3), `field` is the semaphore limit, and
/// `rest` is `[count: u64 LE][encoded holds]` in version 3, or in version 2 each hold's fields
/// `[fence: u64 LE][lease end: i64 LE][token length: u16 LE][token]`.
pub fn record(data: &[u8]) {
    if data.len() < 20 {
        return;
    }
    let encver = i32::from_le_bytes(data[0..4].try_into().unwrap());
    let mode = u64::from_le_bytes(data[4..12].try_into().unwrap());
    let field = u64::from_le_bytes(data[12..20].try_into().unwrap());
    let rest = &data[20..];
    match Mode::from_code(mode) {
        Some(Mode::Shared | Mode::Semaphore) if (2..=3).contains(&encver) => {
            holders_record(encver, mode, field, rest)
        }
        _ => single_record(encver, mode, field, rest),
    }
}

fn single_record(encver: i32, mode: u64, fence: u64, token: &[u8]) {
    let want = if !(1..=ENCODING_VERSION).contains(&encver) {
        Err(DecodeError::UnknownVersion)
    } else if Mode::from_code(mode).is_none() {
        Err(DecodeError::UnknownMode)
    } else if !fence::is_valid(fence) {
        Err(DecodeError::BadFence)
    } else if !matches!(Mode::from_code(mode), Some(Mode::Exclusive | Mode::Gate)) {
        // Holders are not read here: a version 1 record cannot have them.
        Err(DecodeError::UnknownMode)
    } else if (mode == Mode::Gate.code()) != token.is_empty() || token.len() > limits::MAX_TOKEN_LEN
    {
        Err(DecodeError::BadToken)
    } else {
        Ok(())
    };
    let lock = match LockRef::decode(encver, mode, fence, token) {
        Ok(lock) => {
            assert_eq!(
                want,
                Ok(()),
                "decode accepted {encver} {mode} {fence} {token:?}"
            );
            lock
        }
        Err(e) => {
            assert_eq!(Err(e), want, "decode of {encver} {mode} {fence} {token:?}");
            return;
        }
    };
    assert_eq!((lock.fence(), lock.token()), (fence, token));
    assert_eq!(lock.mode().code(), mode);
    if lock.is_gate() {
        // Nobody owns a gate; it lets through fences from its own up.
        assert!(!owned_by(Some(lock), b"") && !owned_by(Some(lock), b"t"));
        assert_eq!(
            decide_gate(Some(lock), fence - 1),
            GateDecision::Stale { highest: fence }
        );
        let raise = fence < fence::MAX_FENCE;
        assert_eq!(
            decide_gate(Some(lock), fence + u64::from(raise)),
            GateDecision::Accept { raise }
        );
    } else {
        let mut other = token.to_vec();
        other[0] ^= 1;
        let prefix = &token[..token.len() - 1];
        assert!(lock.is_held_by(token) && owned_by(Some(lock), token));
        assert!(!lock.is_held_by(&other) && !lock.is_held_by(prefix));
        assert!(!owned_by(Some(lock), &other) && !owned_by(Some(lock), prefix));
        // The holder re-acquires (same fence, new lease); anyone else waits, whatever it asks,
        // or is told the key is not a semaphore.
        let holding = |t: &[u8]| lock.is_held_by(t).then_some(Want::Exclusive);
        let key = Occupancy::Exclusive;
        assert_eq!(
            decide(key, Want::Exclusive, holding(token)),
            Decision::Regrant
        );
        assert_eq!(
            decide(key, Want::Shared, holding(token)),
            Decision::OtherMode
        );
        assert_eq!(
            decide(key, Want::Exclusive, holding(&other)),
            Decision::Busy
        );
        assert_eq!(decide(key, Want::Shared, holding(&other)), Decision::Busy);
        assert_eq!(
            decide(key, Want::Place { limit: 2 }, holding(&other)),
            Decision::Mismatch(LockKind::ReadWrite)
        );
    }
    // The stored form round-trips, also through the raw pointer Redis holds.
    let rec = Record::new(lock);
    assert!(matches!(rec.view(), Stored::Single(l) if l == lock));
    assert_eq!(Record::size_of(rec.view()), 10 + token.len());
    assert!(matches!(Record::copy_of(rec.view()).view(), Stored::Single(l) if l == lock));
    let raw = rec.into_raw();
    // SAFETY: `raw` comes from `into_raw`; nothing else uses it, and it is taken back once.
    unsafe {
        assert!(matches!(Record::borrow_raw(raw), Stored::Single(l) if l == lock));
        assert!(Record::holders_mut(raw).is_none());
        assert!(matches!(Record::from_raw(raw).view(), Stored::Single(l) if l == lock));
    }
}

fn holders_record(encver: i32, mode: u64, limit: u64, rest: &[u8]) {
    // The server's reading of the kind (a shared lock stores limit 0).
    let kind = match (Mode::from_code(mode), u32::try_from(limit)) {
        (Some(Mode::Shared), _) if limit == 0 => Kind::Shared,
        (Some(Mode::Semaphore), Ok(limit)) => Kind::Semaphore { limit },
        _ => return,
    };
    let (got, want, holds) = if encver == 3 {
        let Some((count, bytes)) = rest.split_first_chunk::<8>() else {
            return;
        };
        let count = u64::from_le_bytes(*count);
        // Holds without data, as modes 2 and 3 store them.
        let got = Holders::from_encoded(kind, count, bytes, false, LATEST_END);
        let (want, holds) = match decode_holds(bytes) {
            Some(holds) if holds.len() as u64 != count => (Err(HoldersError::Malformed), holds),
            Some(holds) => (model_encoded(kind, &holds), holds),
            None => (Err(HoldersError::Malformed), Vec::new()),
        };
        if got.is_ok() {
            let back = got.as_ref().map(|h| h.encoded().into_owned());
            assert_eq!(back.as_deref(), Ok(bytes), "not re-encoded as read");
        }
        (got, want, holds)
    } else {
        let Some(holds) = version2_holds(rest) else {
            return;
        };
        let stored = holds.iter().map(|(t, h)| (t.clone(), *h, None));
        let got = Holders::from_stored(kind, stored, LATEST_END);
        (got, model_holds(kind, &holds), holds)
    };
    let holders = match got {
        Ok(h) => {
            assert_eq!(want, Ok(()), "accepted {kind:?} {holds:?}");
            h
        }
        Err(e) => {
            assert_eq!(Err(e), want, "refused {kind:?} {holds:?}");
            return;
        }
    };
    let mut sorted = holds;
    sorted.sort_by_key(|(_, h)| (h.expire_at, h.fence));
    crate::holders::check_matches(&holders, kind, &sorted);
    check_grants(kind, holders.len());
    let count = sorted.len() as u64;
    let again = Holders::from_encoded(kind, count, &holders.encoded(), false, LATEST_END);
    assert_eq!(again.as_ref(), Ok(&holders));
    let rec = Record::new_multi(holders.clone());
    assert!(matches!(rec.view(), Stored::Multi(h) if *h == holders));
    assert_eq!(Record::size_of(rec.view()), holders.heap_size());
    assert!(matches!(Record::copy_of(rec.view()).view(), Stored::Multi(h) if *h == holders));
    let raw = rec.into_raw();
    // SAFETY: `raw` comes from `into_raw`; nothing else uses it, and it is taken back once.
    unsafe {
        assert!(matches!(Record::borrow_raw(raw), Stored::Multi(h) if *h == holders));
        assert_eq!(Record::holders_mut(raw).map(|h| &*h), Some(&holders));
        drop(Record::from_raw(raw));
    }
}

/// Version 2's holds, as the harness lays them out; `None` if the bytes are not whole holds.
fn version2_holds(mut rest: &[u8]) -> Option<Vec<(Vec<u8>, Hold)>> {
    let mut holds = Vec::new();
    while !rest.is_empty() {
        let (fence, r) = rest.split_first_chunk::<8>()?;
        let (expire_at, r) = r.split_first_chunk::<8>()?;
        let (len, r) = r.split_first_chunk::<2>()?;
        let len = u16::from_le_bytes(*len) as usize;
        let token = r.get(..len)?;
        rest = &r[len..];
        let hold = Hold {
            fence: u64::from_le_bytes(*fence),
            expire_at: i64::from_le_bytes(*expire_at),
        };
        holds.push((token.to_vec(), hold));
    }
    Some(holds)
}

/// The module's rules for a set of holds read back: each token and fence valid and used once,
/// each lease end from 1970 to `LATEST_END`, a semaphore's limit valid and not exceeded, and
/// at least one hold.
fn model_holds(kind: Kind, holds: &[(Vec<u8>, Hold)]) -> Result<(), HoldersError> {
    let mut tokens = std::collections::HashSet::new();
    let mut fences = std::collections::HashSet::new();
    for (token, hold) in holds {
        if !token_ok(token) {
            return Err(HoldersError::BadToken);
        }
        if !fence::is_valid(hold.fence) {
            return Err(HoldersError::BadFence);
        }
        if !(0..=LATEST_END).contains(&hold.expire_at) {
            return Err(HoldersError::BadLeaseEnd);
        }
        if !tokens.insert(token) {
            return Err(HoldersError::DuplicateToken);
        }
        if !fences.insert(hold.fence) {
            return Err(HoldersError::DuplicateFence);
        }
    }
    if let Kind::Semaphore { limit } = kind {
        if !(1..=limits::MAX_LIMIT).contains(&limit) {
            return Err(HoldersError::BadLimit);
        }
        if holds.len() > limit as usize {
            return Err(HoldersError::OverLimit);
        }
    }
    if holds.is_empty() {
        return Err(HoldersError::Empty);
    }
    Ok(())
}

/// As [`model_holds`], for encoded holds, which must also come in the order they are written.
fn model_encoded(kind: Kind, holds: &[(Vec<u8>, Hold)]) -> Result<(), HoldersError> {
    let order = |h: &Hold| (h.expire_at, h.fence);
    if holds.windows(2).any(|w| order(&w[0].1) >= order(&w[1].1)) {
        return Err(HoldersError::Unordered);
    }
    model_holds(kind, holds)
}

/// The stored encoding of holds, written independently of the core: per hold, the lease end's
/// step and the zigzagged fence step from the hold before (the first from zero), and the token
/// length, as shortest LEB128 varints, then the token.
pub fn encode_holds(holds: &[(Vec<u8>, Hold)]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut end, mut fence) = (0i64, 0u64);
    for (token, hold) in holds {
        let step = hold.fence.wrapping_sub(fence) as i64;
        put_varint(&mut out, hold.expire_at.wrapping_sub(end) as u64);
        put_varint(&mut out, ((step << 1) ^ (step >> 63)) as u64);
        put_varint(&mut out, token.len() as u64);
        out.extend_from_slice(token);
        (end, fence) = (hold.expire_at, hold.fence);
    }
    out
}

pub fn put_varint(out: &mut Vec<u8>, mut n: u64) {
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

/// A varint as [`put_varint`] writes it: `None` if cut short, over 64 bits, or not the shortest.
pub fn take_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut n: u128 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        n |= u128::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let n = u64::try_from(n).ok()?;
            let mut shortest = Vec::new();
            put_varint(&mut shortest, n);
            (shortest.len() == i + 1).then_some(())?;
            *bytes = &bytes[i + 1..];
            return Some(n);
        }
    }
    None
}

/// Reads [`encode_holds`]'s format back; `None` for bytes it could not have written.
fn decode_holds(mut bytes: &[u8]) -> Option<Vec<(Vec<u8>, Hold)>> {
    let mut holds = Vec::new();
    let (mut end, mut fence) = (0i64, 0u64);
    while !bytes.is_empty() {
        end = end.wrapping_add(take_varint(&mut bytes)? as i64);
        let z = take_varint(&mut bytes)?;
        fence = fence.wrapping_add((((z >> 1) as i64) ^ -((z & 1) as i64)) as u64);
        let len = usize::try_from(take_varint(&mut bytes)?).ok()?;
        let token = bytes.get(..len)?.to_vec();
        bytes = &bytes[len..];
        holds.push((
            token,
            Hold {
                fence,
                expire_at: end,
            },
        ));
    }
    Some(holds)
}
