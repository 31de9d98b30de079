//! The soak in Redis Cluster: two shards (a master and its replica each). The soak's keys live
//! in four slots of one shard; between commands their slots move to the other shard the way
//! `redis-cli --cluster reshard` moves them (`SETSLOT IMPORTING`/`MIGRATING`, `MIGRATE` in
//! batches, `SETSLOT NODE`) while locks are held and waiters wait, and the lease clock runs
//! between the batches. `CLUSTER FAILOVER` swaps a shard's roles. After each move the new shard
//! must hold every lock, gate and data key exactly as the model says, the old one nothing of
//! them, and every fence granted afterwards must exceed the earlier ones (checked per name over
//! the whole run).

use std::time::Duration;

use redis::Value;

use crate::cluster::key_slot;
use crate::common::*;

use super::model::Span;
use super::pick::{Draws, KEYS};
use super::serve::late;
use super::slots::Reply;
use super::{Soak, R};

/// What a waiter on the source hears when its lock leaves the node.
pub const MOVED_AWAY: &str =
    "TRYAGAIN the lock's slot is moving or moved to another node; retry the command";

/// The shard the soak's slots are not on.
pub struct Spare {
    pub master: Server,
    pub replica: Server,
    /// When the last `CLUSTER FAILOVER` was done.
    pub failed_over: Option<std::time::Instant>,
    /// When the last slot move ended (Unix ms).
    pub moved_at: Option<i64>,
}

/// `cluster-node-timeout`. A master votes for a replica of the same shard at most once in
/// twice this time, so failovers closer together would time out.
pub const NODE_TIMEOUT_MS: u64 = 5000;

fn node(rdb_encoding: &str) -> Server {
    Server::builder()
        .module_args(&["rdb-encoding", rdb_encoding])
        .cluster_enabled()
        .set("cluster-node-timeout", &NODE_TIMEOUT_MS.to_string())
        // Only the soak's own `CLUSTER FAILOVER` swaps roles: a master restarted by the soak
        // must find its replica still a replica.
        .set("cluster-replica-no-failover", "yes")
        // A master left without slots stays a master (by default it would follow the shard
        // that took them, with its replica), so the shards can swap places again.
        .set("cluster-allow-replica-migration", "no")
        .set("appendonly", "yes")
        .set("appendfsync", "always")
        .set("aof-use-rdb-preamble", "yes")
        .start()
}

pub fn my_id(s: &Server) -> String {
    lossy(&as_bytes(&ok(&mut s.conn(), &rcmd!("CLUSTER", "MYID"))))
}

