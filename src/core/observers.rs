//! Clients observing locks (`LOCK.OBSERVE … AFTER fence [SEEN data] BLOCK
//! timeout`): who watches which lock and what each saw last, the locks to
//! look at again, and the observers woken whose answer is still to be sent.
//!
//! Only bookkeeping, as `waiters` is: the Redis layer blocks and unblocks
//! the clients and reads the locks. Observers are no waiters: they stand in
//! no queue and are woken in any order, so joining, leaving and being woken
//! cost O(1) each, whatever the number of observers of a lock. Answers go
//! out oldest first, so a burst of them can be sent a slice at a time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hash};

use super::args::observe::Saw;
use super::waiters::{give_back_room, IdHasher};

/// Where an observer stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage<A> {
    /// Watching its lock for a holder other than the one it saw.
    Watching,
    /// Woken with this answer (`None`: its time ran out), not yet sent.
    Woken(Option<A>),
}

impl<A> Stage<A> {
    pub fn is_watching(&self) -> bool {
        matches!(self, Stage::Watching)
    }
}

/// One observer: the lock it watches, what it saw (`AFTER`, `SEEN`), what
/// the caller keeps with it (the blocked client), and where it stands.
#[derive(Debug)]
pub struct Observer<K, R, A> {
    pub lock: K,
    pub saw: Saw,
    pub value: R,
    pub stage: Stage<A>,
}

type IdSet<I> = HashSet<I, BuildHasherDefault<IdHasher>>;

/// Every observer of the server. `I` identifies an observer, `K` a lock,
/// `R` is what the caller keeps with an observer, `A` an answer (shared by
/// the observers one look wakes).
#[derive(Debug)]
pub struct Observers<I, K, R, A> {
    /// The observers still watching, by lock.
    by_lock: HashMap<K, IdSet<I>>,
    observers: HashMap<I, Observer<K, R, A>, BuildHasherDefault<IdHasher>>,
    /// Locks to look at again, each once, in the order they changed.
    dirty: VecDeque<K>,
    marked: HashSet<K>,
    /// Observers woken, oldest first. An id that left (or left and came
    /// back as a new observer) meanwhile is skipped when its turn comes.
    woken: VecDeque<I>,
}

impl<I, K, R, A> Default for Observers<I, K, R, A> {
    fn default() -> Self {
        Observers {
            by_lock: HashMap::new(),
            observers: HashMap::default(),
            dirty: VecDeque::new(),
            marked: HashSet::new(),
            woken: VecDeque::new(),
        }
    }
}

impl<I: Hash + Eq + Copy, K: Hash + Eq + Clone, R, A: Clone> Observers<I, K, R, A> {
    /// True when nobody observes anything: the common case, checked first
    /// on every change of every lock.
    pub fn is_empty(&self) -> bool {
        self.observers.is_empty()
    }

    /// Observers blocked, watching or woken and not yet answered.
    pub fn total(&self) -> usize {
        self.observers.len()
    }

    /// Observers still watching `lock`.
    pub fn watching(&self, lock: &K) -> usize {
        self.by_lock.get(lock).map_or(0, HashSet::len)
    }

    /// Adds an observer of `lock` that saw `saw`. An id still known is
    /// replaced.
    pub fn add(&mut self, id: I, lock: K, saw: Saw, value: R) {
        self.remove(id);
        self.by_lock.entry(lock.clone()).or_default().insert(id);
        let stage = Stage::Watching;
        let observer = Observer {
            lock,
            saw,
            value,
            stage,
        };
        self.observers.insert(id, observer);
    }

    pub fn get(&self, id: I) -> Option<&Observer<K, R, A>> {
        self.observers.get(&id)
    }

    pub fn get_mut(&mut self, id: I) -> Option<&mut Observer<K, R, A>> {
        self.observers.get_mut(&id)
    }

    /// Forgets `id` (answered, left) and returns what it was.
    pub fn remove(&mut self, id: I) -> Option<Observer<K, R, A>> {
        let observer = self.observers.remove(&id)?;
        if observer.stage.is_watching() {
            self.unwatch(id, &observer.lock);
        }
        give_back_room(&mut self.observers);
        Some(observer)
    }

