//! Every error reply the module can send, defined in one place.
//!
//! The strings are complete RESP error lines without the leading `-`: Redis
//! uses the first word (`ERR`, `WRONGTYPE`) as the error code.

use std::fmt;

// The one part of the core this file uses: the bounds the texts name, from
// a leaf that uses nothing.
use crate::core::limits::{
    HOLD_EFFECT_VERSION, MAX_BLOCK_MS, MAX_DATA_LEN, MAX_KEYS, MAX_LIMIT, MAX_TOKEN_LEN, MAX_TTL_MS,
};

/// A reason to refuse a command. Nothing has been changed when one is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    /// Wrong number of arguments for the named command (lower case).
    Arity(&'static str),
    /// An option name that the command (its grammar) does not know.
    UnknownOption(String, Grammar),
    /// A number where an option's name should be, no TTL given yet: a TTL without `EX`/`PX`.
    TtlWithoutUnit(String),
    /// The token is `EX` or `PX` and a number follows it: the token was left out.
    TokenAfterTtl {
        command: Grammar,
        option: &'static str,
    },
    /// The same option given twice.
    RepeatedOption(&'static str),
    /// Neither `EX` nor `PX` was given.
    MissingTtl,
    /// Both `EX` and `PX` were given.
    DoubleTtl,
    /// An option that needs a value came last.
    MissingValue(&'static str),
    /// A TTL that is not a positive integer, or overflows once in milliseconds.
    InvalidTtl,
    /// The same, given in seconds (`EX`): the bound is named in seconds.
    InvalidTtlSeconds,
    /// A TTL above the `redislock.max-ttl` setting (milliseconds).
    TtlAboveLimit(u64),
    /// A `BLOCK` timeout that is not a non-negative integer.
    InvalidBlock,
    /// A fence that is not a positive integer (internal command).
    InvalidFence,
    /// A fence epoch that is not a non-negative integer (internal command).
    InvalidEpoch,
    /// An `AFTER` fence that is not a non-negative integer.
    InvalidAfter,
    /// `SEEN` data longer than a hold's `DATA` can be.
    InvalidSeen,
    /// A token that is empty or longer than the limit.
    InvalidToken,
    /// The key holds a value of another type.
    WrongType,
    /// Every fence up to 2^63-1 has been used.
    FenceExhausted,
    /// A waiter's lock is now served by another cluster node.
    SlotMoved,
    /// A waiter's server became a replica.
    ReadOnly,
    /// The internal replication command was sent by an ordinary client.
    InternalCommand,
    /// `LOCK.CALL` by a token that does not hold the lock.
    NotOwner,
    /// `LOCK.FENCE` with a fence older than the gate's: (given, highest).
    StaleFence(u64, u64),
    /// A command that cannot run inside `LOCK.CALL` / `LOCK.FENCE`.
    CannotCall(String),
    /// The server could not pass the inner command's reply on.
    ReplyNotForwarded(String),
    /// The inner command, or one of its keys, is not allowed for the user.
    NoPermission(String),
    /// A key of the inner command outside the lock's (or gate's) slot.
    CrossSlot,
    /// A slot migration splits the guard's keys between two nodes.
    SlotSplit,
    /// A lock command on a fence gate, or `LOCK.FENCE` on a lock.
    GateNotLock,
    LockNotGate,
    /// `DATA` that is empty or longer than the limit.
    InvalidData,
    /// `SHARED` and `LIMIT` in one acquire.
    SharedAndLimit,
    /// A `LIMIT` outside 1..=1,000,000.
    InvalidLimit,
    /// A request that does not fit the key's kind: the key's semaphore
    /// limit, or `None` for a read/write lock.
    KindMismatch {
        semaphore_limit: Option<u32>,
    },
    /// The token holds the key in another mode.
    OtherMode,
    /// `EPHEMERAL` where no client connection runs the command (a script,
    /// a function, a module's call): nothing could ever release the hold.
    EphemeralWithoutConnection,
    /// A `numkeys` that leaves no valid token and options after its keys,
    /// where another count of keys does (the count that fits).
    NumkeysMismatch {
        given: usize,
        fits: usize,
    },
    /// A `numkeys` that is not an integer from 1 to `MAX_KEYS`, or more
    /// keys than arguments.
    InvalidNumkeys,
    /// The same key named twice in one multi-key command.
    RepeatedKey,
    /// `LIMIT` in a multi-key acquire: semaphores are taken one at a time.
    LimitNotMulti,
    /// An internal effect of a version this module does not know.
    EffectVersion(u64),
    /// A bug in the module, found before anything was changed: a panic caught
    /// before it could reach Redis, or a state the module should never reach
    /// (a lock it just decided to re-grant that has no fence, a value Redis
    /// refused to store).
    Internal,
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use LockError::*;
        match self {
            Arity(cmd) => write!(f, "ERR wrong number of arguments for '{cmd}' command"),
            UnknownOption(opt, grammar) => write!(f, "ERR syntax error: unknown option '{opt}' ({} takes {})", grammar.name(), grammar.options()),
            TtlWithoutUnit(opt) => write!(f, "ERR syntax error: unknown option '{opt}': give the TTL as EX seconds or PX milliseconds"),
            TokenAfterTtl { command, option } => write!(f, "ERR syntax error: the token goes before {option} ({} token {option} {}); '{option}' was read as the token", command.head(), if *option == "EX" { "seconds" } else { "milliseconds" }),
            RepeatedOption(opt) => write!(f, "ERR syntax error: option {opt} given more than once"),
            MissingTtl => f.write_str("ERR a lock needs an expiry: give EX seconds or PX milliseconds"),
            DoubleTtl => f.write_str("ERR syntax error: EX and PX are mutually exclusive"),
            MissingValue(opt) => write!(f, "ERR syntax error: option {opt} needs a value"),
            InvalidTtl => write!(f, "ERR invalid expire time: must be a positive integer of at most {} milliseconds", MAX_TTL_MS),
            InvalidTtlSeconds => write!(f, "ERR invalid expire time: must be a positive integer of at most {} seconds", MAX_TTL_MS / 1000),
            TtlAboveLimit(max) => write!(f, "ERR TTL exceeds redislock.max-ttl ({max} ms)"),
            InvalidBlock => write!(f, "ERR invalid BLOCK timeout: must be 0 (no limit) or a positive integer of at most {} milliseconds", MAX_BLOCK_MS),
            InvalidFence => write!(f, "ERR invalid fence: must be a positive integer of at most {}", i64::MAX),
            InvalidEpoch => f.write_str("ERR invalid epoch: must be a non-negative integer"),
            InvalidAfter => write!(f, "ERR invalid AFTER fence: must be 0 (no holder) or a positive integer of at most {}", i64::MAX),
            InvalidSeen => write!(f, "ERR invalid SEEN data: must be at most {MAX_DATA_LEN} bytes (empty: the holder had no data)"),
            InvalidToken => write!(f, "ERR invalid token: must be 1 to {} bytes", MAX_TOKEN_LEN),
            WrongType => f.write_str("WRONGTYPE Operation against a key holding the wrong kind of value"),
            FenceExhausted => f.write_str("ERR fencing tokens exhausted on this server"),
            ReadOnly => f.write_str("READONLY You can't write against a read only replica."),
            SlotMoved => f.write_str("TRYAGAIN the lock's slot is moving or moved to another node; retry the command"),
            InternalCommand => f.write_str("ERR this command is internal to redislock replication and persistence"),
            NotOwner => f.write_str("NOTOWNER the lock is not held by this token"),
            StaleFence(fence, highest) => write!(f, "STALEFENCE fence {fence} is older than {highest}"),
            CannotCall(cmd) => write!(f, "ERR '{cmd}' cannot run inside LOCK.CALL or LOCK.FENCE"),
            ReplyNotForwarded(cmd) => write!(f, "ERR the reply of '{cmd}' could not be passed on by LOCK.CALL or LOCK.FENCE"),
            NoPermission(cmd) => write!(f, "NOPERM this user has no permissions to run the '{cmd}' command or to access one of its keys"),
            SlotSplit => f.write_str("TRYAGAIN Multiple keys request during rehashing of slot"),
            CrossSlot => f.write_str("CROSSSLOT Keys in request don't hash to the same slot as the lock key"),
            GateNotLock => f.write_str("WRONGTYPE the key is a fence gate (LOCK.FENCE), not a lock"),
            LockNotGate => f.write_str("WRONGTYPE the key is a lock, not a fence gate"),
            InvalidData => write!(f, "ERR invalid DATA: must be 1 to {MAX_DATA_LEN} bytes"),
            SharedAndLimit => f.write_str("ERR syntax error: SHARED and LIMIT are mutually exclusive"),
            InvalidLimit => write!(f, "ERR invalid LIMIT: must be an integer from 1 to {}", MAX_LIMIT),
            KindMismatch { semaphore_limit: None } => f.write_str("ERR the key is a read/write lock (exclusive or SHARED holds), not a semaphore: LIMIT does not apply"),
            KindMismatch { semaphore_limit: Some(limit) } => write!(f, "ERR the key is a semaphore with LIMIT {limit}: acquire it with LIMIT {limit}"),
            OtherMode => f.write_str("ERR this token already holds the key in another mode: release it first"),
            EphemeralWithoutConnection => f.write_str("ERR EPHEMERAL binds a hold to the client connection, and this call has none (a script, a function or a module's call): acquire without EPHEMERAL"),
            NumkeysMismatch { given, fits } => write!(f, "ERR wrong numkeys: {given} keys leave no valid token and options after them, {fits} would; numkeys must count the keys before the token"),
            InvalidNumkeys => write!(f, "ERR invalid numkeys: must be an integer from 1 to {MAX_KEYS}, with that many keys after it"),
            RepeatedKey => f.write_str("ERR a key is named more than once: each key must be distinct"),
            LimitNotMulti => f.write_str("ERR LIMIT does not apply to LOCK.ACQUIREALL: take semaphore places one key at a time with LOCK.ACQUIRE"),
            EffectVersion(v) => write!(f, "ERR LOCK._HOLD effect version {v} is not understood by this redislock (it knows version {}): upgrade this server's module", HOLD_EFFECT_VERSION),
            Internal => f.write_str("ERR internal error in redislock; the command was not applied"),
        }
    }
}

impl std::error::Error for LockError {}

/// A command's arguments as its syntax errors name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grammar {
    Acquire,
    AcquireAll,
    Extend,
    Observe,
    Apply,
    Hold,
}

