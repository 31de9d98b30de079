//! Test harness: starts throw-away `redis-server` processes with the redislock module loaded.
//!
//! Every `Server` owns a child process and a private temporary directory; both are removed in
//! `Drop`, so servers are cleaned up even when a test panics.
#![allow(dead_code)]

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, RedisError, Value};

/// How long to wait for a server to come up (or go down), times `time_scale()`.
const STARTUP_DEADLINE_BASE: Duration = Duration::from_secs(10);
/// Read/write timeout on test connections, so a hung server fails the test instead of hanging it
/// (times `time_scale()`).
const IO_TIMEOUT_BASE: Duration = Duration::from_secs(15);

/// Multiplier for the harness's own deadlines and timeouts: `REDISLOCK_TEST_TIME_SCALE` (a
/// positive integer, default 1), e.g. 20 when `REDIS_SERVER` runs redis-server under valgrind.
pub fn time_scale() -> u32 {
    std::env::var("REDISLOCK_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n: &u32| n >= 1)
        .unwrap_or(1)
}

fn startup_deadline() -> Duration {
    STARTUP_DEADLINE_BASE * time_scale()
}

fn io_timeout() -> Duration {
    IO_TIMEOUT_BASE * time_scale()
}

/// With `REDISLOCK_GRACEFUL_STOP` set, dropping a `Server` first asks it to exit with
/// `SHUTDOWN NOSAVE` (so a wrapper such as valgrind can write its report), and kills it only if
/// that fails. By default a dropped server is killed at once.
fn graceful_stop() -> bool {
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

fn unique_temp_dir() -> PathBuf {
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

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// A free port `p` for a cluster node: `p + 10000` (its cluster bus) must be a port too, and
/// free at the moment of the check.
fn free_cluster_port() -> u16 {
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

/// How to stop a server before restarting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// `SHUTDOWN SAVE`: write an RDB snapshot (and fsync the AOF) before exiting.
    Save,
    /// `SHUTDOWN NOSAVE`: exit without a snapshot (the AOF, if enabled, is still fsynced).
    NoSave,
    /// SIGKILL: simulates a crash.
    Kill,
}

/// Builder for a `Server` with extra configuration.
#[derive(Clone, Debug, Default)]
pub struct ServerBuilder {
    args: Vec<String>,
    without_module: bool,
    module_in_config_file: bool,
    example_config: bool,
    module_args: Vec<String>,
    replica_of: Option<u16>,
    cluster: bool,
}

impl ServerBuilder {
    /// Adds a config directive, e.g. `.config("appendonly", &["yes"])`. Later directives override
    /// earlier ones (including the harness defaults).
    pub fn config(mut self, name: &str, values: &[&str]) -> Self {
        self.args.push(format!("--{name}"));
        self.args.extend(values.iter().map(|v| v.to_string()));
        self
    }

    /// Shorthand for a single-valued directive.
    pub fn set(self, name: &str, value: &str) -> Self {
        self.config(name, &[value])
    }

    /// Start without `--loadmodule` (for `MODULE LOAD` tests).
    pub fn without_module(mut self) -> Self {
        self.without_module = true;
        self
    }

    /// Load the module with a `loadmodule <path>` line in a redis.conf (passed as the first
    /// argument) instead of `--loadmodule`.
    pub fn module_in_config_file(mut self) -> Self {
        self.module_in_config_file = true;
        self
    }

    /// Arguments after the module path (`--loadmodule <path> <args…>`).
    pub fn module_args(mut self, args: &[&str]) -> Self {
        self.module_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Start from the repository's `redis.conf.example`, which loads the module by a path
    /// relative to the repository (the harness's own settings still override the rest).
    pub fn example_config(mut self) -> Self {
        self.example_config = true;
        self
    }

    /// Make this server a replica of `master` (on 127.0.0.1). `start()` then waits until the link
    /// is up and the master's `WAIT 1 5000` answers 1.
    pub fn replica_of(mut self, master: &Server) -> Self {
        self.replica_of = Some(master.port());
        self
    }

    /// A Redis Cluster node: `cluster-enabled yes`, its `cluster-config-file` in the server's
    /// temporary directory, and a port whose cluster bus port (port + 10000) is a valid, free
    /// port too. The node starts without slots; see `tests/cluster.rs` for building a cluster.
    pub fn cluster_enabled(mut self) -> Self {
        self.cluster = true;
        self
    }

    pub fn start(self) -> Server {
        let replica_of = self.replica_of;
        let mut args = self.args;
        if let Some(p) = replica_of {
            args.push("--replicaof".into());
            args.push("127.0.0.1".into());
            args.push(p.to_string());
        }
        let module = if self.without_module {
            None
        } else {
            Some(module_path())
        };
        let dir = unique_temp_dir();
        let mut config_file = None;
        let mut module = module;
        if self.module_in_config_file {
            let path = dir.join("redis.conf");
            let m = module
                .take()
                .expect("module_in_config_file with without_module");
            std::fs::write(&path, format!("loadmodule {}\n", m.display())).expect("write conf");
            config_file = Some(path);
        }
        if self.example_config {
            let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
            // Redis enters `--dir` before loading modules: give the relative path a target there.
            std::os::unix::fs::symlink(repo.join("target"), dir.join("target"))
                .expect("symlink target");
            config_file = Some(repo.join("redis.conf.example"));
            module = None;
        }
        let mut server = Server {
            child: None,
            port: 0,
            dir,
            args,
            module,
            module_args: self.module_args,
            config_file,
            cluster: self.cluster,
            allow_crash_signs: false,
        };
        server.launch_on_free_port();
        if let Some(master_port) = replica_of {
            server.wait_replica_synced(master_port);
        }
        server
    }
}

pub struct Server {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    module: Option<PathBuf>,
    module_args: Vec<String>,
    config_file: Option<PathBuf>,
    /// A cluster node (see `ServerBuilder::cluster_enabled`).
    cluster: bool,
    /// Crash signs in the log do not fail the test when the server is dropped.
    allow_crash_signs: bool,
}

enum LaunchError {
    /// The port was taken (by someone else); another port may work.
    PortInUse,
    /// Anything else: the log tail explains it.
    Failed(String),
}

impl Server {
    /// A server with the module loaded and the harness defaults.
    pub fn start() -> Server {
        Server::builder().start()
    }

    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// A replica of `master`, synced (link up, `WAIT 1` satisfied).
    pub fn start_replica_of(master: &Server) -> Server {
        Server::builder().replica_of(master).start()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A fresh RESP2 connection (db 0).
    pub fn conn(&self) -> Connection {
        self.conn_url(&self.url())
    }

    /// A fresh RESP3 connection (db 0).
    pub fn conn_resp3(&self) -> Connection {
        self.conn_url(&format!("{}?protocol=resp3", self.url()))
    }

    /// A connection authenticated as `user`.
    pub fn conn_as(&self, user: &str, password: &str) -> Connection {
        self.conn_url(&format!(
            "redis://{user}:{password}@127.0.0.1:{}/",
            self.port
        ))
    }

    fn conn_url(&self, url: &str) -> Connection {
        let client = redis::Client::open(url).expect("client url");
        let con = client
            .get_connection_with_timeout(io_timeout())
            .unwrap_or_else(|e| panic!("connect to {url}: {e}\n{}", self.log_tail(30)));
        con.set_read_timeout(Some(io_timeout())).unwrap();
        con.set_write_timeout(Some(io_timeout())).unwrap();
        con
    }

    /// The server's log file.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// What the server process wrote to its standard error (all runs, restarts included).
    pub fn stderr_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// Lines of the log and of standard error that show a crash, a failed assertion or a Rust
    /// panic (even one the module caught).
    pub fn crash_lines(&self) -> Vec<String> {
        const SIGNS: &[&str] = &[
            "crashed by signal",
            "BUG REPORT",
            "ASSERTION FAILED",
            "Guru Meditation",
            "STACK TRACE",
            "panicked at",
        ];
        self.log()
            .lines()
            .chain(self.stderr_log().lines())
            .filter(|l| SIGNS.iter().any(|s| l.contains(s)))
            .map(str::to_string)
            .collect()
    }

    /// For a test that provokes crash signs on purpose: dropping the server does not fail the
    /// test for them (see `Drop`).
    pub fn allow_crash_signs(&mut self) {
        self.allow_crash_signs = true;
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        let start = all.len().saturating_sub(lines);
        format!(
            "--- last {} lines of {}/redis.log ---\n{}",
            all.len() - start,
            self.dir.display(),
            all[start..].join("\n")
        )
    }

    /// Stops the server (see `Stop`) and starts it again on the same port, dir and arguments.
    pub fn restart(&mut self, how: Stop) {
        self.stop(how);
        // The same port is required (replicas point at it). It was ours a moment ago, so it is
        // normally free; retry briefly in case another test's client grabbed it meanwhile.
        let deadline = Instant::now() + startup_deadline();
        loop {
            match self.launch(self.port) {
                Ok(()) => return,
                Err(LaunchError::PortInUse) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(LaunchError::PortInUse) => {
                    panic!("port {} still in use on restart", self.port)
                }
                Err(LaunchError::Failed(msg)) => panic!("restart failed: {msg}"),
            }
        }
    }

    /// Crash (SIGKILL) and start again from whatever is on disk.
    pub fn kill9_and_restart(&mut self) {
        self.restart(Stop::Kill);
    }

    /// What the server appended to its AOF since the last rewrite (the `.incr.aof` files).
    pub fn aof_text(&self) -> String {
        let mut text = String::new();
        for entry in std::fs::read_dir(self.dir.join("appendonlydir")).expect("appendonlydir") {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".incr.aof") {
                text += &String::from_utf8_lossy(&std::fs::read(path).unwrap());
            }
        }
        text
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits (bounded) for the server process to exit on its own, e.g. after a `SHUTDOWN` that
    /// another connection sent; true if it exited.
    pub fn wait_exit(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let deadline = Instant::now() + startup_deadline() * 2;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Stops the server without restarting it.
    pub fn stop(&mut self, how: Stop) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if how != Stop::Kill {
            let mode = if how == Stop::Save { "SAVE" } else { "NOSAVE" };
            if let Ok(client) = redis::Client::open(self.url()) {
                if let Ok(mut con) = client.get_connection_with_timeout(io_timeout()) {
                    let _ = con.set_read_timeout(Some(io_timeout()));
                    // The reply is normally a closed connection; an error reply means the
                    // shutdown was refused, which the wait below turns into a failure.
                    let r: Result<Value, RedisError> =
                        redis::cmd("SHUTDOWN").arg(mode).query(&mut con);
                    if let Err(e) = &r {
                        if !e.is_io_error() && !e.is_connection_dropped() {
                            let _ = child.kill();
                            let _ = child.wait();
                            panic!("SHUTDOWN {mode} refused: {e}\n{}", self.log_tail(30));
                        }
                    }
                }
            }
            let deadline = Instant::now() + startup_deadline();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => return,
                    Ok(None) if Instant::now() < deadline => {
                        thread::sleep(Duration::from_millis(10))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        panic!(
                            "server did not exit after SHUTDOWN {mode}\n{}",
                            self.log_tail(30)
                        );
                    }
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn launch_on_free_port(&mut self) {
        let mut last = String::new();
        for _ in 0..8 {
            let port = if self.cluster {
                free_cluster_port()
            } else {
                free_port()
            };
            match self.launch(port) {
                Ok(()) => return,
                Err(LaunchError::PortInUse) => last = format!("port {port} in use"),
                Err(LaunchError::Failed(msg)) => panic!("redis-server failed to start: {msg}"),
            }
        }
        panic!("redis-server failed to start after several ports: {last}");
    }

    fn launch(&mut self, port: u16) -> Result<(), LaunchError> {
        assert!(self.child.is_none());
        self.port = port;
        let mut cmd = Command::new(server_binary());
        if let Some(conf) = &self.config_file {
            cmd.arg(conf);
        }
        cmd.arg("--port")
            .arg(port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir);
        if let Some(module) = &self.module {
            cmd.arg("--loadmodule").arg(module).args(&self.module_args);
        }
        cmd.args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--enable-debug-command", "yes"])
            // Full syncs start at once instead of after the 5 s default delay.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"));
        if self.cluster {
            cmd.args(["--cluster-enabled", "yes"])
                .arg("--cluster-config-file")
                .arg(self.dir.join("nodes.conf"));
        }
        // Redis logs to `--logfile`; what the process itself prints (a Rust panic message from
        // the module, for one) goes to `stderr.log` in the same directory.
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("stderr.log"))
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null());
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        // The server dies with the test binary, however the binary ends (a crash, a kill, an
        // aborted run), instead of lingering on its port. (The signal follows the thread that
        // started the server, which outlives it: servers are dropped by the test that made them.)
        // SAFETY: `prctl` is async-signal-safe, the only kind of call allowed between fork and
        // exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {} (set REDIS_SERVER?): {e}", server_binary()));
        let pid = child.id();
        self.child = Some(child);
        match self.wait_ready(pid) {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Some(mut c) = self.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                Err(e)
            }
        }
    }

    fn wait_ready(&mut self, pid: u32) -> Result<(), LaunchError> {
        let deadline = Instant::now() + startup_deadline();
        let url = self.url();
        let mut last_err = String::from("no attempt");
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                let log = self.log();
                if log.contains("Address already in use") {
                    return Err(LaunchError::PortInUse);
                }
                return Err(LaunchError::Failed(format!(
                    "redis-server exited with {status}\n{}",
                    self.log_tail(30)
                )));
            }
            match Self::probe(&url) {
                Ok(info) => {
                    // Make sure it is our process answering, not another server on that port.
                    if field(&info, "process_id").as_deref() != Some(&pid.to_string()) {
                        return Err(LaunchError::PortInUse);
                    }
                    if field(&info, "loading").as_deref() == Some("0") {
                        return Ok(());
                    }
                    last_err = "still loading".into();
                }
                Err(e) => last_err = e,
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err(LaunchError::Failed(format!(
            "server on port {} not ready after {:?} ({last_err})\n{}",
            self.port,
            startup_deadline(),
            self.log_tail(30)
        )))
    }

    /// PING and fetch `INFO server` + `INFO persistence`.
    fn probe(url: &str) -> Result<String, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let mut con = client
            .get_connection_with_timeout(Duration::from_millis(500) * time_scale())
            .map_err(|e| e.to_string())?;
        con.set_read_timeout(Some(Duration::from_secs(2) * time_scale()))
            .map_err(|e| e.to_string())?;
        let pong: String = redis::cmd("PING")
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        if pong != "PONG" {
            return Err(format!("PING answered {pong:?}"));
        }
        let server: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        let persistence: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        Ok(server + &persistence)
    }

    /// One field of `INFO <section>`.
    pub fn info_field(&self, section: &str, name: &str) -> Option<String> {
        let mut con = self.conn();
        let info: String = redis::cmd("INFO").arg(section).query(&mut con).unwrap();
        field(&info, name)
    }

    /// Waits until `INFO <section>` shows `name:value`.
    pub fn wait_info(&self, section: &str, name: &str, value: &str) {
        let deadline = Instant::now() + startup_deadline();
        loop {
            let got = self.info_field(section, name);
            if got.as_deref() == Some(value) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "INFO {section}: {name} is {got:?}, expected {value:?}\n{}",
                    self.log_tail(30)
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a background AOF rewrite (and any scheduled one) to finish.
    pub fn wait_aof_rewrite_done(&self) {
        let deadline = Instant::now() + startup_deadline();
        loop {
            let mut con = self.conn();
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut con)
                .unwrap();
            let busy = field(&info, "aof_rewrite_in_progress").as_deref() != Some("0")
                || field(&info, "aof_rewrite_scheduled").as_deref() != Some("0");
            if !busy {
                assert_eq!(
                    field(&info, "aof_last_bgrewrite_status").as_deref(),
                    Some("ok"),
                    "AOF rewrite failed\n{}",
                    self.log_tail(30)
                );
                return;
            }
            if Instant::now() > deadline {
                panic!("AOF rewrite still running\n{}", self.log_tail(30));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a background save to finish (after `BGSAVE`).
    pub fn wait_bgsave_done(&self) {
        self.wait_info("persistence", "rdb_bgsave_in_progress", "0");
        assert_eq!(
            self.info_field("persistence", "rdb_last_bgsave_status")
                .as_deref(),
            Some("ok")
        );
    }

    /// For a replica: waits until the link to `master_port` is up, then until the master sees
    /// one replica acknowledging its offset.
    fn wait_replica_synced(&self, master_port: u16) {
        self.wait_info("replication", "master_link_status", "up");
        let client = redis::Client::open(format!("redis://127.0.0.1:{master_port}/")).unwrap();
        let mut master = client.get_connection_with_timeout(io_timeout()).unwrap();
        master.set_read_timeout(Some(io_timeout())).unwrap();
        // A replica of a replica (chained replication) cannot run WAIT; its link being up is
        // all there is to wait for.
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut master)
            .unwrap();
        if field(&info, "role").as_deref() != Some("master") {
            return;
        }
        let n: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut master)
            .unwrap();
        assert!(n >= 1, "WAIT 1 5000 on master answered {n}");
    }
}

impl Server {
    /// `SHUTDOWN NOSAVE` and a bounded wait for the process to exit; never panics (it runs in
    /// `Drop`, possibly while a test unwinds).
    fn shutdown_quietly(&self, child: &mut Child) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        if let Ok(client) = redis::Client::open(self.url()) {
            if let Ok(mut con) = client.get_connection_with_timeout(io_timeout()) {
                let _ = con.set_read_timeout(Some(io_timeout()));
                let _: Result<Value, RedisError> =
                    redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut con);
            }
        }
        let deadline = Instant::now() + startup_deadline();
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                _ => return,
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if graceful_stop() {
                self.shutdown_quietly(&mut child);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // A panic the module caught (in a timer, an event or a callback) leaves the server up
        // and the test green unless someone looks: every test looks here. A test that is
        // already failing keeps its own message.
        let crash = if thread::panicking() || self.allow_crash_signs {
            Vec::new()
        } else {
            self.crash_lines()
        };
        let keep = !crash.is_empty() || std::env::var_os("REDISLOCK_KEEP_TEST_DIRS").is_some();
        if !keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if !crash.is_empty() {
            panic!(
                "the server on port {} logged a crash or a caught panic:\n{}\n(logs kept in {})",
                self.port,
                crash.join("\n"),
                self.dir.display()
            );
        }
    }
}

/// Value of `name:` in an INFO text.
pub fn field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    })
}

// ---------------------------------------------------------------------------------------------
// Command helpers
// ---------------------------------------------------------------------------------------------

/// Builds a `redis::Cmd`: `rcmd!("LOCK.ACQUIRE", key, token, "PX", 1000)`.
#[macro_export]
macro_rules! rcmd {
    ($name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut c = redis::cmd($name);
        $( c.arg($arg); )*
        c
    }};
}

