//! The lock record and the rules for granting, releasing and extending it.
//!
//! The key's own Redis TTL is the lock's expiry, so a lock is only who owns
//! it and the fence of that grant. How it is laid out in memory is the
//! storage layer's business; the rules here work on a borrowed view.

use super::fence;
use super::token::{self, MAX_TOKEN_LEN};

/// Encoding version of the record in RDB files and `DUMP` payloads.
/// Version 2 added shared holders and semaphores, each hold in its own
/// fields; version 3 stores the holds as one compact string (see
/// `holders::Holders::encoded`); version 4 stores the whole record as one
/// string (see `packed`). Records of versions 1 to 3 read as they always
/// did; exclusive locks and gates are the same in the first three.
///
/// In version 3, an exclusive lock with public data (`DATA`) is stored
/// under the code [`EXCLUSIVE_WITH_DATA`] in place of its mode, with the
/// data as a field after the token; holders of which some have data under
/// [`SHARED_WITH_DATA`] or [`SEMAPHORE_WITH_DATA`], with the holds written
/// with data. Version 4 keeps these codes as the first byte of its string.
pub const ENCODING_VERSION: i32 = 4;

/// The record code of an exclusive lock that carries public data.
pub const EXCLUSIVE_WITH_DATA: u64 = 4;
/// The record code of shared holders of which some carry public data.
pub const SHARED_WITH_DATA: u64 = 5;
/// The record code of a semaphore's holders of which some carry public data.
pub const SEMAPHORE_WITH_DATA: u64 = 6;

/// The kind of lock a record describes. Stored in every record so that later
/// kinds (shared holders, counted semaphores, reentrant holds) can be added
/// next to it without changing how existing records are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// One holder at a time.
    Exclusive = 0,
    /// A fence gate (`LOCK.FENCE`): the highest fence it accepted, no token.
    Gate = 1,
    /// Read holders of a read/write lock, each with its own lease.
    Shared = 2,
    /// Holders of a counted semaphore's places.
    Semaphore = 3,
}

impl Mode {
    pub fn code(self) -> u64 {
        self as u64
    }

    pub fn from_code(code: u64) -> Option<Self> {
        match code {
            0 => Some(Mode::Exclusive),
            1 => Some(Mode::Gate),
            2 => Some(Mode::Shared),
            3 => Some(Mode::Semaphore),
            _ => None,
        }
    }
}

/// A held lock, as read from wherever it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRef<'a> {
    fence: u64,
    token: &'a [u8],
    data: Option<&'a [u8]>,
}

/// Why a stored record could not be read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    UnknownVersion,
    UnknownMode,
    BadFence,
    BadToken,
    /// Public data that is empty or too long.
    BadData,
    /// A number that is no varint the module writes, or out of its range.
    BadNumber,
}

impl<'a> LockRef<'a> {
    pub fn new(token: &'a [u8], fence: u64) -> Self {
        LockRef {
            fence,
            token,
            data: None,
        }
    }

    /// The same hold carrying public `data` (`DATA`), or none.
    pub fn with_data(self, data: Option<&'a [u8]>) -> Self {
        LockRef { data, ..self }
    }

    /// The hold's public data, if it was given some.
    pub fn data(&self) -> Option<&'a [u8]> {
        self.data
    }

    pub fn fence(&self) -> u64 {
        self.fence
    }

    pub fn token(&self) -> &'a [u8] {
        self.token
    }

    /// A gate is stored as a record without a token: every lock has one.
    pub fn gate(highest: u64) -> Self {
        LockRef {
            fence: highest,
            token: &[],
            data: None,
        }
    }

    pub fn mode(&self) -> Mode {
        if self.token.is_empty() {
            Mode::Gate
        } else {
            Mode::Exclusive
        }
    }

    pub fn is_gate(&self) -> bool {
        self.mode() == Mode::Gate
    }

    /// Whether `token` is the holder's (in constant time for equal lengths).
    pub fn is_held_by(&self, token: &[u8]) -> bool {
        token::same(self.token, token)
    }

    /// Checks fields read back from storage, refusing anything the module
    /// could not have written: a corrupt payload must not become a lock.
    pub fn decode(
        encver: i32,
        mode: u64,
        fence: u64,
        token: &'a [u8],
    ) -> Result<Self, DecodeError> {
        if !(1..=ENCODING_VERSION).contains(&encver) {
            return Err(DecodeError::UnknownVersion);
        }
        let mode = Mode::from_code(mode).ok_or(DecodeError::UnknownMode)?;
        if !fence::is_valid(fence) {
            return Err(DecodeError::BadFence);
        }
        let token_ok = match mode {
            Mode::Exclusive => !token.is_empty() && token.len() <= MAX_TOKEN_LEN,
            Mode::Gate => token.is_empty(),
            // Records with holders are read by `holders::Holders::from_stored`.
            Mode::Shared | Mode::Semaphore => return Err(DecodeError::UnknownMode),
        };
        if !token_ok {
            return Err(DecodeError::BadToken);
        }
        Ok(LockRef::new(token, fence))
    }
}

/// What `LOCK.FENCE` does with a fence, given the gate's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateDecision {
    /// Run the command; `raise`: the gate's highest fence moves up to it.
    Accept { raise: bool },
    /// An older fence than the gate accepted: run nothing.
    Stale { highest: u64 },
}

