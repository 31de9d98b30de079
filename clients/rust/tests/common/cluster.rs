//! Throw-away Redis Clusters of real servers (with the module) on free loopback ports: masters
//! given even shares of the slots, replicas, a slot moved from one master to another as
//! `redis-cli --cluster reshard` moves it, a replica promoted after its master's `kill -9`.

use std::time::Duration;

use redis::Value;

use super::{until, Server};

/// How long a cluster may take to agree (a loaded machine).
const SETTLE: Duration = Duration::from_secs(60);

pub struct Cluster {
    pub nodes: Vec<Server>,
    pub ids: Vec<String>,
}

fn text(v: Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::SimpleString(s) => s,
        Value::VerbatimString { text, .. } => text,
        other => panic!("{other:?}"),
    }
}

pub fn query(server: &Server, cmd: &redis::Cmd) -> Value {
    cmd.query(&mut server.conn()).unwrap()
}

/// The Cluster slot of `key`, as the server computes it.
pub fn slot_of(server: &Server, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
        .map(str::to_string)
}

impl Cluster {
    /// `masters` masters with `replicas` replicas each, every slot served.
    pub fn start(masters: usize, replicas: usize) -> Cluster {
        let total = masters * (1 + replicas);
        let nodes: Vec<Server> = (0..total)
            .map(|_| {
                Server::start_with(&["--cluster-enabled", "yes", "--cluster-node-timeout", "3000"])
            })
            .collect();
        let ids: Vec<String> = nodes
            .iter()
            .map(|n| text(query(n, redis::cmd("CLUSTER").arg("MYID"))))
            .collect();
        for (i, n) in nodes.iter().enumerate() {
            query(n, redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(i + 1));
        }
        for (m, master) in nodes.iter().take(masters).enumerate() {
            let (from, to) = (m * 16384 / masters, (m + 1) * 16384 / masters - 1);
            query(
                master,
                redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(from).arg(to),
            );
        }
        for n in &nodes[1..] {
            query(
                n,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(nodes[0].port),
            );
        }
        let cluster = Cluster { nodes, ids };
        until(SETTLE, "every node knows every other", || {
            cluster.nodes.iter().all(|n| {
                let view = text(query(n, redis::cmd("CLUSTER").arg("NODES")));
                view.lines().count() == total && !view.contains("handshake")
            })
        });
        for r in 0..masters * replicas {
            let replica = &cluster.nodes[masters + r];
            let master = &cluster.ids[r % masters];
            query(replica, redis::cmd("CLUSTER").arg("REPLICATE").arg(master));
        }
        cluster.wait_ok();
        for r in masters..total {
            until(SETTLE, "a replica's link", || {
                let info = text(query(
                    &cluster.nodes[r],
                    redis::cmd("INFO").arg("replication"),
                ));
                field(&info, "master_link_status").as_deref() == Some("up")
            });
        }
        cluster
    }

    /// Every node says `cluster_state:ok`.
    pub fn wait_ok(&self) {
        until(SETTLE, "cluster_state:ok everywhere", || {
            self.nodes.iter().all(|n| {
                let info = text(query(n, redis::cmd("CLUSTER").arg("INFO")));
                field(&info, "cluster_state").as_deref() == Some("ok")
            })
        });
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// The node serving `slot`, as node `seen_by` sees it (its index).
    pub fn owner_seen_by(&self, seen_by: usize, slot: u16) -> Option<usize> {
        let slots = query(&self.nodes[seen_by], redis::cmd("CLUSTER").arg("SLOTS"));
        let Value::Array(ranges) = slots else {
            panic!("{slots:?}")
        };
        for r in ranges {
            let Value::Array(f) = r else { continue };
            let (Value::Int(a), Value::Int(b)) = (&f[0], &f[1]) else {
                continue;
            };
            if (*a..=*b).contains(&i64::from(slot)) {
                let Value::Array(master) = &f[2] else {
                    continue;
                };
                let Value::Int(port) = master[1] else {
                    continue;
                };
                return self.nodes.iter().position(|n| i64::from(n.port) == port);
            }
        }
        None
    }

    pub fn owner(&self, slot: u16) -> usize {
        self.owner_seen_by(0, slot).expect("the slot is served")
    }

    /// Another master than `m` (a node serving slots).
    pub fn other_master(&self, m: usize, masters: usize) -> usize {
        (0..masters).find(|&i| i != m).unwrap()
    }

    /// Starts moving `slot` from `src` to `dst` (`SETSLOT IMPORTING` on the target, `MIGRATING`
    /// on the source).
    pub fn begin_move(&self, slot: u16, src: usize, dst: usize) {
        let set = |n: usize, state: &str, id: &str| {
            query(
                &self.nodes[n],
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id),
            )
        };
        set(dst, "IMPORTING", &self.ids[src]);
        set(src, "MIGRATING", &self.ids[dst]);
    }

