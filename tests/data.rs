//! Public data kept with an exclusive hold (holders of shared locks and semaphores: `holders`) (SPEC "Election and observation": `LOCK.ACQUIRE …
//! DATA value`): shown by `LOCK.INFO`, replaced by a re-grant that gives some and kept by one
//! that does not, handed over with a waiter's grant, and carried exactly through every path a
//! lock takes: replicas, DEBUG RELOAD, RDB and AOF restarts (with and without the RDB preamble,
//! rewritten or appended), DUMP/RESTORE, COPY; counted in MEMORY USAGE and in digests.

use crate::common::*;
use redis::{Connection, Value};

/// The `data` field of a LOCK.INFO reply (top level, and the exclusive holder's), if shown.
fn data_of(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    let reply = ok(con, &rcmd!("LOCK.INFO", key));
    let pairs = field_pairs(&reply);
    let get = |pairs: &[(Vec<u8>, Value)], name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name.as_bytes())
            .map(|(_, v)| v.clone())
    };
    let top = get(&pairs, "data").map(|v| as_bytes(&v));
    let holders = match get(&pairs, "holders") {
        Some(Value::Array(h)) => h,
        other => panic!("holders of {key}: {other:?}"),
    };
    assert_eq!(holders.len(), 1, "{reply:?}");
    let holder = get(&field_pairs(&holders[0]), "data").map(|v| as_bytes(&v));
    assert_eq!(
        top, holder,
        "the holder's data and the top level's differ: {reply:?}"
    );
    top
}

fn acquire_data(con: &mut Connection, key: &str, token: &str, data: &[u8]) -> i64 {
    let reply = ok(
        con,
        &rcmd!("LOCK.ACQUIRE", key, token, "PX", 60_000, "DATA", data),
    );
    parse_grant(&reply)
        .unwrap_or_else(|| panic!("{key}: {reply:?}"))
        .1
}

/// Locks with and without data, binary data at its longest, a handed-over one.
fn populate(con: &mut Connection) -> Vec<(&'static str, Option<Vec<u8>>)> {
    let long: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 256) as u8).collect();
    acquire_data(con, "d:plain", "t1", b"10.0.0.1:8080");
    acquire_data(con, "d:long", "t2", &long);
    acquire_data(con, "d:binary", "t3", b"\x00\r\n\xff");
    grant(con, "d:none", b"t4", 60_000);
    vec![
        ("d:plain", Some(b"10.0.0.1:8080".to_vec())),
        ("d:long", Some(long)),
        ("d:binary", Some(b"\x00\r\n\xff".to_vec())),
        ("d:none", None),
    ]
}

fn assert_data(con: &mut Connection, expected: &[(&str, Option<Vec<u8>>)], when: &str) {
    for (key, data) in expected {
        assert_eq!(&data_of(con, key), data, "{key} {when}");
    }
}

#[test]
fn data_is_shown_replaced_by_a_regrant_and_bounded() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire_data(&mut c, "k", "tok", b"host-a");
    assert_eq!(data_of(&mut c, "k"), Some(b"host-a".to_vec()));
    // A re-grant without DATA keeps it; with DATA replaces it; the fence stays.
    assert_eq!(grant(&mut c, "k", b"tok", 60_000).1, fence);
    assert_eq!(data_of(&mut c, "k"), Some(b"host-a".to_vec()));
    assert_eq!(acquire_data(&mut c, "k", "tok", b"host-b"), fence);
    assert_eq!(data_of(&mut c, "k"), Some(b"host-b".to_vec()));
    // Another token is refused and changes nothing.
    let refused = ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "k", "other", "PX", 1000, "DATA", "x"),
    );
    assert_eq!(refused, Value::Nil);
    assert_eq!(data_of(&mut c, "k"), Some(b"host-b".to_vec()));
    // Extend keeps it.
    assert_eq!(extend_px(&mut c, "k", b"tok", 90_000), 1);
    assert_eq!(data_of(&mut c, "k"), Some(b"host-b".to_vec()));
    // Released and granted again without data: none shown.
    assert_eq!(release(&mut c, "k", b"tok"), 1);
    grant(&mut c, "k", b"tok2", 60_000);
    assert_eq!(data_of(&mut c, "k"), None);

    for (args, wanted) in [
        (
            vec!["DATA", ""],
            "ERR invalid DATA: must be 1 to 4096 bytes",
        ),
        (vec!["DATA"], "DATA"),
        (vec!["DATA", "a", "DATA", "b"], "more than once"),
    ] {
        let mut cmd = rcmd!("LOCK.ACQUIRE", "fresh", "t", "PX", 1000);
        for a in &args {
            cmd.arg(*a);
        }
        let e = err(&mut c, &cmd);
        assert!(e.contains(wanted), "{args:?}: {e}");
        assert!(!exists(&mut c, "fresh"), "{args:?} changed the key");
    }
    let too_long = vec![b'x'; 4097];
    let e = err(
        &mut c,
        &rcmd!(
            "LOCK.ACQUIRE",
            "fresh",
            "t",
            "PX",
            1000,
            "DATA",
            too_long.as_slice()
        ),
    );
    assert!(e.starts_with("ERR invalid DATA"), "{e}");
    assert!(!exists(&mut c, "fresh"));

    // RESP3 shows it as a bulk string in the map.
    let mut r3 = s.conn_resp3();
    acquire_data(&mut r3, "k3", "tok", b"v");
    assert_eq!(data_of(&mut r3, "k3"), Some(b"v".to_vec()));
}

