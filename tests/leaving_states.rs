//! Many waiters whose connections close together (more than are let go at once, so their
//! handles are released a batch per timer pass) while the server cannot write: during a client
//! pause, as it becomes a replica, as it reloads its data. Their handles are all released
//! (`waiters_leaving` settles to 0, no blocked client is left), the queues keep only those who
//! stayed, and nothing is granted to a gone client.

use std::io::Write;
use std::time::Duration;

use crate::common::*;
use crate::resources::used_memory;

/// More than the 64 handles released at once between two timer passes.
const LEAVING: usize = 200;

/// A waiter's command: every other one for both keys at once.
fn waiter_command(i: usize) -> Vec<String> {
    let t = format!("gone{i}");
    let v: Vec<&str> = match i % 2 {
        0 => vec![
            "LOCK.ACQUIREALL",
            "2",
            "q",
            "r",
            &t,
            "PX",
            "60000",
            "BLOCK",
            "0",
        ],
        _ => vec!["LOCK.ACQUIRE", "q", &t, "PX", "60000", "BLOCK", "0"],
    };
    v.into_iter().map(String::from).collect()
}

/// A server where `holder` holds `q` and `r`, `LEAVING` waiters queue on them, then one that
/// stays (for both keys, behind them all): the server, the leaving connections, the stayer.
fn queued() -> (Server, Vec<RawConn>, Waiter, i64) {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "q", b"holder", 60_000);
    grant(&mut c, "r", b"holder", 60_000);
    let memory = used_memory(&s);
    let mut leaving = Vec::new();
    for i in 0..LEAVING {
        let mut w = RawConn::connect(&s);
        w.send(&waiter_command(i));
        leaving.push(w);
    }
    wait_waiters(&mut c, "q", LEAVING as i64);
    let con = s.conn();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let stayer = spawn_blocked(
        con,
        rcmd!(
            "LOCK.ACQUIREALL",
            2,
            "q",
            "r",
            "stayer",
            "PX",
            60_000,
            "BLOCK",
            0
        ),
    );
    wait_waiters(&mut c, "q", LEAVING as i64 + 1);
    (s, leaving, stayer, memory)
}

/// Closes the connections, then sends `commands` (one write) on a connection of its own, and
/// reads their replies.
fn close_then(s: &Server, leaving: Vec<RawConn>, commands: &[&[&str]]) -> RawConn {
    for w in leaving {
        w.close();
    }
    let mut admin = RawConn::connect(s);
    admin
        .stream()
        .write_all(&resp_commands(commands))
        .expect("write");
    for _ in commands {
        let reply = admin.read().expect("a reply");
        assert!(!matches!(reply, Resp::Error(_)), "{reply:?}");
    }
    admin
}

/// Waits until `waiters` waits are left, every closed one's handle released, and the memory
/// they held (their handles, the server's temporary clients) back near where it was before
/// they came (`memory`).
#[track_caller]
fn settled(s: &Server, waiters: i64, memory: i64) {
    wait_until(
        "the closed waits to be let go",
        Duration::from_secs(30),
        || {
            let info = s.info_text("redislock");
            let blocked: i64 = s
                .info_field("clients", "blocked_clients")
                .unwrap()
                .parse()
                .unwrap();
            stat_in(&info, "waiters") == waiters
                && stat_in(&info, "waiters_leaving") == 0
                && blocked == waiters
        },
    );
    wait_until(
        "the closed waits' memory to be freed",
        Duration::from_secs(30),
        || used_memory(s) - memory < 1_000_000,
    );
}

/// The stayer is granted both keys, and nobody else was granted anything.
#[track_caller]
fn stayer_granted(s: &Server, stayer: &Waiter) {
    match stayer.recv().reply {
        Ok(redis::Value::Array(items)) => assert_eq!(as_bytes(&items[0]), b"stayer"),
        other => panic!("the stayer should be granted, got {other:?}"),
    }
    let mut c = s.conn();
    for k in ["q", "r"] {
        let i = info_some(&mut c, k);
        assert_eq!((i.token.as_slice(), i.waiters), (&b"stayer"[..], 0), "{k}");
    }
    assert_eq!(stat(s, "handoffs"), 1, "one handoff, to the stayer");
    assert_eq!(stat(s, "waiters"), 0);
    assert_eq!(stat(s, "waits"), LEAVING as i64 + 1);
}

