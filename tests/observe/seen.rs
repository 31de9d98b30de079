//! `LOCK.OBSERVE key AFTER fence SEEN data`: the data seen with the fence is part of what the
//! caller saw, so a holder that keeps its fence and changes its data (a re-grant with new `DATA`)
//! is a change — answered at once, or waking the blocked observer, on a master and on a replica.
//! An unchanged re-grant, one without `DATA`, and `LOCK.EXTEND` are not. Without `SEEN` nothing
//! differs from before (`data.rs`).

use std::time::Duration;

use super::*;
use crate::common::*;

fn acquire(c: &mut Connection, key: &str, token: &str, extra: &[&str], data: Option<&[u8]>) -> i64 {
    let mut cmd = rcmd!("LOCK.ACQUIRE", key, token, "PX", 60_000);
    for a in extra {
        cmd.arg(*a);
    }
    if let Some(d) = data {
        cmd.arg("DATA").arg(d);
    }
    parse_grant(&ok(c, &cmd)).expect("granted").1
}

/// `LOCK.OBSERVE key AFTER after SEEN seen` (no BLOCK) on `c`.
fn observe_seen(c: &mut Connection, key: &str, after: i64, seen: &[u8]) -> Seen {
    seen_of(&ok(
        c,
        &rcmd!("LOCK.OBSERVE", key, "AFTER", after, "SEEN", seen),
    ))
}

/// A client blocked in `LOCK.OBSERVE key AFTER after SEEN seen BLOCK 20000` (RESP3 if `resp3`),
/// counted by the server before this returns.
fn spawn_seen(server: &Server, key: &str, after: i64, seen: &[u8], resp3: bool) -> Observer {
    let before = observers(server);
    let proto = if resp3 { "?protocol=resp3" } else { "" };
    let url = format!("redis://127.0.0.1:{}/{proto}", server.port());
    let client = redis::Client::open(url).expect("client url");
    let con = client.get_connection_with_timeout(io_timeout()).unwrap();
    con.set_read_timeout(Some(io_timeout().max(Duration::from_secs(30))))
        .unwrap();
    let mut cmd = rcmd!("LOCK.OBSERVE", key, "AFTER", after, "SEEN", seen);
    cmd.arg("BLOCK").arg(20_000);
    let o = spawn_blocked(con, cmd);
    wait_observers(server, before + 1);
    o
}

/// What `o` was answered: a holder (fence and data).
#[track_caller]
fn answer_of(o: &Observer, what: &str) -> (i64, Option<Vec<u8>>) {
    let r = o
        .recv_within(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("{what}: the observer was never answered"));
    let v = r.reply.unwrap_or_else(|e| panic!("{what}: answered {e}"));
    seen_of(&v).unwrap_or_else(|| panic!("{what}: answered nil"))
}

#[test]
fn seen_data_answers_other_data_at_once_and_nil_for_the_same() {
    let s = Server::start();
    for (mut c, key) in [(s.conn(), "k2"), (s.conn_resp3(), "k3")] {
        let f = acquire(&mut c, key, "n1", &[], Some(b"node-1"));
        assert_eq!(observe_seen(&mut c, key, f, b"node-1"), None, "as seen");
        assert_eq!(
            observe_seen(&mut c, key, f, b"node-0"),
            Some((f, Some(b"node-1".to_vec()))),
            "other data under the same fence"
        );
        assert_eq!(
            observe_seen(&mut c, key, f, b""),
            Some((f, Some(b"node-1".to_vec()))),
            "seen without data"
        );
        assert_eq!(
            observe_seen(&mut c, key, f - 1, b"node-1"),
            Some((f, Some(b"node-1".to_vec()))),
            "another fence, the same data"
        );
        // SEEN without AFTER: nothing to compare with, the holder now (BLOCK or not).
        let v = ok(
            &mut c,
            &rcmd!("LOCK.OBSERVE", key, "SEEN", "node-1", "BLOCK", 0),
        );
        assert_eq!(seen_of(&v), Some((f, Some(b"node-1".to_vec()))));
        // Without SEEN, the fence alone: nil, whatever the data.
        assert_eq!(observe_after(&mut c, key, f), None);
        // A hold without data is seen as the empty string.
        let g = acquire(&mut c, "bare", "b", &[], None);
        assert_eq!(observe_seen(&mut c, "bare", g, b""), None);
        assert_eq!(
            observe_seen(&mut c, "bare", g, b"x"),
            Some((g, None)),
            "the data went"
        );
        assert_eq!(release(&mut c, "bare", b"b"), 1);
        assert_eq!(observe_seen(&mut c, "free", 0, b""), None, "no lock");
        assert_eq!(observe_seen(&mut c, "free", 0, b"x"), Some((0, None)));
    }
    // Nothing new is kept: what was seen is seen again after a reload.
    let mut c = s.conn();
    let f = observe(&mut c, "k2").0;
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    assert_eq!(observe_seen(&mut c, "k2", f, b"node-1"), None);
}

