//! `EPHEMERAL` bookkeeping: which holds are bound to which connection, and
//! the holds of connections that closed, released a few at a time.
//!
//! Two indexes, kept only for bound holds: lock → its bound holders, and
//! connection → its bound holds, so a disconnect looks at that connection's
//! holds only. A closing connection costs nothing at once: its holds become
//! orphans (still indexed by lock, their connection marked closed), which
//! the Redis layer releases in time-sliced passes, or at once when a
//! command touches their lock. Connection ids are never reused, so a closed
//! id stays closed.
//!
//! The lock index is ordered, so one database's bindings sit side by side
//! (a flush of an empty database looks at nothing), and its memory goes
//! with its entries; the connection index shrinks as it empties.

use std::collections::{hash_set, BTreeMap, HashMap, HashSet, VecDeque};

pub use crate::core::lock_id::LockId;

/// One bound hold: a holder of a lock, by token.
type HoldId = (LockId, Vec<u8>);

/// Below this many slots a table is left as it is.
const SMALL: usize = 64;

#[derive(Default)]
pub struct Bindings {
    /// lock → token → (connection, fence)
    by_lock: BTreeMap<LockId, HashMap<Vec<u8>, (u64, u64)>>,
    /// Live connections' bound holds.
    by_client: HashMap<u64, HashSet<HoldId>>,
    /// Connections that closed while holds were bound to them, until all
    /// of those are released.
    closed: HashSet<u64>,
    /// The holds each closed connection had, still to be looked at.
    closing: VecDeque<(u64, hash_set::IntoIter<HoldId>)>,
    live: usize,
    orphans: usize,
    /// Sets of orphans restored from a file so far (each under an id of
    /// its own, counted down from `u64::MAX`, which no connection has).
    restored: u64,
}

impl Bindings {
    /// Binds the grant `(token, fence)` of `lock` to `client`, replacing any
    /// earlier binding of that holder.
    pub fn bind(&mut self, lock: LockId, client: u64, token: &[u8], fence: u64) {
        self.unbind_holder(&lock, token);
        if self.closed.contains(&client) {
            return;
        }
        self.by_client
            .entry(client)
            .or_default()
            .insert((lock.clone(), token.to_vec()));
        self.by_lock
            .entry(lock)
            .or_default()
            .insert(token.to_vec(), (client, fence));
        self.live += 1;
    }

    /// `token`'s hold of `lock` is no longer bound.
    pub fn unbind_holder(&mut self, lock: &LockId, token: &[u8]) {
        let Some(holds) = self.by_lock.get_mut(lock) else {
            return;
        };
        let removed = holds.remove(token);
        if holds.is_empty() {
            self.by_lock.remove(lock);
        }
        if let Some((client, _)) = removed {
            self.forget(client, lock, token);
        }
    }

    /// No hold of `lock` is bound any more.
    pub fn unbind(&mut self, lock: &LockId) {
        let Some(holds) = self.by_lock.remove(lock) else {
            return;
        };
        for (token, (client, _)) in holds {
            self.forget(client, lock, &token);
        }
    }

    /// Drops the bindings of database `db`'s locks (flushed, swapped).
    pub fn unbind_db(&mut self, db: i32) {
        let first = LockId::first_of(db);
        let gone: Vec<LockId> = self
            .by_lock
            .range(first..)
            .take_while(|(lock, _)| lock.db() == db)
            .map(|(lock, _)| lock.clone())
            .collect();
        for lock in gone {
            self.unbind(&lock);
        }
    }

    /// Drops every binding (all databases flushed, or a demotion).
    pub fn clear(&mut self) {
        *self = Bindings::default();
    }

    /// The live connection `lock`'s grant `(token, fence)` is bound to.
    pub fn client_of(&self, lock: &LockId, token: &[u8], fence: u64) -> Option<u64> {
        self.bound(lock, token, fence)
            .filter(|client| !self.closed.contains(client))
    }

    /// Whether `lock`'s grant `(token, fence)` was bound to a connection
    /// that closed, and is not released yet.
    pub fn is_orphan(&self, lock: &LockId, token: &[u8], fence: u64) -> bool {
        self.orphans > 0
            && self
                .bound(lock, token, fence)
                .is_some_and(|client| self.closed.contains(&client))
    }

    fn bound(&self, lock: &LockId, token: &[u8], fence: u64) -> Option<u64> {
        self.by_lock
            .get(lock)?
            .get(token)
            .filter(|(_, f)| *f == fence)
            .map(|(client, _)| *client)
    }

    /// `client` closed: its holds become orphans, to be released. Returns
    /// how many.
    pub fn close(&mut self, client: u64) -> usize {
        let Some(holds) = self.by_client.remove(&client) else {
            return 0;
        };
        self.shrink_clients();
        let n = holds.len();
        self.live -= n;
        self.orphans += n;
        self.closed.insert(client);
        self.closing.push_back((client, holds.into_iter()));
        n
    }

