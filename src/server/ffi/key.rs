//! All raw access to a key's value: opening, type checks, the stored
//! record, deletion and expiry.

use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use redis_module::{raw, Context, RedisString};

use crate::core::holders::Holders;
use crate::core::lock::LockRef;
use crate::core::record::{Record, Stored};

/// The module's data type, as Redis created it (set once, at load).
static LOCK_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// Tells the key API which data type is the module's: called at load, after
/// Redis created the type and before any command runs.
pub fn use_lock_type(lock_type: *mut raw::RedisModuleType) {
    LOCK_TYPE.store(lock_type, Relaxed);
}

/// `REDISMODULE_NO_EXPIRE`: what the expiry getters answer for a key without one.
const NO_EXPIRE: i64 = -1;

/// What an opened key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    Lock,
    Other,
}

/// An open key, closed on drop. Redis answers NULL for a missing key opened
/// read-only; that is kept as a null pointer and reads as an empty key.
pub struct LockKey {
    ptr: *mut raw::RedisModuleKey,
}

impl LockKey {
    /// Opens `name` for reading, or for reading and writing.
    pub fn open(ctx: &Context, name: &RedisString, write: bool) -> LockKey {
        let mode = if write {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        LockKey {
            ptr: raw::open_key(ctx.ctx, name.inner, mode),
        }
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.ptr
    }

    pub fn kind(&self) -> KeyKind {
        let key = self.raw();
        if key.is_null() {
            return KeyKind::Empty;
        }
        // SAFETY: `key` is an open key of this context.
        let key_type = unsafe { raw::RedisModule_KeyType.unwrap()(key) };
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            KeyKind::Empty
        } else if key_type == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            // SAFETY: `key` is an open key holding a module value.
            && unsafe { raw::RedisModule_ModuleTypeGetType.unwrap()(key) } == LOCK_TYPE.load(Relaxed)
        {
            KeyKind::Lock
        } else {
            KeyKind::Other
        }
    }

    /// The record stored here, if the key holds one.
    pub fn stored(&self) -> Option<Stored<'_>> {
        if self.kind() != KeyKind::Lock {
            return None;
        }
        // SAFETY: the key holds a value of our type, which is always a
        // `Record`; the view cannot outlive the open key.
        Some(unsafe {
            Record::borrow_raw(raw::RedisModule_ModuleTypeGetValue.unwrap()(self.raw()))
        })
    }

    /// The exclusive lock or gate stored here (not a key with holders).
    pub fn lock(&self) -> Option<LockRef<'_>> {
        match self.stored()? {
            Stored::Single(lock) => Some(lock),
            Stored::Multi(_) => None,
        }
    }

    /// The holders stored here, if the key has them.
    pub fn holders(&self) -> Option<&Holders> {
        match self.stored()? {
            Stored::Multi(h) => Some(h),
            Stored::Single(_) => None,
        }
    }

    /// The holders stored here, to change in place. The key must be open
    /// for writing.
    pub fn holders_mut(&mut self) -> Option<&mut Holders> {
        if self.kind() != KeyKind::Lock {
            return None;
        }
        // SAFETY: the key holds a `Record`; `&mut self` keeps any other view
        // of it from existing while the holders are borrowed.
        unsafe { Record::holders_mut(raw::RedisModule_ModuleTypeGetValue.unwrap()(self.raw())) }
    }

    /// The key's fence gate's highest fence, if it is one.
    pub fn gate(&self) -> Option<u64> {
        self.lock().filter(|l| l.is_gate()).map(|l| l.fence())
    }

    /// Stores a lock, replacing whatever the key held. The key must be open
    /// for writing and hold nothing or a lock.
    #[must_use]
    pub fn set_lock(&mut self, lock: LockRef<'_>) -> bool {
        self.set_record(Record::new(lock))
    }

    /// Stores holders, replacing whatever the key held.
    #[must_use]
    pub fn set_holders(&mut self, holders: Holders) -> bool {
        self.set_record(Record::new_multi(holders))
    }

    /// Replaces the lock the key holds with `lock`, in place: the key,
    /// its expiry and its place in the keyspace stay (a handoff), and Redis
    /// raises no unlink for it. The key must be open for writing and hold
    /// one of our records.
    #[must_use]
    pub fn replace_lock(&mut self, lock: LockRef<'_>) -> bool {
        if self.kind() != KeyKind::Lock {
            return false;
        }
        // SAFETY: the key holds one of our records, open for writing; `lock`
        // cannot borrow from it while `self` is borrowed mutably.
        if unsafe {
            Record::overwrite(
                raw::RedisModule_ModuleTypeGetValue.unwrap()(self.raw()),
                lock,
            )
        } {
            return true;
        }
        let value = Record::new(lock).into_raw();
        let mut old = std::ptr::null_mut();
        // SAFETY: the key is open for writing and holds a value of our type;
        // Redis takes ownership of the new record and hands the old one back
        // to us, without calling the type's free callback for it.
        let status = unsafe {
            raw::RedisModule_ModuleTypeReplaceValue.unwrap()(
                self.raw(),
                LOCK_TYPE.load(Relaxed),
                value,
                &mut old,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis refused the value, so it is still ours to free.
            drop(unsafe { Record::from_raw(value) });
            return false;
        }
        if !old.is_null() {
            // SAFETY: the old value was one of our records, now ours again.
            drop(unsafe { Record::from_raw(old) });
        }
        true
    }

    fn set_record(&mut self, record: Record) -> bool {
        let key = self.raw();
        if key.is_null() {
            return false;
        }
        let value = record.into_raw();
        // SAFETY: the key is open for writing; Redis takes ownership of the
        // record and hands it back to `datatype::free`.
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.unwrap()(key, LOCK_TYPE.load(Relaxed), value)
        };
        if status != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis refused the value, so it is still ours to free.
            drop(unsafe { Record::from_raw(value) });
            return false;
        }
        true
    }

    /// Deletes the key. A deletion through the module API raises no key
    /// event (the caller may need to know that).
    pub fn delete(&mut self) {
        if !self.raw().is_null() {
            // SAFETY: the key is open for writing.
            unsafe { raw::RedisModule_DeleteKey.unwrap()(self.raw()) };
        }
    }

    /// Sets the expiry to an absolute Unix time in milliseconds.
    pub fn set_expire_at(&mut self, unix_ms: i64) {
        if !self.raw().is_null() {
            // SAFETY: the key is open for writing and not empty.
            unsafe { raw::RedisModule_SetAbsExpire.unwrap()(self.raw(), unix_ms) };
        }
    }

    /// Absolute expiry in Unix milliseconds, if the key has one.
    pub fn expire_at(&self) -> Option<i64> {
        if self.raw().is_null() {
            return None;
        }
        // SAFETY: the key is open.
        let at = unsafe { raw::RedisModule_GetAbsExpire.unwrap()(self.raw()) };
        (at != NO_EXPIRE).then_some(at)
    }

    /// Remaining time to live in milliseconds, if the key has an expiry.
    pub fn ttl_ms(&self) -> Option<i64> {
        if self.raw().is_null() {
            return None;
        }
        // SAFETY: the key is open.
        let ttl = unsafe { raw::RedisModule_GetExpire.unwrap()(self.raw()) };
        (ttl != NO_EXPIRE).then_some(ttl)
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.raw().is_null() {
            raw::close_key(self.raw());
        }
    }
}
