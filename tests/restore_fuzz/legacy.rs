//! Payloads of the encodings before the one `DUMP` writes restore exactly, and are dumped again
//! as the current one: version 3 (the record in fields, the holds packed into one string),
//! version 2 (each hold in fields of its own) and version 1 (exclusive locks and gates only).

use super::*;

#[test]
fn an_encoding_version_1_payload_still_restores_exactly() {
    // The release before shared locks and semaphores wrote exclusive locks and gates with the
    // same fields, under encoding version 1.
    let mut b = Bench::start();
    let base = b.dump_of("v2", b"owner");
    let id = module_id(&base.body);
    let v1 = (id & !1023) | LEGACY_ENCODING_VERSION;
    let fence = fence_at(0, now_ms());
    let epoch3 = fence_at(3, now_ms());
    // Laid out as the version in the module id lays it out.
    let lock = |module_id: u64, mode: u64, fence: u64, token: &[u8]| {
        Fields {
            mode,
            ..Fields::lock(module_id, fence, token)
        }
        .body()
    };
    let token = b"legacy-owner";
    let locked = |token: &[u8], fence: u64| Expect::Lock {
        token: token.to_vec(),
        fence,
        data: None,
    };
    for (what, body, want) in [
        (
            "exclusive lock",
            lock(v1, MODE_EXCLUSIVE, fence, token),
            locked(token, fence),
        ),
        (
            "exclusive lock of epoch 3",
            lock(v1, MODE_EXCLUSIVE, epoch3, b"e3"),
            locked(b"e3", epoch3),
        ),
        (
            "fence gate",
            lock(v1, MODE_GATE, 41, b""),
            Expect::Gate { fence: 41 },
        ),
        (
            "exclusive lock, empty token",
            lock(v1, MODE_EXCLUSIVE, fence, b""),
            Expect::Refused,
        ),
        (
            "fence 0",
            lock(v1, MODE_EXCLUSIVE, 0, token),
            Expect::Refused,
        ),
        (
            "version 0",
            lock(id & !1023, MODE_EXCLUSIVE, fence, token),
            Expect::Refused,
        ),
        (
            "version 2",
            lock(
                (id & !1023) | FIELDS_ENCODING_VERSION,
                MODE_EXCLUSIVE,
                fence,
                token,
            ),
            locked(token, fence),
        ),
        (
            "version 3",
            lock(
                (id & !1023) | HOLDS_PACKED_ENCODING_VERSION,
                MODE_EXCLUSIVE,
                fence,
                token,
            ),
            locked(token, fence),
        ),
        // Version 4 writes one record string, no fields.
        (
            "the fields under version 4",
            Fields::lock(id, fence, token).laid_out(false),
            Expect::Refused,
        ),
        (
            "version 5",
            lock(
                (id & !1023) | (ENCODING_VERSION + 1),
                MODE_EXCLUSIVE,
                fence,
                token,
            ),
            Expect::Refused,
        ),
    ] {
        let payload = base.seal(&body);
        assert_eq!(b.expect(&payload), want, "{what}");
        b.case(what, &payload, &want);
    }
    // Restored from version 1, the lock is dumped again as the current version: the same fence
    // and token in one record string.
    let payload = base.seal(&lock(v1, MODE_EXCLUSIVE, fence, token));
    ok(&mut b.c, &rcmd!("RESTORE", "legacy", 0, payload));
    let again = Dump::parse(&as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "legacy"))));
    assert_eq!(module_id(&again.body) & 1023, ENCODING_VERSION);
    assert_eq!(
        packed::raw(&again.body),
        lock(id, MODE_EXCLUSIVE, fence, token)
    );
    assert_eq!(release(&mut b.c, "legacy", token), 1);
    b.finish("version 1");
}

