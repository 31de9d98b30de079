//! Redis Cluster slots: which slot a key hashes to, and what `CLUSTER NODES`
//! says this node does with it. Used so that a lock freed by expiry or
//! deletion is handed to a waiter only by the node that serves its slot.

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The slot of `key`, honouring `{hash tags}` as Redis does.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % SLOTS
}

/// CRC16-CCITT (XModem), the checksum Redis Cluster uses.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= (b as u16) << 8;
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

/// What this node does with a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Served here, not being moved.
    Owned,
    /// Served here but being migrated to another node.
    Migrating,
    /// Being imported here from the node that serves it.
    Importing,
    /// Served elsewhere, or by no node.
    NotOwned,
}

/// Reads this node's (`myself`) line of `CLUSTER NODES` for `slot`.
pub fn slot_state(cluster_nodes: &str, slot: u16) -> SlotState {
    let Some(line) = cluster_nodes.lines().find(|l| {
        l.split(' ')
            .nth(2)
            .is_some_and(|flags| flags.split(',').any(|f| f == "myself"))
    }) else {
        return SlotState::NotOwned;
    };
    let mut owned = false;
    for field in line.split(' ').skip(8) {
        if let Some(inner) = field.strip_prefix('[').and_then(|f| f.strip_suffix(']')) {
            // `[slot->-node]` migrating away, `[slot-<-node]` importing.
            if let Some((s, _)) = inner.split_once("->-") {
                if s.parse() == Ok(slot) {
                    return SlotState::Migrating;
                }
            }
            if let Some((s, _)) = inner.split_once("-<-") {
                if s.parse() == Ok(slot) {
                    return SlotState::Importing;
                }
            }
            continue;
        }
        let (from, to) = field.split_once('-').unwrap_or((field, field));
        if let (Ok(from), Ok(to)) = (from.parse::<u16>(), to.parse::<u16>()) {
            owned |= (from..=to).contains(&slot);
        }
    }
    if owned {
        SlotState::Owned
    } else {
        SlotState::NotOwned
    }
}

/// This node's config epoch and the cluster's current epoch, from the text
/// of `CLUSTER INFO` (`cluster_my_epoch`, `cluster_current_epoch`).
pub fn cluster_epochs(cluster_info: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        cluster_info.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(':')
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
    };
    Some((field("cluster_my_epoch")?, field("cluster_current_epoch")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_epochs_of_cluster_info() {
        let info = "cluster_state:ok\r\ncluster_current_epoch:9\r\ncluster_my_epoch:7\r\n";
        assert_eq!(cluster_epochs(info), Some((7, 9)));
        assert_eq!(cluster_epochs("cluster_state:ok\r\n"), None);
        assert_eq!(
            cluster_epochs("cluster_my_epoch:x\ncluster_current_epoch:1"),
            None
        );
    }

    #[test]
    fn slots_match_redis() {
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // An empty tag hashes the whole key.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b""));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    const NODES: &str = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 7000 [5461->-67ed] [9000-<-292f]
67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922
";

    #[test]
    fn reads_the_own_line() {
        assert_eq!(slot_state(NODES, 0), SlotState::Owned);
        assert_eq!(slot_state(NODES, 5460), SlotState::Owned);
        assert_eq!(slot_state(NODES, 7000), SlotState::Owned);
        assert_eq!(slot_state(NODES, 5461), SlotState::Migrating);
        assert_eq!(slot_state(NODES, 9000), SlotState::Importing);
        assert_eq!(slot_state(NODES, 9001), SlotState::NotOwned);
        assert_eq!(slot_state(NODES, 12000), SlotState::NotOwned);
        assert_eq!(slot_state("", 1), SlotState::NotOwned);
    }
}
