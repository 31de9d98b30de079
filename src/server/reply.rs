//! Replies written straight to the client, without building a value tree.

use std::ffi::{c_char, CString};

use redis_module::{raw, Context, RedisValue};

use crate::core::errors::LockError;

/// `[token, fence]`, the answer to a successful acquire.
pub fn grant(ctx: &Context, token: &[u8], fence: u64) -> RedisValue {
    raw::reply_with_array(ctx.ctx, 2);
    bulk(ctx, token);
    raw::reply_with_long_long(ctx.ctx, fence as i64);
    RedisValue::NoReply
}

/// `[token, [fence, …]]`, the answer to a multi-key acquire: one fence
/// per key, in the order the keys were named.
pub fn grant_all(ctx: &Context, token: &[u8], fences: &[u64]) -> RedisValue {
    raw::reply_with_array(ctx.ctx, 2);
    bulk(ctx, token);
    raw::reply_with_array(ctx.ctx, fences.len() as _);
    for &fence in fences {
        raw::reply_with_long_long(ctx.ctx, fence as i64);
    }
    RedisValue::NoReply
}

/// `[fence, data]`, what `LOCK.OBSERVE` answers: data nil when the holder
/// has none (and for no holder, fence 0).
pub fn observed(ctx: &Context, fence: u64, data: Option<&[u8]>) -> RedisValue {
    raw::reply_with_array(ctx.ctx, 2);
    raw::reply_with_long_long(ctx.ctx, fence as i64);
    match data {
        Some(data) => bulk(ctx, data),
        None => {
            raw::reply_with_null(ctx.ctx);
        }
    }
    RedisValue::NoReply
}

/// Field/value pairs: a map under RESP3, a flat array under RESP2.
pub fn fields(ctx: &Context, pairs: &[(&str, Field<'_>)]) -> RedisValue {
    raw::reply_with_map(ctx.ctx, pairs.len() as _);
    for (name, value) in pairs {
        bulk(ctx, name.as_bytes());
        match value {
            Field::Bytes(b) => bulk(ctx, b),
            Field::Int(i) => {
                raw::reply_with_long_long(ctx.ctx, *i);
            }
            Field::Maps(maps) => {
                raw::reply_with_array(ctx.ctx, maps.len() as _);
                for map in maps.iter() {
                    fields(ctx, map);
                }
            }
        }
    }
    RedisValue::NoReply
}

pub enum Field<'a> {
    Bytes(&'a [u8]),
    Int(i64),
    /// A list of field/value maps (the holders of a lock).
    Maps(&'a [&'a [(&'a str, Field<'a>)]]),
}

fn bulk(ctx: &Context, bytes: &[u8]) {
    raw::reply_with_string_buffer(ctx.ctx, bytes.as_ptr().cast::<c_char>(), bytes.len());
}

/// An error reply. Its text is made one printable ASCII line whatever it
/// holds (an echoed option may carry any bytes), so building the C string
/// can never fail.
pub fn error(ctx: &Context, e: &LockError) -> raw::Status {
    let text: Vec<u8> = e
        .to_string()
        .bytes()
        .map(|b| {
            if b.is_ascii_graphic() || b == b' ' {
                b
            } else {
                b'?'
            }
        })
        .collect();
    let text = CString::new(text).unwrap_or_default();
    raw::reply_with_error(ctx.ctx, text.as_ptr());
    raw::Status::Ok
}
