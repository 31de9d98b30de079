//! The command handlers: parse, decide with the core rules, hand the
//! decision to the lock-lifecycle layer (`locks`), which writes the key and
//! replicates the effect by the write path (`lockops`), reply.
//!
//! Effects, not commands, are replicated: a grant travels as
//! `LOCK._APPLY key token fence unix-ms`, an extend as `PEXPIREAT`, a
//! release as `DEL`, so replicas and AOF replay rebuild the exact owner (a
//! generated token included), fence and absolute expiry. A promotion's new
//! fence epoch travels as `LOCK._EPOCH epoch`.

use redis_module::RedisValue;

use crate::core::args;
use crate::core::effects;
use crate::core::errors::LockError;
use crate::core::grant::{self, Decision};
use crate::core::holders;
use crate::core::lock::{self, LockRef};
use crate::core::settings;
use crate::core::token::{self, TokenArg};
use crate::server::command::{Call, Reply};
use crate::server::ffi::{self, LockKey};
use crate::server::held::{held, Held};
use crate::server::reply::{self, Field};
use crate::server::{config, ephemeral, lockops, locks, state, stats, waiting, writable};

pub fn acquire(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::parse_acquire(argv)?;
    let ttl_ms = settings::check_ttl(req.ttl_ms, config::max_ttl_ms())?;
    let bind_to = match req.ephemeral {
        false => None,
        true => match ffi::client_id(ctx) {
            id if ffi::is_connection(id) && !ffi::in_script(ctx) => Some(id),
            _ => return Err(LockError::EphemeralWithoutConnection),
        },
    };
    // Checked before the key is looked at: a TTL that overflows once added
    // to the clock is an argument error, whoever holds the lock.
    let now = ffi::now_ms();
    let expire_at = lock::expiry_at(now, ttl_ms).ok_or(LockError::InvalidTtl)?;
    let name = &call.key();
    let mut key = locks::open_live(ctx, name);
    let generated;
    let (token, given) = match req.token {
        TokenArg::Given(t) => (t, Some(t)),
        TokenArg::Generate => {
            generated = token::generate();
            (&generated[..], None)
        }
    };
    let decide = |key: &LockKey, queued: bool| -> Result<Decision, LockError> {
        let h = held(key)?;
        let holding = given.and_then(|t| h.holding(t, now));
        Ok(grant::decide_newcomer(
            h.occupancy(),
            req.want,
            holding,
            queued,
        ))
    };
    let mut decision = decide(&key, false)?;
    if decision == Decision::Grant && waiting::count(ctx, name) > 0 {
        // Room was freed where it could not be handed on at once (a key
        // event, a lease end): the waiters get it first, not this newcomer.
        drop(key);
        locks::serve(ctx, name);
        key = LockKey::open(ctx, name, true);
        decision = decide(&key, waiting::count(ctx, name) > 0)?;
    }
    let fence = match decision {
        Decision::Mismatch(kind) => return Err(kind.mismatch()),
        Decision::OtherMode => return Err(LockError::OtherMode),
        Decision::Busy => {
            return Ok(match req.block_ms {
                Some(timeout) if ffi::may_block(call.flags()) => {
                    let held_until = || held(&key).ok().and_then(|h| h.next_change(&key));
                    let timeout = settings::block_timeout(timeout, config::max_block_ms());
                    let request = waiting::Request::new(token, req.want, ttl_ms, bind_to, req.data);
                    if waiting::block(ctx, name, request, timeout, held_until) {
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
        decision => {
            let grant = locks::Grant {
                token,
                want: req.want,
                expire_at,
                now,
                bind_to,
                data: req.data,
                event: c"lock.acquired",
            };
            let fence = locks::carry_out(ctx, name, key, decision, &grant)?;
            match decision {
                Decision::Regrant => stats::REGRANTS.bump(),
                _ => stats::GRANTS.bump(),
            }
            fence
        }
    };
    Ok(reply::grant(ctx, token, fence))
}

pub fn release(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::parse_release(argv)?;
    let name = &call.key();
    let key = LockKey::open(ctx, name, true);
    let h = held(&key)?;
    let Some(_) = h.fence_of(req.token, ffi::now_ms()) else {
        stats::RELEASES_NOT_OWNER.bump();
        return Ok(RedisValue::Integer(0));
    };
    stats::RELEASES.bump();
    let multi = matches!(h, Held::Multi(_));
    locks::release(ctx, name, key, req.token, multi);
    Ok(RedisValue::Integer(1))
}

pub fn extend(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::parse_extend(argv)?;
    let ttl_ms = settings::check_ttl(req.ttl_ms, config::max_ttl_ms())?;
    let expire_at = lock::expiry_at(ffi::now_ms(), ttl_ms).ok_or(LockError::InvalidTtl)?;
    let name = &call.key();
    let key = LockKey::open(ctx, name, true);
    let h = held(&key)?;
    if h.fence_of(req.token, ffi::now_ms()).is_none() {
        stats::EXTENDS_NOT_OWNER.bump();
        return Ok(RedisValue::Integer(0));
    }
    let multi = matches!(h, Held::Multi(_));
    locks::extend(ctx, name, key, req.token, multi, expire_at);
    stats::EXTENDS.bump();
    Ok(RedisValue::Integer(1))
}

/// What `LOCK.INFO` shows for a token to a caller who may not write the key.
const HIDDEN: &[u8] = b"(hidden)";

fn shown_token(may_see: bool, token: &[u8]) -> &[u8] {
    match may_see {
        true => token,
        false => HIDDEN,
    }
}

pub fn info(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    args::parse_info(argv)?;
    let name = &call.key();
    let key = LockKey::open(ctx, name, false);
    if let Some(highest) = key.gate() {
        return Ok(reply::fields(
            ctx,
            &[
                ("mode", Field::Bytes(b"gate")),
                ("fence", Field::Int(highest as i64)),
            ],
        ));
    }
    let id = ffi::lock_id(ctx, argv[1]);
    // Tokens are credentials: shown only to a caller who could release the
    // lock with them (command rules and key patterns, as for LOCK.RELEASE).
    let may_see = ffi::caller_may_run(ctx, &[b"lock.release", argv[1], b"*"]);
    let shown = |token| shown_token(may_see, token);
    let now = ffi::now_ms();
    let ttl = key.ttl_ms().unwrap_or(-1);
    let waiters = Field::Int(waiting::count(ctx, argv[1]) as i64);
    // A hold whose connection closed is gone, though its release may still
    // be to come; while the server's state holds writes back, it stays.
    let gone = |token: &[u8], fence: u64| {
        ephemeral::orphans() > 0
            && ephemeral::is_orphan(&id, token, fence)
            && writable::may_write(ctx).is_ok()
    };
    match held(&key)? {
        Held::Free => Ok(RedisValue::Null),
        Held::Exclusive(lock) if gone(lock.token(), lock.fence()) => Ok(RedisValue::Null),
        Held::Exclusive(lock) => {
            let client = ephemeral::client_of(&id, lock.token(), lock.fence()) as i64;
            // Public data is shown to every reader, and only when there is some.
            let data = || lock.data().map(|d| ("data", Field::Bytes(d)));
            let mut holder = vec![
                ("token", Field::Bytes(shown(lock.token()))),
                ("fence", Field::Int(lock.fence() as i64)),
                ("ttl", Field::Int(ttl)),
                ("client", Field::Int(client)),
            ];
            holder.extend(data());
            let mut fields = vec![
                ("token", Field::Bytes(shown(lock.token()))),
                ("fence", Field::Int(lock.fence() as i64)),
                ("ttl", Field::Int(ttl)),
                ("waiters", waiters),
                ("mode", Field::Bytes(b"exclusive")),
                ("client", Field::Int(client)),
            ];
            fields.extend(data());
            let holders: [&[(&str, Field)]; 1] = [&holder];
            fields.push(("holders", Field::Maps(&holders)));
            Ok(reply::fields(ctx, &fields))
        }
        Held::Multi(h) => {
            let live: Vec<_> = h
                .by_fence()
                .into_iter()
                .filter(|(token, x, _)| !holders::ended(x.expire_at, now) && !gone(token, x.fence))
                .map(|(token, x, data)| {
                    let client = ephemeral::client_of(&id, token, x.fence) as i64;
                    let mut holder = vec![
                        ("token", Field::Bytes(shown(token))),
                        ("fence", Field::Int(x.fence as i64)),
                        ("ttl", Field::Int(x.expire_at.saturating_sub(now))),
                        ("client", Field::Int(client)),
                    ];
                    // Public data is shown to every reader, when there is some.
                    holder.extend(data.map(|d| ("data", Field::Bytes(d))));
                    holder
                })
                .collect();
            let maps: Vec<&[(&str, Field)]> = live.iter().map(|m| &m[..]).collect();
            let (mode, limit): (&[u8], _) = match h.kind() {
                holders::Kind::Shared => (b"shared", None),
                holders::Kind::Semaphore { limit } => (b"semaphore", Some(limit)),
            };
            let mut fields = vec![("mode", Field::Bytes(mode))];
            if let Some(limit) = limit {
                fields.push(("limit", Field::Int(i64::from(limit))));
            }
            fields.extend([
                ("ttl", Field::Int(ttl)),
                ("waiters", waiters),
                ("holders", Field::Maps(&maps)),
            ]);
            Ok(reply::fields(ctx, &fields))
        }
    }
}

/// `LOCK.OBSERVE key [AFTER fence] [SEEN data] [BLOCK timeout]`:
/// `[fence, data]` of the key's holder (of its live holder with the highest
/// fence for shared locks and semaphores), `[0, nil]` without one. With
/// `AFTER` a holder the caller saw already (the same fence, and with `SEEN`
/// the same data) answers nil, or with `BLOCK` waits until that differs.
pub fn observe(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::observe::parse(argv)?;
    let name = &call.key();
    let key = LockKey::open(ctx, name, false);
    let now = ffi::now_ms();
    let h = held(&key)?;
    let (fence, data) = h.observed(now);
    let saw = match req.saw() {
        Some(saw) if !saw.differs(fence, data) => saw,
        _ => return Ok(reply::observed(ctx, fence, data)),
    };
    let Some(timeout) = req.block_ms.filter(|_| ffi::may_block(call.flags())) else {
        return Ok(RedisValue::Null);
    };
    let ends = h.next_change(&key);
    drop(key);
    let timeout = settings::block_timeout(timeout, config::max_block_ms());
    match locks::observe(ctx, name, saw, timeout, ends) {
        true => Ok(RedisValue::NoReply),
        false => Ok(RedisValue::Null),
    }
}

/// Replays one holder's effect exactly as the master (or the AOF) recorded
/// it. Internal, like `LOCK._APPLY`; versioned, so a newer master's effect
/// is refused by an older module rather than misread.
pub fn apply_hold(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    if !ffi::from_master_or_aof(ctx) {
        return Err(LockError::InternalCommand);
    }
    let effect = effects::parse_hold(argv)?;
    locks::replay_hold(ctx, &call.key(), effect)?;
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// Rebuilds a grant exactly as the master (or the AOF) recorded it. Only the
/// master link and AOF loading may use it: anyone else could forge a lock
/// with any owner and fence.
pub fn apply(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    if !ffi::from_master_or_aof(ctx) {
        return Err(LockError::InternalCommand);
    }
    let req = effects::parse_apply(argv)?;
    let key = LockKey::open(ctx, &call.key(), true);
    let lock = LockRef::new(req.token, req.fence).with_data(req.data);
    lockops::replay_grant(ctx, key, lock, req.expire_at_ms)?;
    locks::replayed(ctx, &call.key());
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// Records the fence epoch a master reached on promotion. Internal, like
/// `LOCK._APPLY`.
pub fn epoch(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    if !ffi::from_master_or_aof(ctx) {
        return Err(LockError::InternalCommand);
    }
    let epoch = effects::parse_epoch(argv)?;
    state::with_clock(|c| c.observe_epoch(epoch));
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
