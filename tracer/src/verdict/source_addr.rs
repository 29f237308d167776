//! A cause: the packet's source address is one the receiving namespace
//! will not take from outside: one of its own addresses (a duplicate: a
//! pod's IP also on the node's tunnel device, a node IP given to a pod),
//! or a martian (multicast, broadcast, 0.0.0.0/8, loopback); or its
//! destination is a martian (0.0.0.0/8: a DNAT written with an empty
//! address).
//!
//! - **Signals**: IP_LOCAL_SOURCE (fib_validate_source(), net/ipv4/
//!   fib_frontend.c: the source is a local address of the namespace) and
//!   IP_INVALID_SOURCE (ip_route_input_slow(), net/ipv4/route.c, its
//!   `martian_source` label: a multicast, limited broadcast, zeronet or,
//!   with route_localnet off, loopback source) and IP_INVALID_DEST (its
//!   `martian_destination` label: a zeronet destination), wherever they
//!   are given.
//! - **Facts**: the drop namespace's addresses (`Env::addrs`, read for
//!   every namespace traced): which device holds the source.
//! - **Evidence**: [`Evidence::SourceRefused`] holding a
//!   [`SourceRefusal`].
//! - **Where**: `ip_rcv_finish_core in netns node: its source 10.1.1.7
//!   is an address of this namespace too (on vxlan.calico) ...`.
//! - **Rules**: `rules::device_cause` asks [`judge`]; None when the
//!   namespace holds no such address now (a local source claimed by no
//!   device is not claimed here). [`reply_refused`] (in `rules::RULES`,
//!   before the misroutes) for an answer refused so on its way back.
//! - **Hint**: [`HINTS`]: an answer from the local address a request was
//!   steered out to (a direct-server-return health check); the duplicate
//!   address; the martian.

use std::{fmt, net::IpAddr};

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, EvidenceKind, Kind, Verdict, hints::Hint, rules};
use crate::model::{
    drop_reason::DropReason,
    flow::Flow,
    hop::{Dir, Hop, HopData},
    names::func_of,
};

/// Why the source was refused, as the node shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourceRefusal {
    pub netns: String,
    /// The device the packet came in by.
    pub dev: String,
    pub src: IpAddr,
    /// `src` is the packet's destination, not its source
    /// (IP_INVALID_DEST).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_dst: bool,
    /// The destination the client sent to, when NAT made it `src`; or,
    /// for a reply whose source is that destination (the answer to a
    /// request this namespace steered out), `src` itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_to: Option<IpAddr>,
    /// The device of this namespace that holds `src` (IP_LOCAL_SOURCE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// What kind of martian `src` is (IP_INVALID_SOURCE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub martian: Option<String>,
}

impl SourceRefusal {
    /// What it does to the packet, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        match (&self.held_by, &self.martian) {
            (Some(held), _) if self.sent_to == Some(self.src) => format!(
                "its source {} is the address the request was sent to, which this namespace holds itself (on {held}), and it came in by {}: the kernel drops packets from its own addresses that arrive from outside",
                self.src, self.dev
            ),
            (Some(held), _) => format!(
                "its source {} is an address of this namespace too (on {held}), and it came in by {}: the kernel drops packets from its own addresses that arrive from outside (a duplicate address)",
                self.src, self.dev
            ),
            (None, Some(m)) if self.is_dst => format!(
                "its destination {}{} is {m}, which no packet arriving by {} may go to (a martian destination)",
                self.src,
                self.sent_to
                    .map(|s| format!(" (after NAT; it was sent to {s})"))
                    .unwrap_or_default(),
                self.dev
            ),
            (None, Some(m)) => format!(
                "its source {} is {m}, which no packet arriving by {} may come from (a martian source)",
                self.src, self.dev
            ),
            (None, None) => format!("its source {} was refused", self.src),
        }
    }
}