/// During `CLIENT PAUSE WRITE` the closed waits are let go (that writes nothing); the leases
/// that end meanwhile are handed to the stayer at the pause's end, not to a gone client.
#[test]
fn waiters_leaving_during_client_pause_write_are_let_go() {
    let (s, leaving, stayer, memory) = queued();
    let _admin = close_then(
        &s,
        leaving,
        &[
            &["LOCK.EXTEND", "q", "holder", "PX", "300"],
            &["LOCK.EXTEND", "r", "holder", "PX", "300"],
            &["CLIENT", "PAUSE", "60000", "WRITE"],
        ],
    );
    settled(&s, 1, memory);
    let mut c = s.conn();
    wait_until("the leases to end", Duration::from_secs(10), || {
        pttl(&mut c, "q") == -2 || info(&mut c, "q").is_some_and(|i| i.ttl <= 0)
    });
    assert!(stayer.try_recv().is_none(), "granted during the pause");
    assert_eq!(stat(&s, "handoffs"), 0);
    ok(&mut c, &rcmd!("CLIENT", "UNPAUSE"));
    stayer_granted(&s, &stayer);
}

/// During `CLIENT PAUSE ALL` (nothing can be asked meanwhile): once it ends, the closed waits
/// are all let go and the stayer has both keys.
#[test]
fn waiters_leaving_during_client_pause_all_are_let_go() {
    let (s, leaving, stayer, memory) = queued();
    let paused_at = std::time::Instant::now();
    let _admin = close_then(
        &s,
        leaving,
        &[
            &["LOCK.EXTEND", "q", "holder", "PX", "200"],
            &["LOCK.EXTEND", "r", "holder", "PX", "200"],
            &["CLIENT", "PAUSE", "1000", "ALL"],
        ],
    );
    let answer = stayer.recv();
    let at = answer.at.duration_since(paused_at);
    assert!(
        at >= Duration::from_millis(950),
        "granted {at:?} after the pause was sent, during the pause"
    );
    let mut c = s.conn();
    for k in ["q", "r"] {
        assert_eq!(info_some(&mut c, k).token, b"stayer", "{k}");
    }
    settled(&s, 0, memory);
    assert_eq!(stat(&s, "handoffs"), 1);
}

/// The server becomes a replica as the waiters' connections close: the stayer is answered
/// with an error, every closed wait is let go, and the replica has exactly its master's data.
#[test]
fn waiters_leaving_as_the_server_becomes_a_replica_are_let_go() {
    let (s, leaving, stayer, memory) = queued();
    let master = Server::start();
    let port = master.port().to_string();
    let _admin = close_then(&s, leaving, &[&["REPLICAOF", "127.0.0.1", &port]]);
    let e = stayer.recv().error().to_string();
    assert!(
        e.starts_with("READONLY") || e.starts_with("UNBLOCKED"),
        "{e}"
    );
    settled(&s, 0, memory);
    s.wait_info("replication", "master_link_status", "up");
    let mut c = s.conn();
    assert_eq!(dbsize(&mut c), 0, "nothing granted, the master's data only");
    assert_eq!(stat(&s, "handoffs"), 0);
}

/// `DEBUG RELOAD` as the waiters' connections close: the closed waits are let go after the
/// reload, the stayer keeps its place and is served when the holder releases.
#[test]
fn waiters_leaving_across_a_reload_are_let_go() {
    let (s, leaving, stayer, memory) = queued();
    let _admin = close_then(&s, leaving, &[&["DEBUG", "RELOAD"]]);
    settled(&s, 1, memory);
    let mut c = s.conn();
    assert_eq!(waiters_of(&mut c, "q"), 1);
    assert_eq!(waiters_of(&mut c, "r"), 1);
    assert!(stayer.try_recv().is_none());
    assert_eq!(
        as_int(&ok(
            &mut c,
            &rcmd!("LOCK.RELEASEALL", 2, "q", "r", "holder")
        )),
        2
    );
    stayer_granted(&s, &stayer);
}
