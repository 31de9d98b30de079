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

/// The commands of an AOF (RESP arrays of bulk strings), each as its arguments.
fn aof_commands(bytes: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line(b: &[u8], at: &mut usize) -> usize {
        let end = *at
            + b[*at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("CRLF");
        let n = std::str::from_utf8(&b[*at + 1..end])
            .unwrap()
            .parse()
            .unwrap();
        *at = end + 2;
        n
    }
    let (mut at, mut commands) = (0, Vec::new());
    while at < bytes.len() {
        assert_eq!(bytes[at], b'*', "an AOF of commands only");
        let n = line(bytes, &mut at);
        let args = (0..n)
            .map(|_| {
                let len = line(bytes, &mut at);
                let arg = bytes[at..at + len].to_vec();
                at += len + 2;
                arg
            })
            .collect();
        commands.push(args);
    }
    commands
}

fn aof_bytes(commands: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::new();
    for args in commands {
        out.extend(format!("*{}\r\n", args.len()).bytes());
        for a in args {
            out.extend(format!("${}\r\n", a.len()).bytes());
            out.extend(a);
            out.extend(b"\r\n");
        }
    }
    out
}

/// The previous release's master sent a grant over holds whose leases had run out without
/// their end first. A server replaying such a stream (an AOF written before an upgrade, or a
/// master one release behind) takes the grant as the master made it: the same data after the
/// restart as before, the new holder held. The stream is this release's with the ends taken
/// out.
#[test]
fn a_stream_without_the_ends_of_run_out_holds_replays() {
    let cases: [(&str, &[&str], &[&str]); 3] = [
        ("s2x", &["SHARED"], &[]),
        ("m2x", &["LIMIT", "2"], &[]),
        ("s2m", &["SHARED"], &["LIMIT", "2"]),
    ];
    let mut s = aof_server(false);
    let mut c = s.conn();
    for (key, first, then) in cases {
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
    }
    let before = digest(&mut c);
    let infos: Vec<String> = cases
        .iter()
        .map(|(key, _, _)| info_without_ttls(&mut c, key))
        .collect();
    let ends = aof_commands(s.aof_text().as_bytes())
        .iter()
        .filter(|a| is_end_of_old(a))
        .count();
    assert_eq!(
        ends,
        cases.len(),
        "this release writes each run-out hold's end:\n{}",
        s.aof_text()
    );
    s.restart_after(Stop::NoSave, |dir| {
        for entry in std::fs::read_dir(dir.join("appendonlydir")).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".incr.aof") {
                let all = aof_commands(&std::fs::read(&path).unwrap());
                let kept: Vec<_> = all.iter().filter(|a| !is_end_of_old(a)).cloned().collect();
                std::fs::write(&path, aof_bytes(&kept)).unwrap();
            }
        }
    });
    let mut c = s.conn();
    assert!(s.crash_lines().is_empty(), "{}", s.log_tail(30));
    for ((key, _, _), info) in cases.iter().zip(&infos) {
        let now = info_without_ttls(&mut c, key);
        assert_eq!(
            &now, info,
            "{key}: LOCK.INFO after replaying the stream without the ends"
        );
    }
    assert_eq!(
        digest(&mut c),
        before,
        "the data after replaying the stream without the ends"
    );
}

/// `LOCK._HOLD key n END old`: the end of the run-out hold that this release writes first.
fn is_end_of_old(args: &[Vec<u8>]) -> bool {
    args.len() == 5 && args[0] == b"LOCK._HOLD" && args[3] == b"END" && args[4] == b"old"
}

/// `LOCK.INFO` as text without its TTLs, which go down as time passes.
fn info_without_ttls(c: &mut Connection, key: &str) -> String {
    let text = format!("{:?}", ok(c, &rcmd!("LOCK.INFO", key)));
    let mut parts = text.split("int(");
    let mut out = parts.next().unwrap_or_default().to_string();
    for part in parts {
        let ttl = out.ends_with("\"ttl\"'), ");
        out += "int(";
        out += if ttl {
            &part[part.find(')').unwrap_or(0)..]
        } else {
            part
        };
    }
    out
}
