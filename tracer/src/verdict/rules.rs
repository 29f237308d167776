//! The verdict rules. Each is a small function over a flow's timeline that
//! either recognises its situation or passes; `RULES` is tried in order.

use std::net::IpAddr;

use tracer_common::Hook;

use super::{DropReason, Endpoint, Env, Evidence, Found, Kind, Reason, Verdict};
use crate::node::netfilter::{NfMethod, NfRule};
use crate::node::nftrace::NfTraced;
use crate::node::route::RouteQuery;
use crate::{
    model::flow::Flow,
    model::hop::{Dir, Hop, HopData, Nud, ReasonFrom, TcpState},
    model::names::func_of,
};

pub type Rule = fn(&Flow, &dyn Env) -> Option<Verdict>;

/// Order matters: a misroute is also a local delivery (or a local drop), and
/// a drop that happened after delivery does not make the flow dropped.
pub const RULES: &[Rule] = &[
    ipvs_no_destination,
    misrouted_local_shadow,
    // Before the misroute: where the answer died is the flow's end.
    super::source_addr::reply_refused,
    misrouted_local_transmitted,
    misrouted_nat_source,
    // Repeated PKT_TOO_BIG drops are the flow's story even when a stray
    // drop came first.
    mtu_black_hole,
    dropped,
    // No drop, no reply: a native XDP program took the request.
    super::xdp_native::taken,
    reply_unroutable,
    socket_buffer_full,
    // Before `delivered`: a burst's tail a qdisc dropped.
    super::qdisc_drop::lost_in_queue,
    super::fragments::fragments_lost,
    listen_overflow,
    reply_dropped,
    // Before `delivered`: the request was, its answer was not.
    super::bpf_drop::reply_dropped_by_program,
    super::ct_state::reply_not_translated,
    super::bpf_nat::reply_not_translated,
    delivered,
    forwarded,
];

/// A drop's site as `where` opens it: its function, or `kfree_skb` when
/// the location was not symbolized.
pub(super) fn site(func: &str) -> &str {
    if func.is_empty() { "kfree_skb" } else { func }
}

pub(super) fn verdict(
    kind: Kind,
    reason: impl Into<Reason>,
    where_: String,
    netns: &str,
    dev: Option<String>,
) -> Verdict {
    Verdict {
        kind,
        reason: reason.into(),
        reason_inferred: false,
        where_,
        hint: String::new(),
        netns: netns.into(),
        dev: dev.filter(|d| !d.is_empty()),
        incomplete: false,
        evidence: Vec::new(),
        settled: true,
        queries: Vec::new(),
        service: None,
    }
}

/// Facts every verdict may carry: what the kernel answered.
pub(super) fn side_evidence(flow: &Flow) -> Vec<Evidence> {
    let mut ev = Vec::new();
    for h in &flow.hops {
        match &h.data {
            HopData::TcpReset { reason } => ev.push(Evidence::TcpResetSent {
                netns: h.netns.to_string(),
                reason: reason.as_ref().map(std::string::ToString::to_string),
            }),
            HopData::IcmpSend {
                icmp_type,
                icmp_code,
                desc,
            } => ev.push(Evidence::IcmpSent {
                netns: h.netns.to_string(),
                icmp_type: *icmp_type,
                icmp_code: *icmp_code,
                desc: desc.to_string(),
            }),
            HopData::Func(f) => ev.push(Evidence::FunctionHook {
                func: f.func.to_string(),
                backend: f.backend.to_string(),
                netns: h.netns.to_string(),
                detail: f.detail.clone(),
            }),
            HopData::Neigh(n) if n.state.contains(Nud::FAILED) => {
                ev.push(Evidence::NeighbourState {
                    addr: n.addr,
                    dev: h.dev.to_string(),
                    netns: h.netns.to_string(),
                    state: n.state,
                    event: n.event.to_string(),
                });
            }
            _ => {}
        }
        // A namespace that sent the request back out of the interface it
        // came in on (and so an ICMP redirect): the previous owner of a
        // VIP still receiving its traffic (incident 1).
        if h.dir == Dir::Request
            && h.is_egress()
            && flow.hops.iter().any(|g| {
                g.dir == Dir::Request
                    && g.is_ingress()
                    && g.netns_inode == h.netns_inode
                    && g.dev == h.dev
                    && g.skb == h.skb
                    && g.ts_ns < h.ts_ns
            })
        {
            ev.push(Evidence::ForwardedBack {
                netns: h.netns.to_string(),
                dev: h.dev.to_string(),
            });
        }
    }
    dedup(&mut ev);
    ev
}

/// What IPVS did with the flow, from its function hooks: the real server it
/// was scheduled to (the translated destination), connection reuse, the
/// forwarding method.
fn ipvs_evidence(flow: &Flow) -> Vec<Evidence> {
    let mut ev = Vec::new();
    for h in &flow.hops {
        if let HopData::Func(fd) = &h.data
            && fd.func.starts_with("ip_vs")
        {
            let crate::model::hop::FuncData {
                func,
                ret,
                detail,
                backend,
                ..
            } = &**fd;
            if func == "ip_vs_schedule" && ret.is_some_and(|r| r != 0) {
                ev.push(Evidence::IpvsScheduled {
                    service: Endpoint::new(flow.key.dst, flow.key.dport),
                    real_server: flow.translated.map(|t| Endpoint::new(t.dst, t.dport)),
                    netns: h.netns.to_string(),
                    backend: backend.to_string(),
                });
            } else {
                ev.push(Evidence::FunctionHook {
                    func: func.to_string(),
                    backend: backend.to_string(),
                    netns: h.netns.to_string(),
                    detail: detail.clone(),
                });
            }
        }
    }
    dedup(&mut ev);
    ev
}

/// Remove repeated facts, keeping first occurrences in order.
pub fn dedup(v: &mut Vec<Evidence>) {
    let mut out: Vec<Evidence> = Vec::with_capacity(v.len());
    for e in v.drain(..) {
        if !out.contains(&e) {
            out.push(e);
        }
    }
    *v = out;
}

/// Incident 5: a route lookup for the flow's destination hit a LOCAL route
/// because the address is bound on this node (kube-ipvs0 or any device),
/// while the address lies in the subnet of another interface: it belongs to
/// another host, and this node answers for it.
pub fn misrouted_local_shadow(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let dsts = flow.dsts();
    flow.hops.iter().find_map(|h| {
        let HopData::Fib(fib) = &h.data else {
            return None;
        };
        let nh_dev = &fib.nh_dev;
        if !h.data.is_local_route() {
            return None;
        }
        let dst = h.tuple.dst;
        if h.dir != Dir::Request || !dsts.contains(&dst) {
            return None;
        }
        let addrs = env.addrs(h.netns_inode)?;
        let full = if dst.is_ipv4() { 32 } else { 128 };
        let owner = addrs.iter().find(|a| {
            a.dev != *nh_dev
                && a.dev != "lo"
                && a.prefix < full
                && a.addr != dst
                && crate::node::route::contains(dst, a.addr, a.prefix)
        })?;
        let mut v = verdict(
            Kind::Misrouted,
            Found::LocalRouteShadowsHost,
            format!(
                "local route in netns {}: {dst} is bound on {nh_dev}",
                h.netns
            ),
            &h.netns,
            Some(nh_dev.to_string()),
        );
        v.add(Evidence::LocalRoute {
            dst,
            dev: nh_dev.to_string(),
        });
        v.add(Evidence::OtherHostsSubnet {
            dst,
            net: owner.addr,
            prefix: owner.prefix,
            dev: owner.dev.clone(),
        });
        v.add_all(side_evidence(flow));
        Some(v)
    })
}

/// Incident 3: the destination is an address of this namespace (node-local
/// DNS on nodelocaldns), yet the request left by a device instead of being
/// delivered. Whatever sent it there (a BPF program's bpf_redirect, a tc
/// mirred action, a route), the address is local: the packet was misrouted.
/// When it went from a device's ingress straight to another's egress with
/// no routing decision between, the IP stack never saw it, and the tc
/// filters on that ingress are named.
pub fn misrouted_local_transmitted(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let t = local_transmitted(flow, env)?;
    let mut v = verdict(
        Kind::Misrouted,
        Found::LocalDestinationTransmitted,
        t.where_,
        &t.out.netns,
        Some(t.out.dev.to_string()),
    );
    v.add_all(t.evidence);
    v.add_all(side_evidence(flow));
    Some(v)
}

/// A request that left a namespace by a device for an address another
/// device there holds ([`misrouted_local_transmitted`]; a refused reply's
/// cause, source_addr.rs): the hop it left by, the place said, and the
/// facts (the address, the tc redirect and its filters).
pub struct LocalTransmitted<'a> {
    pub out: &'a Hop,
    pub where_: String,
    pub evidence: Vec<Evidence>,
}

pub fn local_transmitted<'a>(flow: &'a Flow, env: &dyn Env) -> Option<LocalTransmitted<'a>> {
    let (out, owner) = flow.hops.iter().find_map(|h| {
        // Egress: the xmit tracepoint, or tc egress where tc is the device
        // hook (probes::TC_COVERED); both see the packet after NAT.
        if h.dir != Dir::Request || !h.is_egress() || h.dev.is_empty() || h.dev == "lo" {
            return None;
        }
        // The packet as it left: after NAT/IPVS it is bound elsewhere, and
        // leaving is right.
        let owner = env
            .addrs(h.netns_inode)?
            .iter()
            .find(|a| a.addr == h.tuple.dst && h.dev != a.dev)?;
        Some((h, owner))
    })?;
    let ingress = flow.hops.iter().rev().find(|h| {
        h.dir == Dir::Request
            && h.netns_inode == out.netns_inode
            && h.is_ingress()
            && h.ts_ns <= out.ts_ns
    });
    let bypass = ingress.filter(|ing| {
        !flow.hops.iter().any(|h| {
            h.netns_inode == out.netns_inode
                && h.ts_ns >= ing.ts_ns
                && h.ts_ns <= out.ts_ns
                && matches!(&h.data, HopData::Fib(f) if f.iif == ing.ifindex)
        })
    });
    let mut where_ = format!(
        "netns {}: {} is local (on {}) but left via {}",
        out.netns, owner.addr, owner.dev, out.dev
    );
    let mut evidence = vec![Evidence::LocalAddressTransmitted {
        dev: out.dev.to_string(),
        netns: out.netns.to_string(),
        addr: owner.addr,
    }];
    if let Some(ing) = bypass {
        let filters = env.tc_filters(ing.netns_inode, &ing.dev);
        where_.push_str(&format!(", redirected at tc ingress of {}", ing.dev));
        if !filters.is_empty() {
            where_.push_str(&format!(" by {}", filters.join(", ")));
        }
        evidence.push(Evidence::TcRedirect {
            ingress_dev: ing.dev.to_string(),
            egress_dev: out.dev.to_string(),
        });
        evidence.extend(filters.iter().map(|f| Evidence::TcFilter {
            dev: ing.dev.to_string(),
            filter: f.clone(),
        }));
    }
    Some(LocalTransmitted {
        out,
        where_,
        evidence,
    })
}

