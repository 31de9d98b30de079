//! The client's decisions, without I/O: the command lines, what each reply means, the errors,
//! the lease clock and the renewal schedule. The blocking and the tokio front ends only carry
//! requests out.

pub mod acquire;
pub mod args;
pub mod durable;
pub mod election;
pub mod error;
pub mod lease;
pub mod locked;
pub mod multi;
pub mod redirect;
pub mod reply;
pub mod take;
pub mod verdict;
