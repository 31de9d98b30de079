//! Random calls of the module's commands, as argument vectors: well-formed ones (for a workload
//! that must get past the parsers) and deliberately odd ones (for the parsers themselves).
//!
//! Plain Rust with no dependencies, not even on the fuzz crate or the module, so that a test of
//! the root crate can include it as it is:
//!
//! ```text
//! #[path = "../../fuzz/src/gen.rs"]
//! mod gen;
//! ```
//!
//! The fuzz crate checks at compile time that the limits below are the core's.

/// The core's limits (`core::limits`), repeated so that this file stands alone.
pub const MAX_TOKEN_LEN: usize = 512;
pub const MAX_TTL_MS: u64 = 1_000_000_000_000;
pub const MAX_BLOCK_MS: u64 = 1_000_000_000_000;
pub const MAX_LIMIT: u32 = 1_000_000;
pub const HOLD_EFFECT_VERSION: u64 = 1;

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

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
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

/// The module's commands: the client ones, then the internal effects that replicas and the AOF
/// replay (an ordinary client gets an error for those).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Acquire,
    Extend,
    Release,
    Info,
    Call,
    Fence,
    Apply,
    Hold,
    Gate,
    Epoch,
}

impl Command {
    pub const ALL: [Command; 10] = [
        Command::Acquire,
        Command::Extend,
        Command::Release,
        Command::Info,
        Command::Call,
        Command::Fence,
        Command::Apply,
        Command::Hold,
        Command::Gate,
        Command::Epoch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Command::Acquire => "LOCK.ACQUIRE",
            Command::Extend => "LOCK.EXTEND",
            Command::Release => "LOCK.RELEASE",
            Command::Info => "LOCK.INFO",
            Command::Call => "LOCK.CALL",
            Command::Fence => "LOCK.FENCE",
            Command::Apply => "LOCK._APPLY",
            Command::Hold => "LOCK._HOLD",
            Command::Gate => "LOCK._GATE",
            Command::Epoch => "LOCK._EPOCH",
        }
    }

    pub fn is_internal(self) -> bool {
        matches!(
            self,
            Command::Apply | Command::Hold | Command::Gate | Command::Epoch
        )
    }
}

/// A call of `cmd` on `key` by `token` that the module's parser accepts: options in any order
/// and case, short TTLs (at most 5 s), `BLOCK` of at most 200 ms (never 0, which waits without
/// limit), `SHARED` or `LIMIT 1..=3` now and then, `EPHEMERAL` rarely. `token` must be 1 to
/// `MAX_TOKEN_LEN` bytes (`*` asks `LOCK.ACQUIRE` to generate one). `LOCK.CALL` and
/// `LOCK.FENCE` run `INCR`, `SET` or `GET` on `{key}:n` or `{key}:v`, and `LOCK.FENCE` uses
/// the gate `{key}:gate`: all in `key`'s cluster slot if `key` has no braces.
pub fn well_formed(r: &mut Rng, cmd: Command, key: &[u8], token: &[u8]) -> Vec<Vec<u8>> {
    build(r, cmd, key, token, false)
}

/// A call of `cmd` for the parsers: mostly plausible, with edge numbers (zero, negative,
/// overflowing, `+1`, `01`, at and past each limit), odd tokens (empty, `*`, over-long,
/// binary, non-ASCII), unknown, repeated and conflicting options; then [`mutate`]d now and then.
pub fn fuzz_argv(r: &mut Rng, cmd: Command) -> Vec<Vec<u8>> {
    let token = if r.chance(70) {
        b"tok".to_vec()
    } else {
        text(r)
    };
    let mut argv = build(r, cmd, b"key", &token, true);
    if r.chance(35) {
        mutate(r, &mut argv);
    }
    argv
}

/// A client command for a soak workload on a few keys shared by a few tokens, so that calls
/// meet: acquires (40%), releases, extends, `LOCK.INFO`, `LOCK.CALL` and `LOCK.FENCE`, each
/// [`well_formed`]. Returns which command it is, for the caller's expectations.
pub fn soak_command(r: &mut Rng, keys: &[&[u8]], tokens: &[&[u8]]) -> (Command, Vec<Vec<u8>>) {
    let cmd = match r.below(100) {
        0..=39 => Command::Acquire,
        40..=59 => Command::Release,
        60..=74 => Command::Extend,
        75..=84 => Command::Info,
        85..=94 => Command::Call,
        _ => Command::Fence,
    };
    let key = *r.pick(keys);
    let token = *r.pick(tokens);
    (cmd, well_formed(r, cmd, key, token))
}

/// Argument-level havoc: up to three times, replace, drop, insert or repeat an argument. The
/// command name (`argv[0]`) stays, so that a server still runs the command.
pub fn mutate(r: &mut Rng, argv: &mut Vec<Vec<u8>>) {
    for _ in 0..r.between(1, 3) {
        if argv.len() < 2 {
            argv.push(any(r));
            continue;
        }
        let i = r.between(1, argv.len() as u64 - 1) as usize;
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
}

/// Numbers a strict integer parser must get right.
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
    "1000000",
    "1000001",
    "1000000000",
    "1000000001",
    "1000000000000",
    "1000000000001",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "１",
];

/// Option names, known to some command or not.
const OPTIONS: &[&str] = &[
    "EX",
    "PX",
    "BLOCK",
    "SHARED",
    "LIMIT",
    "EPHEMERAL",
    "DATA",
    "ex",
    "px",
    "block",
    "Shared",
    "limit",
    "ephemeral",
    "GRANT",
    "END",
    "NX",
    "KEEPTTL",
    "EXAT",
    "",
];