/// Incident 4: a DNATed flow left by one device with the source address of
/// another. The route lookup for the Service IP (before DNAT) picked a
/// device and its address as source; after DNAT the packet is rerouted out
/// of another device, keeping that source, so the backend answers an
/// address that is not reachable that way.
pub fn misrouted_nat_source(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let t = flow.translated?;
    if t.dst == flow.key.dst {
        return None;
    }
    let out = flow.hops.iter().find(|h| {
        h.dir == Dir::Request && h.is_egress() && h.tuple.dst == t.dst && !h.dev.is_empty()
    })?;
    let src = out.tuple.src;
    let owner = env
        .addrs(out.netns_inode)?
        .iter()
        .find(|a| a.addr == src && a.dev != "lo")?;
    if out.dev == owner.dev {
        return None;
    }
    let pre = flow.hops.iter().find_map(|h| match &h.data {
        HopData::Fib(f)
            if f.err == 0
                && h.dir == Dir::Request
                && h.tuple.dst == flow.key.dst
                && f.nh_dev == owner.dev =>
        {
            Some((f.nh_dev.to_string(), f.gw))
        }
        _ => None,
    });
    let mut v = verdict(
        Kind::Misrouted,
        Found::NatSourceFromOtherInterface,
        format!(
            "netns {}: DNAT {} -> {} left via {} with source {} of {}",
            out.netns,
            endpoint(flow.key.dst, flow.key.dport),
            endpoint(t.dst, t.dport),
            out.dev,
            src,
            owner.dev
        ),
        &out.netns,
        Some(out.dev.to_string()),
    );
    if let Some((dev, gw)) = pre {
        v.add(Evidence::PreNatRoute {
            dst: flow.key.dst,
            dev,
            gw,
            src,
        });
    }
    v.add(Evidence::NatSourceMismatch {
        dst: Endpoint::new(t.dst, t.dport),
        dev: out.dev.to_string(),
        src,
        src_dev: owner.dev.clone(),
    });
    if flow.replies == 0 {
        v.add(Evidence::NoReply);
    }
    v.add_all(reply_route_failures(flow));
    v.add_all(side_evidence(flow));
    Some(v)
}

/// Reply-direction route lookups that found nothing, per namespace.
fn reply_route_failures(flow: &Flow) -> Vec<Evidence> {
    let mut out: Vec<Evidence> = flow
        .hops
        .iter()
        .filter(|h| h.dir == Dir::Reply && matches!(&h.data, HopData::Fib(f) if f.err != 0))
        .filter(|h| {
            // A later table may still have matched: only namespaces where no
            // reply route was found at all count.
            !flow.hops.iter().any(|g| {
                g.dir == Dir::Reply
                    && g.netns_inode == h.netns_inode
                    && matches!(&g.data, HopData::Fib(f) if f.err == 0)
            })
        })
        .map(|h| Evidence::NoRouteBack {
            netns: h.netns.to_string(),
            dst: h.tuple.dst,
        })
        .collect();
    dedup(&mut out);
    out
}

/// The request reached its destination, but the destination found no route
/// for its answer and none left: an asymmetric or missing return route.
pub fn reply_unroutable(flow: &Flow, _env: &dyn Env) -> Option<Verdict> {
    let failures = reply_route_failures(flow);
    let first = failures.first()?;
    let answered = flow
        .hops
        .iter()
        .any(|h| h.dir == Dir::Reply && h.is_egress());
    if answered {
        return None;
    }
    let fail_hop = flow
        .hops
        .iter()
        .find(|h| h.dir == Dir::Reply && matches!(&h.data, HopData::Fib(f) if f.err != 0))?;
    let mut v = verdict(
        Kind::NoReply,
        Found::ReplyUnroutable,
        format!(
            "routing decision (fib_lookup) in netns {}: no route back to {}",
            fail_hop.netns, fail_hop.tuple.dst
        ),
        &fail_hop.netns,
        None,
    );
    v.add(first.clone());
    v.add_all(delivered_and_side_evidence(flow));
    Some(v)
}

/// A sign that the flow was delivered, at a hop.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Delivery {
    Read,
    Queued,
    ServerState(String),
    ClientHandshake,
    Consumed(String),
    Answered,
}

impl Delivery {
    fn at(self, netns: &str) -> Evidence {
        let netns = netns.to_string();
        match self {
            Delivery::Read => Evidence::SocketRead { netns },
            Delivery::Queued => Evidence::SocketQueued { netns },
            Delivery::ServerState(state) => Evidence::ServerSocketState { state, netns },
            Delivery::ClientHandshake => Evidence::ClientHandshake { netns },
            Delivery::Consumed(func) => Evidence::SocketConsumed { func, netns },
            Delivery::Answered => Evidence::DestinationAnswered { netns },
        }
    }
}

/// What reached a socket, then the side facts: the evidence of a verdict
/// whose packets were delivered though a later step failed.
pub(super) fn delivered_and_side_evidence(flow: &Flow) -> Vec<Evidence> {
    let mut v: Vec<Evidence> = delivery_evidence(flow)
        .into_iter()
        .map(|(h, d)| d.at(&h.netns))
        .collect();
    v.extend(side_evidence(flow));
    v
}

fn delivery_evidence(flow: &Flow) -> Vec<(&Hop, Delivery)> {
    let mut out = Vec::new();
    for h in &flow.hops {
        match &h.data {
            HopData::SockRecv => out.push((h, Delivery::Read)),
            HopData::SockQueue if h.dir == Dir::Request => out.push((h, Delivery::Queued)),
            HopData::Sock(s)
                if h.dir == Dir::Reply
                    && matches!(s.new_state, TcpState::SynRecv | TcpState::Established) =>
            {
                out.push((h, Delivery::ServerState(s.new_state.to_string())));
            }
            HopData::Sock(s) if h.dir == Dir::Request && s.new_state == TcpState::Established => {
                out.push((h, Delivery::ClientHandshake));
            }
            HopData::Consume { location }
                if h.dir == Dir::Request && is_socket_fn(func_of(location)) =>
            {
                out.push((h, Delivery::Consumed(func_of(location).to_string())));
            }
            // A reply leaving the namespace it was born in (not one it was
            // only forwarded through), and not a reset.
            HopData::Packet { tcp_flags, .. }
                if h.dir == Dir::Reply
                    && h.is_egress()
                    && tcp_flags & 0x04 == 0
                    && !flow.hops.iter().any(|g| {
                        g.dir == Dir::Reply
                            && g.is_ingress()
                            && g.netns_inode == h.netns_inode
                            && g.ts_ns <= h.ts_ns
                    }) =>
            {
                out.push((h, Delivery::Answered));
            }
            _ => {}
        }
    }
    out
}

/// [`infer_nf_hook`] of a received packet whose route lookup is not seen.
const PREROUTING_OR_INPUT: &str = "PREROUTING or INPUT";

/// The hook of a rule's chain when the chain is a built-in one of an
/// iptables table (iptables-nft names its base chains so): a rule named
/// by its counter says where the packet was better than its path.
fn builtin_chain_hook(chain: &str) -> Option<&'static str> {
    ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]
        .into_iter()
        .find(|h| *h == chain)
}

/// Functions that consume a request skb once a socket accepted it.
fn is_socket_fn(f: &str) -> bool {
    f.starts_with("tcp_") && f != "tcp_v4_rcv" && f != "tcp_v6_rcv"
        || f.starts_with("udp") && f.contains("queue")
        || f == "skb_consume_udp"
        || f.starts_with("__skb_recv_udp")
}

/// Infer the netfilter hook of a drop from where the packet was in its
/// namespace: nf_hook_slow() itself does not say on this kernel. A
/// tunnel's outer packet has its route lookups unfollowed (the fib hooks
/// follow the target's addresses): received and dropped, it was in
/// PREROUTING or, routed to this node's tunnel port, INPUT.
pub fn infer_nf_hook(flow: &Flow, drop: &Hop) -> &'static str {
    let before: Vec<&Hop> = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode == drop.netns_inode && h.ts_ns <= drop.ts_ns && h.dir == drop.dir)
        .collect();
    let ingress = before.iter().any(|h| h.is_ingress());
    let route = before.iter().rev().find_map(|h| match &h.data {
        HopData::Fib(f) if f.err == 0 => Some(h.data.is_local_route()),
        _ => None,
    });
    match (ingress, route) {
        (true, Some(true)) => "INPUT",
        (true, Some(_)) => "FORWARD",
        (true, None) if flow.is_outer(&drop.tuple) => PREROUTING_OR_INPUT,
        (true, None) => "PREROUTING",
        (false, _) if before.iter().any(|h| h.is_egress()) => "POSTROUTING",
        (false, _) => "OUTPUT",
    }
}