/// Runs a command and returns the raw reply (server errors as `Err`).
pub fn run(con: &mut Connection, cmd: &redis::Cmd) -> Result<Value, RedisError> {
    cmd.query::<Value>(con)
}

/// Runs a command that must succeed.
pub fn ok(con: &mut Connection, cmd: &redis::Cmd) -> Value {
    cmd.query::<Value>(con)
        .unwrap_or_else(|e| panic!("{} failed: {e}", describe(cmd)))
}

/// Runs a command that must answer an error reply; returns the full error text
/// (`"<CODE> <message>"`).
pub fn err(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Ok(v) => panic!("{} should fail, but answered {v:?}", describe(cmd)),
        Err(e) => {
            assert!(
                !e.is_io_error() && !e.is_connection_dropped() && !e.is_timeout(),
                "{} broke the connection: {e}",
                describe(cmd)
            );
            err_text(&e)
        }
    }
}

/// Full server error text (`"<CODE> <message>"`).
pub fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// Human-readable form of a command for failure messages.
pub fn describe(cmd: &redis::Cmd) -> String {
    let packed = cmd.get_packed_command();
    // Parse the RESP array of bulk strings back into words.
    let mut words = Vec::new();
    let mut rest: &[u8] = &packed;
    let next_line = |buf: &[u8]| -> Option<(Vec<u8>, usize)> {
        let pos = buf.windows(2).position(|w| w == b"\r\n")?;
        Some((buf[..pos].to_vec(), pos + 2))
    };
    if let Some((_, n)) = next_line(rest) {
        rest = &rest[n..];
        while let Some((hdr, n)) = next_line(rest) {
            let len: usize = String::from_utf8_lossy(&hdr[1..]).parse().unwrap_or(0);
            rest = &rest[n..];
            let word = &rest[..len.min(rest.len())];
            let shown = if word.len() > 40 {
                format!("<{} bytes>", word.len())
            } else {
                format!("{:?}", String::from_utf8_lossy(word))
            };
            words.push(shown);
            rest = &rest[(len + 2).min(rest.len())..];
        }
    }
    words.join(" ")
}

