//! Client commands: run one on a slot, and judge its reply against the model. Each judge is a
//! pure function of the key's state in the model; when a stall let a lease end or a deadline
//! pass while the command was on its way, the key is judged again with those ended first.

use crate::common::*;

use super::model::{is_generated, refusal_text, Decision, Hold, Lock, Ms, Span, Waiter};
use super::pick::{self, counter_of, gate_of, value_of, Cmd, Draws, Inner};
use super::slots::Reply;
use super::{Soak, R};

/// What a judged reply does to the key in the model.
enum Effect {
    Nothing,
    Grant(Hold),
    Regrant {
        token: Vec<u8>,
        lease: Span,
        client: i64,
        data: Option<Vec<u8>>,
    },
    Queue(Waiter),
    Release(Vec<u8>),
    Extend(Vec<u8>, Span),
    DeleteAll,
    /// A guard ran its inner command.
    Guarded,
    /// An acquire answered nil or refused.
    Refused,
}

fn expect(reply: &Reply, want: &Reply, what: &str) -> R<Effect> {
    if reply == want {
        Ok(Effect::Nothing)
    } else {
        Err(format!("{what}: answered {reply}, expected {want}"))
    }
}

/// The reply the inner command of a guard gives, from the data keys in the model.
fn inner_reply(soak: &Soak, key: &str, inner: Inner) -> Reply {
    match inner {
        Inner::Incr => Reply::Int(soak.model.counters.get(&counter_of(key)).unwrap_or(&0) + 1),
        Inner::Set(_) => Reply::Status("OK".into()),
        Inner::Get => match soak.model.values.get(&value_of(key)) {
            Some(v) => Reply::Bulk(v.clone()),
            None => Reply::Nil,
        },
    }
}

