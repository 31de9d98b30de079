//! `LOCK.OBSERVE key [AFTER fence] [SEEN data] [BLOCK timeout-ms]`.

use std::ops::Deref;

use super::unknown;
use crate::core::errors::{Grammar, LockError};
use crate::core::limits::{MAX_BLOCK_MS, MAX_DATA_LEN};
use crate::core::numbers::parse_non_negative;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observe {
    /// The fence the caller saw last (0: no holder); `None`: answer with
    /// the holder now, whatever it is.
    pub after: Option<u64>,
    /// The data the caller saw with that fence (`SEEN`; empty: none).
    pub seen: Option<Box<[u8]>>,
    /// `None`: never wait. `Some(0)`: wait without limit.
    pub block_ms: Option<u64>,
}

impl Observe {
    /// What the caller saw, to compare the holder with; `None` without
    /// `AFTER` (`SEEN` alone has nothing to go with: the holder now).
    pub fn saw(&self) -> Option<Saw> {
        let fence = self.after?;
        let data = self.seen.clone();
        Some(Saw { fence, data })
    }
}

/// What an observer saw last: the holder's fence (`AFTER`) and, with
/// `SEEN`, its data (empty: the hold had none; a hold's `DATA` is never
/// empty). Without `SEEN` only the fence counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saw {
    pub fence: u64,
    pub data: Option<Box<[u8]>>,
}

impl Saw {
    /// Only the fence counts (`AFTER` without `SEEN`).
    pub fn fence(fence: u64) -> Saw {
        Saw { fence, data: None }
    }

    /// Whether the holder `(fence, data)` is news to this observer: another
    /// fence, or with `SEEN` the same fence with other data.
    pub fn differs(&self, fence: u64, data: Option<&[u8]>) -> bool {
        fence != self.fence
            || self
                .data
                .as_deref()
                .is_some_and(|seen| seen != data.unwrap_or_default())
    }
}