#[test]
fn an_encoding_version_2_holders_payload_still_restores_exactly() {
    // Encoding version 2 had each hold's fence, lease end and token in fields of their own, in
    // any order.
    let mut b = Bench::start();
    let base = b.dump_of("v3", b"owner");
    let id = module_id(&base.body);
    let v2 = (id & !1023) | FIELDS_ENCODING_VERSION;
    let now = now_ms();
    let lease = now + 3_600_000;
    let f = |n: u64| fence_at(0, now) + n;
    let many = |n: u64| -> Vec<Hold> {
        (0..n)
            .map(|i| {
                hold(
                    format!("reader-{i:03}").as_bytes(),
                    f(10 + i),
                    lease - i as i64,
                )
            })
            .collect()
    };
    let cases: Vec<(&str, Kind, Vec<Hold>)> = vec![
        (
            "one shared holder",
            Kind::Shared,
            vec![hold(b"r1", f(1), lease)],
        ),
        (
            "a semaphore, holds not in lease order",
            Kind::Semaphore { limit: 5 },
            vec![
                hold(b"late", f(1), lease + 9),
                hold(b"\x00\r\n", f(3), lease),
                hold(b"12345", f(2), lease),
            ],
        ),
        ("16 shared holders", Kind::Shared, many(16)),
        ("17 shared holders", Kind::Shared, many(17)),
        (
            "100 places of 100",
            Kind::Semaphore { limit: 100 },
            many(100),
        ),
    ];
    for (what, kind, holds) in cases {
        let fields = HolderFields::new(v2, kind, holds.clone());
        assert_eq!(fields.layout, Layout::Fields);
        let payload = base.seal(&fields.body());
        let want = Expect::Holders {
            kind,
            holds: holds.clone(),
        };
        assert_eq!(b.expect(&payload), want, "{what}");
        b.case(what, &payload, &want);
        // Restored from version 2, the key is dumped again as the current version: the same
        // holders, packed in the order of their lease ends.
        ok(&mut b.c, &rcmd!("RESTORE", "legacy", 0, payload));
        let again = Dump::parse(&as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "legacy"))));
        assert_eq!(module_id(&again.body) & 1023, ENCODING_VERSION, "{what}");
        let mut sorted = holds;
        sorted.sort_by_key(|h| (h.expire_at, h.fence));
        let want = Expect::Holders {
            kind,
            holds: sorted.clone(),
        };
        assert_eq!(
            b.expect(&again.seal(&again.body)),
            want,
            "{what}: dumped again"
        );
        assert_eq!(
            packed::raw(&again.body),
            HolderFields::new(id, kind, sorted).body(),
            "{what}"
        );
        ok(&mut b.c, &rcmd!("DEL", "legacy"));
    }
    b.finish("version 2");
}

