//! How a lock is laid out in the keyspace: one allocation holding the
//! fence, the token length and the token, so a lock costs Redis a single
//! small block next to the key (the memory benchmark compares it with a
//! `SET NX PX` string). A lock with public data has the top bit of its
//! token length set and the data's length and bytes after the token.
//!
//! A key with holders (shared or semaphore) is a [`Holders`] block, which
//! has a token length no token can have where that header has its token
//! length (bytes 8 and 9): the exclusive form stays as small as it was, and
//! a small set of holders is that block plus one block of holds.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use super::holders::Holders;
use super::limits::MAX_DATA_LEN;
use super::lock::LockRef;
use super::mark::{MARK_AT, MULTI};
use super::token::MAX_TOKEN_LEN;

const FENCE: usize = 8;
const LEN: usize = 2;
const HEADER: usize = FENCE + LEN;
/// Set in the length field of a lock that carries data.
const WITH_DATA: u16 = 0x8000;
// No token length has that bit, and no lock's field can read as `MULTI`.
const _: () = assert!(MAX_TOKEN_LEN < WITH_DATA as usize && MAX_DATA_LEN <= u16::MAX as usize);
// The length field follows the fence: where `Holders` has its mark.
const _: () = assert!(MARK_AT == FENCE && LEN == std::mem::size_of_val(&MULTI));

/// What a record holds.
#[derive(Debug, Clone, Copy)]
pub enum Stored<'a> {
    /// An exclusive lock or a fence gate.
    Single(LockRef<'a>),
    /// Shared holders or a semaphore's.
    Multi(&'a Holders),
}

/// An owned lock record. Redis holds it as a thin pointer (its data-type
/// value) between [`Record::into_raw`] and [`Record::from_raw`].
pub struct Record {
    ptr: NonNull<u8>,
}

impl Record {
    pub fn new(lock: LockRef<'_>) -> Record {
        LIVE.fetch_add(1, Relaxed);
        let mut bytes = vec![0u8; single_size(lock)].into_boxed_slice();
        write_single(&mut bytes, lock);
        let raw = Box::into_raw(bytes).cast::<u8>();
        // SAFETY: Box::into_raw never returns null.
        Record {
            ptr: unsafe { NonNull::new_unchecked(raw) },
        }
    }

    /// A record owning `holders`: their own block.
    pub fn new_multi(holders: Holders) -> Record {
        LIVE.fetch_add(1, Relaxed);
        let raw = Box::into_raw(Box::new(holders)).cast::<u8>();
        // SAFETY: Box::into_raw never returns null.
        Record {
            ptr: unsafe { NonNull::new_unchecked(raw) },
        }
    }

    pub fn view(&self) -> Stored<'_> {
        // SAFETY: `ptr` is a live record owned by `self`.
        unsafe { view(self.ptr.as_ptr()) }
    }

    /// Bytes a record occupies, for `MEMORY USAGE`.
    pub fn size_of(stored: Stored<'_>) -> usize {
        match stored {
            Stored::Single(lock) => single_size(lock),
            Stored::Multi(h) => h.heap_size(),
        }
    }

    /// A copy (the `COPY` command).
    pub fn copy_of(stored: Stored<'_>) -> Record {
        match stored {
            Stored::Single(lock) => Record::new(lock),
            Stored::Multi(h) => Record::new_multi(h.clone()),
        }
    }

    /// Hands the record to Redis as a data-type value.
    pub fn into_raw(self) -> *mut c_void {
        let ptr = self.ptr.as_ptr().cast::<c_void>();
        std::mem::forget(self);
        ptr
    }

    /// Takes back a value Redis hands to a data-type callback that frees it.
    ///
    /// # Safety
    /// `value` must come from [`Record::into_raw`] and not be used again.
    pub unsafe fn from_raw(value: *mut c_void) -> Record {
        // SAFETY: by the caller's guarantee the pointer is a live record.
        Record {
            ptr: unsafe { NonNull::new_unchecked(value.cast::<u8>()) },
        }
    }

    /// Reads a value Redis holds, without taking it.
    ///
    /// # Safety
    /// `value` must come from [`Record::into_raw`] and stay alive for `'a`.
    pub unsafe fn borrow_raw<'a>(value: *const c_void) -> Stored<'a> {
        // SAFETY: by the caller's guarantee.
        unsafe { view(value.cast::<u8>()) }
    }

    /// Writes `lock` over the exclusive lock Redis holds at `value` if both
    /// take the same bytes (a handoff between tokens of one length), so a
    /// handoff frees and allocates nothing. False, and nothing written,
    /// otherwise.
    ///
    /// # Safety
    /// `value` must come from [`Record::into_raw`] and be alive; nothing
    /// else may read or write it meanwhile, `lock` included.
    pub unsafe fn overwrite(value: *mut c_void, lock: LockRef<'_>) -> bool {
        let ptr = value.cast::<u8>();
        // SAFETY: by the caller's guarantee the pointer is a live record.
        let Stored::Single(old) = (unsafe { view(ptr) }) else {
            return false;
        };
        let size = single_size(old);
        if size != single_size(lock) {
            return false;
        }
        // SAFETY: a single record is exactly `size` bytes (`Record::new`),
        // borrowed by nobody else (the caller's guarantee).
        write_single(unsafe { std::slice::from_raw_parts_mut(ptr, size) }, lock);
        true
    }

    /// The holders of a value Redis holds, for changing them in place.
    ///
    /// # Safety
    /// `value` must come from [`Record::into_raw`], stay alive for `'a`, and
    /// nothing else may read or write it meanwhile.
    pub unsafe fn holders_mut<'a>(value: *mut c_void) -> Option<&'a mut Holders> {
        // SAFETY: by the caller's guarantee the pointer is a live record.
        match unsafe { multi_ptr(value.cast::<u8>()) } {
            // SAFETY: the block is the record, exclusively borrowed here.
            Some(p) => Some(unsafe { &mut *p }),
            None => None,
        }
    }
}