/// The soak's slots, each once.
pub fn soak_slots() -> Vec<u16> {
    let mut slots: Vec<u16> = KEYS.iter().map(|k| key_slot(k)).collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// The port serving `slot` in `s`'s `CLUSTER SLOTS`.
fn owner_seen_by(s: &Server, slot: u16) -> Option<i64> {
    let Value::Array(ranges) = ok(&mut s.conn(), &rcmd!("CLUSTER", "SLOTS")) else {
        return None;
    };
    ranges.iter().find_map(|r| match r {
        Value::Array(f) if f.len() >= 3 => {
            let (lo, hi) = (as_int(&f[0]), as_int(&f[1]));
            let port = match &f[2] {
                Value::Array(n) if n.len() >= 2 => as_int(&n[1]),
                _ => return None,
            };
            (lo <= i64::from(slot) && i64::from(slot) <= hi).then_some(port)
        }
        _ => None,
    })
}

/// Whether `s` had a pong from every other node after Unix ms `t`.
fn heard_from_all_since(s: &Server, t: i64) -> bool {
    let nodes = lossy(&as_bytes(&ok(&mut s.conn(), &rcmd!("CLUSTER", "NODES"))));
    nodes.lines().filter(|l| !l.contains("myself")).all(|l| {
        l.split(' ')
            .nth(5)
            .and_then(|p| p.parse::<i64>().ok())
            .is_some_and(|p| p > t)
    })
}

fn state_ok(s: &Server) -> bool {
    let info = lossy(&as_bytes(&ok(&mut s.conn(), &rcmd!("CLUSTER", "INFO"))));
    field(&info, "cluster_state").as_deref() == Some("ok")
}

/// Two shards: the first (master, replica) serves the soak's slots, the spare every other slot.
pub fn start_cluster(seed: u64) -> (Server, Server, Spare) {
    // Master and replica of the soak's slots are servers 0 and 1.
    let [a, ra, b, rb] = [0, 1, 2, 3].map(|i| node(super::rdb_encoding(seed, i)));
    for n in [&b, &ra, &rb] {
        ok(
            &mut n.conn(),
            &rcmd!("CLUSTER", "MEET", "127.0.0.1", a.port()),
        );
    }
    let ours = soak_slots();
    let mut add_a = rcmd!("CLUSTER", "ADDSLOTS");
    let mut add_b = rcmd!("CLUSTER", "ADDSLOTS");
    for s in 0..16384u16 {
        if ours.contains(&s) {
            add_a.arg(s);
        } else {
            add_b.arg(s);
        }
    }
    ok(&mut a.conn(), &add_a);
    ok(&mut b.conn(), &add_b);
    let all = [&a, &b, &ra, &rb];
    let (ida, idb) = (my_id(&a), my_id(&b));
    wait_until(
        "every node knows the masters",
        Duration::from_secs(20),
        || {
            all.iter().all(|n| {
                let nodes = lossy(&as_bytes(&ok(&mut n.conn(), &rcmd!("CLUSTER", "NODES"))));
                nodes.contains(&ida) && nodes.contains(&idb) && !nodes.contains("handshake")
            })
        },
    );
    ok(&mut ra.conn(), &rcmd!("CLUSTER", "REPLICATE", &ida));
    ok(&mut rb.conn(), &rcmd!("CLUSTER", "REPLICATE", &idb));
    for r in [&ra, &rb] {
        r.wait_info("replication", "master_link_status", "up");
    }
    let spare = Spare {
        master: b,
        replica: rb,
        failed_over: None,
        moved_at: None,
    };
    wait_cluster(&[&a, &ra, &spare.master, &spare.replica], a.port());
    (a, ra, spare)
}

/// Waits until every node says `cluster_state:ok` and sends the soak's slots to `port`.
fn wait_cluster(all: &[&Server], port: u16) {
    wait_until("the cluster agrees", Duration::from_secs(20), || {
        all.iter().all(|n| {
            state_ok(n)
                && soak_slots()
                    .iter()
                    .all(|&s| owner_seen_by(n, s) == Some(i64::from(port)))
        })
    });
}

impl Soak {
    /// After an operation on a node: the cluster is whole again.
    pub fn cluster_settled(&mut self) {
        if let Some(spare) = &self.spare {
            let all = [&self.master, &self.replica, &spare.master, &spare.replica];
            wait_cluster(&all, self.master.port());
        }
    }

    /// The soak's slots move to the spare shard, keys in random batches, time running between
    /// them; the shards then swap places.
    pub fn move_slots(&mut self, d: &mut Draws) -> R {
        let spare = self.spare.take().expect("a cluster soak");
        let r = self.move_slots_to(&spare, d);
        self.spare = Some(spare);
        r?;
        let ended = now_ms();
        let mut spare = self.spare.take().expect("spare");
        std::mem::swap(&mut self.master, &mut spare.master);
        std::mem::swap(&mut self.replica, &mut spare.replica);
        spare.moved_at = Some(ended);
        self.spare = Some(spare);
        self.model.unbind_all();
        self.connect_slots();
        self.model.tally.moves += 1;
        // Nothing of the slots is left on the old shard.
        let old = self.spare.as_ref().expect("spare");
        wait_replica_caught_up(&old.master, &old.replica);
        for n in [&old.master, &old.replica] {
            for s in soak_slots() {
                let left = as_int(&ok(&mut n.conn(), &rcmd!("CLUSTER", "COUNTKEYSINSLOT", s)));
                if left != 0 {
                    let listed = ok(&mut n.conn(), &rcmd!("CLUSTER", "GETKEYSINSLOT", s, 10));
                    let role = n.info_field("replication", "role");
                    return Err(format!(
                        "port {} ({role:?}) still holds {left} key(s) of slot {s} after the \
                         move: {listed:?}\n{}",
                        n.port(),
                        n.log_tail(30)
                    ));
                }
            }
        }
        Ok(())
    }

    fn move_slots_to(&mut self, to: &Spare, d: &mut Draws) -> R {
        if let Some(t) = to.moved_at {
            let all = [&self.master, &self.replica, &to.master, &to.replica];
            // Gossip sent before the last move ended may still be on its way, and a node that
            // imports a slot takes it over when the node it imports from seems not to own it
            // (Valkey): every node hears from every other one again first.
            wait_until(
                "fresh gossip after the last move",
                Duration::from_secs(20),
                || all.iter().all(|n| heard_from_all_since(n, t)),
            );
        }
        let (src, dst) = (my_id(&self.master), my_id(&to.master));
        let dport = to.master.port();
        let mut dc = to.master.conn();
        for s in soak_slots() {
            ok(&mut dc, &rcmd!("CLUSTER", "SETSLOT", s, "IMPORTING", &src));
            ok(
                &mut self.mc,
                &rcmd!("CLUSTER", "SETSLOT", s, "MIGRATING", &dst),
            );
        }
        self.migrating = true;
        // Batches of one slot each (MIGRATE's rule), the slots in random order, as the source
        // lists their keys (the model's and any an odd command wrote), listed again until none
        // is left, as `redis-cli --cluster reshard` does: a lock whose last lease ran out is
        // not listed, and a handoff may bring it back meanwhile.
        let mut slots = soak_slots();
        for i in (1..slots.len()).rev() {
            slots.swap(i, d.below(i + 1));
        }
        let mut keys: Vec<String> = Vec::new();
        loop {
            if keys.is_empty() {
                let Some(&s) = slots.first() else {
                    break;
                };
                let listed = ok(&mut self.mc, &rcmd!("CLUSTER", "GETKEYSINSLOT", s, 1000));
                let Value::Array(names) = listed else {
                    return Err(format!("CLUSTER GETKEYSINSLOT {s}: {listed:?}"));
                };
                if names.is_empty() {
                    slots.remove(0);
                    continue;
                }
                keys = names.iter().map(|n| lossy(&as_bytes(n))).collect();
                for i in (1..keys.len()).rev() {
                    keys.swap(i, d.below(i + 1));
                }
            }
            let n = (1 + d.below(3)).min(keys.len());
            let batch: Vec<String> = keys.drain(..n).collect();
            let locks: Vec<&str> = KEYS
                .iter()
                .copied()
                .filter(|k| batch.iter().any(|b| b == k))
                .collect();
            for k in &locks {
                self.quiet(k)?;
            }
            let mut migrate = rcmd!("MIGRATE", "127.0.0.1", dport, "", 0, 5000, "KEYS");
            for k in &batch {
                migrate.arg(k);
            }
            let t0 = now_ms();
            let reply = match run(&mut self.mc, &migrate) {
                Ok(v) => v,
                Err(e) => {
                    let nodes = |s: &Server| {
                        lossy(&as_bytes(&ok(&mut s.conn(), &rcmd!("CLUSTER", "NODES"))))
                    };
                    return Err(format!(
                        "MIGRATE {batch:?}: {}\nsource's CLUSTER NODES:\n{}\ntarget's:\n{}\n{}",
                        err_text(&e),
                        nodes(&self.master),
                        nodes(&to.master),
                        to.master.log_tail(40)
                    ));
                }
            };
            let t = now_ms();
            self.note(format!("  MIGRATE {batch:?} -> {reply:?}"));
            for k in &locks {
                // MIGRATE sends a key's remaining TTL, which the target counts from when it
                // restores the key: the key's expiry may move later by the time in transit.
                let lock = self.model.lock(k);
                for h in &mut lock.holds {
                    h.lease.hi += t - t0 + 1;
                }
                if !lock.holds.is_empty() {
                    self.model.tally.moved_locks += 1;
                }
                self.refused_by_move(k, Span::new(t, t))?;
            }
            // The lease clock runs on both nodes meanwhile.
            std::thread::sleep(Duration::from_millis(d.between(0, 150) as u64));
            self.advance()?;
        }
        // A lock whose last lease ended before its slot was listed never moved: its waiters
        // were sent to retry when it ended. The model takes those answers now, while the
        // slots still migrate and the waiters' connections are still open.
        for k in KEYS {
            self.settle(k)?;
        }
        // The importing node first (it takes a new config epoch), then the source.
        for s in soak_slots() {
            ok(&mut dc, &rcmd!("CLUSTER", "SETSLOT", s, "NODE", &dst));
            ok(&mut self.mc, &rcmd!("CLUSTER", "SETSLOT", s, "NODE", &dst));
        }
        self.migrating = false;
        wait_cluster(
            &[&self.master, &self.replica, &to.master, &to.replica],
            dport,
        );
        Ok(())
    }

    /// Waits until no hold of `key` may end, and no waiter's deadline pass, within the next
    /// moments, so that what a `MIGRATE` does to its waiters does not depend on timing (a
    /// waiter that leaves can let the next one in before the lock moves).
    fn quiet(&mut self, key: &str) -> R {
        loop {
            self.settle(key)?;
            let soon = now_ms() + 6 * late();
            let lock = self.model.peek(key);
            let leases = lock
                .holds
                .iter()
                .filter(|h| h.lease.lo <= soon)
                .map(|h| h.lease.hi);
            let deadlines = lock
                .queue
                .iter()
                .filter(|w| w.deadline.lo <= soon)
                .map(|w| w.deadline.hi + late());
            match leases.chain(deadlines).max() {
                Some(t) => sleep_until_wall_ms(t),
                None => return Ok(()),
            }
        }
    }

    /// `key` left this node (`MIGRATE`): its waiters are answered `TRYAGAIN` (nil if their
    /// deadline came first) and leave the queue.
    pub fn refused_by_move(&mut self, key: &str, when: Span) -> R {
        let queue = std::mem::take(&mut self.model.lock(key).queue);
        for w in queue {
            let reply = self.read(w.slot)?;
            let who = format!(
                "waiter {} (slot {}) on {key}",
                super::model::show(&w.token),
                w.slot
            );
            match reply {
                Reply::Err(text) if text == MOVED_AWAY => {
                    self.note(format!("  {who}: {MOVED_AWAY}"));
                    self.model.tally.moved_waiters += 1;
                }
                Reply::Nil if w.deadline.lo <= when.hi + late() => {
                    self.note(format!("  {who}: timed out"));
                    self.model.tally.wait_timeouts += 1;
                }
                other => {
                    return Err(format!(
                        "{who} answered {other} when the lock left the node; expected \
                         {MOVED_AWAY}"
                    ))
                }
            }
        }
        Ok(())
    }
}
