//! The `fence` target: the fence clock, under any sequence of grants, observations, merges and
//! epoch changes, never issues a fence that is not above every fence issued or observed before;
//! and a restored fence it admits stays admitted later and after a promotion.

use redislock::core::fence::{self, FenceClock, EPOCH_SHIFT, MAX_EPOCH, MAX_FENCE};

/// Input: a sequence of 9-byte operations `[op][value: u64 LE]` on one fence clock: grant at a
/// time, observe a fence, observe an epoch, merge a saved clock, start a new epoch, ask whether
/// a restored fence is admitted.
pub fn fence(data: &[u8]) {
    let mut clock = FenceClock::default();
    // Every fence issued or observed so far (observed ones only if valid, as the module
    // validates what it loads).
    let mut highest: u64 = 0;
    let mut last_epoch = 0;
    let mut now = fence::TIME_BASE_MS;
    for op in data.chunks_exact(9) {
        let v = u64::from_le_bytes(op[1..9].try_into().unwrap());
        let before = clock;
        match op[0] % 6 {
            0 => {
                // A time around now, or anything at all.
                now = if v & 1 == 0 {
                    fence::TIME_BASE_MS + (v >> 1) as i64 % (100 * 365 * 86_400_000)
                } else {
                    v as i64
                };
                match clock.next_fence(now) {
                    Some(f) => {
                        assert!(f > highest, "fence {f} not above {highest} ({before:?})");
                        assert!(fence::is_valid(f));
                        assert!(f >> EPOCH_SHIFT >= clock.epoch, "fence below its epoch");
                        highest = f;
                    }
                    None => assert!(
                        before.high_water >= MAX_FENCE,
                        "fences exhausted early: {before:?}"
                    ),
                }
            }
            1 => {
                let f = v % (MAX_FENCE + 1);
                if fence::is_valid(f) {
                    clock.observe(f);
                    highest = highest.max(f);
                }
            }
            2 => clock.observe_epoch(v),
            3 => {
                let saved = FenceClock {
                    epoch: v >> 52,
                    high_water: v % (MAX_FENCE + 1),
                };
                clock.merge(saved);
                highest = highest.max(saved.high_water);
            }
            4 => {
                let advanced = clock.advance_epoch();
                if advanced {
                    assert!(clock.epoch > before.epoch);
                    assert!(
                        clock.epoch << EPOCH_SHIFT > before.high_water,
                        "a new epoch not above the fences seen: {before:?} → {clock:?}"
                    );
                } else {
                    assert_eq!(clock.epoch, MAX_EPOCH);
                }
            }
            _ => {
                // Only time and promotions widen what a restore may bring.
                if clock.admits_restored(v, now) {
                    assert!(fence::is_valid(v), "admitted fence {v}");
                    let later = now.saturating_add(1 + (v & 0xffff) as i64);
                    assert!(clock.admits_restored(v, later), "{v} refused later");
                    let mut promoted = clock;
                    if promoted.advance_epoch() {
                        assert!(
                            promoted.admits_restored(v, now),
                            "{v} refused after promotion"
                        );
                    }
                }
            }
        }
        assert!(clock.epoch >= last_epoch && clock.epoch <= MAX_EPOCH);
        assert!(clock.high_water >= before.high_water, "the clock went back");
        last_epoch = clock.epoch;
    }
}
