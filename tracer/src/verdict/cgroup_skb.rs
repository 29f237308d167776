//! A cause: a cgroup BPF program of the sending or receiving socket's
//! cgroup refused the packet (systemd's IPAddressDeny=/IPAddressAllow=,
//! which attaches `sd_fw_egress`/`sd_fw_ingress` to the unit's cgroup; a
//! dataplane's or a security agent's cgroup_skb program), or a socket
//! filter of the receiving socket did.
//!
//! - **Signals**: BPF_CGROUP_EGRESS (ip_finish_output(),
//!   ip6_finish_output(): BPF_CGROUP_RUN_PROG_INET_EGRESS refused),
//!   SOCKET_FILTER (sk_filter_trim_cap(), net/core/filter.c: the
//!   cgroup's ingress programs, BPF_CGROUP_RUN_PROG_INET_INGRESS, then
//!   the socket's own filter, SO_ATTACH_FILTER/SO_ATTACH_BPF; called from
//!   tcp_v4_rcv(), the UDP receive path and others).
//! - **Facts**: the socket the packet was for or from, in the drop's
//!   namespace (`Env::bound`: its cgroup id, by sock_diag), and the node's
//!   cgroup_skb programs with that cgroup's path (`Env::cgroup_skb`, one
//!   walk of the cgroup2 hierarchy, BPF_PROG_QUERY).
//! - **Evidence**: [`Evidence::CgroupProgramDrop`] holding a
//!   [`CgroupSkbDrop`].
//! - **Where**: `tcp_v4_rcv in netns server: refused by cgroup_skb
//!   ingress program sd_fw_ingress (id 9) on /system.slice/webui.service,
//!   the cgroup of the listener 10.1.2.2:8471`.
//! - **Rules**: `rules::device_cause` asks [`judge`].
//! - **Hint**: [`HINTS`]: the cgroup program; the socket's own filter.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, Kind, hints::Hint};
use crate::{
    model::{drop_reason::DropReason, hop::Hop},
    node::{
        bpf_progs::{AttachedProgram, under},
        sockets::Bound,
    },
};

/// A packet a cgroup program or socket filter refused, as the node shows
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CgroupSkbDrop {
    /// `cgroup_skb egress` or `cgroup_skb ingress`.
    pub hook: String,
    pub netns: String,
    /// The socket concerned (`udp 10.1.1.2:5000`), when still open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// Its cgroup, below the cgroup2 mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The programs of that hook that run for the socket (attached to its
    /// cgroup or above), or, when its cgroup is not known, every one of
    /// that hook on the node.
    pub programs: Vec<AttachedProgram>,
}

impl CgroupSkbDrop {
    /// Did the programs come from the socket's cgroup?
    fn of_socket(&self) -> bool {
        self.cgroup.is_some()
    }

    /// What refused it, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        let whose = match (&self.socket, &self.cgroup) {
            (Some(s), Some(c)) => format!(", which runs for the socket {s} (cgroup {c})"),
            (Some(s), None) => format!(" (the socket {s}; its cgroup was not read)"),
            _ => String::new(),
        };
        let ingress = self.hook.ends_with("ingress");
        match self.programs.as_slice() {
            [] if ingress => format!(
                "refused by the receiving socket's own filter: no cgroup_skb ingress program runs for it{}, so a filter the application attached to the socket (SO_ATTACH_FILTER or SO_ATTACH_BPF) dropped it",
                self.socket
                    .as_ref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            ),
            [] => "refused by a cgroup_skb egress program, but none is attached on the node now: it was detached since".to_string(),
            [p] if self.of_socket() => {
                format!("refused by {} program {}{whose}", self.hook, program(p))
            }
            many if self.of_socket() => format!(
                "refused by one of the {} {} programs that run for the socket {} (cgroup {}): {}",
                many.len(),
                self.hook,
                self.socket.as_deref().unwrap_or("?"),
                self.cgroup.as_deref().unwrap_or("?"),
                many.iter().map(program).collect::<Vec<_>>().join(", ")
            ),
            [p] => format!(
                "refused by a {} program: the one on the node is {}{whose}",
                self.hook,
                program(p)
            ),
            many => format!(
                "refused by a {} program{whose}; those on the node: {}",
                self.hook,
                many.iter().map(program).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// `sd_fw_egress (id 7) on /system.slice/x.service`.
fn program(p: &AttachedProgram) -> String {
    let name = if p.name.is_empty() { "?" } else { &p.name };
    format!("{name} (id {}) on {}", p.id, p.at)
}

impl fmt::Display for CgroupSkbDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in netns {}: {}", self.netns, self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[
    super::explains::Explains {
        reasons: &[DropReason::BpfCgroupEgress],
        cause: "a cgroup_skb egress program of the sending socket's cgroup (systemd IPAddressDeny=, an agent's) refused it (verdict/cgroup_skb.rs)",
        at: "",
        facts: "the sending socket's cgroup (sock_diag) and the node's cgroup_skb programs (BPF_PROG_QUERY over the cgroup2 hierarchy)",
    },
    super::explains::Explains {
        reasons: &[DropReason::SocketFilter],
        cause: "a cgroup_skb ingress program of the receiving socket's cgroup, or the socket's own filter, refused it (verdict/cgroup_skb.rs)",
        at: "",
        facts: "the receiving socket's cgroup (sock_diag) and the node's cgroup_skb programs (BPF_PROG_QUERY over the cgroup2 hierarchy)",
    },
];

/// The socket of the drop's namespace the packet was for (ingress) or
/// from (egress, a UDP socket still open).
fn socket<'a>(drop: &Hop, ingress: bool, env: &'a dyn Env) -> Option<&'a Bound> {
    let t = &drop.tuple;
    let (addr, port) = if ingress {
        (t.dst, t.dport)
    } else {
        (t.src, t.sport)
    };
    let proto = if t.proto == 6 { "tcp" } else { "udp" };
    env.bound(drop.netns_inode)
        .iter()
        .find(|b| b.takes(proto, addr, port))
}

