//! `locked`: whether anyone holds a lock, or any of several, asked of the server.

use std::time::Duration;

use redislock_client::{aio, Locker, Mode};

use crate::common::Server;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn held_by_anyone_any_of_several_and_a_plain_string() {
    let server = Server::start();
    for url in [server.url(), format!("{}?protocol=resp3", server.url())] {
        let locker = Locker::open(url.as_str()).unwrap();
        assert!(!locker.locked("l:a").unwrap());
        assert!(!locker.locked(["l:a", "l:b"]).unwrap());
        let hold = locker.lock("l:b").acquire(SEC).unwrap();
        assert!(locker.locked("l:b").unwrap());
        assert!(locker.locked(String::from("l:b")).unwrap());
        assert!(locker.locked(b"l:b".as_slice()).unwrap());
        assert!(locker.locked(["l:a", "l:b"]).unwrap());
        assert!(locker
            .locked(vec!["l:a".to_string(), "l:b".to_string()])
            .unwrap());
        assert!(!locker.locked(vec!["l:a", "l:c"]).unwrap());
        hold.release().unwrap();
        assert!(!locker.locked(["l:a", "l:b"]).unwrap());
        // Another client's shared hold, and a plain string under the name.
        let reader = locker.lock("l:r").mode(Mode::Shared).acquire(SEC).unwrap();
        assert!(locker.locked("l:r").unwrap());
        drop(reader);
        let _: () = redis::cmd("SET")
            .arg("l:s")
            .arg("v")
            .query(&mut server.conn())
            .unwrap();
        assert!(locker.locked("l:s").unwrap());
        assert!(locker.locked(["l:a", "l:s"]).unwrap());
        let _: i64 = redis::cmd("DEL")
            .arg("l:s")
            .query(&mut server.conn())
            .unwrap();
    }
}

#[tokio::test]
async fn the_tokio_front_end() {
    let server = Server::start();
    for url in [server.url(), format!("{}?protocol=resp3", server.url())] {
        let locker = aio::Locker::open(url.as_str()).unwrap();
        assert!(!locker.locked(["l:a", "l:b"]).await.unwrap());
        let held = locker
            .multi_lock(["{l}:1", "{l}:2"])
            .acquire(SEC)
            .await
            .unwrap();
        assert!(locker.locked("{l}:2").await.unwrap());
        assert!(locker.locked(["l:a", "{l}:1"]).await.unwrap());
        held.release().await.unwrap();
        assert!(!locker.locked(vec!["{l}:1", "{l}:2"]).await.unwrap());
        let _: () = redis::cmd("SET")
            .arg("l:s")
            .arg("v")
            .query(&mut server.conn())
            .unwrap();
        assert!(locker.locked("l:s").await.unwrap());
        let _: i64 = redis::cmd("DEL")
            .arg("l:s")
            .query(&mut server.conn())
            .unwrap();
    }
}
