//! Upgrades from the previous release (docs/operations.md, "Upgrades and downgrades"), checked
//! against real servers: a replica upgraded first, a failover to it, the old master rejoining;
//! a master upgraded before its replica; RDB and AOF files of the previous release loaded by this
//! one; what a downgrade can load; no release swapped in a running server. The tests that need
//! the previous release's library run only when REDISLOCK_PREVIOUS_MODULE names it
//! (`scripts/previous-module.sh` builds it and prints its path; `make upgrade-test` does both).

mod handoff;
mod setup;

use redis::{Connection, Value};

use crate::common::*;
use setup::*;

/// The procedure of docs/operations.md: upgrade the replica (it loads the previous release's
/// file, and full-syncs from the old master), fail over to it, and bring the old master back as
/// its replica, first still on the previous release, then on this one.
#[test]
fn replica_first_failover_then_the_old_master_rejoins() {
    let Some(previous) = previous_module() else {
        return;
    };
    let new_module = module_path();
    let mut old = start_previous(&previous, Server::builder());
    let mut replica = Server::builder()
        .module_file(&previous)
        .replica_of(&old)
        .start();
    let highest = populate(&mut old.conn());
    wait_replica_caught_up(&old, &replica);
    let before = snapshot(&old);
    assert_eq!(snapshot(&replica), before);

    // The replica's own shutdown file (previous release) loads, and it continues by partial resync.
    replica.set_module_file(&new_module);
    replica.restart(Stop::Save);
    replica.wait_replica_synced(old.port());
    assert_eq!(info_number(&old, "stats", "sync_partial_ok"), 1);
    assert!(module_ver(&replica) > module_ver(&old));
    // What docs/operations.md tells of the previous release: `ver` 1, no `version` in INFO.
    assert_eq!(module_ver(&old), 1);
    assert_eq!(old.info_field("redislock", "redislock_version"), None);
    let version = replica.info_field("redislock", "redislock_version");
    assert_eq!(version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(snapshot(&replica), before);

    // Without a file it full-syncs from the old master, and has the same data.
    replica.stop(Stop::NoSave);
    std::fs::remove_file(replica.dir().join("dump.rdb")).expect("the replica's dump.rdb");
    let full = info_number(&old, "stats", "sync_full");
    relaunch(&mut replica);
    replica.wait_replica_synced(old.port());
    assert_eq!(info_number(&old, "stats", "sync_full"), full + 1);
    assert_eq!(snapshot(&replica), before);

    // Failover: the upgraded replica, caught up with everything the old master sent (which
    // sends nothing more: no writes, no pings), grants fences above every earlier one.
    let mut o = old.conn();
    ok(
        &mut o,
        &rcmd!("CONFIG", "SET", "repl-ping-replica-period", "3600"),
    );
    wait_replica_caught_up(&old, &replica);
    let mut n = replica.conn();
    assert_eq!(ok(&mut n, &rcmd!("REPLICAOF", "NO", "ONE")), Value::Okay);
    replica.wait_info("replication", "role", "master");
    assert_eq!(
        info_number(&replica, "replication", "second_repl_offset"),
        info_number(&old, "replication", "master_repl_offset") + 1
    );
    let fresh = acquire_with(&mut n, "up:after", "tok-after", TTL, &[]);
    let reader = acquire_with(&mut n, "up:shared", "reader-3", TTL, &["SHARED"]);
    let place = acquire_with(&mut n, "up:sem", "place-3", TTL, &["LIMIT", "3"]);
    for fence in [fresh, reader, place] {
        assert!(
            fence > highest,
            "fence {fence} after the failover, {highest} before"
        );
    }
    let gated = rcmd!("LOCK.FENCE", "up:gate", fresh, "SET", "up:data", "v2");
    assert_eq!(ok(&mut n, &gated), Value::Okay);
    let stale = rcmd!("LOCK.FENCE", "up:gate", highest, "SET", "up:data", "old");
    assert!(err(&mut n, &stale).starts_with("STALEFENCE"));

    // The old master, still on the previous release, rejoins at once: a partial resync, after
    // which it applies this release's stream (LOCK.FENCE's LOCK._GATE in MULTI/EXEC included).
    let port = replica.port();
    assert_eq!(
        ok(&mut o, &rcmd!("REPLICAOF", "127.0.0.1", port)),
        Value::Okay
    );
    old.wait_replica_synced(port);
    assert_eq!(info_number(&replica, "stats", "sync_partial_ok"), 1);
    assert_eq!(info_number(&replica, "stats", "sync_full"), 0);
    wait_replica_caught_up(&replica, &old);
    assert_eq!(snapshot(&old), snapshot(&replica));
    assert!(!old.log().contains("sending an error to its master"));

    // Once it needs a full sync (here it took a write of its own), it cannot load the file, and
    // exits with status 0, leaving the file as its dump.rdb.
    assert_eq!(ok(&mut o, &rcmd!("REPLICAOF", "NO", "ONE")), Value::Okay);
    assert_eq!(ok(&mut o, &rcmd!("SET", "up:diverged", "1")), Value::Okay);
    let mark = old.log().len();
    let _ = run(&mut o, &rcmd!("REPLICAOF", "127.0.0.1", port));
    let status = exit_status(&mut old);
    assert!(status.success(), "exit status {status}");
    assert_eq!(info_number(&replica, "stats", "sync_full"), 1);
    assert_refused_file(&old.log()[mark..]);
    assert!(old.dir().join("dump.rdb").is_file());

    // Started again on the previous release it stops the same way, on that dump.rdb.
    let mark = old.log().len();
    match old.launch(old.port()) {
        Err(LaunchError::Failed(_)) => {}
        Err(LaunchError::PortInUse) => panic!("port {} taken", old.port()),
        Ok(()) => panic!("the previous release loaded this release's file"),
    }
    assert_refused_file(&old.log()[mark..]);

    // Without that file it starts (empty), and stops again at its next full sync.
    std::fs::remove_file(old.dir().join("dump.rdb")).unwrap();
    relaunch(&mut old);
    assert_eq!(dbsize(&mut old.conn()), 0);
    let mark = old.log().len();
    let _ = run(&mut old.conn(), &rcmd!("REPLICAOF", "127.0.0.1", port));
    assert!(exit_status(&mut old).success());
    assert_refused_file(&old.log()[mark..]);

    // On this release it loads the file and follows its master again.
    old.set_module_file(&new_module);
    relaunch(&mut old);
    let mut o = old.conn();
    assert_eq!(
        ok(&mut o, &rcmd!("REPLICAOF", "127.0.0.1", port)),
        Value::Okay
    );
    old.wait_replica_synced(port);
    wait_replica_caught_up(&replica, &old);
    assert_eq!(snapshot(&old), snapshot(&replica));
    assert!(!exists(&mut o, "up:diverged"));
}

/// The wrong order: the master upgraded first (restarted from its own file) keeps its replica
/// on the previous release by partial resync, and the replica applies what this release
/// replicates: LOCK.FENCE as MULTI, LOCK._GATE, the inner command, EXEC; shared and semaphore
/// holds. (Its next full sync stops it: see the test above.)
#[test]
fn a_replica_on_the_previous_release_follows_an_upgraded_master_by_partial_resync() {
    let Some(previous) = previous_module() else {
        return;
    };
    let mut master = start_previous(&previous, Server::builder());
    let replica = Server::builder()
        .module_file(&previous)
        .replica_of(&master)
        .start();
    populate(&mut master.conn());
    wait_replica_caught_up(&master, &replica);
    master.set_module_file(&module_path());
    master.restart(Stop::Save);
    replica.wait_info("replication", "master_link_status", "up");
    assert_eq!(info_number(&master, "stats", "sync_partial_ok"), 1);
    assert_eq!(info_number(&master, "stats", "sync_full"), 0);

    let (gates, execs) = (calls(&replica, "lock._gate"), calls(&replica, "exec"));
    let mut m = master.conn();
    let fence = acquire_with(&mut m, "up:ex2", "tok-2", TTL, &[]);
    let gated = rcmd!("LOCK.FENCE", "up:gate", fence, "SET", "up:data", "v3");
    assert_eq!(ok(&mut m, &gated), Value::Okay);
    acquire_with(&mut m, "up:shared", "reader-3", TTL, &["SHARED"]);
    acquire_with(&mut m, "up:sem", "place-3", TTL, &["LIMIT", "3"]);
    assert_eq!(release(&mut m, "up:shared", b"reader-1"), 1);
    assert_eq!(extend_px(&mut m, "up:sem", b"place-2", TTL), 1);
    wait_replica_caught_up(&master, &replica);
    assert_eq!(calls(&replica, "lock._gate"), gates + 1);
    assert_eq!(calls(&replica, "exec"), execs + 1);
    assert_eq!(snapshot(&replica), snapshot(&master));
    assert!(!replica.log().contains("sending an error to its master"));
}

/// An RDB file written by the previous release (`SAVE`) loads exactly, and so does its fence
/// clock (the module's aux data): a file without keys still carries the epoch.
#[test]
fn an_rdb_file_of_the_previous_release_loads_exactly() {
    let Some(previous) = previous_module() else {
        return;
    };
    let mut s = start_previous(&previous, Server::builder());
    let mut c = s.conn();
    let highest = populate(&mut c);
    ok(&mut c, &rcmd!("SAVE"));
    let before = snapshot(&s);
    s.stop(Stop::Kill);
    s.set_module_file(&module_path());
    relaunch(&mut s);
    assert_eq!(snapshot(&s), before);
    assert!(acquire_with(&mut s.conn(), "up:after", "t", TTL, &[]) > highest);

    let mut s = start_previous(&previous, Server::builder());
    promote_times(&s, 3);
    let mut c = s.conn();
    let epoch = epoch_of(acquire_with(&mut c, "up:gone", "t", TTL, &[]));
    assert_eq!(release(&mut c, "up:gone", b"t"), 1);
    ok(&mut c, &rcmd!("SAVE"));
    s.stop(Stop::Kill);
    s.set_module_file(&module_path());
    relaunch(&mut s);
    assert_eq!(dbsize(&mut s.conn()), 0);
    let fresh = epoch_of(acquire_with(
        &mut Server::start().conn(),
        "k",
        "t",
        TTL,
        &[],
    ));
    assert!(epoch > fresh);
    assert_eq!(
        epoch_of(acquire_with(&mut s.conn(), "k", "t", TTL, &[])),
        epoch
    );
}

/// An AOF written by the previous release replays exactly: a rewrite (as RDB, or as commands
/// without the RDB preamble) and the commands appended after it.
#[test]
fn an_aof_of_the_previous_release_replays_exactly() {
    let Some(previous) = previous_module() else {
        return;
    };
    for preamble in ["yes", "no"] {
        let builder = Server::builder()
            .set("appendonly", "yes")
            .set("aof-use-rdb-preamble", preamble);
        let mut s = start_previous(&previous, builder);
        let mut c = s.conn();
        populate(&mut c);
        ok(&mut c, &rcmd!("BGREWRITEAOF"));
        s.wait_aof_rewrite_done();
        more_of_every_kind(&mut c);
        let before = snapshot(&s);
        assert_eq!(before.keys.len(), KEYS.len() + 1);
        s.stop(Stop::NoSave);
        s.set_module_file(&module_path());
        relaunch(&mut s);
        assert_eq!(snapshot(&s), before, "aof-use-rdb-preamble {preamble}");
    }
}

/// Downgrades: the previous release refuses any RDB file of this release, one without keys too
/// (the module's aux data is always in it), and so an AOF's RDB preamble. An AOF that this
/// release rewrote without the preamble it either replays exactly or crashes on (its own replay
/// bug, which this release fixed, hits lock commands whichever release wrote them; which files
/// it hits depends on the server). `DUMP` payloads restore one way: see the next test.
#[test]
fn a_downgrade_loads_no_rdb_file() {
    let Some(previous) = previous_module() else {
        return;
    };
    let mut s = Server::start();
    ok(&mut s.conn(), &rcmd!("SAVE"));
    s.stop(Stop::Kill);
    s.set_module_file(&previous);
    let mark = s.log().len();
    assert!(
        s.launch(s.port()).is_err(),
        "an RDB file without keys loaded"
    );
    assert_refused_file(&s.log()[mark..]);

    for (preamble, appended) in [("yes", false), ("no", false), ("no", true)] {
        let builder = Server::builder()
            .set("appendonly", "yes")
            .set("aof-use-rdb-preamble", preamble);
        let mut s = builder.start();
        let mut c = s.conn();
        populate(&mut c);
        ok(&mut c, &rcmd!("BGREWRITEAOF"));
        s.wait_aof_rewrite_done();
        if appended {
            more_of_every_kind(&mut c);
        }
        let before = snapshot(&s);
        s.stop(Stop::NoSave);
        s.set_module_file(&previous);
        let mark = s.log().len();
        if preamble == "yes" {
            assert!(s.launch(s.port()).is_err(), "an RDB preamble loaded");
            assert_refused_file(&s.log()[mark..]);
            continue;
        }
        s.allow_crash_signs();
        match s.launch(s.port()) {
            Ok(()) => assert_eq!(snapshot(&s), before),
            Err(_) => {
                let crash = s.crash_lines().join("\n");
                assert!(
                    crash.contains("crashed by signal: 11"),
                    "{}",
                    s.log_tail(40)
                );
                eprintln!(
                    "upgrade: the previous release crashed on the AOF (appended: {appended})"
                );
            }
        }
    }
}

/// `DUMP` payloads across the upgrade: the previous release's restore into this one exactly.
/// This release's records (encoding version 4) the previous release refuses, each `RESTORE`
/// with an error that changes nothing, whatever the kind of lock, with data or not; started
/// with `rdb-encoding 3`, this release writes records the previous release restores exactly
/// (the downgrade route of docs/operations.md), all but those with public data.
#[test]
fn dump_payloads_restore_from_the_previous_release_and_back_with_rdb_encoding_3() {
    let Some(previous) = previous_module() else {
        return;
    };
    let from = start_previous(&previous, Server::builder());
    let to = Server::start();
    let (mut f, mut t) = (from.conn(), to.conn());
    populate(&mut f);
    copy_keys(&mut f, &mut t);
    assert_eq!(snapshot(&to), snapshot(&from));

    for encoding in ["4", "3"] {
        let master = Server::builder()
            .module_args(&["rdb-encoding", encoding])
            .start();
        let old = start_previous(&previous, Server::builder());
        let (mut m, mut o) = (master.conn(), old.conn());
        populate(&mut m);
        if encoding == "3" {
            copy_keys(&mut m, &mut o);
            assert_eq!(snapshot(&old), snapshot(&master));
        }
        acquire_with(&mut m, "with-data", "tok", TTL, &["DATA", "host:1"]);
        acquire_with(&mut m, "sh-data", "r1", TTL, &["SHARED", "DATA", "host:1"]);
        acquire_with(&mut m, "sem-data", "p1", TTL, &["LIMIT", "3", "DATA", "x"]);
        let with_data = ["with-data", "sh-data", "sem-data"];
        // Every lock (a gate too), not the string the gate guarded.
        let locks = KEYS.iter().copied().filter(|k| *k != "up:data");
        for key in locks.chain(with_data) {
            if encoding == "3" && !with_data.contains(&key) {
                continue;
            }
            let payload = as_bytes(&ok(&mut m, &rcmd!("DUMP", key)));
            let r = run(
                &mut o,
                &rcmd!("RESTORE", key, TTL, payload.as_slice(), "REPLACE"),
            );
            assert!(r.is_err(), "rdb-encoding {encoding}, {key}: {r:?}");
            if encoding == "4" {
                assert!(!exists(&mut o, key), "{key}");
            }
        }
    }
}

/// `RESTORE`s every key of `KEYS` from `from` into `to`, with its absolute expiry.
fn copy_keys(from: &mut Connection, to: &mut Connection) {
    for key in KEYS {
        let payload = as_bytes(&ok(from, &rcmd!("DUMP", key)));
        let at = pexpiretime(from, key).max(0);
        let restore = rcmd!("RESTORE", key, at, payload.as_slice(), "ABSTTL");
        assert_eq!(ok(to, &restore), Value::Okay, "{key}");
    }
}

/// A module with a data type cannot be unloaded, and a second `MODULE LOAD` of the module fails:
/// Redis refuses a module name that is already loaded, before the module can log anything.
#[test]
fn module_unload_is_refused_and_a_second_load_fails() {
    let s = Server::builder()
        .set("enable-module-command", "yes")
        .start();
    let mut c = s.conn();
    let e = err(&mut c, &rcmd!("MODULE", "UNLOAD", "redislock"));
    assert_eq!(
        e,
        "ERR Error unloading module: the module exports one or more module-side data types, \
         can't unload"
    );
    let mut files = vec![module_path()];
    files.extend(given_previous());
    for file in files {
        let mark = s.log().len();
        let e = err(&mut c, &rcmd!("MODULE", "LOAD", file.to_str().unwrap()));
        assert_eq!(
            e,
            "ERR Error loading the extension. Please check the server logs."
        );
        let log = s.log()[mark..].to_string();
        // Redis says "Module not loaded", Valkey "Module name is busy.".
        let failed = format!("Module {} initialization failed. Module ", file.display());
        let why = log.split(&failed).nth(1).unwrap_or_default();
        assert!(
            why.starts_with("not loaded") || why.starts_with("name is busy."),
            "{log}"
        );
        assert!(!log.contains("<redislock>"), "{log}");
    }
    grant(&mut c, "up:still", b"t", TTL);
    assert_eq!(module_ver(&s), release_number());
}
