//! Command replies, options, validation and error handling of redislock (SPEC "Commands",
//! "Errors", "Fencing tokens" on a single server).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use redis::{Connection, Value};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn is_hex32(token: &[u8]) -> bool {
    token.len() == 32
        && token
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// `(key, Some((token, fence)))` for a held lock.
type LockState = (String, Option<(Vec<u8>, i64)>);

/// Snapshot of everything a bad call must leave untouched.
#[derive(Debug, PartialEq, Eq)]
struct State {
    dbsize: i64,
    keys: BTreeSet<Vec<u8>>,
    locks: Vec<LockState>,
}

fn state(con: &mut Connection, lock_keys: &[&str]) -> State {
    let keys = match ok(con, &rcmd!("KEYS", "*")) {
        Value::Array(items) => items.iter().map(as_bytes).collect(),
        other => panic!("KEYS answered {other:?}"),
    };
    State {
        dbsize: dbsize(con),
        keys,
        locks: lock_keys
            .iter()
            .map(|k| (k.to_string(), info(con, k).map(|i| (i.token, i.fence))))
            .collect(),
    }
}

// ---------------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------------

#[test]
fn acquire_reply_info_and_type() {
    let s = Server::start();
    let mut c = s.conn();

    assert_eq!(ok(&mut c, &rcmd!("LOCK.INFO", "k")), Value::Nil);

    let v = ok(&mut c, &rcmd!("LOCK.ACQUIRE", "k", "owner-1", "PX", 10_000));
    let (token, fence) = parse_grant(&v).expect("free lock must be granted");
    assert_eq!(token, b"owner-1");
    assert!(fence > 0);

    let i = info_some(&mut c, "k");
    assert_eq!(i.token, b"owner-1");
    assert_eq!(i.fence, fence);
    assert_ttl_close(i.ttl, 10_000, 1_000, "LOCK.INFO ttl");
    assert_eq!(i.waiters, 0);
    assert_ttl_close(pttl(&mut c, "k"), 10_000, 1_000, "PTTL");
    assert_eq!(type_of(&mut c, "k"), "redislock");
    assert!(exists(&mut c, "k"));
    assert_eq!(dbsize(&mut c), 1);

    // Another token: nil, nothing changes.
    assert_eq!(
        ok(&mut c, &rcmd!("LOCK.ACQUIRE", "k", "owner-2", "PX", 50_000)),
        Value::Nil
    );
    let j = info_some(&mut c, "k");
    assert_eq!((j.token.as_slice(), j.fence), (&b"owner-1"[..], fence));
    assert!(j.ttl <= i.ttl, "TTL must not be reset by a refused acquire");
    ping(&mut c);
}

#[test]
fn info_fields_are_a_map_under_resp3() {
    let s = Server::start();
    let mut c = s.conn_resp3();
    let v = ok(&mut c, &rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 5_000));
    let (_, fence) = parse_grant(&v).unwrap();
    let v = ok(&mut c, &rcmd!("LOCK.INFO", "k"));
    assert!(
        matches!(v, Value::Map(_)),
        "LOCK.INFO under RESP3 should be a map: {v:?}"
    );
    let i = parse_info(&v).unwrap();
    assert_eq!(i.token, b"t");
    assert_eq!(i.fence, fence);
    assert_ttl_close(i.ttl, 5_000, 1_000, "ttl");
    assert_eq!(i.waiters, 0);
    assert!(matches!(
        ok(&mut c, &rcmd!("LOCK.INFO", "nope")),
        Value::Nil
    ));
}

#[test]
fn ex_and_px_set_the_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    parse_grant(&ok(&mut c, &rcmd!("LOCK.ACQUIRE", "ex", "t", "EX", 20))).unwrap();
    assert_ttl_close(pttl(&mut c, "ex"), 20_000, 1_000, "EX 20");
    assert_ttl_close(info_some(&mut c, "ex").ttl, 20_000, 1_000, "EX 20 info");

    parse_grant(&ok(&mut c, &rcmd!("LOCK.ACQUIRE", "px", "t", "PX", 1_500))).unwrap();
    assert_ttl_close(pttl(&mut c, "px"), 1_500, 500, "PX 1500");
    assert_ttl_close(info_some(&mut c, "px").ttl, 1_500, 500, "PX 1500 info");

    // Smallest and large (but valid) TTLs.
    let v = ok(&mut c, &rcmd!("LOCK.ACQUIRE", "tiny", "t", "PX", 1));
    assert!(parse_grant(&v).is_some(), "PX 1 is a positive TTL");
    parse_grant(&ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "big", "t", "EX", 100_000_000),
    ))
    .unwrap();
    assert_ttl_close(pttl(&mut c, "big"), 100_000_000_000, 5_000, "EX 100000000");
    parse_grant(&ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "bigpx", "t", "PX", 100_000_000_000i64),
    ))
    .unwrap();
    assert_ttl_close(pttl(&mut c, "bigpx"), 100_000_000_000, 5_000, "PX 1e11");

    // The key's own expiry and LOCK.INFO's ttl agree.
    let t1 = info_some(&mut c, "ex").ttl;
    let t2 = pttl(&mut c, "ex");
    assert!((t1 - t2).abs() <= 100, "LOCK.INFO ttl {t1} vs PTTL {t2}");
}

