//! Fuzz targets for redislock's pure core, shared by the libFuzzer entry points and by the plain
//! random driver (`driver`, with input generators in `gen`).
//!
//! Each target takes raw bytes, turns them into a call of the core, and checks properties
//! beyond "does not panic":
//! - `args`: the five parsers against an independent model of the SPEC's argument rules (which
//!   calls are accepted, and what they parse to), and every error text is a sendable Redis
//!   error line;
//! - `record`: `LockRef::decode` accepts exactly what the module could have written, and an
//!   accepted record round-trips through `Record` and its raw-pointer hand-over;
//! - `fence`: the fence clock, under any sequence of grants, observations, merges and epoch
//!   changes, never issues a fence that is not above every fence issued or observed before.

use redislock::core::args::{parse_acquire, parse_extend, parse_info, parse_release};
use redislock::core::effects::{parse_apply, parse_epoch};
use redislock::core::errors::LockError;
use redislock::core::fence::{self, FenceClock, EPOCH_SHIFT, MAX_EPOCH, MAX_FENCE};
use redislock::core::lock::{
    decide_acquire, AcquireDecision, DecodeError, LockRef, Mode, ENCODING_VERSION,
};
use redislock::core::record::Record;
use redislock::core::token::{TokenArg, MAX_TOKEN_LEN};

pub mod driver;
pub mod gen;

// ---------------------------------------------------------------------------------------------
// args
// ---------------------------------------------------------------------------------------------

/// Input: `[selector, separator, argv joined by separator…]`. The selector picks the parser;
/// the separator byte is the fuzzer's choice, so an argument can hold any other byte.
pub fn args(data: &[u8]) {
    let [sel, sep, rest @ ..] = data else { return };
    let argv: Vec<&[u8]> = rest.split(|b| b == sep).collect();
    match sel % 6 {
        0 => check_acquire(&argv),
        1 => check_extend(&argv),
        2 => check_release(&argv),
        3 => check_apply(&argv),
        4 => check_epoch(&argv),
        _ => check_info(&argv),
    }
}

/// Strict decimal as Redis parses integers: optional `-`, digits, no leading zero, no `-0`.
fn strict_i64(raw: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(raw).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
        || s == "-0"
    {
        return None;
    }
    s.parse().ok()
}

fn token_ok(t: &[u8]) -> bool {
    !t.is_empty() && t.len() <= MAX_TOKEN_LEN
}

/// `EX`/`PX` value in milliseconds, if valid.
fn model_ttl(unit: &[u8], value: &[u8]) -> Option<u64> {
    let v = strict_i64(value).filter(|&v| v > 0)?;
    if unit.eq_ignore_ascii_case(b"EX") {
        v.checked_mul(1000).map(|ms| ms as u64)
    } else {
        Some(v as u64)
    }
}

/// The options after the token: `(ttl_ms, block_ms)` if valid.
fn model_options(opts: &[&[u8]], allow_block: bool) -> Option<(u64, Option<u64>)> {
    let (mut ttl, mut block) = (None, None);
    let mut i = 0;
    while i < opts.len() {
        let name = opts[i];
        let value = opts.get(i + 1)?;
        i += 2;
        if allow_block && name.eq_ignore_ascii_case(b"BLOCK") {
            if block.is_some() {
                return None;
            }
            block = Some(strict_i64(value).filter(|&b| b >= 0)? as u64);
        } else if name.eq_ignore_ascii_case(b"EX") || name.eq_ignore_ascii_case(b"PX") {
            if ttl.is_some() {
                return None;
            }
            ttl = Some(model_ttl(name, value)?);
        } else {
            return None;
        }
    }
    Some((ttl?, block))
}

/// Every error must be a single line that Redis can send as an error reply.
fn check_error(e: &LockError) {
    let s = e.to_string();
    assert!(
        ["ERR ", "WRONGTYPE ", "TRYAGAIN "]
            .iter()
            .any(|p| s.starts_with(p)),
        "error without a code: {s:?}"
    );
    assert!(
        !s.contains(['\r', '\n', '\0']),
        "error text breaks the line: {s:?}"
    );
    assert!(s.len() <= 400, "error text of {} bytes", s.len());
    // Printable ASCII only: the text goes out as a C string, and the redis-module crate's error
    // reply turns each character into one byte (`c as u8`), so a character such as U+0100
    // would become a NUL and abort redis-server (a bug this target found, since fixed).
    assert!(
        s.bytes().all(|b| b == b' ' || b.is_ascii_graphic()),
        "error text that is not printable ASCII: {s:?}"
    );
}

