//! Command registration, and the one entry point every command goes
//! through: it views the arguments as byte slices without copying them,
//! runs the handler inside the panic catch_panic, and sends its reply.

use std::ffi::{c_int, CStr};

use redis_module::{raw, Context, RedisString, RedisValue};

use crate::core::{effects, numbers};
use crate::server::command::{Call, Reply};
use crate::server::command_docs::{self as docs, Doc};
use crate::server::{catch_panic, commands, ephemeral, ffi, guarded, locks, multi, reply};

type Handler = fn(&Call) -> Reply;

/// Where `LOCK._HOLD` has its token: it depends on the effect.
const HOLD_TOKEN: c_int = -1;

/// Where a multi-key command has its token: after its `numkeys` keys.
const NUMKEYS_TOKEN: c_int = -2;

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
    if token_at == NUMKEYS_TOKEN && ffi::keys_position_request(&ctx) {
        numkeys_keys(&ctx, argv, argc);
        return raw::REDISMODULE_OK as c_int;
    }
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
    let call = Call::new(&ctx, slices, raw_args);
    let status = match catch_panic::command(|| {
        if writes_lock && slices.len() > 1 && ephemeral::orphans() > 0 {
            // Holds whose connection closed count as gone: released before
            // the command looks at the lock (the scheduler may not have
            // come to them yet).
            locks::release_orphans_of(&ctx, slices[1]);
        }
        handler(&call)
    }) {
        // The answers of the hot path (a release's count, a wait) without
        // the general reply's match over every kind of value.
        Ok(RedisValue::NoReply) => raw::REDISMODULE_OK as c_int,
        Ok(RedisValue::Integer(n)) => raw::reply_with_long_long(ctx.ctx, n) as c_int,
        Ok(value) => ctx.reply(Ok(value)) as c_int,
        Err(e) => reply::error(&ctx, &e) as c_int,
    };
    let token_at = match token_at {
        HOLD_TOKEN => effects::hold_token_at(argc as usize) as c_int,
        NUMKEYS_TOKEN => slices
            .get(1)
            .and_then(|n| numbers::parse_non_negative(n))
            .and_then(|n| c_int::try_from(n).ok())
            .map_or(0, |n| n.saturating_add(2)),
        at => at,
    };
    if token_at > 0 && token_at < argc && !ffi::loading() {
        // Tokens are credentials: keep them out of SLOWLOG and MONITOR. Only
        // once the handler is done with the arguments: some servers (Valkey)
        // replace the argument itself, not a copy kept for the logs. Never
        // while loading: the AOF loader's client keeps the redacted copy of
        // an earlier, shorter command, which redaction would index past its
        // end (and nothing is logged while loading).
        ffi::redact_arg(&ctx, token_at);
    }
    status
}

