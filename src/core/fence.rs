//! Fencing-token arithmetic.
//!
//! A fence is `epoch << EPOCH_SHIFT | local`. The server hands out fences
//! from one clock, so they increase across all lock names, which is what
//! keeps a lock's fences increasing after its key is deleted and recreated.
//!
//! `local` is a hybrid clock: the larger of "last fence + 1" and the wall
//! clock in milliseconds (since 2025) times 2^COUNTER_BITS. The wall-clock
//! floor is what makes fences issued after any restart exceed those issued
//! before it, even when the last grants never reached the disk, or when
//! there is no disk at all: the restarted server starts above the current
//! time, which the lost grants could not have reached unless they ran at
//! more than 2^COUNTER_BITS grants per millisecond.
//!
//! The epoch moves forward only when a replica is promoted: its old master
//! may still be granting (split brain), at the same wall-clock times, so
//! only a higher epoch puts the new master's fences above all of them.
//! Replicas learn the master's epoch from every replicated fence, from the
//! RDB aux data of a full sync, and from an explicit epoch record.

/// Bits of `local` counting grants within one millisecond.
pub const COUNTER_BITS: u32 = 10;
/// Milliseconds since [`TIME_BASE_MS`] fit in this many bits (69 years).
pub const TIME_BITS: u32 = 41;
/// Where the epoch starts in a fence.
pub const EPOCH_SHIFT: u32 = COUNTER_BITS + TIME_BITS;
/// Fences are positive signed 64-bit integers on the wire.
pub const MAX_FENCE: u64 = i64::MAX as u64;
/// The highest epoch (4095 promotions); past it the epoch stops advancing.
pub const MAX_EPOCH: u64 = MAX_FENCE >> EPOCH_SHIFT;
/// 2025-01-01T00:00:00Z in Unix milliseconds.
pub const TIME_BASE_MS: i64 = 1_735_689_600_000;

/// A fence restored from outside (`RESTORE`, `MIGRATE`) is refused when its
/// epoch is more than this many promotions ahead of the server's own epoch…
pub const MAX_RESTORE_EPOCH_LEAD: u64 = 64;
/// …or its wall-clock part more than this far in the future (a day of clock
/// difference between servers). Without these bounds one forged payload with
/// fence 2^63-1 would exhaust the fences of every key for good.
pub const MAX_RESTORE_TIME_LEAD_MS: i64 = 86_400_000;

/// The server's fence clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceClock {
    /// Current epoch.
    pub epoch: u64,
    /// Highest fence granted here or seen in data loaded or replicated.
    pub high_water: u64,
}

impl FenceClock {
    /// The fence for a grant at Unix time `now_ms`, or `None` once fences
    /// are exhausted.
    pub fn next_fence(&mut self, now_ms: i64) -> Option<u64> {
        let floor = (self.epoch << EPOCH_SHIFT) | time_floor(now_ms);
        let fence = self.high_water.checked_add(1)?.max(floor);
        if fence > MAX_FENCE {
            return None;
        }
        self.high_water = fence;
        Some(fence)
    }

    /// Whether a fence restored from a client's payload is one a server
    /// could have issued by `now_ms`, within the documented leads. Only
    /// such fences may raise the clock. The bound is measured from the
    /// server's own epoch, which only promotions move, so repeated forged
    /// payloads cannot ratchet it up.
    pub fn admits_restored(&self, fence: u64, now_ms: i64) -> bool {
        self.admits_restored_within(fence, now_ms, 0)
    }

    /// `admits_restored`, the epoch lead measured from `known_epoch` where
    /// it is higher than the server's own: in Redis Cluster, fences follow
    /// the nodes' config epochs, and the cluster's current epoch (the
    /// highest of them) bounds what another node can have issued.
    pub fn admits_restored_within(&self, fence: u64, now_ms: i64, known_epoch: u64) -> bool {
        if !is_valid(fence) {
            return false;
        }
        let base = self.epoch.max(known_epoch.min(MAX_EPOCH));
        let epoch_ok = fence >> EPOCH_SHIFT <= base.saturating_add(MAX_RESTORE_EPOCH_LEAD);
        let ms = (fence >> COUNTER_BITS) & ((1 << TIME_BITS) - 1);
        let limit = time_floor(now_ms.saturating_add(MAX_RESTORE_TIME_LEAD_MS)) >> COUNTER_BITS;
        epoch_ok && ms <= limit
    }

