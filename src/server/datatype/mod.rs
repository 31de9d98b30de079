//! The `redislock` data type: how a lock is saved, loaded, copied, digested
//! and rewritten into the AOF, and where the fence clock is kept in RDB files.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::core::fence::{self, FenceClock};
use crate::core::holders::Holders;
use crate::core::limits;
use crate::core::lock::ENCODING_VERSION;
use crate::core::packed::{self, Unpacked};
use crate::core::record::{Record, Stored};
use crate::core::release;
use crate::server::{catch_panic, cluster, ffi, locks, state, stats};

mod fields;
mod owed;

/// How Redis calls the type.
const METHODS: raw::RedisModuleTypeMethods = raw::RedisModuleTypeMethods {
    version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
    rdb_load: Some(rdb_load),
    rdb_save: Some(rdb_save),
    aof_rewrite: Some(aof_rewrite),
    mem_usage: Some(mem_usage),
    digest: Some(digest),
    free: Some(free),
    aux_load: Some(aux_load),
    aux_save: Some(aux_save),
    aux_save2: None,
    aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
    free_effort: None,
    unlink: None,
    copy: None,
    defrag: None,
    copy2: Some(copy),
    free_effort2: None,
    mem_usage2: None,
    unlink2: Some(unlink),
};

/// The type, writing records of the current encoding version. Redis takes
/// the version a type writes when the type is created, once, at load.
static LOCK_TYPE: RedisType = RedisType::new("redislock", ENCODING_VERSION, METHODS);
/// The type writing encoding version 3, which the previous release reads.
static LOCK_TYPE_V3: RedisType = RedisType::new("redislock", FIELDS_VERSION, METHODS);

/// The newest encoding written a field per part (see `fields`).
const FIELDS_VERSION: i32 = 3;

/// Records are written as encoding version 3 (`rdb-encoding 3`).
static WRITES_FIELDS: AtomicBool = AtomicBool::new(false);

/// Creates the type, writing encoding version `version` (3 or the current
/// one; any other is refused), and returns it for the key layer.
pub fn create(
    ctx: *mut raw::RedisModuleCtx,
    version: i32,
) -> Result<*mut raw::RedisModuleType, String> {
    let lock_type = match version {
        ENCODING_VERSION => &LOCK_TYPE,
        FIELDS_VERSION => &LOCK_TYPE_V3,
        _ => {
            return Err(format!(
                "rdb-encoding must be {FIELDS_VERSION} or {ENCODING_VERSION}, not {version}"
            ))
        }
    };
    lock_type.create_data_type(ctx)?;
    WRITES_FIELDS.store(version == FIELDS_VERSION, Ordering::Relaxed);
    Ok(*lock_type.raw_type.borrow())
}

/// The encoding version of the records this server writes.
pub fn written_version() -> i32 {
    match WRITES_FIELDS.load(Ordering::Relaxed) {
        true => FIELDS_VERSION,
        false => ENCODING_VERSION,
    }
}

/// The aux data written before version 2, which carried the fence clock only.
const AUX_CLOCK_ONLY: u64 = 1;
/// The first version with the ends owed after the clock.
const AUX_OWED: u64 = 3;

/// # Safety
/// `value` must be a pointer Redis got from this type, i.e. a `Record`.
unsafe fn stored<'a>(value: *const c_void) -> Stored<'a> {
    // SAFETY: guaranteed by the caller.
    unsafe { Record::borrow_raw(value) }
}

thread_local! {
    /// The string a record is packed into to be saved, kept between
    /// records (saving runs on one thread: the main one, or a fork's).
    static PACKED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A record in RDB and `DUMP` payloads (encoding version 4): one string,
/// as `packed` lays it out; or, with `rdb-encoding 3`, as `fields` does.
unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    catch_panic::callback((), || {
        // SAFETY: Redis passes a value of this type.
        let record = unsafe { stored(value) };
        if WRITES_FIELDS.load(Ordering::Relaxed) {
            return fields::save(rdb, record);
        }
        PACKED.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.clear();
            match record {
                Stored::Single(lock) => packed::pack_single(&lock, &mut buf),
                Stored::Multi(holders) => packed::pack_holders(
                    holders.kind(),
                    holders.len() as u64,
                    &holders.encoded(),
                    holders.has_data(),
                    &mut buf,
                ),
            }
            raw::save_slice(rdb, &buf);
        })
    })
}

