//! Fencing-token arithmetic.
//!
//! A fence is `epoch << COUNTER_BITS | counter`. The server hands out fences
//! from one clock, so they increase across all lock names, which is what lets
//! a lock keep increasing even after its key was deleted and recreated.
//!
//! The epoch moves forward every time the server's history may have a gap it
//! cannot see: after loading a data set (restart, `DEBUG RELOAD`, a replica's
//! full sync), since the last grants before a crash may be missing from it, and
//! when a replica is promoted, since its old master may have granted fences it
//! never received. A new epoch's first fence is above every fence of every
//! earlier epoch, whatever their counters reached.

/// Bits of a fence used by the per-epoch counter.
pub const COUNTER_BITS: u32 = 40;
/// Fences are positive signed 64-bit integers on the wire.
pub const MAX_FENCE: u64 = i64::MAX as u64;
/// The highest epoch that still leaves room for a counter.
pub const MAX_EPOCH: u64 = MAX_FENCE >> COUNTER_BITS;

/// The server's fence clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceClock {
    /// Current epoch.
    pub epoch: u64,
    /// Highest fence granted here or seen in data loaded or replicated.
    pub high_water: u64,
}

impl FenceClock {
    /// The fence for a new grant, or `None` once fences are exhausted.
    pub fn next_fence(&mut self) -> Option<u64> {
        let epoch_floor = (self.epoch << COUNTER_BITS) | 1;
        let fence = self.high_water.checked_add(1)?.max(epoch_floor);
        if fence > MAX_FENCE {
            return None;
        }
        self.high_water = fence;
        Some(fence)
    }

    /// Records a fence that was granted elsewhere (replicated, loaded, restored).
    pub fn observe(&mut self, fence: u64) {
        self.high_water = self.high_water.max(fence);
    }

    /// Merges a clock saved earlier (RDB aux data): nothing ever moves back.
    pub fn merge(&mut self, saved: FenceClock) {
        self.epoch = self.epoch.max(saved.epoch.min(MAX_EPOCH));
        self.high_water = self.high_water.max(saved.high_water);
    }

    /// Starts a new epoch above every fence seen so far.
    pub fn advance_epoch(&mut self) {
        let seen = self.epoch.max(self.high_water >> COUNTER_BITS);
        self.epoch = (seen + 1).min(MAX_EPOCH);
    }
}

/// Whether a fence read from outside (RDB, `RESTORE`, replication) is one the
/// server could have issued.
pub fn is_valid(fence: u64) -> bool {
    (1..=MAX_FENCE).contains(&fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_clock_counts_from_one() {
        let mut c = FenceClock::default();
        assert_eq!(c.next_fence(), Some(1));
        assert_eq!(c.next_fence(), Some(2));
    }

    #[test]
    fn new_epoch_jumps_above_everything_seen() {
        let mut c = FenceClock::default();
        for _ in 0..10 {
            c.next_fence();
        }
        c.advance_epoch();
        let f = c.next_fence().unwrap();
        assert_eq!(f, (1 << COUNTER_BITS) | 1);
        assert!(f > 10);
    }

    #[test]
    fn promoted_replica_beats_old_master_that_kept_granting() {
        // The replica saw the master's fences up to some point...
        let mut master = FenceClock::default();
        master.advance_epoch();
        let mut replica = FenceClock::default();
        for _ in 0..5 {
            replica.observe(master.next_fence().unwrap());
        }
        // ...the replica loses the link and is promoted, the master goes on.
        replica.advance_epoch();
        let mut old = Vec::new();
        for _ in 0..1000 {
            old.push(master.next_fence().unwrap());
        }
        let new = replica.next_fence().unwrap();
        assert!(old.iter().all(|&f| f < new));
    }

    #[test]
    fn observed_fences_raise_the_floor() {
        let mut c = FenceClock::default();
        c.observe(500);
        assert_eq!(c.next_fence(), Some(501));
        c.observe(3);
        assert_eq!(c.next_fence(), Some(502));
    }

    #[test]
    fn merge_never_goes_back() {
        let mut c = FenceClock {
            epoch: 4,
            high_water: 9 << COUNTER_BITS,
        };
        c.merge(FenceClock {
            epoch: 2,
            high_water: 7,
        });
        assert_eq!(
            c,
            FenceClock {
                epoch: 4,
                high_water: 9 << COUNTER_BITS
            }
        );
        c.advance_epoch();
        assert_eq!(c.epoch, 10);
    }

    #[test]
    fn merge_clamps_a_corrupt_epoch() {
        let mut c = FenceClock::default();
        c.merge(FenceClock {
            epoch: u64::MAX,
            high_water: 0,
        });
        assert_eq!(c.epoch, MAX_EPOCH);
        assert!(c.next_fence().unwrap() > (MAX_EPOCH << COUNTER_BITS));
    }

    #[test]
    fn counter_overflow_carries_into_the_epoch() {
        let mut c = FenceClock {
            epoch: 1,
            high_water: (2 << COUNTER_BITS) - 1,
        };
        let f = c.next_fence().unwrap();
        assert_eq!(f, 2 << COUNTER_BITS);
        c.advance_epoch();
        assert_eq!(c.epoch, 3);
    }

    #[test]
    fn exhaustion_is_reported_not_wrapped() {
        let mut c = FenceClock {
            epoch: MAX_EPOCH,
            high_water: MAX_FENCE - 1,
        };
        assert_eq!(c.next_fence(), Some(MAX_FENCE));
        assert_eq!(c.next_fence(), None);
        assert_eq!(c.next_fence(), None);
        c.advance_epoch();
        assert_eq!(c.epoch, MAX_EPOCH);
        assert_eq!(c.next_fence(), None);
    }

    #[test]
    fn validity() {
        assert!(!is_valid(0));
        assert!(is_valid(1));
        assert!(is_valid(MAX_FENCE));
        assert!(!is_valid(MAX_FENCE + 1));
    }
}
