//! `RESTORE` of damaged and forged lock payloads (SPEC "Server safety"): real `DUMP` payloads of
//! locks, mutated — truncated at every length, bits flipped, bytes inserted and deleted, length
//! prefixes and fences rewritten to extremes, another module id or encoding version — and
//! resealed with a correct trailer (RDB version, CRC64) so that Redis hands them to the module.
//! Every payload gets an answer, the server stays up, nothing else changes, the fence clock is
//! not used up, and what is accepted is a valid lock: exactly the one a reference decoder of the
//! format expects.
//!
//! `REDISLOCK_RESTORE_FUZZ_CASES` (default 300) and `REDISLOCK_RESTORE_FUZZ_SEED` (default: the
//! time) set the random part; `make stress` runs many thousands.
//!
//! Also: a full sync of a dataset with locks to replicas with `repl-diskless-load swapdb` and
//! `on-empty-db`, whose data must end up identical.

use std::time::{Duration, Instant};

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

// ---------------------------------------------------------------------------------------------
// The DUMP format
// ---------------------------------------------------------------------------------------------

/// Redis's CRC64 ("Jones" polynomial, reflected, no final xor), as in its `crc64.c`.
fn crc64(data: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// `RDB_TYPE_MODULE_2`: a module value with typed fields and an end marker.
const TYPE_MODULE_2: u8 = 7;
const OPCODE_EOF: u64 = 0;
const OPCODE_UINT: u64 = 2;
const OPCODE_STRING: u64 = 5;
const ENCODING_VERSION: u64 = 1;
const MAX_TOKEN: usize = 512;
const EPOCH_SHIFT: u32 = 51;
const TIME_BASE_MS: i64 = 1_735_689_600_000;
const DAY_MS: i64 = 86_400_000;

/// An RDB length: 6, 14, 32 or 64 bits.
fn enc_len(n: u64) -> Vec<u8> {
    if n < 64 {
        vec![n as u8]
    } else if n < 16_384 {
        vec![0x40 | (n >> 8) as u8, n as u8]
    } else if n <= u64::from(u32::MAX) {
        let mut v = vec![0x80];
        v.extend_from_slice(&(n as u32).to_be_bytes());
        v
    } else {
        let mut v = vec![0x81];
        v.extend_from_slice(&n.to_be_bytes());
        v
    }
}

/// The fields of a lock value as the module writes them.
#[derive(Clone, Debug)]
struct Fields {
    /// Module type id (54 bits of name) << 10 | encoding version.
    module_id: u64,
    mode: u64,
    fence: u64,
    token: Vec<u8>,
}

impl Fields {
    /// The payload body (without the trailer), token as a raw string.
    fn body(&self) -> Vec<u8> {
        let mut b = vec![TYPE_MODULE_2];
        b.extend(enc_len(self.module_id));
        b.extend(enc_len(OPCODE_UINT));
        b.extend(enc_len(self.mode));
        b.extend(enc_len(OPCODE_UINT));
        b.extend(enc_len(self.fence));
        b.extend(enc_len(OPCODE_STRING));
        b.extend(enc_len(self.token.len() as u64));
        b.extend_from_slice(&self.token);
        b.extend(enc_len(OPCODE_EOF));
        b
    }
}

/// A `DUMP` payload split into its body and the server's RDB version.
#[derive(Clone, Debug)]
struct Dump {
    body: Vec<u8>,
    version: [u8; 2],
}

impl Dump {
    fn parse(payload: &[u8]) -> Dump {
        assert!(payload.len() > 10, "short DUMP payload {payload:?}");
        let (rest, crc) = payload.split_at(payload.len() - 8);
        assert_eq!(
            crc64(rest).to_le_bytes(),
            crc,
            "the CRC64 here is not Redis's"
        );
        let (body, version) = rest.split_at(rest.len() - 2);
        Dump {
            body: body.to_vec(),
            version: [version[0], version[1]],
        }
    }

    /// `body` with this dump's RDB version and a correct CRC.
    fn seal(&self, body: &[u8]) -> Vec<u8> {
        let mut p = body.to_vec();
        p.extend_from_slice(&self.version);
        let crc = crc64(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }
}

// ---------------------------------------------------------------------------------------------
// What the server must do with a payload
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    /// `OK`, and the key is this lock.
    Lock { token: Vec<u8>, fence: u64 },
    /// `OK`, and the key is a fence gate (kind 1, no token) with this fence. A gate's fence is
    /// not bounded: it never feeds the fence clock.
    Gate { fence: u64 },
    /// An error reply; no key.
    Refused,
    /// Either, as long as what is accepted is a valid lock (LZF-compressed tokens, trailing
    /// bytes, fences at the edge of the restore bounds).
    Either,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok()?;
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }

    /// An RDB length, and whether it was a special encoding (`11xxxxxx`); `None` when short or
    /// of an unknown form.
    fn len(&mut self) -> Option<(u64, bool)> {
        let first = self.byte()?;
        Some(match first >> 6 {
            0 => (u64::from(first & 0x3f), false),
            1 => (
                (u64::from(first & 0x3f) << 8) | u64::from(self.byte()?),
                false,
            ),
            3 => (u64::from(first & 0x3f), true),
            _ if first == 0x80 => (
                u64::from(u32::from_be_bytes(self.take(4)?.try_into().ok()?)),
                false,
            ),
            _ if first == 0x81 => (u64::from_be_bytes(self.take(8)?.try_into().ok()?), false),
            _ => return None,
        })
    }

    /// A length where Redis ignores the special-encoding flag (module ids, opcodes, numbers).
    fn value(&mut self) -> Option<u64> {
        self.len().map(|(v, _)| v)
    }

    /// A string: `Ok(Some(bytes))`, `Ok(None)` for an LZF string (not decoded here), `Err` when
    /// Redis cannot read one.
    fn string(&mut self) -> Result<Option<Vec<u8>>, ()> {
        let (n, special) = self.len().ok_or(())?;
        if !special {
            return self.take(n).map(|s| Some(s.to_vec())).ok_or(());
        }
        let int = match n {
            0 => i64::from(self.take(1).ok_or(())?[0] as i8),
            1 => i64::from(i16::from_le_bytes(
                self.take(2).ok_or(())?.try_into().unwrap(),
            )),
            2 => i64::from(i32::from_le_bytes(
                self.take(4).ok_or(())?.try_into().unwrap(),
            )),
            3 => {
                // Compressed and uncompressed lengths, then the compressed bytes.
                let compressed = self.value().ok_or(())?;
                self.value().ok_or(())?;
                self.take(compressed).ok_or(())?;
                return Ok(None);
            }
            _ => return Err(()),
        };
        Ok(Some(int.to_string().into_bytes()))
    }
}

