//! `LOCK.OBSERVE key [AFTER fence] [SEEN data] [BLOCK ms]`, judged against the model: the
//! answer is the fence and data of the key's holder with the highest fence, `[0, nil]` when
//! free; with `AFTER` (and `SEEN`) naming it, nil, or with `BLOCK` a wait.
//!
//! A blocked observer's answer depends on when the server looks at the key after a change,
//! which the model knows only within spans: the soak records every state the model gives the
//! key after the observer blocked, and requires the answer to be one of them that differs from
//! what `AFTER`/`SEEN` named (never an older holder, never the unchanged one); nil only once
//! its deadline has come, and not when a change came long (`4 × late()`) before it; and an
//! answer within that margin of a change or of its deadline. The states recorded include the
//! free key between a release and the handoff it makes, which the server never shows (that
//! promise is `tests/observe`'s); observers wait only outside Cluster, and every operation
//! first ends them.

use crate::common::*;

use super::model::{Lock, Model, Ms, Span};
use super::pick::{self, Cmd, Draws};
use super::serve::late;
use super::slots::Reply;
use super::{Soak, R};

#[derive(Clone, Debug)]
pub struct Observe {
    pub key: String,
    pub after: Option<i64>,
    pub seen: Option<Vec<u8>>,
    pub block: Option<Ms>,
}

type Top = (i64, Option<Vec<u8>>);

#[derive(Clone, Debug)]
pub struct Observer {
    pub slot: usize,
    pub key: String,
    after: i64,
    seen: Option<Vec<u8>>,
    pub deadline: Span,
    /// The key's states since it blocked, the first the one it blocked on.
    states: Vec<Top>,
    /// When the model first had the key changed for it.
    changed: Option<Ms>,
}

/// Whether `top` is what `AFTER after [SEEN seen]` names: no change.
fn unchanged(top: &Top, after: i64, seen: &Option<Vec<u8>>) -> bool {
    let data = top.1.clone().unwrap_or_default();
    top.0 == after && seen.as_ref().is_none_or(|s| *s == data)
}

pub fn pick(d: &mut Draws, model: &Model, key: &str) -> Cmd {
    let top = model.peek(key).top();
    let history = model.history.get(key).cloned().unwrap_or_default();
    let (a, i, with_seen, same, j) = (
        d.below(100),
        d.next(),
        d.chance(40),
        d.chance(60),
        d.below(4),
    );
    let after = match a {
        0..=44 => Some(top.0),
        45..=59 => Some(
            history
                .get(i as usize % history.len().max(1))
                .copied()
                .unwrap_or(1),
        ),
        60..=74 => Some(0),
        75..=89 => None,
        _ => model.highest.get(key).copied().or(Some(7)),
    };
    let seen = (after.is_some() && with_seen).then(|| match (same, j) {
        (true, _) => top.1.clone().unwrap_or_default(),
        (false, 3) => Vec::new(),
        (false, j) => pick::data_pool()[j].to_vec(),
    });
    let (blocking, ms) = (d.chance(50), d.between(30, 1500));
    Cmd::Observe(Observe {
        key: key.to_string(),
        after,
        seen,
        block: (after.is_some() && blocking).then_some(ms),
    })
}

pub fn argv(d: &mut Draws, o: &Observe) -> Vec<Vec<u8>> {
    let mut argv = vec![d.cased("LOCK.OBSERVE"), o.key.clone().into_bytes()];
    let mut groups = Vec::new();
    if let Some(f) = o.after {
        groups.push(vec![d.cased("AFTER"), f.to_string().into_bytes()]);
    }
    if let Some(s) = &o.seen {
        groups.push(vec![d.cased("SEEN"), s.clone()]);
    }
    if let Some(ms) = o.block {
        groups.push(vec![d.cased("BLOCK"), ms.to_string().into_bytes()]);
    }
    argv.extend(pick::shuffled(d, groups));
    argv
}

/// The answer to `o` now, `None` for a wait.
fn expected(lock: &Lock, o: &Observe) -> Option<Reply> {
    let top = lock.top();
    match o.after {
        Some(f) if unchanged(&top, f, &o.seen) => o.block.is_none().then_some(Reply::Nil),
        _ => Some(Reply::Observed(top.0, top.1)),
    }
}

impl Soak {
    /// Slots of blocked observers are not free.
    pub fn observing(&self, slot: usize) -> bool {
        self.model.observers.iter().any(|o| o.slot == slot)
    }

