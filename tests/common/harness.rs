//! Where the module and the server binary are, free ports and temporary directories, and the
//! harness's deadlines (scaled by `REDISLOCK_TEST_TIME_SCALE`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long to wait for a server to come up (or go down), times `time_scale()`.
pub(crate) const STARTUP_DEADLINE_BASE: Duration = Duration::from_secs(10);
/// Read/write timeout on test connections, so a hung server fails the test instead of hanging it
/// (times `time_scale()`).
pub(crate) const IO_TIMEOUT_BASE: Duration = Duration::from_secs(15);

/// Multiplier for the harness's own deadlines and timeouts: `REDISLOCK_TEST_TIME_SCALE` (a
/// positive integer, default 1), e.g. 20 when `REDIS_SERVER` runs redis-server under valgrind.
pub fn time_scale() -> u32 {
    std::env::var("REDISLOCK_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n: &u32| n >= 1)
        .unwrap_or(1)
}

pub(crate) fn startup_deadline() -> Duration {
    STARTUP_DEADLINE_BASE * time_scale()
}

pub(crate) fn io_timeout() -> Duration {
    IO_TIMEOUT_BASE * time_scale()
}

/// With `REDISLOCK_GRACEFUL_STOP` set, dropping a `Server` first asks it to exit with
/// `SHUTDOWN NOSAVE` (so a wrapper such as valgrind can write its report), and kills it only if
/// that fails. By default a dropped server is killed at once.
pub(crate) fn graceful_stop() -> bool {
    std::env::var_os("REDISLOCK_GRACEFUL_STOP").is_some_and(|v| !v.is_empty() && v != "0")
}

static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Path of the module under test.
pub fn module_path() -> PathBuf {
    let path = match std::env::var_os("REDISLOCK_MODULE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/libredislock.so"),
    };
    if !path.is_file() {
        panic!(
            "redislock module not found at {}: run `cargo build --release` / `make test` first \
             (or point REDISLOCK_MODULE at the .so)",
            path.display()
        );
    }
    path
}

/// Path (or name) of the `redis-server` binary.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

pub(crate) fn unique_temp_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = DIR_COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "redislock-test-{}-{}-{}",
        std::process::id(),
        n,
        nanos
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

pub(crate) fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// A free port `p` for a cluster node: `p + 10000` (its cluster bus) must be a port too, and
/// free at the moment of the check.
pub(crate) fn free_cluster_port() -> u16 {
    for _ in 0..1000 {
        let p = free_port();
        if p > 1024
            && u32::from(p) + 10_000 <= 65_535
            && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok()
        {
            return p;
        }
    }
    panic!("no free port pair (p, p + 10000) for a cluster node");
}
