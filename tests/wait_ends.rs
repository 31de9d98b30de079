//! A wait ends at its timeout, never before. The module's clock counts whole milliseconds and its
//! one timer is armed by whichever pass ran last, at any moment of a millisecond: a deadline read
//! as "now + timeout" could end a wait up to a millisecond short. Each blocking command here is
//! timed from before it is sent, so a loaded machine can only make the waits look longer.

use std::time::Duration;

use crate::common::*;

#[test]
fn no_wait_is_answered_before_its_timeout() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, fence) = grant(&mut c, "{w}held", b"holder", 60_000);
    // Deadlines 7 ms apart: each pass that ends one wait arms the timer for the next.
    let waits: Vec<(i64, Waiter)> = (0..30i64)
        .map(|i| {
            let block = 100 + 7 * i;
            let token = format!("w{i}");
            let cmd = match i % 3 {
                0 => rcmd!(
                    "LOCK.ACQUIRE",
                    "{w}held",
                    &token,
                    "PX",
                    1000,
                    "BLOCK",
                    block
                ),
                1 => rcmd!(
                    "LOCK.ACQUIREALL",
                    2,
                    "{w}free",
                    "{w}held",
                    &token,
                    "PX",
                    1000,
                    "BLOCK",
                    block
                ),
                _ => rcmd!("LOCK.OBSERVE", "{w}held", "AFTER", fence, "BLOCK", block),
            };
            (block, spawn_blocked(s.conn(), cmd))
        })
        .collect();
    let early: Vec<String> = waits
        .iter()
        .filter_map(|(block, w)| {
            let answer = w.recv();
            answer.assert_nil();
            (answer.took < Duration::from_millis(*block as u64))
                .then(|| format!("BLOCK {block} answered after {:?}", answer.took))
        })
        .collect();
    assert!(early.is_empty(), "answered early:\n{}", early.join("\n"));
    let held = info_some(&mut c, "{w}held");
    assert_eq!(
        (held.token, held.fence, held.waiters),
        (b"holder".to_vec(), fence, 0)
    );
}
