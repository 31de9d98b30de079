//! Input generators for the plain random driver: mostly well-formed inputs with mutations, so
//! that a few hundred thousand cases reach the interesting branches without libFuzzer's
//! coverage feedback. Each produces bytes in the format its target reads.

/// splitmix64: small, fast, and the same sequence for the same seed everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "-0",
    "+1",
    "01",
    " 1",
    "1 ",
    "1.5",
    "1e3",
    "",
    "-",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775",
    "9223372036854776",
    "99999999999999999999999",
    "１",
];

const OPTIONS: &[&str] = &[
    "EX", "PX", "BLOCK", "ex", "px", "block", "Ex", "bLoCk", "NX", "KEEPTTL", "EXAT", "",
];

fn number(r: &mut Rng) -> Vec<u8> {
    match r.below(4) {
        0 => r.pick(NUMBERS).as_bytes().to_vec(),
        1 => (r.below(200_000) + 1).to_string().into_bytes(),
        2 => (r.next_u64() as i64).to_string().into_bytes(),
        _ => r.next_u64().to_string().into_bytes(),
    }
}

fn text(r: &mut Rng) -> Vec<u8> {
    match r.below(8) {
        0 => b"*".to_vec(),
        1 => Vec::new(),
        2 => vec![b'x'; MAX_TOKEN_LEN],
        3 => vec![b'y'; MAX_TOKEN_LEN + 1],
        // Non-ASCII text, valid UTF-8 or not, for error messages that echo it.
        4 => {
            let c = char::from_u32(r.below(0x3_0000) as u32).unwrap_or('\u{100}');
            let mut s = String::from("o");
            for _ in 0..r.below(4) + 1 {
                s.push(c);
            }
            s.into_bytes()
        }
        _ => {
            let n = r.below(80) as usize;
            r.bytes(n)
        }
    }
}

use redislock::core::token::MAX_TOKEN_LEN;

fn any(r: &mut Rng) -> Vec<u8> {
    match r.below(4) {
        0 => number(r),
        1 => r.pick(OPTIONS).as_bytes().to_vec(),
        _ => text(r),
    }
}

/// One argument vector for parser `sel` (see `crate::args`).
fn argv_for(r: &mut Rng, sel: u8) -> Vec<Vec<u8>> {
    let mut argv: Vec<Vec<u8>> = vec![b"lock.cmd".to_vec(), b"key".to_vec()];
    match sel {
        0 | 1 => {
            argv.push(if r.chance(70) {
                b"tok".to_vec()
            } else {
                text(r)
            });
            let mut opts: Vec<Vec<Vec<u8>>> = vec![vec![
                r.pick(&["EX", "PX", "ex", "px"]).as_bytes().to_vec(),
                if r.chance(60) {
                    (r.below(100_000) + 1).to_string().into_bytes()
                } else {
                    number(r)
                },
            ]];
            if sel == 0 && r.chance(50) {
                opts.push(vec![b"BLOCK".to_vec(), number(r)]);
            }
            if r.chance(15) {
                opts.push(vec![r.pick(OPTIONS).as_bytes().to_vec(), number(r)]);
            }
            if r.chance(50) {
                opts.reverse();
            }
            argv.extend(opts.into_iter().flatten());
        }
        2 => argv.push(text(r)),
        3 => {
            argv.push(text(r));
            argv.push(number(r));
            if r.chance(60) {
                argv.push(number(r));
            }
        }
        4 => {
            argv.truncate(1);
            argv.push(number(r));
        }
        _ => {}
    }
    for _ in 0..r.below(3) {
        if argv.is_empty() || !r.chance(35) {
            continue;
        }
        let i = r.below(argv.len() as u64) as usize;
        match r.below(4) {
            0 => argv[i] = any(r),
            1 => {
                argv.remove(i);
            }
            2 => {
                let a = any(r);
                argv.insert(i, a);
            }
            _ => {
                let a = argv[i].clone();
                argv.push(a);
            }
        }
    }
    argv
}

/// Input for `crate::args`.
pub fn args(r: &mut Rng) -> Vec<u8> {
    if r.chance(5) {
        let n = r.below(64) as usize;
        return r.bytes(n);
    }
    let sel = r.below(6) as u8;
    let argv = argv_for(r, sel);
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

/// Input for `crate::record`.
pub fn record(r: &mut Rng) -> Vec<u8> {
    let encver: i32 = if r.chance(85) { 1 } else { r.next_u64() as i32 };
    let mode: u64 = if r.chance(85) { 0 } else { r.below(4) };
    let fence: u64 = match r.below(6) {
        0 => 0,
        1 => u64::MAX,
        2 => i64::MAX as u64,
        3 => i64::MAX as u64 + 1,
        _ => r.next_u64() >> r.below(64),
    };
    let len = match r.below(6) {
        0 => 0,
        1 => MAX_TOKEN_LEN,
        2 => MAX_TOKEN_LEN + 1,
        _ => r.below(64) as usize + 1,
    };
    let mut out = Vec::with_capacity(20 + len);
    out.extend_from_slice(&encver.to_le_bytes());
    out.extend_from_slice(&mode.to_le_bytes());
    out.extend_from_slice(&fence.to_le_bytes());
    out.extend(r.bytes(len));
    out
}

/// Input for `crate::fence`.
pub fn fence(r: &mut Rng) -> Vec<u8> {
    let ops = r.below(64) as usize + 1;
    let mut out = Vec::with_capacity(ops * 9);
    let mut now: u64 = r.below(70 * 365 * 86_400_000);
    for _ in 0..ops {
        let op = *r.pick(&[0u8, 0, 0, 0, 1, 2, 3, 4]);
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
            _ => 0,
        };
        out.push(op);
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}
