//! What `COMMAND DOCS` and `COMMAND INFO` show for each command (summary,
//! complexity, arity, key spec, arguments), so `redis-cli` can give argument
//! hints. Registered with `RedisModule_SetCommandInfo`, which Redis copies.

use std::ffi::{c_int, CStr};
use std::mem::size_of;
use std::ptr;

use redis_module::{raw, Context};

mod multi;

pub use multi::{ACQUIREALL, RELEASEALL};

/// One argument of a command's grammar.
struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    optional: bool,
    multiple: bool,
    summary: Option<&'static CStr>,
    sub: &'static [Arg],
}

/// One command's documentation (the command table in `dispatch.rs` names
/// the command and points here).
pub struct Doc {
    summary: &'static CStr,
    arity: c_int,
    key_flags: u32,
    /// The keys follow a `numkeys` argument (at 1), rather than one key at 1.
    numkeys: bool,
    args: &'static [Arg],
    complexity: &'static CStr,
}

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
        summary: None,
        sub: &[],
    }
}

const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
/// The guarded command of LOCK.CALL and LOCK.FENCE, with its arguments.
const COMMAND: Arg = Arg {
    summary: Some(c"the command to run, as the calling user; its keys in the lock key's slot"),
    ..arg(c"command", STRING)
};
const COMMAND_ARGS: Arg = Arg {
    optional: true,
    multiple: true,
    ..arg(c"arg", STRING)
};

const KEY: Arg = arg(
    c"key",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
);
const TOKEN: Arg = Arg {
    summary: Some(c"owner token, 1 to 512 bytes; * on acquire lets the server generate one"),
    ..arg(
        c"token",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    )
};
const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const EXPIRATION: Arg = Arg {
    sub: &[
        Arg {
            token: Some(c"EX"),
            summary: Some(c"time to live in seconds, 1 to 1000000000"),
            ..arg(c"seconds", INTEGER)
        },
        Arg {
            token: Some(c"PX"),
            summary: Some(c"time to live in milliseconds, 1 to 1000000000000"),
            ..arg(c"milliseconds", INTEGER)
        },
    ],
    ..arg(
        c"expiration",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
    )
};

const RW: u32 = raw::REDISMODULE_CMD_KEY_RW;
const ONE_HOLDER: &CStr =
    c"O(1) for an exclusive lock; O(log H) for a key with H shared or semaphore holders";
pub const ACQUIRE: Doc = Doc {
    complexity: ONE_HOLDER,
    summary: c"Acquires a lock (exclusive, shared, or a semaphore place), or waits for it in the server; returns the owner token and a fencing token",
    // From the token on, the module checks the arguments itself, so that a missing TTL or
    // token is named rather than answered "wrong number of arguments".
    arity: -3,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    args: &[
        KEY,
        TOKEN,
        EXPIRATION,
        Arg {
            optional: true,
            sub: &[
                Arg {
                    token: Some(c"SHARED"),
                    summary: Some(c"a shared (read) hold: any number at once, never with an exclusive one"),
                    ..arg(
                        c"shared",
                        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
                    )
                },
                Arg {
                    token: Some(c"LIMIT"),
                    summary: Some(c"one of count places of a semaphore, 1 to 1000000"),
                    ..arg(c"count", INTEGER)
                },
            ],
            ..arg(
                c"kind",
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
            )
        },
        Arg {
            token: Some(c"EPHEMERAL"),
            optional: true,
            summary: Some(c"release the lock when this connection closes"),
            ..arg(
                c"ephemeral",
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
            )
        },
        Arg {
            token: Some(c"BLOCK"),
            optional: true,
            summary: Some(c"wait up to this many milliseconds (0: no limit; at most 1000000000000) for the lock"),
            ..arg(c"timeout", INTEGER)
        },
        Arg {
            token: Some(c"DATA"),
            optional: true,
            summary: Some(c"public data kept with the hold, 1 to 4096 bytes, shown by LOCK.INFO"),
            ..arg(
                c"data",
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            )
        },
    ],
};

pub const RELEASE: Doc = Doc {
    complexity: ONE_HOLDER,
    summary: c"Releases a lock if the token holds it, handing it to the first waiter",
    arity: 3,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_DELETE,
    numkeys: false,
    args: &[KEY, TOKEN],
};

pub const EXTEND: Doc = Doc {
    complexity: ONE_HOLDER,
    summary: c"Sets a held lock's remaining time if the token holds it",
    arity: -3,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    args: &[KEY, TOKEN, EXPIRATION],
};

pub const INFO: Doc = Doc {
    complexity: c"O(1) for an exclusive lock; O(H log H) to list H holders",
    summary: c"Shows a lock's owner token, fence, remaining time and number of waiters",
    arity: 2,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    args: &[KEY],
};

pub const OBSERVE: Doc = Doc {
    complexity: c"O(1) for an exclusive lock; O(H) for a key with H shared or semaphore holders",
    summary: c"Shows the fence and public data of a lock's holder, or waits in the server until its fence (or, with SEEN, its data) differs from a given one",
    arity: -2,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    args: &[
        KEY,
        Arg {
            token: Some(c"AFTER"),
            optional: true,
            summary: Some(c"the fence seen last (0: no holder): answer only once the fence differs"),
            ..arg(c"fence", INTEGER)
        },
        Arg {
            token: Some(c"SEEN"),
            optional: true,
            summary: Some(c"with AFTER, the data seen last with that fence (empty: none): a holder of the same fence with other data is a change too"),
            ..arg(c"data", STRING)
        },
        Arg {
            token: Some(c"BLOCK"),
            optional: true,
            summary: Some(c"with AFTER, wait up to this many milliseconds (0: no limit; at most 1000000000000) for a change"),
            ..arg(c"timeout", INTEGER)
        },
    ],
};