#[test]
fn a_waiter_is_handed_the_lock_with_its_own_data() {
    let master = Server::start();
    let replica = Server::start_replica_of(&master);
    let mut m = master.conn();
    acquire_data(&mut m, "w", "first", b"leader-1");
    let waiter = spawn_waiter_with(
        &master,
        "w",
        "second",
        60_000,
        10_000,
        &["DATA", "leader-2"],
    );
    wait_waiters(&mut m, "w", 1);
    assert_eq!(release(&mut m, "w", b"first"), 1);
    let (token, _) = waiter.recv().granted();
    assert_eq!(token, b"second");
    assert_eq!(data_of(&mut m, "w"), Some(b"leader-2".to_vec()));
    // A waiter without DATA gets a lock without data.
    let plain = spawn_waiter(&master, "w", "third", 60_000, 10_000);
    wait_waiters(&mut m, "w", 1);
    assert_eq!(release(&mut m, "w", b"second"), 1);
    plain.recv().granted();
    assert_eq!(data_of(&mut m, "w"), None);
    wait_replica_caught_up(&master, &replica);
    assert_eq!(data_of(&mut replica.conn(), "w"), None);
    let digest = |s: &Server| ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST"));
    assert_eq!(digest(&master), digest(&replica));
}

/// A handoff to a hold that takes as many bytes as the one it ends rewrites the lock where it
/// stands, whatever each one's layout: a 13-byte token without data, a 1-byte token with 10
/// bytes of data and a 13-byte token again take 23 bytes each. Each new holder's token, fence
/// and data (or none) read back exactly, and so on a replica and after DEBUG RELOAD.
#[test]
fn handoffs_between_holds_of_one_size_are_exact() {
    let master = Server::start();
    let replica = Server::start_replica_of(&master);
    let mut m = master.conn();
    let first = acquire(&mut m, "s", b"aaaaaaaaaaaaa", 60_000)
        .expect("free")
        .1;
    let usage = |c: &mut Connection| as_int(&ok(c, &rcmd!("MEMORY", "USAGE", "s")));
    let before = usage(&mut m);
    let steps = [
        ("b", Some("cccccccccc")),
        ("ddddddddddddd", None),
        ("e", Some("ffffffffff")),
    ];
    let mut holder = "aaaaaaaaaaaaa";
    let mut fence = first;
    for (token, data) in steps {
        let options = match data {
            Some(d) => vec!["DATA", d],
            None => vec![],
        };
        let waiter = spawn_waiter_with(&master, "s", token, 60_000, 10_000, &options);
        wait_waiters(&mut m, "s", 1);
        assert_eq!(release(&mut m, "s", holder.as_bytes()), 1);
        let (got, got_fence) = waiter.granted();
        assert_eq!(got, token.as_bytes());
        assert!(got_fence > fence, "{got_fence} after {fence}");
        let now = info_some(&mut m, "s");
        assert_eq!(
            (now.token.as_slice(), now.fence),
            (token.as_bytes(), got_fence)
        );
        assert_eq!(
            data_of(&mut m, "s").as_deref(),
            data.map(str::as_bytes),
            "after the handoff to {token}"
        );
        assert_eq!(usage(&mut m), before, "the same bytes, the same block");
        holder = token;
        fence = got_fence;
    }
    wait_replica_caught_up(&master, &replica);
    let digest = |s: &Server| ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST"));
    assert_eq!(digest(&master), digest(&replica));
    assert_eq!(
        data_of(&mut replica.conn(), "s").as_deref(),
        Some(&b"ffffffffff"[..])
    );
    ok(&mut m, &rcmd!("DEBUG", "RELOAD"));
    let reloaded = info_some(&mut m, "s");
    assert_eq!(
        (reloaded.token.as_slice(), reloaded.fence),
        (&b"e"[..], fence)
    );
    assert_eq!(data_of(&mut m, "s").as_deref(), Some(&b"ffffffffff"[..]));
}

