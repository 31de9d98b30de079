//! The few Redis module API calls the `redis-module` crate does not wrap,
//! each behind a small safe function, one file per concern: keys, effects
//! propagated to replicas and the AOF, blocking, events, timers. A leaf: it
//! uses the core and nothing else of the server layer. Outside this folder
//! the raw API appears only where Redis calls us (callback signatures, the
//! values and strings it hands to them) and in the registration of the
//! command docs (`command_docs.rs`).

mod acl;
mod blocking;
mod call;
mod events;
mod filter;
mod io;
mod key;
mod propagate;
mod propagate_holders;
mod timer;

pub use acl::*;
pub use blocking::*;
pub use call::*;
pub use events::*;
pub use filter::*;
pub use io::*;
pub use key::*;
pub use propagate::*;
pub use propagate_holders::*;
pub use timer::*;

use std::ffi::{c_int, CStr};

use redis_module::{raw, Context};

/// Redis's clock, in Unix milliseconds.
pub fn now_ms() -> i64 {
    // SAFETY: takes no arguments and only reads the clock.
    unsafe { raw::RedisModule_Milliseconds.unwrap()() }
}

/// Whether the current command came from the master link or the AOF.
pub fn from_master_or_aof(ctx: &Context) -> bool {
    use redis_module::ContextFlags;
    let flags = ctx.get_flags();
    flags.contains(ContextFlags::REPLICATED) || flags.contains(ContextFlags::LOADING)
}

/// The database the context works on.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: `ctx` is a live context.
    unsafe { raw::RedisModule_GetSelectedDb.unwrap()(ctx.ctx) }
}

/// A lock by database and key name.
pub use crate::core::bindings::LockId;

/// The lock `name` in the context's database.
pub fn lock_id(ctx: &Context, name: &[u8]) -> LockId {
    LockId::new(selected_db(ctx), name)
}

/// Points a context (a timer's, say) at database `db`.
#[must_use]
pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: `ctx` is a live context; Redis checks the index.
    unsafe { raw::RedisModule_SelectDb.unwrap()(ctx.ctx, db) == raw::REDISMODULE_OK as c_int }
}

/// Whether Redis calls the command only to learn its keys (a command
/// registered with `getkeys-api`: Cluster routing, ACL key patterns,
/// `COMMAND GETKEYS`).
pub fn keys_position_request(ctx: &Context) -> bool {
    // SAFETY: `ctx` is the live context of a command call.
    unsafe { raw::RedisModule_IsKeysPositionRequest.unwrap()(ctx.ctx) != 0 }
}

/// Tells Redis that argument `at` is a key, in answer to a keys position
/// request.
pub fn key_at(ctx: &Context, at: c_int) {
    // SAFETY: `ctx` is the live context of a keys position request.
    unsafe { raw::RedisModule_KeyAtPos.unwrap()(ctx.ctx, at) }
}

/// Registers a command; false if Redis refused.
#[must_use]
pub fn create_command(
    ctx: &Context,
    name: &CStr,
    callback: CommandCallback,
    flags: &CStr,
    first_key: c_int,
    last_key: c_int,
    key_step: c_int,
) -> bool {
    // SAFETY: `ctx` is the module's load context; the strings are C strings
    // and the callback has the signature Redis calls.
    let status = unsafe {
        raw::RedisModule_CreateCommand.unwrap()(
            ctx.ctx,
            name.as_ptr(),
            Some(callback),
            flags.as_ptr(),
            first_key,
            last_key,
            key_step,
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// A context detached from any client, valid until the module unloads.
pub fn detached_context(ctx: &Context) -> *mut raw::RedisModuleCtx {
    // SAFETY: `ctx` is the module's load context.
    unsafe { raw::RedisModule_GetDetachedThreadSafeContext.unwrap()(ctx.ctx) }
}

/// Hides argument `pos` of the current command from `SLOWLOG` and `MONITOR`
/// (tokens are credentials). Replication still sees the real argument.
pub fn redact_arg(ctx: &Context, pos: c_int) {
    // SAFETY: `ctx` is a command's context; Redis checks `pos` against argc.
    unsafe { raw::RedisModule_RedactClientCommandArgument.unwrap()(ctx.ctx, pos) };
}

/// True while clients are paused (`CLIENT PAUSE WRITE|ALL`, `FAILOVER`, a
/// graceful `SHUTDOWN` waiting for replicas): the module must write nothing.
pub fn writes_paused() -> bool {
    // SAFETY: takes no arguments and only reads server state.
    unsafe { raw::RedisModule_AvoidReplicaTraffic.unwrap()() != 0 }
}

/// Lets `rdb_load` see short reads and bad data as errors to return,
/// instead of Redis aborting the server (a damaged `RESTORE` payload).
pub fn handle_io_errors(ctx: &Context) {
    // SAFETY: `ctx` is the module's load context.
    unsafe {
        raw::RedisModule_SetModuleOptions.unwrap()(
            ctx.ctx,
            raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int,
        )
    };
}
