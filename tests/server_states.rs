//! Work the module does on its own — the handoff at a holder's expiry, the handoff after a
//! `DEL` or a flush, an epoch record after a promotion — against every server state that forbids
//! or changes writes (SPEC "Server safety"): client pauses (`CLIENT PAUSE WRITE|ALL`,
//! `FAILOVER`, a graceful `SHUTDOWN` waiting for replicas), demotion, loading, `maxmemory`,
//! `min-replicas-to-write`, with and without AOF. In every case the server stays up, the waiter
//! ends with a correct answer, nothing is written while writes are paused, and master and
//! replica agree.

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// Starts a client that waits for `key` with `token` (the harness's waiter); returns once the
/// server counts it among the key's waiters.
fn queue_waiter(server: &Server, key: &str, token: &str, px: i64, block_ms: i64) -> Waiter {
    let before = waiters_of(&mut server.conn(), key);
    let waiter = spawn_waiter(server, key, token, px, block_ms);
    wait_waiters(&mut server.conn(), key, before + 1);
    waiter
}

#[track_caller]
fn answer_within(w: &Waiter, within: Duration) -> WaitReply {
    w.recv_within(within)
        .expect("the waiter was never answered")
}

/// Nothing arrives during `window` (a window the test derives from the server's own state, so
/// it is not scaled with `time_scale()`).
#[track_caller]
fn no_answer_for(w: &Waiter, window: Duration, why: &str) {
    if let Some(a) = w.recv_within(window / time_scale()) {
        panic!("{why}: the waiter was answered {a:?}");
    }
}

/// Sends several commands in one write, so the server reads them in one pass.
fn pipeline(server: &Server, commands: &[&[&str]]) -> RawConn {
    let con = RawConn::connect(server);
    con.stream()
        .write_all(&resp_commands(commands))
        .expect("write");
    con
}

fn digest(server: &Server) -> Vec<u8> {
    as_bytes(&ok(&mut server.conn(), &rcmd!("DEBUG", "DIGEST")))
}

#[track_caller]
fn assert_alive(server: &Server) {
    ping(&mut server.conn());
    assert!(
        server.crash_lines().is_empty(),
        "{:?}\n{}",
        server.crash_lines(),
        server.log_tail(40)
    );
}

#[track_caller]
fn assert_granted(a: &WaitReply, token: &str) -> i64 {
    let (t, fence) = a.granted();
    assert_eq!(t, token.as_bytes(), "granted to the wrong token");
    fence
}

#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// The holder's lease ends; nobody touches the key.
    Expiry,
    /// The holder's key is deleted, and the pause arrives in the same read.
    Del,
    /// The database is flushed, and the pause arrives in the same read.
    Flushall,
}