#[test]
fn lock_expires_and_can_be_taken_again() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f1) = grant(&mut c, "k", b"a", 150);
    sleep_past_expiry(&mut c, "k");
    assert_eq!(info(&mut c, "k"), None);
    assert!(!exists(&mut c, "k"));
    assert_eq!(release(&mut c, "k", b"a"), 0, "release after expiry");
    assert_eq!(
        extend_px(&mut c, "k", b"a", 10_000),
        0,
        "extend after expiry"
    );
    assert!(
        !exists(&mut c, "k"),
        "extend after expiry must not recreate the lock"
    );
    let (_, f2) = grant(&mut c, "k", b"b", 10_000);
    assert!(f2 > f1, "fence after expiry {f2} should exceed {f1}");

    // Expired but not yet reclaimed (no active expiry, nobody touched the key): a new token is
    // granted at once, and the old owner's token gets a new fence, not a re-grant.
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0));
    let (_, f3) = grant(&mut c, "lazy", b"a", 100);
    let (_, f4) = grant(&mut c, "lazy2", b"a", 100);
    sleep_past_expiry(&mut c, "lazy2");
    let (_, f5) = grant(&mut c, "lazy", b"b", 10_000);
    assert!(f5 > f3.max(f4));
    let (_, f6) = grant(&mut c, "lazy2", b"a", 10_000);
    assert!(
        f6 > f5,
        "same token after expiry gets a new fence: {f6} vs {f5}"
    );
    assert_ttl_close(pttl(&mut c, "lazy2"), 10_000, 1_000, "lazy2");
    // The old owner cannot see, release or extend a lock that expired unnoticed.
    grant(&mut c, "lazy3", b"a", 100);
    grant(&mut c, "lazy4", b"a", 100);
    grant(&mut c, "lazy5", b"a", 100);
    sleep_past_expiry(&mut c, "lazy5");
    assert_eq!(info(&mut c, "lazy3"), None);
    assert_eq!(release(&mut c, "lazy4", b"a"), 0);
    assert_eq!(extend_px(&mut c, "lazy5", b"a", 10_000), 0);
    assert!(
        !exists(&mut c, "lazy5"),
        "extend must not revive an expired lock"
    );
    ok(&mut c, &rcmd!("DEBUG", "SET-ACTIVE-EXPIRE", 1));
}

#[test]
fn same_token_regrant_keeps_fence_and_resets_ttl() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"me", 2_000);
    // Longer TTL.
    let (tok, f2) = grant(&mut c, "k", b"me", 60_000);
    assert_eq!(tok, b"me");
    assert_eq!(f2, f, "re-grant to the same token returns the same fence");
    assert_ttl_close(pttl(&mut c, "k"), 60_000, 1_000, "after re-grant PX 60000");
    // Shorter TTL: reset to the new TTL, too.
    let (_, f3) = grant(&mut c, "k", b"me", 3_000);
    assert_eq!(f3, f);
    assert_ttl_close(pttl(&mut c, "k"), 3_000, 500, "after re-grant PX 3000");
    // With EX.
    let v = ok(&mut c, &rcmd!("LOCK.ACQUIRE", "k", "me", "EX", 30));
    assert_eq!(parse_grant(&v), Some((b"me".to_vec(), f)));
    assert_ttl_close(pttl(&mut c, "k"), 30_000, 1_000, "after re-grant EX 30");
    let i = info_some(&mut c, "k");
    assert_eq!((i.token.as_slice(), i.fence), (&b"me"[..], f));
    assert_eq!(dbsize(&mut c), 1);
}

#[test]
fn release_semantics() {
    let s = Server::start();
    let mut c = s.conn();
    // Never existed.
    assert_eq!(release(&mut c, "none", b"t"), 0);
    assert!(!exists(&mut c, "none"));

    let (_, f) = grant(&mut c, "k", b"owner", 30_000);
    let before_ttl = pttl(&mut c, "k");
    // Wrong token, prefixes/extensions of the right one, "*": 0 and no change.
    for wrong in [&b"other"[..], b"owne", b"owner2", b"OWNER", b"*"] {
        assert_eq!(
            release(&mut c, "k", wrong),
            0,
            "release with {:?}",
            lossy(wrong)
        );
        let i = info_some(&mut c, "k");
        assert_eq!((i.token.as_slice(), i.fence), (&b"owner"[..], f));
    }
    assert!(pttl(&mut c, "k") <= before_ttl);
    assert!(
        pttl(&mut c, "k") > 25_000,
        "wrong-token release must not touch the TTL"
    );

    assert_eq!(release(&mut c, "k", b"owner"), 1);
    assert!(!exists(&mut c, "k"));
    assert_eq!(info(&mut c, "k"), None);
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(release(&mut c, "k", b"owner"), 0, "second release");

    let (_, f2) = grant(&mut c, "k", b"next", 30_000);
    assert!(f2 > f, "fence after release {f2} should exceed {f}");
}

#[test]
fn extend_semantics() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(extend_px(&mut c, "none", b"t", 10_000), 0);
    assert!(!exists(&mut c, "none"), "extend must not create a lock");

    let (_, f) = grant(&mut c, "k", b"owner", 5_000);
    assert_eq!(extend_px(&mut c, "k", b"intruder", 60_000), 0);
    assert_ttl_close(pttl(&mut c, "k"), 5_000, 1_000, "after wrong-token extend");
    let i = info_some(&mut c, "k");
    assert_eq!((i.token.as_slice(), i.fence), (&b"owner"[..], f));

    assert_eq!(extend_px(&mut c, "k", b"owner", 60_000), 1);
    assert_ttl_close(pttl(&mut c, "k"), 60_000, 1_000, "after extend PX 60000");
    let i = info_some(&mut c, "k");
    assert_eq!(
        (i.token.as_slice(), i.fence),
        (&b"owner"[..], f),
        "extend keeps the fence"
    );
    assert_ttl_close(i.ttl, 60_000, 1_000, "LOCK.INFO ttl after extend");

    // Shorter: the remaining time is set, not added.
    assert_eq!(extend_px(&mut c, "k", b"owner", 2_000), 1);
    assert_ttl_close(pttl(&mut c, "k"), 2_000, 500, "after extend PX 2000");

    let v = ok(&mut c, &rcmd!("LOCK.EXTEND", "k", "owner", "EX", 40));
    assert_eq!(as_int(&v), 1);
    assert_ttl_close(pttl(&mut c, "k"), 40_000, 1_000, "after extend EX 40");
    assert_eq!(info_some(&mut c, "k").fence, f);

    // Extending keeps the lock alive past its original expiry.
    let (_, f2) = grant(&mut c, "short", b"o", 200);
    let first_expiry = pexpiretime(&mut c, "short");
    assert_eq!(extend_px(&mut c, "short", b"o", 5_000), 1);
    sleep_until_wall_ms(first_expiry + 1);
    let i = info_some(&mut c, "short");
    assert_eq!((i.token.as_slice(), i.fence), (&b"o"[..], f2));
    assert_eq!(acquire(&mut c, "short", b"x", 1_000), None);
}

