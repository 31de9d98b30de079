//! Numeric extremes (SPEC "Server safety", "Errors"): every number a client can give a lock —
//! `EX`, `PX`, `BLOCK`, and the expiry Redis's own `PEXPIRE`/`PEXPIREAT` put on a lock key — at
//! 0, 1, 2^31, 2^40, 2^53, 2^63-1, 2^64-1, `i64::MAX - now`, 10^12 and 10^12+1 (and, for
//! expiries, 2^64/1000, which wraps a microsecond clock), with waiters
//! queued, `LOCK.EXTEND` and re-grants. After each case the server answers `PING` within a
//! second, the reply is exactly the documented one, every waiter ends with the right answer at
//! the right time, and the scheduler is left with nothing once nobody waits.

use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use redis::Connection;

const TTL_ERR: &str =
    "ERR invalid expire time: must be a positive integer of at most 1000000000000 milliseconds";
/// The same bound for `EX`, named in the unit given.
const TTL_ERR_SECONDS: &str =
    "ERR invalid expire time: must be a positive integer of at most 1000000000 seconds";
const BLOCK_ERR: &str = "ERR invalid BLOCK timeout: must be 0 (no limit) or a positive integer \
                         of at most 1000000000000 milliseconds";
const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
const MAX_MS: i128 = 1_000_000_000_000;
/// Timeouts count whole milliseconds on the server's clock, and our clock starts after the
/// request is sent: an answer may come this much before the timeout measured here.
const EARLY: Duration = Duration::from_millis(3);
/// How far below `want` a TTL read back may be (the time between setting and reading it).
const TTL_SLACK: i64 = 2_000;

/// The extremes every numeric argument is tried with, as the client sends them.
fn extremes() -> Vec<String> {
    let now = now_ms();
    [
        "0".to_string(),
        "1".to_string(),
        (1u64 << 31).to_string(),
        (1u64 << 40).to_string(),
        (1u64 << 53).to_string(),
        i64::MAX.to_string(),
        u64::MAX.to_string(),
        (i64::MAX - now).to_string(),
        "1000000000".to_string(),
        "1000000001".to_string(),
        "1000000000000".to_string(),
        "1000000000001".to_string(),
    ]
    .into()
}

/// Numbers in forms Redis's integer parser refuses, and out-of-range negatives.
fn malformed() -> Vec<String> {
    [
        "-1",
        "-9223372036854775808",
        "1.5",
        "1e3",
        "+5",
        "007",
        " 5",
        "5 ",
        "",
        "0x10",
        "18446744073709551616",
        "99999999999999999999999999",
    ]
    .map(str::to_string)
    .into()
}

/// The value of a strictly written decimal integer (no sign, no leading zero), or `None`.
fn strict_decimal(v: &str) -> Option<i128> {
    let canonical =
        !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && (v == "0" || !v.starts_with('0'));
    if canonical && v.len() <= 30 {
        v.parse().ok()
    } else {
        None
    }
}

/// The TTL in milliseconds that `EX v` / `PX v` asks for, if the module must accept it.
fn ttl_ms(unit: &str, v: &str) -> Option<i64> {
    let n = strict_decimal(v)?;
    let ms = if unit == "EX" { n * 1000 } else { n };
    (1..=MAX_MS).contains(&ms).then_some(ms as i64)
}

/// The `BLOCK` timeout the module must accept for `v`.
fn block_ms(v: &str) -> Option<i64> {
    let n = strict_decimal(v)?;
    (0..=MAX_MS).contains(&n).then_some(n as i64)
}

/// A connection that gives up on a reply after one second.
fn pinger(s: &Server) -> Connection {
    let mut p = s.conn();
    p.set_read_timeout(Some(Duration::from_secs(1) * time_scale()))
        .unwrap();
    ping(&mut p);
    p
}

/// The test's own connection: its replies are due at once, so a hung server fails the test
/// within seconds rather than at the harness's longer timeout.
fn admin(s: &Server) -> Connection {
    let c = s.conn();
    c.set_read_timeout(Some(Duration::from_secs(2) * time_scale()))
        .unwrap();
    c
}