    /// Records a fence that was granted elsewhere (replicated, loaded, restored).
    pub fn observe(&mut self, fence: u64) {
        self.high_water = self.high_water.max(fence);
    }

    /// Records an epoch another server reached (replicated, saved).
    pub fn observe_epoch(&mut self, epoch: u64) {
        self.epoch = self.epoch.max(epoch.min(MAX_EPOCH));
    }

    /// Merges a clock saved earlier (RDB aux data): nothing ever moves back.
    pub fn merge(&mut self, saved: FenceClock) {
        self.observe_epoch(saved.epoch);
        self.observe(saved.high_water);
    }

    /// Starts a new epoch above every fence seen so far; false once the
    /// epochs are used up.
    pub fn advance_epoch(&mut self) -> bool {
        let seen = self.epoch.max(self.high_water >> EPOCH_SHIFT);
        if seen >= MAX_EPOCH {
            self.epoch = MAX_EPOCH;
            return false;
        }
        self.epoch = seen + 1;
        true
    }
}

/// The wall-clock part of a fence floor.
fn time_floor(now_ms: i64) -> u64 {
    let since_base = now_ms
        .saturating_sub(TIME_BASE_MS)
        .clamp(0, (1 << TIME_BITS) - 1);
    (since_base as u64) << COUNTER_BITS
}