/// The drop reasons the rules of this file explain, with the facts they
/// read (verdict/explains.rs; the causes written as one module declare
/// theirs beside their signals).
pub const EXPLAINS: &[super::explains::Explains] = &[
    super::explains::Explains {
        reasons: &[DropReason::IpInaddrerrors],
        cause: "forwarding is off on the device the packet came in by (rules::forwarding_off)",
        at: "ip_forward, ip6_forward, ip_error",
        facts: "the device's forwarding sysctls (net.ipv4.conf.DEV.forwarding, net.ipv6.conf.all.forwarding)",
    },
    super::explains::Explains {
        reasons: &[DropReason::NoSocket],
        cause: "nothing listens on the port, or only on another address (rules::no_listener)",
        at: "",
        facts: "the namespace's TCP listeners and UDP sockets",
    },
    super::explains::Explains {
        reasons: &[DropReason::IpRpfilter],
        cause: "the reverse-path filter: the route back to the source leaves by another device (rules::rp_filter_where)",
        at: "",
        facts: "the rp_filter sysctls, the route back to the source",
    },
    super::explains::Explains {
        reasons: &[DropReason::PktTooBig],
        cause: "the packet is larger than the MTU of the device it must leave by (rules::too_big_where)",
        at: "",
        facts: "the devices' MTUs (RTM_GETLINK)",
    },
    super::explains::Explains {
        reasons: &[DropReason::NetfilterDrop],
        cause: "the netfilter rule or policy that dropped it; a full conntrack table, a NAT clash, an invalid conntrack state; the route looked up again after NAT (rules::netfilter_where and the conntrack rules)",
        at: "",
        facts: "nf_tables and iptables rules, their counters and nftrace; the conntrack table's size and counters; the route to the translated destination",
    },
    super::explains::Explains {
        reasons: &[
            DropReason::NeighFailed,
            DropReason::NeighQueuefull,
            DropReason::NeighDead,
        ],
        cause: "a neighbour that does not answer ARP/NDP: the route's gateway, the destination or the endpoint NAT chose (rules::neigh_where)",
        at: "",
        facts: "neighbour events, the route's gateway, the flow's NAT translation",
    },
    super::explains::Explains {
        reasons: &[DropReason::IpInnoroutes, DropReason::IpOutnoroutes],
        cause: "no route to the destination: the policy rules and tables looked up (rules::no_route_where)",
        at: "",
        facts: "the namespace's routing rules and tables",
    },
    super::explains::Explains {
        reasons: &[DropReason::SocketRcvbuff],
        cause: "the receiving socket's buffer is full (rules::socket_buffer_full)",
        at: "",
        facts: "the socket's receive queue (sock_diag)",
    },
];

/// A NO_SOCKET drop's `where`: the site, and what listens on the port
/// instead ([`no_listener`]).
fn no_socket_where(drop: &Hop, func: &str, env: &dyn Env, evidence: &mut Vec<Evidence>) -> String {
    match no_listener(drop, env) {
        Some((ev, said)) => {
            evidence.push(ev);
            format!("{func} in netns {}: {said}", drop.netns)
        }
        None => format!("{func} in netns {}", drop.netns),
    }
}

/// The packet was dropped (skb:kfree_skb with a reason) before any delivery.
pub fn dropped(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let drop = flow.hops.iter().find(|h| h.hook == Hook::Drop)?;
    let HopData::Drop(dd) = &drop.data else {
        return None;
    };
    let (reason, location) = (&dd.reason, &dd.location);
    if delivery_evidence(flow)
        .iter()
        .any(|(h, _)| h.ts_ns < drop.ts_ns)
    {
        return None;
    }
    let func = func_of(location);
    let fn_part = if func.is_empty() {
        String::new()
    } else {
        format!(" ({func})")
    };
    let mut evidence = Vec::new();
    let unknown = dd.reason_from == ReasonFrom::Unknown;
    let mut reason: DropReason = reason.clone();
    let mut inferred_here = false;
    let where_ = match &reason {
        _ if let Some(family) = forwarding_off(drop, env, func, &reason, unknown) => {
            if unknown {
                // ip_error()/ip6_forward() with forwarding off: IP_INADDRERRORS.
                reason = DropReason::IpInaddrerrors;
                inferred_here = true;
                evidence.push(Evidence::DropReasonInferred {
                    location: func.to_string(),
                    reason: Some(reason.clone()),
                    one_of: Vec::new(),
                    site_only: false,
                });
            }
            forwarding_where(drop, func, family, &mut evidence)
        }
        // Not the outer packet of a tunnel: its port is the tunnel's
        // (verdict/tunnel.rs, through device_cause).
        DropReason::NoSocket if !flow.is_outer(&drop.tuple) => {
            no_socket_where(drop, func, env, &mut evidence)
        }
        DropReason::IpRpfilter => rp_filter_where(flow, drop, env, &fn_part, &mut evidence),
        DropReason::PktTooBig => too_big_where(flow, drop, env, &mut evidence),
        DropReason::NetfilterDrop if let Some(ct) = conntrack_clash(flow, drop, env) => {
            let hook = nf_hook_named(flow, drop, &mut evidence, None, true);
            evidence.push(ct.0);
            format!(
                "netfilter {hook}{fn_part} in netns {}: {}",
                drop.netns, ct.1
            )
        }
        DropReason::NetfilterDrop if let Some(ct) = conntrack_full(flow, drop, env) => {
            let at = netfilter_where(flow, drop, env, &fn_part, &mut evidence);
            evidence.push(ct.0);
            format!("{at}: {}", ct.1)
        }
        DropReason::NetfilterDrop if let Some(ct) = conntrack_invalid(flow, drop, env) => {
            let at = netfilter_where(flow, drop, env, &fn_part, &mut evidence);
            evidence.push(ct.0);
            format!("{at}: {}", ct.1)
        }
        DropReason::NetfilterDrop
            if let Some((ev, said)) = route_refused(flow, drop, env, true) =>
        {
            let hook = nf_hook_named(flow, drop, &mut evidence, None, false);
            evidence.push(ev);
            format!("netfilter {hook}{fn_part} in netns {}: {said}", drop.netns)
        }
        DropReason::NetfilterDrop => netfilter_where(flow, drop, env, &fn_part, &mut evidence),
        DropReason::NeighFailed | DropReason::NeighQueuefull | DropReason::NeighDead => {
            let at = neigh_where(flow, drop, &mut evidence);
            match neigh_device_cause(flow, drop, env) {
                Some((said, ev)) => {
                    evidence.push(ev);
                    format!("{at}; {said}")
                }
                None => at,
            }
        }
        DropReason::IpInnoroutes | DropReason::IpOutnoroutes => {
            no_route_where(flow, drop, env, &reason, &mut evidence)
        }
        _ if let Some((at, ev)) = device_cause(flow, drop, &reason, func, env) => {
            evidence.push(ev);
            at
        }
        _ if let Some(j) = super::bpf_drop::judge(flow, drop, &reason, func, env) => {
            if let Some(r) = j.inferred {
                reason = r.clone();
                inferred_here = true;
                evidence.push(super::bpf_drop::inferred_at(func, r));
            }
            evidence.extend(j.evidence);
            j.where_
        }
        _ if let Some((ev, said)) = route_refused(flow, drop, env, false) => {
            evidence.push(ev);
            format!("{func} in netns {}: {said}", drop.netns)
        }
        _ if func.is_empty() => format!("kfree_skb in netns {}", drop.netns),
        _ => format!("{func} in netns {}", drop.netns),
    };
    let where_ = super::xdp_moved::told(flow, drop, env, where_, &mut evidence);
    let mut v = verdict(
        Kind::Dropped,
        reason.clone(),
        where_,
        &drop.netns,
        Some(drop.dev.to_string()),
    );
    v.reason_inferred = inferred_here;
    v.add(dropped_at(drop, location));
    v.add_all(evidence);
    if reason == DropReason::NetfilterDrop {
        v.add_all(local_target_evidence(flow, env, drop));
    }
    v.add_all(side_evidence(flow));
    Some(v)
}

/// The causes written as one module that judge a drop by its function
/// and the device's own settings, in order: a VXLAN device
/// (verdict/tunnel.rs), a bridge (verdict/bridge.rs), a device sysctl
/// (verdict/sysctl.rs), a veth's other end (verdict/veth.rs).
fn device_cause(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    super::tunnel::judge(flow, drop, reason, func, env)
        .or_else(|| super::bridge::judge(flow, drop, func, env))
        .or_else(|| super::sysctl::judge(flow, drop, reason, func, env))
        .or_else(|| super::veth::judge(flow, drop, func, env))
        .or_else(|| super::source_addr::judge(flow, drop, reason, func, env))
        .or_else(|| super::checksum::judge(flow, drop, reason, func, env))
        .or_else(|| super::cgroup_skb::judge(drop, reason, func, env))
        .or_else(|| super::routing_loop::judge(flow, drop, reason, func, env))
        .or_else(|| super::qdisc_drop::judge(flow, drop, reason, func, env))
        .or_else(|| super::xfrm_policy::judge(drop, reason, func, env))
        .or_else(|| super::fragments::judge(flow, drop, reason, func, env))
        .or_else(|| super::no_protocol::judge(drop, reason, func))
}

