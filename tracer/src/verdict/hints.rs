//! The operator-facing hints: this table, and the rows of the causes
//! written as one module (their `HINTS`, listed in [`CAUSES`] and asked
//! first). A row applies to a verdict of its kind (`None`: any) and reason
//! (`None`: any) that carries a fact of one of its evidence kinds (none
//! listed: no fact needed) and, for a cause's row, a fact its `when` holds
//! for. The first matching row wins, so specific rows come first. Each
//! sentence is in the rows once.

use super::{DropReason, Evidence, EvidenceKind, EvidenceKind as E, Found, Item, Kind, Reason};

/// One row: (kind, reason, evidence kinds, a fact it needs) -> sentence.
pub struct Hint {
    pub kind: Option<Kind>,
    pub reason: Option<Reason>,
    pub evidence: &'static [EvidenceKind],
    /// A cause's row: a fact of the verdict this is true of.
    pub when: Option<fn(&Evidence) -> bool>,
    pub text: &'static str,
}

/// The causes' own rows (each in its cause's module), asked before
/// [`HINTS`].
const CAUSES: &[&[Hint]] = &[
    super::xdp_moved::HINTS,
    super::xdp_native::HINTS,
    super::bridge::HINTS,
    super::tunnel::HINTS,
    super::no_protocol::HINTS,
    super::sysctl::HINTS,
    super::veth::HINTS,
    super::sock_lb::HINTS,
    super::bpf_nat::HINTS,
    super::ct_state::HINTS,
    super::source_addr::HINTS,
    super::checksum::HINTS,
    super::cgroup_skb::HINTS,
    super::routing_loop::HINTS,
    super::qdisc_drop::HINTS,
    super::xfrm_policy::HINTS,
    super::fragments::HINTS,
];

/// A row's reason: the kernel's.
#[expect(
    clippy::unnecessary_wraps,
    reason = "a row's reason is optional; this names one"
)]
const fn kernel(r: DropReason) -> Option<Reason> {
    Some(Reason::Kernel(r))
}

/// A row's reason: a rule's finding.
#[expect(
    clippy::unnecessary_wraps,
    reason = "a row's reason is optional; this names one"
)]
const fn found(f: Found) -> Option<Reason> {
    Some(Reason::Found(f))
}

const fn row(
    kind: Option<Kind>,
    reason: Option<Reason>,
    evidence: &'static [EvidenceKind],
    text: &'static str,
) -> Hint {
    Hint {
        kind,
        reason,
        evidence,
        when: None,
        text,
    }
}

