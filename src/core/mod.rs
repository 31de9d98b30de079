//! The lock state machine and everything around it that does not need Redis:
//! argument parsing, fencing arithmetic, tokens and the lock record itself.
//! Everything here is plain Rust, tested with `cargo test`.

pub mod args;
pub mod bindings;
pub mod budget;
pub mod deadlines;
pub mod effects;
pub mod errors;
pub mod fence;
pub mod grant;
pub mod holders;
pub mod limits;
pub mod lock;
pub mod lock_id;
mod mark;
pub mod numbers;
pub mod observers;
pub mod packed;
pub mod record;
pub mod release;
pub mod schedule;
pub mod settings;
pub mod short_bytes;
mod siphash;
pub mod slot;
pub mod swapdb;
pub mod token;
pub mod varint;
pub mod waiters;
