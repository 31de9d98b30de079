//! Multi-resource locks (SPEC "Multi-resource locks"): `LOCK.ACQUIREALL numkeys key [key …]
//! token …`, all of its keys or none, and `LOCK.RELEASEALL`. This file: the helpers. `basics.rs`:
//! the replies, all or nothing, each key an ordinary lock afterwards. `effects.rs`: replicas,
//! the AOF, restarts, key specs (GETKEYS, ACL key patterns, Cluster slots). `waiting.rs`:
//! waiting on every key's queue at once, first come first served across queues. `states.rs`:
//! waiting through server states, the handoff's effects, observers, `EPHEMERAL`.

mod basics;
mod effects;
mod exhausted;
mod failovers;
mod pauses;
mod states;
mod waiting;

use redis::{Connection, Value};

use crate::common::*;

/// `LOCK.ACQUIREALL` with these keys, token, lease and options.
pub fn acquire_all_cmd(keys: &[&str], token: &str, px: i64, options: &[&str]) -> redis::Cmd {
    let mut c = rcmd!("LOCK.ACQUIREALL", keys.len());
    for k in keys {
        c.arg(*k);
    }
    c.arg(token).arg("PX").arg(px);
    for o in options {
        c.arg(*o);
    }
    c
}

/// Reads `[token, [fence, …]]`, or None for nil.
#[track_caller]
pub fn grants_of(v: &Value) -> Option<(Vec<u8>, Vec<i64>)> {
    match v {
        Value::Nil => None,
        Value::Array(items) => {
            assert_eq!(items.len(), 2, "[token, [fences]]: {v:?}");
            let fences = match &items[1] {
                Value::Array(f) => f.iter().map(as_int).collect(),
                other => panic!("fences: {other:?}"),
            };
            Some((as_bytes(&items[0]), fences))
        }
        other => panic!("not a multi-key grant: {other:?}"),
    }
}

/// Acquires every key or none: the fences, or None when busy.
pub fn acquire_all(con: &mut Connection, keys: &[&str], token: &str, px: i64) -> Option<Vec<i64>> {
    grants_of(&ok(con, &acquire_all_cmd(keys, token, px, &[]))).map(|(_, f)| f)
}

/// `LOCK.RELEASEALL`: how many holds it released.
pub fn release_all(con: &mut Connection, keys: &[&str], token: &str) -> i64 {
    let mut c = rcmd!("LOCK.RELEASEALL", keys.len());
    for k in keys {
        c.arg(*k);
    }
    c.arg(token);
    as_int(&ok(con, &c))
}

/// The token holding `key`, if any (exclusive locks).
pub fn holder(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    info(con, key).map(|i| i.token)
}
