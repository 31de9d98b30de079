//! The indexed form of a large set of holds: indexed by token, for the
//! holder's own calls (O(1)), and by lease end, so the next lease to end is
//! found and removed in O(log H).

use std::collections::{btree_map, BTreeMap, HashMap};

use super::compact::Entry;
use super::hold::{ended, Hold};

/// One holder's grant and public data, under its token.
#[derive(Clone)]
struct Slot {
    hold: Hold,
    data: Option<Box<[u8]>>,
}

/// A set of holds indexed twice; both indexes hold every hold.
#[derive(Clone)]
pub struct Indexed {
    by_token: HashMap<Box<[u8]>, Slot>,
    /// (lease end, fence) → token. Fences are unique within a key.
    by_expiry: BTreeMap<(i64, u64), Box<[u8]>>,
}

impl Indexed {
    pub fn from_holds<'a>(holds: impl Iterator<Item = Entry<'a>>) -> Indexed {
        let mut x = Indexed {
            by_token: HashMap::new(),
            by_expiry: BTreeMap::new(),
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
        self.by_token.get(token).map(|s| s.hold)
    }

    /// The public data of `token`'s hold, if it holds and has some.
    pub fn data_of(&self, token: &[u8]) -> Option<&[u8]> {
        self.by_token.get(token)?.data.as_deref()
    }

    pub fn insert(&mut self, token: &[u8], hold: Hold, data: Option<&[u8]>) {
        self.remove(token);
        let data = data.map(Box::from);
        self.by_token.insert(token.into(), Slot { hold, data });
        self.by_expiry
            .insert((hold.expire_at, hold.fence), token.into());
    }

    pub fn set_expiry(&mut self, token: &[u8], expire_at: i64) -> bool {
        let Some(slot) = self.by_token.get_mut(token) else {
            return false;
        };
        let hold = &mut slot.hold;
        let moved = self.by_expiry.remove(&(hold.expire_at, hold.fence));
        hold.expire_at = expire_at;
        let key = (expire_at, hold.fence);
        self.by_expiry
            .insert(key, moved.unwrap_or_else(|| token.into()));
        true
    }

    /// Replaces the public data of `token`'s hold; false if it holds nothing.
    pub fn set_data(&mut self, token: &[u8], data: Option<&[u8]>) -> bool {
        let Some(slot) = self.by_token.get_mut(token) else {
            return false;
        };
        slot.data = data.map(Box::from);
        true
    }

    pub fn remove(&mut self, token: &[u8]) -> Option<Hold> {
        let slot = self.by_token.remove(token)?;
        self.by_expiry
            .remove(&(slot.hold.expire_at, slot.hold.fence));
        Some(slot.hold)
    }

    pub fn pop_ended(&mut self, now_ms: i64) -> Option<(Box<[u8]>, Hold)> {
        let (&(at, fence), _) = self.by_expiry.first_key_value()?;
        if !ended(at, now_ms) {
            return None;
        }
        let (_, token) = self.by_expiry.pop_first()?;
        self.by_token.remove(&token);
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
            by_token: &self.by_token,
        }
    }

    /// At least the bytes of the holds' compact form.
    pub fn stored_len_bound(&self) -> usize {
        // Two varints of at most 10 bytes and a token length of at most 2;
        // data and its length of at most 2.
        1 + self
            .by_token
            .iter()
            .map(|(t, s)| t.len() + 22 + s.data.as_ref().map_or(0, |d| d.len() + 2))
            .sum::<usize>()
    }

    /// Bytes this form takes, itself included: an estimate (the tokens
    /// twice, each hold's data, and each index's per-entry overhead, spare
    /// capacity and node slack included; checked against `used_memory` by a
    /// test).
    pub fn heap_size(&self) -> usize {
        const HASH_ENTRY: usize = 64;
        const TREE_ENTRY: usize = 64;
        std::mem::size_of::<Indexed>()
            + self
                .by_token
                .iter()
                .map(|(t, s)| {
                    2 * t.len() + HASH_ENTRY + TREE_ENTRY + s.data.as_ref().map_or(0, |d| d.len())
                })
                .sum::<usize>()
    }
}

/// The holds of an [`Indexed`], in (lease end, fence) order.
#[derive(Clone)]
pub struct Iter<'a> {
    by_expiry: btree_map::Iter<'a, (i64, u64), Box<[u8]>>,
    by_token: &'a HashMap<Box<[u8]>, Slot>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        self.by_expiry.next().map(|(&(expire_at, fence), token)| {
            let data = self.by_token.get(token).and_then(|s| s.data.as_deref());
            (&token[..], Hold { fence, expire_at }, data)
        })
    }
}
