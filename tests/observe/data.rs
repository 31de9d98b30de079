//! The holder's public data (`LOCK.ACQUIRE … DATA value`) in what observers see: at once, after a
//! wait, handed over with a waiter's grant, binary-safe and whole up to its 4096 bytes, and on a
//! replica.

use std::time::Duration;

use super::*;
use crate::common::*;

fn acquire_data(c: &mut Connection, key: &str, token: &str, data: &[u8]) -> i64 {
    let v = ok(
        c,
        &rcmd!("LOCK.ACQUIRE", key, token, "PX", 60_000, "DATA", data),
    );
    parse_grant(&v).expect("granted").1
}

#[test]
fn observers_see_the_holder_s_data() {
    let s = Server::start();
    let mut c = s.conn();
    let f = acquire_data(&mut c, "leader", "n1", b"node-1:6379");
    assert_eq!(
        observe(&mut c, "leader"),
        (f, Some(b"node-1:6379".to_vec()))
    );
    // A re-grant with new data keeps the fence: observers of the fence are not woken, a new
    // observation shows the new data.
    let o = spawn_observer(&s, "leader", f, 10_000);
    assert_eq!(acquire_data(&mut c, "leader", "n1", b"node-1:6380"), f);
    still_waiting(&o, Duration::from_millis(50), "the same fence");
    assert_eq!(
        observe(&mut c, "leader"),
        (f, Some(b"node-1:6380".to_vec()))
    );
    // A waiter's data comes with its grant, and with the observers' answer.
    let binary: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let mut waiting = rcmd!(
        "LOCK.ACQUIRE",
        "leader",
        "n2",
        "PX",
        60_000,
        "BLOCK",
        10_000
    );
    waiting.arg("DATA").arg(&binary);
    let w = spawn_blocked(s.conn(), waiting);
    wait_waiters(&mut c, "leader", 1);
    let more: Vec<Observer> = (0..20)
        .map(|_| spawn_observer(&s, "leader", f, 10_000))
        .collect();
    assert_eq!(release(&mut c, "leader", b"n1"), 1);
    let (_, g) = w.granted();
    for o in std::iter::once(&o).chain(&more) {
        let r = o.recv();
        let seen = seen_of(r.reply.as_ref().expect("an answer"));
        assert_eq!(
            seen,
            Some((g, Some(binary.clone()))),
            "all 4096 bytes, as given"
        );
    }
    // Released: no holder, no data.
    let o = spawn_observer(&s, "leader", g, 10_000);
    assert_eq!(release(&mut c, "leader", b"n2"), 1);
    assert_eq!(seen_of(o.recv().reply.as_ref().unwrap()), Some((0, None)));
}

#[test]
fn a_replica_s_observers_see_the_data() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    let o = spawn_observer(&r, "leader", 0, 10_000);
    let f = acquire_data(&mut c, "leader", "n1", b"node-1:6379");
    let r1 = o.recv();
    assert_eq!(
        seen_of(r1.reply.as_ref().unwrap()),
        Some((f, Some(b"node-1:6379".to_vec())))
    );
    assert_eq!(
        observe(&mut r.conn(), "leader"),
        (f, Some(b"node-1:6379".to_vec()))
    );
}
