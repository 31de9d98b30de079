//! Unit tests of waiting for several locks at once, and a randomized run
//! of the serving rule over random key sets that checks no request is
//! overtaken, none waits while it could be served, and nothing deadlocks.

use std::collections::HashMap;

use super::super::{Refusal, Stage, Waiters};
use super::Head;

type W = Waiters<u32, u8, bool>;

#[test]
fn a_multi_key_request_holds_its_place_on_every_queue() {
    let mut w = W::default();
    w.enqueue(1, 0, false);
    w.enqueue_all(2, 1, vec![0, 2], false);
    w.enqueue(3, 1, false);
    w.enqueue(4, 2, false);
    assert_eq!(w.total(), 4);
    assert_eq!((w.count(&0), w.count(&1), w.count(&2)), (2, 2, 2));
    // On lock 1 it is first, but lock 0 has an earlier waiter.
    assert_eq!(w.head_of(&1), Head::Behind(2));
    assert_eq!(w.head_of(&2), Head::Behind(2));
    assert_eq!(w.head_of(&0), Head::Single(1));
    assert_eq!(w.singles(&0).map(|(i, _)| i).collect::<Vec<_>>(), [1]);
    assert_eq!(w.singles(&1).count(), 0, "nobody behind it is served");
    assert!(w.grant(1, 10));
    assert_eq!(w.head_of(&0), Head::Ready(2));
    assert_eq!(w.head_of(&1), Head::Ready(2));
    assert!(w.grant(2, 11));
    assert_eq!((w.count(&0), w.count(&1), w.count(&2)), (0, 1, 1));
    assert_eq!(w.head_of(&1), Head::Single(3));
    assert_eq!(w.head_of(&0), Head::Empty);
    assert_eq!(w.total(), 2);
    assert_eq!(w.locks_of(2), [1, 0, 2]);
}

