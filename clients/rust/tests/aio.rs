//! The tokio front end against real servers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redislock_client::aio::Locker;
use redislock_client::{Error, LostReason};

use crate::common::{clients_connected, until, Server};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

async fn until_async(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + 10 * SEC;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(5 * MS).await;
    }
}

#[tokio::test]
async fn grant_try_extend_info_release_drop() {
    let server = Server::start();
    let locker = Locker::open(format!("{}?protocol=resp3", server.url()).as_str()).unwrap();
    let lock = locker.lock("lock:aio").ttl(10 * SEC);
    let mut hold = lock.acquire(SEC).await.unwrap();
    assert!(hold.is_held());
    assert!(lock.try_acquire().await.unwrap().is_none());
    let err = lock.acquire(100 * MS).await.unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    let info = lock.info().await.unwrap().unwrap();
    assert_eq!(info.holder(hold.token()).unwrap().fence, hold.fence());
    hold.extend(60 * SEC).await.unwrap();
    assert!(lock.info().await.unwrap().unwrap().ttl > 10_000);
    hold.release().await.unwrap();
    assert_eq!(lock.info().await.unwrap(), None);
    let dropped = lock.try_acquire().await.unwrap().expect("free");
    drop(dropped);
    until_async("the dropped hold's release", async || {
        lock.info().await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn waiters_in_order_and_a_cancelled_wait_leaves_the_queue() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:aio:fifo");
    let first = lock.acquire(SEC).await.unwrap();
    // A wait given up by its caller: its connection closes, the server drops the waiter.
    let gave_up = tokio::time::timeout(200 * MS, lock.acquire(30 * SEC)).await;
    assert!(gave_up.is_err());
    until_async("the cancelled waiter to leave", async || {
        lock.info().await.unwrap().unwrap().waiters == 0
    })
    .await;
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire(30 * SEC).await.unwrap() })
    };
    until_async("the waiter to queue", async || {
        lock.info().await.unwrap().unwrap().waiters == 1
    })
    .await;
    let fence = first.fence();
    first.release().await.unwrap();
    let second = waiter.await.unwrap();
    assert!(second.fence() > fence);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_and_a_loss_signalled_once() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let lock = locker
        .lock("lock:aio:lost")
        .ttl(300 * MS)
        .on_lost(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        });
    let hold = lock.acquire(SEC).await.unwrap();
    let others: Vec<_> =
        futures_join((0..50).map(|i| locker.lock(format!("lock:aio:{i}")).ttl(300 * MS))).await;
    until_async("renewals", async || server.calls("lock.extend") >= 150).await;
    assert!(hold.is_held() && others.iter().all(|h| h.is_held()));
    let _: i64 = redis::cmd("DEL")
        .arg("lock:aio:lost")
        .query(&mut server.conn())
        .unwrap();
    let lost = tokio::time::timeout(10 * SEC, hold.lost().wait())
        .await
        .unwrap();
    assert_eq!(lost.reason, LostReason::Gone);
    assert!(!hold.is_held());
    until_async("on_lost", async || count.load(Ordering::SeqCst) > 0).await;
    let end = lost.lease_end + 300 * MS;
    until_async("the lease end to pass", async || Instant::now() > end).await;
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert!(matches!(
        hold.release().await.unwrap_err(),
        Error::Lost { .. }
    ));
    assert!(others.iter().all(|h| !h.lost().is_set()));
}

async fn futures_join(
    locks: impl Iterator<Item = redislock_client::aio::Lock>,
) -> Vec<redislock_client::aio::Hold> {
    let mut holds = Vec::new();
    for lock in locks {
        holds.push(lock.acquire(SEC).await.unwrap());
    }
    holds
}

#[tokio::test]
async fn without_renewal_the_lease_clock_runs_out() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker
        .lock("lock:aio:clock")
        .ttl(300 * MS)
        .auto_renew(false);
    let before = Instant::now();
    let hold = lock.acquire(SEC).await.unwrap();
    let after = Instant::now();
    let lost = tokio::time::timeout(10 * SEC, hold.lost().wait())
        .await
        .unwrap();
    assert_eq!(lost.reason, LostReason::LeaseRanOut);
    assert!(lost.lease_end >= before + 295 * MS && lost.lease_end <= after + 295 * MS);
    assert!(!hold.is_held());
}

#[tokio::test]
async fn a_wait_in_the_server_longer_than_half_a_second_is_granted() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:long");
    let first = lock.acquire(SEC).await.unwrap();
    let (second, waited) = tokio::join!(lock.acquire(30 * SEC), async {
        while lock.info().await.unwrap().unwrap().waiters == 0 {
            tokio::time::sleep(5 * MS).await;
        }
        // Longer than the redis crate's default response timeout (500 ms).
        let since = Instant::now();
        tokio::time::sleep(1200 * MS).await;
        first.release().await.unwrap();
        since.elapsed()
    });
    assert!(waited >= 1200 * MS);
    assert!(second.unwrap().is_held());
}

/// The locker's connection closed by the server's `timeout` while idle: its next commands go
/// out on a new one instead of failing.
#[tokio::test]
async fn an_idle_connection_the_server_closed_is_replaced() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:idle").ttl(10 * SEC).auto_renew(false);
    assert_eq!(lock.info().await.unwrap(), None); // the locker's connection is open now
    let () = redis::cmd("CONFIG")
        .arg(&["SET", "timeout", "1"])
        .query(&mut server.conn())
        .unwrap();
    let closed = || {
        until(20 * SEC, "the server to close the idle connection", || {
            clients_connected(&server) == 0
        })
    };
    closed();
    let hold = lock.try_acquire().await.unwrap().expect("granted");
    closed();
    assert!(lock.info().await.unwrap().is_some());
    closed();
    assert!(locker.locked("lock:idle").await.unwrap());
    closed();
    hold.release().await.unwrap();
    closed();
    let () = redis::cmd("CONFIG")
        .arg(&["SET", "timeout", "0"])
        .query(&mut server.conn())
        .unwrap();
}
