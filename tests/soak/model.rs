//! What the clients were told, per key: the holds (kind, token, fence, lease, bound
//! connection), the queue of waiters, the gates and the data keys written through guards.
//! The grant rules are the SPEC's, written out again here (not the module's code), so that the
//! soak checks the module against them.
//!
//! Times are the server's clock in Unix ms, which is this machine's: a time the server fixed
//! while a command ran is only known to lie between the moment the command was sent and the
//! moment its reply arrived, so leases and deadlines are spans.

use std::collections::{BTreeMap, VecDeque};

pub type Ms = i64;

/// A server time known to lie in `lo..=hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub lo: Ms,
    pub hi: Ms,
}

impl Span {
    pub fn new(lo: Ms, hi: Ms) -> Span {
        Span { lo, hi }
    }

    pub fn plus(self, ms: Ms) -> Span {
        Span::new(self.lo + ms, self.hi + ms)
    }

    /// Narrows to what an observation allows; false if nothing is left (the observation
    /// contradicts what was granted).
    pub fn narrow(&mut self, lo: Ms, hi: Ms) -> bool {
        let (l, h) = (self.lo.max(lo), self.hi.min(hi));
        if l > h {
            return false;
        }
        *self = Span::new(l, h);
        true
    }
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    Exclusive,
    Shared,
    Place(u32),
}

#[derive(Clone, Debug)]
pub struct Hold {
    pub token: Vec<u8>,
    pub fence: i64,
    pub want: Want,
    /// When the lease ends (the hold is gone once the server's clock is past it).
    pub lease: Span,
    /// `CLIENT ID` of the connection an `EPHEMERAL` hold is bound to; 0 when unbound.
    pub client: i64,
    /// Its public `DATA`, if any.
    pub data: Option<Vec<u8>>,
}

