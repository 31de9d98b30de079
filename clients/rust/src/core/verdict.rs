//! What the answers to a hold's own requests mean, for both front ends and for holds of one key
//! or of several: an extension (and its acknowledgements), a release, an ownership check.

use redis::Value;

use super::durable::Replicas;
use super::error::{is_wrong_type, reply_text, Error, Result};
use super::lease::Renewed;
use super::reply::{self, LockInfo};

/// An extension of `name` answered `answer` (and `acks` to its `WAIT`, when `replicas` are
/// asked for): `Ok` when the lease moved; `Error::NotOwner` when the hold is gone (it is then
/// lost); `Error::NotReplicated` when granted but not acknowledged (the lease clock stays); any
/// other error as it came.
pub fn extension(
    answer: Result<Value>,
    acks: Option<&Value>,
    replicas: Option<Replicas>,
    name: &str,
) -> Result<()> {
    let gone = || Error::NotOwner {
        name: name.to_string(),
    };
    match answer.and_then(|v| reply::one(&v, "LOCK.EXTEND")) {
        Ok(true) => {}
        Ok(false) | Err(Error::NotOwner { .. }) => return Err(gone()),
        Err(e) => return Err(e),
    }
    if let Some(r) = replicas {
        let (count, ok) = r.acks(acks);
        if !ok {
            return Err(r.shortfall(name, count));
        }
    }
    Ok(())
}

/// A renewal in the background answered `answer` (and `acks`, when `replicas` are asked for):
/// extended only when answered 1 and acknowledged; gone when answered 0 or the key holds another
/// type; else failed (tried again soon, not counted by the lease clock).
pub fn renewal(answer: Result<Value>, acks: Option<&Value>, replicas: Option<Replicas>) -> Renewed {
    match answer.map(|v| reply::one(&v, "LOCK.EXTEND")) {
        Ok(Ok(true)) if replicas.is_none_or(|r| r.acks(acks).1) => Renewed::Extended,
        Ok(Ok(false)) => Renewed::Gone,
        Err(Error::Redis(e)) if reply_text(&e).is_some_and(|t| is_wrong_type(&t)) => Renewed::Gone,
        _ => Renewed::Failed,
    }
}

/// Whether a release is sent: a lost hold bound to its connection was released by the server
/// when that connection closed (nothing to send); any other hold is released whatever the
/// lease clock says, freeing what the server may still have of it.
pub fn release_sent(lost: bool, bound: bool) -> bool {
    !(lost && bound)
}

/// A release of `keys` keys of `name`, `lost` by the lease clock, that released `answer` keys
/// (`None`: nothing sent): `Error::Lost`, else `Error::NotOwner` unless every key was released.
pub fn released(lost: bool, answer: Option<Result<u64>>, keys: u64, name: &str) -> Result<()> {
    if lost {
        return Err(Error::Lost {
            name: name.to_string(),
        });
    }
    match answer.unwrap_or(Ok(0))? {
        n if n == keys => Ok(()),
        _ => Err(Error::NotOwner {
            name: name.to_string(),
        }),
    }
}

/// `LOCK.RELEASE`'s answer as a count of keys released.
pub fn released_one(v: &Value) -> Result<u64> {
    reply::one(v, "LOCK.RELEASE").map(u64::from)
}

/// Whether `info` shows this grant: `token` among the holders, with `fence`.
pub fn owns(info: Option<LockInfo>, token: &[u8], fence: u64) -> bool {
    info.and_then(|i| i.holder(token).map(|h| h.fence == fence))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::reply::Holder;
    use std::time::Duration;

    fn dropped() -> Error {
        Error::Redis(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into())
    }

    #[test]
    fn extensions() {
        assert!(extension(Ok(Value::Int(1)), None, None, "k").is_ok());
        assert!(matches!(
            extension(Ok(Value::Int(0)), None, None, "k"),
            Err(Error::NotOwner { .. })
        ));
        let not_owner = Err(Error::NotOwner { name: "x".into() });
        assert!(matches!(
            extension(not_owner, None, None, "k"),
            Err(Error::NotOwner { name }) if name == "k"
        ));
        assert!(matches!(
            extension(Err(dropped()), None, None, "k"),
            Err(Error::Redis(_))
        ));
        let r = Replicas::new(2, Duration::from_secs(1));
        assert!(extension(Ok(Value::Int(1)), Some(&Value::Int(2)), r, "k").is_ok());
        assert!(matches!(
            extension(Ok(Value::Int(1)), Some(&Value::Int(1)), r, "k"),
            Err(Error::NotReplicated {
                replicas: Some(1),
                ..
            })
        ));
        // Gone outranks unacknowledged.
        assert!(matches!(
            extension(Ok(Value::Int(0)), None, r, "k"),
            Err(Error::NotOwner { .. })
        ));
    }

    #[test]
    fn renewals() {
        let r = Replicas::new(1, Duration::from_secs(1));
        assert_eq!(renewal(Ok(Value::Int(1)), None, None), Renewed::Extended);
        assert_eq!(renewal(Ok(Value::Int(0)), None, None), Renewed::Gone);
        assert_eq!(renewal(Ok(Value::Nil), None, None), Renewed::Failed);
        assert_eq!(renewal(Err(dropped()), None, None), Renewed::Failed);
        let wrong = match redis::parse_redis_value(b"-WRONGTYPE Operation\r\n") {
            Ok(Value::ServerError(e)) => Error::Redis(e.into()),
            other => panic!("{other:?}"),
        };
        assert_eq!(renewal(Err(wrong), None, None), Renewed::Gone);
        assert_eq!(
            renewal(Ok(Value::Int(1)), Some(&Value::Int(1)), r),
            Renewed::Extended
        );
        assert_eq!(
            renewal(Ok(Value::Int(1)), Some(&Value::Int(0)), r),
            Renewed::Failed
        );
        assert_eq!(renewal(Ok(Value::Int(1)), None, r), Renewed::Failed);
        assert_eq!(renewal(Ok(Value::Int(0)), None, r), Renewed::Gone);
    }

    #[test]
    fn releases() {
        assert!(release_sent(false, true));
        assert!(release_sent(true, false));
        assert!(!release_sent(true, true));
        assert!(released(false, Some(Ok(2)), 2, "k").is_ok());
        assert!(matches!(
            released(false, Some(Ok(1)), 2, "k"),
            Err(Error::NotOwner { .. })
        ));
        assert!(matches!(
            released(true, Some(Ok(2)), 2, "k"),
            Err(Error::Lost { .. })
        ));
        assert!(matches!(
            released(true, None, 1, "k"),
            Err(Error::Lost { .. })
        ));
        assert!(matches!(
            released(false, Some(Err(dropped())), 1, "k"),
            Err(Error::Redis(_))
        ));
        assert_eq!(released_one(&Value::Int(1)).unwrap(), 1);
        assert_eq!(released_one(&Value::Int(0)).unwrap(), 0);
    }

    #[test]
    fn ownership() {
        let info = LockInfo {
            holders: vec![Holder {
                token: b"t".to_vec(),
                fence: 4,
                ..Holder::default()
            }],
            ..LockInfo::default()
        };
        assert!(owns(Some(info.clone()), b"t", 4));
        assert!(!owns(Some(info.clone()), b"t", 5));
        assert!(!owns(Some(info), b"u", 4));
        assert!(!owns(None, b"t", 4));
    }
}
