//! `LOCK.ACQUIREALL` and `LOCK.RELEASEALL` over overlapping sets of the keys tagged `{m}` (one
//! hash slot): drawn from the model, each reply judged against it (SPEC "Multi-resource
//! locks": every key decided as `LOCK.ACQUIRE` decides it, the first error in key order, else
//! nil or a wait if a key is busy or has waiters ahead, else all granted at once with fences
//! strictly increasing in key order). A waiter queues on every one of its keys and is served
//! once it is first in every queue and every key has room (`serve_multi`).

use crate::common::*;

use super::model::{
    is_generated, refusal_text, Decision, Hold, Lock, Model, Ms, Span, Waiter, Want,
};
use super::pick::{self, Cmd, Draws, Ttl, MULTI_KEYS};
use super::slots::Reply;
use super::{Soak, R};

#[derive(Clone, Debug)]
pub struct AcquireAll {
    pub keys: Vec<String>,
    /// `None`: `*`, a generated token.
    pub token: Option<Vec<u8>>,
    pub want: Want,
    pub ttl: Ttl,
    pub ephemeral: bool,
    pub block: Option<Ms>,
    pub data: Option<Vec<u8>>,
}

/// One to three of the tagged keys, in random order.
fn key_set(d: &mut Draws) -> Vec<String> {
    let mut keys: Vec<String> = MULTI_KEYS.iter().map(|k| k.to_string()).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, d.below(i + 1));
    }
    let n = match d.below(100) {
        0..=14 => 1,
        15..=59 => 2,
        _ => 3,
    };
    keys.truncate(n);
    keys
}

/// A token for `keys`: a holder's of one of them (`holder_percent` of the time) or the pool's.
fn token_for(d: &mut Draws, model: &Model, keys: &[String], holder_percent: usize) -> Vec<u8> {
    let (i, fallback) = (d.next(), pick::token(d, &Lock::default(), 0));
    let holders: Vec<Vec<u8>> = keys
        .iter()
        .flat_map(|k| model.peek(k).holds.into_iter().map(|h| h.token))
        .collect();
    if d.chance(holder_percent) && !holders.is_empty() {
        return holders[i as usize % holders.len()].clone();
    }
    fallback
}

/// A tagged key whose readers hold it while a writer waits, if there is one: a shared request
/// there has room but must queue behind the writer.
fn reader_writer_key(model: &Model) -> Option<&'static str> {
    MULTI_KEYS.into_iter().find(|k| {
        let lock = model.peek(k);
        lock.holds.first().is_some_and(|h| h.want == Want::Shared)
            && lock.queue.iter().any(|w| w.want == Want::Exclusive)
    })
}

pub fn pick(d: &mut Draws, model: &Model, step: u64) -> Cmd {
    let mut keys = key_set(d);
    if d.chance(30) {
        let token = token_for(d, model, &keys, 75);
        return Cmd::ReleaseAll { keys, token };
    }
    let generated = d.chance(12);
    let mut token = token_for(d, model, &keys, 40);
    let (follow, regrant, shared) = (d.chance(70), d.chance(75), d.chance(50));
    let held = keys
        .iter()
        .find_map(|k| model.peek(k).hold(&token).map(|h| h.want));
    let first = model.peek(&keys[0]).holds.first().map(|h| h.want);
    let mut want = match (held, first) {
        (Some(w), _) if regrant => w,
        (_, Some(w)) if follow => w,
        _ if shared => Want::Shared,
        _ => Want::Exclusive,
    };
    let ttl = pick::ttl(d);
    let ephemeral = d.chance(20);
    let (blocking, short, long) = (d.chance(60), d.between(20, 200), d.between(200, 2500));
    let mut block = blocking.then_some(if d.chance(50) { short } else { long });
    let (mixed, last, wide) = (d.chance(50), d.chance(50), d.chance(50));
    if let Some(key) = reader_writer_key(model).filter(|_| mixed) {
        // Readers hold a key and a writer waits there: a shared request has room on that key
        // but queues behind the writer (often as the request's last key, where a check that
        // stops one key short would let it overtake).
        // With every tagged key now and then, so that it also waits where another holds.
        for k in MULTI_KEYS.into_iter().filter(|k| *k == key || wide) {
            if !keys.iter().any(|have| have == k) {
                keys.push(k.to_string());
            }
        }
        let (at, n) = (keys.iter().position(|k| k == key).unwrap_or(0), keys.len());
        if last {
            keys.swap(at, n - 1);
        }
        (want, block) = (Want::Shared, Some(long));
    }
    if keys
        .iter()
        .any(|k| model.peek(k).queue.iter().any(|w| w.token == token))
    {
        // A token waits for a key at most once.
        token = format!("q{step}").into_bytes();
    }
    Cmd::AcquireAll(AcquireAll {
        keys,
        token: (!generated).then_some(token),
        want,
        ttl,
        ephemeral,
        block,
        data: pick::data(d),
    })
}

