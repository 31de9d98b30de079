//! Clients waiting for a lock, in arrival order, per lock.
//!
//! This is only bookkeeping: who waits for which lock, who is next, and
//! what happened to each waiter. The Redis layer blocks and wakes the
//! clients and makes the grants.
//!
//! A multi-key request waits in every one of its locks' queues at once,
//! under one arrival number, and leaves them all at once (`multi.rs`
//! says when it is its turn).

mod multi;
mod queue;

pub use multi::Head;
use queue::Queue;

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};

use super::grant::LockKind;

/// Where a waiter stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// In the queue.
    Waiting,
    /// Granted the lock with this fence; the reply has not been sent yet.
    Granted { fence: u64 },
    /// Sent away without the lock, for this reason.
    Refused(Refusal),
}

/// Why waiters are sent away without the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The lock is now served by another cluster node.
    SlotMoved,
    /// This server became a replica and can grant nothing.
    Demoted,
    /// The name now holds a value of another type.
    WrongType,
    /// The key became a kind of lock this waiter's request does not fit.
    Mismatch(LockKind),
    /// The waiter's token holds the key in another mode.
    OtherMode,
}

/// A waiter that left its queues (`Waiters::leave`). Bit `i` of each mask
/// is of its `i`-th lock (`Waiter::locks` order; a request names at most
/// 64, and any beyond share the last bit).
#[derive(Debug)]
pub struct Left<K, R> {
    pub waiter: Waiter<K, R>,
    /// The queues it stood first in: only a queue's head can have kept the
    /// others waiting, so only those may have someone to serve now.
    pub headed: u64,
    /// The queues where others still wait.
    pub others: u64,
}

/// One waiter: the lock it waits for, what it asked for, where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<K, R> {
    pub lock: K,
    /// The other locks of a multi-key request (empty for one lock), in
    /// the order named after `lock`.
    pub also: Vec<K>,
    /// Arrival order: the position in the lock's queue.
    seq: u64,
    pub request: R,
    pub stage: Stage,
}

impl<K, R> Waiter<K, R> {
    /// Every lock the waiter waits for: `lock`, then `also`.
    pub fn locks(&self) -> impl Iterator<Item = &K> {
        std::iter::once(&self.lock).chain(&self.also)
    }

    /// Whether it waits for more than one lock.
    pub fn is_multi(&self) -> bool {
        !self.also.is_empty()
    }
}

/// Every waiter of the server. `I` identifies a waiter, `K` a lock, `R` is
/// what the waiter asked for (token, TTL); `S` hashes locks.
#[derive(Debug)]
///
/// Each queue is ordered by arrival number, so a waiter leaves it in
/// O(log n) whatever its place (many waiters timing out together cost
/// O(n log n), not O(n²)).
pub struct Waiters<I, K, R, S = RandomState> {
    queues: HashMap<K, Queue<I>, S>,
    waiters: HashMap<I, Waiter<K, R>, BuildHasherDefault<IdHasher>>,
    next_seq: u64,
    queued: usize,
}

impl<I, K, R, S: Default> Default for Waiters<I, K, R, S> {
    fn default() -> Self {
        Waiters {
            queues: HashMap::default(),
            waiters: HashMap::default(),
            next_seq: 0,
            queued: 0,
        }
    }
}

impl<I: Hash + Eq + Copy, K: Hash + Eq + Clone, R, S: BuildHasher> Waiters<I, K, R, S> {
    /// True when nobody waits for anything: the common case, checked first
    /// on every key event so that unrelated traffic pays almost nothing.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Adds a waiter at the back of its lock's queue; whether it is the
    /// lock's only waiter. An id still known (granted or refused but not
    /// yet answered) is replaced.
    pub fn enqueue(&mut self, id: I, lock: K, request: R) -> bool {
        self.enqueue_all(id, lock, Vec::new(), request)
    }

