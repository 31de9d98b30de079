//! The one error type of the client, and how a server's error reply becomes one.

use std::fmt;

/// What went wrong. The server's own refusals of the inner command of a guarded write (LOCK.CALL,
/// LOCK.FENCE) stay `Redis` errors, as if the command had been sent directly; only `NOTOWNER`
/// and `STALEFENCE` become lock errors.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The hold is gone: the server answered `NOTOWNER` or `0` (it ended, expired, was deleted
    /// or another type was written over the key).
    NotOwner { name: String },
    /// LOCK.FENCE refused: a newer fence has passed the gate.
    StaleFence {
        fence: Option<u64>,
        highest: Option<u64>,
    },
    /// The lock was not granted: held by another token (a try), or the wait ran out.
    Busy { name: String },
    /// No answer within the call's bound: the network or the server is not answering. The call
    /// may or may not have been carried out.
    Timeout { name: String, what: &'static str },
    /// The hold was lost before this call: its lease clock ran out without a renewal answered,
    /// or a renewal found it gone. Whatever the server still had of it was released.
    Lost { name: String },
    /// Fewer replicas than asked acknowledged a grant or an extension in time.
    NotReplicated {
        name: String,
        replicas: Option<u64>,
        needed: u64,
    },
    /// The keys of one request are not in one Cluster slot (`CROSSSLOT`).
    CrossSlot(String),
    /// The server's module does not know this command or option.
    Unsupported(String),
    /// The request does not fit the key: another semaphore `limit` (`limit` is then the key's),
    /// a `limit` on a read/write lock, or this token holds the key in the other mode.
    Kind {
        message: String,
        limit: Option<u64>,
        other_mode: bool,
    },
    /// An argument the client refuses before sending anything (a multi-lock's names, an
    /// election's data).
    Invalid(String),
    /// An error of the redis crate or the server that is none of the above.
    Redis(redis::RedisError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotOwner { name } => write!(f, "{name}: the lock is not held by this token"),
            Error::StaleFence { fence, highest } => match (fence, highest) {
                (Some(a), Some(b)) => write!(f, "fence {a} is older than {b}"),
                _ => write!(f, "stale fence"),
            },
            Error::Busy { name } => write!(f, "{name} was not granted"),
            Error::Timeout { name, what } => write!(f, "{what} of {name}: no answer in time"),
            Error::Lost { name } => write!(f, "{name}: the hold was lost"),
            // Enough replicas, not acknowledged all the same: the master's own fsync was not.
            Error::NotReplicated {
                name,
                replicas: Some(r),
                needed,
            } if r >= needed => write!(
                f,
                "{name}: {r} of {needed} replicas acknowledged, the master's AOF fsync did not in \
                 time"
            ),
            Error::NotReplicated {
                name,
                replicas,
                needed,
            } => write!(
                f,
                "{name}: {} of {needed} replicas acknowledged",
                replicas.map_or("none".to_string(), |r| r.to_string())
            ),
            Error::CrossSlot(m) | Error::Unsupported(m) | Error::Invalid(m) => f.write_str(m),
            Error::Kind { message, .. } => f.write_str(message),
            Error::Redis(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e)
    }
}

/// The result of the client's calls.
pub type Result<T> = std::result::Result<T, Error>;

/// The text of a server's error reply as the server sent it (`CODE detail`), if `err` is one.
pub fn reply_text(err: &redis::RedisError) -> Option<String> {
    let code = err.code()?;
    Some(match err.detail() {
        Some(detail) => format!("{code} {detail}"),
        None => code.to_string(),
    })
}

/// A server error that says the server does not know a command or an option.
pub fn is_unsupported(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("unknown command")
        || lower.contains("unknown option")
        || lower.contains("unknown subcommand")
}

/// The key holds another type.
pub fn is_wrong_type(text: &str) -> bool {
    text.starts_with("WRONGTYPE")
}

/// A server error reply to a lock command (`what` of `name`) as the client's error.
pub fn translate(err: redis::RedisError, name: &str, what: &'static str) -> Error {
    let Some(text) = reply_text(&err) else {
        return if err.is_timeout() {
            Error::Timeout {
                name: name.to_string(),
                what,
            }
        } else {
            Error::Redis(err)
        };
    };
    translate_text(&text, name, what).unwrap_or(Error::Redis(err))
}