pub fn as_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.as_bytes().to_vec(),
        Value::VerbatimString { text, .. } => text.as_bytes().to_vec(),
        Value::Okay => b"OK".to_vec(),
        other => panic!("expected a string, got {other:?}"),
    }
}

pub fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::BulkString(b) => String::from_utf8_lossy(b)
            .parse()
            .unwrap_or_else(|_| panic!("expected an integer, got {v:?}")),
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Parses a `LOCK.ACQUIRE` reply: `Some((token, fence))` or `None` for nil.
pub fn parse_grant(v: &Value) -> Option<(Vec<u8>, i64)> {
    match v {
        Value::Nil => None,
        Value::Array(items) => {
            assert_eq!(
                items.len(),
                2,
                "LOCK.ACQUIRE reply should have 2 elements: {v:?}"
            );
            assert!(
                matches!(items[0], Value::BulkString(_)),
                "token should be a bulk string: {v:?}"
            );
            assert!(
                matches!(items[1], Value::Int(_)),
                "fence should be an integer: {v:?}"
            );
            let fence = as_int(&items[1]);
            assert!(fence > 0, "fence must be positive: {v:?}");
            Some((as_bytes(&items[0]), fence))
        }
        other => panic!("unexpected LOCK.ACQUIRE reply {other:?}"),
    }
}

