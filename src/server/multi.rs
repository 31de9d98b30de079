//! The multi-key commands: `LOCK.ACQUIREALL`, all of its keys or none, and
//! `LOCK.RELEASEALL`.
//!
//! Every key is decided before any is written, so an error or a busy key
//! changes nothing; then each key is granted as `LOCK.ACQUIRE` grants it
//! (its own fence, lease, effect). The effects of one command reach
//! replicas and the AOF as one unit: the server wraps a command's
//! propagated effects in `MULTI`/`EXEC` when there are several, and a
//! scheduler pass (a handoff) propagates as one unit the same way.

use redis_module::{Context, RedisString, RedisValue};

use crate::core::args::multi;
use crate::core::errors::LockError;
use crate::core::grant::{self, Decision, Want};
use crate::core::lock;
use crate::core::settings;
use crate::core::token::{self, TokenArg};
use crate::server::command::{Call, Reply};
use crate::server::ffi::{self, LockKey};
use crate::server::held::{held, Held};
use crate::server::{config, locks, reply, stats, waiting};

/// What one key's decision needs: the request, and the token if given.
struct Ask<'a> {
    want: Want,
    given: Option<&'a [u8]>,
    now: i64,
}

impl Ask<'_> {
    fn decide(&self, key: &LockKey, queued: bool) -> Result<Decision, LockError> {
        let h = held(key)?;
        let holding = self.given.and_then(|t| h.holding(t, self.now));
        Ok(grant::decide_newcomer(
            h.occupancy(),
            self.want,
            holding,
            queued,
        ))
    }
}

/// The error a decision answers, as `LOCK.ACQUIRE` answers it.
fn refused(decision: Decision) -> Option<LockError> {
    match decision {
        Decision::Mismatch(kind) => Some(kind.mismatch()),
        Decision::OtherMode => Some(LockError::OtherMode),
        _ => None,
    }
}

/// Decides every key, serving its waiters first where it is free but has
/// some (a newcomer never overtakes them). Serving one key may grant a
/// waiter other keys of this request too, so once any was served every
/// key is decided again. The first error in key order answers the
/// command; nothing has been granted yet.
fn decide_all(ctx: &Context, names: &[RedisString], ask: &Ask) -> Result<Vec<Decision>, LockError> {
    let mut decisions = Vec::with_capacity(names.len());
    let mut served = false;
    for name in names {
        let key = locks::open_live(ctx, name);
        let decision = ask.decide(&key, false)?;
        if decision == Decision::Grant && waiting::count(ctx, name) > 0 {
            drop(key);
            locks::serve(ctx, name);
            served = true;
        }
        if let Some(e) = refused(decision) {
            return Err(e);
        }
        decisions.push(decision);
    }
    if !served {
        return Ok(decisions);
    }
    names
        .iter()
        .map(|name| {
            let key = LockKey::open(ctx, name, true);
            let decision = ask.decide(&key, waiting::count(ctx, name) > 0)?;
            refused(decision).map_or(Ok(decision), Err)
        })
        .collect()
}

/// The keys as Redis strings, each with the holds of closed connections
/// released first (they count as gone), as the entry point does for the
/// one key of the single-key commands.
fn names_of(call: &Call, keys: multi::Keys) -> Vec<RedisString> {
    keys.range()
        .map(|at| {
            locks::release_orphans_of(call.ctx, call.argv[at]);
            call.arg(at)
        })
        .collect()
}

pub fn acquire_all(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = multi::parse_acquire_all(argv)?;
    let acq = req.acquire;
    let ttl_ms = settings::check_ttl(acq.ttl_ms, config::max_ttl_ms())?;
    let bind_to = match acq.ephemeral {
        false => None,
        true => match ffi::client_id(ctx) {
            id if ffi::is_connection(id) && !ffi::in_script(ctx) => Some(id),
            _ => return Err(LockError::EphemeralWithoutConnection),
        },
    };
    let now = ffi::now_ms();
    let expire_at = lock::expiry_at(now, ttl_ms).ok_or(LockError::InvalidTtl)?;
    let names = names_of(call, req.keys);
    let generated;
    let (token, given) = match acq.token {
        TokenArg::Given(t) => (t, Some(t)),
        TokenArg::Generate => {
            generated = token::generate();
            (&generated[..], None)
        }
    };
    let ask = Ask {
        want: acq.want,
        given,
        now,
    };
    let decisions = decide_all(ctx, &names, &ask)?;
    if decisions.contains(&Decision::Busy) {
        let request = waiting::Request::new(token, acq.want, ttl_ms, bind_to, acq.data);
        return Ok(match acq.block_ms {
            Some(timeout) if ffi::may_block(call.flags()) => {
                let timeout = settings::block_timeout(timeout, config::max_block_ms());
                if locks::wait_all(ctx, &names, request, timeout) {
                    RedisValue::NoReply
                } else {
                    stats::REFUSED.bump();
                    RedisValue::Null
                }
            }
            _ => {
                stats::REFUSED.bump();
                RedisValue::Null
            }
        });
    }
    // Every new grant needs a fence: too few left answers the error
    // before any key is written.
    if !locks::fences_left(ctx, &decisions) {
        return Err(LockError::FenceExhausted);
    }
    let grant = locks::Grant {
        token,
        want: acq.want,
        expire_at,
        now,
        bind_to,
        data: acq.data,
        event: c"lock.acquired",
    };
    let mut fences = Vec::with_capacity(names.len());
    for (name, decision) in names.iter().zip(decisions) {
        let key = LockKey::open(ctx, name, true);
        fences.push(locks::carry_out(ctx, name, key, decision, &grant)?);
        match decision {
            Decision::Regrant => stats::REGRANTS.bump(),
            _ => stats::GRANTS.bump(),
        }
    }
    Ok(reply::grant_all(ctx, token, &fences))
}

pub fn release_all(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = multi::parse_release_all(argv)?;
    let now = ffi::now_ms();
    let names = names_of(call, req.keys);
    // Every key is looked at before any is released: a key of another
    // type answers the command and nothing changes.
    let mut held_by = Vec::with_capacity(names.len());
    for name in &names {
        let key = LockKey::open(ctx, name, true);
        let h = held(&key)?;
        let hold = h
            .fence_of(req.token, now)
            .map(|_| matches!(h, Held::Multi(_)));
        held_by.push(hold);
    }
    let mut released = 0;
    for (name, hold) in names.iter().zip(held_by) {
        let Some(multi) = hold else {
            stats::RELEASES_NOT_OWNER.bump();
            continue;
        };
        let key = LockKey::open(ctx, name, true);
        stats::RELEASES.bump();
        locks::release(ctx, name, key, req.token, multi);
        released += 1;
    }
    Ok(RedisValue::Integer(released))
}
