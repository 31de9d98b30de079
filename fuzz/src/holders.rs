//! The `holders` target: the lock state machine of a key with holders (a shared lock or a
//! semaphore). Under any sequence of acquires, releases, extends, passing time and looks, the
//! holders match a plain map of the holds in both their forms (compact and indexed, switching
//! at their thresholds); the grant decisions follow the documented rules; and a plan for a
//! queue of waiters never grants what it must not: an exclusive hold only on a free key and
//! alone, a read hold never next to a writer, no more places than a semaphore has.

use std::collections::BTreeMap;

use redislock::core::fence::{self, FenceClock};
use redislock::core::grant::{decide, decide_newcomer, plan, Decision, LockKind, Occupancy, Want};
use redislock::core::holders::{Hold, Holders, HoldersError, Kind, COMPACT_AGAIN, COMPACT_MAX};

use crate::record::LATEST_END;

type Holds = Vec<(Vec<u8>, Hold)>;

/// Input: `[kind][limit]`, then 6-byte operations `[op][token][value: u32 LE]`.
pub fn holders(data: &[u8]) {
    let [kind, limit, ops @ ..] = data else {
        return;
    };
    let kind = match kind % 2 {
        0 => Kind::Shared,
        _ => Kind::Semaphore {
            limit: u32::from(limit % 24) + 1,
        },
    };
    let mut h = Holders::new(kind);
    let mut model: BTreeMap<Vec<u8>, Hold> = BTreeMap::new();
    // Each holder's public data, if it has some.
    let mut datas: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut clock = FenceClock::default();
    let mut now = fence::TIME_BASE_MS;
    for op in ops.chunks_exact(6) {
        let token = token_for(op[1]);
        let v = u32::from_le_bytes(op[2..6].try_into().unwrap());
        let lease_end = now + i64::from(v % 5_000) + 1;
        let changed = match op[0] % 8 {
            0 => {
                let want = match (kind, v % 4) {
                    (Kind::Shared, 0) => Want::Exclusive,
                    (Kind::Shared, _) => Want::Shared,
                    (Kind::Semaphore { limit }, 0) => Want::Place { limit: limit + 1 },
                    (Kind::Semaphore { limit }, _) => Want::Place { limit },
                };
                let holding = model.get(&token).map(|_| want_of(kind));
                let decision = decide(Occupancy::of(kind, h.len()), want, holding);
                assert_eq!(decision, expected(kind, h.len(), want, holding));
                match decision {
                    Decision::Grant => {
                        let fence = clock.next_fence(now).expect("fences left");
                        let hold = Hold {
                            fence,
                            expire_at: lease_end,
                        };
                        let data = data_for(&token, v);
                        h.insert_with_data(&token, hold, data.as_deref());
                        model.insert(token.clone(), hold);
                        match data {
                            Some(d) => datas.insert(token.clone(), d),
                            None => datas.remove(&token),
                        };
                        true
                    }
                    // Same fence, new lease; new data if given, else the data kept.
                    Decision::Regrant => {
                        assert!(h.set_expiry(&token, lease_end));
                        model.get_mut(&token).unwrap().expire_at = lease_end;
                        if let Some(d) = data_for(&token, v >> 8) {
                            assert!(h.set_data(&token, Some(&d)));
                            datas.insert(token.clone(), d);
                        }
                        true
                    }
                    _ => false,
                }
            }
            1 => {
                let removed = h.remove(&token);
                assert_eq!(removed, model.remove(&token));
                datas.remove(&token);
                removed.is_some()
            }
            2 => {
                let held = model.get_mut(&token);
                let found = held.is_some();
                if let Some(hold) = held {
                    hold.expire_at = lease_end;
                }
                assert_eq!(h.set_expiry(&token, lease_end), found);
                true
            }
            3 => {
                // Time passes; ended leases are taken out in the order they end.
                now += i64::from(v % 200_000);
                let mut popped = false;
                while let Some((t, hold)) = h.pop_ended(now) {
                    let first = sorted(&model).into_iter().next();
                    assert_eq!(
                        first,
                        Some((t.to_vec(), hold)),
                        "not the first lease to end"
                    );
                    assert!(hold.expire_at < now);
                    model.remove(&t[..]);
                    datas.remove(&t[..]);
                    popped = true;
                }
                assert!(model.values().all(|hold| hold.expire_at >= now));
                popped
            }
            4 => {
                check_look(&h, &sorted(&model), v % 2 == 0);
                false
            }
            5 => {
                check_plan(kind, v);
                false
            }
            6 => {
                if !h.is_empty() {
                    let encoded = h.encoded();
                    let (count, with_data) = (h.len() as u64, h.has_data());
                    let back = Holders::from_encoded(kind, count, &encoded, with_data, LATEST_END);
                    assert_eq!(back.as_ref(), Ok(&h), "stored form does not read back");
                }
                assert_eq!(h.clone(), h);
                false
            }
            _ => {
                check_grants(kind, h.len());
                false
            }
        };
        let holds = sorted(&model);
        check_matches(&h, kind, &holds);
        for token in model.keys() {
            assert_eq!(h.data_of(token), datas.get(token).map(|d| &d[..]), "data");
        }
        assert_eq!(h.has_data(), !datas.is_empty(), "some holder has data");
        if changed {
            // The form fits the size, with hysteresis: indexed past COMPACT_MAX holds, and
            // compact again at COMPACT_AGAIN (with short tokens, far below any byte bound).
            assert!(
                h.len() <= COMPACT_MAX || !h.is_compact(),
                "{} holds compact",
                h.len()
            );
            let short = |t: &Vec<u8>| t.len() + datas.get(t).map_or(0, Vec::len) <= 64;
            let small = holds.len() <= COMPACT_AGAIN && holds.iter().all(|(t, _)| short(t));
            assert!(!small || h.is_compact(), "{} small holds indexed", h.len());
        }
    }
}