#[test]
fn generated_tokens() {
    let s = Server::start();
    let mut c = s.conn();
    let (t1, f1) = grant(&mut c, "a", b"*", 30_000);
    assert!(
        is_hex32(&t1),
        "generated token {:?} is not 32 lowercase hex",
        lossy(&t1)
    );
    let i = info_some(&mut c, "a");
    assert_eq!(i.token, t1, "LOCK.INFO shows the concrete generated token");
    assert_eq!(i.fence, f1);

    // `*` never matches an existing holder: a new token is generated, so the lock is busy.
    assert_eq!(acquire(&mut c, "a", b"*", 30_000), None);
    assert_eq!(info_some(&mut c, "a").token, t1);
    // The literal `*` is not the owner.
    assert_eq!(release(&mut c, "a", b"*"), 0);
    assert_eq!(extend_px(&mut c, "a", b"*", 1_000), 0);

    // Only the single character `*` is special.
    for literal in [&b"**"[..], b"*a", b" *"] {
        let key = format!("lit{}", lossy(literal));
        assert_eq!(grant(&mut c, &key, literal, 30_000).0, literal);
        assert_eq!(info_some(&mut c, &key).token, literal);
    }

    // The owner can re-grant with the concrete token.
    assert_eq!(grant(&mut c, "a", &t1, 30_000), (t1.clone(), f1));
    assert_eq!(extend_px(&mut c, "a", &t1, 40_000), 1);

    let (t2, _) = grant(&mut c, "b", b"*", 30_000);
    assert!(is_hex32(&t2));
    assert_ne!(t1, t2, "two generated tokens must differ");

    assert_eq!(release(&mut c, "a", &t1), 1);
    let (t3, f3) = grant(&mut c, "a", b"*", 30_000);
    assert!(is_hex32(&t3));
    assert!(f3 > f1);
    let mut all: BTreeSet<Vec<u8>> = BTreeSet::new();
    all.extend([t1, t2, t3.clone()]);
    for n in 0..20 {
        let (t, _) = grant(&mut c, &format!("many{n}"), b"*", 30_000);
        assert!(is_hex32(&t));
        all.insert(t);
    }
    assert_eq!(all.len(), 23, "generated tokens must all differ");
    // Generated tokens with EX and options in other orders as well.
    let v = ok(&mut c, &rcmd!("LOCK.ACQUIRE", "ex", "*", "ex", 10));
    assert!(is_hex32(&parse_grant(&v).unwrap().0));
}

#[test]
fn binary_tokens_and_length_limits() {
    let s = Server::start();
    let mut c = s.conn();
    let bin: &[u8] = b"a\0b\xffc\r\n\x00";
    let (t, f) = grant(&mut c, "bin", bin, 30_000);
    assert_eq!(t, bin);
    assert_eq!(info_some(&mut c, "bin").token, bin);
    assert_eq!(
        release(&mut c, "bin", b"a"),
        0,
        "prefix before the NUL is not the token"
    );
    assert_eq!(release(&mut c, "bin", b"a\0b\xffc"), 0);
    assert_eq!(grant(&mut c, "bin", bin, 30_000), (bin.to_vec(), f));
    assert_eq!(extend_px(&mut c, "bin", bin, 20_000), 1);
    assert_eq!(release(&mut c, "bin", bin), 1);
    assert!(!exists(&mut c, "bin"));

    // 1 byte and 512 bytes are fine.
    let (t1, _) = grant(&mut c, "one", b"\xff", 30_000);
    assert_eq!(t1, b"\xff");
    let long: Vec<u8> = (0..512u32).map(|i| (i % 256) as u8).collect();
    let (t512, _) = grant(&mut c, "long", &long, 30_000);
    assert_eq!(t512, long);
    assert_eq!(info_some(&mut c, "long").token, long);
    assert_eq!(extend_px(&mut c, "long", &long, 40_000), 1);
    assert_eq!(release(&mut c, "long", &long), 1);

    // 513 bytes and empty are errors; nothing is created.
    let too_long = vec![b'x'; 513];
    let before = state(&mut c, &["one", "long", "e"]);
    for tok in [too_long.as_slice(), b""] {
        let e = err(&mut c, &rcmd!("LOCK.ACQUIRE", "e", tok, "PX", 10_000));
        assert_eq!(
            e,
            "ERR invalid token: must be 1 to 512 bytes",
            "token of {} bytes",
            tok.len()
        );
        ping(&mut c);
        assert_eq!(state(&mut c, &["one", "long", "e"]), before);
    }
}

#[test]
fn release_and_extend_reject_empty_or_oversized_tokens() {
    // SPEC "Errors": an empty or oversized token is an error reply; nothing changes.
    let s = Server::start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"owner", 30_000);
    let too_long = vec![b'x'; 513];
    let before = state(&mut c, &["k"]);
    for tok in [too_long.as_slice(), b""] {
        for cmd in [
            rcmd!("LOCK.RELEASE", "k", tok),
            rcmd!("LOCK.EXTEND", "k", tok, "PX", 10_000),
        ] {
            let e = err(&mut c, &cmd);
            assert_eq!(
                e,
                "ERR invalid token: must be 1 to 512 bytes",
                "{}",
                describe(&cmd)
            );
            ping(&mut c);
            assert_eq!(state(&mut c, &["k"]), before);
        }
    }
    assert_eq!(info_some(&mut c, "k").fence, f);
    assert!(pttl(&mut c, "k") > 25_000);
}