impl Grammar {
    fn name(self) -> &'static str {
        match self {
            Grammar::Acquire => "LOCK.ACQUIRE",
            Grammar::AcquireAll => "LOCK.ACQUIREALL",
            Grammar::Extend => "LOCK.EXTEND",
            Grammar::Observe => "LOCK.OBSERVE",
            Grammar::Apply => "LOCK._APPLY",
            Grammar::Hold => "LOCK._HOLD",
        }
    }

    /// The options it takes.
    fn options(self) -> &'static str {
        match self {
            Grammar::Acquire => "EX, PX, SHARED, LIMIT, EPHEMERAL, BLOCK and DATA",
            Grammar::AcquireAll => "EX, PX, SHARED, EPHEMERAL, BLOCK and DATA",
            Grammar::Extend => "EX or PX",
            Grammar::Observe => "AFTER, SEEN and BLOCK",
            Grammar::Apply => "DATA",
            Grammar::Hold => "SHARED or LIMIT, and DATA",
        }
    }

    /// Its arguments up to the token.
    fn head(self) -> &'static str {
        match self {
            Grammar::AcquireAll => "LOCK.ACQUIREALL numkeys key [key ...]",
            Grammar::Extend => "LOCK.EXTEND key",
            _ => "LOCK.ACQUIRE key",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_starts_with_its_code() {
        let all = [
            LockError::Arity("lock.info"),
            LockError::UnknownOption("NX".into(), Grammar::Acquire),
            LockError::NumkeysMismatch { given: 3, fits: 2 },
            LockError::TtlWithoutUnit("5000".into()),
            LockError::TokenAfterTtl {
                command: Grammar::Acquire,
                option: "PX",
            },
            LockError::RepeatedOption("EX"),
            LockError::MissingTtl,
            LockError::DoubleTtl,
            LockError::MissingValue("PX"),
            LockError::InvalidTtl,
            LockError::InvalidTtlSeconds,
            LockError::TtlAboveLimit(10),
            LockError::InvalidBlock,
            LockError::InvalidFence,
            LockError::InvalidEpoch,
            LockError::InvalidAfter,
            LockError::InvalidSeen,
            LockError::InvalidToken,
            LockError::FenceExhausted,
            LockError::InternalCommand,
            LockError::SharedAndLimit,
            LockError::InvalidLimit,
            LockError::InvalidData,
            LockError::KindMismatch {
                semaphore_limit: None,
            },
            LockError::KindMismatch {
                semaphore_limit: Some(3),
            },
            LockError::OtherMode,
            LockError::EffectVersion(2),
            LockError::InvalidNumkeys,
            LockError::RepeatedKey,
            LockError::LimitNotMulti,
            LockError::EphemeralWithoutConnection,
            LockError::ReplyNotForwarded("getdel".into()),
            LockError::Internal,
        ];
        for e in all {
            let s = e.to_string();
            assert!(s.starts_with("ERR "), "{s}");
            assert!(!s.contains('\n') && !s.contains('\r'), "{s}");
        }
        assert!(LockError::WrongType.to_string().starts_with("WRONGTYPE "));
        assert!(LockError::GateNotLock.to_string().starts_with("WRONGTYPE "));
        assert!(LockError::LockNotGate.to_string().starts_with("WRONGTYPE "));
        assert_eq!(
            LockError::NotOwner.to_string(),
            "NOTOWNER the lock is not held by this token"
        );
        assert_eq!(
            LockError::StaleFence(5, 9).to_string(),
            "STALEFENCE fence 5 is older than 9"
        );
        assert!(LockError::CrossSlot.to_string().starts_with("CROSSSLOT "));
        assert!(LockError::NoPermission("set".into())
            .to_string()
            .starts_with("NOPERM "));
        assert!(LockError::CannotCall("multi".into())
            .to_string()
            .starts_with("ERR "));
        assert!(LockError::SlotMoved.to_string().starts_with("TRYAGAIN "));
        assert!(LockError::SlotSplit.to_string().starts_with("TRYAGAIN "));
        assert!(LockError::ReadOnly.to_string().starts_with("READONLY "));
    }
}
