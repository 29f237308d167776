//! What the node knows of a target no packet was seen for, so that `0
//! flows` is an answer and not a silence: the kube-proxy Services on it,
//! the sockets connected to it, the cgroup programs that rewrite a
//! socket's destination before any packet exists (a ClusterIP that
//! Cilium's or Calico's socket load balancing translates never reaches a
//! device), the XDP programs that see packets before the stack, and the
//! namespaces that were traced. Read once, at the end of a run that
//! followed nothing.

use std::{net::IpAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    bpf_progs::{self, AttachedProgram},
    nud::Nud,
    services::ServiceKind,
};

/// The report (the summary's `nothing_seen`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NothingSeen {
    /// kube-proxy Services served on the target, per namespace.
    pub services: Vec<ServiceOnTarget>,
    /// Sockets whose peer is the target: an application did connect or
    /// send to it.
    pub sockets: Vec<SocketToTarget>,
    /// Programs attached to the node's cgroups that can rewrite a socket's
    /// destination (connect, sendmsg, recvmsg) or drop its packets.
    pub cgroup_programs: Vec<AttachedProgram>,
    /// The cgroup walk stopped before the end (too many cgroups).
    #[serde(default)]
    pub cgroups_truncated: bool,
    /// XDP programs on the traced namespaces' devices.
    pub xdp_programs: Vec<NetnsProgram>,
    /// What ARP/NDP knows of the next hop to the target (the target, or
    /// the gateway of the route to it) in each traced namespace that
    /// routes it out of a device: a packet waits there for its neighbour
    /// before any traced device sends it.
    #[serde(default)]
    pub neighbours: Vec<NextHopNeighbour>,
    /// The namespaces that were traced.
    pub netns: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServiceOnTarget {
    /// `namespace/name:port`.
    pub service: String,
    pub kind: ServiceKind,
    pub netns: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SocketToTarget {
    pub netns: String,
    /// `tcp` or `udp`.
    pub proto: String,
    pub local: String,
    pub peer: String,
    /// The TCP state (`ESTABLISHED`, `SYN_SENT` ...); `connected` for UDP.
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NextHopNeighbour {
    pub netns: String,
    /// The target, or the gateway the route to it names.
    pub next_hop: IpAddr,
    pub dev: String,
    /// Its NUD state, by name (`REACHABLE`, `INCOMPLETE`, `FAILED`).
    pub state: Nud,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl NextHopNeighbour {
    /// Asked and not answered: INCOMPLETE (resolving) or FAILED (given
    /// up; neigh_invalidate() drops what waited, NEIGH_FAILED).
    pub fn unanswered(&self) -> bool {
        self.state.contains(Nud::INCOMPLETE) || self.state.contains(Nud::FAILED)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetnsProgram {
    pub netns: String,
    #[serde(flatten)]
    pub program: AttachedProgram,
}

/// Read the report over the namespaces `netns` (label, path) for the
/// target: `wanted(addr, port)` says whether an address and port are it;
/// `addr`, the target's address when it is one (not a prefix), whose
/// next hop's neighbour entries are read.
pub fn read(
    wanted: &dyn Fn(IpAddr, u16) -> bool,
    addr: Option<IpAddr>,
    netns: &[(String, PathBuf)],
) -> NothingSeen {
    let mut r = NothingSeen {
        netns: netns.iter().map(|(l, _)| l.clone()).collect(),
        ..NothingSeen::default()
    };
    for (label, path) in netns {
        for s in super::services::services_in(path) {
            let hit = match s.addr {
                Some(a) => wanted(a, s.port),
                None => false,
            };
            if hit {
                r.services.push(ServiceOnTarget {
                    service: s.service.clone(),
                    kind: s.kind,
                    netns: label.clone(),
                });
            }
        }
        r.sockets.extend(
            super::sockets::connected_in(path)
                .into_iter()
                .filter(|c| wanted(c.peer.ip(), c.peer.port()))
                .map(|c| SocketToTarget {
                    netns: label.clone(),
                    proto: c.proto,
                    local: c.local.to_string(),
                    peer: c.peer.to_string(),
                    state: c.state,
                }),
        );
        if let Some(a) = addr {
            r.neighbours.extend(next_hop_neighbours(label, path, a));
        }
        r.xdp_programs.extend(
            bpf_progs::xdp_programs_in(path)
                .into_iter()
                .map(|p| NetnsProgram {
                    netns: label.clone(),
                    program: p,
                }),
        );
    }
    if let Some(root) = bpf_progs::cgroup2_root() {
        (r.cgroup_programs, r.cgroups_truncated) = bpf_progs::cgroup_programs(&root);
    }
    r
}

/// The neighbour entries of the next hop to `addr` in the namespace at
/// `path` (`ip route get ADDR`, then `ip neigh show to HOP dev DEV`):
/// none where the namespace holds the address or has no route for it.
fn next_hop_neighbours(label: &str, path: &std::path::Path, addr: IpAddr) -> Vec<NextHopNeighbour> {
    let q = super::route::RouteQuery {
        dst: addr,
        src: if addr.is_ipv4() {
            IpAddr::from([0u8; 4])
        } else {
            IpAddr::from([0u8; 16])
        },
        iif: None,
    };
    let super::route::RouteOutcome::Via { dev, gw, .. } = super::route::lookup_in(path, &q).outcome
    else {
        return Vec::new();
    };
    let hop = gw.unwrap_or(addr);
    super::link::neighbours_of(path, hop)
        .into_iter()
        .filter(|(d, _)| *d == dev)
        .map(|(dev, e)| NextHopNeighbour {
            netns: label.to_string(),
            next_hop: hop,
            dev,
            state: Nud(e.state as u8),
            mac: e.mac,
        })
        .collect()
}

impl NothingSeen {
    /// The lines text output shows after a run that followed nothing.
    pub fn text(&self, target: &str, owners: &[String]) -> String {
        let mut out = format!(
            "nothing seen: no packet to {target} passed a traced hook. What this node knows of it:"
        );
        out.push_str(&format!(
            "\n  held by: {}",
            if owners.is_empty() {
                "no traced namespace has the address".to_string()
            } else {
                owners.join(", ")
            }
        ));
        let services: Vec<String> = self
            .services
            .iter()
            .map(|s| {
                format!(
                    "{} ({}) in netns {}",
                    s.service,
                    <&str>::from(s.kind),
                    s.netns
                )
            })
            .collect();
        out.push_str(&format!(
            "\n  kube-proxy Services on it: {}",
            or_none(&services)
        ));
        let sockets: Vec<String> = self
            .sockets
            .iter()
            .map(|s| {
                format!(
                    "{} {} -> {} {} in netns {}",
                    s.proto, s.local, s.peer, s.state, s.netns
                )
            })
            .collect();
        out.push_str(&format!(
            "\n  sockets connected to it: {}",
            or_none(&sockets)
        ));
        let rewriting: Vec<String> = self
            .cgroup_programs
            .iter()
            .map(|p| format!("{} (id {}, {}) on cgroup {}", p.name, p.id, p.hook, p.at))
            .collect();
        out.push_str(&format!(
            "\n  cgroup BPF programs (socket-level load balancing rewrites a connect()/sendmsg() to a Service before any packet exists): {}{}",
            or_none(&rewriting),
            if self.cgroups_truncated {
                " (not every cgroup was read)"
            } else {
                ""
            }
        ));
        let xdp: Vec<String> = self
            .xdp_programs
            .iter()
            .map(|p| {
                format!(
                    "{} (id {}) on {} in netns {}",
                    p.program.name, p.program.id, p.program.at, p.netns
                )
            })
            .collect();
        out.push_str(&format!("\n  XDP programs: {}", or_none(&xdp)));
        let neighbours: Vec<String> = self
            .neighbours
            .iter()
            .map(|n| {
                format!(
                    "{} on {} in netns {}: {}{}",
                    n.next_hop,
                    n.dev,
                    n.netns,
                    n.state,
                    n.mac
                        .as_ref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        out.push_str(&format!(
            "\n  neighbour (ARP/NDP) of the next hop to it: {}",
            or_none(&neighbours)
        ));
        out.push_str(&format!("\n  traced namespaces: {}", self.netns.join(", ")));
        if let Some(n) = self.neighbours.iter().find(|n| n.unanswered()) {
            out.push_str(&format!(
                "\n  hint: nothing answered ARP/NDP for {} on {} in netns {} ({}): packets to it wait for the neighbour there and are dropped (NEIGH_FAILED) before a traced device sends them; look at the link and at what receives on its far side: the address missing there, a firewall on ARP, or a program that drops what is not IP{}",
                n.next_hop,
                n.dev,
                n.netns,
                n.state,
                if self.xdp_programs.is_empty() {
                    ""
                } else {
                    " (the XDP programs listed see ARP before the stack does)"
                }
            ));
        }
        if self.cgroup_programs.iter().any(|p| is_sock_addr(&p.hook)) {
            out.push_str(
                "\n  hint: a cgroup program rewrites sockets' destinations on this node: packets to a Service go out with the backend's address; follow the backend (its address and port), or the client pod's traffic",
            );
        }
        out
    }
}

/// A hook of the cgroup sock_addr programs, which rewrite addresses.
fn is_sock_addr(hook: &str) -> bool {
    ["connect", "sendmsg", "recvmsg", "getpeername"]
        .iter()
        .any(|h| hook.starts_with(h))
}

fn or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_could_hide_the_target() {
        let r = NothingSeen {
            cgroup_programs: vec![AttachedProgram {
                id: 7,
                name: "cil_sock4_connect".into(),
                hook: "connect4".into(),
                at: "/kubepods".into(),
            }],
            netns: vec!["all".into()],
            ..NothingSeen::default()
        };
        let t = r.text("10.96.0.10:53", &[]);
        assert!(
            t.contains("cil_sock4_connect (id 7, connect4) on cgroup /kubepods"),
            "{t}"
        );
        assert!(t.contains("follow the backend"), "{t}");
        assert!(t.contains("no traced namespace has the address"), "{t}");
        let quiet = NothingSeen::default()
            .text("10.96.0.10:53", &["10.96.0.10 on lo in netns host".into()]);
        assert!(!quiet.contains("hint:"), "{quiet}");
        assert!(quiet.contains("XDP programs: none"), "{quiet}");
    }

    /// The next hop's neighbour entry: an unanswered one (INCOMPLETE or
    /// FAILED) gets the hint, naming XDP only where a program is listed;
    /// a REACHABLE one is only listed.
    #[test]
    fn an_unanswered_neighbour_is_named_with_its_hint() {
        let hop = |state: Nud| NextHopNeighbour {
            netns: "client".into(),
            next_hop: "10.204.0.1".parse().unwrap(),
            dev: "eth0".into(),
            state,
            mac: None,
        };
        let xdp = NetnsProgram {
            netns: "server".into(),
            program: AttachedProgram {
                id: 9,
                name: "xdpfilt_dny_all".into(),
                hook: "xdp".into(),
                at: "eth0 (driver)".into(),
            },
        };
        let r = NothingSeen {
            neighbours: vec![hop(Nud::INCOMPLETE)],
            xdp_programs: vec![xdp],
            ..NothingSeen::default()
        };
        let t = r.text("10.204.0.1:80", &[]);
        assert!(
            t.contains(
                "neighbour (ARP/NDP) of the next hop to it: 10.204.0.1 on eth0 in netns client: INCOMPLETE"
            ),
            "{t}"
        );
        assert!(
            t.contains("hint: nothing answered ARP/NDP for 10.204.0.1 on eth0 in netns client")
                && t.contains("the XDP programs listed see ARP"),
            "{t}"
        );
        let failed = NothingSeen {
            neighbours: vec![hop(Nud::FAILED)],
            ..NothingSeen::default()
        };
        let t = failed.text("10.204.0.1:80", &[]);
        assert!(
            t.contains("NEIGH_FAILED") && !t.contains("XDP programs listed"),
            "{t}"
        );
        let fine = NothingSeen {
            neighbours: vec![NextHopNeighbour {
                mac: Some("02:00:00:00:00:01".into()),
                ..hop(Nud::REACHABLE)
            }],
            ..NothingSeen::default()
        };
        let t = fine.text("10.204.0.1:80", &[]);
        assert!(
            t.contains("REACHABLE (02:00:00:00:00:01)") && !t.contains("hint:"),
            "{t}"
        );
    }
}
