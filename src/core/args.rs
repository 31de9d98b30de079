//! Parsing command arguments into typed requests.
//!
//! Functions take the whole argument vector (`argv[0]` is the command name),
//! as a slice of anything that derefs to bytes, so they run the same on Redis strings and in
//! tests. Options are case-insensitive and may come in any order.

use std::ops::Deref;

use super::errors::LockError;
use super::grant::Want;
use super::holders::{Kind, MAX_LIMIT};
use super::limits::{MAX_BLOCK_MS, MAX_TTL_MS};
use super::token::TokenArg;

/// `LOCK.ACQUIRE key token (EX seconds | PX milliseconds) [SHARED | LIMIT count] [EPHEMERAL] [BLOCK timeout-ms]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub token: TokenArg<'a>,
    pub ttl_ms: u64,
    /// Exclusive (no option), `SHARED`, or a place of `LIMIT count`.
    pub want: Want,
    /// `None`: answer at once. `Some(0)`: wait without limit.
    pub block_ms: Option<u64>,
    /// The hold is bound to the asking connection.
    pub ephemeral: bool,
}

/// `LOCK.CALL key token command [arg …]`: the token, and where the command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<'a> {
    pub token: &'a [u8],
    pub command_at: usize,
}

/// `LOCK.FENCE gate fence command [arg …]`: the fence, and where the command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub fence: u64,
    pub command_at: usize,
}

/// `LOCK.RELEASE key token`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release<'a> {
    pub token: &'a [u8],
}

/// `LOCK.EXTEND key token (EX seconds | PX milliseconds)`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extend<'a> {
    pub token: &'a [u8],
    pub ttl_ms: u64,
}

/// The internal effect `LOCK._APPLY key token fence [unix-ms]` that replicas
/// and the AOF replay to rebuild a grant exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Apply<'a> {
    pub token: &'a [u8],
    pub fence: u64,
    /// Absolute expiry in Unix milliseconds; `None` when a following
    /// `PEXPIREAT` sets it (AOF rewrite).
    pub expire_at_ms: Option<i64>,
}

pub fn parse_acquire<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Acquire<'_>, LockError> {
    if argv.len() < 3 {
        return Err(LockError::Arity("lock.acquire"));
    }
    let token = TokenArg::parse(&argv[2]).ok_or(LockError::InvalidToken)?;
    let mut ttl = TtlOption::default();
    let mut block_ms = None;
    let mut ephemeral = false;
    let mut want = None;
    let mut rest = argv[3..].iter().map(|a| &**a);
    while let Some(name) = rest.next() {
        if name.eq_ignore_ascii_case(b"SHARED") || name.eq_ignore_ascii_case(b"LIMIT") {
            let asked = if name.eq_ignore_ascii_case(b"SHARED") {
                Want::Shared
            } else {
                let value = rest.next().ok_or(LockError::MissingValue("LIMIT"))?;
                Want::Place {
                    limit: parse_limit(value)?,
                }
            };
            want = match (want, asked) {
                (None, w) => Some(w),
                (Some(Want::Shared), Want::Shared) => {
                    return Err(LockError::RepeatedOption("SHARED"))
                }
                (Some(Want::Place { .. }), Want::Place { .. }) => {
                    return Err(LockError::RepeatedOption("LIMIT"))
                }
                _ => return Err(LockError::SharedAndLimit),
            };
        } else if name.eq_ignore_ascii_case(b"EPHEMERAL") {
            if ephemeral {
                return Err(LockError::RepeatedOption("EPHEMERAL"));
            }
            ephemeral = true;
        } else if name.eq_ignore_ascii_case(b"BLOCK") {
            let value = rest.next().ok_or(LockError::MissingValue("BLOCK"))?;
            if block_ms.is_some() {
                return Err(LockError::RepeatedOption("BLOCK"));
            }
            block_ms = Some(
                parse_non_negative(value)
                    .filter(|&ms| ms <= MAX_BLOCK_MS)
                    .ok_or(LockError::InvalidBlock)?,
            );
        } else if !ttl.try_take(name, &mut rest)? {
            return Err(unknown(name));
        }
    }
    Ok(Acquire {
        token,
        ttl_ms: ttl.finish()?,
        want: want.unwrap_or(Want::Exclusive),
        block_ms,
        ephemeral,
    })
}