    /// Takes out `lock`'s orphans, to be released now: (token, fence) each.
    pub fn take_orphans(&mut self, lock: &LockId) -> Vec<(Vec<u8>, u64)> {
        if self.orphans == 0 {
            return Vec::new();
        }
        let Some(holds) = self.by_lock.get(lock) else {
            return Vec::new();
        };
        let taken: Vec<(Vec<u8>, u64)> = holds
            .iter()
            .filter(|(_, (client, _))| self.closed.contains(client))
            .map(|(token, (_, fence))| (token.clone(), *fence))
            .collect();
        for (token, _) in &taken {
            self.unbind_holder(lock, token);
        }
        taken
    }

    /// Takes out the next orphan to release, oldest closed connection
    /// first: (lock, token, fence).
    pub fn next_orphan(&mut self) -> Option<(LockId, Vec<u8>, u64)> {
        while self.orphans > 0 {
            let (client, holds) = self.closing.front_mut()?;
            let client = *client;
            let Some((lock, token)) = holds.next() else {
                self.closing.pop_front();
                self.closed.remove(&client);
                continue;
            };
            let fence = match self.by_lock.get(&lock).and_then(|h| h.get(&token)) {
                Some(&(c, fence)) if c == client => fence,
                // Released, rebound or gone since.
                _ => continue,
            };
            self.unbind_holder(&lock, &token);
            return Some((lock, token, fence));
        }
        // What is left names holds that went another way.
        self.closing = VecDeque::new();
        self.closed = HashSet::new();
        None
    }

    /// The holds of closed connections not released yet, as (lock, token,
    /// fence): ends still owed, which a file saved now must carry.
    pub fn orphan_holds(&self) -> Vec<(LockId, Vec<u8>, u64)> {
        if self.orphans == 0 {
            return Vec::new();
        }
        self.by_lock
            .iter()
            .flat_map(|(lock, holds)| {
                holds
                    .iter()
                    .filter(|(_, (client, _))| self.closed.contains(client))
                    .map(move |(token, (_, fence))| (lock.clone(), token.clone(), *fence))
            })
            .collect()
    }

    /// Orphans read back from a file: to be released as if their
    /// connection had just closed. Returns how many.
    pub fn restore_orphans(&mut self, holds: Vec<(LockId, Vec<u8>, u64)>) -> usize {
        if holds.is_empty() {
            return 0;
        }
        self.restored += 1;
        let client = u64::MAX - self.restored;
        for (lock, token, fence) in holds {
            self.bind(lock, client, &token, fence);
        }
        self.close(client)
    }

    /// Holds bound to live connections.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Holds of closed connections not released yet.
    pub fn orphans(&self) -> usize {
        self.orphans
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0 && self.orphans == 0
    }

    /// A binding of `client` to `lock`'s `token` was removed.
    fn forget(&mut self, client: u64, lock: &LockId, token: &[u8]) {
        if self.closed.contains(&client) {
            self.orphans -= 1;
            return;
        }
        self.live -= 1;
        let Some(holds) = self.by_client.get_mut(&client) else {
            return;
        };
        holds.remove(&(lock.clone(), token.to_vec()));
        if holds.is_empty() {
            self.by_client.remove(&client);
            self.shrink_clients();
        } else if holds.capacity() > SMALL && holds.len() * 8 < holds.capacity() {
            holds.shrink_to(holds.len() * 2);
        }
    }