/// A pool of tokens, every fifth one as long as a token can be, so that the compact form
/// outgrows its byte bound before its count bound.
fn token_for(id: u8) -> Vec<u8> {
    let id = id % 40;
    if id.is_multiple_of(5) {
        let mut t = vec![b'L'; redislock::core::limits::MAX_TOKEN_LEN - 1];
        t.push(id);
        t
    } else {
        format!("t{id}").into_bytes()
    }
}

fn sorted(model: &BTreeMap<Vec<u8>, Hold>) -> Holds {
    let mut holds: Holds = model.iter().map(|(t, h)| (t.clone(), *h)).collect();
    holds.sort_by_key(|(_, h)| (h.expire_at, h.fence));
    holds
}

/// What a holder of a key of `kind` holds it as.
fn want_of(kind: Kind) -> Want {
    match kind {
        Kind::Shared => Want::Shared,
        Kind::Semaphore { limit } => Want::Place { limit },
    }
}

/// The documented rules, for a key of `kind` with `holders` holds.
fn expected(kind: Kind, holders: usize, want: Want, holding: Option<Want>) -> Decision {
    match (kind, want) {
        (Kind::Shared, Want::Place { .. }) => Decision::Mismatch(LockKind::ReadWrite),
        (Kind::Semaphore { limit }, w) if w != (Want::Place { limit }) => {
            Decision::Mismatch(LockKind::Semaphore { limit })
        }
        _ if holding == Some(want) => Decision::Regrant,
        _ if holding.is_some() => Decision::OtherMode,
        (Kind::Shared, Want::Shared) => Decision::Grant,
        (Kind::Shared, _) => Decision::Busy,
        (Kind::Semaphore { limit }, _) if holders < limit as usize => Decision::Grant,
        _ => Decision::Busy,
    }
}

/// Every request against a key of `kind` with `holders` holds, by a holder and a newcomer, with
/// and without a queue: as documented, and a newcomer never overtakes the queue.
pub fn check_grants(kind: Kind, holders: usize) {
    let limit = match kind {
        Kind::Shared => 2,
        Kind::Semaphore { limit } => limit,
    };
    let key = Occupancy::of(kind, holders);
    let wants = [
        Want::Exclusive,
        Want::Shared,
        Want::Place { limit },
        Want::Place { limit: limit + 1 },
    ];
    for want in wants {
        for holding in [None, Some(want_of(kind))] {
            let d = decide(key, want, holding);
            assert_eq!(
                d,
                expected(kind, holders, want, holding),
                "{kind:?} {want:?}"
            );
            assert_eq!(decide_newcomer(key, want, holding, false), d);
            let queued = if d == Decision::Grant {
                Decision::Busy
            } else {
                d
            };
            assert_eq!(decide_newcomer(key, want, holding, true), queued);
        }
    }
}