/// What the server must answer to `RESTORE` of `payload` (sealed), at Unix time `now`. Redis
/// reads the value from the whole payload: a damaged body may run on into the trailer.
fn expect(payload: &[u8], module_name_bits: u64, now: i64) -> Expect {
    let mut r = Reader { b: payload, at: 0 };
    let Some(TYPE_MODULE_2) = r.byte() else {
        return Expect::Either;
    };
    let Some(id) = r.value() else {
        return Expect::Refused;
    };
    if id >> 10 != module_name_bits || id & 1023 != ENCODING_VERSION {
        return Expect::Refused;
    }
    let fields = (|| {
        (r.value()? == OPCODE_UINT).then_some(())?;
        let mode = r.value()?;
        (r.value()? == OPCODE_UINT).then_some(())?;
        let fence = r.value()?;
        (r.value()? == OPCODE_STRING).then_some(())?;
        let token = r.string().ok()?;
        (r.value()? == OPCODE_EOF).then_some(())?;
        Some((mode, fence, token))
    })();
    let Some((mode, fence, token)) = fields else {
        return Expect::Refused;
    };
    let Some(token) = token else {
        return Expect::Either;
    };
    if mode == 1 && token.is_empty() {
        if !(1..=i64::MAX as u64).contains(&fence) {
            return Expect::Refused;
        }
        if r.at != payload.len() - 10 {
            return Expect::Either;
        }
        return Expect::Gate { fence };
    }
    if mode != 0 || token.is_empty() || token.len() > MAX_TOKEN {
        return Expect::Refused;
    }
    if !(1..=i64::MAX as u64).contains(&fence) || fence >> EPOCH_SHIFT > 64 {
        return Expect::Refused;
    }
    let ms = ((fence >> 10) & ((1 << 41) - 1)) as i64;
    let limit = now - TIME_BASE_MS + DAY_MS;
    if ms > limit + 60_000 {
        return Expect::Refused;
    }
    if ms > limit - 60_000 || r.at != payload.len() - 10 {
        return Expect::Either;
    }
    Expect::Lock { token, fence }
}

