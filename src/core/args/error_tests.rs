//! Unit tests of the errors that name what a newcomer left out: the token before `EX`/`PX`, the
//! unit of a TTL, the bounds in the unit given.

use super::*;

fn argv(s: &str) -> Vec<Vec<u8>> {
    s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
}

#[test]
fn a_left_out_token_or_unit_is_named() {
    let token_after = |command, option| LockError::TokenAfterTtl { command, option };
    let cases = [
        (
            "LOCK.ACQUIRE lock:a PX 30000 BLOCK 10",
            token_after(Grammar::Acquire, "PX"),
        ),
        ("lock.acquire k ex 30", token_after(Grammar::Acquire, "EX")),
        ("lock.acquire k Px -5", token_after(Grammar::Acquire, "PX")),
        ("lock.extend k PX 5000", token_after(Grammar::Extend, "PX")),
        (
            "lock.extend k tok 5000",
            LockError::TtlWithoutUnit("5000".into()),
        ),
        (
            "lock.acquire k tok 30000 BLOCK 10",
            LockError::TtlWithoutUnit("30000".into()),
        ),
        (
            "lock.acquire k tok BLOCK 10 30000",
            LockError::TtlWithoutUnit("30000".into()),
        ),
        // With a TTL given, a stray number is just not an option.
        (
            "lock.acquire k t PX 10 5",
            LockError::UnknownOption("5".into(), Grammar::Acquire),
        ),
        (
            "lock.extend k t EX 10 5",
            LockError::UnknownOption("5".into(), Grammar::Extend),
        ),
        (
            "lock.acquire k PX EX 10 5",
            LockError::UnknownOption("5".into(), Grammar::Acquire),
        ),
        // A token that reads EX or PX is still a token; only a number after it is suspect.
        (
            "lock.acquire k PX NX",
            LockError::UnknownOption("NX".into(), Grammar::Acquire),
        ),
    ];
    for (line, want) in cases {
        let got = if line.to_ascii_lowercase().starts_with("lock.extend") {
            parse_extend(&argv(line)).map(|_| ())
        } else {
            parse_acquire(&argv(line)).map(|_| ())
        };
        assert_eq!(got, Err(want), "{line}");
    }
    assert_eq!(
        parse_acquire(&argv("lock.acquire k PX PX 10"))
            .unwrap()
            .ttl_ms,
        10
    );
    assert_eq!(
        parse_extend(&argv("lock.extend k ex ex 2")).unwrap().ttl_ms,
        2000
    );
    assert_eq!(
        LockError::TokenAfterTtl {
            command: Grammar::Acquire,
            option: "PX"
        }
        .to_string(),
        "ERR syntax error: the token goes before PX (LOCK.ACQUIRE key token PX milliseconds); 'PX' was read as the token"
    );
    assert_eq!(
        LockError::TtlWithoutUnit("5000".into()).to_string(),
        "ERR syntax error: unknown option '5000': give the TTL as EX seconds or PX milliseconds"
    );
}

#[test]
fn ttl_bounds_are_named_in_the_unit_given() {
    assert_eq!(
        parse_acquire(&argv("lock.acquire k t EX 0")),
        Err(LockError::InvalidTtlSeconds)
    );
    assert_eq!(
        LockError::InvalidTtlSeconds.to_string(),
        "ERR invalid expire time: must be a positive integer of at most 1000000000 seconds"
    );
    assert_eq!(
        parse_extend(&argv("lock.extend k t PX 0")),
        Err(LockError::InvalidTtl)
    );
    assert_eq!(
        LockError::InvalidTtl.to_string(),
        "ERR invalid expire time: must be a positive integer of at most 1000000000000 milliseconds"
    );
    assert_eq!(
        LockError::InvalidFence.to_string(),
        "ERR invalid fence: must be a positive integer of at most 9223372036854775807"
    );
}