/// Whether a fence read from outside (RDB, `RESTORE`, replication) is one the
/// server could have issued.
pub fn is_valid(fence: u64) -> bool {
    (1..=MAX_FENCE).contains(&fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = TIME_BASE_MS + 60_000;

    #[test]
    fn fences_increase_within_a_millisecond_and_follow_the_clock() {
        let mut c = FenceClock::default();
        let a = c.next_fence(NOW).unwrap();
        let b = c.next_fence(NOW).unwrap();
        assert_eq!(b, a + 1);
        let later = c.next_fence(NOW + 1).unwrap();
        assert_eq!(later, ((NOW - TIME_BASE_MS + 1) as u64) << COUNTER_BITS);
        // A clock that steps back does not make fences go back.
        assert_eq!(c.next_fence(NOW - 10_000), Some(later + 1));
    }

    #[test]
    fn a_restart_that_lost_everything_still_issues_larger_fences() {
        let mut before = FenceClock::default();
        let issued: Vec<u64> = (0..1000).map(|_| before.next_fence(NOW).unwrap()).collect();
        // Nothing survived: a fresh clock, one millisecond later.
        let mut after = FenceClock::default();
        let next = after.next_fence(NOW + 1).unwrap();
        assert!(issued.iter().all(|&f| f < next));
    }

    #[test]
    fn promoted_replica_beats_old_master_that_kept_granting() {
        let mut master = FenceClock::default();
        let mut replica = FenceClock::default();
        for _ in 0..5 {
            replica.observe(master.next_fence(NOW).unwrap());
        }
        // The replica is promoted; the master goes on granting, even later.
        assert!(replica.advance_epoch());
        let old: Vec<u64> = (0..1000)
            .map(|i| master.next_fence(NOW + 1000 + i).unwrap())
            .collect();
        let new = replica.next_fence(NOW + 1).unwrap();
        assert!(old.iter().all(|&f| f < new));
    }

    #[test]
    fn a_replica_that_saw_no_fence_learns_the_epoch() {
        let mut master = FenceClock::default();
        master.advance_epoch();
        master.advance_epoch();
        let mut replica = FenceClock::default();
        replica.observe_epoch(master.epoch);
        replica.advance_epoch();
        let old = master.next_fence(NOW + 5000).unwrap();
        assert!(replica.next_fence(NOW).unwrap() > old);
    }

    #[test]
    fn observed_fences_raise_the_floor() {
        let mut c = FenceClock::default();
        let far = time_floor(NOW) + 500_000;
        c.observe(far);
        assert_eq!(c.next_fence(NOW), Some(far + 1));
        c.observe(3);
        assert_eq!(c.next_fence(NOW), Some(far + 2));
    }

    #[test]
    fn merge_never_goes_back_and_clamps_a_corrupt_epoch() {
        let mut c = FenceClock {
            epoch: 4,
            high_water: 9 << EPOCH_SHIFT,
        };
        c.merge(FenceClock {
            epoch: 2,
            high_water: 7,
        });
        assert_eq!(
            c,
            FenceClock {
                epoch: 4,
                high_water: 9 << EPOCH_SHIFT
            }
        );
        assert!(c.advance_epoch());
        assert_eq!(c.epoch, 10);
        c.merge(FenceClock {
            epoch: u64::MAX,
            high_water: 0,
        });
        assert_eq!(c.epoch, MAX_EPOCH);
    }

    #[test]
    fn epochs_and_fences_run_out_without_wrapping() {
        let mut c = FenceClock {
            epoch: MAX_EPOCH,
            high_water: MAX_FENCE - 1,
        };
        assert!(!c.advance_epoch());
        assert_eq!(c.epoch, MAX_EPOCH);
        assert_eq!(c.next_fence(NOW), Some(MAX_FENCE));
        assert_eq!(c.next_fence(NOW), None);
        assert_eq!(c.next_fence(NOW), None);
    }

    #[test]
    fn a_known_cluster_epoch_widens_what_a_restore_may_carry() {
        let c = FenceClock::default();
        let far = ((MAX_RESTORE_EPOCH_LEAD + 30) << EPOCH_SHIFT) | time_floor(NOW);
        assert!(!c.admits_restored(far, NOW));
        assert!(!c.admits_restored_within(far, NOW, 29));
        assert!(c.admits_restored_within(far, NOW, 30));
        assert!(!c.admits_restored_within(MAX_FENCE, NOW, u64::MAX));
    }

    #[test]
    fn time_floor_is_clamped() {
        assert_eq!(time_floor(0), 0);
        assert_eq!(time_floor(i64::MIN), 0);
        assert_eq!(
            time_floor(i64::MAX),
            ((1u64 << TIME_BITS) - 1) << COUNTER_BITS
        );
        let mut c = FenceClock::default();
        assert!(c.next_fence(i64::MAX).unwrap() < 1 << EPOCH_SHIFT);
    }

    #[test]
    fn restored_fences_are_bounded() {
        let mut c = FenceClock::default();
        let now_fence = c.next_fence(NOW).unwrap();
        assert!(c.admits_restored(now_fence, NOW));
        assert!(c.admits_restored(1, NOW));
        // Another server's fence from a few promotions ahead, an hour ahead.
        let ahead = (3 << EPOCH_SHIFT) | time_floor(NOW + 3_600_000);
        assert!(c.admits_restored(ahead, NOW));
        // Forged: the largest fence, a far epoch, a far future time.
        assert!(!c.admits_restored(MAX_FENCE, NOW));
        assert!(!c.admits_restored(0, NOW));
        assert!(!c.admits_restored(u64::MAX, NOW));
        let far_epoch = (MAX_RESTORE_EPOCH_LEAD + 1) << EPOCH_SHIFT;
        assert!(!c.admits_restored(far_epoch, NOW));
        assert!(c.admits_restored(MAX_RESTORE_EPOCH_LEAD << EPOCH_SHIFT, NOW));
        let far_time = time_floor(NOW + MAX_RESTORE_TIME_LEAD_MS + 1);
        assert!(!c.admits_restored(far_time, NOW));
        assert!(c.admits_restored(time_floor(NOW + MAX_RESTORE_TIME_LEAD_MS), NOW));
        // Observing the largest admitted fence leaves fences for a long time:
        // it cannot be ratcheted, since the bound follows the own epoch only.
        let worst = (MAX_RESTORE_EPOCH_LEAD << EPOCH_SHIFT) | ((1 << EPOCH_SHIFT) - 1);
        assert!(
            !c.admits_restored(worst, NOW),
            "time part far in the future"
        );
        let worst = (MAX_RESTORE_EPOCH_LEAD << EPOCH_SHIFT) | time_floor(NOW) | 1023;
        assert!(c.admits_restored(worst, NOW));
        c.observe(worst);
        assert!(!c.admits_restored(((2 * MAX_RESTORE_EPOCH_LEAD) << EPOCH_SHIFT) | 1, NOW));
        assert!(c.next_fence(NOW).is_some());
        assert!(c.advance_epoch());
        assert_eq!(c.epoch, MAX_RESTORE_EPOCH_LEAD + 1);
    }

    #[test]
    fn the_layout_of_a_fence() {
        assert_eq!(EPOCH_SHIFT, 51);
        assert_eq!(MAX_EPOCH, 4095);
        assert_eq!(
            MAX_EPOCH << EPOCH_SHIFT | ((1 << EPOCH_SHIFT) - 1),
            MAX_FENCE
        );
    }

    #[test]
    fn validity() {
        assert!(!is_valid(0));
        assert!(is_valid(1));
        assert!(is_valid(MAX_FENCE));
        assert!(!is_valid(MAX_FENCE + 1));
    }
}
