//! Holds as RDB files and `DUMP` payloads store them, and read back:
//! anything the module could not have written is refused.

use std::borrow::Cow;
use std::collections::HashSet;

use super::compact;
use super::{Body, Hold, Holders, HoldersError, Kind, MAX_LIMIT};
use crate::core::fence;
use crate::core::token::MAX_TOKEN_LEN;

impl Holders {
    /// The holds as RDB files and `DUMP` payloads store them (encoding
    /// version 3): in lease-end order, each against the one before it (see
    /// [`compact`]). Read back by [`Holders::from_encoded`].
    pub fn encoded(&self) -> Cow<'_, [u8]> {
        match &self.body {
            Body::Compact(c) => Cow::Borrowed(c.stored()),
            Body::Indexed(x) => Cow::Owned(compact::encode_stored(x.iter())),
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
        stored: impl IntoIterator<Item = (Vec<u8>, Hold)>,
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        Holders::from_checked(kind, stored.into_iter().collect(), latest_end)
    }

    /// Rebuilds holds stored as [`Holders::encoded`] wrote them, `count`
    /// of them, refusing anything the module could not have written: as
    /// [`Holders::from_stored`], and bytes that do not read back as exactly
    /// `count` holds in lease-end order.
    pub fn from_encoded(
        kind: Kind,
        count: u64,
        bytes: &[u8],
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        let mut reader = compact::Reader::new(bytes);
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
        Holders::from_checked(kind, holds, latest_end)
    }

    fn from_checked<T: AsRef<[u8]>>(
        kind: Kind,
        mut holds: Vec<(T, Hold)>,
        latest_end: i64,
    ) -> Result<Holders, HoldersError> {
        {
            let mut tokens = HashSet::new();
            let mut fences = HashSet::new();
            for (token, hold) in &holds {
                let token = token.as_ref();
                if token.is_empty() || token.len() > MAX_TOKEN_LEN {
                    return Err(HoldersError::BadToken);
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
        holds.sort_unstable_by_key(|(_, h)| (h.expire_at, h.fence));
        let holders = Holders::from_sorted(kind, holds.iter().map(|(t, h)| (t.as_ref(), *h)));
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
                holds.iter().map(|(t, f)| (t.to_vec(), hold(*f, 9))),
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
            Holders::from_stored(Kind::Shared, [(b"a".to_vec(), hold(1, at))], 100).map(|h| h.len())
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
            let back = Holders::from_encoded(sem, h.len() as u64, &bytes, 2000).unwrap();
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
            compact::encode_stored([(token, hold(fence, at))].into_iter())
        };
        let load = |count: u64, bytes: &[u8]| {
            Holders::from_encoded(sem, count, bytes, 2000).map(|h| h.len())
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
        let bad_limit = Holders::from_encoded(Kind::Semaphore { limit: 0 }, 1, &a, 2000);
        assert_eq!(bad_limit.map(|h| h.len()), Err(HoldersError::BadLimit));
    }
}
