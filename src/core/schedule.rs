//! Work due at a time: locks to look at again (a holder's expiry, a handoff
//! deferred until the server allows writes), waiters' deadlines, grants to
//! revoke. Each job is held at most once, so what the module keeps pending
//! is bounded by the locks and waiters that exist, never by how many
//! commands were sent; the Redis layer runs one timer for the earliest job.
//!
//! Jobs are taken one at a time, so that a pass can stop when its time is
//! spent and leave the rest where they are, and only those scheduled before
//! the pass began ([`Schedule::mark`]): a job that schedules another for
//! now never makes a pass run forever. Ordered maps, not hash maps: their
//! memory goes with their entries, and the jobs of one database's locks sit
//! side by side (a flush takes them out without looking at the others).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// Each job is kept once and shared by the two indexes: a job names a key,
/// and a lock with holders keeps one scheduled for as long as it lives.
#[derive(Debug)]
pub struct Schedule<J> {
    /// (when, order of scheduling, job)
    queue: BTreeSet<(i64, u64, Rc<J>)>,
    due: BTreeMap<Rc<J>, (i64, u64)>,
    next_seq: u64,
}

impl<J> Default for Schedule<J> {
    fn default() -> Self {
        Schedule {
            queue: BTreeSet::new(),
            due: BTreeMap::new(),
            next_seq: 0,
        }
    }
}

/// A job taken out of both indexes: the last reference to it.
fn owned<J: Clone>(job: Rc<J>) -> J {
    Rc::try_unwrap(job).unwrap_or_else(|shared| (*shared).clone())
}

impl<J: Ord + Clone> Schedule<J> {
    /// Schedules `job` at `at`, replacing the time it had.
    pub fn set(&mut self, job: J, at: i64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let job = match self.due.remove_entry(&job) {
            Some((kept, (old, old_seq))) => {
                self.queue.remove(&(old, old_seq, Rc::clone(&kept)));
                kept
            }
            None => Rc::new(job),
        };
        self.due.insert(Rc::clone(&job), (at, seq));
        self.queue.insert((at, seq, job));
    }

    /// Schedules `job` at `at` unless it is already due earlier; true if
    /// it was not scheduled before.
    pub fn set_earlier(&mut self, job: J, at: i64) -> bool {
        match self.due.get(&job) {
            Some(&(old, _)) if old <= at => false,
            Some(_) => {
                self.set(job, at);
                false
            }
            None => {
                self.set(job, at);
                true
            }
        }
    }

    /// Forgets `job`; false if it was not scheduled.
    pub fn cancel(&mut self, job: &J) -> bool {
        match self.due.remove_entry(job) {
            Some((kept, (at, seq))) => self.queue.remove(&(at, seq, kept)),
            None => false,
        }
    }

    /// When `job` is due, if it is scheduled.
    pub fn when(&self, job: &J) -> Option<i64> {
        self.due.get(job).map(|&(at, _)| at)
    }

    /// The time of the earliest job.
    pub fn earliest(&self) -> Option<i64> {
        self.queue.first().map(|(at, _, _)| *at)
    }

    /// The earliest job and its time.
    pub fn first(&self) -> Option<(&J, i64)> {
        self.queue.first().map(|(at, _, job)| (&**job, *at))
    }

    /// A mark for [`Schedule::pop_before`]: jobs scheduled from now on are
    /// after it.
    pub fn mark(&self) -> u64 {
        self.next_seq
    }

    /// Takes the earliest job if it is due at or before `now` and was
    /// scheduled before `mark`. None when the earliest is not due yet, or
    /// is newer than the mark (what is behind it waits for the next pass).
    pub fn pop_before(&mut self, now: i64, mark: u64) -> Option<J> {
        let (at, seq, _) = self.queue.first()?;
        if *at > now || *seq >= mark {
            return None;
        }
        let (_, _, job) = self.queue.pop_first()?;
        self.due.remove(&*job);
        Some(owned(job))
    }

    /// Takes every job due at or before `now`, earliest first.
    pub fn pop_due(&mut self, now: i64) -> Vec<J> {
        let mark = self.mark();
        std::iter::from_fn(|| self.pop_before(now, mark)).collect()
    }

    /// Takes out the jobs from `first` on, in job order, for as long as
    /// `take` says (one database's lease ends), with their times.
    pub fn cancel_from(&mut self, first: &J, take: impl Fn(&J) -> bool) -> Vec<(J, i64)> {
        let gone: Vec<(Rc<J>, i64, u64)> = self
            .due
            .range::<J, _>(first..)
            .take_while(|(job, _)| take(job))
            .map(|(job, &(at, seq))| (Rc::clone(job), at, seq))
            .collect();
        self.take_out(gone)
    }

