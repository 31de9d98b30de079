//! Test harness: starts throw-away `redis-server` processes with the redislock module loaded.
//!
//! Every `Server` owns a child process and a private temporary directory; both are removed in
//! `Drop`, so servers are cleaned up even when a test panics.
#![allow(dead_code)]

// First: the other files use its `rcmd!`.
#[macro_use]
mod commands;
mod builder;
mod clock;
mod epochs;
mod harness;
mod observe;
mod process;
mod raw_conn;
mod server;
mod waiters;

// Each test binary uses part of the harness.
#[allow(unused_imports)]
pub use builder::*;
#[allow(unused_imports)]
pub use clock::*;
#[allow(unused_imports)]
pub use commands::*;
#[allow(unused_imports)]
pub use epochs::*;
#[allow(unused_imports)]
pub use harness::*;
#[allow(unused_imports)]
pub use observe::*;
#[allow(unused_imports)]
pub use process::*;
#[allow(unused_imports)]
pub use raw_conn::*;
#[allow(unused_imports)]
pub use server::*;
#[allow(unused_imports)]
pub use waiters::*;