/// The device a neighbour failure happened on explains it, or its other
/// end when it is a veth: that end down (verdict/veth.rs), a bridge port that drops the neighbour's
/// answer or the request (verdict/bridge.rs), IPv6 disabled at the other
/// end (verdict/sysctl.rs), a VXLAN device that cannot resolve a remote
/// VTEP (verdict/tunnel.rs).
fn neigh_device_cause(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<(String, Evidence)> {
    if let Some(r) = super::veth::down_at_other_end(drop, env) {
        return Some((r.to_string(), Evidence::VethOtherEnd(r)));
    }
    if let Some(r) = super::bridge::behind_bridge(drop, env) {
        let said = if r.other_end_of.is_some() {
            r.to_string()
        } else {
            format!("bridge {}: {}", r.bridge, r.said())
        };
        return Some((said, Evidence::BridgeWillNotForward(r)));
    }
    if let Some(r) = super::sysctl::at_other_end(flow, drop, env) {
        return Some((r.to_string(), Evidence::SysctlRefused(r)));
    }
    super::tunnel::unresolved(flow, drop, env)
        .or_else(|| super::tunnel::remote_unanswered(flow, drop, env))
        .map(|r| (r.to_string(), Evidence::TunnelWillNotSend(r)))
}

/// A neighbour resolution failure: the neighbour entry's own address, else
/// the next hop the routing decision there chose (its gateway), else the
/// destination itself (on-link); the endpoint NAT sent it to, when that
/// is the one that did not answer.
fn neigh_where(flow: &Flow, drop: &Hop, evidence: &mut Vec<Evidence>) -> String {
    let neigh = neigh_addr(flow, drop);
    // The host-unreachable about a tunnel's outer packet goes to the node
    // that wrapped it (the outer source), never to the client.
    if !flow.is_outer(&drop.tuple) {
        evidence.push(Evidence::HostUnreachableInferred);
    }
    if let Some(t) = flow
        .translated
        .as_ref()
        .filter(|t| t.dst == neigh && t.dst != flow.key.dst)
    {
        evidence.push(Evidence::EndpointUnanswered {
            netns: drop.netns.to_string(),
            endpoint: t.dst,
            original: flow.key.dst,
        });
    }
    format!(
        "neighbour resolution (ARP/NDP) for {neigh} failed on {} in netns {}",
        if drop.dev.is_empty() { "-" } else { &drop.dev },
        drop.netns
    )
}

/// The address a neighbour failure was for: the neighbour entry's own,
/// else the gateway of the routing decision there, else the destination.
/// For the flow's outer packet (a tunnel wrapped it), the inner packet's
/// route is not the one: its destination, the remote VTEP, unless a
/// neighbour entry of its device says otherwise (the outer route's
/// lookup carries none of the flow's addresses and is not followed).
pub(super) fn neigh_addr(flow: &Flow, drop: &Hop) -> IpAddr {
    let outer = flow.is_outer(&drop.tuple);
    flow.hops
        .iter()
        .find_map(|h| match &h.data {
            HopData::Neigh(n)
                if h.netns_inode == drop.netns_inode && (!outer || h.ifindex == drop.ifindex) =>
            {
                Some(n.addr)
            }
            _ => None,
        })
        .or_else(|| {
            (!outer)
                .then(|| next_hop_gw(flow, drop.netns_inode))
                .flatten()
        })
        .unwrap_or(drop.tuple.dst)
}

/// The gateway of the request's routing decision in namespace `netns`,
/// when it chose one.
pub(super) fn next_hop_gw(flow: &Flow, netns: u32) -> Option<IpAddr> {
    flow.hops
        .iter()
        .filter(|h| h.netns_inode == netns && h.dir == Dir::Request)
        .find_map(|h| match &h.data {
            HopData::Fib(f) if f.err == 0 => f.gw,
            _ => None,
        })
}

/// Functions that drop a packet because of its route: ip_error() frees a
/// forwarded packet whose route is an error (unreachable, prohibit,
/// blackhole: net/ipv4/route.c), dst_discard()/dst_discard_out() are a
/// blackhole route's input and output, ip6_pkt_drop()/ip6_pkt_discard*()
/// IPv6's refusals (net/ipv6/route.c).
const ROUTE_DROP_FUNCS: &[&str] = &[
    "ip_error",
    "dst_discard",
    "dst_discard_out",
    "ip6_pkt_drop",
    "ip6_pkt_discard",
    "ip6_pkt_discard_out",
    "ip6_pkt_prohibit",
    "ip6_pkt_prohibit_out",
];

/// The route lookup a drop calls for, whenever its signals appear (the
/// facts read it; [`route_refused`] reads the answer): a request dropped by
/// netfilter (the lookup again after NAT, ip_route_me_harder(), drops
/// with NETFILTER_DROP and no rule) or in the routing code: its
/// destination after NAT, as that namespace routes it from the device it
/// came in by (none: sent from there).
pub fn route_query(flow: &Flow, h: &Hop) -> Option<RouteQuery> {
    let HopData::Drop(d) = &h.data else {
        return None;
    };
    let func = func_of(&d.location);
    let signals = matches!(
        &d.reason,
        DropReason::NetfilterDrop | DropReason::IpInnoroutes | DropReason::IpOutnoroutes
    ) || ROUTE_DROP_FUNCS.contains(&func);
    if h.dir != Dir::Request || !signals {
        return None;
    }
    let dst = flow.translated.as_ref().map_or(h.tuple.dst, |t| t.dst);
    let iif = flow
        .hops
        .iter()
        .rfind(|x| {
            x.netns_inode == h.netns_inode
                && x.dir == Dir::Request
                && x.ts_ns <= h.ts_ns
                && x.is_ingress()
                && !x.dev.is_empty()
        })
        .map(|x| x.dev.to_string());
    let src = if h.tuple.src.is_unspecified() {
        flow.key.src
    } else {
        h.tuple.src
    };
    Some(RouteQuery { dst, src, iif })
}

/// The route the kernel refused the dropped request with, when the facts
/// hold that lookup and it was refused (blackhole, unreachable, prohibit,
/// no route): the evidence and the words for `where`. `netfilter`: a
/// NETFILTER_DROP, which only the lookup again after NAT in OUTPUT explains,
/// and only when no rule was traced or counted there.
fn route_refused(
    flow: &Flow,
    drop: &Hop,
    env: &dyn Env,
    netfilter: bool,
) -> Option<(Evidence, String)> {
    let q = route_query(flow, drop)?;
    if netfilter
        && (q.iif.is_some()
            || traced_rule(flow, env, drop.netns_inode).is_some()
            || blame_rule(flow, env, drop.netns_inode).is_some())
    {
        return None;
    }
    let looked = env
        .routing(drop.netns_inode)?
        .lookups
        .iter()
        .find(|l| l.query == q)?;
    if !looked.outcome.refused() {
        return None;
    }
    let original = flow
        .translated
        .as_ref()
        .filter(|t| t.dst != flow.key.dst)
        .map(|_| flow.key.dst);
    let what = match original {
        Some(o) => format!("{} (its destination after NAT; it was sent to {o})", q.dst),
        None => q.dst.to_string(),
    };
    let said = if netfilter {
        format!(
            "no rule dropped it: the route lookup again after NAT (ip_route_me_harder()) for {what} found {}",
            looked.outcome.said()
        )
    } else {
        let from = q
            .iif
            .as_deref()
            .map_or_else(String::new, |d| format!(" from {d}"));
        format!(
            "the route lookup for {what}{from} found {}",
            looked.outcome.said()
        )
    };
    let ev = Evidence::RouteRefused {
        netns: drop.netns.to_string(),
        dst: q.dst,
        original,
        iif: q.iif,
        outcome: looked.outcome.clone(),
        after_nat_in_output: netfilter,
    };
    Some((ev, said))
}

/// `where` of a no-route drop: each table lookup that failed (the fib
/// tracepoint), and, when the namespace's rules were read, the rules that
/// selected the packet in order with how many routes their tables hold
/// (a lookup in an empty table is passed over), or the rule whose action
/// (unreachable, prohibit, blackhole) refused it.
fn no_route_where(
    flow: &Flow,
    drop: &Hop,
    env: &dyn Env,
    reason: &DropReason,
    evidence: &mut Vec<Evidence>,
) -> String {
    let tables: Vec<String> = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode == drop.netns_inode)
        .filter_map(|h| match &h.data {
            HopData::Fib(f) if f.err != 0 => Some(format!(
                "{}: {}",
                crate::node::route::table_name(f.table),
                crate::model::hop::errno_name(f.err)
            )),
            _ => None,
        })
        .collect();
    let dst = drop.tuple.dst;
    let mut said = if tables.is_empty() {
        format!(
            "routing decision (fib_lookup) in netns {}: no route to {dst}",
            drop.netns
        )
    } else {
        format!(
            "routing decision (fib_lookup) in netns {}: no route to {dst} [{}]",
            drop.netns,
            tables.join("; ")
        )
    };
    if let Some(r) = env.routing(drop.netns_inode) {
        // Locally sent packets are looked up with iif lo.
        let iif = if *reason == DropReason::IpOutnoroutes {
            "lo"
        } else {
            drop.dev.as_str()
        };
        let (rules, refused) = consulted_rules(r, drop.tuple.src, dst, iif);
        if !rules.is_empty() {
            said.push_str(&format!(" after rules {}", rules.join(", ")));
            evidence.push(Evidence::NoRouteAfterRules {
                netns: drop.netns.to_string(),
                dst,
                rules,
                refused,
            });
        }
    }
    said
}

/// The rules that selected a packet from `src` to `dst` in by `iif`, in
/// order, each lookup with its table's size, up to one whose action
/// refuses the packet (then `true`).
fn consulted_rules(
    r: &crate::node::route::Routing,
    src: IpAddr,
    dst: IpAddr,
    iif: &str,
) -> (Vec<String>, bool) {
    let fam = if dst.is_ipv4() { 4 } else { 6 };
    let mut out = Vec::new();
    for rule in r.rules.iter().filter(|x| x.selects(src, dst, iif)) {
        match rule.action {
            crate::node::route::FR_ACT_TO_TBL => {
                let n = r.routes(fam, rule.table);
                out.push(match n {
                    0 => format!("{} (empty)", rule.text()),
                    1 => format!("{} (1 route)", rule.text()),
                    n => format!("{} ({n} routes)", rule.text()),
                });
            }
            6..=8 => {
                out.push(rule.text());
                return (out, true);
            }
            _ => out.push(rule.text()),
        }
    }
    (out, false)
}

/// Forwarding off where the packet came in: ip_error() drops a packet for
/// another host that came in by a device with forwarding off
/// (IP_INADDRERRORS or IP_INNOROUTES, no ICMP sent), ip6_forward() one
/// whose namespace has net.ipv6.conf.all.forwarding = 0
/// (IP_INADDRERRORS). The family, when the device's sysctl says so.
/// On a kernel without drop reasons (`unknown`: the location did not
/// tell), forwarding off is what those sites drop for: the reason is then
/// IP_INADDRERRORS, as 6.x gives it.
fn forwarding_off(
    drop: &Hop,
    env: &dyn Env,
    func: &str,
    reason: &DropReason,
    unknown: bool,
) -> Option<&'static str> {
    env.links(drop.netns_inode)
        .iter()
        .filter(|l| l.dev == drop.dev.as_str())
        .find_map(|l| match func {
            "ip_error" if l.forwarding_v4 == Some(false) => Some("ipv4"),
            "ip6_forward"
                if (*reason == DropReason::IpInaddrerrors || unknown)
                    && l.forwarding_v6 == Some(false) =>
            {
                Some("ipv6")
            }
            _ => None,
        })
}

