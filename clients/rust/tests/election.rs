//! Elections in both front ends: campaigns, terms, observation, proclamations, the lost signal,
//! and `run` through a server that restarts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use redislock_client::{aio, Error, Leader, Locker, LostReason};

use crate::common::{until, Server};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn leader(term: u64, data: &str) -> Option<Leader> {
    Some(Leader {
        term,
        data: Some(data.as_bytes().to_vec()),
    })
}

#[test]
fn the_second_candidate_leads_once_the_first_resigns_and_observers_see_each() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let mut observer = locker.election("election:svc").observe();
    let mut a = locker.election("election:svc").data("a");
    let mut b = locker.election("election:svc").data("b");
    assert_eq!(a.leader().unwrap(), None);
    assert!(!a.is_leader() && a.term().is_none() && a.lost().is_none());

    let t1 = a.campaign(Some(SEC)).unwrap();
    assert!(a.is_leader());
    assert_eq!(a.term(), Some(t1));
    assert!(a.lease_left() > 5 * SEC);
    assert_eq!(a.campaign(None).unwrap(), t1, "leads already");
    assert!(matches!(
        b.campaign(Some(100 * MS)),
        Err(Error::Busy { .. })
    ));
    assert_eq!(observer.next().unwrap().unwrap(), leader(t1, "a"));

    a.proclaim("a2").unwrap();
    assert_eq!(a.term(), Some(t1), "the same term");
    assert_eq!(observer.next().unwrap().unwrap(), leader(t1, "a2"));
    assert_eq!(b.leader().unwrap(), leader(t1, "a2"));
    assert!(matches!(b.proclaim("x"), Err(Error::NotOwner { .. })));
    assert!(matches!(a.proclaim(""), Err(Error::Invalid(_))));

    std::thread::scope(|s| {
        let second = s.spawn(|| b.campaign(None).map(|t| (t, b.is_leader())));
        until(10 * SEC, "b waiting in the server", || {
            locker.info("election:svc").unwrap().unwrap().waiters == 1
        });
        assert!(a.resign().unwrap());
        assert!(!a.is_leader());
        let (t2, leads) = second.join().unwrap().unwrap();
        assert!(t2 > t1 && leads);
        // The handoff is one change: the next leader, no vacancy between.
        assert_eq!(observer.next().unwrap().unwrap(), leader(t2, "b"));
    });
    assert!(!a.resign().unwrap(), "not leading");
    assert!(b.resign().unwrap());
    assert_eq!(observer.next().unwrap().unwrap(), None, "nobody leads");
}

#[test]
fn a_leader_whose_connection_is_killed_is_signalled_lost_once() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let mut a = locker.election("election:kill").on_lost(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    let term = a.campaign(None).unwrap();
    let client = locker.info("election:kill").unwrap().unwrap().holders[0].client;
    assert_ne!(client, 0, "the term is bound to a connection of its own");
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(client)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(killed, 1);
    let lost = a.lost().unwrap().wait_timeout(10 * SEC).expect("signalled");
    assert_eq!(
        (lost.reason, lost.fence),
        (LostReason::ConnectionClosed, term)
    );
    assert!(!a.is_leader());
    assert_eq!(a.leader().unwrap(), None, "the server ended the term");
    until(10 * SEC, "on_lost", || count.load(Ordering::SeqCst) > 0);
    assert!(!a.resign().unwrap());
    let next = a.campaign(Some(SEC)).unwrap();
    assert!(next > term);
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[test]
fn run_goes_on_through_a_restarted_server_until_stopped() {
    let mut server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let mut election = locker.election("election:run").lease(2 * SEC);
    let stopper = election.stopper();
    let (tx, rx) = mpsc::channel();
    let runner = std::thread::spawn(move || {
        election.run(|term| {
            tx.send((term.term(), true)).unwrap();
            term.wait_ended(Duration::from_secs(600));
            tx.send((term.term(), term.is_ended())).unwrap();
        })
    });
    let (first, _) = rx.recv_timeout(30 * SEC).expect("elected");
    server.restart();
    assert_eq!(
        rx.recv_timeout(30 * SEC).unwrap(),
        (first, true),
        "the term ended"
    );
    let (second, _) = rx
        .recv_timeout(30 * SEC)
        .expect("elected again after the restart");
    assert_eq!(
        locker.info("election:run").unwrap().unwrap().holders[0].fence,
        second
    );
    stopper.stop();
    assert_eq!(rx.recv_timeout(30 * SEC).unwrap(), (second, true));
    runner.join().unwrap().unwrap();
    until(10 * SEC, "resigned", || {
        locker.info("election:run").unwrap().is_none()
    });
}

#[tokio::test]
async fn the_tokio_front_end() {
    let server = Server::start();
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let mut observer = locker.election("election:aio").observe();
    let mut a = locker.election("election:aio").data("a");
    let mut b = locker.election("election:aio").data("b");
    let t1 = a.campaign(None).await.unwrap();
    assert_eq!(observer.next().await.unwrap().unwrap(), leader(t1, "a"));
    a.proclaim("a2").await.unwrap();
    assert_eq!(observer.next().await.unwrap().unwrap(), leader(t1, "a2"));
    let err = b.campaign(Some(100 * MS)).await.unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    let (second, resigned) = tokio::join!(b.campaign(Some(30 * SEC)), async {
        let blocking = Locker::open(server.url().as_str()).unwrap();
        while blocking.info("election:aio").unwrap().unwrap().waiters == 0 {
            tokio::time::sleep(5 * MS).await;
        }
        a.resign().await.unwrap()
    });
    let t2 = second.unwrap();
    assert!(resigned && t2 > t1);
    assert_eq!(b.leader().await.unwrap(), leader(t2, "b"));
    assert_eq!(observer.next().await.unwrap().unwrap(), leader(t2, "b"));

    // run(): the work is dropped when the term ends (the run stopped).
    drop(b);
    let mut c = locker.election("election:aio");
    let stopper = c.stopper();
    let worked = Arc::new(AtomicUsize::new(0));
    let counted = worked.clone();
    c.run(|term| {
        let stopper = stopper.clone();
        let counted = counted.clone();
        async move {
            assert!(term.term() > t2);
            counted.fetch_add(1, Ordering::SeqCst);
            stopper.stop();
            std::future::pending::<()>().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(worked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tokio_campaigns_and_observers_wait_longer_than_half_a_second() {
    let server = Server::start();
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let mut a = locker.election("election:long");
    let mut b = locker.election("election:long");
    let t1 = a.campaign(None).await.unwrap();
    let mut observer = locker.election("election:long").observe();
    assert_eq!(observer.next().await.unwrap().unwrap().unwrap().term, t1);
    let queued = Locker::open(server.url().as_str()).unwrap();
    let (second, (waited, seen)) = tokio::join!(b.campaign(Some(30 * SEC)), async {
        while queued.info("election:long").unwrap().unwrap().waiters == 0 {
            tokio::time::sleep(5 * MS).await;
        }
        // The candidate and the observer wait in the server for longer than the redis
        // crate's default response timeout of its multiplexed connections.
        let since = std::time::Instant::now();
        tokio::time::sleep(1200 * MS).await;
        a.resign().await.unwrap();
        (since.elapsed(), observer.next().await)
    });
    let t2 = second.unwrap();
    assert!(waited >= 1200 * MS && t2 > t1);
    let seen = seen.unwrap().unwrap();
    assert_eq!(seen.map(|l| l.term), Some(t2));
}
