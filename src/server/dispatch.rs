//! Command registration, and the one entry point every command goes
//! through: it views the arguments as byte slices without copying them,
//! runs the handler inside the panic guard, and sends its reply.

use std::ffi::{c_int, CStr};
use std::ptr::NonNull;

use redis_module::{raw, Context, RedisString, RedisValue};

use crate::core::errors::LockError;
use crate::server::{commands, ephemeral, ffi, guard, guarded, reply, waiting};

/// What a handler answers: a value to reply with (or `NoReply` when it
/// replied itself or blocked the client), or an error reply.
pub type Reply = Result<RedisValue, LockError>;

/// One call of a command.
pub struct Call<'a> {
    pub ctx: &'a Context,
    /// The arguments, `argv[0]` being the command name.
    pub argv: &'a [&'a [u8]],
    raw: &'a [*mut raw::RedisModuleString],
}

impl Call<'_> {
    /// The key argument (`argv[1]`) as a Redis string. Every command that
    /// calls this declares that key, so Redis's arity check guarantees it.
    pub fn key(&self) -> RedisString {
        RedisString::new(NonNull::new(self.ctx.ctx), self.raw[1])
    }

    /// The arguments as Redis strings, for passing on to Redis.
    pub fn raw_args(&self) -> &[*mut raw::RedisModuleString] {
        self.raw
    }
}

type Handler = fn(&Call) -> Reply;

/// Where `LOCK._HOLD` has its token: it depends on the effect.
const HOLD_TOKEN: c_int = -1;

/// Arguments up to this many are viewed from the stack.
const INLINE_ARGS: usize = 8;

fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
    token_at: c_int,
    writes_lock: bool,
) -> c_int {
    let ctx = Context::new(ctx);
    let raw_args: &[*mut raw::RedisModuleString] = if argv.is_null() || argc <= 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid strings that outlive the call.
        unsafe { std::slice::from_raw_parts(argv, argc as usize) }
    };
    let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
    let heap: Vec<&[u8]>;
    let slices: &[&[u8]] = if raw_args.len() <= INLINE_ARGS {
        for (slot, arg) in inline.iter_mut().zip(raw_args) {
            *slot = RedisString::string_as_slice(*arg);
        }
        &inline[..raw_args.len()]
    } else {
        heap = raw_args
            .iter()
            .map(|a| RedisString::string_as_slice(*a))
            .collect();
        &heap
    };
    let call = Call {
        ctx: &ctx,
        argv: slices,
        raw: raw_args,
    };
    let status = match guard::command(|| {
        if writes_lock && slices.len() > 1 && ephemeral::orphans() > 0 {
            // Holds whose connection closed count as gone: released before
            // the command looks at the lock (the scheduler may not have
            // come to them yet).
            ephemeral::release_orphans_of(&ctx, &waiting::lock_id(&ctx, slices[1]));
        }
        handler(&call)
    }) {
        Ok(value) => ctx.reply(Ok(value)) as c_int,
        Err(e) => reply::error(&ctx, &e) as c_int,
    };
    let token_at = match token_at {
        // `LOCK._HOLD key 1 END token` / `… GRANT kind limit token fence at`
        HOLD_TOKEN => {
            if argc == 5 {
                4
            } else {
                6
            }
        }
        at => at,
    };
    if token_at > 0 && token_at < argc {
        // Tokens are credentials: keep them out of SLOWLOG and MONITOR. Only
        // once the handler is done with the arguments: some servers (Valkey)
        // replace the argument itself, not a copy kept for the logs.
        ffi::redact_arg(&ctx, token_at);
    }
    status
}

/// An `extern "C"` entry point for one handler; the argument at
/// `token_at` (0: none) is a token, redacted from logs; with
/// `writes_lock`, the command writes the lock named by its first argument.
macro_rules! entry {
    ($handler:path, $token_at:expr) => {
        entry!($handler, $token_at, false)
    };
    ($handler:path, $token_at:expr, $writes_lock:expr) => {{
        extern "C" fn entry(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            dispatch(ctx, argv, argc, $handler, $token_at, $writes_lock)
        }
        entry as ffi::CommandCallback
    }};
}

/// Name, entry point, flags, and key positions (first, last, step).
type Registration = (
    &'static CStr,
    ffi::CommandCallback,
    &'static CStr,
    c_int,
    c_int,
    c_int,
);

/// Registers every command; false if Redis refused one.
pub fn register(ctx: &Context) -> bool {
    let table: [Registration; 10] = [
        // May create a lock, so refused when memory is full.
        (
            c"lock.acquire",
            entry!(commands::acquire, 2, true),
            c"write deny-oom",
            1,
            1,
            1,
        ),
        // Free memory or change nothing: never refused for memory.
        (
            c"lock.release",
            entry!(commands::release, 2, true),
            c"write",
            1,
            1,
            1,
        ),
        (
            c"lock.extend",
            entry!(commands::extend, 2, true),
            c"write",
            1,
            1,
            1,
        ),
        (
            c"lock.info",
            entry!(commands::info, 0),
            c"readonly fast",
            1,
            1,
            1,
        ),
        // Guarded writes: the inner command is checked and refused for
        // memory by the inner call itself.
        (
            c"lock.call",
            entry!(guarded::call, 2, true),
            c"write",
            1,
            1,
            1,
        ),
        (
            c"lock.fence",
            entry!(guarded::fence, 0, true),
            c"write",
            1,
            1,
            1,
        ),
        (
            c"lock._gate",
            entry!(guarded::apply_gate, 0),
            c"write",
            1,
            1,
            1,
        ),
        // Internal: effects replayed from the master link and the AOF.
        (
            c"lock._apply",
            entry!(commands::apply, 2),
            c"write",
            1,
            1,
            1,
        ),
        (
            c"lock._hold",
            entry!(commands::apply_hold, HOLD_TOKEN),
            c"write",
            1,
            1,
            1,
        ),
        (
            c"lock._epoch",
            entry!(commands::epoch, 0),
            c"write",
            0,
            0,
            0,
        ),
    ];
    table
        .iter()
        .all(|&(name, callback, flags, first, last, step)| {
            ffi::create_command(ctx, name, callback, flags, first, last, step)
        })
}