// ---------------------------------------------------------------------------------------------
// Running cases
// ---------------------------------------------------------------------------------------------

/// The fence of the gate at `key`, if the key is a fence gate.
fn gate_fence(con: &mut redis::Connection, key: &str) -> Option<u64> {
    match ok(con, &rcmd!("LOCK.INFO", key)) {
        redis::Value::Array(items)
            if items.len() == 4
                && as_bytes(&items[0]) == b"mode"
                && as_bytes(&items[1]) == b"gate" =>
        {
            Some(as_int(&items[3]) as u64)
        }
        _ => None,
    }
}

const STRING_SENTINEL: &str = "sentinel:string";
const LOCK_SENTINEL: &str = "sentinel:lock";

struct Bench {
    s: Server,
    c: Connection,
    /// The module type id without its encoding version.
    name_bits: u64,
    sentinel_fence: i64,
    last_fence: i64,
    n: usize,
    accepted: usize,
    refused: usize,
}

impl Bench {
    fn start() -> Bench {
        let s = Server::start();
        let mut c = s.conn();
        c.set_read_timeout(Some(Duration::from_secs(5) * time_scale()))
            .unwrap();
        ok(&mut c, &rcmd!("SET", STRING_SENTINEL, "untouched"));
        let (_, sentinel_fence) = grant(&mut c, LOCK_SENTINEL, b"sentinel", 3_600_000);
        let mut b = Bench {
            s,
            c,
            name_bits: 0,
            sentinel_fence,
            last_fence: sentinel_fence,
            n: 0,
            accepted: 0,
            refused: 0,
        };
        let base = b.dump_of("probe", b"probe-token");
        b.name_bits = module_id(&base.body) >> 10;
        b
    }

    /// A lock granted now with `token`, as `DUMP` gives it.
    fn dump_of(&mut self, key: &str, token: &[u8]) -> Dump {
        grant(&mut self.c, key, token, 3_600_000);
        let payload = as_bytes(&ok(&mut self.c, &rcmd!("DUMP", key)));
        ok(&mut self.c, &rcmd!("DEL", key));
        Dump::parse(&payload)
    }

    /// `RESTORE` of `payload` into a fresh key, and every check that follows.
    fn case(&mut self, what: &str, payload: &[u8], want: &Expect) {
        self.n += 1;
        let key = format!("restored:{}", self.n);
        let r = run(&mut self.c, &rcmd!("RESTORE", &key, 0, payload));
        let answered = match &r {
            Ok(v) => {
                assert_eq!(*v, Value::Okay, "{what}: RESTORE answered {v:?}");
                true
            }
            Err(e) => {
                assert!(
                    !e.is_io_error() && !e.is_connection_dropped() && !e.is_timeout(),
                    "{what}: the server did not answer RESTORE: {e}\n{}",
                    self.s.log_tail(20)
                );
                false
            }
        };
        match (want, answered) {
            (Expect::Lock { token, fence }, true) => {
                let held = info_some(&mut self.c, &key);
                assert_eq!(
                    (&held.token, held.fence as u64),
                    (token, *fence),
                    "{what}: restored lock"
                );
            }
            (Expect::Gate { fence }, true) => {
                assert_eq!(
                    gate_fence(&mut self.c, &key),
                    Some(*fence),
                    "{what}: restored gate"
                );
            }
            (Expect::Lock { .. } | Expect::Gate { .. }, false) => panic!(
                "{what}: a valid lock payload was refused: {}",
                err_text(r.as_ref().unwrap_err())
            ),
            (Expect::Refused, true) => panic!(
                "{what}: a damaged payload was accepted: {:?}",
                info(&mut self.c, &key)
            ),
            (_, true) if gate_fence(&mut self.c, &key).is_some() => {
                // A gate a server could hold.
                assert!(gate_fence(&mut self.c, &key) > Some(0), "{what}");
            }
            (_, true) => {
                // Whatever was accepted is a lock a server could hold.
                assert_eq!(type_of(&mut self.c, &key), "redislock", "{what}");
                let held = info_some(&mut self.c, &key);
                assert!(
                    (1..=MAX_TOKEN).contains(&held.token.len()) && held.fence > 0,
                    "{what}: {held:?}"
                );
            }
            (_, false) => {}
        }
        if answered {
            self.accepted += 1;
        } else {
            self.refused += 1;
            assert!(
                !exists(&mut self.c, &key),
                "{what}: a refused RESTORE left a key"
            );
        }
        ok(&mut self.c, &rcmd!("DEL", &key));
        self.assert_healthy(what);
    }

