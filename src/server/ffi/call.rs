//! Running another command inside ours (`LOCK.CALL`, `LOCK.FENCE`), and
//! what Redis knows about that command's keys.

use std::ffi::{c_int, c_void};

use redis_module::{raw, Context};

/// `RedisModule_Call` flags: `v` arguments as a vector; `C` as the calling
/// user, so ACL rules on commands and keys apply; `S` script mode, which
/// refuses what cannot run inside another command (MULTI, WATCH,
/// subscriptions, blocking commands) and writes without enough good
/// replicas; `M` refuse for memory like a client's command; `E` errors as
/// replies; `!` replicate the effects.
const CALL_FLAGS: &std::ffi::CStr = c"vCSME!";

/// The reply of a command run with [`call`], freed on drop.
pub struct CallReply {
    ptr: *mut raw::RedisModuleCallReply,
    ctx: *mut raw::RedisModuleCtx,
}

impl CallReply {
    /// The text of an error reply; `None` for any other reply.
    pub fn error_text(&self) -> Option<Vec<u8>> {
        if self.ptr.is_null() || !self.is_error() {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: `ptr` is a live error reply; Redis returns a pointer to its
        // text and the length, valid while the reply lives.
        unsafe {
            let p = raw::RedisModule_CallReplyStringPtr.unwrap()(self.ptr, &mut len);
            (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec())
        }
    }

    /// Whether the command answered an error (or could not run).
    pub fn is_error(&self) -> bool {
        // SAFETY: `ptr` is a live reply.
        self.ptr.is_null()
            || unsafe { raw::RedisModule_CallReplyType.unwrap()(self.ptr) }
                == raw::REDISMODULE_REPLY_ERROR as c_int
    }

    /// Sends this reply, as it is, as the reply of the current command.
    pub fn forward(&self, ctx: &Context) {
        if self.ptr.is_null() {
            raw::reply_with_null(ctx.ctx);
            return;
        }
        // SAFETY: `ptr` is a live reply of a call made in this context.
        unsafe { raw::RedisModule_ReplyWithCallReply.unwrap()(ctx.ctx, self.ptr) };
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: the reply is ours and freed once.
            unsafe { raw::RedisModule_FreeCallReply.unwrap()(self.ptr) };
        }
        let _ = self.ctx;
    }
}

/// Runs `args[0]` with the rest as its arguments; `None` if Redis could not
/// run it at all (an unknown command, say) without producing a reply.
pub fn call(ctx: &Context, args: &[*mut raw::RedisModuleString]) -> Option<CallReply> {
    let (name, rest) = args.split_first()?;
    // SAFETY: `ctx` is a command's context; `name` and `rest` are strings of
    // the current command, alive for the call; the format "v" takes an array
    // of strings and its length.
    let ptr = unsafe {
        let name = raw::RedisModule_StringPtrLen.unwrap()(*name, std::ptr::null_mut());
        raw::RedisModule_Call.unwrap()(
            ctx.ctx,
            name,
            CALL_FLAGS.as_ptr(),
            rest.as_ptr(),
            rest.len(),
        )
    };
    (!ptr.is_null()).then_some(CallReply { ptr, ctx: ctx.ctx })
}

/// Positions (in `args`, the command name first) of the keys of a command,
/// per its key specs. Empty for an unknown command or a wrong arity too:
/// running it then answers the error.
pub fn command_keys(ctx: &Context, args: &[*mut raw::RedisModuleString]) -> Vec<usize> {
    let mut n: c_int = 0;
    // SAFETY: `args` is an array of live strings of the current command;
    // Redis returns an array of `n` positions that we must free.
    unsafe {
        let keys = raw::RedisModule_GetCommandKeys.unwrap()(
            ctx.ctx,
            args.as_ptr() as *mut *mut raw::RedisModuleString,
            args.len() as c_int,
            &mut n,
        );
        if keys.is_null() {
            return Vec::new();
        }
        let positions = std::slice::from_raw_parts(keys, n.max(0) as usize)
            .iter()
            .map(|&p| p as usize)
            .collect();
        raw::RedisModule_Free.unwrap()(keys as *mut c_void);
        positions
    }
}

/// The id of the client running the current command.
pub fn client_id(ctx: &Context) -> u64 {
    // SAFETY: `ctx` is a command's context.
    unsafe { raw::RedisModule_GetClientId.unwrap()(ctx.ctx) }
}
