//! Public data kept per holder of a shared lock or a semaphore (`LOCK.ACQUIRE … SHARED|LIMIT n
//! DATA value`): each holder's own `data` in `LOCK.INFO`, replaced by its re-grant with data and
//! kept by one without, granted with a waiter's hold, observed for the holder with the highest
//! fence, kept across the switch between the holders' small and large forms, and carried
//! exactly through replicas (digests), DEBUG RELOAD, RDB and AOF restarts (with and without the
//! RDB preamble, rewritten or appended), DUMP/RESTORE, COPY, RENAME, MOVE and SWAPDB; counted in
//! MEMORY USAGE.

use crate::common::*;
use crate::observe::observe;
use redis::{Connection, Value};

/// Holders' tokens and data, in grant order.
type Listed = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Each live holder's token and data as `LOCK.INFO` lists them (in grant order); `None` for a
/// free key. A key with holders shows no top-level `data`.
fn holders_data(con: &mut Connection, key: &str) -> Option<Listed> {
    let reply = ok(con, &rcmd!("LOCK.INFO", key));
    if reply == Value::Nil {
        return None;
    }
    let pairs = field_pairs(&reply);
    let get = |pairs: &[(Vec<u8>, Value)], name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name.as_bytes())
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get(&pairs, "data"), None, "top-level data: {reply:?}");
    let Some(Value::Array(holders)) = get(&pairs, "holders") else {
        panic!("holders of {key}: {reply:?}");
    };
    let listed = holders.iter().map(|h| {
        let h = field_pairs(h);
        let token = as_bytes(&get(&h, "token").expect("token"));
        (token, get(&h, "data").map(|v| as_bytes(&v)))
    });
    Some(listed.collect())
}

/// `LOCK.ACQUIRE key token PX 60000 <mode…> [DATA data]`: the fence.
fn hold(con: &mut Connection, key: &str, token: &str, mode: &[&str], data: Option<&[u8]>) -> i64 {
    let mut cmd = rcmd!("LOCK.ACQUIRE", key, token, "PX", 60_000);
    for m in mode {
        cmd.arg(*m);
    }
    if let Some(d) = data {
        cmd.arg("DATA").arg(d);
    }
    let reply = ok(con, &cmd);
    parse_grant(&reply)
        .unwrap_or_else(|| panic!("{key} {token}: {reply:?}"))
        .1
}

type Expected = Vec<(&'static str, Listed)>;

/// A read/write lock and a semaphore with holders with and without data (binary, at its
/// longest), one without any data, and a large set (past the small form's size).
fn populate(con: &mut Connection) -> Expected {
    let long: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 256) as u8).collect();
    let mut out: Expected = Vec::new();
    let shared: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("r1", Some(b"10.0.0.1:8080".to_vec())),
        ("r2", None),
        ("r3", Some(b"\x00\r\n\xff".to_vec())),
    ];
    let sem: Vec<(&str, Option<Vec<u8>>)> = vec![("p1", None), ("p2", Some(long))];
    let plain: Vec<(&str, Option<Vec<u8>>)> = vec![("q1", None), ("q2", None)];
    let many: Vec<(String, Option<Vec<u8>>)> = (0..40)
        .map(|i| {
            (
                format!("m{i}"),
                (i % 3 != 0).then(|| format!("node-{i}").into_bytes()),
            )
        })
        .collect();
    for (key, mode, holds) in [
        ("h:shared", &["SHARED"][..], &shared),
        ("h:sem", &["LIMIT", "5"], &sem),
        ("h:plain", &["SHARED"], &plain),
    ] {
        for (token, data) in holds.iter() {
            hold(con, key, token, mode, data.as_deref());
        }
        let listed = holds
            .iter()
            .map(|(t, d)| (t.as_bytes().to_vec(), d.clone()));
        out.push((key, listed.collect()));
    }
    for (token, data) in &many {
        hold(con, "h:many", token, &["LIMIT", "100"], data.as_deref());
    }
    let listed = many.iter().map(|(t, d)| (t.as_bytes().to_vec(), d.clone()));
    out.push(("h:many", listed.collect()));
    out
}

#[track_caller]
fn assert_holders(con: &mut Connection, expected: &Expected, when: &str) {
    for (key, holders) in expected {
        let got = holders_data(con, key);
        assert_eq!(got.as_ref(), Some(holders), "{key} {when}");
    }
}

