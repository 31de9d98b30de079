//! Running an example: the three clients' commands (Python, Node.js, the Rust client's Cargo
//! example), each run against a server with a deadline, its output kept.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// An example that takes longer than this is killed and fails.
const DEMO_DEADLINE: Duration = Duration::from_secs(60);

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub struct Outcome {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn describe(&self, what: &str) -> String {
        format!(
            "{what} exited with {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` with the server's port in `REDIS_PORT`, as the manual tells a reader to; output
/// goes to files in the server's directory (no pipe to fill up), and the process is killed after
/// `DEMO_DEADLINE`.
pub fn run_demo(server: &Server, name: &str, mut cmd: Command) -> Outcome {
    let out_path = server.dir().join(format!("{name}.stdout"));
    let err_path = server.dir().join(format!("{name}.stderr"));
    cmd.env("REDIS_PORT", server.port().to_string())
        .env_remove("REDIS_HOST")
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {name} ({cmd:?}): {e}"));
    let deadline = Instant::now() + DEMO_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let outcome = Outcome {
        success: status.is_some_and(|s| s.success()),
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "{}\n{}",
        outcome.describe(&format!("{name} (killed after {DEMO_DEADLINE:?})")),
        server.log_tail(20)
    );
    outcome
}

pub fn python_command() -> Command {
    let python = std::env::var_os("REDISLOCK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/pyenv/bin/python"));
    assert!(
        python.exists(),
        "no Python venv at {}: run scripts/clients.sh (make test does), or set REDISLOCK_PYTHON",
        python.display()
    );
    let probe = Command::new(&python)
        .args(["-c", "import redis"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        probe.status.success(),
        "redis-py is not installed for {}: run scripts/clients.sh (make test does)\n{}",
        python.display(),
        String::from_utf8_lossy(&probe.stderr)
    );
    let mut cmd = Command::new(python);
    cmd.arg(repo().join("examples/python/lock_demo.py"));
    cmd
}

pub fn node_command() -> Command {
    let node = std::env::var("REDISLOCK_NODE").unwrap_or_else(|_| "node".to_string());
    let version = Command::new(&node)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {node} (Node.js 20 or newer is needed): {e}"));
    assert!(version.status.success(), "{node} --version failed");
    let modules = repo().join("examples/node/node_modules/ioredis/package.json");
    assert!(
        modules.is_file(),
        "ioredis is not installed in examples/node: run scripts/clients.sh (make test does)"
    );
    let mut cmd = Command::new(node);
    cmd.arg(repo().join("examples/node/lock_demo.js"));
    cmd
}

/// Builds the Rust client's Cargo example `lock_demo` and returns the command that runs it.
pub fn rust_command() -> Command {
    cargo_example("lock_demo")
}

/// The Cargo examples these tests run, with their packages, built once per test binary.
const CARGO_EXAMPLES: [(&str, &str); 2] =
    [("redislock-client", "lock_demo"), ("redislock", "redis_rs")];

/// Builds the Cargo examples (a no-op after `cargo test`, which builds examples too) with the
/// profile of this test binary, once, and returns the command that runs `name`.
pub fn cargo_example(name: &str) -> Command {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    assert!(
        CARGO_EXAMPLES.iter().any(|(_, n)| *n == name),
        "{name} is not in CARGO_EXAMPLES"
    );
    // This binary is <target>/<profile>/deps/clients-<hash>.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let built = BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        for (package, example) in CARGO_EXAMPLES {
            let mut build = Command::new(&cargo);
            build.current_dir(repo()).args([
                "build",
                "--quiet",
                "-p",
                package,
                "--example",
                example,
            ]);
            // The directory is named after the profile ("debug" is the dev profile's).
            match profile_dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") | None => {}
                Some(profile) => {
                    build.args(["--profile", profile]);
                }
            }
            let out = build
                .output()
                .map_err(|e| format!("cannot run {cargo}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cargo build of the example {example} failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    });
    if let Err(e) = built {
        panic!("{e}");
    }
    let bin = profile_dir.join("examples").join(name);
    assert!(bin.is_file(), "{} was not built", bin.display());
    Command::new(bin)
}