impl fmt::Display for SourceRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in netns {}: {}", self.netns, self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[
    super::explains::Explains {
        reasons: &[DropReason::IpLocalSource],
        cause: "the source is an address of the receiving namespace too: a duplicate address (verdict/source_addr.rs)",
        at: "",
        facts: "the namespace's addresses (RTM_GETADDR): the device that holds the source",
    },
    super::explains::Explains {
        reasons: &[DropReason::IpInvalidDest],
        cause: "a martian destination: 0.0.0.0/8, as a NAT written with an empty address makes it (verdict/source_addr.rs)",
        at: "",
        facts: "the packet's destination; the flow's NAT translation",
    },
    super::explains::Explains {
        reasons: &[DropReason::IpInvalidSource],
        cause: "a martian source: multicast, broadcast, 0.0.0.0/8 or loopback from outside (verdict/source_addr.rs)",
        at: "",
        facts: "the packet's source address",
    },
];

/// A drop its source explains, as `(where, evidence)`.
pub fn judge(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    let is_dst = *reason == DropReason::IpInvalidDest;
    let src = if is_dst {
        drop.tuple.dst
    } else {
        drop.tuple.src
    };
    let sent_to = if is_dst {
        (flow.key.dst != src).then_some(flow.key.dst)
    } else {
        (drop.dir == Dir::Reply && flow.key.dst == src).then_some(src)
    };
    let (held_by, martian) = match reason {
        DropReason::IpLocalSource => {
            let held = env
                .addrs(drop.netns_inode)?
                .iter()
                .find(|a| a.addr == src)?;
            (Some(held.dev.clone()), None)
        }
        DropReason::IpInvalidSource => (None, Some(martian(src)?.to_string())),
        DropReason::IpInvalidDest => (None, Some(martian_dst(src)?.to_string())),
        _ => return None,
    };
    let r = SourceRefusal {
        netns: drop.netns.to_string(),
        dev: drop.dev.to_string(),
        src,
        is_dst,
        sent_to,
        held_by,
        martian,
    };
    let at = super::rules::site(func);
    Some((
        format!("{at} in netns {}: {}", r.netns, r.said()),
        Evidence::SourceRefused(r),
    ))
}

/// A rule: the request was answered, and the answer was refused for its
/// source where it came back (IP_LOCAL_SOURCE, IP_INVALID_SOURCE), so no
/// answer reached the client. A request to an address of its own
/// namespace that was steered out by a device (a load balancer's health
/// check of a direct-server-return real server, katran#47) has its
/// answer come back from that address: the misroute is told as evidence,
/// the verdict is where the answer died.
pub fn reply_refused(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let (drop, d) = flow.hops.iter().find_map(|h| match &h.data {
        HopData::Drop(d)
            if h.dir == Dir::Reply
                && matches!(
                    d.reason,
                    DropReason::IpLocalSource | DropReason::IpInvalidSource
                ) =>
        {
            Some((h, d))
        }
        _ => None,
    })?;
    if rules::client_answered(flow) {
        return None;
    }
    let (said, fact) = judge(flow, drop, &d.reason, func_of(&d.location), env)?;
    let mut v = rules::verdict(
        Kind::Dropped,
        d.reason.clone(),
        format!(
            "the reply from {} was dropped on its way back: {said}",
            super::Endpoint::new(drop.tuple.src, drop.tuple.sport)
        ),
        &drop.netns,
        Some(drop.dev.to_string()),
    );
    v.add(rules::dropped_at(drop, &d.location));
    v.add(fact);
    if let Some(t) = rules::local_transmitted(flow, env) {
        v.add_all(t.evidence);
    }
    v.add_all(rules::delivered_and_side_evidence(flow));
    Some(v)
}

