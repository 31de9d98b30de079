//! The blocking API: clients that wait inside the server.

use std::ffi::c_int;

use redis_module::{raw, Context};

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
