//! Forged records of keys with holders, each with its exact answer.

use super::*;

#[test]
fn forged_holder_records_get_an_exact_answer() {
    let mut b = Bench::start();
    let base = b.dump_of("forge", b"forged");
    let id = module_id(&base.body);
    let v1 = (id & !1023) | LEGACY_ENCODING_VERSION;
    let v2 = (id & !1023) | FIELDS_ENCODING_VERSION;
    let now = now_ms();
    let lease = now + 3_600_000;
    let f = |n: u64| fence_at(0, now) + n;
    let two = || vec![hold(b"r1", f(1), lease), hold(b"r2", f(2), lease)];
    let shared = |holds: Vec<Hold>| HolderFields::new(id, Kind::Shared, holds);
    let sem =
        |limit: u64, holds: Vec<Hold>| HolderFields::new(id, Kind::Semaphore { limit }, holds);
    let with = |mut fields: HolderFields, change: &dyn Fn(&mut HolderFields)| {
        change(&mut fields);
        fields
    };
    let packed =
        |fields: HolderFields, bytes: Vec<u8>| with(fields, &|x| x.packed = Some(bytes.clone()));
    let accepted = |fields: &HolderFields| {
        let kind = match fields.mode {
            MODE_SHARED | MODE_SHARED_WITH_DATA => Kind::Shared,
            _ => Kind::Semaphore {
                limit: fields.limit,
            },
        };
        Expect::Holders {
            kind,
            holds: fields.holds.clone(),
        }
    };
    let one_fence = |fence: u64| shared(vec![hold(b"r1", f(1), lease), hold(b"r2", fence, lease)]);
    // Refused in every layout: version 4 (one record), 3 (packed) and 2 (each hold in fields).
    let refused: Vec<(&str, HolderFields)> = vec![
        (
            "count larger than the payload",
            with(shared(two()), &|x| x.count = 3),
        ),
        ("count 2^64-1", with(sem(3, two()), &|x| x.count = u64::MAX)),
        ("count 2^32", with(shared(two()), &|x| x.count = 1 << 32)),
        (
            "count smaller than the holders",
            with(shared(two()), &|x| x.count = 1),
        ),
        ("count 0", with(shared(two()), &|x| x.count = 0)),
        ("no holders", shared(vec![])),
        (
            "duplicate token",
            shared(vec![hold(b"r1", f(1), lease), hold(b"r1", f(2), lease)]),
        ),
        (
            "duplicate fence",
            sem(
                3,
                vec![hold(b"r1", f(1), lease), hold(b"r2", f(1), lease + 5)],
            ),
        ),
        ("more holders than LIMIT 1", sem(1, two())),
        ("semaphore LIMIT 0", sem(0, two())),
        ("semaphore LIMIT 1000001", sem(MAX_LIMIT + 1, two())),
        ("semaphore LIMIT 2^32", sem(1 << 32, two())),
        ("semaphore LIMIT 2^32+2", sem((1 << 32) + 2, two())),
        ("semaphore LIMIT 2^64-1", sem(u64::MAX, two())),
        ("shared with a limit", with(shared(two()), &|x| x.limit = 3)),
        (
            "empty token",
            shared(vec![hold(b"r1", f(1), lease), hold(b"", f(2), lease)]),
        ),
        (
            "513-byte token",
            sem(3, vec![hold(&[b't'; MAX_TOKEN + 1], f(1), lease)]),
        ),
        ("fence 0", one_fence(0)),
        ("fence 2^63", one_fence(1 << 63)),
        ("fence 2^64-1", one_fence(u64::MAX)),
        ("fence 2^63-1", one_fence(i64::MAX as u64)),
        (
            "fence two days ahead",
            one_fence(fence_at(0, now + 2 * DAY_MS)),
        ),
        ("fence 65 promotions ahead", one_fence(fence_at(65, now))),
        ("mode 7", with(sem(3, two()), &|x| x.mode = 7)),
        (
            "lease until the end of time",
            shared(vec![hold(b"r1", f(1), lease), hold(b"r2", f(2), i64::MAX)]),
        ),
        (
            "lease ending a day after the bound",
            shared(vec![hold(b"r1", f(1), now + MAX_TTL_MS + DAY_MS)]),
        ),
        (
            "lease ended before the epoch",
            sem(3, vec![hold(b"r1", f(1), lease), hold(b"r2", f(2), -1)]),
        ),
        (
            "lease ending at i64::MIN",
            shared(vec![hold(b"r1", f(1), i64::MIN)]),
        ),
    ];
    // Two holders, one with data at its longest.
    let with_data = || {
        let mut holds = two();
        holds[1].data = Some(vec![0xa5; MAX_DATA]);
        holds
    };
    // Refused under one version or with one layout only.
    let h1 = hold(b"r1", f(1), lease);
    let first = encode_holds(std::slice::from_ref(&h1));
    let then = |bytes: &[u8]| [&first[..], bytes].concat();
    let versions: Vec<(&str, HolderFields)> = vec![
        (
            "shared under version 1",
            with(shared(two()), &|x| x.module_id = v1),
        ),
        (
            "semaphore under version 1",
            with(sem(3, two()).as_fields(), &|x| x.module_id = v1),
        ),
        (
            "shared under version 0",
            with(shared(two()), &|x| x.module_id = id & !1023),
        ),
        (
            "shared under version 5",
            with(shared(two()), &|x| {
                x.module_id = (id & !1023) | (ENCODING_VERSION + 1)
            }),
        ),
        (
            "semaphore under version 1023",
            with(sem(3, two()), &|x| x.module_id = id | 1023),
        ),
        (
            "packed holds under version 2",
            with(shared(two()).as_version_3(), &|x| x.module_id = v2),
        ),
        (
            "a record under version 2",
            with(shared(two()), &|x| x.module_id = v2),
        ),
        (
            "a record under version 3",
            with(shared(two()), &|x| {
                x.module_id = (id & !1023) | HOLDS_PACKED_ENCODING_VERSION
            }),
        ),
        (
            "holds in fields under version 3",
            with(shared(two()).as_version_3(), &|x| x.layout = Layout::Fields),
        ),
        (
            "holds in fields under version 4",
            with(shared(two()).as_fields(), &|x| x.module_id = id),
        ),
        (
            "packed holds under version 4",
            with(shared(two()), &|x| x.layout = Layout::Packed),
        ),
        (
            "packed with data under version 2",
            with(shared(with_data()).as_version_3(), &|x| x.module_id = v2),
        ),
        // Version 4 reads such a record as an exclusive lock with data (limit, count: fence,
        // token length); the fields of versions 3 and 2 do not.
        (
            "mode 4 (version 3)",
            with(sem(3, two()).as_version_3(), &|x| {
                x.mode = MODE_EXCLUSIVE_WITH_DATA
            }),
        ),
        (
            "mode 4 (version 2)",
            with(sem(3, two()).as_fields(), &|x| {
                x.mode = MODE_EXCLUSIVE_WITH_DATA
            }),
        ),
    ];
    // The packed holds, refused in version 4's record and in version 3's field alike.
    let packed_only: Vec<(&str, HolderFields)> = vec![
        (
            "packed: a later lease first",
            with(shared(two()), &|x| x.holds[0].expire_at += 1),
        ),
        (
            "packed: one lease end, the higher fence first",
            with(shared(two()), &|x| x.holds.swap(0, 1)),
        ),
        (
            "packed: cut short",
            packed(shared(vec![h1.clone()]), first[..first.len() - 1].to_vec()),
        ),
        (
            "packed: a trailing byte",
            packed(shared(vec![h1.clone()]), then(&[0])),
        ),
        (
            "packed: empty, count 1",
            packed(shared(vec![h1.clone()]), vec![]),
        ),
        (
            "packed: a varint not in its shortest form",
            packed(shared(two()), then(&[0x80, 0x00, 2, 2, b'r', b'2'])),
        ),
        (
            "packed: an 11-byte varint",
            packed(
                shared(two()),
                then(&[[0xff; 10].as_slice(), &[0x01, 2, 2, b'r', b'2']].concat()),
            ),
        ),
        (
            "packed: a varint past 64 bits",
            packed(
                shared(two()),
                then(&[[0xff; 9].as_slice(), &[0x02, 2, 2, b'r', b'2']].concat()),
            ),
        ),
        (
            "packed: a token longer than the string",
            packed(shared(two()), then(&[0, 2, 3, b'r', b'2'])),
        ),
        (
            "packed: a token length of 2^64-1",
            packed(
                shared(two()),
                then(&[[0, 2].as_slice(), &[0xff; 9], &[0x01]].concat()),
            ),
        ),
        (
            "packed: an empty token",
            packed(shared(two()), then(&[0, 2, 0])),
        ),
        (
            "packed: a lease end increase that wraps around",
            packed(
                shared(two()),
                then(&[[0xff; 9].as_slice(), &[0x01, 2, 2, b'r', b'2']].concat()),
            ),
        ),
        (
            "packed: a first lease end below zero",
            packed(shared(vec![h1.clone()]), {
                let mut b = vec![0xff; 9];
                b.push(0x01);
                put_varint(&mut b, f(1) << 1);
                b.extend([2, b'r', b'1']);
                b
            }),
        ),
        (
            "packed: a fence change back to fence 0",
            packed(shared(vec![h1.clone()]), {
                let mut b = Vec::new();
                put_varint(&mut b, lease as u64);
                put_varint(&mut b, 0);
                b.extend([2, b'r', b'1']);
                b
            }),
        ),
        (
            "packed: a fence change past 2^63",
            packed(
                shared(two()),
                then(&{
                    let mut b = vec![0];
                    put_varint(&mut b, (i64::MAX as u64 - f(1) + 1) << 1);
                    b.extend([2, b'r', b'2']);
                    b
                }),
            ),
        ),
        // Holders with public data (versions 3 and 4).
        (
            "packed with data: 4097 bytes of data",
            shared(vec![h1.clone(), {
                let mut h = hold(b"r2", f(2), lease);
                h.data = Some(vec![b'd'; MAX_DATA + 1]);
                h
            }]),
        ),
        (
            "packed with data: no holder has any",
            packed(
                with(shared(vec![h1.clone()]), &|x| {
                    x.mode = MODE_SHARED_WITH_DATA
                }),
                then(&[0]),
            ),
        ),
        (
            "packed without data under the mode with data",
            with(sem(3, two()), &|x| x.mode = MODE_SEMAPHORE_WITH_DATA),
        ),
        (
            "packed with data under the mode without",
            with(shared(with_data()), &|x| x.mode = MODE_SHARED),
        ),
    ];
    let mut all: Vec<(String, HolderFields)> = versions
        .iter()
        .map(|(w, f)| (w.to_string(), f.clone()))
        .collect();
    for (what, fields) in packed_only.iter().chain(&refused) {
        all.push((what.to_string(), fields.clone()));
        all.push((format!("{what} (version 3)"), fields.as_version_3()));
    }
    for (what, fields) in &refused {
        all.push((format!("{what} (version 2)"), fields.as_fields()));
    }
    for (what, fields) in all {
        let payload = base.seal(&fields.body());
        assert_eq!(b.expect(&payload), Expect::Refused, "{what}");
        b.case(&what, &payload, &Expect::Refused);
    }
    assert!(
        b.s.log().contains("refused a restored lock"),
        "no warning logged\n{}",
        b.s.log_tail(10)
    );
    // Nothing refused moved the fence clock.
    assert_eq!(b.last_fence >> EPOCH_SHIFT, 0);
    assert!(b.last_fence < fence_at(0, now_ms() + 60_000) as i64);
    let long = [b'l'; MAX_TOKEN];
    let many: Vec<Hold> = (0..40u64)
        .map(|i| {
            hold(
                format!("holder-{i:02}").as_bytes(),
                f(100 + i),
                lease + (i as i64 % 3),
            )
        })
        .collect();
    let ok_cases: Vec<(&str, HolderFields)> = vec![
        ("shared, two holders", shared(two())),
        (
            "shared, three holders",
            shared(vec![
                hold(b"r1", f(3), lease),
                hold(b"\x00\r\n", f(1), lease + 1),
                hold(b"12345", f(2), lease),
            ]),
        ),
        ("semaphore LIMIT 3, two holders", sem(3, two())),
        ("semaphore LIMIT 2, full", sem(2, two())),
        ("semaphore LIMIT 1000000", sem(MAX_LIMIT, two())),
        ("512-byte token", sem(1, vec![hold(&long, f(1), lease)])),
        (
            "a lease that ended",
            shared(vec![
                hold(b"r1", f(1), lease),
                hold(b"gone", f(2), now - 60_000),
            ]),
        ),
        (
            "every lease ended",
            sem(3, vec![hold(b"r1", f(1), 0), hold(b"r2", f(2), now - 1)]),
        ),
        (
            "lease ending a day before the bound",
            shared(vec![hold(b"r1", f(1), now + MAX_TTL_MS - DAY_MS)]),
        ),
        (
            "fence 23 hours ahead",
            one_fence(fence_at(0, now + 23 * 3_600_000)),
        ),
        ("fence 64 promotions ahead", one_fence(fence_at(64, now))),
        (
            "fences far apart, lower fences ending later",
            shared(vec![
                hold(b"old", 1, lease + 9),
                hold(b"new", f(7), lease),
                hold(b"mid", 1 << 40, lease + 5),
            ]),
        ),
        ("40 holders: the indexed form", sem(64, many.clone())),
        ("16 holders", sem(16, many[..16].to_vec())),
        ("17 holders", shared(many[..17].to_vec())),
    ];
    for (what, fields) in &ok_cases {
        for (what, fields) in [
            (what.to_string(), fields.clone()),
            (format!("{what} (version 3)"), fields.as_version_3()),
            (format!("{what} (version 2)"), fields.as_fields()),
        ] {
            let payload = base.seal(&fields.body());
            let want = accepted(&fields);
            assert_eq!(b.expect(&payload), want, "{what}");
            b.case(&what, &payload, &want);
        }
    }
    // Holders with public data (versions 3 and 4): each holder's data read back exactly.
    let data_cases: Vec<(&str, HolderFields)> = vec![
        ("shared, data at its longest", shared(with_data())),
        (
            "semaphore, data on each holder, the lowest fence ending last",
            sem(
                3,
                vec![
                    Hold {
                        data: Some(b"\x00\r\n".to_vec()),
                        ..hold(b"r1", f(1), lease + 5)
                    },
                    Hold {
                        data: Some(b"b".to_vec()),
                        ..hold(b"r2", f(2), lease)
                    },
                ],
            ),
        ),
        (
            "40 holders with data: the indexed form",
            sem(
                64,
                many.iter()
                    .enumerate()
                    .map(|(i, h)| Hold {
                        data: (i % 3 != 0).then(|| format!("data-{i}").into_bytes()),
                        ..h.clone()
                    })
                    .collect(),
            ),
        ),
    ];
    for (what, fields) in &data_cases {
        for (what, fields) in [
            (what.to_string(), fields.clone()),
            (format!("{what} (version 3)"), fields.as_version_3()),
        ] {
            let payload = base.seal(&fields.body());
            let want = accepted(&fields);
            assert_eq!(b.expect(&payload), want, "{what}");
            b.case(&what, &payload, &want);
        }
    }
    println!(
        "RESTORE-FORGED-HOLDERS cases={} accepted={} (holders checked exactly: {}) refused={}",
        b.n, b.accepted, b.exact_holders, b.refused
    );
    b.finish("forged holders");
}
