//! A multi-key request waiting through server states, and what its grant leaves behind: a
//! client pause holds the grant back, then all keys are handed on in one `MULTI`/`EXEC` that the
//! replica and an AOF restart replay exactly; a demotion answers the request and grants nothing;
//! observers of each key are woken; an `EPHEMERAL` multi-key hold goes with its connection; too
//! few replicas hold every key back, then grant them together; a `SWAPDB` that frees the keys
//! grants them.

use std::io::Write;
use std::time::{Duration, Instant};

use super::waiting::{fences_of, spawn_all};
use super::*;

fn digest(server: &Server) -> Vec<u8> {
    as_bytes(&ok(&mut server.conn(), &rcmd!("DEBUG", "DIGEST")))
}

/// Sends several commands in one write, so the server reads them in one pass.
fn pipeline(server: &Server, commands: &[&[&str]]) -> RawConn {
    let con = RawConn::connect(server);
    con.stream()
        .write_all(&resp_commands(commands))
        .expect("write");
    con
}

/// The lease of one key ends during `CLIENT PAUSE WRITE`: nothing is granted until the pause
/// ends, then every key at once, propagated as one `MULTI`/`EXEC`; the replica and a restart
/// from the AOF have the same data.
#[test]
fn a_pause_holds_the_grant_back_and_the_handoff_is_one_effect() {
    let mut m = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    grant(&mut c, "b", b"holder", 60_000);
    let w = spawn_all(&m, &["a", "b", "c"], "multi", 60_000, 0, &[]);
    wait_waiters(&mut c, "b", 1);
    let before = m.aof_text().len();
    let paused_at = Instant::now();
    let _pipe = pipeline(
        &m,
        &[
            &["LOCK.EXTEND", "b", "holder", "PX", "150"],
            &["CLIENT", "PAUSE", "900", "WRITE"],
        ],
    );
    assert!(
        w.recv_within(Duration::from_millis(600) / time_scale())
            .is_none(),
        "granted during the pause"
    );
    let fences = fences_of(&w);
    assert!(paused_at.elapsed() >= Duration::from_millis(850));
    assert_eq!(fences.len(), 3);
    let written = m.aof_text()[before..].to_string();
    let applies: Vec<usize> = written
        .match_indices("LOCK._APPLY")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(applies.len(), 3, "{written:?}");
    let multi = written.find("MULTI").expect("MULTI around the handoff");
    let exec = written[multi..]
        .find("EXEC")
        .map(|i| i + multi)
        .expect("EXEC");
    assert!(
        applies.iter().all(|&i| multi < i && i < exec),
        "{written:?}"
    );
    wait_replica_caught_up(&m, &r);
    let here = digest(&m);
    assert_eq!(digest(&r), here, "the replica");
    m.kill9_and_restart();
    assert_eq!(digest(&m), here, "a restart from the AOF");
}

/// A server that becomes a replica answers the waiting request with an error, on every key at
/// once, and grants nothing.
#[test]
fn a_demotion_answers_the_request_and_grants_nothing() {
    let m = Server::start();
    let other = Server::start();
    let mut c = m.conn();
    grant(&mut c, "k2", b"holder", 60_000);
    let w = spawn_all(&m, &["k1", "k2"], "multi", 60_000, 0, &[]);
    wait_waiters(&mut c, "k2", 1);
    ok(
        &mut c,
        &rcmd!("REPLICAOF", "127.0.0.1", other.port().to_string()),
    );
    let e = w.recv().error().to_string();
    assert!(
        e.starts_with("READONLY") || e.starts_with("UNBLOCKED"),
        "{e}"
    );
    assert_eq!(stat(&m, "waiters"), 0);
    m.wait_info("replication", "master_link_status", "up");
    assert!(!exists(&mut c, "k1"));
}

/// Observers of each key are woken by the multi-key grant, with its fence.
#[test]
fn observers_of_every_key_see_the_grant() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "o2", b"holder", 60_000);
    let watch = |key: &str, after: i64| {
        let con = s.conn();
        con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        spawn_blocked(con, rcmd!("LOCK.OBSERVE", key, "AFTER", after, "BLOCK", 0))
    };
    let (o1, o2) = (watch("o1", 0), watch("o2", f0));
    wait_until("two observers", Duration::from_secs(10), || {
        stat(&s, "observers") == 2
    });
    let w = spawn_all(&s, &["o1", "o2"], "multi", 60_000, 0, &[]);
    wait_waiters(&mut c, "o2", 1);
    assert_eq!(release(&mut c, "o2", b"holder"), 1);
    let fences = fences_of(&w);
    for (o, fence) in [(o1, fences[0]), (o2, fences[1])] {
        let seen = o.recv().reply.expect("an observation");
        let Value::Array(items) = seen else {
            panic!("[fence, data]: {seen:?}")
        };
        assert_eq!(as_int(&items[0]), fence);
    }
}

/// An `EPHEMERAL` multi-key hold is released on every key when its connection closes, and the
/// request waiting behind it gets them.
#[test]
fn an_ephemeral_multi_key_hold_goes_with_its_connection() {
    let s = Server::start();
    let mut c = s.conn();
    let mut raw = RawConn::connect(&s);
    let id = raw.client_id();
    let reply = raw.call(&[
        "LOCK.ACQUIREALL",
        "2",
        "e1",
        "e2",
        "owner",
        "PX",
        "60000",
        "EPHEMERAL",
    ]);
    // [token, [fence, fence]]: the token's bytes, then two fences.
    let shown = format!("{reply:?}");
    assert!(
        shown.contains("[111, 119, 110, 101, 114]") && shown.matches("Int(").count() == 2,
        "{shown}"
    );
    let w = spawn_all(&s, &["e2", "e1"], "next", 60_000, 0, &[]);
    wait_waiters(&mut c, "e1", 1);
    raw.close();
    wait_client_gone(&mut c, id);
    assert_eq!(fences_of(&w).len(), 2);
    assert_eq!(holder(&mut c, "e1"), Some(b"next".to_vec()));
}

