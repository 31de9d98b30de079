//! Redlock over redislock's native commands: a reference implementation in Rust on the Rust
//! client (`redislock_client`, blocking), one `Locker` per instance.
//!
//! ```text
//! REDIS_PORT=7001,7002,7003,7004,7005 cargo run -p redislock-client --example redlock   # on 127.0.0.1
//! REDIS_PORT=10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379 cargo run -p redislock-client --example redlock
//! ```
//!
//! The demo acquires `demo:redlock` on the given independent masters (each loading the
//! redislock module), writes to a fenced resource, extends the lock, shows that a second client
//! cannot take it, and releases it. `tests/redlock.rs` compiles this same file and tests it.
//!
//! # The algorithm
//!
//! [`Redlock`] talks to N independent Redis masters (not replicas of each other), in a fixed
//! order that every client must share:
//!
//! 1. Pick one random token (128 bits, hex) for this acquisition.
//! 2. Send `LOCK.ACQUIRE resource token PX ttl` to every instance in turn (a try of a lock with
//!    that token and no renewals), with connect and read timeouts much smaller than the TTL
//!    (`Locker::with_timeout`), so that a dead instance costs little.
//! 3. The lock is acquired if a majority (N/2 + 1) granted it and time is left: the validity is
//!    `ttl - elapsed - drift`, with `drift = ttl * 0.01 + 2 ms` for the clock rate differences
//!    between the servers and this client.
//! 4. Otherwise release what it got and retry after a random delay, a few times. An instance
//!    whose reply was lost twice may have granted it: that grant ends with its lease.
//! 5. Extend with `LOCK.EXTEND` on every instance: the extension holds if a majority extended
//!    it in time. Release with `LOCK.RELEASE` on every instance.
//!
//! # What the native commands add
//!
//! - **Safe retries after a lost reply.** `LOCK.ACQUIRE` with the token that already holds the
//!   lock grants it again (resetting its TTL) and returns the same fence. When a reply is lost
//!   (a read timeout, a dropped connection), the command may or may not have run; this client
//!   resends it once on a fresh connection, and either way it ends up holding the instance with
//!   the one fence that instance issued. With `SET key token NX PX ttl`, the retry would fail
//!   on the client's own lock and the instance would be counted as lost.
//! - **A fence per instance.** Each grant returns that instance's fencing token, increasing per
//!   lock name on that instance (across releases, expiry, restarts and failovers of that
//!   instance). [`Lock::fences`] keeps them in the instances' order; fences of different
//!   instances are not comparable with each other. [`FenceRecord`] shows how a resource can use
//!   them: any two holders' majorities share an instance, where the later holder's fence is
//!   larger, so a resource that rejects a fence below the highest it accepted *from the same
//!   instance* rejects every superseded holder.
//! - Atomic release and extend by token, without Lua scripts; `LOCK.INFO` to inspect.
//!
//! # What they cannot fix
//!
//! Redlock's mutual exclusion rests on timing: bounded clock drift between the servers (a
//! server whose clock jumps forward expires a lock early), bounded process pauses and network
//! delays of the client (a holder paused by GC, swapping or a stopped VM for longer than the
//! validity still believes it holds the lock), and instances that do not lose grants (restart
//! a crashed instance with AOF `appendfsync always`, or only after the longest TTL has
//! passed). No command sent to the servers can repair any of this: the holder cannot learn
//! that it was paused. So **check the fencing tokens at the resource** (see [`FenceRecord`]):
//! the check does not depend on timing, and survives an instance that lost a grant in a
//! restart, since its fences after the restart exceed those before. Where the resource can
//! check only one number, prefer a single master with replicas to Redlock: its fences form one
//! increasing sequence per lock, across failovers too.

use std::fmt;
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use redislock_client::{Error, Hold, Locker, Token};