    fn shrink_clients(&mut self) {
        let c = &mut self.by_client;
        if c.capacity() > SMALL && c.len() * 8 < c.capacity() {
            c.shrink_to(c.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(db: i32, name: &str) -> LockId {
        LockId::new(db, name.as_bytes())
    }

    #[test]
    fn binding_and_unbinding() {
        let mut b = Bindings::default();
        b.bind(lock(0, "a"), 7, b"t", 1);
        b.bind(lock(0, "a"), 8, b"u", 2);
        assert_eq!((b.live(), b.orphans()), (2, 0));
        assert_eq!(b.client_of(&lock(0, "a"), b"t", 1), Some(7));
        assert_eq!(b.client_of(&lock(0, "a"), b"t", 9), None, "another grant");
        // Rebinding the holder replaces its binding.
        b.bind(lock(0, "a"), 8, b"t", 1);
        assert_eq!(b.client_of(&lock(0, "a"), b"t", 1), Some(8));
        assert_eq!(b.live(), 2);
        assert_eq!(b.close(7), 0, "7 holds nothing any more");
        b.unbind(&lock(0, "a"));
        assert!(b.is_empty());
        assert!(b.by_client.is_empty() && b.by_lock.is_empty());
    }

    #[test]
    fn orphans_are_listed_and_restored_as_orphans() {
        let mut b = Bindings::default();
        let (k1, k2) = (LockId::new(0, b"a"), LockId::new(1, b"b"));
        b.bind(k1.clone(), 7, b"t", 3);
        b.bind(k2.clone(), 8, b"u", 4);
        assert!(b.orphan_holds().is_empty());
        b.close(7);
        let owed = b.orphan_holds();
        assert_eq!(owed, vec![(k1.clone(), b"t".to_vec(), 3)]);
        let mut again = Bindings::default();
        assert_eq!(again.restore_orphans(owed), 1);
        assert!(again.is_orphan(&k1, b"t", 3));
        assert_eq!(again.client_of(&k1, b"t", 3), None);
        assert_eq!(again.next_orphan(), Some((k1, b"t".to_vec(), 3)));
        assert_eq!((again.live(), again.orphans()), (0, 0));
        assert_eq!(again.restore_orphans(Vec::new()), 0);
    }

    #[test]
    fn a_closed_connection_leaves_orphans_released_one_by_one() {
        let mut b = Bindings::default();
        for i in 0..100 {
            b.bind(lock(0, &format!("k{i}")), 7, b"t", i);
        }
        b.bind(lock(0, "other"), 8, b"t", 500);
        assert_eq!(b.close(7), 100);
        assert_eq!((b.live(), b.orphans()), (1, 100));
        assert!(b.is_orphan(&lock(0, "k3"), b"t", 3));
        assert_eq!(b.client_of(&lock(0, "k3"), b"t", 3), None);
        assert!(!b.is_orphan(&lock(0, "other"), b"t", 500));
        // A command on one of them takes it out at once.
        assert_eq!(b.take_orphans(&lock(0, "k3")), [(b"t".to_vec(), 3)]);
        assert_eq!(b.take_orphans(&lock(0, "k3")), []);
        assert_eq!(b.take_orphans(&lock(0, "other")), [], "a live hold");
        // Another goes its own way (released by its token, say).
        b.unbind_holder(&lock(0, "k4"), b"t");
        let mut released: Vec<u64> = std::iter::from_fn(|| b.next_orphan())
            .map(|(_, _, fence)| fence)
            .collect();
        released.sort();
        let expected: Vec<u64> = (0..100).filter(|i| *i != 3 && *i != 4).collect();
        assert_eq!(released, expected);
        assert_eq!((b.live(), b.orphans()), (1, 0));
        assert!(b.closed.is_empty() && b.closing.is_empty());
        assert_eq!(b.client_of(&lock(0, "other"), b"t", 500), Some(8));
    }

    #[test]
    fn a_rebound_orphan_is_not_released() {
        let mut b = Bindings::default();
        b.bind(lock(0, "a"), 7, b"t", 1);
        b.close(7);
        // The token is granted anew to a live connection (after the orphan
        // was released by that command).
        assert_eq!(b.take_orphans(&lock(0, "a")).len(), 1);
        b.bind(lock(0, "a"), 9, b"t", 2);
        assert_eq!(b.next_orphan(), None);
        assert_eq!(b.client_of(&lock(0, "a"), b"t", 2), Some(9));
        assert_eq!((b.live(), b.orphans()), (1, 0));
    }

    #[test]
    fn a_flush_of_one_database_leaves_the_others() {
        let mut b = Bindings::default();
        for db in 0..3 {
            b.bind(lock(db, "a"), 7, b"t", db as u64);
            b.bind(lock(db, "b"), 8, b"t", 10 + db as u64);
        }
        b.close(8);
        b.unbind_db(1);
        b.unbind_db(5);
        assert_eq!((b.live(), b.orphans()), (2, 2));
        assert_eq!(b.client_of(&lock(1, "a"), b"t", 1), None);
        assert_eq!(b.client_of(&lock(2, "a"), b"t", 2), Some(7));
        let orphans: Vec<i32> = std::iter::from_fn(|| b.next_orphan())
            .map(|(id, _, _)| id.db())
            .collect();
        assert_eq!(orphans.len(), 2);
        assert!(!orphans.contains(&1));
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn the_connection_index_shrinks_as_it_empties() {
        let mut b = Bindings::default();
        for client in 0..10_000 {
            b.bind(lock(0, &format!("k{client}")), client, b"t", client);
        }
        let peak = b.by_client.capacity();
        for client in 0..10_000 {
            b.unbind_holder(&lock(0, &format!("k{client}")), b"t");
        }
        assert!(b.is_empty());
        assert!(
            b.by_client.capacity() < peak / 8,
            "{}",
            b.by_client.capacity()
        );
    }
}