#[test]
fn options_are_case_insensitive_and_in_any_order() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: Vec<(&str, redis::Cmd, i64)> = vec![
        ("k1", rcmd!("LOCK.ACQUIRE", "k1", "t", "px", 5_000), 5_000),
        ("k2", rcmd!("LOCK.ACQUIRE", "k2", "t", "Px", 5_000), 5_000),
        ("k3", rcmd!("LOCK.ACQUIRE", "k3", "t", "ex", 5), 5_000),
        ("k4", rcmd!("LOCK.ACQUIRE", "k4", "t", "eX", 5), 5_000),
        (
            "k5",
            rcmd!("LOCK.ACQUIRE", "k5", "t", "BLOCK", 100, "PX", 5_000),
            5_000,
        ),
        (
            "k6",
            rcmd!("LOCK.ACQUIRE", "k6", "t", "px", 5_000, "block", 100),
            5_000,
        ),
        (
            "k7",
            rcmd!("LOCK.ACQUIRE", "k7", "t", "bLoCk", 100, "Ex", 7),
            7_000,
        ),
        (
            "k8",
            rcmd!("LOCK.ACQUIRE", "k8", "t", "BLOCK", 0, "PX", 5_000),
            5_000,
        ),
    ];
    for (key, cmd, ttl) in cases {
        let what = describe(&cmd);
        let v = ok(&mut c, &cmd);
        let (tok, fence) = parse_grant(&v).unwrap_or_else(|| panic!("{what}: not granted"));
        assert_eq!(tok, b"t", "{what}");
        assert!(fence > 0);
        assert_ttl_close(pttl(&mut c, key), ttl, 1_000, &what);
    }

    // LOCK.EXTEND options too.
    for (key, cmd, ttl) in [
        ("k1", rcmd!("LOCK.EXTEND", "k1", "t", "px", 20_000), 20_000),
        ("k2", rcmd!("LOCK.EXTEND", "k2", "t", "pX", 21_000), 21_000),
        ("k3", rcmd!("LOCK.EXTEND", "k3", "t", "ex", 22), 22_000),
        ("k4", rcmd!("LOCK.EXTEND", "k4", "t", "Ex", 23), 23_000),
    ] {
        let what = describe(&cmd);
        assert_eq!(as_int(&ok(&mut c, &cmd)), 1, "{what}");
        assert_ttl_close(pttl(&mut c, key), ttl, 1_000, &what);
    }

    // Lower-case command names work as for any Redis command.
    let v = ok(&mut c, &rcmd!("lock.acquire", "k9", "t", "px", 5_000));
    assert!(parse_grant(&v).is_some());
    assert_eq!(as_int(&ok(&mut c, &rcmd!("lock.release", "k9", "t"))), 1);
}

#[test]
fn block_on_a_free_lock_grants_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    let start = std::time::Instant::now();
    let v = ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 10_000, "BLOCK", 10_000),
    );
    let (tok, f) = parse_grant(&v).expect("granted");
    assert_eq!(tok, b"t");
    assert!(
        start.elapsed() < Duration::from_millis(5_000),
        "should not wait on a free lock"
    );
    assert_eq!(stat(&s, "waits"), 0, "nothing waited");
    // Same token with BLOCK: a re-grant, same fence.
    let v = ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "k", "t", "BLOCK", 100, "PX", 10_000),
    );
    assert_eq!(parse_grant(&v), Some((b"t".to_vec(), f)));
    assert_eq!(info_some(&mut c, "k").waiters, 0);
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

fn bad_calls() -> Vec<redis::Cmd> {
    let too_long = vec![b'y'; 513];
    vec![
        // Arity.
        rcmd!("LOCK.ACQUIRE"),
        rcmd!("LOCK.ACQUIRE", "fresh"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "BLOCK"),
        rcmd!("LOCK.ACQUIRE", "k", "t", "PX"),
        rcmd!("LOCK.RELEASE"),
        rcmd!("LOCK.RELEASE", "k"),
        rcmd!("LOCK.RELEASE", "k", "t", "extra"),
        rcmd!("LOCK.EXTEND"),
        rcmd!("LOCK.EXTEND", "k"),
        rcmd!("LOCK.EXTEND", "k", "t"),
        rcmd!("LOCK.EXTEND", "k", "t", "PX"),
        rcmd!("LOCK.EXTEND", "k", "t", "EX"),
        rcmd!("LOCK.INFO"),
        rcmd!("LOCK.INFO", "k", "extra"),
        // Unknown options.
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "FOO"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "FOO", 1),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "NX"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "KEEPTTL"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PXAT", 99999999999999i64),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "1000"),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", 1000, "FOO"),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", 1000, "BLOCK", 100),
        rcmd!("LOCK.EXTEND", "k", "t", "FOO", 1000),
        // Repeated options.
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "PX", 2000),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX", 1, "EX", 2),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "px", 1000, "PX", 1000),
        rcmd!(
            "LOCK.ACQUIRE",
            "fresh",
            "t",
            "PX",
            1000,
            "BLOCK",
            1,
            "BLOCK",
            2
        ),
        rcmd!(
            "LOCK.ACQUIRE",
            "fresh",
            "t",
            "PX",
            1000,
            "BLOCK",
            1,
            "block",
            1
        ),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", 1000, "PX", 2000),
        rcmd!("LOCK.EXTEND", "k", "t", "EX", 100, "EX", 100),
        // Missing or doubled EX/PX.
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "BLOCK", 100),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX", 1, "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "EX", 1),
        rcmd!(
            "LOCK.ACQUIRE",
            "fresh",
            "t",
            "PX",
            1000,
            "BLOCK",
            10,
            "EX",
            1
        ),
        rcmd!("LOCK.EXTEND", "k", "t", "EX", 100, "PX", 100000),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", 100000, "EX", 100),
        // TTL not a positive integer, or overflowing.
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 0),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", -1),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", -1000),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", "1.5"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", "100.0"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", "abc"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", ""),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", "1000ms"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", "99999999999999999999"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", "9223372036854775807"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX", 0),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX", -5),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX", "1.5"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX", "abc"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX", "99999999999999999999"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "EX", "9223372036854775807"),
        rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 0),
        rcmd!("LOCK.ACQUIRE", "k", "t", "EX", "9223372036854775807"),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", 0),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", -1),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", "1.5"),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", "abc"),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", "99999999999999999999"),
        rcmd!("LOCK.EXTEND", "k", "t", "PX", "9223372036854775807"),
        rcmd!("LOCK.EXTEND", "k", "t", "EX", 0),
        rcmd!("LOCK.EXTEND", "k", "t", "EX", -5),
        rcmd!("LOCK.EXTEND", "k", "t", "EX", "9223372036854775807"),
        // BLOCK not a non-negative integer.
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "BLOCK", -1),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "BLOCK", "abc"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "BLOCK", "1.5"),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000, "BLOCK", ""),
        rcmd!("LOCK.ACQUIRE", "fresh", "t", "BLOCK", -1, "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 1000, "BLOCK", -1),
        // Empty or oversized token.
        rcmd!("LOCK.ACQUIRE", "fresh", "", "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "fresh", too_long.as_slice(), "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "k", "", "PX", 1000),
    ]
}

