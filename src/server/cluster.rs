//! Redis Cluster awareness: handoffs, and fences that follow the nodes'
//! config epochs (below). A command reaches the node that
//! serves its key, but a handoff can start from expiry, a deletion or a
//! release while the key's slot is being migrated: granting then would
//! create a second lock on a node that no longer (or soon no longer)
//! serves the key. Such waiters are sent to retry instead.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis_module::{raw, Context, ContextFlags, RedisValue};

use crate::core::slot::{self, SlotState};
use crate::server::{catch_panic, ffi, state};

/// Whether this node may grant `key` to a waiter now: always outside
/// Cluster; in Cluster only if it serves the key's slot and is not
/// migrating it away. Asks `CLUSTER NODES`, so it costs a few tens of
/// microseconds, only on handoffs and only in Cluster.
pub fn may_hand_off_here(ctx: &Context, key: &[u8]) -> bool {
    slot_here(ctx, key) == SlotState::Owned
}

/// What this node does with `key`'s slot: always `Owned` outside Cluster;
/// `NotOwned` if `CLUSTER NODES` cannot be read.
pub fn slot_here(ctx: &Context, key: &[u8]) -> SlotState {
    if !ctx.get_flags().contains(ContextFlags::CLUSTER) {
        return SlotState::Owned;
    }
    let nodes = match ctx.call("CLUSTER", &["NODES"]) {
        Ok(RedisValue::SimpleString(s)) | Ok(RedisValue::BulkString(s)) => s,
        Ok(RedisValue::StringBuffer(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(RedisValue::VerbatimString((_, b))) => String::from_utf8_lossy(&b).into_owned(),
        _ => return SlotState::NotOwned,
    };
    slot::slot_state(&nodes, slot::key_slot(key))
}

// Fences follow the cluster's config epochs. Redis Cluster gives a node a
// config epoch above every other's when it takes over slots (`CLUSTER
// SETSLOT … NODE` on the importing node, a failover): a fence epoch raised
// to it puts every fence the node grants from then on above every fence
// granted for those slots before, on any node.

/// Whether this node's config epoch may have moved since it was last read:
/// after the load, a `CLUSTER` command, a promotion.
static CONFIG_CHANGED: AtomicBool = AtomicBool::new(true);
/// The cluster's current epoch (the highest config epoch) when last read.
static CURRENT_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Watches for `CLUSTER` commands, in Cluster only (the filter sees every
/// command, so it is not registered elsewhere). False if Redis refused.
pub fn watch_config_changes(ctx: &Context) -> bool {
    !ctx.get_flags().contains(ContextFlags::CLUSTER) || ffi::watch_commands(ctx, on_command)
}

unsafe extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    catch_panic::callback((), || {
        if ffi::filtered_command_name(fctx).eq_ignore_ascii_case(b"cluster") {
            note_config_change();
        }
    })
}

/// This node's config epoch may have moved (a `CLUSTER` command, a promotion).
pub fn note_config_change() {
    CONFIG_CHANGED.store(true, Ordering::Relaxed);
}

/// Before a fence is issued, in Cluster: raises the fence epoch to this
/// node's config epoch, read once after each change.
pub fn follow_config_epoch(ctx: &Context) {
    if !CONFIG_CHANGED.load(Ordering::Relaxed) {
        return;
    }
    if ctx.get_flags().contains(ContextFlags::CLUSTER) {
        read_epochs(ctx);
    } else {
        // Outside Cluster there is no config epoch to follow.
        CONFIG_CHANGED.store(false, Ordering::Relaxed);
    }
}

/// A restored fence looks ahead of what this node knows: in Cluster, reads
/// the epochs again (the cluster may have moved on since), and says whether
/// anything was read.
pub fn refresh_known_epoch() -> bool {
    match state::detached_context() {
        Some(ctx) if ctx.get_flags().contains(ContextFlags::CLUSTER) => read_epochs(&ctx),
        _ => false,
    }
}

fn read_epochs(ctx: &Context) -> bool {
    let info = match ctx.call("CLUSTER", &["INFO"]) {
        Ok(RedisValue::SimpleString(s)) | Ok(RedisValue::BulkString(s)) => s,
        Ok(RedisValue::StringBuffer(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(RedisValue::VerbatimString((_, b))) => String::from_utf8_lossy(&b).into_owned(),
        _ => return false,
    };
    let Some((mine, current)) = slot::cluster_epochs(&info) else {
        return false;
    };
    CONFIG_CHANGED.store(false, Ordering::Relaxed);
    CURRENT_EPOCH.fetch_max(current, Ordering::Relaxed);
    let epoch = state::with_clock(|c| {
        c.observe_epoch(mine);
        c.epoch
    });
    if mine > epoch {
        ctx.log_warning(&format!(
            "the cluster's config epoch {mine} is past the highest fence epoch ({epoch}): \
             fences no longer follow it"
        ));
    }
    true
}

/// The highest epoch another node of the cluster can have issued fences in,
/// as last read (0 outside Cluster).
pub fn known_epoch() -> u64 {
    CURRENT_EPOCH.load(Ordering::Relaxed)
}
