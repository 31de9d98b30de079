//! The fixed bounds of requests, records and effects, whatever the settings.
//! A leaf: every other part of the core may use these, and they use nothing.

/// The longest TTL a lock can be given, whatever the settings: 10^12 ms
/// (about 31.7 years; `EX 1000000000`). Larger numbers are refused, so no
/// expiry can overflow the clock or a timer.
pub const MAX_TTL_MS: u64 = 1_000_000_000_000;

/// The longest `BLOCK` timeout, for the same reason. `BLOCK 0` waits
/// without limit.
pub const MAX_BLOCK_MS: u64 = 1_000_000_000_000;

/// The longest owner token, in bytes.
pub const MAX_TOKEN_LEN: usize = 512;

/// The most bytes of public data (`DATA`) a hold can carry; at least one.
pub const MAX_DATA_LEN: usize = 4096;

/// The most places a semaphore (`LIMIT count`) can have.
pub const MAX_LIMIT: u32 = 1_000_000;

/// The most keys one `LOCK.ACQUIREALL` or `LOCK.RELEASEALL` names.
pub const MAX_KEYS: usize = 64;

/// The version of the `LOCK._HOLD` effect this module writes and reads.
pub const HOLD_EFFECT_VERSION: u64 = 1;
