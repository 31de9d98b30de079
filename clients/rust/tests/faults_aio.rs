//! The tokio front end where the network or the server fails (as `faults` for the blocking one):
//! a partition and a connection cut under a renewed hold, a stopped and a killed server.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redislock_client::aio::{Hold, Locker};
use redislock_client::{Error, Lost, LostReason, WAIT_GRACE};

use crate::common::proxy::Proxy;
use crate::common::{signal, wait_in_server, Server};
use crate::faults::SCHEDULING;

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
const LEASE: Duration = Duration::from_millis(1200);

/// Waits until a renewal of `hold` was answered (its lease clock moved on).
async fn renewed(hold: &Hold) {
    let end = Instant::now() + hold.lease_left();
    let deadline = Instant::now() + 10 * SEC;
    while Instant::now() + hold.lease_left() <= end + 100 * MS {
        assert!(Instant::now() < deadline, "timed out waiting for a renewal");
        tokio::time::sleep(5 * MS).await;
    }
}

/// Awaits `f`, asserting it took no longer than `bound` (and the scheduling margin).
async fn within<T>(bound: Duration, what: &str, f: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = tokio::time::timeout(bound + 10 * SEC, f)
        .await
        .unwrap_or_else(|_| panic!("{what} hangs"));
    let took = started.elapsed();
    assert!(took <= bound + SCHEDULING, "{what} took {took:?}");
    out
}

async fn lost(hold: &Hold) -> Lost {
    within(10 * SEC, "the lost signal", hold.lost().wait()).await
}

/// The moments `on_lost` ran.
type Calls = Arc<Mutex<Vec<Instant>>>;

fn recorder() -> (Calls, impl Fn(&Lost) + Send + Sync + 'static) {
    let calls = Calls::default();
    let seen = calls.clone();
    (calls, move |_: &Lost| {
        seen.lock().unwrap().push(Instant::now())
    })
}

/// Checks the loss against `cut` (the moment the holder was cut off) and the grant of a client
/// waiting in the server (`other`): lost at the lease clock's end, signalled once then, before
/// that grant.
async fn lost_before_the_other_grant(
    hold: &Hold,
    calls: &Calls,
    cut: Instant,
    other: std::thread::JoinHandle<Instant>,
) {
    let lost = lost(hold).await;
    assert_eq!(lost.reason, LostReason::LeaseRanOut);
    assert!(lost.lease_end <= cut + LEASE, "{lost:?} cut at {cut:?}");
    assert!(!hold.is_held());
    let granted = tokio::task::spawn_blocking(move || other.join().unwrap())
        .await
        .unwrap();
    assert!(lost.lease_end < granted, "{lost:?} not before {granted:?}");
    let at = calls.lock().unwrap().clone();
    assert_eq!(at.len(), 1, "{at:?}");
    assert!(at[0] >= lost.lease_end && at[0] <= lost.lease_end + SCHEDULING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_is_lost_before_another_grant() {
    let server = Server::start();
    let proxy = Proxy::to(server.port);
    let locker = Locker::open(proxy.url().as_str()).unwrap();
    let (calls, on_lost) = recorder();
    let lock = locker.lock("fa:split").ttl(LEASE).on_lost(on_lost);
    let hold = lock.acquire(SEC).await.unwrap();
    renewed(&hold).await;
    proxy.hold();
    let cut = Instant::now();
    let other = wait_in_server(server.url(), "fa:split");
    lost_before_the_other_grant(&hold, &calls, cut, other).await;
    proxy.release();
    let err = within(SEC, "release", hold.release()).await.unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert_eq!(calls.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_is_lost_at_the_lease_end_and_calls_fail_in_their_bounds() {
    let server = Server::start();
    let proxy = Proxy::to(server.port);
    let locker = Locker::open(proxy.url().as_str()).unwrap();
    let (calls, on_lost) = recorder();
    let lock = locker.lock("fa:cut").ttl(LEASE).on_lost(on_lost);
    let mut hold = lock.acquire(SEC).await.unwrap();
    renewed(&hold).await;
    proxy.refuse(true);
    let cut = Instant::now();
    proxy.cut();
    let other = wait_in_server(server.url(), "fa:cut");
    let err = within(SEC, "extend", hold.extend(10 * SEC))
        .await
        .unwrap_err();
    assert!(!matches!(err, Error::NotOwner { .. }), "{err:?}");
    let err = within(
        SEC + WAIT_GRACE,
        "acquire",
        locker.lock("fa:cut:2").acquire(SEC),
    )
    .await
    .unwrap_err();
    assert!(!matches!(err, Error::Busy { .. }), "{err:?}");
    lost_before_the_other_grant(&hold, &calls, cut, other).await;
    let err = within(SEC, "release", hold.release()).await.unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_fails_calls_in_their_bounds_and_the_hold_is_lost() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let mut hold = locker
        .lock("fa:stop")
        .ttl(LEASE)
        .acquire(SEC)
        .await
        .unwrap();
    renewed(&hold).await;
    signal(&server, libc::SIGSTOP);
    let stopped = Instant::now();
    let run = async move {
        let bound = SEC.max(hold.lease_left());
        let err = within(bound, "extend", hold.extend(10 * SEC))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        let wait = 300 * MS;
        let lock = locker.lock("fa:stop:2");
        let err = within(wait + WAIT_GRACE, "acquire", lock.acquire(wait))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        let lost = lost(&hold).await;
        assert_eq!(lost.reason, LostReason::LeaseRanOut);
        assert!(lost.lease_end <= stopped + LEASE, "{lost:?}");
        let err = within(SEC, "release", hold.release()).await.unwrap_err();
        assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    };
    let outcome = tokio::spawn(run).await;
    signal(&server, libc::SIGCONT);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_calls_at_once_and_the_hold_is_lost() {
    let mut server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let mut hold = locker
        .lock("fa:kill")
        .ttl(LEASE)
        .acquire(SEC)
        .await
        .unwrap();
    renewed(&hold).await;
    server.kill();
    let killed = Instant::now();
    let err = within(SEC, "extend", hold.extend(10 * SEC))
        .await
        .unwrap_err();
    assert!(!matches!(err, Error::NotOwner { .. }), "{err:?}");
    let lock = locker.lock("fa:kill:2");
    let err = within(SEC, "acquire", lock.acquire(10 * SEC))
        .await
        .unwrap_err();
    assert!(!matches!(err, Error::Busy { .. }), "{err:?}");
    let err = within(SEC, "try_acquire", lock.try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    let lost = lost(&hold).await;
    assert_eq!(lost.reason, LostReason::LeaseRanOut);
    assert!(lost.lease_end <= killed + LEASE, "{lost:?}");
    let err = within(SEC, "release", hold.release()).await.unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
}
