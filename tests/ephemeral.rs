//! `EPHEMERAL` (SPEC "Connection-bound holds"): a hold bound to its connection is released the
//! moment that connection closes — crash, `CLIENT KILL`, `QUIT`, idle timeout — exactly as
//! `LOCK.RELEASE` would: handed to the first waiter, replicated and written to the AOF as a
//! release. The lease stays the backstop; the binding lives on the granting server only.

use std::io::Write;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

fn client_of(con: &mut redis::Connection, key: &str) -> i64 {
    let v = ok(con, &rcmd!("LOCK.INFO", key));
    let items = match v {
        redis::Value::Array(items) => items,
        other => panic!("LOCK.INFO answered {other:?}"),
    };
    items
        .chunks(2)
        .find(|kv| as_bytes(&kv[0]) == b"client")
        .map(|kv| as_int(&kv[1]))
        .expect("LOCK.INFO has a client field")
}

/// A waiter for `key` (the harness's), returned once the server counts it among the waiters.
fn queue_waiter(s: &Server, key: &str, token: &str) -> Waiter {
    let before = info(&mut s.conn(), key).map_or(0, |i| i.waiters);
    let waiter = spawn_waiter(s, key, token, 60_000, 10_000);
    wait_waiters(&mut s.conn(), key, before + 1);
    waiter
}

/// The waiter is granted promptly: well within the holder's minute-long lease.
#[track_caller]
fn granted_promptly(w: &Waiter, token: &str, since: Instant) {
    let (t, _) = w.granted();
    assert_eq!(t, token.as_bytes());
    assert!(
        since.elapsed() < Duration::from_secs(2) * time_scale(),
        "granted only after {:?}",
        since.elapsed()
    );
}

