//! Several keys bound to one connection of their own (`MultiLock::ephemeral`): granted,
//! renewed, extended and released on it; when it closes, every key is free and the set is
//! signalled lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redislock_client::{aio, Error, Locker, LostReason};

use crate::common::{until, Server};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
const NAMES: [&str; 3] = ["{acct}:a", "{acct}:b", "{acct}:c"];

fn kill_client(server: &Server, id: u64) {
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(killed, 1);
}

fn client_listed(server: &Server, id: u64) -> bool {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.lines().any(|l| l.starts_with(&format!("id={id} ")))
}

/// The connection every key's holder is bound to (one for all).
fn bound_client(locker: &Locker) -> u64 {
    let clients: Vec<u64> = NAMES
        .iter()
        .map(|n| locker.info(n).unwrap().expect("held").holders[0].client)
        .collect();
    assert_ne!(clients[0], 0, "bound to a connection");
    assert!(clients.iter().all(|c| *c == clients[0]), "{clients:?}");
    clients[0]
}

#[test]
fn every_key_is_freed_and_the_set_lost_when_its_connection_closes() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let lock = locker
        .multi_lock(NAMES)
        .ttl(600 * MS)
        .ephemeral(true)
        .on_lost(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        });
    let hold = lock.acquire(SEC).unwrap();
    let client = bound_client(&locker);
    let extends = server.calls("lock.extend");
    until(10 * SEC, "renewals", || {
        server.calls("lock.extend") >= extends + 6
    });
    assert_eq!(bound_client(&locker), client, "renewed on it");
    assert!(hold.is_held());

    let killed = Instant::now();
    kill_client(&server, client);
    let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert_eq!(lost.reason, LostReason::ConnectionClosed);
    assert!(
        killed.elapsed() < 600 * MS,
        "signalled at the close, not at the lease's end: {:?}",
        killed.elapsed()
    );
    assert!(!hold.is_held());
    for name in NAMES {
        assert_eq!(locker.info(name).unwrap(), None, "{name} released");
    }
    until(10 * SEC, "on_lost", || count.load(Ordering::SeqCst) > 0);
    assert!(matches!(hold.release().unwrap_err(), Error::Lost { .. }));
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[test]
fn a_bound_set_is_extended_and_released_on_its_connection() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.multi_lock(NAMES).ephemeral(true);
    let mut hold = lock.try_acquire().unwrap().expect("free");
    let client = bound_client(&locker);
    hold.extend(60 * SEC).unwrap();
    assert!(hold.lease_left() > 50 * SEC);
    assert!(hold.owned().unwrap());
    let lost = hold.lost();
    hold.release().unwrap();
    for name in NAMES {
        assert_eq!(locker.info(name).unwrap(), None);
    }
    until(10 * SEC, "the connection to close", || {
        !client_listed(&server, client)
    });
    assert!(!lost.is_set());
}

#[tokio::test]
async fn every_key_is_freed_and_the_set_lost_when_its_connection_closes_async() {
    let server = Server::start();
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let lock = locker.multi_lock(NAMES).ttl(600 * MS).ephemeral(true);
    let mut hold = lock.acquire(SEC).await.unwrap();
    let info = locker.info(NAMES[1]).await.unwrap().expect("held");
    let client = info.holders[0].client;
    assert_ne!(client, 0, "bound to a connection");
    hold.extend(30 * SEC).await.unwrap();
    let killed = Instant::now();
    kill_client(&server, client);
    let lost = hold.lost().wait().await;
    assert_eq!(lost.reason, LostReason::ConnectionClosed);
    assert!(killed.elapsed() < 5 * SEC, "{:?}", killed.elapsed());
    for name in NAMES {
        assert_eq!(locker.info(name).await.unwrap(), None, "{name} released");
    }
    assert!(matches!(
        hold.release().await.unwrap_err(),
        Error::Lost { .. }
    ));
}
