//! The encoder checked against real `DUMP`s, and forged fences.

use super::*;

#[test]
fn crc64_is_redis_crc64() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

#[test]
fn the_encoder_writes_what_dump_writes() {
    let mut b = Bench::start();
    // Exclusive locks. A record of at most 20 bytes is written as it is; a longer one that LZF
    // makes shorter (20 bytes of one value) is compressed, and compared decompressed.
    for token in [&b"t"[..], b"tok-abcdef", &[0xa5; 20][..], b"\x00\xff\r\n*"] {
        let dump = b.dump_of("enc", token);
        let id = module_id(&dump.body);
        assert_eq!(id & 1023, ENCODING_VERSION);
        let (record, compressed) = packed::record_of(&dump.body).expect("one record string");
        assert_eq!(compressed, record.len() > 20, "token {token:?}: {record:?}");
        let fence = read_varint(&record, &mut 1).expect("a fence");
        let fields = Fields::lock(id, fence, token);
        assert_eq!(packed::raw(&dump.body), fields.body(), "token {token:?}");
        if !compressed {
            assert_eq!(dump.body, fields.body(), "token {token:?}");
        }
    }
    // An exclusive lock with data, and a gate.
    let (_, fence) = parse_grant(&ok(
        &mut b.c,
        &rcmd!(
            "LOCK.ACQUIRE",
            "enc",
            "tok",
            "PX",
            3_600_000,
            "DATA",
            "host:1"
        ),
    ))
    .expect("granted");
    let dump = Dump::parse(&as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "enc"))));
    let id = module_id(&dump.body);
    let fields = Fields::with_data(id, fence as u64, b"tok", b"host:1");
    assert_eq!(dump.body, fields.body(), "with data");
    ok(
        &mut b.c,
        &rcmd!("LOCK.FENCE", "enc-gate", 7, "SET", "enc-v", "1"),
    );
    let dump = Dump::parse(&as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "enc-gate"))));
    let gate = Fields {
        mode: MODE_GATE,
        ..Fields::lock(id, 7, b"")
    };
    assert_eq!(dump.body, gate.body(), "gate");
    ok(&mut b.c, &rcmd!("DEL", "enc", "enc-gate"));
    // Keys with holders: the reference decoder reads back each grant, and the encoder writes the
    // decoded holders (in the order of their lease ends) byte for byte as DUMP did.
    let shared: &[&[u8]] = &[b"r1", b"reader-2", b"\x00\xff\r\n*"];
    let places: &[&[u8]] = &[b"p1", b"place-2"];
    for (key, tokens, options, kind) in [
        ("enc-rw", shared, &["SHARED"][..], Kind::Shared),
        (
            "enc-sem",
            places,
            &["LIMIT", "3"][..],
            Kind::Semaphore { limit: 3 },
        ),
    ] {
        let started = now_ms();
        let (dump, mut grants) = b.dump_holders(key, tokens, options);
        let ended = now_ms();
        let id = module_id(&dump.body);
        assert_eq!(id & 1023, ENCODING_VERSION, "{key}");
        let Expect::Holders { kind: k, holds } = b.expect(&dump.seal(&dump.body)) else {
            panic!("{key}: {:?}", b.expect(&dump.seal(&dump.body)));
        };
        assert_eq!(k, kind, "{key}");
        let mut decoded: Vec<_> = holds.iter().map(|h| (h.token.clone(), h.fence)).collect();
        decoded.sort();
        grants.sort();
        assert_eq!(decoded, grants, "{key}");
        for h in &holds {
            assert!(
                (started + 3_600_000..=ended + 3_600_000).contains(&h.expire_at),
                "{key}: lease end {h:?}"
            );
        }
        assert_eq!(
            HolderFields::new(id, kind, holds).body(),
            packed::raw(&dump.body),
            "{key}"
        );
    }
    // Holders with public data: their own code, each hold followed by its data (none: 0).
    for (token, data) in [
        (&b"d1"[..], Some(&b"host:1"[..])),
        (b"d2", None),
        (b"d3", Some(b"\x00\r\n")),
    ] {
        let mut cmd = rcmd!("LOCK.ACQUIRE", "enc-data", token, "PX", 3_600_000, "SHARED");
        if let Some(d) = data {
            cmd.arg("DATA").arg(d);
        }
        assert!(parse_grant(&ok(&mut b.c, &cmd)).is_some());
    }
    let dump = Dump::parse(&as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "enc-data"))));
    ok(&mut b.c, &rcmd!("DEL", "enc-data"));
    let (record, _) = packed::record_of(&dump.body).expect("one record string");
    assert_eq!(u64::from(record[0]), MODE_SHARED_WITH_DATA);
    let Expect::Holders { kind, holds } = b.expect(&dump.seal(&dump.body)) else {
        panic!("holders with data: {:?}", b.expect(&dump.seal(&dump.body)));
    };
    let data: Vec<_> = holds
        .iter()
        .map(|h| (h.token.clone(), h.data.clone()))
        .collect();
    assert_eq!(
        data,
        [
            (b"d1".to_vec(), Some(b"host:1".to_vec())),
            (b"d2".to_vec(), None),
            (b"d3".to_vec(), Some(b"\x00\r\n".to_vec()))
        ]
    );
    let id = module_id(&dump.body);
    assert_eq!(
        HolderFields::new(id, kind, holds).body(),
        packed::raw(&dump.body),
        "with data"
    );
    b.finish("encoder");
}

