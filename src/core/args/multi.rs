//! The multi-key commands: `LOCK.ACQUIREALL numkeys key [key …] token
//! (EX seconds | PX milliseconds) [SHARED] [EPHEMERAL] [BLOCK timeout-ms]
//! [DATA value]` and `LOCK.RELEASEALL numkeys key [key …] token`.

use std::ops::Deref;

use super::{given_token, parse_acquire_as, Acquire};
use crate::core::errors::{Grammar, LockError};
use crate::core::grant::Want;
use crate::core::limits::MAX_KEYS;
use crate::core::numbers::parse_non_negative;

/// Where the keys are: `argv[first..first + count]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    pub first: usize,
    pub count: usize,
}

impl Keys {
    /// The key arguments' indexes in `argv`.
    pub fn range(self) -> std::ops::Range<usize> {
        self.first..self.first + self.count
    }
}

/// `LOCK.ACQUIREALL`: the keys, and the rest as `LOCK.ACQUIRE` has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireAll<'a> {
    pub keys: Keys,
    pub acquire: Acquire<'a>,
}

/// `LOCK.RELEASEALL`: the keys and the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseAll<'a> {
    pub keys: Keys,
    pub token: &'a [u8],
}

/// The keys after `numkeys` (`argv[1]`), or `count` of them: 1 to
/// `MAX_KEYS`, each distinct, with at least `after` arguments following
/// them.
fn keys<A: Deref<Target = [u8]>>(
    argv: &[A],
    command: &'static str,
    after: usize,
    count: Option<usize>,
) -> Result<Keys, LockError> {
    let Some(numkeys) = argv.get(1) else {
        return Err(LockError::Arity(command));
    };
    let count = match count {
        Some(n) => n,
        None => given_numkeys(numkeys).ok_or(LockError::InvalidNumkeys)?,
    };
    let keys = Keys { first: 2, count };
    if argv.len() < keys.first + count {
        return Err(LockError::InvalidNumkeys);
    }
    if argv.len() < keys.first + count + after {
        return Err(LockError::Arity(command));
    }
    let mut names: Vec<&[u8]> = argv[keys.range()].iter().map(|k| &**k).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(LockError::RepeatedKey);
    }
    Ok(keys)
}

fn given_numkeys(raw: &[u8]) -> Option<usize> {
    parse_non_negative(raw)
        .filter(|n| (1..=MAX_KEYS as u64).contains(n))
        .map(|n| n as usize)
}

/// The options of `LOCK.ACQUIRE`: a key named so is taken for a miscount.
const OPTIONS: [&str; 7] = ["EX", "PX", "SHARED", "LIMIT", "EPHEMERAL", "BLOCK", "DATA"];

/// A command that failed to parse with the `numkeys` it gave: if another
/// count of keys (none of them named as an option) parses, the error is
/// the count, and names it. Runs only on errors.
fn miscounted<A: Deref<Target = [u8]>>(
    argv: &[A],
    parses: impl Fn(usize) -> bool,
) -> Option<LockError> {
    let given = given_numkeys(argv.get(1)?)?;
    let fits = (1..=MAX_KEYS)
        .filter(|&n| n != given && argv.len() > 2 + n)
        .find(|&n| {
            let named_as_option = argv[2..2 + n]
                .iter()
                .any(|k| OPTIONS.iter().any(|o| k.eq_ignore_ascii_case(o.as_bytes())));
            !named_as_option && parses(n)
        })?;
    Some(LockError::NumkeysMismatch { given, fits })
}

pub fn parse_acquire_all<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<AcquireAll<'_>, LockError> {
    acquire_all(argv, None)
        .map_err(|e| miscounted(argv, |n| acquire_all(argv, Some(n)).is_ok()).unwrap_or(e))
}

fn acquire_all<A: Deref<Target = [u8]>>(
    argv: &[A],
    count: Option<usize>,
) -> Result<AcquireAll<'_>, LockError> {
    let keys = keys(argv, "lock.acquireall", 1, count)?;
    // From the last key on, the arguments are laid out as LOCK.ACQUIRE's
    // from its key on: the last key stands where LOCK.ACQUIRE has its key.
    let acquire = parse_acquire_as(&argv[keys.first + keys.count - 2..], Grammar::AcquireAll)?;
    if let Want::Place { .. } = acquire.want {
        return Err(LockError::LimitNotMulti);
    }
    Ok(AcquireAll { keys, acquire })
}

pub fn parse_release_all<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<ReleaseAll<'_>, LockError> {
    release_all(argv, None)
        .map_err(|e| miscounted(argv, |n| release_all(argv, Some(n)).is_ok()).unwrap_or(e))
}

