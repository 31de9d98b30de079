//! A pass's time budget: work the module does outside a command runs in
//! slices, like Redis's own active expiry, so that the clients sharing the
//! server wait at most about one slice.

use std::time::{Duration, Instant};

/// About what Redis's fast expiry cycle takes.
pub const SLICE: Duration = Duration::from_millis(1);

pub struct Budget {
    until: Instant,
}

impl Budget {
    pub fn new(length: Duration) -> Budget {
        Budget {
            until: Instant::now() + length,
        }
    }

    /// Whether the time is up: stop after the piece of work in hand.
    pub fn spent(&self) -> bool {
        Instant::now() >= self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_spent_once_its_time_is_up() {
        assert!(Budget::new(Duration::ZERO).spent());
        assert!(!Budget::new(Duration::from_secs(3600)).spent());
    }
}
