//! Redis Cluster with the other features: a connection-bound multi-lock and `WAITAOF` go to the
//! master of their key, given a locker that knows another master only (both front ends).

use std::time::Duration;

use redislock_client::{aio, Error, Locker};

use crate::common::cluster::{query, slot_of, Cluster};
use crate::common::until;

const SEC: Duration = Duration::from_secs(1);

/// Whether the node answers `WAITAOF 1 0 1` (Redis 7.2+, Valkey 8+, with `appendonly yes`).
fn waitaof_answers(c: &Cluster, n: usize) -> bool {
    redis::cmd("WAITAOF")
        .arg(1)
        .arg(0)
        .arg(1)
        .query::<redis::Value>(&mut c.nodes[n].conn())
        .is_ok()
}

/// A `MultiLock::ephemeral` lives on a connection of its own to the master of its names' slot
/// (names in several slots are refused before anything is sent); `aof_local` is checked and
/// waited for on the master of the lock's key, the only one with `appendonly yes` (neither the
/// seed nor the master of slot 0).
#[test]
fn bound_multi_locks_and_waitaof_go_to_the_master_of_their_key() {
    let c = Cluster::start(3, 0);
    // A tag whose master is not slot 0's (where a request without keys would go), nor the seed.
    let first = c.owner(0);
    let tag = (0..)
        .map(|i| format!("{{mx{i}}}"))
        .find(|t| c.owner(slot_of(&c.nodes[0], t)) != first)
        .unwrap();
    let owner = c.owner(slot_of(&c.nodes[0], &tag));
    let seed = (0..3).find(|&m| m != owner && m != first).unwrap();
    let locker = Locker::cluster([c.nodes[seed].url()]).unwrap();

    let names = [format!("{tag}a"), format!("{tag}b")];
    let all = locker.multi_lock(names.clone()).ephemeral(true);
    let before = c.nodes[owner].calls("lock.acquireall");
    let hold = all.acquire(SEC).unwrap();
    assert_eq!(hold.fences().len(), 2);
    assert_eq!(c.nodes[owner].calls("lock.acquireall") - before, 1);
    assert!(locker.locked(names.clone()).unwrap());
    hold.release().unwrap();
    assert!(!locker.locked(names.clone()).unwrap());
    let crossed = locker
        .multi_lock([names[0].clone(), "{other}b".to_string()])
        .ephemeral(true);
    assert!(matches!(crossed.acquire(SEC), Err(Error::CrossSlot(_))));

    // `appendonly yes` on the key's master alone: a probe sent to any other node is refused.
    let has_waitaof = {
        let info = query(
            &c.nodes[owner],
            redis::cmd("COMMAND").arg("INFO").arg("WAITAOF"),
        );
        !matches!(&info, redis::Value::Array(a) if a.iter().all(|v| *v == redis::Value::Nil))
    };
    let aof = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .arg("appendfsync")
        .arg("always")
        .clone();
    query(&c.nodes[owner], &aof);
    for ephemeral in [false, true] {
        let lock = locker
            .lock(format!("{tag}aof"))
            .aof_local(true)
            .ephemeral(ephemeral);
        if !has_waitaof {
            // Redis 7.0: refused before anything is taken.
            assert!(matches!(lock.acquire(SEC), Err(Error::Unsupported(_))));
            assert_eq!(lock.info().unwrap(), None);
            continue;
        }
        until(30 * SEC, "the AOF is on", || waitaof_answers(&c, owner));
        let waitaofs = c.nodes[owner].calls("waitaof");
        let hold = lock.acquire(SEC).unwrap();
        // The probe (once per lock) and the fsync after the grant, on the key's master.
        assert_eq!(c.nodes[owner].calls("waitaof") - waitaofs, 2);
        assert!(hold.is_held());
        hold.release().unwrap();
    }
    // The same on the tokio front end.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (alls, aofs) = (
        c.nodes[owner].calls("lock.acquireall"),
        c.nodes[owner].calls("waitaof"),
    );
    rt.block_on(async {
        let locker = aio::Locker::cluster([c.nodes[seed].url()]).await.unwrap();
        let all = locker.multi_lock(names.clone()).ephemeral(true);
        let hold = all.acquire(SEC).await.unwrap();
        assert_eq!(hold.fences().len(), 2);
        hold.release().await.unwrap();
        for ephemeral in [false, true] {
            let lock = locker
                .lock(format!("{tag}aof"))
                .aof_local(true)
                .ephemeral(ephemeral);
            match lock.acquire(SEC).await {
                Ok(hold) => hold.release().await.unwrap(),
                Err(Error::Unsupported(_)) if !has_waitaof => {}
                Err(e) => panic!("{e:?}"),
            }
        }
    });
    assert_eq!(c.nodes[owner].calls("lock.acquireall") - alls, 1);
    if has_waitaof {
        assert_eq!(c.nodes[owner].calls("waitaof") - aofs, 4);
    }
    for other in [seed, first] {
        assert!(
            !waitaof_answers(&c, other),
            "only the key's master has an AOF"
        );
    }
}
