//! Module settings, through Redis 7's module configuration API: they work
//! as `loadmodule … max-ttl 60000` arguments (see [`apply_module_args`]), as `redislock.max-ttl` lines in
//! redis.conf, and with `CONFIG GET` / `CONFIG SET` at run time.

use std::sync::atomic::{AtomicI32, AtomicI64, Ordering::Relaxed};

use crate::core::lock::ENCODING_VERSION;

/// Longest TTL a lock may be given, in milliseconds; 0: no limit.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(0);
/// Longest a `BLOCK` may wait, in milliseconds; 0: no limit.
pub static MAX_BLOCK: AtomicI64 = AtomicI64::new(0);

/// The encoding version of the lock records written (`rdb-encoding`, a
/// module argument only: Redis fixes it when the type is created).
static RDB_ENCODING: AtomicI32 = AtomicI32::new(ENCODING_VERSION);

pub fn rdb_encoding() -> i32 {
    RDB_ENCODING.load(Relaxed)
}

pub fn max_ttl_ms() -> u64 {
    MAX_TTL.load(Relaxed).max(0) as u64
}

pub fn max_block_ms() -> u64 {
    MAX_BLOCK.load(Relaxed).max(0) as u64
}

/// Applies `name value` pairs given after the module path.
pub fn apply_module_args<A: std::ops::Deref<Target = [u8]>>(args: &[A]) -> Result<(), String> {
    if !args.len().is_multiple_of(2) {
        return Err(
            "module arguments come in pairs: max-ttl <ms> max-block <ms> rdb-encoding <3|4>".into(),
        );
    }
    for pair in args.chunks(2) {
        let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        let setting = match name.as_str() {
            "max-ttl" => &MAX_TTL,
            "max-block" => &MAX_BLOCK,
            "rdb-encoding" => {
                let version = crate::core::numbers::parse_i64(&pair[1])
                    .filter(|v| [3, i64::from(ENCODING_VERSION)].contains(v))
                    .ok_or_else(|| format!("rdb-encoding must be 3 or {ENCODING_VERSION}"))?;
                RDB_ENCODING.store(version as i32, Relaxed);
                continue;
            }
            _ => {
                return Err(format!(
                    "unknown module argument '{name}': expected max-ttl, max-block or rdb-encoding"
                ))
            }
        };
        let value = crate::core::numbers::parse_i64(&pair[1])
            .filter(|v| *v >= 0)
            .ok_or_else(|| format!("{name} must be a non-negative integer of milliseconds"))?;
        setting.store(value, Relaxed);
    }
    Ok(())
}
