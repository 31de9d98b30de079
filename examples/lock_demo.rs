//! redislock from Rust with the `redis` crate (redis-rs).
//!
//! ```text
//! cargo run --release --example lock_demo   # 127.0.0.1:6379, or REDIS_PORT=6380; REDIS_HOST=host
//! ```
//!
//! Against a server with the redislock module loaded, it shows:
//! 1. acquire a lock with a generated token (`*`), write to a resource guarded by the fencing
//!    token, extend the lease, write again, release;
//! 2. a holder that pauses past its lease: the next holder gets a larger fence, and the resource
//!    rejects the late write of the old holder;
//! 3. BLOCK: a second client waits in the server and is granted the lock when the first releases.
//!
//! It prints a transcript and exits 0, or exits 1 on any unexpected reply. It uses the keys
//! `demo:report` and `demo:queue`, with TTLs of at most 10 s.

use std::collections::HashMap;
use std::error::Error;
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Client, Connection, Value};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// A grant: the owner token and the fencing token.
struct Grant {
    token: String,
    fence: i64,
}

/// Stands for the storage the lock protects (a database row, a file, an API).
///
/// It remembers the highest fence it has seen and refuses writes that carry a lower one, so a
/// holder whose lease ran out cannot overwrite the work of the holder after it.
#[derive(Default)]
struct FencedResource {
    highest: i64,
    data: Vec<String>,
}

