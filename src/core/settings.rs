//! The operator's settings (`redislock.max-ttl`, `redislock.max-block`)
//! applied to requests.

use super::errors::LockError;

/// A TTL within `max_ttl_ms` (0: no limit), or the error that names it.
pub fn check_ttl(ttl_ms: u64, max_ttl_ms: u64) -> Result<u64, LockError> {
    if max_ttl_ms > 0 && ttl_ms > max_ttl_ms {
        return Err(LockError::TtlAboveLimit(max_ttl_ms));
    }
    Ok(ttl_ms)
}

/// How long a `BLOCK` may wait: the request, cut to `max_block_ms` when that
/// is set (0: no limit). `BLOCK 0` means "as long as allowed".
pub fn block_timeout(requested_ms: u64, max_block_ms: u64) -> u64 {
    match (requested_ms, max_block_ms) {
        (_, 0) => requested_ms,
        (0, max) => max,
        (req, max) => req.min(max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_limit() {
        assert_eq!(check_ttl(5000, 0), Ok(5000));
        assert_eq!(check_ttl(5000, 5000), Ok(5000));
        assert_eq!(check_ttl(5001, 5000), Err(LockError::TtlAboveLimit(5000)));
    }

    #[test]
    fn block_limit() {
        assert_eq!(block_timeout(0, 0), 0);
        assert_eq!(block_timeout(300, 0), 300);
        assert_eq!(block_timeout(0, 1000), 1000);
        assert_eq!(block_timeout(300, 1000), 300);
        assert_eq!(block_timeout(3000, 1000), 1000);
    }
}
