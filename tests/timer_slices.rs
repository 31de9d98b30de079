//! Work the module does outside a command is time-sliced (SPEC "Server states"): lease ends,
//! handoffs and the release of a closed connection's `EPHEMERAL` holds run about 1 ms a pass,
//! the rest in later passes, with clients served in between; while the server's state forbids
//! writing, the due jobs stay in the schedule, untouched, and the state is looked at once a pass.
//! The end state is exact however many passes it takes: every hold released, every waiter
//! served in order, replicas identical. (How long a stall lasts is a benchmark's business:
//! `bench/stalls.py`.)

use std::io::Write;
use std::thread;
use std::time::Duration;

use crate::common::*;
use crate::resources::used_memory;

fn digest(server: &Server) -> Vec<u8> {
    as_bytes(&ok(&mut server.conn(), &rcmd!("DEBUG", "DIGEST")))
}

/// Sends `commands` in one write on `con` and reads every reply, which must all be grants.
fn pipeline_grants(con: &mut RawConn, commands: &[Vec<String>]) {
    let buf = resp_commands(commands);
    let mut writer = con.stream().try_clone().unwrap();
    let sender = thread::spawn(move || writer.write_all(&buf).expect("write"));
    for (i, _) in commands.iter().enumerate() {
        match con.read().expect("reply") {
            Resp::Array(_) => {}
            other => panic!("command {i} ({:?}) answered {other:?}", commands[i]),
        }
    }
    sender.join().unwrap();
}

fn ephemeral_holds(con: &mut RawConn, n: usize) {
    let cmds: Vec<Vec<String>> = (0..n)
        .map(|i| {
            [
                "LOCK.ACQUIRE",
                &format!("e:{i}"),
                "t",
                "PX",
                "600000",
                "EPHEMERAL",
            ]
            .map(String::from)
            .to_vec()
        })
        .collect();
    pipeline_grants(con, &cmds);
}

const MANY: usize = 50_000;

#[test]
fn a_closed_connection_s_many_holds_are_released_over_several_passes_all_of_them() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut holder = RawConn::connect(&m);
    let id = holder.client_id();
    ephemeral_holds(&mut holder, MANY);
    let mut c = m.conn();
    // Two waiters for one of the held keys, in this order.
    let first = spawn_waiter(&m, "e:7", "first", 60_000, 60_000);
    wait_waiters(&mut c, "e:7", 1);
    let second = spawn_waiter(&m, "e:7", "second", 60_000, 60_000);
    wait_waiters(&mut c, "e:7", 2);
    assert_eq!(stat(&m, "ephemeral_holds"), MANY as i64);
    let cut_before = stat(&m, "timer_passes_cut");
    holder.close();
    // Other clients are served while the release goes on: some INFO lands between two slices,
    // when part of the holds is released and part is not.
    let mut seen_midway = false;
    wait_until(
        "every hold of the closed connection to be released",
        Duration::from_secs(30),
        || {
            let info = m.info_text("redislock");
            let pending = stat_in(&info, "ephemeral_pending");
            let live = stat_in(&info, "ephemeral_holds");
            if live == 0 && pending > 0 && pending < MANY as i64 {
                seen_midway = true;
            }
            live == 0 && pending == 0 && stat_in(&info, "locks") == 1
        },
    );
    wait_client_gone(&mut c, id);
    assert!(
        seen_midway,
        "no command was served while the release was under way"
    );
    assert!(
        stat(&m, "timer_passes_cut") - cut_before >= 2,
        "released in one or two passes"
    );
    assert_eq!(stat(&m, "ephemeral_releases"), MANY as i64);
    // The first waiter has the lock, the second still waits for it.
    assert_eq!(first.granted().0, b"first");
    assert!(second.try_recv().is_none());
    assert_eq!(as_int(&ok(&mut c, &rcmd!("DBSIZE"))), 1);
    assert_eq!(info_some(&mut c, "e:7").token, b"first");
    assert_eq!(release(&mut c, "e:7", b"first"), 1);
    assert_eq!(second.granted().0, b"second");
    wait_replica_caught_up(&m, &r);
    assert_eq!(digest(&m), digest(&r));
}