impl Soak {
    pub fn command(&mut self, d: &mut Draws) -> R {
        self.poll_observers()?;
        let mut cmd = pick::command(d, &self.model, self.step);
        let free = self.free_slots();
        let slot = free[d.below(free.len())];
        let in_cluster = self.in_cluster;
        match &mut cmd {
            Cmd::Acquire { key, block, .. } => {
                self.settle(key)?;
                *block = self.allowed_block(*block, free.len());
            }
            // Multi-key waiters and observers wait outside Cluster only.
            Cmd::AcquireAll(a) => {
                for k in &a.keys {
                    self.settle(k)?;
                }
                a.block = self
                    .allowed_block(a.block, free.len())
                    .filter(|_| !in_cluster);
            }
            Cmd::Observe(o) => {
                o.block = self
                    .allowed_block(o.block, free.len())
                    .filter(|_| !in_cluster);
            }
            _ => {}
        }
        let argv = pick::argv(d, &cmd);
        self.model.tally.commands += 1;
        match cmd {
            Cmd::Acquire {
                key,
                token,
                want,
                ttl,
                ephemeral,
                block,
                data,
            } => {
                let conn_id = self.slots[slot].id;
                let lock = self.model.peek(&key);
                let d = lock.decide(want, token.as_deref(), !lock.queue.is_empty());
                let t0 = now_ms();
                let (reply, span) = if block.is_some() && d == Decision::Busy {
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
                let judge = |lock: &Lock| {
                    let d = lock.decide(want, token.as_deref(), !lock.queue.is_empty());
                    let lease = span.plus(ttl.ms());
                    let client = if ephemeral { conn_id } else { 0 };
                    match (d, &reply) {
                        (Decision::Busy, None) => Ok(Effect::Queue(Waiter {
                            slot,
                            client: conn_id,
                            token: token.clone().unwrap_or_default(),
                            want,
                            ttl: ttl.ms(),
                            ephemeral,
                            deadline: span.plus(block.unwrap_or(0)),
                            data: data.clone(),
                            keys: Vec::new(),
                        })),
                        (Decision::Busy, Some(Reply::Nil)) if block.is_none() => {
                            Ok(Effect::Refused)
                        }
                        (Decision::Grant, Some(Reply::Grant(t, fence))) => {
                            let fresh = match &token {
                                Some(given) => t == given,
                                None => is_generated(t) && lock.hold(t).is_none(),
                            };
                            if !fresh {
                                return Err(format!(
                                    "granted with the wrong token {}",
                                    reply_text(&reply)
                                ));
                            }
                            let (token, fence, want) = (t.clone(), *fence, want);
                            Ok(Effect::Grant(Hold {
                                token,
                                fence,
                                want,
                                lease,
                                client,
                                data: data.clone(),
                            }))
                        }
                        (Decision::Regrant, Some(Reply::Grant(t, fence)))
                            if token.as_ref() == Some(t)
                                && lock.hold(t).is_some_and(|h| h.fence == *fence) =>
                        {
                            Ok(Effect::Regrant {
                                token: t.clone(),
                                lease,
                                client,
                                data: data.clone(),
                            })
                        }
                        (Decision::Mismatch(_) | Decision::OtherMode, Some(Reply::Err(e)))
                            if *e == refusal_text(d) =>
                        {
                            Ok(Effect::Refused)
                        }
                        _ => Err(format!(
                            "LOCK.ACQUIRE answered {}, expected {d:?} (block {block:?})",
                            reply_text(&reply)
                        )),
                    }
                };
                let effect = self.judged(&key, span, judge)?;
                if let Effect::Queue(_) = effect {
                    self.slots[slot].waiting = Some(key.clone());
                }
                self.apply(&key, effect, span)
            }
            Cmd::Release { key, token } => {
                self.settle(&key)?;
                let (reply, span) = self.logged_call(slot, &argv)?;
                let effect = self.judged(&key, span, |lock| match lock.hold(&token) {
                    Some(_) => expect(&reply, &Reply::Int(1), "LOCK.RELEASE")
                        .map(|_| Effect::Release(token.clone())),
                    None => expect(&reply, &Reply::Int(0), "LOCK.RELEASE"),
                })?;
                self.apply(&key, effect, span)
            }
            Cmd::Extend { key, token, ttl } => {
                self.settle(&key)?;
                let (reply, span) = self.logged_call(slot, &argv)?;
                let effect = self.judged(&key, span, |lock| match lock.hold(&token) {
                    Some(_) => expect(&reply, &Reply::Int(1), "LOCK.EXTEND")
                        .map(|_| Effect::Extend(token.clone(), span.plus(ttl.ms()))),
                    None => expect(&reply, &Reply::Int(0), "LOCK.EXTEND"),
                })?;
                self.apply(&key, effect, span)
            }
            Cmd::Call { key, token, inner } => {
                self.settle(&key)?;
                let (reply, span) = self.logged_call(slot, &argv)?;
                let ran = inner_reply(self, &key, inner);
                let not_owner = Reply::Err("NOTOWNER the lock is not held by this token".into());
                let effect = self.judged(&key, span, |lock| match lock.hold(&token) {
                    Some(_) => expect(&reply, &ran, "LOCK.CALL").map(|_| Effect::Guarded),
                    None => expect(&reply, &not_owner, "LOCK.CALL"),
                })?;
                if let Effect::Guarded = effect {
                    self.model.tally.guarded_writes += 1;
                    self.wrote(&key, inner);
                }
                Ok(())
            }
            Cmd::Fence { key, fence, inner } => {
                let (reply, _) = self.logged_call(slot, &argv)?;
                let gate = self.model.gates.get(&gate_of(&key)).copied();
                match gate {
                    Some(g) if fence < g => {
                        let stale = format!("STALEFENCE fence {fence} is older than {g}");
                        expect(&reply, &Reply::Err(stale), "LOCK.FENCE")?;
                        self.model.tally.stale_fences += 1;
                    }
                    _ => {
                        expect(&reply, &inner_reply(self, &key, inner), "LOCK.FENCE")?;
                        self.model
                            .gates
                            .insert(gate_of(&key), fence.max(gate.unwrap_or(0)));
                        self.model.tally.guarded_writes += 1;
                        self.wrote(&key, inner);
                    }
                }
                Ok(())
            }
            Cmd::Info { key } => {
                self.note(format!(
                    "slot {slot}> LOCK.INFO {key} (checked against the model)"
                ));
                self.check_lock(&key)
            }
            Cmd::Del { key, gate: true } => {
                let (reply, _) = self.logged_call(slot, &argv)?;
                let had = self.model.gates.remove(&gate_of(&key)).is_some();
                expect(&reply, &Reply::Int(i64::from(had)), "DEL of a gate").map(|_| ())
            }
            Cmd::Del { key, gate: false } => {
                self.settle(&key)?;
                let (reply, span) = self.logged_call(slot, &argv)?;
                let effect = self.judged(&key, span, |lock| {
                    let had = !lock.holds.is_empty();
                    expect(&reply, &Reply::Int(i64::from(had)), "DEL of a lock").map(|_| {
                        if had {
                            Effect::DeleteAll
                        } else {
                            Effect::Nothing
                        }
                    })
                })?;
                self.apply(
                    &key,
                    effect,
                    Span::new(span.lo, span.hi + super::serve::late()),
                )
            }
            Cmd::AcquireAll(a) => self.acquire_all(slot, a, argv),
            Cmd::ReleaseAll { keys, token } => self.release_all(slot, keys, token, &argv),
            Cmd::Observe(o) => self.observe(slot, o, argv),
            Cmd::Close { slot, kill } => self.close_command(slot, kill),
            Cmd::Idle => self.idle(),
            Cmd::Odd { seed } => self.odd(seed),
        }
    }

    fn logged_call(&mut self, slot: usize, argv: &[Vec<u8>]) -> R<(Reply, Span)> {
        let (reply, span) = self.call(slot, argv)?;
        self.note(format!(
            "slot {slot}> {} -> {reply}",
            super::slots::show_argv(argv)
        ));
        Ok((reply, span))
    }

    /// `BLOCK` as far as the soak can follow it: a slot stays free for plain commands.
    fn allowed_block(&self, block: Option<Ms>, free: usize) -> Option<Ms> {
        block.filter(|_| free >= 2)
    }

    /// Judges a reply against the key's state; if that fails and a lease end or deadline
    /// came within the command's span (a stall), judges again with those ended first.
    fn judged(&mut self, key: &str, span: Span, judge: impl Fn(&Lock) -> R<Effect>) -> R<Effect> {
        let first = match judge(&self.model.peek(key)) {
            Ok(e) => return Ok(e),
            Err(e) => e,
        };
        let linked = Soak::linked(key);
        let stalled = linked.iter().map(|k| self.model.peek(k)).any(|lock| {
            lock.holds.iter().any(|h| h.lease.lo < span.hi)
                || lock.queue.iter().any(|w| w.deadline.lo <= span.hi)
        });
        if !stalled {
            return Err(first);
        }
        self.note(format!(
            "  (a stall: {key} judged again with what ended by {})",
            span.hi
        ));
        for k in &linked {
            self.end_by(k, span.hi)?;
        }
        judge(&self.model.peek(key)).map_err(|e| format!("{first}; with what ended first: {e}"))
    }

    fn apply(&mut self, key: &str, effect: Effect, span: Span) -> R {
        let r = self.apply_effect(key, effect, span);
        self.touch(key);
        r
    }

    fn apply_effect(&mut self, key: &str, effect: Effect, span: Span) -> R {
        let lock = self.model.lock(key);
        match effect {
            Effect::Nothing | Effect::Guarded => {}
            Effect::Refused => self.model.tally.refused += 1,
            Effect::Grant(h) => {
                let fence = h.fence;
                let (want, ephemeral, token) = (h.want, h.client != 0, h.token.clone());
                lock.holds.push(h);
                self.model.new_fence(key, fence)?;
                self.model.tally.grants += 1;
                self.model.tally.granted(want, ephemeral, &token);
            }
            Effect::Regrant {
                token,
                lease,
                client,
                data,
            } => {
                let h = lock.hold_mut(&token).expect("held");
                (h.lease, h.client) = (lease, client);
                if data.is_some() {
                    h.data = data;
                }
                self.model.tally.regrants += 1;
            }
            Effect::Queue(w) => {
                lock.queue.push_back(w);
                self.model.tally.waits += 1;
            }
            Effect::Release(token) => {
                lock.remove_hold(&token);
                return self.serve(key, span);
            }
            Effect::Extend(token, lease) => lock.hold_mut(&token).expect("held").lease = lease,
            Effect::DeleteAll => {
                lock.holds.clear();
                return self.serve(key, span);
            }
        }
        Ok(())
    }

    fn wrote(&mut self, key: &str, inner: Inner) {
        match inner {
            Inner::Incr => *self.model.counters.entry(counter_of(key)).or_insert(0) += 1,
            Inner::Set(v) => {
                self.model
                    .values
                    .insert(value_of(key), v.to_string().into_bytes());
            }
            Inner::Get => {}
        }
    }
}

fn reply_text(r: &Option<Reply>) -> String {
    r.as_ref().map_or("(blocked)".into(), |r| r.to_string())
}