pub fn argv(d: &mut Draws, a: &AcquireAll) -> Vec<Vec<u8>> {
    let mut argv = vec![d.cased("LOCK.ACQUIREALL"), a.keys.len().to_string().into()];
    argv.extend(a.keys.iter().map(|k| k.clone().into_bytes()));
    argv.push(a.token.clone().unwrap_or_else(|| b"*".to_vec()));
    let mut groups = vec![pick::ttl_args(d, a.ttl)];
    if a.want == Want::Shared {
        groups.push(vec![d.cased("SHARED")]);
    }
    if a.ephemeral {
        groups.push(vec![d.cased("EPHEMERAL")]);
    }
    if let Some(ms) = a.block {
        groups.push(vec![d.cased("BLOCK"), ms.to_string().into_bytes()]);
    }
    if let Some(v) = &a.data {
        groups.push(vec![d.cased("DATA"), v.clone()]);
    }
    argv.extend(pick::shuffled(d, groups));
    argv
}

/// Each key's decision, or the first refusal in key order.
fn decide_all(locks: &[Lock], want: Want, token: Option<&[u8]>) -> Result<Vec<Decision>, Decision> {
    let mut all = Vec::new();
    for lock in locks {
        match lock.decide(want, token, !lock.queue.is_empty()) {
            d @ (Decision::Mismatch(_) | Decision::OtherMode) => return Err(d),
            d => all.push(d),
        }
    }
    Ok(all)
}

/// Each key's decision and fence, in key order.
pub type Fences = Vec<(Decision, i64)>;

/// What a judged `LOCK.ACQUIREALL` does.
enum Outcome {
    Granted(Vec<u8>, Fences),
    Queued,
    Refused,
}

/// A grant of `keys` answered `reply`: the token and each key's fence, checked against the
/// decisions (a re-grant keeps its fence; new fences strictly increase in key order).
pub fn granted(
    reply: &Reply,
    locks: &[Lock],
    decisions: &[Decision],
    token: Option<&[u8]>,
) -> R<(Vec<u8>, Fences)> {
    let Reply::Grants(t, fences) = reply else {
        return Err(format!("expected a grant of every key, got {reply}"));
    };
    let right = match token {
        Some(given) => t == given,
        None => is_generated(t) && locks.iter().all(|l| l.hold(t).is_none()),
    };
    if !right || fences.len() != locks.len() {
        return Err(format!("granted {reply}: wrong token or number of fences"));
    }
    let mut last = 0;
    for ((lock, d), f) in locks.iter().zip(decisions).zip(fences) {
        match d {
            Decision::Regrant if lock.hold(t).is_some_and(|h| h.fence == *f) => {}
            Decision::Grant if *f > last => last = *f,
            _ => return Err(format!("granted {reply}: fence {f} for {d:?}")),
        }
    }
    Ok((
        t.clone(),
        decisions
            .iter()
            .copied()
            .zip(fences.iter().copied())
            .collect(),
    ))
}

impl Soak {
    pub fn locks_of(&self, keys: &[String]) -> Vec<Lock> {
        keys.iter().map(|k| self.model.peek(k)).collect()
    }

