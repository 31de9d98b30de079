//! Redis Cluster, without I/O: the slot of a key, which key of a request routes it, the slot
//! table (`CLUSTER SLOTS`), what a redirect (`MOVED`, `ASK`) or a refusal (`TRYAGAIN`,
//! `CLUSTERDOWN`) says, and what a wait does after one: it is sent again with the time it has
//! left (the front ends rebuild its `BLOCK` from the deadline), never with its first timeout.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

/// The number of hash slots of a Cluster.
pub const SLOTS: usize = 16384;

/// How long a request waits before it is sent again after `TRYAGAIN` (a slot in the middle of a
/// move).
pub const TRYAGAIN_PAUSE: Duration = Duration::from_millis(50);

/// How long a request waits before it is sent again after `CLUSTERDOWN` or after the node that
/// served its slot stopped answering (a failover in progress).
pub const DOWN_PAUSE: Duration = Duration::from_millis(100);

/// How many redirects one acquire follows before it gives up (each is a real move of the slot).
pub const MAX_HOPS: u32 = 64;

/// What a wait's transport answers when the node serving its slot dropped the connection or
/// refused it: the wait is sent again, with the time left, once the slot table was read again.
pub const NODE_LOST: &str = "CLUSTERDOWN the node serving the key does not answer";

/// The answer of a request with keys in several slots, given before anything is sent.
pub const CROSS_SLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

pub use super::multi::key_slot;

fn upper(arg: &[u8]) -> Vec<u8> {
    arg.to_ascii_uppercase()
}

/// The keys of a request line of the client (`LOCK.ACQUIREALL`/`LOCK.RELEASEALL` carry a count
/// and several keys; every other `LOCK.*` command its one key first; `LOCK.FENCE` its gate).
pub fn keys_of(line: &[Vec<u8>]) -> Vec<&[u8]> {
    let Some(command) = line.first() else {
        return Vec::new();
    };
    let command = upper(command);
    if command == b"LOCK.ACQUIREALL" || command == b"LOCK.RELEASEALL" {
        let n = line
            .get(1)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        return line.iter().skip(2).take(n).map(Vec::as_slice).collect();
    }
    line.get(1).map(|k| vec![k.as_slice()]).unwrap_or_default()
}

/// The slot of a request line: `Ok(None)` for one without keys, `Err` with `CROSS_SLOT` for keys
/// in several slots (refused before sending).
pub fn slot_of(line: &[Vec<u8>]) -> Result<Option<u16>, &'static str> {
    let mut slots = keys_of(line).into_iter().map(key_slot);
    let Some(first) = slots.next() else {
        return Ok(None);
    };
    if slots.any(|s| s != first) {
        return Err(CROSS_SLOT);
    }
    Ok(Some(first))
}

/// A wait in the server (`BLOCK` among its options): its transport never sends it again by
/// itself, since its `BLOCK` is the time left when it was built.
pub fn is_wait(line: &[Vec<u8>]) -> bool {
    line.iter().skip(3).any(|a| upper(a) == b"BLOCK")
}

/// A guarded write (`LOCK.CALL`, `LOCK.FENCE`): never sent twice once it may have reached a
/// node (its inner command might run twice); redirects, which say it did not run, are followed.
pub fn is_guarded(line: &[Vec<u8>]) -> bool {
    line.first()
        .map(|c| upper(c))
        .is_some_and(|c| c == b"LOCK.CALL" || c == b"LOCK.FENCE")
}

/// What a Cluster error reply says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redirect {
    /// The slot is served by `addr` now (`host:port`; an empty host is the answering node's).
    Moved { slot: u16, addr: String },
    /// Send this one request to `addr`, after `ASKING` (the slot is being moved there).
    Ask { slot: u16, addr: String },
    /// The slot is in the middle of a move: send again shortly.
    TryAgain,
    /// The cluster, or the node of the slot, is down for now (also `NODE_LOST`).
    Down,
}

