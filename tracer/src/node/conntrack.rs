//! The conntrack table of a namespace: how many entries it holds and may
//! hold (net.netfilter.nf_conntrack_count, per namespace, and
//! nf_conntrack_max, one value for the node: writable in the initial
//! namespace only, read-only elsewhere), and its statistics
//! (/proc/net/stat/nf_conntrack: one hex row per CPU, summed). Read where
//! a followed packet was dropped by netfilter.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The table's size and counters, as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackTable {
    /// Entries in this namespace's table.
    pub count: u64,
    /// The limit a new entry is checked against (0: none).
    pub max: u64,
    /// Packets dropped because no entry could be made (table full after
    /// an early drop found nothing to evict, or out of memory).
    pub drop: u64,
    /// Unassured entries evicted to make room.
    pub early_drop: u64,
    /// New entries that could not be inserted (a clash lost).
    pub insert_failed: u64,
    /// Packets conntrack found invalid.
    pub invalid: u64,
    /// net.netfilter.nf_conntrack_tcp_be_liberal: out-of-window segments
    /// are not marked INVALID (None: not read; absent in recordings made
    /// before it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_be_liberal: Option<bool>,
}

impl ConntrackTable {
    /// Whether the table is at its limit, or conntrack has dropped
    /// packets for want of an entry: `drop` also counts the packets whose
    /// entry lost an insertion clash (nf_ct_resolve_clash() counts both
    /// `drop` and `insert_failed`), which are not for want of room.
    pub fn full(&self) -> bool {
        self.max > 0 && self.count >= self.max || self.drop > self.insert_failed
    }

    /// Whether conntrack failed to insert new entries (a clash lost) and
    /// the table is not full.
    pub fn clashed(&self) -> bool {
        self.insert_failed > 0 && !self.full()
    }
}

/// The conntrack table of the namespace at `path` (entered on this
/// thread); None without conntrack there (module not loaded).
pub fn conntrack_in(path: &Path) -> Option<ConntrackTable> {
    let _g = crate::node::netns::NetnsGuard::enter(path).ok()?;
    // /proc/sys/net follows the reading thread's namespace, as does
    // /proc/thread-self/net.
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/netfilter/{name}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let mut t = ConntrackTable {
        count: read("nf_conntrack_count")?,
        max: read("nf_conntrack_max").unwrap_or(0),
        tcp_be_liberal: read("nf_conntrack_tcp_be_liberal").map(|v| v != 0),
        ..ConntrackTable::default()
    };
    if let Ok(text) = std::fs::read_to_string("/proc/thread-self/net/stat/nf_conntrack") {
        parse_stat(&text, &mut t);
    }
    Some(t)
}

/// Sum the per-CPU rows of /proc/net/stat/nf_conntrack into `t`: a header
/// of column names, then one row of hex numbers per CPU.
pub fn parse_stat(text: &str, t: &mut ConntrackTable) {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return;
    };
    let cols: Vec<&str> = header.split_whitespace().collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let wanted = [
        (col("drop"), 0),
        (col("early_drop"), 1),
        (col("insert_failed"), 2),
        (col("invalid"), 3),
    ];
    let mut sums = [0u64; 4];
    for row in lines {
        let v: Vec<u64> = row
            .split_whitespace()
            .map_while(|x| u64::from_str_radix(x, 16).ok())
            .collect();
        for (c, i) in wanted {
            if let Some(x) = c.and_then(|c| v.get(c)) {
                sums[i] = sums[i].saturating_add(*x);
            }
        }
    }
    [t.drop, t.early_drop, t.insert_failed, t.invalid] = sums;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_cpu_rows() {
        let text = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n\
00000003  00000000 00000000 00000000 00000002 00000000 00000000 00000000 00000000 00000001 0000000a 00000000 00000000  00000000 00000000 00000000 00000000\n\
00000003  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000006 00000004 00000000  00000000 00000000 00000000 00000000\n";
        let mut t = ConntrackTable {
            count: 3,
            max: 3,
            ..ConntrackTable::default()
        };
        parse_stat(text, &mut t);
        assert_eq!(
            (t.drop, t.early_drop, t.insert_failed, t.invalid),
            (16, 4, 1, 2)
        );
        assert!(t.full());
        let quiet = ConntrackTable {
            count: 3,
            max: 262_144,
            ..ConntrackTable::default()
        };
        assert!(!quiet.full() && !quiet.clashed());
        // Drops that are all lost clashes: not a full table.
        let clash = ConntrackTable {
            count: 1,
            max: 262_144,
            drop: 1,
            insert_failed: 1,
            ..ConntrackTable::default()
        };
        assert!(!clash.full() && clash.clashed());
        // A short or garbled row adds nothing, never panics.
        parse_stat("entries drop\nzz\n", &mut t);
        assert_eq!(t.drop, 0);
    }
}