fn check_acquire(argv: &[&[u8]]) {
    let got = parse_acquire(argv);
    let want = if argv.len() < 3 {
        None
    } else {
        let t = argv[2];
        if !token_ok(t) {
            None
        } else {
            model_options(&argv[3..], true)
        }
    };
    match (&got, want) {
        (Ok(a), Some((ttl, block))) => {
            assert_eq!((a.ttl_ms, a.block_ms), (ttl, block), "{argv:?}");
            match a.token {
                TokenArg::Generate => assert_eq!(argv[2], b"*"),
                TokenArg::Given(t) => assert!(t == argv[2] && t != b"*"),
            }
            assert!(a.ttl_ms >= 1 && a.ttl_ms <= i64::MAX as u64);
        }
        (Err(e), None) => check_error(e),
        _ => panic!("parse_acquire({argv:?}) = {got:?}, model says {want:?}"),
    }
}

fn check_extend(argv: &[&[u8]]) {
    let got = parse_extend(argv);
    let want = if argv.len() < 3 || !token_ok(argv[2]) {
        None
    } else {
        model_options(&argv[3..], false).map(|(ttl, _)| ttl)
    };
    match (&got, want) {
        (Ok(x), Some(ttl)) => {
            assert_eq!((x.token, x.ttl_ms), (argv[2], ttl), "{argv:?}");
        }
        (Err(e), None) => check_error(e),
        _ => panic!("parse_extend({argv:?}) = {got:?}, model says {want:?}"),
    }
}

fn check_release(argv: &[&[u8]]) {
    let got = parse_release(argv);
    let valid = argv.len() == 3 && token_ok(argv[2]);
    match (&got, valid) {
        (Ok(r), true) => assert_eq!(r.token, argv[2]),
        (Err(e), false) => check_error(e),
        _ => panic!("parse_release({argv:?}) = {got:?}, model says valid={valid}"),
    }
}

fn check_apply(argv: &[&[u8]]) {
    let got = parse_apply(argv);
    let want = if !(4..=5).contains(&argv.len()) || !token_ok(argv[2]) {
        None
    } else {
        strict_i64(argv[3])
            .filter(|&f| f > 0)
            .and_then(|fence| match argv.get(4) {
                None => Some((fence as u64, None)),
                Some(v) => strict_i64(v).map(|at| (fence as u64, Some(at))),
            })
    };
    match (&got, want) {
        (Ok(a), Some((fence, at))) => {
            assert_eq!((a.token, a.fence, a.expire_at_ms), (argv[2], fence, at));
            assert!(fence::is_valid(a.fence));
        }
        (Err(e), None) => check_error(e),
        _ => panic!("parse_apply({argv:?}) = {got:?}, model says {want:?}"),
    }
}

fn check_epoch(argv: &[&[u8]]) {
    let got = parse_epoch(argv);
    let want = if argv.len() == 2 {
        strict_i64(argv[1]).filter(|&e| e >= 0).map(|e| e as u64)
    } else {
        None
    };
    match (&got, want) {
        (Ok(e), Some(w)) => assert_eq!(*e, w),
        (Err(e), None) => check_error(e),
        _ => panic!("parse_epoch({argv:?}) = {got:?}, model says {want:?}"),
    }
}

