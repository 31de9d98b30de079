//! Throw-away servers with the module loaded, on free loopback ports, and a TCP proxy that can
//! hold traffic back (a partition). The server binary is `$REDIS_SERVER` (default
//! `redis-server`), the module the repository's `target/release/libredislock.so` (or
//! `$REDISLOCK_MODULE`); `make build` builds it.
#![allow(dead_code)]

pub mod cluster;
pub mod proxy;

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::Value;

pub struct Server {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

fn module() -> PathBuf {
    std::env::var_os("REDISLOCK_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/libredislock.so")
        })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(binary: &str, module: &Path, port: u16, dir: &Path, extra: &[&str]) -> Child {
    let mut cmd = Command::new(binary);
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .arg("--loadmodule")
        .arg(module)
        .args(["--save", "", "--appendonly", "no"])
        .args(extra)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe, as required between fork and exec. The
    // server dies with the test binary, however it ends.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot run {binary}: {e}"))
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A replica of `master`, once its link to the master is up.
    pub fn replica_of(master: &Server) -> Server {
        Server::replica_of_with(master, &[])
    }

    /// A replica of `master` started with `extra` arguments too, once its link is up.
    pub fn replica_of_with(master: &Server, extra: &[&str]) -> Server {
        let port = master.port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        args.extend_from_slice(extra);
        let replica = Server::start_with(&args);
        until(Duration::from_secs(20), "the replica's link", || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut replica.conn())
                .unwrap();
            info.lines().any(|l| l.trim() == "master_link_status:up")
        });
        replica
    }

    /// A server started with `extra` arguments too.
    pub fn start_with(extra: &[&str]) -> Server {
        let module = module();
        assert!(
            module.exists(),
            "{} is missing: run make build",
            module.display()
        );
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        for _ in 0..8 {
            let port = free_port();
            let dir = std::env::temp_dir()
                .join(format!("redislock-client-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let child = spawn(&binary, &module, port, &dir, extra);
            let mut server = Server { child, port, dir };
            if server.wait_ready() {
                return server;
            }
        }
        panic!("{binary} did not start on any of 8 ports");
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false; // the port was taken, say: another one
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                if let Ok(mut c) = redis::Client::open(self.url()).and_then(|c| c.get_connection())
                {
                    if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                        return true;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Kills the server and starts another on the same port (its data gone): the clients'
    /// connections close, and new ones are refused until it is up.
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Kills the server (`start_again` starts it on the same port).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn start_again(&mut self) {
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        self.child = spawn(&binary, &module(), self.port, &self.dir, &[]);
        assert!(self.wait_ready(), "restarted on port {}", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn conn(&self) -> redis::Connection {
        let c = redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c
    }

    /// The number of calls of `command` (lower case) the server counted.
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        let key = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signalling our own child process by its id; a SIGSTOPped server gets SIGCONT
        // first so that the kill is delivered at once.
        unsafe {
            libc::kill(self.pid(), libc::SIGCONT);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `cond` every 5 ms until it holds; panics after `within`.
pub fn until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The waiter's grant moment, no earlier than: the lease it has left read with LOCK.INFO right
/// after the grant (a request sent at `asked`).
pub fn granted_no_earlier(c: &mut redis::Connection, name: &str, ttl_ms: i64) -> Instant {
    let asked = Instant::now();
    let info: Value = redis::cmd("LOCK.INFO").arg(name).query(c).unwrap();
    let left = match info {
        Value::Array(f) => f
            .chunks(2)
            .find(|kv| kv[0] == Value::BulkString(b"ttl".to_vec()))
            .map(|kv| redis::from_redis_value::<i64>(kv[1].clone()).unwrap())
            .unwrap(),
        other => panic!("{other:?}"),
    };
    // The ttl is read in whole ms, rounded either way: 1 ms more.
    asked - Duration::from_millis((ttl_ms - left) as u64 + 1)
}

/// Another client, with plain commands, waiting in the server (up to 30 s) for `name` with a
/// lease of 60 s: joined, the moment it was granted, no earlier than (see `granted_no_earlier`).
pub fn wait_in_server(url: String, name: &'static str) -> std::thread::JoinHandle<Instant> {
    const TTL: i64 = 60_000;
    std::thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let grant: Value = redis::cmd("LOCK.ACQUIRE")
            .arg(name)
            .arg("other")
            .arg("PX")
            .arg(TTL)
            .arg("BLOCK")
            .arg(30_000)
            .query(&mut c)
            .unwrap();
        assert!(matches!(grant, Value::Array(_)), "{grant:?}");
        granted_no_earlier(&mut c, name, TTL)
    })
}

/// Signals a server's process (`SIGSTOP`, `SIGCONT`).
pub fn signal(server: &Server, sig: i32) {
    // SAFETY: signalling our own child process by its id.
    let rc = unsafe { libc::kill(server.pid(), sig) };
    assert_eq!(rc, 0);
}

/// The connections the server has open, besides the one that asks.
pub fn clients_connected(server: &Server) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.lines().count() - 1 // the CLIENT LIST's own connection
}
