//! Waiting for a server to reach a state: an INFO field, a finished AOF rewrite or BGSAVE, a
//! synced replica.

use std::thread;
use std::time::{Duration, Instant};

use super::*;

impl Server {
    /// One field of `INFO <section>`.
    pub fn info_field(&self, section: &str, name: &str) -> Option<String> {
        let mut con = self.conn();
        let info: String = redis::cmd("INFO").arg(section).query(&mut con).unwrap();
        field(&info, name)
    }

    /// Waits until `INFO <section>` shows `name:value`.
    pub fn wait_info(&self, section: &str, name: &str, value: &str) {
        let deadline = Instant::now() + startup_deadline();
        loop {
            let got = self.info_field(section, name);
            if got.as_deref() == Some(value) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "INFO {section}: {name} is {got:?}, expected {value:?}\n{}",
                    self.log_tail(30)
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a background AOF rewrite (and any scheduled one) to finish.
    pub fn wait_aof_rewrite_done(&self) {
        let deadline = Instant::now() + startup_deadline();
        loop {
            let mut con = self.conn();
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut con)
                .unwrap();
            let busy = field(&info, "aof_rewrite_in_progress").as_deref() != Some("0")
                || field(&info, "aof_rewrite_scheduled").as_deref() != Some("0");
            if !busy {
                assert_eq!(
                    field(&info, "aof_last_bgrewrite_status").as_deref(),
                    Some("ok"),
                    "AOF rewrite failed\n{}",
                    self.log_tail(30)
                );
                return;
            }
            if Instant::now() > deadline {
                panic!("AOF rewrite still running\n{}", self.log_tail(30));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a background save to finish (after `BGSAVE`).
    pub fn wait_bgsave_done(&self) {
        self.wait_info("persistence", "rdb_bgsave_in_progress", "0");
        assert_eq!(
            self.info_field("persistence", "rdb_last_bgsave_status")
                .as_deref(),
            Some("ok")
        );
    }

    /// For a replica: waits until the link to `master_port` is up, then until the master sees
    /// one replica acknowledging its offset.
    pub(crate) fn wait_replica_synced(&self, master_port: u16) {
        self.wait_info("replication", "master_link_status", "up");
        let client = redis::Client::open(format!("redis://127.0.0.1:{master_port}/")).unwrap();
        let mut master = client.get_connection_with_timeout(io_timeout()).unwrap();
        master.set_read_timeout(Some(io_timeout())).unwrap();
        // A replica of a replica (chained replication) cannot run WAIT; its link being up is
        // all there is to wait for.
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut master)
            .unwrap();
        if field(&info, "role").as_deref() != Some("master") {
            return;
        }
        let n: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut master)
            .unwrap();
        assert!(n >= 1, "WAIT 1 5000 on master answered {n}");
    }
}