#[test]
fn each_holder_shows_its_own_data_replaced_by_a_regrant_and_kept_by_one_without() {
    let s = Server::start();
    let mut c = s.conn();
    for (key, mode) in [("rw", &["SHARED"][..]), ("sem", &["LIMIT", "3"])] {
        let f1 = hold(&mut c, key, "a", mode, Some(b"data-a"));
        let f2 = hold(&mut c, key, "b", mode, None);
        let expect = |a: &[u8], b: Option<&[u8]>| {
            Some(vec![
                (b"a".to_vec(), Some(a.to_vec())),
                (b"b".to_vec(), b.map(<[u8]>::to_vec)),
            ])
        };
        assert_eq!(holders_data(&mut c, key), expect(b"data-a", None), "{key}");
        // The highest fence's holder has no data: the observer sees none.
        assert_eq!(observe(&mut c, key), (f2, None), "{key}");
        // Re-grants: without DATA keeps the data, with DATA replaces it; the fence stays.
        assert_eq!(hold(&mut c, key, "a", mode, None), f1);
        assert_eq!(holders_data(&mut c, key), expect(b"data-a", None), "{key}");
        assert_eq!(hold(&mut c, key, "a", mode, Some(b"new-a")), f1);
        assert_eq!(hold(&mut c, key, "b", mode, Some(b"new-b")), f2);
        assert_eq!(
            holders_data(&mut c, key),
            expect(b"new-a", Some(b"new-b")),
            "{key}"
        );
        assert_eq!(observe(&mut c, key), (f2, Some(b"new-b".to_vec())));
        // Extend keeps it.
        assert_eq!(extend_px(&mut c, key, b"a", 90_000), 1);
        assert_eq!(
            holders_data(&mut c, key),
            expect(b"new-a", Some(b"new-b")),
            "{key}"
        );
        // The highest fence's holder leaves: the next one's data is observed.
        assert_eq!(release(&mut c, key, b"b"), 1);
        assert_eq!(observe(&mut c, key), (f1, Some(b"new-a".to_vec())));
    }
    // The highest fence, whatever the order of the leases.
    hold(&mut c, "order", "late-ending", &["SHARED"], Some(b"first"));
    let f = hold(&mut c, "order", "newest", &["SHARED"], Some(b"second"));
    assert_eq!(extend_px(&mut c, "order", b"late-ending", 600_000), 1);
    assert_eq!(observe(&mut c, "order"), (f, Some(b"second".to_vec())));
}

