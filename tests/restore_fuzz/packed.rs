//! Encoding version 4, which `DUMP` writes: the whole record as one string field, then the end
//! marker. The string starts with the record's code (version 3's mode field: 0 exclusive, 1 gate,
//! 2 shared, 3 semaphore; 4, 5, 6 the same with public data), then, numbers as varints: an
//! exclusive lock's fence and token (the rest); a gate's fence, and nothing after it; an
//! exclusive lock with data's fence, its token's length, the token and the data (the rest);
//! holders' limit (0 for shared), count, and the holds packed as version 3 packs them (the
//! rest). Here: the encoder, the reference decoder, changes made inside the string with its
//! length kept right (so that they reach the module), and forged records.

use super::*;

/// The string of an exclusive lock or a gate under code `mode` (its low byte): the fence, then
/// the token; with `data`, the token's length before the token and the data after it.
pub(super) fn single_record(mode: u64, fence: u64, token: &[u8], data: Option<&[u8]>) -> Vec<u8> {
    let mut out = vec![mode as u8];
    put_varint(&mut out, fence);
    if let Some(data) = data {
        put_varint(&mut out, token.len() as u64);
        out.extend_from_slice(token);
        out.extend_from_slice(data);
    } else {
        out.extend_from_slice(token);
    }
    out
}

/// The string of holders under code `mode` (its low byte): limit, count, the packed holds.
pub(super) fn holders_record(mode: u64, limit: u64, count: u64, holds: &[u8]) -> Vec<u8> {
    let mut out = vec![mode as u8];
    put_varint(&mut out, limit);
    put_varint(&mut out, count);
    out.extend_from_slice(holds);
    out
}

/// The payload body (without the trailer) of a record string, written raw.
pub(super) fn record_body(module_id: u64, record: &[u8]) -> Vec<u8> {
    let mut b = vec![TYPE_MODULE_2];
    b.extend(enc_len(module_id));
    push_string(&mut b, record);
    b.extend(enc_len(OPCODE_EOF));
    b
}

/// The record string of a version 4 body as Redis reads it (decompressed), and whether it was
/// written compressed; `None` for a body of another version or layout, or one read otherwise
/// (a damaged LZF string, bytes after the end marker).
pub(super) fn record_of(body: &[u8]) -> Option<(Vec<u8>, bool)> {
    let mut r = Reader { b: body, at: 0 };
    (r.byte()? == TYPE_MODULE_2).then_some(())?;
    (r.value()? & 1023 == ENCODING_VERSION).then_some(())?;
    (r.value()? == OPCODE_STRING).then_some(())?;
    // The special encoding 3: an LZF string.
    let compressed = body.get(r.at) == Some(&0xc3);
    let record = r.string().ok()??;
    (r.value()? == OPCODE_EOF && r.at == body.len()).then_some((record, compressed))
}

/// A `DUMP`'s body with its record string written raw, as the encoder writes it. Redis writes a
/// string of at most 20 bytes as it is, and compresses a longer one when LZF makes it shorter.
pub(super) fn raw(body: &[u8]) -> Vec<u8> {
    let (record, compressed) =
        record_of(body).unwrap_or_else(|| panic!("no version 4 record: {body:?}"));
    assert!(
        !compressed || record.len() > 20,
        "a record of {} bytes was compressed",
        record.len()
    );
    record_body(module_id(body), &record)
}

/// Whether a version 4 record (after the module id) is one of holders, by its code; an LZF
/// string not decoded here may be.
pub(super) fn has_holders(r: &mut Reader) -> bool {
    match r.string_field() {
        Some(Some(record)) => matches!(
            record.first().map(|&c| u64::from(c)),
            Some(MODE_SHARED | MODE_SEMAPHORE | MODE_SHARED_WITH_DATA | MODE_SEMAPHORE_WITH_DATA)
        ),
        Some(None) => true,
        None => false,
    }
}

