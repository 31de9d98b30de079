//! `RESTORE` of damaged and forged lock payloads (SPEC "Server safety"): real `DUMP` payloads of
//! locks, read/write locks with several `SHARED` holders and semaphores (small sets and one large
//! enough for the module's indexed form), and payloads of the previous encodings (version 3, the
//! record in fields and the holds packed; version 2, each hold in its own fields; version 1)
//! built here, mutated — truncated at every length, bits flipped, bytes inserted and deleted,
//! length prefixes, counts, limits and fences rewritten to extremes, the record string and the
//! packed holds rewritten inside, another module id or encoding version — and resealed with a
//! correct trailer (RDB version, CRC64) so that Redis hands them to the module. Every payload
//! gets an answer, the server stays up, nothing else changes, the fence clock is not used up, and
//! what is accepted is a valid lock: exactly the one a reference decoder of the format expects.
//!
//! `REDISLOCK_RESTORE_FUZZ_CASES` (default 300) and `REDISLOCK_RESTORE_FUZZ_SEED` (default: the
//! time) set the random part; `make stress` runs many thousands.
//!
//! Also: a full sync of a dataset with locks to replicas with `repl-diskless-load swapdb` and
//! `on-empty-db`, whose data must end up identical.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

mod bench;
mod expect;
mod forged;
mod forged_holders;
mod format;
mod holds;
mod legacy;
mod mutation;
mod packed;
mod structured;

use bench::*;
use expect::*;
use format::*;
use holds::*;
use mutation::*;
use structured::*;

pub(crate) use format::crc64;