/// The multi-key waiter is granted (its reply queued) and killed in the same transaction: every
/// key is given back, and the waiter behind it on one of them is served before its timeout.
#[test]
fn a_grant_whose_client_left_before_the_reply_is_given_back_on_every_key() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r1", b"holder", 60_000);
    let doomed = spawn_all(&s, &["r1", "r2"], "doomed", 60_000, 0, &[]);
    wait_waiters(&mut c, "r1", 1);
    // r2 is free, but the earlier request waits for it: so does this one.
    let next = spawn_waiter(&s, "r2", "next", 60_000, 5_000);
    wait_until("two waiters", Duration::from_secs(10), || {
        stat(&s, "waiters") == 2
    });
    let replies: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("r1")
        .arg("holder")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(doomed.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, Value::Array(vec![Value::Int(1), Value::Int(1)]));
    assert!(doomed.recv().reply.is_err(), "closed without a grant");
    let answer = next.recv();
    assert_eq!(answer.granted().0, b"next");
    assert!(answer.took < Duration::from_millis(5_000));
    assert!(!exists(&mut c, "r1"), "r1 given back");
}

/// `FLUSHALL` while a multi-key request waits: its keys are free, and it is granted them all.
#[test]
fn a_flush_frees_the_keys_of_a_waiting_request() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "f1", b"holder", 60_000);
    grant(&mut c, "f2", b"holder", 60_000);
    let w = spawn_all(&s, &["f2", "f1"], "multi", 60_000, 0, &[]);
    wait_waiters(&mut c, "f1", 1);
    ok(&mut c, &rcmd!("FLUSHALL"));
    assert_eq!(fences_of(&w).len(), 2);
    assert_eq!(holder(&mut c, "f1"), Some(b"multi".to_vec()));
}

/// `DEBUG RELOAD` while a multi-key request waits: it keeps waiting, and the lease end that
/// follows the reload hands it every key.
#[test]
fn a_reload_keeps_the_request_and_the_lease_end_hands_it_on() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, f0) = grant(&mut c, "l1", b"holder", 60_000);
    let w = spawn_all(&s, &["l2", "l1"], "multi", 60_000, 0, &[]);
    wait_waiters(&mut c, "l1", 1);
    assert_eq!(extend_px(&mut c, "l1", b"holder", 400), 1);
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    assert_eq!(info_some(&mut c, "l1").fence, f0);
    let fences = fences_of(&w);
    assert!(fences.iter().all(|&f| f > f0), "{fences:?}");
    assert_eq!(holder(&mut c, "l2"), Some(b"multi".to_vec()));
}

/// Too few replicas (`min-replicas-to-write`): the lease that ends is not handed on, and no key
/// of the waiting request is taken meanwhile; once writes are allowed again every key is granted
/// at once.
#[test]
fn unmet_min_replicas_hold_back_every_key_then_grant_them_together() {
    let m = Server::builder()
        .set("min-replicas-to-write", "1")
        .set("min-replicas-max-lag", "10")
        .start();
    let mut r = Server::start_replica_of(&m);
    let mut c = m.conn();
    grant(&mut c, "b", b"holder", 2_000);
    let w = spawn_all(&m, &["a", "b", "c"], "multi", 60_000, 0, &[]);
    wait_waiters(&mut c, "b", 1);
    r.stop(Stop::Kill);
    m.wait_info("replication", "min_slaves_good_slaves", "0");
    // Until well past the lease: the grant is a write, and writes need a replica.
    let left = info_some(&mut c, "b").ttl.max(0) as u64;
    assert!(
        w.recv_within(Duration::from_millis(left + 300)).is_none(),
        "granted without a replica"
    );
    for key in ["a", "c"] {
        assert_eq!(info(&mut c, key), None, "{key} taken in part");
    }
    ok(
        &mut c,
        &rcmd!("CONFIG", "SET", "min-replicas-to-write", "0"),
    );
    let fences = fences_of(&w);
    assert_eq!(fences.len(), 3);
    for (key, fence) in ["a", "b", "c"].iter().zip(&fences) {
        let i = info_some(&mut c, key);
        assert_eq!(
            (i.token.as_slice(), i.fence),
            (&b"multi"[..], *fence),
            "{key}"
        );
    }
}

/// `SWAPDB` raises no key events: a multi-key request in db 0, behind a hold the swap takes to
/// db 1, is granted every key all the same, and the hold stays whole in db 1.
#[test]
fn a_swapdb_that_frees_the_keys_grants_the_waiting_request() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "b", b"holder", 60_000);
    let w = spawn_all(&s, &["a", "b"], "multi", 60_000, 10_000, &[]);
    wait_waiters(&mut c, "b", 1);
    ok(&mut c, &rcmd!("SWAPDB", 0, 1));
    let fences = fences_of(&w);
    assert_eq!(fences.len(), 2);
    for key in ["a", "b"] {
        assert_eq!(info_some(&mut c, key).token, b"multi", "{key} in db 0");
    }
    ok(&mut c, &rcmd!("SELECT", 1));
    assert_eq!(info_some(&mut c, "b").token, b"holder");
    assert_eq!(info(&mut c, "a"), None);
}
