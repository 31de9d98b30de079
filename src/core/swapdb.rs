//! `SWAPDB` exchanges two databases without any key event: what the module
//! keeps by lock — looks at lease ends, lease ends parked on a replica —
//! follows the locks to their new database. Kept apart from the timer so
//! that the moves are tested without Redis.

use std::collections::BTreeSet;

use crate::core::bindings::LockId;
use crate::core::schedule::Schedule;

/// The database a lock of `db` is in after `SWAPDB first second`.
pub fn swapped(db: i32, first: i32, second: i32) -> i32 {
    if db == first {
        second
    } else if db == second {
        first
    } else {
        db
    }
}

/// Takes out of `schedule` the jobs kept by lock of database `db` (-1:
/// all), with their times; only that database's are looked at. `lock_of`
/// names a job's lock (None: a job of another kind), `job_of` makes the
/// job of a lock.
pub fn take_db<J: Ord + Clone>(
    schedule: &mut Schedule<J>,
    db: i32,
    lock_of: impl Fn(&J) -> Option<&LockId>,
    job_of: impl Fn(LockId) -> J,
) -> Vec<(LockId, i64)> {
    let first = job_of(LockId::first_of(if db == -1 { i32::MIN } else { db }));
    let of_db = |job: &J| lock_of(job).is_some_and(|id| db == -1 || id.db() == db);
    schedule
        .cancel_from(&first, of_db)
        .into_iter()
        .filter_map(|(job, at)| Some((lock_of(&job)?.clone(), at)))
        .collect()
}

/// Moves the jobs kept by lock of databases `first` and `second` to the
/// other one, each at its time. All are taken out before any is put back,
/// so none moves twice.
pub fn swap_jobs<J: Ord + Clone>(
    schedule: &mut Schedule<J>,
    first: i32,
    second: i32,
    lock_of: impl Fn(&J) -> Option<&LockId>,
    job_of: impl Fn(LockId) -> J,
) {
    let mut moved = take_db(schedule, first, &lock_of, &job_of);
    moved.extend(take_db(schedule, second, &lock_of, &job_of));
    for (id, at) in moved {
        let db = swapped(id.db(), first, second);
        schedule.set_earlier(job_of(id.in_db(db)), at);
    }
}

/// Takes the locks of database `db` out of `set`.
pub fn take_set_db(set: &mut BTreeSet<LockId>, db: i32) -> Vec<LockId> {
    if set.is_empty() {
        return Vec::new();
    }
    let ids: Vec<LockId> = set
        .range(LockId::first_of(db)..)
        .take_while(|id| id.db() == db)
        .cloned()
        .collect();
    for id in &ids {
        set.remove(id);
    }
    ids
}

/// Moves the locks of databases `first` and `second` in `set` to the other.
pub fn swap_set(set: &mut BTreeSet<LockId>, first: i32, second: i32) {
    let mut moved = take_set_db(set, first);
    moved.extend(take_set_db(set, second));
    set.extend(moved.into_iter().map(|id| {
        let db = swapped(id.db(), first, second);
        id.in_db(db)
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    enum Job {
        Serve(LockId),
        Leases(LockId),
        Other(u32),
    }

    fn leases(job: &Job) -> Option<&LockId> {
        match job {
            Job::Leases(id) => Some(id),
            _ => None,
        }
    }

    fn lock(db: i32, name: &str) -> LockId {
        LockId::new(db, name.as_bytes())
    }

    #[test]
    fn swapped_databases() {
        assert_eq!([0, 1, 2, 3].map(|db| swapped(db, 1, 2)), [0, 2, 1, 3]);
        assert_eq!(swapped(4, 4, 4), 4);
    }

    #[test]
    fn lease_jobs_follow_their_locks_with_their_times() {
        let mut s = Schedule::default();
        s.set(Job::Leases(lock(0, "a")), 5);
        s.set(Job::Leases(lock(1, "b")), 7);
        s.set(Job::Leases(lock(2, "c")), 9);
        s.set(Job::Serve(lock(0, "a")), 1);
        s.set(Job::Other(3), 2);
        swap_jobs(&mut s, 0, 1, leases, Job::Leases);
        assert_eq!(s.when(&Job::Leases(lock(1, "a"))), Some(5));
        assert_eq!(s.when(&Job::Leases(lock(0, "b"))), Some(7));
        assert_eq!(s.when(&Job::Leases(lock(2, "c"))), Some(9));
        assert_eq!(s.when(&Job::Leases(lock(0, "a"))), None);
        // Jobs of other kinds stay as they were.
        assert_eq!(s.when(&Job::Serve(lock(0, "a"))), Some(1));
        assert_eq!(s.when(&Job::Other(3)), Some(2));
        assert_eq!(s.len(), 5);
    }

    #[test]
    fn taking_one_database_or_all() {
        let mut s = Schedule::default();
        for (db, at) in [(0, 5), (1, 6), (1, 7), (3, 8)] {
            s.set(Job::Leases(lock(db, &at.to_string())), at);
        }
        s.set(Job::Other(1), 1);
        let taken = take_db(&mut s, 1, leases, Job::Leases);
        assert_eq!(taken, [(lock(1, "6"), 6), (lock(1, "7"), 7)]);
        assert_eq!(take_db(&mut s, -1, leases, Job::Leases).len(), 2);
        assert_eq!(s.pop_due(100), [Job::Other(1)]);
    }

    #[test]
    fn parked_locks_follow_too() {
        let mut set: BTreeSet<LockId> = [lock(0, "a"), lock(1, "b"), lock(5, "c")].into();
        swap_set(&mut set, 1, 0);
        let expected: BTreeSet<LockId> = [lock(1, "a"), lock(0, "b"), lock(5, "c")].into();
        assert_eq!(set, expected);
        assert_eq!(take_set_db(&mut set, 5), [lock(5, "c")]);
        assert_eq!(take_set_db(&mut BTreeSet::new(), 0), Vec::<LockId>::new());
    }
}