#[test]
fn malformed_calls_are_errors_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    // "k" is held by token "t" (so a well-formed call with "t" would succeed and change the TTL);
    // "other" is held by someone else; "fresh" does not exist.
    let (_, fk) = grant(&mut c, "k", b"t", 100_000);
    let (_, fo) = grant(&mut c, "other", b"o", 100_000);
    let keys = ["k", "other", "fresh"];
    let before = state(&mut c, &keys);
    let mut failures = Vec::new();
    for cmd in bad_calls() {
        let what = describe(&cmd);
        match run(&mut c, &cmd) {
            Ok(v) => failures.push(format!("{what}: expected ERR, got {v:?}")),
            Err(e) => {
                let text = err_text(&e);
                if e.is_io_error() || e.is_connection_dropped() {
                    panic!("{what} broke the connection: {e}\n{}", s.log_tail(40));
                }
                if !text.starts_with("ERR") {
                    failures.push(format!("{what}: expected ERR…, got {text:?}"));
                }
            }
        }
        ping(&mut c);
        let now = state(&mut c, &keys);
        if now != before {
            failures.push(format!("{what}: state changed from {before:?} to {now:?}"));
            // Put things back so later calls are judged on their own.
            ok(&mut c, &rcmd!("DEL", "fresh"));
        }
        let ttl = pttl(&mut c, "k");
        if !(80_000..=100_000).contains(&ttl) {
            failures.push(format!("{what}: TTL of k changed to {ttl}"));
            extend_px(&mut c, "k", b"t", 100_000);
        }
    }
    assert_eq!(info_some(&mut c, "k").fence, fk);
    assert_eq!(info_some(&mut c, "other").fence, fo);
    assert!(
        failures.is_empty(),
        "{} bad call(s) misbehaved:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_error_reply_has_its_documented_text() {
    // Every error a client can provoke, with its exact text (README "Errors"); nothing changes.
    let s = Server::start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("SET", "str", "v"));
    let (_, f) = grant(&mut c, "k", b"t", 100_000);
    const INVALID_TTL: &str =
        "ERR invalid expire time: must be a positive integer of at most 1000000000000 milliseconds";
    const INVALID_TTL_SECONDS: &str =
        "ERR invalid expire time: must be a positive integer of at most 1000000000 seconds";
    const MISSING_TTL: &str = "ERR a lock needs an expiry: give EX seconds or PX milliseconds";
    const INVALID_TOKEN: &str = "ERR invalid token: must be 1 to 512 bytes";
    const INTERNAL: &str = "ERR this command is internal to redislock replication and persistence";
    let arity = |cmd: &str| format!("ERR wrong number of arguments for '{cmd}' command");
    let table: Vec<(redis::Cmd, String)> = vec![
        (rcmd!("LOCK.ACQUIRE"), arity("lock.acquire")),
        (rcmd!("LOCK.ACQUIRE", "k"), arity("lock.acquire")),
        (rcmd!("LOCK.RELEASE", "k"), arity("lock.release")),
        (rcmd!("LOCK.RELEASE", "k", "t", "x"), arity("lock.release")),
        (rcmd!("LOCK.EXTEND", "k"), arity("lock.extend")),
        (rcmd!("LOCK.INFO"), arity("lock.info")),
        (rcmd!("LOCK.INFO", "k", "x"), arity("lock.info")),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 10, "FOO", 1),
            "ERR syntax error: unknown option 'FOO' (LOCK.ACQUIRE takes EX, PX, SHARED, LIMIT, EPHEMERAL, BLOCK and DATA)".into(),
        ),
        (
            rcmd!("LOCK.EXTEND", "k", "t", "PX", 10, "BLOCK", 1),
            "ERR syntax error: unknown option 'BLOCK' (LOCK.EXTEND takes EX or PX)".into(),
        ),
        // What a newcomer leaves out is named: the token before EX/PX, the TTL's unit.
        (
            rcmd!("LOCK.ACQUIRE", "lock:a", "PX", 30000, "BLOCK", 10),
            "ERR syntax error: the token goes before PX (LOCK.ACQUIRE key token PX milliseconds); 'PX' was read as the token".into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "lock:a", "ex", 30),
            "ERR syntax error: the token goes before EX (LOCK.ACQUIRE key token EX seconds); 'EX' was read as the token".into(),
        ),
        (
            rcmd!("LOCK.EXTEND", "k", "PX", 5000),
            "ERR syntax error: the token goes before PX (LOCK.EXTEND key token PX milliseconds); 'PX' was read as the token".into(),
        ),
        (
            rcmd!("LOCK.EXTEND", "k", "t", 5000),
            "ERR syntax error: unknown option '5000': give the TTL as EX seconds or PX milliseconds".into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", 5000, "BLOCK", 10),
            "ERR syntax error: unknown option '5000': give the TTL as EX seconds or PX milliseconds".into(),
        ),
        (rcmd!("LOCK.ACQUIRE", "k", "t"), MISSING_TTL.into()),
        (
            rcmd!("LOCK.EXTEND", "k", "t", "FOO", 10),
            "ERR syntax error: unknown option 'FOO' (LOCK.EXTEND takes EX or PX)".into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 10, "BLOCK", 1, "block", 2),
            "ERR syntax error: option BLOCK given more than once".into(),
        ),
        (rcmd!("LOCK.ACQUIRE", "k", "t", "BLOCK", 10), MISSING_TTL.into()),
        (rcmd!("LOCK.EXTEND", "k", "t"), MISSING_TTL.into()),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "EX", 1, "PX", 10),
            "ERR syntax error: EX and PX are mutually exclusive".into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "PX"),
            "ERR syntax error: option PX needs a value".into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "BLOCK", 10, "PX"),
            "ERR syntax error: option PX needs a value".into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 10, "BLOCK"),
            "ERR syntax error: option BLOCK needs a value".into(),
        ),
        (rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 0), INVALID_TTL.into()),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "EX", -1),
            INVALID_TTL_SECONDS.into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "EX", 0),
            INVALID_TTL_SECONDS.into(),
        ),
        (
            rcmd!("LOCK.EXTEND", "k", "t", "EX", 1_000_000_001),
            INVALID_TTL_SECONDS.into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "PX", "1.5"),
            INVALID_TTL.into(),
        ),
        (
            rcmd!("LOCK.EXTEND", "k", "t", "PX", "ten"),
            INVALID_TTL.into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "EX", i64::MAX),
            INVALID_TTL_SECONDS.into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 10, "BLOCK", -1),
            "ERR invalid BLOCK timeout: must be 0 (no limit) or a positive integer of at most 1000000000000 milliseconds".into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 10, "BLOCK", "soon"),
            "ERR invalid BLOCK timeout: must be 0 (no limit) or a positive integer of at most 1000000000000 milliseconds".into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", "", "PX", 10),
            INVALID_TOKEN.into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "k", vec![b'x'; 513], "PX", 10),
            INVALID_TOKEN.into(),
        ),
        (rcmd!("LOCK.RELEASE", "k", ""), INVALID_TOKEN.into()),
        (
            rcmd!("LOCK.EXTEND", "k", "", "PX", 10),
            INVALID_TOKEN.into(),
        ),
        (
            rcmd!("LOCK.ACQUIRE", "str", "t", "PX", 10),
            WRONGTYPE.into(),
        ),
        (rcmd!("LOCK.RELEASE", "str", "t"), WRONGTYPE.into()),
        (rcmd!("LOCK.EXTEND", "str", "t", "PX", 10), WRONGTYPE.into()),
        (rcmd!("LOCK.INFO", "str"), WRONGTYPE.into()),
        (
            rcmd!("LOCK._APPLY", "k", "tok", 5, now_ms() + 60_000),
            INTERNAL.into(),
        ),
        (rcmd!("LOCK._EPOCH", 7), INTERNAL.into()),
    ];
    let mut wrong = Vec::new();
    for (cmd, want) in &table {
        let got = err(&mut c, cmd);
        if &got != want {
            wrong.push(format!("{}: {got:?}, expected {want:?}", describe(cmd)));
        }
    }
    // The TTL limit names its value.
    ok(&mut c, &rcmd!("CONFIG", "SET", "redislock.max-ttl", 60_000));
    for cmd in [
        rcmd!("LOCK.ACQUIRE", "k2", "t", "PX", 60_001),
        rcmd!("LOCK.EXTEND", "k", "t", "EX", 61),
    ] {
        let got = err(&mut c, &cmd);
        let want = "ERR TTL exceeds redislock.max-ttl (60000 ms)";
        if got != want {
            wrong.push(format!("{}: {got:?}, expected {want:?}", describe(&cmd)));
        }
    }
    assert!(wrong.is_empty(), "wrong error texts:\n{}", wrong.join("\n"));
    // Nothing changed.
    let i = info_some(&mut c, "k");
    assert_eq!((i.token.as_slice(), i.fence), (&b"t"[..], f));
    assert!(i.ttl > 90_000, "TTL {}", i.ttl);
    assert!(!exists(&mut c, "k2"));
    assert_eq!(as_bytes(&ok(&mut c, &rcmd!("GET", "str"))), b"v");
    assert_eq!(dbsize(&mut c), 2);
}