/// Answers a keys position request of a multi-key command: `numkeys` at
/// argument 1, the keys after it (as many as there are).
fn numkeys_keys(ctx: &Context, argv: *mut *mut raw::RedisModuleString, argc: c_int) {
    if argv.is_null() || argc < 2 {
        return;
    }
    // SAFETY: Redis passes `argc` valid strings, and `argc` is at least 2.
    let numkeys = RedisString::string_as_slice(unsafe { *argv.add(1) });
    let count = numbers::parse_non_negative(numkeys)
        .and_then(|n| c_int::try_from(n).ok())
        .unwrap_or(0);
    for at in 2..count.saturating_add(2).min(argc) {
        ffi::key_at(ctx, at);
    }
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

/// One command: its name, entry point, flags, key positions (first, last,
/// step) and, for the commands clients use, what `COMMAND DOCS` shows. The
/// one list of the module's commands: registration and the docs both read it.
struct Command {
    name: &'static CStr,
    entry: ffi::CommandCallback,
    flags: &'static CStr,
    keys: (c_int, c_int, c_int),
    doc: Option<&'static Doc>,
    /// ACL categories, where the server lets a module set them; every
    /// command is also in `@redislock` where modules may add categories.
    acl: &'static CStr,
}

const fn command(
    name: &'static CStr,
    entry: ffi::CommandCallback,
    flags: &'static CStr,
    acl: &'static CStr,
    doc: Option<&'static Doc>,
) -> Command {
    Command {
        name,
        entry,
        flags,
        keys: (1, 1, 1),
        doc,
        acl,
    }
}

/// The internal commands (effects from the master link and the AOF) write.
const INTERNAL: &CStr = c"write slow";

/// The category every command of the module is in, where the server lets
/// modules define categories.
const MODULE_CATEGORY: &CStr = c"redislock";

/// The keys of a multi-key command: `numkeys` at argument 1, the keys
/// after it. The legacy range cannot say so, and the servers route a
/// module command by its key spec only in part, so the command tells its
/// keys itself (`getkeys-api`); its key spec says the same to clients.
const NUMKEYS: (c_int, c_int, c_int) = (0, 0, 0);

fn commands() -> [Command; 13] {
    [
        // May create a lock, so refused when memory is full.
        command(
            c"lock.acquire",
            entry!(commands::acquire, 2, true),
            c"write deny-oom",
            c"write blocking slow",
            Some(&docs::ACQUIRE),
        ),
        // Free memory or change nothing: never refused for memory.
        command(
            c"lock.release",
            entry!(commands::release, 2, true),
            c"write",
            c"write fast",
            Some(&docs::RELEASE),
        ),
        Command {
            keys: NUMKEYS,
            ..command(
                c"lock.acquireall",
                entry!(multi::acquire_all, NUMKEYS_TOKEN),
                c"write deny-oom getkeys-api",
                c"write blocking slow",
                Some(&docs::ACQUIREALL),
            )
        },
        Command {
            keys: NUMKEYS,
            ..command(
                c"lock.releaseall",
                entry!(multi::release_all, NUMKEYS_TOKEN),
                c"write getkeys-api",
                c"write fast",
                Some(&docs::RELEASEALL),
            )
        },
        command(
            c"lock.extend",
            entry!(commands::extend, 2, true),
            c"write",
            c"write fast",
            Some(&docs::EXTEND),
        ),
        command(
            c"lock.info",
            entry!(commands::info, 0),
            c"readonly",
            c"read slow",
            Some(&docs::INFO),
        ),
        // Reads only; may wait for a change, like a blocking read.
        command(
            c"lock.observe",
            entry!(commands::observe, 0),
            c"readonly",
            c"read blocking slow",
            Some(&docs::OBSERVE),
        ),
        // Guarded writes: the inner command is checked and refused for
        // memory by the inner call itself.
        command(
            c"lock.call",
            entry!(guarded::call, 2, true),
            c"write",
            c"write slow",
            Some(&docs::CALL),
        ),
        command(
            c"lock.fence",
            entry!(guarded::fence, 0, true),
            c"write",
            c"write slow",
            Some(&docs::FENCE),
        ),
        // Internal: effects replayed from the master link and the AOF.
        command(
            c"lock._gate",
            entry!(guarded::apply_gate, 0),
            c"write",
            INTERNAL,
            None,
        ),
        command(
            c"lock._apply",
            entry!(commands::apply, 2),
            c"write",
            INTERNAL,
            None,
        ),
        command(
            c"lock._hold",
            entry!(commands::apply_hold, HOLD_TOKEN),
            c"write",
            INTERNAL,
            None,
        ),
        Command {
            keys: (0, 0, 0),
            ..command(
                c"lock._epoch",
                entry!(commands::epoch, 0),
                c"write",
                INTERNAL,
                None,
            )
        },
    ]
}

/// Registers every command; false if Redis refused one.
pub fn register(ctx: &Context) -> bool {
    commands().iter().all(|c| {
        let (first, last, step) = c.keys;
        ffi::create_command(ctx, c.name, c.entry, c.flags, first, last, step)
    })
}

/// Puts every command in its ACL categories where the server allows it
/// (Redis 7.2+, Valkey 8+), and in `@redislock` where modules may define
/// categories (Redis 7.4+, Valkey 8+); after `register`, during the load. False if Redis refused one.
pub fn register_categories(ctx: &Context) -> bool {
    let own = match ffi::add_category(ctx, MODULE_CATEGORY) {
        Some(false) => return false,
        Some(true) => true,
        None => false,
    };
    if !ffi::has_command_categories() {
        return true;
    }
    commands().iter().all(|c| {
        let categories = match own {
            true => format!(
                "{} {}",
                c.acl.to_string_lossy(),
                MODULE_CATEGORY.to_string_lossy()
            ),
            false => c.acl.to_string_lossy().into_owned(),
        };
        let categories = std::ffi::CString::new(categories).unwrap_or_default();
        ffi::set_command_categories(ctx, c.name, &categories) == Some(true)
    })
}

/// Sets what `COMMAND DOCS` shows for the commands clients use; false if
/// Redis refused any.
pub fn register_docs(ctx: &Context) -> bool {
    let commands = commands();
    docs::register(
        ctx,
        commands
            .iter()
            .filter_map(|c| c.doc.map(|doc| (c.name, doc))),
    )
}
