//! redislock: distributed locks as native Redis commands.
//!
//! `core` is the lock logic with no knowledge of Redis; `server` is the thin
//! layer that registers commands and the data type and talks to Redis.

pub mod core;

#[cfg(all(feature = "module", not(test)))]
mod server;
