//! The decisions of a lock on several keys (`LOCK.ACQUIREALL`, `LOCK.RELEASEALL`): the names it
//! takes, their one hash slot, the command lines and the replies.

use redis::Value;

use super::args::{Acquire, Mode, Ttl, Wait};
use super::error::Error;
use super::lease::Renewed;

/// The most keys one request may name (the server's bound).
pub const MAX_KEYS: usize = 64;

/// The Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the first
/// `{` and the next `}`, when not empty), else of the whole key, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&c| c == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&c| c == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) & 0x3fff
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// How the set is named in errors: `[a, b]`.
pub fn label(names: &[Vec<u8>]) -> String {
    let parts: Vec<String> = names
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    format!("[{}]", parts.join(", "))
}

/// 1 to 64 distinct names in one hash slot, checked before anything is sent:
/// `Error::CrossSlot` for names in several slots, `Error::Invalid` for the rest.
pub fn check_names(names: &[Vec<u8>]) -> Result<(), Error> {
    if names.is_empty() || names.len() > MAX_KEYS {
        return Err(Error::Invalid(format!(
            "a multi-lock takes 1 to {MAX_KEYS} names, not {}",
            names.len()
        )));
    }
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(Error::Invalid(format!(
                "{:?} is named twice",
                String::from_utf8_lossy(n)
            )));
        }
    }
    let first = key_slot(&names[0]);
    if names.iter().any(|n| key_slot(n) != first) {
        return Err(Error::CrossSlot(format!(
            "the keys of a multi-lock must be in one hash slot, these are not: {} (give them \
             one hash tag, as {{tag}}:name)",
            label(names)
        )));
    }
    Ok(())
}

fn head(command: &str, names: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut args = vec![command.into(), names.len().to_string().into_bytes()];
    args.extend(names.iter().cloned());
    args
}

/// `LOCK.ACQUIREALL numkeys key… token PX ttl [SHARED] [BLOCK ms]`: the single lock's options
/// after the keys and the token (a semaphore is not one of them).
pub fn acquire_all(
    names: &[Vec<u8>],
    token: &[u8],
    ttl: Ttl,
    mode: Mode,
    wait: Wait,
) -> Vec<Vec<u8>> {
    acquire_all_as(names, token, (ttl, mode, wait), false)
}

/// `acquire_all` bound to the connection it is sent on (`EPHEMERAL`).
pub fn acquire_all_bound(
    names: &[Vec<u8>],
    token: &[u8],
    ttl: Ttl,
    mode: Mode,
    wait: Wait,
) -> Vec<Vec<u8>> {
    acquire_all_as(names, token, (ttl, mode, wait), true)
}

fn acquire_all_as(
    names: &[Vec<u8>],
    token: &[u8],
    (ttl, mode, wait): (Ttl, Mode, Wait),
    ephemeral: bool,
) -> Vec<Vec<u8>> {
    let one = Acquire {
        name: b"",
        token: &super::args::Token::Given(token.to_vec()),
        ttl,
        mode,
        ephemeral,
        wait,
        data: None,
    }
    .args();
    // LOCK.ACQUIRE name token [options…]: the options are the same.
    let mut args = head("LOCK.ACQUIREALL", names);
    args.push(token.to_vec());
    args.extend(one.into_iter().skip(3));
    args
}

/// `LOCK.RELEASEALL numkeys key… token`.
pub fn release_all(names: &[Vec<u8>], token: &[u8]) -> Vec<Vec<u8>> {
    let mut args = head("LOCK.RELEASEALL", names);
    args.push(token.to_vec());
    args
}

fn unexpected(what: &str, v: &Value) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("{what}: {v:?}"),
    )))
}

/// A multi-key grant: the token and the fence of each key.
pub type GrantAll = (Vec<u8>, Vec<u64>);

/// `LOCK.ACQUIREALL`: `Some((token, fences))`, one fence per key in the order given, when
/// granted; `None` when not (nil).
pub fn grant_all(v: &Value, keys: usize) -> Result<Option<GrantAll>, Error> {
    let bad = || unexpected("LOCK.ACQUIREALL", v);
    match v {
        Value::Nil => Ok(None),
        Value::Array(items) if items.len() == 2 => {
            let token = match &items[0] {
                Value::BulkString(b) => b.clone(),
                Value::SimpleString(s) => s.clone().into_bytes(),
                _ => return Err(bad()),
            };
            let Value::Array(list) = &items[1] else {
                return Err(bad());
            };
            let fences = list
                .iter()
                .map(|f| match f {
                    Value::Int(i) => u64::try_from(*i).ok(),
                    _ => None,
                })
                .collect::<Option<Vec<u64>>>()
                .filter(|f| f.len() == keys)
                .ok_or_else(bad)?;
            Ok(Some((token, fences)))
        }
        _ => Err(bad()),
    }
}

