//! The docs of the multi-key commands, `LOCK.ACQUIREALL` and
//! `LOCK.RELEASEALL`: `numkeys`, then the keys.

use redis_module::raw;

use super::{arg, Arg, Doc, EXPIRATION, INTEGER, KEY, RW, TOKEN};

const NUMKEYS_ARG: Arg = Arg {
    summary: Some(c"how many keys follow, 1 to 64"),
    ..arg(c"numkeys", INTEGER)
};
const KEYS: Arg = Arg {
    multiple: true,
    ..KEY
};

/// The options of a multi-key acquire: LOCK.ACQUIRE's, without LIMIT.
const SHARED_ALL: Arg = Arg {
    token: Some(c"SHARED"),
    optional: true,
    summary: Some(c"shared (read) holds on every key"),
    ..arg(
        c"shared",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    )
};
const EPHEMERAL_ALL: Arg = Arg {
    token: Some(c"EPHEMERAL"),
    optional: true,
    summary: Some(c"release every key when this connection closes"),
    ..arg(
        c"ephemeral",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    )
};
const BLOCK_ALL: Arg = Arg {
    token: Some(c"BLOCK"),
    optional: true,
    summary: Some(c"wait up to this many milliseconds (0: no limit) for all the keys at once"),
    ..arg(c"timeout", INTEGER)
};
const DATA_ALL: Arg = Arg {
    token: Some(c"DATA"),
    optional: true,
    summary: Some(c"public data kept with each exclusive hold, 1 to 4096 bytes"),
    ..arg(
        c"data",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    )
};

pub const ACQUIREALL: Doc = Doc {
    complexity: c"O(N) for N exclusive locks; O(N log H) for keys with H shared holders",
    summary: c"Acquires every key or none in one atomic step, or waits for all of them at once in the server; returns the owner token and one fencing token per key",
    arity: -5,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: true,
    args: &[
        NUMKEYS_ARG,
        KEYS,
        TOKEN,
        EXPIRATION,
        SHARED_ALL,
        EPHEMERAL_ALL,
        BLOCK_ALL,
        DATA_ALL,
    ],
};

pub const RELEASEALL: Doc = Doc {
    complexity: c"O(N) for N exclusive locks; O(N log H) for keys with H shared holders",
    summary: c"Releases the token's holds of the keys, handing each to its waiters; returns how many it released",
    arity: -4,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_DELETE,
    numkeys: true,
    args: &[NUMKEYS_ARG, KEYS, TOKEN],
};
