//! The one place a lock is written: grant, new expiry, release — of an
//! exclusive lock (`exclusive.rs`), or of one holder of a shared lock or a
//! semaphore, whose leases also end here (`holders.rs`) — and the effects
//! replayed from a master or the AOF (`replay.rs`), and a fence gate's
//! raise (`gates.rs`). Each write is stored, propagated to replicas and the
//! AOF and notified, in that order, the same way for every caller. What
//! follows a write (waiters served, bindings changed, a lease end watched)
//! is the lock-lifecycle layer's (`locks`): a write that leaves a lease end
//! to watch returns when (`settle.rs`: what a write leaves on its key).

mod exclusive;
mod gates;
mod holders;
mod replay;
mod settle;

pub use exclusive::*;
pub use gates::*;
pub use holders::*;
pub use replay::*;
pub use settle::Look;
