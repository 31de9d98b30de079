//! One call of a command, as every handler sees it, and what a handler
//! answers. A leaf: the entry point builds it, the handlers read it.

use std::cell::OnceCell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::ptr::NonNull;

use redis_module::{raw, Context, ContextFlags, RedisString, RedisValue};

use crate::core::errors::LockError;

/// What a handler answers: a value to reply with (or `NoReply` when it
/// replied itself or blocked the client), or an error reply.
pub type Reply = Result<RedisValue, LockError>;

/// One call of a command.
pub struct Call<'a> {
    pub ctx: &'a Context,
    /// The arguments, `argv[0]` being the command name.
    pub argv: &'a [&'a [u8]],
    raw: &'a [*mut raw::RedisModuleString],
    /// The context's flags, read once for the command if it needs them.
    flags: OnceCell<ContextFlags>,
}

impl<'a> Call<'a> {
    /// `argv` viewed as bytes, `raw` as Redis passed them: the same arguments.
    pub fn new(
        ctx: &'a Context,
        argv: &'a [&'a [u8]],
        raw: &'a [*mut raw::RedisModuleString],
    ) -> Call<'a> {
        Call {
            ctx,
            argv,
            raw,
            flags: OnceCell::new(),
        }
    }

    /// The context's flags (asked of Redis at the first call only).
    pub fn flags(&self) -> &ContextFlags {
        self.flags.get_or_init(|| self.ctx.get_flags())
    }

    /// The key argument (`argv[1]`) as a Redis string, borrowed for the
    /// call. Every command that calls this declares that key, so Redis's
    /// arity check guarantees it.
    pub fn key(&self) -> KeyArg<'a> {
        KeyArg {
            string: ManuallyDrop::new(RedisString::from_redis_module_string(
                self.ctx.ctx,
                self.raw[1],
            )),
            call: PhantomData,
        }
    }

    /// The argument `argv[at]` as a Redis string (`at` within the arguments).
    pub fn arg(&self, at: usize) -> RedisString {
        RedisString::new(NonNull::new(self.ctx.ctx), self.raw[at])
    }

    /// The arguments as Redis strings, for passing on to Redis.
    pub fn raw_args(&self) -> &[*mut raw::RedisModuleString] {
        self.raw
    }
}

/// A command's key argument as a Redis string, for as long as the call
/// lasts. Redis keeps the arguments alive until the command returns, so
/// the string is neither retained nor freed (an owned `RedisString` would
/// do both, on every command).
pub struct KeyArg<'a> {
    string: ManuallyDrop<RedisString>,
    call: PhantomData<&'a [*mut raw::RedisModuleString]>,
}

impl Deref for KeyArg<'_> {
    type Target = RedisString;

    fn deref(&self) -> &RedisString {
        &self.string
    }
}
