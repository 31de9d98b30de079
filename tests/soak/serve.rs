//! Time in the model: leases that end by themselves, waiters whose `BLOCK` timeout passes, and
//! the handoff of freed room to the waiters, each checked against the replies the waiters get.
//!
//! A hold whose lease ends within `guard()` of a command makes that command's outcome depend on
//! timing, so before touching a key the soak waits until such leases have passed (and such
//! waiters have been answered); what remains is certain.

use std::time::Duration;

use crate::common::*;

use super::model::{Decision, Hold, Lock, Ms, Span};
use super::slots::Reply;
use super::{Soak, R};

/// How close to a lease end or deadline a command may come before the soak waits it out.
pub fn guard() -> Ms {
    50 * i64::from(time_scale())
}

/// How late the server may end a lease or a wait by itself (a timer) for the soak still to
/// require that a waiter with time left is served: SPEC says within a few milliseconds.
pub fn late() -> Ms {
    250 * i64::from(time_scale())
}

impl Soak {
    /// Ends in the model the holds whose lease has certainly ended by now, earliest first,
    /// each followed by the handoff to the key's waiters.
    pub fn advance(&mut self) -> R {
        loop {
            let now = now_ms();
            let due = self
                .model
                .locks
                .iter()
                .flat_map(|(k, l)| l.holds.iter().map(move |h| (h.lease.hi, k.clone(), h)))
                .filter(|(hi, _, _)| *hi < now)
                .min_by_key(|(hi, _, _)| *hi)
                .map(|(_, k, h)| (k, h.token.clone(), h.lease.lo));
            let Some((key, token, lo)) = due else {
                return Ok(());
            };
            // A wait that certainly ended before this lease did goes first: its leaving may
            // have served the others (a holder among them re-granted before its lease ended).
            let before = self
                .model
                .locks
                .iter()
                .flat_map(|(k, l)| l.queue.iter().map(move |w| (k, w)))
                .filter(|(_, w)| w.deadline.hi < lo)
                .min_by_key(|(_, w)| w.deadline.hi)
                .map(|(k, w)| (k.clone(), w.clone()));
            if let Some((key, w)) = before {
                self.time_out(&key, &w)?;
                continue;
            }
            let h = self.model.lock(&key).remove_hold(&token).expect("hold");
            self.model.tally.lease_ends += 1;
            self.note(format!(
                "  lease end {key} {}",
                super::model::show(&h.token)
            ));
            // The server frees it once its clock is past the lease, by a timer or on access.
            let freed = Span::new(h.lease.lo + 1, h.lease.hi + 1 + late());
            self.serve(&key, freed)?;
        }
    }

    /// Waits until nothing about `key` is within `guard()` of changing by itself: holds whose
    /// lease ends that soon have ended (and their room was handed on), waiters whose deadline
    /// comes that soon were answered.
    /// The tagged keys are settled together: a multi-key waiter ties them.
    pub fn settle(&mut self, key: &str) -> R {
        let linked = Soak::linked(key);
        loop {
            self.advance()?;
            let now = now_ms();
            let locks: Vec<(String, Lock)> = linked
                .iter()
                .map(|k| (k.clone(), self.model.peek(k)))
                .collect();
            let holds = locks.iter().flat_map(|(_, l)| l.holds.iter());
            let ending: Vec<Span> = holds
                .filter(|h| h.lease.lo <= now + guard())
                .map(|h| h.lease)
                .collect();
            let near = locks
                .iter()
                .flat_map(|(k, l)| l.queue.iter().map(move |w| (k, w)))
                .filter(|(_, w)| w.deadline.lo <= now + guard())
                .min_by_key(|(_, w)| w.deadline.lo)
                .map(|(k, w)| (k.clone(), w.clone()));
            // A waiter whose deadline certainly comes before every lease ending now is answered
            // first: its leaving may serve the others (and a holder among them, re-granted
            // before its lease ends).
            let first_lease = ending.iter().map(|l| l.lo).min();
            let waiter_first = near
                .as_ref()
                .is_some_and(|(_, w)| first_lease.is_none_or(|lo| w.deadline.hi < lo));
            if let Some(hi) = ending.iter().map(|l| l.hi).max().filter(|_| !waiter_first) {
                sleep_until_wall_ms(hi);
                self.model.tally.waited_ms += now_ms() - now;
                continue;
            }
            let Some((key, w)) = near else {
                // Nothing else can have answered a waiter.
                for (key, lock) in &locks {
                    for w in &lock.queue {
                        if self.reply_ready(w.slot) {
                            let reply = self.read(w.slot)?;
                            return Err(format!(
                                "waiter {} (slot {}) on {key} answered {reply}, though the model \
                             has it waiting (deadline {:?}, {} ms from now) and nothing freed room \
                             for it: {lock:?}",
                                super::model::show(&w.token),
                                w.slot,
                                w.deadline,
                                w.deadline.lo - now
                            ));
                        }
                    }
                }
                return Ok(());
            };
            self.time_out(&key, &w)?;
        }
    }

