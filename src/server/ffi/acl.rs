//! Access control: the ACL categories of the module's commands, and whether
//! the calling user may run a command on a key. The category functions exist
//! from Redis 7.2 (setting a command's categories) and 7.4 / Valkey 8
//! (module-defined categories); they are looked up at run time, so the
//! module still loads on Redis 7.0 without them.

use std::ffi::{c_int, CStr};

use redis_module::{raw, Context};

/// Whether the server lets a module set its commands' ACL categories.
pub fn has_command_categories() -> bool {
    // SAFETY: reads a function pointer the API table filled in (or left null).
    unsafe { raw::RedisModule_SetCommandACLCategories }.is_some()
}

/// Adds a module-defined ACL category; `None` where the server has no such
/// API, `Some(false)` if it refused.
pub fn add_category(ctx: &Context, name: &CStr) -> Option<bool> {
    // SAFETY: reads a function pointer the API table filled in (or left null).
    let add = unsafe { raw::RedisModule_AddACLCategory }?;
    // SAFETY: `ctx` is the module's load context; `name` is a C string.
    Some(unsafe { add(ctx.ctx, name.as_ptr()) } == raw::REDISMODULE_OK as c_int)
}

/// Sets the ACL categories (space separated) of the module's command
/// `name`; `None` where the server has no such API.
pub fn set_command_categories(ctx: &Context, name: &CStr, categories: &CStr) -> Option<bool> {
    // SAFETY: reads a function pointer the API table filled in (or left null).
    let set = unsafe { raw::RedisModule_SetCommandACLCategories }?;
    // SAFETY: `ctx` is the module's load context and `name` a C string; the
    // command handle Redis returns lives as long as the command.
    let ok = unsafe {
        let command = raw::RedisModule_GetCommand.unwrap()(ctx.ctx, name.as_ptr());
        !command.is_null() && set(command, categories.as_ptr()) == raw::REDISMODULE_OK as c_int
    };
    Some(ok)
}

/// A Redis string owned here, freed on drop.
struct OwnedString {
    ctx: *mut raw::RedisModuleCtx,
    ptr: *mut raw::RedisModuleString,
}

impl OwnedString {
    fn new(ctx: &Context, bytes: &[u8]) -> Self {
        // SAFETY: `ctx` is a live context; the bytes are copied.
        let ptr = unsafe {
            raw::RedisModule_CreateString.unwrap()(ctx.ctx, bytes.as_ptr().cast(), bytes.len())
        };
        OwnedString { ctx: ctx.ctx, ptr }
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        // SAFETY: created by `new` with the same context, freed once.
        unsafe { raw::RedisModule_FreeString.unwrap()(self.ctx, self.ptr) };
    }
}

/// Whether the user of the current command may run `args` (a command and
/// its arguments): command rules and key patterns, as if it sent it. True
/// where there is no user to ask about (the master link, AOF loading).
pub fn caller_may_run(ctx: &Context, args: &[&[u8]]) -> bool {
    // SAFETY: `ctx` is a command's context; the returned name (or null) is
    // ours to free with the context's strings.
    let name = unsafe { raw::RedisModule_GetCurrentUserName.unwrap()(ctx.ctx) };
    if name.is_null() {
        return true;
    }
    let name = OwnedString {
        ctx: ctx.ctx,
        ptr: name,
    };
    // SAFETY: `name` is a live string; the user (or null) is ours to free.
    let user = unsafe { raw::RedisModule_GetModuleUserFromUserName.unwrap()(name.ptr) };
    if user.is_null() {
        return false;
    }
    let strings: Vec<OwnedString> = args.iter().map(|a| OwnedString::new(ctx, a)).collect();
    let mut argv: Vec<*mut raw::RedisModuleString> = strings.iter().map(|s| s.ptr).collect();
    // SAFETY: `user` is live until freed below; `argv` holds `argc` live
    // strings for the call.
    unsafe {
        let status = raw::RedisModule_ACLCheckCommandPermissions.unwrap()(
            user,
            argv.as_mut_ptr(),
            argv.len() as c_int,
        );
        raw::RedisModule_FreeModuleUser.unwrap()(user);
        status == raw::REDISMODULE_OK as c_int
    }
}
