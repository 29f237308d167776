//! A cause: the packet's IP protocol has no handler in the receiving
//! kernel, so the namespace it was delivered to refuses it: SCTP with no
//! sctp module (a Kubernetes SCTP Service or pod port on a node without
//! it), IP in IP (Calico's IPIP) on a node without the ipip module, GRE
//! without ip_gre.
//!
//! - **Signals**: IP_NOPROTO (ip_local_deliver_finish() ->
//!   ip_protocol_deliver_rcu() finds no inet_protos entry for the
//!   protocol, and no raw socket took it; ip6_protocol_deliver_rcu() for
//!   IPv6), on a request delivered to the namespace.
//! - **Facts**: none beyond the packet's protocol: the kernel's own reason
//!   says that no handler exists; the module that would be the handler is
//!   named from the protocol number (the kernel answers with ICMP
//!   protocol unreachable, counted in Ip InUnknownProtos).
//! - **Evidence**: [`Evidence::ProtocolUnhandled`] holding a
//!   [`ProtocolUnhandled`].
//! - **Where**: `ip_local_deliver_finish in netns pod2: no handler for IP
//!   protocol 132 (SCTP) in this kernel: its module sctp is not loaded`.
//! - **Rules**: `rules::device_cause` asks [`judge`] for the reason.
//! - **Hint**: [`HINTS`]: load the module on every node.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Evidence, Kind, hints::Hint};
use crate::model::{drop_reason::DropReason, hop::Hop};

/// A protocol the receiving kernel had no handler for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProtocolUnhandled {
    /// The IP protocol number, and its name.
    pub proto: u8,
    pub name: String,
    /// The kernel module that handles it, when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub netns: String,
}

impl ProtocolUnhandled {
    /// What happened, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        let module = self.module.as_deref().map_or_else(
            || "no module of the kernel handles it".to_string(),
            |m| format!("its module {m} is not loaded (or the kernel was built without it)"),
        );
        format!(
            "no handler for IP protocol {} ({}) in this kernel: {module}; the kernel answers protocol unreachable",
            self.proto, self.name
        )
    }
}

impl fmt::Display for ProtocolUnhandled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in netns {}: {}", self.netns, self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[super::explains::Explains {
    reasons: &[DropReason::IpNoproto],
    cause: "the packet's IP protocol has no handler in the receiving kernel: its module (sctp, ipip, ip_gre, ...) is not loaded (verdict/no_protocol.rs)",
    at: "ip_local_deliver_finish, ip6_input_finish",
    facts: "the packet's protocol",
}];

/// The name of IP protocol `p` and the module that handles it
/// (include/uapi/linux/in.h; net/sctp, net/ipv4/ipip.c, ...).
fn known(p: u8) -> (String, Option<&'static str>) {
    let (name, module) = match p {
        4 => ("IP in IP", Some("ipip")),
        33 => ("DCCP", Some("dccp_ipv4")),
        41 => ("IPv6 in IPv4", Some("sit")),
        47 => ("GRE", Some("ip_gre")),
        50 => ("ESP", Some("esp4")),
        51 => ("AH", Some("ah4")),
        94 | 98 => ("encapsulation", None),
        103 => ("PIM", None),
        112 => ("VRRP", None),
        115 => ("L2TP", Some("l2tp_ip")),
        132 => ("SCTP", Some("sctp")),
        136 => ("UDP-Lite", None),
        _ => return (format!("protocol {p}"), None),
    };
    (name.to_string(), module)
}

/// An IP_NOPROTO drop, as `(where, evidence)`; None for another reason.
pub fn judge(drop: &Hop, reason: &DropReason, func: &str) -> Option<(String, Evidence)> {
    if *reason != DropReason::IpNoproto || drop.tuple.proto == 0 {
        return None;
    }
    let (name, module) = known(drop.tuple.proto);
    let u = ProtocolUnhandled {
        proto: drop.tuple.proto,
        name,
        module: module.map(str::to_string),
        netns: drop.netns.to_string(),
    };
    let at = super::rules::site(func);
    Some((
        format!("{at} in netns {}: {}", u.netns, u.said()),
        Evidence::ProtocolUnhandled(u),
    ))
}

fn tunnel(e: &Evidence) -> bool {
    matches!(e, Evidence::ProtocolUnhandled(u) if matches!(u.proto, 4 | 41 | 47))
}

fn other(e: &Evidence) -> bool {
    matches!(e, Evidence::ProtocolUnhandled(u) if !matches!(u.proto, 4 | 41 | 47))
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Dropped,
        tunnel,
        "The node received tunnel packets (IP in IP, GRE) it has no tunnel driver for: the CNI's overlay needs the module on every node (Calico's IPIP mode: ipip and its tunl0 device; flannel's ipip backend likewise). Load it (`modprobe ipip`, and list it in /etc/modules-load.d/ so it survives a reboot), or switch the overlay (Calico's VXLAN mode) where the kernel lacks it; the sender keeps sending until the far side decapsulates.",
    ),
    Hint::when(
        Kind::Dropped,
        other,
        "The node's kernel has no handler for this IP protocol, so every packet of it is refused with protocol unreachable: Kubernetes SCTP Services and pod ports need the sctp module loaded on every node that runs the pods (and on nodes that NAT to them, for conntrack's SCTP helper). `modprobe sctp` (and /etc/modules-load.d/sctp.conf), or a kernel built with it; `nstat -az IpInUnknownProtos` counts the refusals.",
    ),
];

#[cfg(test)]
mod tests;