/// Records alive, in Redis's keyspace or on their way in or out (`INFO`'s
/// `locks`). Atomic: Redis may free a value on a background thread.
static LIVE: AtomicI64 = AtomicI64::new(0);

/// How many records are alive.
pub fn live() -> i64 {
    LIVE.load(Relaxed)
}

impl Drop for Record {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Relaxed);
        // SAFETY: `ptr` is a live record owned by `self`.
        if let Some(holders) = unsafe { multi_ptr(self.ptr.as_ptr()) } {
            // SAFETY: made by `Box::into_raw` in `new_multi`, owned by this record.
            drop(unsafe { Box::from_raw(holders) });
            return;
        }
        // SAFETY: as above; not a record with holders.
        let Stored::Single(lock) = (unsafe { view(self.ptr.as_ptr()) }) else {
            return;
        };
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), single_size(lock));
        // SAFETY: `ptr` and its length are exactly the boxed slice made in `new`.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// The length field of a record: a single record's token length, or
/// [`MULTI`].
///
/// # Safety
/// `ptr` must point to a live record made by [`Record::new`] or [`Record::new_multi`].
unsafe fn length_field(ptr: *const u8) -> u16 {
    // SAFETY: both kinds of record have their length field at MARK_AT:
    // a single record's header, and `Holders::record_mark` (plain bytes,
    // checked by a compile-time assertion in `holders`).
    let field = unsafe { std::slice::from_raw_parts(ptr.add(MARK_AT), LEN) };
    u16::from_le_bytes(field.try_into().unwrap_or_default())
}

/// Lays `lock` out as a single record in `out`, which has its size.
fn write_single(out: &mut [u8], lock: LockRef<'_>) {
    let token = lock.token();
    assert!(
        token.len() <= MAX_TOKEN_LEN,
        "token length checked by the parser"
    );
    let data = lock.data();
    assert!(
        data.is_none_or(|d| d.len() <= MAX_DATA_LEN),
        "data length checked by the parser"
    );
    let flag = if data.is_some() { WITH_DATA } else { 0 };
    let (header, rest) = out.split_at_mut(HEADER);
    header[..FENCE].copy_from_slice(&lock.fence().to_le_bytes());
    header[FENCE..].copy_from_slice(&(token.len() as u16 | flag).to_le_bytes());
    let (token_at, rest) = rest.split_at_mut(token.len());
    token_at.copy_from_slice(token);
    if let Some(data) = data {
        let (len_at, data_at) = rest.split_at_mut(LEN);
        len_at.copy_from_slice(&(data.len() as u16).to_le_bytes());
        data_at.copy_from_slice(data);
    }
}