/// `LOCK.RELEASEALL`: how many keys it released.
pub fn released(v: &Value) -> Result<u64, Error> {
    match v {
        Value::Int(n) if *n >= 0 => Ok(*n as u64),
        _ => Err(unexpected("LOCK.RELEASEALL", v)),
    }
}

/// The new time to live of an extension: the same for every key.
pub fn extend_lines(names: &[Vec<u8>], token: &[u8], ttl: Ttl) -> Vec<Vec<Vec<u8>>> {
    names
        .iter()
        .map(|n| super::args::extend(n, token, ttl))
        .collect()
}

/// A renewal of the set from its keys' outcomes (in order, stopped at the first gone): gone if
/// any key is; extended only if every key was; else failed (tried again soon: a renewal that
/// went through in part counts as none).
pub fn renewal(outcomes: &[Renewed], keys: usize) -> Renewed {
    if outcomes.contains(&Renewed::Gone) {
        Renewed::Gone
    } else if outcomes.len() == keys && outcomes.iter().all(|o| *o == Renewed::Extended) {
        Renewed::Extended
    } else {
        Renewed::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|n| n.as_bytes().to_vec()).collect()
    }

    fn text(args: Vec<Vec<u8>>) -> String {
        let words: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        words.join(" ")
    }

    #[test]
    fn slots_are_redis_cluster_slots() {
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") & 0x3fff); // an empty tag: the whole key
        assert_eq!(key_slot(b"a{b"), crc16(b"a{b") & 0x3fff);
    }

    #[test]
    fn names_are_checked_before_sending() {
        assert!(check_names(&names(&["{acct}:a", "{acct}:b"])).is_ok());
        assert!(matches!(
            check_names(&names(&["lock:a", "lock:b"])),
            Err(Error::CrossSlot(m)) if m.contains("[lock:a, lock:b]")
        ));
        assert!(matches!(check_names(&[]), Err(Error::Invalid(_))));
        assert!(matches!(
            check_names(&names(&["{t}a", "{t}a"])),
            Err(Error::Invalid(m)) if m.contains("twice")
        ));
        let many: Vec<Vec<u8>> = (0..65).map(|i| format!("{{t}}{i}").into_bytes()).collect();
        assert!(matches!(check_names(&many), Err(Error::Invalid(_))));
        assert!(check_names(&many[..64]).is_ok());
    }

    #[test]
    fn lines() {
        let n = names(&["{t}a", "{t}b"]);
        assert_eq!(
            text(acquire_all(
                &n,
                b"tok",
                Ttl::Px(500),
                Mode::Exclusive,
                Wait::No
            )),
            "LOCK.ACQUIREALL 2 {t}a {t}b tok PX 500"
        );
        assert_eq!(
            text(acquire_all(
                &n,
                b"tok",
                Ttl::Px(500),
                Mode::Shared,
                Wait::Millis(20)
            )),
            "LOCK.ACQUIREALL 2 {t}a {t}b tok PX 500 SHARED BLOCK 20"
        );
        assert_eq!(
            text(acquire_all_bound(
                &n,
                b"tok",
                Ttl::Px(500),
                Mode::Shared,
                Wait::Millis(20)
            )),
            "LOCK.ACQUIREALL 2 {t}a {t}b tok PX 500 SHARED EPHEMERAL BLOCK 20"
        );
        assert_eq!(
            text(release_all(&n, b"tok")),
            "LOCK.RELEASEALL 2 {t}a {t}b tok"
        );
        let ext: Vec<String> = extend_lines(&n, b"tok", Ttl::Px(9))
            .into_iter()
            .map(text)
            .collect();
        assert_eq!(
            ext,
            ["LOCK.EXTEND {t}a tok PX 9", "LOCK.EXTEND {t}b tok PX 9"]
        );
    }

    #[test]
    fn a_renewal_counts_only_whole() {
        use Renewed::*;
        assert_eq!(renewal(&[Extended, Extended], 2), Extended);
        assert_eq!(renewal(&[Extended, Failed], 2), Failed);
        assert_eq!(renewal(&[Extended], 2), Failed);
        assert_eq!(renewal(&[Failed, Gone], 2), Gone);
    }

    #[test]
    fn replies() {
        let granted = Value::Array(vec![
            Value::BulkString(b"tok".to_vec()),
            Value::Array(vec![Value::Int(5), Value::Int(9)]),
        ]);
        assert_eq!(
            grant_all(&granted, 2).unwrap(),
            Some((b"tok".to_vec(), vec![5, 9]))
        );
        assert!(grant_all(&granted, 3).is_err());
        assert_eq!(grant_all(&Value::Nil, 2).unwrap(), None);
        assert!(grant_all(&Value::Int(1), 2).is_err());
        assert_eq!(released(&Value::Int(2)).unwrap(), 2);
        assert!(released(&Value::Nil).is_err());
    }
}