/// What a client sees while a closed connection's holds are being released: they are gone for
/// every command on their lock (an acquire by someone else is granted, `LOCK.INFO` lists no
/// holder, the old token releases nothing), though `EXISTS` still finds the record the
/// scheduler has not come to yet.
#[test]
fn a_closed_connection_s_holds_count_as_gone_before_the_scheduler_releases_them() {
    let m = Server::start();
    let r = Server::start_replica_of(&m);
    let mut holder = RawConn::connect(&m);
    let id = holder.client_id();
    ephemeral_holds(&mut holder, MANY);
    holder.close();
    let mut c = m.conn();
    wait_client_gone(&mut c, id);
    let mut probe = RawConn::connect(&m);
    let (mut granted, mut masked, mut refused_release) = (0, 0, 0);
    for i in (0..MANY).rev() {
        if granted >= 10 && masked >= 10 && refused_release >= 10 {
            break;
        }
        let key = format!("e:{i}");
        // In one write: the server reads both before any timer pass.
        let (second, grant) = match i % 3 {
            0 => (vec!["LOCK.ACQUIRE", &key, "newcomer", "PX", "600000"], true),
            1 => (vec!["LOCK.INFO", &key], false),
            _ => (vec!["LOCK.RELEASE", &key, "t"], false),
        };
        let buf = resp_commands(&[vec!["EXISTS", &key], second]);
        probe.stream().write_all(&buf).unwrap();
        let still_there = matches!(probe.read().unwrap(), Resp::Int(1));
        let reply = probe.read().unwrap();
        match i % 3 {
            0 => {
                assert!(
                    matches!(reply, Resp::Array(_)),
                    "{key}: a newcomer was refused: {reply:?}"
                );
                assert!(grant);
                granted += usize::from(still_there);
            }
            1 => {
                if still_there {
                    assert_eq!(reply, Resp::Nil, "{key}: LOCK.INFO lists a gone hold");
                    masked += 1;
                }
            }
            _ => {
                assert_eq!(
                    reply,
                    Resp::Int(0),
                    "{key}: the gone hold was released again"
                );
                refused_release += usize::from(still_there);
            }
        }
    }
    assert!(
        granted >= 10 && masked >= 10 && refused_release >= 10,
        "the release was over before the probes could see it under way \
         ({granted} grants, {masked} INFO, {refused_release} releases)"
    );
    wait_until("the release to end", Duration::from_secs(30), || {
        stat(&m, "ephemeral_pending") == 0
    });
    // Exactly the newcomer's grants are left.
    let newcomers = (0..MANY)
        .filter(|i| i % 3 == 0)
        .filter(|i| exists(&mut c, &format!("e:{i}")))
        .count();
    assert_eq!(as_int(&ok(&mut c, &rcmd!("DBSIZE"))), newcomers as i64);
    assert_eq!(stat(&m, "ephemeral_releases"), MANY as i64);
    wait_replica_caught_up(&m, &r);
    assert_eq!(digest(&m), digest(&r));
}

#[derive(Clone, Copy)]
enum Held {
    Paused,
    TooFewReplicas,
}

/// `n` shared keys, each with a long holder and a short one whose lease ends after `short_ms`;
/// and a two-place semaphore held by a long and a short lease, with two waiters in line.
fn short_leases(m: &Server, n: usize, short_ms: i64) -> (Waiter, Waiter) {
    let mut con = RawConn::connect(m);
    let mut cmds: Vec<Vec<String>> = Vec::new();
    for i in 0..n {
        let key = format!("s:{i}");
        cmds.push(
            ["LOCK.ACQUIRE", &key, "long", "PX", "600000", "SHARED"]
                .map(String::from)
                .to_vec(),
        );
        cmds.push(
            [
                "LOCK.ACQUIRE",
                &key,
                "short",
                "PX",
                &short_ms.to_string(),
                "SHARED",
            ]
            .map(String::from)
            .to_vec(),
        );
    }
    cmds.push(
        ["LOCK.ACQUIRE", "sem", "long", "PX", "600000", "LIMIT", "2"]
            .map(String::from)
            .to_vec(),
    );
    cmds.push(
        [
            "LOCK.ACQUIRE",
            "sem",
            "short",
            "PX",
            &short_ms.to_string(),
            "LIMIT",
            "2",
        ]
        .map(String::from)
        .to_vec(),
    );
    pipeline_grants(&mut con, &cmds);
    let mut c = m.conn();
    let first = spawn_waiter_with(m, "sem", "first", 60_000, 60_000, &["LIMIT", "2"]);
    wait_waiters(&mut c, "sem", 1);
    let second = spawn_waiter_with(m, "sem", "second", 60_000, 60_000, &["LIMIT", "2"]);
    wait_waiters(&mut c, "sem", 2);
    (first, second)
}

