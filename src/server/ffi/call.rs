//! Running another command inside ours (`LOCK.CALL`, `LOCK.FENCE`), and
//! what Redis knows about that command's keys.

use std::ffi::{c_int, c_void};

use redis_module::{raw, Context};

/// `RedisModule_Call` flags: `v` arguments as a vector; `C` as the calling
/// user, so ACL rules on commands and keys apply; `S` script mode, which
/// refuses what cannot run inside another command (MULTI, WATCH,
/// subscriptions, blocking commands) and writes without enough good
/// replicas; `M` refuse for memory like a client's command; `E` errors as
/// replies; `!` replicate the effects; `0` the reply in the calling
/// client's protocol (RESP2 or RESP3), so that forwarding it gives the
/// caller what it would get sending the command itself.
const CALL_FLAGS: &std::ffi::CStr = c"vCSME!0";

/// Flags of the call that collects a reply left behind (see [`call`]): the
/// caller's protocol and errors as replies; no ACL, nothing replicated.
const DRAIN_FLAGS: &std::ffi::CStr = c"E0";

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

    /// The text of a simple-string reply; `None` for any other reply.
    fn simple_text(&self) -> Option<&[u8]> {
        let mut len = 0usize;
        // SAFETY: `ptr` is a live reply; Redis returns its text and length,
        // valid while the reply lives.
        unsafe {
            if raw::RedisModule_CallReplyType.unwrap()(self.ptr)
                != raw::REDISMODULE_REPLY_STRING as c_int
            {
                return None;
            }
            let p = raw::RedisModule_CallReplyStringPtr.unwrap()(self.ptr, &mut len);
            (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len))
        }
    }

    /// Whether the command answered an error (or could not run).
    pub fn is_error(&self) -> bool {
        // SAFETY: `ptr` is a live reply.
        self.ptr.is_null()
            || unsafe { raw::RedisModule_CallReplyType.unwrap()(self.ptr) }
                == raw::REDISMODULE_REPLY_ERROR as c_int
    }

    /// Whether Redis gave a reply without any content (no type, no bytes).
    fn is_empty(&self) -> bool {
        let mut len = 0usize;
        // SAFETY: `ptr` is a live reply; Redis returns its protocol bytes and
        // their length, valid while the reply lives.
        unsafe {
            raw::RedisModule_CallReplyType.unwrap()(self.ptr)
                == raw::REDISMODULE_REPLY_UNKNOWN as c_int
                && (raw::RedisModule_CallReplyProto.unwrap()(self.ptr, &mut len).is_null()
                    || len == 0)
        }
    }

    /// Sends this reply, as it is, as the reply of the current command;
    /// false if Redis could not, and sent nothing: the caller must then
    /// answer something else, or the client would take the next reply for
    /// this one.
    #[must_use]
    pub fn forward(&self, ctx: &Context) -> bool {
        if self.ptr.is_null() {
            raw::reply_with_null(ctx.ctx);
            return true;
        }
        if self.is_empty() {
            return false;
        }
        // SAFETY: `ptr` is a live reply of a call made in this context.
        let status = unsafe { raw::RedisModule_ReplyWithCallReply.unwrap()(ctx.ctx, self.ptr) };
        status == raw::REDISMODULE_OK as c_int
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
///
/// Valkey 8.1 and 9.1 answer some failing commands (`GETDEL` or `GETSET` of
/// a key of another type) with an empty reply and leave their real reply in
/// the module's call client, where the next call of any module would pick
/// it up as its own. A `PING` then collects it: its answer is the reply
/// left behind, or `PONG` if there was none (the reply stays empty).
pub fn call(ctx: &Context, args: &[*mut raw::RedisModuleString]) -> Option<CallReply> {
    let reply = call_with(ctx, args, CALL_FLAGS)?;
    if !reply.is_empty() {
        return Some(reply);
    }
    // SAFETY: `ctx` is a command's context; the format takes no arguments.
    let ptr =
        unsafe { raw::RedisModule_Call.unwrap()(ctx.ctx, c"PING".as_ptr(), DRAIN_FLAGS.as_ptr()) };
    let left = (!ptr.is_null()).then_some(CallReply { ptr, ctx: ctx.ctx })?;
    let pong = left.simple_text().is_some_and(|t| t == b"PONG");
    Some(if pong || left.is_empty() { reply } else { left })
}

fn call_with(
    ctx: &Context,
    args: &[*mut raw::RedisModuleString],
    flags: &std::ffi::CStr,
) -> Option<CallReply> {
    let (name, rest) = args.split_first()?;
    // SAFETY: `ctx` is a command's context; `name` and `rest` are strings of
    // the current command, alive for the call; the format "v" takes an array
    // of strings and its length.
    let ptr = unsafe {
        let name = raw::RedisModule_StringPtrLen.unwrap()(*name, std::ptr::null_mut());
        raw::RedisModule_Call.unwrap()(ctx.ctx, name, flags.as_ptr(), rest.as_ptr(), rest.len())
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

/// Whether the current command runs inside a script or a function (the
/// context flag Redis sets for both; Valkey 9's script engine runs on a
/// client that is otherwise a connection's).
pub fn in_script(ctx: &Context) -> bool {
    ctx.get_flags().contains(redis_module::ContextFlags::LUA)
}

/// Whether client `id` is a connection Redis knows. Script engines,
/// functions and modules' calls run commands on internal clients that no
/// connection stands behind: nothing would ever tell us they closed.
pub fn is_connection(id: u64) -> bool {
    // SAFETY: a null `ci` asks only whether the client exists; Redis looks the
    // id up in its table of connected clients.
    unsafe {
        raw::RedisModule_GetClientInfoById.unwrap()(std::ptr::null_mut(), id)
            == raw::REDISMODULE_OK as c_int
    }
}

/// Whether every key in `keys` is served by this node for the current call,
/// as Redis decides for a multi-key command (its own routing check, with the
/// caller's `ASKING`): false while a slot migration splits them between two
/// nodes (some moved, some not yet), where Redis would answer `TRYAGAIN` or
/// `ASK`. Asks by calling `EXISTS` on them, which runs nothing if refused.
pub fn keys_served_here(ctx: &Context, keys: &[*mut raw::RedisModuleString]) -> bool {
    if keys.is_empty() {
        return true;
    }
    // SAFETY: `ctx` is a command's context; `keys` are live strings of the
    // current command; the format "v" takes an array of strings and its
    // length; errno is read right after the call that set it.
    let (ptr, refused) = unsafe {
        let ptr = raw::RedisModule_Call.unwrap()(
            ctx.ctx,
            c"EXISTS".as_ptr(),
            c"v".as_ptr(),
            keys.as_ptr(),
            keys.len(),
        );
        // The refusal of a non-local key: EPERM (EACCES on older servers).
        let errno = *libc::__errno_location();
        (
            ptr,
            ptr.is_null() && (errno == libc::EPERM || errno == libc::EACCES),
        )
    };
    if !ptr.is_null() {
        drop(CallReply { ptr, ctx: ctx.ctx });
    }
    !refused
}
