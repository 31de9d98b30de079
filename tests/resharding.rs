//! Resharding with guarded writes and fences (SPEC "Operations"): while `MIGRATE` moves a slot's
//! keys in batches, a guard (`LOCK.CALL`, `LOCK.FENCE`) whose keys the migration splits between
//! the two nodes runs nothing and answers `TRYAGAIN`, on either node; once the slot has moved,
//! the guards work on the new node with every write kept, and the new node's fences exceed every
//! fence granted for the slot's names before the move.

use crate::cluster::{key_slot, Cluster, Router};
use crate::common::*;
use redis::{Connection, Value};

const SETTLE: std::time::Duration = std::time::Duration::from_secs(20);
const SPLIT: &str = "TRYAGAIN Multiple keys request during rehashing of slot";

/// The slot of `tag` moving from its owner to another master, keys moved by hand.
pub(crate) struct Move {
    pub(crate) slot: u16,
    pub(crate) src: usize,
    pub(crate) dst: usize,
    pub(crate) sp: u16,
    pub(crate) dp: u16,
}

impl Move {
    pub(crate) fn start(c: &Cluster, tag: &str) -> Move {
        let slot = key_slot(tag);
        let src = c.owner(slot);
        let dst = *c.masters().iter().find(|&&m| m != src).unwrap();
        Move {
            slot,
            src,
            dst,
            sp: c.nodes[src].port(),
            dp: c.nodes[dst].port(),
        }
    }

    pub(crate) fn begin(&self, c: &Cluster) {
        let (src_id, dst_id) = (&c.ids[self.src], &c.ids[self.dst]);
        let mut dc = c.nodes[self.dst].conn();
        let mut sc = c.nodes[self.src].conn();
        ok(
            &mut dc,
            &rcmd!("CLUSTER", "SETSLOT", self.slot, "IMPORTING", src_id),
        );
        ok(
            &mut sc,
            &rcmd!("CLUSTER", "SETSLOT", self.slot, "MIGRATING", dst_id),
        );
    }

    pub(crate) fn migrate(&self, c: &Cluster, keys: &[&str]) {
        let mut cmd = rcmd!("MIGRATE", "127.0.0.1", self.dp, "", 0, 5_000, "KEYS");
        for k in keys {
            cmd.arg(*k);
        }
        assert_eq!(ok(&mut c.nodes[self.src].conn(), &cmd), Value::Okay);
    }

    /// `CLUSTER SETSLOT … NODE` on both nodes, as `redis-cli --cluster reshard` ends a slot.
    pub(crate) fn finish(&self, c: &Cluster) {
        let dst_id = &c.ids[self.dst];
        for n in [self.dst, self.src] {
            let mut con = c.nodes[n].conn();
            ok(
                &mut con,
                &rcmd!("CLUSTER", "SETSLOT", self.slot, "NODE", dst_id),
            );
        }
        c.wait_stable();
    }
}

/// `cmd` on `con` after `ASKING`, as a client following `ASK` sends it.
fn asking(con: &mut Connection, cmd: &redis::Cmd) -> Result<Value, String> {
    assert_eq!(ok(con, &rcmd!("ASKING")), Value::Okay);
    cmd.query::<Value>(con).map_err(|e| err_text(&e))
}