#[test]
fn leaving_or_refused_on_one_lock_leaves_every_queue() {
    let mut w = W::default();
    w.enqueue_all(1, 0, vec![1], false);
    w.enqueue_all(2, 1, vec![2], false);
    w.enqueue(3, 2, false);
    assert_eq!(w.refuse_all(&0, Refusal::WrongType), vec![1]);
    assert_eq!(w.count(&1), 1);
    assert_eq!(w.head_of(&1), Head::Ready(2));
    assert_eq!(w.get(1).unwrap().stage, Stage::Refused(Refusal::WrongType));
    assert_eq!(w.remove(2).unwrap().stage, Stage::Waiting);
    assert_eq!((w.count(&1), w.count(&2)), (0, 1));
    assert_eq!(w.total(), 1);
    w.enqueue_all(4, 2, vec![3], false);
    assert_eq!(w.refuse_everyone(Refusal::Demoted).len(), 2);
    assert!(w.is_empty());
    assert_eq!(w.total(), 0);
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const KEYS: u8 = 5;

/// Exclusive and shared holds of five locks, and the queues, served by
/// the rule the Redis layer follows.
#[derive(Default)]
struct Model {
    w: Waiters<u32, u8, bool>,
    /// Per lock: shared or not, and the holders.
    held: HashMap<u8, (bool, Vec<u32>)>,
    seq: HashMap<u32, u64>,
    next_seq: u64,
    granted: usize,
}

impl Model {
    fn room(&self, key: u8, shared: bool) -> bool {
        match self.held.get(&key) {
            None => true,
            Some((s, holders)) => holders.is_empty() || (*s && shared),
        }
    }

    fn hold(&mut self, id: u32, keys: &[u8], shared: bool) {
        for &k in keys {
            let entry = self.held.entry(k).or_insert((shared, Vec::new()));
            if entry.1.is_empty() {
                entry.0 = shared;
            }
            assert!(entry.1.is_empty() || (entry.0 && shared), "two holders");
            entry.1.push(id);
        }
        self.granted += 1;
    }

    /// Grants the waiter `id` every one of its locks: it must be first in
    /// each queue (nobody earlier is overtaken).
    fn grant(&mut self, id: u32) -> Vec<u8> {
        let keys = self.w.locks_of(id);
        let shared = self.w.get(id).unwrap().request;
        let mine = self.seq[&id];
        for k in &keys {
            for (other, _) in self.w.queue(k) {
                assert!(self.seq[&other] >= mine, "{id} overtakes {other} on {k}");
            }
        }
        assert!(self.w.grant(id, 1));
        self.w.remove(id);
        self.hold(id, &keys, shared);
        keys
    }

    /// Serves `key` as the Redis layer does, and every lock a grant
    /// touched after it.
    fn serve(&mut self, key: u8) {
        let mut todo = vec![key];
        while let Some(k) = todo.pop() {
            loop {
                let singles: Vec<(u32, bool)> = self.w.singles(&k).map(|(i, r)| (i, *r)).collect();
                for (id, shared) in singles {
                    if !self.room(k, shared) {
                        break;
                    }
                    self.grant(id);
                }
                let Head::Ready(id) = self.w.head_of(&k) else {
                    break;
                };
                let shared = self.w.get(id).unwrap().request;
                let keys = self.w.locks_of(id);
                if !keys.iter().all(|&x| self.room(x, shared)) {
                    break;
                }
                todo.extend(self.grant(id).into_iter().filter(|&x| x != k));
            }
        }
    }

    /// A newcomer: granted at once only if every lock has room and
    /// nobody waits for any of them (after they were served).
    fn arrive(&mut self, id: u32, keys: Vec<u8>, shared: bool) {
        for &k in &keys {
            if self.room(k, shared) && self.w.count(&k) > 0 {
                self.serve(k);
            }
        }
        self.next_seq += 1;
        self.seq.insert(id, self.next_seq);
        let free = keys
            .iter()
            .all(|&k| self.room(k, shared) && self.w.count(&k) == 0);
        if free {
            self.hold(id, &keys, shared);
        } else {
            self.w.enqueue_all(id, keys[0], keys[1..].to_vec(), shared);
        }
    }

    fn release(&mut self, id: u32) {
        let keys: Vec<u8> = (0..KEYS).collect();
        for &k in &keys {
            if let Some((_, holders)) = self.held.get_mut(&k) {
                holders.retain(|&h| h != id);
            }
        }
        for k in keys {
            self.serve(k);
        }
    }

    fn leave(&mut self, id: u32) {
        let keys = self.w.locks_of(id);
        self.w.remove(id);
        for k in keys {
            self.serve(k);
        }
    }

    fn holders(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.held.values().flat_map(|(_, h)| h.clone()).collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// No waiter could be served now and is left waiting.
    fn check_nobody_waits_for_nothing(&self) {
        for k in 0..KEYS {
            match self.w.head_of(&k) {
                Head::Single(id) => {
                    assert!(
                        !self.room(k, self.w.get(id).unwrap().request),
                        "{id} on {k}"
                    )
                }
                Head::Ready(id) => {
                    let shared = self.w.get(id).unwrap().request;
                    let keys = self.w.locks_of(id);
                    assert!(
                        !keys.iter().all(|&x| self.room(x, shared)),
                        "{id} waits for nothing"
                    );
                }
                Head::Behind(_) | Head::Empty => {}
            }
        }
    }
}

fn random_keys(rng: &mut Rng) -> Vec<u8> {
    let mut keys: Vec<u8> = (0..KEYS).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i as u64 + 1) as usize);
    }
    keys.truncate(1 + rng.below(3) as usize);
    keys
}

#[test]
fn random_key_sets_never_deadlock_nor_overtake() {
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut m = Model::default();
        let mut next_id = 0;
        for _ in 0..200 {
            match rng.below(10) {
                0..=4 => {
                    next_id += 1;
                    let keys = random_keys(&mut rng);
                    let shared = rng.below(3) == 0;
                    m.arrive(next_id, keys, shared);
                }
                5..=8 => {
                    let holders = m.holders();
                    if !holders.is_empty() {
                        let id = holders[rng.below(holders.len() as u64) as usize];
                        m.release(id);
                    }
                }
                _ => {
                    if next_id > 0 {
                        let id = 1 + rng.below(next_id as u64) as u32;
                        if m.w.get(id).is_some() {
                            m.leave(id);
                        }
                    }
                }
            }
            m.check_nobody_waits_for_nothing();
        }
        // Holds end one by one: every waiter is served, none stays.
        let arrived = next_id as usize;
        while !m.w.is_empty() {
            let holders = m.holders();
            assert!(
                !holders.is_empty(),
                "seed {seed}: waiters and no holder: deadlock"
            );
            m.release(holders[0]);
            m.check_nobody_waits_for_nothing();
        }
        assert!(m.granted <= arrived);
    }
}
