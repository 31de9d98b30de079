//! Whether the module may write on its own now: a handoff, a revoked grant
//! or an epoch record made from a timer rather than from a client's
//! command. Redis checks a command before running it; work that starts in a
//! timer must check the same server states itself, or it writes while
//! clients are paused (Redis aborts on that), on a replica, or while the
//! dataset is loading.

use redis_module::{Context, ContextFlags, RedisValue};

use crate::core::numbers;
use crate::server::ffi;

/// Why the module may not write now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotWritable {
    /// Clients are paused for writes (`CLIENT PAUSE`, `FAILOVER`, a
    /// graceful `SHUTDOWN` waiting for its replicas): retry once it ends.
    Paused,
    /// The dataset is loading: retry once it is loaded.
    Loading,
    /// Fewer good replicas than `min-replicas-to-write`: retry, as a client
    /// would after `NOREPLICAS`.
    NoReplicas,
    /// This server is a replica: it writes only what its master sends.
    Replica,
}

pub fn may_write(ctx: &Context) -> Result<(), NotWritable> {
    let flags = ctx.get_flags();
    if flags.contains(ContextFlags::SLAVE) {
        return Err(NotWritable::Replica);
    }
    if flags.contains(ContextFlags::LOADING) || flags.contains(ContextFlags::ASYNC_LOADING) {
        return Err(NotWritable::Loading);
    }
    if ffi::writes_paused() {
        return Err(NotWritable::Paused);
    }
    if too_few_replicas(ctx) {
        return Err(NotWritable::NoReplicas);
    }
    Ok(())
}

/// `min-replicas-to-write` unmet. INFO shows `min_slaves_good_slaves` only
/// when the setting is on, so without it this costs one INFO field lookup.
fn too_few_replicas(ctx: &Context) -> bool {
    let Some(good) = ctx
        .server_info("replication")
        .field("min_slaves_good_slaves")
        .and_then(|v| numbers::parse_i64(v.as_slice()))
    else {
        return false;
    };
    let wanted = match ctx.call("CONFIG", &["GET", "min-replicas-to-write"]) {
        Ok(RedisValue::Array(items)) => items.get(1).and_then(|v| match v {
            RedisValue::SimpleString(s) | RedisValue::BulkString(s) => s.parse::<i64>().ok(),
            RedisValue::BulkRedisString(s) => numbers::parse_i64(s.as_slice()),
            RedisValue::StringBuffer(b) => numbers::parse_i64(b),
            _ => None,
        }),
        _ => None,
    };
    wanted.is_some_and(|w| good < w)
}
