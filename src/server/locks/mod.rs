//! The lock-lifecycle layer: everything that happens to a lock key over
//! its life goes through here, between the entry points (commands, the
//! data type's callbacks, server events, the scheduler's jobs) and the
//! mechanisms below, which know nothing of each other: the write path
//! (`lockops`: store, propagate, notify), the wait queue (`waiting`), the
//! connection bindings (`ephemeral`) and the one timer (`scheduler`).
//!
//! Each step runs in the order Redis, replicas and the AOF must see it:
//! write, propagate, notify (all in `lockops`), then what follows here —
//! bindings changed, a lease end watched, the freed room handed to the
//! waiters.
//!
//! - this file: opening a key live, carrying out a grant, release,
//!   extend, revoke, lease ends, and the jobs the scheduler runs;
//! - `serve.rs`: handing a lock to its waiters;
//! - `serve_all.rs`: waiting for several locks at once, and granting them
//!   all together;
//! - `keyspace.rs`: locks leaving or moving without a command of ours
//!   (unlink, flush, SWAPDB) and a demotion;
//! - `observed.rs`: what observers see, and when they look;
//! - `looks.rs`: the scheduler's reads, which look and settle observers.

mod keyspace;
mod looks;
mod observed;
mod serve;
mod serve_all;

pub use keyspace::*;
pub use observed::observe;
pub use serve::*;
pub use serve_all::{fences_left, wait_all};

use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::core::effects::HoldEffect;
use crate::core::errors::LockError;
use crate::core::grant::{Decision, Want};
use crate::core::holders::Holders;
use crate::core::lock::LockRef;
use crate::core::record::Stored;
use crate::server::ffi::{self, LockId, LockKey};
use crate::server::held::held;
use crate::server::lockops::{self, Look};
use crate::server::scheduler::{self, Job, Runner};
use crate::server::{cluster, ephemeral, observing, state, stats, waiting};

/// Opens `name` for writing with the holds whose lease ran out already
/// ended (the scheduler ends them too, but may be behind a client pause).
pub fn open_live(ctx: &Context, name: &RedisString) -> LockKey {
    let key = LockKey::open(ctx, name, true);
    if lockops::leases_due(&key) {
        let key = end_leases(ctx, name, key);
        drop(key);
        // Room freed by the ended leases goes to the waiters first.
        serve(ctx, name);
        return LockKey::open(ctx, name, true);
    }
    key
}

/// A grant the core decided on: who, how, until when.
pub struct Grant<'a> {
    pub token: &'a [u8],
    pub want: Want,
    pub expire_at: i64,
    /// The clock the decision was made at.
    pub now: i64,
    /// With `EPHEMERAL`: the connection the hold is bound to.
    pub bind_to: Option<u64>,
    /// Public data kept with the hold (`DATA`); a re-grant without it
    /// keeps the hold's.
    pub data: Option<&'a [u8]>,
    /// The notification of a new grant: `lock.acquired` or `lock.handoff`.
    pub event: &'a CStr,
}