/// The bytes of a single record holding `lock`.
fn single_size(lock: LockRef<'_>) -> usize {
    HEADER + lock.token().len() + lock.data().map_or(0, |d| LEN + d.len())
}

/// The holders of a record with holders.
///
/// # Safety
/// As for [`length_field`].
unsafe fn multi_ptr(ptr: *const u8) -> Option<*mut Holders> {
    // SAFETY: guaranteed by the caller.
    if unsafe { length_field(ptr) } != MULTI {
        return None;
    }
    // A record with holders is the `Holders` block made in `new_multi`.
    Some(ptr.cast::<Holders>().cast_mut())
}

/// # Safety
/// As for [`length_field`].
unsafe fn view<'a>(ptr: *const u8) -> Stored<'a> {
    // SAFETY: guaranteed by the caller.
    if let Some(holders) = unsafe { multi_ptr(ptr) } {
        // SAFETY: the block lives as long as the record.
        return Stored::Multi(unsafe { &*holders });
    }
    // SAFETY: a single record starts with a HEADER-byte header.
    let header = unsafe { std::slice::from_raw_parts(ptr, HEADER) };
    let fence = u64::from_le_bytes(header[..FENCE].try_into().unwrap_or_default());
    let field = u16::from_le_bytes(header[FENCE..].try_into().unwrap_or_default());
    let len = usize::from(field & !WITH_DATA);
    // SAFETY: a single record's header is followed by `len` token bytes.
    let token = unsafe { std::slice::from_raw_parts(ptr.add(HEADER), len) };
    if field & WITH_DATA == 0 {
        return Stored::Single(LockRef::new(token, fence));
    }
    // SAFETY: with the flag, the token is followed by the data's length and
    // that many bytes (`Record::new`).
    let data = unsafe {
        let at = ptr.add(HEADER + len);
        let data_len = u16::from_le_bytes(
            std::slice::from_raw_parts(at, LEN)
                .try_into()
                .unwrap_or_default(),
        );
        std::slice::from_raw_parts(at.add(LEN), usize::from(data_len))
    };
    Stored::Single(LockRef::new(token, fence).with_data(Some(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_through_a_raw_pointer() {
        for token in [&b"t"[..], b"\0\xff\r\n", &[b'x'; MAX_TOKEN_LEN]] {
            let record = Record::new(LockRef::new(token, u64::MAX >> 1));
            assert!(
                matches!(record.view(), Stored::Single(l) if l == LockRef::new(token, u64::MAX >> 1))
            );
            let raw = record.into_raw();
            // SAFETY: `raw` came from `into_raw` and is still owned by nobody else.
            let Stored::Single(seen) = (unsafe { Record::borrow_raw(raw) }) else {
                panic!("a single record reads back as one");
            };
            assert_eq!((seen.token(), seen.fence()), (token, u64::MAX >> 1));
            // SAFETY: as above.
            assert!(unsafe { Record::holders_mut(raw) }.is_none());
            // SAFETY: as above; taking it back frees it once.
            drop(unsafe { Record::from_raw(raw) });
        }
    }

    #[test]
    fn data_rides_after_the_token() {
        for (token, data) in [
            (&b"t"[..], &b"d"[..]),
            (&[b'x'; MAX_TOKEN_LEN][..], &[0xffu8; MAX_DATA_LEN][..]),
        ] {
            let lock = LockRef::new(token, 9).with_data(Some(data));
            let record = Record::new(lock);
            let Stored::Single(seen) = record.view() else {
                panic!("a single record");
            };
            assert_eq!(seen, lock);
            assert_eq!(
                Record::size_of(record.view()),
                HEADER + token.len() + LEN + data.len()
            );
            let copy = Record::copy_of(record.view());
            assert!(matches!(copy.view(), Stored::Single(c) if c == lock));
        }
        let plain = Record::new(LockRef::new(b"t", 9));
        assert!(matches!(plain.view(), Stored::Single(l) if l.data().is_none()));
    }

    #[test]
    fn a_lock_of_the_same_size_is_written_where_it_stands() {
        let raw = Record::new(LockRef::new(b"first", 7)).into_raw();
        let same = LockRef::new(b"other", 8);
        // SAFETY: `raw` came from `into_raw`; nothing else uses it.
        assert!(unsafe { Record::overwrite(raw, same) });
        // SAFETY: as above.
        assert!(matches!(unsafe { Record::borrow_raw(raw) }, Stored::Single(l) if l == same));
        // The same size with data: the layout follows the new lock.
        let with_data = LockRef::new(b"o", 9).with_data(Some(b"ab"));
        // SAFETY: as above.
        assert!(unsafe { Record::overwrite(raw, with_data) });
        // SAFETY: as above.
        assert!(matches!(unsafe { Record::borrow_raw(raw) }, Stored::Single(l) if l == with_data));
        for other in [LockRef::new(b"longer", 10), LockRef::new(b"o", 10)] {
            // SAFETY: as above.
            assert!(!unsafe { Record::overwrite(raw, other) }, "another size");
            // SAFETY: as above.
            assert!(
                matches!(unsafe { Record::borrow_raw(raw) }, Stored::Single(l) if l == with_data)
            );
        }
        // SAFETY: as above; taking it back frees it, with its size, once.
        drop(unsafe { Record::from_raw(raw) });
        let multi = Record::new_multi(Holders::new(crate::core::holders::Kind::Shared)).into_raw();
        // SAFETY: as above.
        assert!(
            !unsafe { Record::overwrite(multi, LockRef::new(b"t", 1)) },
            "holders stay"
        );
        // SAFETY: as above.
        drop(unsafe { Record::from_raw(multi) });
    }

    #[test]
    fn one_small_block() {
        let lock = LockRef::new(&[7u8; 22], 1);
        assert_eq!(Record::size_of(Stored::Single(lock)), 32);
        assert_eq!(Record::size_of(Stored::Single(LockRef::gate(5))), HEADER);
        let multi = Record::new_multi(Holders::new(crate::core::holders::Kind::Shared));
        let Stored::Multi(h) = multi.view() else {
            panic!("holders");
        };
        assert_eq!(Record::size_of(multi.view()), h.heap_size());
        #[cfg(target_pointer_width = "64")]
        assert_eq!(
            std::mem::size_of::<Holders>(),
            32,
            "a key with holders is one 32-byte block and its holds"
        );
    }

    #[test]
    fn holders_live_behind_the_same_header() {
        use crate::core::holders::{Hold, Kind};
        let mut h = Holders::new(Kind::Semaphore { limit: 2 });
        h.insert(
            b"a",
            Hold {
                fence: 3,
                expire_at: 10,
            },
        );
        let raw = Record::new_multi(h.clone()).into_raw();
        // SAFETY: `raw` came from `into_raw`; nothing else uses it.
        let held = unsafe { Record::holders_mut(raw) }.unwrap();
        held.insert(
            b"b",
            Hold {
                fence: 4,
                expire_at: 20,
            },
        );
        // SAFETY: as above.
        let Stored::Multi(seen) = (unsafe { Record::borrow_raw(raw) }) else {
            panic!("a record with holders reads back as one");
        };
        assert_eq!((seen.len(), seen.latest()), (2, Some(20)));
        let copy = Record::copy_of(Stored::Multi(seen));
        // SAFETY: taking it back frees it (and its holders) once.
        drop(unsafe { Record::from_raw(raw) });
        assert!(matches!(copy.view(), Stored::Multi(c) if c.len() == 2));
        assert!(Record::size_of(copy.view()) > std::mem::size_of::<Holders>());
    }
}
