//! The sockets of a namespace, from its /proc/net/{tcp,udp}{,6} (what
//! `ss -lnu` lists): which local addresses and ports are bound, their
//! receive queues and, for UDP, how many datagrams each dropped. Read
//! where a followed packet found no socket or a full one.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::Path,
};

use serde::{Deserialize, Serialize};

/// One bound socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bound {
    /// `tcp` or `udp`.
    pub proto: String,
    pub addr: IpAddr,
    pub port: u16,
    /// TCP: listening (state 0A); UDP: always true (unconnected or not).
    pub listening: bool,
    /// Bytes waiting in the receive queue.
    pub rx_queue: u64,
    /// UDP: datagrams dropped (receive buffer full, bad checksum...).
    pub drops: u64,
    /// TCP listeners: the accept queue's limit (listen()'s backlog, the
    /// tx_queue column of a LISTEN socket); `rx_queue` is then how many
    /// connections wait in it to be accepted.
    #[serde(default)]
    pub max_backlog: u64,
    /// The socket's cgroup v2 id (sock_diag's INET_DIAG_CGROUP_ID), when
    /// read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<u64>,
}

impl Bound {
    /// Is this the socket of `proto` a packet to `addr:port` reaches
    /// (bound to that address, or to any)?
    pub fn takes(&self, proto: &str, addr: IpAddr, port: u16) -> bool {
        self.proto == proto
            && self.port == port
            && (self.addr == addr || self.addr.is_unspecified())
    }

    /// A TCP listener whose accept queue is full: tcp_conn_request()
    /// drops new SYNs (sk_acceptq_is_full(): more waiting than the
    /// backlog).
    pub fn accept_queue_full(&self) -> bool {
        self.proto == "tcp" && self.listening && self.rx_queue > self.max_backlog
    }
}

/// The namespace's listen-queue counters (/proc/net/netstat, TcpExt):
/// SYNs and handshakes a listener dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenStats {
    /// ListenOverflows: the accept queue was full.
    pub overflows: u64,
    /// ListenDrops: every drop of a SYN or handshake by a listener.
    pub drops: u64,
}

/// The TcpExt listen counters of the namespace at `path` (entered on this
/// thread).
pub fn listen_stats_in(path: &Path) -> Option<ListenStats> {
    let _g = crate::node::netns::NetnsGuard::enter(path).ok()?;
    parse_netstat(&std::fs::read_to_string("/proc/thread-self/net/netstat").ok()?)
}

/// /proc/net/netstat: pairs of lines, `TcpExt: NAME...` then `TcpExt:
/// VALUE...`.
pub fn parse_netstat(text: &str) -> Option<ListenStats> {
    let mut rows = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (rows.next()?, rows.next()?);
    let get = |key: &str| {
        names
            .split_whitespace()
            .position(|n| n == key)
            .and_then(|i| values.split_whitespace().nth(i)?.parse().ok())
    };
    Some(ListenStats {
        overflows: get("ListenOverflows")?,
        drops: get("ListenDrops")?,
    })
}

/// TCP listeners and UDP sockets of the namespace at `path` (entered on
/// this thread), with what sock_diag adds where it answers
/// ([`with_diag`]). Empty when unreadable.
pub fn bound_in(path: &Path) -> Vec<Bound> {
    let mut bound = tables_in(path, parse);
    if let Some(diag) = crate::node::sock_diag::sockets_in(Some(path)) {
        with_diag(&mut bound, &diag);
    }
    bound
}

/// What /proc/net does not show, from sock_diag: a listener's backlog
/// (/proc/net/tcp's tx_queue column is write_seq - snd_una for every
/// socket, 0 for a listener: get_tcp4_sock(), net/ipv4/tcp_ipv4.c) and
/// each socket's cgroup.
pub fn with_diag(bound: &mut [Bound], diag: &[crate::node::sock_diag::DiagSocket]) {
    for b in bound {
        let d = diag
            .iter()
            .find(|d| d.proto == b.proto && d.addr == b.addr && d.port == b.port && d.listening);
        if let Some(d) = d {
            if b.proto == "tcp" {
                b.max_backlog = u64::from(d.max_backlog);
                b.rx_queue = u64::from(d.rx_queue);
            }
            b.cgroup = d.cgroup;
        }
    }
}

/// Each of the namespace's /proc/net/{tcp,tcp6,udp,udp6} tables (entered
/// on this thread) parsed by `parse(text, proto)`, the results together.
fn tables_in<T>(path: &Path, parse: fn(&str, &str) -> Vec<T>) -> Vec<T> {
    let Ok(_g) = crate::node::netns::NetnsGuard::enter(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (file, proto) in [
        ("tcp", "tcp"),
        ("tcp6", "tcp"),
        ("udp", "udp"),
        ("udp6", "udp"),
    ] {
        // /proc/thread-self/net follows the thread's namespace.
        if let Ok(text) = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")) {
            out.extend(parse(&text, proto));
        }
    }
    out
}

