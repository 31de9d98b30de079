//! A client for the redislock module (distributed locks as native Redis commands), on the
//! [`redis`] crate: exclusive and shared locks and semaphores with fencing tokens, waiting in
//! the server, a lease clock that tells a holder it lost the lock before the server can grant
//! it to anyone else, and renewal in the background.
//!
//! The blocking front end is [`Locker`], [`Lock`] and [`Hold`], [`MultiLock`] and [`MultiHold`]
//! (several keys taken in one atomic step, a fence per key) and [`Election`] (a leader elected
//! in the server, its term the fence, [`Observer`] of each change); [`aio`] has the same for
//! tokio. [`Locker::cluster`] (and [`aio::Locker::cluster`]) is the same on a Redis Cluster:
//! each call goes to the master of its key, and a wait that a slot migration or a failover
//! interrupts is sent again to the new master with the time it has left.
//! Both carry out the decisions of an I/O-free core ([`core`]: command lines, replies, errors,
//! the lease clock and the renewal schedule).
//!
//! ```no_run
//! use std::time::Duration;
//! use redislock_client::Locker;
//!
//! let locker = Locker::open("redis://127.0.0.1:6379/")?;
//! let lock = locker.lock("lock:report").ttl(Duration::from_secs(30));
//! let hold = lock.acquire(Duration::from_secs(5))?; // waits in the server, up to 5 s
//! println!("holding lock:report with fence {}", hold.fence());
//! if hold.lost().is_set() {
//!     // lost: stop working under the lock
//! }
//! hold.release()?; // or drop it
//! # Ok::<(), redislock_client::Error>(())
//! ```
//!
//! **The lease clock.** Every hold's conservative local end is the moment the request that set
//! its lease (the grant, or the last renewal or extension answered) was *sent*, plus the lease,
//! minus 1 % and 2 ms. At that moment, unless a renewal sent before it was answered, the hold is
//! signalled lost ([`Hold::lost`], the lock's `on_lost`) and [`Hold::is_held`] turns false:
//! before the server can grant the lock to anyone else. A renewal that finds the hold gone
//! signals the loss at once. Each loss is signalled once.
//!
//! **One renewal thread.** The lease clocks and renewals of every hold of the process run on one
//! thread (`redislock-renew`), whose renewals go out concurrently, each bounded by the lease
//! left; the tokio front end runs one task per runtime instead.

pub mod aio;
pub mod core;

mod blocking;
mod cancel;
mod channel;
mod follow;
mod hold;
mod lost;
mod node_of;
mod owned;
mod renewer;
mod route;
mod surface;

use std::time::Duration;

/// The redis crate this client is built on (for `redis::cmd` in guarded writes).
pub use redis;

pub use crate::blocking::{Election, Hold, Lock, Locker, MultiHold, MultiLock, Observer};
pub use crate::cancel::{Stopper, Term};
pub use crate::core::args::{Mode, Token};
pub use crate::core::election::Leader;
pub use crate::core::error::{Error, Result};
pub use crate::core::lease::LostReason;
pub use crate::core::locked::Names;
pub use crate::core::reply::{Holder, LockInfo};
pub use crate::follow::{OnElected, OnNewLeader};
pub use crate::hold::OnLost;
pub use crate::lost::{Lost, LostSignal};

/// The lease of a lock not given a `ttl`.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The bound of a command that has no tighter one (a try, `info`).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

pub use crate::core::acquire::WAIT_GRACE;
