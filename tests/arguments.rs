//! What the commands say about their arguments: a `numkeys` that does not count the keys is
//! named as such (not the token or expiry it swallowed or left behind), an unknown option's
//! error lists the options of that command, and `COMMAND DOCS` names the release each command
//! appeared in. Errors read the same in RESP2 and RESP3.

use crate::common::*;
use redis::Value;

const ACQUIRE_OPTIONS: &str =
    "(LOCK.ACQUIRE takes EX, PX, SHARED, LIMIT, EPHEMERAL, BLOCK and DATA)";

fn miscount(given: usize, fits: usize) -> String {
    format!(
        "ERR wrong numkeys: {given} keys leave no valid token and options after them, {fits} \
         would; numkeys must count the keys before the token"
    )
}

fn cases() -> Vec<(redis::Cmd, String)> {
    vec![
        // One key too many: the token is read as a key, then PX as the token.
        (
            rcmd!("LOCK.ACQUIREALL", 3, "a", "b", "tok", "PX", 1000),
            miscount(3, 2),
        ),
        // Two too many: the expiry is swallowed.
        (
            rcmd!("LOCK.ACQUIREALL", 4, "a", "b", "tok", "PX", 1000),
            miscount(4, 2),
        ),
        // One too few: a key is read as the token.
        (
            rcmd!(
                "LOCK.ACQUIREALL",
                1,
                "a",
                "b",
                "tok",
                "PX",
                1000,
                "BLOCK",
                10
            ),
            miscount(1, 2),
        ),
        // More than there are arguments.
        (
            rcmd!("LOCK.ACQUIREALL", 9, "a", "b", "tok", "PX", 1000),
            miscount(9, 2),
        ),
        (rcmd!("LOCK.RELEASEALL", 3, "a", "b", "tok"), miscount(3, 2)),
        // A right count keeps the errors of the arguments after the keys.
        (
            rcmd!(
                "LOCK.ACQUIREALL",
                2,
                "a",
                "b",
                "tok",
                "PX",
                1000,
                "LIMIT",
                2
            ),
            "ERR LIMIT does not apply to LOCK.ACQUIREALL: take semaphore places one key at a \
             time with LOCK.ACQUIRE"
                .into(),
        ),
        (
            rcmd!("LOCK.ACQUIREALL", 1, "a", "PX", 1000),
            "ERR syntax error: the token goes before PX (LOCK.ACQUIREALL numkeys key [key ...] \
             token PX milliseconds); 'PX' was read as the token"
                .into(),
        ),
        (
            rcmd!("LOCK.ACQUIREALL", 2, "a", "b", "tok", "PX", 1000, "NX"),
            "ERR syntax error: unknown option 'NX' (LOCK.ACQUIREALL takes EX, PX, SHARED, \
             EPHEMERAL, BLOCK and DATA)"
                .into(),
        ),
        // Unknown options list what the command takes.
        (
            rcmd!("LOCK.ACQUIRE", "k", "t", "PX", 10, "NX"),
            format!("ERR syntax error: unknown option 'NX' {ACQUIRE_OPTIONS}"),
        ),
        (
            rcmd!("LOCK.EXTEND", "k", "t", "PX", 10, "KEEPTTL"),
            "ERR syntax error: unknown option 'KEEPTTL' (LOCK.EXTEND takes EX or PX)".into(),
        ),
        (
            rcmd!("LOCK.OBSERVE", "k", "WAIT", 10),
            "ERR syntax error: unknown option 'WAIT' (LOCK.OBSERVE takes AFTER, SEEN and BLOCK)"
                .into(),
        ),
        (
            rcmd!("LOCK.OBSERVE", "k", "AFTER", 1, "SEEN"),
            "ERR syntax error: option SEEN needs a value".into(),
        ),
        (
            rcmd!("LOCK.OBSERVE", "k", "SEEN", "a", "AFTER", 1, "seen", "b"),
            "ERR syntax error: option SEEN given more than once".into(),
        ),
        (
            rcmd!("LOCK.OBSERVE", "k", "AFTER", 1, "SEEN", "x".repeat(4097)),
            "ERR invalid SEEN data: must be at most 4096 bytes (empty: the holder had no data)"
                .into(),
        ),
    ]
}

#[test]
fn a_miscounted_numkeys_and_unknown_options_are_named_in_resp2_and_resp3() {
    let s = Server::start();
    for mut c in [s.conn(), s.conn_resp3()] {
        for (cmd, want) in cases() {
            assert_eq!(err(&mut c, &cmd), want, "{}", describe(&cmd));
        }
        assert_eq!(dbsize(&mut c), 0, "nothing was written");
    }
}

#[test]
fn command_docs_name_the_release_the_commands_appeared_in() {
    let s = Server::start();
    let mut c = s.conn();
    let names = [
        "lock.acquire",
        "lock.release",
        "lock.extend",
        "lock.info",
        "lock.call",
        "lock.fence",
        "lock.observe",
        "lock.acquireall",
        "lock.releaseall",
    ];
    for name in names {
        let Value::Array(docs) = ok(&mut c, &rcmd!("COMMAND", "DOCS", name)) else {
            panic!("COMMAND DOCS {name}")
        };
        let Value::Array(fields) = &docs[1] else {
            panic!("COMMAND DOCS {name}: {docs:?}")
        };
        let since = fields
            .chunks(2)
            .find(|kv| as_bytes(&kv[0]) == b"since")
            .map(|kv| as_bytes(&kv[1]))
            .unwrap_or_else(|| panic!("COMMAND DOCS {name} has no since: {fields:?}"));
        // Every command is in the first release; a later command names its own.
        assert_eq!(lossy(&since), "0.1.0", "{name}");
        assert!(
            lossy(&since).as_str() <= env!("CARGO_PKG_VERSION"),
            "{name}"
        );
    }
}
