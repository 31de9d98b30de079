//! Durable grants on disk (`aof_local`, `aof_replicas`): `WAITAOF` after each grant and
//! extension, checked before the first grant; a stopped replica leaves a grant unacknowledged
//! (released, `NotReplicated`) within the timeout; a server without `WAITAOF` (Redis 7.0), or
//! `aof_local` on a master with `appendonly no`, is refused before anything is taken.

use std::time::{Duration, Instant};

use redislock_client::{aio, Error, Locker};

use crate::common::{signal, until, Server};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
const AOF: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];

/// Whether the server has `WAITAOF` (Redis 7.2+, Valkey 8+).
fn has_waitaof(server: &Server) -> bool {
    redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query::<Vec<Option<redis::Value>>>(&mut server.conn())
        .unwrap()
        .first()
        .is_some_and(Option::is_some)
}

#[track_caller]
fn unsupported(err: Error, what: &str) {
    match err {
        Error::Unsupported(m) => assert!(m.contains(what), "{m}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn grants_and_extensions_wait_for_fsyncs() {
    let master = Server::start_with(AOF);
    let locker = Locker::open(master.url().as_str()).unwrap();
    if !has_waitaof(&master) {
        // Redis 7.0: refused before anything is taken.
        for ephemeral in [false, true] {
            let lock = locker.lock("lock:aof").aof_local(true).ephemeral(ephemeral);
            unsupported(lock.acquire(SEC).unwrap_err(), "WAITAOF");
            assert_eq!(lock.info().unwrap(), None, "nothing was taken");
        }
        let lock = locker.lock("lock:aof").aof_replicas(1);
        unsupported(lock.try_acquire().unwrap_err(), "WAITAOF");
        assert_eq!(master.calls("lock.acquire"), 0, "nothing was asked for");
        return;
    }
    let replica = Server::replica_of_with(&master, AOF);
    for ephemeral in [false, true] {
        let lock = locker
            .lock("lock:aof")
            .aof_local(true)
            .aof_replicas(1)
            .replicas(1, 3 * SEC)
            .ephemeral(ephemeral);
        let (waits, aofs) = (master.calls("wait"), master.calls("waitaof"));
        let mut hold = lock.acquire(SEC).unwrap();
        // The check (once per lock), then WAIT and WAITAOF after the grant.
        assert_eq!(master.calls("wait"), waits + 1, "one WAIT after the grant");
        assert_eq!(
            master.calls("waitaof"),
            aofs + 2,
            "the check and one WAITAOF"
        );
        hold.extend(10 * SEC).unwrap();
        assert_eq!(
            master.calls("waitaof"),
            aofs + 3,
            "one WAITAOF after the extension"
        );
        let again = lock.clone();
        hold.release().unwrap();
        again.acquire(SEC).unwrap().release().unwrap();
        assert_eq!(master.calls("waitaof"), aofs + 4, "checked once per lock");
    }

    // The replica stops: its fsync never comes.
    signal(&replica, libc::SIGSTOP);
    for ephemeral in [false, true] {
        let lock = locker
            .lock("lock:aof")
            .aof_replicas(1)
            .replicas(0, 300 * MS)
            .ephemeral(ephemeral);
        let t = Instant::now();
        match lock.acquire(SEC).unwrap_err() {
            Error::NotReplicated {
                replicas, needed, ..
            } => assert_eq!((replicas, needed), (Some(0), 1)),
            other => panic!("expected NotReplicated, got {other:?}"),
        }
        let took = t.elapsed();
        assert!(took >= 300 * MS, "WAITAOF waited: {took:?}");
        assert!(took < 300 * MS + 2 * SEC, "within the timeout: {took:?}");
        assert_eq!(lock.info().unwrap(), None, "the grant was released");
        // The master's own fsync alone is still acknowledged.
        let local = locker.lock("lock:aof").aof_local(true).ephemeral(ephemeral);
        local.acquire(SEC).unwrap().release().unwrap();
    }
    signal(&replica, libc::SIGCONT);
}

#[test]
fn aof_local_needs_appendonly() {
    let master = Server::start();
    let locker = Locker::open(master.url().as_str()).unwrap();
    let lock = locker.lock("lock:aof").aof_local(true);
    let what = if has_waitaof(&master) {
        "appendonly"
    } else {
        "WAITAOF"
    };
    unsupported(lock.acquire(SEC).unwrap_err(), what);
    assert_eq!(lock.info().unwrap(), None, "nothing was taken");
    assert_eq!(master.calls("lock.acquire"), 0, "nothing was asked for");
}

#[tokio::test]
async fn grants_wait_for_fsyncs_async() {
    let master = Server::start_with(AOF);
    let locker = aio::Locker::open(master.url().as_str()).unwrap();
    if !has_waitaof(&master) {
        for ephemeral in [false, true] {
            let lock = locker.lock("lock:aof").aof_local(true).ephemeral(ephemeral);
            unsupported(lock.acquire(SEC).await.unwrap_err(), "WAITAOF");
            assert_eq!(lock.info().await.unwrap(), None, "nothing was taken");
        }
        return;
    }
    let replica = Server::replica_of_with(&master, AOF);
    for ephemeral in [false, true] {
        let lock = locker
            .lock("lock:aof")
            .aof_local(true)
            .aof_replicas(1)
            .replicas(0, 3 * SEC)
            .ephemeral(ephemeral);
        let aofs = master.calls("waitaof");
        let mut hold = lock.acquire(SEC).await.unwrap();
        assert_eq!(
            master.calls("waitaof"),
            aofs + 2,
            "the check and one WAITAOF"
        );
        hold.extend(10 * SEC).await.unwrap();
        assert_eq!(master.calls("waitaof"), aofs + 3);
        hold.release().await.unwrap();
    }
    signal(&replica, libc::SIGSTOP);
    for ephemeral in [false, true] {
        let lock = locker
            .lock("lock:aof")
            .aof_replicas(1)
            .replicas(0, 300 * MS)
            .ephemeral(ephemeral);
        let t = Instant::now();
        assert!(matches!(
            lock.acquire(SEC).await.unwrap_err(),
            Error::NotReplicated { needed: 1, .. }
        ));
        assert!(t.elapsed() >= 300 * MS, "WAITAOF waited: {:?}", t.elapsed());
        assert_eq!(lock.info().await.unwrap(), None, "the grant was released");
    }
    signal(&replica, libc::SIGCONT);
}

/// Renewals are followed by WAITAOF too: with the replica stopped, none counts, and the hold
/// is lost when its lease clock runs out (the server still has it, renewed).
#[test]
fn renewals_not_fsynced_do_not_count() {
    let master = Server::start_with(AOF);
    if !has_waitaof(&master) {
        return; // refused before any grant (above)
    }
    let replica = Server::replica_of_with(&master, AOF);
    let locker = Locker::open(master.url().as_str()).unwrap();
    let lock = locker
        .lock("lock:renewed")
        .ttl(900 * MS)
        .aof_replicas(1)
        .replicas(0, 100 * MS);
    // A replica's fsync is now and then acknowledged only at its once-a-second report, past
    // this lock's 100 ms: such a grant is given back, and taken again; such a renewal does not
    // count (the hold may even be lost before the replica stops: the checks below hold then
    // too).
    let (extends, aofs) = (master.calls("lock.extend"), master.calls("waitaof"));
    let deadline = Instant::now() + 20 * SEC;
    let hold = loop {
        match lock.try_acquire() {
            Ok(Some(hold)) => break hold,
            Err(Error::NotReplicated { .. }) if Instant::now() < deadline => continue,
            other => panic!("expected a grant, got {other:?}"),
        }
    };
    signal(&replica, libc::SIGSTOP);
    let lost = hold.lost().wait_timeout(10 * SEC).expect("lost");
    assert_eq!(lost.reason, redislock_client::LostReason::LeaseRanOut);
    let renewals = master.calls("lock.extend") - extends;
    assert!(renewals > 0, "renewals were sent");
    // Each grant and renewal followed by a WAITAOF, counted once it answered (at its timeout).
    until(10 * SEC, "the renewals' WAITAOF", || {
        master.calls("waitaof") - aofs > renewals
    });
    signal(&replica, libc::SIGCONT);
}