/// `PING` must answer `PONG` within a second.
#[track_caller]
fn assert_responsive(p: &mut Connection, s: &Server, after: &str) {
    let start = Instant::now();
    let r = run(p, &rcmd!("PING"));
    let took = start.elapsed();
    match r {
        Ok(v) if as_bytes(&v) == b"PONG" => {}
        other => panic!(
            "after {after}: PING answered {other:?} after {took:?}\n{}",
            s.log_tail(20)
        ),
    }
    assert!(
        took < Duration::from_secs(1) * time_scale(),
        "after {after}: PING took {took:?}"
    );
    let crashes = s.crash_lines();
    assert!(crashes.is_empty(), "after {after}: {}", crashes.join("\n"));
}

fn redislock_info(s: &Server, name: &str) -> i64 {
    s.info_field("redislock", &format!("redislock_{name}"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO redislock lacks redislock_{name}"))
}

/// Waits until nothing waits and the scheduler holds no job; at most one module timer remains
/// (it may still be armed for a job that was cancelled).
#[track_caller]
fn assert_scheduler_drains(s: &Server) {
    let deadline = Instant::now() + Duration::from_secs(5) * time_scale();
    loop {
        let (waiters, jobs) = (
            redislock_info(s, "waiters"),
            redislock_info(s, "scheduled_jobs"),
        );
        if waiters == 0 && jobs == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{waiters} waiters, {jobs} scheduled jobs left with nobody waiting"
        );
        thread::sleep(Duration::from_millis(5));
    }
    let timers = redislock_info(s, "timers");
    assert!((0..=1).contains(&timers), "{timers} module timers");
}

/// A `LOCK.ACQUIRE` reply read from a raw connection: `Some((token, fence))` or `None` for nil.
#[track_caller]
fn raw_grant(reply: &Resp) -> Option<(Vec<u8>, i64)> {
    match reply {
        Resp::Nil => None,
        Resp::Array(items) => match items.as_slice() {
            [Resp::Bulk(t), Resp::Int(f)] if *f > 0 => Some((t.clone(), *f)),
            _ => panic!("malformed grant {reply:?}"),
        },
        other => panic!("unexpected LOCK.ACQUIRE reply {other:?}"),
    }
}

/// A raw client blocked in `LOCK.ACQUIRE key token PX px BLOCK block` (queued once this returns).
struct Waiter {
    con: RawConn,
    sent: Instant,
    what: String,
}

fn queue_waiter(
    s: &Server,
    c: &mut Connection,
    key: &str,
    token: &str,
    px: &str,
    block: &str,
) -> Waiter {
    let before = info_some(c, key).waiters;
    let mut con = RawConn::connect(s);
    // Every answer here is due within seconds: a hung server fails the test quickly.
    con.stream()
        .set_read_timeout(Some(Duration::from_secs(8) * time_scale()))
        .unwrap();
    // Timed from before the send: a test thread descheduled after it would see the wait short.
    let sent = Instant::now();
    con.send(&["LOCK.ACQUIRE", key, token, "PX", px, "BLOCK", block]);
    wait_waiters(c, key, before + 1);
    Waiter {
        con,
        sent,
        what: format!("{key}: waiter {token} (PX {px} BLOCK {block})"),
    }
}

impl Waiter {
    /// The waiter's answer, and how long after it was sent it came.
    fn answer(&mut self, s: &Server) -> (Resp, Duration) {
        let r = self
            .con
            .read()
            .unwrap_or_else(|e| panic!("{}: no answer ({e})\n{}", self.what, s.log_tail(20)));
        (r, self.sent.elapsed())
    }
}

#[test]
fn ttl_extremes_on_acquire_regrant_and_extend() {
    let s = Server::start();
    let mut c = admin(&s);
    let mut p = pinger(&s);
    let values: Vec<String> = extremes().into_iter().chain(malformed()).collect();
    for unit in ["EX", "PX"] {
        for (i, v) in values.iter().enumerate() {
            let case = format!("{unit} {v:?}");
            let key = format!("ttl:{unit}:{i}");
            let acquire = rcmd!("LOCK.ACQUIRE", &key, "tok", unit, v);
            match ttl_ms(unit, v) {
                Some(ms) => {
                    // A new grant sets the expiry. A lease of a few ms can end between any two
                    // commands, so every step that needs the hold alive starts from a 5 s lease
                    // and sets the extreme in one command: a re-grant by the same token keeps
                    // the fence and resets the expiry, an extend sets it.
                    let (token, _) = parse_grant(&ok(&mut c, &acquire)).expect("free key: grant");
                    assert_eq!(token, b"tok", "{case}");
                    assert_ttl_close(pttl(&mut c, &key), ms, TTL_SLACK, &case);
                    if let Some(held) = info(&mut c, &key) {
                        assert_ttl_close(held.ttl, ms, TTL_SLACK, &case);
                    }
                    let fence = grant(&mut c, &key, b"tok", 5_000).1;
                    assert_ttl_close(pttl(&mut c, &key), 5_000, TTL_SLACK, &case);
                    let again = parse_grant(&ok(&mut c, &acquire)).expect("re-grant");
                    assert_eq!(again, (b"tok".to_vec(), fence), "{case}: re-grant");
                    assert_ttl_close(pttl(&mut c, &key), ms, TTL_SLACK, &case);
                    // Extend from 5 s to the extreme; another token changes nothing.
                    let fence = grant(&mut c, &key, b"tok", 5_000).1;
                    let extend = rcmd!("LOCK.EXTEND", &key, "tok", unit, v);
                    assert_eq!(as_int(&ok(&mut c, &extend)), 1, "{case}: extend");
                    assert_ttl_close(pttl(&mut c, &key), ms, TTL_SLACK, &case);
                    let other = rcmd!("LOCK.EXTEND", &key, "other", unit, v);
                    assert_eq!(as_int(&ok(&mut c, &other)), 0, "{case}: extend by another");
                    // Gone only if the extreme is a lease of a few ms that ended meanwhile.
                    match info(&mut c, &key) {
                        Some(held) => {
                            assert_eq!((held.token, held.fence), (b"tok".to_vec(), fence));
                            assert_ttl_close(held.ttl, ms, TTL_SLACK, &case);
                            assert_eq!(release(&mut c, &key, b"tok"), 1, "{case}");
                        }
                        None => assert!(ms < TTL_SLACK, "{case}: a long hold is gone"),
                    }
                }
                None => {
                    let ttl_err = if unit == "EX" {
                        TTL_ERR_SECONDS
                    } else {
                        TTL_ERR
                    };
                    assert_eq!(err(&mut c, &acquire), ttl_err, "{case}: acquire");
                    assert!(
                        !exists(&mut c, &key),
                        "{case}: a refused acquire made a key"
                    );
                    // Refused on a held lock too, by the holder (re-grant, extend) or anyone.
                    let (_, fence) = grant(&mut c, &key, b"tok", 60_000);
                    assert_eq!(err(&mut c, &acquire), ttl_err, "{case}: re-grant");
                    let busy = rcmd!("LOCK.ACQUIRE", &key, "other", unit, v);
                    assert_eq!(err(&mut c, &busy), ttl_err, "{case}: busy acquire");
                    let extend = rcmd!("LOCK.EXTEND", &key, "tok", unit, v);
                    assert_eq!(err(&mut c, &extend), ttl_err, "{case}: extend");
                    let held = info_some(&mut c, &key);
                    assert_eq!((held.token, held.fence), (b"tok".to_vec(), fence));
                    assert_ttl_close(held.ttl, 60_000, TTL_SLACK, &case);
                    assert_eq!(release(&mut c, &key, b"tok"), 1, "{case}");
                }
            }
            assert_responsive(&mut p, &s, &case);
        }
    }
    assert_scheduler_drains(&s);
}

#[test]
fn waiters_asking_for_extreme_ttls() {
    // The waiter's own TTL is checked when it asks, not when it is served.
    let s = Server::start();
    let mut c = admin(&s);
    let mut p = pinger(&s);
    let values: Vec<String> = extremes().into_iter().chain(malformed()).collect();
    for (i, v) in values.iter().enumerate() {
        let key = format!("wttl:{i}");
        let case = format!("waiter with PX {v:?}");
        let (_, held_fence) = grant(&mut c, &key, b"holder", 60_000);
        let mut w = RawConn::connect(&s);
        w.send(&["LOCK.ACQUIRE", &key, "waiter", "PX", v, "BLOCK", "5000"]);
        match ttl_ms("PX", v) {
            Some(ms) => {
                wait_waiters(&mut c, &key, 1);
                assert_responsive(&mut p, &s, &case);
                assert_eq!(release(&mut c, &key, b"holder"), 1);
                let (token, fence) = raw_grant(&w.read().unwrap()).expect("handoff");
                assert_eq!(token, b"waiter", "{case}");
                assert!(
                    fence > held_fence,
                    "{case}: fence {fence} after {held_fence}"
                );
                assert_ttl_close(pttl(&mut c, &key), ms, TTL_SLACK, &case);
                // A lease of a few ms may have ended already.
                let released = release(&mut c, &key, b"waiter");
                assert!(
                    released == 1 || ms < TTL_SLACK,
                    "{case}: release {released}"
                );
            }
            None => {
                assert_eq!(w.read().unwrap(), Resp::Error(TTL_ERR.into()), "{case}");
                assert_eq!(info_some(&mut c, &key).waiters, 0, "{case}: queued");
                assert_eq!(release(&mut c, &key, b"holder"), 1);
            }
        }
        assert_responsive(&mut p, &s, &case);
    }
    assert_scheduler_drains(&s);
}

#[test]
fn block_extremes_behind_a_held_lock() {
    let s = Server::start();
    let mut c = admin(&s);
    let mut p = pinger(&s);
    let values: Vec<String> = extremes().into_iter().chain(malformed()).collect();
    for (i, v) in values.iter().enumerate() {
        let key = format!("block:{i}");
        let case = format!("BLOCK {v:?}");
        let (_, held_fence) = grant(&mut c, &key, b"holder", 60_000);
        let mut w = RawConn::connect(&s);
        let sent = Instant::now(); // before the send, as in queue_waiter
        w.send(&[
            "LOCK.ACQUIRE",
            &key,
            "waiter",
            "PX",
            "1000000000000",
            "BLOCK",
            v,
        ]);
        match block_ms(v) {
            None => {
                assert_eq!(w.read().unwrap(), Resp::Error(BLOCK_ERR.into()), "{case}");
                assert_eq!(info_some(&mut c, &key).waiters, 0, "{case}: queued");
            }
            Some(ms) if ms > 0 && ms < 1000 => {
                assert_eq!(w.read().unwrap(), Resp::Nil, "{case}: timed out");
                let took = sent.elapsed();
                assert!(
                    took + EARLY >= Duration::from_millis(ms as u64)
                        && took < Duration::from_secs(1),
                    "{case}: answered after {took:?}"
                );
            }
            Some(_) => {
                wait_waiters(&mut c, &key, 1);
                assert_responsive(&mut p, &s, &case);
                // One job for the lock (its holder's expiry) and one for the deadline.
                let jobs = redislock_info(&s, "scheduled_jobs");
                assert!((1..=2).contains(&jobs), "{case}: {jobs} scheduled jobs");
                let released = Instant::now();
                assert_eq!(release(&mut c, &key, b"holder"), 1);
                let (token, fence) = raw_grant(&w.read().unwrap()).expect("handoff");
                assert!(
                    released.elapsed() < Duration::from_secs(1),
                    "{case}: slow handoff"
                );
                assert_eq!(token, b"waiter", "{case}");
                assert!(fence > held_fence, "{case}");
                assert_ttl_close(pttl(&mut c, &key), MAX_MS as i64, TTL_SLACK, &case);
                assert_eq!(release(&mut c, &key, b"waiter"), 1);
            }
        }
        assert_eq!(info(&mut c, &key).map(|i| i.waiters).unwrap_or(0), 0);
        let _ = release(&mut c, &key, b"holder");
        assert_responsive(&mut p, &s, &case);
    }
    assert_scheduler_drains(&s);

    // The longest waits, behind a holder that expires with no client touching the key.
    for v in ["0", "2147483648", "1000000000000"] {
        let key = format!("block:expiring:{v}");
        let (_, held_fence) = grant(&mut c, &key, b"holder", 150);
        let mut w = queue_waiter(&s, &mut c, &key, "waiter", "1000", v);
        assert_responsive(&mut p, &s, &w.what.clone());
        let (reply, took) = w.answer(&s);
        let (token, fence) = raw_grant(&reply).expect("handoff on expiry");
        assert_eq!(token, b"waiter");
        assert!(fence > held_fence);
        assert!(
            took < Duration::from_secs(1),
            "{}: granted after {took:?}",
            w.what
        );
        assert_eq!(release(&mut c, &key, b"waiter"), 1);
    }
    assert_scheduler_drains(&s);
}

/// What Redis answers to `PEXPIRE`/`PEXPIREAT key v` on an existing key, and what becomes of
/// the key.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expiry {
    /// Refused with this error; the key keeps its expiry.
    Refused(&'static str),
    /// `1`, and the key is gone at once or within a millisecond.
    Gone,
    /// `1`, and the key now expires this far ahead (milliseconds, approximately).
    Far(i128),
    /// At the very edge of what `PEXPIRE` accepts: either answer is right.
    Edge,
}

fn redis_expiry(cmd: &str, v: &str, now: i64) -> Expiry {
    let Some(n) = v
        .parse::<i64>()
        .ok()
        .filter(|_| strict_decimal(v).is_some())
    else {
        return Expiry::Refused(NOT_AN_INTEGER);
    };
    let n = i128::from(n);
    let (max, now) = (i128::from(i64::MAX), i128::from(now));
    let ahead = if cmd == "PEXPIRE" {
        // Redis refuses a relative time that overflows once its clock is added; its clock
        // reads at least `now`, a few seconds at most later.
        if n > max - now {
            return Expiry::Refused("ERR invalid expire time in 'pexpire' command");
        }
        if n > max - now - 10_000 {
            return Expiry::Edge;
        }
        n
    } else {
        n - now
    };
    if ahead <= 1 {
        Expiry::Gone
    } else {
        Expiry::Far(ahead)
    }
}

/// Expiries in milliseconds that wrap around to the past once turned into microseconds on a
/// 64-bit clock (2^64 / 1000, and 11 days less): a timer armed for such a deadline without a
/// bound on its period would be due at once, for ever.
fn timer_wraps() -> Vec<String> {
    let wrap = u64::MAX / 1000;
    vec![wrap.to_string(), (wrap - 1_000_000_000).to_string()]
}

/// How a waiter behind a lock with a far expiry is served: the expiry is moved near (by Redis
/// or by the holder), or the holder re-grants with a short TTL.
const BRING_NEAR: [&str; 3] = ["PEXPIRE 50", "LOCK.EXTEND PX 50", "re-grant PX 50"];

#[test]
fn pexpire_extremes_on_locks_with_waiters() {
    let s = Server::start();
    let mut c = admin(&s);
    let mut p = pinger(&s);

    struct Case {
        key: String,
        what: String,
        fence: i64,
        fate: Expiry,
        first: Option<Waiter>,
    }
    let now = now_ms();
    let mut cases = Vec::new();
    let values: Vec<String> = extremes().into_iter().chain(timer_wraps()).collect();
    for cmd in ["PEXPIRE", "PEXPIREAT"] {
        for (i, v) in values.iter().enumerate() {
            let key = format!("{cmd}:{i}");
            let (_, fence) = grant(&mut c, &key, b"holder", 60_000);
            let fate = redis_expiry(cmd, v, now);
            // A waiter that times out if the lock stays, or is handed it if the key goes.
            let block = if fate == Expiry::Gone { "5000" } else { "300" };
            let first = queue_waiter(&s, &mut c, &key, "first", "60000", block);
            cases.push(Case {
                key,
                what: format!("{cmd} {v}"),
                fence,
                fate,
                first: Some(first),
            });
        }
    }
    // Everything at once: the server's timer sees every deadline together.
    for case in &mut cases {
        let (cmd, v) = case.what.split_once(' ').unwrap();
        let r = run(&mut c, &rcmd!(cmd, &case.key, v));
        match (&case.fate, r) {
            (Expiry::Refused(e), Err(got)) => assert_eq!(&err_text(&got), e, "{}", case.what),
            (Expiry::Gone | Expiry::Far(_), Ok(got)) => {
                assert_eq!(as_int(&got), 1, "{}", case.what)
            }
            (Expiry::Edge, Ok(got)) => assert_eq!(as_int(&got), 1, "{}", case.what),
            (Expiry::Edge, Err(got)) => {
                assert_eq!(
                    err_text(&got),
                    "ERR invalid expire time in 'pexpire' command",
                    "{}",
                    case.what
                );
                // Refused at the edge: the lock keeps its 60 s, which is "far" here too.
                case.fate = Expiry::Far(60_000);
            }
            (want, got) => panic!("{}: expected {want:?}, got {got:?}", case.what),
        }
        if case.fate == Expiry::Edge {
            case.fate = Expiry::Far(i128::from(i64::MAX - now));
        }
        assert_responsive(&mut p, &s, &case.what);
    }
    // The lock's own view agrees with Redis's, however far the expiry.
    for case in &cases {
        let want = match case.fate {
            Expiry::Refused(_) => 60_000,
            Expiry::Far(ms) => ms.min(i128::from(i64::MAX)) as i64,
            _ => continue,
        };
        let held = info_some(&mut c, &case.key);
        assert_eq!((held.token, held.fence), (b"holder".to_vec(), case.fence));
        let slack = TTL_SLACK + 10_000;
        assert_ttl_close(held.ttl, want, slack, &format!("{} LOCK.INFO", case.what));
        assert_ttl_close(pttl(&mut c, &case.key), want, slack, &case.what);
    }
    // First waiters: nil after their 300 ms behind a lock that stays; the lock when it went.
    for _ in 0..10 {
        assert_responsive(&mut p, &s, "waiting");
        thread::sleep(Duration::from_millis(20));
    }
    for case in &mut cases {
        let mut w = case.first.take().unwrap();
        let (reply, took) = w.answer(&s);
        if case.fate == Expiry::Gone {
            let (token, fence) = raw_grant(&reply)
                .unwrap_or_else(|| panic!("{}: the key went, the waiter got nil", case.what));
            assert_eq!(token, b"first");
            assert!(fence > case.fence, "{}", case.what);
            assert!(
                took < Duration::from_millis(1500),
                "{}: after {took:?}",
                case.what
            );
            assert_eq!(release(&mut c, &case.key, b"first"), 1);
        } else {
            assert_eq!(reply, Resp::Nil, "{}: lock still held", case.what);
            assert!(
                took + EARLY >= Duration::from_millis(300) && took < Duration::from_millis(1500),
                "{}: BLOCK 300 answered after {took:?}",
                case.what
            );
        }
        assert_responsive(&mut p, &s, &case.what);
    }
    // Second waiters, without any limit, behind each lock that stays: one lock at a time, so
    // that its far expiry is the only thing the server has to wait for.
    let staying = cases.iter_mut().filter(|c| c.fate != Expiry::Gone);
    for (n, case) in staying.enumerate() {
        let mut w = queue_waiter(&s, &mut c, &case.key, "second", "60000", "0");
        for _ in 0..3 {
            assert_responsive(&mut p, &s, &w.what);
            thread::sleep(Duration::from_millis(10));
        }
        let how = BRING_NEAR[n % BRING_NEAR.len()];
        case.what = format!("{}, then {how}", case.what);
        match how {
            "PEXPIRE 50" => {
                assert_eq!(as_int(&ok(&mut c, &rcmd!("PEXPIRE", &case.key, 50))), 1)
            }
            "LOCK.EXTEND PX 50" => assert_eq!(extend_px(&mut c, &case.key, b"holder", 50), 1),
            _ => assert_eq!(grant(&mut c, &case.key, b"holder", 50).1, case.fence),
        }
        let near = Instant::now();
        let (reply, _) = w.answer(&s);
        let took = near.elapsed();
        let (token, fence) = raw_grant(&reply).expect("handoff");
        assert_eq!(token, b"second", "{}", case.what);
        assert!(fence > case.fence, "{}", case.what);
        assert!(
            took < Duration::from_millis(1500),
            "{}: granted after {took:?}",
            case.what
        );
        assert_eq!(release(&mut c, &case.key, b"second"), 1);
        assert_responsive(&mut p, &s, &case.what);
    }
    assert_scheduler_drains(&s);
}

/// The largest relative expiry Redis accepts right now: `i64::MAX - now`, give or take the
/// difference between our clock reading and the server's.
fn largest_pexpire(c: &mut Connection, key: &str) -> i64 {
    let mut v = i64::MAX - now_ms() + 1000;
    for _ in 0..100 {
        match run(c, &rcmd!("PEXPIRE", key, v)) {
            Ok(r) => {
                assert_eq!(as_int(&r), 1);
                return v;
            }
            Err(e) => {
                assert_eq!(err_text(&e), "ERR invalid expire time in 'pexpire' command");
                v -= 100;
            }
        }
    }
    panic!("PEXPIRE never accepted a value near i64::MAX - now");
}

#[test]
fn the_largest_expiries_redis_accepts_with_waiters_behind() {
    // A lock with a short TTL whose expiry is then pushed to the end of time, and clients that
    // queue behind it: the server keeps answering, the bounded waiter times out on time, the
    // unbounded one is served once the expiry comes near again.
    let s = Server::start();
    let mut c = admin(&s);
    let mut p = pinger(&s);
    // Leases of 2 s: the set-up below must be done before they end, also on a busy machine.
    let (_, f_at) = grant(&mut c, "hang:at", b"a", 2000);
    assert_eq!(
        as_int(&ok(&mut c, &rcmd!("PEXPIREAT", "hang:at", i64::MAX))),
        1
    );
    assert_eq!(
        err(&mut c, &rcmd!("PEXPIREAT", "hang:at", u64::MAX)),
        NOT_AN_INTEGER
    );
    let (_, f_rel) = grant(&mut c, "hang:rel", b"a", 2000);
    let largest = largest_pexpire(&mut c, "hang:rel");
    assert!(largest > i64::MAX - now_ms() - 60_000);
    let (_, f_wrap) = grant(&mut c, "hang:wrap", b"a", 2000);
    let wrap = &timer_wraps()[0];
    assert_eq!(as_int(&ok(&mut c, &rcmd!("PEXPIRE", "hang:wrap", wrap))), 1);
    let keys = [
        ("hang:at", f_at),
        ("hang:rel", f_rel),
        ("hang:wrap", f_wrap),
    ];
    let mut bounded = Vec::new();
    let mut unbounded = Vec::new();
    for (key, _) in keys {
        bounded.push(queue_waiter(&s, &mut c, key, "w4000", "1000", "4000"));
        assert_responsive(&mut p, &s, key);
        unbounded.push(queue_waiter(&s, &mut c, key, "w0", "1000", "0"));
        assert_responsive(&mut p, &s, key);
    }
    // Past the original 2000 ms expiry, where the module looks at the locks again, and on to
    // the bounded waiters' deadline.
    let until = bounded[0].sent + Duration::from_millis(3900);
    while Instant::now() < until {
        assert_responsive(&mut p, &s, "a lock with the largest expiry and waiters");
        thread::sleep(Duration::from_millis(50));
    }
    for w in &mut bounded {
        let (reply, took) = w.answer(&s);
        assert_eq!(reply, Resp::Nil, "{}", w.what);
        assert!(
            took + EARLY >= Duration::from_millis(4000) && took < Duration::from_millis(7000),
            "{}: answered after {took:?}",
            w.what
        );
    }
    for (key, fence) in keys {
        let held = info_some(&mut c, key);
        assert_eq!(
            (held.token, held.fence, held.waiters),
            (b"a".to_vec(), fence, 1)
        );
        let far = if key == "hang:wrap" {
            (u64::MAX / 1000) as i64 - 60_000
        } else {
            i64::MAX - now_ms() - 60_000
        };
        assert!(held.ttl > far, "{key}: ttl {}", held.ttl);
        assert_eq!(as_int(&ok(&mut c, &rcmd!("PEXPIRE", key, 50))), 1);
    }
    for (w, (_, fence)) in unbounded.iter_mut().zip(keys) {
        let (reply, _) = w.answer(&s);
        let (token, f) = raw_grant(&reply).expect("handoff once the expiry is near");
        assert_eq!(token, b"w0");
        assert!(f > fence);
    }
    assert_responsive(&mut p, &s, "the handoffs");
    ok(&mut c, &rcmd!("DEL", "hang:at", "hang:rel", "hang:wrap"));
    assert_scheduler_drains(&s);
}