/// A drop a cgroup program or socket filter made, as `(where, evidence)`.
pub fn judge(
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    let ingress = match reason {
        DropReason::SocketFilter => true,
        DropReason::BpfCgroupEgress => false,
        _ => return None,
    };
    let hook = if ingress {
        "cgroup_skb ingress"
    } else {
        "cgroup_skb egress"
    };
    let sock = socket(drop, ingress, env);
    let ids: Vec<u64> = sock.and_then(|s| s.cgroup).into_iter().collect();
    let skb = env.cgroup_skb(&ids);
    let cgroup = ids.first().and_then(|id| skb.paths.get(id)).cloned();
    let programs = skb
        .programs
        .into_iter()
        .filter(|p| p.hook == hook)
        .filter(|p| cgroup.as_deref().is_none_or(|c| under(c, &p.at)))
        .collect();
    let d = CgroupSkbDrop {
        hook: hook.to_string(),
        netns: drop.netns.to_string(),
        socket: sock.map(|s| format!("{} {}", s.proto, endpoint(s))),
        cgroup,
        programs,
    };
    let at = super::rules::site(func);
    Some((
        format!("{at} in netns {}: {}", d.netns, d.said()),
        Evidence::CgroupProgramDrop(d),
    ))
}

fn endpoint(b: &Bound) -> String {
    super::evidence::Endpoint::new(b.addr, b.port).to_string()
}

fn by_program(e: &Evidence) -> bool {
    matches!(e, Evidence::CgroupProgramDrop(d) if !d.programs.is_empty())
}

fn by_socket_filter(e: &Evidence) -> bool {
    matches!(e, Evidence::CgroupProgramDrop(d) if d.programs.is_empty() && d.hook.ends_with("ingress"))
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Dropped,
        by_program,
        "A cgroup BPF program refused the packet for the socket's cgroup. Programs named sd_fw_ingress/sd_fw_egress are systemd's IPAddressDeny=/IPAddressAllow= of the unit whose cgroup it is: `systemctl show UNIT -p IPAddressDeny -p IPAddressAllow` shows them; allow the address (a drop-in with IPAddressAllow=10.96.0.0/12 for the cluster's Services, or the DNS server) and restart the unit. Other names belong to an agent (a dataplane's host firewall, a security product): `bpftool cgroup tree` lists them, `bpftool prog show id N` says who loaded them.",
    ),
    Hint::when(
        Kind::Dropped,
        by_socket_filter,
        "The receiving socket's own filter dropped the packet (no cgroup program runs for it): the application attached a classic or eBPF socket filter (SO_ATTACH_FILTER, SO_ATTACH_BPF) that does not accept this source or packet. The filter is the application's configuration (an allow-list of clients, a DNS server's ACL implemented as a filter): check that process's settings; `ss -p` names the process that holds the socket.",
    ),
];

#[cfg(test)]
mod tests;
