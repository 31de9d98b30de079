//! `LOCK.ACQUIREALL … BLOCK`: a request waits in every one of its keys' queues at once, first
//! come first served with single-key requests, and is granted all its keys in one step once it
//! is first in every queue and every key has room.

use std::time::Duration;

use super::*;

/// A client blocked in `LOCK.ACQUIREALL keys token PX px BLOCK block_ms options…`.
pub fn spawn_all(
    s: &Server,
    keys: &[&str],
    token: &str,
    px: i64,
    block_ms: i64,
    options: &[&str],
) -> Waiter {
    let mut opts = vec!["BLOCK".to_string(), block_ms.to_string()];
    opts.extend(options.iter().map(|o| o.to_string()));
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let con = s.conn();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    spawn_blocked(con, acquire_all_cmd(keys, token, px, &opts))
}

/// The fences of a multi-key grant a waiter was answered with.
#[track_caller]
pub fn fences_of(w: &Waiter) -> Vec<i64> {
    match w.recv().reply {
        Ok(v) => grants_of(&v).expect("a grant, not nil").1,
        Err(e) => panic!("a grant, not {e}"),
    }
}

/// A later request never overtakes an earlier multi-key one on a key they share, even a free
/// key; the multi-key one gets all its keys at once, with fences above the earlier holders';
/// `LOCK.INFO` counts it among each key's waiters.
#[test]
fn a_later_request_for_a_free_key_waits_behind_an_earlier_multi_key_request() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, held_b) = grant(&mut c, "b", b"holder", 60_000);
    let w = spawn_all(&s, &["a", "b"], "multi", 60_000, 0, &[]);
    wait_waiters(&mut c, "b", 1);
    assert_eq!(
        waiters_of(&mut c, "a"),
        0,
        "a is free: LOCK.INFO shows no lock"
    );
    // "a" is free, but the earlier request waits for it: no newcomer takes it.
    assert_eq!(acquire(&mut c, "a", b"late", 60_000), None);
    let late = spawn_waiter(&s, "a", "late-waiter", 60_000, 0);
    wait_until("late waits on a", Duration::from_secs(10), || {
        as_int(&ok(&mut c, &rcmd!("EXISTS", "a"))) == 0 && stat(&s, "waiters") == 2
    });
    assert!(w.try_recv().is_none());
    assert_eq!(release(&mut c, "b", b"holder"), 1);
    let fences = fences_of(&w);
    assert!(fences[0] > held_b && fences[1] > held_b, "{fences:?}");
    assert_eq!(holder(&mut c, "a"), Some(b"multi".to_vec()));
    assert!(
        late.try_recv().is_none(),
        "served after the earlier request only"
    );
    assert_eq!(waiters_of(&mut c, "a"), 1);
    assert_eq!(release_all(&mut c, &["a", "b"], "multi"), 2);
    let (_, fence) = late.granted();
    assert!(fence > fences[1]);
}

/// Requests naming the same keys in opposite orders, each waiting: no deadlock, each is served
/// in arrival order as the holds ahead of it end.
#[test]
fn keys_named_in_opposite_orders_do_not_deadlock() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "x", b"h1", 60_000);
    grant(&mut c, "y", b"h2", 60_000);
    let first = spawn_all(&s, &["x", "y"], "first", 60_000, 0, &[]);
    wait_waiters(&mut c, "y", 1);
    let second = spawn_all(&s, &["y", "x"], "second", 60_000, 0, &[]);
    wait_waiters(&mut c, "x", 2);
    assert_eq!(release(&mut c, "y", b"h2"), 1);
    assert!(
        first.recv_within(Duration::from_millis(50)).is_none(),
        "x still held"
    );
    assert_eq!(release(&mut c, "x", b"h1"), 1);
    let f1 = fences_of(&first);
    assert!(second.try_recv().is_none());
    assert_eq!(release_all(&mut c, &["y", "x"], "first"), 2);
    let f2 = fences_of(&second);
    assert!(f2[0] > f1[1] && f2[1] > f1[1], "{f1:?} then {f2:?}");
}

