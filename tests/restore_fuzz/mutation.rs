//! Base payloads and their random mutations.

use super::*;

/// The last bases are keys with holders.
pub(super) const HOLDER_BASES: usize = 11;
/// Before them, locks of older encodings.
pub(super) const LEGACY_BASES: usize = 2;

/// Base payloads: real `DUMP`s of locks with tokens of different lengths and contents (some
/// compressed by Redis), and fences of every length encoding (restored, then dumped again); then
/// (`LEGACY_BASES`) a lock as version 1 wrote it and one with data as version 3 did; then
/// (`HOLDER_BASES`) the `DUMP`s of a read/write lock with three `SHARED` holders, a semaphore
/// with `LIMIT 3` and two holders, a read/write lock with a holder whose token makes Redis
/// compress the record, and a semaphore with 20 holders (the module's indexed form; compressed
/// too); the first two as version 2 wrote them (each hold in fields of its own); a read/write
/// lock and a semaphore whose holders have public data (the semaphore's 20 holds compressed);
/// and the first two and the read/write lock with data as version 3 wrote them (their holds
/// packed in a field).
pub(super) fn bases(b: &mut Bench) -> Vec<Dump> {
    let mut rng = StdRng::seed_from_u64(7);
    let random: Vec<u8> = (0..MAX_TOKEN).map(|_| rng.gen()).collect();
    let mut out = Vec::new();
    for token in [
        b"a".to_vec(),
        b"tok-1".to_vec(),
        b"12345".to_vec(),
        random[..32].to_vec(),
        vec![b'x'; 64],
        random.clone(),
        vec![b'z'; MAX_TOKEN],
    ] {
        out.push(b.dump_of("base", &token));
    }
    // Exclusive locks with data: short, and long enough for Redis to compress it.
    for data in [b"10.0.0.1:6379".to_vec(), vec![b'd'; 300]] {
        let reply = ok(
            &mut b.c,
            &rcmd!(
                "LOCK.ACQUIRE",
                "base",
                "with-data",
                "PX",
                3_600_000,
                "DATA",
                data
            ),
        );
        assert!(parse_grant(&reply).is_some(), "{reply:?}");
        out.push(Dump::parse(&as_bytes(&ok(
            &mut b.c,
            &rcmd!("DUMP", "base"),
        ))));
        ok(&mut b.c, &rcmd!("DEL", "base"));
    }
    let id = module_id(&out[0].body);
    for fence in [1u64, 63, 64, 16_383, 16_384, u64::from(u32::MAX), 1 << 40] {
        let body = Fields::lock(id, fence, b"small-fence").body();
        let payload = out[0].seal(&body);
        ok(&mut b.c, &rcmd!("RESTORE", "base", 0, payload));
        let dump = as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "base")));
        ok(&mut b.c, &rcmd!("DEL", "base"));
        out.push(Dump::parse(&dump));
    }
    let version = |v: u64| (id & !1023) | v;
    let fence = fence_at(0, now_ms());
    for fields in [
        Fields::lock(version(LEGACY_ENCODING_VERSION), fence, &random[..32]),
        Fields::with_data(
            version(HOLDS_PACKED_ENCODING_VERSION),
            fence,
            b"with-data",
            b"10.0.0.1:6379",
        ),
    ] {
        out.push(Dump {
            body: fields.body(),
            version: out[0].version,
        });
    }
    let twenty: Vec<Vec<u8>> = (0..20)
        .map(|i| format!("holder-{i:02}").into_bytes())
        .collect();
    let twenty: Vec<&[u8]> = twenty.iter().map(|t| &t[..]).collect();
    let holders: [(&[&[u8]], &[&str]); 4] = [
        (&[b"reader-1", &random[32..62], b"r3"], &["SHARED"]),
        (&[b"place-a", b"12345"], &["LIMIT", "3"]),
        (&[b"a", &[b'q'; 80]], &["SHARED"]),
        (&twenty, &["LIMIT", "30"]),
    ];
    let packed_at = out.len();
    for (tokens, options) in holders {
        out.push(b.dump_holders("base", tokens, options).0);
    }
    // The same holders as an older version wrote them.
    let older = |b: &Bench, dump: &Dump, v: u64| {
        let Expect::Holders { kind, holds } = b.expect(&dump.seal(&dump.body)) else {
            panic!("a holders DUMP reads back: {dump:?}");
        };
        Dump {
            body: HolderFields::new(version(v), kind, holds).body(),
            version: dump.version,
        }
    };
    for at in packed_at..packed_at + 2 {
        out.push(older(b, &out[at], FIELDS_ENCODING_VERSION));
    }
    // Holders with data: three readers, two with data; twenty places (the indexed form), most
    // with data, long enough together for Redis to compress them.
    type WithData<'a> = Vec<(&'a [u8], Option<Vec<u8>>)>;
    let data_bases: [(WithData, &[&str]); 2] = [
        (
            vec![
                (b"reader-1", Some(b"10.0.0.1:6379".to_vec())),
                (b"r2", None),
                (b"r3", Some(random[..40].to_vec())),
            ],
            &["SHARED"],
        ),
        (
            twenty
                .iter()
                .enumerate()
                .map(|(i, t)| (*t, (i % 5 != 0).then(|| vec![b'd'; 30 + i])))
                .collect(),
            &["LIMIT", "30"],
        ),
    ];
    for (holds, options) in data_bases {
        for (token, data) in &holds {
            let mut cmd = rcmd!("LOCK.ACQUIRE", "base", *token, "PX", 3_600_000);
            for o in options {
                cmd.arg(*o);
            }
            if let Some(d) = data {
                cmd.arg("DATA").arg(d.as_slice());
            }
            assert!(parse_grant(&ok(&mut b.c, &cmd)).is_some());
        }
        out.push(Dump::parse(&as_bytes(&ok(
            &mut b.c,
            &rcmd!("DUMP", "base"),
        ))));
        ok(&mut b.c, &rcmd!("DEL", "base"));
    }
    for at in [packed_at, packed_at + 1, packed_at + 6] {
        out.push(older(b, &out[at], HOLDS_PACKED_ENCODING_VERSION));
    }
    assert_eq!(out.len() - packed_at, HOLDER_BASES);
    // The reference decoder reads Redis's compressed strings too.
    let compressed = |d: &Dump| packed::record_of(&d.body).is_some_and(|(_, lzf)| lzf);
    assert!(
        compressed(&out[packed_at + 2])
            && compressed(&out[packed_at + 3])
            && compressed(&out[packed_at + 7]),
        "the records of these DUMPs are LZF strings"
    );
    for d in &out {
        assert!(
            matches!(
                b.expect(&d.seal(&d.body)),
                Expect::Lock { .. } | Expect::Holders { .. }
            ),
            "a base reads back exactly: {d:?}"
        );
    }
    out
}