    /// The server answers, the sentinels are as they were, and a new lock gets a fence that is
    /// larger than the last one, not exhausted, and of a plausible epoch.
    fn assert_healthy(&mut self, what: &str) {
        ping(&mut self.c);
        let v = ok(&mut self.c, &rcmd!("GET", STRING_SENTINEL));
        assert_eq!(as_bytes(&v), b"untouched", "{what}: sentinel string");
        let held = info_some(&mut self.c, LOCK_SENTINEL);
        assert_eq!(
            (held.token.as_slice(), held.fence),
            (&b"sentinel"[..], self.sentinel_fence),
            "{what}: sentinel lock"
        );
        let (_, fence) = grant(&mut self.c, "fresh", b"fresh", 10_000);
        assert!(fence > self.last_fence, "{what}: fence {fence} went back");
        assert!(fence < i64::MAX, "{what}: fences exhausted");
        assert!(
            fence >> EPOCH_SHIFT <= 65,
            "{what}: fence {fence} is in epoch {}",
            fence >> EPOCH_SHIFT
        );
        self.last_fence = fence;
        assert_eq!(release(&mut self.c, "fresh", b"fresh"), 1);
    }

    fn expect(&self, payload: &[u8]) -> Expect {
        expect(payload, self.name_bits, now_ms())
    }

    /// Ends a run: no abort, no crash, no module read error in the log.
    fn finish(&mut self, label: &str) {
        self.assert_healthy(label);
        let log = self.s.log();
        assert!(
            !log.contains("Error loading data from RDB"),
            "{label}: a module read error aborted loading\n{}",
            self.s.log_tail(30)
        );
        let crashes = self.s.crash_lines();
        assert!(crashes.is_empty(), "{label}: {}", crashes.join("\n"));
    }
}

fn module_id(body: &[u8]) -> u64 {
    let mut r = Reader { b: body, at: 1 };
    r.value().expect("module id")
}

/// A fence of epoch `epoch` at Unix time `at_ms`.
fn fence_at(epoch: u64, at_ms: i64) -> u64 {
    (epoch << EPOCH_SHIFT) | (((at_ms - TIME_BASE_MS) as u64) << 10)
}

#[test]
fn crc64_is_redis_crc64() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

#[test]
fn the_encoder_writes_what_dump_writes() {
    let mut b = Bench::start();
    for token in [&b"t"[..], b"tok-abcdef", &[0xa5; 20][..], b"\x00\xff\r\n*"] {
        let dump = b.dump_of("enc", token);
        let fence = {
            let mut r = Reader {
                b: &dump.body,
                at: 0,
            };
            r.byte();
            r.value();
            r.value();
            r.value();
            r.value();
            r.value().unwrap()
        };
        let fields = Fields {
            module_id: module_id(&dump.body),
            mode: 0,
            fence,
            token: token.to_vec(),
        };
        assert_eq!(fields.body(), dump.body, "token {token:?}");
        assert_eq!(module_id(&dump.body) & 1023, ENCODING_VERSION);
    }
    b.finish("encoder");
}

#[test]
fn forged_fences_are_refused_and_the_clock_is_not_poisoned() {
    let mut b = Bench::start();
    let base = b.dump_of("forge", b"forged");
    let id = module_id(&base.body);
    let now = now_ms();
    let forge = |fence: u64| {
        Fields {
            module_id: id,
            mode: 0,
            fence,
            token: b"forged".to_vec(),
        }
        .body()
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
        let body = forge(fence);
        assert_eq!(b.expect(&base.seal(&body)), Expect::Refused, "{what}");
        b.case(what, &base.seal(&body), &Expect::Refused);
    }
    assert!(b.last_fence < fence_at(0, now_ms() + 60_000) as i64);
    // Another server's lock from three promotions later: accepted as it is, and the next grant
    // of that key, once released, is greater.
    let epoch3 = fence_at(3, now);
    let body = forge(epoch3);
    let want = Expect::Lock {
        token: b"forged".to_vec(),
        fence: epoch3,
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
        let body = forge(fence);
        let want = Expect::Lock {
            token: b"forged".to_vec(),
            fence,
        };
        assert_eq!(b.expect(&base.seal(&body)), want, "{what}");
        b.case(what, &base.seal(&body), &want);
    }
    b.finish("forged fences");
}

