//! One lock's waiters in arrival order.
//!
//! Arrival numbers only grow, so a waiter joins at the back of a ring
//! buffer (no search, no node to allocate), and the first waiter, the
//! one a handoff takes, leaves from the front. A waiter that leaves from
//! elsewhere (a timeout, a closed connection) is found by binary search on
//! its number and only marked gone: removing it would move the entries
//! behind it, and many leaving at once would cost O(n²). Marked entries
//! are dropped when they reach the front, or all at once when they
//! outnumber the waiters still there, so the room they take stays within
//! twice the waiters' (and a few more).

use std::collections::VecDeque;

/// Marked entries allowed beyond the waiters' number before a sweep.
const SLACK: usize = 32;

#[derive(Debug, Clone)]
pub struct Queue<I> {
    /// (arrival number, waiter; `None` once it left), numbers increasing.
    /// The front entry is never a marked one.
    entries: VecDeque<(u64, Option<I>)>,
    /// Entries not marked.
    waiting: usize,
}

impl<I> Default for Queue<I> {
    fn default() -> Self {
        Queue {
            entries: VecDeque::new(),
            waiting: 0,
        }
    }
}

impl<I: Copy> Queue<I> {
    /// Adds `id` at the back, under `seq`, higher than any number in the
    /// queue.
    pub fn insert(&mut self, seq: u64, id: I) {
        debug_assert!(self.entries.back().is_none_or(|&(last, _)| last < seq));
        self.entries.push_back((seq, Some(id)));
        self.waiting += 1;
    }

    /// Takes the waiter `seq` out; whether it was there.
    pub fn remove(&mut self, seq: u64) -> bool {
        if self.entries.front().is_some_and(|&(first, _)| first == seq) {
            self.entries.pop_front();
        } else {
            let Some(at) = self.position(seq) else {
                return false;
            };
            if self.entries[at].1.take().is_none() {
                return false;
            }
        }
        self.waiting -= 1;
        self.tidy();
        true
    }

    /// Where the entry `seq` is: a binary search of the ring's two slices
    /// (the one it is in), cheaper than indexing the ring at each step.
    fn position(&self, seq: u64) -> Option<usize> {
        let (front, back) = self.entries.as_slices();
        let key = |&(s, _): &(u64, Option<I>)| s;
        match back.first() {
            Some(&(first, _)) if first <= seq => back
                .binary_search_by_key(&seq, key)
                .ok()
                .map(|at| front.len() + at),
            _ => front.binary_search_by_key(&seq, key).ok(),
        }
    }

    /// Drops the marked entries at the front, and every marked entry once
    /// they outnumber the waiters.
    fn tidy(&mut self) {
        while self.entries.front().is_some_and(|(_, id)| id.is_none()) {
            self.entries.pop_front();
        }
        if self.entries.len() > 2 * self.waiting + SLACK {
            self.entries.retain(|(_, id)| id.is_some());
        }
        // A long queue that drained gives its room back, as the waiter
        // tables do.
        if self.entries.capacity() > 8 * self.entries.len() + 64 {
            self.entries.shrink_to(2 * self.entries.len() + SLACK);
        }
    }

    /// The number of waiters.
    pub fn len(&self) -> usize {
        self.waiting
    }

    pub fn is_empty(&self) -> bool {
        self.waiting == 0
    }

    /// The first waiter and its number.
    pub fn first(&self) -> Option<(u64, I)> {
        // The front is never marked (`tidy`).
        self.entries.front().and_then(|&(seq, id)| Some((seq, id?)))
    }

    /// The waiters, first come first.
    pub fn ids(&self) -> impl Iterator<Item = I> + '_ {
        self.entries.iter().filter_map(|&(_, id)| id)
    }

    /// The waiters, first come first, taking them out.
    pub fn into_ids(self) -> Vec<I> {
        self.entries.into_iter().filter_map(|(_, id)| id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn arrival_order_whatever_leaves_where() {
        let mut q = Queue::default();
        for seq in 1..=5u64 {
            q.insert(seq, seq * 10);
        }
        assert!(q.remove(3), "from the middle");
        assert!(!q.remove(3), "once");
        assert!(!q.remove(9), "never there");
        assert!(q.remove(1), "the first");
        assert_eq!(q.first(), Some((2, 20)));
        assert!(q.remove(2));
        assert_eq!(
            q.first(),
            Some((4, 40)),
            "the marked one behind it went too"
        );
        assert_eq!((q.len(), q.ids().collect::<Vec<_>>()), (2, vec![40, 50]));
        q.insert(6, 60);
        assert!(q.remove(5));
        assert_eq!(q.into_ids(), vec![40, 60]);
    }

    #[test]
    fn marked_entries_stay_within_twice_the_waiters() {
        let mut q = Queue::default();
        for seq in 0..10_000u64 {
            q.insert(seq, seq);
        }
        // Everyone but the first leaves, from the back: none reaches the front.
        for seq in (1..10_000u64).rev() {
            assert!(q.remove(seq));
            assert!(
                q.entries.len() <= 2 * q.len() + SLACK + 1,
                "{}",
                q.entries.len()
            );
        }
        assert_eq!((q.len(), q.first()), (1, Some((0, 0))));
        assert!(q.remove(0) && q.is_empty() && q.entries.is_empty());
        assert!(
            q.entries.capacity() <= 2 * SLACK + 8,
            "{}",
            q.entries.capacity()
        );
    }

    #[test]
    fn the_same_as_an_ordered_map() {
        // A seeded walk of joins and leaves anywhere, against a BTreeMap.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut q, mut model) = (Queue::default(), BTreeMap::new());
        let mut seq = 0u64;
        for _ in 0..50_000 {
            if next() % 3 != 0 || model.is_empty() {
                seq += 1 + next() % 3;
                q.insert(seq, seq);
                model.insert(seq, seq);
            } else {
                let pick = next() % (seq + 1);
                assert_eq!(q.remove(pick), model.remove(&pick).is_some());
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.first(), model.first_key_value().map(|(&s, &i)| (s, i)));
        }
        assert!(q.ids().eq(model.values().copied()));
    }
}
