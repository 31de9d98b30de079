//! What `rdb_load` needs beyond reading fields: who is loading, and a log
//! line about a refused value.

use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

/// Whether the server is loading its data (between the loading event's
/// start and its end): every value it reads then is trusted without
/// asking for a context and its flags, which costs more than reading the
/// value.
static LOADING: AtomicBool = AtomicBool::new(false);

/// The server's load started (true) or ended (false).
pub fn set_loading(loading: bool) {
    LOADING.store(loading, Ordering::Relaxed);
}

/// Whether the server is loading its data (startup, AOF replay, a full
/// sync, `DEBUG RELOAD`): from the loading event, with no call into Redis.
pub fn loading() -> bool {
    LOADING.load(Ordering::Relaxed)
}

/// Whether values now being read come from the server's own data (startup,
/// `DEBUG RELOAD`, a full sync or AOF replay, i.e. loading) or from its
/// master, rather than from a client's `RESTORE` payload.
pub fn io_is_trusted(io: *mut raw::RedisModuleIO) -> bool {
    if LOADING.load(Ordering::Relaxed) {
        return true;
    }
    // SAFETY: `io` comes from Redis's rdb_load callback; the context it
    // returns lives as long as the IO.
    let flags = unsafe {
        let ctx = raw::RedisModule_GetContextFromIO.unwrap()(io);
        raw::RedisModule_GetContextFlags.unwrap()(ctx)
    };
    let trusted = raw::REDISMODULE_CTX_FLAGS_LOADING
        | raw::REDISMODULE_CTX_FLAGS_ASYNC_LOADING
        | raw::REDISMODULE_CTX_FLAGS_SLAVE;
    flags & trusted as c_int != 0
}

/// Logs a warning about a value `rdb_load` refused.
pub fn log_io_warning(io: *mut raw::RedisModuleIO, message: &str) {
    let text: Vec<u8> = message.bytes().filter(|b| *b != 0).collect();
    let Ok(text) = CString::new(text) else {
        return;
    };
    // SAFETY: `io` comes from Redis's rdb_load callback; "%s" matches one C string.
    unsafe {
        raw::RedisModule_LogIOError.unwrap()(io, c"warning".as_ptr(), c"%s".as_ptr(), text.as_ptr())
    };
}

/// The database and name of the key whose value is being read, when Redis
/// tells (loading, `RESTORE`).
pub fn io_key(io: *mut raw::RedisModuleIO) -> Option<crate::core::lock_id::LockId> {
    // SAFETY: `io` comes from Redis's rdb_load callback. The functions exist
    // from Redis 7.0 on and may answer NULL (no key known); the name lives
    // as long as the IO and is copied at once.
    unsafe {
        let name = raw::RedisModule_GetKeyNameFromIO?(io);
        if name.is_null() {
            return None;
        }
        let db = raw::RedisModule_GetDbIdFromIO?(io);
        Some(crate::core::lock_id::LockId::new(
            db,
            redis_module::RedisString::string_as_slice(name),
        ))
    }
}
