//! Every operator-facing hint, in one table so they can be reviewed together.
//! Keyed by verdict kind, reason (`*`: any) and a keyword that must appear in
//! the verdict's `where` or evidence (empty: none needed). The first match
//! wins, so specific entries come first.

use super::Kind;

pub const HINTS: &[(Kind, &str, &str, &str)] = &[
    (
        Kind::Dropped,
        "*",
        "changed owner",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::NoReply,
        "*",
        "changed owner",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::Delivered,
        "*",
        "changed owner",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::Forwarded,
        "*",
        "changed owner",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::Misrouted,
        "*",
        "changed owner",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::Dropped,
        "*",
        "MACs",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::NoReply,
        "*",
        "MACs",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::Delivered,
        "*",
        "MACs",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::Forwarded,
        "*",
        "MACs",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::Misrouted,
        "*",
        "MACs",
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    (
        Kind::Misrouted,
        "local_route_shadows_host",
        "",
        "Another host's address is bound locally (kube-ipvs0 or similar), so this node answers for it: a Service externalIP/LoadBalancer IP equals a node IP. Remove that IP from the Service (kube-proxy IPVS binds every Service IP on kube-ipvs0 of every node).",
    ),
    (
        Kind::Misrouted,
        "local_destination_transmitted",
        "tc redirect",
        "A tc program redirected traffic for a host-local address (node-local DNS on a link-local IP) out of the node, bypassing the host stack where that address lives: with Cilium BPF host routing set bpf.hostLegacyRouting=true, or move node-local DNS behind a local redirect policy.",
    ),
    (
        Kind::Misrouted,
        "local_destination_transmitted",
        "",
        "Traffic for an address of this node left by a device instead of being delivered locally: check what steers it (tc/BPF redirects, policy routing).",
    ),
    (
        Kind::Misrouted,
        "nat_source_from_other_interface",
        "",
        "The Service IP was routed by the wrong route (typically the default route on another NIC), which picked that NIC's address as source before DNAT; the backend answers an address it cannot reach. Add a route for the Service range via the cluster network (e.g. ip route add 10.43.0.0/16 dev <cluster NIC>).",
    ),
    (
        Kind::NoReply,
        "reply_unroutable",
        "",
        "The destination has no route back to the sender: fix the return route (asymmetric routing, a missing route for the client's network, or a source address the backend cannot reach).",
    ),
    (
        Kind::Dropped,
        "ipvs_no_destination",
        "",
        "The node's IPVS virtual service for this Service has no usable real server: with externalTrafficPolicy: Local kube-proxy gives it only this node's endpoints, and there are none. Route or advertise the LB IP only to nodes with a local endpoint (MetalLB/BGP: announce from endpoint nodes), or use externalTrafficPolicy: Cluster. `ipvsadm -Ln` on the node shows the empty service.",
    ),
    (
        Kind::Dropped,
        "NETFILTER_DROP",
        "no local endpoints",
        "kube-proxy drops it because this node has no local endpoint for a Service with externalTrafficPolicy: Local, yet traffic for the LB IP is routed here (BGP/L2 announcement pointing at a node without endpoints). Announce only from nodes with endpoints, or use externalTrafficPolicy: Cluster.",
    ),
    (
        Kind::Dropped,
        "NETFILTER_DROP",
        "",
        "A netfilter rule dropped it: list the ruleset of that namespace (iptables-save -c / nft list ruleset) for the named hook; kube-proxy KUBE-* chains, NetworkPolicies or a host firewall are the usual owners.",
    ),
    (
        Kind::Dropped,
        "NO_SOCKET",
        "tcp reset",
        "Nothing listens on that address/port where the packet arrived: check the Service targetPort, the endpoints, and that the backend process is up and bound to that address. The kernel answered with a TCP RST (connection refused).",
    ),
    (
        Kind::Dropped,
        "NO_SOCKET",
        "",
        "Nothing listens on that address/port where the packet arrived: check the Service targetPort, the endpoints, and that the backend process is up and bound to that address.",
    ),
    (
        Kind::Dropped,
        "IP_INNOROUTES",
        "",
        "The namespace that had to forward it has no route to the destination: check `ip route` there (CNI routes, BGP-learnt routes, a missing route for the Service range).",
    ),
    (
        Kind::Dropped,
        "IP_OUTNOROUTES",
        "",
        "No route for locally generated traffic to that destination: add a route (e.g. for the Service CIDR via the cluster network).",
    ),
    (
        Kind::Dropped,
        "NEIGH_FAILED",
        "",
        "Neighbour (ARP/NDP) resolution failed for the next hop: the address is not answered on that link; if it is a VIP, check which node should own it (two controllers fighting over a LoadBalancer IP?).",
    ),
    (
        Kind::Dropped,
        "IP_RPFILTER",
        "",
        "Reverse-path filter dropped it: the source is not routed back via the receiving interface; relax rp_filter or fix asymmetric routing.",
    ),
    (
        Kind::Dropped,
        "*",
        "",
        "The kernel dropped it at the named place; the reason is the kernel's own drop reason (see include/net/dropreason-core.h).",
    ),
    (
        Kind::Delivered,
        "*",
        "",
        "Delivered to a local socket; if the client still fails, look at the application or at the reply path.",
    ),
    (
        Kind::Forwarded,
        "routed",
        "",
        "Forwarded by this node towards the next hop; follow it there (or trace the next node) if it never arrives.",
    ),
    (
        Kind::NoReply,
        "no_reply_seen",
        "",
        "The packet was sent but no reply was seen while tracing: the next hop, the far end or the return path is where to look.",
    ),
];

pub fn hint(kind: Kind, reason: &str, where_: &str, evidence: &[String]) -> String {
    let mentions =
        |k: &str| k.is_empty() || where_.contains(k) || evidence.iter().any(|e| e.contains(k));
    HINTS
        .iter()
        .find(|(k, r, kw, _)| *k == kind && (*r == reason || *r == "*") && mentions(kw))
        .map(|(_, _, _, h)| h.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_hint() {
        for k in [
            Kind::Delivered,
            Kind::Forwarded,
            Kind::Dropped,
            Kind::Misrouted,
            Kind::NoReply,
        ] {
            assert!(
                HINTS.iter().any(|(hk, _, _, _)| *hk == k),
                "{k:?} has no hint"
            );
        }
        assert!(hint(Kind::Dropped, "SOMETHING_NEW", "", &[]).contains("kernel dropped"));
        assert!(hint(Kind::Misrouted, "local_route_shadows_host", "", &[]).contains("externalIP"));
        assert!(hint(Kind::Dropped, "NO_SOCKET", "", &["tcp reset sent".into()]).contains("RST"));
        assert!(!hint(Kind::Dropped, "NO_SOCKET", "", &[]).contains("RST"));
    }

    #[test]
    fn specific_entries_win() {
        let w = "netfilter INPUT in netns master: rule `-A KUBE-EXTERNAL-SERVICES ... has no local endpoints ...`";
        assert!(hint(Kind::Dropped, "NETFILTER_DROP", w, &[]).contains("externalTrafficPolicy"));
        assert!(hint(Kind::Dropped, "ipvs_no_destination", "", &[]).contains("ipvsadm"));
        assert!(
            hint(Kind::Dropped, "NETFILTER_DROP", "netfilter FORWARD", &[])
                .contains("iptables-save")
        );
    }
}
