//! The shape of the callbacks Redis calls for a client the module blocked:
//! a reply callback (the answer once the module released the handle, or
//! `CLIENT UNBLOCK`) and a disconnect callback, each given the blocked
//! client's identity and kept from panicking into Redis. The registries of
//! blocked clients (`waiting`, `observing`) say what each one does.

use std::ffi::c_int;

use redis_module::{raw, Context};

use crate::server::catch_panic;
use crate::server::ffi::{self, BlockedId};

/// The body of a reply callback: `f` answers the blocked client `handle`
/// on `ctx`. A panic in it answers nothing; Redis is told all went well.
pub fn reply(ctx: *mut raw::RedisModuleCtx, f: impl FnOnce(&Context, BlockedId)) -> c_int {
    let ctx = Context::new(ctx);
    catch_panic::callback(raw::REDISMODULE_OK as c_int, || {
        f(&ctx, ffi::blocked_id(&ctx));
        raw::REDISMODULE_OK as c_int
    })
}

/// The body of a disconnect callback: `f` forgets the blocked client
/// `bc`, whose connection closed (or whose wait the server ended itself).
pub fn disconnect(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
    f: impl FnOnce(&Context, BlockedId),
) {
    let ctx = Context::new(ctx);
    catch_panic::callback((), || f(&ctx, BlockedId::of(bc)));
}