/// Tunables of a [`Redlock`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Time allowed to connect to one instance and for it to answer one command (the
    /// instances' `Locker::with_timeout`).
    pub io_timeout: Duration,
    /// Attempts of [`Redlock::lock`] before giving up (at least 1).
    pub retry_count: u32,
    /// Upper bound of the random delay between attempts.
    pub retry_delay_max: Duration,
    /// Clock drift allowance, as a fraction of the TTL (plus 2 ms).
    pub clock_drift_factor: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            io_timeout: Duration::from_millis(50),
            retry_count: 3,
            retry_delay_max: Duration::from_millis(200),
            clock_drift_factor: 0.01,
        }
    }
}

/// A Redlock held on a majority of the instances: a hold of the client on each instance that
/// granted it (not renewed: its validity is what the holder has).
#[derive(Debug)]
pub struct Lock {
    pub resource: String,
    /// The token used on every instance.
    pub token: String,
    /// Each instance's fence, in the order the instances were given; `None` where the instance
    /// did not grant (or did not answer).
    pub fences: Vec<Option<i64>>,
    /// When the validity started counting: the start of the acquisition (or extension) attempt.
    pub since: Instant,
    /// How long the lock is valid from `since`.
    pub validity: Duration,
    holds: Vec<Option<Hold>>,
}

impl Lock {
    /// Validity left now (zero when lost).
    pub fn remaining(&self) -> Duration {
        self.validity.saturating_sub(self.since.elapsed())
    }

    /// Number of instances that granted the lock.
    pub fn granted(&self) -> usize {
        self.fences.iter().filter(|f| f.is_some()).count()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedlockError {
    /// Fewer than a majority granted the lock in time, in every attempt.
    NoQuorum {
        /// Grants in the last attempt.
        granted: usize,
        quorum: usize,
        attempts: u32,
    },
    /// An extension reached fewer than a majority in time, or the lock's validity had already
    /// ended: the lock must be considered lost.
    Lost { extended: usize, quorum: usize },
    /// A bad argument (no instance, a TTL too short to cover the drift, an empty resource).
    Invalid(String),
}

impl fmt::Display for RedlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedlockError::NoQuorum {
                granted,
                quorum,
                attempts,
            } => write!(
                f,
                "lock not acquired: {granted} grant(s), {quorum} needed, after {attempts} attempt(s)"
            ),
            RedlockError::Lost { extended, quorum } => write!(
                f,
                "lock lost: extended on {extended} instance(s), {quorum} needed"
            ),
            RedlockError::Invalid(why) => write!(f, "invalid Redlock call: {why}"),
        }
    }
}

impl std::error::Error for RedlockError {}

/// One Redis master: its address and a locker on it.
struct Instance {
    /// `host:port`, for messages.
    addr: String,
    /// `None` when the address is not a valid one.
    locker: Option<Locker>,
}

impl Instance {
    fn new(addr: &str, opts: &Options) -> Instance {
        let url = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("redis://{addr}/")
        };
        Instance {
            addr: addr.to_string(),
            locker: Locker::open(url.as_str())
                .ok()
                .map(|l| l.with_timeout(opts.io_timeout)),
        }
    }

    /// A try of `resource` with `token`: the hold, or `None` (busy, or no answer). A reply lost
    /// (no answer in time, a dropped connection) is retried once, on a fresh connection: the
    /// command may have run, and its repetition re-grants with the same fence.
    fn grant(&self, resource: &str, token: &str, ttl: Duration) -> Option<Hold> {
        let lock = self
            .locker
            .as_ref()?
            .lock(resource)
            .token(Token::Given(token.as_bytes().to_vec()))
            .ttl(ttl)
            .auto_renew(false);
        match lock.try_acquire() {
            Ok(hold) => hold,
            Err(Error::Timeout { .. }) | Err(Error::Redis(_)) => lock.try_acquire().ok().flatten(),
            Err(_) => None,
        }
    }
}

/// A Redlock client over independent masters, in the order given.
pub struct Redlock {
    instances: Vec<Instance>,
    opts: Options,
    rng: u64,
}

impl Redlock {
    /// Instances as `host:port` or `redis://` URLs. Every client of a resource must list the
    /// same instances in the same order (fences are per instance).
    pub fn new<S: AsRef<str>>(addrs: &[S]) -> Redlock {
        Redlock::with_options(addrs, Options::default())
    }

