//! The length mark every lock record has at the same place, which tells an
//! exclusive lock's record (its token length) from a record with holders
//! ([`MULTI`]). Both layouts are built around it, [`super::record`]'s and
//! [`super::holders`]'s, so it lives apart from both and neither imports
//! the other for it.

/// Where a record has its length field (after its 8-byte fence), and
/// `Holders` its mark.
pub(super) const MARK_AT: usize = 8;

/// The length field of a record with holders: longer than any token.
pub(super) const MULTI: u16 = u16::MAX;
