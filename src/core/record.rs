//! How a lock is laid out in the keyspace: one allocation holding the
//! fence, the token length and the token, so a lock costs Redis a single
//! small block next to the key (the memory benchmark compares it with a
//! `SET NX PX` string).

use std::ffi::c_void;
use std::ptr::NonNull;

use super::lock::LockRef;
use super::token::MAX_TOKEN_LEN;

const FENCE: usize = 8;
const LEN: usize = 2;
const HEADER: usize = FENCE + LEN;

/// An owned lock record. Redis holds it as a thin pointer (its data-type
/// value) between [`Record::into_raw`] and [`Record::from_raw`].
pub struct Record {
    ptr: NonNull<u8>,
}

impl Record {
    pub fn new(lock: LockRef<'_>) -> Record {
        let token = lock.token();
        assert!(
            token.len() <= MAX_TOKEN_LEN,
            "token length checked by the parser"
        );
        let mut bytes = Vec::with_capacity(HEADER + token.len());
        bytes.extend_from_slice(&lock.fence().to_le_bytes());
        bytes.extend_from_slice(&(token.len() as u16).to_le_bytes());
        bytes.extend_from_slice(token);
        let raw = Box::into_raw(bytes.into_boxed_slice()).cast::<u8>();
        // SAFETY: Box::into_raw never returns null.
        Record {
            ptr: unsafe { NonNull::new_unchecked(raw) },
        }
    }

    pub fn view(&self) -> LockRef<'_> {
        // SAFETY: `ptr` is a live record owned by `self`.
        unsafe { view(self.ptr.as_ptr()) }
    }

    /// Bytes a record of `lock` occupies, for `MEMORY USAGE`.
    pub fn size_of(lock: LockRef<'_>) -> usize {
        HEADER + lock.token().len()
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
    pub unsafe fn borrow_raw<'a>(value: *const c_void) -> LockRef<'a> {
        // SAFETY: by the caller's guarantee.
        unsafe { view(value.cast::<u8>()) }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let len = Record::size_of(self.view());
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), len);
        // SAFETY: `ptr` and `len` are exactly the boxed slice made in `new`.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// # Safety
/// `ptr` must point to a live record laid out by [`Record::new`].
unsafe fn view<'a>(ptr: *const u8) -> LockRef<'a> {
    // SAFETY: a record starts with a HEADER-byte header...
    let header = unsafe { std::slice::from_raw_parts(ptr, HEADER) };
    let fence = u64::from_le_bytes(header[..FENCE].try_into().unwrap_or_default());
    let len = u16::from_le_bytes(header[FENCE..].try_into().unwrap_or_default()) as usize;
    // SAFETY: ...followed by `len` token bytes, in the same allocation.
    let token = unsafe { std::slice::from_raw_parts(ptr.add(HEADER), len) };
    LockRef::new(token, fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_through_a_raw_pointer() {
        for token in [&b"t"[..], b"\0\xff\r\n", &[b'x'; MAX_TOKEN_LEN]] {
            let record = Record::new(LockRef::new(token, u64::MAX >> 1));
            assert_eq!(record.view(), LockRef::new(token, u64::MAX >> 1));
            let raw = record.into_raw();
            // SAFETY: `raw` came from `into_raw` and is still owned by nobody else.
            let seen = unsafe { Record::borrow_raw(raw) };
            assert_eq!((seen.token(), seen.fence()), (token, u64::MAX >> 1));
            // SAFETY: as above; taking it back frees it once.
            drop(unsafe { Record::from_raw(raw) });
        }
    }

    #[test]
    fn one_small_block() {
        let lock = LockRef::new(&[7u8; 22], 1);
        assert_eq!(Record::size_of(lock), 32);
    }
}
