//! The set's behaviour through its public face, in both forms and across
//! the switch between them.

use super::form::allocation;
use super::indexed::Indexed;
use super::*;
use crate::core::token::MAX_TOKEN_LEN;

fn hold(fence: u64, expire_at: i64) -> Hold {
    Hold { fence, expire_at }
}

#[test]
fn leases_end_in_order_of_expiry() {
    let mut h = Holders::new(Kind::Shared);
    h.insert(b"a", hold(1, 300));
    h.insert(b"b", hold(2, 100));
    h.insert(b"c", hold(3, 200));
    assert_eq!(
        (h.earliest(), h.latest(), h.len()),
        (Some(100), Some(300), 3)
    );
    assert_eq!(
        h.pop_ended(100),
        None,
        "a lease ends once the clock is past it"
    );
    let (t, x) = h.pop_ended(101).unwrap();
    assert_eq!((&t[..], x), (&b"b"[..], hold(2, 100)));
    assert_eq!(h.pop_ended(101), None);
    assert_eq!(h.get(b"b"), None);
    assert_eq!(h.earliest(), Some(200));
}

#[test]
fn extending_moves_the_lease_in_the_order() {
    let mut h = Holders::new(Kind::Semaphore { limit: 3 });
    h.insert(b"a", hold(1, 100));
    h.insert(b"b", hold(2, 200));
    assert!(h.set_expiry(b"a", 500));
    assert!(!h.set_expiry(b"zz", 500));
    assert_eq!((h.earliest(), h.latest()), (Some(200), Some(500)));
    assert_eq!(h.get(b"a"), Some(hold(1, 500)));
    assert_eq!(
        h.iter().map(|(t, _)| t.to_vec()).collect::<Vec<_>>(),
        [b"b".to_vec(), b"a".to_vec()]
    );
    assert_eq!(
        h.by_fence()
            .iter()
            .map(|(_, x, _)| x.fence)
            .collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(h.remove(b"a"), Some(hold(1, 500)));
    assert_eq!(
        (h.earliest(), h.latest(), h.len()),
        (Some(200), Some(200), 1)
    );
    assert_eq!(h.highest_fence(), 2);
    assert_eq!(h.remove(b"a"), None);
}

#[test]
fn a_look_is_scheduled_only_when_the_first_lease_end_moves_earlier() {
    let mut h = Holders::new(Kind::Shared);
    assert_eq!(h.look_needed(), None, "no holders, nothing to look at");
    h.insert(b"a", hold(1, 100));
    assert_eq!(
        h.look_needed(),
        None,
        "one lease: the key's TTL ends it, as an exclusive lock's"
    );
    h.insert(b"z", hold(9, 100));
    assert_eq!(h.look_needed(), None, "leases that all end together");
    h.remove(b"z");
    h.insert(b"b", hold(2, 200));
    assert_eq!(h.look_needed(), Some(101), "a lease ends before the key's");
    assert_eq!(h.look_needed(), None);
    h.insert(b"d", hold(4, 150));
    assert_eq!(h.look_needed(), None, "a later lease is covered");
    h.insert(b"c", hold(3, 50));
    assert_eq!(h.look_needed(), Some(51));
    assert_eq!(h.clone().look_needed(), Some(51), "a copy is not watched");
    h.set_watched(None);
    assert_eq!(
        h.look_needed(),
        Some(51),
        "a key that moved is looked at again"
    );
    h.set_watched(Some(300));
    assert_eq!(h.look_needed(), Some(51));
}

#[test]
fn memory_grows_with_holders() {
    let mut h = Holders::new(Kind::Shared);
    let block = std::mem::size_of::<Holders>();
    assert_eq!(h.heap_size(), block + 8, "a count, in the smallest block");
    let now = 1_780_000_000_000;
    let fence = 0x2000_0000_0000;
    h.insert(&[0; 32], hold(fence, now));
    assert_eq!(
        h.heap_size(),
        block + 48,
        "count, 6 + 7 + 1 bytes, token: 47"
    );
    for i in 1..10 {
        h.insert(&[i; 32], hold(fence + u64::from(i), now + i64::from(i)));
    }
    assert_eq!(h.heap_size(), block + 384, "47 + 9 * 35 = 362 bytes");
    // The indexed form: the tokens twice and both indexes' entries.
    for i in 10..=COMPACT_MAX as u8 {
        h.insert(&[i; 3], hold(fence + u64::from(i), now));
    }
    assert!(!h.is_compact());
    let indexed = block + std::mem::size_of::<Indexed>();
    assert_eq!(
        h.heap_size(),
        indexed + 10 * (2 * 32 + 128) + 7 * (2 * 3 + 128)
    );
}

#[test]
fn allocations_round_to_jemalloc_size_classes() {
    let classes = [
        (1, 8),
        (8, 8),
        (9, 16),
        (17, 32),
        (47, 48),
        (128, 128),
        (129, 160),
        (256, 256),
        (257, 320),
        (362, 384),
        (385, 448),
        (513, 640),
        (4097, 5120),
    ];
    for (n, class) in classes {
        assert_eq!(allocation(n), class, "{n}");
    }
}

#[test]
fn a_set_switches_form_past_a_threshold_and_back_well_below() {
    let mut h = Holders::new(Kind::Semaphore { limit: 100 });
    let token = |i: usize| format!("holder-{i}").into_bytes();
    for i in 0..COMPACT_MAX {
        h.insert(&token(i), hold(i as u64 + 1, 1000 + i as i64));
        assert!(h.is_compact(), "{i}");
    }
    h.insert(&token(99), hold(99, 500));
    assert!(!h.is_compact(), "past the threshold");
    // Around the threshold it stays indexed.
    for _ in 0..3 {
        assert!(h.remove(&token(99)).is_some());
        assert!(!h.is_compact());
        h.insert(&token(99), hold(99, 500));
        assert!(!h.is_compact());
    }
    assert_eq!(h.earliest(), Some(500));
    while h.len() > COMPACT_AGAIN + 1 {
        h.pop_ended(i64::MAX).unwrap();
        assert!(!h.is_compact());
    }
    assert_eq!(h.pop_ended(i64::MAX).map(|(_, x)| x.fence), Some(8));
    assert!(h.is_compact(), "well below");
    assert_eq!(h.len(), COMPACT_AGAIN);
    assert_eq!(h.earliest(), Some(1008));
    assert_eq!(h.get(&token(15)), Some(hold(16, 1015)));
    // Long tokens take the indexed form sooner, and keep it.
    let mut long = Holders::new(Kind::Shared);
    for i in 0..8u8 {
        long.insert(&[i; MAX_TOKEN_LEN], hold(u64::from(i) + 1, 10));
    }
    assert!(!long.is_compact(), "8 tokens of 512 bytes");
    long.remove(&[0; MAX_TOKEN_LEN]);
    assert!(!long.is_compact());
    for i in 1..5u8 {
        long.remove(&[i; MAX_TOKEN_LEN]);
    }
    assert!(long.is_compact(), "3 of them");
}

/// A random sequence of operations gives the same answers as the
/// indexed form alone (the reference: it never switches), whatever form
/// the set is in; and the form follows the thresholds.
#[test]
fn both_forms_answer_alike() {
    use rand::{Rng, SeedableRng};
    let seed = rand::random::<u64>();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut switches = 0;
    for _ in 0..20 {
        let kind = Kind::Semaphore { limit: 64 };
        let mut h = Holders::new(kind);
        let mut model = Indexed::from_holds(std::iter::empty());
        let mut model_watch: Option<i64> = None;
        let mut compact = true;
        let mut fence = 1u64 << 45;
        // Data on some holds, short enough not to move the thresholds in bytes.
        let datas: Vec<Vec<u8>> = vec![b"a".to_vec(), vec![b'x'; 20], vec![7; 20]];
        let tokens: Vec<Vec<u8>> = (0..40)
            .map(|i| {
                let len = if i % 5 == 0 {
                    rng.gen_range(1..200)
                } else {
                    32
                };
                (0..len).map(|j| (i * 7 + j) as u8).collect()
            })
            .collect();
        for step in 0..400 {
            let what = format!("seed {seed} step {step}");
            let token = &tokens[rng.gen_range(0..tokens.len())];
            let at = 1_780_000_000_000 + rng.gen_range(0..50);
            match rng.gen_range(0..10) {
                0..=3 => {
                    fence += rng.gen_range(1..3000);
                    let data = data_for(&mut rng, &datas);
                    h.insert_with_data(token, hold(fence, at), data);
                    model.insert(token, hold(fence, at), data);
                }
                4 => assert_eq!(
                    h.set_expiry(token, at),
                    model.set_expiry(token, at),
                    "{what}"
                ),
                5 => assert_eq!(h.remove(token), model.remove(token), "{what}"),
                6 => {
                    let data = data_for(&mut rng, &datas);
                    assert_eq!(
                        h.set_data(token, data),
                        model.set_data(token, data),
                        "{what}"
                    );
                }
                7 => {
                    let now = at - 20;
                    loop {
                        let (got, want) = (h.pop_ended(now), model.pop_ended(now));
                        assert_eq!(got, want, "{what}");
                        if got.is_none() {
                            break;
                        }
                    }
                }
                8 => {
                    let last = model.latest();
                    let want = model
                        .earliest()
                        .filter(|&e| Some(e) != last)
                        .map(|e| e.saturating_add(1))
                        .filter(|&e| model_watch.is_none_or(|w| w > e));
                    if want.is_some() {
                        model_watch = want;
                    }
                    assert_eq!(h.look_needed(), want, "{what}");
                }
                _ => {
                    let next = rng.gen_bool(0.5).then_some(at);
                    h.set_watched(next);
                    model_watch = next;
                }
            }
            let was = compact;
            compact = if compact {
                model.len() <= COMPACT_MAX
            } else {
                model.len() <= COMPACT_AGAIN
            };
            switches += usize::from(was != compact);
            assert_eq!(h.is_compact(), compact, "{what}: form at {}", model.len());
            assert_eq!(h.len(), model.len(), "{what}");
            assert_eq!(h.get(token), model.get(token), "{what}");
            assert!(h.entries().eq(model.iter()), "{what}");
            assert_eq!(h.data_of(token), model.data_of(token), "{what}");
            let any = model.iter().any(|(_, _, d)| d.is_some());
            assert_eq!(h.has_data(), any, "{what}");
            let first = model.earliest();
            let last = model.latest();
            assert_eq!((h.earliest(), h.latest()), (first, last), "{what}");
            let top = model.iter().map(|(_, x, _)| x.fence).max().unwrap_or(0);
            assert_eq!(h.highest_fence(), top, "{what}");
            let by_fence: Vec<_> = h.by_fence().into_iter().map(|(_, x, _)| x.fence).collect();
            assert!(by_fence.windows(2).all(|w| w[0] < w[1]), "{what}");
            let copy = h.clone();
            assert_eq!(copy, h, "{what}");
            if !h.is_empty() {
                assert_eq!(
                    copy.look_needed().is_some(),
                    first != last,
                    "{what}: a copy is not watched (and a set whose leases all end \
                     with the key's TTL needs no look)"
                );
                let back = Holders::from_encoded(
                    kind,
                    h.len() as u64,
                    &h.encoded(),
                    h.has_data(),
                    i64::MAX,
                )
                .unwrap();
                assert_eq!(back, h, "{what}: stored and read back");
                assert_eq!(
                    (h.encoded().to_vec(), h.has_data()),
                    compact::encode_stored(model.iter()),
                    "{what}: one stored form for both"
                );
            }
        }
    }
    assert!(
        switches >= 20,
        "seed {seed}: the sets switched form {switches} times"
    );
}

/// Some data, or none (more often none: most sets have none).
fn data_for<'a>(rng: &mut impl rand::Rng, datas: &'a [Vec<u8>]) -> Option<&'a [u8]> {
    match rng.gen_range(0..6) {
        i if i < datas.len() => Some(&datas[i]),
        _ => None,
    }
}