/// A multi-key request that times out, or whose connection closes, leaves every queue at once,
/// and those behind it on its keys are served.
#[test]
fn leaving_by_timeout_or_closing_leaves_every_queue() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "p", b"holder", 60_000);
    let w = spawn_all(&s, &["q", "p"], "multi", 60_000, 200, &[]);
    wait_waiters(&mut c, "p", 1);
    let behind = spawn_waiter(&s, "q", "behind", 60_000, 0);
    wait_until("two waiters", Duration::from_secs(10), || {
        stat(&s, "waiters") == 2
    });
    w.recv().assert_nil();
    let (token, _) = behind.granted();
    assert_eq!(token, b"behind");
    assert_eq!(waiters_of(&mut c, "p"), 0);
    // A closed connection: the same.
    let mut raw = RawConn::connect(&s);
    let id = raw.client_id();
    raw.send(&[
        "LOCK.ACQUIREALL",
        "2",
        "p",
        "q",
        "gone",
        "PX",
        "60000",
        "BLOCK",
        "0",
    ]);
    wait_waiters(&mut c, "p", 1);
    wait_waiters(&mut c, "q", 1);
    raw.close();
    wait_client_gone(&mut c, id);
    wait_waiters(&mut c, "p", 0);
    wait_waiters(&mut c, "q", 0);
    assert_eq!(stat(&s, "waiters"), 0);
}

/// The lease of a holder ends: its key is handed to the multi-key waiter with the other keys.
/// A key that is deleted while the request waits is just free; one that becomes another type
/// refuses the request with WRONGTYPE and nothing is granted.
#[test]
fn lease_ends_deletions_and_type_changes_while_waiting() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "e", b"short", 150);
    grant(&mut c, "d", b"holder", 60_000);
    let w = spawn_all(&s, &["e", "f"], "multi", 60_000, 0, &[]);
    assert_eq!(fences_of(&w).len(), 2, "granted when the lease of e ended");
    assert_eq!(holder(&mut c, "f"), Some(b"multi".to_vec()));
    let w = spawn_all(&s, &["d", "g"], "m2", 60_000, 0, &[]);
    wait_waiters(&mut c, "d", 1);
    ok(&mut c, &rcmd!("DEL", "d"));
    assert_eq!(fences_of(&w).len(), 2, "d deleted: free");
    grant(&mut c, "h", b"holder", 60_000);
    let w = spawn_all(&s, &["i", "h"], "m3", 60_000, 0, &[]);
    wait_waiters(&mut c, "h", 1);
    ok(&mut c, &rcmd!("SET", "h", "text"));
    assert!(w.recv().error().starts_with("WRONGTYPE"));
    assert!(!exists(&mut c, "i"), "nothing granted");
}

/// Shared multi-key requests wait behind an exclusive holder and are granted together with
/// the shared single-key waiters behind them.
#[test]
fn shared_requests_are_granted_together() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r1", b"writer", 60_000);
    let m = spawn_all(&s, &["r1", "r2"], "reader-a", 60_000, 0, &["SHARED"]);
    wait_waiters(&mut c, "r1", 1);
    let single = spawn_waiter_with(&s, "r1", "reader-b", 60_000, 0, &["SHARED"]);
    wait_waiters(&mut c, "r1", 2);
    assert_eq!(release(&mut c, "r1", b"writer"), 1);
    assert_eq!(fences_of(&m).len(), 2);
    assert_eq!(single.granted().0, b"reader-b");
}

/// A waited grant answers `[token, [fence, …]]` under RESP3 as under RESP2, and `LOCK.INFO`
/// counts a multi-key request among the waiters of each of its keys.
#[test]
fn a_waited_grant_under_resp3_and_the_waiter_counts_of_each_key() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "w1", b"holder", 60_000);
    grant(&mut c, "w2", b"holder", 60_000);
    let con = s.conn_resp3();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let w = spawn_blocked(
        con,
        acquire_all_cmd(&["w1", "w2"], "resp3", 60_000, &["BLOCK", "0"]),
    );
    wait_waiters(&mut c, "w1", 1);
    let other = spawn_all(&s, &["w2"], "one-key", 60_000, 0, &[]);
    wait_waiters(&mut c, "w2", 2);
    assert_eq!(waiters_of(&mut c, "w1"), 1);
    assert_eq!(stat(&s, "waiters"), 2, "each request counted once in all");
    assert_eq!(release_all(&mut c, &["w1", "w2"], "holder"), 2);
    let v = w.recv().reply.expect("a grant");
    let Value::Array(items) = &v else {
        panic!("an array under RESP3: {v:?}")
    };
    assert_eq!(as_bytes(&items[0]), b"resp3");
    assert_eq!(grants_of(&v).unwrap().1.len(), 2);
    assert_eq!(release_all(&mut c, &["w2", "w1"], "resp3"), 2);
    assert_eq!(fences_of(&other).len(), 1);
}
