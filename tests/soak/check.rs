//! The checks: every server up with no crash in its log; each lock as the model has it
//! (kind, holders' tokens, fences and bound connections, waiters, and TTLs within the leases
//! granted); gates and data keys; master and replica with equal `DEBUG DIGEST`.

use redis::{Connection, Value};

use crate::common::*;

use super::model::{Hold, Span, Want};
use super::pick::{counter_of, gate_of, value_of, KEYS};
use super::{Soak, R};

/// One holder as `LOCK.INFO` lists it.
struct Shown {
    token: Vec<u8>,
    fence: i64,
    ttl: i64,
    client: i64,
    data: Option<Vec<u8>>,
}

fn get(pairs: &[(Vec<u8>, Value)], name: &str) -> Option<Value> {
    pairs
        .iter()
        .find(|(k, _)| k == name.as_bytes())
        .map(|(_, v)| v.clone())
}

fn int(pairs: &[(Vec<u8>, Value)], name: &str) -> R<i64> {
    match get(pairs, name) {
        Some(Value::Int(i)) => Ok(i),
        other => Err(format!("LOCK.INFO field {name}: {other:?}")),
    }
}

fn shown(v: &Value) -> R<Shown> {
    let p = field_pairs(v);
    Ok(Shown {
        token: get(&p, "token").map(|t| as_bytes(&t)).unwrap_or_default(),
        fence: int(&p, "fence")?,
        ttl: int(&p, "ttl")?,
        client: int(&p, "client")?,
        data: get(&p, "data")
            .filter(|d| *d != Value::Nil)
            .map(|d| as_bytes(&d)),
    })
}

fn digest(c: &mut Connection) -> Vec<u8> {
    as_bytes(&ok(c, &rcmd!("DEBUG", "DIGEST")))
}

/// The keys not expired on master `m` or replica `r` whose value or expiry differ.
fn live_keys_differ(m: &mut Connection, r: &mut Connection) -> Vec<String> {
    let mut names: Vec<Vec<u8>> = Vec::new();
    for c in [&mut *m, &mut *r] {
        if let Value::Array(keys) = ok(c, &rcmd!("KEYS", "*")) {
            names.extend(keys.iter().map(as_bytes));
        }
    }
    names.sort();
    names.dedup();
    let mut differ = Vec::new();
    for k in names {
        let look = |c: &mut Connection| {
            let v = run(c, &rcmd!("DEBUG", "DIGEST-VALUE", &k)).map_err(|e| err_text(&e));
            let at = run(c, &rcmd!("PEXPIRETIME", &k)).map_err(|e| err_text(&e));
            (v, at)
        };
        let (on_m, on_r) = (look(m), look(r));
        if on_m != on_r {
            differ.push(format!("{}: master {on_m:?}, replica {on_r:?}", lossy(&k)));
        }
    }
    differ
}

