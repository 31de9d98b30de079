//! Redis Cluster (README "Redis Cluster"): the `LOCK.*` commands on a real cluster of 3 masters
//! and 3 replicas on loopback, all loading the module.
//!
//! - routing: every command is routed by its key; a node that does not own the slot answers
//!   `MOVED`, and following the redirect works (by hand here: plain connections, no cluster
//!   client);
//! - `BLOCK` waits on the owning node;
//! - `CLUSTER FAILOVER`: the promoted replica keeps the held locks and grants larger fences;
//! - resharding: `MIGRATE` moves a held lock with its token, fence and TTL; waiters blocked on
//!   the source while their key moves away are answered and never make a second holder.
//!
//! Each test builds its own cluster (about 2 s); `Cluster` owns the `Server`s, so every node is
//! stopped when a test fails.

use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use redis::{Connection, RedisError, Value};

/// Bound for cluster state changes (creation, failover, slot moves) to settle.
const SETTLE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Cluster harness
// ---------------------------------------------------------------------------------------------

/// Hash slot of a key, as Redis Cluster computes it (CRC16/XMODEM of the key or its `{tag}`).
pub(crate) fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let mut hashed = bytes;
    if let Some(open) = bytes.iter().position(|&b| b == b'{') {
        if let Some(len) = bytes[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                hashed = &bytes[open + 1..open + 1 + len];
            }
        }
    }
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub(crate) struct NodeLine {
    id: String,
    flags: String,
    /// The master's id for a replica, `-` for a master.
    master: String,
    /// Slot ranges served (inclusive), without the `[slot->-id]` migration markers.
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    pub(crate) fn is_master(&self) -> bool {
        self.flags.split(',').any(|f| f == "master")
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => {
                        let a = s.parse().unwrap();
                        (a, a)
                    }
                })
                .collect();
            NodeLine {
                id: f[0].to_string(),
                flags: f[2].to_string(),
                master: f[3].to_string(),
                slots,
            }
        })
        .collect()
}

/// A connection to 127.0.0.1:`port` with the harness's timeouts.
pub(crate) fn conn_to(port: u16) -> Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5) * time_scale())
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    con.set_read_timeout(Some(Duration::from_secs(15) * time_scale()))
        .unwrap();
    con.set_write_timeout(Some(Duration::from_secs(15) * time_scale()))
        .unwrap();
    con
}

pub(crate) fn text(v: &Value) -> String {
    String::from_utf8_lossy(&as_bytes(v)).into_owned()
}

/// A redirect: `(kind, slot, port)` (`"MOVED"` or `"ASK"`).
type Hop = (String, u16, u16);

/// What must agree between nodes' views of one node: master?, its master's id, its slots.
type NodeSummary = (bool, String, Vec<(u16, u16)>);

/// A redirect reply: `(kind, slot, port)` for `MOVED slot 127.0.0.1:port` / `ASK …`.
pub(crate) fn redirect(e: &RedisError) -> Option<Hop> {
    let code = e.code()?;
    if code != "MOVED" && code != "ASK" {
        return None;
    }
    let detail = e.detail()?;
    let (slot, addr) = detail.split_once(' ')?;
    let (host, port) = addr.rsplit_once(':')?;
    assert_eq!(
        host, "127.0.0.1",
        "redirect to an unexpected host: {code} {detail}"
    );
    Some((code.to_string(), slot.parse().ok()?, port.parse().ok()?))
}

/// Runs `cmd` to completion (output captured), killing it if it takes longer than `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run it (set REDIS_CLI?): {e}"))?;
    // Drain the pipes on threads, so a chatty child cannot block on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => break status,
            None if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("still running after {limit:?}; killed"));
            }
        }
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// A cluster of `masters` masters with `replicas` replicas each, every node loading the module.
pub(crate) struct Cluster {
    pub(crate) nodes: Vec<Server>,
    pub(crate) ids: Vec<String>,
}

