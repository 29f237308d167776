//! The kernel's IPVS table (/proc/net/ip_vs of a namespace), to cross-check
//! what the IPVS hooks saw: "virtual service 10.16.0.1:80 has 0 real
//! servers".

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
};

/// A real server of a virtual service.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RealServer {
    pub addr: IpAddr,
    pub port: u16,
    /// Masq, Route, Tunnel, Local.
    pub forward: String,
    pub weight: u32,
}

/// A virtual service: protocol, address and port (fwmark services are
/// skipped: they match on marks, not addresses).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VirtualService {
    /// 6 or 17 (132 for SCTP).
    pub proto: u8,
    pub addr: IpAddr,
    pub port: u16,
    pub scheduler: String,
    pub servers: Vec<RealServer>,
}

impl VirtualService {
    /// "TCP 10.16.0.1:80 (rr)".
    pub fn name(&self) -> String {
        let p = match self.proto {
            6 => "TCP",
            17 => "UDP",
            132 => "SCTP",
            _ => "?",
        };
        let ep = match self.addr {
            IpAddr::V6(a) => format!("[{a}]:{}", self.port),
            a @ IpAddr::V4(_) => format!("{a}:{}", self.port),
        };
        format!("{p} {ep}")
    }

    /// Real servers that can take new connections (weight > 0).
    pub fn usable(&self) -> usize {
        self.servers.iter().filter(|s| s.weight > 0).count()
    }
}

/// `0A100001:0050` (IPv4 hex, network order as printed) or
/// `[2001:0db8:...:0001]:0050`.
fn endpoint(s: &str) -> Option<(IpAddr, u16)> {
    let (a, p) = s.rsplit_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let addr = if let Some(v6) = a.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        IpAddr::V6(v6.parse::<Ipv6Addr>().ok()?)
    } else {
        IpAddr::V4(Ipv4Addr::from(u32::from_str_radix(a, 16).ok()?))
    };
    Some((addr, port))
}

/// Parse /proc/net/ip_vs (net/netfilter/ipvs/ip_vs_ctl.c,
/// ip_vs_info_seq_show()).
pub fn parse(text: &str) -> Vec<VirtualService> {
    let mut out: Vec<VirtualService> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["->", ep, fwd, weight, ..] => {
                if let (Some(vs), Some((addr, port))) = (out.last_mut(), endpoint(ep)) {
                    vs.servers.push(RealServer {
                        addr,
                        port,
                        forward: fwd.to_string(),
                        weight: weight.parse().unwrap_or(0),
                    });
                }
            }
            [proto @ ("TCP" | "UDP" | "SCTP"), ep, sched, ..] => {
                if let Some((addr, port)) = endpoint(ep) {
                    out.push(VirtualService {
                        proto: match *proto {
                            "TCP" => 6,
                            "UDP" => 17,
                            _ => 132,
                        },
                        addr,
                        port,
                        scheduler: sched.to_string(),
                        servers: vec![],
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// The IPVS table of the namespace at `netns_path` (empty without ip_vs).
/// /proc/net follows the reading thread's namespace (/proc/thread-self/net).
pub fn table_in(netns_path: &Path) -> Vec<VirtualService> {
    let Ok(_g) = crate::node::netns::NetnsGuard::enter(netns_path) else {
        return vec![];
    };
    std::fs::read_to_string("/proc/thread-self/net/ip_vs")
        .map(|t| parse(&t))
        .unwrap_or_default()
}

/// Whether an IPVS table (/proc/net/ip_vs) holds any virtual service,
/// fwmark ones included.
fn any_service(text: &str) -> bool {
    text.lines().any(|l| {
        matches!(
            l.split_whitespace().next(),
            Some("TCP" | "UDP" | "SCTP" | "FWM")
        )
    })
}

/// Whether any namespace of the node has an IPVS virtual service: tracer's
/// own, every named one (`ip netns add`, CNI's), and every one a process
/// holds (/proc/PID/net is that process's namespace: no setns). Without
/// ip_vs loaded there is no /proc/net/ip_vs anywhere and nothing is read.
/// The first service found ends the search (kube-proxy's are in the
/// host's namespace, read first).
pub fn services_anywhere() -> bool {
    let read = |p: &Path| std::fs::read_to_string(p).is_ok_and(|t| any_service(&t));
    if !Path::new("/proc/thread-self/net/ip_vs").exists() {
        return false;
    }
    if read(Path::new("/proc/thread-self/net/ip_vs")) {
        return true;
    }
    let in_named = |path: &Path| {
        crate::node::netns::NetnsGuard::enter(path)
            .is_ok_and(|_g| read(Path::new("/proc/thread-self/net/ip_vs")))
    };
    if crate::node::netns::named().iter().any(|(_, p)| in_named(p)) {
        return true;
    }
    let mut seen = std::collections::HashSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|e| {
        let pid = e.path();
        let fresh = std::fs::read_link(pid.join("ns/net")).is_ok_and(|ns| seen.insert(ns));
        fresh && read(&pid.join("net/ip_vs"))
    })
}

/// The virtual service a packet to `dst:dport` hits.
pub fn find(
    table: &[VirtualService],
    proto: u8,
    dst: IpAddr,
    dport: u16,
) -> Option<&VirtualService> {
    table
        .iter()
        .find(|v| v.proto == proto && v.addr == dst && (v.port == dport || v.port == 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A100001:0050 rr
TCP  0A600001:01BB rr
  -> 0A010102:1F90      Masq    1      0          0
  -> 0A010103:1F90      Masq    0      0          0
UDP  [2001:0db8:0000:0000:0000:0000:0000:0001]:0035 wrr
FWM  00000001 rr
";

    /// The header alone is no service; a fwmark one is (the IPVS hooks
    /// are needed for it too).
    #[test]
    fn a_table_with_a_service_is_told_from_an_empty_one() {
        assert!(any_service(TABLE));
        let header: String = TABLE.lines().take(3).collect::<Vec<_>>().join("\n");
        assert!(!any_service(&header));
        assert!(any_service(&format!("{header}\nFWM  00000001 rr\n")));
    }

    #[test]
    fn parses_services_and_real_servers() {
        let t = parse(TABLE);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].name(), "TCP 10.16.0.1:80");
        assert_eq!((t[0].scheduler.as_str(), t[0].servers.len()), ("rr", 0));
        assert_eq!(t[1].servers.len(), 2);
        assert_eq!(t[1].servers[0].addr.to_string(), "10.1.1.2");
        assert_eq!(t[1].servers[0].port, 8080);
        assert_eq!(t[1].name(), "TCP 10.96.0.1:443");
        assert_eq!(t[1].usable(), 1);
        assert_eq!(t[2].name(), "UDP [2001:db8::1]:53");
        let d: IpAddr = "10.16.0.1".parse().unwrap();
        assert!(find(&t, 6, d, 80).is_some());
        assert!(find(&t, 17, d, 80).is_none());
    }
}
