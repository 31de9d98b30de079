//! Input generators for the plain random driver: mostly well-formed inputs with mutations, so
//! that a few hundred thousand cases reach the interesting branches without libFuzzer's
//! coverage feedback. Each produces bytes in the format its target reads.

use redislock::core::holders::Hold;
use redislock::core::limits::MAX_DATA_LEN;

use crate::gen::{self, Command, Rng, MAX_TOKEN_LEN};

/// Input for `crate::args`: `[selector, separator, argv joined by separator…]`.
pub fn args(r: &mut Rng) -> Vec<u8> {
    if r.chance(5) {
        let n = r.below(64) as usize;
        return r.bytes(n);
    }
    let sel = r.below(Command::ALL.len() as u64) as u8;
    let argv = gen::fuzz_argv(r, Command::ALL[sel as usize]);
    // A separator byte that no argument holds.
    let mut used = [false; 256];
    for a in &argv {
        for &b in a {
            used[b as usize] = true;
        }
    }
    let Some(sep) = (0..=255u8).rev().find(|&b| !used[b as usize]) else {
        return vec![sel, 0];
    };
    let mut out = vec![sel, sep];
    out.extend(argv.join(&sep));
    out
}

/// A token's length: mostly short, now and then none or at or past the longest; a gate's
/// (`gate`) mostly none.
fn token_len(r: &mut Rng, gate: bool) -> usize {
    match r.below(8) {
        _ if gate && r.chance(80) => 0,
        0 => 0,
        1 => MAX_TOKEN_LEN,
        2 => MAX_TOKEN_LEN + 1,
        _ => r.between(1, 64) as usize,
    }
}

fn fence_value(r: &mut Rng) -> u64 {
    match r.below(6) {
        0 => 0,
        1 => u64::MAX,
        2 => i64::MAX as u64,
        3 => i64::MAX as u64 + 1,
        _ => r.next_u64() >> r.below(64),
    }
}

/// Input for `crate::record`: an exclusive lock or a gate half the time, holders otherwise.
pub fn record(r: &mut Rng) -> Vec<u8> {
    let encver: i32 = match r.below(10) {
        0 => r.next_u64() as i32,
        1 => *r.pick(&[0, 5, -1]),
        _ => r.between(1, 4) as i32,
    };
    let mode: u64 = if r.chance(5) { r.below(8) } else { r.below(4) };
    let mut out = Vec::new();
    out.extend_from_slice(&encver.to_le_bytes());
    out.extend_from_slice(&mode.to_le_bytes());
    if mode < 2 || r.chance(5) {
        let fence = if r.chance(75) {
            r.between(1, i64::MAX as u64)
        } else {
            fence_value(r)
        };
        out.extend_from_slice(&fence.to_le_bytes());
        let len = token_len(r, mode == 1);
        out.extend(r.bytes(len));
        return out;
    }
    let limit: u64 = match r.below(8) {
        0 => 0,
        1 => r.next_u64() >> r.below(64),
        2 => u64::from(gen::MAX_LIMIT) + r.below(2),
        _ => r.between(1, 20),
    };
    out.extend_from_slice(&limit.to_le_bytes());
    let holds = holds(r);
    if encver == 2 {
        // Version 2: each hold's fields, one after another.
        for (token, hold) in &holds {
            out.extend_from_slice(&hold.fence.to_le_bytes());
            out.extend_from_slice(&hold.expire_at.to_le_bytes());
            out.extend_from_slice(&(token.len() as u16).to_le_bytes());
            out.extend_from_slice(token);
        }
        return out;
    }
    // Version 3: a count, then the holds encoded as the module does, mostly in the order it
    // writes them, then bent.
    let mut holds = holds;
    if r.chance(85) {
        holds.sort_by_key(|(_, h)| (h.expire_at, h.fence));
    }
    let mut bytes = crate::record::encode_holds(&holds);
    let mut count = holds.len() as u64;
    match r.below(16) {
        0 => count = count.wrapping_add(*r.pick(&[1, u64::MAX, 1 << 40])),
        1 if !bytes.is_empty() => {
            let i = r.below(bytes.len() as u64) as usize;
            bytes[i] = *r.pick(&[0x80, 0x00, 0xff, 0x01]);
        }
        2 if !bytes.is_empty() => {
            bytes.truncate(r.below(bytes.len() as u64) as usize);
        }
        // A non-shortest varint: a byte of value 0 spelt in two.
        3 => bytes.splice(0..0, [0x80, 0x00]).for_each(drop),
        _ => {}
    }
    out.extend_from_slice(&count.to_le_bytes());
    out.extend(bytes);
    out
}

