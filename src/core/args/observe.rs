//! `LOCK.OBSERVE key [AFTER fence] [BLOCK timeout-ms]`.

use std::ops::Deref;

use super::unknown;
use crate::core::errors::{Grammar, LockError};
use crate::core::limits::MAX_BLOCK_MS;
use crate::core::numbers::parse_non_negative;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observe {
    /// The fence the caller saw last (0: no holder); `None`: answer with
    /// the holder now, whatever it is.
    pub after: Option<u64>,
    /// `None`: never wait. `Some(0)`: wait without limit.
    pub block_ms: Option<u64>,
}

pub fn parse<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Observe, LockError> {
    if argv.len() < 2 {
        return Err(LockError::Arity("lock.observe"));
    }
    let mut observe = Observe {
        after: None,
        block_ms: None,
    };
    let mut rest = argv[2..].iter().map(|a| &**a);
    while let Some(name) = rest.next() {
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
        Ok(Observe { after, block_ms })
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