fn parse_limit(raw: &[u8]) -> Result<u32, LockError> {
    parse_non_negative(raw)
        .filter(|n| (1..=MAX_LIMIT as u64).contains(n))
        .map(|n| n as u32)
        .ok_or(LockError::InvalidLimit)
}

/// The version of the `LOCK._HOLD` effect this module writes and reads.
pub const HOLD_EFFECT_VERSION: u64 = 1;

/// The internal effect on one holder of a shared lock or semaphore, replayed
/// by replicas and the AOF:
/// `LOCK._HOLD key 1 GRANT (SHARED 0 | LIMIT count) token fence unix-ms`
/// (a new hold, a re-grant or an extend: the hold is set to exactly this),
/// or `LOCK._HOLD key 1 END token` (released, revoked or lease ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEffect<'a> {
    Grant {
        kind: Kind,
        token: &'a [u8],
        fence: u64,
        expire_at_ms: i64,
    },
    End {
        token: &'a [u8],
    },
}

pub fn parse_hold<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<HoldEffect<'_>, LockError> {
    if argv.len() < 3 {
        return Err(LockError::Arity("lock._hold"));
    }
    // A newer module's effects are refused, never guessed at.
    let version = parse_non_negative(&argv[2]).ok_or(LockError::EffectVersion(0))?;
    if version != HOLD_EFFECT_VERSION {
        return Err(LockError::EffectVersion(version));
    }
    let op = argv.get(3).map(|a| &**a).unwrap_or_default();
    if op.eq_ignore_ascii_case(b"END") && argv.len() == 5 {
        return Ok(HoldEffect::End {
            token: given_token(&argv[4])?,
        });
    }
    if !op.eq_ignore_ascii_case(b"GRANT") || argv.len() != 9 {
        return Err(LockError::Arity("lock._hold"));
    }
    let kind = if argv[4].eq_ignore_ascii_case(b"SHARED") {
        Kind::Shared
    } else if argv[4].eq_ignore_ascii_case(b"LIMIT") {
        Kind::Semaphore {
            limit: parse_limit(&argv[5])?,
        }
    } else {
        return Err(unknown(&argv[4]));
    };
    Ok(HoldEffect::Grant {
        kind,
        token: given_token(&argv[6])?,
        fence: parse_fence_value(&argv[7])?,
        expire_at_ms: parse_i64(&argv[8]).ok_or(LockError::InvalidTtl)?,
    })
}

pub fn parse_call<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Call<'_>, LockError> {
    if argv.len() < 4 {
        return Err(LockError::Arity("lock.call"));
    }
    Ok(Call {
        token: given_token(&argv[2])?,
        command_at: 3,
    })
}

pub fn parse_fence<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Fence, LockError> {
    if argv.len() < 4 {
        return Err(LockError::Arity("lock.fence"));
    }
    Ok(Fence {
        fence: parse_fence_value(&argv[2])?,
        command_at: 3,
    })
}

/// `LOCK._GATE gate fence`: a gate's new highest fence, replayed by replicas
/// and the AOF.
pub fn parse_gate_apply<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<u64, LockError> {
    if argv.len() != 3 {
        return Err(LockError::Arity("lock._gate"));
    }
    parse_fence_value(&argv[2])
}

fn parse_fence_value(raw: &[u8]) -> Result<u64, LockError> {
    parse_i64(raw)
        .filter(|&f| f > 0)
        .map(|f| f as u64)
        .ok_or(LockError::InvalidFence)
}

pub fn parse_release<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Release<'_>, LockError> {
    if argv.len() != 3 {
        return Err(LockError::Arity("lock.release"));
    }
    Ok(Release {
        token: given_token(&argv[2])?,
    })
}

pub fn parse_extend<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Extend<'_>, LockError> {
    if argv.len() < 3 {
        return Err(LockError::Arity("lock.extend"));
    }
    let token = given_token(&argv[2])?;
    let mut ttl = TtlOption::default();
    let mut rest = argv[3..].iter().map(|a| &**a);
    while let Some(name) = rest.next() {
        if !ttl.try_take(name, &mut rest)? {
            return Err(unknown(name));
        }
    }
    Ok(Extend {
        token,
        ttl_ms: ttl.finish()?,
    })
}

