//! Redis Cluster awareness for handoffs. A command reaches the node that
//! serves its key, but a handoff can start from expiry, a deletion or a
//! release while the key's slot is being migrated: granting then would
//! create a second lock on a node that no longer (or soon no longer)
//! serves the key. Such waiters are sent to retry instead.

use redis_module::{Context, ContextFlags, RedisValue};

use crate::core::slot::{self, SlotState};

/// Whether this node may grant `key` to a waiter now: always outside
/// Cluster; in Cluster only if it serves the key's slot and is not
/// migrating it away. Asks `CLUSTER NODES`, so it costs a few tens of
/// microseconds, only on handoffs and only in Cluster.
pub fn may_hand_off_here(ctx: &Context, key: &[u8]) -> bool {
    if !ctx.get_flags().contains(ContextFlags::CLUSTER) {
        return true;
    }
    let nodes = match ctx.call("CLUSTER", &["NODES"]) {
        Ok(RedisValue::SimpleString(s)) | Ok(RedisValue::BulkString(s)) => s,
        Ok(RedisValue::StringBuffer(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(RedisValue::VerbatimString((_, b))) => String::from_utf8_lossy(&b).into_owned(),
        _ => return false,
    };
    slot::slot_state(&nodes, slot::key_slot(key)) == SlotState::Owned
}