#[test]
fn every_holder_keeps_its_data_across_the_switch_of_form_both_ways() {
    let mut h = Holders::new(Kind::Shared);
    let token = |i: usize| format!("holder-{i}").into_bytes();
    let data = |i: usize| (i % 4 != 3).then(|| format!("data of {i}").into_bytes());
    let check = |h: &Holders, n: usize| {
        for i in 0..n {
            assert_eq!(h.data_of(&token(i)), data(i).as_deref(), "{i} of {n}");
        }
        let listed: Vec<_> = h.by_fence().into_iter().map(|(_, _, d)| d).collect();
        let want: Vec<_> = (0..n).map(data).collect();
        assert_eq!(
            listed,
            want.iter().map(|d| d.as_deref()).collect::<Vec<_>>()
        );
    };
    let n = 3 * COMPACT_MAX;
    for i in 0..n {
        h.insert_with_data(
            &token(i),
            hold(i as u64 + 1, 1000 + i as i64),
            data(i).as_deref(),
        );
        assert_eq!(h.is_compact(), i < COMPACT_MAX, "{i}");
        check(&h, i + 1);
    }
    assert!(h.has_data());
    // Extending keeps the data; setting it replaces it; none clears it.
    assert!(h.set_expiry(&token(0), 5000));
    assert_eq!(h.data_of(&token(0)), data(0).as_deref());
    assert!(h.set_data(&token(1), Some(b"new")));
    assert_eq!(h.data_of(&token(1)), Some(&b"new"[..]));
    assert!(h.set_data(&token(1), data(1).as_deref()));
    assert!(!h.set_data(b"nobody", Some(b"x")));
    // Back to the compact form: the leases end first to last, token 0 last.
    while h.len() > COMPACT_AGAIN {
        let (t, _) = h.pop_ended(i64::MAX - 1).unwrap();
        assert!(h.get(&t).is_none());
    }
    assert!(h.is_compact());
    let left: Vec<usize> = (n - COMPACT_AGAIN + 1..n).chain([0]).collect();
    for &i in &left {
        assert_eq!(h.data_of(&token(i)), data(i).as_deref(), "{i}");
    }
    // Once no holder has data, the set is written without any again.
    for &i in &left {
        h.set_data(&token(i), None);
    }
    assert!(!h.has_data());
    let plain: Holders = {
        let mut p = Holders::new(Kind::Shared);
        for (t, x) in h.iter() {
            p.insert(t, x);
        }
        p
    };
    assert_eq!(h, plain);
    assert_eq!(h.heap_size(), plain.heap_size());
}

#[test]
fn data_counts_in_memory_in_both_forms() {
    let now = 1_780_000_000_000;
    for n in [1, COMPACT_MAX + 1] {
        let (mut plain, mut with) = (Holders::new(Kind::Shared), Holders::new(Kind::Shared));
        for i in 0..n {
            let t = [i as u8; 8];
            plain.insert(&t, hold(i as u64 + 1, now));
            with.insert_with_data(&t, hold(i as u64 + 1, now), Some(&[1; 1000]));
        }
        assert_eq!(plain.is_compact(), with.is_compact());
        assert!(
            with.heap_size() > plain.heap_size() + n * 900,
            "{n}: {} vs {}",
            with.heap_size(),
            plain.heap_size()
        );
    }
}