/// Input for `crate::packed`: a record packed as the module packs it (an exclusive lock, a
/// gate, a lock with data, holders), now and then with a number, a length or a byte bent.
pub fn packed(r: &mut Rng) -> Vec<u8> {
    use crate::record::{encode_holds, put_varint};
    let code = if r.chance(5) {
        r.below(256) as u8
    } else {
        r.below(7) as u8
    };
    let mut out = vec![code];
    match code {
        0 | 1 | 4 => {
            let fence = if r.chance(80) {
                r.between(1, 1 << 52)
            } else {
                fence_value(r)
            };
            put_varint(&mut out, fence);
            let len = token_len(r, code == 1);
            let token = r.bytes(len);
            if code == 4 {
                let stated = match r.chance(90) {
                    true => len as u64,
                    false => r.next_u64() >> r.below(64),
                };
                put_varint(&mut out, stated);
                out.extend(token);
                let data = match r.below(8) {
                    0 => 0,
                    1 => MAX_DATA_LEN,
                    2 => MAX_DATA_LEN + 1,
                    _ => r.between(1, 32) as usize,
                };
                out.extend(r.bytes(data));
            } else {
                out.extend(token);
            }
        }
        _ => {
            let limit = match r.below(6) {
                0 => 0,
                1 => u64::from(u32::MAX) + r.below(2),
                2 => r.next_u64(),
                _ => r.between(1, 20),
            };
            put_varint(&mut out, limit);
            let mut holds = holds(r);
            holds.sort_by_key(|(_, h)| (h.expire_at, h.fence));
            let count = match r.chance(90) {
                true => holds.len() as u64,
                false => r.next_u64() >> r.below(64),
            };
            put_varint(&mut out, count);
            out.extend(encode_holds(&holds));
        }
    }
    match r.below(12) {
        0 if out.len() > 1 => {
            let i = r.between(1, out.len() as u64 - 1) as usize;
            out[i] = *r.pick(&[0x80, 0x00, 0xff, 0x01]);
        }
        1 => out.truncate(r.below(out.len() as u64 + 1) as usize),
        // The first number not in its shortest form.
        2 => out.splice(1..1, [0x80, 0x00]).for_each(drop),
        _ => {}
    }
    out
}

/// A few holds with short or shared lease ends, and now and then one thing the module could
/// not have written.
fn holds(r: &mut Rng) -> Vec<(Vec<u8>, Hold)> {
    let n = match r.below(10) {
        0 => 0,
        1 => r.between(17, 40),
        _ => r.between(1, 6),
    };
    let base = 1_735_689_600_000 + r.below(1 << 20) as i64;
    let mut fence = r.between(1, 1 << 50);
    let mut holds: Vec<(Vec<u8>, Hold)> = (0..n)
        .map(|i| {
            fence += r.between(1, 3000);
            let expire_at = if r.chance(30) {
                base
            } else {
                base + r.below(60_000) as i64
            };
            let token = format!("t{i}-{}", r.below(1000)).into_bytes();
            (token, Hold { fence, expire_at })
        })
        .collect();
    if holds.is_empty() || r.chance(60) {
        return holds;
    }
    let i = r.below(holds.len() as u64) as usize;
    let other = holds[r.below(holds.len() as u64) as usize].clone();
    let (token, hold) = &mut holds[i];
    match r.below(9) {
        0 => token.clear(),
        1 => *token = vec![b'z'; MAX_TOKEN_LEN + r.below(2) as usize],
        2 => *token = other.0,
        3 => hold.fence = other.1.fence,
        4 => hold.fence = fence_value(r),
        5 => hold.expire_at = -1 - r.below(1000) as i64,
        6 => hold.expire_at = i64::MAX - r.below(3) as i64,
        // Around the latest lease end a load accepts (now plus the longest TTL).
        7 => hold.expire_at = crate::record::LATEST_END - 1 + r.below(3) as i64,
        _ => hold.expire_at = 0,
    }
    holds
}

/// Input for `crate::fence`.
pub fn fence(r: &mut Rng) -> Vec<u8> {
    let ops = r.between(1, 64) as usize;
    let mut out = Vec::with_capacity(ops * 9);
    let mut now: u64 = r.below(70 * 365 * 86_400_000);
    for _ in 0..ops {
        let op = *r.pick(&[0u8, 0, 0, 0, 1, 2, 3, 4, 5, 5]);
        let v = match op {
            // Times mostly move forward, sometimes back (clock steps).
            0 => {
                now = if r.chance(10) {
                    now.saturating_sub(r.below(10_000))
                } else {
                    now + r.below(3)
                };
                if r.chance(3) {
                    r.next_u64() | 1
                } else {
                    now << 1
                }
            }
            1 | 3 => match r.below(4) {
                0 => i64::MAX as u64 - r.below(4),
                1 => r.next_u64(),
                _ => r.next_u64() >> r.below(64),
            },
            2 => {
                if r.chance(50) {
                    r.below(4100)
                } else {
                    r.next_u64()
                }
            }
            // A restored fence: around the wall-clock lead and the epoch lead it may have.
            5 if r.chance(80) => {
                let ms = (now + r.below(2 * 86_400_000)).saturating_sub(86_400_000);
                let epoch = r.below(80);
                (epoch << 51) | ((ms & ((1 << 41) - 1)) << 10) | r.below(1024)
            }
            5 => r.next_u64(),
            _ => 0,
        };
        out.push(op);
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Input for `crate::holders`: `[kind][limit]`, then operations `[op][token][value: u32 LE]`.
pub fn holders(r: &mut Rng) -> Vec<u8> {
    let ops = r.between(1, 120) as usize;
    let mut out = vec![r.below(2) as u8, r.between(1, 24) as u8];
    // Phases: mostly grants first (to grow past the compact size), then a mix.
    let grow = r.below(ops as u64 + 1) as usize;
    let tokens = r.between(1, 40);
    for i in 0..ops {
        let op = if i < grow && r.chance(80) {
            0
        } else {
            r.below(8) as u8
        };
        out.push(op);
        out.push(r.below(tokens) as u8);
        let value = match op {
            // Time steps: mostly small, so leases end one by one.
            3 => {
                let span = if r.chance(80) { 2_000 } else { 200_000 };
                r.below(span)
            }
            _ => r.next_u64(),
        } as u32;
        out.extend_from_slice(&value.to_le_bytes());
    }
    out
}
