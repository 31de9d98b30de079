//! The few Redis module API calls the `redis-module` crate does not wrap
//! (absolute expiry, replication and AOF with a format string, digests,
//! server events), each behind a small safe function. All raw access to a
//! key's value also lives here, in [`LockKey`].

use std::ffi::{c_char, c_int, c_void, CStr};

use redis_module::{raw, Context, RedisString};

use crate::core::args;
use crate::core::lock::LockRef;
use crate::core::record::Record;
use crate::server::datatype::LOCK_TYPE;
use crate::server::stats;

/// `REDISMODULE_NO_EXPIRE`: what the expiry getters answer for a key without one.
const NO_EXPIRE: i64 = -1;

/// What an opened key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    Lock,
    Other,
}

/// An open key, closed on drop. Redis answers NULL for a missing key opened
/// read-only; that is kept as a null pointer and reads as an empty key.
pub struct LockKey {
    ptr: *mut raw::RedisModuleKey,
}

impl LockKey {
    /// Opens `name` for reading, or for reading and writing.
    pub fn open(ctx: &Context, name: &RedisString, write: bool) -> LockKey {
        let mode = if write {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        LockKey {
            ptr: raw::open_key(ctx.ctx, name.inner, mode),
        }
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.ptr
    }

    pub fn kind(&self) -> KeyKind {
        let key = self.raw();
        if key.is_null() {
            return KeyKind::Empty;
        }
        // SAFETY: `key` is an open key of this context.
        let key_type = unsafe { raw::RedisModule_KeyType.unwrap()(key) };
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            KeyKind::Empty
        } else if key_type == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            // SAFETY: `key` is an open key holding a module value.
            && unsafe { raw::RedisModule_ModuleTypeGetType.unwrap()(key) } == *LOCK_TYPE.raw_type.borrow()
        {
            KeyKind::Lock
        } else {
            KeyKind::Other
        }
    }

    /// The lock stored here, if the key holds one.
    pub fn lock(&self) -> Option<LockRef<'_>> {
        if self.kind() != KeyKind::Lock {
            return None;
        }
        // SAFETY: the key holds a value of our type, which is always a
        // `Record`; the view cannot outlive the open key.
        Some(unsafe {
            Record::borrow_raw(raw::RedisModule_ModuleTypeGetValue.unwrap()(self.raw()))
        })
    }

    /// Stores a lock, replacing whatever the key held. The key must be open
    /// for writing and hold nothing or a lock.
    pub fn set_lock(&mut self, lock: LockRef<'_>) -> bool {
        let key = self.raw();
        if key.is_null() {
            return false;
        }
        let value = Record::new(lock).into_raw();
        // SAFETY: the key is open for writing; Redis takes ownership of the
        // record and hands it back to `datatype::free`.
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.unwrap()(key, *LOCK_TYPE.raw_type.borrow(), value)
        };
        if status != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis refused the value, so it is still ours to free.
            drop(unsafe { Record::from_raw(value) });
            return false;
        }
        stats::record_created();
        true
    }

    pub fn delete(&mut self) {
        if !self.raw().is_null() {
            // SAFETY: the key is open for writing.
            unsafe { raw::RedisModule_DeleteKey.unwrap()(self.raw()) };
            // A deletion through the module API raises no key event.
            stats::forget_unlink();
        }
    }

    /// Sets the expiry to an absolute Unix time in milliseconds.
    pub fn set_expire_at(&mut self, unix_ms: i64) {
        if !self.raw().is_null() {
            // SAFETY: the key is open for writing and not empty.
            unsafe { raw::RedisModule_SetAbsExpire.unwrap()(self.raw(), unix_ms) };
        }
    }

    /// Absolute expiry in Unix milliseconds, if the key has one.
    pub fn expire_at(&self) -> Option<i64> {
        if self.raw().is_null() {
            return None;
        }
        // SAFETY: the key is open.
        let at = unsafe { raw::RedisModule_GetAbsExpire.unwrap()(self.raw()) };
        (at != NO_EXPIRE).then_some(at)
    }

    /// Remaining time to live in milliseconds, if the key has an expiry.
    pub fn ttl_ms(&self) -> Option<i64> {
        if self.raw().is_null() {
            return None;
        }
        // SAFETY: the key is open.
        let ttl = unsafe { raw::RedisModule_GetExpire.unwrap()(self.raw()) };
        (ttl != NO_EXPIRE).then_some(ttl)
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.raw().is_null() {
            raw::close_key(self.raw());
        }
    }
}

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

const APPLY: &CStr = c"LOCK._APPLY";

/// Propagates a grant to replicas and the AOF as its exact effect.
pub fn replicate_grant(ctx: &Context, key: &RedisString, token: &[u8], fence: u64, expire_at: i64) {
    // Numbers go as text formatted here: Redis's own conversion of "l"
    // arguments costs more than the rest of the call's argument handling.
    let (mut fence_buf, mut at_buf) = ([0u8; 20], [0u8; 20]);
    let fence = args::decimal(fence, &mut fence_buf);
    let at = args::decimal(expire_at.max(0) as u64, &mut at_buf);
    // SAFETY: the format "sbbb" matches the arguments: a Redis string, then
    // three buffers each with its length.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            APPLY.as_ptr(),
            c"sbbb".as_ptr(),
            key.inner,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            fence.as_ptr().cast::<c_char>(),
            fence.len(),
            at.as_ptr().cast::<c_char>(),
            at.len(),
        )
    };
}