    /// Adds a waiter at the back of the queue of `lock` and of each of
    /// `also` (distinct locks), with one arrival number for all; whether
    /// nobody else waited for any of them.
    pub fn enqueue_all(&mut self, id: I, lock: K, also: Vec<K>, request: R) -> bool {
        self.remove(id);
        self.next_seq += 1;
        let seq = self.next_seq;
        let mut alone = true;
        for k in std::iter::once(&lock).chain(&also) {
            // A lock's name is copied only for its first waiter.
            match self.queues.get_mut(k) {
                Some(queue) => {
                    alone &= queue.is_empty();
                    queue.insert(seq, id);
                }
                None => {
                    self.queues.entry(k.clone()).or_default().insert(seq, id);
                }
            };
        }
        self.queued += 1;
        self.waiters.insert(
            id,
            Waiter {
                lock,
                also,
                seq,
                request,
                stage: Stage::Waiting,
            },
        );
        alone
    }

    /// Number of clients waiting for `lock`.
    pub fn count(&self, lock: &K) -> usize {
        self.queues.get(lock).map_or(0, Queue::len)
    }

    /// The first waiter of `lock`.
    pub fn head(&self, lock: &K) -> Option<(I, &R)> {
        let (_, id) = self.queues.get(lock)?.first()?;
        Some((id, &self.waiters.get(&id)?.request))
    }

    /// The waiters of `lock`, first come first.
    pub fn queue<'a>(&'a self, lock: &K) -> impl Iterator<Item = (I, &'a R)> + 'a {
        self.queues
            .get(lock)
            .into_iter()
            .flat_map(Queue::ids)
            .filter_map(|id| Some((id, &self.waiters.get(&id)?.request)))
    }

    /// Marks `id` as granted and takes it out of the queue; false if it is
    /// not waiting.
    #[must_use]
    pub fn grant(&mut self, id: I, fence: u64) -> bool {
        self.settle(id, Stage::Granted { fence }).is_some()
    }

    /// `grant`, handing back what `id` asked for (for the caller to take
    /// what it keeps with the wait) in the same look-up.
    pub fn grant_request(&mut self, id: I, fence: u64) -> Option<&mut R> {
        self.settle(id, Stage::Granted { fence })
    }

    /// Sends `id` away without the lock; false if it is not waiting.
    #[must_use]
    pub fn refuse(&mut self, id: I, why: Refusal) -> bool {
        self.settle(id, Stage::Refused(why)).is_some()
    }

    fn settle(&mut self, id: I, stage: Stage) -> Option<&mut R> {
        let waiter = self.waiters.get_mut(&id)?;
        if waiter.stage != Stage::Waiting {
            return None;
        }
        waiter.stage = stage;
        let was_queued = unqueue(&mut self.queues, waiter.seq, waiter.locks());
        self.queued -= usize::from(was_queued);
        Some(&mut waiter.request)
    }

    /// Takes every waiter of `lock` out of its queue as refused, and returns
    /// them in arrival order.
    pub fn refuse_all(&mut self, lock: &K, why: Refusal) -> Vec<I> {
        let ids: Vec<I> = self
            .queues
            .remove(lock)
            .map(Queue::into_ids)
            .unwrap_or_default();
        self.queued -= ids.len();
        let mut elsewhere = Vec::new();
        for id in &ids {
            if let Some(w) = self.waiters.get_mut(id) {
                w.stage = Stage::Refused(why);
                // A multi-key request leaves its other queues too.
                for k in w.locks().filter(|k| *k != lock) {
                    elsewhere.push((w.seq, k.clone()));
                }
            }
        }
        for (seq, k) in elsewhere {
            self.drop_entry(seq, &k);
        }
        ids
    }

    /// Refuses every waiter of every lock.
    pub fn refuse_everyone(&mut self, why: Refusal) -> Vec<I> {
        let locks: Vec<K> = self.queues.keys().cloned().collect();
        locks
            .iter()
            .flat_map(|lock| self.refuse_all(lock, why))
            .collect()
    }

    /// Forgets `id` (replied to, timed out, disconnected) and returns what
    /// it was, so the caller can tell a lost grant from a plain wait.
    pub fn remove(&mut self, id: I) -> Option<Waiter<K, R>> {
        self.leave(id).map(|left| left.waiter)
    }

    /// `remove`, telling also which of the waiter's queues it stood first
    /// in and which still have waiters (see `Left`), with one look-up of
    /// each queue.
    pub fn leave(&mut self, id: I) -> Option<Left<K, R>> {
        let waiter = self.waiters.remove(&id)?;
        let (mut headed, mut others) = (0, 0);
        let mut was_queued = false;
        for (i, lock) in waiter.locks().enumerate() {
            let bit = 1 << i.min(63);
            let Some(queue) = self.queues.get_mut(lock) else {
                continue;
            };
            if waiter.stage == Stage::Waiting {
                if queue.first().is_some_and(|(seq, _)| seq == waiter.seq) {
                    headed |= bit;
                }
                was_queued |= queue.remove(waiter.seq);
                if queue.is_empty() {
                    self.queues.remove(lock);
                    give_back_room(&mut self.queues);
                    continue;
                }
            }
            others |= bit;
        }
        self.queued -= usize::from(was_queued);
        // A burst of waiters grows the maps; once it is served, their room
        // goes back to the allocator as the server's own clients' does.
        give_back_room(&mut self.waiters);
        Some(Left {
            waiter,
            headed,
            others,
        })
    }

    pub fn get(&self, id: I) -> Option<&Waiter<K, R>> {
        self.waiters.get(&id)
    }

    /// What `id` asked for, to change what the caller keeps with it.
    pub fn request_mut(&mut self, id: I) -> Option<&mut R> {
        self.waiters.get_mut(&id).map(|w| &mut w.request)
    }

    /// Locks that have waiters, matching `filter`.
    pub fn locks_where(&self, filter: impl Fn(&K) -> bool) -> Vec<K> {
        self.queues.keys().filter(|k| filter(k)).cloned().collect()
    }

    /// Total number of queued waiters.
    pub fn total(&self) -> usize {
        self.queued
    }

    /// Takes the entry `seq` out of the queue of `lock`; whether it was
    /// there.
    fn drop_entry(&mut self, seq: u64, lock: &K) -> bool {
        drop_entry(&mut self.queues, seq, lock)
    }
}