#[test]
fn a_waiter_for_a_shared_hold_or_a_place_is_granted_with_its_data() {
    let master = Server::start();
    let replica = Server::start_replica_of(&master);
    let mut m = master.conn();
    hold(&mut m, "w", "writer", &[], Some(b"writer-data"));
    // Queued one after the other: r0 first.
    let readers: Vec<Waiter> = (0..2)
        .map(|i| {
            let data = format!("reader-{i}");
            let options = ["SHARED", "DATA", &data];
            let w = spawn_waiter_with(&master, "w", &format!("r{i}"), 60_000, 10_000, &options);
            wait_waiters(&mut m, "w", i + 1);
            w
        })
        .collect();
    assert_eq!(release(&mut m, "w", b"writer"), 1);
    let fences: Vec<i64> = readers.iter().map(|w| w.recv().granted().1).collect();
    let expected = vec![
        (b"r0".to_vec(), Some(b"reader-0".to_vec())),
        (b"r1".to_vec(), Some(b"reader-1".to_vec())),
    ];
    assert_eq!(holders_data(&mut m, "w"), Some(expected.clone()));
    assert_eq!(
        observe(&mut m, "w"),
        (fences[1], Some(b"reader-1".to_vec()))
    );
    // A semaphore place handed over with the waiter's data.
    hold(&mut m, "s", "p0", &["LIMIT", "1"], Some(b"p0-data"));
    let waiter = spawn_waiter_with(
        &master,
        "s",
        "p1",
        60_000,
        10_000,
        &["LIMIT", "1", "DATA", "p1-data"],
    );
    wait_waiters(&mut m, "s", 1);
    assert_eq!(release(&mut m, "s", b"p0"), 1);
    waiter.recv().granted();
    let place = vec![(b"p1".to_vec(), Some(b"p1-data".to_vec()))];
    assert_eq!(holders_data(&mut m, "s"), Some(place.clone()));
    wait_replica_caught_up(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(holders_data(&mut r, "w"), Some(expected));
    assert_eq!(holders_data(&mut r, "s"), Some(place));
    let digest = |s: &Server| ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST"));
    assert_eq!(digest(&master), digest(&replica));
}

#[test]
fn holder_data_survives_replicas_reloads_restarts_and_restores() {
    for preamble in ["no", "yes"] {
        let mut s = Server::builder()
            .set("appendonly", "yes")
            .set("aof-use-rdb-preamble", preamble)
            .start();
        let replica = Server::start_replica_of(&s);
        let mut c = s.conn();
        let expected = populate(&mut c);
        // A re-grant that replaces data and an extend, replicated as the hold now is.
        hold(&mut c, "h:shared", "r2", &["SHARED"], Some(b"given-later"));
        assert_eq!(extend_px(&mut c, "h:shared", b"r1", 90_000), 1);
        let mut expected = expected;
        expected[0].1[1].1 = Some(b"given-later".to_vec());
        wait_replica_caught_up(&s, &replica);
        assert_holders(&mut replica.conn(), &expected, "on the replica");
        let digest = |s: &Server| ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST"));
        assert_eq!(digest(&s), digest(&replica), "digests, preamble {preamble}");
        drop(replica);

        // Data counts in MEMORY USAGE.
        let usage = |c: &mut Connection, k: &str| as_int(&ok(c, &rcmd!("MEMORY", "USAGE", k)));
        assert!(usage(&mut c, "h:sem") >= usage(&mut c, "h:plain") + 4096);

        ok(&mut c, &rcmd!("DEBUG", "RELOAD"));
        assert_holders(&mut c, &expected, "after DEBUG RELOAD");
        s.kill9_and_restart();
        let mut c = s.conn();
        let when = format!("after kill -9, AOF appended, preamble {preamble}");
        assert_holders(&mut c, &expected, &when);
        ok(&mut c, &rcmd!("BGREWRITEAOF"));
        s.wait_aof_rewrite_done();
        hold(&mut c, "h:after", "a1", &["SHARED"], Some(b"appended"));
        s.kill9_and_restart();
        let mut c = s.conn();
        let mut all = expected.clone();
        all.push((
            "h:after",
            vec![(b"a1".to_vec(), Some(b"appended".to_vec()))],
        ));
        let when = format!("after a rewrite, preamble {preamble}");
        assert_holders(&mut c, &all, &when);
        s.restart(Stop::Save);
        let mut c = s.conn();
        assert_holders(&mut c, &all, "after a restart");

        // DUMP/RESTORE, COPY, RENAME, MOVE and SWAPDB carry it.
        for (key, holders) in &expected {
            let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", key)));
            let restored = format!("{key}:restored");
            ok(
                &mut c,
                &rcmd!("RESTORE", &restored, 60_000, payload.as_slice()),
            );
            let copied = format!("{key}:copied");
            ok(&mut c, &rcmd!("COPY", key, &copied));
            let renamed = format!("{key}:renamed");
            ok(&mut c, &rcmd!("RENAME", &copied, &renamed));
            for k in [&restored, &renamed] {
                assert_eq!(holders_data(&mut c, k).as_ref(), Some(holders), "{k}");
            }
        }
        ok(&mut c, &rcmd!("MOVE", "h:many:renamed", 1));
        ok(&mut c, &rcmd!("SWAPDB", 0, 1));
        let many = &expected[3].1;
        assert_eq!(holders_data(&mut c, "h:many:renamed").as_ref(), Some(many));
        ok(&mut c, &rcmd!("SWAPDB", 0, 1));
        assert_eq!(holders_data(&mut c, "h:many:renamed"), None);
    }
}

#[test]
fn many_holders_keep_each_one_s_data_as_the_set_grows_and_shrinks() {
    let s = Server::start();
    let mut c = s.conn();
    let data = |i: usize| (i % 4 != 1).then(|| format!("{i}:").repeat(i + 1).into_bytes());
    let usage = |c: &mut Connection| as_int(&ok(c, &rcmd!("MEMORY", "USAGE", "big")));
    let mut sizes = Vec::new();
    for i in 0..60 {
        hold(
            &mut c,
            "big",
            &format!("t{i}"),
            &["SHARED"],
            data(i).as_deref(),
        );
        sizes.push(usage(&mut c));
        let want: Vec<_> = (0..=i)
            .map(|j| (format!("t{j}").into_bytes(), data(j)))
            .collect();
        assert_eq!(holders_data(&mut c, "big"), Some(want), "{} holders", i + 1);
    }
    assert!(
        sizes.windows(2).all(|w| w[1] >= w[0]) && sizes[59] > sizes[0] + 1000,
        "MEMORY USAGE grows: {sizes:?}"
    );
    for i in 0..57 {
        assert_eq!(release(&mut c, "big", format!("t{i}").as_bytes()), 1);
    }
    let want: Vec<_> = (57..60)
        .map(|j| (format!("t{j}").into_bytes(), data(j)))
        .collect();
    assert_eq!(holders_data(&mut c, "big"), Some(want));
    assert_eq!(observe(&mut c, "big").1, data(59));
}

/// `LOCK.ACQUIREALL … SHARED DATA`: every key's hold keeps the data, as one `LOCK.ACQUIRE` each
/// would, and on the replica too.
#[test]
fn a_multi_key_shared_grant_keeps_its_data_on_every_key() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let grant_all = |c: &mut Connection, token: &str, data: &str| {
        ok(
            c,
            &rcmd!(
                "LOCK.ACQUIREALL",
                2,
                "ma",
                "mb",
                token,
                "PX",
                60_000,
                "SHARED",
                "DATA",
                data
            ),
        )
    };
    grant_all(&mut c, "r1", "reader-1");
    grant_all(&mut c, "r2", "reader-2");
    let want: Listed = vec![
        (b"r1".to_vec(), Some(b"reader-1".to_vec())),
        (b"r2".to_vec(), Some(b"reader-2".to_vec())),
    ];
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    for key in ["ma", "mb"] {
        assert_eq!(holders_data(&mut c, key), Some(want.clone()), "{key}");
        assert_eq!(
            holders_data(&mut rc, key),
            Some(want.clone()),
            "{key} on the replica"
        );
    }
}