/// What the server must do with a version 4 record (after the module id): one string, then the
/// end marker.
pub(super) fn expect_record(r: &mut Reader, now: i64) -> Expect {
    let fields = (|| {
        let record = r.string_field()?;
        (r.value()? == OPCODE_EOF).then_some(record)
    })();
    let Some(record) = fields else {
        return Expect::Refused;
    };
    // An LZF string that does not decompress here.
    let Some(record) = record else {
        return Expect::Either;
    };
    judge_record(r, &record, now)
}

/// The record string read, its code deciding the rest.
fn judge_record(r: &Reader, b: &[u8], now: i64) -> Expect {
    let Some(&code) = b.first() else {
        return Expect::Refused;
    };
    let mut at = 1;
    let Some(first) = read_varint(b, &mut at) else {
        return Expect::Refused;
    };
    match u64::from(code) {
        MODE_GATE => {
            // A gate's fence is not bounded: it never feeds the fence clock.
            if at != b.len() || !valid_fence(first) {
                Expect::Refused
            } else if !at_trailer(r) {
                Expect::Either
            } else {
                Expect::Gate { fence: first }
            }
        }
        code @ (MODE_EXCLUSIVE | MODE_EXCLUSIVE_WITH_DATA) => {
            let (token, data) = if code == MODE_EXCLUSIVE_WITH_DATA {
                let Some(len) = read_varint(b, &mut at) else {
                    return Expect::Refused;
                };
                if len > (b.len() - at) as u64 {
                    return Expect::Refused;
                }
                let (token, data) = b[at..].split_at(len as usize);
                (token, Some(data))
            } else {
                (&b[at..], None)
            };
            let data_ok = data.is_none_or(|d| (1..=MAX_DATA).contains(&d.len()));
            if token.is_empty() || token.len() > MAX_TOKEN || !data_ok {
                return Expect::Refused;
            }
            match restorable(first, now) {
                Some(false) => Expect::Refused,
                Some(true) if at_trailer(r) => Expect::Lock {
                    token: token.to_vec(),
                    fence: first,
                    data: data.map(<[u8]>::to_vec),
                },
                _ => Expect::Either,
            }
        }
        code
        @ (MODE_SHARED | MODE_SEMAPHORE | MODE_SHARED_WITH_DATA | MODE_SEMAPHORE_WITH_DATA) => {
            let with_data = code > MODE_SEMAPHORE;
            let mode = if with_data {
                code - WITH_DATA_OFFSET
            } else {
                code
            };
            let Some(count) = read_varint(b, &mut at) else {
                return Expect::Refused;
            };
            judge_packed(r, mode, first, count, &b[at..], with_data, now)
        }
        _ => Expect::Refused,
    }
}

/// Values a number in a record is rewritten to: the edges of varint lengths, tokens, data,
/// limits, 32 bits and fences.
const NUMBERS: [u64; 14] = [
    0,
    1,
    127,
    128,
    MAX_TOKEN as u64,
    MAX_TOKEN as u64 + 1,
    MAX_DATA as u64 + 1,
    MAX_LIMIT,
    MAX_LIMIT + 1,
    1 << 32,
    (1 << 32) + 2,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
];

/// Where the `nth` varint of a record (after its code) starts and ends, if it reads as one.
fn varint_span(record: &[u8], nth: usize) -> Option<(usize, usize)> {
    let mut at = 1;
    for _ in 0..nth {
        read_varint(record, &mut at)?;
    }
    let start = at;
    read_varint(record, &mut at)?;
    Some((start, at))
}

