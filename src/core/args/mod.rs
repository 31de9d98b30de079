//! Parsing the arguments of the client commands into typed requests.
//!
//! Functions take the whole argument vector (`argv[0]` is the command name),
//! as a slice of anything that derefs to bytes, so they run the same on Redis strings and in
//! tests. Options are case-insensitive and may come in any order. The internal effects that
//! replicas and the AOF replay are parsed in `effects`.

use std::ops::Deref;

use super::errors::{Grammar, LockError};
use super::grant::Want;
use super::limits::{MAX_BLOCK_MS, MAX_DATA_LEN, MAX_LIMIT, MAX_TTL_MS};
use super::numbers::{parse_i64, parse_non_negative};
use super::token::TokenArg;

pub mod multi;
pub mod observe;

/// `LOCK.ACQUIRE key token (EX seconds | PX milliseconds) [SHARED | LIMIT count] [EPHEMERAL] [BLOCK timeout-ms] [DATA value]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub token: TokenArg<'a>,
    pub ttl_ms: u64,
    /// Exclusive (no option), `SHARED`, or a place of `LIMIT count`.
    pub want: Want,
    /// `None`: answer at once. `Some(0)`: wait without limit.
    pub block_ms: Option<u64>,
    /// The hold is bound to the asking connection.
    pub ephemeral: bool,
    /// Public data kept with the hold; `None` keeps a re-grant's.
    pub data: Option<&'a [u8]>,
}

/// `LOCK.CALL key token command [arg …]`: the token, and where the command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<'a> {
    pub token: &'a [u8],
    pub command_at: usize,
}

/// `LOCK.FENCE gate fence command [arg …]`: the fence, and where the command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub fence: u64,
    pub command_at: usize,
}

/// `LOCK.RELEASE key token`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release<'a> {
    pub token: &'a [u8],
}

/// `LOCK.EXTEND key token (EX seconds | PX milliseconds)`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extend<'a> {
    pub token: &'a [u8],
    pub ttl_ms: u64,
}

pub fn parse_acquire<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Acquire<'_>, LockError> {
    parse_acquire_as(argv, Grammar::Acquire)
}

/// `parse_acquire`, its errors naming `grammar` (`LOCK.ACQUIREALL` parses
/// its arguments from the last key on as `LOCK.ACQUIRE`'s from its key).
pub(super) fn parse_acquire_as<A: Deref<Target = [u8]>>(
    argv: &[A],
    grammar: Grammar,
) -> Result<Acquire<'_>, LockError> {
    if argv.len() < 3 {
        return Err(LockError::Arity("lock.acquire"));
    }
    let token = TokenArg::parse(&argv[2]).ok_or(LockError::InvalidToken)?;
    let mut ttl = TtlOption::default();
    let mut block_ms = None;
    let mut ephemeral = false;
    let mut want = None;
    let mut data = None;
    let mut rest = argv[3..].iter().map(|a| &**a);
    while let Some(name) = rest.next() {
        if name.eq_ignore_ascii_case(b"SHARED") || name.eq_ignore_ascii_case(b"LIMIT") {
            let asked = if name.eq_ignore_ascii_case(b"SHARED") {
                Want::Shared
            } else {
                let value = rest.next().ok_or(LockError::MissingValue("LIMIT"))?;
                Want::Place {
                    limit: parse_limit(value)?,
                }
            };
            want = match (want, asked) {
                (None, w) => Some(w),
                (Some(Want::Shared), Want::Shared) => {
                    return Err(LockError::RepeatedOption("SHARED"))
                }
                (Some(Want::Place { .. }), Want::Place { .. }) => {
                    return Err(LockError::RepeatedOption("LIMIT"))
                }
                _ => return Err(LockError::SharedAndLimit),
            };
        } else if name.eq_ignore_ascii_case(b"EPHEMERAL") {
            if ephemeral {
                return Err(LockError::RepeatedOption("EPHEMERAL"));
            }
            ephemeral = true;
        } else if name.eq_ignore_ascii_case(b"DATA") {
            let value = rest.next().ok_or(LockError::MissingValue("DATA"))?;
            if data.is_some() {
                return Err(LockError::RepeatedOption("DATA"));
            }
            data = Some(parse_data(value)?);
        } else if name.eq_ignore_ascii_case(b"BLOCK") {
            let value = rest.next().ok_or(LockError::MissingValue("BLOCK"))?;
            if block_ms.is_some() {
                return Err(LockError::RepeatedOption("BLOCK"));
            }
            block_ms = Some(
                parse_non_negative(value)
                    .filter(|&ms| ms <= MAX_BLOCK_MS)
                    .ok_or(LockError::InvalidBlock)?,
            );
        } else if !ttl.try_take(name, &mut rest)? {
            return Err(not_an_option(grammar, argv, name, &ttl));
        }
    }
    let want = want.unwrap_or(Want::Exclusive);
    Ok(Acquire {
        token,
        ttl_ms: ttl.finish()?,
        want,
        block_ms,
        ephemeral,
        data,
    })
}

/// A hold's public data: 1 to `MAX_DATA_LEN` bytes, any bytes.
pub(super) fn parse_data(raw: &[u8]) -> Result<&[u8], LockError> {
    match raw.len() {
        1..=MAX_DATA_LEN => Ok(raw),
        _ => Err(LockError::InvalidData),
    }
}

