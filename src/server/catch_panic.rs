//! Keeps panics on our side of the FFI boundary: a panic unwinding into
//! Redis would abort the whole server, so every entry point runs inside one
//! of these guards and a bug becomes an error reply or a refused load.

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::RedisValue;

use crate::core::errors::LockError;

/// Runs a command handler; a panic becomes `ERR internal error …`.
pub fn command(
    handler: impl FnOnce() -> Result<RedisValue, LockError>,
) -> Result<RedisValue, LockError> {
    catch_unwind(AssertUnwindSafe(handler)).unwrap_or(Err(LockError::Internal))
}

/// Runs a callback that has no reply; a panic yields `fallback`.
pub fn callback<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}