    /// `MIGRATE`s `keys` from `src` to `dst`.
    pub fn migrate(&self, src: usize, dst: usize, keys: &[&str]) {
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1")
            .arg(self.nodes[dst].port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS");
        for k in keys {
            cmd.arg(*k);
        }
        query(&self.nodes[src], &cmd);
    }

    /// Ends the move: `SETSLOT … NODE dst` on the target, the source, then every other node.
    pub fn finish_move(&self, slot: u16, src: usize, dst: usize) {
        let mut order = vec![dst, src];
        order.extend((0..self.nodes.len()).filter(|i| *i != src && *i != dst));
        for n in order {
            let info = text(query(&self.nodes[n], redis::cmd("INFO").arg("replication")));
            if field(&info, "role").as_deref() != Some("master") {
                continue;
            }
            query(
                &self.nodes[n],
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&self.ids[dst]),
            );
        }
    }

    /// Moves `slot` with `keys` in it from `src` to `dst`.
    pub fn move_slot(&self, slot: u16, src: usize, dst: usize, keys: &[&str]) {
        self.begin_move(slot, src, dst);
        if !keys.is_empty() {
            self.migrate(src, dst, keys);
        }
        self.finish_move(slot, src, dst);
    }

    /// `kill -9` of master `m`, then its replica `r` takes over (`CLUSTER FAILOVER TAKEOVER`):
    /// returns once every live node sees `r` serve `slot`.
    pub fn kill_and_fail_over(&mut self, m: usize, r: usize, slot: u16) {
        self.nodes[m].kill();
        query(
            &self.nodes[r],
            redis::cmd("CLUSTER").arg("FAILOVER").arg("TAKEOVER"),
        );
        let live: Vec<usize> = (0..self.nodes.len()).filter(|&i| i != m).collect();
        until(SETTLE, "every live node sees the promoted replica", || {
            live.iter().all(|&i| self.owner_seen_by(i, slot) == Some(r))
        });
    }

    /// The waiters of `name` on node `n` (0 if the node does not hold the key).
    pub fn waiters(&self, n: usize, name: &str) -> u64 {
        let reply: redis::RedisResult<Value> = redis::cmd("LOCK.INFO")
            .arg(name)
            .query(&mut self.nodes[n].conn());
        match reply {
            Ok(Value::Array(f)) => f
                .chunks(2)
                .find(|kv| kv[0] == Value::BulkString(b"waiters".to_vec()))
                .map_or(0, |kv| {
                    redis::from_redis_value::<u64>(kv[1].clone()).unwrap()
                }),
            Ok(Value::Map(f)) => f
                .iter()
                .find(|(k, _)| *k == Value::BulkString(b"waiters".to_vec()))
                .map_or(0, |(_, v)| {
                    redis::from_redis_value::<u64>(v.clone()).unwrap()
                }),
            _ => 0,
        }
    }

    /// The observers blocked on node `n` (`redislock_observers` of `INFO redislock`).
    pub fn observers(&self, n: usize) -> i64 {
        let info = text(query(&self.nodes[n], redis::cmd("INFO").arg("redislock")));
        field(&info, "redislock_observers")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}