impl<'a> Grant<'a> {
    /// The grant a waiter asked for, handed to it at `now` until `expire_at`.
    pub fn to_waiter(request: &'a waiting::Request, expire_at: i64, now: i64) -> Grant<'a> {
        Grant {
            token: &request.token,
            want: request.want,
            expire_at,
            now,
            bind_to: request.bind_to,
            data: request.data.as_deref(),
            event: c"lock.handoff",
        }
    }
}

/// Carries out a core decision to grant (`Decision::Grant`) or re-grant
/// (`Decision::Regrant`) on the open key `name`: the write, then the hold
/// bound to its connection (`EPHEMERAL`) or no longer bound, then its lease
/// end watched. Returns the fence. Every other decision is the caller's:
/// it answers a newcomer and a waiter differently.
pub fn carry_out(
    ctx: &Context,
    name: &RedisString,
    key: LockKey,
    decision: Decision,
    grant: &Grant,
) -> Result<u64, LockError> {
    let (token, expire_at) = (grant.token, grant.expire_at);
    if decision == Decision::Grant {
        // A new fence: in Cluster, above every fence granted for the slots
        // this node took over (its config epoch).
        cluster::follow_config_epoch(ctx);
    }
    let (fence, look) = match decision {
        Decision::Regrant => {
            let fence = held(&key)?
                .fence_of(token, grant.now)
                .ok_or(LockError::Internal)?;
            let look = match (grant.want, grant.data) {
                (Want::Exclusive, None) => {
                    lockops::set_expiry(ctx, name, key, expire_at);
                    watch_expiry(ctx, name, expire_at);
                    None
                }
                (Want::Exclusive, Some(data)) => {
                    let lock = LockRef::new(token, fence).with_data(Some(data));
                    lockops::regrant_with_data(ctx, name, key, lock, expire_at)?;
                    watch_expiry(ctx, name, expire_at);
                    None
                }
                _ => lockops::set_holder_expiry(ctx, name, key, token, expire_at, grant.data),
            };
            (fence, look)
        }
        Decision::Grant => match grant.want.creates() {
            None => {
                let fence =
                    lockops::grant(ctx, name, key, token, grant.data, expire_at, grant.event)?;
                (fence, None)
            }
            Some(kind) => {
                // A key with holders keeps its kind (the same, as decided).
                let kind = key.holders().map_or(kind, Holders::kind);
                let data = grant.data;
                lockops::grant_holder(ctx, name, key, kind, token, data, expire_at, grant.event)?
            }
        },
        _ => return Err(LockError::Internal),
    };
    bind_grant(ctx, name, grant, fence);
    watch_leases(ctx, name, look);
    match decision {
        Decision::Grant => observed::changed(ctx, name),
        _ => {
            // A re-grant keeps the fence; new data is news to observers that
            // saw the old (`SEEN`), and a look tells whether it is new.
            if grant.data.is_some() {
                observed::changed(ctx, name);
            }
            observed::watch_end(ctx, name, Some(expire_at));
        }
    }
    Ok(fence)
}

/// A grant's hold bound to its connection (`EPHEMERAL`), or no longer
/// bound (a re-grant without it).
fn bind_grant(ctx: &Context, name: &RedisString, grant: &Grant, fence: u64) {
    match grant.bind_to {
        Some(client) => ephemeral::bind(ffi::lock_id(ctx, name), client, grant.token, fence),
        None if ephemeral::any() => ephemeral::unbind_holder(&ffi::lock_id(ctx, name), grant.token),
        None => {}
    }
}

/// Releases `token`'s hold of the open key `name` (`multi`: a holder of a
/// shared lock or semaphore) and hands the freed room to the waiters.
pub fn release(ctx: &Context, name: &RedisString, key: LockKey, token: &[u8], multi: bool) {
    if ephemeral::any() {
        let id = ffi::lock_id(ctx, name);
        match multi {
            true => ephemeral::unbind_holder(&id, token),
            false => ephemeral::unbind(&id),
        }
    }
    // The common handoff: an exclusive lock to the next exclusive waiter,
    // the key rewritten where it is.
    let key = match multi {
        true => key,
        false => match hand_on(ctx, name, key) {
            None => return,
            Some(key) => key,
        },
    };
    let _send = ffi::SendHeldBack(ctx);
    keyspace::then_caller_serves(|| match multi {
        true => lockops::end_hold(ctx, name, key, token),
        // Without waiters no handoff can replace the `DEL`: sent at once.
        false => lockops::delete_lock(ctx, name, key, !waiting::is_empty()),
    });
    serve(ctx, name);
    observed::changed(ctx, name);
}

/// Moves the lease of `token`'s hold of the open key `name` to `expire_at`.
pub fn extend(
    ctx: &Context,
    name: &RedisString,
    key: LockKey,
    token: &[u8],
    multi: bool,
    expire_at: i64,
) {
    if multi {
        let look = lockops::set_holder_expiry(ctx, name, key, token, expire_at, None);
        watch_leases(ctx, name, look);
    } else {
        lockops::set_expiry(ctx, name, key, expire_at);
        watch_expiry(ctx, name, expire_at);
    }
    observed::watch_end(ctx, name, Some(expire_at));
}

/// Releases the grant `(token, fence)` of `id` if the lock is still that
/// grant: a client that disconnected before its reply, or a closed
/// connection's `EPHEMERAL` hold. Whether it did.
pub fn revoke(ctx: &Context, id: &LockId, token: &[u8], fence: u64) -> bool {
    if !ffi::select_db(ctx, id.db()) {
        return false;
    }
    let name = ctx.create_string(id.name());
    let key = LockKey::open(ctx, &name, true);
    let multi = match key.stored() {
        Some(Stored::Single(l)) if l.fence() == fence && l.is_held_by(token) => false,
        Some(Stored::Multi(h)) if h.get(token).is_some_and(|h| h.fence == fence) => true,
        _ => return false,
    };
    release(ctx, &name, key, token, multi);
    true
}

/// Ends every hold of `name` whose lease has run out (see
/// `lockops::end_leases`) and unbinds them; returns the key open again.
/// Does not serve the waiters: the caller does.
pub fn end_leases(ctx: &Context, name: &RedisString, key: LockKey) -> LockKey {
    let (key, ended) = keyspace::then_caller_serves(|| lockops::end_leases(ctx, name, key));
    if !ended.is_empty() && ephemeral::any() {
        let id = ffi::lock_id(ctx, name);
        for token in &ended {
            ephemeral::unbind_holder(&id, token);
        }
    }
    if !ended.is_empty() {
        observed::changed(ctx, name);
    }
    key
}

/// Looks at the holders of a lock from a scheduler job: ends the leases
/// that ran out and hands their room on.
pub fn tend(ctx: &Context, id: &LockId) {
    if !ffi::select_db(ctx, id.db()) {
        return;
    }
    let name = ctx.create_string(id.name());
    let key = LockKey::open(ctx, &name, true);
    let key = end_leases(ctx, &name, key);
    // Still holding: watch the next lease to end.
    let look = lockops::keep_ttl_at_latest(ctx, &name, key);
    if let Some(at) = look {
        scheduler::at(ctx, Job::Leases(id.clone()), at);
    }
    serve(ctx, &name);
}

/// Sets up the look at the next lease end of `name`'s holders a write
/// asked for.
fn watch_leases(ctx: &Context, name: &RedisString, look: Look) {
    if let Some(at) = look {
        scheduler::at(ctx, Job::Leases(ffi::lock_id(ctx, name)), at);
    }
}

/// A lock whose holders were loaded, restored or copied under `id`: their
/// first lease end is looked at `at`.
pub fn watch_leases_of(id: LockId, at: i64) {
    if let Some(ctx) = state::detached_context() {
        scheduler::at(&ctx, Job::Leases(id), at);
    }
}

/// The lock `name`, held until `expire_at`, is to be looked at again just
/// after that if clients wait for it (a re-grant or extend moved it).
fn watch_expiry(ctx: &Context, name: &RedisString, expire_at: i64) {
    if waiting::is_empty() {
        return;
    }
    let id = ffi::lock_id(ctx, name);
    if waiting::count_of(&id) > 0 {
        scheduler::at(ctx, Job::Serve(id), expire_at.saturating_add(1));
    }
}

/// A grant of an exclusive lock replayed from the master or the AOF.
pub fn replayed(ctx: &Context, name: &RedisString) {
    observed::changed(ctx, name);
}

/// Replays one holder's effect from the master or the AOF, and watches
/// the leases it leaves.
pub fn replay_hold(ctx: &Context, name: &RedisString, effect: HoldEffect) -> Result<(), LockError> {
    let key = LockKey::open(ctx, name, true);
    let look = lockops::replay_hold(ctx, key, effect)?;
    watch_leases(ctx, name, look);
    observed::changed(ctx, name);
    Ok(())
}

/// Releases the holds of the lock `name` whose connection closed, before a
/// command looks at it: they count as gone (the scheduler may not have come
/// to them yet). Call only where writing is allowed.
pub fn release_orphans_of(ctx: &Context, name: &[u8]) {
    if ephemeral::orphans() == 0 {
        return;
    }
    release_orphans_of_id(ctx, &ffi::lock_id(ctx, name));
}

fn release_orphans_of_id(ctx: &Context, id: &LockId) {
    let taken = ephemeral::take_orphans(id);
    if taken.is_empty() {
        return;
    }
    let db = ffi::selected_db(ctx);
    for (token, fence) in taken {
        if revoke(ctx, id, &token, fence) {
            stats::EPHEMERAL_RELEASES.bump();
        }
    }
    // The command goes on in the database it was sent to (an index that
    // exists: the command runs in it).
    let _ = ffi::select_db(ctx, db);
}

/// Releases the next hold of a closed connection, from a scheduler pass
/// that checked the server's state; false if none is left.
fn release_next_orphan(ctx: &Context) -> bool {
    let Some((id, token, fence)) = ephemeral::next_orphan() else {
        return false;
    };
    // A hold that left meanwhile (migrated, deleted) is not counted.
    if revoke(ctx, &id, &token, fence) {
        stats::EPHEMERAL_RELEASES.bump();
    }
    true
}

/// What the scheduler's jobs do.
pub static RUNNER: Runner = Runner {
    job: run,
    deadline,
    background_pending: || ephemeral::orphans() > 0,
    background: release_next_orphan,
    on_replica: ephemeral::unbind_all,
    urgent,
    look: |id| observed::changed_id(&id),
    reads_pending: observing::has_work,
    reads: looks::reads,
    leaving_pending: waiting::leaving::pending,
    release_leaving: waiting::leaving::release_batch,
};

/// A blocked client's deadline: an observer's or a waiter's.
fn deadline(handle: ffi::BlockedId) {
    if !observing::on_deadline(handle) {
        waiting::on_deadline(handle);
    }
}

/// A lock that a client waits for: its job hands it on, so it runs as soon
/// as it is due, not up to the event loop's millisecond later.
fn urgent(job: &Job) -> bool {
    match job {
        Job::Serve(_) => true,
        Job::Leases(id) => waiting::count_of(id) > 0,
        Job::Revoke(..) | Job::Epoch(_) | Job::Deadline(_) | Job::Look(_) => false,
    }
}

fn run(ctx: &Context, job: Job) {
    match job {
        Job::Serve(id) => serve_id(ctx, &id),
        Job::Leases(id) => tend(ctx, &id),
        Job::Revoke(grant) => {
            let (id, token, fence) = *grant;
            revoke(ctx, &id, &token, fence);
        }
        // The scheduler's own.
        Job::Epoch(_) | Job::Deadline(_) | Job::Look(_) => {}
    }
}