#[test]
fn a_crashed_client_process_hands_its_lock_on_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    // A real client process holding the lock on its own connection.
    let mut cli = Command::new("redis-cli")
        .args(["-p", &s.port().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-cli");
    cli.stdin
        .as_mut()
        .unwrap()
        .write_all(b"LOCK.ACQUIRE k crashed PX 60000 EPHEMERAL\n")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while info(&mut c, "k").is_none() {
        assert!(Instant::now() < deadline, "redis-cli never took the lock");
        thread::sleep(Duration::from_millis(5));
    }
    assert!(client_of(&mut c, "k") > 0);
    let rx = queue_waiter(&s, "k", "next");
    let killed = Instant::now();
    cli.kill().unwrap();
    cli.wait().unwrap();
    granted_promptly(&rx, "next", killed);
    assert_eq!(
        s.info_field("redislock", "redislock_ephemeral_releases")
            .as_deref(),
        Some("1")
    );
}

#[test]
fn client_kill_quit_and_idle_timeout_release() {
    let s = Server::start();
    let mut c = s.conn();
    // CLIENT KILL ID
    let mut holder = RawConn::connect(&s);
    let id = holder.client_id();
    holder.call(&["LOCK.ACQUIRE", "a", "h", "PX", "60000", "EPHEMERAL"]);
    assert_eq!(client_of(&mut c, "a"), id);
    let rx = queue_waiter(&s, "a", "w");
    let t = Instant::now();
    ok(&mut c, &rcmd!("CLIENT", "KILL", "ID", id));
    granted_promptly(&rx, "w", t);
    // QUIT
    let mut holder = RawConn::connect(&s);
    holder.call(&["LOCK.ACQUIRE", "b", "h", "PX", "60000", "EPHEMERAL"]);
    let rx = queue_waiter(&s, "b", "w");
    let t = Instant::now();
    holder.call(&["QUIT"]);
    granted_promptly(&rx, "w", t);
    // Idle timeout: the server closes a connection idle for a second.
    ok(&mut c, &rcmd!("CONFIG", "SET", "timeout", "1"));
    let mut holder = RawConn::connect(&s);
    holder.call(&["LOCK.ACQUIRE", "c", "h", "PX", "60000", "EPHEMERAL"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while info(&mut c, "c").is_some() {
        assert!(Instant::now() < deadline, "idle holder never released");
        thread::sleep(Duration::from_millis(20));
        ping(&mut c);
    }
    ok(&mut c, &rcmd!("CONFIG", "SET", "timeout", "0"));
    drop(holder);
}

#[test]
fn a_regrant_rebinds_and_extend_keeps_the_binding() {
    let s = Server::start();
    let mut c = s.conn();
    let mut a = RawConn::connect(&s);
    let mut b = RawConn::connect(&s);
    let (ida, idb) = (a.client_id(), b.client_id());
    a.call(&["LOCK.ACQUIRE", "k", "tok", "PX", "60000", "EPHEMERAL"]);
    assert_eq!(client_of(&mut c, "k"), ida);
    // The same token re-granted from another connection with EPHEMERAL: bound there now.
    b.call(&["LOCK.ACQUIRE", "k", "tok", "PX", "60000", "EPHEMERAL"]);
    assert_eq!(client_of(&mut c, "k"), idb);
    a.close();
    // A's connection is gone; the lock is B's to lose.
    wait_client_gone(&mut c, ida);
    assert_eq!(client_of(&mut c, "k"), idb);
    // EXTEND, from any connection, changes no binding.
    assert_eq!(extend_px(&mut c, "k", b"tok", 30_000), 1);
    assert_eq!(client_of(&mut c, "k"), idb);
    // A re-grant without EPHEMERAL unbinds: closing B then releases nothing.
    let (_, fence) = grant(&mut c, "k", b"tok", 30_000);
    assert_eq!(client_of(&mut c, "k"), 0);
    b.close();
    wait_client_gone(&mut c, idb);
    assert_eq!(info_some(&mut c, "k").fence, fence);
    // Released normally: no binding is left behind.
    assert_eq!(release(&mut c, "k", b"tok"), 1);
    assert_eq!(
        s.info_field("redislock", "redislock_ephemeral_holds")
            .as_deref(),
        Some("0")
    );
}

#[test]
fn a_waiter_granted_with_ephemeral_is_bound_to_its_own_connection() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "k", b"first", 60_000);
    let mut w = RawConn::connect(&s);
    let wid = w.client_id();
    w.send(&[
        "LOCK.ACQUIRE",
        "k",
        "second",
        "PX",
        "60000",
        "EPHEMERAL",
        "BLOCK",
        "10000",
    ]);
    wait_waiters(&mut c, "k", 1);
    let rx = queue_waiter(&s, "k", "third");
    assert_eq!(release(&mut c, "k", b"first"), 1);
    match w.read().expect("grant") {
        Resp::Array(items) => assert_eq!(items[0], Resp::Bulk(b"second".to_vec())),
        other => panic!("{other:?}"),
    }
    assert_eq!(client_of(&mut c, "k"), wid);
    let t = Instant::now();
    w.close();
    granted_promptly(&rx, "third", t);
    assert_eq!(client_of(&mut c, "k"), 0);
}

#[test]
fn replicas_and_the_aof_see_a_plain_release() {
    let m = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let mut holder = RawConn::connect(&m);
    holder.call(&["LOCK.ACQUIRE", "eph", "h", "PX", "60000", "EPHEMERAL"]);
    wait_replica_caught_up(&m, &r);
    assert!(exists(&mut r.conn(), "eph"));
    assert_eq!(
        client_of(&mut r.conn(), "eph"),
        0,
        "bindings are not replicated"
    );
    holder.close();
    let deadline = Instant::now() + Duration::from_secs(5);
    while exists(&mut c, "eph") {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(5));
    }
    wait_replica_caught_up(&m, &r);
    assert!(!exists(&mut r.conn(), "eph"));
    let aof = m.aof_text();
    let released = aof.rfind("DEL").expect("a DEL in the AOF");
    assert!(released > aof.rfind("LOCK._APPLY").unwrap());
    assert_eq!(
        as_bytes(&ok(&mut c, &rcmd!("DEBUG", "DIGEST"))),
        as_bytes(&ok(&mut r.conn(), &rcmd!("DEBUG", "DIGEST")))
    );
}

#[test]
fn reload_and_failover_leave_the_lease_only() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let mut holder = RawConn::connect(&m);
    let id = holder.client_id();
    holder.call(&["LOCK.ACQUIRE", "k", "h", "PX", "60000", "EPHEMERAL"]);
    assert_eq!(client_of(&mut c, "k"), id);
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    assert_eq!(client_of(&mut c, "k"), 0, "DEBUG RELOAD drops the binding");
    holder.close();
    wait_client_gone(&mut c, id);
    assert!(exists(&mut c, "k"), "the lease holds the lock now");
    // Failover: the promoted replica has the lock, with its lease and no binding.
    let mut holder = RawConn::connect(&m);
    holder.call(&["LOCK.ACQUIRE", "f", "h", "PX", "60000", "EPHEMERAL"]);
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    assert_eq!(client_of(&mut rc, "f"), 0);
    assert!(info_some(&mut rc, "f").ttl > 50_000);
    drop(holder);
}

