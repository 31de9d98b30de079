//! Restart from the AOF in the orders operators produce (SPEC "Operations"): effects of
//! different lengths one after the other (`LOCK._APPLY` then `LOCK._HOLD`, a shared hold after
//! an exclusive lock, a semaphore place), before and after `BGREWRITEAOF`, with and without the
//! RDB preamble, ended by `kill -9` or `SHUTDOWN`. Each restart must load, twice in a row, and
//! reproduce the data exactly (`DEBUG DIGEST`, which covers values and expiries).

use crate::common::*;
use crate::persistence::aof_server;
use redis::Connection;

fn digest(c: &mut Connection) -> Vec<u8> {
    as_bytes(&ok(c, &rcmd!("DEBUG", "DIGEST")))
}

/// Restarts `s` the way `how` says and checks it comes back with the same data, then again
/// (a crash loop shows on the second start).
fn restart_twice_and_check(s: &mut Server, how: Stop, what: &str) {
    let before = digest(&mut s.conn());
    for round in 1..=2 {
        s.restart(how);
        let mut c = s.conn();
        assert_eq!(digest(&mut c), before, "{what}: data after restart {round}");
        assert!(s.crash_lines().is_empty(), "{what}: {}", s.log_tail(30));
    }
}

fn acquire_ok(c: &mut Connection, args: &[&str]) {
    let v = ok(c, &rcmd!("LOCK.ACQUIRE", args));
    assert!(parse_grant(&v).is_some(), "LOCK.ACQUIRE {args:?} -> {v:?}");
}

const STOPS: [(Stop, &str); 2] = [(Stop::Kill, "kill -9"), (Stop::NoSave, "SHUTDOWN")];

#[test]
fn a_shared_hold_after_an_exclusive_lock_replays() {
    for preamble in [true, false] {
        for (how, stop) in STOPS {
            let mut s = aof_server(preamble);
            let mut c = s.conn();
            acquire_ok(&mut c, &["b", "t", "PX", "60000"]);
            acquire_ok(&mut c, &["a", "r1", "PX", "60000", "SHARED"]);
            acquire_ok(&mut c, &["c", "s1", "PX", "60000", "LIMIT", "3"]);
            acquire_ok(&mut c, &["d", "x", "PX", "60000"]);
            let what = format!("exclusive, shared, semaphore; preamble {preamble}; {stop}");
            restart_twice_and_check(&mut s, how, &what);
        }
    }
}

#[test]
fn a_shared_hold_after_a_rewrite_and_a_release_replays() {
    for preamble in [true, false] {
        for (how, stop) in STOPS {
            let mut s = aof_server(preamble);
            let mut c = s.conn();
            acquire_ok(&mut c, &["a", "r1", "PX", "60000", "SHARED"]);
            ok(&mut c, &rcmd!("BGREWRITEAOF"));
            s.wait_aof_rewrite_done();
            assert_eq!(release(&mut c, "a", b"r1"), 1);
            acquire_ok(&mut c, &["a", "r2", "PX", "60000", "SHARED"]);
            acquire_ok(&mut c, &["e", "w", "PX", "60000"]);
            let what = format!("shared, rewrite, release, shared; preamble {preamble}; {stop}");
            restart_twice_and_check(&mut s, how, &what);
        }
    }
}

/// A rewrite without the preamble writes each key's effects: an exclusive lock's grant
/// (`LOCK._APPLY`, 5 arguments) and then holders (`LOCK._HOLD`, 9) as the base's first commands.
#[test]
fn a_rewritten_base_of_grants_and_holds_replays() {
    for (how, stop) in STOPS {
        let mut s = aof_server(false);
        let mut c = s.conn();
        acquire_ok(&mut c, &["x", "t", "PX", "60000"]);
        for r in ["r1", "r2", "r3"] {
            acquire_ok(&mut c, &["y", r, "PX", "60000", "SHARED"]);
        }
        acquire_ok(&mut c, &["z", "p", "PX", "60000", "LIMIT", "2"]);
        ok(&mut c, &rcmd!("LOCK.FENCE", "g", "7", "SET", "v", "1"));
        ok(&mut c, &rcmd!("BGREWRITEAOF"));
        s.wait_aof_rewrite_done();
        acquire_ok(&mut c, &["y", "r4", "PX", "60000", "SHARED"]);
        restart_twice_and_check(&mut s, how, &format!("rewritten base; {stop}"));
    }
}