    fn unwatch(&mut self, id: I, lock: &K) {
        if let Some(ids) = self.by_lock.get_mut(lock) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_lock.remove(lock);
                give_back_room(&mut self.by_lock);
            } else {
                give_back_room_set(ids);
            }
        }
    }

    /// `lock` may have changed: it is to be looked at again, once however
    /// often it is marked before. Nothing if nobody watches it. True if it
    /// was newly marked.
    pub fn mark(&mut self, lock: &K) -> bool {
        if !self.by_lock.contains_key(lock) || self.marked.contains(lock) {
            return false;
        }
        self.marked.insert(lock.clone());
        self.dirty.push_back(lock.clone());
        true
    }

    /// Marks every watched lock that `filter` picks; how many were newly
    /// marked.
    pub fn mark_where(&mut self, filter: impl Fn(&K) -> bool) -> usize {
        let picked: Vec<K> = self.by_lock.keys().filter(|k| filter(k)).cloned().collect();
        picked.iter().filter(|k| self.mark(k)).count()
    }

    /// The next lock to look at, oldest mark first; locks nobody watches
    /// any more are passed over.
    pub fn next_marked(&mut self) -> Option<K> {
        while let Some(lock) = self.dirty.pop_front() {
            self.marked.remove(&lock);
            if self.by_lock.contains_key(&lock) {
                return Some(lock);
            }
        }
        if self.dirty.capacity() > 64 {
            self.dirty.shrink_to_fit();
            self.marked.shrink_to_fit();
        }
        None
    }

    /// Whether locks are marked or answers are waiting to be sent.
    pub fn has_work(&self) -> bool {
        !self.dirty.is_empty() || !self.woken.is_empty()
    }

    /// The holder of `lock` is now `holder` (fence and data): every
    /// observer to whom that is news (`Saw::differs`) is woken with
    /// `answer`. With `holder` `None` (the key can no longer be observed:
    /// another type, another node) every observer is. Returns how many
    /// were woken.
    pub fn wake(&mut self, lock: &K, holder: Option<(u64, Option<&[u8]>)>, answer: &A) -> usize {
        let Some(ids) = self.by_lock.get_mut(lock) else {
            return 0;
        };
        let observers = &mut self.observers;
        let mut woken = Vec::new();
        ids.retain(|id| {
            let Some(o) = observers.get_mut(id) else {
                return false;
            };
            if holder.is_some_and(|(fence, data)| !o.saw.differs(fence, data)) {
                return true;
            }
            o.stage = Stage::Woken(Some(answer.clone()));
            woken.push(*id);
            false
        });
        if ids.is_empty() {
            self.by_lock.remove(lock);
            give_back_room(&mut self.by_lock);
        }
        let n = woken.len();
        self.woken.extend(woken);
        n
    }

    /// `id`'s time ran out: it is woken with no answer, if it still
    /// watches. Whether it did.
    pub fn time_out(&mut self, id: I) -> bool {
        let Some(o) = self.observers.get_mut(&id) else {
            return false;
        };
        if !o.stage.is_watching() {
            return false;
        }
        o.stage = Stage::Woken(None);
        let lock = o.lock.clone();
        self.unwatch(id, &lock);
        self.woken.push_back(id);
        true
    }

    /// The next woken observer to answer, oldest first.
    pub fn next_woken(&mut self) -> Option<I> {
        while let Some(id) = self.woken.pop_front() {
            if matches!(self.observers.get(&id), Some(o) if !o.stage.is_watching()) {
                return Some(id);
            }
        }
        if self.woken.capacity() > 64 {
            self.woken.shrink_to_fit();
        }
        None
    }
}