    /// Takes out every job `take` says to, with its time (looks at all).
    pub fn cancel_where(&mut self, take: impl Fn(&J) -> bool) -> Vec<(J, i64)> {
        let gone: Vec<(Rc<J>, i64, u64)> = self
            .due
            .iter()
            .filter(|(job, _)| take(job))
            .map(|(job, &(at, seq))| (Rc::clone(job), at, seq))
            .collect();
        self.take_out(gone)
    }

    fn take_out(&mut self, gone: Vec<(Rc<J>, i64, u64)>) -> Vec<(J, i64)> {
        for (job, at, seq) in &gone {
            self.due.remove(&**job);
            self.queue.remove(&(*at, *seq, Rc::clone(job)));
        }
        gone.into_iter()
            .map(|(job, at, _)| (owned(job), at))
            .collect()
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
    fn cancelling_by_a_filter() {
        let mut s = Schedule::default();
        for (job, at) in [(1, 10), (2, 5), (3, 7), (4, 1)] {
            s.set(job, at);
        }
        let mut gone = s.cancel_where(|j| j % 2 == 0);
        gone.sort();
        assert_eq!(gone, [(2, 5), (4, 1)]);
        assert_eq!((s.len(), s.earliest()), (2, Some(7)));
        assert_eq!(s.pop_due(100), [3, 1]);
        assert_eq!(s.cancel_where(|_| true), []);
    }

    #[test]
    fn cancelling_a_run_of_neighbouring_jobs() {
        let mut s = Schedule::default();
        for (db, name, at) in [(0, "a", 5), (1, "a", 3), (1, "b", 9), (2, "a", 1)] {
            s.set((db, name), at);
        }
        let gone = s.cancel_from(&(1, ""), |(db, _)| *db == 1);
        assert_eq!(gone, [((1, "a"), 3), ((1, "b"), 9)]);
        assert_eq!(s.cancel_from(&(7, ""), |(db, _)| *db == 7), []);
        assert_eq!(s.pop_due(100), [(2, "a"), (0, "a")]);
    }

    #[test]
    fn one_entry_per_job_whatever_was_asked() {
        let mut s = Schedule::default();
        assert!(s.set_earlier("lock", 1_000_000));
        for i in 1..20_000 {
            assert!(!s.set_earlier("lock", 1_000_000 - i));
        }
        assert_eq!(s.len(), 1);
        assert_eq!(s.when(&"lock"), Some(1_000_000 - 19_999));
        s.set_earlier("lock", 5_000_000);
        assert_eq!(
            s.when(&"lock"),
            Some(1_000_000 - 19_999),
            "later is ignored"
        );
        s.set("lock", 5_000_000);
        assert_eq!(s.when(&"lock"), Some(5_000_000), "set replaces");
        assert_eq!(s.len(), 1);
        assert_eq!(s.earliest(), Some(5_000_000));
    }

    #[test]
    fn due_jobs_come_out_in_time_order_once() {
        let mut s = Schedule::default();
        s.set("c", 30);
        s.set("a", 10);
        s.set("b", 20);
        s.set("late", i64::MAX);
        assert_eq!((s.len(), s.is_empty()), (4, false));
        assert_eq!(s.earliest(), Some(10));
        assert_eq!(s.pop_due(9), Vec::<&str>::new());
        assert_eq!(s.pop_due(20), vec!["a", "b"]);
        assert_eq!(s.pop_due(20), Vec::<&str>::new());
        assert_eq!(s.pop_due(i64::MAX), vec!["c", "late"]);
        assert!(s.is_empty());
        assert_eq!(s.earliest(), None);
    }

    #[test]
    fn a_pass_takes_only_what_was_scheduled_before_it() {
        let mut s = Schedule::default();
        s.set("old", 10);
        s.set("older", 5);
        let mark = s.mark();
        assert_eq!(s.pop_before(10, mark), Some("older"));
        // Scheduled during the pass, due at once: waits for the next pass,
        // and so does what is behind it.
        s.set("new", 0);
        assert_eq!(s.pop_before(10, mark), None);
        assert_eq!(s.len(), 2);
        let mark = s.mark();
        assert_eq!(s.pop_before(10, mark), Some("new"));
        assert_eq!(s.pop_before(10, mark), Some("old"));
        assert_eq!(s.pop_before(10, mark), None);
    }

    #[test]
    fn a_job_moved_earlier_keeps_one_entry() {
        let mut s = Schedule::default();
        s.set("a", 50);
        s.set("b", 40);
        assert!(!s.set_earlier("a", 30));
        assert_eq!(s.len(), 2);
        assert_eq!(s.pop_due(100), ["a", "b"]);
        assert!(s.is_empty());
    }

    #[test]
    fn cancel() {
        let mut s = Schedule::default();
        s.set(1, 10);
        s.set(2, 10);
        assert!(s.cancel(&1));
        assert!(!s.cancel(&1));
        assert_eq!(s.when(&1), None);
        assert_eq!(s.pop_due(10), vec![2]);
    }
}