#[test]
fn ephemeral_needs_a_connection_to_bind_to() {
    let s = Server::start();
    let mut c = s.conn();
    let refusal = "ERR EPHEMERAL binds a hold to the client connection, and this call has none";
    let script = "return redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 'PX', '60000', 'EPHEMERAL')";
    let e = err(&mut c, &rcmd!("EVAL", script, 1, "k", "from-eval"));
    assert!(e.starts_with(refusal), "EVAL: {e}");
    let library = "#!lua name=locks\n\
        redis.register_function('grab', function(keys, args) \
        return redis.call('LOCK.ACQUIRE', keys[1], args[1], 'PX', '60000', 'EPHEMERAL') end)";
    ok(&mut c, &rcmd!("FUNCTION", "LOAD", library));
    let e = err(&mut c, &rcmd!("FCALL", "grab", 1, "k", "from-fcall"));
    assert!(e.starts_with(refusal), "FCALL: {e}");
    // Nothing was granted, and nothing was bound.
    assert!(!exists(&mut c, "k"));
    assert_eq!(stat(&s, "ephemeral_holds"), 0);
    // Without EPHEMERAL a script acquires as usual; inside MULTI the connection is real, and
    // its closing releases the hold.
    let no_bind = "return redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 'PX', '60000')";
    assert!(parse_grant(&ok(&mut c, &rcmd!("EVAL", no_bind, 1, "k", "script"))).is_some());
    let mut tx = s.conn();
    let id = as_int(&ok(&mut tx, &rcmd!("CLIENT", "ID")));
    let replies: redis::Value = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("m")
        .arg("tx")
        .arg("PX")
        .arg(60_000)
        .arg("EPHEMERAL")
        .query(&mut tx)
        .expect("MULTI/EXEC");
    assert!(matches!(replies, redis::Value::Array(_)), "{replies:?}");
    assert_eq!(client_of(&mut c, "m"), id);
    drop(tx);
    wait_client_gone(&mut c, id);
    assert!(
        !exists(&mut c, "m"),
        "the MULTI connection's hold outlived it"
    );
}

/// A hold whose connection closes during a `CLIENT PAUSE` is gone at once, though its release
/// waits for the pause to end. An RDB file saved meanwhile (`DEBUG RELOAD`, a restart) carries
/// the release still owed: the hold never comes back as a live one, and is released once the
/// server may write.
#[test]
fn a_hold_whose_connection_closed_in_a_pause_stays_gone_after_reload_and_restart() {
    for mode in ["WRITE", "ALL"] {
        let mut s = Server::start();
        let mut c = s.conn();
        let mut holder = RawConn::connect(&s);
        let id = holder.client_id();
        holder.call(&["LOCK.ACQUIRE", "k", "h", "PX", "60000", "EPHEMERAL"]);
        // Another hold stays bound and live throughout: only the closed one is owed.
        let mut other = RawConn::connect(&s);
        other.call(&["LOCK.ACQUIRE", "live", "o", "PX", "60000", "EPHEMERAL"]);
        ok(&mut c, &rcmd!("CLIENT", "PAUSE", 1_500, mode));
        holder.close();
        // Under PAUSE ALL the reload waits for the pause to end, and runs as it ends, before
        // the module's own release.
        let mut r = s.conn();
        let reload = std::thread::spawn(move || ok(&mut r, &rcmd!("DEBUG", "RELOAD")));
        if mode == "WRITE" {
            wait_client_gone(&mut c, id);
        }
        reload.join().unwrap();
        wait_until("the owed release", Duration::from_secs(10), || {
            !exists(&mut c, "k")
        });
        assert!(
            exists(&mut c, "live"),
            "{mode}: a live hold keeps its lease"
        );
        assert_eq!(stat(&s, "ephemeral_pending"), 0);

        // A restart with an RDB file saved during the pause.
        let mut holder = RawConn::connect(&s);
        let id = holder.client_id();
        holder.call(&["LOCK.ACQUIRE", "r", "h", "PX", "60000", "EPHEMERAL"]);
        ok(&mut c, &rcmd!("CLIENT", "PAUSE", 60_000, "WRITE"));
        holder.close();
        wait_client_gone(&mut c, id);
        s.restart(Stop::Save);
        let mut c = s.conn();
        wait_until(
            "the owed release after a restart",
            Duration::from_secs(10),
            || !exists(&mut c, "r"),
        );
        assert_eq!(stat(&s, "ephemeral_pending"), 0);
        drop(other);
    }
}