/// `LOCK.ACQUIRE key token PX ms` (plus extra args), must not error.
pub fn acquire(con: &mut Connection, key: &str, token: &[u8], px: i64) -> Option<(Vec<u8>, i64)> {
    let v = ok(con, &rcmd!("LOCK.ACQUIRE", key, token, "PX", px));
    parse_grant(&v)
}

/// `LOCK.ACQUIRE` that must grant; returns `(token, fence)`.
pub fn grant(con: &mut Connection, key: &str, token: &[u8], px: i64) -> (Vec<u8>, i64) {
    acquire(con, key, token, px).unwrap_or_else(|| {
        panic!(
            "LOCK.ACQUIRE {key} {:?} PX {px} should grant",
            String::from_utf8_lossy(token)
        )
    })
}

pub fn release(con: &mut Connection, key: &str, token: &[u8]) -> i64 {
    as_int(&ok(con, &rcmd!("LOCK.RELEASE", key, token)))
}

pub fn extend_px(con: &mut Connection, key: &str, token: &[u8], px: i64) -> i64 {
    as_int(&ok(con, &rcmd!("LOCK.EXTEND", key, token, "PX", px)))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub token: Vec<u8>,
    pub fence: i64,
    pub ttl: i64,
    pub waiters: i64,
}

