//! When blocked clients stop waiting: a schedule of small ids that are
//! copied, not shared, into its two indexes, and found by a cheap hash
//! (the server picks the ids, see [`IdHasher`]). A waiter's deadline is
//! set and taken out once per wait, so on a hot lock this is per handoff:
//! no allocation per deadline, unlike [`super::schedule::Schedule`], whose
//! jobs own key names.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash};

use super::waiters::{give_back_room, IdHasher};

/// A deadline's place in the schedule: its time, then the order it was
/// set in, as one number (one comparison, not a tuple's three).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Slot(u128);

impl Slot {
    fn new(at: i64, seq: u64) -> Slot {
        // Flipping the sign bit orders i64 times as unsigned numbers.
        let at = (at as u64) ^ (1 << 63);
        Slot((u128::from(at) << 64) | u128::from(seq))
    }

    fn at(self) -> i64 {
        (((self.0 >> 64) as u64) ^ (1 << 63)) as i64
    }

    fn seq(self) -> u64 {
        self.0 as u64
    }
}

#[derive(Debug)]
pub struct Deadlines<I> {
    /// Ids by time, then order of scheduling.
    queue: BTreeMap<Slot, I>,
    due: HashMap<I, Slot, BuildHasherDefault<IdHasher>>,
    next_seq: u64,
}

impl<I> Default for Deadlines<I> {
    fn default() -> Self {
        Deadlines {
            queue: BTreeMap::new(),
            due: HashMap::default(),
            next_seq: 0,
        }
    }
}

impl<I: Copy + Ord + Hash> Deadlines<I> {
    /// Sets the deadline of `id` at `at` unless it has an earlier one;
    /// true if it had none.
    pub fn set_earlier(&mut self, id: I, at: i64) -> bool {
        let slot = Slot::new(at, self.next_seq);
        let new = match self.due.entry(id) {
            Entry::Occupied(mut due) => {
                let old = *due.get();
                if old.at() <= at {
                    return false;
                }
                self.queue.remove(&old);
                due.insert(slot);
                false
            }
            Entry::Vacant(due) => {
                due.insert(slot);
                true
            }
        };
        self.next_seq += 1;
        self.queue.insert(slot, id);
        new
    }

    /// Forgets the deadline of `id`; false if it had none.
    pub fn cancel(&mut self, id: &I) -> bool {
        let Some(slot) = self.due.remove(id) else {
            return false;
        };
        // Waiters with one timeout are granted in the order of their
        // deadlines: the one taken out is most often the earliest.
        if self
            .queue
            .first_key_value()
            .is_some_and(|(first, _)| *first == slot)
        {
            self.queue.pop_first();
        } else {
            self.queue.remove(&slot);
        }
        give_back_room(&mut self.due);
        true
    }

    /// The earliest deadline.
    pub fn earliest(&self) -> Option<i64> {
        self.queue.first_key_value().map(|(slot, _)| slot.at())
    }

    /// A mark for [`Deadlines::pop_before`]: deadlines set from now on are
    /// after it.
    pub fn mark(&self) -> u64 {
        self.next_seq
    }

    /// Takes the earliest deadline's id if it is due at or before `now` and
    /// was set before `mark`.
    pub fn pop_before(&mut self, now: i64, mark: u64) -> Option<I> {
        let (&slot, &id) = self.queue.first_key_value()?;
        if slot.at() > now || slot.seq() >= mark {
            return None;
        }
        self.queue.pop_first();
        self.due.remove(&id);
        give_back_room(&mut self.due);
        Some(id)
    }

    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_one_deadline_per_id() {
        let mut d = Deadlines::default();
        assert!(d.set_earlier(7u64, 50));
        assert!(!d.set_earlier(7, 60), "a later time is ignored");
        assert!(!d.set_earlier(7, 20), "an earlier one replaces it");
        assert!(d.set_earlier(8, 30));
        assert!(d.set_earlier(9, 10));
        assert_eq!((d.len(), d.earliest()), (3, Some(10)));
        assert!(d.cancel(&9));
        assert!(!d.cancel(&9));
        let mark = d.mark();
        assert_eq!(d.pop_before(25, mark), Some(7));
        assert_eq!(d.pop_before(25, mark), None, "8 is due at 30");
        assert!(d.set_earlier(10, 0));
        // 10 was set after the mark: it waits for the next pass, and so
        // does what is behind it.
        assert_eq!(d.pop_before(100, mark), None);
        let mark = d.mark();
        assert_eq!(d.pop_before(100, mark), Some(10));
        assert_eq!(d.pop_before(100, mark), Some(8));
        assert!(d.is_empty() && d.earliest().is_none());
    }

    #[test]
    fn slots_order_by_time_then_order_set_over_all_times() {
        let times = [i64::MIN, -1, 0, 1, 1_700_000_000_000, i64::MAX];
        for (i, &a) in times.iter().enumerate() {
            assert_eq!((Slot::new(a, 7).at(), Slot::new(a, 7).seq()), (a, 7));
            assert!(Slot::new(a, 1) < Slot::new(a, 2));
            for &b in &times[i + 1..] {
                assert!(Slot::new(a, u64::MAX) < Slot::new(b, 0), "{a} before {b}");
            }
        }
    }

    #[test]
    fn memory_goes_back_after_a_burst() {
        let mut d = Deadlines::default();
        for id in 0..100_000u64 {
            d.set_earlier(id, id as i64);
        }
        for id in 0..100_000u64 {
            assert!(d.cancel(&id));
        }
        assert!(d.due.capacity() <= 128, "{}", d.due.capacity());
    }
}