fn any(r: &mut Rng) -> Vec<u8> {
    match r.below(4) {
        0 => number(r),
        1 => r.pick(OPTIONS).as_bytes().to_vec(),
        _ => text(r),
    }
}

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
            for _ in 0..r.between(1, 4) {
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

/// `name` in a random case.
fn cased(r: &mut Rng, name: &str) -> Vec<u8> {
    match r.below(4) {
        0 => name.to_ascii_lowercase().into_bytes(),
        1 => name
            .bytes()
            .map(|b| {
                if r.chance(50) {
                    b.to_ascii_lowercase()
                } else {
                    b
                }
            })
            .collect(),
        _ => name.as_bytes().to_vec(),
    }
}

/// A number in `lo..=hi`, or when `wild`, now and then an edge number instead.
fn value(r: &mut Rng, wild: bool, lo: u64, hi: u64) -> Vec<u8> {
    if wild && r.chance(40) {
        number(r)
    } else {
        r.between(lo, hi).to_string().into_bytes()
    }
}

/// `EX seconds` or `PX milliseconds`.
fn ttl(r: &mut Rng, wild: bool) -> Vec<Vec<u8>> {
    if r.chance(30) {
        vec![cased(r, "EX"), value(r, wild, 1, 5)]
    } else {
        vec![cased(r, "PX"), value(r, wild, 1, 5000)]
    }
}

fn inner_command(r: &mut Rng, key: &[u8]) -> Vec<Vec<u8>> {
    let tagged = |suffix: &[u8]| [&b"{"[..], key, b"}", suffix].concat();
    match r.below(3) {
        0 => vec![b"INCR".to_vec(), tagged(b":n")],
        1 => vec![
            b"SET".to_vec(),
            tagged(b":v"),
            r.below(1000).to_string().into_bytes(),
        ],
        _ => vec![b"GET".to_vec(), tagged(b":v")],
    }
}

fn build(r: &mut Rng, cmd: Command, key: &[u8], token: &[u8], wild: bool) -> Vec<Vec<u8>> {
    let mut argv = vec![cmd.name().as_bytes().to_vec(), key.to_vec()];
    match cmd {
        Command::Acquire | Command::Extend => {
            argv.push(token.to_vec());
            let mut opts = vec![ttl(r, wild)];
            if cmd == Command::Acquire {
                let kind = r.below(4);
                match kind {
                    0 => opts.push(vec![cased(r, "SHARED")]),
                    1 => opts.push(vec![cased(r, "LIMIT"), value(r, wild, 1, 3)]),
                    _ => {}
                }
                if r.chance(10) {
                    opts.push(vec![cased(r, "EPHEMERAL")]);
                }
                // Public data, with any kind of hold.
                if r.chance(10) {
                    // Public data: at its bounds when wild (empty, the longest, one byte over).
                    let len = match (wild, r.below(4)) {
                        (true, 0) => 0,
                        (true, 1) => 4096,
                        (true, 2) => 4097,
                        _ => r.between(1, 24) as usize,
                    };
                    opts.push(vec![cased(r, "DATA"), vec![b'd'; len]]);
                }
                if r.chance(if wild { 50 } else { 20 }) {
                    let block = if wild {
                        value(r, wild, 0, 100_000)
                    } else {
                        r.between(1, 200).to_string().into_bytes()
                    };
                    opts.push(vec![cased(r, "BLOCK"), block]);
                }
            }
            if wild && r.chance(15) {
                // Repeated, conflicting or unknown: the parser must refuse it.
                let name = *r.pick(OPTIONS);
                opts.push(vec![cased(r, name), number(r)]);
            }
            // Any order: shuffle the option groups.
            for i in (1..opts.len()).rev() {
                let j = r.below(i as u64 + 1) as usize;
                opts.swap(i, j);
            }
            argv.extend(opts.into_iter().flatten());
        }
        Command::Release => argv.push(token.to_vec()),
        Command::Info => {}
        Command::Call => {
            argv.push(token.to_vec());
            argv.extend(inner_command(r, key));
        }
        Command::Fence => {
            argv[1] = [&b"{"[..], key, b"}:gate"].concat();
            argv.push(value(r, wild, 1, 1 << 40));
            argv.extend(inner_command(r, key));
        }
        Command::Apply => {
            argv.push(token.to_vec());
            argv.push(value(r, wild, 1, i64::MAX as u64));
            if r.chance(60) {
                argv.push(value(r, wild, 1_735_689_600_000, 4_000_000_000_000));
            }
        }
        Command::Hold => {
            argv.push(value(r, wild, HOLD_EFFECT_VERSION, HOLD_EFFECT_VERSION));
            if r.chance(30) {
                argv.push(cased(r, "END"));
                argv.push(token.to_vec());
            } else {
                argv.push(cased(r, "GRANT"));
                if r.chance(50) {
                    argv.push(cased(r, "SHARED"));
                    argv.push(b"0".to_vec());
                } else {
                    argv.push(cased(r, "LIMIT"));
                    argv.push(value(r, wild, 1, MAX_LIMIT as u64));
                }
                argv.push(token.to_vec());
                argv.push(value(r, wild, 1, i64::MAX as u64));
                argv.push(value(r, wild, 1_735_689_600_000, 4_000_000_000_000));
                // The hold's public data, at its bounds when wild.
                if r.chance(20) {
                    let len = match (wild, r.below(4)) {
                        (true, 0) => 0,
                        (true, 1) => 4097,
                        _ => r.between(1, 24) as usize,
                    };
                    argv.push(cased(r, "DATA"));
                    argv.push(vec![b'd'; len]);
                }
            }
        }
        Command::Gate => argv.push(value(r, wild, 1, i64::MAX as u64)),
        Command::Epoch => argv[1] = value(r, wild, 0, 4095),
    }
    argv
}
