//! What the server's replies mean, under RESP2 and RESP3.

use redis::Value;

use super::error::Error;

fn unexpected(what: &str, v: &Value) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("{what}: {v:?}"),
    )))
}

/// A server error carried as a value (RESP3 inside an aggregate, or a driver that gives errors
/// as values) as the redis crate's error.
pub fn value_error(v: &Value) -> Option<redis::RedisError> {
    match v {
        Value::ServerError(e) => Some(e.clone().into()),
        _ => None,
    }
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::VerbatimString { text, .. } => Some(text.clone().into_bytes()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Double(d) if d.fract() == 0.0 => Some(*d as i64),
        _ => None,
    }
}

/// The inner command's reply of a guarded write (LOCK.CALL, LOCK.FENCE), as the redis crate
/// converts it for the command sent directly.
pub fn inner<T: redis::FromRedisValue>(v: Value) -> Result<T, Error> {
    redis::from_redis_value(v).map_err(|e| Error::Redis(e.into()))
}

/// LOCK.ACQUIRE: `Some((token, fence))` when granted, `None` when not (nil).
pub fn grant(v: &Value) -> Result<Option<(Vec<u8>, u64)>, Error> {
    match v {
        Value::Nil => Ok(None),
        Value::Array(items) if items.len() == 2 => {
            let token = bytes(&items[0]).ok_or_else(|| unexpected("LOCK.ACQUIRE token", v))?;
            let fence = int(&items[1])
                .and_then(|f| u64::try_from(f).ok())
                .ok_or_else(|| unexpected("LOCK.ACQUIRE fence", v))?;
            Ok(Some((token, fence)))
        }
        _ => Err(unexpected("LOCK.ACQUIRE", v)),
    }
}

/// LOCK.RELEASE, LOCK.EXTEND: true for 1, false for 0.
pub fn one(v: &Value, what: &str) -> Result<bool, Error> {
    match int(v) {
        Some(1) => Ok(true),
        Some(0) => Ok(false),
        _ => Err(unexpected(what, v)),
    }
}

/// One holder of a lock (`LOCK.INFO`'s `holders`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    pub token: Vec<u8>,
    pub fence: u64,
    /// Milliseconds left on this holder's lease.
    pub ttl: i64,
    /// The id of the connection the hold is bound to (`EPHEMERAL`), 0 when unbound.
    pub client: u64,
}

/// `LOCK.INFO`: who holds the lock and how.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    /// `exclusive`, `shared` or `semaphore`.
    pub mode: String,
    /// Milliseconds left on the key (its latest lease).
    pub ttl: i64,
    /// Requests waiting in the server.
    pub waiters: u64,
    /// Every holder, in grant order.
    pub holders: Vec<Holder>,
    /// The places of a semaphore.
    pub limit: Option<u64>,
}

impl LockInfo {
    /// Every holder's token.
    pub fn tokens(&self) -> Vec<&[u8]> {
        self.holders.iter().map(|h| h.token.as_slice()).collect()
    }

    /// The entry of `token`'s hold.
    pub fn holder(&self, token: &[u8]) -> Option<&Holder> {
        self.holders.iter().find(|h| h.token == token)
    }
}

fn pairs(v: &Value) -> Option<Vec<(String, &Value)>> {
    let key = |k: &Value| bytes(k).map(|b| String::from_utf8_lossy(&b).into_owned());
    match v {
        Value::Map(items) => items.iter().map(|(k, v)| Some((key(k)?, v))).collect(),
        Value::Array(items) if items.len() % 2 == 0 => items
            .chunks(2)
            .map(|kv| Some((key(&kv[0])?, &kv[1])))
            .collect(),
        _ => None,
    }
}

fn holder(v: &Value) -> Option<Holder> {
    let mut h = Holder::default();
    for (k, v) in pairs(v)? {
        match k.as_str() {
            "token" => h.token = bytes(v)?,
            "fence" => h.fence = u64::try_from(int(v)?).ok()?,
            "ttl" => h.ttl = int(v)?,
            "client" => h.client = u64::try_from(int(v)?).ok()?,
            _ => {}
        }
    }
    Some(h)
}