fn release_all<A: Deref<Target = [u8]>>(
    argv: &[A],
    count: Option<usize>,
) -> Result<ReleaseAll<'_>, LockError> {
    let keys = keys(argv, "lock.releaseall", 1, count)?;
    let at = keys.first + keys.count;
    if argv.len() != at + 1 {
        return Err(LockError::Arity("lock.releaseall"));
    }
    Ok(ReleaseAll {
        keys,
        token: given_token(&argv[at])?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::token::TokenArg;

    fn argv(s: &str) -> Vec<Vec<u8>> {
        s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn acquire_all_reads_keys_then_the_acquire_options() {
        let a = argv("LOCK.ACQUIREALL 3 a b c tok PX 500 SHARED BLOCK 10 EPHEMERAL");
        let r = parse_acquire_all(&a).unwrap();
        assert_eq!(r.keys, Keys { first: 2, count: 3 });
        assert_eq!(r.keys.range(), 2..5);
        assert_eq!(r.acquire.token, TokenArg::Given(b"tok"));
        assert_eq!(r.acquire.ttl_ms, 500);
        assert_eq!(r.acquire.want, Want::Shared);
        assert_eq!(r.acquire.block_ms, Some(10));
        assert!(r.acquire.ephemeral);
        let a = argv("lock.acquireall 1 k * EX 2 DATA hello");
        let r = parse_acquire_all(&a).unwrap();
        assert_eq!(r.keys.count, 1);
        assert_eq!(r.acquire.token, TokenArg::Generate);
        assert_eq!(r.acquire.ttl_ms, 2000);
        assert_eq!(r.acquire.data, Some(&b"hello"[..]));
    }

    #[test]
    fn numkeys_and_keys_are_checked() {
        let miscount = |given, fits| LockError::NumkeysMismatch { given, fits };
        let cases = [
            ("LOCK.ACQUIREALL", LockError::Arity("lock.acquireall")),
            ("LOCK.ACQUIREALL 0 tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL -1 a tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL x a tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL 65 a tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL 9 a b tok PX 5", miscount(9, 2)),
            ("LOCK.ACQUIREALL 3 a b tok PX 5", miscount(3, 2)),
            ("LOCK.ACQUIREALL 4 a b tok PX 5 BLOCK 1", miscount(4, 2)),
            ("LOCK.ACQUIREALL 1 a b tok PX 5", miscount(1, 2)),
            ("LOCK.ACQUIREALL 2 a b c tok PX 5 SHARED", miscount(2, 3)),
            // A key named as an option is no count that fits.
            (
                "LOCK.ACQUIREALL 1 a tok PX 5 BLOCK 1 BLOCK 2",
                LockError::RepeatedOption("BLOCK"),
            ),
            ("LOCK.ACQUIREALL 2 a b", LockError::Arity("lock.acquireall")),
            ("LOCK.ACQUIREALL 2 a a tok PX 5", LockError::RepeatedKey),
            ("LOCK.ACQUIREALL 3 a b a tok PX 5", LockError::RepeatedKey),
            (
                "LOCK.ACQUIREALL 2 a b tok PX 5 LIMIT 3",
                LockError::LimitNotMulti,
            ),
            ("LOCK.ACQUIREALL 2 a b tok", LockError::MissingTtl),
            ("LOCK.RELEASEALL 2 a b", miscount(2, 1)),
            ("LOCK.RELEASEALL 2 a b tok x", miscount(2, 3)),
            ("LOCK.RELEASEALL 3 a b tok", miscount(3, 2)),
            ("LOCK.RELEASEALL 1", LockError::InvalidNumkeys),
            ("LOCK.RELEASEALL 2 b b tok", LockError::RepeatedKey),
            ("LOCK.RELEASEALL 0 tok", LockError::InvalidNumkeys),
        ];
        for (line, want) in cases {
            let a = argv(line);
            let got = if line.starts_with("LOCK.ACQUIREALL") {
                parse_acquire_all(&a).map(|_| ())
            } else {
                parse_release_all(&a).map(|_| ())
            };
            assert_eq!(got, Err(want), "{line}");
        }
    }

    #[test]
    fn sixty_four_keys_at_most() {
        let names: Vec<String> = (0..64).map(|i| format!("k{i}")).collect();
        let line = format!("LOCK.RELEASEALL 64 {} tok", names.join(" "));
        let a = argv(&line);
        let r = parse_release_all(&a).unwrap();
        assert_eq!((r.keys.count, r.token), (64, &b"tok"[..]));
        let line = format!("LOCK.ACQUIREALL 64 {} tok PX 9", names.join(" "));
        assert_eq!(parse_acquire_all(&argv(&line)).unwrap().keys.count, 64);
    }
}