#[test]
fn guards_split_by_a_migration_run_nothing_and_answer_tryagain() {
    let c = Cluster::start(3, 0);
    let m = Move::start(&c, "{f}");
    let mut sc = c.nodes[m.src].conn();
    let mut dc = c.nodes[m.dst].conn();
    let (_, fence) = grant(&mut sc, "{f}lock", b"w1", 60_000);
    grant(&mut sc, "{f}lock2", b"w2", 60_000);
    for (k, v) in [
        ("{f}d2", "5"),
        ("{f}d3", "x"),
        ("{f}d4", "1"),
        ("{f}d5", "7"),
    ] {
        ok(&mut sc, &rcmd!("SET", k, v));
    }
    ok(
        &mut sc,
        &rcmd!("LOCK.FENCE", "{f}gate", fence, "SET", "{f}d5", "8"),
    );
    // A hold bound to its connection: the binding stays on the node that granted it.
    let mut bound = c.nodes[m.src].conn();
    let v = ok(
        &mut bound,
        &rcmd!("LOCK.ACQUIRE", "{f}eph", "e", "PX", 60_000, "EPHEMERAL"),
    );
    assert!(parse_grant(&v).is_some());
    m.begin(&c);
    m.migrate(&c, &["{f}eph"]);
    drop(bound);
    wait_until("the source sees the bound connection close", SETTLE, || {
        stat(&c.nodes[m.src], "ephemeral_holds") == 0
    });
    assert_eq!(
        stat(&c.nodes[m.src], "ephemeral_releases"),
        0,
        "a hold that left is not released by its old node"
    );
    let moved = field_pairs(&asking(&mut dc, &rcmd!("LOCK.INFO", "{f}eph")).unwrap());
    let client = moved
        .iter()
        .find(|(k, _)| k == b"client")
        .map(|(_, v)| as_int(v));
    assert_eq!(client, Some(0), "the moved hold keeps its lease only");

    // The lock and the gate move first, their data not yet.
    m.migrate(&c, &["{f}lock", "{f}gate"]);
    let guarded = [
        rcmd!("LOCK.CALL", "{f}lock", "w1", "INCRBY", "{f}d2", 10),
        rcmd!("LOCK.CALL", "{f}lock", "w1", "APPEND", "{f}d3", "y"),
        rcmd!("LOCK.FENCE", "{f}gate", fence + 1, "INCRBY", "{f}d5", 1),
    ];
    for cmd in &guarded {
        // The source no longer has the guard key: Redis sends the client to the target.
        let e = err(&mut sc, cmd);
        assert_eq!(
            e,
            format!("ASK {} 127.0.0.1:{}", m.slot, m.dp),
            "{}",
            describe(cmd)
        );
        // The target has the guard key but not the data: it must not write the data there.
        assert_eq!(
            asking(&mut dc, cmd),
            Err(SPLIT.to_string()),
            "{}",
            describe(cmd)
        );
    }
    for k in ["{f}d2", "{f}d3"] {
        assert_eq!(
            asking(&mut dc, &rcmd!("EXISTS", k)),
            Ok(Value::Int(0)),
            "{k}"
        );
    }
    let gate = field_pairs(&asking(&mut dc, &rcmd!("LOCK.INFO", "{f}gate")).unwrap());
    let highest = gate
        .iter()
        .find(|(k, _)| k == b"fence")
        .map(|(_, v)| as_int(v));
    assert_eq!(
        highest,
        Some(fence),
        "a refused LOCK.FENCE leaves the gate as it was"
    );

    // The reverse split: data moved, its lock not yet. The source answers TRYAGAIN, not an error
    // a client would not retry, and runs nothing.
    m.migrate(&c, &["{f}d4"]);
    let cmd = rcmd!("LOCK.CALL", "{f}lock2", "w2", "INCRBY", "{f}d4", 1);
    assert_eq!(err(&mut sc, &cmd), SPLIT, "{}", describe(&cmd));

    // A client that retries gets through once every key has moved, and nothing was lost.
    m.migrate(&c, &["{f}lock2", "{f}d2", "{f}d3", "{f}d5"]);
    let released = asking(&mut dc, &rcmd!("LOCK.RELEASE", "{f}eph", "e"));
    assert_eq!(released, Ok(Value::Int(1)));
    m.finish(&c);
    let mut router = Router::new();
    assert_eq!(as_int(&router.ok(m.sp, &guarded[0])), 15);
    assert_eq!(as_int(&router.ok(m.sp, &guarded[1])), 2);
    assert_eq!(as_int(&router.ok(m.sp, &guarded[2])), 9);
    assert_eq!(as_int(&router.ok(m.sp, &cmd)), 2);
    assert_eq!(
        as_bytes(&ok(&mut dc, &rcmd!("GET", "{f}d3"))),
        b"xy".to_vec()
    );
    assert_eq!(as_int(&ok(&mut sc, &rcmd!("DBSIZE"))), 0);
}

/// `CLUSTER FAILOVER` on replica `r`: it takes over its master's slots.
#[test]
fn a_release_while_its_slot_is_migrating_hands_the_lock_on_where_it_stands() {
    // The lock is still on the source: its waiter is granted there, the key never missing (a
    // missing key of a migrating slot would belong to the target), and the new holder's lock
    // moves with the key.
    let c = Cluster::start(3, 0);
    let m = Move::start(&c, "{h}");
    let key = "{h}lock";
    let mut sc = c.nodes[m.src].conn();
    let mut dc = c.nodes[m.dst].conn();
    let (_, f1) = grant(&mut sc, key, b"a", 30_000);
    let w = spawn_waiter_on(m.sp, key, "b", 30_000, 10_000);
    wait_waiters(&mut sc, key, 1);
    m.begin(&c);
    assert_eq!(release(&mut sc, key, b"a"), 1);
    let answer = w
        .recv_within(std::time::Duration::from_secs(5))
        .expect("the waiter is answered at the release");
    let (token, f2) = answer
        .reply
        .as_ref()
        .ok()
        .and_then(parse_grant)
        .unwrap_or_else(|| panic!("the waiter is granted, not {:?}", answer.reply));
    assert_eq!((token.as_slice(), f2 > f1), (&b"b"[..], true));
    let i = info_some(&mut sc, key);
    assert_eq!((i.token.as_slice(), i.fence), (&b"b"[..], f2));
    m.migrate(&c, &[key]);
    let i = match asking(&mut dc, &rcmd!("LOCK.INFO", key)) {
        Ok(v) => parse_info(&v).expect("the lock moved"),
        Err(e) => panic!("LOCK.INFO on the target: {e}"),
    };
    assert_eq!((i.token.as_slice(), i.fence), (&b"b"[..], f2));
    m.finish(&c);
    assert_eq!(release(&mut dc, key, b"b"), 1);
}