#[test]
fn forged_fences_are_refused_and_the_clock_is_not_poisoned() {
    let mut b = Bench::start();
    // A load first: what a load reads is trusted, a client's RESTORE after it is not.
    assert_eq!(ok(&mut b.c, &rcmd!("DEBUG", "RELOAD")), Value::Okay);
    let base = b.dump_of("forge", b"forged");
    let id = module_id(&base.body);
    let v3 = (id & !1023) | HOLDS_PACKED_ENCODING_VERSION;
    let now = now_ms();
    let forge = |fence: u64| Fields::lock(id, fence, b"forged").body();
    // The same fence in a lock with data, and in the fields of version 3.
    let forgeries = |fence: u64| {
        [
            ("", forge(fence)),
            (
                ", with data",
                Fields::with_data(id, fence, b"forged", b"d").body(),
            ),
            (" (version 3)", Fields::lock(v3, fence, b"forged").body()),
            (
                ", with data (version 3)",
                Fields::with_data(v3, fence, b"forged", b"d").body(),
            ),
        ]
    };
    // The largest fence: refused, logged, and the next grant is an ordinary one.
    let max = forge(i64::MAX as u64);
    assert_eq!(b.expect(&base.seal(&max)), Expect::Refused);
    b.case("fence 2^63-1", &base.seal(&max), &Expect::Refused);
    assert!(
        b.s.log().contains("refused a restored lock"),
        "no warning logged\n{}",
        b.s.log_tail(10)
    );
    assert_eq!(b.last_fence >> EPOCH_SHIFT, 0);
    assert!(b.last_fence < fence_at(0, now_ms() + 60_000) as i64);
    // Two days ahead, or 65 promotions ahead: refused.
    for (what, fence) in [
        ("two days ahead", fence_at(0, now + 2 * DAY_MS)),
        ("epoch 65", fence_at(65, now)),
        ("epoch 4095", fence_at(4095, now)),
        ("fence 0", 0),
        ("fence 2^63", 1 << 63),
        ("fence 2^64-1", u64::MAX),
    ] {
        for (how, body) in forgeries(fence) {
            let what = format!("{what}{how}");
            assert_eq!(b.expect(&base.seal(&body)), Expect::Refused, "{what}");
            b.case(&what, &base.seal(&body), &Expect::Refused);
        }
    }
    assert!(b.last_fence < fence_at(0, now_ms() + 60_000) as i64);
    // Another server's lock from three promotions later: accepted as it is, and the next grant
    // of that key, once released, is greater.
    let epoch3 = fence_at(3, now);
    let body = forge(epoch3);
    let want = Expect::Lock {
        token: b"forged".to_vec(),
        fence: epoch3,
        data: None,
    };
    assert_eq!(b.expect(&base.seal(&body)), want);
    ok(&mut b.c, &rcmd!("RESTORE", "epoch3", 0, base.seal(&body)));
    assert_eq!(info_some(&mut b.c, "epoch3").fence as u64, epoch3);
    assert_eq!(release(&mut b.c, "epoch3", b"forged"), 1);
    let (_, next) = grant(&mut b.c, "epoch3", b"next", 10_000);
    assert!(next as u64 > epoch3, "{next} after {epoch3}");
    // 23 hours ahead and 64 promotions ahead are still within bounds.
    for (what, fence) in [
        ("23 hours ahead", fence_at(0, now + 23 * 3_600_000)),
        ("epoch 64", fence_at(64, now)),
    ] {
        for (how, body) in forgeries(fence) {
            let what = format!("{what}{how}");
            let want = Expect::Lock {
                token: b"forged".to_vec(),
                fence,
                data: how.contains("data").then(|| b"d".to_vec()),
            };
            assert_eq!(b.expect(&base.seal(&body)), want, "{what}");
            b.case(&what, &base.seal(&body), &want);
        }
    }
    b.finish("forged fences");
}
