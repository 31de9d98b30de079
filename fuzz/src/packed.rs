//! The `packed` target: a lock record of encoding version 4 (one string, `core::packed`) is
//! accepted exactly when the module could have written it, read as an independent model of
//! the layout reads it, and an accepted one packs back to the same bytes.

use redislock::core::holders::Kind;
use redislock::core::lock::DecodeError;
use redislock::core::packed::{pack_holders, pack_single, unpack, Unpacked};
use redislock::core::{fence, limits};

use crate::record::take_varint;
use crate::token_ok;

/// What the model reads: a single lock as (code, fence, token, data), or holders as (code,
/// limit, count, holds).
#[derive(Debug, PartialEq)]
enum Model<'a> {
    Single(u8, u64, &'a [u8], Option<&'a [u8]>),
    Holders(u8, u64, u64, &'a [u8]),
}

/// The layout's rules, in the order the module checks them: the code; the numbers (each a
/// shortest varint of 64 bits at most); with data, the token's length, then the data's; the
/// fence; the token (none for a gate); a shared lock's limit 0, a semaphore's within 32 bits.
fn model(bytes: &[u8]) -> Result<Model<'_>, DecodeError> {
    let (&code, mut rest) = bytes.split_first().ok_or(DecodeError::UnknownMode)?;
    let mut number = || take_varint(&mut rest).ok_or(DecodeError::BadNumber);
    match code {
        0 | 1 | 4 => {
            let fence = number()?;
            let (token, data) = match code {
                4 => {
                    let len = number()?;
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    if len > rest.len() {
                        return Err(DecodeError::BadToken);
                    }
                    let (token, data) = rest.split_at(len);
                    if !(1..=limits::MAX_DATA_LEN).contains(&data.len()) {
                        return Err(DecodeError::BadData);
                    }
                    (token, Some(data))
                }
                _ => (rest, None),
            };
            if !fence::is_valid(fence) {
                return Err(DecodeError::BadFence);
            }
            let token_fits = match code {
                1 => token.is_empty(),
                _ => token_ok(token),
            };
            if !token_fits {
                return Err(DecodeError::BadToken);
            }
            Ok(Model::Single(code, fence, token, data))
        }
        2 | 3 | 5 | 6 => {
            let limit = number()?;
            let shared = code == 2 || code == 5;
            if (shared && limit != 0) || u32::try_from(limit).is_err() {
                return Err(DecodeError::BadNumber);
            }
            let count = number()?;
            Ok(Model::Holders(code, limit, count, rest))
        }
        _ => Err(DecodeError::UnknownMode),
    }
}

pub fn packed(data: &[u8]) {
    let got = unpack(data);
    let want = model(data);
    let read = match (got, want) {
        (Ok(read), Ok(want)) => {
            let as_model = match read {
                Unpacked::Single(lock) => {
                    let code = match (lock.data(), lock.is_gate()) {
                        (Some(_), _) => 4,
                        (None, true) => 1,
                        (None, false) => 0,
                    };
                    Model::Single(code, lock.fence(), lock.token(), lock.data())
                }
                Unpacked::Holders {
                    kind,
                    count,
                    holds,
                    with_data,
                } => {
                    let (code, limit) = match kind {
                        Kind::Shared => (2, 0),
                        Kind::Semaphore { limit } => (3, u64::from(limit)),
                    };
                    Model::Holders(code + 3 * u8::from(with_data), limit, count, holds)
                }
            };
            assert_eq!(as_model, want, "read differently: {data:?}");
            read
        }
        (got, want) => {
            assert_eq!(
                got.err(),
                want.err(),
                "accepted or refused differently: {data:?}"
            );
            return;
        }
    };
    // What was read packs back to the same bytes: the shortest varints, nothing left over.
    let mut again = Vec::new();
    match read {
        Unpacked::Single(lock) => pack_single(&lock, &mut again),
        Unpacked::Holders {
            kind,
            count,
            holds,
            with_data,
        } => pack_holders(kind, count, holds, with_data, &mut again),
    }
    assert_eq!(again, data, "packed back differently");
}