/// The lock error that the server's error text `text` stands for, if any.
pub fn translate_text(text: &str, name: &str, what: &'static str) -> Option<Error> {
    let body = text.strip_prefix("ERR ").unwrap_or(text);
    if is_unsupported(text) {
        return Some(Error::Unsupported(format!(
            "{what} is not supported by this server: {text}"
        )));
    }
    if let Some(rest) = body.strip_prefix("the key is a semaphore with LIMIT ") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return Some(Error::Kind {
            message: text.to_string(),
            limit: digits.parse().ok(),
            other_mode: false,
        });
    }
    if body.starts_with("the key is a read/write lock") {
        return Some(Error::Kind {
            message: text.to_string(),
            limit: None,
            other_mode: false,
        });
    }
    if body.starts_with("this token already holds the key in another mode") {
        return Some(Error::Kind {
            message: text.to_string(),
            limit: None,
            other_mode: true,
        });
    }
    if text.starts_with("NOTOWNER") || (is_wrong_type(text) && what != "acquire") {
        return Some(Error::NotOwner {
            name: name.to_string(),
        });
    }
    if text.starts_with("STALEFENCE") {
        let numbers: Vec<u64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        return Some(Error::StaleFence {
            fence: numbers.first().copied(),
            highest: if numbers.len() > 1 {
                numbers.last().copied()
            } else {
                None
            },
        });
    }
    if text.starts_with("CROSSSLOT") {
        return Some(Error::CrossSlot(text.to_string()));
    }
    None
}

/// The error of a guarded command (LOCK.CALL, LOCK.FENCE): only `NOTOWNER`, `STALEFENCE` and a
/// server without the guarded command itself are the lock's; the inner command's errors stay
/// the redis crate's own.
pub fn translate_guarded(err: redis::RedisError, name: &str, what: &'static str) -> Error {
    let Some(text) = reply_text(&err) else {
        return translate(err, name, what);
    };
    let lower = text.to_ascii_lowercase();
    if text.starts_with("NOTOWNER")
        || text.starts_with("STALEFENCE")
        || (is_unsupported(&text) && (lower.contains("lock.call") || lower.contains("lock.fence")))
    {
        return translate_text(&text, name, what).unwrap_or(Error::Redis(err));
    }
    Error::Redis(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortfalls_say_what_was_missing() {
        let short = |replicas, needed| {
            Error::NotReplicated {
                name: "k".into(),
                replicas,
                needed,
            }
            .to_string()
        };
        assert_eq!(short(Some(1), 2), "k: 1 of 2 replicas acknowledged");
        assert_eq!(short(None, 1), "k: none of 1 replicas acknowledged");
        assert!(short(Some(0), 0).contains("the master's AOF fsync"));
    }

    #[test]
    fn server_texts_map_to_lock_errors() {
        let t = |s| translate_text(s, "k", "release");
        assert!(
            matches!(t("NOTOWNER the lock is not held by this token"), Some(Error::NotOwner { name }) if name == "k")
        );
        assert!(matches!(
            t("STALEFENCE fence 3 is older than 7"),
            Some(Error::StaleFence {
                fence: Some(3),
                highest: Some(7)
            })
        ));
        assert!(matches!(
            t("ERR the key is a semaphore with LIMIT 3: ask with LIMIT 3"),
            Some(Error::Kind {
                limit: Some(3),
                other_mode: false,
                ..
            })
        ));
        assert!(matches!(
            t("ERR this token already holds the key in another mode"),
            Some(Error::Kind {
                other_mode: true,
                ..
            })
        ));
        assert!(matches!(
            t("ERR unknown command 'LOCK.OBSERVE', with args beginning with:"),
            Some(Error::Unsupported(_))
        ));
        assert!(matches!(
            t("CROSSSLOT Keys in request don't hash to the same slot"),
            Some(Error::CrossSlot(_))
        ));
        assert!(matches!(
            t("WRONGTYPE Operation against a key holding the wrong kind of value"),
            Some(Error::NotOwner { .. })
        ));
        // An acquire on a key of another type is not granted, not a loss.
        assert!(translate_text("WRONGTYPE Operation", "k", "acquire").is_none());
        assert!(translate_text("ERR syntax error", "k", "acquire").is_none());
    }
}
