//! Server events, keyspace events and notifications.

use std::ffi::{c_char, c_int, c_void, CStr};

use redis_module::{raw, Context, RedisString};

/// Signature of a server-event callback.
pub type ServerEventCallback =
    unsafe extern "C" fn(*mut raw::RedisModuleCtx, raw::RedisModuleEvent, u64, *mut c_void);

/// Subscribes to one server event; false if Redis refused.
#[must_use]
pub fn subscribe_server_event(ctx: &Context, event_id: u64, callback: ServerEventCallback) -> bool {
    let event = raw::RedisModuleEvent {
        id: event_id,
        dataver: 1,
    };
    // SAFETY: `ctx` is the module's load context; the callback has the
    // signature Redis calls.
    let status =
        unsafe { raw::RedisModule_SubscribeToServerEvent.unwrap()(ctx.ctx, event, Some(callback)) };
    status == raw::REDISMODULE_OK as c_int
}

/// The two databases of a SWAPDB server event.
pub fn swapped_dbs(data: *mut c_void) -> (i32, i32) {
    // SAFETY: Redis passes a `RedisModuleSwapDbInfo` with the SWAPDB event.
    let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
    (info.dbnum_first, info.dbnum_second)
}

/// Info about a flush from the FLUSHDB server event: the database, or -1 for all.
pub fn flushed_db(data: *mut c_void) -> i32 {
    // SAFETY: Redis passes a `RedisModuleFlushInfo` with the FLUSHDB event.
    unsafe { (*data.cast::<raw::RedisModuleFlushInfoV1>()).dbnum }
}

/// Raises a keyspace notification of the module class (`d` in
/// `notify-keyspace-events`) for a lock event such as `lock.acquired`.
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    // SAFETY: `ctx` is live, `event` a C string, `key` a live Redis string.
    unsafe {
        raw::RedisModule_NotifyKeyspaceEvent.unwrap()(
            ctx.ctx,
            raw::REDISMODULE_NOTIFY_MODULE as c_int,
            event.as_ptr(),
            key.inner,
        )
    };
}

/// Signature of a keyspace-event callback.
pub type KeyEventCallback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    c_int,
    *const c_char,
    *mut raw::RedisModuleString,
) -> c_int;

/// Subscribes to key events of the given classes; false if Redis refused.
#[must_use]
pub fn subscribe_key_events(
    ctx: &Context,
    classes: redis_module::NotifyEvent,
    callback: KeyEventCallback,
) -> bool {
    // SAFETY: `ctx` is the module's load context; the callback has the
    // signature Redis calls.
    let status = unsafe {
        raw::RedisModule_SubscribeToKeyspaceEvents.unwrap()(ctx.ctx, classes.bits(), Some(callback))
    };
    status == raw::REDISMODULE_OK as c_int
}

/// The database and name of the key an unlink2 callback is about.
pub fn unlinked_key<'a>(opt: *mut raw::RedisModuleKeyOptCtx) -> (i32, &'a [u8]) {
    // SAFETY: `opt` comes from Redis's unlink2 callback; the name lives as
    // long as the callback runs, which is as long as the caller uses it.
    unsafe {
        let db = raw::RedisModule_GetDbIdFromOptCtx.unwrap()(opt);
        let name = raw::RedisModule_GetKeyNameFromOptCtx.unwrap()(opt);
        (db, RedisString::string_as_slice(name))
    }
}

/// The id of the client a CLIENT_CHANGE server event is about.
pub fn changed_client_id(data: *mut c_void) -> u64 {
    // SAFETY: Redis passes a `RedisModuleClientInfo` with the CLIENT_CHANGE event.
    unsafe { (*data.cast::<raw::RedisModuleClientInfo>()).id }
}

/// The database and name a value is being copied to (`COPY`).
pub fn copy_target(opt: *mut raw::RedisModuleKeyOptCtx) -> crate::core::lock_id::LockId {
    // SAFETY: `opt` comes from Redis's copy2 callback; the name is copied
    // while the callback runs.
    unsafe {
        let db = raw::RedisModule_GetToDbIdFromOptCtx.unwrap()(opt);
        let name = raw::RedisModule_GetToKeyNameFromOptCtx.unwrap()(opt);
        crate::core::lock_id::LockId::new(db, RedisString::string_as_slice(name))
    }
}
