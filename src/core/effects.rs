//! The internal effects that replicas and the AOF replay to rebuild a lock
//! exactly (`LOCK._APPLY`, `LOCK._HOLD`, `LOCK._GATE`, `LOCK._EPOCH`): their
//! grammar, in one place, for the module that writes them and the one that
//! reads them.

use std::ops::Deref;

use super::args::{given_token, parse_data, parse_fence_value, parse_limit, unknown};
use super::errors::{Grammar, LockError};
use super::holders::Kind;
use super::limits::HOLD_EFFECT_VERSION;
use super::numbers::{parse_i64, parse_non_negative};

/// Where the token of `LOCK._HOLD` stands among `argc` arguments:
/// `LOCK._HOLD key 1 END token` or
/// `LOCK._HOLD key 1 GRANT kind limit token fence unix-ms [DATA data]`.
pub fn hold_token_at(argc: usize) -> usize {
    if argc == 5 {
        4
    } else {
        6
    }
}

/// The internal effect `LOCK._APPLY key token fence [unix-ms] [DATA data]`
/// that replicas and the AOF replay to rebuild a grant exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Apply<'a> {
    pub token: &'a [u8],
    pub fence: u64,
    /// Absolute expiry in Unix milliseconds; `None` when a following
    /// `PEXPIREAT` sets it (AOF rewrite).
    pub expire_at_ms: Option<i64>,
    /// The hold's public data, if it carries some.
    pub data: Option<&'a [u8]>,
}

pub fn parse_apply<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Apply<'_>, LockError> {
    if !(4..=7).contains(&argv.len()) {
        return Err(LockError::Arity("lock._apply"));
    }
    let token = given_token(&argv[2])?;
    let fence = parse_fence_value(&argv[3])?;
    // The lease end comes first when there is one; `DATA data` last.
    let (expire_at_ms, rest) = match argv.len() {
        5 | 7 => (
            Some(parse_i64(&argv[4]).ok_or(LockError::InvalidTtl)?),
            &argv[5..],
        ),
        _ => (None, &argv[4..]),
    };
    let data = match rest {
        [] => None,
        [name, value] if name.eq_ignore_ascii_case(b"DATA") => Some(parse_data(value)?),
        [name, ..] => return Err(unknown(name, Grammar::Apply)),
    };
    Ok(Apply {
        token,
        fence,
        expire_at_ms,
        data,
    })
}