fn forwarding_where(drop: &Hop, func: &str, family: &str, evidence: &mut Vec<Evidence>) -> String {
    evidence.push(Evidence::ForwardingDisabled {
        netns: drop.netns.to_string(),
        dev: drop.dev.to_string(),
        family: family.into(),
    });
    format!(
        "{func} in netns {}: forwarding is disabled on {} ({})",
        drop.netns,
        drop.dev,
        super::evidence::forwarding_sysctl(family, &drop.dev)
    )
}

/// `where` of a NETFILTER_DROP: the hook (nf_hook_slow's own word with
/// the function hooks, else inferred), the chains that said so, and the
/// rule whose counter moved.
fn netfilter_where(
    flow: &Flow,
    drop: &Hop,
    env: &dyn Env,
    fn_part: &str,
    evidence: &mut Vec<Evidence>,
) -> String {
    let traced = traced_rule(flow, env, drop.netns_inode);
    let counted = traced
        .is_none()
        .then(|| blame_rule(flow, env, drop.netns_inode))
        .flatten();
    let hook = nf_hook_named(
        flow,
        drop,
        evidence,
        traced
            .and_then(|t| t.hook.as_deref())
            .or_else(|| counted.and_then(|(r, _)| builtin_chain_hook(&r.chain))),
        false,
    );
    if let Some(t) = traced {
        return traced_where(t, &hook, fn_part, drop, evidence);
    }
    match counted {
        Some((rule, delta)) => {
            evidence.push(Evidence::rule_moved(rule, *delta));
            // Recordings made before the family was kept have none.
            let family = if rule.family.is_empty() {
                String::new()
            } else {
                format!("{} ", rule.family)
            };
            format!(
                "netfilter {hook}{fn_part} in netns {}: rule `{}` (table {family}{}, chain {})",
                drop.netns, rule.text, rule.table, rule.chain
            )
        }
        None => format!("netfilter {hook}{fn_part} in netns {}", drop.netns),
    }
}

/// The netfilter hook of a drop, with its evidence: nf_hook_slow's own
/// word (function hooks), else the hook of the base chain nf_tables
/// tracing saw the packet dropped from, or the built-in chain of the rule
/// whose counter moved (`traced`: its evidence says the chain), else
/// inferred from the packet's path (which misses the routing
/// decisions after DNAT: the fib tracepoints are followed by the target's
/// address). A drop where conntrack confirms a new entry (`confirm`) is at
/// the last hook the packet passes (ipv4_confirm()/ipv6_confirm() run at
/// priority NF_IP_PRI_CONNTRACK_CONFIRM of POSTROUTING and INPUT): past
/// the routing decision, a path that looks like FORWARD or OUTPUT ends
/// there.
fn nf_hook_named(
    flow: &Flow,
    drop: &Hop,
    evidence: &mut Vec<Evidence>,
    traced: Option<&str>,
    confirm: bool,
) -> String {
    let seen = nf_func_hops(flow, drop);
    let hook = if let Some(h) = seen.hook {
        evidence.push(Evidence::NfHookDrop {
            hook: h.clone(),
            backend: seen.backend.clone(),
        });
        // "ipv4 INPUT" -> "INPUT", as the inferred name.
        h.rsplit(' ').next().unwrap_or(&h).to_string()
    } else if let Some(h) = traced {
        h.to_string()
    } else {
        let h = match infer_nf_hook(flow, drop) {
            "INPUT" if confirm => "INPUT",
            _ if confirm => "POSTROUTING",
            h => h,
        };
        evidence.push(Evidence::NfHookInferred {
            hook: h.to_string(),
        });
        h.to_string()
    };
    evidence.extend(seen.chains);
    hook
}

/// `where` of an IP_RPFILTER drop: fib_validate_source() looks the
/// source up as a destination (the fib tracepoint sees it: the reply
/// direction, in the drop's namespace), and the device's rp_filter mode.
fn rp_filter_where(
    flow: &Flow,
    drop: &Hop,
    env: &dyn Env,
    fn_part: &str,
    evidence: &mut Vec<Evidence>,
) -> String {
    let back = flow.hops.iter().rev().find_map(|h| match &h.data {
        HopData::Fib(f)
            if h.netns_inode == drop.netns_inode
                && h.dir == Dir::Reply
                && h.tuple.dst == drop.tuple.src =>
        {
            Some(if f.err == 0 {
                f.nh_dev.to_string()
            } else {
                String::new()
            })
        }
        _ => None,
    });
    let mode = env
        .links(drop.netns_inode)
        .iter()
        .find(|l| l.dev == drop.dev.as_str())
        .and_then(|l| l.rp_filter);
    match back {
        Some(back_dev) => {
            let said = if back_dev.is_empty() {
                format!("no route back to {}", drop.tuple.src)
            } else {
                format!("the route back to {} leaves by {back_dev}", drop.tuple.src)
            };
            evidence.push(Evidence::RpFilterMismatch {
                netns: drop.netns.to_string(),
                dev: drop.dev.to_string(),
                mode,
                src: drop.tuple.src,
                back_dev,
            });
            format!(
                "reverse-path filter{fn_part} in netns {}: {} came in by {}{}, but {said}",
                drop.netns,
                drop.tuple.src,
                drop.dev,
                match mode {
                    Some(1) => " (rp_filter = 1, strict)",
                    Some(2) => " (rp_filter = 2, loose)",
                    _ => "",
                }
            )
        }
        None => format!("reverse-path filter{fn_part} in netns {}", drop.netns),
    }
}

