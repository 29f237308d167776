//! A cause: a routing loop. Two or more namespaces (a node and its
//! gateway, a ToR) route the destination to each other, and the packet
//! goes round until its TTL (hop limit) runs out: a pod or Service range
//! advertised or routed to a node that has no route of its own for it
//! and sends it back by its default route (Calico installs blackhole
//! routes for its IPAM blocks against this).
//!
//! - **Signals**: IP_INHDR at ip_forward() or ip6_forward() (the TTL
//!   check: `if (ip_hdr(skb)->ttl <= 1) goto too_many_hops`, net/ipv4/
//!   ip_forward.c; the drop comes after ICMP time exceeded), and the
//!   flow's request seen entering the same namespace more than once.
//! - **Facts**: the flow's own hops: the route lookups of each namespace
//!   on the way (fib_table_lookup: device and gateway), and the
//!   namespaces' addresses (`Env::addrs`) to name who holds a gateway.
//! - **Evidence**: [`Evidence::RoutingLoop`] holding a [`RoutingLoop`].
//! - **Where**: `ip_forward in netns tor: the TTL ran out in a routing
//!   loop for 10.1.100.7: node routes it by eth0 via 10.1.0.1 (netns
//!   tor), tor by eth0 via 10.1.0.2 (netns node) ...`.
//! - **Rules**: `rules::device_cause` asks [`judge`].
//! - **Hint**: [`HINTS`].

use std::{fmt, net::IpAddr};

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, Kind, hints::Hint};
use crate::model::{
    drop_reason::DropReason,
    flow::Flow,
    hop::{Dir, Hop, HopData},
};
use tracer_common::Hook;

/// One namespace's route on the loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoopRoute {
    pub netns: String,
    /// The device the route leaves by.
    pub dev: String,
    pub gw: Option<IpAddr>,
    /// The traced namespace that holds `gw`, when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw_netns: Option<String>,
}

/// The loop a packet went round until its TTL ran out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RoutingLoop {
    pub dst: IpAddr,
    /// Each namespace of the loop and its route for `dst`, in the order
    /// the packet went.
    pub routes: Vec<LoopRoute>,
    /// How many times the packet entered the namespace where it died, as
    /// traced (the first passages; the kernel counts the rest).
    pub passes: usize,
}

impl fmt::Display for LoopRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} routes it by {}", self.netns, self.dev)?;
        if let Some(g) = self.gw {
            write!(f, " via {g}")?;
        }
        if let Some(n) = &self.gw_netns {
            write!(f, " (netns {n})")?;
        }
        Ok(())
    }
}

impl RoutingLoop {
    /// What happened, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        format!(
            "the TTL ran out in a routing loop for {}: {}; the packet entered this namespace {} times",
            self.dst,
            self.routes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            self.passes
        )
    }
}

impl fmt::Display for RoutingLoop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[super::explains::Explains {
    reasons: &[DropReason::IpInhdr],
    cause: "a routing loop: namespaces route the destination to each other until the TTL runs out (verdict/routing_loop.rs)",
    at: "ip_forward, ip6_forward",
    facts: "the flow's route lookups in each namespace it crossed (fib_table_lookup); the namespaces' addresses, for who holds each gateway",
}];

/// A TTL drop in a loop, as `(where, evidence)`; None unless the request
/// entered the drop's namespace more than once.
pub fn judge(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    if *reason != DropReason::IpInhdr || !matches!(func, "ip_forward" | "ip6_forward") {
        return None;
    }
    // Each arrival is seen by the receive tracepoint, or by tc ingress
    // where tc is the device hook: count by the one that saw more.
    let entered = |hook: Hook| {
        flow.hops
            .iter()
            .filter(|h| h.dir == Dir::Request && h.hook == hook)
            .filter(|h| h.netns_inode == drop.netns_inode)
            .count()
    };
    let passes = entered(Hook::NetifReceive).max(entered(Hook::TcIngress));
    if passes < 2 {
        return None;
    }
    let dst = drop.tuple.dst;
    // Each namespace's route for dst, in the order first seen.
    let mut routes: Vec<(u32, LoopRoute)> = Vec::new();
    for h in flow.hops.iter().filter(|h| h.dir == Dir::Request) {
        let HopData::Fib(f) = &h.data else { continue };
        if h.tuple.dst != dst || f.err != 0 || routes.iter().any(|(n, _)| *n == h.netns_inode) {
            continue;
        }
        routes.push((
            h.netns_inode,
            LoopRoute {
                netns: h.netns.to_string(),
                dev: f.nh_dev.to_string(),
                gw: f.gw,
                gw_netns: None,
            },
        ));
    }
    // The loop: the namespaces whose routes point at one another (a
    // gateway held by another namespace on the list), from the drop's.
    let holder = |gw: IpAddr| {
        routes
            .iter()
            .find(|(n, _)| {
                env.addrs(*n)
                    .is_some_and(|a| a.iter().any(|x| x.addr == gw))
            })
            .map(|(n, r)| (*n, r.netns.clone()))
    };
    let mut on_loop = Vec::new();
    let mut at = drop.netns_inode;
    while let Some((_, r)) = routes.iter().find(|(n, _)| *n == at) {
        if on_loop.iter().any(|(n, _): &(u32, LoopRoute)| *n == at) {
            break;
        }
        let mut r = r.clone();
        let next = r.gw.and_then(holder);
        r.gw_netns = next.as_ref().map(|(_, name)| name.clone());
        on_loop.push((at, r));
        match next {
            Some((n, _)) => at = n,
            None => break,
        }
    }
    // Start the loop where the packet came from: the namespace that
    // routed it to the drop's.
    if on_loop.len() > 1 {
        on_loop.rotate_left(1);
    }
    let l = RoutingLoop {
        dst,
        routes: on_loop.into_iter().map(|(_, r)| r).collect(),
        passes,
    };
    Some((
        format!("{func} in netns {}: {}", drop.netns, l.said()),
        Evidence::RoutingLoop(l),
    ))
}

fn is_loop(e: &Evidence) -> bool {
    matches!(e, Evidence::RoutingLoop(_))
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[Hint::when(
    Kind::Dropped,
    is_loop,
    "A routing loop: each namespace on it sends the destination to the next, and back, until the TTL runs out (the sender gets ICMP time exceeded, or a timeout). Usually a pod or Service range is routed (or advertised by BGP) to a node that has no route of its own for that address and sends it back by its default route. Give the node a terminal route for the range it owns but does not use (`ip route add blackhole 10.x.y.0/26`, as Calico does for its IPAM blocks; an unreachable route makes the sender fail fast), or stop routing or advertising the range there; `ip route get DST` in each namespace shows the loop.",
)];

#[cfg(test)]
mod tests;