/// Propagates a promoted master's new fence epoch.
pub fn replicate_epoch(ctx: &Context, epoch: u64) {
    // SAFETY: the format "l" matches one long long.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            c"LOCK._EPOCH".as_ptr(),
            c"l".as_ptr(),
            epoch as i64,
        )
    };
}

/// Propagates a new absolute expiry (re-grant, extend).
pub fn replicate_expire_at(ctx: &Context, key: &RedisString, expire_at: i64) {
    let mut at_buf = [0u8; 20];
    let at = args::decimal(expire_at.max(0) as u64, &mut at_buf);
    // SAFETY: the format "sb" matches a Redis string and a buffer with its length.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            c"PEXPIREAT".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            at.as_ptr().cast::<c_char>(),
            at.len(),
        )
    };
}

/// Propagates a release.
pub fn replicate_delete(ctx: &Context, key: &RedisString) {
    // SAFETY: the format "s" matches one Redis string.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.inner)
    };
}

/// Writes a lock to a rewritten AOF; Redis appends the key's `PEXPIREAT`.
pub fn emit_aof_grant(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    lock: LockRef<'_>,
) {
    let token = lock.token();
    // SAFETY: `aof` and `key` come from Redis's rewrite callback; the format
    // "sbl" matches a Redis string, a buffer with its length and a long long.
    unsafe {
        raw::RedisModule_EmitAOF.unwrap()(
            aof,
            APPLY.as_ptr(),
            c"sbl".as_ptr(),
            key,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            lock.fence() as i64,
        )
    };
}

/// Feeds one record into `DEBUG DIGEST-VALUE`.
pub fn digest_lock(md: *mut raw::RedisModuleDigest, lock: LockRef<'_>) {
    let token = lock.token();
    // SAFETY: `md` comes from Redis's digest callback; the buffer is valid
    // for its length.
    unsafe {
        raw::RedisModule_DigestAddStringBuffer.unwrap()(md, token.as_ptr().cast(), token.len());
        raw::RedisModule_DigestAddLongLong.unwrap()(md, lock.fence() as i64);
        raw::RedisModule_DigestAddLongLong.unwrap()(md, lock.mode().code() as i64);
        raw::RedisModule_DigestEndSequence.unwrap()(md);
    }
}

/// Signature of a server-event callback.
pub type ServerEventCallback =
    unsafe extern "C" fn(*mut raw::RedisModuleCtx, raw::RedisModuleEvent, u64, *mut c_void);

/// Subscribes to one server event; false if Redis refused.
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

/// The database the context works on.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: `ctx` is a live context.
    unsafe { raw::RedisModule_GetSelectedDb.unwrap()(ctx.ctx) }
}

/// Points a context (a timer's, say) at database `db`.
pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: `ctx` is a live context; Redis checks the index.
    unsafe { raw::RedisModule_SelectDb.unwrap()(ctx.ctx, db) == raw::REDISMODULE_OK as c_int }
}

/// Whether the current command may block its client (not in MULTI, a
/// script, or a command called from a module).
pub fn may_block(ctx: &Context) -> bool {
    use redis_module::ContextFlags;
    let flags = ctx.get_flags();
    !(flags.contains(ContextFlags::MULTI)
        || flags.contains(ContextFlags::LUA)
        || flags.contains(ContextFlags::DENY_BLOCKING))
}

/// A client blocked by this module, identified by its handle's address.
pub type BlockedHandle = usize;

/// Callback types of the blocking API.
pub type CommandCallback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;
pub type DisconnectCallback =
    unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut raw::RedisModuleBlockedClient);

/// Blocks the calling client with no Redis-side timeout; `on_unblock` runs
/// for `CLIENT UNBLOCK`.
pub fn block_client(
    ctx: &Context,
    on_reply: CommandCallback,
    on_unblock: CommandCallback,
    on_disconnect: DisconnectCallback,
) -> BlockedHandle {
    // SAFETY: `ctx` is the context of the command being blocked; the
    // callbacks have the signatures Redis calls; no private data is passed.
    unsafe {
        let bc = raw::RedisModule_BlockClient.unwrap()(
            ctx.ctx,
            Some(on_reply),
            Some(on_unblock),
            None,
            0,
        );
        raw::RedisModule_SetDisconnectCallback.unwrap()(bc, Some(on_disconnect));
        bc as BlockedHandle
    }
}

/// Releases a blocked client's handle; its reply callback then answers
/// (unless it disconnected). Called exactly once per handle: on grant, at
/// its deadline, or from the unblock or disconnect callback of a client that
/// was never granted.
pub fn unblock_client(handle: BlockedHandle) {
    // SAFETY: `handle` came from `block_client` and, by the rule above, has
    // not been released yet.
    unsafe {
        raw::RedisModule_UnblockClient.unwrap()(
            handle as *mut raw::RedisModuleBlockedClient,
            std::ptr::null_mut(),
        )
    };
}

/// The handle of the blocked client a reply or unblock callback runs for.
pub fn blocked_handle(ctx: &Context) -> BlockedHandle {
    // SAFETY: `ctx` is a reply or unblock callback's context.
    unsafe { raw::RedisModule_GetBlockedClientHandle.unwrap()(ctx.ctx) as BlockedHandle }
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

/// Registers a command; false if Redis refused.
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
