//! Keeps panics on our side of the FFI boundary: a panic unwinding into
//! Redis would abort the whole server, so every entry point runs inside one
//! of these guards and a bug becomes an error reply or a refused load.

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{RedisError, RedisResult};

use crate::core::errors::LockError;

/// Runs a command handler; a panic becomes `ERR internal error …`.
pub fn command(
    handler: impl FnOnce() -> Result<redis_module::RedisValue, LockError>,
) -> RedisResult {
    match catch_unwind(AssertUnwindSafe(handler)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(to_redis(e)),
        Err(_) => Err(to_redis(LockError::Internal)),
    }
}

/// Runs a callback that has no reply; a panic yields `fallback`.
pub fn callback<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

pub fn to_redis(e: LockError) -> RedisError {
    RedisError::String(e.to_string())
}
