//! Holds bound to a connection of their own (`EPHEMERAL`): renewed on it, lost when it closes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redislock_client::{aio, Error, Locker, LostReason};

use crate::common::{until, Server};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

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

#[test]
fn a_bound_hold_is_renewed_on_its_connection_and_lost_when_it_closes() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let lock = locker
        .lock("lock:bound")
        .ttl(300 * MS)
        .ephemeral(true)
        .on_lost(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        });
    let hold = lock.acquire(SEC).unwrap();
    let client = lock.info().unwrap().unwrap().holders[0].client;
    assert_ne!(client, 0, "bound to a connection");
    until(10 * SEC, "renewals", || server.calls("lock.extend") >= 3);
    assert_eq!(
        lock.info().unwrap().unwrap().holders[0].client,
        client,
        "renewed on it"
    );
    assert!(hold.is_held());

    kill_client(&server, client);
    let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert_eq!(lost.reason, LostReason::ConnectionClosed);
    assert!(!hold.is_held());
    // The signal is set first, then on_lost runs (on the renewal thread).
    until(10 * SEC, "on_lost", || count.load(Ordering::SeqCst) > 0);
    assert_eq!(lock.info().unwrap(), None, "the server released it");
    assert!(matches!(hold.release().unwrap_err(), Error::Lost { .. }));
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[test]
fn releasing_a_bound_hold_closes_its_connection_and_signals_nothing() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:bound2").ephemeral(true);
    let mut hold = lock.acquire(SEC).unwrap();
    let client = lock.info().unwrap().unwrap().holders[0].client;
    hold.extend(10 * SEC).unwrap();
    let lost = hold.lost();
    hold.release().unwrap();
    assert_eq!(lock.info().unwrap(), None);
    until(10 * SEC, "the connection to close", || {
        !client_listed(&server, client)
    });
    assert!(!lost.is_set());
    // Dropped, too.
    let dropped = lock.try_acquire().unwrap().expect("free");
    let client = lock.info().unwrap().unwrap().holders[0].client;
    drop(dropped);
    assert_eq!(lock.info().unwrap(), None);
    until(10 * SEC, "the connection to close", || {
        !client_listed(&server, client)
    });
}

#[tokio::test]
async fn a_bound_hold_async() {
    let server = Server::start();
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:bound3").ephemeral(true);
    let hold = lock.acquire(SEC).await.unwrap();
    let client = lock.info().await.unwrap().unwrap().holders[0].client;
    assert_ne!(client, 0);
    kill_client(&server, client);
    let lost = tokio::time::timeout(10 * SEC, hold.lost().wait())
        .await
        .unwrap();
    assert_eq!(lost.reason, LostReason::ConnectionClosed);
    assert!(lock.info().await.unwrap().is_none());
    let again = lock.acquire(SEC).await.unwrap();
    again.release().await.unwrap();
}

fn set_timeout(server: &Server, seconds: u32) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("timeout")
        .arg(seconds)
        .query(&mut server.conn())
        .unwrap();
}

/// The server closes connections idle for over 3 s; a bound hold with a 30 s lease (renewed
/// every 10 s) outlives two of those timeouts: its connection sends a PING after 1 s of silence.
#[test]
fn a_bound_hold_outlives_the_servers_idle_timeout() {
    let server = Server::start();
    set_timeout(&server, 3);
    let locker = Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:idle").ttl(30 * SEC).ephemeral(true);
    let hold = lock.acquire(SEC).unwrap();
    let client = lock.info().unwrap().unwrap().holders[0].client;
    let pings = server.calls("ping");
    assert_eq!(
        hold.lost().wait_timeout(7 * SEC),
        None,
        "lost to the timeout"
    );
    assert!(hold.is_held());
    assert!(client_listed(&server, client));
    assert!(server.calls("ping") >= pings + 3, "kept alive by PINGs");
    hold.release().unwrap();
    set_timeout(&server, 0);
}

#[tokio::test]
async fn a_bound_hold_outlives_the_servers_idle_timeout_async() {
    let server = Server::start();
    set_timeout(&server, 3);
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let lock = locker.lock("lock:idle").ttl(30 * SEC).ephemeral(true);
    let hold = lock.acquire(SEC).await.unwrap();
    let client = lock.info().await.unwrap().unwrap().holders[0].client;
    let pings = server.calls("ping");
    let lost = tokio::time::timeout(7 * SEC, hold.lost().wait()).await;
    assert!(lost.is_err(), "lost to the timeout: {lost:?}");
    assert!(hold.is_held());
    assert!(client_listed(&server, client));
    assert!(server.calls("ping") >= pings + 3, "kept alive by PINGs");
    hold.release().await.unwrap();
    set_timeout(&server, 0);
}
