//! Many waiters whose connections close together (a client process killed): each leaves its
//! queues at once, so those who stay keep their order and are served as if the others never
//! came, and the server's handles of the closed waits are all released (a batch per timer pass),
//! leaving no blocked client and no memory behind, for every kind of queue and for multi-key
//! waiters. (How long the server stalls meanwhile is a benchmark's business:
//! `bench/waitstalls.py`.)

use std::time::Duration;

use crate::common::*;
use crate::resources::used_memory;

const LEAVING: usize = 400;

/// A waiter's command for a token.
type WaiterCommand = fn(&str) -> Vec<String>;

/// The waiters' commands of one kind: `(holder's acquires, a waiter's command for token t)`.
fn kind(name: &str) -> (Vec<Vec<String>>, WaiterCommand) {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match name {
        "exclusive" => (
            vec![v(&["LOCK.ACQUIRE", "q", "holder", "PX", "600000"])],
            |t| {
                ["LOCK.ACQUIRE", "q", t, "PX", "600000", "BLOCK", "0"]
                    .map(String::from)
                    .to_vec()
            },
        ),
        "shared" => (
            vec![v(&["LOCK.ACQUIRE", "q", "holder", "PX", "600000"])],
            |t| {
                [
                    "LOCK.ACQUIRE",
                    "q",
                    t,
                    "PX",
                    "600000",
                    "SHARED",
                    "BLOCK",
                    "0",
                ]
                .map(String::from)
                .to_vec()
            },
        ),
        "semaphore" => (
            vec![v(&[
                "LOCK.ACQUIRE",
                "q",
                "holder",
                "PX",
                "600000",
                "LIMIT",
                "1",
            ])],
            |t| {
                [
                    "LOCK.ACQUIRE",
                    "q",
                    t,
                    "PX",
                    "600000",
                    "LIMIT",
                    "1",
                    "BLOCK",
                    "0",
                ]
                .map(String::from)
                .to_vec()
            },
        ),
        _ => (
            vec![
                v(&["LOCK.ACQUIRE", "q", "holder", "PX", "600000"]),
                v(&["LOCK.ACQUIRE", "r", "holder", "PX", "600000"]),
            ],
            |t| {
                [
                    "LOCK.ACQUIREALL",
                    "2",
                    "q",
                    "r",
                    t,
                    "PX",
                    "600000",
                    "BLOCK",
                    "0",
                ]
                .map(String::from)
                .to_vec()
            },
        ),
    }
}

/// A waiter that stays, on a connection of its own.
fn stayer(s: &Server, cmd: Vec<String>) -> Waiter {
    let con = s.conn();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut c = redis::cmd(&cmd[0]);
    for a in &cmd[1..] {
        c.arg(a);
    }
    spawn_blocked(con, c)
}

/// The waiter is granted: a grant's (or a multi-key grant's) first element is its token.
#[track_caller]
fn waits_for(w: &Waiter, token: &[u8]) {
    match w.recv().reply {
        Ok(redis::Value::Array(items)) => assert_eq!(as_bytes(&items[0]), token),
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn mass_disconnect(name: &str) {
    let s = Server::start();
    let mut c = s.conn();
    let (holds, waiter) = kind(name);
    for h in &holds {
        ok(&mut c, &{
            let mut cmd = redis::cmd(&h[0]);
            for a in &h[1..] {
                cmd.arg(a);
            }
            cmd
        });
    }
    let before = used_memory(&s);
    let first = stayer(&s, waiter("first"));
    wait_waiters(&mut c, "q", 1);
    let mut leaving = Vec::new();
    for i in 0..LEAVING {
        let mut w = RawConn::connect(&s);
        w.send(&waiter(&format!("w{i}")));
        leaving.push(w);
    }
    wait_waiters(&mut c, "q", 1 + LEAVING as i64);
    let last = stayer(&s, waiter("last"));
    wait_waiters(&mut c, "q", 2 + LEAVING as i64);
    for w in leaving {
        w.close();
    }
    wait_until(
        "the closed waits to be let go",
        Duration::from_secs(30),
        || {
            let info = s.info_text("redislock");
            let blocked: i64 = s
                .info_field("clients", "blocked_clients")
                .unwrap()
                .parse()
                .unwrap();
            stat_in(&info, "waiters") == 2 && stat_in(&info, "waiters_leaving") == 0 && blocked == 2
        },
    );
    // The server freed what the closed waits held (their handles and their
    // temporary clients, which it frees a few at a time).
    wait_until(
        "the closed waits' memory to be freed",
        Duration::from_secs(30),
        || used_memory(&s) - before < 2_000_000,
    );
    assert_eq!(stat(&s, "waits"), 2 + LEAVING as i64);
    assert_eq!(stat(&s, "wait_timeouts"), 0);
    // Those who stayed are served in their order, as if the others never came.
    for key in if name == "multi" {
        &["q", "r"][..]
    } else {
        &["q"][..]
    } {
        assert_eq!(release(&mut c, key, b"holder"), 1);
    }
    waits_for(&first, b"first");
    if name == "shared" {
        // Shared waiters in a row are granted together.
        waits_for(&last, b"last");
        return;
    }
    assert!(
        last.try_recv().is_none(),
        "the last waiter went before the first"
    );
    for key in if name == "multi" {
        &["q", "r"][..]
    } else {
        &["q"][..]
    } {
        assert_eq!(release(&mut c, key, b"first"), 1);
    }
    waits_for(&last, b"last");
    assert_eq!(stat(&s, "handoffs"), 2);
}

#[test]
fn exclusive_waiters_that_leave_together_are_let_go_all_of_them() {
    mass_disconnect("exclusive");
}

#[test]
fn shared_waiters_that_leave_together_are_let_go_all_of_them() {
    mass_disconnect("shared");
}

#[test]
fn semaphore_waiters_that_leave_together_are_let_go_all_of_them() {
    mass_disconnect("semaphore");
}

#[test]
fn multi_key_waiters_that_leave_together_are_let_go_all_of_them() {
    mass_disconnect("multi");
}