/// A paused master with a replica: whatever frees the lock, the waiter is granted only once the
/// pause ends, the server never writes meanwhile, and the replica ends up identical.
fn paused_handoff(trigger: Trigger, pause: &str, aof: bool) {
    let what = format!("{trigger:?} during CLIENT PAUSE {pause}, appendonly {aof}");
    let m = Server::builder()
        .set("appendonly", if aof { "yes" } else { "no" })
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    grant(&mut c, "k", b"holder", 60_000);
    let rx = queue_waiter(&m, "k", "waiter", 30_000, 0);
    let pause_ms = 900;
    let paused_at = Instant::now();
    let pause_cmd: &[&str] = &["CLIENT", "PAUSE", &pause_ms.to_string(), pause];
    // The lease is cut short in the same read as the pause, so it ends during the pause
    // however slowly the test runs.
    let _pipe = match trigger {
        Trigger::Expiry => pipeline(
            &m,
            &[&["LOCK.EXTEND", "k", "holder", "PX", "150"], pause_cmd],
        ),
        Trigger::Del => pipeline(&m, &[&["DEL", "k"], pause_cmd]),
        // ASYNC: from Redis 7.4 on, a plain (synchronous) FLUSHALL blocks its client while the
        // data is freed in the background, so a pause pipelined after it only begins once the
        // event loop (and with it the handoff, legitimately) has run.
        Trigger::Flushall => pipeline(&m, &[&["FLUSHALL", "ASYNC"], pause_cmd]),
    };
    // Until shortly before the pause ends (and well after the lease ended), nothing is granted.
    let quiet = Duration::from_millis(pause_ms - 250).saturating_sub(paused_at.elapsed());
    no_answer_for(&rx, quiet, &what);
    let fence = assert_granted(&answer_within(&rx, Duration::from_secs(5)), "waiter");
    assert!(
        paused_at.elapsed() >= Duration::from_millis(pause_ms - 50),
        "{what}: granted {:?} after the pause began",
        paused_at.elapsed()
    );
    let i = info_some(&mut c, "k");
    assert_eq!(
        (i.token.as_slice(), i.fence),
        (&b"waiter"[..], fence),
        "{what}"
    );
    assert_alive(&m);
    wait_replica_caught_up(&m, &r);
    assert_eq!(digest(&m), digest(&r), "{what}: master and replica differ");
    assert_eq!(info_some(&mut r.conn(), "k").fence, fence, "{what}");
}

/// Every kind of client pause, with and without AOF.
const PAUSES: [(&str, bool); 4] = [
    ("WRITE", true),
    ("ALL", false),
    ("WRITE", false),
    ("ALL", true),
];

#[test]
fn expiry_handoff_waits_for_a_client_pause() {
    for (pause, aof) in PAUSES {
        paused_handoff(Trigger::Expiry, pause, aof);
    }
}

#[test]
fn handoff_after_del_waits_for_a_client_pause() {
    for (pause, aof) in PAUSES {
        paused_handoff(Trigger::Del, pause, aof);
    }
}

#[test]
fn handoff_after_flushall_waits_for_a_client_pause() {
    for (pause, aof) in PAUSES {
        paused_handoff(Trigger::Flushall, pause, aof);
    }
}

/// Freezes `replica` (SIGSTOP) so that it acknowledges nothing, and makes the master write
/// something the replica has not acknowledged. The replica resumes when the guard drops.
struct Frozen(u32);

impl Frozen {
    fn new(master: &Server, replica: &Server) -> Frozen {
        let pid = replica.pid().expect("replica runs");
        signal(pid, "STOP");
        ok(&mut master.conn(), &rcmd!("SET", "lag", "1"));
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{sig} {pid}");
}

/// What frees the contended place while the server cannot write: the exclusive holder's expiry
/// (Redis expires the key), or one holder's lease end (the module ends it, the key stays).
#[derive(Clone, Copy, Debug)]
enum Contended {
    Lock,
    Holder,
}

impl Contended {
    /// Holds `k`, queues `waiter` for it, and cuts the lease to end in 200 ms.
    fn set_up(self, m: &Server) -> Waiter {
        let mut c = m.conn();
        match self {
            Contended::Lock => {
                grant(&mut c, "k", b"holder", 60_000);
                let rx = queue_waiter(m, "k", "waiter", 30_000, 0);
                assert_eq!(extend_px(&mut c, "k", b"holder", 200), 1);
                rx
            }
            Contended::Holder => {
                let rx = semaphore_with_waiter(m);
                assert_eq!(extend_px(&mut c, "k", b"short", 200), 1);
                rx
            }
        }
    }