#[test]
fn data_survives_replicas_reloads_restarts_and_restores() {
    for preamble in ["no", "yes"] {
        let mut s = Server::builder()
            .set("appendonly", "yes")
            .set("aof-use-rdb-preamble", preamble)
            .start();
        let replica = Server::start_replica_of(&s);
        let mut c = s.conn();
        let expected = populate(&mut c);
        wait_replica_caught_up(&s, &replica);
        assert_data(&mut replica.conn(), &expected, "on the replica");
        let digest = |s: &Server| ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST"));
        assert_eq!(digest(&s), digest(&replica), "digests, preamble {preamble}");
        drop(replica);

        // Data counts in MEMORY USAGE and in the key's digest.
        let usage = |c: &mut Connection, k: &str| as_int(&ok(c, &rcmd!("MEMORY", "USAGE", k)));
        assert!(usage(&mut c, "d:long") >= usage(&mut c, "d:none") + 4096);
        // The same token and fence with other data: another digest.
        let value_digest = |c: &mut Connection| ok(c, &rcmd!("DEBUG", "DIGEST-VALUE", "d:plain"));
        let before = value_digest(&mut c);
        acquire_data(&mut c, "d:plain", "t1", b"elsewhere");
        assert_ne!(value_digest(&mut c), before, "data is not in the digest");
        acquire_data(&mut c, "d:plain", "t1", b"10.0.0.1:8080");
        assert_eq!(value_digest(&mut c), before);

        ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
        assert_data(&mut c, &expected, "after DEBUG RELOAD");
        // The AOF as appended, then rewritten with more appended, each read back after kill -9.
        s.kill9_and_restart();
        let mut c = s.conn();
        assert_data(
            &mut c,
            &expected,
            &format!("after kill -9, AOF appended, preamble {preamble}"),
        );
        ok(&mut c, &rcmd!("BGREWRITEAOF"));
        s.wait_aof_rewrite_done();
        acquire_data(&mut c, "d:after", "t5", b"appended");
        s.kill9_and_restart();
        let mut c = s.conn();
        let mut all = expected.clone();
        all.push(("d:after", Some(b"appended".to_vec())));
        assert_data(
            &mut c,
            &all,
            &format!("after a rewrite, preamble {preamble}"),
        );
        s.restart(Stop::Save);
        let mut c = s.conn();
        assert_data(&mut c, &all, "after a restart");

        // DUMP/RESTORE and COPY carry it.
        for (key, data) in &expected {
            let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", key)));
            let copy = format!("{key}:restored");
            ok(&mut c, &rcmd!("RESTORE", &copy, 60_000, payload.as_slice()));
            assert_eq!(&data_of(&mut c, &copy), data, "{copy}");
            let copied = format!("{key}:copied");
            ok(&mut c, &rcmd!("COPY", key, &copied));
            assert_eq!(&data_of(&mut c, &copied), data, "{copied}");
        }
    }
}

mod holders;

/// `DEBUG DIGEST-VALUE` covers each holder's data, in every kind: the same lock restored from
/// its `DUMP` payload digests the same, and restored with one byte of the data changed (same
/// length, the payload resealed with a valid CRC) digests otherwise. (A replica compared with
/// its master cannot show it: both would leave the data out alike.)
#[test]
fn digests_cover_every_holders_data() {
    // Uncompressed payloads, so that the data is found in them as given.
    let s = Server::builder().set("rdbcompression", "no").start();
    let mut c = s.conn();
    let px = |c: &mut Connection, key: &str, token: &str, extra: &[&str]| {
        let mut cmd = rcmd!("LOCK.ACQUIRE", key, token, "PX", 60_000);
        for arg in extra {
            cmd.arg(*arg);
        }
        assert!(parse_grant(&ok(c, &cmd)).is_some(), "{key} {token}");
    };
    px(&mut c, "g:x", "t1", &["DATA", "data-AAAA"]);
    px(&mut c, "g:s", "t1", &["SHARED", "DATA", "data-AAAA"]);
    px(&mut c, "g:s", "t2", &["SHARED"]);
    px(&mut c, "g:m", "t1", &["LIMIT", "3", "DATA", "data-AAAA"]);
    px(&mut c, "g:m", "t2", &["LIMIT", "3", "DATA", "other"]);
    let digest = |c: &mut Connection, key: &str| ok(c, &rcmd!("DEBUG", "DIGEST-VALUE", key));
    for key in ["g:x", "g:s", "g:m"] {
        let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", key)));
        let at = payload
            .windows(9)
            .position(|w| w == b"data-AAAA")
            .unwrap_or_else(|| panic!("{key}: the data is not in {payload:?}"));
        let mut changed = payload[..payload.len() - 8].to_vec();
        changed[at + 5] = b'B';
        let crc = crate::restore_fuzz::crc64(&changed);
        changed.extend_from_slice(&crc.to_le_bytes());
        let (same, other) = (format!("{key}:same"), format!("{key}:other"));
        // The key's expiry as the original's: a digest tells a key with one from a key without.
        let at_ms = as_int(&ok(&mut c, &rcmd!("PEXPIRETIME", key))).max(0);
        ok(&mut c, &rcmd!("RESTORE", &same, at_ms, payload, "ABSTTL"));
        ok(&mut c, &rcmd!("RESTORE", &other, at_ms, changed, "ABSTTL"));
        assert_eq!(digest(&mut c, key), digest(&mut c, &same), "{key}");
        assert_ne!(
            digest(&mut c, key),
            digest(&mut c, &other),
            "{key}: a holder's data is not in the digest"
        );
    }
}