    pub fn observe(&mut self, slot: usize, o: Observe, argv: Vec<Vec<u8>>) -> R {
        self.settle(&o.key)?;
        let t0 = now_ms();
        let (reply, span) = if o.block.is_some() {
            self.slots[slot].conn.send(&argv);
            let (reply, t1) = self.blocked_or_answered(slot)?;
            (reply, Span::new(t0, t1))
        } else {
            let (reply, span) = self.call(slot, &argv)?;
            (Some(reply), span)
        };
        let shown = reply.as_ref().map_or("(blocked)".into(), |r| r.to_string());
        self.note(format!(
            "slot {slot}> {} -> {shown}",
            super::slots::show_argv(&argv)
        ));
        if expected(&self.model.peek(&o.key), &o) != reply {
            for k in Soak::linked(&o.key) {
                self.end_by(&k, span.hi)?;
            }
            let want = expected(&self.model.peek(&o.key), &o);
            if want != reply {
                let want = want.map_or("(blocked)".into(), |r| r.to_string());
                return Err(format!("LOCK.OBSERVE answered {shown}, expected {want}"));
            }
        }
        let what = match &reply {
            None => "observe-blocked",
            Some(Reply::Nil) => "observe-nil",
            Some(_) if o.block.is_some() => "observe-block-answered-at-once",
            Some(_) => "observe-answered",
        };
        self.model.tally.count(what);
        if reply.is_none() {
            let top = self.model.peek(&o.key).top();
            self.model.observers.push(Observer {
                slot,
                key: o.key,
                after: o.after.unwrap_or(0),
                seen: o.seen,
                deadline: span.plus(o.block.unwrap_or(0)),
                states: vec![top],
                changed: None,
            });
        }
        Ok(())
    }

    /// The model changed `key`: its observers record the new state.
    pub fn touch(&mut self, key: &str) {
        let top = self.model.peek(key).top();
        let now = now_ms();
        for o in self.model.observers.iter_mut().filter(|o| o.key == key) {
            if o.states.last() != Some(&top) {
                o.states.push(top.clone());
            }
            if o.changed.is_none() && !unchanged(&top, o.after, &o.seen) {
                o.changed = Some(now);
            }
        }
    }

    /// Takes the answers of the observers that have one, and requires one from those whose
    /// deadline or change is long past.
    pub fn poll_observers(&mut self) -> R {
        for o in self.model.observers.clone() {
            if self.reply_ready(o.slot) {
                self.observer_answered(&o)?;
                continue;
            }
            let now = now_ms();
            let due = o.changed.unwrap_or(Ms::MAX).min(o.deadline.hi);
            if now > due.saturating_add(4 * late()) {
                return Err(format!(
                    "observer (slot {}) of {} AFTER {} not answered at {now}: deadline {:?}, \
                     changed at {:?}, states {:?}",
                    o.slot, o.key, o.after, o.deadline, o.changed, o.states
                ));
            }
        }
        Ok(())
    }

    fn observer_answered(&mut self, o: &Observer) -> R {
        let reply = self.read(o.slot)?;
        let t = now_ms();
        let fits = |o: &Observer| match &reply {
            Reply::Nil => {
                o.deadline.lo <= t && o.changed.is_none_or(|c| c + 4 * late() >= o.deadline.lo)
            }
            Reply::Observed(f, data) => {
                let top = (*f, data.clone());
                !unchanged(&top, o.after, &o.seen) && o.states[1..].contains(&top)
            }
            _ => false,
        };
        let mut ok = fits(o);
        if !ok {
            // A change the model has not taken yet (a lease that ended just now).
            for k in Soak::linked(&o.key) {
                self.end_by(&k, t)?;
            }
            let now = self
                .model
                .observers
                .iter()
                .find(|x| x.slot == o.slot)
                .cloned();
            ok = now.as_ref().is_some_and(fits);
        }
        self.note(format!(
            "  observer (slot {}) of {}: {reply}",
            o.slot, o.key
        ));
        if !ok {
            return Err(format!(
                "observer (slot {}) of {} AFTER {} SEEN {:?} answered {reply} at {t}: deadline \
                 {:?}, changed at {:?}, the key's states since {:?}",
                o.slot, o.key, o.after, o.seen, o.deadline, o.changed, o.states
            ));
        }
        self.model.observers.retain(|x| x.slot != o.slot);
        self.model.tally.count(match reply {
            Reply::Nil => "observe-timeouts",
            _ => "observe-woken",
        });
        Ok(())
    }

    /// Before an operation, or a close of its slot: the observers answer or are closed.
    pub fn end_observers(&mut self, only: Option<usize>) -> R {
        self.poll_observers()?;
        for o in self.model.observers.clone() {
            if only.is_some_and(|s| s != o.slot) {
                continue;
            }
            self.model.observers.retain(|x| x.slot != o.slot);
            self.note(format!("slot {}: observer closed", o.slot));
            self.close_slot(o.slot, false)?;
        }
        Ok(())
    }
}
