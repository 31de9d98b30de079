//! Payloads built field by field with random values.

use super::*;

/// A payload built from fields at their extremes, or with its structure rewritten.
pub(super) fn structured(rng: &mut StdRng, id: u64) -> (String, Vec<u8>) {
    let now = now_ms();
    let fences = [
        0,
        1,
        i64::MAX as u64,
        1 << 63,
        u64::MAX,
        fence_at(0, now),
        fence_at(0, now + 2 * DAY_MS),
        fence_at(0, now + DAY_MS / 2),
        fence_at(64, now),
        fence_at(65, now),
        fence_at(4095, now),
        rng.gen(),
        rng.gen::<u64>() >> 1,
    ];
    let token_lens = [0usize, 1, 2, 511, MAX_TOKEN, MAX_TOKEN + 1, 4096, 70_000];
    let version = |v: u64| (id & !1023) | v;
    let ids = [
        id,
        id,
        id,
        id,
        id & !1023,
        version(LEGACY_ENCODING_VERSION),
        version(FIELDS_ENCODING_VERSION),
        version(HOLDS_PACKED_ENCODING_VERSION),
        version(HOLDS_PACKED_ENCODING_VERSION),
        version(ENCODING_VERSION + 1),
        version(1023),
        id ^ (1 << 20),
        id ^ (1 << 63),
        1,
    ];
    let modes = [
        MODE_EXCLUSIVE,
        MODE_EXCLUSIVE,
        MODE_EXCLUSIVE,
        MODE_GATE,
        MODE_SHARED,
        MODE_SEMAPHORE,
        MODE_EXCLUSIVE_WITH_DATA,
        MODE_EXCLUSIVE_WITH_DATA,
        u64::MAX,
    ];
    let mut f = Fields {
        module_id: ids[rng.gen_range(0..ids.len())],
        mode: modes[rng.gen_range(0..modes.len())],
        fence: fences[rng.gen_range(0..fences.len())],
        token: vec![b't'; 5],
        data: None,
    };
    if rng.gen_bool(0.3) {
        let n = token_lens[rng.gen_range(0..token_lens.len())];
        f.token = (0..n).map(|_| rng.gen()).collect();
    }
    // Data with the mode that says so, mostly; of a length at or past its bounds at times.
    if rng.gen_bool(if f.mode == MODE_EXCLUSIVE_WITH_DATA {
        0.9
    } else {
        0.05
    }) {
        let n = [0, 1, 2, 13, MAX_DATA, MAX_DATA + 1][rng.gen_range(0..6)];
        f.data = Some((0..n).map(|_| rng.gen()).collect());
    }
    let record = f.is_record();
    let label = format!(
        "fields id={:#x} mode={} fence={} token={}B data={:?}",
        f.module_id,
        f.mode,
        f.fence,
        f.token.len(),
        f.data.as_ref().map(Vec::len)
    );
    let body = f.body();
    // The body's last string: the token, the data, or the record (version 4).
    let (head, last) = (f.head(record), f.last(record));
    // Sometimes also lie about the last string's length, swap the field kinds, or change the
    // record inside.
    let shape = rng.gen_range(0..7);
    let (label, body) = match shape {
        0 => {
            let claims = [
                u64::from(u32::MAX),
                u64::MAX,
                1 << 40,
                last.len() as u64 + 1,
            ][rng.gen_range(0..4)];
            let mut b = head;
            b.extend(enc_len(OPCODE_STRING));
            b.extend(enc_len(claims));
            b.extend_from_slice(&last);
            b.extend(enc_len(OPCODE_EOF));
            (format!("{label}, last string's length claims {claims}"), b)
        }
        1 => {
            // The last string as an integer-encoded or an LZF string with a garbage stream.
            let mut b = head;
            b.extend(enc_len(OPCODE_STRING));
            let enc = rng.gen_range(0xc0..=0xc5u8);
            b.push(enc);
            b.extend((0..rng.gen_range(0..12)).map(|_| rng.gen::<u8>()));
            b.extend(enc_len(OPCODE_EOF));
            (format!("{label}, last string's encoding {enc:#04x}"), b)
        }
        2 if record => {
            let mut b = body;
            b[1 + enc_len(f.module_id).len()] = OPCODE_UINT as u8;
            (format!("{label}, record typed as a number"), b)
        }
        2 => {
            let mut b = body;
            // The fence's opcode says "string".
            let at = 1 + enc_len(f.module_id).len() + 1 + enc_len(f.mode).len();
            b[at] = OPCODE_STRING as u8;
            (format!("{label}, fence typed as a string"), b)
        }
        3 => {
            let mut b = body;
            b.pop();
            if rng.gen() {
                b.push(0x02);
            }
            (format!("{label}, no end marker"), b)
        }
        4 if record => {
            let (how, last) = packed::damage_record(rng, &last);
            (
                format!("{label}, {how}"),
                packed::record_body(f.module_id, &last),
            )
        }
        _ => (label, body),
    };
    (label, body)
}

