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

/// How many answers a pass sends, when each costs the server work after
/// the pass that the module's clock never sees (a reply callback, a socket
/// write): learned from the time between the end of a pass that left
/// answers to send and the start of the next one — one turn of the event
/// loop, the answers' cost and the other clients' — so that a turn takes
/// about a slice.
#[derive(Debug)]
pub struct Pace {
    batch: usize,
    /// The end of the last pass that sent answers and left more, and how
    /// many it sent.
    sent: Option<(Instant, usize)>,
}

impl Pace {
    pub const MIN: usize = 32;
    pub const MAX: usize = 4096;
    const START: usize = 64;

    pub const fn new() -> Pace {
        Pace {
            batch: Pace::START,
            sent: None,
        }
    }

    /// How many answers the pass starting `now` may send.
    pub fn batch(&mut self, now: Instant) -> usize {
        if let Some((end, n)) = self.sent.take() {
            let turn = now.saturating_duration_since(end).as_nanos().max(1);
            let fit = SLICE.as_nanos().saturating_mul(n as u128) / turn;
            let fit = usize::try_from(fit).unwrap_or(Pace::MAX);
            self.batch = ((self.batch + fit) / 2).clamp(Pace::MIN, Pace::MAX);
        }
        self.batch
    }

    /// The pass ending `now` sent `n` answers and left `more` to send.
    pub fn sent(&mut self, now: Instant, n: usize, more: bool) {
        self.sent = (n > 0 && more).then_some((now, n));
    }
}

impl Default for Pace {
    fn default() -> Pace {
        Pace::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_follows_what_a_turn_of_the_loop_costs() {
        let mut p = Pace::new();
        let t0 = Instant::now();
        assert_eq!(p.batch(t0), 64);
        // 64 answers cost 8 ms: 8 fit in a slice; halfway there, never below the floor.
        p.sent(t0, 64, true);
        assert_eq!(p.batch(t0 + Duration::from_millis(8)), 36);
        p.sent(t0, 36, true);
        assert_eq!(p.batch(t0 + Duration::from_millis(36)), Pace::MIN);
        // Cheap answers: 32 in 1 µs; up to the ceiling at most.
        for _ in 0..20 {
            p.sent(t0, 32, true);
            p.batch(t0 + Duration::from_micros(1));
        }
        assert_eq!(p.batch(t0), Pace::MAX);
        // A pass that left nothing measures nothing: the next is not a turn later.
        p.sent(t0, 100, false);
        assert_eq!(p.batch(t0 + Duration::from_secs(5)), Pace::MAX);
        p.sent(t0, 0, true);
        assert_eq!(p.batch(t0 + Duration::from_secs(5)), Pace::MAX);
    }

    #[test]
    fn a_budget_is_spent_once_its_time_is_up() {
        assert!(Budget::new(Duration::ZERO).spent());
        assert!(!Budget::new(Duration::from_secs(3600)).spent());
    }
}
