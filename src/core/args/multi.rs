//! The multi-key commands: `LOCK.ACQUIREALL numkeys key [key …] token
//! (EX seconds | PX milliseconds) [SHARED] [EPHEMERAL] [BLOCK timeout-ms]
//! [DATA value]` and `LOCK.RELEASEALL numkeys key [key …] token`.

use std::ops::Deref;

use super::{given_token, parse_acquire, Acquire};
use crate::core::errors::LockError;
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

/// The keys after `numkeys` (`argv[1]`): 1 to `MAX_KEYS`, each distinct,
/// with at least `after` arguments following them.
fn keys<A: Deref<Target = [u8]>>(
    argv: &[A],
    command: &'static str,
    after: usize,
) -> Result<Keys, LockError> {
    let Some(numkeys) = argv.get(1) else {
        return Err(LockError::Arity(command));
    };
    let count = parse_non_negative(numkeys)
        .filter(|n| (1..=MAX_KEYS as u64).contains(n))
        .ok_or(LockError::InvalidNumkeys)? as usize;
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

pub fn parse_acquire_all<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<AcquireAll<'_>, LockError> {
    let keys = keys(argv, "lock.acquireall", 1)?;
    // From the last key on, the arguments are laid out as LOCK.ACQUIRE's
    // from its key on: the last key stands where LOCK.ACQUIRE has its key.
    let acquire = parse_acquire(&argv[keys.first + keys.count - 2..])?;
    if let Want::Place { .. } = acquire.want {
        return Err(LockError::LimitNotMulti);
    }
    Ok(AcquireAll { keys, acquire })
}

pub fn parse_release_all<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<ReleaseAll<'_>, LockError> {
    let keys = keys(argv, "lock.releaseall", 1)?;
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
        let cases = [
            ("LOCK.ACQUIREALL", LockError::Arity("lock.acquireall")),
            ("LOCK.ACQUIREALL 0 tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL -1 a tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL x a tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL 65 a tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL 9 a b tok PX 5", LockError::InvalidNumkeys),
            ("LOCK.ACQUIREALL 2 a b", LockError::Arity("lock.acquireall")),
            ("LOCK.ACQUIREALL 2 a a tok PX 5", LockError::RepeatedKey),
            ("LOCK.ACQUIREALL 3 a b a tok PX 5", LockError::RepeatedKey),
            (
                "LOCK.ACQUIREALL 2 a b tok PX 5 LIMIT 3",
                LockError::LimitNotMulti,
            ),
            ("LOCK.ACQUIREALL 2 a b tok", LockError::MissingTtl),
            ("LOCK.RELEASEALL 2 a b", LockError::Arity("lock.releaseall")),
            (
                "LOCK.RELEASEALL 2 a b tok x",
                LockError::Arity("lock.releaseall"),
            ),
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
