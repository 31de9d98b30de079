//! Access control (reliability spec): ACL key patterns apply to every `LOCK.*` command, the
//! commands can be allowed or denied one by one, the internal replication commands stay internal
//! whatever a user may run, and owner tokens never reach the server log.

use crate::common::*;
use redis::Connection;

const ALL_LOCK_COMMANDS: &str = "+lock.acquire +lock.release +lock.extend +lock.info";

fn setuser(admin: &mut Connection, user: &str, rules: &str) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg(">pw")
        .arg("resetkeys");
    for r in rules.split_whitespace() {
        cmd.arg(r);
    }
    ok(admin, &cmd);
}

/// Every lock command on `key`, as `user` would send it.
fn every_command(key: &str) -> Vec<redis::Cmd> {
    vec![
        rcmd!("LOCK.ACQUIRE", key, "t", "PX", 10_000),
        rcmd!("LOCK.ACQUIRE", key, "*", "EX", 10, "BLOCK", 5000),
        rcmd!("LOCK.EXTEND", key, "holder", "PX", 10_000),
        rcmd!("LOCK.RELEASE", key, "holder"),
        rcmd!("LOCK.INFO", key),
    ]
}

#[track_caller]
fn assert_noperm(con: &mut Connection, cmd: &redis::Cmd) {
    let e = err(con, cmd);
    assert!(e.starts_with("NOPERM"), "{}: {e}", describe(cmd));
}

#[test]
fn a_key_pattern_limits_every_lock_command() {
    let s = Server::start();
    let mut admin = s.conn();
    setuser(
        &mut admin,
        "app",
        &format!("~app:* {ALL_LOCK_COMMANDS} +ping +multi +exec"),
    );
    let (_, fence) = grant(&mut admin, "other:x", b"holder", 60_000);
    grant(&mut admin, "app:held", b"holder", 60_000);
    let mut app = s.conn_as("app", "pw");

    for key in ["other:x", "other:free", "apple", "App:x"] {
        for cmd in every_command(key) {
            assert_noperm(&mut app, &cmd);
        }
    }
    // The denied lock is untouched, and nothing was created or queued.
    let i = info_some(&mut admin, "other:x");
    assert_eq!(
        (i.token.as_slice(), i.fence, i.waiters),
        (&b"holder"[..], fence, 0)
    );
    assert!(!exists(&mut admin, "other:free"));

    // Inside the pattern, everything works.
    let (_, f) = grant(&mut app, "app:x", b"t", 10_000);
    assert_eq!(extend_px(&mut app, "app:x", b"t", 20_000), 1);
    assert_eq!(info_some(&mut app, "app:x").fence, f);
    assert_eq!(release(&mut app, "app:x", b"t"), 1);
    assert_eq!(info_some(&mut app, "app:held").waiters, 0);
    assert_eq!(release(&mut app, "app:held", b"holder"), 1);
    // A denied command inside MULTI fails at queueing time, before anything runs.
    ok(&mut app, &rcmd!("MULTI"));
    assert_noperm(&mut app, &rcmd!("LOCK.ACQUIRE", "other:y", "t", "PX", 1000));
    assert!(err(&mut app, &rcmd!("EXEC")).starts_with("EXECABORT"));
    assert!(!exists(&mut admin, "other:y"));
}

#[test]
fn read_and_write_key_permissions_follow_the_key_specs() {
    let s = Server::start();
    let mut admin = s.conn();
    setuser(
        &mut admin,
        "reader",
        &format!("%R~app:* {ALL_LOCK_COMMANDS}"),
    );
    setuser(
        &mut admin,
        "writer",
        &format!("%W~app:* {ALL_LOCK_COMMANDS}"),
    );
    let (_, fence) = grant(&mut admin, "app:x", b"holder", 60_000);

    // LOCK.INFO needs read access only.
    let mut reader = s.conn_as("reader", "pw");
    assert_eq!(info_some(&mut reader, "app:x").fence, fence);
    for cmd in &every_command("app:x")[..4] {
        assert_noperm(&mut reader, cmd);
    }
    // LOCK.RELEASE and LOCK.EXTEND need write access; LOCK.ACQUIRE needs both.
    let mut writer = s.conn_as("writer", "pw");
    assert_noperm(&mut writer, &rcmd!("LOCK.INFO", "app:x"));
    assert_noperm(
        &mut writer,
        &rcmd!("LOCK.ACQUIRE", "app:y", "t", "PX", 1000),
    );
    assert_eq!(extend_px(&mut writer, "app:x", b"holder", 30_000), 1);
    assert_eq!(release(&mut writer, "app:x", b"holder"), 1);
    assert!(info(&mut admin, "app:x").is_none());
}

