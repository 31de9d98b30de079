//! Multi-key waiters in the model's time: one queues on every one of its keys and is served
//! once it is first in every queue and every key has room, all keys in one step (SPEC
//! "Multi-resource locks"); it leaves every queue at its deadline or when its connection
//! closes, and those behind it are served then.

use crate::common::*;

use super::model::{Decision, Ms, Span, Waiter};
use super::multi::granted;
use super::pick::MULTI_KEYS;
use super::serve::late;
use super::slots::Reply;
use super::{Soak, R};

impl Soak {
    /// The keys whose state a command on `key` depends on: a multi-key waiter ties the tagged
    /// keys together.
    pub fn linked(key: &str) -> Vec<String> {
        match MULTI_KEYS.contains(&key) {
            true => MULTI_KEYS.iter().map(|k| k.to_string()).collect(),
            false => vec![key.to_string()],
        }
    }

    /// The multi-key waiter `w`, first in the queue of `key` where room was freed within
    /// `freed`: if it is first in every one of its queues and every key has room, it must
    /// be granted them all (or have timed out first). True if it left the queues.
    pub fn serve_multi(&mut self, key: &str, w: &Waiter, freed: Span, since: &mut Ms) -> R<bool> {
        let given = (!w.token.is_empty()).then_some(&w.token[..]);
        let locks = self.locks_of(&w.keys);
        let mut decisions = Vec::new();
        for lock in &locks {
            if lock.queue.front().map(|x| x.slot) != Some(w.slot) {
                return Ok(false);
            }
            match lock.decide(w.want, given, false) {
                Decision::Busy => return Ok(false),
                d @ (Decision::Grant | Decision::Regrant) => decisions.push(d),
                d => return Err(format!("a multi-key waiter meets {d:?} on a tagged key")),
            }
        }
        let alive = w.deadline.lo > freed.hi;
        let gone = w.deadline.hi + 4 * late() < freed.lo;
        let reply = self.read(w.slot)?;
        let t_read = now_ms();
        for k in &w.keys {
            self.model.lock(k).queue.retain(|x| x.slot != w.slot);
        }
        let who = format!(
            "multi-key waiter {} (slot {}) on {:?}",
            super::model::show(&w.token),
            w.slot,
            w.keys
        );
        match reply {
            Reply::Nil if alive => {
                return Err(format!(
                    "{who} got nil, but {key} was freed at {freed:?} before its deadline {:?} \
                     and every key had room",
                    w.deadline
                ))
            }
            Reply::Nil => {
                self.note(format!("  {who}: timed out"));
                self.model.tally.wait_timeouts += 1;
                self.model.tally.count("acquireall-timeouts");
                *since = (*since).min(w.deadline.lo);
                for k in w.keys.iter().filter(|k| *k != key) {
                    self.left(k, w.deadline.lo, w.deadline.hi)?;
                }
                return Ok(true);
            }
            _ if gone => {
                return Err(format!(
                    "{who} answered {reply} long after its deadline {:?}",
                    w.deadline
                ))
            }
            _ => {}
        }
        let (t, fences) =
            granted(&reply, &locks, &decisions, given).map_err(|e| format!("{who}: {e}"))?;
        let lease = Span::new(*since, t_read).plus(w.ttl);
        let client = if w.ephemeral { w.client } else { 0 };
        self.grant_all(&w.keys, &t, &fences, w.want, lease, client, &w.data)?;
        self.model.tally.handoffs += 1;
        self.model.tally.count("acquireall-handoffs");
        self.note(format!("  {who}: handed {reply}"));
        for k in w.keys.iter().filter(|k| *k != key) {
            self.serve(k, Span::new(*since, t_read))?;
        }
        Ok(true)
    }

    /// Slot `slot`'s waiter leaves every queue it is in, between `lo` and `hi` (its deadline,
    /// its connection closed); the ones behind it are served.
    pub fn leave(&mut self, slot: usize, lo: Ms, hi: Ms) -> R {
        let keys: Vec<String> = self
            .model
            .locks
            .iter()
            .filter(|(_, l)| l.queue.iter().any(|w| w.slot == slot))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            self.model.lock(k).queue.retain(|w| w.slot != slot);
        }
        for k in &keys {
            self.left(k, lo, hi)?;
        }
        Ok(())
    }
}
