//! The indexed form of a large set of holds: indexed by token, for the
//! holder's own calls (O(1)), and by lease end, so the next lease to end is
//! found and removed in O(log H).

use std::collections::{btree_map, BTreeMap, HashMap};

use super::compact::Entry;
use super::hold::{ended, Hold};

/// A set of holds indexed twice; both indexes hold every hold.
#[derive(Clone)]
pub struct Indexed {
    by_token: HashMap<Box<[u8]>, Hold>,
    /// (lease end, fence) → token. Fences are unique within a key.
    by_expiry: BTreeMap<(i64, u64), Box<[u8]>>,
    /// Token → public data, for the holders that have some only: holds
    /// without data cost what they did before there was data.
    data: HashMap<Box<[u8]>, Box<[u8]>>,
}

impl Indexed {
    pub fn from_holds<'a>(holds: impl Iterator<Item = Entry<'a>>) -> Indexed {
        let mut x = Indexed {
            by_token: HashMap::new(),
            by_expiry: BTreeMap::new(),
            data: HashMap::new(),
        };
        for (token, hold, data) in holds {
            x.insert(token, hold, data);
        }
        x
    }

    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    pub fn get(&self, token: &[u8]) -> Option<Hold> {
        self.by_token.get(token).copied()
    }

    /// The public data of `token`'s hold, if it holds and has some.
    pub fn data_of(&self, token: &[u8]) -> Option<&[u8]> {
        self.data.get(token).map(|d| &d[..])
    }

    pub fn insert(&mut self, token: &[u8], hold: Hold, data: Option<&[u8]>) {
        self.remove(token);
        self.by_token.insert(token.into(), hold);
        self.by_expiry
            .insert((hold.expire_at, hold.fence), token.into());
        if let Some(data) = data {
            self.data.insert(token.into(), data.into());
        }
    }

    pub fn set_expiry(&mut self, token: &[u8], expire_at: i64) -> bool {
        let Some(hold) = self.by_token.get_mut(token) else {
            return false;
        };
        let moved = self.by_expiry.remove(&(hold.expire_at, hold.fence));
        hold.expire_at = expire_at;
        let key = (expire_at, hold.fence);
        self.by_expiry
            .insert(key, moved.unwrap_or_else(|| token.into()));
        true
    }

    /// Replaces the public data of `token`'s hold; false if it holds nothing.
    pub fn set_data(&mut self, token: &[u8], data: Option<&[u8]>) -> bool {
        if !self.by_token.contains_key(token) {
            return false;
        }
        match data {
            Some(data) => self.data.insert(token.into(), data.into()),
            None => self.data.remove(token),
        };
        true
    }

    pub fn remove(&mut self, token: &[u8]) -> Option<Hold> {
        let hold = self.by_token.remove(token)?;
        self.by_expiry.remove(&(hold.expire_at, hold.fence));
        self.data.remove(token);
        Some(hold)
    }

    /// Whether any holder has public data.
    pub fn has_data(&self) -> bool {
        !self.data.is_empty()
    }

    pub fn pop_ended(&mut self, now_ms: i64) -> Option<(Box<[u8]>, Hold)> {
        let (&(at, fence), _) = self.by_expiry.first_key_value()?;
        if !ended(at, now_ms) {
            return None;
        }
        let (_, token) = self.by_expiry.pop_first()?;
        self.by_token.remove(&token);
        self.data.remove(&token);
        Some((
            token,
            Hold {
                fence,
                expire_at: at,
            },
        ))
    }

    /// The first lease to end.
    pub fn earliest(&self) -> Option<i64> {
        self.by_expiry.first_key_value().map(|((at, _), _)| *at)
    }

    /// The last lease to end.
    pub fn latest(&self) -> Option<i64> {
        self.by_expiry.last_key_value().map(|((at, _), _)| *at)
    }

    /// Every hold, in (lease end, fence) order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            by_expiry: self.by_expiry.iter(),
            data: &self.data,
        }
    }

    /// At least the bytes of the holds' compact form.
    pub fn stored_len_bound(&self) -> usize {
        // Two varints of at most 10 bytes and a token length of at most 2;
        // data and its length of at most 2.
        let holds = self.by_token.keys().map(|t| t.len() + 22).sum::<usize>();
        1 + holds + self.data.values().map(|d| d.len() + 2).sum::<usize>()
    }

    /// Bytes this form takes, itself included: an estimate (the tokens
    /// twice, and each index's per-entry overhead, spare capacity and node
    /// slack included; checked against `used_memory` by a test), and for
    /// holders with data the token once more, the data and an entry.
    pub fn heap_size(&self) -> usize {
        const HASH_ENTRY: usize = 64;
        const TREE_ENTRY: usize = 64;
        let holds = self
            .by_token
            .keys()
            .map(|t| 2 * t.len() + HASH_ENTRY + TREE_ENTRY)
            .sum::<usize>();
        let data = self
            .data
            .iter()
            .map(|(t, d)| t.len() + d.len() + HASH_ENTRY)
            .sum::<usize>();
        std::mem::size_of::<Indexed>() + holds + data
    }
}

/// The holds of an [`Indexed`], in (lease end, fence) order.
#[derive(Clone)]
pub struct Iter<'a> {
    by_expiry: btree_map::Iter<'a, (i64, u64), Box<[u8]>>,
    data: &'a HashMap<Box<[u8]>, Box<[u8]>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        self.by_expiry.next().map(|(&(expire_at, fence), token)| {
            // No lookup while no holder has data.
            let data = match self.data.is_empty() {
                true => None,
                false => self.data.get(token).map(|d| &d[..]),
            };
            (&token[..], Hold { fence, expire_at }, data)
        })
    }
}
