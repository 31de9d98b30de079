//! Deadlock torture of multi-key locks (SPEC "Multi-resource locks"): workers, each on its own
//! connection, take random subsets of 2 or 3 of 5 keys, named in random order, with
//! `LOCK.ACQUIREALL … BLOCK`, write to each key's fenced resource, and give them back with
//! `LOCK.RELEASEALL`; some take a single key with `LOCK.ACQUIRE … BLOCK` in between.
//!
//! Checked: no two workers inside one key's resource at once (an overlap); every write's fence
//! above the last one the resource accepted (no stale fence); no `BLOCK` answered nil (no
//! timeout: a deadlock shows as one); every release finds every hold; every worker makes
//! progress. The leases are far longer than any hold, so no handoff happens by expiry: every
//! grant follows a release.
//!
//! `make test` runs it for 3 s with 8 workers. `REDISLOCK_MULTI_STRESS_SECS`,
//! `REDISLOCK_MULTI_STRESS_WORKERS` and `REDISLOCK_MULTI_STRESS_SEED` make the long run of
//! `make stress`, which reads the `MULTI-TORTURE-SUMMARY` line it prints.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

const KEYS: [&str; 5] = ["mt:a", "mt:b", "mt:c", "mt:d", "mt:e"];
/// Far longer than any hold: no handoff by expiry.
const LEASE_MS: i64 = 60_000;
/// Far longer than any wait should be: a nil reply means a request was stuck.
const BLOCK_MS: i64 = 30_000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// One key's fenced resource: who is inside, and the highest fence accepted.
#[derive(Default)]
struct Resource {
    inside: Option<usize>,
    fence: i64,
}

#[derive(Default)]
struct Tally {
    overlaps: AtomicU64,
    stale: AtomicU64,
    timeouts: AtomicU64,
    lost: AtomicU64,
    multi_grants: AtomicU64,
    single_grants: AtomicU64,
}

struct Shared {
    resources: Vec<Mutex<Resource>>,
    tally: Tally,
}

impl Shared {
    fn enter(&self, worker: usize, key: usize, fence: i64) {
        let mut r = self.resources[key].lock().unwrap();
        if r.inside.is_some() {
            self.tally.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        if fence <= r.fence {
            self.tally.stale.fetch_add(1, Ordering::Relaxed);
        }
        r.inside = Some(worker);
        r.fence = r.fence.max(fence);
    }

    fn leave(&self, worker: usize, key: usize) {
        let mut r = self.resources[key].lock().unwrap();
        if r.inside == Some(worker) {
            r.inside = None;
        }
    }
}

fn grants_of(v: &Value) -> Option<Vec<i64>> {
    match v {
        Value::Array(items) if items.len() == 2 => match &items[1] {
            Value::Array(f) => Some(f.iter().map(as_int).collect()),
            _ => None,
        },
        _ => None,
    }
}

/// One worker's loop until `until`; its number of grants.
fn work(con: &mut Connection, me: usize, seed: u64, until: Instant, shared: &Shared) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed ^ (me as u64).wrapping_mul(0x9e37_79b9));
    let token = format!("w{me}");
    let mut grants = 0;
    while Instant::now() < until {
        let mut picked: Vec<usize> = (0..KEYS.len()).collect();
        picked.shuffle(&mut rng);
        let single = rng.gen_range(0..5) == 0;
        picked.truncate(if single { 1 } else { rng.gen_range(2..=3) });
        let names: Vec<&str> = picked.iter().map(|&k| KEYS[k]).collect();
        let fences = if single {
            let cmd = rcmd!(
                "LOCK.ACQUIRE",
                names[0],
                &token,
                "PX",
                LEASE_MS,
                "BLOCK",
                BLOCK_MS
            );
            parse_grant(&ok(con, &cmd)).map(|(_, f)| vec![f])
        } else {
            let mut cmd = rcmd!("LOCK.ACQUIREALL", names.len());
            for n in &names {
                cmd.arg(*n);
            }
            cmd.arg(&token)
                .arg("PX")
                .arg(LEASE_MS)
                .arg("BLOCK")
                .arg(BLOCK_MS);
            grants_of(&ok(con, &cmd))
        };
        let Some(fences) = fences else {
            shared.tally.timeouts.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        grants += 1;
        let counter = match single {
            true => &shared.tally.single_grants,
            false => &shared.tally.multi_grants,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        for (&k, &f) in picked.iter().zip(&fences) {
            shared.enter(me, k, f);
        }
        if rng.gen_range(0..4) == 0 {
            thread::sleep(Duration::from_micros(rng.gen_range(100..1500)));
        }
        for &k in &picked {
            shared.leave(me, k);
        }
        let mut cmd = rcmd!("LOCK.RELEASEALL", names.len());
        for n in &names {
            cmd.arg(*n);
        }
        cmd.arg(&token);
        if as_int(&ok(con, &cmd)) != names.len() as i64 {
            shared.tally.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
    grants
}

#[test]
fn random_key_sets_in_random_order_never_overlap_deadlock_or_go_stale() {
    let secs = env_u64("REDISLOCK_MULTI_STRESS_SECS").unwrap_or(3).max(1);
    let workers = env_u64("REDISLOCK_MULTI_STRESS_WORKERS")
        .unwrap_or(8)
        .max(2) as usize;
    let seed = env_u64("REDISLOCK_MULTI_STRESS_SEED").unwrap_or_else(|| now_ms() as u64);
    println!("multi torture: {secs}s, {workers} workers, seed {seed}");
    let s = Server::start();
    let shared = Arc::new(Shared {
        resources: KEYS.iter().map(|_| Mutex::default()).collect(),
        tally: Tally::default(),
    });
    let until = Instant::now() + Duration::from_secs(secs);
    let handles: Vec<_> = (0..workers)
        .map(|me| {
            let mut con = s.conn();
            con.set_read_timeout(Some(Duration::from_millis(BLOCK_MS as u64 + 10_000)))
                .unwrap();
            let shared = Arc::clone(&shared);
            thread::spawn(move || work(&mut con, me, seed, until, &shared))
        })
        .collect();
    let per_worker: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let t = &shared.tally;
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let (overlaps, stale, timeouts, lost) = (
        load(&t.overlaps),
        load(&t.stale),
        load(&t.timeouts),
        load(&t.lost),
    );
    println!(
        "MULTI-TORTURE-SUMMARY multi_grants={} single_grants={} min_worker={} max_worker={} overlaps={overlaps} stale={stale} timeouts={timeouts} lost={lost} violations={}",
        load(&t.multi_grants),
        load(&t.single_grants),
        per_worker.iter().min().unwrap(),
        per_worker.iter().max().unwrap(),
        overlaps + stale + timeouts + lost,
    );
    let mut c = s.conn();
    assert_eq!(dbsize(&mut c), 0, "every hold was released");
    assert_eq!(
        (overlaps, stale, timeouts, lost),
        (0, 0, 0, 0),
        "seed {seed}: overlaps, stale fences, timeouts, lost holds"
    );
    assert!(
        per_worker.iter().all(|&g| g > 0),
        "seed {seed}: every worker makes progress: {per_worker:?}"
    );
    assert!(load(&t.multi_grants) > 0);
}