/// Base payloads: real `DUMP`s of locks with tokens of different lengths and contents (some
/// compressed by Redis), and fences of every length encoding (restored, then dumped again).
fn bases(b: &mut Bench) -> Vec<Dump> {
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
    let id = module_id(&out[0].body);
    for fence in [1u64, 63, 64, 16_383, 16_384, u64::from(u32::MAX), 1 << 40] {
        let body = Fields {
            module_id: id,
            mode: 0,
            fence,
            token: b"small-fence".to_vec(),
        }
        .body();
        let payload = out[0].seal(&body);
        ok(&mut b.c, &rcmd!("RESTORE", "base", 0, payload));
        let dump = as_bytes(&ok(&mut b.c, &rcmd!("DUMP", "base")));
        ok(&mut b.c, &rcmd!("DEL", "base"));
        out.push(Dump::parse(&dump));
    }
    out
}

/// Interesting byte values for overwrites: length-encoding boundaries and special encodings.
const BYTES: [u8; 12] = [
    0x00, 0x01, 0x02, 0x05, 0x3f, 0x40, 0x7f, 0x80, 0x81, 0x82, 0xc0, 0xc3,
];

/// One random mutation of `body` (never of its type byte), with a label.
fn mutate(rng: &mut StdRng, body: &[u8], id: u64) -> (String, Vec<u8>) {
    let mut b = body.to_vec();
    let pos = |rng: &mut StdRng, b: &Vec<u8>| rng.gen_range(1..b.len().max(2));
    match rng.gen_range(0..9) {
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
        _ => structured(rng, id),
    }
}