/// `gate` is the gate's record, if the key holds one.
pub fn decide_gate(gate: Option<LockRef<'_>>, fence: u64) -> GateDecision {
    match gate.map(|g| g.fence()) {
        None => GateDecision::Accept { raise: true },
        Some(highest) if fence < highest => GateDecision::Stale { highest },
        Some(highest) => GateDecision::Accept {
            raise: fence > highest,
        },
    }
}

/// Release and extend both act only for the holder.
pub fn owned_by(current: Option<LockRef<'_>>, token: &[u8]) -> bool {
    current.is_some_and(|lock| !lock.is_gate() && lock.is_held_by(token))
}

/// The absolute expiry for a TTL starting now, or `None` if it would not fit
/// in a signed 64-bit millisecond timestamp.
pub fn expiry_at(now_ms: i64, ttl_ms: u64) -> Option<i64> {
    now_ms.checked_add(i64::try_from(ttl_ms).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership() {
        let lock = LockRef::new(b"\0\xff", 1);
        assert!(owned_by(Some(lock), b"\0\xff"));
        assert!(!owned_by(Some(lock), b"\0"));
        assert!(!owned_by(None, b"\0\xff"));
    }

    #[test]
    fn decode_accepts_only_what_could_be_written() {
        // Version 1 files (before holders existed) read the same.
        assert_eq!(
            LockRef::decode(1, 0, 5, b"tok"),
            LockRef::decode(2, 0, 5, b"tok")
        );
        assert_eq!(
            LockRef::decode(2, 0, 5, b"tok"),
            LockRef::decode(3, 0, 5, b"tok")
        );
        let ok = LockRef::decode(ENCODING_VERSION, 0, 5, b"tok").unwrap();
        assert_eq!(
            (ok.fence(), ok.token(), ok.mode()),
            (5, &b"tok"[..], Mode::Exclusive)
        );
        assert_eq!(
            LockRef::decode(ENCODING_VERSION + 1, 0, 5, b"t"),
            Err(DecodeError::UnknownVersion)
        );
        assert_eq!(
            LockRef::decode(0, 0, 5, b"t"),
            Err(DecodeError::UnknownVersion)
        );
        assert_eq!(
            LockRef::decode(2, 2, 5, b"t"),
            Err(DecodeError::UnknownMode)
        );
        assert_eq!(
            LockRef::decode(3, 3, 5, b"t"),
            Err(DecodeError::UnknownMode)
        );
        assert_eq!(
            LockRef::decode(1, 9, 5, b"t"),
            Err(DecodeError::UnknownMode)
        );
        assert_eq!(LockRef::decode(1, 0, 0, b"t"), Err(DecodeError::BadFence));
        assert_eq!(
            LockRef::decode(1, 0, u64::MAX, b"t"),
            Err(DecodeError::BadFence)
        );
        assert_eq!(LockRef::decode(1, 0, 5, b""), Err(DecodeError::BadToken));
        assert_eq!(
            LockRef::decode(1, 0, 5, &[1; 513]),
            Err(DecodeError::BadToken)
        );
        assert_eq!(
            LockRef::decode(1, 0, 5, &[1; 512]).map(|l| l.token().len()),
            Ok(512)
        );
    }

    #[test]
    fn mode_codes_are_stored_and_do_not_change() {
        // The code is written into every RDB record and DUMP payload.
        assert_eq!(Mode::Exclusive.code(), 0);
        assert_eq!(
            Mode::from_code(Mode::Exclusive.code()),
            Some(Mode::Exclusive)
        );
        assert_eq!(Mode::from_code(1), Some(Mode::Gate));
        assert_eq!(Mode::from_code(2), Some(Mode::Shared));
        assert_eq!(Mode::from_code(3), Some(Mode::Semaphore));
        assert_eq!(Mode::from_code(4), None);
    }

    #[test]
    fn gates_are_records_without_a_token() {
        let g = LockRef::gate(42);
        assert_eq!((g.mode(), g.fence(), g.is_gate()), (Mode::Gate, 42, true));
        assert_eq!((Mode::Exclusive.code(), Mode::Gate.code()), (0, 1));
        assert_eq!(Mode::from_code(1), Some(Mode::Gate));
        assert!(!LockRef::new(b"t", 1).is_gate());
        assert_eq!(LockRef::decode(1, 1, 42, b""), Ok(g));
        assert_eq!(LockRef::decode(1, 1, 42, b"t"), Err(DecodeError::BadToken));
        assert_eq!(LockRef::decode(1, 0, 42, b""), Err(DecodeError::BadToken));
        assert_eq!(LockRef::decode(1, 1, 0, b""), Err(DecodeError::BadFence));
        // A gate is nobody's lock.
        assert!(!owned_by(Some(g), b""));
        assert_eq!(decide_gate(None, 5), GateDecision::Accept { raise: true });
        assert_eq!(
            decide_gate(Some(g), 42),
            GateDecision::Accept { raise: false }
        );
        assert_eq!(
            decide_gate(Some(g), 43),
            GateDecision::Accept { raise: true }
        );
        assert_eq!(
            decide_gate(Some(g), 41),
            GateDecision::Stale { highest: 42 }
        );
    }

    #[test]
    fn expiry_overflow() {
        assert_eq!(expiry_at(1000, 500), Some(1500));
        assert_eq!(expiry_at(1000, i64::MAX as u64), None);
        assert_eq!(expiry_at(0, u64::MAX), None);
    }
}