#[test]
fn internal_apply_command_is_refused_for_clients() {
    let s = Server::start();
    let mut c = s.conn();
    let far = now_ms() + 60_000;

    // On a missing key.
    const INTERNAL: &str = "ERR this command is internal to redislock replication and persistence";
    let e = err(&mut c, &rcmd!("LOCK._APPLY", "k", "tok", 5, far));
    assert_eq!(e, INTERNAL, "LOCK._APPLY from a client");
    ping(&mut c);
    assert!(!exists(&mut c, "k"));
    assert_eq!(dbsize(&mut c), 0);

    // On an existing lock, trying to steal it with a huge fence.
    let (_, f) = grant(&mut c, "held", b"owner", 30_000);
    let e = err(
        &mut c,
        &rcmd!("LOCK._APPLY", "held", "thief", i64::MAX / 2, far),
    );
    assert_eq!(e, INTERNAL);
    let i = info_some(&mut c, "held");
    assert_eq!((i.token.as_slice(), i.fence), (&b"owner"[..], f));
    assert!(pttl(&mut c, "held") <= 30_000);

    // Not from a script either.
    let r = run(
        &mut c,
        &rcmd!(
            "EVAL",
            "return redis.call('LOCK._APPLY', KEYS[1], ARGV[1], ARGV[2], ARGV[3])",
            1,
            "k",
            "tok",
            7,
            far
        ),
    );
    let e = err_text(&r.expect_err("LOCK._APPLY from a script must fail"));
    assert!(e.starts_with(INTERNAL), "LOCK._APPLY from a script: {e}");
    assert!(!exists(&mut c, "k"));

    // Not inside MULTI/EXEC.
    ok(&mut c, &rcmd!("MULTI"));
    let queued = run(&mut c, &rcmd!("LOCK._APPLY", "k", "tok", 9, far));
    let exec = run(&mut c, &rcmd!("EXEC"));
    match (&queued, &exec) {
        // Refused when queued, or the EXEC reply carries the error (the redis crate surfaces
        // an error inside the EXEC array as Err).
        (Err(_), _) | (Ok(_), Err(_)) => {}
        (Ok(_), Ok(Value::Array(items))) => assert!(
            matches!(items.first(), Some(Value::ServerError(_))),
            "LOCK._APPLY in MULTI answered {exec:?}"
        ),
        _ => panic!("LOCK._APPLY in MULTI: queued {queued:?}, EXEC {exec:?}"),
    }
    assert!(!exists(&mut c, "k"));

    // The lock still behaves normally.
    let (_, f2) = grant(&mut c, "k", b"x", 10_000);
    assert!(f2 > f);
    assert_eq!(acquire(&mut c, "held", b"thief", 1000), None);
}

