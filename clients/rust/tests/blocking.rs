//! The blocking front end: grants, waits, tries, releases, extensions, info.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redislock_client::{Error, Locker, Mode, Token};

use crate::common::{clients_connected, until, Server};

const SEC: Duration = Duration::from_secs(1);

#[test]
fn grant_extend_info_release() {
    let server = Server::start();
    for url in [server.url(), format!("{}?protocol=resp3", server.url())] {
        let locker = Locker::open(url.as_str()).unwrap();
        let lock = locker.lock("lock:a").ttl(10 * SEC);
        let mut hold = lock.acquire(SEC).unwrap();
        assert!(hold.fence() > 0);
        assert_eq!(hold.token().len(), 32);
        assert!(hold.is_held());
        assert!(hold.owned().unwrap());
        let info = lock.info().unwrap().expect("held");
        assert_eq!(info.mode, "exclusive");
        assert_eq!(info.holder(hold.token()).unwrap().fence, hold.fence());
        assert!(info.ttl <= 10_000);
        hold.extend(60 * SEC).unwrap();
        assert!(lock.info().unwrap().unwrap().ttl > 10_000);
        assert!(hold.lease_left() > 50 * SEC);
        hold.release().unwrap();
        assert_eq!(lock.info().unwrap(), None);
    }
}

#[test]
fn try_fails_when_busy_and_a_wait_runs_out() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:busy");
    let hold = lock.try_acquire().unwrap().expect("free");
    assert!(lock.try_acquire().unwrap().is_none());
    let err = lock.acquire(Duration::from_millis(100)).unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    drop(hold);
    assert!(lock.try_acquire().unwrap().is_some());
}

#[test]
fn dropping_the_hold_releases() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:drop");
    {
        let _hold = lock.acquire(SEC).unwrap();
        assert!(lock.info().unwrap().is_some());
    }
    assert_eq!(lock.info().unwrap(), None);
    assert_eq!(server.calls("lock.release"), 1);
}

#[test]
fn server_token_shared_and_semaphore() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let by_server = locker.lock("lock:star").token(Token::Server);
    let h = by_server.acquire(SEC).unwrap();
    assert_eq!(h.token().len(), 32);
    assert_ne!(h.token(), b"*");
    let readers = locker.lock("lock:rw").mode(Mode::Shared);
    let (r1, r2) = (readers.acquire(SEC).unwrap(), readers.acquire(SEC).unwrap());
    assert!(r2.fence() > r1.fence());
    assert_eq!(readers.info().unwrap().unwrap().holders.len(), 2);
    assert!(locker.lock("lock:rw").try_acquire().unwrap().is_none());
    let sem = locker.lock("lock:sem").mode(Mode::Semaphore(2));
    let _s = (sem.acquire(SEC).unwrap(), sem.acquire(SEC).unwrap());
    assert!(sem.try_acquire().unwrap().is_none());
    let err = locker
        .lock("lock:sem")
        .mode(Mode::Semaphore(3))
        .try_acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Kind { limit: Some(2), .. }), "{err:?}");
}

#[test]
fn waiters_are_served_first_come_first_served() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:fifo").ttl(30 * SEC);
    let first = lock.acquire(SEC).unwrap();
    let (tx, rx) = mpsc::channel();
    let mut waiters = Vec::new();
    for who in 1..=2 {
        let (mine, tx) = (lock.clone(), tx.clone());
        waiters.push(thread::spawn(move || {
            let hold = mine.acquire(30 * SEC).unwrap();
            tx.send((who, hold.fence())).unwrap();
            hold // released when the test drops it
        }));
        // The next waiter starts once this one is queued in the server.
        until(10 * SEC, "the waiter to queue", || {
            lock.info().unwrap().unwrap().waiters == who
        });
    }
    first.release().unwrap();
    let (who, fence) = rx.recv_timeout(10 * SEC).unwrap();
    assert_eq!(who, 1, "the first waiter is granted first");
    // The second still waits: the lock is the first waiter's until released.
    assert_eq!(lock.info().unwrap().unwrap().waiters, 1);
    drop(waiters.remove(0).join().unwrap());
    let (who2, fence2) = rx.recv_timeout(10 * SEC).unwrap();
    assert_eq!(who2, 2);
    assert!(fence2 > fence);
    drop(waiters.remove(0).join().unwrap());
}

/// A stopped server (SIGSTOP): a wait ends with `Error::Timeout` once its time and the grace
/// are over, whether the locker had a connection open or opens one then.
#[test]
fn a_stopped_server_times_out_a_wait() {
    let server = Server::start();
    let warm = Locker::open(server.url().as_str()).unwrap();
    assert!(warm.info("lock:stopped").unwrap().is_none());
    let cold = Locker::open(server.url().as_str()).unwrap();
    // SAFETY: signalling the test's own server process (Server::drop sends SIGCONT).
    unsafe {
        libc::kill(server.pid(), libc::SIGSTOP);
    }
    for locker in [warm, cold] {
        let started = std::time::Instant::now();
        let err = locker
            .lock("lock:stopped")
            .acquire(Duration::from_millis(300))
            .unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
    // SAFETY: as above.
    unsafe {
        libc::kill(server.pid(), libc::SIGCONT);
    }
}

/// The locker's idle connections closed by the server's `timeout`: its next commands go out on
/// new ones instead of failing.
#[test]
fn idle_connections_the_server_closed_are_replaced() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:idle").ttl(10 * SEC).auto_renew(false);
    assert_eq!(lock.info().unwrap(), None); // one idle connection now
    let () = redis::cmd("CONFIG")
        .arg(&["SET", "timeout", "1"])
        .query(&mut server.conn())
        .unwrap();
    until(20 * SEC, "the server to close the idle connection", || {
        clients_connected(&server) == 0
    });
    let hold = lock.try_acquire().unwrap().expect("granted");
    until(20 * SEC, "the server to close the idle connection", || {
        clients_connected(&server) == 0
    });
    assert!(lock.info().unwrap().is_some());
    until(20 * SEC, "the server to close the idle connection", || {
        clients_connected(&server) == 0
    });
    hold.release().unwrap();
    let () = redis::cmd("CONFIG")
        .arg(&["SET", "timeout", "0"])
        .query(&mut server.conn())
        .unwrap();
}
