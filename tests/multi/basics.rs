//! The replies of `LOCK.ACQUIREALL` and `LOCK.RELEASEALL`, all or nothing, and each key an
//! ordinary lock afterwards.

use redis::Value;

use super::*;

/// `[token, [fence, …]]` with one fence per key in the order named, under RESP2 and RESP3;
/// a generated token; fences strictly increasing; each key then an ordinary lock.
#[test]
fn every_key_is_granted_with_its_own_fence_in_the_order_named() {
    let s = Server::start();
    for mut c in [s.conn(), s.conn_resp3()] {
        let before = grant(&mut c, "x", b"t0", 60_000).1;
        let v = ok(
            &mut c,
            &acquire_all_cmd(&["c", "a", "b"], "t1", 60_000, &[]),
        );
        let Value::Array(items) = &v else {
            panic!("an array: {v:?}")
        };
        assert!(matches!(items[0], Value::BulkString(_)), "{v:?}");
        let (token, fences) = grants_of(&v).unwrap();
        assert_eq!(token, b"t1");
        assert_eq!(fences.len(), 3);
        assert!(before < fences[0] && fences[0] < fences[1] && fences[1] < fences[2]);
        for (key, fence) in ["c", "a", "b"].iter().zip(&fences) {
            let i = info_some(&mut c, key);
            assert_eq!((i.token.as_slice(), i.fence), (&b"t1"[..], *fence), "{key}");
            assert_ttl_close(i.ttl, 60_000, 5_000, key);
        }
        // Each key is an ordinary lock: extended and released one by one.
        assert_eq!(extend_px(&mut c, "a", b"t1", 120_000), 1);
        assert_ttl_close(pttl(&mut c, "a"), 120_000, 5_000, "a extended");
        assert_eq!(release(&mut c, "c", b"t1"), 1);
        assert_eq!(release_all(&mut c, &["a", "b", "c", "x"], "t1"), 2);
        assert_eq!(release(&mut c, "x", b"t0"), 1);
        assert_eq!(dbsize(&mut c), 0);
        let (generated, fences) =
            grants_of(&ok(&mut c, &acquire_all_cmd(&["p", "q"], "*", 60_000, &[]))).unwrap();
        assert!(
            generated.len() >= 16 && generated != b"*",
            "a generated token"
        );
        assert_eq!(holder(&mut c, "q"), Some(generated.clone()));
        assert_eq!(fences.len(), 2);
        let g = String::from_utf8(generated).unwrap();
        assert_eq!(release_all(&mut c, &["p", "q"], &g), 2);
    }
}

/// A busy key, a key of another type, a fence gate, a key of another kind or a token holding
/// a key in another mode: the command answers as `LOCK.ACQUIRE` would for that key, and no key
/// changes.
#[test]
fn one_key_that_cannot_be_granted_leaves_every_key_as_it_was() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "busy", b"other", 60_000);
    ok(&mut c, &rcmd!("SET", "text", "v"));
    ok(&mut c, &rcmd!("LOCK.FENCE", "gate", 7, "PING"));
    ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "sem", "s1", "PX", 60_000, "LIMIT", 2),
    );
    ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "read", "me", "PX", 60_000, "SHARED"),
    );
    let keys_before = dbsize(&mut c);
    assert_eq!(
        acquire_all(&mut c, &["free1", "busy", "free2"], "me", 60_000),
        None
    );
    let cases = [
        (
            "text",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        ("gate", "WRONGTYPE the key is a fence gate"),
        ("sem", "ERR the key is a semaphore with LIMIT 2"),
        (
            "read",
            "ERR this token already holds the key in another mode",
        ),
    ];
    for (bad, want) in cases {
        let e = err(
            &mut c,
            &acquire_all_cmd(&["free1", bad, "free2"], "me", 60_000, &[]),
        );
        assert!(e.starts_with(want), "{bad}: {e}");
    }
    // An exclusive request on a shared key is busy, as for LOCK.ACQUIRE.
    assert_eq!(acquire_all(&mut c, &["free1", "read"], "you", 60_000), None);
    assert_eq!(dbsize(&mut c), keys_before, "no key was created");
    assert!(!exists(&mut c, "free1") && !exists(&mut c, "free2"));
    assert_eq!(holder(&mut c, "busy"), Some(b"other".to_vec()));
    // Shared holds on every key, beside another shared holder.
    let v = ok(
        &mut c,
        &acquire_all_cmd(&["read", "r2"], "you", 60_000, &["SHARED"]),
    );
    assert_eq!(grants_of(&v).unwrap().1.len(), 2);
}

/// A repeated key, a bad `numkeys`, `LIMIT`: clear errors, nothing changes.
#[test]
fn argument_errors_name_what_is_wrong() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: [(redis::Cmd, &str); 5] = [
        (
            acquire_all_cmd(&["a", "b", "a"], "t", 1000, &[]),
            "ERR a key is named more than once",
        ),
        (
            rcmd!("LOCK.ACQUIREALL", 0, "t", "PX", 1000),
            "ERR invalid numkeys",
        ),
        (
            rcmd!("LOCK.ACQUIREALL", 65, "a", "t", "PX", 1000),
            "ERR invalid numkeys",
        ),
        (
            acquire_all_cmd(&["a", "b"], "t", 1000, &["LIMIT", "2"]),
            "ERR LIMIT does not apply",
        ),
        (
            rcmd!("LOCK.RELEASEALL", 2, "a", "a", "t"),
            "ERR a key is named more than once",
        ),
    ];
    for (cmd, want) in cases {
        let e = err(&mut c, &cmd);
        assert!(e.starts_with(want), "{}: {e}", describe(&cmd));
    }
    assert_eq!(dbsize(&mut c), 0);
    let keys: Vec<String> = (0..64).map(|i| format!("k{i}")).collect();
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(acquire_all(&mut c, &names, "t", 60_000).unwrap().len(), 64);
    assert_eq!(release_all(&mut c, &names, "t"), 64);
}

/// The same token again: every key re-granted with its fence kept and a new lease, as
/// `LOCK.ACQUIRE` does; a key it does not hold yet is granted beside them.
#[test]
fn the_same_token_again_keeps_its_fences() {
    let s = Server::start();
    let mut c = s.conn();
    let first = acquire_all(&mut c, &["a", "b"], "me", 10_000).unwrap();
    let again = acquire_all(&mut c, &["b", "a", "c"], "me", 60_000).unwrap();
    assert_eq!((again[0], again[1]), (first[1], first[0]));
    assert!(again[2] > first[1]);
    assert_ttl_close(pttl(&mut c, "a"), 60_000, 5_000, "a re-granted");
    // Another token is refused while any key is held.
    assert_eq!(acquire_all(&mut c, &["c", "d"], "you", 10_000), None);
    assert!(!exists(&mut c, "d"));
    // A re-grant only if every key allows it: with one key busy, the held keys keep their
    // lease.
    grant(&mut c, "x", b"you", 60_000);
    assert_eq!(acquire_all(&mut c, &["a", "x"], "me", 500_000), None);
    assert_ttl_close(pttl(&mut c, "a"), 60_000, 5_000, "a untouched");
}
