//! Guarded writes: `LOCK.CALL` runs a command only for the lock's holder,
//! `LOCK.FENCE` only for a fence not older than the highest its gate key
//! accepted — each in the same atomic step as the check.
//!
//! The inner command runs through `RedisModule_Call` as the calling user
//! (ACL on commands and keys), refused for memory like a client's command,
//! in script mode (nothing that cannot run inside another command), and
//! with its effects replicated; Redis wraps them with ours in MULTI/EXEC.
//! In Cluster every key of the inner command must be in the slot of the
//! lock (or gate) key, so the check and the write happen on one node.

use std::cell::RefCell;
use std::collections::HashMap;

use redis_module::RedisValue;

use crate::core::args;
use crate::core::effects;
use crate::core::errors::LockError;
use crate::core::lock::{self, GateDecision};
use crate::core::slot;
use crate::server::command::{Call, Reply};
use crate::server::ffi::{self, KeyKind, LockKey};
use crate::server::{held, lockops, stats};

pub fn call(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::parse_call(argv)?;
    let name = call.key();
    let key = LockKey::open(ctx, &name, false);
    // Any kind of hold: exclusive, shared or a semaphore place.
    let held = held::held(&key)?
        .fence_of(req.token, ffi::now_ms())
        .is_some();
    drop(key);
    if !held {
        stats::CALLS_NOT_OWNER.bump();
        return Err(LockError::NotOwner);
    }
    check_command(call, req.command_at)?;
    stats::CALLS.bump();
    run(call, req.command_at)?;
    Ok(RedisValue::NoReply)
}

pub fn fence(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    let req = args::parse_fence(argv)?;
    let name = call.key();
    let key = LockKey::open(ctx, &name, false);
    let decision = match key.kind() {
        KeyKind::Empty => lock::decide_gate(None, req.fence),
        KeyKind::Lock => match key.lock() {
            Some(g) if g.is_gate() => lock::decide_gate(Some(g), req.fence),
            _ => return Err(LockError::LockNotGate),
        },
        KeyKind::Other => return Err(LockError::WrongType),
    };
    drop(key);
    let raise = match decision {
        GateDecision::Stale { highest } => {
            stats::FENCES_STALE.bump();
            return Err(LockError::StaleFence(req.fence, highest));
        }
        GateDecision::Accept { raise } => raise,
    };
    check_command(call, req.command_at)?;
    stats::FENCES_ACCEPTED.bump();
    let ran = run(call, req.command_at)?;
    // The gate moves only for a command that ran: one refused (ACL, memory,
    // an error of its own) leaves everything as it was.
    if raise && ran {
        let key = LockKey::open(ctx, &name, true);
        lockops::raise_gate(ctx, &name, key, req.fence);
    }
    Ok(RedisValue::NoReply)
}

/// Refuses what must not run inside a guard: the module's own commands, and
/// in Cluster any key outside the guard key's slot, or not served here while
/// the slot migrates.
fn check_command(call: &Call, at: usize) -> Result<(), LockError> {
    let command = call.argv[at];
    if command.len() >= 5 && command[..5].eq_ignore_ascii_case(b"lock.") || may_block(call, command)
    {
        return Err(LockError::CannotCall(printable(command)));
    }
    if call
        .ctx
        .get_flags()
        .contains(redis_module::ContextFlags::CLUSTER)
    {
        let inner = &call.raw_args()[at..];
        let home = slot::key_slot(call.argv[1]);
        let mut keys = ffi::command_keys(call.ctx, inner);
        // A shard channel lives in a slot like a key, but Redis's key specs
        // do not count it as one.
        if command.eq_ignore_ascii_case(b"spublish") {
            keys.push(1);
        }
        if keys
            .iter()
            .filter_map(|&p| call.argv.get(at + p))
            .any(|k| slot::key_slot(k) != home)
        {
            return Err(LockError::CrossSlot);
        }
        // While the slot migrates, the guard key and the inner command's
        // keys may sit on two nodes: the command must not run here (it would
        // write a key that still lives on the other node), but be retried.
        let raw = call.raw_args();
        let mut served: Vec<_> = vec![raw[1]];
        if !command.eq_ignore_ascii_case(b"spublish") {
            served.extend(keys.iter().filter_map(|&p| raw.get(at + p)));
        }
        if !ffi::keys_served_here(call.ctx, &served) {
            return Err(LockError::SlotSplit);
        }
    }
    Ok(())
}

thread_local! {
    /// Whether a known command may block, by lower-case name. Bounded by the
    /// server's command table: unknown names are not remembered.
    static BLOCKING: RefCell<HashMap<Vec<u8>, bool>> = RefCell::new(HashMap::new());
}

/// Whether `command` is flagged as possibly blocking (`BLPOP`, `XREAD`,
/// `WAIT`, …): script mode refuses them on Redis 7.0 but runs them on newer
/// servers, and a guard never waits.
fn may_block(call: &Call, command: &[u8]) -> bool {
    let name = command.to_ascii_lowercase();
    if let Some(known) = BLOCKING.with(|b| b.borrow().get(&name).copied()) {
        return known;
    }
    let Ok(text) = std::str::from_utf8(&name) else {
        return false;
    };
    let flags = match call.ctx.call("COMMAND", &["INFO", text]) {
        Ok(RedisValue::Array(entries)) => match entries.into_iter().next() {
            Some(RedisValue::Array(info)) => info.into_iter().nth(2),
            _ => None,
        },
        _ => None,
    };
    let Some(RedisValue::Array(flags)) = flags else {
        return false;
    };
    let blocking = flags.iter().any(|f| match f {
        RedisValue::SimpleString(s) | RedisValue::BulkString(s) => s == "blocking",
        RedisValue::SimpleStringStatic(s) => *s == "blocking",
        _ => false,
    });
    BLOCKING.with(|b| b.borrow_mut().insert(name, blocking));
    blocking
}

/// Runs the inner command and forwards its reply; whether it ran without
/// an error.
fn run(call: &Call, at: usize) -> Result<bool, LockError> {
    let reply = ffi::call(call.ctx, &call.raw_args()[at..])
        .ok_or_else(|| LockError::CannotCall(printable(call.argv[at])))?;
    // Redis 7.0 words an ACL refusal inside a call as `ERR acl verification
    // failed…`; the client gets the NOPERM it would get sending the command.
    if reply
        .error_text()
        .is_some_and(|t| t.starts_with(b"ERR acl verification failed"))
    {
        return Err(LockError::NoPermission(printable(call.argv[at])));
    }
    if !reply.forward(call.ctx) {
        return Err(LockError::ReplyNotForwarded(printable(call.argv[at])));
    }
    Ok(!reply.is_error())
}

fn printable(name: &[u8]) -> String {
    name.iter()
        .take(64)
        .map(|&b| {
            if b.is_ascii_graphic() {
                b.to_ascii_lowercase() as char
            } else {
                '?'
            }
        })
        .collect()
}

/// Rebuilds a gate's highest fence as the master (or the AOF) recorded it.
/// Internal: only the master link and AOF loading may use it.
pub fn apply_gate(call: &Call) -> Reply {
    let (ctx, argv) = (call.ctx, call.argv);
    if !ffi::from_master_or_aof(ctx) {
        return Err(LockError::InternalCommand);
    }
    let fence = effects::parse_gate_apply(argv)?;
    let key = LockKey::open(ctx, &call.key(), true);
    lockops::replay_gate(ctx, key, fence)?;
    Ok(RedisValue::SimpleStringStatic("OK"))
}