pub const HINTS: &[Hint] = &[
    row(
        None,
        None,
        &[E::OwnerChanged, E::SeveralMacs],
        "Two controllers manage the same LoadBalancer Service (e.g. MetalLB and kube-vip services both enabled): the VIP moves between nodes or is answered by several MACs. Keep one controller for LoadBalancer IPs.",
    ),
    row(
        Some(Kind::Misrouted),
        found(Found::LocalRouteShadowsHost),
        &[],
        "Another host's address is bound locally (kube-ipvs0 or similar), so this node answers for it: a Service externalIP/LoadBalancer IP equals a node IP. Remove that IP from the Service (kube-proxy IPVS binds every Service IP on kube-ipvs0 of every node).",
    ),
    row(
        Some(Kind::Misrouted),
        found(Found::LocalDestinationTransmitted),
        &[E::TcRedirect],
        "A tc program redirected traffic for a host-local address (node-local DNS on a link-local IP) out of the node, bypassing the host stack where that address lives: with Cilium BPF host routing set bpf.hostLegacyRouting=true, or move node-local DNS behind a local redirect policy.",
    ),
    row(
        Some(Kind::Misrouted),
        found(Found::LocalDestinationTransmitted),
        &[],
        "Traffic for an address of this node left by a device instead of being delivered locally: check what steers it (tc/BPF redirects, policy routing).",
    ),
    row(
        Some(Kind::Misrouted),
        found(Found::NatSourceFromOtherInterface),
        &[],
        "The Service IP was routed by the wrong route (typically the default route on another NIC), which picked that NIC's address as source before DNAT; the backend answers an address it cannot reach. Add a route for the Service range via the cluster network (e.g. ip route add 10.43.0.0/16 dev <cluster NIC>).",
    ),
    row(
        Some(Kind::NoReply),
        found(Found::ReplyUnroutable),
        &[],
        "The destination has no route back to the sender: fix the return route (asymmetric routing, a missing route for the client's network, or a source address the backend cannot reach).",
    ),
    row(
        Some(Kind::Dropped),
        found(Found::IpvsNoDestination),
        &[],
        "The node's IPVS virtual service for this Service has no usable real server: with externalTrafficPolicy: Local kube-proxy gives it only this node's endpoints, and there are none. Route or advertise the LB IP only to nodes with a local endpoint (MetalLB/BGP: announce from endpoint nodes), or use externalTrafficPolicy: Cluster. `ipvsadm -Ln` on the node shows the empty service.",
    ),
    row(
        Some(Kind::Dropped),
        None,
        &[E::XdpAction],
        "The device's XDP program did not pass the packet, and the kernel dropped it: the evidence names the program and what it returned. A failed XDP_REDIRECT names its target and the kernel's error: ENETDOWN, the target is down (bring it up, or fix the entry of the program's device map); EMSGSIZE, the packet is larger than the target's MTU; EINVAL, no device has that ifindex in this namespace (a pod's veth recreated after the program's map was filled: the dataplane agent must refill it, or restart). XDP_ABORTED is the program's own error exit: a redirect through a device map whose key has no entry (bpf_redirect_map() with flags 0 returns XDP_ABORTED on a miss: fill the map, or pass XDP_PASS as the flags' fallback), or a failed bounds check or helper call (`bpftool prog tracelog`, the dataplane's logs); an XDP_TX the device did not take is a full or stopped TX queue. `bpftool prog show id N` and `ip -d link show DEV` show the program and its mode.",
    ),
    row(
        Some(Kind::Dropped),
        None,
        &[E::BpfProgramDrop],
        "A BPF program on the device's tc or XDP hook dropped the packet: on an eBPF dataplane that is its policy or load-balancing decision (Cilium/Calico eBPF: a NetworkPolicy deny, a prefilter or do-not-track rule, a Service without backends). Ask the dataplane why: `cilium monitor --type drop` or `hubble observe --verdict DROPPED` on this node (Cilium), the policy counters of calico-node (Calico); `bpftool prog show id N` names the program, and the NetworkPolicies that select the pod say what it enforces. A program no running dataplane owns was left behind by a CNI since removed or switched mode (Calico leaves its cali filters on the host devices): delete that filter (`tc filter del dev DEV ingress|egress pref N`) or the clsact qdisc. With no BPF program there, `tc filter show dev DEV ingress|egress` shows the tc action that dropped it.",
    ),
    row(
        Some(Kind::Dropped),
        None,
        &[E::ForwardingDisabled],
        "IP forwarding is off on the device the packet came in by, so this namespace will not route it on: enable it (sysctl -w net.ipv4.conf.<dev>.forwarding=1, or net.ipv4.ip_forward=1 for every device; net.ipv6.conf.<dev>.forwarding for IPv6) and persist it in /etc/sysctl.d; on a Kubernetes node the CNI or kube-proxy expect it on.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::IpRpfilter),
        &[E::RpFilterMismatch],
        "Strict reverse-path filtering drops packets whose source is routed back by another device (asymmetric routing: several NICs, a pod or VIP source reached via another interface). Make the route back go by the device they arrive on (a route or policy rule for that source), or set rp_filter to 2 (loose) on that device and on `all` (the kernel applies the larger of the two).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::SocketRcvbuff),
        &[E::SocketBufferFull],
        "The server's socket buffer is full: it does not read as fast as requests come (an overloaded or stuck CoreDNS/node-local-dns, or a burst). Scale or unstick the server, raise its receive buffer (SO_RCVBUF, bounded by net.core.rmem_max; net.core.rmem_default for sockets that do not set it), or lower the load.",
    ),
    row(
        Some(Kind::Dropped),
        found(Found::ListenOverflow),
        &[E::ListenQueueFull],
        "The server does not accept() connections as fast as they come (stuck, overloaded, or a backlog too small): its accept queue is full, and the kernel drops new SYNs silently (no RST: clients retry and time out). Check the server process (blocked, out of worker threads), raise its listen() backlog (capped by net.core.somaxconn) and scale it; `ss -lnt` in that namespace shows Recv-Q (waiting) against Send-Q (backlog), `nstat -az TcpExtListenOverflows` the drops.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::PktTooBig),
        &[E::MtuExceeded],
        "A path-MTU black hole: the next link's MTU is smaller than the sender's packets and the ICMP \"fragmentation needed\" (ICMPv6 \"packet too big\") that would make it send smaller ones never reaches it. Let ICMP type 3 code 4 (ICMPv6 type 2) through every firewall on the way back, make the MTUs agree along the path (overlay/tunnel MTU = underlay MTU minus its overhead), or clamp TCP MSS on the router (nft: tcp flags syn tcp option maxseg size set rt mtu).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::RouteRefused],
        "No netfilter rule dropped it: after NAT rewrote the destination, the kernel routed the packet again (ip_route_me_harder() in OUTPUT) and found no usable route to the new destination. Fix the routing to the backend, not the firewall: add the route to the endpoints' network (the CNI's pod routes, the route to the other nodes' pod CIDRs), or correct the endpoint address the NAT rule sends to (`ip route get BACKEND` in that namespace).",
    ),
    row(
        Some(Kind::Dropped),
        None,
        &[E::RouteRefused],
        "The routing table refuses the destination: a blackhole, unreachable or prohibit route, or an `ip rule` with that action, matches it (or no route does). CNIs install such routes on purpose (Calico blackholes its own IPAM blocks, so an address of a block must be a pod of this node; a policy rule may fence a range off): check `ip route get DST from SRC iif DEV` and `ip rule` in that namespace, and whether the address, after NAT, belongs to a pod that lives on another node or no longer exists.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::PktTooBig),
        &[E::PacketTooBig],
        "The packet is larger than the next link's MTU and may not be fragmented (DF set, or IPv6): the link is narrower than the pods' interfaces. Typical of an overlay or tunnel (VXLAN takes 50 bytes, IPIP 20, WireGuard 60) whose pods or CNI config keep the underlay's MTU: set the pods' MTU to the tunnel device's (the CNI's mtu setting, e.g. Calico/flannel/Cilium MTU = underlay MTU minus the overhead). TCP recovers through the ICMP \"fragmentation needed\" if it gets back (let ICMP type 3 code 4 through); UDP with DF set, and any sender the ICMP does not reach, keeps losing such packets.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::ConntrackInvalid],
        "A rule dropping conntrack-INVALID packets (`ct state invalid drop`, kube-proxy's KUBE-FORWARD and most stateful firewalls have one) dropped it: conntrack could not place the packet in a connection it knows. Usually the connection's packets do not all pass this node (asymmetric routing: requests one way, replies another; route both through the same node, or keep state off that path), or its entry was lost or the packet is out of the window it tracks (then net.netfilter.nf_conntrack_tcp_be_liberal=1 is kube-proxy's remedy). `conntrack -S` shows the invalid counter.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::ConntrackInsertFailed],
        "Two connections needed the same conntrack tuple and this one lost: conntrack drops a new connection's first packet when its entry cannot be inserted (`conntrack -S` counts insert_failed). After source NAT, the SNAT/masquerade ports ran out or were handed out twice: give SNAT more addresses or a wider port range, and allocate ports with --random-fully (iptables MASQUERADE/SNAT; kube-proxy, flannel and Calico have an option for it; nft: `masquerade fully-random`). Without NAT, two first packets of one connection raced through conntrack (glibc's parallel A and AAAA queries from one socket): `options single-request-reopen` in resolv.conf, a node-local DNS cache, or TCP for DNS avoid it.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::ConntrackFull],
        "The conntrack table is full, so netfilter drops every packet that needs a new entry (new connections fail, established ones go on). Raise net.netfilter.nf_conntrack_max (one value for the node: set it in the host's namespace, and the hash size with it: /sys/module/nf_conntrack/parameters/hashsize, about max/4) and persist it in /etc/sysctl.d, shorten the timeouts that keep entries (nf_conntrack_tcp_timeout_*, nf_conntrack_udp_timeout), or find what opens so many connections (`conntrack -C`, `conntrack -S`, `conntrack -L` in that namespace).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::NoLocalEndpointsRuleMoved],
        "kube-proxy drops it because this node has no local endpoint for a Service with externalTrafficPolicy: Local, yet traffic for the LB IP is routed here (BGP/L2 announcement pointing at a node without endpoints). Announce only from nodes with endpoints, or use externalTrafficPolicy: Cluster.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::KubeNoLocalEndpoints],
        "The Service named above has externalTrafficPolicy: Local and no ready endpoint on this node, so kube-proxy drops what reaches it here: the load balancer or BGP/L2 announcement sends this node traffic it cannot serve. Announce (or health-check) only nodes with endpoints, or use externalTrafficPolicy: Cluster.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::KubeServiceNoEndpoints],
        "The Service has no ready endpoints, so kube-proxy rejects connections to it (clients see \"connection refused\" or ICMP port unreachable). Check `kubectl get endpointslices -l kubernetes.io/service-name=SVC -n NS`: the selector must match running pods, and their readiness probes must pass.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::KubeClusterIpUnallocated],
        "Nothing has this ClusterIP: the Service was deleted or recreated with another IP, or the client uses a stale address (a hard-coded IP, an old DNS answer, an env var from before). Use the Service's DNS name, or `kubectl get svc -A | grep IP` to see which Service, if any, has it now.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::KubeSourceRangesDrop],
        "The client's address is outside the Service's spec.loadBalancerSourceRanges, so kube-proxy drops it. Add the client's range (as the node sees it: after any SNAT by a load balancer) to loadBalancerSourceRanges, or send from an allowed address.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::NetworkPolicyDrop],
        "A NetworkPolicy selects the pod and none of its rules allows this traffic, so the controller's default deny dropped it. `kubectl get networkpolicy -n NS` and `kubectl describe networkpolicy` show which policies select the pod (podSelector) and what they allow; add a rule for this source (namespaceSelector/podSelector/ipBlock as the pod sees it, after any SNAT) and port, in the right direction (ingress on the receiving pod, egress on the sending one).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[E::NfRuleTraced],
        "The named rule decided it (table, chain and handle are in the verdict; `nft -a list table FAMILY TABLE` shows it). If the drop is wrong, change what that rule matches or remove it (`nft delete rule FAMILY TABLE CHAIN handle N`); for a table kube-proxy, a CNI or a NetworkPolicy controller writes, fix the object behind the rule instead (it is rewritten on its next sync).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NetfilterDrop),
        &[],
        "A netfilter rule dropped it: list the ruleset of that namespace (`nft list ruleset`, which shows iptables-nft's rules too; `iptables-legacy-save -c` where legacy tables are in use) for the named hook; kube-proxy KUBE-* chains, NetworkPolicies or a host firewall are the usual owners.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NoSocket),
        &[E::ListensElsewhere],
        "The port is bound, but not on the address the packet was sent to: the server listens on 127.0.0.1 or another IP only. Bind it to the address clients use (0.0.0.0, or the link-local/Service IP: for node-local DNS the address in its Corefile `bind`), or send to the address it listens on.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NoSocket),
        &[E::TcpResetSent],
        "Nothing listens on that address/port where the packet arrived: check the Service targetPort, the endpoints, and that the backend process is up and bound to that address. The kernel answered with a TCP RST (connection refused).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NoSocket),
        &[],
        "Nothing listens on that address/port where the packet arrived: check the Service targetPort, the endpoints, and that the backend process is up and bound to that address.",
    ),
    row(
        Some(Kind::Dropped),
        None,
        &[E::NoRouteAfterRules],
        "No table the routing rules chose has a route to the destination (or a rule's unreachable/prohibit/blackhole action refused it): `ip rule` (`ip -6 rule`) in that namespace lists the rules in order, `ip route show table N` each table. A lookup in a table that nothing filled (a CNI, VPN or kube-router table) is passed over, so the next rule's table decides: add the route to the table the rule points at, or fix or remove the rule.",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::IpInnoroutes),
        &[],
        "The namespace that had to forward it has no route to the destination: check `ip route` there (CNI routes, BGP-learnt routes, a missing route for the Service range).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::IpOutnoroutes),
        &[],
        "No route for locally generated traffic to that destination: add a route (e.g. for the Service CIDR via the cluster network).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NeighFailed),
        &[E::EndpointUnanswered],
        "The Service's traffic is translated to an endpoint that no longer answers on its link: the pod was deleted or moved, yet a NAT rule or a conntrack entry made before still sends to it. Compare the translated address with the Service's current endpoints (`kubectl get endpointslices`); a UDP conntrack entry outlives a deleted endpoint while packets keep it alive (`conntrack -L -d SERVICE_IP` shows it, `conntrack -D -d SERVICE_IP -p udp` clears it; kube-proxy clears them on endpoint changes, older ones missed some).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::NeighFailed),
        &[],
        "Neighbour (ARP/NDP) resolution failed for the next hop: the address is not answered on that link; if it is a VIP, check which node should own it (two controllers fighting over a LoadBalancer IP?).",
    ),
    row(
        Some(Kind::Dropped),
        kernel(DropReason::IpRpfilter),
        &[],
        "Reverse-path filter dropped it: the source is not routed back via the receiving interface; relax rp_filter or fix asymmetric routing.",
    ),
    row(
        Some(Kind::Dropped),
        None,
        &[],
        "The kernel dropped it at the named place; the reason is the kernel's own drop reason (see include/net/dropreason-core.h).",
    ),
    row(
        Some(Kind::Delivered),
        None,
        &[],
        "Delivered to a local socket; if the client still fails, look at the application or at the reply path.",
    ),
    row(
        Some(Kind::Forwarded),
        found(Found::Routed),
        &[],
        "Forwarded by this node towards the next hop; follow it there (or trace the next node) if it never arrives.",
    ),
    row(
        Some(Kind::NoReply),
        found(Found::NoReplySeen),
        &[],
        "The packet was sent but no reply was seen while tracing: the next hop, the far end or the return path is where to look.",
    ),
];

