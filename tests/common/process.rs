//! Starting and stopping a server's process: a free port, readiness, `SHUTDOWN`, and the
//! clean-up in `Drop` (which also fails a test whose server logged a crash).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use super::*;

impl Server {
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

    pub(crate) fn launch_on_free_port(&mut self) {
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

    pub(crate) fn launch(&mut self, port: u16) -> Result<(), LaunchError> {
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
            // Where a test turns the AOF on, every acknowledged write is in it before the reply:
            // with `everysec` the server holds a write back while a slow fsync (a loaded
            // machine's) is still running, and a `kill -9` then loses what a test expects.
            .args(["--appendfsync", "always"])
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

    pub(crate) fn wait_ready(&mut self, pid: u32) -> Result<(), LaunchError> {
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
    pub(crate) fn probe(url: &str) -> Result<String, String> {
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
}

impl Server {
    /// `SHUTDOWN NOSAVE` and a bounded wait for the process to exit; never panics (it runs in
    /// `Drop`, possibly while a test unwinds).
    pub(crate) fn shutdown_quietly(&self, child: &mut Child) {
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
