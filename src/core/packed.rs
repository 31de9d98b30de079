//! A lock record as encoding version 4 stores it in RDB files and `DUMP`
//! payloads: one string. Versions 1 to 3 wrote two to four fields, and the
//! server writes and reads each field with a call, a type marker and a
//! length of its own: a lock's three fields cost more to save and load than
//! the rest of its key.
//!
//! The string starts with the record's code (one byte: the mode, or the
//! mode with data, as in version 3), then, numbers as varints:
//!
//! - an exclusive lock (0): its fence, then its token (the rest);
//! - a fence gate (1): the highest fence it accepted, nothing after;
//! - an exclusive lock with data (4): fence, the token's length, the token,
//!   then the data (the rest);
//! - a shared lock or semaphore (2, 3; with data 5, 6): the limit (0 for
//!   shared), the number of holders, then the holds packed as version 3
//!   packs them (the rest; see `holders::compact`).

use super::holders::Kind;
use super::limits::MAX_DATA_LEN;
use super::lock::{
    DecodeError, LockRef, Mode, ENCODING_VERSION, EXCLUSIVE_WITH_DATA, SEMAPHORE_WITH_DATA,
    SHARED_WITH_DATA,
};
use super::varint;

/// A record read back from its string, checked as far as it can be
/// without the holds themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpacked<'a> {
    /// An exclusive lock (with its data, if any) or a gate.
    Single(LockRef<'a>),
    /// Holders of a shared lock or a semaphore: how many, and their holds
    /// as packed, written with data or not.
    Holders {
        kind: Kind,
        count: u64,
        holds: &'a [u8],
        with_data: bool,
    },
}

/// Appends the string of an exclusive lock or a gate.
pub fn pack_single(lock: &LockRef<'_>, out: &mut Vec<u8>) {
    match lock.data() {
        Some(data) => {
            out.push(EXCLUSIVE_WITH_DATA as u8);
            varint::put(out, lock.fence());
            varint::put(out, lock.token().len() as u64);
            out.extend_from_slice(lock.token());
            out.extend_from_slice(data);
        }
        None => {
            out.push(lock.mode().code() as u8);
            varint::put(out, lock.fence());
            out.extend_from_slice(lock.token());
        }
    }
}

/// Appends the string of `count` holders of `kind`, their holds packed
/// (`with_data`: packed with their data).
pub fn pack_holders(kind: Kind, count: u64, holds: &[u8], with_data: bool, out: &mut Vec<u8>) {
    let (code, limit) = match (kind, with_data) {
        (Kind::Shared, false) => (Mode::Shared.code(), 0),
        (Kind::Shared, true) => (SHARED_WITH_DATA, 0),
        (Kind::Semaphore { limit }, false) => (Mode::Semaphore.code(), limit),
        (Kind::Semaphore { limit }, true) => (SEMAPHORE_WITH_DATA, limit),
    };
    out.push(code as u8);
    varint::put(out, u64::from(limit));
    varint::put(out, count);
    out.extend_from_slice(holds);
}

