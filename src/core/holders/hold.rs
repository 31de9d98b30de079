//! One holder's grant, which both forms of a set store.

/// One holder's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub fence: u64,
    /// Absolute Unix milliseconds; the hold ends once the clock passes it.
    pub expire_at: i64,
}

/// Whether a lease ending at `expire_at` has ended at `now_ms`. Same rule
/// as Redis's key expiry: a key is gone once the clock is past its time.
pub fn ended(expire_at: i64, now_ms: i64) -> bool {
    expire_at < now_ms
}
