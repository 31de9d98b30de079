//! Waiting for the clock: past a wall-clock time, past a key's expiry.

use std::thread;
use std::time::Duration;

use redis::Connection;

use super::*;

/// Sleeps until the wall clock (the server's clock too) has passed `at_ms` (Unix ms).
pub fn sleep_until_wall_ms(at_ms: i64) {
    loop {
        let now = now_ms();
        if now > at_ms {
            return;
        }
        thread::sleep(Duration::from_millis((at_ms + 1 - now) as u64));
    }
}

/// Reads the absolute expiry of `key` (which must have one) and sleeps until the server's clock
/// has passed it, so that the key is expired, without touching the key meanwhile (active expiry
/// may or may not have removed it yet).
pub fn sleep_past_expiry(con: &mut Connection, key: &str) {
    let at = pexpiretime(con, key);
    assert!(at > 0, "{key} has no expiry (PEXPIRETIME {at})");
    // Redis expires a key once its clock is past the expiry millisecond.
    sleep_until_wall_ms(at + 1);
}