/// One random change inside a record string, with a label: cut short, its code replaced, a byte
/// changed, inserted or deleted, bytes appended, or its first or second number (fence, limit,
/// token length or count) rewritten to an extreme or in a longer form than its shortest.
pub(super) fn damage_record(rng: &mut StdRng, record: &[u8]) -> (String, Vec<u8>) {
    let mut rec = record.to_vec();
    let any = |rng: &mut StdRng| {
        if rng.gen() {
            rng.gen()
        } else {
            BYTES[rng.gen_range(0..BYTES.len())]
        }
    };
    let kind = rng.gen_range(0..9);
    if rec.is_empty() || kind == 0 {
        let n = rng.gen_range(0..rec.len().max(1));
        rec.truncate(n);
        return (format!("record cut to {n} bytes"), rec);
    }
    let at = rng.gen_range(0..rec.len());
    match kind {
        1 => {
            rec[0] = if rng.gen() {
                rng.gen_range(0..8)
            } else {
                rng.gen()
            };
            (format!("record code := {}", rec[0]), rec)
        }
        2 => {
            rec[at] = any(rng);
            (format!("record byte {at} := {:#04x}", rec[at]), rec)
        }
        3 => {
            let v = any(rng);
            let at = rng.gen_range(0..=rec.len());
            rec.insert(at, v);
            (format!("record byte {v:#04x} inserted at {at}"), rec)
        }
        4 => {
            rec.remove(at);
            (format!("record byte {at} deleted"), rec)
        }
        5 => {
            let n = rng.gen_range(1..4);
            rec.extend((0..n).map(|_| any(rng)));
            (format!("{n} bytes after the record"), rec)
        }
        _ => {
            let nth = rng.gen_range(0..2);
            let Some((start, end)) = varint_span(&rec, nth) else {
                rec[at] = any(rng);
                return (format!("record byte {at} := {:#04x}", rec[at]), rec);
            };
            let (label, number) = match rng.gen_range(0..4) {
                0 => {
                    // The same number, one byte longer than its shortest form.
                    let mut n = rec[start..end].to_vec();
                    *n.last_mut().unwrap() |= 0x80;
                    n.push(0);
                    ("in a longer form".to_string(), n)
                }
                1 => (
                    "as 11 bytes".to_string(),
                    [[0xff; 10].as_slice(), &[0x01]].concat(),
                ),
                _ => {
                    let v = NUMBERS[rng.gen_range(0..NUMBERS.len())];
                    let mut n = Vec::new();
                    put_varint(&mut n, v);
                    (format!(":= {v}"), n)
                }
            };
            rec.splice(start..end, number);
            (format!("record number {nth} {label}"), rec)
        }
    }
}