    pub fn with_options<S: AsRef<str>>(addrs: &[S], opts: Options) -> Redlock {
        Redlock {
            instances: addrs
                .iter()
                .map(|a| Instance::new(a.as_ref(), &opts))
                .collect(),
            opts,
            rng: u64::from_str_radix(&random_token()[..16], 16).unwrap_or(1) | 1,
        }
    }

    /// Grants needed: a majority of the instances.
    pub fn quorum(&self) -> usize {
        self.instances.len() / 2 + 1
    }

    /// The instances, as given.
    pub fn addrs(&self) -> Vec<&str> {
        self.instances.iter().map(|i| i.addr.as_str()).collect()
    }

    fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.opts.clock_drift_factor) + Duration::from_millis(2)
    }

    /// xorshift64*: the retry delays.
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Acquires `resource` for `ttl` with a new random token, retrying up to
    /// `Options::retry_count` times.
    pub fn lock(&mut self, resource: &str, ttl: Duration) -> Result<Lock, RedlockError> {
        let token = random_token();
        self.lock_with_token(resource, &token, ttl)
    }

    /// [`lock`](Self::lock) with a token chosen by the caller. Calling it again with the token
    /// of a lock still held re-grants it with the same fences: a caller that lost track of an
    /// acquisition (say, its own timeout fired) can repeat it safely. When it fails, what it
    /// was granted is released.
    pub fn lock_with_token(
        &mut self,
        resource: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Lock, RedlockError> {
        if self.instances.is_empty() {
            return Err(RedlockError::Invalid("no instance".into()));
        }
        if resource.is_empty() || token.is_empty() {
            return Err(RedlockError::Invalid("empty resource or token".into()));
        }
        if ttl <= self.drift(ttl) || ttl.as_millis() == 0 {
            return Err(RedlockError::Invalid(format!(
                "TTL {ttl:?} does not cover the clock drift allowance"
            )));
        }
        let attempts = self.opts.retry_count.max(1);
        let mut granted = 0;
        for attempt in 1..=attempts {
            let since = Instant::now();
            let holds: Vec<Option<Hold>> = self
                .instances
                .iter()
                .map(|inst| inst.grant(resource, token, ttl))
                .collect();
            let fences: Vec<Option<i64>> = holds
                .iter()
                .map(|h| h.as_ref().map(|h| h.fence() as i64))
                .collect();
            granted = holds.iter().flatten().count();
            let used = since.elapsed() + self.drift(ttl);
            if granted >= self.quorum() && ttl > used {
                return Ok(Lock {
                    resource: resource.to_string(),
                    token: token.to_string(),
                    fences,
                    since,
                    validity: ttl - used,
                    holds,
                });
            }
            // Not acquired: release what was granted.
            release_all(holds);
            if attempt < attempts {
                let max = self.opts.retry_delay_max.as_micros() as u64;
                let delay = if max == 0 {
                    0
                } else {
                    self.next_random() % max
                };
                thread::sleep(Duration::from_micros(delay));
            }
        }
        Err(RedlockError::NoQuorum {
            granted,
            quorum: self.quorum(),
            attempts,
        })
    }

    /// Sets the lock's remaining time to `ttl` on every instance where it still holds. It stays
    /// held if a majority extended it in time; its validity then restarts from this call. On
    /// error the lock is lost: stop using the resource (and call [`unlock`](Self::unlock)).
    pub fn extend(&mut self, lock: &mut Lock, ttl: Duration) -> Result<(), RedlockError> {
        let quorum = self.quorum();
        if lock.remaining().is_zero() {
            return Err(RedlockError::Lost {
                extended: 0,
                quorum,
            });
        }
        let since = Instant::now();
        // A hold whose lease clock ran out is refused by the client without a request.
        let extended = lock
            .holds
            .iter_mut()
            .flatten()
            .map(|h| h.extend(ttl))
            .filter(Result::is_ok)
            .count();
        let used = since.elapsed() + self.drift(ttl);
        if extended >= quorum && ttl > used {
            lock.since = since;
            lock.validity = ttl - used;
            Ok(())
        } else {
            Err(RedlockError::Lost { extended, quorum })
        }
    }

    /// Releases the lock on every instance that granted it; returns on how many it was still
    /// held.
    pub fn unlock(&mut self, lock: Lock) -> usize {
        release_all(lock.holds)
    }
}

