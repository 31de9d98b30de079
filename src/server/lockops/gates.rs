//! Writes of a fence gate (`LOCK.FENCE`): its highest fence raised after a
//! guarded command, or replayed.

use redis_module::{Context, RedisString};

use crate::core::errors::LockError;
use crate::core::lock::LockRef;
use crate::server::ffi::{self, KeyKind, LockKey};

/// Raises the fence gate `name` to `fence` after a command it guarded ran,
/// unless the key moved on meanwhile (a higher gate, or another type the
/// command itself put under the name).
pub fn raise_gate(ctx: &Context, name: &RedisString, mut key: LockKey, fence: u64) {
    let may_set = match key.kind() {
        KeyKind::Empty => true,
        KeyKind::Lock => key.lock().is_some_and(|g| g.is_gate() && g.fence() < fence),
        KeyKind::Other => false,
    };
    if may_set && key.set_lock(LockRef::gate(fence)) {
        drop(key);
        ffi::replicate_gate(ctx, name, fence);
    }
}

/// Stores a gate's highest fence as the master (or the AOF) recorded it,
/// and passes the effect on as it came.
pub fn replay_gate(ctx: &Context, mut key: LockKey, fence: u64) -> Result<(), LockError> {
    match key.kind() {
        KeyKind::Other => return Err(LockError::WrongType),
        KeyKind::Lock if key.gate().is_none() => return Err(LockError::LockNotGate),
        _ => {}
    }
    if !key.set_lock(LockRef::gate(fence)) {
        return Err(LockError::Internal);
    }
    drop(key);
    ctx.replicate_verbatim();
    Ok(())
}
