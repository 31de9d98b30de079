//! redislock with plain redis-rs commands (docs/clients.md).
//!
//!     cargo run --example redis_rs    # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

fn main() -> redis::RedisResult<()> {
    let port = std::env::var("REDIS_PORT").unwrap_or_else(|_| "6379".to_string());
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?.get_connection()?;

    // "*": the server makes a random token. BLOCK: wait in the server, up to 10 s (without it,
    // a busy lock answers nil at once).
    let grant: Option<(String, i64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("lock:report")
        .arg("*")
        .arg("PX")
        .arg(30000)
        .arg("BLOCK")
        .arg(10000)
        .query(&mut con)?;
    let Some((token, fence)) = grant else {
        eprintln!("lock:report is held by someone else");
        std::process::exit(1);
    };
    println!("holding lock:report with fence {fence}");

    // ... work, passing `fence` with every write to the resource ...
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg("lock:report")
        .arg(&token)
        .arg("PX")
        .arg(30000)
        .query(&mut con)?;
    println!("extended: {extended}"); // 0: the lease was lost, stop working
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg("lock:report")
        .arg(&token)
        .query(&mut con)?;
    println!("released: {released}"); // 0 if it had expired
    Ok(())
}