/// Takes a waiter out of the queues of `locks`, all of its locks; whether
/// it stood in any (it counted as queued).
fn unqueue<'a, I: Copy, K: Hash + Eq + 'a, S: BuildHasher>(
    queues: &mut HashMap<K, Queue<I>, S>,
    seq: u64,
    locks: impl Iterator<Item = &'a K>,
) -> bool {
    let mut was_queued = false;
    for lock in locks {
        was_queued |= drop_entry(queues, seq, lock);
    }
    was_queued
}

/// Takes the entry `seq` out of the queue of `lock`, and the queue once it
/// is empty; whether the entry was there.
fn drop_entry<I: Copy, K: Hash + Eq, S: BuildHasher>(
    queues: &mut HashMap<K, Queue<I>, S>,
    seq: u64,
    lock: &K,
) -> bool {
    let Some(queue) = queues.get_mut(lock) else {
        return false;
    };
    let removed = queue.remove(seq);
    if queue.is_empty() {
        queues.remove(lock);
        give_back_room(queues);
    }
    removed
}

/// Hashes waiter ids. The server picks them (the address of a blocked
/// client's handle), so no client can steer them into one bucket, and a
/// multiply-and-fold hash costs a few instructions where SipHash, which
/// lock names need, costs a hundred: waiter ids are looked up several
/// times per handoff. Lock ids (`LockId`) hash to their name's SipHash,
/// worked out once, and are folded by it too.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        // Addresses share their low bits (alignment); the table picks
        // buckets by the low bits of the hash.
        self.0 ^ (self.0 >> 32)
    }
}

/// Shrinks `map` once it uses under an eighth of its room, to twice its
/// size: each shrink follows several times as many removals as it moves
/// entries (the table rounds its room up to a power of two), so the cost
/// per removal stays small while a burst drains, and an empty map is
/// small again.
pub(crate) fn give_back_room<A: Hash + Eq, B, S: std::hash::BuildHasher>(
    map: &mut HashMap<A, B, S>,
) {
    const SMALL: usize = 64;
    if map.capacity() > SMALL && map.len() * 8 < map.capacity() {
        map.shrink_to((map.len() * 2).max(SMALL));
    }
}

#[cfg(test)]
mod tests;