/// A NETFILTER_DROP that no rule explains (neither tracing nor a
/// counter), past the routing decision (not claimed where the path does
/// not show it passed: PREROUTING, or PREROUTING or INPUT), in a
/// namespace whose conntrack counted insertion failures and whose table
/// is not full: the packet's
/// new entry lost a clash at confirmation (__nf_conntrack_confirm()).
/// The reply tuple it needed is the packet's tuple after NAT (NAT runs
/// before confirmation), reversed. The fact and what `where` says of it.
fn conntrack_clash(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<(Evidence, String)> {
    let t = env.conntrack(drop.netns_inode).filter(|t| t.clashed())?;
    if traced_rule(flow, env, drop.netns_inode).is_some()
        || blame_rule(flow, env, drop.netns_inode).is_some()
        || matches!(
            infer_nf_hook(flow, drop),
            "PREROUTING" | PREROUTING_OR_INPUT
        )
    {
        return None;
    }
    let (after, key) = (&*drop.tuple, &flow.key);
    let snat = (after.src, after.sport) != (key.src, key.sport);
    let dnat = (after.dst, after.dport) != (key.dst, key.dport);
    let reply_src = Endpoint::new(after.dst, after.dport);
    let reply_dst = Endpoint::new(after.src, after.sport);
    let nat = match (snat, dnat) {
        (true, true) => {
            format!(" (after source NAT to {reply_dst} and destination NAT to {reply_src})")
        }
        (true, false) => format!(" (after source NAT to {reply_dst})"),
        (false, true) => format!(" (after destination NAT to {reply_src})"),
        (false, false) => String::new(),
    };
    let said = format!(
        "conntrack could not insert this connection: its reply tuple {reply_src} -> {reply_dst}{nat} is another connection's (insert_failed {})",
        t.insert_failed
    );
    Some((
        Evidence::ConntrackInsertFailed {
            netns: drop.netns.to_string(),
            reply_src,
            reply_dst,
            snat,
            dnat,
            insert_failed: t.insert_failed,
            drop: t.drop,
        },
        said,
    ))
}

/// A NETFILTER_DROP that no rule's counter explains, in a namespace whose
/// conntrack table is full (or whose conntrack dropped packets for want
/// of an entry): conntrack itself dropped it. The fact and what `where`
/// says of it.
fn conntrack_full(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<(Evidence, String)> {
    let t = env.conntrack(drop.netns_inode).filter(|t| t.full())?;
    if blame_rule(flow, env, drop.netns_inode).is_some() {
        return None;
    }
    let said = format!(
        "the conntrack table is full (nf_conntrack_count {} of nf_conntrack_max {}; {} packets dropped by conntrack)",
        t.count, t.max, t.drop
    );
    Some((
        Evidence::ConntrackFull {
            netns: drop.netns.to_string(),
            entries: t.count,
            max: t.max,
            drop: t.drop,
            early_drop: t.early_drop,
            insert_failed: t.insert_failed,
        },
        said,
    ))
}

/// A TCP reply (the SYN-ACK, say) dropped by netfilter, and the client
/// never completed its handshake: the server took the request (so
/// `dropped` passed it by), but the connection failed. Named when a rule
/// that drops what conntrack finds INVALID did it, or when nf_tables
/// tracing (which follows the target's replies) saw the rule that did.
/// Before `delivered`, which would report the server's socket and the
/// drop as a later one.
pub fn reply_dropped(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    if flow.key.proto != 6
        || delivery_evidence(flow)
            .iter()
            .any(|(_, d)| *d == Delivery::ClientHandshake)
    {
        return None;
    }
    let (drop, dd) = flow.hops.iter().find_map(|h| match &h.data {
        HopData::Drop(d) if h.dir == Dir::Reply && d.reason == DropReason::NetfilterDrop => {
            Some((h, d))
        }
        _ => None,
    })?;
    let invalid = conntrack_invalid(flow, drop, env);
    if invalid.is_none() && traced_rule(flow, env, drop.netns_inode).is_none() {
        return None;
    }
    let func = func_of(&dd.location);
    let fn_part = if func.is_empty() {
        String::new()
    } else {
        format!(" ({func})")
    };
    let mut evidence = Vec::new();
    let at = netfilter_where(flow, drop, env, &fn_part, &mut evidence);
    let (fact, said) = invalid.map_or_else(
        || {
            (
                None,
                "the server's reply was dropped there: the client never completed its handshake"
                    .to_string(),
            )
        },
        |(fact, said)| (Some(fact), said),
    );
    let mut v = verdict(
        Kind::Dropped,
        DropReason::NetfilterDrop,
        format!("{at}: {said}"),
        &drop.netns,
        Some(drop.dev.to_string()),
    );
    v.add(dropped_at(drop, &dd.location));
    v.add_all(evidence);
    v.add_all(fact);
    v.add_all(delivered_and_side_evidence(flow));
    Some(v)
}

/// A NETFILTER_DROP by a rule that drops what conntrack finds INVALID
/// (`ct state invalid drop`, kube-proxy's and most stateful firewalls'):
/// the namespace's conntrack counter, and whether the flow's requests
/// passed that namespace at all. A reply dropped where no request went
/// is asymmetric routing: conntrack never saw the connection start.
/// iptables-nft's `-m conntrack --ctstate INVALID` reads back as an
/// opaque `xt match "conntrack"`: such a rule counts when the namespace's
/// conntrack counted invalid packets, at least as many as the rule
/// dropped.
fn conntrack_invalid(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<(Evidence, String)> {
    let (rule, delta) = blame_rule(flow, env, drop.netns_inode)?;
    let text = rule.text.to_ascii_lowercase();
    let invalid = env.conntrack(drop.netns_inode).map(|t| t.invalid);
    let says_invalid = text.contains("ct state invalid")
        || text.contains("ctstate invalid")
        || text.contains("--state invalid");
    let xt_conntrack =
        text.contains("xt match \"conntrack\"") && invalid.is_some_and(|n| n >= *delta && n > 0);
    if !says_invalid && !xt_conntrack {
        return None;
    }
    // A request packet on a device there (not a route lookup: the
    // reverse-path check of a reply looks its source up as a request).
    let requests_here = flow.hops.iter().any(|h| {
        h.netns_inode == drop.netns_inode
            && h.dir == Dir::Request
            && (h.is_ingress() || h.is_egress())
    });
    let asymmetric = drop.dir == Dir::Reply && !requests_here;
    let said = if asymmetric {
        "conntrack found the reply INVALID: the requests never passed this namespace (asymmetric routing)"
    } else {
        "conntrack found the packet INVALID"
    };
    Some((
        Evidence::ConntrackInvalid {
            netns: drop.netns.to_string(),
            dir: drop.dir,
            rule: rule.text.clone(),
            invalid,
            requests_seen: requests_here,
        },
        said.to_string(),
    ))
}

/// For a NO_SOCKET drop: the namespace's sockets on that port, when they
/// were read (its links were, at the same time) and none would have taken
/// the packet (an exact or wildcard bind would have).
fn no_listener(drop: &Hop, env: &dyn Env) -> Option<(Evidence, String)> {
    let t = &drop.tuple;
    let proto = match t.proto {
        6 => "tcp",
        17 => "udp",
        _ => return None,
    };
    if env.links(drop.netns_inode).is_empty() {
        return None;
    }
    let bound: Vec<Endpoint> = env
        .bound(drop.netns_inode)
        .iter()
        .filter(|b| b.proto == proto && b.port == t.dport)
        .map(|b| Endpoint::new(b.addr, b.port))
        .collect();
    if bound
        .iter()
        .any(|e| e.addr == t.dst || e.addr.is_unspecified())
    {
        return None;
    }
    let (netns, endpoint) = (drop.netns.to_string(), Endpoint::new(t.dst, t.dport));
    Some(if bound.is_empty() {
        (
            Evidence::NoListener {
                netns,
                proto: proto.into(),
                endpoint,
            },
            format!("nothing listens on {proto} {endpoint}"),
        )
    } else {
        let b: Vec<String> = bound.iter().map(ToString::to_string).collect();
        let said = format!(
            "nothing listens on {proto} {endpoint} (port {} is bound there on {} only)",
            endpoint.port,
            b.join(", ")
        );
        (
            Evidence::ListensElsewhere {
                netns,
                proto: proto.into(),
                endpoint,
                bound,
            },
            said,
        )
    })
}

/// What the netfilter function hooks said about a drop: the hook
/// (nf_hook_slow's family and hook number) and the tables/chains that
/// returned a non-ACCEPT verdict, in the drop's namespace and direction.
struct NfSeen {
    hook: Option<String>,
    backend: String,
    chains: Vec<Evidence>,
}

fn nf_func_hops(flow: &Flow, drop: &Hop) -> NfSeen {
    let mut seen = NfSeen {
        hook: None,
        backend: String::new(),
        chains: vec![],
    };
    for h in flow
        .hops
        .iter()
        .filter(|h| h.netns_inode == drop.netns_inode && h.dir == drop.dir && h.ts_ns <= drop.ts_ns)
    {
        if let HopData::Func(f) = &h.data {
            let crate::model::hop::FuncData {
                func,
                backend,
                ret,
                nf_hook,
                detail,
                ..
            } = &**f;
            match func.as_str() {
                "nf_hook_slow" if ret.is_some_and(|r| r < 0) => {
                    seen.hook = nf_hook.as_ref().map(std::string::ToString::to_string);
                    seen.backend = backend.to_string();
                }
                "nft_do_chain" | "ipt_do_table" => seen.chains.push(Evidence::NfChainVerdict {
                    func: func.to_string(),
                    backend: backend.to_string(),
                    detail: detail.clone(),
                }),
                _ => {}
            }
        }
    }
    seen
}

/// The rule nf_tables tracing saw drop this flow's packet in namespace
/// `netns`: the latest trace of its tuple, before or after NAT.
fn traced_rule<'a>(flow: &Flow, env: &'a dyn Env, netns: u32) -> Option<&'a NfTraced> {
    env.nf_traced(netns)
        .iter()
        .rev()
        .find(|t| super::kube::is_flows(flow, &t.tuple))
}

/// `where` and evidence of a drop nf_tables tracing named.
fn traced_where(
    t: &NfTraced,
    hook: &str,
    fn_part: &str,
    drop: &Hop,
    evidence: &mut Vec<Evidence>,
) -> String {
    evidence.push(Evidence::NfRuleTraced {
        family: t.family.clone(),
        table: t.table.clone(),
        chain: t.chain.clone(),
        handle: t.handle,
        rule: t.rule.clone(),
        comment: t.comment.clone(),
        verdict: t.verdict.clone(),
        via: t.via.clone(),
        element: t.element.clone(),
        hook: t.hook.clone(),
        method: NfMethod::Nftrace,
    });
    let what = if t.rule.is_empty() {
        format!("{} of chain {}", t.verdict, t.chain)
    } else {
        format!("rule `{}`", t.rule)
    };
    let place = if t.rule.is_empty() {
        format!("table {} {}", t.family, t.table)
    } else {
        format!(
            "table {} {}, chain {}, handle {}",
            t.family, t.table, t.chain, t.handle
        )
    };
    let element = t.element.as_ref().map_or(String::new(), |e| {
        let c = e
            .comment
            .as_ref()
            .map_or(String::new(), |c| format!(" \"{c}\""));
        format!(
            ", sent there by verdict map {} element `{}`{c}",
            e.map, e.key
        )
    });
    let kube = super::kube::drop_reading(t).map_or(String::new(), |e| {
        let said = e.to_string();
        evidence.push(e);
        format!(": {said}")
    });
    format!(
        "netfilter {hook}{fn_part} in netns {}: {what} ({place}; named by nftrace){element}{kube}",
        drop.netns
    )
}

/// The drop/reject rule whose counter moved, preferring one that names the
/// flow's destination.
fn blame_rule<'a>(flow: &Flow, env: &'a dyn Env, netns: u32) -> Option<&'a (NfRule, u64)> {
    let moved = env.nf_moved(netns);
    let dsts = flow.dsts();
    moved
        .iter()
        .find(|(r, _)| dsts.iter().any(|d| r.names_destination(*d)))
        .or(moved.first())
}

/// The destination is an address of the namespace that dropped it (a
/// Service/LB IP on kube-ipvs0): the node answers ICMP echo for it itself,
/// which is why ping works while the flow does not (incident 2).
fn local_target_evidence(flow: &Flow, env: &dyn Env, drop: &Hop) -> Option<Evidence> {
    let dsts = flow.dsts();
    let a = env
        .addrs(drop.netns_inode)?
        .iter()
        .find(|a| dsts.contains(&a.addr) && a.dev != "lo")?;
    Some(Evidence::LocalDestination {
        addr: a.addr,
        dev: a.dev.clone(),
        netns: drop.netns.to_string(),
    })
}

