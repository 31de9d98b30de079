//! Unit tests of the argument parsers.

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
            data: None,
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
            data: None,
        })
    );
}

#[test]
fn data_is_kept_with_every_kind_of_hold() {
    let a = argv("LOCK.ACQUIRE k t PX 10 DATA host:1 BLOCK 5");
    let parsed = parse_acquire(&a).unwrap();
    assert_eq!(parsed.data, Some(&b"host:1"[..]));
    assert_eq!(parsed.block_ms, Some(5));
    let a = argv("LOCK.ACQUIRE k t PX 10 data x");
    assert_eq!(parse_acquire(&a).unwrap().data, Some(&b"x"[..]));
    for (line, err) in [
        (
            "LOCK.ACQUIRE k t PX 10 DATA",
            LockError::MissingValue("DATA"),
        ),
        (
            "LOCK.ACQUIRE k t PX 10 DATA a DATA b",
            LockError::RepeatedOption("DATA"),
        ),
    ] {
        assert_eq!(parse_acquire(&argv(line)), Err(err), "{line}");
    }
    let a = argv("LOCK.ACQUIRE k t PX 10 SHARED DATA a");
    let parsed = parse_acquire(&a).unwrap();
    assert_eq!((parsed.want, parsed.data), (Want::Shared, Some(&b"a"[..])));
    let a = argv("LOCK.ACQUIRE k t PX 10 DATA a LIMIT 2");
    let parsed = parse_acquire(&a).unwrap();
    assert_eq!(
        (parsed.want, parsed.data),
        (Want::Place { limit: 2 }, Some(&b"a"[..]))
    );
    let mut a = argv("LOCK.ACQUIRE k t PX 10 DATA x");
    for (len, ok) in [
        (0, false),
        (1, true),
        (MAX_DATA_LEN, true),
        (MAX_DATA_LEN + 1, false),
    ] {
        a[6] = vec![0xffu8; len];
        assert_eq!(parse_acquire(&a).is_ok(), ok, "{len} bytes");
        if !ok {
            assert_eq!(parse_acquire(&a), Err(LockError::InvalidData));
        }
    }
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
        ("lock.acquire k t EX 0", LockError::InvalidTtlSeconds),
        ("lock.acquire k t EX -1", LockError::InvalidTtlSeconds),
        ("lock.acquire k t EX 1.5", LockError::InvalidTtlSeconds),
        (
            "lock.acquire k t EX 9223372036854775807",
            LockError::InvalidTtlSeconds,
        ),
        (
            "lock.acquire k t PX 99999999999999999999",
            LockError::InvalidTtl,
        ),
        ("lock.acquire k t PX 10 BLOCK -1", LockError::InvalidBlock),
        ("lock.acquire k t PX 1000000000001", LockError::InvalidTtl),
        (
            "lock.acquire k t EX 1000000001",
            LockError::InvalidTtlSeconds,
        ),
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
            LockError::UnknownOption("NX".into(), Grammar::Acquire),
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
        Err(LockError::UnknownOption("block".into(), Grammar::Extend))
    );
    assert_eq!(parse_info(&argv("lock.info k")), Ok(()));
    assert_eq!(
        parse_info(&argv("lock.info k x")),
        Err(LockError::Arity("lock.info"))
    );
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
        Err(LockError::UnknownOption(s, _)) => assert_eq!(s, "x??y"),
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
        Err(LockError::UnknownOption(s, _)) => assert_eq!(s, "??X"),
        other => panic!("{other:?}"),
    }
}
