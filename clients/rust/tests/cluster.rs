//! Redis Cluster (`Locker::cluster`): locks routed to the master of their key, waits that
//! follow a slot migration with the time they have left, a `kill -9` failover.

use std::time::{Duration, Instant};

use redislock_client::{Error, Locker, LostReason};

use crate::common::cluster::{query, slot_of, Cluster};
use crate::common::until;

const SEC: Duration = Duration::from_secs(1);

/// A key served by each of the first `masters` nodes.
fn key_per_master(c: &Cluster, masters: usize, prefix: &str) -> Vec<String> {
    let mut keys = vec![String::new(); masters];
    for i in 0.. {
        let key = format!("{prefix}{i}");
        let owner = c.owner(slot_of(&c.nodes[0], &key));
        if keys[owner].is_empty() {
            keys[owner] = key;
        }
        if keys.iter().all(|k| !k.is_empty()) {
            return keys;
        }
    }
    unreachable!()
}

fn calls(c: &Cluster, command: &str) -> u64 {
    c.nodes.iter().map(|n| n.calls(command)).sum()
}

#[test]
fn locks_fences_and_multi_locks_go_to_the_master_of_their_slot() {
    let c = Cluster::start(3, 0);
    // Given one node only: the locker learns the others from it.
    let locker = Locker::cluster([c.nodes[1].url()]).unwrap();
    assert!(locker.is_cluster());
    for (m, key) in key_per_master(&c, 3, "lock:").iter().enumerate() {
        let hold = locker
            .lock(key.as_str())
            .ttl(10 * SEC)
            .acquire(SEC)
            .unwrap();
        let info = locker.info(key).unwrap().expect("held");
        assert_eq!(info.holders[0].fence, hold.fence());
        assert_eq!(c.waiters(m, key), 0);
        assert!(locker.lock(key.as_str()).try_acquire().unwrap().is_none());
        // A guarded write, in the key's slot.
        let total = format!("{{{key}}}:total");
        let gate = format!("{{{key}}}:gate");
        let ok: String = hold.call(redis::cmd("SET").arg(&total).arg(m)).unwrap();
        assert_eq!(ok, "OK");
        let ok: String = locker
            .fence(
                &gate,
                hold.fence(),
                redis::cmd("SET").arg(&total).arg("fenced"),
            )
            .unwrap();
        assert_eq!(ok, "OK");
        let stale = locker.fence::<String>(&gate, hold.fence() - 1, redis::cmd("DEL").arg(&total));
        assert!(matches!(stale, Err(Error::StaleFence { .. })), "{stale:?}");
        let seen: String = redis::cmd("GET")
            .arg(&total)
            .query(&mut c.nodes[m].conn())
            .unwrap();
        assert_eq!(seen, "fenced", "written on the master of the slot");
        hold.release().unwrap();
        assert_eq!(locker.info(key).unwrap(), None);
        assert!(!locker.locked(key.as_str()).unwrap());
    }

    let multi = locker.multi_lock(["{acct}:a", "{acct}:b"]).ttl(10 * SEC);
    let hold = multi.acquire(SEC).unwrap();
    assert_eq!(hold.fences().len(), 2);
    assert!(locker.locked("{acct}:b").unwrap());
    hold.release().unwrap();
    assert!(!locker.locked(["{acct}:a", "{acct}:b"]).unwrap());
    let before = calls(&c, "lock.acquireall");
    let cross = locker.multi_lock(["acct:a", "acct:b"]).try_acquire();
    assert!(matches!(cross, Err(Error::CrossSlot(_))), "{cross:?}");
    assert_eq!(
        calls(&c, "lock.acquireall"),
        before,
        "refused before sending"
    );
}