/// A payload built from fields at their extremes, or with its structure rewritten.
fn structured(rng: &mut StdRng, id: u64) -> (String, Vec<u8>) {
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
    let ids = [
        id,
        id,
        id,
        id & !1023,
        (id & !1023) | 2,
        (id & !1023) | 1023,
        id ^ (1 << 20),
        id ^ (1 << 63),
        1,
    ];
    let mut f = Fields {
        module_id: ids[rng.gen_range(0..ids.len())],
        mode: *[0, 0, 0, 1, u64::MAX].get(rng.gen_range(0..5)).unwrap(),
        fence: fences[rng.gen_range(0..fences.len())],
        token: vec![b't'; 5],
    };
    if rng.gen_bool(0.3) {
        let n = token_lens[rng.gen_range(0..token_lens.len())];
        f.token = (0..n).map(|_| rng.gen()).collect();
    }
    let label = format!(
        "fields id={:#x} mode={} fence={} token={}B",
        f.module_id,
        f.mode,
        f.fence,
        f.token.len()
    );
    let body = f.body();
    // Sometimes also lie about the token's length, or swap the field kinds.
    let shape = rng.gen_range(0..6);
    let (label, body) = match shape {
        0 => {
            let claims = [
                u64::from(u32::MAX),
                u64::MAX,
                1 << 40,
                f.token.len() as u64 + 1,
            ][rng.gen_range(0..4)];
            let mut b = Fields {
                token: vec![],
                ..f.clone()
            }
            .body();
            b.pop(); // end marker
            b.pop(); // empty length
            b.extend(enc_len(claims));
            b.extend_from_slice(&f.token);
            b.extend(enc_len(OPCODE_EOF));
            (format!("{label}, token length claims {claims}"), b)
        }
        1 => {
            // The token as an integer-encoded or an LZF string with a garbage stream.
            let mut b = vec![TYPE_MODULE_2];
            b.extend(enc_len(f.module_id));
            b.extend(enc_len(OPCODE_UINT));
            b.extend(enc_len(f.mode));
            b.extend(enc_len(OPCODE_UINT));
            b.extend(enc_len(f.fence));
            b.extend(enc_len(OPCODE_STRING));
            let enc = rng.gen_range(0xc0..=0xc5u8);
            b.push(enc);
            b.extend((0..rng.gen_range(0..12)).map(|_| rng.gen::<u8>()));
            b.extend(enc_len(OPCODE_EOF));
            (format!("{label}, token encoding {enc:#04x}"), b)
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
        _ => (label, body),
    };
    (label, body)
}

fn fuzz_cases() -> usize {
    std::env::var("REDISLOCK_RESTORE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(300)
}

fn fuzz_seed() -> u64 {
    std::env::var("REDISLOCK_RESTORE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| now_ms() as u64)
}

#[test]
fn truncated_at_every_length() {
    let mut b = Bench::start();
    let all = bases(&mut b);
    // Short and long tokens, and a compressed one: every prefix of the body, resealed.
    for base in [&all[0], &all[3], &all[6], &all[7]] {
        for n in 0..base.body.len() {
            let body = &base.body[..n];
            let payload = base.seal(body);
            let want = b.expect(&payload);
            b.case(&format!("truncated to {n}"), &payload, &want);
        }
        // The payload itself, and without its CRC recomputed after a change.
        let want = b.expect(&base.seal(&base.body));
        assert!(matches!(want, Expect::Lock { .. } | Expect::Either));
        b.case("unchanged", &base.seal(&base.body), &want);
        let mut bad_crc = base.seal(&base.body);
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        b.case("wrong CRC", &bad_crc, &Expect::Refused);
        let newer = Dump {
            body: base.body.clone(),
            version: [base.version[0].wrapping_add(1), base.version[1]],
        };
        b.case(
            "newer RDB version",
            &newer.seal(&base.body),
            &Expect::Refused,
        );
    }
    b.finish("truncations");
}

#[test]
fn mutated_payloads_never_hurt_the_server() {
    let cases = fuzz_cases();
    let seed = fuzz_seed();
    println!("RESTORE-FUZZ seed={seed} cases={cases} (REDISLOCK_RESTORE_FUZZ_SEED / _CASES)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut b = Bench::start();
    let all = bases(&mut b);
    let id = module_id(&all[0].body);
    let started = Instant::now();
    for i in 0..cases {
        let base = &all[rng.gen_range(0..all.len())];
        let (label, body) = mutate(&mut rng, &base.body, id);
        let payload = base.seal(&body);
        let want = b.expect(&payload);
        let what = format!("case {i} (seed {seed}): {label}");
        b.case(&what, &payload, &want);
    }
    b.finish(&format!("seed {seed}"));
    println!(
        "RESTORE-FUZZ-SUMMARY cases={} accepted={} refused={} seed={seed} secs={}",
        b.n,
        b.accepted,
        b.refused,
        started.elapsed().as_secs()
    );
}

#[test]
fn replicas_full_sync_locks_with_diskless_load() {
    let master = Server::start();
    let mut c = master.conn();
    for i in 0..50 {
        let token = format!("{i}-{}", "t".repeat(i * 10));
        grant(
            &mut c,
            &format!("l:{i}"),
            token.as_bytes(),
            60_000 + i as i64,
        );
    }
    grant(&mut c, "l:generated", b"*", 60_000);
    let dump = as_bytes(&ok(&mut c, &rcmd!("DUMP", "l:1")));
    ok(&mut c, &rcmd!("RESTORE", "l:restored", 0, dump));
    ok(&mut c, &rcmd!("SET", "plain", "value"));
    let digest = |s: &Server| as_bytes(&ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST")));
    for mode in ["swapdb", "on-empty-db"] {
        let replica = Server::builder()
            .set("repl-diskless-load", mode)
            .replica_of(&master)
            .start();
        replica.wait_info("replication", "master_link_status", "up");
        wait_replica_caught_up(&master, &replica);
        assert_eq!(digest(&replica), digest(&master), "{mode}: DEBUG DIGEST");
        let mut rc = replica.conn();
        assert_eq!(dbsize(&mut rc), dbsize(&mut c), "{mode}");
        let (on_master, on_replica) = (info_some(&mut c, "l:7"), info_some(&mut rc, "l:7"));
        assert_eq!(
            (on_replica.token, on_replica.fence),
            (on_master.token, on_master.fence),
            "{mode}"
        );
        let log = replica.log();
        assert!(!log.contains("Error loading data from RDB"), "{mode}");
        // An empty replica loads straight from the socket: the module handles read errors.
        // (With swapdb, Redis 7.0 loads through a file, since the module does not declare
        // async loading.)
        if mode == "on-empty-db" {
            assert!(
                !log.contains("Skipping diskless-load"),
                "{mode}: {}",
                replica.log_tail(20)
            );
        }
        let crashes = replica.crash_lines();
        assert!(crashes.is_empty(), "{mode}: {}", crashes.join("\n"));
    }
}
