//! The client against real servers (`$REDIS_SERVER` with the module), each test on servers of
//! its own: `cargo test -p redislock-client --test servers`.

mod common;

mod aio;
mod blocking;
mod cluster;
mod cluster_compose;
mod cluster_more;
mod durable;
mod durable_aof;
mod election;
mod election_run;
mod ephemeral;
mod faults;
mod faults_aio;
mod guarded;
mod lease;
mod locked;
mod multi;
mod multi_ephemeral;