/// Reads a record's string, refusing what the module could not have
/// written: an unknown code, a number that is no shortest varint, a bad
/// fence, token or data; a limit that does not fit the mode. The holds of
/// holders are checked by `Holders::from_encoded`.
pub fn unpack(bytes: &[u8]) -> Result<Unpacked<'_>, DecodeError> {
    let (&code, mut rest) = bytes.split_first().ok_or(DecodeError::UnknownMode)?;
    let code = u64::from(code);
    let with_data = matches!(
        code,
        EXCLUSIVE_WITH_DATA | SHARED_WITH_DATA | SEMAPHORE_WITH_DATA
    );
    let mode = match code {
        EXCLUSIVE_WITH_DATA => Mode::Exclusive,
        SHARED_WITH_DATA => Mode::Shared,
        SEMAPHORE_WITH_DATA => Mode::Semaphore,
        code => Mode::from_code(code).ok_or(DecodeError::UnknownMode)?,
    };
    let number = |rest: &mut &[u8]| varint::take(rest).ok_or(DecodeError::BadNumber);
    match mode {
        Mode::Exclusive | Mode::Gate => {
            let fence = number(&mut rest)?;
            if !with_data {
                let lock = LockRef::decode(ENCODING_VERSION, code, fence, rest)?;
                return Ok(Unpacked::Single(lock));
            }
            let token_len = usize::try_from(number(&mut rest)?).unwrap_or(usize::MAX);
            if token_len > rest.len() {
                return Err(DecodeError::BadToken);
            }
            let (token, data) = rest.split_at(token_len);
            if !(1..=MAX_DATA_LEN).contains(&data.len()) {
                return Err(DecodeError::BadData);
            }
            let lock = LockRef::decode(ENCODING_VERSION, Mode::Exclusive.code(), fence, token)?;
            Ok(Unpacked::Single(lock.with_data(Some(data))))
        }
        Mode::Shared | Mode::Semaphore => {
            let limit = number(&mut rest)?;
            let kind = match mode {
                Mode::Shared if limit == 0 => Kind::Shared,
                Mode::Semaphore => Kind::Semaphore {
                    limit: u32::try_from(limit).map_err(|_| DecodeError::BadNumber)?,
                },
                _ => return Err(DecodeError::BadNumber),
            };
            let count = number(&mut rest)?;
            Ok(Unpacked::Holders {
                kind,
                count,
                holds: rest,
                with_data,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FENCE: u64 = (3 << 51) | 123_456_789_012;

    fn packed_single(lock: LockRef<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        pack_single(&lock, &mut out);
        out
    }

    #[test]
    fn single_records_read_back_as_written() {
        let token = b"token-of-22-bytes-long";
        let long = vec![7u8; super::super::limits::MAX_TOKEN_LEN];
        let data = vec![9u8; MAX_DATA_LEN];
        for lock in [
            LockRef::new(token, FENCE),
            LockRef::new(b"t", 1),
            LockRef::new(&long, i64::MAX as u64),
            LockRef::gate(FENCE),
            LockRef::new(token, FENCE).with_data(Some(b"host:1")),
            LockRef::new(b"t", 2).with_data(Some(&data)),
            LockRef::new(&long, 2).with_data(Some(b"x")),
        ] {
            let bytes = packed_single(lock);
            assert_eq!(unpack(&bytes), Ok(Unpacked::Single(lock)), "{lock:?}");
        }
        // Code, 8-byte fence, token: 9 bytes more than the token.
        assert_eq!(packed_single(LockRef::new(token, FENCE)).len(), 22 + 9);
    }

    #[test]
    fn holders_read_back_as_written() {
        for (kind, with_data) in [
            (Kind::Shared, false),
            (Kind::Shared, true),
            (Kind::Semaphore { limit: 1 }, false),
            (Kind::Semaphore { limit: u32::MAX }, true),
        ] {
            let mut out = Vec::new();
            pack_holders(kind, 300, b"holds", with_data, &mut out);
            let want = Unpacked::Holders {
                kind,
                count: 300,
                holds: b"holds",
                with_data,
            };
            assert_eq!(unpack(&out), Ok(want), "{kind:?} {with_data}");
        }
    }

    #[test]
    fn what_the_module_could_not_have_written_is_refused() {
        use DecodeError::*;
        let mut too_much = vec![4, 1, 1, b't'];
        too_much.extend(vec![0; MAX_DATA_LEN + 1]);
        let over_limit = [3, 0x80, 0x80, 0x80, 0x80, 0x10, 1];
        let cases: [(&[u8], DecodeError); 16] = [
            (b"", UnknownMode),
            (&[7, 1, b't'], UnknownMode),
            (&[0xff, 1, b't'], UnknownMode),
            // Fences: none, zero, not the shortest form, past i64::MAX.
            (&[0], BadNumber),
            (&[0, 0, b't'], BadFence),
            (&[0, 0x81, 0x00, b't'], BadNumber),
            (
                &[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 1],
                BadFence,
            ),
            // No token; a gate with one.
            (&[0, 1], BadToken),
            (&[1, 1, b't'], BadToken),
            // With data: a token longer than what follows, none, no data.
            (&[4, 1, 5, b't'], BadToken),
            (&[4, 1, 0, b'd'], BadToken),
            (&[4, 1, 1, b't'], BadData),
            (&too_much, BadData),
            // Shared with a limit; a semaphore's limit past 32 bits; no count.
            (&[2, 1, 1], BadNumber),
            (&over_limit, BadNumber),
            (&[3, 2], BadNumber),
        ];
        for (bytes, why) in cases {
            assert_eq!(unpack(bytes), Err(why), "{bytes:?}");
        }
    }
}