fn fail_over_to(c: &Cluster, r: usize, old: usize) {
    assert_eq!(
        ok(&mut c.nodes[r].conn(), &rcmd!("CLUSTER", "FAILOVER")),
        Value::Okay
    );
    c.nodes[r].wait_info("replication", "role", "master");
    c.nodes[old].wait_info("replication", "role", "slave");
    c.wait_stable();
    c.nodes[old].wait_info("replication", "master_link_status", "up");
}

#[test]
fn after_a_slot_moves_its_new_node_grants_fences_above_every_earlier_one() {
    let c = Cluster::start(3, 1);
    let m = Move::start(&c, "{j}");
    // The source's shard failed over twice: its fences are epochs ahead of the target's.
    let replica = c.replicas_of(m.src)[0];
    fail_over_to(&c, replica, m.src);
    fail_over_to(&c, m.src, replica);
    let mut sc = c.nodes[m.src].conn();
    let mut dc = c.nodes[m.dst].conn();
    let on_target = (0..)
        .map(|n| format!("t{n}"))
        .find(|k| c.owner(key_slot(k)) == m.dst)
        .unwrap();
    let (_, f_target_before) = grant(&mut dc, &on_target, b"t", 60_000);
    let (_, f) = grant(&mut sc, "{j}lock", b"a", 60_000);
    let (_, f_gone) = grant(&mut sc, "{j}released", b"a", 60_000);
    ok(
        &mut sc,
        &rcmd!("LOCK.FENCE", "{j}gate", f, "SET", "{j}data", "1"),
    );
    assert_eq!(release(&mut sc, "{j}lock", b"a"), 1);
    assert_eq!(release(&mut sc, "{j}released", b"a"), 1);
    assert!(f_gone > f);
    // Only the gate and the data move; the released locks left nothing behind.
    m.begin(&c);
    m.migrate(&c, &["{j}gate", "{j}data"]);
    m.finish(&c);
    for name in ["{j}lock", "{j}released", "{j}new"] {
        let (_, g) = grant(&mut dc, name, b"b", 60_000);
        assert!(
            g > f_gone && g > f_target_before,
            "{name}: fence {g} on the new node, {f_gone} granted for the slot before the move"
        );
        let v = ok(
            &mut dc,
            &rcmd!("LOCK.FENCE", "{j}gate", g, "SET", "{j}data", "2"),
        );
        assert_eq!(
            v,
            Value::Okay,
            "{name}: the moved gate accepts the new holder at once"
        );
    }
}

#[test]
fn a_lock_from_a_node_many_epochs_ahead_still_migrates() {
    // About 60 epoch bumps, each waiting for gossip: most of a minute, so `make stress` runs it.
    if std::env::var_os("REDISLOCK_LONG_TESTS").is_none() {
        eprintln!("skipped: set REDISLOCK_LONG_TESTS=1 to run it (make stress does)");
        return;
    }
    let c = Cluster::start(3, 0);
    let m = Move::start(&c, "{e}");
    let third = *c
        .masters()
        .iter()
        .find(|&&n| n != m.src && n != m.dst)
        .unwrap();
    // Config epochs climb on the source and a third node, far past the target's.
    // A node bumps only while another's is higher, as it knows them from gossip: each bump
    // waits until the other node has heard of the last one.
    let (mut bumper, mut other) = (m.src, third);
    while my_epoch(&c, m.src) <= 64 {
        let seen = my_epoch(&c, other);
        wait_until(
            &format!("node {bumper} hears of epoch {seen}"),
            SETTLE,
            || current_epoch(&c, bumper) >= seen,
        );
        ok(&mut c.nodes[bumper].conn(), &rcmd!("CLUSTER", "BUMPEPOCH"));
        std::mem::swap(&mut bumper, &mut other);
    }
    c.wait_stable();
    let mut sc = c.nodes[m.src].conn();
    let (_, f) = grant(&mut sc, "{e}lock", b"a", 60_000);
    assert!(
        epoch_of(f) > 64,
        "the source's fences follow its config epoch: {f}"
    );
    m.begin(&c);
    m.migrate(&c, &["{e}lock"]);
    m.finish(&c);
    let mut dc = c.nodes[m.dst].conn();
    let info = info_some(&mut dc, "{e}lock");
    assert_eq!((info.token, info.fence), (b"a".to_vec(), f));
    assert_eq!(release(&mut dc, "{e}lock", b"a"), 1);
    let (_, g) = grant(&mut dc, "{e}lock", b"b", 60_000);
    assert!(g > f, "{g} after {f}");
}

fn cluster_info_field(c: &Cluster, n: usize, name: &str) -> u64 {
    let info = String::from_utf8_lossy(&as_bytes(&ok(
        &mut c.nodes[n].conn(),
        &rcmd!("CLUSTER", "INFO"),
    )))
    .into_owned();
    field(&info, name).and_then(|v| v.parse().ok()).unwrap()
}

fn my_epoch(c: &Cluster, n: usize) -> u64 {
    cluster_info_field(c, n, "cluster_my_epoch")
}

fn current_epoch(c: &Cluster, n: usize) -> u64 {
    cluster_info_field(c, n, "cluster_current_epoch")
}