/// The latest a loaded hold may end: no later than one granted now with
/// the longest TTL.
fn latest_end() -> i64 {
    ffi::now_ms().saturating_add(limits::MAX_TTL_MS as i64)
}

/// Reads a record of encoding version 4: one string.
fn load_packed(rdb: *mut raw::RedisModuleIO) -> Option<Record> {
    let bytes = raw::load_string_buffer(rdb).ok()?;
    match packed::unpack(bytes.as_ref()).ok()? {
        Unpacked::Single(lock) => Some(Record::new(lock)),
        Unpacked::Holders {
            kind,
            count,
            holds,
            with_data,
        } => Holders::from_encoded(kind, count, holds, with_data, latest_end())
            .ok()
            .map(Record::new_multi),
    }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    catch_panic::callback(std::ptr::null_mut(), || {
        if !(1..=ENCODING_VERSION).contains(&encver) {
            ffi::log_io_warning(
                rdb,
                &format!(
                    "redislock: cannot read a lock of encoding version {encver}: release {} \
                     reads versions 1 to {ENCODING_VERSION}; load the redislock release that \
                     wrote the data, or a newer one",
                    release::VERSION
                ),
            );
            return std::ptr::null_mut();
        }
        let loaded = match encver {
            4.. => load_packed(rdb),
            _ => fields::load(rdb, encver),
        };
        let Some(record) = loaded else {
            return std::ptr::null_mut();
        };
        let fence = match record.view() {
            Stored::Single(lock) if lock.is_gate() => {
                // A gate's fence was issued elsewhere: it is remembered by
                // the gate, never fed into this server's fence clock.
                return record.into_raw();
            }
            Stored::Single(lock) => lock.fence(),
            Stored::Multi(holders) => holders.highest_fence(),
        };
        // A client's RESTORE payload may carry any fence: one far ahead of
        // what a server could have issued would use up the fences of every
        // key, so it is refused (and logged). The server's own data and its
        // master's are taken as they are.
        let trusted = ffi::io_is_trusted(rdb);
        let admits = || {
            let known = cluster::known_epoch();
            state::with_clock(|c| c.admits_restored_within(fence, ffi::now_ms(), known))
        };
        let admitted = trusted || admits() || (cluster::refresh_known_epoch() && admits());
        if !admitted {
            ffi::log_io_warning(
                rdb,
                &format!(
                    "redislock: refused a restored lock with fence {fence}: more than {} \
                     promotions or {} ms ahead of this server's fence clock",
                    fence::MAX_RESTORE_EPOCH_LEAD,
                    fence::MAX_RESTORE_TIME_LEAD_MS
                ),
            );
            return std::ptr::null_mut();
        }
        // A restored or loaded lock raises the floor for new fences.
        state::with_clock(|c| c.observe(fence));
        // Its observers look at what came (a RESTORE, a load).
        if locks::any_observer() {
            if let Some(id) = ffi::io_key(rdb) {
                locks::on_lock_stored(&id);
            }
        }
        // Holders' leases end on their own: watch the first one. A client's
        // RESTORE is looked at once, for the key's TTL (see `locks::tend`).
        // (The key's name is asked for only then: most records are single.)
        if let Some((holders, id)) = match record.view() {
            Stored::Multi(holders) => ffi::io_key(rdb).map(|id| (holders, id)),
            Stored::Single(_) => None,
        } {
            let look = match trusted {
                true => holders.look_needed(),
                false => {
                    let now = ffi::now_ms();
                    holders.set_watched(Some(now));
                    Some(now)
                }
            };
            if let Some(at) = look {
                locks::watch_leases_of(id, at);
            }
        }
        record.into_raw()
    })
}