    /// The effect a replica receives for each grant and extend, and how many the set-up made.
    fn effects(self) -> (&'static str, &'static str) {
        match self {
            Contended::Lock => ("cmdstat_lock._apply", "calls=1,"),
            Contended::Holder => ("cmdstat_lock._hold", "calls=3,"),
        }
    }
}

fn failover_while_contended(kind: Contended) {
    let m = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&m);
    let rx = kind.set_up(&m);
    let mut c = m.conn();
    let frozen = Frozen::new(&m, &r);
    // FAILOVER pauses writes until the replica has caught up; the lease ends meanwhile, and
    // nothing is granted while writes are paused.
    ok(&mut c, &rcmd!("FAILOVER", "TIMEOUT", 10_000));
    no_answer_for(&rx, Duration::from_millis(500), "FAILOVER pause");
    drop(frozen);
    r.wait_info("replication", "role", "master");
    m.wait_info("replication", "role", "slave");
    m.wait_info("replication", "master_link_status", "up");
    // The old master ends the wait without a grant: Redis's UNBLOCKED or the module's READONLY.
    match answer_within(&rx, Duration::from_secs(5)).reply {
        Err(e) => assert!(
            e.starts_with("UNBLOCKED") || e.starts_with("READONLY"),
            "waiter answered {e}"
        ),
        other => panic!("a demoted master granted {other:?}"),
    }
    if let Contended::Holder = kind {
        // The new master ends the lease its old master left.
        wait_until(
            "the new master to end the lease",
            Duration::from_secs(5),
            || holders(&r) == ["stays"] && stat(&r, "lease_ends") == 1,
        );
    }
    assert_alive(&m);
    assert_alive(&r);
    wait_replica_caught_up(&r, &m);
    assert_eq!(digest(&m), digest(&r));
}

#[test]
fn failover_while_a_contended_lock_expires() {
    failover_while_contended(Contended::Lock);
}

#[test]
fn failover_while_a_contended_holder_lease_ends() {
    failover_while_contended(Contended::Holder);
}

fn graceful_shutdown_while_contended(kind: Contended) {
    let mut m = Server::builder()
        .set("appendonly", "yes")
        .set("shutdown-timeout", "10")
        .start();
    let r = Server::start_replica_of(&m);
    let rx = kind.set_up(&m);
    let frozen = Frozen::new(&m, &r);
    // SHUTDOWN pauses writes and waits for the replica; the lease ends meanwhile.
    let mut sc = m.conn();
    let shutdown = thread::spawn(move || {
        let _ = run(&mut sc, &rcmd!("SHUTDOWN"));
    });
    no_answer_for(&rx, Duration::from_millis(500), "SHUTDOWN pause");
    drop(frozen);
    assert!(m.wait_exit(), "the server did not exit\n{}", m.log_tail(30));
    shutdown.join().unwrap();
    let log = m.log();
    assert!(m.crash_lines().is_empty(), "{:?}", m.crash_lines());
    assert!(log.contains("ready to exit"), "{}", m.log_tail(30));
    // The waiter was granted nothing (no write was made during the pause): its connection
    // closed with the server.
    if let Ok(g @ redis::Value::Array(_)) = answer_within(&rx, Duration::from_secs(5)).reply {
        panic!("granted {g:?} during a shutdown pause");
    }
    assert_alive(&r);
    // The replica received the set-up's grants and extend, and nothing else.
    let (effect, calls) = kind.effects();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut r.conn())
        .unwrap();
    let applied = field(&stats, effect).unwrap_or_default();
    assert!(applied.starts_with(calls), "{applied}");
}

#[test]
fn graceful_shutdown_with_replicas_while_a_contended_lock_expires() {
    graceful_shutdown_while_contended(Contended::Lock);
}

#[test]
fn graceful_shutdown_with_replicas_while_a_holder_lease_ends() {
    graceful_shutdown_while_contended(Contended::Holder);
}

