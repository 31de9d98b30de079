//! Waiters whose connection closed. Each leaves its queues at once, in its
//! disconnect callback (the queue's order, the look at the lock it kept
//! waiting, a grant given back: `on_disconnect`); only the server's handle
//! of its wait is released later, a batch per timer pass.
//!
//! Releasing the handle (`RedisModule_UnblockClient`) costs the server its
//! own work at the end of the event-loop turn: it frees the wait's
//! temporary clients and the handle, every one released in that turn at
//! once. Connections that close together arrive in one turn by the
//! thousand, so released in the callback they would all be freed in that
//! one turn, after the server's own work on every closed connection; here
//! the turn carries only the latter, and the handles follow a batch per
//! timer pass (a few hundred: a fraction of a millisecond of the server's
//! work), as the server's clients are served in between. A handle released later answers nobody: its
//! client is gone. The first few since the last pass are released at once,
//! so that connections closing one at a time cost no timer pass each.

use std::cell::{Cell, RefCell};

use crate::server::ffi::BlockedClient;

thread_local! {
    // Redis calls modules on its main thread only.
    static LEAVING: RefCell<Vec<BlockedClient>> = const { RefCell::new(Vec::new()) };
    /// Handles released at once since the last batch.
    static AT_ONCE: Cell<usize> = const { Cell::new(0) };
}

/// Handles released at once between two batches.
const AT_ONCE_MAX: usize = 64;

/// Handles released by one pass: each costs the server about 1,500
/// instructions after the pass, so a batch adds well under a millisecond
/// to its turn, and the pass's own cost is shared by many.
const BATCH: usize = 256;

/// Room kept for the handles between bursts.
const KEPT: usize = 64;

/// Releases the handle of a wait whose connection closed: at once if few
/// did since the last batch, else by a later pass; true if it is the first
/// left to a pass (the caller has the scheduler look; a pass that leaves
/// some has it look again).
#[must_use]
pub fn let_go(client: BlockedClient) -> bool {
    let at_once = AT_ONCE.with(Cell::get);
    let first = !pending();
    if at_once < AT_ONCE_MAX && first {
        AT_ONCE.with(|a| a.set(at_once + 1));
        client.unblock();
        return false;
    }
    LEAVING.with(|l| l.borrow_mut().push(client));
    first
}

/// Handles still to release.
pub fn count() -> usize {
    LEAVING.with(|l| l.borrow().len())
}

/// Whether any handle is still to release.
pub fn pending() -> bool {
    count() > 0
}

/// Releases a batch of the handles; true if some are left for the next
/// pass.
pub fn release_batch() -> bool {
    AT_ONCE.with(|a| a.set(0));
    for _ in 0..BATCH {
        // No borrow is held while Redis is called.
        let Some(client) = LEAVING.with(|l| l.borrow_mut().pop()) else {
            break;
        };
        client.unblock();
    }
    LEAVING.with(|l| {
        let mut l = l.borrow_mut();
        if l.is_empty() && l.capacity() > KEPT {
            l.shrink_to(KEPT);
        }
        !l.is_empty()
    })
}