/// The data of the one holder of a shared lock or a semaphore, as `LOCK.INFO` shows it.
fn holder_data(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    let reply = ok(con, &rcmd!("LOCK.INFO", key));
    let pairs = field_pairs(&reply);
    let holders = match pairs.iter().find(|(k, _)| k == b"holders") {
        Some((_, Value::Array(h))) if h.len() == 1 => h.clone(),
        _ => panic!("{key}: one holder expected, got {} fields", pairs.len()),
    };
    field_pairs(&holders[0])
        .into_iter()
        .find(|(k, _)| k == b"data")
        .map(|(_, v)| as_bytes(&v))
}

/// A renewal does not resend a holder's data: `LOCK.EXTEND` and a re-grant without `DATA` of a
/// shared hold or a semaphore place are written to the AOF and replicas without it, and the
/// replica and the AOF replayed after `kill -9` keep the data of that grant; a re-grant with
/// `DATA` writes the new data once.
#[test]
fn renewals_do_not_resend_the_data() {
    let mut s = Server::builder().set("appendonly", "yes").start();
    let replica = Server::start_replica_of(&s);
    let mut c = s.conn();
    let data: Vec<u8> = (0..4000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let keys = [("r:s", vec!["SHARED"]), ("r:m", vec!["LIMIT", "2"])];
    let acquire = |c: &mut Connection, key: &str, kind: &[&str], data: Option<&[u8]>| {
        let mut cmd = rcmd!("LOCK.ACQUIRE", key, "t", "PX", 60_000);
        for arg in kind {
            cmd.arg(*arg);
        }
        if let Some(d) = data {
            cmd.arg("DATA").arg(d);
        }
        assert!(parse_grant(&ok(c, &cmd)).is_some(), "{key}");
    };
    for (key, kind) in &keys {
        acquire(&mut c, key, kind, Some(&data));
        for _ in 0..5 {
            assert_eq!(
                as_int(&ok(&mut c, &rcmd!("LOCK.EXTEND", key, "t", "PX", 60_000))),
                1
            );
        }
        acquire(&mut c, key, kind, None);
    }
    let written = |s: &Server, what: &[u8]| {
        let aof = s.aof_text().into_bytes();
        aof.windows(what.len()).filter(|w| *w == what).count()
    };
    assert_eq!(written(&s, &data), 2, "the data written once per grant");
    wait_replica_caught_up(&s, &replica);
    let mut rc = replica.conn();
    for (key, _) in &keys {
        assert_eq!(
            holder_data(&mut rc, key),
            Some(data.clone()),
            "{key} on the replica"
        );
    }
    let digest = |s: &Server| ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST"));
    assert_eq!(digest(&s), digest(&replica));
    // New data is written, and replaces the old on the replica.
    acquire(&mut c, "r:s", &["SHARED"], Some(b"new-data"));
    assert_eq!(written(&s, b"new-data"), 1);
    wait_replica_caught_up(&s, &replica);
    assert_eq!(holder_data(&mut rc, "r:s"), Some(b"new-data".to_vec()));
    assert_eq!(digest(&s), digest(&replica));
    drop(replica);
    s.kill9_and_restart();
    let mut c = s.conn();
    assert_eq!(holder_data(&mut c, "r:s"), Some(b"new-data".to_vec()));
    assert_eq!(
        holder_data(&mut c, "r:m"),
        Some(data),
        "after the AOF's replay"
    );
}