impl Soak {
    /// `LOCK.INFO key` and `PTTL key` on the master against the model.
    pub fn check_lock(&mut self, key: &str) -> R {
        self.settle(key)?;
        let t0 = now_ms();
        let v = ok(&mut self.mc, &rcmd!("LOCK.INFO", key));
        let pttl = as_int(&ok(&mut self.mc, &rcmd!("PTTL", key)));
        let t1 = now_ms();
        let lock = self.model.peek(key);
        // A lease that could have ended while the checks ran (a stall) may be gone.
        let certain = |h: &Hold| h.lease.lo >= t1;
        let what = |h: &Hold| format!("{key} holder {}", super::model::show(&h.token));
        let mut shown_holders = Vec::new();
        if v != Value::Nil {
            let p = field_pairs(&v);
            let mode = get(&p, "mode").map(|m| lossy(&as_bytes(&m)));
            let expected = match lock.holds.first().map(|h| h.want) {
                Some(Want::Exclusive) => Some("exclusive"),
                Some(Want::Shared) => Some("shared"),
                Some(Want::Place(_)) => Some("semaphore"),
                None => None,
            };
            if mode.as_deref() != expected {
                return Err(format!(
                    "LOCK.INFO {key}: mode {mode:?}, model {expected:?}: {v:?}"
                ));
            }
            if let Some(Want::Place(limit)) = lock.holds.first().map(|h| h.want) {
                if int(&p, "limit")? != i64::from(limit) {
                    return Err(format!("LOCK.INFO {key}: limit, model {limit}: {v:?}"));
                }
            }
            let waiters = int(&p, "waiters")?;
            if waiters != lock.queue.len() as i64 {
                return Err(format!(
                    "LOCK.INFO {key}: {waiters} waiters, model {} (slots {:?})",
                    lock.queue.len(),
                    lock.queue.iter().map(|w| w.slot).collect::<Vec<_>>()
                ));
            }
            let Some(Value::Array(list)) = get(&p, "holders") else {
                return Err(format!("LOCK.INFO {key}: no holders list: {v:?}"));
            };
            for h in &list {
                shown_holders.push(shown(h)?);
            }
            if expected == Some("exclusive") {
                let top = shown(&v)?;
                let one = shown_holders.first();
                if shown_holders.len() != 1
                    || one.is_some_and(|h| {
                        (&h.token, h.fence, h.client) != (&top.token, top.fence, top.client)
                    })
                {
                    return Err(format!(
                        "LOCK.INFO {key}: top level and holders differ: {v:?}"
                    ));
                }
            }
        } else if pttl != -2 {
            return Err(format!("{key}: LOCK.INFO nil but PTTL {pttl}"));
        }
        for s in &shown_holders {
            let lock = self.model.lock(key);
            let Some(h) = lock.hold_mut(&s.token) else {
                return Err(format!(
                    "LOCK.INFO {key} shows holder {} (fence {}), which the model does not have",
                    super::model::show(&s.token),
                    s.fence
                ));
            };
            let w = what(h);
            if (s.fence, s.client, &s.data) != (h.fence, h.client, &h.data) {
                return Err(format!(
                    "{w}: fence {} client {} data {:?}, model fence {} client {} data {:?}",
                    s.fence, s.client, s.data, h.fence, h.client, h.data
                ));
            }
            // Its lease end, seen from the TTL: [t0 + ttl, t1 + ttl].
            let granted = h.lease;
            if !h.lease.narrow(t0 + s.ttl, t1 + s.ttl) {
                return Err(format!(
                    "{w}: ttl {} ms between {t0} and {t1} puts the lease end beyond the lease \
                     granted, {granted:?}",
                    s.ttl
                ));
            }
        }
        for h in &lock.holds {
            if !shown_holders.iter().any(|s| s.token == h.token) {
                if certain(h) {
                    return Err(format!(
                        "{} (fence {}, lease {:?}) is missing from LOCK.INFO at {t1}: {v:?}",
                        what(h),
                        h.fence,
                        h.lease
                    ));
                }
                self.end_by(key, t1)?;
            }
        }
        // The key's TTL is the latest lease (checked once the holders are known to agree).
        let at = Span::new(t0, t1);
        if v != Value::Nil {
            let top_ttl = int(&field_pairs(&v), "ttl")?;
            self.check_ttl(key, "LOCK.INFO ttl", top_ttl, at)
                .map_err(|e| format!("{e}: {v:?}"))?;
        }
        if pttl != -2 {
            self.check_ttl(key, "PTTL", pttl, at)
                .map_err(|e| format!("{e}: {v:?}"))?;
        }
        Ok(())
    }