/// Field/value pairs of a reply (a flat array under RESP2, a map under RESP3).
#[track_caller]
pub fn field_pairs(v: &Value) -> Vec<(Vec<u8>, Value)> {
    match v {
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd-length field list {v:?}");
            items
                .chunks(2)
                .map(|c| (as_bytes(&c[0]), c[1].clone()))
                .collect()
        }
        Value::Map(items) => items
            .iter()
            .map(|(k, v)| (as_bytes(k), v.clone()))
            .collect(),
        other => panic!("expected field/value pairs, got {other:?}"),
    }
}

/// Parses a `LOCK.INFO` reply (flat field/value array under RESP2, map under RESP3).
pub fn parse_info(v: &Value) -> Option<LockInfo> {
    if *v == Value::Nil {
        return None;
    }
    let pairs = field_pairs(v);
    let get = |name: &str| -> Value {
        pairs
            .iter()
            .find(|(k, _)| k == name.as_bytes())
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("LOCK.INFO reply lacks `{name}`: {v:?}"))
    };
    let token = get("token");
    assert!(
        matches!(token, Value::BulkString(_)),
        "LOCK.INFO token should be a bulk string: {v:?}"
    );
    for name in ["fence", "ttl", "waiters"] {
        assert!(
            matches!(get(name), Value::Int(_)),
            "LOCK.INFO {name} should be an integer: {v:?}"
        );
    }
    Some(LockInfo {
        token: as_bytes(&token),
        fence: as_int(&get("fence")),
        ttl: as_int(&get("ttl")),
        waiters: as_int(&get("waiters")),
    })
}

pub fn info(con: &mut Connection, key: &str) -> Option<LockInfo> {
    parse_info(&ok(con, &rcmd!("LOCK.INFO", key)))
}

/// `LOCK.INFO` that must show a lock.
pub fn info_some(con: &mut Connection, key: &str) -> LockInfo {
    info(con, key).unwrap_or_else(|| panic!("LOCK.INFO {key} should show a lock"))
}

pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    as_int(&ok(con, &rcmd!("PTTL", key)))
}

pub fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    as_int(&ok(con, &rcmd!("PEXPIRETIME", key)))
}

pub fn exists(con: &mut Connection, key: &str) -> bool {
    as_int(&ok(con, &rcmd!("EXISTS", key))) == 1
}

pub fn dbsize(con: &mut Connection) -> i64 {
    as_int(&ok(con, &rcmd!("DBSIZE")))
}

pub fn type_of(con: &mut Connection, key: &str) -> String {
    String::from_utf8(as_bytes(&ok(con, &rcmd!("TYPE", key)))).unwrap()
}

pub fn ping(con: &mut Connection) {
    let v = ok(con, &rcmd!("PING"));
    assert_eq!(as_bytes(&v), b"PONG", "PING answered {v:?}");
}