/// Incident 2: the packet hit an IPVS virtual service that had no usable
/// real server. Seen by the IPVS function hooks (ip_vs_schedule() returned
/// NULL), or, without them, by a drop in a namespace whose IPVS table has a
/// virtual service for the destination with no real server of weight > 0.
pub fn ipvs_no_destination(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let sched = flow.hops.iter().find(|h| {
        h.dir == Dir::Request
            && matches!(&h.data, HopData::Func(f) if f.ret == Some(0) && f.func == "ip_vs_schedule")
    });
    let drop = flow
        .hops
        .iter()
        .find(|h| h.dir == Dir::Request && h.hook == Hook::Drop);
    let at = sched.or(drop)?;
    let table = env.ipvs(at.netns_inode);
    let vs = crate::node::ipvs::find(table, flow.key.proto, flow.key.dst, flow.key.dport);
    if sched.is_none() && vs.is_none_or(|v| v.usable() != 0) {
        return None;
    }
    if delivery_evidence(flow)
        .iter()
        .any(|(h, _)| h.ts_ns < at.ts_ns)
    {
        return None;
    }
    let name = vs.map_or_else(
        || {
            format!(
                "{} {}",
                crate::model::event::proto_name(flow.key.proto).to_uppercase(),
                endpoint(flow.key.dst, flow.key.dport)
            )
        },
        super::super::node::ipvs::VirtualService::name,
    );
    let mut v = verdict(
        Kind::Dropped,
        Found::IpvsNoDestination,
        format!(
            "IPVS virtual service {name} in netns {}: no usable real server",
            at.netns
        ),
        &at.netns,
        Some(at.dev.to_string()),
    );
    let mut ev = Vec::new();
    if let Some(h) = sched
        && let HopData::Func(f) = &h.data
    {
        ev.push(Evidence::IpvsNoDestination {
            netns: h.netns.to_string(),
            backend: f.backend.to_string(),
        });
    } else {
        ev.push(Evidence::IpvsHooksSilent);
    }
    ev.push(match vs {
        Some(vs) => super::node_facts::ipvs_service(vs),
        None => Evidence::IpvsNoService {
            netns: at.netns.to_string(),
        },
    });
    if let Some(a) = env
        .addrs(at.netns_inode)
        .and_then(|a| a.iter().find(|a| a.addr == flow.key.dst && a.dev != "lo"))
    {
        ev.push(Evidence::IpvsLocalAddress {
            addr: a.addr,
            dev: a.dev.clone(),
            netns: at.netns.to_string(),
        });
    }
    if let Some(d) = drop {
        let dd = match &d.data {
            HopData::Drop(dd) => Some(dd),
            _ => None,
        };
        ev.push(Evidence::RequestDropped {
            location: dd.map(|dd| dd.location.to_string()),
            reason: dd.map(|dd| dd.reason.clone()),
            netns: d.netns.to_string(),
        });
    }
    if !flow.hops.iter().any(|h| h.dir == Dir::Reply) {
        ev.push(Evidence::NoReplyLeft);
    }
    ev.extend(side_evidence(flow));
    dedup(&mut ev);
    v.add_all(ev);
    Some(v)
}

/// Packets too big for the egress device (DF set) dropped on forwarding
/// again and again (PKT_TOO_BIG, ip_forward() / ip6_forward()): the
/// sender kept sending full-size packets, so the ICMP "fragmentation
/// needed" / "packet too big" never reached it: a path-MTU black hole. The
/// handshake may have succeeded (small packets pass), so this comes
/// before `delivered`. One such drop followed by delivery is path-MTU
/// discovery working, and stays a `delivered` with a later drop.
/// The request's drops with the kernel's reason `reason`, in order.
fn request_drops(flow: &Flow, reason: DropReason) -> Vec<&Hop> {
    flow.hops
        .iter()
        .filter(|h| h.dir == Dir::Request)
        .filter(|h| matches!(&h.data, HopData::Drop(d) if d.reason == reason))
        .collect()
}

/// Did an answer reach the client: a reply a socket took or queued, or
/// the client's TCP socket established?
pub(super) fn client_answered(flow: &Flow) -> bool {
    flow.hops.iter().any(|h| {
        h.dir == Dir::Reply && matches!(h.data, HopData::SockRecv | HopData::SockQueue)
            || h.dir == Dir::Request
                && matches!(&h.data, HopData::Sock(s) if s.new_state == TcpState::Established)
    })
}

/// Where a packet was dropped, as evidence.
pub(super) fn dropped_at(h: &Hop, location: &str) -> Evidence {
    Evidence::PacketDropped {
        dir: h.dir,
        location: location.to_string(),
        dev: h.dev.to_string(),
        netns: h.netns.to_string(),
    }
}

/// The way a too-big packet would have left its namespace and came in:
/// devices and MTUs.
struct Egress {
    out_dev: String,
    mtu: Option<u32>,
    in_dev: String,
    in_mtu: Option<u32>,
}

/// [`Egress`] of the request dropped at `drop`: the routing decision for
/// it in that namespace names the way out (the kernel's own hop), the
/// namespace's last ingress before the drop the way in (ip6_forward() sets
/// the packet's device to the egress one before it drops it); the MTUs
/// are the namespace's links' (RTM_GETLINK).
fn egress(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<Egress> {
    let out_dev = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode == drop.netns_inode && h.dir == Dir::Request)
        .find_map(|h| match &h.data {
            HopData::Fib(f) if f.err == 0 && !f.nh_dev.as_str().is_empty() => {
                Some(f.nh_dev.to_string())
            }
            _ => None,
        })?;
    let in_dev = flow
        .hops
        .iter()
        .rev()
        .find(|h| {
            h.netns_inode == drop.netns_inode
                && h.dir == Dir::Request
                && h.is_ingress()
                && h.ts_ns <= drop.ts_ns
                && !h.dev.is_empty()
        })
        .map_or_else(|| drop.dev.to_string(), |h| h.dev.to_string());
    let links = env.links(drop.netns_inode);
    let mtu_of = |d: &str| links.iter().find(|l| l.dev == d).map(|l| l.mtu);
    Some(Egress {
        mtu: mtu_of(&out_dev),
        in_mtu: mtu_of(&in_dev),
        out_dev,
        in_dev,
    })
}

/// `where` of one PKT_TOO_BIG drop (more than one in a namespace is
/// [`mtu_black_hole`]): the egress device and its MTU, the packet's size,
/// and whether the kernel told the sender ("fragmentation needed").
fn too_big_where(flow: &Flow, drop: &Hop, env: &dyn Env, evidence: &mut Vec<Evidence>) -> String {
    let func = drop_func(drop);
    let Some(e) = egress(flow, drop, env) else {
        return format!("{func} in netns {}", drop.netns);
    };
    // The IP length of the request's last packet seen in that namespace.
    let len = flow
        .hops
        .iter()
        .rev()
        .filter(|h| h.netns_inode == drop.netns_inode && h.dir == Dir::Request)
        .filter(|h| h.ts_ns <= drop.ts_ns)
        .find_map(|h| match &h.data {
            HopData::Packet { len, .. } if *len > 0 => Some(*len),
            _ => None,
        });
    let icmp_sent = flow
        .hops
        .iter()
        .any(|h| h.netns_inode == drop.netns_inode && matches!(h.data, HopData::IcmpSend { .. }));
    let v6 = drop.tuple.dst.is_ipv6();
    let size = len.map_or_else(|| "a packet".to_string(), |l| format!("a {l}-byte packet"));
    let df = if v6 { "" } else { " with DF set" };
    let said = match e.mtu {
        Some(m) => format!("{size}{df} is larger than the MTU {m} of {}", e.out_dev),
        None => format!("{size}{df} is too big for {}", e.out_dev),
    };
    if let Some(mtu) = e.mtu {
        evidence.push(Evidence::PacketTooBig {
            netns: drop.netns.to_string(),
            dev: e.out_dev,
            mtu,
            len,
            in_dev: e.in_dev,
            in_mtu: e.in_mtu,
            icmp_sent,
            family: if v6 { "ipv6" } else { "ipv4" }.into(),
        });
    }
    format!("{func} in netns {}: {said}", drop.netns)
}

/// The function of a drop's location.
fn drop_func(drop: &Hop) -> &str {
    match &drop.data {
        HopData::Drop(d) => func_of(&d.location),
        _ => "",
    }
}

pub fn mtu_black_hole(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let too_big = request_drops(flow, DropReason::PktTooBig);
    let last = *too_big.last()?;
    let drops = too_big
        .iter()
        .filter(|h| h.netns_inode == last.netns_inode)
        .count();
    if drops < 2 {
        return None;
    }
    let HopData::Drop(dd) = &last.data else {
        return None;
    };
    let Egress {
        out_dev,
        mtu,
        in_dev,
        in_mtu,
    } = egress(flow, last, env)?;
    let icmp_sent = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode == last.netns_inode)
        .filter(|h| matches!(h.data, HopData::IcmpSend { .. }))
        .count();
    // IPv6 has no DF: routers never fragment it.
    let v6 = last.tuple.dst.is_ipv6();
    let df = if v6 { "" } else { " (DF set)" };
    let where_ = match mtu {
        Some(m) => format!(
            "{} in netns {}: packets larger than the MTU {m} of {out_dev}{df} dropped {drops} times",
            func_of(&dd.location),
            last.netns
        ),
        None => format!(
            "{} in netns {}: packets too big for {out_dev}{df} dropped {drops} times",
            func_of(&dd.location),
            last.netns
        ),
    };
    let mut v = verdict(
        Kind::Dropped,
        DropReason::PktTooBig,
        where_,
        &last.netns,
        Some(out_dev.clone()),
    );
    v.add(dropped_at(last, &dd.location));
    if let Some(mtu) = mtu {
        v.add(Evidence::MtuExceeded {
            netns: last.netns.to_string(),
            dev: out_dev,
            mtu,
            in_mtu,
            in_dev,
            family: if v6 { "ipv6" } else { "ipv4" }.into(),
            drops: u32::try_from(drops).unwrap_or(u32::MAX),
            icmp_sent: u32::try_from(icmp_sent).unwrap_or(u32::MAX),
        });
    }
    v.add_all(side_evidence(flow));
    Some(v)
}

/// The namespace of the request's last hop, for a flow nothing came back
/// for: where it was last seen.
pub fn last_request_netns(flow: &Flow) -> Option<u32> {
    flow.hops
        .iter()
        // Where the request's packets were: not a route lookup's or a
        // neighbour entry's namespace (a router's neighbour timer fires
        // seconds after the last SYN passed it: under emulation that took
        // listen_overflow's verdict to the router).
        .filter(|h| h.dir == Dir::Request && h.netns_inode != 0)
        .filter(|h| !matches!(h.data, HopData::Fib(_) | HopData::Neigh(_)))
        .max_by_key(|h| h.ts_ns)
        .map(|h| h.netns_inode)
}

/// A request consumed by a TCP listener's receive path: a SYN the
/// listener took (tcp_rcv_state_process() consumes it whether
/// tcp_conn_request() answered it or dropped it for a full accept queue).
pub fn syn_consumed(h: &Hop) -> bool {
    h.dir == Dir::Request
        && matches!(&h.data, HopData::Consume { location }
            if func_of(location) == "tcp_rcv_state_process")
}

