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

mod manual;
mod run;
mod transcript;

use crate::common::*;

use run::{node_command, python_command, run_demo, rust_command};
use transcript::{check_example, CLIENT, PLAIN};

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
