//! Unit tests of the single-key queues.

use super::*;

#[test]
fn a_served_burst_gives_its_room_back() {
    let mut w: Waiters<u64, &str, ()> = Waiters::default();
    for id in 0..10_000u64 {
        w.enqueue(id, if id % 2 == 0 { "a" } else { "b" }, ());
    }
    let grown = w.waiters.capacity();
    for id in 0..10_000u64 {
        assert!(w.remove(id).is_some());
    }
    assert!(w.is_empty());
    assert!(grown >= 10_000);
    assert!(w.waiters.capacity() < 256, "{}", w.waiters.capacity());
}

type W = Waiters<u32, &'static str, &'static str>;

#[test]
fn the_queue_in_order_and_single_refusals() {
    let mut w = W::default();
    for (id, who) in [(1, "a"), (2, "b"), (3, "c")] {
        w.enqueue(id, "lock", who);
    }
    assert_eq!(
        w.queue(&"lock").collect::<Vec<_>>(),
        [(1, &"a"), (2, &"b"), (3, &"c")]
    );
    assert!(w.refuse(2, Refusal::OtherMode));
    assert!(!w.refuse(2, Refusal::OtherMode));
    assert_eq!(
        w.get(2).map(|x| x.stage),
        Some(Stage::Refused(Refusal::OtherMode))
    );
    assert_eq!(w.queue(&"lock").map(|(i, _)| i).collect::<Vec<_>>(), [1, 3]);
    assert_eq!((w.count(&"lock"), w.total()), (2, 2));
    assert_eq!(w.queue(&"none").count(), 0);
}

#[test]
fn first_come_first_served() {
    let mut w = W::default();
    assert!(w.is_empty());
    for (id, who) in [(1, "a"), (2, "b"), (3, "c")] {
        w.enqueue(id, "lock", who);
    }
    w.enqueue(9, "other", "z");
    assert!(!w.is_empty());
    assert_eq!(w.count(&"lock"), 3);
    assert_eq!(w.total(), 4);
    assert_eq!(w.head(&"lock"), Some((1, &"a")));
    assert!(w.grant(1, 10));
    assert_eq!(w.head(&"lock"), Some((2, &"b")));
    assert_eq!(w.count(&"lock"), 2);
    assert_eq!(w.get(1).unwrap().stage, Stage::Granted { fence: 10 });
}

#[test]
fn leaving_the_queue() {
    let mut w = W::default();
    w.enqueue(1, "lock", "a");
    w.enqueue(2, "lock", "b");
    let gone = w.remove(1).unwrap();
    assert_eq!(gone.stage, Stage::Waiting);
    assert_eq!(w.head(&"lock"), Some((2, &"b")));
    assert!(w.remove(1).is_none());
    assert!(w.grant(2, 5));
    assert!(!w.grant(2, 6), "a waiter is granted once");
    assert!(w.is_empty(), "granted waiters leave the queue");
    assert_eq!(w.remove(2).unwrap().stage, Stage::Granted { fence: 5 });
    assert!(w.get(2).is_none());
}

#[test]
fn redirecting_a_whole_queue() {
    let mut w = W::default();
    w.enqueue(1, "lock", "a");
    w.enqueue(2, "lock", "b");
    w.enqueue(3, "other", "c");
    assert_eq!(w.refuse_all(&"lock", Refusal::SlotMoved), vec![1, 2]);
    assert_eq!(w.count(&"lock"), 0);
    assert_eq!(w.total(), 1);
    assert_eq!(w.count(&"other"), 1);
    assert_eq!(w.get(2).unwrap().stage, Stage::Refused(Refusal::SlotMoved));
    assert_eq!(
        w.remove(1).unwrap().stage,
        Stage::Refused(Refusal::SlotMoved)
    );
    assert!(w.refuse_all(&"none", Refusal::SlotMoved).is_empty());
    assert_eq!(w.refuse_everyone(Refusal::Demoted), vec![3]);
    assert!(w.is_empty());
}

#[test]
fn leaving_from_the_middle_keeps_the_order() {
    let mut w = Waiters::<u32, &str, u32>::default();
    for id in 0..10_000 {
        w.enqueue(id, "lock", id);
    }
    for id in (0..10_000).filter(|id| id % 2 == 1) {
        assert_eq!(w.remove(id).unwrap().stage, Stage::Waiting);
    }
    assert_eq!(w.count(&"lock"), 5_000);
    assert_eq!(w.total(), 5_000);
    for expected in (0..10_000).step_by(2) {
        assert_eq!(w.head(&"lock"), Some((expected, &expected)));
        assert!(w.grant(expected, 1));
    }
    assert!(w.is_empty());
    assert_eq!(w.total(), 0);
}

#[test]
fn a_reused_id_starts_a_new_wait() {
    let mut w = Waiters::<u32, &str, &str>::default();
    w.enqueue(1, "a", "first");
    w.enqueue(2, "a", "second");
    assert!(w.grant(1, 9));
    w.enqueue(1, "b", "again");
    assert_eq!(w.get(1).unwrap().stage, Stage::Waiting);
    assert_eq!(w.count(&"a"), 1);
    assert_eq!(w.count(&"b"), 1);
    assert_eq!(w.total(), 2);
}

#[test]
fn locks_with_waiters() {
    let mut w = W::default();
    w.enqueue(1, "a:1", "x");
    w.enqueue(2, "b:1", "y");
    let mut found = w.locks_where(|k| k.starts_with('a'));
    found.sort();
    assert_eq!(found, vec!["a:1"]);
}

#[test]
fn a_leaving_waiter_tells_which_queues_it_stood_first_in() {
    let mut w = W::default();
    for id in [1, 2, 3] {
        w.enqueue(id, "a", "x");
    }
    // 4 waits for "b" (alone there) and "a" (behind 1, 2, 3).
    w.enqueue_all(4, "b", vec!["a"], "x");
    let gone = w.leave(2).unwrap();
    assert_eq!(
        (gone.waiter.stage, gone.headed, gone.others),
        (Stage::Waiting, 0, 0b1),
        "behind 1: kept nobody"
    );
    let first = w.leave(1).unwrap();
    assert_eq!(
        (first.headed, first.others),
        (0b1, 0b1),
        "first in its queue"
    );
    let both = w.leave(4).unwrap();
    assert_eq!(both.headed, 0b01, "first in \"b\", not in \"a\"");
    assert_eq!(both.others, 0b10, "alone in \"b\", 3 still waits in \"a\"");
    assert!(w.grant(3, 7));
    let granted = w.leave(3).unwrap();
    assert_eq!(
        (granted.headed, granted.others),
        (0, 0),
        "a granted waiter is in no queue, and nobody else waits"
    );
    assert!(w.leave(3).is_none());
}
