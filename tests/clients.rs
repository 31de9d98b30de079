//! The client examples (docs/clients.md, "Plain commands from any client"), run against a real
//! server with the module:
//!
//! - `examples/python/lock_demo.py` (redis-py) with the venv's interpreter, `target/pyenv`;
//! - `examples/node/lock_demo.js` (ioredis) with `node`, modules from `examples/node/node_modules`;
//! - `clients/rust/examples/lock_demo.rs` (the Rust client, `redislock-client`), its Cargo
//!   example, built by the test itself;
//! - `examples/redis_rs.rs`, the Rust program docs/clients.md shows whole: what it prints must be
//!   what the page shows after it (fences aside, which differ on every run).
//!
//! `scripts/clients.sh` installs the Python and Node.js libraries (`make test` runs it). A missing
//! library fails these tests: they never skip. `REDISLOCK_PYTHON` and `REDISLOCK_NODE` select
//! other interpreters.
//!
//! Each example prints the same transcript; the checks below read it line by line and compare it
//! with the server's own count of the commands the example sent. The Rust client's differs in
//! one step: its stale holder's extend is refused by the client itself (the hold's lease clock
//! ran out), and dropping that hold sends its release (answered 0).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// An example that takes longer than this is killed and fails.
const DEMO_DEADLINE: Duration = Duration::from_secs(60);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

