//! Work due at a time: locks to look at again (a holder's expiry, a handoff
//! deferred until the server allows writes), waiters' deadlines, grants to
//! revoke. Each job is held at most once, so what the module keeps pending
//! is bounded by the locks and waiters that exist, never by how many
//! commands were sent; the Redis layer runs one timer for the earliest job.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

#[derive(Debug)]
pub struct Schedule<J> {
    queue: BTreeSet<(i64, J)>,
    due: HashMap<J, i64>,
}

impl<J> Default for Schedule<J> {
    fn default() -> Self {
        Schedule {
            queue: BTreeSet::new(),
            due: HashMap::new(),
        }
    }
}

impl<J: Ord + Hash + Clone> Schedule<J> {
    /// Schedules `job` at `at`, replacing the time it had.
    pub fn set(&mut self, job: J, at: i64) {
        if let Some(old) = self.due.insert(job.clone(), at) {
            self.queue.remove(&(old, job.clone()));
        }
        self.queue.insert((at, job));
    }

    /// Schedules `job` at `at` unless it is already due earlier.
    pub fn set_earlier(&mut self, job: J, at: i64) {
        match self.due.get(&job) {
            Some(&old) if old <= at => {}
            _ => self.set(job, at),
        }
    }

    /// Forgets `job`; false if it was not scheduled.
    pub fn cancel(&mut self, job: &J) -> bool {
        match self.due.remove(job) {
            Some(at) => self.queue.remove(&(at, job.clone())),
            None => false,
        }
    }

    /// When `job` is due, if it is scheduled.
    pub fn when(&self, job: &J) -> Option<i64> {
        self.due.get(job).copied()
    }

    /// The time of the earliest job.
    pub fn earliest(&self) -> Option<i64> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// Takes every job due at or before `now`, earliest first.
    pub fn pop_due(&mut self, now: i64) -> Vec<J> {
        let mut jobs = Vec::new();
        while let Some((at, _)) = self.queue.first() {
            if *at > now {
                break;
            }
            let Some((_, job)) = self.queue.pop_first() else {
                break;
            };
            self.due.remove(&job);
            jobs.push(job);
        }
        jobs
    }

    /// Takes out every job `take` says to (a flushed or swapped
    /// database's), with its time.
    pub fn cancel_where(&mut self, take: impl Fn(&J) -> bool) -> Vec<(J, i64)> {
        let gone: Vec<(J, i64)> = self
            .due
            .iter()
            .filter(|(job, _)| take(job))
            .map(|(job, at)| (job.clone(), *at))
            .collect();
        for (job, at) in &gone {
            self.due.remove(job);
            self.queue.remove(&(*at, job.clone()));
        }
        gone
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
    fn one_entry_per_job_whatever_was_asked() {
        let mut s = Schedule::default();
        for i in 0..20_000 {
            s.set_earlier("lock", 1_000_000 - i);
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