/// `h` holds exactly `holds` (in lease-end order), and everything it reports agrees.
pub fn check_matches(h: &Holders, kind: Kind, holds: &[(Vec<u8>, Hold)]) {
    assert_eq!(h.kind(), kind);
    assert_eq!((h.len(), h.is_empty()), (holds.len(), holds.is_empty()));
    let listed: Holds = h.iter().map(|(t, hold)| (t.to_vec(), hold)).collect();
    assert_eq!(listed, holds, "holds differ");
    for (token, hold) in holds {
        assert_eq!(h.get(token), Some(*hold));
    }
    assert_eq!(h.earliest(), holds.first().map(|(_, x)| x.expire_at));
    assert_eq!(h.latest(), holds.last().map(|(_, x)| x.expire_at));
    let highest = holds.iter().map(|(_, x)| x.fence).max().unwrap_or(0);
    assert_eq!(h.highest_fence(), highest);
    let fences: Vec<u64> = h.by_fence().iter().map(|(_, x, _)| x.fence).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "by_fence out of order"
    );
    assert_eq!(fences.len(), holds.len());
    let valid = if holds.is_empty() {
        Err(HoldersError::Empty)
    } else {
        Ok(())
    };
    assert_eq!(h.validate(), valid);
}

/// A look at the next lease end is asked for just after it, once, and never when every lease
/// ends with the key's own expiry. `reset`: no look is scheduled any more.
fn check_look(h: &Holders, holds: &[(Vec<u8>, Hold)], reset: bool) {
    if reset {
        h.set_watched(None);
    }
    let (first, last) = (holds.first(), holds.last());
    let needed = match (first, last) {
        (Some((_, a)), Some((_, b))) if a.expire_at != b.expire_at => {
            Some(a.expire_at.saturating_add(1))
        }
        _ => None,
    };
    let look = h.look_needed();
    if reset {
        assert_eq!(look, needed, "look after a reset");
    } else {
        assert!(
            look.is_none() || look == needed,
            "look at {look:?}, needed {needed:?}"
        );
    }
    assert_eq!(h.look_needed(), None, "the same look asked twice");
}

/// A plan for up to five waiters on a key, from the bits of `v`.
fn check_plan(kind: Kind, v: u32) {
    let limit = match kind {
        Kind::Shared => (v >> 2) % 4 + 1,
        Kind::Semaphore { limit } => limit,
    };
    let start = match v % 4 {
        0 => Occupancy::Free,
        1 => Occupancy::Exclusive,
        2 => Occupancy::Shared,
        _ => Occupancy::Semaphore {
            limit,
            holders: ((v >> 4) % (limit + 1)) as usize,
        },
    };
    let queue: Vec<(Want, Option<Want>)> = (0..(v >> 8) % 6)
        .map(|i| {
            let bits = v >> (12 + 4 * i);
            let want = [
                Want::Exclusive,
                Want::Shared,
                Want::Place { limit },
                Want::Place { limit: limit + 1 },
            ][(bits % 4) as usize];
            let other = if want == Want::Shared {
                Want::Exclusive
            } else {
                Want::Shared
            };
            let holding = [None, None, Some(want), Some(other)][((bits >> 2) % 4) as usize];
            (want, holding)
        })
        .collect();
    let steps = plan(start, queue.iter().copied());
    assert!(steps.len() <= queue.len());
    let mut key = start;
    let mut grants = 0;
    for (&(want, holding), &step) in queue.iter().zip(&steps) {
        assert_eq!(step, decide(key, want, holding), "plan and decide disagree");
        if step != Decision::Grant {
            assert_ne!(
                step,
                Decision::Busy,
                "a plan goes on past a waiter that waits"
            );
            continue;
        }
        grants += 1;
        key = match (key, want) {
            (Occupancy::Free, Want::Exclusive) => Occupancy::Exclusive,
            (Occupancy::Free, Want::Shared) => Occupancy::Shared,
            (Occupancy::Free, Want::Place { limit }) => Occupancy::Semaphore { limit, holders: 1 },
            (Occupancy::Shared, Want::Shared) => Occupancy::Shared,
            (Occupancy::Semaphore { limit, holders }, Want::Place { .. })
                if holders < limit as usize =>
            {
                Occupancy::Semaphore {
                    limit,
                    holders: holders + 1,
                }
            }
            _ => panic!("{want:?} granted on {key:?} (from {start:?}, queue {queue:?})"),
        };
        if key == Occupancy::Exclusive {
            assert_eq!(grants, 1, "an exclusive grant next to others");
        }
    }
    if let Some(&(want, holding)) = queue.get(steps.len()) {
        assert_eq!(
            decide(key, want, holding),
            Decision::Busy,
            "the plan stopped early"
        );
    }
}

/// Public data for a grant to `token`, from the operation's value: none for most, short for
/// some, up to a few hundred bytes (which the forms' byte bounds count) for a few.
fn data_for(token: &[u8], v: u32) -> Option<Vec<u8>> {
    match v % 8 {
        0 => {
            let mut d = token.repeat(1 + (v as usize >> 3) % 40);
            d.truncate(redislock::core::limits::MAX_DATA_LEN);
            Some(d)
        }
        1 => Some(vec![(v >> 3) as u8; 1]),
        _ => None,
    }
}