/// The internal effect on one holder of a shared lock or semaphore, replayed
/// by replicas and the AOF:
/// `LOCK._HOLD key 1 GRANT (SHARED 0 | LIMIT count) token fence unix-ms [DATA data]`
/// (a new hold, a re-grant or an extend: the hold is set to exactly this,
/// its public data included: none without `DATA`), or
/// `LOCK._HOLD key 1 END token` (released, revoked or lease ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEffect<'a> {
    Grant {
        kind: Kind,
        token: &'a [u8],
        fence: u64,
        expire_at_ms: i64,
        data: Option<&'a [u8]>,
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
    if !op.eq_ignore_ascii_case(b"GRANT") || !matches!(argv.len(), 9 | 11) {
        return Err(LockError::Arity("lock._hold"));
    }
    let kind = if argv[4].eq_ignore_ascii_case(b"SHARED") {
        Kind::Shared
    } else if argv[4].eq_ignore_ascii_case(b"LIMIT") {
        Kind::Semaphore {
            limit: parse_limit(&argv[5])?,
        }
    } else {
        return Err(unknown(&argv[4], Grammar::Hold));
    };
    let data = match &argv[9..] {
        [] => None,
        [name, value] if name.eq_ignore_ascii_case(b"DATA") => Some(parse_data(value)?),
        [name, ..] => return Err(unknown(name, Grammar::Hold)),
    };
    Ok(HoldEffect::Grant {
        kind,
        token: given_token(&argv[6])?,
        fence: parse_fence_value(&argv[7])?,
        expire_at_ms: parse_i64(&argv[8]).ok_or(LockError::InvalidTtl)?,
        data,
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

/// `LOCK._EPOCH epoch`: the fence epoch a promoted master reached.
pub fn parse_epoch<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<u64, LockError> {
    if argv.len() != 2 {
        return Err(LockError::Arity("lock._epoch"));
    }
    parse_non_negative(&argv[1]).ok_or(LockError::InvalidEpoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_effects() {
        let hold = |args: &[&str]| {
            let mut argv: Vec<&[u8]> = vec![b"LOCK._HOLD", b"k"];
            argv.extend(args.iter().map(|s| s.as_bytes()));
            let r = parse_hold(&argv).map(|e| format!("{e:?}"));
            r
        };
        let grant_with = |kind, token: &[u8], fence, expire_at_ms, data| {
            Ok(format!(
                "{:?}",
                HoldEffect::Grant {
                    kind,
                    token,
                    fence,
                    expire_at_ms,
                    data
                }
            ))
        };
        let grant = |kind, token: &[u8], fence, expire_at_ms| {
            grant_with(kind, token, fence, expire_at_ms, None)
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
            hold(&["1", "GRANT", "SHARED", "0", "t", "7", "1000", "DATA", "h:1"]),
            grant_with(Kind::Shared, b"t", 7, 1000, Some(&b"h:1"[..]))
        );
        assert_eq!(
            hold(&["1", "GRANT", "LIMIT", "3", "t", "7", "1000", "data", "x"]),
            grant_with(Kind::Semaphore { limit: 3 }, b"t", 7, 1000, Some(&b"x"[..]))
        );
        for bad in [
            &["1", "GRANT", "SHARED", "0", "t", "7", "1000", "DATA"][..],
            &[
                "1", "GRANT", "SHARED", "0", "t", "7", "1000", "DATA", "x", "y",
            ],
        ] {
            assert_eq!(hold(bad), Err(LockError::Arity("lock._hold")), "{bad:?}");
        }
        assert!(matches!(
            hold(&["1", "GRANT", "SHARED", "0", "t", "7", "1000", "NOPE", "x"]),
            Err(LockError::UnknownOption(..))
        ));
        assert_eq!(
            hold(&["1", "GRANT", "SHARED", "0", "t", "7", "1000", "DATA", ""]),
            Err(LockError::InvalidData)
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
            Err(LockError::UnknownOption(..))
        ));
    }

    fn argv(s: &str) -> Vec<Vec<u8>> {
        s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn apply() {
        assert_eq!(
            parse_apply(&argv("lock._apply k t 7 1700000000000")),
            Ok(Apply {
                token: b"t",
                fence: 7,
                expire_at_ms: Some(1_700_000_000_000),
                data: None
            })
        );
        assert_eq!(
            parse_apply(&argv("lock._apply k t 7")),
            Ok(Apply {
                token: b"t",
                fence: 7,
                expire_at_ms: None,
                data: None
            })
        );
        assert_eq!(
            parse_apply(&argv("lock._apply k t 7 1700000000000 DATA host:1")),
            Ok(Apply {
                token: b"t",
                fence: 7,
                expire_at_ms: Some(1_700_000_000_000),
                data: Some(b"host:1")
            })
        );
        assert_eq!(
            parse_apply(&argv("lock._apply k t 7 data d")),
            Ok(Apply {
                token: b"t",
                fence: 7,
                expire_at_ms: None,
                data: Some(b"d")
            })
        );
        for bad in [
            "lock._apply k t 7 1700000000000 DATA",
            "lock._apply k t 7 NOPE x",
            "lock._apply k t 7 1 NOPE x",
            "lock._apply k t 7 1 DATA x y",
        ] {
            assert!(parse_apply(&argv(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            parse_apply(&argv("lock._apply k t 0")),
            Err(LockError::InvalidFence)
        );
        assert!(parse_apply(&argv("lock._apply k t")).is_err());
        assert_eq!(parse_gate_apply(&argv("lock._gate g 9")), Ok(9));
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
    fn the_token_of_a_hold_effect() {
        assert_eq!(hold_token_at(5), 4);
        assert_eq!(hold_token_at(9), 6);
    }
}