pub fn parse_info<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<(), LockError> {
    if argv.len() != 2 {
        return Err(LockError::Arity("lock.info"));
    }
    Ok(())
}

pub fn parse_apply<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Apply<'_>, LockError> {
    if !(4..=5).contains(&argv.len()) {
        return Err(LockError::Arity("lock._apply"));
    }
    let token = given_token(&argv[2])?;
    let fence = parse_fence_value(&argv[3])?;
    let expire_at_ms = match argv.get(4) {
        Some(v) => Some(parse_i64(v).ok_or(LockError::InvalidTtl)?),
        None => None,
    };
    Ok(Apply {
        token,
        fence,
        expire_at_ms,
    })
}

/// `LOCK._EPOCH epoch`: the fence epoch a promoted master reached.
pub fn parse_epoch<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<u64, LockError> {
    if argv.len() != 2 {
        return Err(LockError::Arity("lock._epoch"));
    }
    parse_non_negative(&argv[1]).ok_or(LockError::InvalidEpoch)
}

/// A token that must be given literally (release, extend): `*` is just a byte.
fn given_token(raw: &[u8]) -> Result<&[u8], LockError> {
    match TokenArg::parse(raw) {
        Some(_) => Ok(raw),
        None => Err(LockError::InvalidToken),
    }
}

fn unknown(name: &[u8]) -> LockError {
    const SHOWN: usize = 64;
    let shown = &name[..name.len().min(SHOWN)];
    // Keep the error a single printable ASCII line whatever the client sent.
    let text: String = shown
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    LockError::UnknownOption(text)
}

/// The `EX seconds | PX milliseconds` pair shared by acquire and extend.
#[derive(Default)]
struct TtlOption {
    ttl_ms: Option<u64>,
    given: Option<&'static str>,
}

impl TtlOption {
    /// Consumes `name value` if `name` is EX or PX; `Ok(false)` otherwise.
    fn try_take<'a>(
        &mut self,
        name: &[u8],
        rest: &mut impl Iterator<Item = &'a [u8]>,
    ) -> Result<bool, LockError> {
        let (label, unit_ms) = if name.eq_ignore_ascii_case(b"EX") {
            ("EX", 1000)
        } else if name.eq_ignore_ascii_case(b"PX") {
            ("PX", 1)
        } else {
            return Ok(false);
        };
        let value = rest.next().ok_or(LockError::MissingValue(label))?;
        match self.given {
            Some(first) if first == label => return Err(LockError::RepeatedOption(label)),
            Some(_) => return Err(LockError::DoubleTtl),
            None => self.given = Some(label),
        }
        let ms = parse_non_negative(value)
            .filter(|&v| v > 0)
            .and_then(|v| v.checked_mul(unit_ms))
            .filter(|&ms| ms <= MAX_TTL_MS)
            .ok_or(LockError::InvalidTtl)?;
        self.ttl_ms = Some(ms);
        Ok(true)
    }

    fn finish(self) -> Result<u64, LockError> {
        self.ttl_ms.ok_or(LockError::MissingTtl)
    }
}