/// A waiter queued on a key whose slot (with the lock record) moves to another master is
/// queued again there, and granted when the holder releases, within its own deadline; a wait
/// whose time runs out during the move ends at its deadline.
#[test]
fn a_wait_follows_its_slot_to_another_master_with_the_time_it_has_left() {
    let c = Cluster::start(3, 0);
    let locker = Locker::cluster(c.urls()).unwrap();
    let key = "{move}lock";
    let slot = slot_of(&c.nodes[0], key);
    let src = c.owner(slot);
    let dst = c.other_master(src, 3);
    let holder = locker.lock(key).ttl(60 * SEC).acquire(SEC).unwrap();

    const LONG: Duration = Duration::from_secs(30);
    const SHORT: Duration = Duration::from_secs(4);
    let waiter = {
        let locker = locker.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let got = locker.lock(key).ttl(60 * SEC).acquire(LONG);
            (started, got, Instant::now())
        })
    };
    let short = {
        let locker = locker.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let got = locker.lock(key).acquire(SHORT);
            (started, got, Instant::now())
        })
    };
    until(20 * SEC, "both waiters queued on the source", || {
        c.waiters(src, key) == 2
    });
    // Half the short wait spent before the move: sent again with its full 4 s, it would end
    // 2 s late at least.
    std::thread::sleep(SHORT / 2);
    let moved_at = Instant::now();
    c.move_slot(slot, src, dst, &[key]);
    until(
        20 * SEC,
        "the long waiter queued again on the target",
        || c.waiters(dst, key) >= 1,
    );

    let (s_started, s_got, s_ended) = short.join().unwrap();
    assert!(
        matches!(s_got, Err(Error::Busy { .. })),
        "the short wait ran out: {s_got:?}"
    );
    let late = s_ended.saturating_duration_since(s_started + SHORT);
    assert!(
        late < Duration::from_millis(1500),
        "the short wait ended {late:?} after its deadline (moved {:?} into it)",
        moved_at - s_started
    );
    // Not before its deadline either (an empty answer within 20 ms of it ends a wait).
    assert!(s_ended + Duration::from_millis(50) >= s_started + SHORT);

    let released_at = Instant::now();
    holder.release().unwrap(); // goes to the target: the hold moved with its key
    let (started, got, granted_at) = waiter.join().unwrap();
    let hold = got.expect("granted on the target");
    assert!(granted_at >= released_at);
    assert!(granted_at < started + LONG, "within its own deadline");
    assert!(granted_at - released_at < 5 * SEC, "granted at the release");
    let info = query(&c.nodes[dst], redis::cmd("LOCK.INFO").arg(key));
    assert!(format!("{info:?}").contains(&hold.fence().to_string()));
    hold.release().unwrap();
}

/// `kill -9` of the master of a key and its replica's takeover: a renewed hold keeps renewing
/// on the promoted replica, a hold without renewal is signalled lost by its lease clock, a
/// connection-bound hold as its connection closes, a wait
/// whose node died is queued again on the new master with the time it has left, and a new
/// acquire gets a fence above every earlier one.
#[test]
fn after_a_kill_9_failover_holds_and_waits_go_to_the_promoted_replica() {
    let mut c = Cluster::start(3, 1);
    let locker = Locker::cluster(c.urls()).unwrap();
    let (renewed, lapsing) = ("{fo}renewed", "{fo}lapsing");
    let slot = slot_of(&c.nodes[0], renewed);
    let master = c.owner(slot);
    let replica = 3 + master; // replicas follow the masters in order
    let kept = locker
        .lock(renewed)
        .ttl(15 * SEC)
        .replicas(1, 5 * SEC)
        .acquire(SEC)
        .unwrap();
    let lapsed = locker
        .lock(lapsing)
        .ttl(3 * SEC)
        .auto_renew(false)
        .replicas(1, 5 * SEC)
        .acquire(SEC)
        .unwrap();
    let lapsed_at = Instant::now();
    let bound = locker
        .lock("{fo}bound")
        .ephemeral(true)
        .acquire(SEC)
        .unwrap();
    const WAIT: Duration = Duration::from_secs(40);
    let waiter = {
        let locker = locker.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let got = locker.lock(renewed).ttl(10 * SEC).acquire(WAIT);
            (started, got, Instant::now())
        })
    };
    until(20 * SEC, "the waiter queued", || {
        c.waiters(master, renewed) == 1
    });

    let killed_at = Instant::now();
    c.kill_and_fail_over(master, replica, slot);
    // The connection-bound hold's connection closed with its master.
    let closed = bound.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert_eq!(closed.reason, LostReason::ConnectionClosed);
    assert!(closed.lease_end >= killed_at - SEC);
    until(
        20 * SEC,
        "the waiter queued again on the promoted replica",
        || c.waiters(replica, renewed) == 1,
    );

    let lost = lapsed
        .lost()
        .wait_timeout(20 * SEC)
        .expect("signalled lost");
    assert_eq!(lost.reason, LostReason::LeaseRanOut);
    assert!(lost.lease_end <= lapsed_at + 3 * SEC, "by the lease clock");
    let again = locker.lock(lapsing).acquire(20 * SEC).unwrap();
    assert!(
        again.fence() > lapsed.fence(),
        "{} > {}",
        again.fence(),
        lapsed.fence()
    );
    again.release().unwrap();

    assert!(kept.is_held(), "renewed on the promoted replica");
    assert!(!kept.lost().is_set());
    let released_at = Instant::now();
    kept.release().unwrap();
    let (started, got, granted_at) = waiter.join().unwrap();
    let hold = got.expect("granted on the promoted replica");
    assert!(granted_at >= released_at && granted_at < started + WAIT);
    assert!(hold.fence() > 0);
    hold.release().unwrap();
}
