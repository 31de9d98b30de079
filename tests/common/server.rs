//! `Server`: a throw-away `redis-server` with the module loaded — its connections, logs and
//! restarts.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use redis::Connection;

use super::*;

pub struct Server {
    pub(crate) child: Option<Child>,
    pub(crate) port: u16,
    pub(crate) dir: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) module: Option<PathBuf>,
    pub(crate) module_args: Vec<String>,
    pub(crate) config_file: Option<PathBuf>,
    /// A cluster node (see `ServerBuilder::cluster_enabled`).
    pub(crate) cluster: bool,
    /// Crash signs in the log do not fail the test when the server is dropped.
    pub(crate) allow_crash_signs: bool,
}

pub(crate) enum LaunchError {
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

    pub(crate) fn conn_url(&self, url: &str) -> Connection {
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
        self.restart_after(how, |_| {});
    }

    /// As `restart`, with `edit` run on the server's directory while it is down (an AOF
    /// rewritten by hand, say).
    pub fn restart_after(&mut self, how: Stop, edit: impl FnOnce(&Path)) {
        self.stop(how);
        edit(&self.dir);
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
                // A rewrite finishing meanwhile deletes the files it replaced: skip them.
                match std::fs::read(&path) {
                    Ok(bytes) => text += &String::from_utf8_lossy(&bytes),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => panic!("{}: {e}", path.display()),
                }
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
}