/// The class of a martian source, as ip_route_input_slow() tests it
/// (ipv4_is_multicast, ipv4_is_lbcast, ipv4_is_zeronet, ipv4_is_loopback);
/// None for an address it takes.
fn martian(a: IpAddr) -> Option<&'static str> {
    match a {
        IpAddr::V4(v) if v.is_multicast() => Some("a multicast address"),
        IpAddr::V4(v) if v.is_broadcast() => Some("the limited broadcast address"),
        IpAddr::V4(v) if v.octets()[0] == 0 => Some("in 0.0.0.0/8"),
        IpAddr::V4(v) if v.is_loopback() => Some("a loopback address (route_localnet is off)"),
        IpAddr::V6(v) if v.is_multicast() => Some("a multicast address"),
        IpAddr::V6(v) if v.is_loopback() => Some("the loopback address"),
        _ => None,
    }
}

/// The class of a martian destination, as ip_route_input_slow() tests
/// it (ipv4_is_zeronet; loopback is IP_LOCALNET there).
fn martian_dst(a: IpAddr) -> Option<&'static str> {
    match a {
        IpAddr::V4(v) if v.octets()[0] == 0 => Some("in 0.0.0.0/8"),
        _ => None,
    }
}

fn is_duplicate(e: &Evidence) -> bool {
    matches!(e, Evidence::SourceRefused(r) if r.held_by.is_some())
}

fn is_martian(e: &Evidence) -> bool {
    matches!(e, Evidence::SourceRefused(r) if r.martian.is_some() && !r.is_dst)
}

fn is_martian_dst(e: &Evidence) -> bool {
    matches!(e, Evidence::SourceRefused(r) if r.martian.is_some() && r.is_dst)
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[
    // The answer's source is the local address the request was steered
    // out to (its evidence: the misroute).
    Hint {
        kind: Some(Kind::Dropped),
        reason: None,
        evidence: &[EvidenceKind::LocalAddressTransmitted],
        when: Some(is_duplicate),
        text: "The request was for an address this namespace holds (a VIP on lo) and was steered out by a device, as a load balancer's health check of a direct-server-return real server is; the answer comes back from that address, and the kernel refuses a packet whose source is one of its own (fib_validate_source(): IP_LOCAL_SOURCE) unless the device it comes in by accepts local sources. Set `net.ipv4.conf.DEV.accept_local=1` on that device (and rp_filter 0 or 2 there), or have the check answered from another address (a tunnel to the real server, as Katran's healthchecker does, or a source that is not the VIP).",
    },
    Hint::when(
        Kind::Dropped,
        is_duplicate,
        "The packet's source address is also an address of the namespace it arrived in, so the kernel takes it for spoofed. Two interfaces hold the same IP: a pod's address given to the node's tunnel or bridge device too (an IPAM block shared by the CNI's tunnel address and pods), a node IP reused for a pod or a VIP. Find both holders (`ip -br addr` on the node and `kubectl get pods -A -o wide | grep IP`), remove the address from the one that should not have it, and fix the IPAM (release the block, or exclude the tunnel address from the pod pool).",
    ),
    Hint::when(
        Kind::Dropped,
        is_martian_dst,
        "The packet's destination is 0.0.0.0/8, which the kernel routes nowhere: a DNAT or a program wrote an empty address (a Service endpoint, hostPort or externalIP rule generated from an unset variable or a pod without an IP yet). Find the rule that translated it (the flow's `translated` and the NAT evidence name it; `iptables-save -t nat | grep 0.0.0.0`, `nft list ruleset | grep 0.0.0.0`) and fix the object it was generated from; kube-proxy or the CNI rewrites it on its next sync once the endpoint is right.",
    ),
    Hint::when(
        Kind::Dropped,
        is_martian,
        "The source address is one no packet from outside may carry (a martian): a NAT or a program that wrote a wrong source (0.0.0.0 from an unset variable, a multicast address), or loopback sent out of a device. Find who wrote it: the hops before the drop show where the packet was last rewritten; `nstat -az IpExtInNoRoutes`, and `sysctl net.ipv4.conf.all.log_martians=1` logs them.",
    ),
];

#[cfg(test)]
mod tests;