struct Outcome {
    success: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn describe(&self, what: &str) -> String {
        format!(
            "{what} exited with {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` with the server's port in `REDIS_PORT`, as the manual tells a reader to; output
/// goes to files in the server's directory (no pipe to fill up), and the process is killed after
/// `DEMO_DEADLINE`.
fn run_demo(server: &Server, name: &str, mut cmd: Command) -> Outcome {
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

// ---------------------------------------------------------------------------------------------
// The three clients
// ---------------------------------------------------------------------------------------------

fn python_command() -> Command {
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

fn node_command() -> Command {
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
fn rust_command() -> Command {
    cargo_example("lock_demo")
}

/// The Cargo examples these tests run, with their packages, built once per test binary.
const CARGO_EXAMPLES: [(&str, &str); 2] =
    [("redislock-client", "lock_demo"), ("redislock", "redis_rs")];

/// Builds the Cargo examples (a no-op after `cargo test`, which builds examples too) with the
/// profile of this test binary, once, and returns the command that runs `name`.
fn cargo_example(name: &str) -> Command {
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

// ---------------------------------------------------------------------------------------------
// The transcript
// ---------------------------------------------------------------------------------------------

/// The lines of `out` that start with `prefix`, without it.
fn lines_after<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines().filter_map(|l| l.strip_prefix(prefix)).collect()
}

/// The one line that starts with `prefix`, without it.
#[track_caller]
fn line_after<'a>(out: &'a str, prefix: &str) -> &'a str {
    let found = lines_after(out, prefix);
    assert_eq!(
        found.len(),
        1,
        "expected one line starting with {prefix:?}:\n{out}"
    );
    found[0]
}

/// `name=value` from a line of `key=value` words.
#[track_caller]
fn word<'a>(line: &'a str, name: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

#[track_caller]
fn fence(line: &str) -> i64 {
    let f: i64 = word(line, "fence")
        .parse()
        .unwrap_or_else(|_| panic!("fence is not an integer in {line:?}"));
    assert!(f > 0, "fence must be positive: {line:?}");
    f
}

#[track_caller]
fn assert_generated_token(line: &str) {
    let t = word(line, "token");
    assert!(
        t.len() == 32
            && t.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "a generated token is 32 lowercase hex characters: {line:?}"
    );
}

/// Calls of `cmd` in `INFO commandstats`.
fn calls(server: &Server, cmd: &str) -> i64 {
    let stats = server
        .info_field("commandstats", &format!("cmdstat_{cmd}"))
        .unwrap_or_default();
    word(&stats.replace(',', " "), "calls").parse().unwrap()
}

/// Where an example's transcript differs: the stale holder's extend, and the server's counts of
/// LOCK.EXTEND and LOCK.RELEASE.
struct Stale {
    extend: &'static str,
    extends: i64,
    releases: i64,
}

/// Plain commands: the stale holder's LOCK.EXTEND is sent, and answered 0.
const PLAIN: Stale = Stale {
    extend: "0 (lease lost)",
    extends: 2,
    releases: 4,
};

/// The Rust client: its lease clock ran out, so the extend is refused without a request; the
/// dropped hold's release is sent.
const CLIENT: Stale = Stale {
    extend: "lost (LeaseRanOut, nothing sent)",
    extends: 1,
    releases: 5,
};

/// Runs one example against a fresh server and checks its transcript.
fn check_example(name: &str, cmd: Command, stale: Stale) {
    let s = Server::start();
    let o = run_demo(&s, name, cmd);
    let out = o.stdout.as_str();
    let context = format!("{}\n{}", o.describe(name), s.log_tail(20));
    assert!(o.success, "{context}");
    assert_eq!(out.lines().last(), Some("demo OK"), "{context}");
    assert!(o.stderr.trim().is_empty(), "{context}");

    // 1. acquire with a generated token, two fenced writes, extend, release.
    let acquired = line_after(out, "acquired: ");
    assert_generated_token(acquired);
    let f = fence(acquired);
    let accepted = lines_after(out, "resource: write with fence ");
    assert!(
        accepted.contains(&format!("{f} accepted (part 1)").as_str())
            && accepted.contains(&format!("{f} accepted (part 2)").as_str()),
        "both writes of the holder are accepted with fence {f}:\n{out}"
    );
    assert!(
        line_after(out, "extended: ").starts_with("1 (ttl "),
        "{out}"
    );
    assert_eq!(line_after(out, "resource holds: "), "part 1, part 2");

    // 2. the lease runs out: B's fence is larger, and A's late write is rejected.
    let a = fence(line_after(out, "holder A acquired: "));
    let b = fence(line_after(out, "holder B acquired: "));
    assert!(a > f && b > a, "fences increase: {f} < {a} < {b}:\n{out}");
    assert!(
        accepted.contains(&format!("{b} accepted (B's report)").as_str()),
        "{out}"
    );
    assert_eq!(
        lines_after(out, "resource: write with fence ")
            .iter()
            .filter(|l| l.contains("rejected"))
            .collect::<Vec<_>>(),
        [&format!("{a} rejected (highest seen {b})").as_str()],
        "exactly A's late write is rejected:\n{out}"
    );
    assert_eq!(line_after(out, "stale holder extend: "), stale.extend);

    // 3. BLOCK: the waiter is queued, then granted on release with a larger fence.
    let h = fence(line_after(out, "holder acquired: "));
    assert!(
        line_after(out, "waiter queued: ").starts_with("waiters=1"),
        "{out}"
    );
    assert_eq!(line_after(out, "holder released: "), "1");
    let granted = line_after(out, "waiter granted: ");
    assert_generated_token(granted);
    let g = fence(granted);
    assert!(h > b && g > h, "fences increase: {b} < {h} < {g}:\n{out}");
    let waited: i64 = granted
        .rsplit_once(" after ")
        .and_then(|(_, ms)| ms.strip_suffix(" ms"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no wait time in {granted:?}"));
    // The holder releases 200 ms after it saw the waiter queued; BLOCK allows 5000 ms.
    assert!(
        (150..4_900).contains(&waited),
        "the waiter waited {waited} ms:\n{out}"
    );
    assert_eq!(lines_after(out, "released: ").len(), 3, "{out}");

    // The server saw exactly what the transcript tells, and every lock was released.
    assert_eq!(calls(&s, "lock.acquire"), 5, "{context}");
    assert_eq!(calls(&s, "lock.extend"), stale.extends, "{context}");
    assert_eq!(calls(&s, "lock.release"), stale.releases, "{context}");
    let mut c = s.conn();
    assert_eq!(info(&mut c, "demo:report"), None);
    assert_eq!(info(&mut c, "demo:queue"), None);
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn python_example() {
    check_example("lock_demo.py", python_command(), PLAIN);
}

#[test]
fn node_example() {
    check_example("lock_demo.js", node_command(), PLAIN);
}

#[test]
fn rust_example() {
    check_example("lock_demo (Rust)", rust_command(), CLIENT);
}

/// Against a server without the module every example reports the unexpected reply (an unknown
/// command) and exits non-zero.
#[test]
fn examples_fail_without_the_module() {
    let s = Server::builder().without_module().start();
    for (name, cmd) in [
        ("lock_demo.py", python_command()),
        ("lock_demo.js", node_command()),
        ("lock_demo (Rust)", rust_command()),
    ] {
        let o = run_demo(&s, name, cmd);
        assert!(!o.success, "{}", o.describe(name));
        assert!(
            o.stderr.contains("demo FAILED") && o.stderr.to_lowercase().contains("unknown command"),
            "{}",
            o.describe(name)
        );
        assert!(!o.stdout.contains("demo OK"), "{}", o.describe(name));
    }
}

// ---------------------------------------------------------------------------------------------
// The Rust program of docs/clients.md
// ---------------------------------------------------------------------------------------------

/// The fenced blocks of `page` after the line `<!-- example: {path} -->`: the program, and the
/// block after the next `<!-- output -->`.
fn shown_program_and_output(page: &str, path: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = page.lines().collect();
    let marker = format!("<!-- example: {path} -->");
    let at = lines
        .iter()
        .position(|l| l.trim() == marker)
        .unwrap_or_else(|| panic!("docs/clients.md shows no {path}"));
    let block = |from: usize| -> (Vec<String>, usize) {
        let open = from
            + lines[from..]
                .iter()
                .position(|l| l.starts_with("```"))
                .unwrap();
        let close = open
            + 1
            + lines[open + 1..]
                .iter()
                .position(|l| l.starts_with("```"))
                .unwrap();
        (
            lines[open + 1..close]
                .iter()
                .map(|l| l.to_string())
                .collect(),
            close + 1,
        )
    };
    let (program, next) = block(at + 1);
    let output_at = next
        + lines[next..]
            .iter()
            .position(|l| l.trim() == "<!-- output -->")
            .unwrap_or_else(|| panic!("docs/clients.md shows no output of {path}"));
    let (output, _) = block(output_at + 1);
    (program.join("\n"), output)
}

/// A line with each fence (an integer of 13 digits or more) replaced by `#`.
fn without_fences(line: &str) -> String {
    let mut out = String::new();
    let mut digits = String::new();
    for c in line.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        out.push_str(if digits.len() >= 13 { "#" } else { &digits });
        digits.clear();
        out.push(c);
    }
    out.pop();
    out.trim_end().to_string()
}

#[test]
fn rust_program_of_the_manual_prints_what_it_shows() {
    let page = std::fs::read_to_string(repo().join("docs/clients.md")).unwrap();
    assert!(
        page.contains("differ on") && page.contains("every run"),
        "docs/clients.md must say that fences differ"
    );
    let (program, output) = shown_program_and_output(&page, "examples/redis_rs.rs");
    let file = std::fs::read_to_string(repo().join("examples/redis_rs.rs")).unwrap();
    assert_eq!(
        program.trim_end(),
        file.trim_end(),
        "docs/clients.md shows examples/redis_rs.rs otherwise: copy it again"
    );
    let s = Server::start();
    let o = run_demo(&s, "redis_rs", cargo_example("redis_rs"));
    assert!(o.success, "{}", o.describe("redis_rs"));
    let got: Vec<String> = o.stdout.lines().map(without_fences).collect();
    let want: Vec<String> = output.iter().map(|l| without_fences(l)).collect();
    assert_eq!(got, want, "the page shows otherwise:\n{}", o.stdout);
    assert!(
        o.stdout
            .lines()
            .next()
            .is_some_and(|l| l != without_fences(l)),
        "a fence is printed"
    );
}
