//! Server events: those that move the fence clock to a new epoch, and
//! flushes, which free locks without any per-key event.

use std::ffi::c_void;

use redis_module::{raw, Context};

use crate::server::{ffi, guard, state, waiting};

/// Subscribes to the events; false if Redis refused one.
pub fn subscribe(ctx: &Context) -> bool {
    ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_LOADING, on_loading)
        && ffi::subscribe_server_event(
            ctx,
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            on_role_changed,
        )
        && ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_FLUSHDB, on_flush)
}

/// After any load (restart, `DEBUG RELOAD`, a replica's full sync) the data
/// may lack the last grants before a crash: start a new epoch above them.
unsafe extern "C" fn on_loading(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    _d: *mut c_void,
) {
    guard::callback((), || {
        if sub == raw::REDISMODULE_SUBEVENT_LOADING_ENDED {
            new_epoch(&Context::new(ctx), "data loaded");
        }
    })
}

/// A promoted replica may have missed its old master's last grants.
unsafe extern "C" fn on_role_changed(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    _d: *mut c_void,
) {
    guard::callback((), || {
        if sub == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
            new_epoch(&Context::new(ctx), "promoted to master");
        }
    })
}

fn new_epoch(ctx: &Context, why: &str) {
    let epoch = state::with_clock(|c| {
        c.advance_epoch();
        c.epoch
    });
    ctx.log_notice(&format!("fence epoch is now {epoch} ({why})"));
}

/// A flush frees every lock of the flushed database(s) at once.
unsafe extern "C" fn on_flush(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    guard::callback((), || {
        if sub == raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
            waiting::on_flushed(&Context::new(ctx), ffi::flushed_db(data));
        }
    })
}