/// LOCK.INFO: `None` when nobody holds the lock. A server from before shared locks (no
/// `holders`) gets one holder from the top-level `token`, `fence`, `ttl`.
pub fn info(v: &Value) -> Result<Option<LockInfo>, Error> {
    if matches!(v, Value::Nil) {
        return Ok(None);
    }
    let fields = pairs(v).ok_or_else(|| unexpected("LOCK.INFO", v))?;
    let mut info = LockInfo {
        mode: "exclusive".into(),
        ..LockInfo::default()
    };
    let mut top = Holder::default();
    let mut listed = false;
    for (k, val) in fields {
        let bad = || unexpected("LOCK.INFO field", v);
        match k.as_str() {
            "mode" => info.mode = String::from_utf8_lossy(&bytes(val).ok_or_else(bad)?).into(),
            "ttl" => {
                info.ttl = int(val).ok_or_else(bad)?;
                top.ttl = info.ttl;
            }
            "waiters" => {
                info.waiters = int(val)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(bad)?
            }
            "limit" => info.limit = int(val).and_then(|n| u64::try_from(n).ok()),
            "token" => top.token = bytes(val).ok_or_else(bad)?,
            "fence" => {
                top.fence = int(val)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(bad)?
            }
            "client" => top.client = int(val).and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
            "holders" => {
                let Value::Array(list) = val else {
                    return Err(bad());
                };
                info.holders = list
                    .iter()
                    .map(holder)
                    .collect::<Option<_>>()
                    .ok_or_else(bad)?;
                listed = true;
            }
            _ => {}
        }
    }
    if !listed && !top.token.is_empty() {
        info.holders.push(top);
    }
    Ok(Some(info))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn grants() {
        assert_eq!(grant(&Value::Nil).unwrap(), None);
        let g = Value::Array(vec![bulk("tok"), Value::Int(42)]);
        assert_eq!(grant(&g).unwrap(), Some((b"tok".to_vec(), 42)));
        assert!(grant(&Value::Int(1)).is_err());
        assert!(grant(&Value::Array(vec![bulk("t"), Value::Int(-1)])).is_err());
    }

    #[test]
    fn ones() {
        assert!(one(&Value::Int(1), "x").unwrap());
        assert!(!one(&Value::Int(0), "x").unwrap());
        assert!(one(&Value::Nil, "x").is_err());
    }

    fn holder_fields(token: &str, fence: i64) -> Vec<(Value, Value)> {
        vec![
            (bulk("token"), bulk(token)),
            (bulk("fence"), Value::Int(fence)),
            (bulk("ttl"), Value::Int(900)),
            (bulk("client"), Value::Int(0)),
        ]
    }

    #[test]
    fn info_in_resp2_and_resp3() {
        let top = vec![
            (bulk("mode"), bulk("exclusive")),
            (bulk("token"), bulk("a")),
            (bulk("fence"), Value::Int(7)),
            (bulk("ttl"), Value::Int(900)),
            (bulk("waiters"), Value::Int(2)),
        ];
        let flat = |fields: Vec<(Value, Value)>| {
            Value::Array(fields.into_iter().flat_map(|(k, v)| [k, v]).collect())
        };
        let resp3 = {
            let mut f = top.clone();
            f.push((
                Value::SimpleString("holders".into()),
                Value::Array(vec![Value::Map(holder_fields("a", 7))]),
            ));
            Value::Map(f)
        };
        let resp2 = {
            let mut f = top.clone();
            f.push((
                bulk("holders"),
                Value::Array(vec![flat(holder_fields("a", 7))]),
            ));
            flat(f)
        };
        for v in [resp3, resp2] {
            let i = info(&v).unwrap().unwrap();
            assert_eq!(i.mode, "exclusive");
            assert_eq!(i.waiters, 2);
            assert_eq!(i.tokens(), vec![b"a".as_slice()]);
            assert_eq!(i.holder(b"a").unwrap().fence, 7);
        }
        // A server without `holders`: the top-level fields make the one holder.
        let old = info(&flat(top)).unwrap().unwrap();
        assert_eq!(old.holder(b"a").unwrap().ttl, 900);
        assert_eq!(info(&Value::Nil).unwrap(), None);
        assert!(info(&Value::Int(3)).is_err());
    }
}