/// A listener whose accept queue is full drops new SYNs without a drop
/// reason (tcp_conn_request(): LISTENOVERFLOWS, then the SYN is consumed,
/// no SYN-ACK, no RST): the request's SYNs were taken by the listener and
/// nothing came back, and that listener's queue is full now, or the
/// namespace counted listen overflows. Before `delivered`, which would
/// take the consumed SYN for a delivery.
pub fn listen_overflow(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    if flow.key.proto != 6 || flow.hops.iter().any(|h| h.dir == Dir::Reply) {
        return None;
    }
    let mut syns: Vec<&Hop> = flow.hops.iter().filter(|h| syn_consumed(h)).collect();
    if syns.is_empty() {
        // Where the consume is not seen (tc as the device hook): the
        // request's arrivals in the last namespace it reached.
        let last = last_request_netns(flow)?;
        syns = flow
            .hops
            .iter()
            .filter(|h| h.netns_inode == last && h.dir == Dir::Request && h.is_ingress())
            .collect();
    }
    let first = *syns.first()?;
    let t = &first.tuple;
    let listener = env
        .bound(first.netns_inode)
        .iter()
        .find(|b| b.listening && b.takes("tcp", t.dst, t.dport))?;
    let stats = env.listen_stats(first.netns_inode);
    if !listener.accept_queue_full() && stats.is_none_or(|s| s.overflows == 0) {
        return None;
    }
    let endpoint = Endpoint::new(listener.addr, listener.port);
    let n = syns
        .iter()
        .filter(|h| h.netns_inode == first.netns_inode)
        .count();
    let mut v = verdict(
        Kind::Dropped,
        Found::ListenOverflow,
        format!(
            "tcp_conn_request in netns {}: the accept queue of the tcp listener {endpoint} is full ({} waiting, backlog {}): {n} SYNs dropped unanswered",
            first.netns, listener.rx_queue, listener.max_backlog
        ),
        &first.netns,
        Some(first.dev.to_string()),
    );
    v.add(Evidence::ListenQueueFull {
        netns: first.netns.to_string(),
        endpoint,
        waiting: listener.rx_queue,
        backlog: listener.max_backlog,
        syns: u32::try_from(n).unwrap_or(u32::MAX),
        overflows: stats.map(|s| s.overflows),
        listen_drops: stats.map(|s| s.drops),
    });
    v.add_all(side_evidence(flow));
    Some(v)
}

/// Request packets dropped because the receiving socket's buffer was full
/// (SOCKET_RCVBUFF, __udp_enqueue_schedule_skb() and friends): the server
/// does not keep up. Comes before `delivered`: the first packets of a
/// burst are queued, the rest dropped.
pub fn socket_buffer_full(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let drops = request_drops(flow, DropReason::SocketRcvbuff);
    let last = *drops.last()?;
    let HopData::Drop(dd) = &last.data else {
        return None;
    };
    let t = &last.tuple;
    let proto = if t.proto == 6 { "tcp" } else { "udp" };
    let endpoint = Endpoint::new(t.dst, t.dport);
    let delivered = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode == last.netns_inode && h.hook == Hook::SockQueue)
        .count();
    let sock = env
        .bound(last.netns_inode)
        .iter()
        .find(|b| b.takes(proto, t.dst, t.dport));
    let mut v = verdict(
        Kind::Dropped,
        DropReason::SocketRcvbuff,
        format!(
            "{} in netns {}: the receive buffer of the {proto} socket {endpoint} is full ({} packets dropped)",
            func_of(&dd.location),
            last.netns,
            drops.len()
        ),
        &last.netns,
        Some(last.dev.to_string()),
    );
    v.add(dropped_at(last, &dd.location));
    v.add(Evidence::SocketBufferFull {
        netns: last.netns.to_string(),
        proto: proto.into(),
        endpoint,
        dropped: u32::try_from(drops.len()).unwrap_or(u32::MAX),
        delivered: u32::try_from(delivered).unwrap_or(u32::MAX),
        rx_queue: sock.map(|s| s.rx_queue),
        socket_drops: sock.filter(|s| s.proto == "udp").map(|s| s.drops),
    });
    v.add_all(side_evidence(flow));
    Some(v)
}

/// A cause's judgement of one drop: `(where, evidence)` ([`device_cause`]
/// asks them in turn).
pub(super) type Judge = fn(&Flow, &Hop, &DropReason, &str, &dyn Env) -> Option<(String, Evidence)>;

/// The flow dropped at `drop`, as the cause's `judge` says, whatever else
/// of it was delivered (a burst's tail a qdisc dropped, a datagram whose
/// fragments were lost): the verdict of the rules that run before
/// `delivered`.
pub(super) fn dropped_though_delivered(
    flow: &Flow,
    drop: &Hop,
    env: &dyn Env,
    judge: Judge,
) -> Option<Verdict> {
    let HopData::Drop(dd) = &drop.data else {
        return None;
    };
    let (where_, ev) = judge(flow, drop, &dd.reason, func_of(&dd.location), env)?;
    let mut v = verdict(
        Kind::Dropped,
        dd.reason.clone(),
        where_,
        &drop.netns,
        Some(drop.dev.to_string()),
    );
    v.add(dropped_at(drop, &dd.location));
    v.add(ev);
    v.add_all(delivered_and_side_evidence(flow));
    Some(v)
}

/// A local socket took the packet, or the destination answered.
pub fn delivered(flow: &Flow, _env: &dyn Env) -> Option<Verdict> {
    let ev = delivery_evidence(flow);
    let (first, _) = ev.first()?;
    // Prefer the server's socket for `where`: the client's own handshake
    // completing says where the client is, not where the packet went (it
    // can come first when the server-side hooks are missing or late).
    let server_side = |h: &Hop| match &h.data {
        HopData::Packet { .. } => false,
        HopData::Sock(_) => h.dir == Dir::Reply,
        _ => true,
    };
    let sock = ev
        .iter()
        .find(|(h, _)| server_side(h))
        .or_else(|| {
            ev.iter()
                .find(|(h, _)| !matches!(h.data, HopData::Packet { .. }))
        })
        .map(|(h, _)| *h);
    let (reason, at) = match sock {
        Some(h) => (Found::LocalSocket, h),
        None => (Found::ReplySeen, *first),
    };
    let dst = flow.translated.unwrap_or(flow.key);
    let where_ = match reason {
        Found::LocalSocket => format!(
            "local socket {} in netns {}",
            endpoint(dst.dst, dst.dport),
            at.netns
        ),
        _ => format!(
            "reply from {} seen in netns {}",
            endpoint(dst.dst, dst.dport),
            at.netns
        ),
    };
    let mut v = verdict(Kind::Delivered, reason, where_, &at.netns, None);
    // One line per kind of fact, at the first place it was seen.
    let mut kinds = std::collections::HashSet::new();
    v.add_all(
        ev.iter()
            .filter(|(_, d)| kinds.insert(d.clone()))
            .map(|(h, d)| d.clone().at(&h.netns)),
    );
    v.add_all(ipvs_evidence(flow));
    for h in flow.hops.iter().filter(|h| h.hook == Hook::Drop) {
        // NOT_SPECIFIED frees after delivery are TCP housekeeping, not loss.
        if let HopData::Drop(dd) = &h.data
            && dd.reason != DropReason::NotSpecified
        {
            v.add(Evidence::LaterDrop {
                reason: dd.reason.clone(),
                location: dd.location.to_string(),
            });
        }
    }
    Some(v)
}

fn endpoint(a: IpAddr, p: u16) -> String {
    Endpoint::new(a, p).to_string()
}

/// In some namespace the request came in on one device and left on another,
/// and that is the last place it was seen.
pub fn forwarded(flow: &Flow, _env: &dyn Env) -> Option<Verdict> {
    let req: Vec<&Hop> = flow
        .hops
        .iter()
        .filter(|h| h.dir == Dir::Request && matches!(h.data, HopData::Packet { .. }))
        .collect();
    let last = *req.last()?;
    if !last.is_egress() {
        return None;
    }
    let ingress = req
        .iter()
        .rev()
        .find(|h| h.is_ingress() && h.netns_inode == last.netns_inode && h.ts_ns <= last.ts_ns)?;
    if ingress.dev == last.dev {
        return None;
    }
    let gw = flow.hops.iter().rev().find_map(|h| match &h.data {
        HopData::Fib(f) if f.err == 0 && h.netns_inode == last.netns_inode => f.gw,
        _ => None,
    });
    let via = gw.map(|g| format!(" via {g}")).unwrap_or_default();
    let mut v = verdict(
        Kind::Forwarded,
        Found::Routed,
        format!(
            "forwarded in netns {}: in {} -> out {}{via}",
            last.netns, ingress.dev, last.dev
        ),
        &last.netns,
        Some(format!("{} -> {}", ingress.dev, last.dev)),
    );
    v.settled = false;
    v.add(Evidence::Forwarded {
        in_dev: ingress.dev.to_string(),
        out_dev: last.dev.to_string(),
    });
    if flow.replies > 0 {
        v.add(Evidence::RepliesCameBack {
            replies: flow.replies,
            netns: last.netns.to_string(),
        });
    }
    v.add_all(side_evidence(flow));
    Some(v)
}

/// Nothing conclusive: where it was last seen.
pub fn fallback(flow: &Flow) -> Verdict {
    let last = flow
        .hops
        .iter()
        .rev()
        .find(|h| h.dir == Dir::Request && matches!(h.data, HopData::Packet { .. }))
        .or(flow.hops.last());
    let (where_, netns, dev) = match last {
        Some(h) => (
            format!(
                "last seen at {} on {} in netns {}",
                crate::model::hop::hook_name(h.hook),
                if h.dev.is_empty() { "-" } else { &h.dev },
                h.netns
            ),
            h.netns.to_string(),
            Some(h.dev.to_string()),
        ),
        None => ("nowhere".into(), String::new(), None),
    };
    let mut v = verdict(Kind::NoReply, Found::NoReplySeen, where_, &netns, dev);
    v.settled = false;
    v.add(Evidence::PacketsSeen {
        requests: flow.packets - flow.replies,
        replies: flow.replies,
    });
    v.add_all(side_evidence(flow));
    v
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod cause_tests;
