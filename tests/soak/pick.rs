//! The random choices: the seeded generator, and the client commands with their arguments.
//!
//! Every step takes the same number of draws from the generator whatever it does with them,
//! so that a seed replays the same sequence of choices even where the servers' timing (a lease
//! that ended a millisecond earlier) changed what a choice found.
//!
//! The generator is the fuzz crate's (`fuzz/src/gen.rs`), and so are the odd commands
//! (`Cmd::Odd`). Its well-formed calls choose keys, tokens, kinds and fences blindly; the
//! commands here are picked from the model instead (a holder's token, the key's kind, a
//! fence it granted), so that most of them do something.

pub use super::draws::{draws, Draws};
use super::model::{Lock, Model, Ms, Want};

/// The lock names; gates and data keys share their hash tag. The last three share one
/// (`{m}`), so that `LOCK.ACQUIREALL` can take them together, also in Cluster; they are never
/// semaphores (`LOCK.ACQUIREALL` takes none).
pub const KEYS: [&str; 7] = ["k0", "k1", "k2", "k3", "{m}a", "{m}b", "{m}c"];
pub const MULTI_KEYS: [&str; 3] = ["{m}a", "{m}b", "{m}c"];

fn tagged(key: &str, what: &str) -> String {
    match key.starts_with('{') {
        true => format!("{key}:{what}"),
        false => format!("{{{key}}}:{what}"),
    }
}

pub fn gate_of(key: &str) -> String {
    tagged(key, "gate")
}

pub fn counter_of(key: &str) -> String {
    tagged(key, "n")
}

pub fn value_of(key: &str) -> String {
    tagged(key, "v")
}

/// Public data for holds (`DATA`): short ones and a binary one.
pub fn data_pool() -> [&'static [u8]; 3] {
    [b"d1", b"10.0.0.2:8080", b"b\x00\r\n\xff"]
}

/// `DATA` for a request, now and then.
pub fn data(d: &mut Draws) -> Option<Vec<u8>> {
    let (some, i) = (d.chance(30), d.below(3));
    some.then(|| data_pool()[i].to_vec())
}

/// Tokens the clients share, so that calls meet: short ones, a binary one and one of the
/// longest size allowed.
pub fn tokens() -> Vec<Vec<u8>> {
    let mut t: Vec<Vec<u8>> = (0..6).map(|i| format!("t{i}").into_bytes()).collect();
    t.push(b"b\x00\r\n\xff*".to_vec());
    t.push(vec![b'L'; 512]);
    t
}

#[derive(Clone, Copy, Debug)]
pub enum Ttl {
    Ex(i64),
    Px(i64),
}