fn held_lease_ends_stay_in_place(held: Held) {
    const N: usize = 20_000;
    // Long enough to set everything up before the first lease ends; a loaded machine may need
    // longer, so a setup that ran late is done again, on new servers, with leases twice as long.
    let mut short_ms = 3_000 * i64::from(time_scale());
    let (m, r, start, first, second) = loop {
        let m = Server::start();
        let r = Server::start_replica_of(&m);
        let start = now_ms();
        let (first, second) = short_leases(&m, N, short_ms);
        if now_ms() - start < short_ms - 500 {
            break (m, r, start, first, second);
        }
        assert!(
            short_ms < 24_000 * i64::from(time_scale()),
            "setting up took too long for the leases to end while held, even with {short_ms} ms"
        );
        short_ms *= 2;
    };
    let mut c = m.conn();
    match held {
        Held::Paused => ok(&mut c, &rcmd!("CLIENT", "PAUSE", 600_000, "WRITE")),
        Held::TooFewReplicas => ok(&mut c, &rcmd!("CONFIG", "SET", "min-replicas-to-write", 5)),
    };
    // Every short lease has ended; the jobs are due.
    sleep_until_wall_ms(start + short_ms + 100);
    let jobs = stat(&m, "timer_jobs");
    let looks = stat(&m, "timer_passes_held");
    // The state is looked at again and again, and each time the jobs stay where they are.
    wait_until(
        "the server's state to be looked at five more times",
        Duration::from_secs(5),
        || stat(&m, "timer_passes_held") >= looks + 5,
    );
    assert_eq!(stat(&m, "timer_jobs"), jobs, "jobs taken out while held");
    assert_eq!(stat(&m, "lease_ends"), 0);
    assert!(stat(&m, "scheduled_jobs") >= N as i64);
    assert!(first.try_recv().is_none());
    let cut = stat(&m, "timer_passes_cut");
    match held {
        Held::Paused => ok(&mut c, &rcmd!("CLIENT", "UNPAUSE")),
        Held::TooFewReplicas => ok(&mut c, &rcmd!("CONFIG", "SET", "min-replicas-to-write", 0)),
    };
    assert_eq!(first.granted().0, b"first");
    wait_until("every short lease to end", Duration::from_secs(30), || {
        stat(&m, "lease_ends") == N as i64 + 1
    });
    assert!(
        stat(&m, "timer_passes_cut") - cut >= 2,
        "{N} lease ends in one or two passes"
    );
    // Exact: every key kept its long holder only; the semaphore's freed place went to the first
    // waiter.
    for i in (0..N).step_by(997) {
        let info = crate::kinds::info_of(&mut c, &format!("s:{i}"));
        assert_eq!(info.tokens(), ["long"]);
    }
    assert_eq!(as_int(&ok(&mut c, &rcmd!("DBSIZE"))), N as i64 + 1);
    assert!(second.try_recv().is_none());
    assert_eq!(release(&mut c, "sem", b"first"), 1);
    assert_eq!(second.granted().0, b"second");
    wait_replica_caught_up(&m, &r);
    assert_eq!(digest(&m), digest(&r));
}

#[test]
fn lease_ends_due_during_a_client_pause_stay_in_place_then_run_in_slices() {
    held_lease_ends_stay_in_place(Held::Paused);
}

#[test]
fn lease_ends_due_while_replicas_are_missing_stay_in_place_then_run_in_slices() {
    held_lease_ends_stay_in_place(Held::TooFewReplicas);
}

/// After 100,000 `EPHEMERAL` holds come and go, the module's indexes give their memory back.
#[test]
fn memory_comes_back_after_many_ephemeral_holds_come_and_go() {
    const N: usize = 100_000;
    let m = Server::start();
    let mut c = m.conn();
    let before = used_memory(&m);
    let mut holder = RawConn::connect(&m);
    let id = holder.client_id();
    ephemeral_holds(&mut holder, N);
    let peak = used_memory(&m);
    holder.close();
    wait_client_gone(&mut c, id);
    wait_until("the holds to be released", Duration::from_secs(30), || {
        stat(&m, "ephemeral_holds") == 0 && stat(&m, "locks") == 0
    });
    // Redis shrinks its own tables in its cron, a little at a time.
    let limit = 2 << 20;
    let deadline = std::time::Instant::now() + Duration::from_secs(10) * time_scale();
    let mut after = used_memory(&m);
    while after - before >= limit && std::time::Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        after = used_memory(&m);
    }
    assert!(
        after - before < limit,
        "used_memory {before} before, {peak} at the peak, {after} after"
    );
    assert!(peak - before > 10 * limit, "the holds took little memory");
}
