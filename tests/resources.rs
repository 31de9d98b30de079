//! What the module keeps in memory is bounded by the locks and waiters that exist, never by how
//! many commands were sent: at most one pending job per lock with waiters and one per waiter,
//! replaced rather than added to, and gone with the lock or the waiter (`INFO redislock`
//! `scheduled_jobs` and `timers`).

use std::io::Write;
use std::thread;
use std::time::Duration;

use crate::common::*;

pub fn used_memory(server: &Server) -> i64 {
    server
        .info_field("memory", "used_memory")
        .unwrap()
        .parse()
        .unwrap()
}

#[track_caller]
fn wait_stat(server: &Server, name: &str, want: i64) {
    wait_until(
        &format!("redislock_{name} = {want}"),
        Duration::from_secs(5),
        || stat(server, name) == want,
    );
}

/// Sends `commands` in one write and reads every reply.
fn pipeline(server: &Server, commands: &[Vec<Vec<u8>>]) -> Vec<Resp> {
    let mut con = RawConn::connect(server);
    let buf = resp_commands(commands);
    let writer = con.stream().try_clone().unwrap();
    let sender = thread::spawn(move || (&writer).write_all(&buf).expect("write"));
    let replies = (0..commands.len())
        .map(|_| con.read().expect("reply"))
        .collect();
    sender.join().unwrap();
    replies
}

#[test]
fn shortening_extends_with_a_waiter_keep_one_job_for_the_lock() {
    let s = Server::start();
    let key = format!("lock:{}", "x".repeat(4096));
    let mut c = s.conn();
    let far = 1_000_000_000i64;
    grant(&mut c, &key, b"holder", far);
    let mut waiter = RawConn::connect(&s);
    waiter.send(&[
        "LOCK.ACQUIRE",
        key.as_str(),
        "waiter",
        "PX",
        "5000",
        "BLOCK",
        "0",
    ]);
    wait_waiters(&mut c, &key, 1);
    let before = used_memory(&s);
    let extends: Vec<Vec<Vec<u8>>> = (0..20_000i64)
        .map(|i| {
            vec![
                b"LOCK.EXTEND".to_vec(),
                key.as_bytes().to_vec(),
                b"holder".to_vec(),
                b"PX".to_vec(),
                (far - 5 * (i + 1)).to_string().into_bytes(),
            ]
        })
        .collect();
    let replies = pipeline(&s, &extends);
    assert!(replies.iter().all(|r| *r == Resp::Int(1)));
    let grown = used_memory(&s) - before;
    assert!(
        grown < 2 << 20,
        "20,000 extends grew used_memory by {grown} bytes"
    );
    assert_eq!(stat(&s, "scheduled_jobs"), 1, "one job for the lock");
    assert_eq!(stat(&s, "timers"), 1);
    // Released: the waiter gets it, and nothing is left pending once it is gone too.
    assert_eq!(release(&mut c, &key, b"holder"), 1);
    match waiter.read().expect("grant") {
        Resp::Array(items) => assert_eq!(items[0], Resp::Bulk(b"waiter".to_vec())),
        other => panic!("waiter answered {other:?}"),
    }
    assert_eq!(release(&mut c, &key, b"waiter"), 1);
    ok(&mut c, &rcmd!("DEL", &key));
    wait_stat(&s, "scheduled_jobs", 0);
    wait_stat(&s, "timers", 0);
    assert!(used_memory(&s) - before < 2 << 20);
}

#[test]
fn waiters_that_leave_take_their_deadlines_with_them() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "k", b"holder", 600_000);
    let n = 300;
    let waiters: Vec<RawConn> = (0..n)
        .map(|i| {
            let mut w = RawConn::connect(&s);
            w.send(&[
                "LOCK.ACQUIRE",
                "k",
                &format!("w{i}"),
                "PX",
                "1000",
                "BLOCK",
                "600000",
            ]);
            w
        })
        .collect();
    wait_waiters(&mut c, "k", n);
    // One job per waiter (its deadline) and one for the lock.
    assert_eq!(stat(&s, "scheduled_jobs"), n + 1);
    assert_eq!(stat(&s, "timers"), 1);
    for w in waiters {
        w.close();
    }
    wait_waiters(&mut c, "k", 0);
    wait_stat(&s, "scheduled_jobs", 0);
    wait_stat(&s, "timers", 0);
    ping(&mut c);
}

#[test]
fn many_waiters_timing_out_together_are_answered_together() {
    let _files = many_files();
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "k", b"holder", 600_000);
    let n = 2_000;
    let mut waiters: Vec<RawConn> = (0..n)
        .map(|i| {
            let mut w = RawConn::connect(&s);
            w.send(&[
                "LOCK.ACQUIRE",
                "k",
                &format!("w{i}"),
                "PX",
                "1000",
                "BLOCK",
                "300",
            ]);
            w
        })
        .collect();
    for w in waiters.iter_mut() {
        assert_eq!(w.read().expect("nil"), Resp::Nil);
    }
    assert_eq!(info_some(&mut c, "k").waiters, 0);
    wait_stat(&s, "scheduled_jobs", 0);
    ping(&mut c);
}