/// Parse a /proc/net/{tcp,udp}{,6} table, keeping TCP listeners and
/// every UDP socket.
pub fn parse(text: &str, proto: &str) -> Vec<Bound> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
            let (local, state, queues) = (f.get(1)?, f.get(3)?, f.get(4)?);
            let listening = proto == "udp" || *state == "0A";
            if !listening {
                return None;
            }
            let (addr, port) = local.split_once(':')?;
            let (tx, rx) = queues.split_once(':')?;
            Some(Bound {
                proto: proto.to_string(),
                addr: hex_addr(addr)?,
                port: u16::from_str_radix(port, 16).ok()?,
                listening,
                rx_queue: u64::from_str_radix(rx, 16).ok()?,
                // udp: ... ref pointer drops (the last column).
                drops: if proto == "udp" {
                    f.last().and_then(|d| d.parse().ok()).unwrap_or(0)
                } else {
                    0
                },
                max_backlog: if proto == "tcp" {
                    u64::from_str_radix(tx, 16).ok()?
                } else {
                    0
                },
                cgroup: None,
            })
        })
        .collect()
}

/// A socket with a peer (TCP past LISTEN, a connected UDP socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connected {
    /// `tcp` or `udp`.
    pub proto: String,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// The TCP state's name (include/net/tcp_states.h), `connected` for UDP.
    pub state: String,
}

/// The sockets with a peer of the namespace at `path` (entered on this
/// thread). Empty when unreadable.
pub fn connected_in(path: &Path) -> Vec<Connected> {
    tables_in(path, parse_connected)
}

/// The sockets of a /proc/net table whose remote address is set.
pub fn parse_connected(text: &str, proto: &str) -> Vec<Connected> {
    const TCP_STATES: [&str; 13] = [
        "?",
        "ESTABLISHED",
        "SYN_SENT",
        "SYN_RECV",
        "FIN_WAIT1",
        "FIN_WAIT2",
        "TIME_WAIT",
        "CLOSE",
        "CLOSE_WAIT",
        "LAST_ACK",
        "LISTEN",
        "CLOSING",
        "NEW_SYN_RECV",
    ];
    let endpoint = |s: &str| -> Option<SocketAddr> {
        let (a, p) = s.split_once(':')?;
        Some(SocketAddr::new(
            hex_addr(a)?,
            u16::from_str_radix(p, 16).ok()?,
        ))
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, peer) = (endpoint(f.get(1)?)?, endpoint(f.get(2)?)?);
            if peer.port() == 0 {
                return None;
            }
            let st = usize::from_str_radix(f.get(3)?, 16).ok()?;
            Some(Connected {
                proto: proto.to_string(),
                local,
                peer,
                state: if proto == "udp" {
                    "connected".into()
                } else {
                    TCP_STATES.get(st).copied().unwrap_or("?").into()
                },
            })
        })
        .collect()
}

/// The kernel prints addresses as host-order 32-bit words in hex.
fn hex_addr(s: &str) -> Option<IpAddr> {
    let words: Vec<u32> = (0..s.len() / 8)
        .map(|i| u32::from_str_radix(s.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?))),
        16 => Some(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(bytes).ok()?,
        ))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sockets_with_a_peer() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1234 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:9C40 0A00600A:0035 02 00000000:00000000 00:00000000 00000000     0        0 1235 1 0000000000000000 20 4 30 10 -1\n";
        let c = parse_connected(tcp, "tcp");
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].peer, "10.96.0.10:53".parse().unwrap());
        assert_eq!(c[0].state, "SYN_SENT");
    }

    #[test]
    fn parses_listeners_and_udp_drops() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1234 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:9C40 0100007F:0035 01 00000000:00000000 00:00000000 00000000     0        0 1235 1 0000000000000000 20 4 30 10 -1\n";
        let t = parse(tcp, "tcp");
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].addr, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(t[0].port, 53);
        let udp = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
  123: 0A19FEA9:0035 00000000:0000 07 00000000:00000340 00:00000000 00000000     0        0 999 2 0000000000000000 17\n";
        let u = parse(udp, "udp");
        assert_eq!(u[0].addr, IpAddr::from([169, 254, 25, 10]));
        assert_eq!((u[0].port, u[0].rx_queue, u[0].drops), (53, 0x340, 17));
        let udp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
   1: 00000000000000000000000001000000:0035 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 5 2 0000000000000000 0\n";
        assert_eq!(parse(udp6, "udp")[0].addr, "::1".parse::<IpAddr>().unwrap());
        // A listener with a backlog of 0 holding one connection: full.
        let full = "  sl  local_address rem_address   st tx_queue rx_queue\n\
   0: 0202EE0A:1F90 00000000:0000 0A 00000000:00000001 00:00000000 00000000     0        0 77 1\n";
        let l = &parse(full, "tcp")[0];
        assert_eq!((l.rx_queue, l.max_backlog), (1, 0));
        assert!(l.accept_queue_full());
        assert!(!t[0].accept_queue_full());
        // Garbage lines are skipped, never a panic.
        assert!(parse("header\n  0: zz:yy 0 0\n", "udp").is_empty());
    }

    #[test]
    fn reads_the_listen_counters() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPBacklogDrop\n\
TcpExt: 0 3 4 0\n\
IpExt: InNoRoutes\nIpExt: 0\n";
        assert_eq!(
            parse_netstat(text),
            Some(ListenStats {
                overflows: 3,
                drops: 4
            })
        );
        assert_eq!(parse_netstat("IpExt: X\nIpExt: 1\n"), None);
    }
}
