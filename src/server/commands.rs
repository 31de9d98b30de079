//! The command handlers: parse, decide with the core rules, write the key,
//! replicate the effect, reply.
//!
//! Effects, not commands, are replicated: a grant travels as
//! `LOCK._APPLY key token fence unix-ms`, an extend as `PEXPIREAT`, a
//! release as `DEL`, so replicas and AOF replay rebuild the exact owner (a
//! generated token included), fence and absolute expiry. A promotion's new
//! fence epoch travels as `LOCK._EPOCH epoch`.

use redis_module::RedisValue;

use crate::core::args;
use crate::core::errors::LockError;
use crate::core::limits;
use crate::core::lock::{self, AcquireDecision, LockRef};
use crate::core::token::{self, TokenArg};
use crate::server::dispatch::{Call, Reply};
use crate::server::ffi::{self, KeyKind, LockKey};
use crate::server::reply::{self, Field};
use crate::server::{config, ephemeral, lockops, state, stats, waiting};

/// The lock on an open key, or WRONGTYPE if it holds something else (a
/// fence gate included).
fn current(key: &LockKey) -> Result<Option<LockRef<'_>>, LockError> {
    match key.kind() {
        KeyKind::Empty => Ok(None),
        KeyKind::Lock => match key.lock() {
            Some(l) if l.is_gate() => Err(LockError::GateNotLock),
            lock => Ok(lock),
        },
        KeyKind::Other => Err(LockError::WrongType),
    }
}

pub fn acquire(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::parse_acquire(argv)?;
    let ttl_ms = limits::check_ttl(req.ttl_ms, config::max_ttl_ms())?;
    // Checked before the key is looked at: a TTL that overflows once added
    // to the clock is an argument error, whoever holds the lock.
    let expire_at = lock::expiry_at(ffi::now_ms(), ttl_ms).ok_or(LockError::InvalidTtl)?;
    let name = &call.key();
    let mut key = LockKey::open(ctx, name, true);
    let generated;
    let (token, given) = match req.token {
        TokenArg::Given(t) => (t, Some(t)),
        TokenArg::Generate => {
            generated = token::generate();
            (&generated[..], None)
        }
    };
    let mut decision = lock::decide_acquire(current(&key)?, given);
    let bind_to = req.ephemeral.then(|| ffi::client_id(ctx));
    if decision == AcquireDecision::Grant && waiting::count(ctx, name) > 0 {
        // The lock was freed where it could not be handed on at once (a key
        // event): its first waiter gets it, not this newcomer.
        drop(key);
        waiting::serve(ctx, name);
        key = LockKey::open(ctx, name, true);
        decision = AcquireDecision::Busy;
    }
    let fence = match decision {
        AcquireDecision::Busy => {
            return Ok(match req.block_ms {
                Some(timeout) if ffi::may_block(ctx) => {
                    let held_until = key.expire_at();
                    drop(key);
                    let timeout = limits::block_timeout(timeout, config::max_block_ms());
                    waiting::block(ctx, name, token, ttl_ms, timeout, held_until, bind_to);
                    RedisValue::NoReply
                }
                _ => {
                    stats::REFUSED.bump();
                    RedisValue::Null
                }
            });
        }
        AcquireDecision::Regrant { fence } => {
            lockops::set_expiry(ctx, name, key, expire_at);
            stats::REGRANTS.bump();
            fence
        }
        AcquireDecision::Grant => {
            let fence = lockops::grant(ctx, name, key, token, expire_at, c"lock.acquired")?;
            stats::GRANTS.bump();
            fence
        }
    };
    // A (re-)grant with EPHEMERAL binds the hold to this connection; a
    // re-grant without it unbinds it.
    let id = waiting::lock_id(ctx, name);
    match bind_to {
        Some(client) => ephemeral::bind(id, client, token, fence),
        None => ephemeral::unbind(&id),
    }
    Ok(reply::grant(ctx, token, fence))
}

pub fn release(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::parse_release(argv)?;
    let name = &call.key();
    let key = LockKey::open(ctx, name, true);
    if !lock::owned_by(current(&key)?, req.token) {
        stats::RELEASES_NOT_OWNER.bump();
        return Ok(RedisValue::Integer(0));
    }
    stats::RELEASES.bump();
    lockops::release(ctx, name, key);
    Ok(RedisValue::Integer(1))
}

pub fn extend(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::parse_extend(argv)?;
    let ttl_ms = limits::check_ttl(req.ttl_ms, config::max_ttl_ms())?;
    let expire_at = lock::expiry_at(ffi::now_ms(), ttl_ms).ok_or(LockError::InvalidTtl)?;
    let name = &call.key();
    let key = LockKey::open(ctx, name, true);
    if !lock::owned_by(current(&key)?, req.token) {
        stats::EXTENDS_NOT_OWNER.bump();
        return Ok(RedisValue::Integer(0));
    }
    lockops::set_expiry(ctx, name, key, expire_at);
    stats::EXTENDS.bump();
    Ok(RedisValue::Integer(1))
}

pub fn info(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    args::parse_info(argv)?;
    let name = &call.key();
    let key = LockKey::open(ctx, name, false);
    let lock = match key.kind() {
        KeyKind::Empty => return Ok(RedisValue::Null),
        KeyKind::Other => return Err(LockError::WrongType),
        KeyKind::Lock => match key.lock() {
            Some(lock) => lock,
            None => return Ok(RedisValue::Null),
        },
    };
    if lock.is_gate() {
        return Ok(reply::fields(
            ctx,
            &[
                ("mode", Field::Bytes(b"gate")),
                ("fence", Field::Int(lock.fence() as i64)),
            ],
        ));
    }
    let ttl = key.ttl_ms().unwrap_or(-1);
    let client = ephemeral::client_of(&waiting::lock_id(ctx, argv[1]), lock.token(), lock.fence());
    Ok(reply::fields(
        ctx,
        &[
            ("token", Field::Bytes(lock.token())),
            ("fence", Field::Int(lock.fence() as i64)),
            ("ttl", Field::Int(ttl)),
            ("waiters", Field::Int(waiting::count(ctx, argv[1]) as i64)),
            ("mode", Field::Bytes(b"exclusive")),
            ("client", Field::Int(client as i64)),
        ],
    ))
}

/// Rebuilds a grant exactly as the master (or the AOF) recorded it. Only the
/// master link and AOF loading may use it: anyone else could forge a lock
/// with any owner and fence.
pub fn apply(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    if !ffi::from_master_or_aof(ctx) {
        return Err(LockError::InternalCommand);
    }
    let req = args::parse_apply(argv)?;
    let mut key = LockKey::open(ctx, &call.key(), true);
    current(&key)?;
    key.set_lock(LockRef::new(req.token, req.fence));
    if let Some(at) = req.expire_at_ms {
        key.set_expire_at(at);
    }
    state::with_clock(|c| c.observe(req.fence));
    // A replica's own AOF and sub-replicas get the effect as it came.
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// Records the fence epoch a master reached on promotion. Internal, like
/// `LOCK._APPLY`.
pub fn epoch(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    if !ffi::from_master_or_aof(ctx) {
        return Err(LockError::InternalCommand);
    }
    let epoch = args::parse_epoch(argv)?;
    state::with_clock(|c| c.observe_epoch(epoch));
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