/// Strict decimal like Redis's own parser: optional `-`, no `+`, no leading
/// zeros, no spaces, no overflow.
pub fn parse_i64(raw: &[u8]) -> Option<i64> {
    let digits = raw.strip_prefix(b"-").unwrap_or(raw);
    let leading_zero = digits.len() > 1 && digits[0] == b'0';
    if digits.is_empty() || leading_zero || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if raw == b"-0" {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// `n` in decimal, written to the end of `buf` (no allocation: this runs
/// on every replicated grant).
pub fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

fn parse_non_negative(raw: &[u8]) -> Option<u64> {
    parse_i64(raw).filter(|&v| v >= 0).map(|v| v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_acquire() {
        let acq = |extra: &[&str]| {
            let mut argv: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", b"k", b"t", b"PX", b"100"];
            argv.extend(extra.iter().map(|s| s.as_bytes()));
            let r = parse_acquire(&argv).map(|a| a.want);
            r
        };
        assert_eq!(acq(&[]), Ok(Want::Exclusive));
        assert_eq!(acq(&["shared"]), Ok(Want::Shared));
        assert_eq!(acq(&["LIMIT", "1"]), Ok(Want::Place { limit: 1 }));
        assert_eq!(
            acq(&["limit", "1000000"]),
            Ok(Want::Place { limit: 1_000_000 })
        );
        for bad in ["0", "1000001", "-1", "x", "4294967297", ""] {
            assert_eq!(acq(&["LIMIT", bad]), Err(LockError::InvalidLimit), "{bad}");
        }
        assert_eq!(acq(&["LIMIT"]), Err(LockError::MissingValue("LIMIT")));
        assert_eq!(
            acq(&["SHARED", "LIMIT", "2"]),
            Err(LockError::SharedAndLimit)
        );
        assert_eq!(
            acq(&["LIMIT", "2", "SHARED"]),
            Err(LockError::SharedAndLimit)
        );
        assert_eq!(
            acq(&["SHARED", "SHARED"]),
            Err(LockError::RepeatedOption("SHARED"))
        );
        assert_eq!(
            acq(&["LIMIT", "2", "LIMIT", "2"]),
            Err(LockError::RepeatedOption("LIMIT"))
        );
        assert_eq!(
            acq(&["SHARED", "EPHEMERAL", "BLOCK", "5"]),
            Ok(Want::Shared)
        );
    }

    #[test]
    fn hold_effects() {
        let hold = |args: &[&str]| {
            let mut argv: Vec<&[u8]> = vec![b"LOCK._HOLD", b"k"];
            argv.extend(args.iter().map(|s| s.as_bytes()));
            let r = parse_hold(&argv).map(|e| format!("{e:?}"));
            r
        };
        let grant = |kind, token: &[u8], fence, expire_at_ms| {
            Ok(format!(
                "{:?}",
                HoldEffect::Grant {
                    kind,
                    token,
                    fence,
                    expire_at_ms
                }
            ))
        };
        assert_eq!(
            hold(&["1", "GRANT", "SHARED", "0", "t", "7", "1000"]),
            grant(Kind::Shared, b"t", 7, 1000)
        );
        assert_eq!(
            hold(&["1", "grant", "LIMIT", "3", "t", "7", "1000"]),
            grant(Kind::Semaphore { limit: 3 }, b"t", 7, 1000)
        );
        assert_eq!(
            hold(&["1", "END", "t"]),
            Ok(format!("{:?}", HoldEffect::End { token: b"t" }))
        );
        assert_eq!(hold(&["2", "END", "t"]), Err(LockError::EffectVersion(2)));
        assert_eq!(hold(&["x", "END", "t"]), Err(LockError::EffectVersion(0)));
        assert_eq!(hold(&["1", "END"]), Err(LockError::Arity("lock._hold")));
        assert_eq!(hold(&["1"]), Err(LockError::Arity("lock._hold")));
        assert_eq!(hold(&[]), Err(LockError::Arity("lock._hold")));
        assert_eq!(
            hold(&["1", "GRANT", "LIMIT", "0", "t", "7", "1"]),
            Err(LockError::InvalidLimit)
        );
        assert_eq!(
            hold(&["1", "GRANT", "SHARED", "0", "t", "0", "1"]),
            Err(LockError::InvalidFence)
        );
        assert_eq!(
            hold(&["1", "GRANT", "SHARED", "0", "", "1", "1"]),
            Err(LockError::InvalidToken)
        );
        assert!(matches!(
            hold(&["1", "GRANT", "OTHER", "0", "t", "1", "1"]),
            Err(LockError::UnknownOption(_))
        ));
    }

    fn argv(s: &str) -> Vec<Vec<u8>> {
        s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn acquire_forms() {
        let a = argv("lock.acquire k t px 1500");
        assert_eq!(
            parse_acquire(&a),
            Ok(Acquire {
                token: TokenArg::Given(b"t"),
                ttl_ms: 1500,
                want: Want::Exclusive,
                block_ms: None,
                ephemeral: false,
            })
        );
        let a = argv("LOCK.ACQUIRE k * BLOCK 0 Ex 3");
        assert_eq!(
            parse_acquire(&a),
            Ok(Acquire {
                token: TokenArg::Generate,
                ttl_ms: 3000,
                want: Want::Exclusive,
                block_ms: Some(0),
                ephemeral: false,
            })
        );
    }

    #[test]
    fn ephemeral_call_and_fence() {
        let a = argv("lock.acquire k t ephemeral PX 5 BLOCK 1");
        assert!(parse_acquire(&a).unwrap().ephemeral);
        let a = argv("lock.acquire k t EPHEMERAL PX 5 EPHEMERAL");
        assert_eq!(
            parse_acquire(&a),
            Err(LockError::RepeatedOption("EPHEMERAL"))
        );
        let c = argv("lock.call k tok SET x 1");
        assert_eq!(
            parse_call(&c),
            Ok(Call {
                token: b"tok",
                command_at: 3
            })
        );
        assert_eq!(
            parse_call(&argv("lock.call k tok")),
            Err(LockError::Arity("lock.call"))
        );
        let f = argv("lock.fence g 17 SET x 1");
        assert_eq!(
            parse_fence(&f),
            Ok(Fence {
                fence: 17,
                command_at: 3
            })
        );
        for bad in ["0", "-1", "x", "9223372036854775808"] {
            let f = argv(&format!("lock.fence g {bad} GET x"));
            assert_eq!(parse_fence(&f), Err(LockError::InvalidFence), "{bad}");
        }
        assert_eq!(parse_gate_apply(&argv("lock._gate g 9")), Ok(9));
        // The shortest calls: a command without arguments.
        assert!(parse_call(&argv("lock.call k tok PING")).is_ok());
        assert!(parse_fence(&argv("lock.fence g 1 PING")).is_ok());
        assert_eq!(
            parse_fence(&argv("lock.fence g 1")),
            Err(LockError::Arity("lock.fence"))
        );
        assert_eq!(
            parse_fence(&argv("lock.fence g")),
            Err(LockError::Arity("lock.fence"))
        );
    }

    #[test]
    fn the_largest_numbers_accepted() {
        let a = argv("lock.acquire k t PX 1000000000000 BLOCK 1000000000000");
        let got = parse_acquire(&a).unwrap();
        assert_eq!((got.ttl_ms, got.block_ms), (MAX_TTL_MS, Some(MAX_BLOCK_MS)));
        let a = argv("lock.acquire k t EX 1000000000");
        assert_eq!(parse_acquire(&a).unwrap().ttl_ms, MAX_TTL_MS);
        let e = argv("lock.extend k t PX 1000000000001");
        assert_eq!(parse_extend(&e), Err(LockError::InvalidTtl));
    }

    #[test]
    fn acquire_errors() {
        let cases = [
            ("lock.acquire k", LockError::Arity("lock.acquire")),
            ("lock.acquire k t", LockError::MissingTtl),
            ("lock.acquire k t BLOCK 5", LockError::MissingTtl),
            ("lock.acquire k t EX", LockError::MissingValue("EX")),
            ("lock.acquire k t EX 1 PX 5", LockError::DoubleTtl),
            (
                "lock.acquire k t EX 1 EX 5",
                LockError::RepeatedOption("EX"),
            ),
            (
                "lock.acquire k t px 1 PX 5",
                LockError::RepeatedOption("PX"),
            ),
            ("lock.acquire k t EX 0", LockError::InvalidTtl),
            ("lock.acquire k t EX -1", LockError::InvalidTtl),
            ("lock.acquire k t EX 1.5", LockError::InvalidTtl),
            (
                "lock.acquire k t EX 9223372036854775807",
                LockError::InvalidTtl,
            ),
            (
                "lock.acquire k t PX 99999999999999999999",
                LockError::InvalidTtl,
            ),
            ("lock.acquire k t PX 10 BLOCK -1", LockError::InvalidBlock),
            ("lock.acquire k t PX 1000000000001", LockError::InvalidTtl),
            ("lock.acquire k t EX 1000000001", LockError::InvalidTtl),
            ("lock.acquire k t PX 1099511627776", LockError::InvalidTtl),
            (
                "lock.acquire k t PX 10 BLOCK 1000000000001",
                LockError::InvalidBlock,
            ),
            (
                "lock.acquire k t PX 10 BLOCK 18446744073709551",
                LockError::InvalidBlock,
            ),
            ("lock.acquire k t PX 10 BLOCK abc", LockError::InvalidBlock),
            (
                "lock.acquire k t PX 10 BLOCK 1 BLOCK 2",
                LockError::RepeatedOption("BLOCK"),
            ),
            (
                "lock.acquire k t PX 10 BLOCK",
                LockError::MissingValue("BLOCK"),
            ),
            (
                "lock.acquire k t PX 10 NX",
                LockError::UnknownOption("NX".into()),
            ),
            ("lock.acquire k  PX 10", LockError::InvalidToken),
        ];
        for (line, want) in cases {
            assert_eq!(parse_acquire(&argv(line)), Err(want), "{line}");
        }
        let long = [
            b"lock.acquire".to_vec(),
            b"k".to_vec(),
            vec![b'x'; 513],
            b"PX".to_vec(),
            b"5".to_vec(),
        ];
        assert_eq!(parse_acquire(&long), Err(LockError::InvalidToken));
    }

    #[test]
    fn release_and_extend() {
        assert_eq!(
            parse_release(&argv("lock.release k *")),
            Ok(Release { token: b"*" })
        );
        assert_eq!(
            parse_release(&argv("lock.release k")),
            Err(LockError::Arity("lock.release"))
        );
        assert_eq!(
            parse_release(&argv("lock.release k a b")),
            Err(LockError::Arity("lock.release"))
        );
        assert_eq!(
            parse_extend(&argv("lock.extend k t ex 2")),
            Ok(Extend {
                token: b"t",
                ttl_ms: 2000
            })
        );
        assert_eq!(
            parse_extend(&argv("lock.extend k t")),
            Err(LockError::MissingTtl)
        );
        assert_eq!(
            parse_extend(&argv("lock.extend k t px 5 block 1")),
            Err(LockError::UnknownOption("block".into()))
        );
        assert_eq!(parse_info(&argv("lock.info k")), Ok(()));
        assert_eq!(
            parse_info(&argv("lock.info k x")),
            Err(LockError::Arity("lock.info"))
        );
    }

    #[test]
    fn apply() {
        assert_eq!(
            parse_apply(&argv("lock._apply k t 7 1700000000000")),
            Ok(Apply {
                token: b"t",
                fence: 7,
                expire_at_ms: Some(1_700_000_000_000)
            })
        );
        assert_eq!(
            parse_apply(&argv("lock._apply k t 7")),
            Ok(Apply {
                token: b"t",
                fence: 7,
                expire_at_ms: None
            })
        );
        assert_eq!(
            parse_apply(&argv("lock._apply k t 0")),
            Err(LockError::InvalidFence)
        );
        assert!(parse_apply(&argv("lock._apply k t")).is_err());
        assert_eq!(parse_epoch(&argv("lock._epoch 3")), Ok(3));
        assert_eq!(
            parse_epoch(&argv("lock._epoch -3")),
            Err(LockError::InvalidEpoch)
        );
        assert_eq!(
            parse_epoch(&argv("lock._epoch")),
            Err(LockError::Arity("lock._epoch"))
        );
    }

    #[test]
    fn integers_are_strict() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b"-0",
            b" 1",
            b"1 ",
            b"1e3",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn decimal_formatting() {
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 1_700_000_000_000, u64::MAX] {
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }

    #[test]
    fn unknown_option_is_ascii() {
        let a = [
            b"lock.info".to_vec(),
            b"k".to_vec(),
            b"t".to_vec(),
            "x\u{100}y".as_bytes().to_vec(),
        ];
        match parse_extend(&a) {
            Err(LockError::UnknownOption(s)) => assert_eq!(s, "x??y"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_option_is_printable() {
        let a = [
            b"lock.info".to_vec(),
            b"k".to_vec(),
            b"t".to_vec(),
            b"\r\nX".to_vec(),
        ];
        match parse_extend(&a) {
            Err(LockError::UnknownOption(s)) => assert_eq!(s, "??X"),
            other => panic!("{other:?}"),
        }
    }
}
