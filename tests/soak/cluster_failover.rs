//! The Cluster soak's failover: `CLUSTER FAILOVER` of the soak's shard, asked for again if the
//! server gives it up on a loaded machine.

use std::time::Duration;

use redis::Value;

use crate::common::*;

use super::cluster::{my_id, NODE_TIMEOUT_MS};
use super::{Soak, R};

impl Soak {
    /// `CLUSTER FAILOVER`: the replica takes over its master's slots, the master becomes its
    /// replica.
    pub fn cluster_failover(&mut self) -> R {
        let spare = self.spare.as_mut().expect("a cluster soak");
        let cooldown = Duration::from_millis(2 * NODE_TIMEOUT_MS + 500);
        if spare.failed_over.is_some_and(|t| t.elapsed() < cooldown) {
            self.note("  (too soon after the last failover: skipped)".into());
            return Ok(());
        }
        spare.failed_over = Some(std::time::Instant::now());
        self.drain_waiters()?;
        self.replica
            .wait_info("replication", "master_link_status", "up");
        // The master takes part only once its cluster view has the replica as its own (right
        // after an earlier failover it may not yet).
        let (master_id, replica_id) = (my_id(&self.master), my_id(&self.replica));
        wait_until(
            "the master knows its replica",
            Duration::from_secs(20),
            || {
                let listed = ok(
                    &mut self.master.conn(),
                    &rcmd!("CLUSTER", "REPLICAS", &master_id),
                );
                format!("{listed:?}").contains(&replica_id)
            },
        );
        // A manual failover that does not finish in time (its master's pause, or the votes,
        // late on a loaded machine) is given up by the server: it is asked for again, once the
        // votes of the first may be given again.
        let promoted =
            |s: &Server| s.info_field("replication", "role").as_deref() == Some("master");
        for attempt in 0.. {
            let reply = ok(&mut self.replica.conn(), &rcmd!("CLUSTER", "FAILOVER"));
            if reply != Value::Okay {
                return Err(format!("CLUSTER FAILOVER answered {reply:?}"));
            }
            let deadline =
                std::time::Instant::now() + Duration::from_millis(2 * NODE_TIMEOUT_MS + 500);
            while !promoted(&self.replica) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if promoted(&self.replica) {
                break;
            }
            if attempt == 2 {
                return Err("CLUSTER FAILOVER did not promote the replica in 3 attempts".into());
            }
            self.note("  (the failover timed out: asked again)".into());
        }
        self.master.wait_info("replication", "role", "slave");
        self.master
            .wait_info("replication", "master_link_status", "up");
        std::mem::swap(&mut self.master, &mut self.replica);
        self.cluster_settled();
        self.model.tally.restarts += 1;
        self.model.unbind_all();
        self.connect_slots();
        Ok(())
    }
}