#[test]
fn an_encoding_version_3_payload_still_restores_exactly() {
    // The release before wrote the record in fields under encoding version 3: exclusive locks
    // and gates as version 1 did (with data: under their own mode, the data in a field after the
    // token); holders' mode, limit and count, then their holds packed into one string.
    let mut b = Bench::start();
    let base = b.dump_of("v4", b"owner");
    let id = module_id(&base.body);
    let v3 = (id & !1023) | HOLDS_PACKED_ENCODING_VERSION;
    let now = now_ms();
    let lease = now + 3_600_000;
    let f = |n: u64| fence_at(0, now) + n;
    let long = [b'l'; MAX_TOKEN];
    let locked = |token: &[u8], fence: u64, data: Option<&[u8]>| Expect::Lock {
        token: token.to_vec(),
        fence,
        data: data.map(<[u8]>::to_vec),
    };
    let gate = Fields {
        mode: MODE_GATE,
        ..Fields::lock(v3, 41, b"")
    };
    let singles: Vec<(&str, Fields, Expect)> = vec![
        (
            "exclusive lock",
            Fields::lock(v3, f(1), b"v3-owner"),
            locked(b"v3-owner", f(1), None),
        ),
        (
            "exclusive lock, 512-byte token",
            Fields::lock(v3, f(2), &long),
            locked(&long, f(2), None),
        ),
        ("fence gate", gate, Expect::Gate { fence: 41 }),
        (
            "exclusive lock with data",
            Fields::with_data(v3, f(3), b"leader", b"10.0.0.1:6379"),
            locked(b"leader", f(3), Some(b"10.0.0.1:6379")),
        ),
        (
            "exclusive lock with data, both at their longest",
            Fields::with_data(v3, f(4), &long, &[0xa5; MAX_DATA]),
            locked(&long, f(4), Some(&[0xa5; MAX_DATA])),
        ),
    ];
    for (what, fields, want) in &singles {
        let payload = base.seal(&fields.body());
        assert_eq!(b.expect(&payload), *want, "{what}");
        b.case(what, &payload, want);
        // Restored from version 3, the lock is dumped again as the current version: the same
        // record in one string.
        ok(&mut b.c, &rcmd!("RESTORE", "legacy", 0, payload));
        let again = Dump::parse(&as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "legacy"))));
        assert_eq!(module_id(&again.body) & 1023, ENCODING_VERSION, "{what}");
        let current = Fields {
            module_id: id,
            ..fields.clone()
        };
        assert_eq!(packed::raw(&again.body), current.body(), "{what}");
        assert_eq!(b.expect(&again.seal(&again.body)), *want, "{what}: again");
        ok(&mut b.c, &rcmd!("DEL", "legacy"));
    }
    // Data only under the mode that says so, from version 3 on, and of 1 to 4096 bytes.
    let refused: Vec<(&str, Fields)> = vec![
        ("with data: none", Fields::with_data(v3, f(1), b"t", b"")),
        (
            "with data: 4097 bytes",
            Fields::with_data(v3, f(1), b"t", &[b'd'; MAX_DATA + 1]),
        ),
        (
            "with data: no token",
            Fields::with_data(v3, f(1), b"", b"d"),
        ),
        (
            "with data: fence two days ahead",
            Fields::with_data(v3, fence_at(0, now + 2 * DAY_MS), b"t", b"d"),
        ),
        (
            "data under the mode without",
            Fields {
                mode: MODE_EXCLUSIVE,
                ..Fields::with_data(v3, f(1), b"t", b"d")
            },
        ),
        (
            "the mode with data, no data field",
            Fields {
                mode: MODE_EXCLUSIVE_WITH_DATA,
                ..Fields::lock(v3, f(1), b"t")
            },
        ),
        (
            "with data under version 2",
            Fields::with_data((id & !1023) | FIELDS_ENCODING_VERSION, f(1), b"t", b"d"),
        ),
    ];
    for (what, fields) in &refused {
        let payload = base.seal(&fields.body());
        assert_eq!(b.expect(&payload), Expect::Refused, "{what}");
        b.case(what, &payload, &Expect::Refused);
    }
    let with_data = |holds: Vec<Hold>, every: usize| -> Vec<Hold> {
        holds
            .into_iter()
            .enumerate()
            .map(|(i, h)| Hold {
                data: (i % every == 0).then(|| format!("data-{i}").into_bytes()),
                ..h
            })
            .collect()
    };
    let many = |n: u64| -> Vec<Hold> {
        (0..n)
            .map(|i| {
                hold(
                    format!("holder-{i:03}").as_bytes(),
                    f(10 + i),
                    lease + (i as i64 % 4),
                )
            })
            .collect()
    };
    let three = vec![
        hold(b"late", f(1), lease + 9),
        hold(b"\x00\r\n", f(3), lease),
        hold(b"12345", f(2), lease),
    ];
    let holders: Vec<(&str, Kind, Vec<Hold>)> = vec![
        (
            "one shared holder",
            Kind::Shared,
            vec![hold(b"r1", f(1), lease)],
        ),
        (
            "a semaphore of three",
            Kind::Semaphore { limit: 5 },
            three.clone(),
        ),
        ("17 shared holders", Kind::Shared, many(17)),
        (
            "shared holders, one with data",
            Kind::Shared,
            with_data(three.clone(), 2),
        ),
        (
            "a semaphore, each holder with data",
            Kind::Semaphore { limit: 3 },
            with_data(three, 1),
        ),
        (
            "40 places with data: the indexed form",
            Kind::Semaphore { limit: 64 },
            with_data(many(40), 3),
        ),
    ];
    for (what, kind, holds) in holders {
        let fields = HolderFields::new(v3, kind, holds);
        assert_eq!(fields.layout, Layout::Packed);
        let payload = base.seal(&fields.body());
        let want = Expect::Holders {
            kind,
            holds: fields.holds.clone(),
        };
        assert_eq!(b.expect(&payload), want, "{what}");
        b.case(what, &payload, &want);
        // Dumped again as the current version: the same holds, in one record string.
        ok(&mut b.c, &rcmd!("RESTORE", "legacy", 0, payload));
        let again = Dump::parse(&as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "legacy"))));
        assert_eq!(module_id(&again.body) & 1023, ENCODING_VERSION, "{what}");
        assert_eq!(b.expect(&again.seal(&again.body)), want, "{what}: again");
        assert_eq!(
            packed::raw(&again.body),
            HolderFields::new(id, kind, fields.holds).body(),
            "{what}"
        );
        ok(&mut b.c, &rcmd!("DEL", "legacy"));
    }
    b.finish("version 3");
}
