//! The blocking front end where the network or the server fails: a connection cut under a
//! renewed hold, a stopped and a killed server. What must hold: the hold is signalled lost at its
//! lease clock's end, which comes before any other client is granted the lock (compared on the
//! recorded clocks, not on when a thread woke), and every call returns an error within its
//! bound; nothing hangs. (A partition: `lease::a_partitioned_holder_is_lost_before_anyone_else_is_granted`.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redislock_client::{Error, Hold, Locker, LostReason, WAIT_GRACE};

use crate::common::proxy::Proxy;
use crate::common::{signal, until, wait_in_server, Server};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
const LEASE: Duration = Duration::from_millis(1200);
/// How late a thread may wake on a loaded machine: the bounds on elapsed times allow this much.
pub const SCHEDULING: Duration = Duration::from_millis(800);

/// Waits until a renewal of `hold` was answered (its lease clock moved on).
fn renewed(hold: &Hold) {
    let end = Instant::now() + hold.lease_left();
    until(10 * SEC, "a renewal answered", || {
        Instant::now() + hold.lease_left() > end + 100 * MS
    });
}

/// Runs `f`, asserting it took no longer than `bound` (and the scheduling margin).
pub fn within<T>(bound: Duration, what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    assert!(took <= bound + SCHEDULING, "{what} took {took:?}");
    out
}

/// A hold whose locker's connections are cut, and new ones refused: its renewals fail, and it is
/// lost when its lease clock ends (no later than a lease after the cut), before the server
/// grants the lock to a client waiting there; its calls fail in their bounds meanwhile.
#[test]
fn a_cut_connection_is_lost_at_the_lease_end_before_another_grant() {
    let server = Server::start();
    let proxy = Proxy::to(server.port);
    let locker = Locker::open(proxy.url().as_str()).unwrap();
    let signalled = Arc::new(Mutex::new(Vec::new()));
    let seen = signalled.clone();
    let lock = locker.lock("f:cut").ttl(LEASE).on_lost(move |_| {
        seen.lock().unwrap().push(Instant::now());
    });
    let mut hold = lock.acquire(SEC).unwrap();
    renewed(&hold);
    proxy.refuse(true);
    let cut = Instant::now();
    proxy.cut();
    let other = wait_in_server(server.url(), "f:cut");

    let err = within(SEC, "extend", || hold.extend(10 * SEC)).unwrap_err();
    assert!(!matches!(err, Error::NotOwner { .. }), "{err:?}");
    let err = within(SEC + WAIT_GRACE, "acquire", || {
        locker.lock("f:cut:2").acquire(SEC)
    })
    .unwrap_err();
    assert!(!matches!(err, Error::Busy { .. }), "{err:?}");
    within(redislock_client::COMMAND_TIMEOUT, "info", || {
        locker.info("f:cut")
    })
    .unwrap_err();

    let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert_eq!(lost.reason, LostReason::LeaseRanOut);
    assert!(lost.lease_end <= cut + LEASE, "{lost:?} cut at {cut:?}");
    assert!(!hold.is_held());
    until(10 * SEC, "on_lost", || {
        !signalled.lock().unwrap().is_empty()
    });
    let at = signalled.lock().unwrap()[0];
    assert!(at >= lost.lease_end, "signalled at {at:?}, before {lost:?}");
    assert!(
        at <= lost.lease_end + SCHEDULING,
        "signalled at {at:?}, {lost:?}"
    );

    let granted = other.join().unwrap();
    assert!(lost.lease_end < granted, "{lost:?} not before {granted:?}");
    let err = within(SEC, "release", || hold.release()).unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert_eq!(signalled.lock().unwrap().len(), 1);
}

/// A stopped server (SIGSTOP): each call fails with `Error::Timeout` within its bound, and the
/// hold is lost at its lease clock's end, no later than a lease after the stop.
#[test]
fn a_stopped_server_fails_calls_in_their_bounds_and_the_hold_is_lost() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let mut hold = locker.lock("f:stop").ttl(LEASE).acquire(SEC).unwrap();
    renewed(&hold);
    signal(&server, libc::SIGSTOP);
    let stopped = Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // The bound of an extension: the lease left, at least 1 s.
        let err = within(SEC.max(hold.lease_left()), "extend", || {
            hold.extend(10 * SEC)
        })
        .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        let wait = 300 * MS;
        let err = within(wait + WAIT_GRACE, "acquire", || {
            locker.lock("f:stop:2").acquire(wait)
        })
        .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
        assert_eq!(lost.reason, LostReason::LeaseRanOut);
        assert!(lost.lease_end <= stopped + LEASE, "{lost:?}");
        // A lost hold is still released in the server (the release times out here).
        let err = within(SEC, "release", || hold.release()).unwrap_err();
        assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    }));
    signal(&server, libc::SIGCONT);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

/// A killed server: the hold is lost at its lease clock's end, and each call fails at once.
#[test]
fn a_killed_server_fails_calls_at_once_and_the_hold_is_lost() {
    let mut server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let mut hold = locker.lock("f:kill").ttl(LEASE).acquire(SEC).unwrap();
    renewed(&hold);
    server.kill();
    let killed = Instant::now();
    let err = within(SEC, "extend", || hold.extend(10 * SEC)).unwrap_err();
    assert!(!matches!(err, Error::NotOwner { .. }), "{err:?}");
    let err = within(SEC, "acquire", || locker.lock("f:kill:2").acquire(10 * SEC)).unwrap_err();
    assert!(!matches!(err, Error::Busy { .. }), "{err:?}");
    let err = within(SEC, "try_acquire", || locker.lock("f:kill:3").try_acquire()).unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    let lost = hold.lost().wait_timeout(10 * SEC).expect("signalled lost");
    assert_eq!(lost.reason, LostReason::LeaseRanOut);
    assert!(lost.lease_end <= killed + LEASE, "{lost:?}");
    let err = within(SEC, "release", || hold.release()).unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
}
