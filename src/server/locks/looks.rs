//! The scheduler's reads: each lock marked changed (`observed.rs`) looked
//! at once, after the pass's writes, and its observers settled. A lock
//! found ended by itself that clients wait for is handed on first
//! (`serve.rs`), so observers see the new holder as one change.

use std::cell::RefCell;
use std::time::Instant;

use redis_module::Context;

use crate::core::budget::{Budget, Pace};
use crate::server::ffi::{self, KeyKind, LockId, LockKey};
use crate::server::{lockops, observing, waiting, writable};

use super::observed::{changed_in, seen, watch_end_of};
use super::serve;

thread_local! {
    /// How many observers a pass unblocks: each costs the server a reply
    /// callback and a socket write after the pass.
    static PACE: RefCell<Pace> = const { RefCell::new(Pace::new()) };
}

/// Looks at the lock `id` and settles its observers. A lock found ended
/// by itself (its expiry, a lease end) that clients wait for is handed on
/// first, where the server's state allows writing: observers see the new
/// holder, one change, as they do after a release.
fn look(ctx: &Context, id: &LockId) {
    if !ffi::select_db(ctx, id.db()) {
        return;
    }
    let name = ctx.create_string(id.name());
    let mut key = LockKey::open(ctx, &name, false);
    let ended = key.kind() == KeyKind::Empty || lockops::leases_due(&key);
    if ended && waiting::count_of(id) > 0 && writable::may_write(ctx).is_ok() {
        drop(key);
        serve(ctx, &name);
        key = LockKey::open(ctx, &name, false);
    }
    let (seen, ends) = seen(ctx, &key, id.name());
    drop(key);
    observing::settle(id, seen);
    watch_end_of(ctx, id.clone(), ends);
}

/// The scheduler's reads, for one slice: woken observers unblocked (a
/// bounded number), then each changed lock looked at. True if the slice
/// ended with some left.
pub fn reads(ctx: &Context, budget: &Budget) -> bool {
    if observing::take_moved() {
        // A lock moved to a name no event told: it may be any watched one.
        changed_in(-1);
    }
    let batch = PACE.with(|p| p.borrow_mut().batch(Instant::now()));
    let mut left = batch;
    let more = loop {
        left -= observing::unblock_some(left);
        if left == 0 || budget.spent() {
            break observing::has_work();
        }
        let Some(id) = observing::next_changed() else {
            break observing::has_work();
        };
        look(ctx, &id);
    };
    PACE.with(|p| p.borrow_mut().sent(Instant::now(), batch - left, more));
    more
}