impl Ttl {
    pub fn ms(self) -> Ms {
        match self {
            Ttl::Ex(s) => s * 1000,
            Ttl::Px(ms) => ms,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Inner {
    Incr,
    Set(i64),
    Get,
}

#[derive(Clone, Debug)]
pub enum Cmd {
    Acquire {
        key: String,
        /// `None`: `*`, a generated token.
        token: Option<Vec<u8>>,
        want: Want,
        ttl: Ttl,
        ephemeral: bool,
        block: Option<Ms>,
        data: Option<Vec<u8>>,
    },
    /// `LOCK.ACQUIREALL` and `LOCK.RELEASEALL` (`multi.rs`), `LOCK.OBSERVE` (`observe.rs`).
    AcquireAll(super::multi::AcquireAll),
    ReleaseAll {
        keys: Vec<String>,
        token: Vec<u8>,
    },
    Observe(super::observe::Observe),
    Release {
        key: String,
        token: Vec<u8>,
    },
    Extend {
        key: String,
        token: Vec<u8>,
        ttl: Ttl,
    },
    Call {
        key: String,
        token: Vec<u8>,
        inner: Inner,
    },
    Fence {
        key: String,
        fence: i64,
        inner: Inner,
    },
    Info {
        key: String,
    },
    /// `DEL` of a lock (or, now and then, of a gate).
    Del {
        key: String,
        gate: bool,
    },
    /// Close a slot's connection (`kill`: by `CLIENT KILL ID` from another connection).
    Close {
        slot: usize,
        kill: bool,
    },
    /// Let time pass until the next lease end or deadline (bounded).
    Idle,
    /// An odd call of one of the module's commands, for the parsers (`gen::fuzz_argv`, from
    /// this seed), on a key of its own that the model leaves alone.
    Odd {
        seed: u64,
    },
}

pub fn ttl(d: &mut Draws) -> Ttl {
    match d.below(100) {
        0..=34 => Ttl::Px(d.between(15, 250)),
        35..=69 => Ttl::Px(d.between(250, 3000)),
        70..=79 => Ttl::Ex(d.between(1, 2)),
        _ => Ttl::Px(d.between(5_000, 60_000)),
    }
}

fn inner(d: &mut Draws) -> Inner {
    match d.below(3) {
        0 => Inner::Incr,
        1 => Inner::Set(d.between(0, 999)),
        _ => Inner::Get,
    }
}

/// A token for `lock`: one of its holders' (`holder_percent` of the time, if it has any) or one
/// of the shared pool.
pub fn token(d: &mut Draws, lock: &Lock, holder_percent: usize) -> Vec<u8> {
    let (holder, i, j) = (d.chance(holder_percent), d.next(), d.next());
    let pool = tokens();
    if holder && !lock.holds.is_empty() {
        return lock.holds[i as usize % lock.holds.len()].token.clone();
    }
    pool[j as usize % pool.len()].clone()
}

fn want(d: &mut Draws, lock: &Lock) -> Want {
    let (follow, a, b, limit) = (d.chance(80), d.below(100), d.below(2), d.between(1, 3));
    let random = match a {
        0..=39 => Want::Exclusive,
        40..=69 => Want::Shared,
        _ => Want::Place(limit as u32),
    };
    if !follow {
        return random;
    }
    match lock.holds.first().map(|h| h.want) {
        None => random,
        Some(Want::Place(l)) => Want::Place(l),
        Some(_) if b == 0 => Want::Exclusive,
        Some(_) => Want::Shared,
    }
}

/// A client command on a random key. `step` makes tokens unique where a fresh one is needed.
pub fn command(d: &mut Draws, model: &Model, step: u64) -> Cmd {
    // Some keys busier than others, so that requests meet and queue.
    let key = match d.below(100) {
        0..=29 => KEYS[0],
        30..=51 => KEYS[1],
        52..=66 => KEYS[2],
        67..=74 => KEYS[3],
        75..=84 => KEYS[4],
        85..=92 => KEYS[5],
        _ => KEYS[6],
    }
    .to_string();
    let lock = model.peek(&key);
    match d.below(128) {
        100..=119 => super::multi::pick(d, model, step),
        120..=127 => super::observe::pick(d, model, &key),
        0..=37 => {
            let generated = d.chance(12);
            let mut token = token(d, &lock, 35);
            let mut want = want(d, &lock);
            if let Some(h) = lock.hold(&token) {
                // Mostly a re-grant in the mode held; otherwise a request in another mode.
                if d.chance(75) {
                    want = h.want;
                }
            }
            if lock.queue.iter().any(|w| w.token == token) {
                // A token waits for a key at most once.
                token = format!("q{step}").into_bytes();
            }
            if MULTI_KEYS.contains(&key.as_str()) && matches!(want, Want::Place(_)) {
                want = Want::Exclusive;
            }
            let ttl = ttl(d);
            let ephemeral = d.chance(20);
            let data = data(d);
            let (blocking, short, long) = (d.chance(45), d.between(20, 200), d.between(200, 2500));
            let mut block = blocking.then_some(if d.chance(50) { short } else { long });
            // Queues that mix modes, now and then: a writer waiting behind readers, and
            // readers waiting behind that writer (first come, first served; no overtaking).
            let readers = lock.holds.first().is_some_and(|h| h.want == Want::Shared);
            let writer_waits = lock.queue.iter().any(|w| w.want == Want::Exclusive);
            if readers && d.chance(30) && lock.hold(&token).is_none() {
                (want, block) = match writer_waits {
                    false => (
                        Want::Exclusive,
                        Some(if d.chance(50) { short } else { long }),
                    ),
                    true => (Want::Shared, Some(long)),
                };
            }
            Cmd::Acquire {
                key,
                token: (!generated).then_some(token),
                want,
                ttl,
                ephemeral,
                block,
                data,
            }
        }
        38..=52 => Cmd::Release {
            token: token(d, &lock, 75),
            key,
        },
        53..=62 => Cmd::Extend {
            token: token(d, &lock, 75),
            ttl: ttl(d),
            key,
        },
        63..=71 => Cmd::Call {
            token: token(d, &lock, 75),
            inner: inner(d),
            key,
        },
        72..=80 => {
            let gate = model.gates.get(&gate_of(&key)).copied();
            let highest = model.highest.get(&key).copied();
            let history = model.history.get(&key).cloned().unwrap_or_default();
            let (a, i, small) = (d.below(100), d.next(), d.between(1, 1000));
            let fence = match a {
                0..=39 => highest,
                40..=59 => (!history.is_empty()).then(|| history[i as usize % history.len()]),
                60..=74 => gate,
                75..=84 => gate.map(|g| g - 1).filter(|&g| g > 0),
                _ => None,
            };
            Cmd::Fence {
                fence: fence.unwrap_or(small),
                inner: inner(d),
                key,
            }
        }
        81..=84 => Cmd::Info { key },
        85..=87 => Cmd::Del {
            gate: d.chance(15),
            key,
        },
        88..=92 => Cmd::Close {
            slot: d.below(super::slots::SLOTS),
            kill: d.chance(50),
        },
        93..=96 => Cmd::Odd { seed: d.next() },
        _ => Cmd::Idle,
    }
}

/// The arguments of a command, with option groups in random order and words in random case.
pub fn ttl_args(d: &mut Draws, t: Ttl) -> Vec<Vec<u8>> {
    match t {
        Ttl::Ex(s) => vec![d.cased("EX"), s.to_string().into_bytes()],
        Ttl::Px(ms) => vec![d.cased("PX"), ms.to_string().into_bytes()],
    }
}

/// Option groups in random order.
pub fn shuffled(d: &mut Draws, mut groups: Vec<Vec<Vec<u8>>>) -> Vec<Vec<u8>> {
    for i in (1..groups.len()).rev() {
        groups.swap(i, d.below(i + 1));
    }
    groups.into_iter().flatten().collect()
}

pub fn argv(d: &mut Draws, cmd: &Cmd) -> Vec<Vec<u8>> {
    let inner_args = |key: &str, i: Inner| -> Vec<Vec<u8>> {
        match i {
            Inner::Incr => vec![b"INCR".to_vec(), counter_of(key).into_bytes()],
            Inner::Set(v) => vec![
                b"SET".to_vec(),
                value_of(key).into_bytes(),
                v.to_string().into_bytes(),
            ],
            Inner::Get => vec![b"GET".to_vec(), value_of(key).into_bytes()],
        }
    };
    let mut argv: Vec<Vec<u8>> = Vec::new();
    match cmd {
        Cmd::Acquire {
            key,
            token,
            want,
            ttl,
            ephemeral,
            block,
            data,
        } => {
            argv.push(d.cased("LOCK.ACQUIRE"));
            argv.push(key.clone().into_bytes());
            argv.push(token.clone().unwrap_or_else(|| b"*".to_vec()));
            let mut groups = vec![ttl_args(d, *ttl)];
            match want {
                Want::Exclusive => {}
                Want::Shared => groups.push(vec![d.cased("SHARED")]),
                Want::Place(n) => groups.push(vec![d.cased("LIMIT"), n.to_string().into_bytes()]),
            }
            if *ephemeral {
                groups.push(vec![d.cased("EPHEMERAL")]);
            }
            if let Some(ms) = block {
                groups.push(vec![d.cased("BLOCK"), ms.to_string().into_bytes()]);
            }
            if let Some(v) = data {
                groups.push(vec![d.cased("DATA"), v.clone()]);
            }
            argv.extend(shuffled(d, groups));
        }
        Cmd::AcquireAll(a) => argv = super::multi::argv(d, a),
        Cmd::ReleaseAll { keys, token } => {
            argv = vec![d.cased("LOCK.RELEASEALL"), keys.len().to_string().into()];
            argv.extend(keys.iter().map(|k| k.clone().into_bytes()));
            argv.push(token.clone());
        }
        Cmd::Observe(o) => argv = super::observe::argv(d, o),
        Cmd::Release { key, token } => {
            argv = vec![d.cased("LOCK.RELEASE"), key.clone().into(), token.clone()];
        }
        Cmd::Extend { key, token, ttl } => {
            argv = vec![d.cased("LOCK.EXTEND"), key.clone().into(), token.clone()];
            argv.extend(ttl_args(d, *ttl));
        }
        Cmd::Call { key, token, inner } => {
            argv = vec![d.cased("LOCK.CALL"), key.clone().into(), token.clone()];
            argv.extend(inner_args(key, *inner));
        }
        Cmd::Fence { key, fence, inner } => {
            argv = vec![
                d.cased("LOCK.FENCE"),
                gate_of(key).into(),
                fence.to_string().into(),
            ];
            argv.extend(inner_args(key, *inner));
        }
        Cmd::Info { key } => argv = vec![d.cased("LOCK.INFO"), key.clone().into()],
        Cmd::Del { key, gate } => {
            let k = if *gate { gate_of(key) } else { key.clone() };
            argv = vec![d.cased("DEL"), k.into()];
        }
        Cmd::Close { .. } | Cmd::Idle | Cmd::Odd { .. } => {}
    }
    argv
}