#[test]
fn scan_by_type_lists_the_locks() {
    let s = Server::start();
    let mut c = s.conn();
    let mut want = BTreeSet::new();
    for i in 0..25 {
        let k = format!("lock:{i}");
        grant(&mut c, &k, b"t", 60_000);
        want.insert(k.into_bytes());
    }
    ok(&mut c, &rcmd!("SET", "plain", "x"));
    ok(&mut c, &rcmd!("SADD", "set", "x"));
    let mut got = BTreeSet::new();
    let mut cursor = 0i64;
    loop {
        let v = ok(
            &mut c,
            &rcmd!("SCAN", cursor, "TYPE", "redislock", "COUNT", 7),
        );
        let Value::Array(parts) = v else {
            panic!("SCAN answered {v:?}")
        };
        cursor = as_int(&parts[0]);
        let Value::Array(keys) = &parts[1] else {
            panic!("SCAN keys {:?}", parts[1])
        };
        got.extend(keys.iter().map(as_bytes));
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(got, want);
    assert_eq!(type_of(&mut c, "lock:3"), "redislock");
    assert_eq!(type_of(&mut c, "plain"), "string");
}

#[test]
fn fences_strictly_increase_across_release_expiry_del_and_flush() {
    let s = Server::start();
    let mut c = s.conn();
    let mut last = 0i64;
    let mut step = |c: &mut Connection, what: &str, tok: &[u8], px: i64| -> i64 {
        let (_, f) = grant(c, "k", tok, px);
        assert!(f > last, "after {what}: fence {f} should exceed {last}");
        last = f;
        f
    };
    step(&mut c, "first grant", b"a", 60_000);
    assert_eq!(release(&mut c, "k", b"a"), 1);
    step(&mut c, "release", b"b", 150);
    sleep_past_expiry(&mut c, "k");
    step(&mut c, "expiry", b"c", 60_000);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("DEL", "k"))), 1);
    step(&mut c, "DEL", b"d", 60_000);
    assert_eq!(as_int(&ok(&mut c, &rcmd!("UNLINK", "k"))), 1);
    step(&mut c, "UNLINK", b"e", 60_000);
    // Fences from other keys must not matter, but must not confuse either.
    let (_, other) = grant(&mut c, "other", b"x", 60_000);
    ok(&mut c, &rcmd!("FLUSHALL"));
    assert_eq!(dbsize(&mut c), 0);
    step(&mut c, "FLUSHALL", b"f", 60_000);
    let (_, other2) = grant(&mut c, "other", b"x", 60_000);
    assert!(
        other2 > other,
        "other key after FLUSHALL: {other2} vs {other}"
    );
    ok(&mut c, &rcmd!("FLUSHALL", "ASYNC"));
    step(&mut c, "FLUSHALL ASYNC", b"g", 60_000);
    ok(&mut c, &rcmd!("FLUSHDB"));
    step(&mut c, "FLUSHDB", b"h", 60_000);
    // The same token after release gets a new, larger fence (not a re-grant).
    assert_eq!(release(&mut c, "k", b"h"), 1);
    step(&mut c, "release then same token", b"h", 60_000);
    assert_eq!(release(&mut c, "k", b"h"), 1);
    // Many cycles.
    for i in 0..50 {
        let t = format!("t{i}");
        step(&mut c, "cycle", t.as_bytes(), 60_000);
        assert_eq!(release(&mut c, "k", t.as_bytes()), 1);
    }
}

#[test]
fn release_works_when_maxmemory_is_reached() {
    let s = Server::builder()
        .set("maxmemory-policy", "noeviction")
        .start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"owner", 60_000);
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", 1));
    let e = err(&mut c, &rcmd!("SET", "x", "y"));
    assert!(e.starts_with("OOM"), "memory should be full now: {e}");
    let r = run(&mut c, &rcmd!("LOCK.RELEASE", "k", "owner"));
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", 0));
    assert_eq!(r.map(|v| as_int(&v)).map_err(|e| err_text(&e)), Ok(1));
    assert!(!exists(&mut c, "k"));
    let (_, f2) = grant(&mut c, "k", b"owner", 60_000);
    assert!(f2 > f);
}

// ---------------------------------------------------------------------------------------------
// Key declaration: COMMAND INFO / GETKEYS / ACL key patterns
// ---------------------------------------------------------------------------------------------

#[test]
fn commands_declare_their_key() {
    let s = Server::start();
    let mut c = s.conn();
    for name in ["lock.acquire", "lock.release", "lock.extend", "lock.info"] {
        let v = ok(&mut c, &rcmd!("COMMAND", "INFO", name));
        let Value::Array(entries) = &v else {
            panic!("COMMAND INFO {name}: {v:?}")
        };
        let Some(Value::Array(doc)) = entries.first() else {
            panic!("COMMAND INFO {name}: command unknown: {v:?}")
        };
        assert_eq!(as_bytes(&doc[0]).to_ascii_lowercase(), name.as_bytes());
        assert_eq!(
            (as_int(&doc[3]), as_int(&doc[4]), as_int(&doc[5])),
            (1, 1, 1),
            "{name}: first/last/step key positions: {doc:?}"
        );
    }
    let getkeys = |c: &mut Connection, cmd: redis::Cmd| -> Vec<Vec<u8>> {
        match ok(c, &cmd) {
            Value::Array(keys) => keys.iter().map(as_bytes).collect(),
            other => panic!("{}: {other:?}", describe(&cmd)),
        }
    };
    assert_eq!(
        getkeys(
            &mut c,
            rcmd!(
                "COMMAND",
                "GETKEYS",
                "LOCK.ACQUIRE",
                "mykey",
                "tok",
                "PX",
                1000
            )
        ),
        vec![b"mykey".to_vec()]
    );
    assert_eq!(
        getkeys(
            &mut c,
            rcmd!(
                "COMMAND",
                "GETKEYS",
                "LOCK.ACQUIRE",
                "mykey",
                "tok",
                "BLOCK",
                5,
                "EX",
                1
            )
        ),
        vec![b"mykey".to_vec()]
    );
    assert_eq!(
        getkeys(
            &mut c,
            rcmd!("COMMAND", "GETKEYS", "LOCK.RELEASE", "mykey", "tok")
        ),
        vec![b"mykey".to_vec()]
    );
    assert_eq!(
        getkeys(
            &mut c,
            rcmd!(
                "COMMAND",
                "GETKEYS",
                "LOCK.EXTEND",
                "mykey",
                "tok",
                "PX",
                10
            )
        ),
        vec![b"mykey".to_vec()]
    );
    assert_eq!(
        getkeys(&mut c, rcmd!("COMMAND", "GETKEYS", "LOCK.INFO", "mykey")),
        vec![b"mykey".to_vec()]
    );
}

