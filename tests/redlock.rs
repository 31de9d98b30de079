//! The Redlock reference implementation on the Rust client (`clients/rust/examples/redlock.rs`,
//! compiled here as a module) over five independent servers: majority with instances down, clean
//! failure without one, a safe retry after a lost reply, fencing of a superseded holder, and
//! mutual exclusion under contention.

#[path = "../clients/rust/examples/redlock.rs"]
#[allow(dead_code)]
mod algorithm;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use algorithm::{FenceRecord, Options, Redlock, RedlockError};

fn five() -> Vec<Server> {
    (0..5).map(|_| Server::start()).collect()
}

fn addrs(servers: &[Server]) -> Vec<String> {
    servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect()
}

fn quick() -> Options {
    Options {
        retry_count: 2,
        retry_delay_max: Duration::from_millis(20),
        ..Options::default()
    }
}

#[test]
fn acquires_extends_and_releases_with_two_of_five_down() {
    let mut servers = five();
    let addrs = addrs(&servers);
    for i in [1, 3] {
        servers[i].stop(Stop::Kill);
    }
    let live = [0, 2, 4];
    let ttl = Duration::from_millis(5_000);
    let mut rl = Redlock::with_options(&addrs, quick());
    assert_eq!(rl.quorum(), 3);
    let t = Instant::now();
    let mut lock = rl.lock("res", ttl).expect("a majority is up");
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(lock.token.len(), 32);
    assert!(lock.token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(lock.granted(), 3);
    assert!(lock.validity < ttl && lock.validity > ttl - Duration::from_millis(500));
    for (i, server) in servers.iter().enumerate() {
        if live.contains(&i) {
            let f = lock.fences[i].expect("live instance granted");
            let info = info_some(&mut server.conn(), "res");
            assert_eq!((lossy(&info.token), info.fence), (lock.token.clone(), f));
            assert_ttl_close(info.ttl, 5_000, 1_000, "TTL on a live instance");
        } else {
            assert_eq!(lock.fences[i], None, "instance {i} is down");
        }
    }

    // A second client cannot take it, and leaves nothing behind.
    let mut other = Redlock::with_options(&addrs, quick());
    match other.lock("res", ttl) {
        Err(RedlockError::NoQuorum {
            granted, quorum, ..
        }) => assert_eq!((granted, quorum), (0, 3)),
        r => panic!("second client: {r:?}"),
    }
    for &i in &live {
        assert_eq!(
            lossy(&info_some(&mut servers[i].conn(), "res").token),
            lock.token
        );
    }

    // Repeating the acquisition with the same token re-grants with the same fences.
    let again = rl
        .lock_with_token("res", &lock.token, ttl)
        .expect("re-grant");
    assert_eq!(again.fences, lock.fences);

    // Extension on the majority.
    let fences = lock.fences.clone();
    rl.extend(&mut lock, Duration::from_millis(20_000))
        .expect("extended");
    assert!(lock.remaining() > Duration::from_millis(19_000));
    assert_eq!(lock.fences, fences);
    for &i in &live {
        assert_ttl_close(
            pttl(&mut servers[i].conn(), "res"),
            20_000,
            1_000,
            "TTL after extend",
        );
    }

    // Release everywhere.
    assert_eq!(rl.unlock(lock), 3);
    for &i in &live {
        assert_eq!(info(&mut servers[i].conn(), "res"), None);
    }
    // Now the other client gets it, with larger fences on every instance.
    let next = other.lock("res", ttl).expect("free again");
    for &i in &live {
        assert!(next.fences[i].unwrap() > fences[i].unwrap());
    }
    assert_eq!(other.unlock(next), 3);
}

#[test]
fn fails_cleanly_with_three_of_five_down() {
    let mut servers = five();
    let addrs = addrs(&servers);
    for i in [0, 2, 3] {
        servers[i].stop(Stop::Kill);
    }
    let mut rl = Redlock::with_options(&addrs, quick());
    let t = Instant::now();
    match rl.lock("res", Duration::from_millis(5_000)) {
        Err(RedlockError::NoQuorum {
            granted,
            quorum,
            attempts,
        }) => assert_eq!((granted, quorum, attempts), (2, 3, 2)),
        r => panic!("no majority is up, yet: {r:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    for i in [1, 4] {
        let mut con = servers[i].conn();
        assert_eq!(info(&mut con, "res"), None, "no lock left on instance {i}");
        assert_eq!(dbsize(&mut con), 0);
    }
    // A TTL that cannot cover the drift allowance is refused before any command.
    assert!(matches!(
        rl.lock("res", Duration::from_millis(2)),
        Err(RedlockError::Invalid(_))
    ));
}

#[test]
fn a_lost_reply_is_retried_safely_and_keeps_the_instance() {
    // Instance 0 is stalled (CLIENT PAUSE) past the client's read timeout: the first
    // LOCK.ACQUIRE runs once the server wakes up, but its reply is lost; the client's resend
    // on a fresh connection re-grants with the same fence instead of failing.
    let servers = five();
    let addrs = addrs(&servers);
    let mut rl = Redlock::with_options(
        &addrs,
        Options {
            io_timeout: Duration::from_millis(300),
            ..quick()
        },
    );
    // Connect first (a connection attempt during the stall would time out instead).
    let warmup = rl.lock("warmup", Duration::from_millis(10_000)).unwrap();
    assert_eq!(rl.unlock(warmup), 5);
    let (grants0, regrants0) = (stat(&servers[0], "grants"), stat(&servers[0], "regrants"));
    // Instance 0 stalls in DEBUG SLEEP (which, unlike CLIENT PAUSE, runs the commands that
    // arrived meanwhile once it wakes, even from connections closed since). The stall has begun
    // once a PING goes unanswered for a while.
    let mut c0 = servers[0].conn();
    let mut sleeper = RawConn::connect(&servers[0]);
    sleeper.send(&["DEBUG", "SLEEP", "0.6"]);
    loop {
        let mut probe = RawConn::connect(&servers[0]);
        probe
            .stream()
            .set_read_timeout(Some(Duration::from_millis(80)))
            .unwrap();
        if probe.call_or_timeout(&["PING"]).is_none() {
            break;
        }
    }
    let t = Instant::now();
    let lock = rl
        .lock("res", Duration::from_millis(10_000))
        .expect("acquired");
    let took = t.elapsed();
    assert_eq!(sleeper.read(), Ok(Resp::Simple(b"OK".to_vec())));
    assert_eq!(lock.granted(), 5, "instance 0 counted after the resend");
    assert!(
        took > Duration::from_millis(300),
        "the first reply must have been lost (took {took:?})"
    );
    let info = info_some(&mut c0, "res");
    assert_eq!(
        (lossy(&info.token), Some(info.fence)),
        (lock.token.clone(), lock.fences[0])
    );
    assert_eq!(
        (
            stat(&servers[0], "grants") - grants0,
            stat(&servers[0], "regrants") - regrants0
        ),
        (1, 1),
        "one grant (whose reply was lost) and one idempotent re-grant on instance 0"
    );
    assert_eq!(rl.unlock(lock), 5);
}

#[test]
fn fences_reject_a_holder_whose_lock_was_superseded() {
    let servers = five();
    let addrs = addrs(&servers);
    let mut a = Redlock::with_options(&addrs, quick());
    let mut b = Redlock::with_options(&addrs, quick());
    let mut resource = FenceRecord::new();

    let mut la = a.lock("res", Duration::from_millis(300)).expect("A");
    assert!(
        resource.accept(&la.fences),
        "A writes while it holds the lock"
    );
    // A pauses past its validity; B takes over.
    thread::sleep(Duration::from_millis(400) * time_scale());
    let lb = b.lock("res", Duration::from_millis(10_000)).expect("B");
    assert!(resource.accept(&lb.fences), "B writes");
    // A wakes up: its writes are rejected, and its lock is lost.
    assert!(
        !resource.accept(&la.fences),
        "A's late write must be rejected"
    );
    assert!(matches!(
        a.extend(&mut la, Duration::from_millis(10_000)),
        Err(RedlockError::Lost { .. })
    ));
    assert_eq!(a.unlock(la), 0, "A's release does not touch B's lock");
    assert!(resource.accept(&lb.fences), "B goes on writing");
    // B holds a majority: every instance, unless one answered too late on a loaded machine.
    let held = lb.fences.iter().flatten().count();
    assert!(held >= 3, "B holds {held} instances");
    assert!(b.unlock(lb) >= 3, "B releases its majority");
}

#[test]
fn contention_never_lets_two_clients_hold_the_lock() {
    let servers = five();
    let addrs = Arc::new(addrs(&servers));
    let holding = Arc::new(AtomicBool::new(false));
    let acquired = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let resource = Arc::new(Mutex::new(FenceRecord::new()));
    let target = 50;
    let start = Instant::now();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (addrs, holding, acquired, failed, resource) = (
                addrs.clone(),
                holding.clone(),
                acquired.clone(),
                failed.clone(),
                resource.clone(),
            );
            thread::spawn(move || {
                let mut rl = Redlock::with_options(
                    &addrs,
                    Options {
                        retry_count: 3,
                        retry_delay_max: Duration::from_millis(10),
                        ..Options::default()
                    },
                );
                while acquired.load(Ordering::SeqCst) < target {
                    assert!(start.elapsed() < Duration::from_secs(120), "too slow");
                    // A lease far longer than a loaded machine keeps a thread off its core: a
                    // holder whose lease ran out while it was descheduled holds nothing, and the
                    // next grant would be right, not a second holder.
                    match rl.lock("contended", Duration::from_millis(30_000)) {
                        Ok(lock) => {
                            assert!(
                                !holding.swap(true, Ordering::SeqCst),
                                "two clients hold the Redlock at once"
                            );
                            assert!(
                                resource.lock().unwrap().accept(&lock.fences),
                                "a current holder's fences were rejected: {:?}",
                                lock.fences
                            );
                            thread::sleep(Duration::from_millis(2));
                            assert!(!lock.remaining().is_zero());
                            holding.store(false, Ordering::SeqCst);
                            acquired.fetch_add(1, Ordering::SeqCst);
                            // Released wherever it was granted (a majority, not
                            // always all five: contenders hold the others briefly).
                            let granted = lock.granted();
                            assert!(rl.unlock(lock) >= granted);
                        }
                        Err(RedlockError::NoQuorum { .. }) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let n = acquired.load(Ordering::SeqCst);
    eprintln!(
        "{n} acquisitions, {} failed lock() calls, in {:?}",
        failed.load(Ordering::SeqCst),
        start.elapsed()
    );
    assert!(n >= target);
    for s in &servers {
        assert_eq!(
            info(&mut s.conn(), "contended"),
            None,
            "released everywhere"
        );
    }
}
