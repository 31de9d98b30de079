//! Locks on several keys (`LOCK.ACQUIREALL`) in both front ends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redislock_client::{aio, Error, Locker, LostReason};

use crate::common::{until, Server};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

const KEYS: [&str; 3] = ["{acct}:a", "{acct}:b", "{acct}:c"];

fn fence_in_server(locker: &Locker, name: &str) -> u64 {
    locker.info(name).unwrap().unwrap().holders[0].fence
}

#[test]
fn every_key_at_once_with_a_fence_each() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    // One key taken first: its fence is older than the others'.
    let single = locker.lock(KEYS[1]).acquire(SEC).unwrap();
    let lock = locker.multi_lock(KEYS).ttl(10 * SEC);
    assert!(lock.try_acquire().unwrap().is_none(), "all or nothing");
    assert_eq!(locker.info(KEYS[0]).unwrap(), None, "no key taken in part");
    single.release().unwrap();

    let mut hold = lock.acquire(SEC).unwrap();
    assert_eq!(hold.fences().len(), 3);
    for (name, fence) in KEYS.iter().zip(hold.fences()) {
        assert_eq!(fence_in_server(&locker, name), *fence);
        assert_eq!(hold.fence_of(name), Some(*fence));
    }
    assert_eq!(hold.fence_of("{acct}:z"), None);
    let info = hold.info().unwrap();
    assert!(info
        .iter()
        .all(|i| i.as_ref().unwrap().holder(hold.token()).is_some()));
    assert!(hold.owned().unwrap());
    assert!(hold.is_held());

    hold.extend(60 * SEC).unwrap();
    for name in KEYS {
        assert!(
            locker.info(name).unwrap().unwrap().ttl > 10_000,
            "{name} extended"
        );
    }
    hold.reacquire().unwrap();
    assert!(locker.info(KEYS[2]).unwrap().unwrap().ttl <= 10_000);

    hold.release().unwrap();
    for name in KEYS {
        assert_eq!(locker.info(name).unwrap(), None);
    }
}

#[test]
fn a_deleted_key_is_not_owned_and_the_set_is_lost() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let lock = locker.multi_lock(KEYS).ttl(600 * MS).on_lost(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    let hold = lock.acquire(SEC).unwrap();
    assert!(hold.owned().unwrap());
    let () = redis::cmd("DEL")
        .arg(KEYS[1])
        .query(&mut server.conn())
        .unwrap();
    assert!(!hold.owned().unwrap(), "asks the server");
    // The next renewal finds the key gone: the whole set is lost, once.
    let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert_eq!(lost.reason, LostReason::Gone);
    assert_eq!(lost.name, b"[{acct}:a, {acct}:b, {acct}:c]".to_vec());
    assert!(!hold.is_held());
    assert!(matches!(hold.release().unwrap_err(), Error::Lost { .. }));
    assert_eq!(
        locker.info(KEYS[0]).unwrap(),
        None,
        "the keys still held are released"
    );
    until(10 * SEC, "on_lost", || count.load(Ordering::SeqCst) == 1);
}

#[test]
fn renewals_keep_every_key_past_its_lease() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let hold = locker.multi_lock(KEYS).ttl(300 * MS).acquire(SEC).unwrap();
    let before = server.calls("lock.extend");
    let granted = Instant::now();
    until(10 * SEC, "four renewals of every key", || {
        server.calls("lock.extend") >= before + 12
    });
    assert!(granted.elapsed() > 300 * MS, "past the lease");
    assert!(hold.owned().unwrap());
    assert!(!hold.lost().is_set());
    hold.release().unwrap();
}

#[test]
fn names_in_several_slots_are_refused_before_sending() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let before = server.calls("lock.acquireall");
    let err = locker
        .multi_lock(["lock:a", "lock:b"])
        .try_acquire()
        .unwrap_err();
    assert!(matches!(err, Error::CrossSlot(_)), "{err:?}");
    let err = locker
        .multi_lock(["{t}a", "{t}a"])
        .acquire(SEC)
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    assert_eq!(server.calls("lock.acquireall"), before, "nothing sent");
}

#[test]
fn a_wait_in_the_server_is_granted_at_the_release() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let first = locker.lock(KEYS[2]).acquire(SEC).unwrap();
    let lock = locker.multi_lock(KEYS);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| lock.acquire(30 * SEC));
        until(10 * SEC, "the waiter queued", || {
            locker.info(KEYS[2]).unwrap().unwrap().waiters == 1
        });
        let released = Instant::now();
        first.release().unwrap();
        let hold = waiter.join().unwrap().unwrap();
        assert!(released.elapsed() < 10 * SEC);
        assert_eq!(
            hold.fence_of(KEYS[2]),
            Some(fence_in_server(&locker, KEYS[2]))
        );
    });
}

#[tokio::test]
async fn the_tokio_front_end() {
    let server = Server::start();
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let lock = locker.multi_lock(KEYS).ttl(10 * SEC);
    let mut hold = lock.acquire(SEC).await.unwrap();
    assert!(lock.try_acquire().await.unwrap().is_none());
    let err = lock.acquire(100 * MS).await.unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    for (name, info) in KEYS.iter().zip(lock.info().await.unwrap()) {
        assert_eq!(Some(info.unwrap().holders[0].fence), hold.fence_of(name));
    }
    hold.extend(60 * SEC).await.unwrap();
    assert!(hold.owned().await.unwrap());
    let err = locker
        .multi_lock(["x", "y"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CrossSlot(_)), "{err:?}");
    hold.release().await.unwrap();
    assert!(lock.info().await.unwrap().iter().all(Option::is_none));
    let dropped = lock.try_acquire().await.unwrap().expect("free");
    drop(dropped);
    let deadline = Instant::now() + 10 * SEC;
    while lock.info().await.unwrap().iter().any(Option::is_some) {
        assert!(Instant::now() < deadline, "released when dropped");
        tokio::time::sleep(5 * MS).await;
    }
}
