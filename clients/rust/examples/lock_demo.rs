//! redislock from Rust with the client (`redislock_client`, on the `redis` crate).
//!
//! ```text
//! cargo run -p redislock-client --example lock_demo   # 127.0.0.1:6379, or REDIS_PORT=6380; REDIS_HOST=host
//! ```
//!
//! Against a server with the redislock module loaded, it shows:
//! 1. acquire a lock with a token the server generates (`*`), write to a resource guarded by
//!    the fencing token, extend the lease, write again, release;
//! 2. a holder that pauses past its lease: the next holder gets a larger fence, the resource
//!    rejects the late write of the old holder, and the client knows the old hold is lost (its
//!    lease clock ran out): its extend is refused without asking the server;
//! 3. a wait in the server: a second thread waits for the lock and is granted it when the first
//!    releases.
//!
//! It prints a transcript and exits 0, or exits 1 on any unexpected reply. It uses the keys
//! `demo:report` and `demo:queue`, with leases of at most 30 s, renewed by no one (the demo
//! extends by hand).

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use redislock_client::{Error, Hold, Lock, Locker, Token};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Stands for the storage the lock protects (a database row, a file, an API).
///
/// It remembers the highest fence it has seen and refuses writes that carry a lower one, so a
/// holder whose lease ran out cannot overwrite the work of the holder after it.
#[derive(Default)]
struct FencedResource {
    highest: u64,
    data: Vec<String>,
}

impl FencedResource {
    fn write(&mut self, fence: u64, item: &str) -> bool {
        if fence < self.highest {
            println!(
                "resource: write with fence {fence} rejected (highest seen {})",
                self.highest
            );
            return false;
        }
        self.highest = fence;
        self.data.push(item.to_string());
        println!("resource: write with fence {fence} accepted ({item})");
        true
    }
}

/// The lock `name` with a server-made token (`*`), a lease of `ttl`, no renewals.
fn lock(locker: &Locker, name: &str, ttl: Duration) -> Lock {
    locker
        .lock(name)
        .ttl(ttl)
        .token(Token::Server)
        .auto_renew(false)
}

fn token(hold: &Hold) -> String {
    String::from_utf8_lossy(hold.token()).into_owned()
}

fn basic(locker: &Locker) -> Result<()> {
    let mut resource = FencedResource::default();
    let report = lock(locker, "demo:report", Duration::from_secs(10));
    let Some(mut hold) = report.try_acquire()? else {
        return Err("demo:report is held by someone else (try again in 10 s)".into());
    };
    println!("acquired: token={} fence={}", token(&hold), hold.fence());

    if !resource.write(hold.fence(), "part 1") {
        return Err("the resource refused the holder's write".into());
    }
    hold.extend(Duration::from_secs(10))?;
    let ttl = report.info()?.ok_or("LOCK.INFO shows no lock")?.ttl;
    println!("extended: 1 (ttl {ttl} ms)");
    if !resource.write(hold.fence(), "part 2") {
        return Err("the resource refused the holder's write".into());
    }
    hold.release()?;
    println!("released: 1");
    println!("resource holds: {}", resource.data.join(", "));
    Ok(())
}

fn lease_lost(locker: &Locker) -> Result<()> {
    let mut resource = FencedResource::default();
    let mut a = lock(locker, "demo:report", Duration::from_millis(100))
        .try_acquire()?
        .ok_or("demo:report is held by someone else")?;
    println!("holder A acquired: fence={} (lease 100 ms)", a.fence());
    println!("holder A pauses for 300 ms (GC, swap, network...): its lease expires");
    thread::sleep(Duration::from_millis(300));

    let b = lock(locker, "demo:report", Duration::from_secs(10))
        .try_acquire()?
        .ok_or("the expired lock was not granted to B")?;
    println!("holder B acquired: fence={}", b.fence());
    if b.fence() <= a.fence() {
        return Err(format!(
            "fence {} of B is not greater than fence {} of A",
            b.fence(),
            a.fence()
        )
        .into());
    }
    if !resource.write(b.fence(), "B's report") {
        return Err("the resource refused B's write".into());
    }

    // A wakes up and carries on: the resource turns it away, and the client knows its hold is
    // lost (the lease clock ran out), so it does not even ask the server to extend it.
    if resource.write(a.fence(), "A's late report") {
        return Err("the resource accepted a stale fence".into());
    }
    let lost = a
        .lost()
        .wait_timeout(Duration::from_secs(5))
        .ok_or("A's lease clock did not run out")?;
    match a.extend(Duration::from_secs(10)) {
        Err(Error::Lost { .. }) => {
            println!(
                "stale holder extend: lost ({:?}, nothing sent)",
                lost.reason
            )
        }
        other => return Err(format!("the stale holder's extend: {other:?}").into()),
    }
    // Its release frees nothing of B's: the server answers that A's token holds nothing.
    drop(a);
    b.release()?;
    println!("released: 1");
    Ok(())
}

fn block(locker: &Locker) -> Result<()> {
    let queue = lock(locker, "demo:queue", Duration::from_secs(30));
    let holder = queue
        .try_acquire()?
        .ok_or("demo:queue is held by someone else")?;
    println!("holder acquired: fence={}", holder.fence());

    // The waiter waits in the server, on a connection of the locker's that no other command
    // shares meanwhile.
    let waiter = queue.clone();
    let waiting = thread::spawn(move || -> Result<(Hold, Duration)> {
        let start = Instant::now();
        let hold = waiter.acquire(Duration::from_secs(5))?;
        Ok((hold, start.elapsed()))
    });

    let deadline = Instant::now() + Duration::from_secs(5);
    while queue.info()?.map(|i| i.waiters) != Some(1) {
        if Instant::now() > deadline {
            return Err("the waiter never showed in LOCK.INFO".into());
        }
        thread::sleep(Duration::from_millis(10));
    }
    println!("waiter queued: waiters=1 (LOCK.ACQUIRE demo:queue * PX 30000 BLOCK ...)");

    thread::sleep(Duration::from_millis(200)); // the holder works a little longer
    let holder_fence = holder.fence();
    holder.release()?;
    println!("holder released: 1");
    let (granted, waited) = waiting.join().map_err(|_| "the waiter thread panicked")??;
    println!(
        "waiter granted: token={} fence={} after {} ms",
        token(&granted),
        granted.fence(),
        waited.as_millis()
    );
    if granted.fence() <= holder_fence {
        return Err("the waiter's fence is not greater than the holder's".into());
    }
    granted.release()?;
    println!("released: 1");
    Ok(())
}

fn run(host: &str, port: u16) -> Result<()> {
    let locker = Locker::open(format!("redis://{host}:{port}/").as_str())?;
    println!("-- acquire, fenced writes, extend, release");
    basic(&locker)?;
    println!("-- a holder that lost its lease");
    lease_lost(&locker)?;
    println!("-- wait for the lock in the server");
    block(&locker)?;
    Ok(())
}

fn main() -> ExitCode {
    let host = std::env::var("REDIS_HOST").unwrap_or_else(|_| "127.0.0.1".to_string());
    let port = std::env::var("REDIS_PORT").unwrap_or_else(|_| "6379".to_string());
    let Ok(port) = port.parse::<u16>() else {
        eprintln!("lock_demo: bad port {port:?}");
        return ExitCode::FAILURE;
    };
    println!("redislock demo (redislock-client) on {host}:{port}");
    match run(&host, port) {
        Ok(()) => {
            println!("demo OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("demo FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