/// `WAIT n 5000` on `con` (the connection that did the writes) must report at least `n`.
pub fn wait_replicas(con: &mut Connection, n: i64) {
    let got = as_int(&ok(con, &rcmd!("WAIT", n, 5000)));
    assert!(got >= n, "WAIT {n} 5000 answered {got}");
}

/// Waits until `replica` has processed everything `master` has put in its replication stream so
/// far, whoever wrote it: a client, or the module from a timer (the epoch record after a
/// promotion), which a `WAIT` on a client's connection does not cover.
pub fn wait_replica_caught_up(master: &Server, replica: &Server) {
    let offset = |s: &Server| -> i64 {
        s.info_field("replication", "master_repl_offset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1)
    };
    let target = offset(master);
    let deadline = Instant::now() + startup_deadline();
    loop {
        let got = offset(replica);
        if got >= target {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "replica at offset {got}, master at {target}\n{}",
                replica.log_tail(30)
            );
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Current Unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Asserts that `got` is within `[want - slack, want]` (remaining TTLs only go down).
#[track_caller]
pub fn assert_ttl_close(got: i64, want: i64, slack: i64, what: &str) {
    assert!(
        got <= want && got >= want - slack,
        "{what}: TTL {got} ms, expected within {slack} ms below {want} ms"
    );
}

pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Raw RESP connections
// ---------------------------------------------------------------------------------------------

/// A reply read by `RawConn`, exactly as it came on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Vec<u8>),
    Array(Vec<Resp>),
    /// `$-1`, `*-1` or RESP3 `_`.
    Nil,
    /// Anything else RESP3 can send (map, set, double, boolean, verbatim, …), kept as its type
    /// byte and elements.
    Other(u8, Vec<Resp>),
}

/// A plain TCP connection speaking RESP by hand: send a command and walk away, close the socket
/// while the server is blocked on it, pipeline, or read replies with a strict parser.
pub struct RawConn {
    reader: std::io::BufReader<std::net::TcpStream>,
}

impl RawConn {
    pub fn connect(server: &Server) -> RawConn {
        let stream = std::net::TcpStream::connect(("127.0.0.1", server.port()))
            .unwrap_or_else(|e| panic!("connect to {}: {e}", server.port()));
        stream.set_read_timeout(Some(io_timeout())).unwrap();
        stream.set_write_timeout(Some(io_timeout())).unwrap();
        stream.set_nodelay(true).unwrap();
        RawConn {
            reader: std::io::BufReader::new(stream),
        }
    }

    pub fn stream(&self) -> &std::net::TcpStream {
        self.reader.get_ref()
    }

    /// Sends one command (an array of bulk strings) without reading the reply.
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        use std::io::Write;
        self.reader
            .get_mut()
            .write_all(&resp_commands(&[args]))
            .expect("write to server");
    }

    /// Reads one reply; `Err` on a closed connection, a timeout or malformed RESP.
    pub fn read(&mut self) -> Result<Resp, String> {
        read_resp(&mut self.reader, 0)
    }

    /// Sends a command and reads its reply, which must arrive.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Resp {
        self.send(args);
        self.read()
            .unwrap_or_else(|e| panic!("reading the reply: {e}"))
    }

    /// `CLIENT ID` of this connection.
    pub fn client_id(&mut self) -> i64 {
        match self.call(&["CLIENT", "ID"]) {
            Resp::Int(id) => id,
            other => panic!("CLIENT ID answered {other:?}"),
        }
    }

    /// Closes both directions at once.
    pub fn close(self) {
        let _ = self.stream().shutdown(std::net::Shutdown::Both);
    }
}

/// Several commands encoded as RESP arrays of bulk strings, to be sent in one write so that the
/// server reads them in one pass.
pub fn resp_commands<C: AsRef<[A]>, A: AsRef<[u8]>>(commands: &[C]) -> Vec<u8> {
    let mut buf = Vec::new();
    for args in commands {
        let args = args.as_ref();
        buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            let a = a.as_ref();
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
    }
    buf
}

/// Waits until the server has closed connection `id`, then for two more round trips, so that
/// work it scheduled on the disconnect (in the next event-loop pass) has run.
#[track_caller]
pub fn wait_client_gone(con: &mut Connection, id: i64) {
    wait_until(
        &format!("connection {id} closed"),
        Duration::from_secs(5),
        || as_bytes(&ok(con, &rcmd!("CLIENT", "LIST", "ID", id))).is_empty(),
    );
    ping(con);
    ping(con);
}

