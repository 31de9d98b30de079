//! Lock records as encoding versions 1 to 3 lay them out, a field each
//! (version 4 packs a record into one string: `core::packed`). Every
//! version is read; version 3 is written by a server started with
//! `rdb-encoding 3`, for the previous release to read its `DUMP` payloads.
//!
//! Version 3: the mode; then an exclusive lock or gate as fence and token
//! (as in versions 1 and 2), or holders as limit (0 for shared), count,
//! and the holds as one string (`Holders::encoded`). An exclusive lock
//! with public data has the code `EXCLUSIVE_WITH_DATA` in place of its
//! mode and the data after the token; holders of which some have data have
//! `SHARED_WITH_DATA` or `SEMAPHORE_WITH_DATA` and their holds written with
//! data. Version 2 wrote each hold's fence, lease end and token as fields.

use std::ffi::c_int;

use redis_module::raw;

use super::latest_end;
use crate::core::holders::{Hold, Holders, Kind};
use crate::core::limits;
use crate::core::lock::{
    LockRef, Mode, EXCLUSIVE_WITH_DATA, SEMAPHORE_WITH_DATA, SHARED_WITH_DATA,
};
use crate::core::record::{Record, Stored};

/// Writes `record` as encoding version 3.
pub fn save(rdb: *mut raw::RedisModuleIO, record: Stored<'_>) {
    match record {
        Stored::Single(lock) => {
            let code = match lock.data() {
                Some(_) => EXCLUSIVE_WITH_DATA,
                None => lock.mode().code(),
            };
            raw::save_unsigned(rdb, code);
            raw::save_unsigned(rdb, lock.fence());
            raw::save_slice(rdb, lock.token());
            if let Some(data) = lock.data() {
                raw::save_slice(rdb, data);
            }
        }
        Stored::Multi(holders) => {
            let (mode, limit) = match holders.kind() {
                Kind::Shared => (Mode::Shared, 0),
                Kind::Semaphore { limit } => (Mode::Semaphore, u64::from(limit)),
            };
            let code = match (holders.has_data(), mode) {
                (false, _) => mode.code(),
                (true, Mode::Semaphore) => SEMAPHORE_WITH_DATA,
                (true, _) => SHARED_WITH_DATA,
            };
            raw::save_unsigned(rdb, code);
            raw::save_unsigned(rdb, limit);
            raw::save_unsigned(rdb, holders.len() as u64);
            raw::save_slice(rdb, &holders.encoded());
        }
    }
}

/// Reads a record of encoding version `encver` (1 to 3).
pub fn load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Record> {
    let mode = raw::load_unsigned(rdb).ok()?;
    if mode == EXCLUSIVE_WITH_DATA && encver >= 3 {
        return load_with_data(rdb, encver);
    }
    let with_data = match mode {
        SHARED_WITH_DATA if encver >= 3 => Some(Mode::Shared),
        SEMAPHORE_WITH_DATA if encver >= 3 => Some(Mode::Semaphore),
        _ => None,
    };
    if let Some(m) = with_data {
        return Some(Record::new_multi(load_holders(rdb, m, true, encver)?));
    }
    match Mode::from_code(mode)? {
        m @ (Mode::Shared | Mode::Semaphore) if encver >= 2 => {
            Some(Record::new_multi(load_holders(rdb, m, false, encver)?))
        }
        _ => {
            let fence = raw::load_unsigned(rdb).ok()?;
            let token = raw::load_string_buffer(rdb).ok()?;
            let lock = LockRef::decode(encver, mode, fence, token.as_ref()).ok()?;
            Some(Record::new(lock))
        }
    }
}

/// Reads the holders of a shared lock or semaphore (after their mode), as
/// encoding version `encver` (2 or 3) wrote them, `with_data` (version 3
/// only) or not.
fn load_holders(
    rdb: *mut raw::RedisModuleIO,
    mode: Mode,
    with_data: bool,
    encver: c_int,
) -> Option<Holders> {
    let limit = raw::load_unsigned(rdb).ok()?;
    let kind = match mode {
        Mode::Shared if limit == 0 => Kind::Shared,
        Mode::Semaphore => Kind::Semaphore {
            limit: u32::try_from(limit).ok()?,
        },
        _ => return None,
    };
    let count = raw::load_unsigned(rdb).ok()?;
    if encver >= 3 {
        let holds = raw::load_string_buffer(rdb).ok()?;
        return Holders::from_encoded(kind, count, holds.as_ref(), with_data, latest_end()).ok();
    }
    // Never trust the count for an allocation: a forged one would be huge.
    let mut holds = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        let fence = raw::load_unsigned(rdb).ok()?;
        let expire_at = raw::load_signed(rdb).ok()?;
        let token = raw::load_string_buffer(rdb).ok()?;
        holds.push((token.as_ref().to_vec(), Hold { fence, expire_at }, None));
    }
    Holders::from_stored(kind, holds, latest_end()).ok()
}

/// Reads an exclusive lock with public data (after its code): fence, token,
/// data.
fn load_with_data(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Record> {
    let fence = raw::load_unsigned(rdb).ok()?;
    let token = raw::load_string_buffer(rdb).ok()?;
    let data = raw::load_string_buffer(rdb).ok()?;
    let data = Some(data.as_ref()).filter(|d| (1..=limits::MAX_DATA_LEN).contains(&d.len()));
    let lock = LockRef::decode(encver, Mode::Exclusive.code(), fence, token.as_ref()).ok()?;
    Some(Record::new(lock.with_data(Some(data?))))
}