/// Interesting byte values for overwrites: length-encoding boundaries and special encodings.
pub(super) const BYTES: [u8; 12] = [
    0x00, 0x01, 0x02, 0x05, 0x3f, 0x40, 0x7f, 0x80, 0x81, 0x82, 0xc0, 0xc3,
];

/// One random mutation of `body` (never of its type byte), with a label.
pub(super) fn mutate(rng: &mut StdRng, body: &[u8], id: u64) -> (String, Vec<u8>) {
    let mut b = body.to_vec();
    let pos = |rng: &mut StdRng, b: &Vec<u8>| rng.gen_range(1..b.len().max(2));
    match rng.gen_range(0..10) {
        0 => {
            let n = rng.gen_range(0..b.len());
            b.truncate(n);
            (format!("truncated to {n}"), b)
        }
        1 => {
            let flips = rng.gen_range(1..=4);
            for _ in 0..flips {
                let p = pos(rng, &b).min(b.len() - 1);
                b[p] ^= 1 << rng.gen_range(0..8);
            }
            (format!("{flips} bit flips"), b)
        }
        2 => {
            let p = pos(rng, &b);
            let v = if rng.gen() {
                rng.gen()
            } else {
                BYTES[rng.gen_range(0..BYTES.len())]
            };
            b.insert(p, v);
            (format!("insert {v:#04x} at {p}"), b)
        }
        3 => {
            let p = pos(rng, &b).min(b.len() - 1);
            b.remove(p);
            (format!("delete at {p}"), b)
        }
        4 => {
            let p = pos(rng, &b).min(b.len() - 1);
            let v = BYTES[rng.gen_range(0..BYTES.len())];
            b[p] = v;
            (format!("byte {p} := {v:#04x}"), b)
        }
        5 => {
            // Trailing bytes after the end marker.
            let n = rng.gen_range(1..8);
            b.extend((0..n).map(|_| rng.gen::<u8>()));
            (format!("{n} trailing bytes"), b)
        }
        // Inside the record string of version 4, its length kept right.
        6 => match packed::record_of(body) {
            Some((record, _)) => {
                let (label, record) = packed::damage_record(rng, &record);
                (label, packed::record_body(module_id(body), &record))
            }
            None => structured(rng, id),
        },
        7 | 8 => structured(rng, id),
        _ => structured_holders(rng, id),
    }
}
