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
pub struct NetnsProgram {
    pub netns: String,
    #[serde(flatten)]
    pub program: AttachedProgram,
}

/// Read the report over the namespaces `netns` (label, path) for the
/// target: `wanted(addr, port)` says whether an address and port are it.
pub fn read(wanted: &dyn Fn(IpAddr, u16) -> bool, netns: &[(String, PathBuf)]) -> NothingSeen {
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
        out.push_str(&format!("\n  traced namespaces: {}", self.netns.join(", ")));
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
}