#[test]
fn forged_records_get_an_exact_answer() {
    let mut b = Bench::start();
    let base = b.dump_of("forge", b"forged");
    let id = module_id(&base.body);
    let v3 = (id & !1023) | HOLDS_PACKED_ENCODING_VERSION;
    let now = now_ms();
    let fence = fence_at(0, now);
    let lease = now + 3_600_000;
    let long = [b'l'; MAX_TOKEN];
    let single = |mode: u64, fence: u64, token: &[u8], data: Option<&[u8]>| {
        single_record(mode, fence, token, data)
    };
    // A code and this fence, then `rest`.
    let fenced = |code: u8, rest: &[u8]| {
        let mut out = vec![code];
        put_varint(&mut out, fence);
        out.extend_from_slice(rest);
        out
    };
    let two = vec![hold(b"r1", fence + 1, lease), hold(b"r2", fence + 2, lease)];
    let holds = encode_holds(&two);
    let holders = |code: u64, limit: u64, count: u64| holders_record(code, limit, count, &holds);
    let mut with_data = two.clone();
    with_data[1].data = Some(b"d".to_vec());
    let big = |n: u64| {
        let mut out = Vec::new();
        put_varint(&mut out, n);
        out
    };
    let refused: Vec<(&str, Vec<u8>)> = vec![
        ("an empty record", vec![]),
        ("code 7", fenced(7, b"t")),
        ("code 255", fenced(0xff, b"t")),
        ("a decimal string", b"1234567".to_vec()),
        ("no fence", vec![0]),
        ("fence 0", single(0, 0, b"t", None)),
        ("fence 2^63", single(0, 1 << 63, b"t", None)),
        ("fence 2^64-1", single(0, u64::MAX, b"t", None)),
        (
            "fence two days ahead",
            single(0, fence_at(0, now + 2 * DAY_MS), b"t", None),
        ),
        (
            "fence 65 promotions ahead",
            single(0, fence_at(65, now), b"t", None),
        ),
        (
            "a fence not in its shortest form",
            vec![0, 0x81, 0x00, b't'],
        ),
        (
            "an 11-byte fence",
            [&[0][..], &[0xff; 10], &[0x01, b't']].concat(),
        ),
        (
            "a fence past 64 bits",
            [&[0][..], &[0xff; 9], &[0x02, b't']].concat(),
        ),
        ("no token", single(0, fence, b"", None)),
        (
            "a 513-byte token",
            single(0, fence, &[b't'; MAX_TOKEN + 1], None),
        ),
        ("a gate with a byte after its fence", fenced(1, b"t")),
        ("a gate with fence 0", vec![1, 0]),
        ("a gate with no fence", vec![1]),
        ("a gate with fence 2^63", single(1, 1 << 63, b"", None)),
        (
            "a gate with a fence not in its shortest form",
            vec![1, 0x81, 0x00],
        ),
        ("with data: none", single(4, fence, b"t", Some(b""))),
        (
            "with data: 4097 bytes",
            single(4, fence, b"t", Some(&[b'd'; MAX_DATA + 1])),
        ),
        ("with data: no token", single(4, fence, b"", Some(b"d"))),
        (
            "with data: a 513-byte token",
            single(4, fence, &[b't'; MAX_TOKEN + 1], Some(b"d")),
        ),
        (
            "with data: a token longer than the rest",
            fenced(4, &[3, b't', b'd']),
        ),
        (
            "with data: a token length of 2^64-1",
            fenced(4, &[[0xff; 9].as_slice(), &[0x01, b't', b'd']].concat()),
        ),
        (
            "with data: a token length not in its shortest form",
            fenced(4, &[0x81, 0x00, b't', b'd']),
        ),
        ("with data: no token length", fenced(4, b"")),
        (
            "with data: fence two days ahead",
            single(4, fence_at(0, now + 2 * DAY_MS), b"t", Some(b"d")),
        ),
        ("with data: fence 0", single(4, 0, b"t", Some(b"d"))),
        ("shared with limit 1", holders(MODE_SHARED, 1, 2)),
        ("semaphore LIMIT 0", holders(MODE_SEMAPHORE, 0, 2)),
        ("semaphore LIMIT 1", holders(MODE_SEMAPHORE, 1, 2)),
        (
            "semaphore LIMIT 1000001",
            holders(MODE_SEMAPHORE, MAX_LIMIT + 1, 2),
        ),
        // Its low 32 bits are 2: a limit cut to 32 bits would hold both.
        (
            "semaphore LIMIT 2^32+2",
            holders(MODE_SEMAPHORE, (1 << 32) + 2, 2),
        ),
        (
            "a limit not in its shortest form",
            [&[3, 0x83, 0x00, 2][..], &holds].concat(),
        ),
        (
            "a count not in its shortest form",
            [&[2, 0, 0x82, 0x00][..], &holds].concat(),
        ),
        ("no limit", vec![3]),
        ("no count", vec![3, 3]),
        ("count 0, no holds", holders_record(MODE_SHARED, 0, 0, b"")),
        ("count 1 of 2", holders(MODE_SHARED, 0, 1)),
        ("count 3 of 2", holders(MODE_SHARED, 0, 3)),
        ("count 2^64-1", holders(MODE_SEMAPHORE, 3, u64::MAX)),
        (
            "a byte after the holds",
            [holders(MODE_SHARED, 0, 2), vec![0]].concat(),
        ),
        (
            "holds without data under the code with data",
            holders(MODE_SHARED_WITH_DATA, 0, 2),
        ),
        (
            "holds with data under the code without",
            holders_record(MODE_SEMAPHORE, 3, 2, &encode_holds(&with_data)),
        ),
        (
            "holds with data, count 2^64-1",
            [&[6, 3][..], &big(u64::MAX), &encode_holds(&with_data)].concat(),
        ),
    ];
    for (what, record) in &refused {
        let payload = base.seal(&record_body(id, record));
        assert_eq!(b.expect(&payload), Expect::Refused, "{what}");
        b.case(what, &payload, &Expect::Refused);
    }
    // One layout under the other version, and a body that is not one string then the end marker.
    let lock = Fields::lock(id, fence, b"t");
    let layouts: Vec<(&str, Vec<u8>)> = vec![
        ("fields under version 4", lock.laid_out(false)),
        (
            "a record under version 3",
            Fields {
                module_id: v3,
                ..lock.clone()
            }
            .laid_out(true),
        ),
        (
            "holds packed in fields under version 4",
            with_layout(
                HolderFields::new(id, Kind::Shared, two.clone()),
                Layout::Packed,
            ),
        ),
        (
            "a holders record under version 3",
            with_layout(
                HolderFields::new(v3, Kind::Shared, two.clone()),
                Layout::Record,
            ),
        ),
        ("the record as a number", {
            let mut body = lock.body();
            body[1 + enc_len(id).len()] = OPCODE_UINT as u8;
            body
        }),
        ("two records", {
            let mut body = lock.body();
            body.pop();
            push_string(&mut body, &lock.record());
            body.extend(enc_len(OPCODE_EOF));
            body
        }),
        ("no end marker", {
            let mut body = lock.body();
            body.pop();
            body
        }),
    ];
    for (what, body) in &layouts {
        let payload = base.seal(body);
        assert_eq!(b.expect(&payload), Expect::Refused, "{what}");
        b.case(what, &payload, &Expect::Refused);
    }
    let locked = |token: &[u8], fence: u64, data: Option<&[u8]>| Expect::Lock {
        token: token.to_vec(),
        fence,
        data: data.map(<[u8]>::to_vec),
    };
    let epoch64 = fence_at(64, now);
    let accepted: Vec<(&str, Vec<u8>, Expect)> = vec![
        ("fence 1", single(0, 1, b"t", None), locked(b"t", 1, None)),
        (
            "fence 64 promotions ahead",
            single(0, epoch64, b"t", None),
            locked(b"t", epoch64, None),
        ),
        (
            "a 512-byte token",
            single(0, fence, &long, None),
            locked(&long, fence, None),
        ),
        // Bytes that would read as numbers are the token's.
        (
            "a token of varint bytes",
            single(0, fence, &[0x80, 0x80, 0x00], None),
            locked(&[0x80, 0x80, 0x00], fence, None),
        ),
        ("a gate with fence 1", vec![1, 1], Expect::Gate { fence: 1 }),
        (
            "a gate with fence 2^63-1",
            single(1, i64::MAX as u64, b"", None),
            Expect::Gate {
                fence: i64::MAX as u64,
            },
        ),
        (
            "with data: a byte each",
            single(4, fence, b"t", Some(b"d")),
            locked(b"t", fence, Some(b"d")),
        ),
        (
            "with data: both at their longest",
            single(4, fence, &long, Some(&[0xa5; MAX_DATA])),
            locked(&long, fence, Some(&[0xa5; MAX_DATA])),
        ),
        (
            "with data: data that reads as a record",
            single(4, fence, b"t", Some(&single(0, fence, b"x", None))),
            locked(b"t", fence, Some(&single(0, fence, b"x", None))),
        ),
        (
            "shared, two holders",
            holders(MODE_SHARED, 0, 2),
            Expect::Holders {
                kind: Kind::Shared,
                holds: two.clone(),
            },
        ),
        (
            "semaphore LIMIT 1000000",
            holders(MODE_SEMAPHORE, MAX_LIMIT, 2),
            Expect::Holders {
                kind: Kind::Semaphore { limit: MAX_LIMIT },
                holds: two.clone(),
            },
        ),
        (
            "semaphore LIMIT 2 with data, full",
            holders_record(MODE_SEMAPHORE_WITH_DATA, 2, 2, &encode_holds(&with_data)),
            Expect::Holders {
                kind: Kind::Semaphore { limit: 2 },
                holds: with_data.clone(),
            },
        ),
    ];
    for (what, record, want) in &accepted {
        let payload = base.seal(&record_body(id, record));
        assert_eq!(b.expect(&payload), *want, "{what}");
        b.case(what, &payload, want);
    }
    println!(
        "RESTORE-FORGED-RECORDS cases={} accepted={} refused={}",
        b.n, b.accepted, b.refused
    );
    b.finish("forged records");
}

/// `fields` laid out as another version lays them out, under its own version.
fn with_layout(fields: HolderFields, layout: Layout) -> Vec<u8> {
    HolderFields { layout, ..fields }.body()
}