pub fn parse<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Observe, LockError> {
    if argv.len() < 2 {
        return Err(LockError::Arity("lock.observe"));
    }
    let mut observe = Observe {
        after: None,
        seen: None,
        block_ms: None,
    };
    let mut rest = argv[2..].iter().map(|a| &**a);
    while let Some(name) = rest.next() {
        if name.eq_ignore_ascii_case(b"SEEN") {
            let value = rest.next().ok_or(LockError::MissingValue("SEEN"))?;
            if observe.seen.is_some() {
                return Err(LockError::RepeatedOption("SEEN"));
            }
            if value.len() > MAX_DATA_LEN {
                return Err(LockError::InvalidSeen);
            }
            observe.seen = Some(value.into());
            continue;
        }
        let (label, slot, error) = if name.eq_ignore_ascii_case(b"AFTER") {
            ("AFTER", &mut observe.after, LockError::InvalidAfter)
        } else if name.eq_ignore_ascii_case(b"BLOCK") {
            ("BLOCK", &mut observe.block_ms, LockError::InvalidBlock)
        } else {
            return Err(unknown(name, Grammar::Observe));
        };
        let value = rest.next().ok_or(LockError::MissingValue(label))?;
        if slot.is_some() {
            return Err(LockError::RepeatedOption(label));
        }
        let bound = if label == "BLOCK" {
            MAX_BLOCK_MS
        } else {
            u64::MAX
        };
        *slot = Some(
            parse_non_negative(value)
                .filter(|&n| n <= bound)
                .ok_or(error)?,
        );
    }
    Ok(observe)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(args: &[&str]) -> Result<Observe, LockError> {
        let mut argv: Vec<&[u8]> = vec![b"LOCK.OBSERVE", b"k"];
        argv.extend(args.iter().map(|s| s.as_bytes()));
        super::parse(&argv)
    }

    fn observe(after: Option<u64>, block_ms: Option<u64>) -> Result<Observe, LockError> {
        let seen = None;
        Ok(Observe {
            after,
            seen,
            block_ms,
        })
    }

    #[test]
    fn seen_is_the_data_the_caller_saw_empty_for_none() {
        let got = parse_args(&["AFTER", "5", "seen", "node-1", "BLOCK", "0"]).unwrap();
        assert_eq!(got.seen.as_deref(), Some(&b"node-1"[..]));
        let saw = got.saw().unwrap();
        assert!(!saw.differs(5, Some(b"node-1")));
        assert!(saw.differs(5, Some(b"node-2")), "new data, same fence");
        assert!(saw.differs(5, None), "the data dropped");
        assert!(saw.differs(6, Some(b"node-1")), "a new fence");
        let none = parse_args(&["SEEN", "", "AFTER", "5"])
            .unwrap()
            .saw()
            .unwrap();
        assert!(!none.differs(5, None));
        assert!(none.differs(5, Some(b"x")));
        // Without SEEN only the fence counts, as before it existed.
        let fence_only = parse_args(&["AFTER", "5"]).unwrap().saw().unwrap();
        assert!(!fence_only.differs(5, Some(b"anything")));
        assert!(fence_only.differs(4, None));
        // SEEN without AFTER: nothing to compare with.
        assert_eq!(parse_args(&["SEEN", "x"]).unwrap().saw(), None);
        let longest = "x".repeat(MAX_DATA_LEN);
        assert!(parse_args(&["AFTER", "1", "SEEN", &longest]).is_ok());
        let longer = "x".repeat(MAX_DATA_LEN + 1);
        assert_eq!(
            parse_args(&["AFTER", "1", "SEEN", &longer]),
            Err(LockError::InvalidSeen)
        );
        assert_eq!(
            parse_args(&["AFTER", "1", "SEEN"]),
            Err(LockError::MissingValue("SEEN"))
        );
        assert_eq!(
            parse_args(&["SEEN", "a", "seen", "a"]),
            Err(LockError::RepeatedOption("SEEN"))
        );
    }

    #[test]
    fn options_in_any_order_and_case() {
        assert_eq!(parse_args(&[]), observe(None, None));
        assert_eq!(parse_args(&["AFTER", "0"]), observe(Some(0), None));
        assert_eq!(
            parse_args(&["block", "0", "after", "9223372036854775807"]),
            observe(Some(i64::MAX as u64), Some(0))
        );
        assert_eq!(
            parse_args(&["BLOCK", "1000000000000"]),
            observe(None, Some(MAX_BLOCK_MS))
        );
    }

    #[test]
    fn every_malformed_call_is_refused() {
        for bad in ["-1", "01", "+1", "x", "", "9223372036854775808", " 1"] {
            assert_eq!(
                parse_args(&["AFTER", bad]),
                Err(LockError::InvalidAfter),
                "{bad}"
            );
        }
        for bad in ["-1", "1000000000001", "1.5", "x"] {
            assert_eq!(
                parse_args(&["BLOCK", bad]),
                Err(LockError::InvalidBlock),
                "{bad}"
            );
        }
        assert_eq!(
            parse_args(&["AFTER"]),
            Err(LockError::MissingValue("AFTER"))
        );
        assert_eq!(
            parse_args(&["AFTER", "1", "BLOCK"]),
            Err(LockError::MissingValue("BLOCK"))
        );
        assert_eq!(
            parse_args(&["AFTER", "1", "after", "2"]),
            Err(LockError::RepeatedOption("AFTER"))
        );
        assert_eq!(
            parse_args(&["BLOCK", "1", "BLOCK", "2"]),
            Err(LockError::RepeatedOption("BLOCK"))
        );
        assert_eq!(
            parse_args(&["PX", "1"]),
            Err(LockError::UnknownOption("PX".into(), Grammar::Observe))
        );
        assert_eq!(
            super::parse(&[b"LOCK.OBSERVE" as &[u8]]),
            Err(LockError::Arity("lock.observe"))
        );
    }
}
