//! redislock from Rust: the example of docs/clients.md.
//!
//!     cargo run -p redislock-client --example quickstart  # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

use std::time::Duration;

use redislock_client::{redis, Error, Locker};

fn main() -> Result<(), Error> {
    let port = std::env::var("REDIS_PORT").unwrap_or_else(|_| "6379".to_string());
    let locker = Locker::open(format!("redis://127.0.0.1:{port}/").as_str())?;

    // Waits in the server, up to 5 s; renewed every third of its 30 s lease until released.
    let report = locker.lock("lock:report").ttl(Duration::from_secs(30));
    let hold = report.acquire(Duration::from_secs(5))?;
    println!("holding lock:report with fence {}", hold.fence());

    // A write that the server runs only while this hold is the lock's (LOCK.CALL).
    let () = hold.call(redis::cmd("SET").arg("report:status").arg("writing"))?;

    // Busy: a try answers None at once (an acquire would wait in the server's queue).
    assert!(report.try_acquire()?.is_none());

    if hold.lost().is_set() {
        eprintln!("lock:report was lost: stop"); // a renewal found it gone, or its lease ran out
        std::process::exit(1);
    }
    hold.release()?; // dropping the hold releases it too
    println!("released; held now: {}", report.info()?.is_some());
    Ok(())
}