#[test]
fn demotion_answers_waiters_and_the_expiry_writes_nothing() {
    let m = Server::builder().set("appendonly", "yes").start();
    let other = Server::start();
    let mut c = m.conn();
    grant(&mut c, "k", b"holder", 60_000);
    let rx = queue_waiter(&m, "k", "waiter", 30_000, 0);
    let lease_end = now_ms() + 200;
    let _pipe = pipeline(
        &m,
        &[
            &["LOCK.EXTEND", "k", "holder", "PX", "200"],
            &["REPLICAOF", "127.0.0.1", &other.port().to_string()],
        ],
    );
    match answer_within(&rx, Duration::from_secs(5)).reply {
        Err(e) => assert!(
            e.starts_with("UNBLOCKED") || e.starts_with("READONLY"),
            "{e}"
        ),
        other => panic!("a demoted server answered {other:?}"),
    }
    m.wait_info("replication", "master_link_status", "up");
    // Past the old lease: a replica grants nothing on its own.
    sleep_until_wall_ms(lease_end + 100);
    assert_alive(&m);
    assert!(!exists(&mut c, "k"));
    assert_eq!(digest(&m), digest(&other));
}

#[test]
fn debug_reload_keeps_waiters_and_the_expiry_handoff() {
    let m = Server::builder().set("appendonly", "no").start();
    let mut c = m.conn();
    let (_, f0) = grant(&mut c, "k", b"holder", 60_000);
    let rx = queue_waiter(&m, "k", "waiter", 30_000, 0);
    assert_eq!(extend_px(&mut c, "k", b"holder", 400), 1);
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    assert_eq!(info_some(&mut c, "k").fence, f0);
    let fence = assert_granted(&answer_within(&rx, Duration::from_secs(5)), "waiter");
    assert!(fence > f0);
    assert_eq!(info_some(&mut c, "k").token, b"waiter".to_vec());
    assert_alive(&m);
}

#[test]
fn a_full_memory_still_hands_a_freed_lock_on() {
    // Deliberate: a handoff replaces the lock that was just freed, so it is made even when
    // commands that add data are refused for memory.
    let m = Server::builder()
        .set("maxmemory-policy", "noeviction")
        .start();
    let mut c = m.conn();
    grant(&mut c, "k", b"holder", 300);
    let rx = queue_waiter(&m, "k", "waiter", 30_000, 0);
    // Far below what is used: every command that may add data is refused.
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", "1"));
    let e = err(&mut c, &rcmd!("LOCK.ACQUIRE", "new", "t", "PX", 1000));
    assert!(e.starts_with("OOM"), "{e}");
    assert_granted(&answer_within(&rx, Duration::from_secs(5)), "waiter");
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", "0"));
    assert_alive(&m);
}

#[test]
fn unmet_min_replicas_hold_back_the_handoff() {
    let m = Server::builder()
        .set("min-replicas-to-write", "1")
        .set("min-replicas-max-lag", "10")
        .start();
    let mut r = Server::start_replica_of(&m);
    let mut c = m.conn();
    grant(&mut c, "k", b"holder", 2_000);
    let rx = queue_waiter(&m, "k", "waiter", 30_000, 0);
    r.stop(Stop::Kill);
    m.wait_info("replication", "min_slaves_good_slaves", "0");
    let e = err(&mut c, &rcmd!("LOCK.ACQUIRE", "other", "t", "PX", 1000));
    assert!(e.starts_with("NOREPLICAS"), "{e}");
    // Until well past the lease: the handoff is a write, and writes need a replica.
    let left = info_some(&mut c, "k").ttl.max(0) as u64;
    no_answer_for(&rx, Duration::from_millis(left + 300), "min-replicas unmet");
    ok(
        &mut c,
        &rcmd!("CONFIG", "SET", "min-replicas-to-write", "0"),
    );
    assert_granted(&answer_within(&rx, Duration::from_secs(5)), "waiter");
    assert_alive(&m);
}