impl Cluster {
    pub(crate) fn start(masters: usize, replicas: usize) -> Cluster {
        let total = masters * (1 + replicas);
        let nodes: Vec<Server> = (0..total)
            .map(|_| {
                Server::builder()
                    .cluster_enabled()
                    .set("cluster-node-timeout", "5000")
                    .start()
            })
            .collect();
        let ids = nodes
            .iter()
            .map(|n| text(&ok(&mut n.conn(), &rcmd!("CLUSTER", "MYID"))))
            .collect();
        let cluster = Cluster { nodes, ids };
        let cli = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string());
        let mut cmd = Command::new(&cli);
        cmd.arg("--cluster").arg("create");
        for n in &cluster.nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port()));
        }
        cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        let out = output_within(cmd, SETTLE * time_scale())
            .unwrap_or_else(|e| panic!("{cli} --cluster create: {e}"));
        assert!(
            out.status.success(),
            "{cli} --cluster create failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_stable();
        // Replicas have synced with their masters.
        for (i, n) in cluster.nodes.iter().enumerate() {
            if !cluster.view(i)[i].is_master() {
                n.wait_info("replication", "master_link_status", "up");
            }
        }
        cluster
    }

    /// Node `i`'s `CLUSTER NODES`, in the order of `self.nodes`.
    pub(crate) fn view(&self, i: usize) -> Vec<NodeLine> {
        self.try_view(i)
            .unwrap_or_else(|raw| panic!("node {i} does not know every node:\n{raw}"))
    }

    /// `view`, or the raw text if node `i` does not know every node yet.
    fn try_view(&self, i: usize) -> Result<Vec<NodeLine>, String> {
        let raw = text(&ok(&mut self.nodes[i].conn(), &rcmd!("CLUSTER", "NODES")));
        let lines = parse_nodes(&raw);
        self.ids
            .iter()
            .map(|id| lines.iter().find(|l| &l.id == id).cloned().ok_or(()))
            .collect::<Result<Vec<_>, ()>>()
            .map_err(|_| raw.clone())
    }

    /// Index of the master serving `slot`, as node `i` sees it.
    fn owner_seen_by(&self, i: usize, slot: u16) -> Option<usize> {
        self.view(i)
            .iter()
            .position(|l| l.is_master() && l.serves(slot))
    }

    /// Index of the master serving `slot` (all nodes agree once `wait_stable` returned).
    pub(crate) fn owner(&self, slot: u16) -> usize {
        self.owner_seen_by(0, slot)
            .unwrap_or_else(|| panic!("nobody serves slot {slot}"))
    }

    pub(crate) fn masters(&self) -> Vec<usize> {
        self.view(0)
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_master() && !l.slots.is_empty())
            .map(|(i, _)| i)
            .collect()
    }

    /// Replicas of master `m`.
    pub(crate) fn replicas_of(&self, m: usize) -> Vec<usize> {
        self.view(m)
            .iter()
            .enumerate()
            .filter(|(_, l)| l.master == self.ids[m])
            .map(|(i, _)| i)
            .collect()
    }

    fn cluster_state_ok(&self, i: usize) -> bool {
        let info = text(&ok(&mut self.nodes[i].conn(), &rcmd!("CLUSTER", "INFO")));
        field(&info, "cluster_state").as_deref() == Some("ok")
    }

    /// Waits until every node says `cluster_state:ok` and all nodes agree on who serves every
    /// slot and who replicates whom.
    pub(crate) fn wait_stable(&self) {
        let deadline = Instant::now() + SETTLE * time_scale();
        loop {
            let all_ok = (0..self.nodes.len()).all(|i| self.cluster_state_ok(i));
            let views: Vec<Option<Vec<NodeSummary>>> = (0..self.nodes.len())
                .map(|i| {
                    self.try_view(i).ok().map(|v| {
                        v.into_iter()
                            .map(|l| (l.is_master(), l.master, l.slots))
                            .collect()
                    })
                })
                .collect();
            let agree = views.iter().all(Option::is_some) && views.windows(2).all(|w| w[0] == w[1]);
            if all_ok && agree {
                return;
            }
            if Instant::now() > deadline {
                let states: Vec<bool> = (0..self.nodes.len())
                    .map(|i| self.cluster_state_ok(i))
                    .collect();
                panic!("cluster not stable after {SETTLE:?}: state ok per node {states:?}, views agree: {agree}\n{views:#?}");
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Plain connections to the nodes, following `MOVED` and `ASK` redirects by hand.
pub(crate) struct Router {
    cons: HashMap<u16, Connection>,
}

impl Router {
    pub(crate) fn new() -> Router {
        Router {
            cons: HashMap::new(),
        }
    }

    pub(crate) fn con(&mut self, port: u16) -> &mut Connection {
        self.cons.entry(port).or_insert_with(|| conn_to(port))
    }

    /// Sends `cmd` to `first` and follows up to 5 redirects. Returns the reply (errors other
    /// than redirects as `Err`) and the redirects taken.
    pub(crate) fn send(
        &mut self,
        first: u16,
        cmd: &redis::Cmd,
    ) -> (Result<Value, RedisError>, Vec<Hop>) {
        let mut port = first;
        let mut asking = false;
        let mut hops = Vec::new();
        for _ in 0..6 {
            let con = self.con(port);
            if asking {
                assert_eq!(ok(con, &rcmd!("ASKING")), Value::Okay);
            }
            match cmd.query::<Value>(con) {
                Err(e) => match redirect(&e) {
                    Some(hop) => {
                        asking = hop.0 == "ASK";
                        port = hop.2;
                        hops.push(hop);
                    }
                    None => return (Err(e), hops),
                },
                Ok(v) => return (Ok(v), hops),
            }
        }
        panic!("{}: too many redirects {hops:?}", describe(cmd));
    }

    /// `send` that must succeed.
    pub(crate) fn ok(&mut self, first: u16, cmd: &redis::Cmd) -> Value {
        let (r, hops) = self.send(first, cmd);
        r.unwrap_or_else(|e| panic!("{} failed after {hops:?}: {e}", describe(cmd)))
    }
}

/// The `MOVED` answer of `port` to `cmd`: `(slot, port)`.
#[track_caller]
fn moved(port: u16, cmd: &redis::Cmd) -> (u16, u16) {
    let mut con = conn_to(port);
    match cmd.query::<Value>(&mut con) {
        Ok(v) => panic!(
            "{} on 127.0.0.1:{port} should answer MOVED, answered {v:?}",
            describe(cmd)
        ),
        Err(e) => match redirect(&e) {
            Some((kind, slot, to)) if kind == "MOVED" => (slot, to),
            _ => panic!(
                "{} on 127.0.0.1:{port} should answer MOVED, answered {}",
                describe(cmd),
                err_text(&e)
            ),
        },
    }
}

/// One key `{prefix}N` per master with slots: `(master index, key)`.
pub(crate) fn key_per_master(cluster: &Cluster, prefix: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for m in cluster.masters() {
        let key = (0..)
            .map(|n| format!("{prefix}{n}"))
            .find(|k| cluster.owner(key_slot(k)) == m)
            .unwrap();
        out.push((m, key));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn lock_commands_are_routed_by_key_and_block_on_the_owner() {
    let c = Cluster::start(3, 1);
    let masters = c.masters();
    assert_eq!(masters.len(), 3, "3 masters with slots");
    for &m in &masters {
        assert_eq!(c.replicas_of(m).len(), 1, "one replica per master");
    }

    // Our slot computation is the cluster's.
    let mut keys: Vec<String> = key_per_master(&c, "lock:")
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    keys.extend([
        "{order:42}:payment".to_string(),
        "{order:42}:shipping".to_string(),
    ]);
    for k in &keys {
        let s = as_int(&ok(&mut c.nodes[0].conn(), &rcmd!("CLUSTER", "KEYSLOT", k)));
        assert_eq!(s, i64::from(key_slot(k)), "CLUSTER KEYSLOT {k}");
    }
    assert_eq!(
        key_slot(&keys[3]),
        key_slot(&keys[4]),
        "hash tags share a slot"
    );

    let mut router = Router::new();
    for (n, key) in keys.iter().enumerate() {
        let slot = key_slot(key);
        let owner = c.owner(slot);
        let op = c.nodes[owner].port();
        let replica = c.replicas_of(owner)[0];
        let token = format!("tok-{n}");
        let cmds = [
            rcmd!("LOCK.ACQUIRE", key, &token, "PX", 30_000),
            rcmd!("LOCK.ACQUIRE", key, &token, "PX", 30_000, "BLOCK", 5_000),
            rcmd!("LOCK.EXTEND", key, &token, "PX", 30_000),
            rcmd!("LOCK.INFO", key),
            rcmd!("LOCK.RELEASE", key, &token),
            rcmd!("LOCK.OBSERVE", key),
            rcmd!("LOCK.OBSERVE", key, "AFTER", 0, "BLOCK", 5_000),
            rcmd!(
                "LOCK.ACQUIRE",
                key,
                &token,
                "PX",
                30_000,
                "SHARED",
                "BLOCK",
                5_000
            ),
            rcmd!(
                "LOCK.ACQUIRE",
                key,
                &token,
                "PX",
                30_000,
                "LIMIT",
                2,
                "BLOCK",
                5_000
            ),
        ];
        // Every other node, replicas included (no READONLY), redirects to the owner, at once.
        for other in (0..c.nodes.len()).filter(|&i| i != owner) {
            for cmd in &cmds {
                let t = Instant::now();
                assert_eq!(
                    moved(c.nodes[other].port(), cmd),
                    (slot, op),
                    "{} on node {other}",
                    describe(cmd)
                );
                assert!(t.elapsed() < Duration::from_secs(1), "MOVED must not block");
            }
        }

        // Following the redirect from a wrong master grants on the owner.
        let wrong = *masters.iter().find(|&&m| m != owner).unwrap();
        let (r, hops) = router.send(c.nodes[wrong].port(), &cmds[0]);
        assert_eq!(hops, vec![("MOVED".to_string(), slot, op)]);
        let (tok, fence) = parse_grant(&r.unwrap()).expect("granted on the owner");
        assert_eq!(tok, token.as_bytes());
        // Idempotent re-grant through the redirect, then the other commands.
        let again = parse_grant(&router.ok(c.nodes[wrong].port(), &cmds[0])).unwrap();
        assert_eq!(again, (tok.clone(), fence));
        assert_eq!(
            as_int(&router.ok(c.nodes[replica].port(), &cmds[2])),
            1,
            "LOCK.EXTEND via the replica's redirect"
        );
        let mut oc = c.nodes[owner].conn();
        let i = info_some(&mut oc, key);
        assert_eq!((i.token.clone(), i.fence), (tok.clone(), fence));
        assert_eq!(
            as_int(&ok(&mut oc, &rcmd!("CLUSTER", "COUNTKEYSINSLOT", slot))),
            if n == 4 { 2 } else { 1 }
        );
        // On the owner's replica, LOCK.INFO (a read-only command) answers after READONLY.
        // WAIT on the connection that did the writes: on a fresh one it waits for nothing (its
        // write offset is 0), and Valkey 8.1 replicas then lag often enough to fail the check.
        wait_replicas(router.con(op), 1);
        let mut rc = c.nodes[replica].conn();
        assert_eq!(ok(&mut rc, &rcmd!("READONLY")), Value::Okay);
        let ri = info_some(&mut rc, key);
        assert_eq!((ri.token, ri.fence), (tok.clone(), fence));
        let seen = ok(&mut rc, &rcmd!("LOCK.OBSERVE", key));
        assert_eq!(seen, Value::Array(vec![Value::Int(fence), Value::Nil]));
        // Writes on the replica still redirect, even in READONLY mode.
        let e = err(&mut rc, &cmds[0]);
        assert!(e.starts_with(&format!("MOVED {slot} ")), "{e}");
        // Nobody else holds the key.
        for other in (0..c.nodes.len()).filter(|&i| i != owner && i != replica) {
            let mut con = c.nodes[other].conn();
            assert_eq!(
                as_int(&ok(&mut con, &rcmd!("CLUSTER", "COUNTKEYSINSLOT", slot))),
                0,
                "node {other} must not hold {key}"
            );
        }
    }

    // Hash-tagged locks can be taken together in one transaction on their node.
    let tagged = &keys[3..];
    let owner = c.owner(key_slot(&tagged[0]));
    let mut oc = c.nodes[owner].conn();
    for (n, k) in tagged.iter().enumerate() {
        assert_eq!(release(&mut oc, k, format!("tok-{}", n + 3).as_bytes()), 1);
    }
    ok(&mut oc, &rcmd!("MULTI"));
    for k in tagged {
        ok(&mut oc, &rcmd!("LOCK.ACQUIRE", k, "tx", "PX", 30_000));
    }
    match ok(&mut oc, &rcmd!("EXEC")) {
        Value::Array(items) => {
            assert_eq!(items.len(), 2);
            for it in &items {
                assert!(parse_grant(it).is_some(), "granted in MULTI: {items:?}");
            }
        }
        other => panic!("EXEC answered {other:?}"),
    }
    // Releasing through redirects works for every key.
    for (n, k) in keys.iter().enumerate() {
        let token = if n >= 3 {
            "tx".to_string()
        } else {
            format!("tok-{n}")
        };
        let wrong = *masters
            .iter()
            .find(|&&m| m != c.owner(key_slot(k)))
            .unwrap();
        assert_eq!(
            as_int(&router.ok(c.nodes[wrong].port(), &rcmd!("LOCK.RELEASE", k, &token))),
            1,
            "release {k}"
        );
        assert_eq!(
            router.ok(c.nodes[wrong].port(), &rcmd!("LOCK.INFO", k)),
            Value::Nil
        );
    }

    // BLOCK: a waiter that reached the owner through a redirect is granted when the holder
    // releases.
    let key = &keys[1];
    let owner = c.owner(key_slot(key));
    let wrong = *masters.iter().find(|&&m| m != owner).unwrap();
    let mut oc = c.nodes[owner].conn();
    let (_, f_holder) = grant(&mut oc, key, b"holder", 30_000);
    let wrong_port = c.nodes[wrong].port();
    let key2 = key.clone();
    let waiter = thread::spawn(move || {
        let mut router = Router::new();
        let t = Instant::now();
        let (r, hops) = router.send(
            wrong_port,
            &rcmd!(
                "LOCK.ACQUIRE",
                &key2,
                "waiter",
                "PX",
                30_000,
                "BLOCK",
                10_000
            ),
        );
        (r.map_err(|e| err_text(&e)), hops, t.elapsed())
    });
    wait_waiters(&mut oc, key, 1);
    assert!(!waiter.is_finished(), "the waiter must be blocked");
    assert_eq!(release(&mut oc, key, b"holder"), 1);
    let (r, hops, took) = waiter.join().unwrap();
    assert_eq!(hops.len(), 1, "one MOVED: {hops:?}");
    let (tok, f_waiter) = parse_grant(&r.unwrap()).expect("waiter granted");
    assert_eq!(tok, b"waiter");
    assert!(f_waiter > f_holder, "{f_waiter} > {f_holder}");
    assert!(took < Duration::from_secs(10), "granted, not timed out");
    let i = info_some(&mut oc, key);
    assert_eq!(
        (i.token, i.fence, i.waiters),
        (b"waiter".to_vec(), f_waiter, 0)
    );

    // Semaphores and shared holds are routed the same way, and each holder reaches the
    // owner's replica exactly.
    let mut router = Router::new();
    for (n, (owner, key)) in key_per_master(&c, "sem:").into_iter().enumerate() {
        let wrong = *masters.iter().find(|&&m| m != owner).unwrap();
        let wp = c.nodes[wrong].port();
        let mut fences = Vec::new();
        for t in ["a", "b"] {
            let cmd = rcmd!("LOCK.ACQUIRE", &key, t, "PX", 30_000, "LIMIT", 2);
            fences.push(parse_grant(&router.ok(wp, &cmd)).expect("a place").1);
        }
        let full = rcmd!("LOCK.ACQUIRE", &key, "c", "PX", 30_000, "LIMIT", 2);
        assert_eq!(router.ok(wp, &full), Value::Nil, "no third place");
        let rw = format!("{{{key}}}:rw");
        for t in ["r1", "r2"] {
            let cmd = rcmd!("LOCK.ACQUIRE", &rw, t, "PX", 30_000, "SHARED");
            assert!(parse_grant(&router.ok(wp, &cmd)).is_some());
        }
        let op = c.nodes[owner].port();
        wait_replicas(router.con(op), 1);
        let mut rc = c.nodes[c.replicas_of(owner)[0]].conn();
        ok(&mut rc, &rcmd!("READONLY"));
        for k in [&key, &rw] {
            let on_master = ok(
                &mut c.nodes[owner].conn(),
                &rcmd!("DEBUG", "DIGEST-VALUE", k),
            );
            let on_replica = ok(&mut rc, &rcmd!("DEBUG", "DIGEST-VALUE", k));
            assert_eq!(on_master, on_replica, "{k} on the replica (master {n})");
        }
        assert!(fences[0] < fences[1]);
    }
}

#[test]
fn cluster_failover_keeps_held_locks_and_raises_fences() {
    let c = Cluster::start(3, 1);
    let m = c.masters()[0];
    let r = c.replicas_of(m)[0];
    let slot_keys: Vec<String> = (0..)
        .map(|n| format!("shard:{n}"))
        .filter(|k| c.owner(key_slot(k)) == m)
        .take(8)
        .collect();
    let held = &slot_keys[0];
    let mut mc = c.nodes[m].conn();

    // History on the shard: several grants, releases and re-grants.
    let mut max_before = 0;
    let mut fences = HashMap::new();
    for round in 0..5 {
        for k in &slot_keys[1..] {
            let (_, f) = grant(&mut mc, k, format!("r{round}").as_bytes(), 30_000);
            assert!(f > max_before);
            max_before = f;
            assert_eq!(release(&mut mc, k, format!("r{round}").as_bytes()), 1);
        }
    }
    let (_, f_held) = grant(&mut mc, held, b"holder", 60_000);
    max_before = max_before.max(f_held);
    for k in &slot_keys[1..4] {
        let (_, f) = grant(&mut mc, k, b"kept", 60_000);
        fences.insert(k.clone(), f);
        max_before = max_before.max(f);
    }
    wait_replicas(&mut mc, 1);

    // A waiter blocked on the master when it is demoted is answered (not left hanging).
    let mport = c.nodes[m].port();
    let held2 = held.clone();
    let waiter = thread::spawn(move || {
        let mut con = conn_to(mport);
        let t = Instant::now();
        let r = rcmd!(
            "LOCK.ACQUIRE",
            &held2,
            "waiter",
            "PX",
            30_000,
            "BLOCK",
            8_000
        )
        .query::<Value>(&mut con);
        (r.map_err(|e| err_text(&e)), t.elapsed())
    });
    wait_waiters(&mut mc, held, 1);

    // Manual failover: the replica takes over.
    let mut rcon = c.nodes[r].conn();
    assert_eq!(ok(&mut rcon, &rcmd!("CLUSTER", "FAILOVER")), Value::Okay);
    c.nodes[r].wait_info("replication", "role", "master");
    c.nodes[m].wait_info("replication", "role", "slave");
    c.wait_stable();
    let slot = key_slot(held);
    assert_eq!(c.owner(slot), r, "the replica serves the shard's slots now");
    c.nodes[m].wait_info("replication", "master_link_status", "up");

    let (wr, took) = waiter.join().unwrap();
    eprintln!("waiter on the demoted master answered {wr:?} after {took:?}");
    match &wr {
        Err(e) => assert!(
            [
                "UNBLOCKED force unblock from blocking operation, instance state changed \
                 (master -> replica?)",
                "READONLY You can't write against a read only replica.",
            ]
            .contains(&e.as_str())
                || e.starts_with(&format!("MOVED {} ", key_slot(held))),
            "waiter on the demoted master: {e}"
        ),
        Ok(v) => panic!("waiter on the demoted master must not be granted: {v:?}"),
    }
    assert!(
        took < Duration::from_secs(5),
        "waiter on the demoted master answered after {took:?} ({wr:?})"
    );

    // The old master redirects to the new one.
    assert_eq!(
        moved(mport, &rcmd!("LOCK.ACQUIRE", held, "x", "PX", 1000)),
        (slot, c.nodes[r].port())
    );

    // Held locks keep token and fence; the holder's token still works.
    let mut rcon = c.nodes[r].conn();
    let i = info_some(&mut rcon, held);
    assert_eq!((i.token.as_slice(), i.fence), (&b"holder"[..], f_held));
    assert!(i.ttl > 50_000, "TTL kept: {}", i.ttl);
    for (k, f) in &fences {
        let i = info_some(&mut rcon, k);
        assert_eq!((i.token.as_slice(), i.fence), (&b"kept"[..], *f), "{k}");
    }
    assert_eq!(acquire(&mut rcon, held, b"other", 1000), None);
    assert_eq!(
        grant(&mut rcon, held, b"holder", 60_000),
        (b"holder".to_vec(), f_held),
        "idempotent re-grant on the new master"
    );
    assert_eq!(extend_px(&mut rcon, held, b"holder", 60_000), 1);

    // New grants on the shard exceed everything granted there before, in a higher epoch.
    let mut new_fences = Vec::new();
    for k in &slot_keys[4..] {
        new_fences.push(grant(&mut rcon, k, b"new", 30_000).1);
    }
    assert_eq!(release(&mut rcon, held, b"holder"), 1);
    new_fences.push(grant(&mut rcon, held, b"new", 30_000).1);
    for (k, _) in fences.iter() {
        assert_eq!(release(&mut rcon, k, b"kept"), 1);
        new_fences.push(grant(&mut rcon, k, b"new", 30_000).1);
    }
    for f in &new_fences {
        assert!(
            *f > max_before,
            "fence {f} after failover must exceed {max_before}"
        );
        assert!(
            f >> 51 > max_before >> 51,
            "fence {f} after failover should be in a higher epoch than {max_before}"
        );
    }

    // The demoted master follows the new one.
    wait_replicas(&mut rcon, 1);
    let mut old = c.nodes[m].conn();
    ok(&mut old, &rcmd!("READONLY"));
    let i = info_some(&mut old, held);
    assert_eq!(i.token, b"new");
}

#[test]
fn migrating_a_held_lock_keeps_it_and_source_waiters_never_make_a_second_holder() {
    let c = Cluster::start(3, 1);
    let key = "{mig}held";
    let other_key = "{mig}other";
    let slot = key_slot(key);
    let src = c.owner(slot);
    let dst = *c.masters().iter().find(|&&m| m != src).unwrap();
    let src_replica = c.replicas_of(src)[0];
    let (sp, dp) = (c.nodes[src].port(), c.nodes[dst].port());
    let (src_id, dst_id) = (c.ids[src].clone(), c.ids[dst].clone());
    let mut sc = c.nodes[src].conn();
    let mut dc = c.nodes[dst].conn();
    let mut problems: Vec<String> = Vec::new();

    // The target has granted its own locks before, at the same wall-clock times.
    for (m, k) in key_per_master(&c, "warm:") {
        if m == dst {
            grant(&mut dc, &k, b"w", 30_000);
        }
    }
    // The held lock comes from a server a promotion ahead (its fence is in epoch 1): only the
    // migrated fence itself can lift the target's clock above it, not the wall clock.
    let origin = Server::start();
    promote_times(&origin, 1);
    let (_, f0) = grant(&mut origin.conn(), key, b"holder", 20_000);
    assert_eq!(epoch_of(f0), 1);
    let payload = as_bytes(&ok(&mut origin.conn(), &rcmd!("DUMP", key)));
    assert_eq!(
        ok(&mut sc, &rcmd!("RESTORE", key, 20_000, payload.as_slice())),
        Value::Okay
    );
    let granted_at = Instant::now();
    assert_eq!(info_some(&mut sc, key).fence, f0);

    // Two waiters on the source: one with a timeout, one without.
    let w_timeout = spawn_waiter_on(sp, key, "w-timeout", 10_000, 3_000);
    wait_waiters(&mut sc, key, 1);
    let w_forever = spawn_waiter_on(sp, key, "w-forever", 10_000, 0);
    wait_waiters(&mut sc, key, 2);

    // Resharding, step 1: target imports, source migrates.
    assert_eq!(
        ok(
            &mut dc,
            &rcmd!("CLUSTER", "SETSLOT", slot, "IMPORTING", &src_id)
        ),
        Value::Okay
    );
    assert_eq!(
        ok(
            &mut sc,
            &rcmd!("CLUSTER", "SETSLOT", slot, "MIGRATING", &dst_id)
        ),
        Value::Okay
    );
    // The held lock still answers on the source; a missing key in the slot is sent to the
    // target with ASK, and the target accepts it only after ASKING.
    assert_eq!(info_some(&mut sc, key).token, b"holder");
    let e = err(
        &mut sc,
        &rcmd!("LOCK.ACQUIRE", other_key, "o", "PX", 30_000),
    );
    assert_eq!(e, format!("ASK {slot} 127.0.0.1:{dp}"));
    let e = err(
        &mut dc,
        &rcmd!("LOCK.ACQUIRE", other_key, "o", "PX", 30_000),
    );
    assert_eq!(e, format!("MOVED {slot} 127.0.0.1:{sp}"));
    let mut router = Router::new();
    let (r, hops) = router.send(sp, &rcmd!("LOCK.ACQUIRE", other_key, "o", "PX", 30_000));
    assert_eq!(hops, vec![("ASK".to_string(), slot, dp)]);
    let (_, f_other) = parse_grant(&r.unwrap()).expect("granted on the target via ASK");

    // Step 2: move the key.
    let keys = ok(&mut sc, &rcmd!("CLUSTER", "GETKEYSINSLOT", slot, 100));
    assert_eq!(
        keys,
        Value::Array(vec![Value::BulkString(key.as_bytes().to_vec())])
    );
    let ttl_before = pttl(&mut sc, key);
    assert_eq!(
        ok(
            &mut sc,
            &rcmd!("MIGRATE", "127.0.0.1", dp, "", 0, 5_000, "KEYS", key)
        ),
        Value::Okay
    );
    // MIGRATE deleted the lock on the source; the handoff that follows (from a 0 ms timer) finds
    // the slot migrating away and answers both waiters TRYAGAIN, long before any timeout.
    const TRYAGAIN: &str =
        "TRYAGAIN the lock's slot is moving or moved to another node; retry the command";
    for (name, w) in [("w-timeout", &w_timeout), ("w-forever", &w_forever)] {
        match w.recv_within(Duration::from_millis(2_000)) {
            Some(answer) => {
                eprintln!("{name} on the source answered {:?}", answer.reply);
                match &answer.reply {
                    Err(e) if e == TRYAGAIN => {}
                    Ok(v) => match parse_grant(v) {
                        Some((tok, fence)) => problems.push(format!(
                            "waiter {name} on the source was granted ({}, {fence}) while the \
                             slot was migrating away: two live holders",
                            lossy(&tok)
                        )),
                        None => problems.push(format!(
                            "waiter {name} on the source answered nil, expected {TRYAGAIN}"
                        )),
                    },
                    Err(e) => {
                        problems.push(format!("waiter {name} answered {e}, expected {TRYAGAIN}"))
                    }
                }
            }
            None => problems.push(format!(
                "waiter {name} on the source was not answered within 2 s of MIGRATE: module \
                 waiters are not redirected by Redis; the module must answer them (TRYAGAIN) \
                 when the slot leaves"
            )),
        }
    }
    assert_eq!(stat(&c.nodes[src], "waiters"), 0);
    let src_keys = as_int(&ok(&mut sc, &rcmd!("CLUSTER", "COUNTKEYSINSLOT", slot)));
    if src_keys != 0 {
        let dump = ok(&mut sc, &rcmd!("LOCK.INFO", key));
        problems.push(format!(
            "after MIGRATE the source still holds {src_keys} key(s) in slot {slot}: LOCK.INFO \
             {key} on the source = {dump:?} (a waiter was granted on the source while the slot \
             was migrating away: two live holders)"
        ));
    }
    // The target has the lock as it was (asked directly: ASKING lets it serve the importing
    // slot).
    assert_eq!(ok(&mut dc, &rcmd!("ASKING")), Value::Okay);
    let i = info_some(&mut dc, key);
    assert_eq!((i.token.as_slice(), i.fence), (&b"holder"[..], f0));
    assert_ttl_close(i.ttl, ttl_before, 1_000, "TTL on the target after MIGRATE");
    // The holder extends through the source's ASK.
    let (v, hops) = router.send(sp, &rcmd!("LOCK.EXTEND", key, "holder", "PX", 20_000));
    match (v, hops.as_slice()) {
        (Ok(Value::Int(1)), [(kind, s, p)]) if kind == "ASK" && (*s, *p) == (slot, dp) => {}
        (v, hops) => problems.push(format!(
            "LOCK.EXTEND {key} holder sent to the source after MIGRATE: {v:?} after {hops:?} \
             (expected 1 after an ASK to the target)"
        )),
    }

    // Step 3: assign the slot to the target everywhere (target first, then source, then the
    // other masters).
    let mut order = vec![dst, src];
    order.extend(c.masters().into_iter().filter(|&m| m != src && m != dst));
    for n in order {
        let r = rcmd!("CLUSTER", "SETSLOT", slot, "NODE", &dst_id)
            .query::<Value>(&mut c.nodes[n].conn());
        if let Err(e) = r {
            problems.push(format!(
                "CLUSTER SETSLOT {slot} NODE <target> on node {n} (port {}) failed: {}",
                c.nodes[n].port(),
                err_text(&e)
            ));
        }
    }
    if problems.is_empty() {
        c.wait_stable();
        assert_eq!(c.owner(slot), dst);
    }

    // Nothing of the slot is left on the source or its replica.
    wait_replicas(&mut sc, 1);
    for n in [src, src_replica] {
        let k = as_int(&ok(
            &mut c.nodes[n].conn(),
            &rcmd!("CLUSTER", "COUNTKEYSINSLOT", slot),
        ));
        if k != 0 {
            problems.push(format!("node {n} still holds {k} key(s) of slot {slot}"));
        }
    }
    assert!(
        problems.is_empty(),
        "problems:\n- {}",
        problems.join("\n- ")
    );

    // On the new shard: the lock is held by its holder until it releases; a waiter there gets
    // it with a larger fence, and later grants are larger still.
    let i = info_some(&mut dc, key);
    assert_eq!((i.token.as_slice(), i.fence), (&b"holder"[..], f0));
    let expected_ttl = 20_000 - granted_at.elapsed().as_millis() as i64;
    assert!(
        i.ttl > expected_ttl - 2_000,
        "TTL {} kept (extended)",
        i.ttl
    );
    let waiter = thread::spawn(move || {
        let mut router = Router::new();
        router.send(
            sp,
            &rcmd!(
                "LOCK.ACQUIRE",
                key,
                "w-target",
                "PX",
                10_000,
                "BLOCK",
                5_000
            ),
        )
    });
    wait_waiters(&mut dc, key, 1);
    assert_eq!(release(&mut dc, key, b"holder"), 1);
    let (r, hops) = waiter.join().unwrap();
    assert_eq!(hops, vec![("MOVED".to_string(), slot, dp)]);
    let (_, f1) = parse_grant(&r.unwrap()).expect("waiter on the target granted");
    assert!(
        f1 > f0,
        "grant on the new shard {f1} must exceed the migrated fence {f0}"
    );
    // The target took the slot over with a new config epoch, and its fences follow it.
    assert!(
        epoch_of(f1) > 1,
        "the target's fences follow its config epoch after the move: {f1}"
    );
    assert_eq!(release(&mut dc, key, b"w-target"), 1);
    let (_, f2) = grant(&mut dc, key, b"later", 10_000);
    assert!(f2 > f1);
    assert!(f2 > f_other);
    // The source redirects every command for the key.
    for cmd in [
        rcmd!("LOCK.ACQUIRE", key, "x", "PX", 1_000),
        rcmd!("LOCK.INFO", key),
        rcmd!("LOCK.RELEASE", key, "later"),
    ] {
        assert_eq!(moved(sp, &cmd), (slot, dp));
    }
}
