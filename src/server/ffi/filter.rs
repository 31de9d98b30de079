//! A command filter: a look at each command's name before Redis runs it.

use std::ffi::c_int;

use redis_module::{raw, Context, RedisString};

/// Called with the name of every command a client sends (not the module's own calls).
pub type CommandWatcher = unsafe extern "C" fn(*mut raw::RedisModuleCommandFilterCtx);

/// Registers `watcher` for every command; false if Redis refused.
#[must_use]
pub fn watch_commands(ctx: &Context, watcher: CommandWatcher) -> bool {
    // SAFETY: `ctx` is the module's load context; the callback lives as long
    // as the module (a static function).
    let filter = unsafe {
        raw::RedisModule_RegisterCommandFilter.unwrap()(
            ctx.ctx,
            Some(watcher),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    !filter.is_null()
}

/// The name of the command a filter sees (empty if it has none).
pub fn filtered_command_name<'a>(fctx: *mut raw::RedisModuleCommandFilterCtx) -> &'a [u8] {
    // SAFETY: `fctx` is the filter context Redis passed to the callback; the
    // argument it returns lives until the callback returns, which is as long
    // as the caller may keep the slice.
    unsafe {
        if raw::RedisModule_CommandFilterArgsCount.unwrap()(fctx) < 1 {
            return &[];
        }
        let arg = raw::RedisModule_CommandFilterArgGet.unwrap()(fctx, 0);
        if arg.is_null() {
            return &[];
        }
        RedisString::string_as_slice(arg)
    }
}