#[test]
fn a_promotion_during_a_pause_records_its_epoch_after_it() {
    let m = Server::start();
    let r = Server::builder()
        .replica_of(&m)
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    // The replica rewrites its AOF after the first sync; let that finish so the files read
    // below are the ones the promotion appends to.
    r.wait_replica_synced(m.port);
    r.wait_aof_rewrite_done();
    let mut rc = r.conn();
    ok(&mut rc, &rcmd!("CLIENT", "PAUSE", 60_000, "WRITE"));
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    r.wait_info("replication", "role", "master");
    // The epoch record is a write: it stays pending while writes are paused (the scheduler
    // holds it and retries), and two more round trips give it every chance to run.
    wait_until("the epoch record pending", Duration::from_secs(5), || {
        stat(&r, "scheduled_jobs") == 1
    });
    ping(&mut rc);
    ping(&mut rc);
    assert_eq!(
        stat(&r, "scheduled_jobs"),
        1,
        "the epoch record ran during the pause"
    );
    assert!(
        !r.aof_text().contains("LOCK._EPOCH"),
        "epoch written while paused"
    );
    assert_alive(&r);
    ok(&mut rc, &rcmd!("CLIENT", "UNPAUSE"));
    let deadline = Instant::now() + Duration::from_secs(5) * time_scale();
    while !r.aof_text().contains("LOCK._EPOCH") {
        assert!(Instant::now() < deadline, "epoch never recorded in the AOF");
        thread::sleep(Duration::from_millis(10));
    }
    let (_, fence) = grant(&mut rc, "k", b"t", 1000);
    assert!(
        fence >> 51 >= 1,
        "a promoted master grants from a new epoch: {fence}"
    );
    assert_alive(&r);
}

/// An `EPHEMERAL` holder (exclusive, or one shared holder among others) disconnects while
/// writes are paused; a writer waits for the key.
fn ephemeral_release_under_pause(shared: bool) {
    let m = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let mut holder = RawConn::connect(&m);
    let id = holder.client_id();
    let mut acquire = vec!["LOCK.ACQUIRE", "k", "holder", "PX", "60000", "EPHEMERAL"];
    if shared {
        acquire.push("SHARED");
    }
    holder.call(&acquire);
    let rx = queue_waiter(&m, "k", "waiter", 30_000, 0);
    ok(&mut c, &rcmd!("CLIENT", "PAUSE", 60_000, "WRITE"));
    holder.close();
    wait_client_gone(&mut m.conn(), id);
    // The release is a write: while writes are paused the hold stays, and nobody is granted.
    no_answer_for(
        &rx,
        Duration::from_millis(300),
        "EPHEMERAL release during a pause",
    );
    assert_eq!(crate::kinds::info_of(&mut c, "k").tokens(), ["holder"]);
    assert_alive(&m);
    ok(&mut c, &rcmd!("CLIENT", "UNPAUSE"));
    assert_granted(&answer_within(&rx, Duration::from_secs(5)), "waiter");
    assert_alive(&m);
    wait_replica_caught_up(&m, &r);
    assert_eq!(digest(&m), digest(&r));
}

#[test]
fn an_ephemeral_release_waits_for_a_client_pause() {
    ephemeral_release_under_pause(false);
}

#[test]
fn an_ephemeral_shared_release_waits_for_a_client_pause() {
    ephemeral_release_under_pause(true);
}

#[test]
fn a_demoted_server_releases_nothing_when_an_ephemeral_holder_leaves() {
    let m = Server::start();
    let other = Server::start();
    let mut holder = RawConn::connect(&m);
    let id = holder.client_id();
    holder.call(&["LOCK.ACQUIRE", "k", "holder", "PX", "60000", "EPHEMERAL"]);
    let mut c = m.conn();
    ok(
        &mut c,
        &rcmd!("REPLICAOF", "127.0.0.1", other.port().to_string()),
    );
    m.wait_info("replication", "master_link_status", "up");
    holder.close();
    wait_client_gone(&mut m.conn(), id);
    // A replica writes only what its master sends: the leaving holder changes nothing.
    ping(&mut c);
    assert_eq!(stat(&m, "ephemeral_holds"), 0);
    assert_alive(&m);
    assert_eq!(digest(&m), digest(&other));
}

