//! Blocked clients whose slot leaves the node (SPEC "Cluster and upgrades"): a blocked
//! `LOCK.OBSERVE` is answered as a blocked `BLPOP` on the same slot is — `MOVED` to the new
//! owner (or `TRYAGAIN` where the module learns of the move first) — whether or not its key
//! exists, whether the node is told with `CLUSTER SETSLOT` or learns from the target's gossip.
//! Waiters of `LOCK.ACQUIRE` and `LOCK.ACQUIREALL` whose keys move away are answered too, and
//! never granted on the node that gave the slot away.

use std::time::Duration;

use crate::cluster::{conn_to, Cluster};
use crate::common::*;
use crate::observe::{observers, spawn_observer, Observer};
use crate::resharding::Move;

const TRYAGAIN: &str =
    "TRYAGAIN the lock's slot is moving or moved to another node; retry the command";

/// How long a redirect may take: the server looks at every blocked client about once a second.
const REDIRECTED: Duration = Duration::from_secs(5);

/// `cmd`, blocking, on a connection of its own to `port`.
fn spawn_on(port: u16, cmd: redis::Cmd) -> Waiter {
    let con = conn_to(port);
    con.set_read_timeout(Some(io_timeout() + Duration::from_secs(30)))
        .unwrap();
    spawn_blocked(con, cmd)
}

/// The error `w` is answered within `REDIRECTED`; `what` names it if none comes.
#[track_caller]
fn answered_error(w: &Waiter, what: &str) -> String {
    let r = w
        .recv_within(REDIRECTED)
        .unwrap_or_else(|| panic!("{what} was not answered after its slot moved away"));
    match r.reply {
        Err(e) => e,
        Ok(v) => panic!("{what} was answered {v:?}, expected a redirect"),
    }
}

/// `BLPOP` on `list`, the reference: blocked on the source until its slot leaves.
fn spawn_blpop(port: u16, list: &str) -> Waiter {
    spawn_on(port, rcmd!("BLPOP", list, 0))
}

/// Observers of a free and of a held lock, a waiter for two keys (one held, one free) and a
/// `BLPOP`, all on the source; the slot moves as `redis-cli --cluster reshard` moves it. The
/// `BLPOP` is sent `MOVED`; the observer of the free lock gets the same answer, the others that
/// or `TRYAGAIN`, and nothing is granted on the source.
#[test]
fn blocked_clients_of_a_slot_that_moves_away_are_answered_as_blpop_is() {
    let c = Cluster::start(3, 0);
    let m = Move::start(&c, "{t}");
    let src = &c.nodes[m.src];
    let mut sc = src.conn();
    let (_, held_fence) = grant(&mut sc, "{t}h", b"a", 60_000);
    grant(&mut sc, "{t}a", b"a", 60_000);

    let free: Observer = spawn_observer(src, "{t}d", 0, 0);
    let held: Observer = spawn_observer(src, "{t}h", held_fence, 0);
    let all = spawn_on(
        m.sp,
        rcmd!(
            "LOCK.ACQUIREALL",
            2,
            "{t}a",
            "{t}b",
            "w",
            "PX",
            10_000,
            "BLOCK",
            0
        ),
    );
    wait_waiters(&mut sc, "{t}a", 1);
    let blpop = spawn_blpop(m.sp, "{t}list");
    wait_until("the BLPOP blocks", Duration::from_secs(10), || {
        field(&info_section(src, "clients"), "blocked_clients").as_deref() == Some("4")
    });

    m.begin(&c);
    m.migrate(&c, &["{t}h", "{t}a"]);
    m.finish(&c);

    let moved = answered_error(&blpop, "BLPOP");
    assert_eq!(moved, format!("MOVED {} 127.0.0.1:{}", m.slot, m.dp));
    assert_eq!(answered_error(&free, "the observer of a free lock"), moved);
    for (w, what) in [
        (&held, "the observer of a held lock"),
        (&all, "LOCK.ACQUIREALL … BLOCK"),
    ] {
        let e = answered_error(w, what);
        assert!(e == moved || e == TRYAGAIN, "{what}: {e}");
    }
    assert_eq!(observers(src), 0);
    assert_eq!(stat(src, "waiters"), 0);
    assert_eq!(
        as_int(&ok(&mut sc, &rcmd!("CLUSTER", "COUNTKEYSINSLOT", m.slot))),
        0,
        "nothing granted on the source"
    );
}

/// The target takes the slot (`CLUSTER SETSLOT … NODE` on it alone); the source learns of it
/// from gossip, with no command of its own. Its observer is redirected with its `BLPOP`.
#[test]
fn an_observer_follows_a_slot_taken_over_by_gossip() {
    let c = Cluster::start(3, 0);
    let m = Move::start(&c, "{g}");
    let src = &c.nodes[m.src];
    let observer = spawn_observer(src, "{g}d", 0, 0);
    let blpop = spawn_blpop(m.sp, "{g}list");
    let dst_id = &c.ids[m.dst];
    let mut dc = c.nodes[m.dst].conn();
    ok(
        &mut dc,
        &rcmd!("CLUSTER", "SETSLOT", m.slot, "IMPORTING", &c.ids[m.src]),
    );
    ok(
        &mut dc,
        &rcmd!("CLUSTER", "SETSLOT", m.slot, "NODE", dst_id),
    );
    c.wait_stable();

    let moved = answered_error(&blpop, "BLPOP");
    assert_eq!(moved, format!("MOVED {} 127.0.0.1:{}", m.slot, m.dp));
    assert_eq!(answered_error(&observer, "the observer"), moved);
    assert_eq!(observers(src), 0);
}

/// A slot that only starts migrating keeps its blocked clients, as it keeps a `BLPOP`: the
/// source still serves it.
#[test]
fn an_observer_stays_while_its_slot_only_starts_migrating() {
    let c = Cluster::start(3, 0);
    let m = Move::start(&c, "{s}");
    let src = &c.nodes[m.src];
    let observer = spawn_observer(src, "{s}d", 0, 0);
    m.begin(&c);
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(observer.try_recv().is_none(), "answered while migrating");
    assert_eq!(observers(src), 1);
    let mut sc = src.conn();
    assert_eq!(
        ok(&mut sc, &rcmd!("CLIENT", "UNBLOCK", observer.id)),
        redis::Value::Int(1)
    );
    observer.recv().assert_nil();
}

fn info_section(s: &Server, section: &str) -> String {
    text_of(&ok(&mut s.conn(), &rcmd!("INFO", section)))
}

fn text_of(v: &redis::Value) -> String {
    crate::cluster::text(v)
}
