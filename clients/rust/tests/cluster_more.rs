//! Redis Cluster: requests while a slot is split between two masters (`ASK`), connection-bound
//! holds and elections on the master of their key, and the tokio front end.

use std::time::{Duration, Instant};

use redislock_client::{aio, Error, Leader, Locker};

use crate::common::cluster::{slot_of, Cluster};
use crate::common::until;

const SEC: Duration = Duration::from_secs(1);

/// While a slot moves, a free lock is asked of the target (`ASK`, `ASKING`): a try, a wait and
/// a connection-bound hold are granted there; a renewed hold on the source keeps renewing; once
/// the slot is the target's, every hold releases there (`MOVED`).
#[test]
fn while_a_slot_is_split_free_locks_are_taken_on_the_target() {
    let c = Cluster::start(3, 0);
    let locker = Locker::cluster(c.urls()).unwrap();
    let slot = slot_of(&c.nodes[0], "{ask}");
    let src = c.owner(slot);
    let dst = c.other_master(src, 3);
    let kept = locker
        .lock("{ask}kept")
        .ttl(1500 * MS)
        .acquire(SEC)
        .unwrap();
    let acquires_on_dst = c.nodes[dst].calls("lock.acquire");
    c.begin_move(slot, src, dst);

    let tried = locker
        .lock("{ask}tried")
        .try_acquire()
        .unwrap()
        .expect("free");
    let waited = locker.lock("{ask}waited").acquire(5 * SEC).unwrap();
    let bound = locker
        .lock("{ask}bound")
        .ephemeral(true)
        .acquire(5 * SEC)
        .unwrap();
    assert_eq!(
        c.nodes[dst].calls("lock.acquire") - acquires_on_dst,
        3,
        "each granted on the target"
    );
    // Three lease ends of the hold still on the source: renewed each time.
    assert!(kept.lost().wait_timeout(4500 * MS).is_none());
    assert!(kept.is_held());

    c.migrate(src, dst, &["{ask}kept"]);
    c.finish_move(slot, src, dst);
    assert!(
        kept.lost().wait_timeout(3 * SEC).is_none(),
        "renewed on the target"
    );
    for hold in [kept, tried, waited, bound] {
        let name = String::from_utf8_lossy(hold.name()).into_owned();
        assert!(locker.locked(name.as_str()).unwrap(), "{name}");
        hold.release().unwrap();
        assert!(!locker.locked(name.as_str()).unwrap(), "{name}");
    }
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn elections_campaign_and_observe_on_the_master_of_their_name() {
    let c = Cluster::start(3, 0);
    let name = "{el}svc";
    let owner = c.owner(slot_of(&c.nodes[0], name));
    // Given another master only: the election goes to the name's own.
    let locker = Locker::cluster([c.nodes[c.other_master(owner, 3)].url()]).unwrap();
    let mut observer = locker.election(name).observe();
    let mut a = locker.election(name).data("a");
    let mut b = locker.election(name).data("b");
    let t1 = a.campaign(Some(SEC)).unwrap();
    assert_eq!(
        observer.next().unwrap().unwrap(),
        Some(Leader {
            term: t1,
            data: Some(b"a".to_vec())
        })
    );
    assert!(matches!(
        b.campaign(Some(100 * MS)),
        Err(Error::Busy { .. })
    ));
    std::thread::scope(|s| {
        let second = s.spawn(|| b.campaign(Some(20 * SEC)));
        until(10 * SEC, "b waiting on the master of the name", || {
            c.waiters(owner, name) == 1
        });
        assert!(a.resign().unwrap());
        let t2 = second.join().unwrap().unwrap();
        assert!(t2 > t1);
        assert_eq!(
            observer.next().unwrap().unwrap(),
            Some(Leader {
                term: t2,
                data: Some(b"b".to_vec())
            })
        );
    });
    assert!(b.resign().unwrap());
}

/// An observer waiting on the master of a vacant election's name follows the name when its
/// slot moves to another master (`MOVED`), in both front ends, and sees the leader elected
/// there.
#[test]
fn an_observer_follows_its_name_to_another_master() {
    let c = Cluster::start(3, 0);
    let locker = Locker::cluster(c.urls()).unwrap();
    let name = "{obs}svc";
    let slot = slot_of(&c.nodes[0], name);
    let src = c.owner(slot);
    let dst = c.other_master(src, 3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let aio_locker = rt.block_on(aio::Locker::cluster(c.urls())).unwrap();
    let mut observer = locker.election(name).observe();
    let mut aio_observer = aio_locker.election(name).observe();
    let seen = std::thread::spawn(move || observer.next());
    let aio_seen = std::thread::spawn(move || rt.block_on(aio_observer.next()));
    until(20 * SEC, "both observers waiting on the source", || {
        c.observers(src) == 2
    });
    c.move_slot(slot, src, dst, &[]);
    until(20 * SEC, "both observers waiting on the target", || {
        c.observers(dst) == 2
    });
    let mut leader = locker.election(name).data("a");
    let term = leader.campaign(Some(SEC)).unwrap();
    let expected = Some(Leader {
        term,
        data: Some(b"a".to_vec()),
    });
    assert_eq!(seen.join().unwrap().unwrap().unwrap(), expected);
    assert_eq!(aio_seen.join().unwrap().unwrap().unwrap(), expected);
    assert!(leader.resign().unwrap());
}

/// The tokio front end: locks on every master, a multi-lock, a guarded write, and a wait that
/// follows its slot to another master and is granted there within its own deadline.
#[test]
fn the_tokio_front_end_routes_locks_and_waits_follow_a_move() {
    let c = Cluster::start(3, 0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let key = "{aio}lock";
    let slot = slot_of(&c.nodes[0], key);
    let src = c.owner(slot);
    let dst = c.other_master(src, 3);
    // In RESP3: every node's connections are.
    let urls = c.urls().into_iter().map(|u| format!("{u}?protocol=resp3"));
    let locker = rt.block_on(aio::Locker::cluster(urls)).unwrap();
    assert!(locker.is_cluster());
    let holder = rt.block_on(async {
        for i in 0..12 {
            let name = format!("lock:{i}");
            let hold = locker.lock(name.as_str()).acquire(SEC).await.unwrap();
            assert_eq!(
                locker.info(&name).await.unwrap().unwrap().holders[0].fence,
                hold.fence()
            );
            let total = format!("{{{name}}}:total");
            let ok: String = hold
                .call(redis::cmd("SET").arg(&total).arg(i))
                .await
                .unwrap();
            assert_eq!(ok, "OK");
            hold.release().await.unwrap();
        }
        for n in &c.nodes {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut n.conn())
                .unwrap();
            assert!(clients.contains("resp=3"), "{clients}");
        }
        let multi = locker
            .multi_lock(["{m}a", "{m}b"])
            .acquire(SEC)
            .await
            .unwrap();
        multi.release().await.unwrap();
        let cross = locker.multi_lock(["a", "b"]).try_acquire().await;
        assert!(matches!(cross, Err(Error::CrossSlot(_))), "{cross:?}");
        locker.lock(key).ttl(60 * SEC).acquire(SEC).await.unwrap()
    });
    const WAIT: Duration = Duration::from_secs(30);
    let waiter = {
        let locker = locker.clone();
        rt.spawn(async move {
            let started = Instant::now();
            let got = locker.lock(key).acquire(WAIT).await;
            (started, got, Instant::now())
        })
    };
    until(20 * SEC, "the waiter queued on the source", || {
        c.waiters(src, key) == 1
    });
    c.move_slot(slot, src, dst, &[key]);
    until(20 * SEC, "the waiter queued again on the target", || {
        c.waiters(dst, key) == 1
    });
    let released_at = Instant::now();
    rt.block_on(holder.release()).unwrap();
    let (started, got, granted_at) = rt.block_on(waiter).unwrap();
    let hold = got.expect("granted on the target");
    assert!(granted_at >= released_at && granted_at < started + WAIT);
    rt.block_on(hold.release()).unwrap();
}