// ---------------------------------------------------------------------------------------------
// The end of one holder's lease (shared locks and semaphores), a write the module makes alone
// ---------------------------------------------------------------------------------------------

/// A semaphore of two places: `stays` for a minute, `short` for a minute too (cut short by the
/// test), and `waiter` queued for a place. The key's own TTL is `stays`'s lease, so what frees
/// the place is the module ending `short`'s lease, never Redis expiring the key.
fn semaphore_with_waiter(m: &Server) -> Waiter {
    let mut c = m.conn();
    crate::kinds::place(&mut c, "k", "stays", 60_000, 2);
    crate::kinds::place(&mut c, "k", "short", 60_000, 2);
    let w = spawn_waiter_with(m, "k", "waiter", 30_000, 0, &["LIMIT", "2"]);
    wait_waiters(&mut c, "k", 1);
    w
}

fn holders(server: &Server) -> Vec<String> {
    crate::kinds::info_of(&mut server.conn(), "k").tokens()
}

#[test]
fn a_lease_end_waits_for_every_client_pause() {
    for (pause, aof) in PAUSES {
        let what = format!("lease end during CLIENT PAUSE {pause}, appendonly {aof}");
        let m = Server::builder()
            .set("appendonly", if aof { "yes" } else { "no" })
            .set("appendfsync", "always")
            .start();
        let r = Server::start_replica_of(&m);
        let rx = semaphore_with_waiter(&m);
        let pause_ms = 900;
        let paused_at = Instant::now();
        let pause_cmd: &[&str] = &["CLIENT", "PAUSE", &pause_ms.to_string(), pause];
        let _pipe = pipeline(
            &m,
            &[&["LOCK.EXTEND", "k", "short", "PX", "150"], pause_cmd],
        );
        let quiet = Duration::from_millis(pause_ms - 250).saturating_sub(paused_at.elapsed());
        no_answer_for(&rx, quiet, &what);
        assert_granted(&answer_within(&rx, Duration::from_secs(5)), "waiter");
        assert!(
            paused_at.elapsed() >= Duration::from_millis(pause_ms - 50),
            "{what}: granted {:?} after the pause began",
            paused_at.elapsed()
        );
        assert_eq!(holders(&m), ["stays", "waiter"], "{what}");
        assert_eq!(stat(&m, "lease_ends"), 1, "{what}");
        assert_alive(&m);
        wait_replica_caught_up(&m, &r);
        assert_eq!(digest(&m), digest(&r), "{what}: master and replica differ");
        assert_eq!(holders(&r), ["stays", "waiter"], "{what}");
    }
}

#[test]
fn unmet_min_replicas_and_a_full_memory_with_a_holder_lease_ending() {
    let m = Server::builder()
        .set("min-replicas-to-write", "1")
        .set("min-replicas-max-lag", "10")
        .set("maxmemory-policy", "noeviction")
        .start();
    let mut r = Server::start_replica_of(&m);
    let rx = semaphore_with_waiter(&m);
    let mut c = m.conn();
    assert_eq!(extend_px(&mut c, "k", b"short", 300), 1);
    r.stop(Stop::Kill);
    m.wait_info("replication", "min_slaves_good_slaves", "0");
    // The lease end is a write, and writes need a replica.
    no_answer_for(&rx, Duration::from_millis(600), "min-replicas unmet");
    assert_eq!(stat(&m, "lease_ends"), 0);
    // A full memory does not hold it back (it frees a place and fills it again).
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", "1"));
    ok(
        &mut c,
        &rcmd!("CONFIG", "SET", "min-replicas-to-write", "0"),
    );
    assert_granted(&answer_within(&rx, Duration::from_secs(5)), "waiter");
    ok(&mut c, &rcmd!("CONFIG", "SET", "maxmemory", "0"));
    assert_eq!(holders(&m), ["stays", "waiter"]);
    assert_alive(&m);
}
