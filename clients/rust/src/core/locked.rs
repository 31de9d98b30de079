//! `locked`: whether anyone holds a lock, or any of several (LOCK.INFO of each in turn).

use redis::Value;

use super::error::{is_wrong_type, reply_text, translate, Error};

/// The names `locked` asks about: one (`&str`, `String`, `&[u8]`) or several (an array or a
/// `Vec` of names).
pub trait Names {
    fn into_names(self) -> Vec<Vec<u8>>;
}

impl Names for &str {
    fn into_names(self) -> Vec<Vec<u8>> {
        vec![self.as_bytes().to_vec()]
    }
}

impl Names for String {
    fn into_names(self) -> Vec<Vec<u8>> {
        vec![self.into_bytes()]
    }
}

impl Names for &String {
    fn into_names(self) -> Vec<Vec<u8>> {
        vec![self.as_bytes().to_vec()]
    }
}

impl Names for &[u8] {
    fn into_names(self) -> Vec<Vec<u8>> {
        vec![self.to_vec()]
    }
}

impl<T: AsRef<[u8]>, const N: usize> Names for [T; N] {
    fn into_names(self) -> Vec<Vec<u8>> {
        self.iter().map(|n| n.as_ref().to_vec()).collect()
    }
}

impl<T: AsRef<[u8]>> Names for Vec<T> {
    fn into_names(self) -> Vec<Vec<u8>> {
        self.iter().map(|n| n.as_ref().to_vec()).collect()
    }
}

/// What the reply to `LOCK.INFO` of one key (its error still the redis crate's, untranslated)
/// says: held by anyone (true: stop asking), or free. A key holding another type (a plain
/// string, `WRONGTYPE`) counts as held, as the Python and Node.js clients count it.
pub fn held(reply: Result<Value, Error>, name: &[u8]) -> Result<bool, Error> {
    match reply {
        Ok(v) => Ok(super::reply::info(&v)?.is_some()),
        Err(Error::Redis(e)) if reply_text(&e).is_some_and(|t| is_wrong_type(&t)) => Ok(true),
        Err(Error::Redis(e)) => Err(translate(e, &String::from_utf8_lossy(name), "info")),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!("a".into_names(), vec![b"a".to_vec()]);
        assert_eq!(String::from("a").into_names(), vec![b"a".to_vec()]);
        assert_eq!(b"a".as_slice().into_names(), vec![b"a".to_vec()]);
        assert_eq!(["a", "b"].into_names(), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(vec!["a".to_string()].into_names(), vec![b"a".to_vec()]);
    }

    #[test]
    fn a_plain_string_counts_as_held() {
        let wrong = match redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n") {
            Ok(redis::Value::ServerError(e)) => redis::RedisError::from(e),
            other => panic!("{other:?}"),
        };
        assert!(held(Err(Error::Redis(wrong)), b"k").unwrap());
        assert!(!held(Ok(Value::Nil), b"k").unwrap());
        let dropped = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(held(Err(Error::Redis(dropped.into())), b"k").is_err());
    }
}