fn check_info(argv: &[&[u8]]) {
    match parse_info(argv) {
        Ok(()) => assert_eq!(argv.len(), 2),
        Err(e) => {
            assert_ne!(argv.len(), 2);
            check_error(&e);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// record
// ---------------------------------------------------------------------------------------------

/// Input: `[encver: i32 LE][mode: u64 LE][fence: u64 LE][token…]`, the fields an RDB record or
/// a `RESTORE` payload hands to `LockRef::decode`.
pub fn record(data: &[u8]) {
    if data.len() < 20 {
        return;
    }
    let encver = i32::from_le_bytes(data[0..4].try_into().unwrap());
    let mode = u64::from_le_bytes(data[4..12].try_into().unwrap());
    let fence = u64::from_le_bytes(data[12..20].try_into().unwrap());
    let token = &data[20..];
    let valid = encver == ENCODING_VERSION
        && mode == Mode::Exclusive.code()
        && (1..=MAX_FENCE).contains(&fence)
        && token_ok(token);
    match LockRef::decode(encver, mode, fence, token) {
        Ok(lock) => {
            assert!(valid, "decode accepted {encver} {mode} {fence} {token:?}");
            assert_eq!(
                (lock.fence(), lock.token(), lock.mode()),
                (fence, token, Mode::Exclusive)
            );
            assert!(lock.is_held_by(token));
            let mut other = token.to_vec();
            other[0] ^= 1;
            assert!(!lock.is_held_by(&other));
            assert!(!lock.is_held_by(&token[..token.len() - 1]));
            assert_eq!(
                decide_acquire(Some(lock), Some(token)),
                AcquireDecision::Regrant { fence }
            );
            assert_eq!(
                decide_acquire(Some(lock), Some(&other)),
                AcquireDecision::Busy
            );
            // The stored form round-trips, also through the raw pointer Redis holds.
            let rec = Record::new(lock);
            assert_eq!(rec.view(), lock);
            assert_eq!(Record::size_of(lock), 10 + token.len());
            let raw = rec.into_raw();
            // SAFETY: `raw` comes from `into_raw` and is taken back exactly once below.
            let seen = unsafe { Record::borrow_raw(raw) };
            assert_eq!((seen.token(), seen.fence()), (token, fence));
            // SAFETY: as above.
            let back = unsafe { Record::from_raw(raw) };
            assert_eq!(back.view(), lock);
        }
        Err(e) => {
            assert!(!valid, "decode refused a valid record: {e:?}");
            let want = if encver != ENCODING_VERSION {
                DecodeError::UnknownVersion
            } else if Mode::from_code(mode).is_none() {
                DecodeError::UnknownMode
            } else if !fence::is_valid(fence) {
                DecodeError::BadFence
            } else {
                DecodeError::BadToken
            };
            assert_eq!(e, want);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// fence
// ---------------------------------------------------------------------------------------------

/// Input: a sequence of 9-byte operations `[op][value: u64 LE]` on one fence clock: grant at a
/// time, observe a fence, observe an epoch, merge a saved clock, start a new epoch.
pub fn fence(data: &[u8]) {
    let mut clock = FenceClock::default();
    // Every fence issued or observed so far (observed ones only if valid, as the module
    // validates what it loads).
    let mut highest: u64 = 0;
    let mut last_epoch = 0;
    for op in data.chunks_exact(9) {
        let v = u64::from_le_bytes(op[1..9].try_into().unwrap());
        let before = clock;
        match op[0] % 5 {
            0 => {
                // A time around now, or anything at all.
                let now = if v & 1 == 0 {
                    fence::TIME_BASE_MS + (v >> 1) as i64 % (100 * 365 * 86_400_000)
                } else {
                    v as i64
                };
                match clock.next_fence(now) {
                    Some(f) => {
                        assert!(f > highest, "fence {f} not above {highest} ({before:?})");
                        assert!(fence::is_valid(f));
                        assert!(f >> EPOCH_SHIFT >= clock.epoch, "fence below its epoch");
                        highest = f;
                    }
                    None => assert!(
                        before.high_water >= MAX_FENCE,
                        "fences exhausted early: {before:?}"
                    ),
                }
            }
            1 => {
                let f = v % (MAX_FENCE + 1);
                if fence::is_valid(f) {
                    clock.observe(f);
                    highest = highest.max(f);
                }
            }
            2 => clock.observe_epoch(v),
            3 => {
                let saved = FenceClock {
                    epoch: v >> 52,
                    high_water: v % (MAX_FENCE + 1),
                };
                clock.merge(saved);
                highest = highest.max(saved.high_water);
            }
            _ => {
                let advanced = clock.advance_epoch();
                if advanced {
                    assert!(clock.epoch > before.epoch);
                    assert!(
                        clock.epoch << EPOCH_SHIFT > before.high_water,
                        "a new epoch not above the fences seen: {before:?} → {clock:?}"
                    );
                } else {
                    assert_eq!(clock.epoch, MAX_EPOCH);
                }
            }
        }
        assert!(clock.epoch >= last_epoch && clock.epoch <= MAX_EPOCH);
        assert!(clock.high_water >= before.high_water, "the clock went back");
        last_epoch = clock.epoch;
    }
}