#[derive(Clone, Debug)]
pub struct Waiter {
    /// The soak's client slot that waits (its connection is blocked).
    pub slot: usize,
    pub client: i64,
    /// Empty for `*`: the server generates the token when it grants.
    pub token: Vec<u8>,
    pub want: Want,
    pub ttl: Ms,
    pub ephemeral: bool,
    /// When its `BLOCK` timeout passes.
    pub deadline: Span,
    pub data: Option<Vec<u8>>,
    /// A `LOCK.ACQUIREALL`'s keys in the order named (it waits in each one's queue); empty for
    /// a `LOCK.ACQUIRE`.
    pub keys: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Lock {
    pub holds: Vec<Hold>,
    pub queue: VecDeque<Waiter>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occupancy {
    Free,
    Exclusive,
    Shared,
    Semaphore { limit: u32, holders: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Grant,
    Regrant,
    Busy,
    /// The key's kind does not take the request: the semaphore's limit, or `None` for a
    /// read/write key.
    Mismatch(Option<u32>),
    OtherMode,
}

impl Lock {
    pub fn occupancy(&self) -> Occupancy {
        match self.holds.first().map(|h| h.want) {
            None => Occupancy::Free,
            Some(Want::Exclusive) => Occupancy::Exclusive,
            Some(Want::Shared) => Occupancy::Shared,
            Some(Want::Place(limit)) => Occupancy::Semaphore {
                limit,
                holders: self.holds.len(),
            },
        }
    }

    pub fn hold(&self, token: &[u8]) -> Option<&Hold> {
        self.holds.iter().find(|h| h.token == token)
    }

    pub fn hold_mut(&mut self, token: &[u8]) -> Option<&mut Hold> {
        self.holds.iter_mut().find(|h| h.token == token)
    }

    pub fn remove_hold(&mut self, token: &[u8]) -> Option<Hold> {
        let i = self.holds.iter().position(|h| h.token == token)?;
        Some(self.holds.remove(i))
    }

    /// SPEC "Kinds of lock": the answer to `want` by `token` (`None`: a generated token,
    /// which holds nothing), with `queued` telling whether a newcomer finds waiters ahead.
    pub fn decide(&self, want: Want, token: Option<&[u8]>, queued: bool) -> Decision {
        let holding = token.and_then(|t| self.hold(t)).map(|h| h.want);
        let occupancy = self.occupancy();
        let kind_fits = match (occupancy, want) {
            (Occupancy::Free, _) => true,
            (Occupancy::Exclusive | Occupancy::Shared, Want::Exclusive | Want::Shared) => true,
            (Occupancy::Semaphore { limit, .. }, Want::Place(asked)) => limit == asked,
            _ => false,
        };
        if !kind_fits {
            return Decision::Mismatch(match occupancy {
                Occupancy::Semaphore { limit, .. } => Some(limit),
                _ => None,
            });
        }
        match holding {
            Some(held) if held == want => return Decision::Regrant,
            Some(_) => return Decision::OtherMode,
            None => {}
        }
        let room = match (occupancy, want) {
            (Occupancy::Free, _) | (Occupancy::Shared, Want::Shared) => true,
            (Occupancy::Semaphore { limit, holders }, _) => holders < limit as usize,
            _ => false,
        };
        // Newcomers never overtake the queue.
        if room && !queued {
            Decision::Grant
        } else {
            Decision::Busy
        }
    }

    /// What `LOCK.OBSERVE` answers: the fence and data of the holder with the highest fence,
    /// or `(0, None)` when free.
    pub fn top(&self) -> (i64, Option<Vec<u8>>) {
        self.holds
            .iter()
            .max_by_key(|h| h.fence)
            .map_or((0, None), |h| (h.fence, h.data.clone()))
    }

    /// The latest lease, which is the key's TTL.
    pub fn latest(&self) -> Option<Span> {
        let lo = self.holds.iter().map(|h| h.lease.lo).max()?;
        let hi = self.holds.iter().map(|h| h.lease.hi).max()?;
        Some(Span::new(lo, hi))
    }
}

/// The error text of a refused request (SPEC "Errors", the module's wording).
pub fn refusal_text(d: Decision) -> String {
    match d {
        Decision::Mismatch(None) => {
            "ERR the key is a read/write lock (exclusive or SHARED holds), \
             not a semaphore: LIMIT does not apply"
                .to_string()
        }
        Decision::Mismatch(Some(limit)) => {
            format!("ERR the key is a semaphore with LIMIT {limit}: acquire it with LIMIT {limit}")
        }
        Decision::OtherMode => {
            "ERR this token already holds the key in another mode: release it first".to_string()
        }
        other => format!("(no error for {other:?})"),
    }
}

/// Counters for the summary line.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub commands: u64,
    pub operations: u64,
    pub grants: u64,
    pub regrants: u64,
    pub refused: u64,
    pub waits: u64,
    pub handoffs: u64,
    pub wait_timeouts: u64,
    pub lease_ends: u64,
    pub ephemeral_releases: u64,
    pub guarded_writes: u64,
    pub stale_fences: u64,
    pub restarts: u64,
    /// Cluster: slot moves, the locks they moved and the waiters sent to retry.
    pub moves: u64,
    pub moved_locks: u64,
    pub moved_waiters: u64,
    pub checks: u64,
    /// Grants and handoffs by kind, and operations by type: what a run covered.
    pub kinds: BTreeMap<&'static str, u64>,
    pub ops: BTreeMap<String, u64>,
    /// The multi-key commands and the observations, by outcome.
    pub more: BTreeMap<&'static str, u64>,
    /// Time spent in operations, and waiting out leases and deadlines near a command.
    pub operation_ms: i64,
    pub waited_ms: i64,
}

impl Tally {
    /// A grant or handoff of `want`, bound to a connection or not, with a generated token or not.
    pub fn granted(&mut self, want: Want, ephemeral: bool, token: &[u8]) {
        let kind = match want {
            Want::Exclusive => "exclusive",
            Want::Shared => "shared",
            Want::Place(_) => "semaphore",
        };
        *self.kinds.entry(kind).or_default() += 1;
        if ephemeral {
            *self.kinds.entry("ephemeral").or_default() += 1;
        }
        if is_generated(token) {
            *self.kinds.entry("generated-token").or_default() += 1;
        }
    }

    pub fn count(&mut self, what: &'static str) {
        *self.more.entry(what).or_default() += 1;
    }

    /// `name=count,...` of a tally map.
    pub fn list<K: std::fmt::Display>(map: &BTreeMap<K, u64>) -> String {
        let items: Vec<String> = map.iter().map(|(k, n)| format!("{k}:{n}")).collect();
        items.join(",")
    }
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub locks: BTreeMap<String, Lock>,
    pub gates: BTreeMap<String, i64>,
    pub counters: BTreeMap<String, i64>,
    pub values: BTreeMap<String, Vec<u8>>,
    /// Per lock name, the highest fence granted over the whole run, restarts and failovers
    /// included; and a few earlier ones, for stale `LOCK.FENCE` calls.
    pub highest: BTreeMap<String, i64>,
    pub history: BTreeMap<String, Vec<i64>>,
    pub tally: Tally,
    /// The `LOCK.OBSERVE … BLOCK` calls not answered yet.
    pub observers: Vec<super::observe::Observer>,
}

impl Model {
    pub fn lock(&mut self, key: &str) -> &mut Lock {
        self.locks.entry(key.to_string()).or_default()
    }

    pub fn peek(&self, key: &str) -> Lock {
        self.locks.get(key).cloned().unwrap_or_default()
    }

    /// A new grant of `key`: its fence must exceed every fence granted for the name before
    /// (SPEC "Fencing tokens").
    pub fn new_fence(&mut self, key: &str, fence: i64) -> Result<(), String> {
        let before = self.highest.get(key).copied().unwrap_or(0);
        if fence <= before {
            return Err(format!(
                "fence {fence} granted for {key} is not above the earlier fence {before}"
            ));
        }
        self.highest.insert(key.to_string(), fence);
        let h = self.history.entry(key.to_string()).or_default();
        h.push(fence);
        if h.len() > 16 {
            h.remove(0);
        }
        Ok(())
    }

    /// A restart, `DEBUG RELOAD` or a failover leaves every hold with its lease only.
    pub fn unbind_all(&mut self) {
        for lock in self.locks.values_mut() {
            for h in &mut lock.holds {
                h.client = 0;
            }
        }
    }
}

/// A token the server generated for `*`: 32 lowercase hex characters.
pub fn is_generated(token: &[u8]) -> bool {
    token.len() == 32 && token.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A token as the failure messages show it.
pub fn show(token: &[u8]) -> String {
    if token.len() > 24 {
        format!(
            "<{} bytes {}…>",
            token.len(),
            String::from_utf8_lossy(&token[..8])
        )
    } else {
        format!("{:?}", String::from_utf8_lossy(token))
    }
}
