//! Fences running out midway through a multi-key request: the server's fence clock is one
//! fence short of the largest (`i64::MAX`), as a lock loaded from the AOF left it. A request
//! that needs more fences than are left changes no key and answers the clear error, leaving the
//! last fence to whoever needs only one; a waiting request that cannot be granted leaves at its
//! timeout, and the waiter behind it is served.

use std::io::Write;
use std::time::Duration;

use super::waiting::spawn_all;
use super::*;

const EXHAUSTED: &str = "ERR fencing tokens exhausted on this server";

/// A server whose AOF holds the lock `{e}:top`, held by `old` with fence `i64::MAX - 1`: one
/// fence is left.
fn one_fence_left() -> Server {
    let mut s = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    ping(&mut s.conn());
    s.stop(Stop::NoSave);
    let dir = s.dir().join("appendonlydir");
    let incr = std::fs::read_dir(&dir)
        .expect("appendonlydir")
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an .incr.aof file");
    let fence = (i64::MAX - 1).to_string();
    let until = (now_ms() + 600_000).to_string();
    let apply: &[&str] = &["LOCK._APPLY", "{e}:top", "old", &fence, &until];
    std::fs::OpenOptions::new()
        .append(true)
        .open(&incr)
        .unwrap()
        .write_all(&resp_commands(&[apply]))
        .unwrap();
    s.restart(Stop::NoSave);
    let i = info_some(&mut s.conn(), "{e}:top");
    assert_eq!((i.token.as_slice(), i.fence), (&b"old"[..], i64::MAX - 1));
    s
}

/// Two keys to grant and one fence left: the error, and no key changed; the last fence then
/// goes to a single key, and nothing more is granted, a re-grant with a new key included.
#[test]
fn a_request_needing_more_fences_than_are_left_changes_nothing() {
    let s = one_fence_left();
    let mut c = s.conn();
    let e = err(
        &mut c,
        &acquire_all_cmd(&["{e}:a", "{e}:b"], "t", 60_000, &[]),
    );
    assert_eq!(e, EXHAUSTED);
    assert!(!exists(&mut c, "{e}:a") && !exists(&mut c, "{e}:b"));
    assert_eq!(stat(&s, "grants"), 0);
    // The last fence is still there for a request that needs one.
    let (_, f) = grant(&mut c, "{e}:c", b"t", 60_000);
    assert_eq!(f, i64::MAX);
    let ttl = pttl(&mut c, "{e}:top");
    let e = err(
        &mut c,
        &acquire_all_cmd(&["{e}:top", "{e}:d"], "old", 900_000, &[]),
    );
    assert_eq!(e, EXHAUSTED);
    assert!(!exists(&mut c, "{e}:d"));
    assert!(
        pttl(&mut c, "{e}:top") <= ttl,
        "the re-grant of {{e}}:top did not happen"
    );
    let e = err(&mut c, &acquire_all_cmd(&["{e}:d"], "t", 60_000, &[]));
    assert_eq!(e, EXHAUSTED);
    ping(&mut c);
}

/// A request waiting for three keys when one fence is left: freed, it cannot be granted, so it
/// waits on untouched and times out; the single-key waiter behind it is then served with the
/// last fence at once, not left waiting for its own timeout.
#[test]
fn a_waiting_request_that_cannot_be_granted_does_not_hold_up_the_waiter_behind() {
    let s = one_fence_left();
    let mut c = s.conn();
    let keys = ["{e}:top", "{e}:a", "{e}:b"];
    let multi = spawn_all(&s, &keys, "multi", 60_000, 1_500, &[]);
    wait_waiters(&mut c, keys[0], 1);
    let behind = spawn_waiter(&s, keys[1], "behind", 60_000, 20_000);
    wait_total_waiters(&s, 2);
    assert_eq!(release(&mut c, keys[0], b"old"), 1);
    let answer = multi.recv();
    answer.assert_nil();
    assert!(
        answer.took >= Duration::from_millis(1_400),
        "answered at its timeout, not before: {:?}",
        answer.took
    );
    let granted = behind
        .recv_within(Duration::from_secs(5))
        .expect("the waiter behind is served once the request ahead left");
    let (token, fence) = granted.granted();
    assert_eq!((token.as_slice(), fence), (&b"behind"[..], i64::MAX));
    assert!(
        granted.at.duration_since(answer.at) < Duration::from_secs(5),
        "served {:?} after the request ahead left",
        granted.at.duration_since(answer.at)
    );
    assert!(!exists(&mut c, keys[0]) && !exists(&mut c, keys[2]));
    assert_eq!(stat(&s, "waiters"), 0);
    let e = err(
        &mut c,
        &acquire_all_cmd(&[keys[0], keys[2]], "late", 60_000, &[]),
    );
    assert_eq!(e, EXHAUSTED);
}
