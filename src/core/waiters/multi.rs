//! Whose turn it is when requests wait for several locks at once.
//!
//! A multi-key request stands in every one of its locks' queues under one
//! arrival number. On each queue, the waiters ahead of it are served
//! first, as single-key waiters are; it is granted only once it is first
//! in every one of its queues and every one of its locks has room — all
//! its locks in one step, never some. Until then it holds its place on
//! every queue: nobody behind it on any of its locks is served, even on
//! a lock that has room. So no request is ever overtaken on a lock it
//! shares with an earlier one, and there is no deadlock whatever the key
//! sets: the earliest waiter of all is first in each of its queues, and
//! waits only for holds, which end.
//!
//! Serving a lock, the Redis layer plans the single-key waiters at the
//! head of its queue (`singles`), then asks for the `head`: a multi-key
//! request first everywhere is tried on all its locks; one that waits
//! behind others elsewhere stops the queue. Whenever a request leaves
//! (granted, refused, timed out, gone), each of its locks is looked at
//! again.

use std::hash::{BuildHasher, Hash};

use super::{Queue, Stage, Waiters};

/// The first waiter of a lock, as far as whose turn it is goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head<I> {
    /// Nobody waits.
    Empty,
    /// A request for this lock alone: the lock's plan decides.
    Single(I),
    /// A multi-key request first in every one of its queues: granted if
    /// every one of its locks has room now.
    Ready(I),
    /// A multi-key request behind an earlier one on another of its locks:
    /// this lock waits with it.
    Behind(I),
}

impl<I: Hash + Eq + Copy, K: Hash + Eq + Clone, R, S: BuildHasher> Waiters<I, K, R, S> {
    /// The first waiter of `lock`, and whether it may be served now.
    pub fn head_of(&self, lock: &K) -> Head<I> {
        self.head_and_count(lock).0
    }

    /// `head_of` and the number of waiters of `lock`, in one look-up.
    pub fn head_and_count(&self, lock: &K) -> (Head<I>, usize) {
        let Some(queue) = self.queues.get(lock) else {
            return (Head::Empty, 0);
        };
        (self.head_in(queue), queue.len())
    }

    fn head_in(&self, queue: &Queue<I>) -> Head<I> {
        let Some((_, id)) = queue.first() else {
            return Head::Empty;
        };
        let Some(waiter) = self.waiters.get(&id) else {
            return Head::Empty;
        };
        if !waiter.is_multi() {
            return Head::Single(id);
        }
        match self.first_everywhere(id) {
            true => Head::Ready(id),
            false => Head::Behind(id),
        }
    }

    /// Whether the waiter `id` is first in every one of its queues.
    pub fn first_everywhere(&self, id: I) -> bool {
        let Some(waiter) = self.waiters.get(&id) else {
            return false;
        };
        waiter.stage == Stage::Waiting
            && waiter.locks().all(|k| {
                self.queues
                    .get(k)
                    .and_then(Queue::first)
                    .is_some_and(|(seq, _)| seq == waiter.seq)
            })
    }

    /// The single-key waiters at the head of `lock`'s queue, first come
    /// first, up to the first multi-key waiter (which `head_of` decides).
    pub fn singles<'a>(&'a self, lock: &K) -> impl Iterator<Item = (I, &'a R)> + 'a {
        self.queues
            .get(lock)
            .into_iter()
            .flat_map(Queue::ids)
            .map_while(|id| {
                let w = self.waiters.get(&id)?;
                (!w.is_multi()).then_some((id, &w.request))
            })
    }

    /// Every lock the waiter `id` waits for, if it is known.
    pub fn locks_of(&self, id: I) -> Vec<K> {
        self.waiters
            .get(&id)
            .map(|w| w.locks().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