    /// A key TTL read in `at` is the latest lease: never beyond it, never short of it.
    fn check_ttl(&self, key: &str, what: &str, ttl: i64, at: Span) -> R {
        let lock = self.model.peek(key);
        let Some(latest) = lock.latest() else {
            return Err(format!("{key}: {what} {ttl} with no holder in the model"));
        };
        if ttl > latest.hi - at.lo || ttl < latest.lo - at.hi - 1 {
            return Err(format!(
                "{key}: {what} {ttl} ms between {} and {}, latest lease granted {latest:?}",
                at.lo, at.hi
            ));
        }
        Ok(())
    }

    /// Gates (`LOCK.INFO` of a gate) and the data keys written through guards.
    pub fn check_gates_and_data(&mut self) -> R {
        for key in KEYS {
            let gate = gate_of(key);
            let v = ok(&mut self.mc, &rcmd!("LOCK.INFO", &gate));
            let got = match &v {
                Value::Nil => None,
                v => {
                    let p = field_pairs(v);
                    Some((get(&p, "mode").map(|m| as_bytes(&m)), int(&p, "fence")?))
                }
            };
            let want = self
                .model
                .gates
                .get(&gate)
                .map(|&g| (Some(b"gate".to_vec()), g));
            if got != want {
                return Err(format!("gate {gate}: {v:?}, model {want:?}"));
            }
            let n = ok(&mut self.mc, &rcmd!("GET", counter_of(key)));
            let want_n = self.model.counters.get(&counter_of(key));
            let got_n = (n != Value::Nil).then(|| as_int(&n));
            if got_n.as_ref() != want_n {
                return Err(format!("{}: {n:?}, model {want_n:?}", counter_of(key)));
            }
            let v = ok(&mut self.mc, &rcmd!("GET", value_of(key)));
            let got_v = (v != Value::Nil).then(|| as_bytes(&v));
            if got_v.as_ref() != self.model.values.get(&value_of(key)) {
                return Err(format!(
                    "{}: {v:?}, model {:?}",
                    value_of(key),
                    self.model.values
                ));
            }
        }
        Ok(())
    }

    /// Both servers run, and neither logged a crash or a caught panic.
    pub fn check_servers(&mut self) -> R {
        for (name, s) in [("master", &self.master), ("replica", &self.replica)] {
            let mut c = s.conn();
            ping(&mut c);
            let crashes = s.crash_lines();
            if !crashes.is_empty() {
                return Err(format!(
                    "the {name} logged a crash:\n{}",
                    crashes.join("\n")
                ));
            }
        }
        Ok(())
    }

    /// Once the replica has caught up with a master that did not change meanwhile, both have
    /// the same data: equal `DEBUG DIGEST` (values and expiries).
    pub fn check_replica(&mut self) -> R {
        self.replica
            .wait_info("replication", "master_link_status", "up");
        let mut rc = self.replica.conn();
        for _ in 0..200 {
            let before = digest(&mut self.mc);
            wait_replica_caught_up(&self.master, &self.replica);
            let replica = digest(&mut rc);
            if digest(&mut self.mc) != before {
                // A lease ended meanwhile: look again.
                continue;
            }
            if replica == before {
                return Ok(());
            }
            let sizes = (dbsize(&mut self.mc), dbsize(&mut rc));
            let differ = live_keys_differ(&mut self.mc, &mut rc);
            return Err(format!(
                "master and replica differ (DBSIZE {sizes:?}; keys not expired that differ:)\n{}",
                differ.join("\n")
            ));
        }
        Err("the master's data kept changing; no quiet moment to compare".into())
    }

    /// Everything: servers, every key, gates, data and the replica.
    pub fn check_all(&mut self) -> R {
        self.check_all_but(false)
    }

    /// Everything, but the comparison with the replica if `not_replica`.
    pub fn check_all_but(&mut self, not_replica: bool) -> R {
        self.model.tally.checks += 1;
        self.check_servers()?;
        self.settle_all()?;
        for key in KEYS {
            self.check_lock(key)?;
        }
        self.check_gates_and_data()?;
        if not_replica {
            return Ok(());
        }
        self.check_replica()
    }
}
