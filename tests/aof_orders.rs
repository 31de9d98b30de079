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

/// A grant over holds whose leases ran out but were not ended yet (a transaction runs past
/// them, so the timer could not end them first) writes their end before the grant:
/// `LOCK._HOLD … END` then the new effect, in the AOF as on replicas, so that a server replaying
/// it (the previous release included, which refuses a grant over a lock of another kind) never
/// meets the old holds. And the AOF replays to the same data.
#[test]
fn a_grant_over_holds_whose_leases_ran_out_writes_their_end_first() {
    let cases: [(&str, &[&str], &[&str], &str); 3] = [
        ("s2x", &["SHARED"], &[], "LOCK._APPLY"),
        ("m2x", &["LIMIT", "2"], &[], "LOCK._APPLY"),
        ("s2m", &["SHARED"], &["LIMIT", "2"], "GRANT"),
    ];
    for (how, stop) in STOPS {
        let mut s = aof_server(false);
        let mut c = s.conn();
        for (key, first, then, grant) in cases {
            let written = s.aof_text().len();
            // Taken for 1 ms, 20 ms pass within the transaction, then taken as `then` asks.
            let mut tx = redis::pipe();
            tx.atomic();
            tx.cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg("old")
                .arg("PX")
                .arg(1)
                .arg(first);
            tx.cmd("DEBUG").arg("SLEEP").arg("0.02");
            tx.cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg("new")
                .arg("PX")
                .arg(60_000)
                .arg(then);
            let replies: Vec<redis::Value> = tx.query(&mut c).expect("the transaction");
            assert!(parse_grant(&replies[2]).is_some(), "{key}: {replies:?}");
            let aof = s.aof_text()[written..].to_string();
            let end = aof
                .find("END\r\n$3\r\nold")
                .unwrap_or_else(|| panic!("{key}: no end of the old hold in the AOF:\n{aof}"));
            assert!(
                aof[end..].contains(grant),
                "{key}: the grant is not after the end:\n{aof}"
            );
            // Nothing of the new grant before the old hold's end.
            assert!(
                !aof[..end].contains("$3\r\nnew"),
                "{key}: the grant before the end:\n{aof}"
            );
            ok(&mut c, &rcmd!("DEL", key));
        }
        restart_twice_and_check(&mut s, how, &format!("grants over ended holds; {stop}"));
    }
}