    pub fn acquire_all(&mut self, slot: usize, a: AcquireAll, argv: Vec<Vec<u8>>) -> R {
        let conn_id = self.slots[slot].id;
        let token = a.token.as_deref();
        let busy = decide_all(&self.locks_of(&a.keys), a.want, token)
            .is_ok_and(|ds| ds.contains(&Decision::Busy));
        let t0 = now_ms();
        let (reply, span) = if a.block.is_some() && busy {
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
        let judge = |locks: &[Lock]| -> R<Outcome> {
            match (decide_all(locks, a.want, token), &reply) {
                (Err(d), Some(Reply::Err(e))) if *e == refusal_text(d) => Ok(Outcome::Refused),
                (Ok(ds), None) if ds.contains(&Decision::Busy) && a.block.is_some() => {
                    Ok(Outcome::Queued)
                }
                (Ok(ds), Some(Reply::Nil)) if ds.contains(&Decision::Busy) && a.block.is_none() => {
                    Ok(Outcome::Refused)
                }
                (Ok(ds), Some(r)) if !ds.contains(&Decision::Busy) => {
                    granted(r, locks, &ds, token).map(|(t, fs)| Outcome::Granted(t, fs))
                }
                (d, r) => Err(format!(
                    "LOCK.ACQUIREALL answered {}, expected {d:?}",
                    r.as_ref().map_or("(blocked)".into(), |r| r.to_string())
                )),
            }
        };
        let outcome = match judge(&self.locks_of(&a.keys)) {
            Ok(o) => o,
            Err(first) => {
                self.note(format!(
                    "  (a stall? judged again with what ended by {})",
                    span.hi
                ));
                for k in &a.keys {
                    self.end_by(k, span.hi)?;
                }
                judge(&self.locks_of(&a.keys)).map_err(|e| format!("{first}; then: {e}"))?
            }
        };
        match outcome {
            Outcome::Refused => {
                self.model.tally.refused += 1;
                self.model.tally.count("acquireall-refused");
            }
            Outcome::Queued => {
                for k in &a.keys {
                    self.model.lock(k).queue.push_back(Waiter {
                        slot,
                        client: conn_id,
                        token: a.token.clone().unwrap_or_default(),
                        want: a.want,
                        ttl: a.ttl.ms(),
                        ephemeral: a.ephemeral,
                        deadline: span.plus(a.block.unwrap_or(0)),
                        data: a.data.clone(),
                        keys: a.keys.clone(),
                    });
                }
                self.slots[slot].waiting = Some(a.keys[0].clone());
                self.model.tally.waits += 1;
                self.model.tally.count("acquireall-waits");
            }
            Outcome::Granted(t, fences) => {
                let client = if a.ephemeral { conn_id } else { 0 };
                let lease = span.plus(a.ttl.ms());
                self.grant_all(&a.keys, &t, &fences, a.want, lease, client, &a.data)?;
                self.model.tally.count("acquireall-grants");
            }
        }
        Ok(())
    }

    /// The model takes a multi-key grant: each key granted or re-granted.
    #[allow(clippy::too_many_arguments)]
    pub fn grant_all(
        &mut self,
        keys: &[String],
        token: &[u8],
        fences: &[(Decision, i64)],
        want: Want,
        lease: Span,
        client: i64,
        data: &Option<Vec<u8>>,
    ) -> R {
        for (k, (d, fence)) in keys.iter().zip(fences) {
            let lock = self.model.lock(k);
            if *d == Decision::Regrant {
                let h = lock.hold_mut(token).expect("held");
                (h.lease, h.client) = (lease, client);
                if data.is_some() {
                    h.data = data.clone();
                }
                self.model.tally.regrants += 1;
            } else {
                lock.holds.push(Hold {
                    token: token.to_vec(),
                    fence: *fence,
                    want,
                    lease,
                    client,
                    data: data.clone(),
                });
                self.model.new_fence(k, *fence)?;
                self.model.tally.grants += 1;
                self.model.tally.granted(want, client != 0, token);
            }
            self.touch(k);
        }
        Ok(())
    }

    pub fn release_all(
        &mut self,
        slot: usize,
        keys: Vec<String>,
        token: Vec<u8>,
        argv: &[Vec<u8>],
    ) -> R {
        for k in &keys {
            self.settle(k)?;
        }
        let t0 = now_ms();
        let (reply, span) = self.call(slot, argv)?;
        self.note(format!(
            "slot {slot}> {} -> {reply}",
            super::slots::show_argv(argv)
        ));
        let held = |s: &Soak| {
            let n = keys
                .iter()
                .filter(|k| s.model.peek(k).hold(&token).is_some());
            Reply::Int(n.count() as i64)
        };
        if reply != held(self) {
            for k in &keys {
                self.end_by(k, span.hi)?;
            }
            if reply != held(self) {
                return Err(format!(
                    "LOCK.RELEASEALL answered {reply}, expected {}",
                    held(self)
                ));
            }
        }
        self.model.tally.count("releaseall");
        for k in &keys {
            if self.model.lock(k).remove_hold(&token).is_some() {
                self.serve(k, Span::new(t0, span.hi))?;
            }
        }
        Ok(())
    }
}
