//! What the soak found, each as a short test: a waiter behind one that left was not served
//! until the next release or lease end, and a restart from an AOF rewritten without the RDB
//! preamble after a promotion handed out fences below earlier ones. An ignored test is a module
//! bug still open (`make stress` runs them to see whether they still fail).

use std::time::Duration;

use crate::common::*;

fn acquire_with(c: &mut redis::Connection, key: &str, token: &str, options: &[&str]) {
    let mut cmd = rcmd!("LOCK.ACQUIRE", key, token, "PX", 10_000);
    for o in options {
        cmd.arg(*o);
    }
    assert!(
        parse_grant(&ok(c, &cmd)).is_some(),
        "{key} {token} {options:?}"
    );
}

/// SPEC "Server safety": a client waiting with `BLOCK` is answered "as soon as the lock can be
/// granted". A shared waiter behind an exclusive one, on a key held shared, can be granted the
/// moment the exclusive waiter leaves (its timeout, or its connection closing).
fn a_waiter_behind_one_that_leaves(close: bool) {
    let s = Server::start();
    let mut c = s.conn();
    acquire_with(&mut c, "k", "r1", &["SHARED"]);
    let block = if close { 10_000 } else { 200 };
    let w1 = spawn_waiter_with(&s, "k", "w1", 10_000, block, &[]);
    wait_waiters(&mut c, "k", 1);
    let w2 = spawn_waiter_with(&s, "k", "w2", 10_000, 5_000, &["SHARED"]);
    wait_waiters(&mut c, "k", 2);
    if close {
        ok(&mut c, &rcmd!("CLIENT", "KILL", "ID", w1.id));
    } else {
        w1.recv().assert_nil();
    }
    let answer = w2
        .recv_within(Duration::from_secs(1))
        .expect("the shared waiter, first in the queue and fitting, was not served within 1 s");
    answer.granted();
}

#[test]
fn a_waiter_behind_one_that_timed_out_is_served_at_once() {
    a_waiter_behind_one_that_leaves(false);
}

#[test]
fn a_waiter_behind_one_whose_connection_closed_is_served_at_once() {
    a_waiter_behind_one_that_leaves(true);
}

/// SPEC "Fencing tokens": fences issued after a restart exceed every fence issued before it.
/// After a promotion (fences in epoch 1), `j` is granted and released, the AOF is rewritten
/// without the RDB preamble (with `kept` in it or not) and the server restarts: `j`'s next
/// fence must still be above its last one.
fn a_plain_aof_rewrite_keeps_the_fence_epoch(kept: bool) {
    let mut s = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .set("aof-use-rdb-preamble", "no")
        .start();
    promote_times(&s, 1);
    let mut c = s.conn();
    if kept {
        grant(&mut c, "kept", b"x", 600_000);
    }
    let (_, before) = grant(&mut c, "j", b"y", 600_000);
    assert_eq!(release(&mut c, "j", b"y"), 1);
    ok(&mut c, &rcmd!("BGREWRITEAOF"));
    s.wait_aof_rewrite_done();
    s.restart(Stop::NoSave);
    let (_, after) = grant(&mut s.conn(), "j", b"y", 600_000);
    assert!(
        after > before,
        "fence {after} of j after the restart is not above its fence {before} before it"
    );
}

#[test]
fn a_plain_aof_rewrite_keeps_the_fence_epoch_of_a_promotion() {
    a_plain_aof_rewrite_keeps_the_fence_epoch(true);
}

/// The module writes the epoch into the rewritten AOF with the first lock or gate it
/// rewrites; with none left, the epoch record written when the rewrite starts keeps it.
#[test]
fn a_plain_aof_rewrite_of_no_lock_keeps_the_fence_epoch() {
    a_plain_aof_rewrite_keeps_the_fence_epoch(false);
}
