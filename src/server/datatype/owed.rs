//! Ends still owed, in RDB aux data (version 3 on): the holds of
//! connections that closed while the module could write nothing (a client
//! pause), not released yet. A file saved then carries them, and loading it
//! owes them again, so a restart or `DEBUG RELOAD` never brings back as
//! live a hold that had already ended. A replica loads none: its master
//! releases them and sends the release.

use redis_module::{raw, ContextFlags};

use crate::core::bindings::LockId;
use crate::server::{ephemeral, scheduler, state};

/// Writes the ends owed now: their count, then each lock's database and
/// name, the token and the fence of the grant.
pub fn save(rdb: *mut raw::RedisModuleIO) {
    let owed = ephemeral::owed();
    raw::save_unsigned(rdb, owed.len() as u64);
    for (lock, token, fence) in owed {
        raw::save_unsigned(rdb, lock.db() as u64);
        raw::save_slice(rdb, lock.name());
        raw::save_slice(rdb, &token);
        raw::save_unsigned(rdb, fence);
    }
}

/// Reads what `save` wrote; None if the data is cut short.
pub fn load(rdb: *mut raw::RedisModuleIO) -> Option<Vec<(LockId, Vec<u8>, u64)>> {
    let n = raw::load_unsigned(rdb).ok()?;
    let mut owed = Vec::new();
    for _ in 0..n {
        let db = i32::try_from(raw::load_unsigned(rdb).ok()?).ok()?;
        let name = raw::load_string_buffer(rdb).ok()?;
        let token = raw::load_string_buffer(rdb).ok()?;
        let fence = raw::load_unsigned(rdb).ok()?;
        owed.push((
            LockId::new(db, name.as_ref()),
            token.as_ref().to_vec(),
            fence,
        ));
    }
    Some(owed)
}

/// The ends a loaded file owes are owed by this server, unless it is a
/// replica.
pub fn restore(owed: Vec<(LockId, Vec<u8>, u64)>) {
    let Some(ctx) = state::detached_context() else {
        return;
    };
    if owed.is_empty() || ctx.get_flags().contains(ContextFlags::SLAVE) {
        return;
    }
    if ephemeral::restore_owed(owed) > 0 {
        scheduler::orphans_pending(&ctx);
    }
}