#[test]
fn a_regrant_with_new_data_wakes_observers_that_saw_the_old() {
    let s = Server::start();
    let mut c = s.conn();
    for resp3 in [false, true] {
        let key = if resp3 { "leader3" } else { "leader2" };
        let f = acquire(&mut c, key, "n1", &[], Some(b"v1"));
        let seen = spawn_seen(&s, key, f, b"v1", resp3);
        let fence_only = spawn_observer(&s, key, f, 20_000);
        // Neither the same data again, nor a re-grant without DATA, nor an extend is news.
        assert_eq!(acquire(&mut c, key, "n1", &[], Some(b"v1")), f);
        assert_eq!(acquire(&mut c, key, "n1", &[], None), f);
        assert_eq!(
            ok(&mut c, &rcmd!("LOCK.EXTEND", key, "n1", "PX", 60_000)),
            Value::Int(1)
        );
        still_waiting(&seen, Duration::from_millis(100), "nothing new");
        // New data under the same fence: the SEEN observer is woken, the fence-only one not.
        assert_eq!(acquire(&mut c, key, "n1", &[], Some(b"v2")), f);
        assert_eq!(answer_of(&seen, "new data"), (f, Some(b"v2".to_vec())));
        still_waiting(&fence_only, Duration::from_millis(50), "the same fence");
        assert_eq!(observers(&s), 1);
        // Each value in turn, to an observer that sends what it saw last.
        let mut last = b"v2".to_vec();
        for v in [&b"v3"[..], b"v4", b"v5"] {
            let o = spawn_seen(&s, key, f, &last, resp3);
            assert_eq!(acquire(&mut c, key, "n1", &[], Some(v)), f);
            assert_eq!(answer_of(&o, "each value"), (f, Some(v.to_vec())));
            last = v.to_vec();
        }
        assert_eq!(release(&mut c, key, b"n1"), 1);
        assert_eq!(fence_of(&fence_only.recv()), 0, "released");
    }
    // A hold without data that gains some.
    let g = acquire(&mut c, "bare", "b", &[], None);
    let o = spawn_seen(&s, "bare", g, b"", false);
    assert_eq!(acquire(&mut c, "bare", "b", &[], Some(b"now")), g);
    assert_eq!(answer_of(&o, "data given"), (g, Some(b"now".to_vec())));
    // Shared locks and semaphores: the newest holder's data.
    for (key, mode) in [("rw", &["SHARED"][..]), ("sem", &["LIMIT", "3"][..])] {
        acquire(&mut c, key, "r1", mode, Some(b"a"));
        let top = acquire(&mut c, key, "r2", mode, Some(b"b"));
        let o = spawn_seen(&s, key, top, b"b", false);
        acquire(&mut c, key, "r1", mode, Some(b"a2"));
        still_waiting(&o, Duration::from_millis(100), "not the newest holder");
        assert_eq!(acquire(&mut c, key, "r2", mode, Some(b"b2")), top);
        assert_eq!(answer_of(&o, key), (top, Some(b"b2".to_vec())));
    }
    assert_eq!(observers(&s), 0);
}

#[test]
fn a_replica_s_observers_see_the_master_s_new_data() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let f = acquire(&mut c, "leader", "n1", &[], Some(b"v1"));
    wait_until("the grant on the replica", Duration::from_secs(10), || {
        observe(&mut r.conn(), "leader").0 == f
    });
    let o = spawn_seen(&r, "leader", f, b"v1", false);
    let o3 = spawn_seen(&r, "leader", f, b"v1", true);
    assert_eq!(acquire(&mut c, "leader", "n1", &[], Some(b"v1")), f);
    still_waiting(&o, Duration::from_millis(100), "the same data");
    assert_eq!(acquire(&mut c, "leader", "n1", &[], Some(b"v2")), f);
    for o in [&o, &o3] {
        assert_eq!(answer_of(o, "replica"), (f, Some(b"v2".to_vec())));
    }
    assert_eq!(
        observe_seen(&mut r.conn(), "leader", f, b"v2"),
        None,
        "the replica has the new data"
    );
}