/// As `give_back_room`, for a lock's set of observers.
fn give_back_room_set<I: Hash + Eq>(set: &mut IdSet<I>) {
    const SMALL: usize = 64;
    if set.capacity() > SMALL && set.len() * 4 < set.capacity() {
        set.shrink_to((set.len() * 2).max(SMALL));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type O = Observers<u32, &'static str, (), u64>;

    fn woken(o: &mut O) -> Vec<(u32, Option<u64>)> {
        let mut all = Vec::new();
        while let Some(id) = o.next_woken() {
            match o.remove(id).map(|x| x.stage) {
                Some(Stage::Woken(a)) => all.push((id, a)),
                other => panic!("{id} answered from {other:?}"),
            }
        }
        all
    }

    #[test]
    fn a_change_wakes_those_who_saw_another_fence() {
        let mut o = O::default();
        assert!(o.is_empty());
        o.add(1, "a", Saw::fence(5), ());
        o.add(2, "a", Saw::fence(7), ());
        o.add(3, "b", Saw::fence(5), ());
        assert_eq!((o.total(), o.watching(&"a"), o.watching(&"b")), (3, 2, 1));
        assert_eq!(o.wake(&"a", Some((7, None)), &70), 1);
        assert_eq!(woken(&mut o), [(1, Some(70))]);
        assert_eq!((o.total(), o.watching(&"a")), (2, 1));
        assert_eq!(o.wake(&"a", Some((7, None)), &71), 0, "2 saw 7 already");
        assert_eq!(o.wake(&"a", Some((0, None)), &0), 1);
        assert_eq!(woken(&mut o), [(2, Some(0))]);
        assert_eq!(o.watching(&"a"), 0);
        assert_eq!(o.wake(&"b", None, &9), 1, "a refusal wakes everyone");
        assert_eq!(woken(&mut o), [(3, Some(9))]);
        assert!(o.is_empty());
    }

    #[test]
    fn marks_are_kept_once_and_only_for_watched_locks() {
        let mut o = O::default();
        assert!(!o.mark(&"a"), "nobody watches a");
        o.add(1, "a", Saw::fence(0), ());
        o.add(2, "b", Saw::fence(0), ());
        o.add(3, "c", Saw::fence(0), ());
        assert!(o.mark(&"b"));
        assert!(!o.mark(&"b"));
        assert!(o.mark(&"a"));
        assert!(o.has_work());
        assert_eq!(o.mark_where(|k| *k != "c"), 0, "both marked already");
        assert_eq!(o.mark_where(|_| true), 1);
        o.remove(1);
        assert_eq!(o.next_marked(), Some("b"));
        assert_eq!(o.next_marked(), Some("c"), "a is watched no more");
        assert_eq!(o.next_marked(), None);
        assert!(!o.has_work());
        assert!(o.mark(&"b"), "marked again once looked at");
    }

    #[test]
    fn leaving_is_cheap_and_complete_at_every_stage() {
        let mut o = O::default();
        o.add(1, "a", Saw::fence(1), ());
        o.add(2, "a", Saw::fence(1), ());
        o.add(3, "a", Saw::fence(1), ());
        // Watching: gone from its lock.
        assert_eq!(o.remove(2).map(|x| x.stage), Some(Stage::Watching));
        assert_eq!(o.watching(&"a"), 2);
        // Woken, its answer not sent: never answered.
        assert_eq!(o.wake(&"a", Some((2, None)), &20), 2);
        assert!(o.remove(1).is_some());
        assert_eq!(woken(&mut o), [(3, Some(20))]);
        assert!(o.remove(1).is_none());
        assert!(o.is_empty());
        assert!(!o.has_work());
    }

    #[test]
    fn time_outs_are_answered_with_nothing_once() {
        let mut o = O::default();
        o.add(1, "a", Saw::fence(1), ());
        o.add(2, "a", Saw::fence(1), ());
        assert!(o.time_out(1));
        assert!(!o.time_out(1));
        assert_eq!(o.watching(&"a"), 1);
        assert_eq!(o.wake(&"a", Some((2, None)), &20), 1, "1 no longer watches");
        assert!(!o.time_out(2), "woken already");
        assert_eq!(woken(&mut o), [(1, None), (2, Some(20))]);
    }

    #[test]
    fn a_reused_id_starts_afresh_and_is_not_answered_for_its_past() {
        let mut o = O::default();
        o.add(1, "a", Saw::fence(1), ());
        assert_eq!(o.wake(&"a", Some((2, None)), &20), 1);
        // Gone before its answer went out, and back as a new observer.
        o.remove(1);
        o.add(1, "b", Saw::fence(4), ());
        assert_eq!(o.next_woken(), None, "the old wake is passed over");
        assert_eq!(o.watching(&"b"), 1);
        assert_eq!(o.get(1).map(|x| x.saw.fence), Some(4));
        o.add(1, "c", Saw::fence(6), ());
        assert_eq!((o.watching(&"b"), o.watching(&"c"), o.total()), (0, 1, 1));
    }

    #[test]
    fn a_burst_is_answered_in_order_and_gives_its_room_back() {
        let mut o = Observers::<u32, u32, (), u64>::default();
        for id in 0..20_000 {
            o.add(id, id % 2, Saw::fence(1), ());
        }
        assert_eq!(o.wake(&0, Some((3, None)), &3), 10_000);
        let grown = o.observers.capacity();
        let mut answered = 0;
        while let Some(id) = o.next_woken() {
            assert_eq!(id % 2, 0);
            o.remove(id);
            answered += 1;
        }
        assert_eq!(answered, 10_000);
        assert_eq!((o.total(), o.watching(&1)), (10_000, 10_000));
        for id in (1..20_000).step_by(2) {
            assert!(o.remove(id).is_some());
        }
        assert!(o.is_empty());
        assert!(grown >= 20_000);
        assert!(o.observers.capacity() < 256, "{}", o.observers.capacity());
        assert!(o.by_lock.is_empty());
    }
}
