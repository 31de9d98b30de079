//! The command lines of LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND and LOCK.INFO.

use std::time::Duration;

/// The most places a semaphore may have.
pub const MAX_LIMIT: u32 = 1_000_000;

/// The kind of hold asked for: exclusive, shared (`SHARED`, a read lock) or one of `n` places
/// of a semaphore (`LIMIT n`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
    /// One of this many places (1 to 1,000,000).
    Semaphore(u32),
}

/// The owner token of a grant: one the client chose, or `*` (the server makes a random one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    Given(Vec<u8>),
    Server,
}

impl Token {
    /// A random token of the client's: 128 bits as 32 lowercase hex characters, like the
    /// server's own `*`. Retrying an acquire with it re-grants (same fence) instead of taking a
    /// second hold.
    pub fn random() -> Token {
        let bits: u128 = rand::random();
        Token::Given(format!("{bits:032x}").into_bytes())
    }

    pub fn as_arg(&self) -> &[u8] {
        match self {
            Token::Given(t) => t,
            Token::Server => b"*",
        }
    }
}

/// A lease, as the command's `PX` (whole milliseconds, at least 1) or `EX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    Px(u64),
    Ex(u64),
}

impl Ttl {
    /// `PX` of `d`, rounded up to whole milliseconds (at least 1).
    pub fn from_duration(d: Duration) -> Ttl {
        let ms = d.as_nanos().div_ceil(1_000_000).max(1);
        Ttl::Px(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    pub fn millis(self) -> u64 {
        match self {
            Ttl::Px(ms) => ms,
            Ttl::Ex(s) => s.saturating_mul(1000),
        }
    }

    fn push(self, args: &mut Vec<Vec<u8>>) {
        let (word, n) = match self {
            Ttl::Px(ms) => ("PX", ms),
            Ttl::Ex(s) => ("EX", s),
        };
        args.push(word.into());
        args.push(n.to_string().into_bytes());
    }
}

/// How long an acquire waits in the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// No `BLOCK`: answered at once.
    No,
    /// `BLOCK ms` (at least 1).
    Millis(u64),
    /// `BLOCK 0`: without limit.
    Forever,
}

impl Wait {
    /// The `BLOCK` of a wait whose deadline is `left` away when sent; `None` when no time is
    /// left (the wait is over).
    pub fn left(left: Duration) -> Option<Wait> {
        let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        (ms > 0).then_some(Wait::Millis(ms))
    }
}

/// Everything a LOCK.ACQUIRE says.
#[derive(Clone, Debug)]
pub struct Acquire<'a> {
    pub name: &'a [u8],
    pub token: &'a Token,
    pub ttl: Ttl,
    pub mode: Mode,
    pub ephemeral: bool,
    pub wait: Wait,
    /// `DATA` (what observers of an election see); 1 to 4096 bytes.
    pub data: Option<&'a [u8]>,
}

impl Acquire<'_> {
    /// The arguments, command name first.
    pub fn args(&self) -> Vec<Vec<u8>> {
        let mut args: Vec<Vec<u8>> = vec![
            b"LOCK.ACQUIRE".to_vec(),
            self.name.to_vec(),
            self.token.as_arg().to_vec(),
        ];
        self.ttl.push(&mut args);
        match self.mode {
            Mode::Exclusive => {}
            Mode::Shared => args.push(b"SHARED".to_vec()),
            Mode::Semaphore(n) => {
                args.push(b"LIMIT".to_vec());
                args.push(n.to_string().into_bytes());
            }
        }
        if self.ephemeral {
            args.push(b"EPHEMERAL".to_vec());
        }
        if let Some(data) = self.data {
            args.push(b"DATA".to_vec());
            args.push(data.to_vec());
        }
        match self.wait {
            Wait::No => {}
            Wait::Millis(ms) => {
                args.push(b"BLOCK".to_vec());
                args.push(ms.to_string().into_bytes());
            }
            Wait::Forever => {
                args.push(b"BLOCK".to_vec());
                args.push(b"0".to_vec());
            }
        }
        args
    }
}

pub fn release(name: &[u8], token: &[u8]) -> Vec<Vec<u8>> {
    vec![b"LOCK.RELEASE".to_vec(), name.to_vec(), token.to_vec()]
}

pub fn extend(name: &[u8], token: &[u8], ttl: Ttl) -> Vec<Vec<u8>> {
    let mut args = vec![b"LOCK.EXTEND".to_vec(), name.to_vec(), token.to_vec()];
    ttl.push(&mut args);
    args
}