/// Releases each hold; returns how many the server still had.
fn release_all(holds: Vec<Option<Hold>>) -> usize {
    holds
        .into_iter()
        .flatten()
        .map(|h| h.release())
        .filter(Result::is_ok)
        .count()
}

/// What a fenced resource remembers for one Redlock resource: the highest fence it accepted from
/// each instance (by position).
///
/// Check and record atomically with the write itself (in the same database transaction, or a
/// conditional write). A holder whose lock was superseded shares at least one instance with
/// the newer holder's majority, where its fence is lower, so its writes are rejected.
#[derive(Clone, Debug, Default)]
pub struct FenceRecord {
    highest: Vec<i64>,
}

impl FenceRecord {
    pub fn new() -> FenceRecord {
        FenceRecord::default()
    }

    /// Accepts a write from a holder with these fences (one per instance, `None` where it did
    /// not grant) if none is below the highest accepted from the same instance, and records
    /// them. Returns whether the write may proceed.
    pub fn accept(&mut self, fences: &[Option<i64>]) -> bool {
        if self.highest.len() < fences.len() {
            self.highest.resize(fences.len(), 0);
        }
        let stale = fences
            .iter()
            .zip(&self.highest)
            .any(|(f, h)| f.is_some_and(|f| f < *h));
        if stale {
            return false;
        }
        for (f, h) in fences.iter().zip(self.highest.iter_mut()) {
            if let Some(f) = f {
                *h = (*h).max(*f);
            }
        }
        true
    }
}

/// A random 128-bit token, as 32 hex characters (the client's own).
pub fn random_token() -> String {
    String::from_utf8_lossy(Token::random().as_arg()).into_owned()
}

/// The demo, on the masters of `REDIS_PORT` (`port` or `host:port`, separated by commas; 6379
/// without it).
fn main() -> ExitCode {
    let ports = std::env::var("REDIS_PORT").unwrap_or_else(|_| "6379".to_string());
    let addrs: Vec<String> = ports
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| {
            if a.contains(':') {
                a.to_string()
            } else {
                format!("127.0.0.1:{a}")
            }
        })
        .collect();
    if addrs.is_empty() {
        eprintln!(
            "usage: REDIS_PORT=port|host:port,... redlock   (independent masters with redislock)"
        );
        return ExitCode::from(2);
    }
    match demo(&addrs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redlock demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn demo(addrs: &[String]) -> Result<(), RedlockError> {
    let resource = "demo:redlock";
    let ttl = Duration::from_secs(10);
    let mut client = Redlock::new(addrs);
    println!(
        "instances: {} (quorum {})",
        client.addrs().join(", "),
        client.quorum()
    );
    let mut lock = client.lock(resource, ttl)?;
    println!(
        "acquired {resource} with token {} on {} instance(s), valid for {:?}",
        lock.token,
        lock.granted(),
        lock.remaining()
    );
    for (addr, fence) in client.addrs().iter().zip(&lock.fences) {
        match fence {
            Some(f) => println!("  {addr}: fence {f}"),
            None => println!("  {addr}: no grant"),
        }
    }

    let mut resource_fences = FenceRecord::new();
    println!(
        "resource accepts the holder's write: {}",
        resource_fences.accept(&lock.fences)
    );

    let mut other = Redlock::with_options(
        addrs,
        Options {
            retry_count: 2,
            ..Options::default()
        },
    );
    match other.lock(resource, ttl) {
        Ok(l) => {
            other.unlock(l);
            return Err(RedlockError::Invalid(
                "a second client acquired a held lock".into(),
            ));
        }
        Err(e) => println!("a second client cannot take it: {e}"),
    }

    client.extend(&mut lock, ttl)?;
    println!("extended: valid for {:?}", lock.remaining());
    let released = client.unlock(lock);
    println!("released on {released} instance(s)");
    Ok(())
}