    /// The wait of `w` on `key` ended at its deadline: nil, since nothing freed room for it
    /// (that would have been served); the waiters behind it may fit now.
    fn time_out(&mut self, key: &str, w: &super::model::Waiter) -> R {
        let reply = self.read(w.slot)?;
        if reply != Reply::Nil {
            return Err(format!(
                "waiter {} (slot {}) on {key} answered {reply} at its deadline, \
                 with no room freed for it",
                super::model::show(&w.token),
                w.slot
            ));
        }
        self.note(format!("  slot {} timed out on {key}", w.slot));
        self.model.tally.wait_timeouts += 1;
        self.leave(w.slot, w.deadline.lo, w.deadline.hi)
    }

    /// After a stall: ends in the model the holds of `key` whose lease may have ended by `t`,
    /// and takes the answers of the waiters whose deadline may have passed by then.
    pub fn end_by(&mut self, key: &str, t: Ms) -> R {
        let mut ending: Vec<Hold> = self.model.peek(key).holds;
        ending.retain(|h| h.lease.lo < t);
        ending.sort_by_key(|h| h.lease.hi);
        if let Some(last) = ending.last() {
            sleep_until_wall_ms(last.lease.hi);
        }
        for h in ending {
            self.model.lock(key).remove_hold(&h.token);
            self.model.tally.lease_ends += 1;
            self.serve(key, Span::new(h.lease.lo + 1, h.lease.hi + 1 + late()))?;
        }
        let lock = self.model.peek(key);
        for w in lock.queue.iter().filter(|w| w.deadline.lo <= t) {
            if self.slots[w.slot].waiting.is_some() {
                let reply = self.read(w.slot)?;
                if reply != Reply::Nil {
                    return Err(format!("slot {} answered {reply} at its deadline", w.slot));
                }
                self.leave(w.slot, w.deadline.lo, w.deadline.hi)?;
            }
        }
        Ok(())
    }

    /// A waiter left the queue of `key` (deadline or closed connection) between `lo` and
    /// `hi`: the ones behind it that fit now are granted (SPEC: a waiter is answered as soon
    /// as the lock can be granted).
    pub fn left(&mut self, key: &str, lo: Ms, hi: Ms) -> R {
        self.serve(key, Span::new(lo, hi + late()))
    }

    pub fn settle_all(&mut self) -> R {
        for key in super::pick::KEYS {
            self.settle(key)?;
        }
        Ok(())
    }

    /// Room on `key` was freed at a time within `freed`: the head of the queue, then each
    /// following waiter while it fits, is granted (or refused, if its request does not fit
    /// the key's kind). Each waiter's own reply says whether its wait had ended first.
    pub fn serve(&mut self, key: &str, freed: Span) -> R {
        // A waiter that turns out to have left (its deadline) freed the head of the queue
        // when it left, maybe before `freed`: the ones after it may have been granted then.
        let mut since = freed.lo;
        loop {
            self.touch(key);
            let lock = self.model.peek(key);
            let Some(w) = lock.queue.front().cloned() else {
                return Ok(());
            };
            if !w.keys.is_empty() {
                match self.serve_multi(key, &w, freed, &mut since)? {
                    true => continue,
                    false => return Ok(()),
                }
            }
            let given = (!w.token.is_empty()).then_some(&w.token[..]);
            let d = lock.decide(w.want, given, false);
            if d == Decision::Busy {
                return Ok(());
            }
            // Certainly still waiting when the room was freed, or certainly gone by then.
            let alive = w.deadline.lo > freed.hi;
            // The deadline's timer, like any, may run late on a loaded machine (seen: 340 ms
            // with the whole suite on 2 cores); a grant a second past it is a bug.
            let gone = w.deadline.hi + 4 * late() < freed.lo;
            let reply = self.read(w.slot)?;
            let t_read = now_ms();
            self.model.lock(key).queue.pop_front();
            let who = format!(
                "waiter {} (slot {}) on {key}",
                super::model::show(&w.token),
                w.slot
            );
            match (&reply, d) {
                (Reply::Nil, _) if alive => {
                    return Err(format!(
                        "{who} got nil, but room was freed at {freed:?} before its deadline \
                         {:?}: it should have been granted ({d:?})",
                        w.deadline
                    ));
                }
                (Reply::Nil, _) => {
                    self.note(format!("  {who}: timed out"));
                    self.model.tally.wait_timeouts += 1;
                    since = since.min(w.deadline.lo);
                }
                (_, _) if gone => {
                    return Err(format!(
                        "{who} answered {reply} though its deadline {:?} had passed long \
                         before the room was freed at {freed:?}",
                        w.deadline
                    ));
                }
                (Reply::Grant(token, fence), Decision::Grant) => {
                    let right = match given {
                        Some(t) => token == t,
                        None => super::model::is_generated(token) && lock.hold(token).is_none(),
                    };
                    if !right {
                        return Err(format!("{who} was granted with token {reply}"));
                    }
                    self.model.new_fence(key, *fence)?;
                    self.model.lock(key).holds.push(Hold {
                        token: token.clone(),
                        fence: *fence,
                        want: w.want,
                        lease: Span::new(since, t_read).plus(w.ttl),
                        client: if w.ephemeral { w.client } else { 0 },
                        data: w.data.clone(),
                    });
                    self.model.tally.handoffs += 1;
                    self.model.tally.granted(w.want, w.ephemeral, token);
                    self.note(format!("  {who}: handed {reply}"));
                }
                (Reply::Grant(token, fence), Decision::Regrant) => {
                    let h = self.model.lock(key).hold_mut(token).expect("held");
                    if h.fence != *fence {
                        return Err(format!("{who} re-granted {reply}, fence was {}", h.fence));
                    }
                    h.lease = Span::new(since, t_read).plus(w.ttl);
                    h.client = if w.ephemeral { w.client } else { 0 };
                    if w.data.is_some() {
                        h.data = w.data.clone();
                    }
                }
                (Reply::Err(text), Decision::Mismatch(_) | Decision::OtherMode)
                    if *text == super::model::refusal_text(d) => {}
                // The lock is gone from a node whose slot is migrating away: its waiters are
                // sent to retry where the slot goes.
                (Reply::Err(text), _)
                    if self.migrating
                        && lock.holds.is_empty()
                        && text == super::cluster::MOVED_AWAY =>
                {
                    self.note(format!("  {who}: {text}"));
                    self.model.tally.moved_waiters += 1;
                }
                _ => {
                    return Err(format!(
                        "{who} answered {reply} when room was freed; expected {d:?}"
                    ));
                }
            }
        }
    }

