//! Server events: promotion, which moves the fence clock to a new epoch;
//! demotion, which ends every wait; a fork, which may start an AOF rewrite
//! that must learn the epoch; flushes and SWAPDB, which free or move
//! locks without any per-key event; closed connections, whose
//! `EPHEMERAL` holds go; and, for observers, the end of a load.

use std::ffi::c_void;

use redis_module::{raw, Context, ContextFlags};

use crate::server::scheduler::{self, Job};
use crate::server::{catch_panic, cluster, ephemeral, ffi, locks, state};

/// Subscribes to the events; false if Redis refused one.
pub fn subscribe(ctx: &Context) -> bool {
    ffi::subscribe_server_event(
        ctx,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        on_role_changed,
    ) && ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_FLUSHDB, on_flush)
        && ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_SWAPDB, on_swapdb)
        && ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_CLIENT_CHANGE, on_client_change)
        && ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_FORK_CHILD, on_fork)
        && ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_LOADING, on_loading)
}

/// A load started: what it reads is trusted. A load ended: what observers
/// watch may be anything now.
unsafe extern "C" fn on_loading(
    _ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    _d: *mut c_void,
) {
    catch_panic::callback((), || {
        if sub == raw::REDISMODULE_SUBEVENT_LOADING_ENDED
            || sub == raw::REDISMODULE_SUBEVENT_LOADING_FAILED
        {
            ffi::set_loading(false);
            locks::on_loaded();
        } else {
            ffi::set_loading(true);
        }
    })
}

/// An AOF rewrite writes the fence epoch with the first lock or gate it
/// rewrites, and an RDB preamble carries it in its aux data; a rewrite
/// without the preamble and without any lock would drop it, and a restart
/// would go back to epoch 0, below fences already handed out. The rewrite
/// runs in a child forked after the new incremental AOF was opened, so an
/// epoch record propagated now lands in a file the rewrite keeps.
unsafe extern "C" fn on_fork(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    _d: *mut c_void,
) {
    catch_panic::callback((), || {
        if sub != raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
            return;
        }
        let ctx = Context::new(ctx);
        let flags = ctx.get_flags();
        if !flags.contains(ContextFlags::AOF) || flags.contains(ContextFlags::SLAVE) {
            return;
        }
        let epoch = state::with_clock(|c| c.epoch);
        if epoch > 0 {
            scheduler::soon(&ctx, Job::Epoch(epoch));
        }
    })
}

unsafe extern "C" fn on_client_change(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    catch_panic::callback((), || {
        if sub != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED || ephemeral::count() == 0 {
            return;
        }
        // A connection closed: its holds are orphans from now on, released
        // by the scheduler in slices.
        if ephemeral::close(ffi::changed_client_id(data)) > 0 {
            scheduler::orphans_pending(&Context::new(ctx));
        }
    })
}

/// A promoted replica may have missed its old master's last grants, and the
/// old master may go on granting: a new epoch puts every fence from here on
/// above all of them. Its own replicas and AOF learn the epoch too, from the
/// scheduler, since the event itself is no place to propagate from.
unsafe extern "C" fn on_role_changed(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    _d: *mut c_void,
) {
    catch_panic::callback((), || {
        if sub != raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
            locks::on_demoted();
            return;
        }
        let ctx = Context::new(ctx);
        // In Cluster the promotion also gave this node a new config epoch.
        cluster::note_config_change();
        let (advanced, epoch) = state::with_clock(|c| (c.advance_epoch(), c.epoch));
        if advanced {
            ctx.log_notice(&format!("promoted to master: fence epoch is now {epoch}"));
        } else {
            ctx.log_warning(&format!(
                "promoted to master, but the fence epoch is at its maximum ({epoch}): \
                 fences may no longer exceed the old master's"
            ));
        }
        scheduler::soon(&ctx, Job::Epoch(epoch));
        scheduler::unpark(&ctx);
        locks::on_promoted();
    })
}

/// A flush frees every lock of the flushed database(s) at once.
unsafe extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    catch_panic::callback((), || {
        if sub == raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
            locks::on_flushed(ffi::flushed_db(data));
        }
    })
}

/// SWAPDB moves locks between databases without key events.
unsafe extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    _sub: u64,
    data: *mut c_void,
) {
    catch_panic::callback((), || {
        let (first, second) = ffi::swapped_dbs(data);
        locks::on_swapped(first, second);
    })
}