fn fuzz_cases() -> usize {
    std::env::var("REDISLOCK_RESTORE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(300)
}

fn fuzz_seed() -> u64 {
    std::env::var("REDISLOCK_RESTORE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| now_ms() as u64)
}

#[test]
fn truncated_at_every_length() {
    let mut b = Bench::start();
    let all = bases(&mut b);
    // Short and long tokens, a compressed one, locks with data (short, and compressed), the
    // locks of older versions, and every key with holders: every prefix of the body, resealed.
    let older = all.len() - HOLDER_BASES - LEGACY_BASES;
    for base in [&all[0], &all[3], &all[6], &all[7], &all[8]]
        .into_iter()
        .chain(&all[older..])
    {
        for n in 0..base.body.len() {
            let body = &base.body[..n];
            let payload = base.seal(body);
            let want = b.expect(&payload);
            b.case(&format!("truncated to {n}"), &payload, &want);
        }
        // The payload itself, and without its CRC recomputed after a change.
        let want = b.expect(&base.seal(&base.body));
        assert!(
            matches!(want, Expect::Lock { .. } | Expect::Holders { .. }),
            "{want:?}"
        );
        b.case("unchanged", &base.seal(&base.body), &want);
        let mut bad_crc = base.seal(&base.body);
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        b.case("wrong CRC", &bad_crc, &Expect::Refused);
        let newer = Dump {
            body: base.body.clone(),
            version: [base.version[0].wrapping_add(1), base.version[1]],
        };
        b.case(
            "newer RDB version",
            &newer.seal(&base.body),
            &Expect::Refused,
        );
    }
    b.finish("truncations");
}

#[test]
fn mutated_payloads_never_hurt_the_server() {
    let cases = fuzz_cases();
    let seed = fuzz_seed();
    println!("RESTORE-FUZZ seed={seed} cases={cases} (REDISLOCK_RESTORE_FUZZ_SEED / _CASES)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut b = Bench::start();
    let all = bases(&mut b);
    let id = module_id(&all[0].body);
    let started = Instant::now();
    let holders = all.len() - HOLDER_BASES;
    for i in 0..cases {
        // More than a third of the cases start from a key with holders.
        let at = if rng.gen_bool(0.3) {
            rng.gen_range(holders..all.len())
        } else {
            rng.gen_range(0..all.len())
        };
        let base = &all[at];
        let (label, body) = mutate(&mut rng, &base.body, id);
        let payload = base.seal(&body);
        let want = b.expect(&payload);
        let what = format!("case {i} (seed {seed}): {label}");
        b.case(&what, &payload, &want);
    }
    b.finish(&format!("seed {seed}"));
    println!(
        "RESTORE-FUZZ-SUMMARY cases={} accepted={} (holders checked exactly: {}) refused={} \
         (either answer allowed: {}) seed={seed} secs={}",
        b.n,
        b.accepted,
        b.exact_holders,
        b.refused,
        b.either,
        started.elapsed().as_secs()
    );
}

#[test]
fn replicas_full_sync_locks_with_diskless_load() {
    let master = Server::start();
    let mut c = master.conn();
    for i in 0..50 {
        let token = format!("{i}-{}", "t".repeat(i * 10));
        grant(
            &mut c,
            &format!("l:{i}"),
            token.as_bytes(),
            60_000 + i as i64,
        );
    }
    grant(&mut c, "l:generated", b"*", 60_000);
    let dump = as_bytes(&ok(&mut c, &rcmd!("DUMP", "l:1")));
    ok(&mut c, &rcmd!("RESTORE", "l:restored", 0, dump));
    ok(&mut c, &rcmd!("SET", "plain", "value"));
    let digest = |s: &Server| as_bytes(&ok(&mut s.conn(), &rcmd!("DEBUG", "DIGEST")));
    for mode in ["swapdb", "on-empty-db"] {
        let replica = Server::builder()
            .set("repl-diskless-load", mode)
            .replica_of(&master)
            .start();
        replica.wait_info("replication", "master_link_status", "up");
        wait_replica_caught_up(&master, &replica);
        assert_eq!(digest(&replica), digest(&master), "{mode}: DEBUG DIGEST");
        let mut rc = replica.conn();
        assert_eq!(dbsize(&mut rc), dbsize(&mut c), "{mode}");
        let (on_master, on_replica) = (info_some(&mut c, "l:7"), info_some(&mut rc, "l:7"));
        assert_eq!(
            (on_replica.token, on_replica.fence),
            (on_master.token, on_master.fence),
            "{mode}"
        );
        let log = replica.log();
        assert!(!log.contains("Error loading data from RDB"), "{mode}");
        // An empty replica loads straight from the socket: the module handles read errors.
        // (With swapdb, Redis 7.0 loads through a file, since the module does not declare
        // async loading.)
        if mode == "on-empty-db" {
            assert!(
                !log.contains("Skipping diskless-load"),
                "{mode}: {}",
                replica.log_tail(20)
            );
        }
        let crashes = replica.crash_lines();
        assert!(crashes.is_empty(), "{mode}: {}", crashes.join("\n"));
    }
}

#[test]
fn a_restored_key_with_holders_has_its_latest_lease_as_ttl() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    for (token, px) in [("a", 50_000), ("b", 90_000), ("c", 70_000)] {
        ok(
            &mut c,
            &rcmd!("LOCK.ACQUIRE", "s", token, "PX", px, "SHARED"),
        );
    }
    let latest = pexpiretime(&mut c, "s");
    let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", "s")));
    // No TTL, a shorter one, a longer one: the key's TTL becomes the latest lease whatever
    // RESTORE was given (set in the next pass of the event loop), on the master and its replica.
    for (key, ttl) in [("none", 0), ("shorter", 5_000), ("longer", 3_600_000)] {
        assert_eq!(
            ok(&mut c, &rcmd!("RESTORE", key, ttl, &payload)),
            Value::Okay
        );
        let what = format!("RESTORE {key} {ttl}: the TTL of the latest lease");
        wait_until(&what, Duration::from_secs(5), || {
            pexpiretime(&mut c, key) == latest
        });
    }
    wait_replica_caught_up(&m, &r);
    let mut rc = r.conn();
    for key in ["none", "shorter", "longer"] {
        assert_eq!(pexpiretime(&mut rc, key), latest, "replica: {key}");
    }
}

#[test]
fn a_restored_keys_ttl_waits_for_a_client_pause() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut c = m.conn();
    ok(
        &mut c,
        &rcmd!("LOCK.ACQUIRE", "s", "a", "PX", 60_000, "SHARED"),
    );
    let latest = pexpiretime(&mut c, "s");
    let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", "s")));
    // The pause arrives in the same read as the RESTORE, so the look at the restored key falls
    // due while writes are paused: the TTL is set, and replicated, only once the pause ends.
    let mut raw = RawConn::connect(&m);
    let restore: [&[u8]; 4] = [b"RESTORE", b"k", b"0", &payload];
    let pause: [&[u8]; 4] = [b"CLIENT", b"PAUSE", b"1000", b"WRITE"];
    std::io::Write::write_all(
        &mut raw.stream(),
        &resp_commands(&[&restore[..], &pause[..]]),
    )
    .unwrap();
    for _ in 0..2 {
        assert_eq!(raw.read(), Ok(Resp::Simple(b"OK".to_vec())));
    }
    assert_eq!(
        pexpiretime(&mut c, "k"),
        -1,
        "the TTL was written during the pause"
    );
    wait_until(
        "the TTL of the latest lease",
        Duration::from_secs(5),
        || pexpiretime(&mut c, "k") == latest,
    );
    wait_replica_caught_up(&m, &r);
    assert_eq!(pexpiretime(&mut r.conn(), "k"), latest, "replica");
}
