//! The `args` target: every parser of the module's commands against an independent model of
//! the documented argument rules (which calls are accepted, and what they parse to), and every
//! error text is a sendable Redis error line.

use redislock::core::args::{
    parse_acquire, parse_call, parse_extend, parse_fence, parse_info, parse_release,
};
use redislock::core::effects::{
    parse_apply, parse_epoch, parse_gate_apply, parse_hold, HoldEffect,
};
use redislock::core::errors::LockError;
use redislock::core::grant::Want;
use redislock::core::holders::Kind;
use redislock::core::token::TokenArg;

use crate::gen::{Command, HOLD_EFFECT_VERSION, MAX_BLOCK_MS, MAX_LIMIT, MAX_TTL_MS};
use crate::token_ok;

/// Input: `[selector, separator, argv joined by separator…]`. The selector picks the command
/// (`Command::ALL`); the separator byte is the fuzzer's choice, so an argument can hold any
/// other byte.
pub fn args(data: &[u8]) {
    let [sel, sep, rest @ ..] = data else { return };
    let argv: Vec<&[u8]> = rest.split(|b| b == sep).collect();
    match Command::ALL[*sel as usize % Command::ALL.len()] {
        Command::Acquire => check_acquire(&argv),
        Command::Extend => check_extend(&argv),
        Command::Release => check_release(&argv),
        Command::Info => check_info(&argv),
        Command::Call => check_call(&argv),
        Command::Fence => check_fence(&argv),
        Command::Apply => check_apply(&argv),
        Command::Hold => check_hold(&argv),
        Command::Gate => check_gate(&argv),
        Command::Epoch => check_epoch(&argv),
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

fn non_negative(raw: &[u8]) -> Option<u64> {
    strict_i64(raw).filter(|&v| v >= 0).map(|v| v as u64)
}

fn fence_value(raw: &[u8]) -> Option<u64> {
    strict_i64(raw).filter(|&v| v > 0).map(|v| v as u64)
}

fn limit_value(raw: &[u8]) -> Option<u32> {
    non_negative(raw)
        .filter(|n| (1..=u64::from(MAX_LIMIT)).contains(n))
        .map(|n| n as u32)
}

fn is(name: &[u8], option: &str) -> bool {
    name.eq_ignore_ascii_case(option.as_bytes())
}

/// `EX`/`PX` value in milliseconds, if valid.
fn model_ttl(unit: &[u8], value: &[u8]) -> Option<u64> {
    let v = non_negative(value).filter(|&v| v > 0)?;
    let ms = if is(unit, "EX") {
        v.checked_mul(1000)?
    } else {
        v
    };
    (ms <= MAX_TTL_MS).then_some(ms)
}

/// What a valid `LOCK.ACQUIRE` (or with `acquire` false, `LOCK.EXTEND`) asks for.
#[derive(Debug, Default)]
struct Options {
    ttl: Option<u64>,
    want: Option<Want>,
    block: Option<u64>,
    ephemeral: bool,
    data: Option<Vec<u8>>,
}

/// The most bytes of `DATA`.
const MAX_DATA: usize = 4096;

/// The options after the token, if valid: each at most once, `SHARED` and `LIMIT` not
/// together, a TTL required.
fn model_options(opts: &[&[u8]], acquire: bool) -> Option<Options> {
    let mut o = Options::default();
    let mut rest = opts.iter();
    while let Some(&name) = rest.next() {
        if is(name, "EX") || is(name, "PX") {
            let value = rest.next()?;
            if o.ttl.is_some() {
                return None;
            }
            o.ttl = Some(model_ttl(name, value)?);
        } else if !acquire {
            return None;
        } else if is(name, "SHARED") || is(name, "LIMIT") {
            let want = if is(name, "SHARED") {
                Want::Shared
            } else {
                Want::Place {
                    limit: limit_value(rest.next()?)?,
                }
            };
            if o.want.replace(want).is_some() {
                return None;
            }
        } else if is(name, "EPHEMERAL") {
            if o.ephemeral {
                return None;
            }
            o.ephemeral = true;
        } else if is(name, "BLOCK") {
            let value = rest.next()?;
            if o.block.is_some() {
                return None;
            }
            o.block = Some(non_negative(value).filter(|&b| b <= MAX_BLOCK_MS)?);
        } else if is(name, "DATA") {
            let value = rest.next()?;
            if o.data.is_some() || !(1..=MAX_DATA).contains(&value.len()) {
                return None;
            }
            o.data = Some(value.to_vec());
        } else {
            return None;
        }
    }
    o.ttl?;
    Some(o)
}

/// Every error must be a single line that Redis can send as an error reply.
pub(crate) fn check_error(e: &LockError) {
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

/// Compares a parser's answer with the model's: equal when both accept, an error exactly when
/// the model refuses.
fn agree<T: std::fmt::Debug, W: std::fmt::Debug>(
    argv: &[&[u8]],
    got: Result<T, LockError>,
    want: Option<W>,
    same: impl FnOnce(&T, &W) -> bool,
) {
    match (&got, &want) {
        (Ok(g), Some(w)) => assert!(same(g, w), "{argv:?}: parsed {g:?}, model says {w:?}"),
        (Err(e), None) => check_error(e),
        _ => panic!("{argv:?}: parsed {got:?}, model says {want:?}"),
    }
}

fn check_acquire(argv: &[&[u8]]) {
    let want = (argv.len() >= 3 && (argv[2] == b"*" || token_ok(argv[2])))
        .then(|| model_options(&argv[3..], true))
        .flatten();
    agree(argv, parse_acquire(argv), want, |a, o| {
        let token_right = match a.token {
            TokenArg::Generate => argv[2] == b"*",
            TokenArg::Given(t) => t == argv[2] && t != b"*",
        };
        token_right
            && Some(a.ttl_ms) == o.ttl
            && a.want == o.want.unwrap_or(Want::Exclusive)
            && (a.block_ms, a.ephemeral) == (o.block, o.ephemeral)
            && a.data == o.data.as_deref()
    });
}

fn check_extend(argv: &[&[u8]]) {
    let want = (argv.len() >= 3 && token_ok(argv[2]))
        .then(|| model_options(&argv[3..], false))
        .flatten();
    agree(argv, parse_extend(argv), want, |x, o| {
        x.token == argv[2] && Some(x.ttl_ms) == o.ttl
    });
}

fn check_release(argv: &[&[u8]]) {
    let want = (argv.len() == 3 && token_ok(argv[2])).then_some(());
    agree(argv, parse_release(argv), want, |r, ()| r.token == argv[2]);
}

fn check_info(argv: &[&[u8]]) {
    let want = (argv.len() == 2).then_some(());
    agree(argv, parse_info(argv), want, |(), ()| true);
}

fn check_call(argv: &[&[u8]]) {
    let want = (argv.len() >= 4 && token_ok(argv[2])).then_some(());
    agree(argv, parse_call(argv), want, |c, ()| {
        (c.token, c.command_at) == (argv[2], 3)
    });
}

fn check_fence(argv: &[&[u8]]) {
    let want = (argv.len() >= 4).then(|| fence_value(argv[2])).flatten();
    agree(argv, parse_fence(argv), want, |f, &w| {
        (f.fence, f.command_at) == (w, 3)
    });
}

/// `LOCK._APPLY key token fence [unix-ms] [DATA data]`.
fn check_apply(argv: &[&[u8]]) {
    let want = if !(4..=7).contains(&argv.len()) || !token_ok(argv[2]) {
        None
    } else {
        let (at, rest) = match argv.len() {
            5 | 7 => (strict_i64(argv[4]).map(Some), &argv[5..]),
            _ => (Some(None), &argv[4..]),
        };
        let data = match rest {
            [] => Some(None),
            [name, value] if is(name, "DATA") && (1..=MAX_DATA).contains(&value.len()) => {
                Some(Some(*value))
            }
            _ => None,
        };
        fence_value(argv[3])
            .zip(at)
            .zip(data)
            .map(|((f, a), d)| (f, a, d))
    };
    agree(argv, parse_apply(argv), want, |a, &(fence, at, data)| {
        (a.token, a.fence, a.expire_at_ms, a.data) == (argv[2], fence, at, data)
    });
}

/// `LOCK._HOLD key version END token` or
/// `LOCK._HOLD key version GRANT (SHARED any | LIMIT count) token fence unix-ms [DATA data]`.
fn model_hold<'a>(argv: &[&'a [u8]]) -> Option<HoldEffect<'a>> {
    if argv.len() < 3 || non_negative(argv[2]) != Some(HOLD_EFFECT_VERSION) {
        return None;
    }
    let op = argv.get(3).copied().unwrap_or_default();
    if is(op, "END") && argv.len() == 5 {
        return token_ok(argv[4]).then_some(HoldEffect::End { token: argv[4] });
    }
    if !is(op, "GRANT") || !matches!(argv.len(), 9 | 11) {
        return None;
    }
    let data = match argv.get(9..) {
        Some([name, value]) if is(name, "DATA") && (1..=MAX_DATA).contains(&value.len()) => {
            Some(*value)
        }
        Some([]) | None => None,
        _ => return None,
    };
    let kind = if is(argv[4], "SHARED") {
        Kind::Shared
    } else if is(argv[4], "LIMIT") {
        Kind::Semaphore {
            limit: limit_value(argv[5])?,
        }
    } else {
        return None;
    };
    Some(HoldEffect::Grant {
        kind,
        token: Some(argv[6]).filter(|t| token_ok(t))?,
        fence: fence_value(argv[7])?,
        expire_at_ms: strict_i64(argv[8])?,
        data,
    })
}

fn check_hold(argv: &[&[u8]]) {
    agree(argv, parse_hold(argv), model_hold(argv), |h, w| h == w);
}

fn check_gate(argv: &[&[u8]]) {
    let want = (argv.len() == 3).then(|| fence_value(argv[2])).flatten();
    agree(argv, parse_gate_apply(argv), want, |f, w| f == w);
}

fn check_epoch(argv: &[&[u8]]) {
    let want = (argv.len() == 2).then(|| non_negative(argv[1])).flatten();
    agree(argv, parse_epoch(argv), want, |e, w| e == w);
}
