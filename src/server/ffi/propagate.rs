//! Propagation of effects to replicas and the AOF, AOF rewrite, and digests
//! of exclusive locks, gates and the fence epoch (holders: `propagate_holders`).

use std::cell::RefCell;
use std::ffi::{c_char, CStr};

use redis_module::{raw, Context, RedisString};

use crate::core::lock::LockRef;
use crate::core::numbers;

const APPLY: &CStr = c"LOCK._APPLY";

thread_local! {
    /// A release's `DEL`, held back while the releasing command hands the
    /// lock on: an exclusive grant's `LOCK._APPLY` replaces the lock on a
    /// replica as it does here, so a `DEL` of the same key just before it
    /// need not be sent (one effect instead of two, and no `MULTI`/`EXEC`
    /// around them). Any other effect sends it first, keeping the order;
    /// so does a grant with `DATA`, which a replica on the previous release
    /// refuses: the release must still reach it, lest it keep the holder
    /// that was released.
    static HELD_BACK_DEL: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Holds back the `DEL` of `key` until the next effect or `send_held_back`.
pub fn hold_back_delete(ctx: &Context, key: &RedisString) {
    send_held_back(ctx);
    HELD_BACK_DEL.with(|d| *d.borrow_mut() = Some(key.as_slice().to_vec()));
}

/// Sends the held-back `DEL` when dropped, also if the code between
/// unwinds: a `DEL` left pending would go out with a later command.
pub struct SendHeldBack<'a>(pub &'a Context);

impl Drop for SendHeldBack<'_> {
    fn drop(&mut self) {
        send_held_back(self.0);
    }
}

/// Sends the held-back `DEL`, if any.
pub fn send_held_back(ctx: &Context) {
    if let Some(key) = HELD_BACK_DEL.with(|d| d.borrow_mut().take()) {
        // SAFETY: the format "b" matches a buffer with its length.
        unsafe {
            raw::RedisModule_Replicate.unwrap()(
                ctx.ctx,
                c"DEL".as_ptr(),
                c"b".as_ptr(),
                key.as_ptr().cast::<c_char>(),
                key.len(),
            )
        };
    }
}

/// Propagates the `DEL` of `key` now (after any held back).
pub fn replicate_delete(ctx: &Context, key: &RedisString) {
    send_held_back(ctx);
    // SAFETY: the format "s" matches a Redis string.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.inner)
    };
}

/// Propagates a grant to replicas and the AOF as its exact effect:
/// `LOCK._APPLY key token fence unix-ms [DATA data]`.
pub fn replicate_grant(ctx: &Context, key: &RedisString, lock: LockRef<'_>, expire_at: i64) {
    let (token, fence) = (lock.token(), lock.fence());
    let replaces = lock.data().is_none()
        && HELD_BACK_DEL.with(|d| {
            let mut d = d.borrow_mut();
            let same = d.as_deref() == Some(key.as_slice());
            if same {
                *d = None;
            }
            same
        });
    if !replaces {
        send_held_back(ctx);
    }
    // Numbers go as text formatted here: Redis's own conversion of "l"
    // arguments costs more than the rest of the call's argument handling.
    let (mut fence_buf, mut at_buf) = ([0u8; 20], [0u8; 20]);
    let fence = numbers::decimal(fence, &mut fence_buf);
    let at = numbers::decimal(expire_at.max(0) as u64, &mut at_buf);
    let Some(data) = lock.data() else {
        // SAFETY: the format "sbbb" matches the arguments: a Redis string,
        // then three buffers each with its length.
        unsafe {
            raw::RedisModule_Replicate.unwrap()(
                ctx.ctx,
                APPLY.as_ptr(),
                c"sbbb".as_ptr(),
                key.inner,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
                at.as_ptr().cast::<c_char>(),
                at.len(),
            )
        };
        return;
    };
    // SAFETY: the format "sbbbcb" matches the arguments: a Redis string,
    // three buffers each with its length, a C string, a buffer and length.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            APPLY.as_ptr(),
            c"sbbbcb".as_ptr(),
            key.inner,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            fence.as_ptr().cast::<c_char>(),
            fence.len(),
            at.as_ptr().cast::<c_char>(),
            at.len(),
            c"DATA".as_ptr(),
            data.as_ptr().cast::<c_char>(),
            data.len(),
        )
    };
}