#[test]
fn a_user_without_lock_release_cannot_release() {
    let s = Server::start();
    let mut admin = s.conn();
    setuser(&mut admin, "norelease", "~* +@all -lock.release");
    setuser(&mut admin, "acquire-only", "~* +lock.acquire");
    let mut u = s.conn_as("norelease", "pw");
    let (_, fence) = grant(&mut u, "job", b"t", 60_000);
    let e = err(&mut u, &rcmd!("LOCK.RELEASE", "job", "t"));
    assert!(e.starts_with("NOPERM") && e.contains("lock.release"), "{e}");
    assert_eq!(extend_px(&mut u, "job", b"t", 60_000), 1);
    let i = info_some(&mut admin, "job");
    assert_eq!((i.token.as_slice(), i.fence), (&b"t"[..], fence));

    let mut a = s.conn_as("acquire-only", "pw");
    grant(&mut a, "job2", b"t", 60_000);
    for cmd in [
        rcmd!("LOCK.RELEASE", "job2", "t"),
        rcmd!("LOCK.EXTEND", "job2", "t", "PX", 1000),
        rcmd!("LOCK.INFO", "job2"),
    ] {
        assert_noperm(&mut a, &cmd);
    }
    assert!(info(&mut admin, "job2").is_some());
}

#[test]
fn internal_commands_stay_internal_for_any_user() {
    let s = Server::start();
    let mut admin = s.conn();
    setuser(&mut admin, "root", "~* &* +@all");
    let mut root = s.conn_as("root", "pw");
    for cmd in [
        rcmd!("LOCK._APPLY", "k", "t", 5, now_ms() + 60_000),
        rcmd!("LOCK._APPLY", "k", "t", 5),
        rcmd!("LOCK._EPOCH", 7),
    ] {
        let e = err(&mut root, &cmd);
        assert_eq!(
            e,
            "ERR this command is internal to redislock replication and persistence",
            "{}",
            describe(&cmd)
        );
    }
    assert!(!exists(&mut admin, "k"));
    // And a user limited to other keys is refused by the key pattern first.
    setuser(&mut admin, "narrow", "~app:* +@all");
    let mut narrow = s.conn_as("narrow", "pw");
    assert_noperm(&mut narrow, &rcmd!("LOCK._APPLY", "k", "t", 5));
}

#[test]
fn tokens_never_appear_in_the_server_log() {
    let master = Server::builder()
        .set("loglevel", "debug")
        .set("appendonly", "yes")
        .start();
    let replica = Server::builder()
        .set("loglevel", "debug")
        .replica_of(&master)
        .start();
    let mut c = master.conn();
    let secret = |what: &str| format!("tok-SECRET-{what}-5e1d7c");
    let (_, _) = grant(&mut c, "log:a", secret("holder").as_bytes(), 60_000);
    assert!(acquire(&mut c, "log:a", secret("busy").as_bytes(), 1000).is_none());
    grant(&mut c, "log:a", secret("holder").as_bytes(), 60_000);
    assert_eq!(
        extend_px(&mut c, "log:a", secret("holder").as_bytes(), 90_000),
        1
    );
    assert_eq!(release(&mut c, "log:a", secret("wrong").as_bytes()), 0);
    let (generated, _) = grant(&mut c, "log:gen", b"*", 60_000);
    // A waiter, handed the lock on release.
    let mut w = RawConn::connect(&master);
    let waiter = secret("waiter");
    w.send(&[
        "LOCK.ACQUIRE",
        "log:a",
        &waiter,
        "PX",
        "60000",
        "BLOCK",
        "5000",
    ]);
    wait_waiters(&mut c, "log:a", 1);
    assert_eq!(release(&mut c, "log:a", secret("holder").as_bytes()), 1);
    assert!(matches!(w.read().unwrap(), Resp::Array(_)));
    // Errors that echo arguments, a refused internal command, an ACL denial.
    err(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "log:b", "t", "PX", 10, secret("option")),
    );
    err(&mut c, &rcmd!("LOCK._APPLY", "log:b", secret("apply"), 5));
    setuser(&mut c, "app", "~app:* +@all");
    let mut app = master.conn_as("app", "pw");
    err(
        &mut app,
        &rcmd!("LOCK.ACQUIRE", "log:c", secret("denied"), "PX", 10),
    );
    // Persistence, replication, promotion: everything that logs.
    wait_replicas(&mut c, 1);
    ok(&mut c, &rcmd!("BGREWRITEAOF"));
    master.wait_aof_rewrite_done();
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    ok(&mut c, &rcmd!("BGSAVE"));
    master.wait_bgsave_done();
    let mut rc = replica.conn();
    ok(&mut rc, &rcmd!("REPLICAOF", "NO", "ONE"));
    grant(&mut rc, "log:r", secret("on-replica").as_bytes(), 60_000);
    ok(&mut rc, &rcmd!("DEBUG", "RELOAD"));
    assert!(replica.log().contains("promoted to master"));

    for (name, s) in [("master", &master), ("replica", &replica)] {
        let text = s.log() + &s.stderr_log();
        assert!(
            text.lines().count() > 20,
            "{name}: the debug log is too short to mean anything"
        );
        for needle in ["SECRET", std::str::from_utf8(&generated).unwrap()] {
            let hits: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
            assert!(
                hits.is_empty(),
                "{name}: a token is in the server log:\n{}",
                hits.join("\n")
            );
        }
    }
}
