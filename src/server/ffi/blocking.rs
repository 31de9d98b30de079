//! The blocking API: clients that wait inside the server.

use std::ffi::c_int;
use std::ptr::NonNull;

use redis_module::{raw, Context};

/// Whether the current command may block its client (not in MULTI, a
/// script, or a command called from a module).
pub fn may_block(flags: &redis_module::ContextFlags) -> bool {
    use redis_module::ContextFlags;
    !(flags.contains(ContextFlags::MULTI)
        || flags.contains(ContextFlags::LUA)
        || flags.contains(ContextFlags::DENY_BLOCKING))
}

/// Which blocked client a callback or a job is about: the address of its
/// handle. Only an identity: it cannot unblock anyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockedId(usize);

impl BlockedId {
    /// The identity of the blocked client Redis passes to a disconnect
    /// callback.
    pub fn of(bc: *mut raw::RedisModuleBlockedClient) -> BlockedId {
        BlockedId(bc as usize)
    }
}

/// The one handle of a client this module blocked. Redis must be told
/// exactly once that its wait ended: `unblock` takes the handle by value,
/// and it is neither `Copy` nor `Clone`, so a second unblock does not
/// compile. It does not unblock on drop: the waiters' table is a thread
/// local, dropped as the server exits, when Redis may no longer be called.
#[must_use = "a blocked client stays blocked until its handle is unblocked"]
pub struct BlockedClient(NonNull<raw::RedisModuleBlockedClient>);

impl BlockedClient {
    pub fn id(&self) -> BlockedId {
        BlockedId::of(self.0.as_ptr())
    }

    /// Releases the handle; the reply callback then answers (unless the
    /// client disconnected), or for a client blocked on a key the unblock
    /// callback (at once on some servers, before the event loop goes on on
    /// others).
    pub fn unblock(self) {
        // SAFETY: the handle came from `RedisModule_BlockClient` or
        // `RedisModule_BlockClientOnKeys` and, owned by this value that
        // `unblock` consumes, is released only here.
        unsafe { raw::RedisModule_UnblockClient.unwrap()(self.0.as_ptr(), std::ptr::null_mut()) };
    }

    /// Drops the handle of a client blocked on a key whose wait the server
    /// ended itself (a closed connection, `CLIENT UNBLOCK`, a redirect of
    /// a slot that left): the server frees such a handle, and releasing it
    /// too would answer the client a second time.
    pub fn ended_by_server(self) {}
}

/// Callback types of the blocking API.
pub type CommandCallback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;
pub type DisconnectCallback =
    unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut raw::RedisModuleBlockedClient);

/// Blocks the calling client with no Redis-side timeout; `on_unblock` runs
/// for `CLIENT UNBLOCK`. None if Redis could not block it.
pub fn block_client(
    ctx: &Context,
    on_reply: CommandCallback,
    on_unblock: CommandCallback,
    on_disconnect: DisconnectCallback,
) -> Option<BlockedClient> {
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
        let bc = NonNull::new(bc)?;
        raw::RedisModule_SetDisconnectCallback.unwrap()(bc.as_ptr(), Some(on_disconnect));
        Some(BlockedClient(bc))
    }
}

/// Blocks the calling client on `key`, with no Redis-side timeout. The
/// server then treats it as it treats a `BLPOP` on that key: in Cluster, a
/// client whose key's slot is served elsewhere is answered `MOVED` (or
/// `CLUSTERDOWN`) and unblocked, whether or not the key exists.
/// `on_ready` runs whenever the key is signalled ready and must answer
/// `REDISMODULE_ERR` to stay blocked; `on_unblock` answers once the module
/// releases the handle, or for `CLIENT UNBLOCK`; `on_disconnect` runs for a
/// closed connection and for every end the server makes itself. None if
/// Redis could not block it.
pub fn block_client_on_key(
    ctx: &Context,
    key: &redis_module::RedisString,
    on_ready: CommandCallback,
    on_unblock: CommandCallback,
    on_disconnect: DisconnectCallback,
) -> Option<BlockedClient> {
    let mut keys = [key.inner];
    // SAFETY: `ctx` is the context of the command being blocked; `keys`
    // holds one live string, which Redis retains for the wait; the
    // callbacks have the signatures Redis calls; no private data is passed.
    unsafe {
        let bc = raw::RedisModule_BlockClientOnKeys.unwrap()(
            ctx.ctx,
            Some(on_ready),
            Some(on_unblock),
            None,
            0,
            keys.as_mut_ptr(),
            1,
            std::ptr::null_mut(),
        );
        let bc = NonNull::new(bc)?;
        raw::RedisModule_SetDisconnectCallback.unwrap()(bc.as_ptr(), Some(on_disconnect));
        Some(BlockedClient(bc))
    }
}

/// The blocked client a reply or unblock callback runs for.
pub fn blocked_id(ctx: &Context) -> BlockedId {
    // SAFETY: `ctx` is a reply or unblock callback's context.
    BlockedId::of(unsafe { raw::RedisModule_GetBlockedClientHandle.unwrap()(ctx.ctx) })
}
