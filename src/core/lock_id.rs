//! A lock by database and key name, hashed once.
//!
//! Lock names come from clients, so the tables keyed by them need a keyed
//! hash (SipHash with a random key per process, as `std`'s maps use) or a
//! client could steer every name into one bucket. Working it out is most
//! of a lookup's cost, and one handoff looks a lock up several times: the
//! id keeps its hash from when it was made, and tables keyed by ids
//! (`PrehashedState`) use that hash, folded once.

use std::cmp::Ordering;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::OnceLock;

use super::short_bytes::ShortBytes;
use super::siphash::{hash_name_db, SipKey};
use super::waiters::IdHasher;

/// The process's key for lock-name hashes.
static KEY: OnceLock<SipKey> = OnceLock::new();

/// Names up to this long are kept in the id itself (see [`ShortBytes`]).
const INLINE_NAME: usize = 30;

/// A lock by database and key name. Ordered by database, then name, so
/// one database's locks sit side by side in ordered collections.
#[derive(Clone, Debug)]
pub struct LockId {
    db: i32,
    name: ShortBytes<INLINE_NAME>,
    /// The keyed hash of `db` and `name`.
    hash: u64,
}

impl LockId {
    pub fn new(db: i32, name: &[u8]) -> LockId {
        LockId {
            db,
            name: ShortBytes::new(name),
            hash: hash_name_db(*KEY.get_or_init(SipKey::random), name, db),
        }
    }

    /// The first id of database `db` in order (a bound for ranges).
    pub fn first_of(db: i32) -> LockId {
        LockId::new(db, b"")
    }

    pub fn db(&self) -> i32 {
        self.db
    }

    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The same name in database `db`.
    pub fn in_db(self, db: i32) -> LockId {
        LockId::new(db, &self.name)
    }
}

impl PartialEq for LockId {
    fn eq(&self, other: &LockId) -> bool {
        self.hash == other.hash && self.db == other.db && self.name() == other.name()
    }
}

impl Eq for LockId {}

impl Ord for LockId {
    fn cmp(&self, other: &LockId) -> Ordering {
        (self.db, self.name()).cmp(&(other.db, other.name()))
    }
}

impl PartialOrd for LockId {
    fn partial_cmp(&self, other: &LockId) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for LockId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// Hashes for tables keyed by `LockId`: the id's own keyed hash, folded
/// as the waiter ids' hash folds the server's numbers (one multiply).
pub type PrehashedState = BuildHasherDefault<IdHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    #[test]
    fn ids_are_equal_by_database_and_name_and_ordered_so() {
        let a = LockId::new(0, b"a");
        assert_eq!(a, LockId::new(0, b"a"));
        assert_ne!(a, LockId::new(1, b"a"));
        assert_ne!(a, LockId::new(0, b"b"));
        let set: BTreeSet<LockId> = [(1, "a"), (0, "b"), (0, "a"), (1, "")]
            .into_iter()
            .map(|(db, n)| LockId::new(db, n.as_bytes()))
            .collect();
        let order: Vec<(i32, &[u8])> = set.iter().map(|id| (id.db(), id.name())).collect();
        assert_eq!(
            order,
            [(0, &b"a"[..]), (0, b"b"), (1, b""), (1, b"a")],
            "by database, then name"
        );
        assert!(LockId::first_of(1) <= LockId::new(1, b""));
        assert!(LockId::first_of(1) > LockId::new(0, &[255; 8]));
        assert_eq!(a.clone().in_db(3), LockId::new(3, b"a"));
    }

    #[test]
    fn a_prehashed_table_finds_each_id() {
        let mut map: HashMap<LockId, usize, PrehashedState> = HashMap::default();
        for i in 0..10_000usize {
            map.insert(LockId::new((i % 3) as i32, i.to_string().as_bytes()), i);
        }
        for i in 0..10_000usize {
            let id = LockId::new((i % 3) as i32, i.to_string().as_bytes());
            assert_eq!(map.get(&id), Some(&i));
            assert_eq!(map.get(&id.in_db(7)), None);
        }
    }
}
