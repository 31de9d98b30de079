//! Guarded writes: LOCK.CALL through a hold, LOCK.FENCE through a gate; the inner command's
//! reply and errors are the redis crate's own.

use std::time::Duration;

use redis::Value;
use redislock_client::{aio, Error, Locker};

use crate::common::Server;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn call_and_fence() {
    let server = Server::start();
    for resp3 in [false, true] {
        let url = format!(
            "{}{}",
            server.url(),
            if resp3 { "?protocol=resp3" } else { "" }
        );
        let locker = Locker::open(url.as_str()).unwrap();
        let hold = locker.lock("lock:g").acquire(SEC).unwrap();
        let () = hold
            .call(redis::cmd("HSET").arg("h").arg("f").arg("v"))
            .unwrap();
        let got: Value = hold.call(redis::cmd("HGETALL").arg("h")).unwrap();
        let pair = (
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(b"v".to_vec()),
        );
        let expected = if resp3 {
            Value::Map(vec![pair])
        } else {
            Value::Array(vec![pair.0, pair.1])
        };
        assert_eq!(got, expected, "the reply as the server gave it");
        // The inner command's error is the redis crate's, untranslated.
        let err = hold.call::<i64>(redis::cmd("INCR").arg("h")).unwrap_err();
        match err {
            Error::Redis(e) => assert_eq!(e.code(), Some("WRONGTYPE")),
            other => panic!("{other:?}"),
        }
        let _: i64 = redis::cmd("DEL")
            .arg("lock:g")
            .query(&mut server.conn())
            .unwrap();
        let err = hold
            .call::<()>(redis::cmd("SET").arg("x").arg(1))
            .unwrap_err();
        assert!(matches!(err, Error::NotOwner { .. }), "{err:?}");
        let _: i64 = redis::cmd("DEL")
            .arg("h")
            .arg("gate")
            .query(&mut server.conn())
            .unwrap();

        let n: i64 = locker
            .fence("gate", 7, redis::cmd("INCR").arg("n"))
            .unwrap();
        assert!(n >= 1);
        let err = locker
            .fence::<i64>("gate", 3, redis::cmd("INCR").arg("n"))
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::StaleFence {
                    fence: Some(3),
                    highest: Some(7)
                }
            ),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn call_and_fence_async() {
    let server = Server::start();
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let hold = locker.lock("lock:ga").acquire(SEC).await.unwrap();
    let () = hold
        .call(redis::cmd("SET").arg("k").arg("v"))
        .await
        .unwrap();
    let v: String = hold.call(redis::cmd("GET").arg("k")).await.unwrap();
    assert_eq!(v, "v");
    let fence = hold.fence();
    let () = locker
        .fence("gate", fence, redis::cmd("SET").arg("w").arg(1))
        .await
        .unwrap();
    let err = locker
        .fence::<()>("gate", fence - 1, redis::cmd("SET").arg("w").arg(2))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StaleFence { .. }), "{err:?}");
    hold.release().await.unwrap();
}
