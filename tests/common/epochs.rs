//! Fence epochs: reading a fence's epoch, and promoting a server so its epoch is higher.

use redis::Value;

use super::*;

/// Where the epoch starts in a fence (`fence >> EPOCH_SHIFT` is the epoch).
pub const EPOCH_SHIFT: u32 = 51;

/// The epoch of a fence.
pub fn epoch_of(fence: i64) -> i64 {
    fence >> EPOCH_SHIFT
}

/// Promotes `server` `times` times (`REPLICAOF` a port nobody listens on, then
/// `REPLICAOF NO ONE`), so that its fences come from a higher epoch than a fresh server's. Do it
/// before writing: the data stays, but nothing is meant to replicate.
pub fn promote_times(server: &Server, times: usize) {
    let mut con = server.conn();
    for _ in 0..times {
        let nobody = free_port();
        assert_eq!(
            ok(&mut con, &rcmd!("REPLICAOF", "127.0.0.1", nobody)),
            Value::Okay
        );
        assert_eq!(ok(&mut con, &rcmd!("REPLICAOF", "NO", "ONE")), Value::Okay);
    }
    server.wait_info("replication", "role", "master");
}