impl Hint {
    /// A cause's row (in its module): for a verdict of `kind` with a fact
    /// `when` holds for.
    pub const fn when(kind: Kind, when: fn(&Evidence) -> bool, text: &'static str) -> Hint {
        Hint {
            kind: Some(kind),
            reason: None,
            evidence: &[],
            when: Some(when),
            text,
        }
    }

    fn applies(&self, kind: Kind, reason: &Reason, evidence: &[Item]) -> bool {
        self.kind.is_none_or(|k| k == kind)
            && self.reason.as_ref().is_none_or(|r| r == reason)
            && (self.evidence.is_empty()
                || evidence
                    .iter()
                    .any(|e| self.evidence.contains(&e.fact.kind())))
            && self
                .when
                .is_none_or(|w| evidence.iter().any(|e| w(&e.fact)))
    }
}

/// Every row: the causes' first, then [`HINTS`].
pub fn rows() -> impl Iterator<Item = &'static Hint> {
    CAUSES.iter().flat_map(|c| c.iter()).chain(HINTS)
}

/// The sentence of the first row that applies to a verdict with this kind,
/// reason and evidence ("" when none does).
pub fn hint(kind: Kind, reason: &Reason, evidence: &[Item]) -> String {
    rows()
        .find(|h| h.applies(kind, reason, evidence))
        .map(|h| h.text.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::verdict::Evidence;

    fn reset() -> Item {
        Item::once(Evidence::TcpResetSent {
            netns: "s".into(),
            reason: Some("NO_SOCKET".into()),
        })
    }

    #[test]
    fn every_kind_has_a_hint() {
        for k in [
            Kind::Delivered,
            Kind::Forwarded,
            Kind::Dropped,
            Kind::Misrouted,
            Kind::NoReply,
        ] {
            assert!(HINTS.iter().any(|h| h.kind == Some(k)), "{k:?} has no hint");
        }
        assert!(
            hint(
                Kind::Dropped,
                &DropReason::named("SOMETHING_NEW").into(),
                &[]
            )
            .contains("kernel dropped")
        );
        assert!(
            hint(Kind::Misrouted, &Found::LocalRouteShadowsHost.into(), &[]).contains("externalIP")
        );
        assert!(hint(Kind::Dropped, &DropReason::NoSocket.into(), &[reset()]).contains("RST"));
        assert!(!hint(Kind::Dropped, &DropReason::NoSocket.into(), &[]).contains("RST"));
    }

    #[test]
    fn each_sentence_once() {
        let mut seen = HashSet::new();
        for h in rows() {
            assert!(seen.insert(h.text), "twice: {}", h.text);
        }
    }

    #[test]
    fn specific_entries_win() {
        let rule = |no_endpoints: bool| {
            let (table, chain, delta) = (
                "filter".to_string(),
                "KUBE-EXTERNAL-SERVICES".to_string(),
                1,
            );
            let rule = crate::node::netfilter::NfRule {
                family: "ip".into(),
                table,
                chain,
                handle: 7,
                text: "ip daddr 10.16.0.1 tcp dport 80 drop".into(),
                verdict: "drop".into(),
                comment: no_endpoints.then(|| "default/nginx:http has no local endpoints".into()),
                packets: delta,
            };
            Item::once(Evidence::rule_moved(&rule, delta))
        };
        assert!(
            hint(
                Kind::Dropped,
                &DropReason::NetfilterDrop.into(),
                &[rule(true)]
            )
            .contains("externalTrafficPolicy")
        );
        assert!(
            hint(
                Kind::Dropped,
                &DropReason::NetfilterDrop.into(),
                &[rule(false)]
            )
            .contains("nft list ruleset")
        );
        assert!(hint(Kind::Dropped, &Found::IpvsNoDestination.into(), &[]).contains("ipvsadm"));
        assert!(
            hint(Kind::Dropped, &DropReason::NetfilterDrop.into(), &[])
                .contains("nft list ruleset")
        );
        // The VIP facts win over every kind's own hint.
        let macs = Item::once(Evidence::SeveralMacs {
            addr: "10.0.0.9".parse().unwrap(),
            macs: vec!["a".into(), "b".into()],
        });
        for k in [Kind::Delivered, Kind::NoReply, Kind::Misrouted] {
            assert!(
                hint(k, &Found::Routed.into(), std::slice::from_ref(&macs))
                    .starts_with("Two controllers")
            );
        }
        let redirect = Item::once(Evidence::TcRedirect {
            ingress_dev: "lxc0".into(),
            egress_dev: "eth0".into(),
        });
        assert!(
            hint(
                Kind::Misrouted,
                &Found::LocalDestinationTransmitted.into(),
                &[redirect]
            )
            .contains("hostLegacyRouting")
        );
        assert!(
            hint(
                Kind::Misrouted,
                &Found::LocalDestinationTransmitted.into(),
                &[reset()]
            )
            .starts_with("Traffic for an address of this node")
        );
    }
}