fn read_line(r: &mut dyn std::io::BufRead) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    let n = r.read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("connection closed".into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(format!("line without CRLF: {:?}", lossy(&line)));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_len(raw: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad length or integer {:?}", lossy(raw)))
}

/// A strict RESP2/RESP3 reader.
pub fn read_resp(r: &mut dyn std::io::BufRead, depth: usize) -> Result<Resp, String> {
    if depth > 32 {
        return Err("reply nested too deeply".into());
    }
    let line = read_line(r)?;
    let (&kind, rest) = line.split_first().ok_or("empty reply line")?;
    let elements = |r: &mut dyn std::io::BufRead, n: i64| -> Result<Vec<Resp>, String> {
        (0..n).map(|_| read_resp(r, depth + 1)).collect()
    };
    Ok(match kind {
        b'+' => Resp::Simple(rest.to_vec()),
        b'-' => Resp::Error(rest.to_vec()),
        b':' => Resp::Int(parse_len(rest)?),
        b'_' => Resp::Nil,
        b'$' | b'=' | b'!' => {
            let n = parse_len(rest)?;
            if n == -1 && kind == b'$' {
                return Ok(Resp::Nil);
            }
            if n < 0 {
                return Err(format!("negative bulk length {n}"));
            }
            let mut body = vec![0u8; n as usize + 2];
            std::io::Read::read_exact(r, &mut body).map_err(|e| e.to_string())?;
            if !body.ends_with(b"\r\n") {
                return Err("bulk string without CRLF".into());
            }
            body.truncate(n as usize);
            match kind {
                b'$' => Resp::Bulk(body),
                b'!' => Resp::Error(body),
                _ => Resp::Other(kind, vec![Resp::Bulk(body)]),
            }
        }
        b'*' | b'~' | b'>' => {
            let n = parse_len(rest)?;
            if n == -1 && kind == b'*' {
                return Ok(Resp::Nil);
            }
            if n < 0 {
                return Err(format!("negative array length {n}"));
            }
            let items = elements(r, n)?;
            if kind == b'*' {
                Resp::Array(items)
            } else {
                Resp::Other(kind, items)
            }
        }
        b'%' | b'|' => {
            let n = parse_len(rest)?;
            if n < 0 {
                return Err(format!("negative map length {n}"));
            }
            Resp::Other(kind, elements(r, 2 * n)?)
        }
        b',' | b'#' | b'(' => Resp::Other(kind, vec![Resp::Simple(rest.to_vec())]),
        other => return Err(format!("unknown reply type {:?}", other as char)),
    })
}

/// Polls `LOCK.INFO` until `key` has `n` waiters: a state change in the server that a test can
/// only observe, within a bounded deadline.
/// The `waiters` field of `LOCK.INFO key`, for a lock of any kind (0 when there is no lock).
pub fn waiters_of(con: &mut Connection, key: &str) -> i64 {
    let v = ok(con, &rcmd!("LOCK.INFO", key));
    if v == Value::Nil {
        return 0;
    }
    field_pairs(&v)
        .iter()
        .find(|(k, _)| k == b"waiters")
        .map_or(0, |(_, v)| as_int(v))
}

#[track_caller]
pub fn wait_waiters(con: &mut Connection, key: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10) * time_scale();
    loop {
        let now = waiters_of(con, key);
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key}: {now} waiters, expected {n}"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

// ---------------------------------------------------------------------------------------------
// Waiters and counters
// ---------------------------------------------------------------------------------------------

/// Polls `f` until it answers `true`, at most `limit` times `time_scale()`: for a state change in
/// the server that a test can only observe.
#[track_caller]
pub fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit * time_scale();
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// What a waiter's `LOCK.ACQUIRE … BLOCK` answered: the reply (a server error as its full text),
/// how long it took, and when it arrived.
#[derive(Clone, Debug)]
pub struct WaitReply {
    pub reply: Result<Value, String>,
    pub took: Duration,
    pub at: Instant,
}

impl WaitReply {
    /// The grant `(token, fence)`; anything else (nil, an error) fails the test.
    #[track_caller]
    pub fn granted(&self) -> (Vec<u8>, i64) {
        match &self.reply {
            Ok(v @ Value::Array(_)) => parse_grant(v).unwrap(),
            other => panic!("the waiter should be granted, got {other:?}"),
        }
    }

    /// The reply is nil (a timeout), not a grant and not an error.
    #[track_caller]
    pub fn assert_nil(&self) {
        assert!(
            matches!(self.reply, Ok(Value::Nil)),
            "the waiter should get nil, got {:?}",
            self.reply
        );
    }

    /// The full error text; anything else fails the test.
    #[track_caller]
    pub fn error(&self) -> &str {
        match &self.reply {
            Err(e) => e,
            Ok(v) => panic!("the waiter should get an error, got {v:?}"),
        }
    }
}

/// A client blocked (or about to block) in `LOCK.ACQUIRE … BLOCK` on a thread of its own.
pub struct Waiter {
    rx: std::sync::mpsc::Receiver<WaitReply>,
    /// `CLIENT ID` of the waiter's connection.
    pub id: i64,
    /// When the command was about to be sent.
    pub started: Instant,
}

impl Waiter {
    /// The reply; fails the test if none arrives within 10 s (times `time_scale()`).
    #[track_caller]
    pub fn recv(&self) -> WaitReply {
        self.recv_within(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("the waiter never answered"))
    }

    /// The reply, if it arrives within `limit` (times `time_scale()`).
    pub fn recv_within(&self, limit: Duration) -> Option<WaitReply> {
        self.rx.recv_timeout(limit * time_scale()).ok()
    }

    /// The reply, if it has arrived already.
    pub fn try_recv(&self) -> Option<WaitReply> {
        self.rx.try_recv().ok()
    }

    /// Shorthand for `recv().granted()`.
    #[track_caller]
    pub fn granted(&self) -> (Vec<u8>, i64) {
        self.recv().granted()
    }
}

/// Starts a client on 127.0.0.1:`port` that sends `LOCK.ACQUIRE key token PX px BLOCK block_ms`
/// from a thread of its own. It returns at once: wait for the server to count the waiter
/// (`wait_waiters`, `wait_total_waiters`) before relying on its place in the queue.
pub fn spawn_waiter_on(port: u16, key: &str, token: &str, px: i64, block_ms: i64) -> Waiter {
    spawn_waiter_with_on(port, key, token, px, block_ms, &[])
}

/// `spawn_waiter` with more options (`SHARED`, `LIMIT n`, `EPHEMERAL`).
pub fn spawn_waiter_with(
    server: &Server,
    key: &str,
    token: &str,
    px: i64,
    block_ms: i64,
    options: &[&str],
) -> Waiter {
    spawn_waiter_with_on(server.port(), key, token, px, block_ms, options)
}

pub fn spawn_waiter_with_on(
    port: u16,
    key: &str,
    token: &str,
    px: i64,
    block_ms: i64,
    options: &[&str],
) -> Waiter {
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client url");
    let mut con = client
        .get_connection_with_timeout(io_timeout())
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    // Long enough for the longest wait a test asks for.
    let read_timeout = io_timeout().max(Duration::from_millis(block_ms as u64 + 10_000));
    con.set_read_timeout(Some(read_timeout)).unwrap();
    con.set_write_timeout(Some(io_timeout())).unwrap();
    let id = as_int(&ok(&mut con, &rcmd!("CLIENT", "ID")));
    let (tx, rx) = std::sync::mpsc::channel();
    let (key, token) = (key.to_string(), token.to_string());
    let started = Instant::now();
    thread::spawn(move || {
        let t = Instant::now();
        let mut cmd = rcmd!("LOCK.ACQUIRE", &key, &token, "PX", px, "BLOCK", block_ms);
        for o in &options {
            cmd.arg(o);
        }
        let reply = run(&mut con, &cmd).map_err(|e| err_text(&e));
        let _ = tx.send(WaitReply {
            reply,
            took: t.elapsed(),
            at: Instant::now(),
        });
    });
    Waiter { rx, id, started }
}

/// `spawn_waiter_on` the server's port.
pub fn spawn_waiter(server: &Server, key: &str, token: &str, px: i64, block_ms: i64) -> Waiter {
    spawn_waiter_on(server.port(), key, token, px, block_ms)
}

/// The counter `redislock_<name>` of `INFO redislock`.
pub fn stat(server: &Server, name: &str) -> i64 {
    stat_in(&server.info_text("redislock"), name)
}

/// The counter `redislock_<name>` in the text of `INFO redislock`.
#[track_caller]
pub fn stat_in(info: &str, name: &str) -> i64 {
    field(info, &format!("redislock_{name}"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO redislock lacks redislock_{name}:\n{info}"))
}

/// Waits until the server counts `n` blocked `LOCK.ACQUIRE` clients in all (`INFO`, so that no
/// key is touched).
#[track_caller]
pub fn wait_total_waiters(s: &Server, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10) * time_scale();
    loop {
        let now = stat(s, "waiters");
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{now} waiters in all, expected {n}\n{}",
            s.log_tail(20)
        );
        thread::sleep(Duration::from_millis(2));
    }
}

impl Server {
    /// The whole text of `INFO <section>`.
    pub fn info_text(&self, section: &str) -> String {
        let mut con = self.conn();
        redis::cmd("INFO").arg(section).query(&mut con).unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// Fence epochs
// ---------------------------------------------------------------------------------------------

/// Where the epoch starts in a fence (`fence >> EPOCH_SHIFT` is the epoch).
pub const EPOCH_SHIFT: u32 = 51;

/// The epoch of a fence.
pub fn epoch_of(fence: i64) -> i64 {
    fence >> EPOCH_SHIFT
}

/// Promotes `server` `times` times (`REPLICAOF` a port nobody listens on, then
/// `REPLICAOF NO ONE`), so that its fences come from a higher epoch than a fresh server's. Do it
/// before writing: the data stays, but nothing is meant to replicate.
pub fn promote_times(server: &Server, times: usize) {
    let mut con = server.conn();
    for _ in 0..times {
        let nobody = free_port();
        assert_eq!(
            ok(&mut con, &rcmd!("REPLICAOF", "127.0.0.1", nobody)),
            Value::Okay
        );
        assert_eq!(ok(&mut con, &rcmd!("REPLICAOF", "NO", "ONE")), Value::Okay);
    }
    server.wait_info("replication", "role", "master");
}

impl RawConn {
    /// Sends a command and reads its reply; `None` if none arrives within the read timeout.
    pub fn call_or_timeout<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Option<Resp> {
        self.send(args);
        self.read().ok()
    }
}

/// Sleeps until the wall clock (the server's clock too) has passed `at_ms` (Unix ms).
pub fn sleep_until_wall_ms(at_ms: i64) {
    loop {
        let now = now_ms();
        if now > at_ms {
            return;
        }
        thread::sleep(Duration::from_millis((at_ms + 1 - now) as u64));
    }
}

/// Reads the absolute expiry of `key` (which must have one) and sleeps until the server's clock
/// has passed it, so that the key is expired, without touching the key meanwhile (active expiry
/// may or may not have removed it yet).
pub fn sleep_past_expiry(con: &mut Connection, key: &str) {
    let at = pexpiretime(con, key);
    assert!(at > 0, "{key} has no expiry (PEXPIRETIME {at})");
    // Redis expires a key once its clock is past the expiry millisecond.
    sleep_until_wall_ms(at + 1);
}