/// The process that wrote the fence epoch to the AOF it rewrites.
static EPOCH_WRITTEN_BY: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    catch_panic::callback((), || {
        // Each rewrite runs in a process of its own: the first record it
        // writes is the fence epoch, which the RDB preamble would carry.
        let pid = std::process::id();
        if EPOCH_WRITTEN_BY.swap(pid, Ordering::Relaxed) != pid {
            let epoch = state::with_clock(|c| c.epoch);
            if epoch > 0 {
                ffi::emit_aof_epoch(aof, epoch);
            }
        }
        // SAFETY: Redis passes a value of this type.
        match unsafe { stored(value) } {
            Stored::Single(lock) if lock.is_gate() => ffi::emit_aof_gate(aof, key, lock.fence()),
            Stored::Single(lock) => ffi::emit_aof_grant(aof, key, lock),
            Stored::Multi(holders) => ffi::emit_aof_holders(aof, key, holders),
        }
    })
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of this type.
    catch_panic::callback(0, || Record::size_of(unsafe { stored(value) }))
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    catch_panic::callback((), || match unsafe { stored(value) } {
        Stored::Single(lock) => ffi::digest_lock(md, lock),
        Stored::Multi(holders) => ffi::digest_holders(md, holders),
    })
}

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: Redis hands back ownership of a record it got from
    // `set_lock`, `rdb_load` or `copy`.
    catch_panic::callback((), || {
        locks::on_lock_freed(value as usize);
        drop(unsafe { Record::from_raw(value) });
    })
}

unsafe extern "C" fn copy(
    opt: *mut raw::RedisModuleKeyOptCtx,
    value: *const c_void,
) -> *mut c_void {
    catch_panic::callback(std::ptr::null_mut(), || {
        // SAFETY: Redis passes a value of this type.
        let copy = Record::copy_of(unsafe { stored(value) });
        if locks::any_observer() {
            locks::on_lock_stored(&ffi::copy_target(opt));
        }
        // The copy's holders' leases end on their own too: watch the first.
        if let Stored::Multi(holders) = copy.view() {
            if let Some(at) = holders.look_needed() {
                locks::watch_leases_of(ffi::copy_target(opt), at);
            }
        }
        copy.into_raw()
    })
}

/// A lock is leaving the keyspace, for any reason but a flush.
unsafe extern "C" fn unlink(opt: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    catch_panic::callback((), || {
        let (db, key) = ffi::unlinked_key(opt);
        stats::note_unlink(key);
        // SAFETY: Redis passes a value of this type.
        let with_holders = match unsafe { stored(value) } {
            Stored::Multi(holders) => {
                // Its look at the next lease end goes with the name (RENAME
                // and MOVE keep the value under another one).
                holders.set_watched(None);
                true
            }
            Stored::Single(_) => false,
        };
        locks::on_lock_unlinked(db, key, with_holders, value as usize);
    })
}

/// The log line of a file written by a newer release, read before any key.
fn newer_file(version: u64, writer: Option<u64>) -> String {
    let by = writer.map_or("a newer release".to_string(), |n| {
        format!("release {}", release::name(n))
    });
    format!(
        "redislock: this data was written by {by} (module data version {version}); release {} \
         reads versions up to {}: load redislock {} or newer on this server (upgrade replicas \
         before their master)",
        release::VERSION,
        release::AUX_VERSION,
        writer.map_or("the release that wrote it".to_string(), release::name),
    )
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    catch_panic::callback((), || {
        if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            return;
        }
        let clock = state::with_clock(|c| *c);
        raw::save_unsigned(rdb, release::AUX_VERSION);
        raw::save_unsigned(rdb, release::NUMBER as u64);
        raw::save_unsigned(rdb, clock.epoch);
        raw::save_unsigned(rdb, clock.high_water);
        owed::save(rdb);
    })
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, _encver: c_int, when: c_int) -> c_int {
    catch_panic::callback(raw::REDISMODULE_ERR as c_int, || {
        if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            return raw::REDISMODULE_OK as c_int;
        }
        let saved = (|| {
            let version = raw::load_unsigned(rdb).ok()?;
            if version > release::AUX_VERSION {
                // Every later version starts with the release that wrote it.
                let writer = raw::load_unsigned(rdb).ok();
                ffi::log_io_warning(rdb, &newer_file(version, writer));
                return None;
            }
            if version > AUX_CLOCK_ONLY {
                let _writer = raw::load_unsigned(rdb).ok()?;
            }
            let epoch = raw::load_unsigned(rdb).ok()?;
            let high_water = raw::load_unsigned(rdb).ok()?;
            let owed = match version >= AUX_OWED {
                true => owed::load(rdb)?,
                false => Vec::new(),
            };
            Some((FenceClock { epoch, high_water }, owed))
        })();
        match saved {
            Some((saved, owed)) => {
                state::with_clock(|c| c.merge(saved));
                owed::restore(owed);
                raw::REDISMODULE_OK as c_int
            }
            None => raw::REDISMODULE_ERR as c_int,
        }
    })
}