impl FencedResource {
    fn write(&mut self, fence: i64, item: &str) -> bool {
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

fn connect(client: &Client) -> Result<Connection> {
    let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
    con.set_read_timeout(Some(Duration::from_secs(15)))?;
    Ok(con)
}

// docs:begin calls
/// `LOCK.ACQUIRE key token PX ms [extra…]`: the grant, or `None` when the lock is busy.
fn acquire(
    con: &mut Connection,
    key: &str,
    token: &str,
    px: u64,
    extra: &[&str],
) -> Result<Option<Grant>> {
    let grant: Option<(String, i64)> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(token)
        .arg("PX")
        .arg(px)
        .arg(extra)
        .query(con)?;
    Ok(grant.map(|(token, fence)| Grant { token, fence }))
}

/// `LOCK.RELEASE` or `LOCK.EXTEND … PX ms`, which answer 1 or 0.
fn release(con: &mut Connection, key: &str, token: &str) -> Result<i64> {
    Ok(redis::cmd("LOCK.RELEASE").arg(key).arg(token).query(con)?)
}

fn extend(con: &mut Connection, key: &str, token: &str, px: u64) -> Result<i64> {
    Ok(redis::cmd("LOCK.EXTEND")
        .arg(key)
        .arg(token)
        .arg("PX")
        .arg(px)
        .query(con)?)
}
// docs:end calls

/// One integer field of `LOCK.INFO` (a flat field/value array under RESP2, a map under RESP3).
fn info_field(con: &mut Connection, key: &str, field: &str) -> Result<Option<i64>> {
    let info: Option<HashMap<String, Value>> = redis::cmd("LOCK.INFO").arg(key).query(con)?;
    match info.as_ref().and_then(|i| i.get(field)) {
        Some(v) => Ok(Some(redis::from_redis_value(v)?)),
        None => Ok(None),
    }
}

fn expect(what: &str, got: i64, want: i64) -> Result<()> {
    if got != want {
        return Err(format!("{what}: expected {want}, got {got}").into());
    }
    Ok(())
}

fn basic(con: &mut Connection) -> Result<()> {
    let mut resource = FencedResource::default();
    let Some(Grant { token, fence }) = acquire(con, "demo:report", "*", 10_000, &[])? else {
        return Err("demo:report is held by someone else (try again in 10 s)".into());
    };
    println!("acquired: token={token} fence={fence}");

    if !resource.write(fence, "part 1") {
        return Err("the resource refused the holder's write".into());
    }
    expect(
        "LOCK.EXTEND",
        extend(con, "demo:report", &token, 10_000)?,
        1,
    )?;
    let ttl = info_field(con, "demo:report", "ttl")?.ok_or("LOCK.INFO shows no lock")?;
    println!("extended: 1 (ttl {ttl} ms)");
    if !resource.write(fence, "part 2") {
        return Err("the resource refused the holder's write".into());
    }
    expect("LOCK.RELEASE", release(con, "demo:report", &token)?, 1)?;
    println!("released: 1");
    println!("resource holds: {}", resource.data.join(", "));
    Ok(())
}

fn lease_lost(con: &mut Connection) -> Result<()> {
    let mut resource = FencedResource::default();
    let a =
        acquire(con, "demo:report", "*", 100, &[])?.ok_or("demo:report is held by someone else")?;
    println!("holder A acquired: fence={} (lease 100 ms)", a.fence);
    println!("holder A pauses for 300 ms (GC, swap, network...): its lease expires");
    thread::sleep(Duration::from_millis(300));

    let b = acquire(con, "demo:report", "*", 10_000, &[])?
        .ok_or("the expired lock was not granted to B")?;
    println!("holder B acquired: fence={}", b.fence);
    if b.fence <= a.fence {
        return Err(format!(
            "fence {} of B is not greater than fence {} of A",
            b.fence, a.fence
        )
        .into());
    }
    if !resource.write(b.fence, "B's report") {
        return Err("the resource refused B's write".into());
    }

    // A wakes up and carries on: the resource turns it away, and its lease is gone.
    if resource.write(a.fence, "A's late report") {
        return Err("the resource accepted a stale fence".into());
    }
    expect(
        "LOCK.EXTEND by A",
        extend(con, "demo:report", &a.token, 10_000)?,
        0,
    )?;
    println!("stale holder extend: 0 (lease lost)");
    expect(
        "LOCK.RELEASE by B",
        release(con, "demo:report", &b.token)?,
        1,
    )?;
    println!("released: 1");
    Ok(())
}

fn block(client: &Client, con: &mut Connection) -> Result<()> {
    let holder = acquire(con, "demo:queue", "*", 10_000, &[])?
        .ok_or("demo:queue is held by someone else")?;
    println!("holder acquired: fence={}", holder.fence);

    // The waiter needs its own connection: it blocks until the lock is granted.
    let mut waiter = connect(client)?;
    let waiting = thread::spawn(move || -> Result<(Option<Grant>, Duration)> {
        let start = Instant::now();
        let grant = acquire(&mut waiter, "demo:queue", "*", 10_000, &["BLOCK", "5000"])?;
        Ok((grant, start.elapsed()))
    });

    let deadline = Instant::now() + Duration::from_secs(5);
    while info_field(con, "demo:queue", "waiters")? != Some(1) {
        if Instant::now() > deadline {
            return Err("the waiter never showed in LOCK.INFO".into());
        }
        thread::sleep(Duration::from_millis(10));
    }
    println!("waiter queued: waiters=1 (LOCK.ACQUIRE demo:queue * PX 10000 BLOCK 5000)");

    thread::sleep(Duration::from_millis(200)); // the holder works a little longer
    expect(
        "LOCK.RELEASE",
        release(con, "demo:queue", &holder.token)?,
        1,
    )?;
    println!("holder released: 1");
    let (grant, waited) = waiting.join().map_err(|_| "the waiter thread panicked")??;
    let grant = grant.ok_or("the waiter was not granted the lock")?;
    println!(
        "waiter granted: token={} fence={} after {} ms",
        grant.token,
        grant.fence,
        waited.as_millis()
    );
    if grant.fence <= holder.fence {
        return Err("the waiter's fence is not greater than the holder's".into());
    }
    expect("LOCK.RELEASE", release(con, "demo:queue", &grant.token)?, 1)?;
    println!("released: 1");
    Ok(())
}

fn run(host: &str, port: u16) -> Result<()> {
    let client = Client::open(format!("redis://{host}:{port}/"))?;
    let mut con = connect(&client)?;
    println!("-- acquire, fenced writes, extend, release");
    basic(&mut con)?;
    println!("-- a holder that lost its lease");
    lease_lost(&mut con)?;
    println!("-- BLOCK: wait for the lock in the server");
    block(&client, &mut con)?;
    Ok(())
}

fn main() -> ExitCode {
    let host = std::env::var("REDIS_HOST").unwrap_or_else(|_| "127.0.0.1".to_string());
    let port = std::env::var("REDIS_PORT").unwrap_or_else(|_| "6379".to_string());
    let Ok(port) = port.parse::<u16>() else {
        eprintln!("lock_demo: bad port {port:?}");
        return ExitCode::FAILURE;
    };
    println!("redislock demo (redis-rs) on {host}:{port}");
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