/// Propagates a promoted master's new fence epoch.
pub fn replicate_epoch(ctx: &Context, epoch: u64) {
    send_held_back(ctx);
    // SAFETY: the format "l" matches one long long.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            c"LOCK._EPOCH".as_ptr(),
            c"l".as_ptr(),
            epoch as i64,
        )
    };
}

/// Propagates a new absolute expiry (re-grant, extend).
pub fn replicate_expire_at(ctx: &Context, key: &RedisString, expire_at: i64) {
    send_held_back(ctx);
    let mut at_buf = [0u8; 20];
    let at = numbers::decimal(expire_at.max(0) as u64, &mut at_buf);
    // SAFETY: the format "sb" matches a Redis string and a buffer with its length.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            c"PEXPIREAT".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            at.as_ptr().cast::<c_char>(),
            at.len(),
        )
    };
}

/// Writes a lock to a rewritten AOF; Redis appends the key's `PEXPIREAT`.
pub fn emit_aof_grant(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    lock: LockRef<'_>,
) {
    let token = lock.token();
    let Some(data) = lock.data() else {
        // SAFETY: `aof` and `key` come from Redis's rewrite callback; the
        // format "sbl" matches a Redis string, a buffer with its length and
        // a long long.
        unsafe {
            raw::RedisModule_EmitAOF.unwrap()(
                aof,
                APPLY.as_ptr(),
                c"sbl".as_ptr(),
                key,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                lock.fence() as i64,
            )
        };
        return;
    };
    // SAFETY: as above; "sblcb" adds a C string and a buffer with its length.
    unsafe {
        raw::RedisModule_EmitAOF.unwrap()(
            aof,
            APPLY.as_ptr(),
            c"sblcb".as_ptr(),
            key,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            lock.fence() as i64,
            c"DATA".as_ptr(),
            data.as_ptr().cast::<c_char>(),
            data.len(),
        )
    };
}

/// Feeds one record into `DEBUG DIGEST-VALUE`.
pub fn digest_lock(md: *mut raw::RedisModuleDigest, lock: LockRef<'_>) {
    let token = lock.token();
    // SAFETY: `md` comes from Redis's digest callback; the buffer is valid
    // for its length.
    unsafe {
        raw::RedisModule_DigestAddStringBuffer.unwrap()(md, token.as_ptr().cast(), token.len());
        raw::RedisModule_DigestAddLongLong.unwrap()(md, lock.fence() as i64);
        raw::RedisModule_DigestAddLongLong.unwrap()(md, lock.mode().code() as i64);
        // Only a lock with data adds it: digests of the others stay as
        // earlier releases made them.
        if let Some(data) = lock.data() {
            raw::RedisModule_DigestAddStringBuffer.unwrap()(md, data.as_ptr().cast(), data.len());
        }
        raw::RedisModule_DigestEndSequence.unwrap()(md);
    }
}

const GATE: &CStr = c"LOCK._GATE";

/// Propagates a fence gate's new highest fence.
pub fn replicate_gate(ctx: &Context, key: &RedisString, fence: u64) {
    send_held_back(ctx);
    let mut fence_buf = [0u8; 20];
    let fence = numbers::decimal(fence, &mut fence_buf);
    // SAFETY: the format "sb" matches a Redis string and a buffer with its length.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            GATE.as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            fence.as_ptr().cast::<c_char>(),
            fence.len(),
        )
    };
}

/// Writes a fence gate to a rewritten AOF.
pub fn emit_aof_gate(aof: *mut raw::RedisModuleIO, key: *mut raw::RedisModuleString, fence: u64) {
    // SAFETY: `aof` and `key` come from Redis's rewrite callback; the format
    // "sl" matches a Redis string and a long long.
    unsafe {
        raw::RedisModule_EmitAOF.unwrap()(aof, GATE.as_ptr(), c"sl".as_ptr(), key, fence as i64)
    };
}

/// Writes the fence epoch to a rewritten AOF, ahead of the locks, as a
/// promotion propagates it: the epoch of released locks is in no record.
pub fn emit_aof_epoch(aof: *mut raw::RedisModuleIO, epoch: u64) {
    // SAFETY: `aof` comes from Redis's rewrite callback; the format "l"
    // matches a long long.
    unsafe {
        raw::RedisModule_EmitAOF.unwrap()(aof, c"LOCK._EPOCH".as_ptr(), c"l".as_ptr(), epoch as i64)
    };
}
