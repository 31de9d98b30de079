//! Clients waiting for a lock, in arrival order, per lock.
//!
//! This is only bookkeeping: who waits for which lock, who is next, and
//! what happened to each waiter. The Redis layer blocks and wakes the
//! clients and makes the grants.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};

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

/// One waiter: the lock it waits for, what it asked for, where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<K, R> {
    pub lock: K,
    /// Arrival order: the position in the lock's queue.
    seq: u64,
    pub request: R,
    pub stage: Stage,
}

/// Every waiter of the server. `I` identifies a waiter, `K` a lock, `R` is
/// what the waiter asked for (token, TTL).
#[derive(Debug)]
///
/// Each queue is ordered by arrival number, so a waiter leaves it in
/// O(log n) whatever its place (many waiters timing out together cost
/// O(n log n), not O(n²)).
pub struct Waiters<I, K, R> {
    queues: HashMap<K, BTreeMap<u64, I>>,
    waiters: HashMap<I, Waiter<K, R>, BuildHasherDefault<IdHasher>>,
    next_seq: u64,
    queued: usize,
}

impl<I, K, R> Default for Waiters<I, K, R> {
    fn default() -> Self {
        Waiters {
            queues: HashMap::new(),
            waiters: HashMap::default(),
            next_seq: 0,
            queued: 0,
        }
    }
}

impl<I: Hash + Eq + Copy, K: Hash + Eq + Clone, R> Waiters<I, K, R> {
    /// True when nobody waits for anything: the common case, checked first
    /// on every key event so that unrelated traffic pays almost nothing.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Adds a waiter at the back of its lock's queue.
    /// An id still known (granted or refused but not yet answered) is
    /// replaced.
    pub fn enqueue(&mut self, id: I, lock: K, request: R) {
        self.remove(id);
        self.next_seq += 1;
        let seq = self.next_seq;
        self.queues.entry(lock.clone()).or_default().insert(seq, id);
        self.queued += 1;
        self.waiters.insert(
            id,
            Waiter {
                lock,
                seq,
                request,
                stage: Stage::Waiting,
            },
        );
    }

    /// Number of clients waiting for `lock`.
    pub fn count(&self, lock: &K) -> usize {
        self.queues.get(lock).map_or(0, BTreeMap::len)
    }

    /// The first waiter of `lock`.
    pub fn head(&self, lock: &K) -> Option<(I, &R)> {
        let (_, &id) = self.queues.get(lock)?.first_key_value()?;
        Some((id, &self.waiters.get(&id)?.request))
    }

    /// The waiters of `lock`, first come first.
    pub fn queue<'a>(&'a self, lock: &K) -> impl Iterator<Item = (I, &'a R)> + 'a {
        self.queues
            .get(lock)
            .into_iter()
            .flat_map(|q| q.values())
            .filter_map(|id| Some((*id, &self.waiters.get(id)?.request)))
    }

    /// Marks `id` as granted and takes it out of the queue; false if it is
    /// not waiting.
    #[must_use]
    pub fn grant(&mut self, id: I, fence: u64) -> bool {
        self.settle(id, Stage::Granted { fence })
    }

    /// Sends `id` away without the lock; false if it is not waiting.
    #[must_use]
    pub fn refuse(&mut self, id: I, why: Refusal) -> bool {
        self.settle(id, Stage::Refused(why))
    }

    fn settle(&mut self, id: I, stage: Stage) -> bool {
        let Some(waiter) = self.waiters.get_mut(&id) else {
            return false;
        };
        if waiter.stage != Stage::Waiting {
            return false;
        }
        waiter.stage = stage;
        let (lock, seq) = (waiter.lock.clone(), waiter.seq);
        self.unqueue(seq, &lock);
        true
    }

    /// Takes every waiter of `lock` out of its queue as refused, and returns
    /// them in arrival order.
    pub fn refuse_all(&mut self, lock: &K, why: Refusal) -> Vec<I> {
        let ids: Vec<I> = self
            .queues
            .remove(lock)
            .map(|q| q.into_values().collect())
            .unwrap_or_default();
        self.queued -= ids.len();
        for id in &ids {
            if let Some(w) = self.waiters.get_mut(id) {
                w.stage = Stage::Refused(why);
            }
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
        let waiter = self.waiters.remove(&id)?;
        if waiter.stage == Stage::Waiting {
            self.unqueue(waiter.seq, &waiter.lock);
        }
        // A burst of waiters grows the maps; once it is served, their room
        // goes back to the allocator as the server's own clients' does.
        give_back_room(&mut self.waiters);
        Some(waiter)
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

    fn unqueue(&mut self, seq: u64, lock: &K) {
        if let Some(queue) = self.queues.get_mut(lock) {
            if queue.remove(&seq).is_some() {
                self.queued -= 1;
            }
            if queue.is_empty() {
                self.queues.remove(lock);
                give_back_room(&mut self.queues);
            }
        }
    }
}

/// Hashes waiter ids. The server picks them (the address of a blocked
/// client's handle), so no client can steer them into one bucket, and a
/// multiply-and-fold hash costs a few instructions where SipHash, which
/// lock names need, costs a hundred: waiter ids are looked up several
/// times per handoff.
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

/// Shrinks `map` once it uses under a quarter of its room, to twice its
/// size: each shrink follows at least as many removals as it moves
/// entries, so the cost per removal stays constant.
pub(super) fn give_back_room<A: Hash + Eq, B, S: std::hash::BuildHasher>(
    map: &mut HashMap<A, B, S>,
) {
    const SMALL: usize = 64;
    if map.capacity() > SMALL && map.len() * 4 < map.capacity() {
        map.shrink_to((map.len() * 2).max(SMALL));
    }
}

#[cfg(test)]
mod tests {
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
}