/// The redirect an error reply's text (`MOVED 3999 127.0.0.1:6381`, …) says, if any.
pub fn parse(text: &str) -> Option<Redirect> {
    let mut words = text.split_ascii_whitespace();
    let code = words.next()?;
    let mut target = || {
        let slot = words.next()?.parse::<u16>().ok()?;
        let addr = words.next()?.to_string();
        Some((slot, addr))
    };
    match code {
        "MOVED" => target().map(|(slot, addr)| Redirect::Moved { slot, addr }),
        "ASK" => target().map(|(slot, addr)| Redirect::Ask { slot, addr }),
        "TRYAGAIN" => Some(Redirect::TryAgain),
        "CLUSTERDOWN" => Some(Redirect::Down),
        _ => None,
    }
}

/// `addr` of a redirect, its empty host (`:6381`) filled in with `host` (the answering node's).
pub fn resolve(addr: &str, host: &str) -> String {
    match addr.strip_prefix(':') {
        Some(port) => format!("{host}:{port}"),
        None => addr.to_string(),
    }
}

/// `host:port` split at its last colon (an IPv6 host keeps its own).
pub fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

/// The master of each slot, as last read (`CLUSTER SLOTS`) or redirected (`MOVED`).
#[derive(Clone, Debug)]
pub struct SlotMap {
    owners: Vec<Option<Arc<str>>>,
}

impl Default for SlotMap {
    fn default() -> SlotMap {
        SlotMap {
            owners: vec![None; SLOTS],
        }
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

impl SlotMap {
    /// The table of a `CLUSTER SLOTS` reply of the node at `host` (which an empty host in the
    /// reply stands for); `None` if the reply is not one.
    pub fn from_slots(reply: &Value, host: &str) -> Option<SlotMap> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut map = SlotMap::default();
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let (start, end) = (int(fields.first()?)?, int(fields.get(1)?)?);
            let Value::Array(master) = fields.get(2)? else {
                return None;
            };
            let mut node = text(master.first()?)?;
            if node.is_empty() || node == "?" {
                node = host.to_string();
            }
            let port = int(master.get(1)?)?;
            let addr: Arc<str> = Arc::from(format!("{node}:{port}"));
            let (start, end) = (usize::try_from(start).ok()?, usize::try_from(end).ok()?);
            for slot in map.owners.get_mut(start..=end)? {
                *slot = Some(addr.clone());
            }
        }
        Some(map)
    }

    /// The master of `slot`, if known.
    pub fn owner(&self, slot: u16) -> Option<Arc<str>> {
        self.owners.get(usize::from(slot)).cloned().flatten()
    }

    /// `MOVED`: `slot` is `addr`'s now.
    pub fn moved(&mut self, slot: u16, addr: &str) {
        if let Some(s) = self.owners.get_mut(usize::from(slot)) {
            *s = Some(Arc::from(addr));
        }
    }

    /// Every master the table knows, each once.
    pub fn masters(&self) -> Vec<Arc<str>> {
        let mut seen: Vec<Arc<str>> = Vec::new();
        for a in self.owners.iter().flatten() {
            if !seen.iter().any(|s| s == a) {
                seen.push(a.clone());
            }
        }
        seen
    }
}

