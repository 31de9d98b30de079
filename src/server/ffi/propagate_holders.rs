//! Propagation, AOF rewrite and digests of shared locks and semaphores:
//! one `LOCK._HOLD` effect per holder.

use std::ffi::{c_char, CStr};

use redis_module::{raw, Context, RedisString};

use crate::core::holders::{Hold, Holders, Kind};
use crate::core::lock::Mode;
use crate::core::{limits, numbers};

use super::propagate::send_held_back;

const HOLD: &CStr = c"LOCK._HOLD";
/// `limits::HOLD_EFFECT_VERSION` as text (a number would be formatted by Redis
/// on every call).
const HOLD_VERSION: &CStr = c"1";
const _: () = assert!(limits::HOLD_EFFECT_VERSION == 1, "HOLD_VERSION must match");

/// The kind arguments of a `LOCK._HOLD … GRANT`: `SHARED 0` or `LIMIT n`.
fn kind_args(kind: Kind) -> (&'static CStr, u64) {
    match kind {
        Kind::Shared => (c"SHARED", 0),
        Kind::Semaphore { limit } => (c"LIMIT", u64::from(limit)),
    }
}

/// Propagates one holder's grant, re-grant or extend as its exact state,
/// its public data included (`DATA data` last, when it has some).
pub fn replicate_hold(
    ctx: &Context,
    key: &RedisString,
    kind: Kind,
    token: &[u8],
    hold: Hold,
    data: Option<&[u8]>,
) {
    send_held_back(ctx);
    let (kind_name, limit) = kind_args(kind);
    // Numbers go as text formatted here, as in `replicate_grant`.
    let (mut limit_buf, mut fence_buf, mut at_buf) = ([0u8; 20], [0u8; 20], [0u8; 20]);
    let limit = numbers::decimal(limit, &mut limit_buf);
    let fence = numbers::decimal(hold.fence, &mut fence_buf);
    let at = numbers::decimal(hold.expire_at.max(0) as u64, &mut at_buf);
    if let Some(data) = data {
        // SAFETY: the format "scccbbbbcb" matches the key's Redis string,
        // three C strings, four buffers each with its length, a C string and
        // a buffer with its length.
        unsafe {
            raw::RedisModule_Replicate.unwrap()(
                ctx.ctx,
                HOLD.as_ptr(),
                c"scccbbbbcb".as_ptr(),
                key.inner,
                HOLD_VERSION.as_ptr(),
                c"GRANT".as_ptr(),
                kind_name.as_ptr(),
                limit.as_ptr().cast::<c_char>(),
                limit.len(),
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
        return;
    }
    // SAFETY: the format "scccbbbb" matches the key's Redis string, three C
    // strings and four buffers each with its length.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            HOLD.as_ptr(),
            c"scccbbbb".as_ptr(),
            key.inner,
            HOLD_VERSION.as_ptr(),
            c"GRANT".as_ptr(),
            kind_name.as_ptr(),
            limit.as_ptr().cast::<c_char>(),
            limit.len(),
            token.as_ptr().cast::<c_char>(),
            token.len(),
            fence.as_ptr().cast::<c_char>(),
            fence.len(),
            at.as_ptr().cast::<c_char>(),
            at.len(),
        )
    };
}

/// Propagates the end of one holder's hold (release, revoke, lease end).
pub fn replicate_hold_end(ctx: &Context, key: &RedisString, token: &[u8]) {
    send_held_back(ctx);
    // SAFETY: the format "sccb" matches a Redis string, two C strings and a
    // buffer with its length.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            HOLD.as_ptr(),
            c"sccb".as_ptr(),
            key.inner,
            HOLD_VERSION.as_ptr(),
            c"END".as_ptr(),
            token.as_ptr().cast::<c_char>(),
            token.len(),
        )
    };
}

/// Writes every holder to a rewritten AOF; Redis appends the key's `PEXPIREAT`.
pub fn emit_aof_holders(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    holders: &Holders,
) {
    let (kind_name, limit) = kind_args(holders.kind());
    for (token, hold, data) in holders.entries() {
        if let Some(data) = data {
            // SAFETY: `aof` and `key` come from Redis's rewrite callback;
            // the format matches as below, with a C string and a buffer
            // with its length after them.
            unsafe {
                raw::RedisModule_EmitAOF.unwrap()(
                    aof,
                    HOLD.as_ptr(),
                    c"slcclbllcb".as_ptr(),
                    key,
                    limits::HOLD_EFFECT_VERSION as i64,
                    c"GRANT".as_ptr(),
                    kind_name.as_ptr(),
                    limit as i64,
                    token.as_ptr().cast::<c_char>(),
                    token.len(),
                    hold.fence as i64,
                    hold.expire_at,
                    c"DATA".as_ptr(),
                    data.as_ptr().cast::<c_char>(),
                    data.len(),
                )
            };
            continue;
        }
        // SAFETY: `aof` and `key` come from Redis's rewrite callback; the
        // format matches as in `replicate_hold`.
        unsafe {
            raw::RedisModule_EmitAOF.unwrap()(
                aof,
                HOLD.as_ptr(),
                c"slcclbll".as_ptr(),
                key,
                limits::HOLD_EFFECT_VERSION as i64,
                c"GRANT".as_ptr(),
                kind_name.as_ptr(),
                limit as i64,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                hold.fence as i64,
                hold.expire_at,
            )
        };
    }
}

/// Feeds a key's holders into `DEBUG DIGEST-VALUE`: kind, limit, then each
/// hold (token, fence, lease end, and its public data if it has some: the
/// digests of holds without data stay as earlier releases made them) in
/// lease order.
pub fn digest_holders(md: *mut raw::RedisModuleDigest, holders: &Holders) {
    let (code, limit) = match holders.kind() {
        Kind::Shared => (Mode::Shared, 0),
        Kind::Semaphore { limit } => (Mode::Semaphore, i64::from(limit)),
    };
    // SAFETY: `md` comes from Redis's digest callback; buffers are valid for
    // their lengths.
    unsafe {
        raw::RedisModule_DigestAddLongLong.unwrap()(md, code.code() as i64);
        raw::RedisModule_DigestAddLongLong.unwrap()(md, limit);
        raw::RedisModule_DigestEndSequence.unwrap()(md);
        for (token, hold, data) in holders.entries() {
            raw::RedisModule_DigestAddStringBuffer.unwrap()(md, token.as_ptr().cast(), token.len());
            raw::RedisModule_DigestAddLongLong.unwrap()(md, hold.fence as i64);
            raw::RedisModule_DigestAddLongLong.unwrap()(md, hold.expire_at);
            if let Some(data) = data {
                raw::RedisModule_DigestAddStringBuffer.unwrap()(
                    md,
                    data.as_ptr().cast(),
                    data.len(),
                );
            }
            raw::RedisModule_DigestEndSequence.unwrap()(md);
        }
    }
}
