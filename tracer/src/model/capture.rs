//! Followed packets' first bytes as captured at a hop (kind BYTES
//! records), with the flow they joined: what `--pcap` writes.

/// One captured packet: where and when its bytes were copied, and which
/// flow it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The flow the packet joined; `None` when it joined none.
    pub flow: Option<u64>,
    /// The hook that copied the bytes (`tc_ingress`, `xmit`, ...).
    pub hook: &'static str,
    /// The packet matched as a reply.
    pub reply: bool,
    /// Network namespace inode, and its name as the run names it.
    pub netns: u32,
    pub netns_name: String,
    /// The device (`""` when the hook has none).
    pub dev: String,
    /// Wall clock, ns since the epoch.
    pub ts_unix_ns: u64,
    /// The packet's length on the wire from its IP header on (from the IP
    /// header's length field; `data`'s length when unreadable).
    pub len: u32,
    /// Its first bytes, from the IP header on.
    pub data: Vec<u8>,
}

/// The packet's length from its IP header
/// ([`crate::model::event::ip_total_len`]); at least the bytes captured.
pub fn ip_len(data: &[u8]) -> u32 {
    let told = crate::model::event::ip_total_len(data).unwrap_or(0);
    told.max(data.len()) as u32
}

#[cfg(test)]
mod tests {
    use super::ip_len;

    #[test]
    fn length_from_the_ip_header() {
        // IPv4, total length 0x0054 (84), 4 bytes captured.
        assert_eq!(ip_len(&[0x45, 0, 0, 0x54]), 84);
        // IPv6, payload length 8: 48.
        assert_eq!(ip_len(&[0x60, 0, 0, 0, 0, 8, 17, 64]), 48);
        // Unreadable: what was captured.
        assert_eq!(ip_len(&[0x45, 0]), 2);
        assert_eq!(ip_len(&[]), 0);
    }
}