/// What a wait does after a redirect or a refusal, `hops` redirects already followed: `Some`
/// pause before it is sent again (zero: at once) with the time it has left, `None` to give up
/// (too many redirects, or no time left). A pause is never longer than the time left: a wait
/// that runs out during one ends at its deadline.
pub fn after(redirect: &Redirect, hops: u32, time_left: Option<Duration>) -> Option<Duration> {
    let pause = match redirect {
        Redirect::Moved { .. } | Redirect::Ask { .. } => {
            return (hops < MAX_HOPS).then_some(Duration::ZERO);
        }
        Redirect::TryAgain => TRYAGAIN_PAUSE,
        Redirect::Down => DOWN_PAUSE,
    };
    match time_left {
        None => Some(pause), // a wait without limit
        Some(left) => (!left.is_zero()).then(|| pause.min(left)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(words: &str) -> Vec<Vec<u8>> {
        words.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn slots() {
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn keys_and_lines() {
        let all = line("LOCK.ACQUIREALL 2 {t}a {t}b tok PX 500 BLOCK 20");
        assert_eq!(keys_of(&all), vec![&b"{t}a"[..], b"{t}b"]);
        assert_eq!(slot_of(&all), Ok(Some(key_slot(b"t"))));
        assert!(is_wait(&all));
        let cross = line("LOCK.RELEASEALL 2 a b tok");
        assert_eq!(slot_of(&cross), Err(CROSS_SLOT));
        let one = line("LOCK.ACQUIRE lock:a tok PX 30000");
        assert_eq!(slot_of(&one), Ok(Some(key_slot(b"lock:a"))));
        assert!(!is_wait(&one));
        assert!(is_wait(&line("lock.acquire k t PX 1 SHARED block 5")));
        assert!(!is_wait(&line("LOCK.ACQUIRE k BLOCK PX 1")));
        assert!(is_guarded(&line("LOCK.FENCE g 7 SET x 5")));
        assert!(is_guarded(&line("LOCK.CALL k t SET x")));
        assert!(!is_guarded(&one));
        assert_eq!(slot_of(&line("PING")), Ok(None));
    }

    #[test]
    fn redirects() {
        assert_eq!(
            parse("MOVED 3999 127.0.0.1:6381"),
            Some(Redirect::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381".into()
            })
        );
        assert_eq!(
            parse("ASK 1 ::1:7000"),
            Some(Redirect::Ask {
                slot: 1,
                addr: "::1:7000".into()
            })
        );
        assert_eq!(
            parse("TRYAGAIN the lock's slot is moving"),
            Some(Redirect::TryAgain)
        );
        assert_eq!(parse(NODE_LOST), Some(Redirect::Down));
        assert_eq!(parse("MOVED x"), None);
        assert_eq!(parse("NOTOWNER x"), None);
        assert_eq!(resolve(":6381", "10.0.0.1"), "10.0.0.1:6381");
        assert_eq!(split_addr("::1:7000"), Some(("::1", 7000)));
        assert_eq!(split_addr("[::1]:7000"), Some(("::1", 7000)));
        assert_eq!(split_addr("h:x"), None);
    }

    #[test]
    fn waits_after_redirects() {
        let moved = parse("MOVED 1 h:1").unwrap();
        assert_eq!(after(&moved, 0, Some(Duration::ZERO)), Some(Duration::ZERO));
        assert_eq!(after(&moved, MAX_HOPS, None), None);
        let again = Redirect::TryAgain;
        assert_eq!(after(&again, 0, None), Some(TRYAGAIN_PAUSE));
        assert_eq!(
            after(&again, 0, Some(Duration::from_secs(1))),
            Some(TRYAGAIN_PAUSE)
        );
        let little = Duration::from_millis(30);
        assert_eq!(after(&again, 0, Some(little)), Some(little));
        assert_eq!(after(&again, 0, Some(Duration::ZERO)), None);
        assert_eq!(after(&Redirect::Down, 0, Some(little)), Some(little));
    }

    #[test]
    fn tables() {
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.as_bytes().to_vec()),
                Value::Int(p),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("", 7001),
                node("127.0.0.1", 7002),
            ]),
        ]);
        let mut map = SlotMap::from_slots(&reply, "10.1.1.1").unwrap();
        assert_eq!(map.owner(0).as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(map.owner(5461).as_deref(), Some("10.1.1.1:7001"));
        assert_eq!(map.masters().len(), 2);
        map.moved(5461, "127.0.0.1:7002");
        assert_eq!(map.owner(5461).as_deref(), Some("127.0.0.1:7002"));
        assert_eq!(map.owner(5462).as_deref(), Some("10.1.1.1:7001"));
        assert!(SlotMap::from_slots(&Value::Int(1), "h").is_none());
        assert!(SlotMap::default().owner(3).is_none());
    }
}
