//! Durable grants (`replicas(n, timeout)`): `WAIT` after each grant and extension, on a master
//! with a replica; a stopped replica leaves a grant unacknowledged: released, `NotReplicated`.

use std::time::{Duration, Instant};

use redislock_client::{aio, Error, Locker};

use crate::common::Server;

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// SIGSTOP (or SIGCONT) to a server of the test.
fn signal(server: &Server, sig: i32) {
    // SAFETY: signalling our own child process by its id.
    assert_eq!(unsafe { libc::kill(server.pid(), sig) }, 0);
}

#[track_caller]
fn not_replicated(err: Error, acknowledged: u64) {
    match err {
        Error::NotReplicated {
            replicas, needed, ..
        } => assert_eq!((replicas, needed), (Some(acknowledged), 1)),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
}

#[test]
fn grants_and_extensions_wait_for_the_replica() {
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let locker = Locker::open(master.url().as_str()).unwrap();
    for ephemeral in [false, true] {
        let lock = locker
            .lock("lock:durable")
            .replicas(1, 2 * SEC)
            .ephemeral(ephemeral);
        let waits = master.calls("wait");
        let mut hold = lock.acquire(SEC).unwrap();
        assert_eq!(master.calls("wait"), waits + 1, "one WAIT after the grant");
        hold.extend(10 * SEC).unwrap();
        assert_eq!(
            master.calls("wait"),
            waits + 2,
            "one WAIT after the extension"
        );
        // The replica has the grant.
        let on_replica: Option<redis::Value> = redis::cmd("LOCK.INFO")
            .arg("lock:durable")
            .query(&mut replica.conn())
            .unwrap();
        assert!(on_replica.is_some(), "the replica has the lock");
        hold.release().unwrap();
    }

    // The replica stops: neither a grant nor an extension is acknowledged.
    let mut kept = locker
        .lock("lock:kept")
        .replicas(1, SEC)
        .try_acquire()
        .unwrap()
        .expect("free");
    signal(&replica, libc::SIGSTOP);
    for ephemeral in [false, true] {
        let lock = locker
            .lock("lock:durable")
            .replicas(1, 300 * MS)
            .ephemeral(ephemeral);
        let t = Instant::now();
        not_replicated(lock.acquire(SEC).unwrap_err(), 0);
        assert!(t.elapsed() >= 300 * MS, "WAIT waited: {:?}", t.elapsed());
        assert_eq!(lock.info().unwrap(), None, "the grant was released");
    }
    not_replicated(kept.extend(60 * SEC).unwrap_err(), 0);
    assert!(
        kept.is_held(),
        "an extension not acknowledged keeps the hold"
    );
    assert!(kept.lease_left() < 31 * SEC, "the lease clock did not move");
    signal(&replica, libc::SIGCONT);
    kept.release().unwrap();
}

#[tokio::test]
async fn grants_wait_for_the_replica_async() {
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let locker = aio::Locker::open(master.url().as_str()).unwrap();
    // A direct grant, and one after a wait in the server.
    let lock = locker.lock("lock:durable").replicas(1, 2 * SEC);
    let first = lock.try_acquire().await.unwrap().expect("free");
    let waits = master.calls("wait");
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire(10 * SEC).await }
    });
    let deadline = Instant::now() + 10 * SEC;
    while lock.info().await.unwrap().map(|i| i.waiters) != Some(1) {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(5 * MS).await;
    }
    first.release().await.unwrap();
    let mut second = waiting.await.unwrap().unwrap();
    assert_eq!(master.calls("wait"), waits + 1);
    second.extend(10 * SEC).await.unwrap();
    second.release().await.unwrap();

    signal(&replica, libc::SIGSTOP);
    for ephemeral in [false, true] {
        let lock = locker
            .lock("lock:durable")
            .replicas(1, 300 * MS)
            .ephemeral(ephemeral);
        not_replicated(lock.acquire(SEC).await.unwrap_err(), 0);
        assert_eq!(lock.info().await.unwrap(), None, "the grant was released");
    }
    signal(&replica, libc::SIGCONT);
}

/// Renewals are followed by WAIT too: with the replica stopped, none counts, and the hold is
/// lost when its lease clock runs out (the server still has it, renewed).
#[test]
fn renewals_not_acknowledged_do_not_count() {
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let locker = Locker::open(master.url().as_str()).unwrap();
    let lock = locker
        .lock("lock:renewed")
        .ttl(900 * MS)
        .replicas(1, 100 * MS);
    let hold = lock.try_acquire().unwrap().expect("free");
    let extends = master.calls("lock.extend");
    signal(&replica, libc::SIGSTOP);
    let lost = hold.lost().wait_timeout(10 * SEC).expect("lost");
    assert_eq!(lost.reason, redislock_client::LostReason::LeaseRanOut);
    assert!(master.calls("lock.extend") > extends, "renewals were sent");
    signal(&replica, libc::SIGCONT);
}