pub(super) fn parse_limit(raw: &[u8]) -> Result<u32, LockError> {
    parse_non_negative(raw)
        .filter(|n| (1..=MAX_LIMIT as u64).contains(n))
        .map(|n| n as u32)
        .ok_or(LockError::InvalidLimit)
}

pub fn parse_call<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Call<'_>, LockError> {
    if argv.len() < 4 {
        return Err(LockError::Arity("lock.call"));
    }
    Ok(Call {
        token: given_token(&argv[2])?,
        command_at: 3,
    })
}

pub fn parse_fence<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Fence, LockError> {
    if argv.len() < 4 {
        return Err(LockError::Arity("lock.fence"));
    }
    Ok(Fence {
        fence: parse_fence_value(&argv[2])?,
        command_at: 3,
    })
}

pub(super) fn parse_fence_value(raw: &[u8]) -> Result<u64, LockError> {
    parse_i64(raw)
        .filter(|&f| f > 0)
        .map(|f| f as u64)
        .ok_or(LockError::InvalidFence)
}

pub fn parse_release<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Release<'_>, LockError> {
    if argv.len() != 3 {
        return Err(LockError::Arity("lock.release"));
    }
    Ok(Release {
        token: given_token(&argv[2])?,
    })
}

pub fn parse_extend<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<Extend<'_>, LockError> {
    if argv.len() < 3 {
        return Err(LockError::Arity("lock.extend"));
    }
    let token = given_token(&argv[2])?;
    let mut ttl = TtlOption::default();
    let mut rest = argv[3..].iter().map(|a| &**a);
    while let Some(name) = rest.next() {
        if !ttl.try_take(name, &mut rest)? {
            return Err(not_an_option(Grammar::Extend, argv, name, &ttl));
        }
    }
    Ok(Extend {
        token,
        ttl_ms: ttl.finish()?,
    })
}

pub fn parse_info<A: Deref<Target = [u8]>>(argv: &[A]) -> Result<(), LockError> {
    if argv.len() != 2 {
        return Err(LockError::Arity("lock.info"));
    }
    Ok(())
}

/// A token that must be given literally (release, extend): `*` is just a byte.
pub(super) fn given_token(raw: &[u8]) -> Result<&[u8], LockError> {
    match TokenArg::parse(raw) {
        Some(_) => Ok(raw),
        None => Err(LockError::InvalidToken),
    }
}

pub(crate) fn unknown(name: &[u8], grammar: Grammar) -> LockError {
    const SHOWN: usize = 64;
    let shown = &name[..name.len().min(SHOWN)];
    // Keep the error a single printable ASCII line whatever the client sent.
    let text: String = shown
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    LockError::UnknownOption(text, grammar)
}

/// The error for `name`, found where an option's name should be (acquire, extend). A number
/// there is a TTL without `EX`/`PX` in front, or, as the first option after a token that is
/// `EX` or `PX`, a TTL whose token was left out (`LOCK.ACQUIRE key PX 30000`).
fn not_an_option<A: Deref<Target = [u8]>>(
    command: Grammar,
    argv: &[A],
    name: &[u8],
    ttl: &TtlOption,
) -> LockError {
    if parse_i64(name).is_none() {
        return unknown(name, command);
    }
    // A number as the first option fails at once, so this is that option.
    if argv.get(3).is_some_and(|first| **first == *name) {
        for option in ["EX", "PX"] {
            if argv[2].eq_ignore_ascii_case(option.as_bytes()) {
                return LockError::TokenAfterTtl { command, option };
            }
        }
    }
    match (ttl.given, unknown(name, command)) {
        (None, LockError::UnknownOption(text, _)) => LockError::TtlWithoutUnit(text),
        (_, error) => error,
    }
}

/// The `EX seconds | PX milliseconds` pair shared by acquire and extend.
#[derive(Default)]
struct TtlOption {
    ttl_ms: Option<u64>,
    given: Option<&'static str>,
}

impl TtlOption {
    /// Consumes `name value` if `name` is EX or PX; `Ok(false)` otherwise.
    fn try_take<'a>(
        &mut self,
        name: &[u8],
        rest: &mut impl Iterator<Item = &'a [u8]>,
    ) -> Result<bool, LockError> {
        let (label, unit_ms) = if name.eq_ignore_ascii_case(b"EX") {
            ("EX", 1000)
        } else if name.eq_ignore_ascii_case(b"PX") {
            ("PX", 1)
        } else {
            return Ok(false);
        };
        let value = rest.next().ok_or(LockError::MissingValue(label))?;
        match self.given {
            Some(first) if first == label => return Err(LockError::RepeatedOption(label)),
            Some(_) => return Err(LockError::DoubleTtl),
            None => self.given = Some(label),
        }
        let ms = parse_non_negative(value)
            .filter(|&v| v > 0)
            .and_then(|v| v.checked_mul(unit_ms))
            .filter(|&ms| ms <= MAX_TTL_MS)
            .ok_or(if unit_ms == 1 {
                LockError::InvalidTtl
            } else {
                LockError::InvalidTtlSeconds
            })?;
        self.ttl_ms = Some(ms);
        Ok(true)
    }

    fn finish(self) -> Result<u64, LockError> {
        self.ttl_ms.ok_or(LockError::MissingTtl)
    }
}

#[cfg(test)]
mod error_tests;
#[cfg(test)]
mod tests;
