//! The lease clock and the lost signal of the blocking front end: renewals keep a hold, a hold
//! found gone or whose renewals are held back is signalled lost once, and the recorded local
//! lease end comes before the server grants the lock to anyone else.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use redislock_client::{Error, Locker, LostReason};

use crate::common::proxy::Proxy;
use crate::common::{granted_no_earlier, until, Server};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

#[test]
fn renewals_keep_a_hold_past_its_lease() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let hold = locker
        .lock("lock:renew")
        .ttl(300 * MS)
        .acquire(SEC)
        .unwrap();
    until(10 * SEC, "three renewals", || {
        server.calls("lock.extend") >= 3
    });
    assert!(hold.is_held());
    assert!(!hold.lost().is_set());
    assert!(hold.owned().unwrap());
}

#[test]
fn without_renewal_the_lease_clock_runs_out() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let before = Instant::now();
    let hold = locker
        .lock("lock:clock")
        .ttl(300 * MS)
        .auto_renew(false)
        .acquire(SEC)
        .unwrap();
    let after = Instant::now();
    let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert_eq!(lost.reason, LostReason::LeaseRanOut);
    assert_eq!(lost.fence, hold.fence());
    // The clock's end: sent + 300 ms - 1 % - 2 ms, the request sent between before and after.
    assert!(lost.lease_end >= before + 295 * MS, "{lost:?}");
    assert!(lost.lease_end <= after + 295 * MS, "{lost:?}");
    assert!(!hold.is_held());
    assert_eq!(server.calls("lock.extend"), 0);
    let err = hold.release().unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
}

#[test]
fn a_renewal_that_finds_the_hold_gone_signals_it_once() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let hold = locker
        .lock("lock:gone")
        .ttl(600 * MS)
        .on_lost(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .acquire(SEC)
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("lock:gone")
        .query(&mut server.conn())
        .unwrap();
    let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert_eq!(lost.reason, LostReason::Gone);
    assert!(!hold.is_held());
    until(10 * SEC, "on_lost", || count.load(Ordering::SeqCst) > 0);
    // The lease clock's end passes too: still one loss.
    until(10 * SEC, "the lease end to pass", || {
        Instant::now() > lost.lease_end + 600 * MS
    });
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert!(matches!(hold.release().unwrap_err(), Error::Lost { .. }));
}

/// A holder whose renewals are held back (a partition between it and the server, through a
/// proxy), while another client waits in the server: the holder is signalled lost once, and the
/// lease end it recorded comes before the moment the server granted the lock to the waiter (read
/// from the waiter's lease: that grant's moment is no earlier than the INFO request sent after it,
/// minus the part of the lease already used).
#[test]
fn a_partitioned_holder_is_lost_before_anyone_else_is_granted() {
    let server = Server::start();
    let proxy = Proxy::to(server.port);
    let holder = Locker::open(proxy.url().as_str()).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    const TTL_MS: u32 = 1500;
    let hold = holder
        .lock("lock:split")
        .ttl(TTL_MS * MS)
        .on_lost(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .acquire(SEC)
        .unwrap();
    // Once a renewal was answered (its connection is open, the holder's lease clock moved
    // past the grant's), the next ones are held back.
    let granted_at = Instant::now();
    until(10 * SEC, "a renewal answered", || {
        granted_at.elapsed() > 450 * MS && hold.lease_left() > 1100 * MS
    });
    proxy.hold();

    // The other client waits in the server, with plain commands.
    const OTHER_TTL: i64 = 60_000;
    let url = server.url();
    let other = thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let grant: Value = redis::cmd("LOCK.ACQUIRE")
            .arg("lock:split")
            .arg("other")
            .arg("PX")
            .arg(OTHER_TTL)
            .arg("BLOCK")
            .arg(30_000)
            .query(&mut c)
            .unwrap();
        assert!(matches!(grant, Value::Array(_)), "{grant:?}");
        granted_no_earlier(&mut c, "lock:split", OTHER_TTL)
    });

    let lost = hold.lost().wait_timeout(30 * SEC).expect("signalled lost");
    assert_eq!(lost.reason, LostReason::LeaseRanOut);
    // The signal is set first, then on_lost runs (on the renewal thread).
    until(10 * SEC, "on_lost", || count.load(Ordering::SeqCst) > 0);
    let granted_no_earlier = other.join().unwrap();
    assert!(
        lost.lease_end < granted_no_earlier,
        "the holder's lease end {:?} is not before the other grant {:?}",
        lost.lease_end,
        granted_no_earlier
    );
    assert!(!hold.is_held());

    // The held-back renewal reaches the server and is answered 0 (the lock is the other's):
    // still one loss.
    let extends = server.calls("lock.extend");
    proxy.release();
    until(10 * SEC, "the held-back renewal", || {
        server.calls("lock.extend") > extends
    });
    let err = hold.release().unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

/// A grant whose reply is held back (a slow network): the lease clock counts from the request's
/// sending, not the reply's arrival, so its end still comes before the server grants the lock to
/// a client waiting in the server.
#[test]
fn the_lease_clock_counts_from_the_request() {
    let server = Server::start();
    let proxy = Proxy::to(server.port);
    let holder = Locker::open(proxy.url().as_str()).unwrap();
    let lock = holder.lock("lock:slow").ttl(1500 * MS).auto_renew(false);
    // The locker's connection is open before the replies are held back.
    assert!(lock.info().unwrap().is_none());
    let url = server.url();
    proxy.hold_replies();
    let taking = thread::spawn(move || lock.try_acquire().unwrap().expect("free"));
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let ttl_left = |c: &mut redis::Connection| -> i64 {
        redis::cmd("PTTL").arg("lock:slow").query(c).unwrap()
    };
    until(10 * SEC, "the grant", || ttl_left(&mut c) > 0);
    // The reply reaches the holder 400 ms after the grant.
    until(10 * SEC, "400 ms of the lease", || ttl_left(&mut c) <= 1100);
    proxy.release();
    let hold = taking.join().unwrap();
    let grant: Value = redis::cmd("LOCK.ACQUIRE")
        .arg("lock:slow")
        .arg("other")
        .arg("PX")
        .arg(60_000)
        .arg("BLOCK")
        .arg(30_000)
        .query(&mut c)
        .unwrap();
    assert!(matches!(grant, Value::Array(_)), "{grant:?}");
    let granted = granted_no_earlier(&mut c, "lock:slow", 60_000);
    let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert!(
        lost.lease_end < granted,
        "{:?} is not before {granted:?}",
        lost.lease_end
    );
}

#[test]
fn one_renewal_thread_for_all_holds() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let holds: Vec<_> = (0..100)
        .map(|i| {
            locker
                .lock(format!("lock:many:{i}"))
                .ttl(300 * MS)
                .acquire(SEC)
                .unwrap()
        })
        .collect();
    until(10 * SEC, "renewals of every hold", || {
        server.calls("lock.extend") >= 300
    });
    let renewers = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|name| name.trim() == "redislock-renew")
        .count();
    assert_eq!(renewers, 1);
    assert!(holds.iter().all(|h| h.is_held() && !h.lost().is_set()));
}
