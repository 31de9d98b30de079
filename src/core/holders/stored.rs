//! Holds as RDB files and `DUMP` payloads store them, and read back:
//! anything the module could not have written is refused.

use std::borrow::Cow;
use std::collections::HashSet;

use super::compact;
use super::{Body, Hold, Holders, HoldersError, Kind, MAX_LIMIT};
use crate::core::fence;
use crate::core::limits::MAX_DATA_LEN;
use crate::core::token::MAX_TOKEN_LEN;

/// A hold read back from storage: token, grant, public data.
pub type StoredHold = (Vec<u8>, Hold, Option<Vec<u8>>);

impl Holders {
    /// The holds as RDB files and `DUMP` payloads store them (encoding
    /// version 3): in lease-end order, each against the one before it (see
    /// [`compact`]), written with data when some holder has any
    /// ([`Holders::has_data`]: the record has its own code then). Read back
    /// by [`Holders::from_encoded`].
    pub fn encoded(&self) -> Cow<'_, [u8]> {
        match &self.body {
            Body::Compact(c) => Cow::Borrowed(c.stored()),
            Body::Indexed(x) => Cow::Owned(compact::encode_stored(x.iter()).0),
        }
    }

    /// Checks a set of holds read back from storage: anything the module
    /// could not have written is refused.
    pub fn validate(&self) -> Result<(), HoldersError> {
        if let Kind::Semaphore { limit } = self.kind() {
            if !(1..=MAX_LIMIT).contains(&limit) {
                return Err(HoldersError::BadLimit);
            }
            if self.len() > limit as usize {
                return Err(HoldersError::OverLimit);
            }
        }
        if self.is_empty() {
            return Err(HoldersError::Empty);
        }
        Ok(())
    }

    /// Rebuilds holds read back from storage, refusing anything the module
    /// could not have written: among that, a lease end after `latest_end`
    /// (now plus the longest TTL), which would make a hold that never ends.
    pub fn from_stored(
        kind: Kind,
        stored: impl IntoIterator<Item = StoredHold>,
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        let holds: Vec<StoredHold> = stored.into_iter().collect();
        let holds = holds.iter().map(|(t, h, d)| (&t[..], *h, d.as_deref()));
        Holders::from_checked(kind, holds.collect(), latest_end)
    }

    /// Rebuilds holds stored as [`Holders::encoded`] wrote them, `count`
    /// of them, written `with_data` or not, refusing anything the module
    /// could not have written: as [`Holders::from_stored`], bytes that do
    /// not read back as exactly `count` holds in lease-end order, and holds
    /// written with data of which none has any.
    pub fn from_encoded(
        kind: Kind,
        count: u64,
        bytes: &[u8],
        with_data: bool,
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        let mut reader = compact::Reader::new(bytes, with_data);
        let mut holds = Vec::new();
        while let Some(hold) = reader.next_hold() {
            holds.push(hold.map_err(|_| HoldersError::Malformed)?);
        }
        if holds.len() as u64 != count {
            return Err(HoldersError::Malformed);
        }
        let order = |h: &Hold| (h.expire_at, h.fence);
        if holds.windows(2).any(|w| order(&w[0].1) >= order(&w[1].1)) {
            return Err(HoldersError::Unordered);
        }
        if with_data && holds.iter().all(|(_, _, d)| d.is_none()) {
            return Err(HoldersError::BadData);
        }
        Holders::from_checked(kind, holds, latest_end)
    }

    fn from_checked(
        kind: Kind,
        mut holds: Vec<compact::Entry<'_>>,
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        {
            let mut tokens = HashSet::new();
            let mut fences = HashSet::new();
            for &(token, hold, data) in &holds {
                if token.is_empty() || token.len() > MAX_TOKEN_LEN {
                    return Err(HoldersError::BadToken);
                }
                if data.is_some_and(|d| d.is_empty() || d.len() > MAX_DATA_LEN) {
                    return Err(HoldersError::BadData);
                }
                if !fence::is_valid(hold.fence) {
                    return Err(HoldersError::BadFence);
                }
                if !(0..=latest_end).contains(&hold.expire_at) {
                    return Err(HoldersError::BadLeaseEnd);
                }
                if !tokens.insert(token) {
                    return Err(HoldersError::DuplicateToken);
                }
                if !fences.insert(hold.fence) {
                    return Err(HoldersError::DuplicateFence);
                }
            }
        }
        holds.sort_unstable_by_key(|(_, h, _)| (h.expire_at, h.fence));
        let holders = Holders::from_sorted(kind, holds.iter().copied());
        holders.validate()?;
        Ok(holders)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::holders::COMPACT_MAX;

    fn hold(fence: u64, expire_at: i64) -> Hold {
        Hold { fence, expire_at }
    }

    #[test]
    fn loading_refuses_what_could_not_be_written() {
        let sem = Kind::Semaphore { limit: 2 };
        let load = |kind, holds: &[(&[u8], u64)]| {
            Holders::from_stored(
                kind,
                holds.iter().map(|(t, f)| (t.to_vec(), hold(*f, 9), None)),
                9,
            )
            .map(|h| h.len())
        };
        assert_eq!(load(sem, &[]), Err(HoldersError::Empty));
        assert_eq!(load(sem, &[(b"", 1)]), Err(HoldersError::BadToken));
        assert_eq!(load(sem, &[(&[1; 513], 1)]), Err(HoldersError::BadToken));
        assert_eq!(load(sem, &[(&[1; 512], 1)]), Ok(1));
        assert_eq!(load(sem, &[(b"a", 0)]), Err(HoldersError::BadFence));
        assert_eq!(
            load(sem, &[(b"a", 1), (b"a", 2)]),
            Err(HoldersError::DuplicateToken)
        );
        assert_eq!(
            load(sem, &[(b"a", 1), (b"b", 1)]),
            Err(HoldersError::DuplicateFence)
        );
        assert_eq!(load(sem, &[(b"a", 1), (b"b", 2)]), Ok(2));
        assert_eq!(
            load(sem, &[(b"a", 1), (b"b", 2), (b"c", 3)]),
            Err(HoldersError::OverLimit)
        );
        assert_eq!(
            load(Kind::Shared, &[(b"a", 1), (b"b", 2), (b"c", 3)]),
            Ok(3)
        );
        assert_eq!(
            load(Kind::Semaphore { limit: 0 }, &[(b"a", 1)]),
            Err(HoldersError::BadLimit)
        );
        let over = Kind::Semaphore {
            limit: MAX_LIMIT + 1,
        };
        assert_eq!(load(over, &[(b"a", 1)]), Err(HoldersError::BadLimit));
        let ending = |at: i64| {
            Holders::from_stored(Kind::Shared, [(b"a".to_vec(), hold(1, at), None)], 100)
                .map(|h| h.len())
        };
        assert_eq!(ending(100), Ok(1));
        assert_eq!(ending(0), Ok(1));
        assert_eq!(ending(101), Err(HoldersError::BadLeaseEnd));
        assert_eq!(ending(i64::MAX), Err(HoldersError::BadLeaseEnd));
        assert_eq!(ending(-1), Err(HoldersError::BadLeaseEnd));
    }

    #[test]
    fn stored_holds_round_trip_and_refuse_what_could_not_be_written() {
        let sem = Kind::Semaphore { limit: 40 };
        let mut h = Holders::new(sem);
        for i in 0..30u64 {
            h.insert(
                format!("t{i}").as_bytes(),
                hold(100 + i, 1000 + (i as i64 % 7)),
            );
            let bytes = h.encoded();
            let back = Holders::from_encoded(sem, h.len() as u64, &bytes, false, 2000).unwrap();
            assert_eq!(back, h, "{i}");
            assert_eq!(back.is_compact(), h.len() <= COMPACT_MAX, "{i}");
            // The first holder alone ends with the key's TTL: no look.
            assert_eq!(
                back.look_needed(),
                (i > 0).then_some(1001),
                "a set read back is not watched"
            );
        }
        let one = |token: &[u8], fence: u64, at: i64| {
            compact::encode_stored([(token, hold(fence, at), None)].into_iter()).0
        };
        let load = |count: u64, bytes: &[u8]| {
            Holders::from_encoded(sem, count, bytes, false, 2000).map(|h| h.len())
        };
        let a = one(b"a", 5, 10);
        assert_eq!(load(1, &a), Ok(1));
        assert_eq!(load(2, &a), Err(HoldersError::Malformed));
        assert_eq!(load(0, &a), Err(HoldersError::Malformed));
        assert_eq!(load(0, &[]), Err(HoldersError::Empty));
        assert_eq!(load(1, &a[..a.len() - 1]), Err(HoldersError::Malformed));
        assert_eq!(
            load(1, &[&a[..], &[0]].concat()),
            Err(HoldersError::Malformed)
        );
        // The second hold against the first: same lease end, fence +1, and
        // then the same fence or one lower: not in order.
        let two = |fence_delta: u8| [&a[..], &[0, fence_delta, 1, b'b']].concat();
        assert_eq!(load(2, &two(2)), Ok(2));
        assert_eq!(load(2, &two(0)), Err(HoldersError::Unordered));
        assert_eq!(load(2, &two(1)), Err(HoldersError::Unordered));
        assert_eq!(load(1, &one(b"", 5, 10)), Err(HoldersError::BadToken));
        let long = one(&[1; MAX_TOKEN_LEN + 1], 5, 10);
        assert_eq!(load(1, &long), Err(HoldersError::BadToken));
        assert_eq!(load(1, &one(b"a", 0, 10)), Err(HoldersError::BadFence));
        assert_eq!(
            load(1, &one(b"a", u64::MAX, 10)),
            Err(HoldersError::BadFence)
        );
        assert_eq!(load(1, &one(b"a", 5, -1)), Err(HoldersError::BadLeaseEnd));
        assert_eq!(load(1, &one(b"a", 5, 2001)), Err(HoldersError::BadLeaseEnd));
        let dup = [&a[..], &[1, 2, 1, b'a']].concat();
        assert_eq!(load(2, &dup), Err(HoldersError::DuplicateToken));
        // A fence delta back to the same fence, a later lease end.
        let dup_fence = [&a[..], &[1, 0, 1, b'b']].concat();
        assert_eq!(load(2, &dup_fence), Err(HoldersError::DuplicateFence));
        let full: Vec<u8> = (0..41u64)
            .flat_map(|i| {
                if i == 0 {
                    a.clone()
                } else {
                    vec![0, 2, 1, i as u8]
                }
            })
            .collect();
        assert_eq!(load(41, &full), Err(HoldersError::OverLimit));
        let bad_limit = Holders::from_encoded(Kind::Semaphore { limit: 0 }, 1, &a, false, 2000);
        assert_eq!(bad_limit.map(|h| h.len()), Err(HoldersError::BadLimit));
    }

    #[test]
    fn holds_with_data_are_stored_with_it_and_read_back_with_it() {
        let sem = Kind::Semaphore { limit: 40 };
        let mut h = Holders::new(sem);
        for i in 0..30u64 {
            let data = format!("d{i}").repeat(i as usize + 1);
            let data = (i % 3 != 0).then_some(data.as_bytes());
            h.insert_with_data(
                format!("t{i}").as_bytes(),
                hold(100 + i, 1000 + i as i64),
                data,
            );
            assert!(h.has_data() == (i > 0), "{i}");
            let bytes = h.encoded();
            let back = Holders::from_encoded(sem, h.len() as u64, &bytes, h.has_data(), 2000);
            assert_eq!(back.as_ref(), Ok(&h), "{i}");
            // Read as holds without data, they do not read back as these.
            if h.has_data() {
                let plain = Holders::from_encoded(sem, h.len() as u64, &bytes, false, 2000);
                assert_ne!(plain.as_ref(), Ok(&h), "{i}");
            }
            let stored = h
                .entries()
                .map(|(t, x, d)| (t.to_vec(), x, d.map(<[u8]>::to_vec)));
            assert_eq!(Holders::from_stored(sem, stored, 2000).as_ref(), Ok(&h));
        }
        let one = |data: &[u8]| {
            compact::encode_stored([(&b"a"[..], hold(5, 10), Some(data))].into_iter())
        };
        let load = |with_data: bool, bytes: &[u8]| {
            Holders::from_encoded(sem, 1, bytes, with_data, 2000)
                .map(|h| h.data_of(b"a").map(<[u8]>::to_vec))
        };
        let (a, flagged) = one(b"xyz");
        assert!(flagged);
        assert_eq!(load(true, &a), Ok(Some(b"xyz".to_vec())));
        let (full, _) = one(&[7; MAX_DATA_LEN]);
        assert_eq!(load(true, &full), Ok(Some(vec![7; MAX_DATA_LEN])));
        let (over, _) = one(&[7; MAX_DATA_LEN + 1]);
        assert_eq!(load(true, &over), Err(HoldersError::BadData));
        // Written with data, and none has any: not what the module writes.
        let (none, flagged) = compact::encode_stored([(&b"a"[..], hold(5, 10), None)].into_iter());
        assert!(!flagged);
        assert_eq!(
            load(true, &[&none[..], &[0]].concat()),
            Err(HoldersError::BadData)
        );
        assert_eq!(load(true, &none), Err(HoldersError::Malformed));
        assert_eq!(load(true, &a[..a.len() - 1]), Err(HoldersError::Malformed));
        assert_eq!(load(false, &a), Err(HoldersError::Malformed));
        let stored = |d: &[u8]| [(b"a".to_vec(), hold(5, 10), Some(d.to_vec()))];
        assert_eq!(
            Holders::from_stored(sem, stored(b""), 2000).map(|h| h.len()),
            Err(HoldersError::BadData)
        );
        assert_eq!(
            Holders::from_stored(sem, stored(&[1; MAX_DATA_LEN + 1]), 2000).map(|h| h.len()),
            Err(HoldersError::BadData)
        );
    }
}
