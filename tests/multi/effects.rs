//! What a multi-key grant leaves behind: one atomic effect on replicas and in the AOF, the same
//! data after a restart and `DEBUG RELOAD`; and the key specs that let the server find every
//! key (`COMMAND GETKEYS`, ACL key patterns, Cluster slots).

use std::time::Duration;

use super::*;

fn digest(c: &mut Connection) -> Value {
    ok(c, &rcmd!("DEBUG", "DIGEST"))
}

/// The grants of all keys reach the replica and the AOF inside one `MULTI`/`EXEC`; the
/// replica, a restart from the AOF and `DEBUG RELOAD` have the same data (digests equal).
#[test]
fn the_grant_of_all_keys_is_one_effect_on_replicas_and_in_the_aof() {
    let mut s = Server::builder()
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .start();
    let r = Server::start_replica_of(&s);
    let mut c = s.conn();
    let before = s.aof_text().len();
    acquire_all(&mut c, &["a", "b", "c"], "me", 60_000).unwrap();
    let written = s.aof_text()[before..].to_string();
    let multi = written.find("MULTI").expect("MULTI around the grants");
    let exec = written.find("EXEC").expect("EXEC after the grants");
    let applies: Vec<usize> = written
        .match_indices("LOCK._APPLY")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(applies.len(), 3, "{written:?}");
    assert!(
        applies.iter().all(|&i| multi < i && i < exec),
        "{written:?}"
    );
    ok(
        &mut c,
        &acquire_all_cmd(&["s1", "s2"], "reader", 60_000, &["SHARED"]),
    );
    acquire_all(&mut c, &["a", "b", "d"], "me", 90_000).unwrap();
    assert_eq!(release_all(&mut c, &["c", "s2"], "me"), 1);
    wait_replica_caught_up(&s, &r);
    let here = digest(&mut c);
    assert_eq!(digest(&mut r.conn()), here, "the replica");
    assert_eq!(holder(&mut r.conn(), "d"), Some(b"me".to_vec()));
    ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
    assert_eq!(digest(&mut c), here, "after DEBUG RELOAD");
    s.kill9_and_restart();
    assert_eq!(digest(&mut s.conn()), here, "after a restart from the AOF");
}

/// `COMMAND GETKEYS` finds every key; a user whose key pattern allows only some of them gets
/// `NOPERM` and nothing changes.
#[test]
fn every_key_is_a_key_to_the_server_and_to_acl() {
    let s = Server::start();
    let mut c = s.conn();
    let keys = ok(
        &mut c,
        &rcmd!(
            "COMMAND",
            "GETKEYS",
            "LOCK.ACQUIREALL",
            3,
            "a",
            "b",
            "c",
            "t",
            "PX",
            10
        ),
    );
    assert_eq!(
        keys,
        Value::Array(
            ["a", "b", "c"]
                .map(|k| Value::BulkString(k.into()))
                .to_vec()
        )
    );
    let keys = ok(
        &mut c,
        &rcmd!("COMMAND", "GETKEYS", "LOCK.RELEASEALL", 2, "a", "b", "t"),
    );
    assert_eq!(
        keys,
        Value::Array(["a", "b"].map(|k| Value::BulkString(k.into())).to_vec())
    );
    ok(
        &mut c,
        &rcmd!("ACL", "SETUSER", "app", "on", ">pw", "+@all", "~app:*"),
    );
    let mut app = s.conn_as("app", "pw");
    let e = err(
        &mut app,
        &acquire_all_cmd(&["app:1", "other", "app:2"], "t", 60_000, &[]),
    );
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(dbsize(&mut c), 0);
    acquire_all(&mut app, &["app:1", "app:2"], "t", 60_000).unwrap();
    let e = err(
        &mut app,
        &rcmd!("LOCK.RELEASEALL", 2, "app:1", "other", "t"),
    );
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(holder(&mut c, "app:1"), Some(b"t".to_vec()));
    // The token is kept out of SLOWLOG like LOCK.ACQUIRE's.
    ok(
        &mut c,
        &rcmd!("CONFIG", "SET", "slowlog-log-slower-than", 0),
    );
    acquire_all(&mut c, &["z1", "z2"], "secret-token", 1000).unwrap();
    let log = format!("{:?}", ok(&mut c, &rcmd!("SLOWLOG", "GET", 5)));
    assert!(!log.contains("secret-token"), "{log}");
}

/// In Cluster, keys in different slots answer `CROSSSLOT`; keys sharing a hash tag work.
#[test]
fn in_cluster_all_keys_share_one_slot() {
    let s = Server::builder().cluster_enabled().start();
    let mut c = s.conn();
    ok(&mut c, &rcmd!("CLUSTER", "ADDSLOTSRANGE", 0, 16383));
    wait_until("cluster_state:ok", Duration::from_secs(10), || {
        String::from_utf8_lossy(&as_bytes(&ok(&mut c, &rcmd!("CLUSTER", "INFO"))))
            .contains("cluster_state:ok")
    });
    let e = err(
        &mut c,
        &acquire_all_cmd(&["{u}:a", "other"], "t", 60_000, &[]),
    );
    assert!(e.starts_with("CROSSSLOT"), "{e}");
    assert_eq!(dbsize(&mut c), 0);
    acquire_all(&mut c, &["{u}:a", "{u}:b"], "t", 60_000).unwrap();
    let e = err(&mut c, &rcmd!("LOCK.RELEASEALL", 2, "{u}:a", "other", "t"));
    assert!(e.starts_with("CROSSSLOT"), "{e}");
    assert_eq!(release_all(&mut c, &["{u}:a", "{u}:b"], "t"), 2);
}

/// On a cluster of three masters, a multi-key command sent to the node that does not serve its
/// keys' slot is redirected (`MOVED`) to the one that does, and is served there.
#[test]
fn in_cluster_the_keys_route_the_command_to_their_node() {
    use crate::cluster::{conn_to, key_per_master, key_slot, redirect, Cluster};
    let c = Cluster::start(3, 0);
    for (m, key) in key_per_master(&c, "mk:") {
        let keys = [format!("{{{key}}}:a"), format!("{{{key}}}:b")];
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let other = c.masters().into_iter().find(|&o| o != m).unwrap();
        let owner_port = c.nodes[m].port();
        let mut wrong = conn_to(c.nodes[other].port());
        let e = run(&mut wrong, &acquire_all_cmd(&names, "t", 60_000, &[])).unwrap_err();
        let (kind, slot, to) = redirect(&e).expect("a redirect");
        assert_eq!(
            (kind.as_str(), slot, to),
            ("MOVED", key_slot(&key), owner_port)
        );
        let mut right = conn_to(owner_port);
        assert_eq!(
            acquire_all(&mut right, &names, "t", 60_000).unwrap().len(),
            2
        );
        assert_eq!(release_all(&mut right, &names, "t"), 2);
    }
}