/// A key with holders built from fields at their extremes: kinds and limits, counts that lie,
/// tokens and fences at their bounds or repeated, leases that ended, another encoding version.
pub(super) fn structured_holders(rng: &mut StdRng, id: u64) -> (String, Vec<u8>) {
    let now = now_ms();
    let pick = |rng: &mut StdRng, from: &[u64]| from[rng.gen_range(0..from.len())];
    let fences = [
        0,
        1,
        i64::MAX as u64,
        1 << 63,
        u64::MAX,
        fence_at(0, now + 2 * DAY_MS),
        fence_at(0, now + DAY_MS / 2),
        fence_at(64, now),
        fence_at(65, now),
        rng.gen::<u64>() >> 1,
    ];
    let leases = [
        -1,
        0,
        i64::MIN,
        i64::MAX,
        now - 60_000,
        now + MAX_TTL_MS + DAY_MS,
    ];
    let token_lens = [0usize, 1, 2, MAX_TOKEN, MAX_TOKEN + 1];
    // Mostly a few holds; sometimes enough for the module's indexed form, then mostly valid.
    let (n, good) = if rng.gen_bool(0.15) {
        (rng.gen_range(15..=24u64), 0.99)
    } else {
        (rng.gen_range(0..=4u64), 0.8)
    };
    let mut holds: Vec<Hold> = (0..n)
        .map(|i| Hold {
            fence: if rng.gen_bool(good) {
                fence_at(0, now) + i + 1
            } else {
                pick(rng, &fences)
            },
            expire_at: if rng.gen_bool(good) {
                now + 3_600_000 + rng.gen_range(0..3)
            } else {
                leases[rng.gen_range(0..leases.len())]
            },
            token: if rng.gen_bool(good) {
                format!("h{i}").into_bytes()
            } else {
                let len = token_lens[rng.gen_range(0..token_lens.len())];
                (0..len).map(|_| rng.gen()).collect()
            },
            data: None,
        })
        .collect();
    // Public data on some holds of some sets: mostly short, sometimes at or past its bound.
    if rng.gen_bool(0.3) {
        for h in holds.iter_mut() {
            if rng.gen_bool(0.5) {
                continue;
            }
            let len = match rng.gen_range(0..10) {
                0 => MAX_DATA,
                1 => MAX_DATA + 1,
                _ => rng.gen_range(1..40),
            };
            h.data = Some((0..len).map(|_| rng.gen()).collect());
        }
    }
    // A token or a fence twice.
    if n >= 2 && rng.gen_bool(0.2) {
        let (from, to) = (0, rng.gen_range(1..n as usize));
        if rng.gen() {
            holds[to].token = holds[from].token.clone();
        } else {
            holds[to].fence = holds[from].fence;
        }
    }
    let versions = [
        ENCODING_VERSION,
        HOLDS_PACKED_ENCODING_VERSION,
        FIELDS_ENCODING_VERSION,
        LEGACY_ENCODING_VERSION,
        0,
        ENCODING_VERSION + 1,
        1023,
    ];
    let version = match rng.gen_range(0..10) {
        0..=4 => ENCODING_VERSION,
        5 => HOLDS_PACKED_ENCODING_VERSION,
        6 | 7 => FIELDS_ENCODING_VERSION,
        _ => pick(rng, &versions),
    };
    // Each version its own layout, mostly; versions 3 and 4 pack the holds in the order of their
    // lease ends, mostly.
    let layout = match rng.gen_range(0..30) {
        0 => Layout::Fields,
        1 => Layout::Packed,
        2 => Layout::Record,
        _ => Layout::of(version),
    };
    let packed = layout != Layout::Fields;
    if packed && rng.gen_bool(0.8) {
        holds.sort_by_key(|h| (h.expire_at, h.fence));
    }
    let mut mode = pick(rng, &[MODE_SHARED, MODE_SEMAPHORE, MODE_SEMAPHORE, 4]);
    let limits = [1, 2, 3, MAX_LIMIT, 0, MAX_LIMIT + 1, 1 << 32, (1 << 32) + 2];
    let limit = match (mode, rng.gen_bool(0.8)) {
        (MODE_SHARED, true) => 0,
        (_, true) => n.max(pick(rng, &[1, 3, 30])),
        _ => pick(rng, &limits),
    };
    // Holds with data have the mode that says so; mostly.
    let says_data = rng.gen_bool(if any_data(&holds) { 0.85 } else { 0.05 });
    if says_data && matches!(mode, MODE_SHARED | MODE_SEMAPHORE) {
        mode += WITH_DATA_OFFSET;
    }
    let count = if rng.gen_bool(0.8) {
        n
    } else {
        pick(rng, &[n + 1, n.saturating_sub(1), 1 << 32, u64::MAX])
    };
    // Sometimes the packed holds themselves are damaged: a byte changed, one more, one less.
    let mut damage = String::new();
    let packed_holds = (packed && rng.gen_bool(0.3)).then(|| {
        let mut p = encode_holds(&holds);
        match (rng.gen_range(0..3), p.len()) {
            (0, len) if len > 0 => {
                let at = rng.gen_range(0..len);
                p[at] = if rng.gen() {
                    rng.gen()
                } else {
                    BYTES[rng.gen_range(0..BYTES.len())]
                };
                damage = format!(", packed byte {at} := {:#04x}", p[at]);
            }
            (1, len) if len > 0 => {
                let at = rng.gen_range(0..len);
                p.remove(at);
                damage = format!(", packed byte {at} deleted");
            }
            _ => {
                let at = rng.gen_range(0..=p.len());
                p.insert(at, BYTES[rng.gen_range(0..BYTES.len())]);
                damage = format!(", packed byte inserted at {at}");
            }
        }
        p
    });
    let f = HolderFields {
        module_id: (id & !1023) | version,
        mode,
        limit,
        count,
        holds,
        layout,
        packed: packed_holds,
    };
    let label =
        format!(
        "holders version={version} {:?} mode={mode} limit={limit} count={count} holds={:?}{damage}",
        f.layout,
        f.holds
            .iter()
            .map(|h| (h.fence, h.expire_at, h.token.len(), h.data.as_ref().map(Vec::len)))
            .collect::<Vec<_>>()
    );
    let mut body = f.body();
    let record = f.layout == Layout::Record;
    match rng.gen_range(0..7) {
        0 => {
            body.pop();
            if rng.gen() {
                body.push(0x02);
            }
            (format!("{label}, no end marker"), body)
        }
        1 if record => {
            body[1 + enc_len(f.module_id).len()] = OPCODE_UINT as u8;
            (format!("{label}, record typed as a number"), body)
        }
        1 => {
            // The limit's opcode says "string".
            let at = 1 + enc_len(f.module_id).len() + 1 + enc_len(f.mode).len();
            body[at] = OPCODE_STRING as u8;
            (format!("{label}, limit typed as a string"), body)
        }
        2 if record => {
            let (how, rec) = packed::damage_record(rng, &f.record());
            (
                format!("{label}, {how}"),
                packed::record_body(f.module_id, &rec),
            )
        }
        _ => (label, body),
    }
}
