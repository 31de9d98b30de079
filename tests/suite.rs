//! The integration suite: every test file here is a module of one test binary, so the
//! harness in `common` and the Redis client are compiled and linked once. Each test starts its
//! own `redis-server` processes with the module loaded, on free loopback ports
//! (`tests/common/`). Run one file's tests with a filter:
//! `cargo test --release --test suite blocking::`. The torture test has a binary of its own,
//! so that it runs alone.

#[macro_use]
mod common;

mod acl;
mod acl_categories;
mod aof_orders;
mod arguments;
mod blocking;
mod clients;
mod cluster;
mod commands;
mod data;
mod ecosystem;
mod ephemeral;
mod extremes;
mod failover;
mod faults;
mod fuzz_commands;
mod guarded;
mod kinds;
mod leaving;
mod leaving_states;
mod multi;
mod observe;
mod persistence;
mod redaction;
mod redlock;
mod replication;
mod resharding;
mod resources;
mod restore_fuzz;
mod server_states;
mod slot_moves;
mod soak;
mod timer_slices;
mod upgrade;
mod versions;
mod wait_ends;