#[test]
fn acl_key_patterns_apply() {
    let s = Server::start();
    let mut admin = s.conn();
    ok(
        &mut admin,
        &rcmd!("ACL", "SETUSER", "alice", "on", ">pw", "~app:*", "+@all"),
    );
    grant(&mut admin, "secret", b"admin", 60_000);
    let mut alice = s.conn_as("alice", "pw");

    // Allowed key pattern: everything works.
    let (_, f) = grant(&mut alice, "app:1", b"a", 60_000);
    assert_eq!(info_some(&mut alice, "app:1").fence, f);
    assert_eq!(extend_px(&mut alice, "app:1", b"a", 30_000), 1);
    assert_eq!(release(&mut alice, "app:1", b"a"), 1);

    // Other keys: NOPERM for each command, nothing changes.
    for cmd in [
        rcmd!("LOCK.ACQUIRE", "other", "a", "PX", 1000),
        rcmd!("LOCK.ACQUIRE", "secret", "admin", "PX", 1000),
        rcmd!("LOCK.RELEASE", "secret", "admin"),
        rcmd!("LOCK.EXTEND", "secret", "admin", "PX", 1000),
        rcmd!("LOCK.INFO", "secret"),
    ] {
        let e = err(&mut alice, &cmd);
        assert!(e.starts_with("NOPERM"), "{}: {e}", describe(&cmd));
    }
    assert!(!exists(&mut admin, "other"));
    let i = info_some(&mut admin, "secret");
    assert_eq!(i.token, b"admin");
    assert!(i.ttl > 50_000);
}

#[test]
fn cluster_routing_uses_the_declared_key() {
    // A one-node cluster serving only the slot of "{mine}": commands on a key of another slot
    // are redirected/refused by Redis, which only works if the key is declared.
    let s = Server::builder()
        .set("cluster-enabled", "yes")
        .set("cluster-require-full-coverage", "no")
        .start();
    let mut c = s.conn();
    let slot = as_int(&ok(&mut c, &rcmd!("CLUSTER", "KEYSLOT", "{mine}")));
    assert_eq!(ok(&mut c, &rcmd!("CLUSTER", "ADDSLOTS", slot)), Value::Okay);
    wait_until("cluster_state:ok", Duration::from_secs(10), || {
        let info = String::from_utf8(as_bytes(&ok(&mut c, &rcmd!("CLUSTER", "INFO")))).unwrap();
        field(&info, "cluster_state").as_deref() == Some("ok")
    });
    // Served slot: works.
    let (t, _) = grant(&mut c, "{mine}:lock", b"*", 10_000);
    assert_eq!(info_some(&mut c, "{mine}:lock").token, t);
    assert_eq!(extend_px(&mut c, "{mine}:lock", &t, 20_000), 1);
    assert_eq!(release(&mut c, "{mine}:lock", &t), 1);
    // Unserved slot: refused by Redis' routing, nothing created. The token carries the served
    // slot's hash tag, so these calls would pass if the key were declared at the wrong position.
    let other = "{theirs}:lock";
    assert_ne!(
        as_int(&ok(&mut c, &rcmd!("CLUSTER", "KEYSLOT", other))),
        slot
    );
    for cmd in [
        rcmd!("LOCK.ACQUIRE", other, "{mine}", "PX", 1000),
        rcmd!("LOCK.RELEASE", other, "{mine}"),
        rcmd!("LOCK.EXTEND", other, "{mine}", "PX", 1000),
        rcmd!("LOCK.INFO", other),
    ] {
        let e = err(&mut c, &cmd);
        assert!(
            e.starts_with("CLUSTERDOWN") || e.starts_with("MOVED"),
            "{}: {e}",
            describe(&cmd)
        );
    }
    assert_eq!(dbsize(&mut c), 0);
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

#[test]
fn module_loads_with_module_load() {
    let path = module_path();
    let s = Server::builder()
        .without_module()
        .set("enable-module-command", "yes")
        .start();
    let mut c = s.conn();
    let e = err(&mut c, &rcmd!("LOCK.INFO", "k"));
    assert!(
        e.starts_with("ERR unknown command 'LOCK.INFO'"),
        "not loaded yet: {e}"
    );
    let r = ok(&mut c, &rcmd!("MODULE", "LOAD", path.to_str().unwrap()));
    assert_eq!(r, Value::Okay);
    let (t, f) = grant(&mut c, "k", b"*", 10_000);
    assert_eq!(t.len(), 32);
    assert!(f > 0);
    assert_eq!(type_of(&mut c, "k"), "redislock");
    assert_eq!(release(&mut c, "k", &t), 1);
}

#[test]
fn module_loads_from_config_file() {
    // `loadmodule <path>` in redis.conf (the harness otherwise uses --loadmodule).
    let s = Server::builder().module_in_config_file().start();
    let mut c = s.conn();
    let (_, f) = grant(&mut c, "k", b"t", 10_000);
    assert!(f > 0);
    assert_eq!(type_of(&mut c, "k"), "redislock");
}

#[test]
fn the_example_config_loads_the_module() {
    let s = Server::builder().example_config().start();
    let mut c = s.conn();
    let (token, fence) = grant(&mut c, "demo", b"*", 5_000);
    assert_eq!(token.len(), 32);
    assert_eq!(info_some(&mut c, "demo").fence, fence);
}

#[test]
fn odd_bytes_in_an_unknown_option_and_late_ttl_overflow_are_plain_errors() {
    let s = Server::start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("RPUSH", "list", "a"));
    grant(&mut c, "busy", b"holder", 60_000);
    // The option is echoed in the error: any bytes must give a clean one-line error.
    for opt in ["\u{100}", "x\u{10a}y", "\u{4e00}"] {
        let e = err(&mut c, &rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 100, opt));
        assert!(e.starts_with("ERR syntax error: unknown option"), "{e}");
        assert!(e.is_ascii(), "{e:?}");
        ping(&mut c);
    }
    // A TTL that fits in milliseconds but overflows once added to the clock is an argument error
    // whoever holds the lock and whatever the key holds.
    for cmd in [
        rcmd!("LOCK.ACQUIRE", "free", "t", "PX", i64::MAX),
        rcmd!("LOCK.ACQUIRE", "busy", "other", "PX", i64::MAX, "BLOCK", 0),
        rcmd!("LOCK.ACQUIRE", "list", "t", "PX", i64::MAX),
        rcmd!("LOCK.EXTEND", "busy", "other", "PX", i64::MAX),
    ] {
        let e = err(&mut c, &cmd);
        assert_eq!(
            e,
            "ERR invalid expire time: must be a positive integer of at most 1000000000000 milliseconds",
            "{}",
            describe(&cmd)
        );
    }
    assert!(!exists(&mut c, "free"));
    assert_eq!(info_some(&mut c, "busy").waiters, 0);
}