pub fn info(name: &[u8]) -> Vec<Vec<u8>> {
    vec![b"LOCK.INFO".to_vec(), name.to_vec()]
}

/// `LOCK.CALL name token command…` (`LOCK.FENCE gate fence command…` with `fence`).
pub fn guarded(head: &[&[u8]], command: &[Vec<u8>]) -> Vec<Vec<u8>> {
    head.iter()
        .map(|a| a.to_vec())
        .chain(command.iter().cloned())
        .collect()
}

/// `LOCK.CALL name token` or `LOCK.FENCE gate fence` (`head`) before the arguments of
/// `command`, a command of the redis crate (a cursor argument is sent as 0).
pub fn guarded_cmd(head: &[&[u8]], command: &redis::Cmd) -> Vec<Vec<u8>> {
    let inner: Vec<Vec<u8>> = command
        .args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => b.to_vec(),
            _ => b"0".to_vec(), // a cursor
        })
        .collect();
    guarded(head, &inner)
}

/// Several lines as one pipeline of the redis crate.
pub fn pipe(lines: &[Vec<Vec<u8>>]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for line in lines {
        pipe.add_command(cmd(line));
    }
    pipe
}

/// `args` as a command of the redis crate.
pub fn cmd(args: &[Vec<u8>]) -> redis::Cmd {
    let mut c = redis::Cmd::new();
    for a in args {
        c.arg(a.as_slice());
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(args: Vec<Vec<u8>>) -> String {
        args.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn acquire_lines() {
        let t = Token::Given(b"tok".to_vec());
        let base = Acquire {
            name: b"lock:a",
            token: &t,
            ttl: Ttl::Px(30000),
            mode: Mode::Exclusive,
            ephemeral: false,
            wait: Wait::No,
            data: None,
        };
        assert_eq!(text(base.args()), "LOCK.ACQUIRE lock:a tok PX 30000");
        let shared = Acquire {
            mode: Mode::Shared,
            wait: Wait::Millis(250),
            ..base.clone()
        };
        assert_eq!(
            text(shared.args()),
            "LOCK.ACQUIRE lock:a tok PX 30000 SHARED BLOCK 250"
        );
        let server = Token::Server;
        let sem = Acquire {
            token: &server,
            ttl: Ttl::Ex(5),
            mode: Mode::Semaphore(3),
            ephemeral: true,
            wait: Wait::Forever,
            data: Some(b"me"),
            ..base
        };
        assert_eq!(
            text(sem.args()),
            "LOCK.ACQUIRE lock:a * EX 5 LIMIT 3 EPHEMERAL DATA me BLOCK 0"
        );
    }

    #[test]
    fn other_lines() {
        assert_eq!(text(release(b"k", b"t")), "LOCK.RELEASE k t");
        assert_eq!(
            text(extend(b"k", b"t", Ttl::Px(10))),
            "LOCK.EXTEND k t PX 10"
        );
        assert_eq!(text(info(b"k")), "LOCK.INFO k");
        let mut set = redis::cmd("SET");
        set.arg("x").arg(5);
        assert_eq!(
            text(guarded_cmd(&[b"LOCK.FENCE", b"g", b"7"], &set)),
            "LOCK.FENCE g 7 SET x 5"
        );
        assert_eq!(
            text(guarded(
                &[b"LOCK.CALL", b"k", b"t"],
                &[b"SET".to_vec(), b"x".to_vec()]
            )),
            "LOCK.CALL k t SET x"
        );
    }

    #[test]
    fn ttls_and_waits() {
        assert_eq!(Ttl::from_duration(Duration::from_micros(1)), Ttl::Px(1));
        assert_eq!(Ttl::from_duration(Duration::from_micros(1500)), Ttl::Px(2));
        assert_eq!(Ttl::from_duration(Duration::from_secs(3)).millis(), 3000);
        assert_eq!(Ttl::Ex(2).millis(), 2000);
        assert_eq!(Wait::left(Duration::from_micros(999)), None);
        assert_eq!(Wait::left(Duration::from_millis(7)), Some(Wait::Millis(7)));
        let Token::Given(a) = Token::random() else {
            panic!()
        };
        assert_eq!(a.len(), 32);
        assert!(a.iter().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(Token::random(), Token::random());
    }
}