    /// Closes slot `i`'s connection and waits until the server has seen it go and released
    /// its `EPHEMERAL` holds (SPEC: released at once, as `LOCK.RELEASE` would, handed on).
    pub fn close_slot(&mut self, i: usize, kill: bool) -> R {
        let id = self.slots[i].id;
        let waiting = self.slots[i].waiting.clone();
        let t0 = now_ms();
        if kill {
            let killed = as_int(&ok(&mut self.mc, &rcmd!("CLIENT", "KILL", "ID", id)));
            if killed != 1 {
                return Err(format!("CLIENT KILL ID {id} killed {killed}"));
            }
        } else {
            let _ = self.slots[i]
                .conn
                .stream()
                .shutdown(std::net::Shutdown::Both);
        }
        wait_client_gone(&mut self.mc, id);
        let pending = |s: &Server| stat(s, "ephemeral_pending");
        wait_until(
            "closed connections' holds released",
            Duration::from_secs(5),
            || pending(&self.master) == 0,
        );
        let t1 = now_ms();
        self.reconnect_slot(i);
        if waiting.is_some() {
            // A waiter whose connection closes leaves its queues.
            self.leave(i, t0, t1)?;
        }
        let bound: Vec<(String, Vec<u8>)> = self
            .model
            .locks
            .iter()
            .flat_map(|(k, l)| {
                l.holds
                    .iter()
                    .filter(|h| h.client == id)
                    .map(move |h| (k.clone(), h.token.clone()))
            })
            .collect();
        for (key, token) in bound {
            self.model.lock(&key).remove_hold(&token);
            self.model.tally.ephemeral_releases += 1;
            self.note(format!("  released {key} {}", super::model::show(&token)));
            self.serve(&key, Span::new(t0, t1 + late()))?;
        }
        Ok(())
    }

    /// A waiting slot that has a reply to read already: the model takes it as the handoff or
    /// timeout it must be (true), or fails.
    pub fn answered_early(&mut self, slot: usize, key: &str) -> R<bool> {
        if !self.reply_ready(slot) {
            return Ok(false);
        }
        for k in Soak::linked(key) {
            self.settle(&k)?;
        }
        if self.slots[slot].waiting.is_some() {
            let reply = self.read(slot)?;
            return Err(format!(
                "slot {slot}, waiting on {key}, answered {reply} with nothing in the model to \
                 explain it"
            ));
        }
        Ok(true)
    }

    /// Before an operation that ends connections or the waiters' server: every waiting slot
    /// is closed, last in each queue first (so nobody moves up a queue meanwhile). A waiter
    /// granted just before its connection closed is answered with its grant, which is read;
    /// one granted after, the server takes back.
    pub fn drain_waiters(&mut self) -> R {
        loop {
            let tail = self
                .model
                .locks
                .iter()
                .find_map(|(k, l)| l.queue.back().map(|w| (k.clone(), w.slot)));
            let Some((key, slot)) = tail else {
                return Ok(());
            };
            if self.answered_early(slot, &key)? {
                continue;
            }
            self.close_slot(slot, false)?;
        }
    }
}