pub const CALL: Doc = Doc {
    complexity: ONE_HOLDER,
    summary: c"Runs a command only if the token holds the lock, in the same atomic step",
    arity: -4,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    args: &[KEY, TOKEN, COMMAND, COMMAND_ARGS],
};

pub const FENCE: Doc = Doc {
    complexity: c"O(1)",
    summary:
        c"Runs a command only if the fence is not older than the highest the gate key accepted",
    arity: -4,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    args: &[
        KEY,
        Arg {
            summary: Some(c"the fencing token of the caller's grant"),
            ..arg(c"fence", INTEGER)
        },
        COMMAND,
        COMMAND_ARGS,
    ],
};

/// The release the commands appeared in: the module's first, 0.1.0, has
/// every one of them. A command added later names its own release.
const SINCE: &CStr = c"0.1.0";

static VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
};

/// Sets the docs of the commands named, each with its doc; false if Redis
/// refused any. On a server without the API (before 7.0) there is nothing
/// to do.
pub fn register<'a>(ctx: &Context, docs: impl IntoIterator<Item = (&'a CStr, &'a Doc)>) -> bool {
    // SAFETY: reading function pointers Redis filled in at module load.
    let (Some(get_command), Some(set_info)) = (unsafe { raw::RedisModule_GetCommand }, unsafe {
        raw::RedisModule_SetCommandInfo
    }) else {
        return true;
    };
    docs.into_iter().all(|(name, doc)| {
        let mut arena = Vec::new();
        let args = raw_args(doc.args, &mut arena);
        let spec = match doc.numkeys {
            false => key_spec(doc.key_flags),
            true => numkeys_spec(doc.key_flags),
        };
        let mut key_specs = [spec, zeroed_key_spec()];
        let info = raw::RedisModuleCommandInfo {
            version: &VERSION,
            summary: doc.summary.as_ptr(),
            complexity: doc.complexity.as_ptr(),
            since: SINCE.as_ptr(),
            history: ptr::null_mut(),
            tips: ptr::null(),
            arity: doc.arity,
            key_specs: key_specs.as_mut_ptr(),
            args,
        };
        // SAFETY: `ctx` is the load context; every pointer in `info` stays
        // valid for the call (static strings, `key_specs` and `arena`), and
        // Redis copies what it keeps.
        let done = unsafe {
            let command = get_command(ctx.ctx, name.as_ptr());
            !command.is_null() && set_info(command, &info) == raw::REDISMODULE_OK as c_int
        };
        if !done {
            ctx.log_warning(&format!(
                "command docs of {} refused",
                name.to_string_lossy()
            ));
        }
        done
    })
}

/// Lays out `args` as Redis wants them: arrays ended by a zeroed entry. The
/// arrays live in `arena` until the info has been copied.
fn raw_args(
    args: &[Arg],
    arena: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut level: Vec<raw::RedisModuleCommandArg> = args
        .iter()
        .map(|a| raw::RedisModuleCommandArg {
            name: a.name.as_ptr(),
            type_: a.kind,
            key_spec_index: if a.kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY {
                0
            } else {
                -1
            },
            token: a.token.map_or(ptr::null(), CStr::as_ptr),
            summary: a.summary.map_or(ptr::null(), CStr::as_ptr),
            since: ptr::null(),
            flags: (if a.optional {
                raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
            } else {
                0
            }) | (if a.multiple {
                raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int
            } else {
                0
            }),
            deprecated_since: ptr::null(),
            subargs: if a.sub.is_empty() {
                ptr::null_mut()
            } else {
                raw_args(a.sub, arena)
            },
            display_text: ptr::null(),
        })
        .collect();
    // SAFETY: the struct is pointers and integers, for which zero is valid;
    // a zeroed entry ends the array.
    level.push(unsafe { std::mem::zeroed() });
    let ptr = level.as_mut_ptr();
    // Moving the Vec into the arena keeps its buffer where it is.
    arena.push(level);
    ptr
}

/// The one key, at argument 1.
fn key_spec(flags: u32) -> raw::RedisModuleCommandKeySpec {
    let mut spec = zeroed_key_spec();
    spec.flags = flags as u64;
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range.lastkey = 0;
    spec.fk.range.keystep = 1;
    spec.fk.range.limit = 0;
    spec
}

/// The keys after `numkeys` at argument 1: `numkeys` keys from argument 2.
fn numkeys_spec(flags: u32) -> raw::RedisModuleCommandKeySpec {
    let mut spec = zeroed_key_spec();
    spec.flags = flags as u64;
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
    spec.fk.keynum.keynumidx = 0;
    spec.fk.keynum.firstkey = 1;
    spec.fk.keynum.keystep = 1;
    spec
}

fn zeroed_key_spec() -> raw::RedisModuleCommandKeySpec {
    // SAFETY: pointers, integers and unions of integers: zero is valid, and
    // a zeroed spec ends the array.
    unsafe { std::mem::zeroed() }
}
