//! Typed evidence: the facts a verdict rests on, one variant per kind of
//! fact. `Display` gives the sentence shown to people (text output, and the
//! `text` field of the JSON object); rules and hints look at the fields.
//!
//! As JSON each fact is an object tagged by its kind, with its fields and
//! the sentence: `{"kind": "tcp_reset_sent", "netns": "s", "reason":
//! "NO_SOCKET", "text": "tcp reset sent in netns s (NO_SOCKET)"}`. Reading
//! one back ignores `text` (and `count`).

use std::{fmt, net::IpAddr};

use serde::{Deserialize, Serialize, Serializer};
use strum::{EnumDiscriminants, EnumIter, IntoStaticStr};

use crate::{
    model::drop_reason::DropReason,
    model::hop::{Dir, Nud},
    node::netfilter::{NfMethod, NfRule},
    node::vip::OwnerChange,
};

mod address;
mod conntrack;
mod drop;
mod ipvs;
mod mtu;
mod netfilter;
mod reply;
mod route;
mod sentence;
mod socket;
mod trace;

pub use route::forwarding_sysctl;

/// An address and port; shown as `10.0.0.1:80`, `[fd00::1]:80`, or the
/// address alone when the port is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: u16,
}

impl Endpoint {
    pub fn new(addr: IpAddr, port: u16) -> Endpoint {
        Endpoint { addr, port }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.addr, self.port) {
            (a, 0) => write!(f, "{a}"),
            (a @ IpAddr::V6(_), p) => write!(f, "[{a}]:{p}"),
            (a, p) => write!(f, "{a}:{p}"),
        }
    }
}

/// Which of a pod's NetworkPolicy directions: traffic to it (ingress) or
/// from it (egress).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum PolicyDirection {
    Ingress,
    Egress,
}

/// One fact behind a verdict. Namespaces are their labels (`netns` of a
/// hop), devices their names.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    EnumDiscriminants,
    IntoStaticStr,
    schemars::JsonSchema,
)]
#[serde(remote = "Self", tag = "kind", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[strum_discriminants(
    name(EvidenceKind),
    derive(Hash, IntoStaticStr, Serialize, EnumIter),
    strum(serialize_all = "snake_case"),
    serde(rename_all = "snake_case")
)]
pub enum Evidence {
    // What the kernel answered (any verdict).
    /// tcp:tcp_send_reset fired.
    TcpResetSent {
        netns: String,
        reason: Option<String>,
    },
    /// icmp:icmp_send fired.
    IcmpSent {
        netns: String,
        icmp_type: u8,
        icmp_code: u8,
        /// `dest-unreachable net-unreachable`, `redirect host`, ...
        desc: String,
    },
    /// A kernel function seen by a function hook (IPVS, netfilter, ...).
    FunctionHook {
        func: String,
        /// fentry or kprobe.
        backend: String,
        netns: String,
        detail: String,
    },
    /// A neighbour entry of the flow in a FAILED state.
    NeighbourState {
        addr: IpAddr,
        dev: String,
        netns: String,
        state: Nud,
        /// `update`, `timer`, `send to failed entry`, `created`.
        event: String,
    },
    /// The request left a namespace by the device it came in on.
    ForwardedBack { netns: String, dev: String },

    // Misroutes.
    /// A route lookup for the destination hit a LOCAL route.
    LocalRoute { dst: IpAddr, dev: String },
    /// The destination lies in the subnet of another interface.
    OtherHostsSubnet {
        dst: IpAddr,
        net: IpAddr,
        prefix: u8,
        dev: String,
    },
    /// The request left by a device although its destination is local.
    LocalAddressTransmitted {
        dev: String,
        netns: String,
        addr: IpAddr,
    },
    /// From a device's ingress to another's egress with no route lookup.
    TcRedirect {
        ingress_dev: String,
        egress_dev: String,
    },
    /// A tc ingress filter on that device (not tracer's own).
    TcFilter { dev: String, filter: String },
    /// A packet dropped at a device's tc or XDP hook (its drop reason or
    /// site says which), and the BPF programs of others attached there
    /// (none: a tc filter's action, or a program detached since).
    BpfProgramDrop {
        /// `tc ingress`, `tc egress` or `XDP`.
        hook: String,
        dev: String,
        netns: String,
        programs: Vec<crate::node::bpf_progs::AttachedProgram>,
    },
    /// What a device's XDP program returned for the packet when it did not
    /// pass it on, as the xdp tracepoints told it: a redirect that failed
    /// (its target and the kernel's error), XDP_ABORTED, an action the
    /// kernel does not know, an XDP_TX the device did not take
    /// (verdict/bpf_drop.rs).
    XdpAction {
        dev: String,
        netns: String,
        /// The program with the id the tracepoint gave, among the device's
        /// XDP programs (None: not attached there when the node was read).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        program: Option<crate::node::bpf_progs::AttachedProgram>,
        action: crate::model::hop::XdpData,
        /// A redirect's target device, by name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to_dev: Option<String>,
    },
    /// An XDP program sent the packet back out its device (XDP_TX) or to
    /// another (XDP_REDIRECT) before it died (verdict/xdp_moved.rs).
    XdpMoved(crate::verdict::xdp_moved::XdpMove),
    /// An XDP program in native (driver) mode took the packet and nothing
    /// came out (verdict/xdp_native.rs).
    XdpNativeTaken(crate::verdict::xdp_native::XdpNativeTaken),
    /// A Linux bridge will not forward the frame: a setting of one of its
    /// ports or its own (verdict/bridge.rs).
    BridgeWillNotForward(crate::verdict::bridge::BridgeRefusal),
    /// A VXLAN device had nowhere to send the frame, or the far side's
    /// device was not the one it was sent to (verdict/tunnel.rs).
    TunnelWillNotSend(crate::verdict::tunnel::TunnelRefusal),
    /// The receiving kernel has no handler for the packet's IP protocol
    /// (verdict/no_protocol.rs).
    ProtocolUnhandled(crate::verdict::no_protocol::ProtocolUnhandled),
    /// The flow went into a tunnel (VXLAN, IPIP, ...) and, if seen, came
    /// out of it: its outer packet was followed (verdict/tunnel.rs).
    Encapsulated(crate::verdict::tunnel::Encapsulation),
    /// A device sysctl made the kernel drop the packet
    /// (verdict/sysctl.rs).
    SysctlRefused(crate::verdict::sysctl::SysctlRefusal),
    /// The source address is one the namespace will not take from
    /// outside: its own, or a martian (verdict/source_addr.rs).
    SourceRefused(crate::verdict::source_addr::SourceRefusal),
    /// The receiving stack found a checksum wrong (verdict/checksum.rs).
    ChecksumBad(crate::verdict::checksum::ChecksumFault),
    /// A cgroup_skb program of the socket's cgroup, or its own filter,
    /// refused the packet (verdict/cgroup_skb.rs).
    CgroupProgramDrop(crate::verdict::cgroup_skb::CgroupSkbDrop),
    /// The TTL ran out in a routing loop (verdict/routing_loop.rs).
    RoutingLoop(crate::verdict::routing_loop::RoutingLoop),
    /// A device's queueing discipline dropped packets of the flow
    /// (verdict/qdisc_drop.rs).
    QdiscDropped(crate::verdict::qdisc_drop::QdiscDrops),
    /// An IPsec policy refused the packet (verdict/xfrm_policy.rs).
    XfrmRefused(crate::verdict::xfrm_policy::XfrmRefusal),
    /// A fragmented datagram's reassembly timed out (verdict/fragments.rs).
    FragmentsLost(crate::verdict::fragments::FragmentsLost),
    /// The other end of a veth did not take the frame: down, or an MTU
    /// smaller than the frame (verdict/veth.rs).
    VethOtherEnd(crate::verdict::veth::VethRefusal),
    /// A cgroup socket program rewrote the socket call's destination
    /// before any packet existed (verdict/sock_lb.rs).
    SocketRewrite(crate::verdict::sock_lb::SocketRewrite),
    /// A tc or XDP program rewrote the request's destination, with no
    /// conntrack entry (verdict/bpf_nat.rs).
    BpfRewrite(crate::verdict::bpf_nat::BpfRewrite),
    /// The dataplane's tc and XDP programs the packets passed, and what
    /// each did (verdict/bpf_path.rs).
    BpfPath(crate::verdict::bpf_path::BpfPath),
    /// Conntrack state, not the rules, decided the packet
    /// (verdict/ct_state.rs).
    ConntrackKept(crate::verdict::ct_state::ConntrackKept),
    /// The route lookup before DNAT, which chose the source address.
    PreNatRoute {
        dst: IpAddr,
        dev: String,
        gw: Option<IpAddr>,
        src: IpAddr,
    },
    /// After DNAT the packet left with another device's address as source.
    NatSourceMismatch {
        dst: Endpoint,
        dev: String,
        src: IpAddr,
        src_dev: String,
    },
    /// No reply packet was seen.
    NoReply,
    /// Reply route lookups in that namespace all failed.
    NoRouteBack { netns: String, dst: IpAddr },

    // Delivery.
    /// A reply left the namespace the flow's destination is in.
    DestinationAnswered { netns: String },
    /// A socket-layer function consumed the request.
    SocketConsumed { func: String, netns: String },
    /// The client's socket became ESTABLISHED.
    ClientHandshake { netns: String },
    /// The server's socket reached SYN_RECV or ESTABLISHED.
    ServerSocketState { state: String, netns: String },
    /// A local socket read the data.
    SocketRead { netns: String },
    /// The request was queued to a local socket.
    SocketQueued { netns: String },
    /// A packet of the flow dropped after it was delivered.
    LaterDrop {
        reason: DropReason,
        location: String,
    },

    // Drops: the node configuration behind them.
    /// IP forwarding is off on the device the packet came in by (the
    /// `forwarding` sysctl of that device, net/ipv4/route.c ip_error()).
    ForwardingDisabled {
        netns: String,
        dev: String,
        /// `ipv4` or `ipv6`.
        family: String,
    },
    /// Packets larger than the egress device's MTU (with DF) were dropped
    /// on forwarding, again and again: the sender never lowered its size
    /// (the ICMP "fragmentation needed" did not reach it, or was not
    /// sent).
    MtuExceeded {
        netns: String,
        /// The device the packets would have left by, and its MTU.
        dev: String,
        mtu: u32,
        /// The device they came in by, and its MTU (larger).
        in_dev: String,
        in_mtu: Option<u32>,
        drops: u32,
        /// ICMP errors the kernel built about them (icmp_send hops: IPv4
        /// only, icmpv6_send() has no tracepoint).
        icmp_sent: u32,
        /// `ipv4` or `ipv6` ("" in facts read back from before it was
        /// kept: IPv4).
        #[serde(default)]
        family: String,
    },

    /// One packet larger than the egress device's MTU, dropped where it
    /// was to be forwarded (ip_forward()'s ip_exceeds_mtu(), ip6_forward()):
    /// the next link's MTU, the packet's size, and whether the kernel told
    /// the sender (ICMP "fragmentation needed"; icmpv6_send() has no
    /// tracepoint). More than one such drop is [`Evidence::MtuExceeded`].
    PacketTooBig {
        netns: String,
        dev: String,
        mtu: u32,
        /// The packet's IP length where it was last seen before the drop.
        len: Option<u32>,
        in_dev: String,
        in_mtu: Option<u32>,
        icmp_sent: bool,
        /// `ipv4` or `ipv6`.
        family: String,
    },

    /// The address NAT translated the request to (a Service's endpoint)
    /// did not answer neighbour resolution: the endpoint is gone or not on
    /// that link, yet NAT (a rule, or a conntrack entry made before it
    /// went) still sends there.
    EndpointUnanswered {
        netns: String,
        endpoint: IpAddr,
        /// The address the request was sent to (the Service's).
        original: IpAddr,
    },

    /// The routing table refused the dropped request's destination (after
    /// NAT): `ip route get` in that namespace, as the kernel routed it
    /// (from `iif`, or sent from there), answered a blackhole,
    /// unreachable or prohibit route or rule, or no route.
    /// `after_nat_in_output`: a NETFILTER_DROP no rule explains, where the
    /// lookup again after NAT in OUTPUT (ip_route_me_harder()) failed.
    RouteRefused {
        netns: String,
        dst: IpAddr,
        /// The destination before NAT, when NAT changed it.
        original: Option<IpAddr>,
        iif: Option<String>,
        outcome: crate::node::route::RouteOutcome,
        after_nat_in_output: bool,
    },

    /// The reverse-path filter of the device the packet came in by
    /// refused it: the route back to its source leaves by another device
    /// (fib_validate_source()'s lookup, seen by the fib tracepoint).
    RpFilterMismatch {
        netns: String,
        dev: String,
        /// 1 strict, 2 loose (the value that applied), None: unread.
        mode: Option<u8>,
        src: IpAddr,
        /// Where the route back to `src` goes ("" when no route).
        back_dev: String,
    },

    /// The receiving socket's buffer was full (SOCKET_RCVBUFF): the
    /// application does not read as fast as packets come. `drops` and
    /// `rx_queue` are the socket's own (its /proc/net/udp line), when read.
    SocketBufferFull {
        netns: String,
        proto: String,
        endpoint: Endpoint,
        /// Packets of the flow dropped so, and delivered to it.
        dropped: u32,
        delivered: u32,
        rx_queue: Option<u64>,
        socket_drops: Option<u64>,
    },
    /// No socket at all on the port the packet was for, in the namespace
    /// that received it (its /proc/net/{tcp,udp}).
    NoListener {
        netns: String,
        /// `tcp` or `udp`.
        proto: String,
        endpoint: Endpoint,
    },
    /// The port is bound in that namespace, but only on other addresses
    /// than the packet's destination (a server on 127.0.0.1 or another IP).
    ListensElsewhere {
        netns: String,
        proto: String,
        endpoint: Endpoint,
        bound: Vec<Endpoint>,
    },
    /// Netfilter dropped the packet with no rule's counter moving, in a
    /// namespace whose conntrack table is at its limit
    /// (nf_conntrack_count >= nf_conntrack_max) or whose conntrack has
    /// dropped packets for want of an entry: __nf_conntrack_alloc() found
    /// no room and nothing to evict, nf_conntrack_in() returned NF_DROP.
    /// The counters are /proc/net/stat/nf_conntrack's, summed over CPUs.
    ConntrackFull {
        netns: String,
        /// nf_conntrack_count and nf_conntrack_max.
        entries: u64,
        max: u64,
        drop: u64,
        early_drop: u64,
        insert_failed: u64,
    },

    /// Netfilter dropped a connection's first packet where conntrack
    /// confirms its new entry (__nf_conntrack_confirm(), at the last hook
    /// the packet passes: POSTROUTING, or INPUT for local delivery), no
    /// rule dropped it, and the namespace's `insert_failed` counter is not
    /// 0: another entry already held the tuple and nf_ct_resolve_clash()
    /// could not merge the two (two different connections, or a protocol
    /// without clash resolution). `reply_src`/`reply_dst`: the reply tuple
    /// the entry needed (the packet's tuple after NAT, reversed); `snat`/
    /// `dnat`: NAT had changed its source/destination. Counters from
    /// /proc/net/stat/nf_conntrack, summed over CPUs.
    ConntrackInsertFailed {
        netns: String,
        reply_src: Endpoint,
        reply_dst: Endpoint,
        snat: bool,
        dnat: bool,
        insert_failed: u64,
        drop: u64,
    },

    /// A TCP listener took the request's SYNs and never answered: its
    /// accept queue is full (`waiting` > `backlog`, its /proc/net/tcp line),
    /// so tcp_conn_request() drops them. `overflows` and `listen_drops`
    /// are the namespace's TcpExt ListenOverflows / ListenDrops.
    ListenQueueFull {
        netns: String,
        endpoint: Endpoint,
        waiting: u64,
        backlog: u64,
        syns: u32,
        overflows: Option<u64>,
        listen_drops: Option<u64>,
    },

    /// No route was found after these routing rules selected the packet
    /// (`ip rule` order; each lookup with its table's size: an empty table
    /// is passed over), or `refused`: the last rule's action (unreachable,
    /// prohibit, blackhole) refused it.
    NoRouteAfterRules {
        netns: String,
        dst: IpAddr,
        rules: Vec<String>,
        refused: bool,
    },

    /// A rule dropping what conntrack finds INVALID dropped the packet;
    /// `invalid` is the namespace's conntrack counter (None: unread), and
    /// `requests_seen` whether the flow's requests passed that namespace
    /// (a reply dropped where none did: asymmetric routing).
    ConntrackInvalid {
        netns: String,
        dir: Dir,
        rule: String,
        invalid: Option<u64>,
        requests_seen: bool,
    },

    // Drops.
    /// Where the drop happened (skb:kfree_skb).
    PacketDropped {
        dir: Dir,
        /// Code location ("" when unknown).
        location: String,
        /// Device ("" when none).
        dev: String,
        netns: String,
    },
    /// nf_hook_slow() returned a drop at this netfilter hook.
    NfHookDrop { hook: String, backend: String },
    /// The netfilter hook inferred from the packet's path.
    NfHookInferred { hook: String },
    /// nft_do_chain()/ipt_do_table() returned a non-ACCEPT verdict.
    NfChainVerdict {
        func: String,
        backend: String,
        detail: String,
    },
    /// A drop/reject rule's packet counter moved while tracing.
    NfRuleMoved {
        /// `ip`, `ip6`, `inet`, ... ("" in recordings made before it was
        /// kept).
        #[serde(default)]
        family: String,
        table: String,
        chain: String,
        /// nf_tables rule handle (0 for legacy iptables).
        #[serde(default)]
        handle: u64,
        /// The rule as `nft list ruleset` prints it, without its counter
        /// (as iptables-legacy-save prints it for legacy tables).
        rule: String,
        /// The rule's comment, if any.
        #[serde(default)]
        comment: Option<String>,
        /// `drop` or `reject`.
        #[serde(default)]
        verdict: String,
        /// How the rule was found: `counters` (its counter moved).
        #[serde(default)]
        method: NfMethod,
        delta: u64,
    },
    /// nf_tables tracing saw this rule (or a chain's policy) drop the
    /// packet: exact, on any kernel with nf_tables (node::nftrace).
    NfRuleTraced {
        /// `ip`, `ip6`, `inet`, ...
        family: String,
        table: String,
        chain: String,
        /// nf_tables rule handle (0 for a chain's policy).
        handle: u64,
        /// The rule as `nft list ruleset` prints it ("" for a policy).
        rule: String,
        comment: Option<String>,
        /// `drop`, `reject`, `queue` or `policy drop`.
        verdict: String,
        /// The jumps and gotos that led there, as `chain: verdict`.
        via: Vec<String>,
        /// The verdict-map element that sent the packet on its way.
        element: Option<crate::node::nftrace::MapElement>,
        /// The hook of the base chain the packet was in (`INPUT`), when
        /// read (a chain dump at the report).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<String>,
        /// How the rule was found: `nftrace`.
        method: NfMethod,
    },
    /// kube-proxy's nftables rules sent the flow to this Service (and
    /// endpoint): its gotos to the Service's and endpoint's chains.
    KubeServiceRouted {
        service: String,
        endpoint: Option<String>,
        netns: String,
    },
    /// kube-proxy dropped it: a Service with externalTrafficPolicy: Local
    /// and no endpoint on this node (its rule's comment says so).
    KubeNoLocalEndpoints { service: String },
    /// kube-proxy rejected it: the Service has no endpoints (its element
    /// in @no-endpoint-services; in iptables mode, its rule's comment).
    KubeServiceNoEndpoints { service: String },
    /// kube-proxy dropped it: a ClusterIP no Service has (its rule
    /// "Drop traffic to unallocated ClusterIPs").
    KubeClusterIpUnallocated { addr: IpAddr },
    /// kube-proxy dropped it: its source is outside the Service's
    /// loadBalancerSourceRanges (its firewall chain).
    KubeSourceRangesDrop { service: String, src: IpAddr },
    /// A NetworkPolicy controller's rule dropped it: no policy selecting
    /// the pod allows this traffic (read from the rule's comment and
    /// chain, as the controller names them).
    NetworkPolicyDrop {
        /// `kube-router` or `calico`.
        enforcer: String,
        direction: PolicyDirection,
        /// `namespace/name`, when the controller's rule names the pod.
        #[serde(default)]
        pod: Option<String>,
        /// The pod's host-side interface, when the chain names it.
        #[serde(default)]
        iface: Option<String>,
    },
    /// As `nf_rule_moved`, for kube-proxy's rule dropping traffic to a
    /// Service without local endpoints (externalTrafficPolicy: Local).
    NoLocalEndpointsRuleMoved {
        /// `ip`, `ip6`, `inet`, ... ("" in recordings made before it was
        /// kept).
        #[serde(default)]
        family: String,
        table: String,
        chain: String,
        /// nf_tables rule handle (0 for legacy iptables).
        #[serde(default)]
        handle: u64,
        /// The rule as `nft list ruleset` prints it, without its counter
        /// (as iptables-legacy-save prints it for legacy tables).
        rule: String,
        /// The rule's comment, if any.
        #[serde(default)]
        comment: Option<String>,
        /// `drop` or `reject`.
        #[serde(default)]
        verdict: String,
        /// How the rule was found: `counters` (its counter moved).
        #[serde(default)]
        method: NfMethod,
        delta: u64,
    },
    /// A NEIGH_* drop: what the sender is told.
    HostUnreachableInferred,
    /// This kernel's skb:kfree_skb gives no reason (before 5.17): `reason`
    /// was inferred from the drop location's function
    /// (tracer/src/model/inferred.rs), or, when null, that function drops
    /// for any of `one_of` (empty: it is not in the table).
    DropReasonInferred {
        location: String,
        reason: Option<DropReason>,
        one_of: Vec<DropReason>,
        /// The kernel gives reasons, but this site gave NOT_SPECIFIED
        /// (model/inferred.rs `unreasoned`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        site_only: bool,
    },
    /// The dropped flow's destination is an address of that namespace.
    LocalDestination {
        addr: IpAddr,
        dev: String,
        netns: String,
    },

    // IPVS.
    /// ip_vs_schedule() chose a real server.
    IpvsScheduled {
        service: Endpoint,
        real_server: Option<Endpoint>,
        netns: String,
        backend: String,
    },
    /// ip_vs_schedule() found no destination.
    IpvsNoDestination { netns: String, backend: String },
    /// The IPVS hooks said nothing: inferred from the drop and the table.
    IpvsHooksSilent,
    /// The virtual service in the namespace's IPVS table.
    IpvsService {
        /// `TCP 10.16.0.1:80`.
        service: String,
        scheduler: String,
        real_servers: usize,
        /// Real servers with weight > 0.
        usable: usize,
    },
    /// The IPVS table has no virtual service for the flow.
    IpvsNoService { netns: String },
    /// The Service IP is bound locally, as kube-proxy does in IPVS mode.
    IpvsLocalAddress {
        addr: IpAddr,
        dev: String,
        netns: String,
    },
    /// The request was dropped there.
    RequestDropped {
        location: Option<String>,
        reason: Option<DropReason>,
        netns: String,
    },
    /// No reply direction event at all.
    NoReplyLeft,

    // Forwarding and the rest.
    /// Received on one device, transmitted on another.
    Forwarded { in_dev: String, out_dev: String },
    /// Reply packets seen.
    RepliesCameBack { replies: u32, netns: String },
    /// Packet counts when nothing conclusive was seen.
    PacketsSeen { requests: u32, replies: u32 },

    // The destination address (the VIP watch).
    /// The address was added to or removed from interfaces while tracing;
    /// `first` holds the first six of the `changes`.
    OwnerChanged {
        addr: IpAddr,
        changes: usize,
        first: Vec<OwnerChange>,
    },
    /// Several link-layer addresses answered for the address.
    SeveralMacs { addr: IpAddr, macs: Vec<String> },

    // Completeness.
    /// Events lost (ring buffer full).
    EventsLost { events: u64 },
    /// Kernel map inserts failed (maps full).
    MapInsertsFailed { inserts: u64 },
    /// Core hooks that could not be attached.
    HooksUnavailable { hooks: Vec<String> },
    /// A function hook that feeds this verdict could not be attached.
    FuncHookUnavailable { hook: String, why: String },
    /// Hops past the per-flow limit.
    HopsNotKept { hops: u32 },
    /// Hook passages counted in the kernel, not recorded.
    CountedInKernel { passages: u32 },
}

impl Evidence {
    /// Owner changes listed in `owner_changed` (and its sentence).
    pub const OWNER_CHANGES_LISTED: usize = 6;

    pub fn kind(&self) -> EvidenceKind {
        self.into()
    }

    /// The snake_case kind name (the JSON `kind`).
    pub fn kind_name(&self) -> &'static str {
        self.into()
    }
}

impl EvidenceKind {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

impl Evidence {
    /// The fact of a rule whose counter moved by `delta`: kube-proxy's
    /// no-local-endpoints rule, or any other.
    pub fn rule_moved(r: &NfRule, delta: u64) -> Evidence {
        let (family, table, chain, handle, rule, comment, verdict, method) = (
            r.family.clone(),
            r.table.clone(),
            r.chain.clone(),
            r.handle,
            r.text.clone(),
            r.comment.clone(),
            r.verdict.clone(),
            NfMethod::Counters,
        );
        if r.drops_without_local_endpoints() {
            Evidence::NoLocalEndpointsRuleMoved {
                family,
                table,
                chain,
                handle,
                rule,
                comment,
                verdict,
                method,
                delta,
            }
        } else {
            Evidence::NfRuleMoved {
                family,
                table,
                chain,
                handle,
                rule,
                comment,
                verdict,
                method,
                delta,
            }
        }
    }
}

/// Each fact's sentence, told by its family (evidence/sentence.rs says
/// which).
impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        sentence::of(self, f)
    }
}

/// The tagged fields of a fact, without its sentence.
struct Tagged<'a>(&'a Evidence);

impl Serialize for Tagged<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The derived (remote = "Self") serialiser.
        Evidence::serialize(self.0, s)
    }
}

#[derive(Serialize)]
struct WithText<'a> {
    #[serde(flatten)]
    fact: Tagged<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u32>,
    text: String,
}

/// `{"kind": ..., fields..., "text": "<sentence>"}`.
impl Serialize for Evidence {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WithText {
            fact: Tagged(self),
            count: None,
            text: self.to_string(),
        }
        .serialize(s)
    }
}

/// From the tagged fields; `text` and any other field are ignored.
impl<'de> Deserialize<'de> for Evidence {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Evidence, D::Error> {
        Evidence::deserialize(d)
    }
}

/// A fact of a verdict with how many times it was seen (equal facts from
/// several hops are collapsed into one item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub fact: Evidence,
    pub count: u32,
}

impl Item {
    pub fn once(fact: Evidence) -> Item {
        Item { fact, count: 1 }
    }
}

impl From<Evidence> for Item {
    fn from(fact: Evidence) -> Item {
        Item::once(fact)
    }
}

/// The fact's sentence, with " (N times)" when seen more than once.
impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.fact)?;
        if self.count > 1 {
            write!(f, " ({} times)", self.count)?;
        }
        Ok(())
    }
}

/// A fact's object: its kind's fields, `text`, and `count` when seen more
/// than once.
impl schemars::JsonSchema for Item {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EvidenceItem".into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let fact = g.subschema_for::<Evidence>();
        schemars::json_schema!({
            "allOf": [
                fact,
                {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "the fact as a sentence, with \" (N times)\" when counted"},
                        "count": {"type": "integer", "minimum": 2, "description": "how many hops gave this fact, when more than one"}
                    },
                    "required": ["text"]
                }
            ]
        })
    }
}

/// As its fact, with `count` when more than 1 and the counted sentence as
/// `text`.
impl Serialize for Item {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WithText {
            fact: Tagged(&self.fact),
            count: (self.count > 1).then_some(self.count),
            text: self.to_string(),
        }
        .serialize(s)
    }
}

/// Equal facts once each, in order of first appearance, with how many times.
pub fn collapse(items: Vec<Item>) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::with_capacity(items.len());
    for it in items {
        match out.iter_mut().find(|o| o.fact == it.fact) {
            Some(o) => o.count += it.count,
            None => out.push(it),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use strum::IntoEnumIterator;

    use super::*;
    use crate::node::vip::OwnerEvent;

    /// One fact of every kind.
    #[expect(clippy::too_many_lines, reason = "one arm per evidence kind")]
    fn samples() -> Vec<Evidence> {
        use Evidence::*;
        let a: IpAddr = "10.0.0.9".parse().unwrap();
        let b: IpAddr = "fd00::2".parse().unwrap();
        let s = |x: &str| x.to_string();
        vec![
            TcpResetSent {
                netns: s("s"),
                reason: Some(s("NO_SOCKET")),
            },
            TcpResetSent {
                netns: s("s"),
                reason: None,
            },
            IcmpSent {
                netns: s("r"),
                icmp_type: 3,
                icmp_code: 0,
                desc: s("dest-unreachable net-unreachable"),
            },
            FunctionHook {
                func: s("ip_vs_conn_in_get_proto"),
                backend: s("kprobe"),
                netns: s("n"),
                detail: s("IPVS: existing connection reused"),
            },
            NeighbourState {
                addr: a,
                dev: s("eth0"),
                netns: s("c"),
                state: Nud(0x21),
                event: s("timer"),
            },
            ForwardedBack {
                netns: s("node1"),
                dev: s("eth0"),
            },
            LocalRoute {
                dst: a,
                dev: s("kube-ipvs0"),
            },
            OtherHostsSubnet {
                dst: a,
                net: "10.0.0.1".parse().unwrap(),
                prefix: 24,
                dev: s("e1"),
            },
            LocalAddressTransmitted {
                dev: s("eth0"),
                netns: s("host"),
                addr: a,
            },
            TcRedirect {
                ingress_dev: s("lxc0"),
                egress_dev: s("eth0"),
            },
            TcFilter {
                dev: s("lxc0"),
                filter: s("tc BPF program x (id 1)"),
            },
            XdpAction {
                dev: s("eth0"),
                netns: s("node"),
                program: Some(crate::node::bpf_progs::AttachedProgram {
                    id: 7,
                    name: s("xdp_lb"),
                    hook: s("xdp"),
                    at: s("eth0 (generic)"),
                }),
                action: crate::model::hop::XdpData {
                    action: crate::model::hop::XdpAction::XdpRedirect,
                    prog_id: 7,
                    to_ifindex: 9,
                    err: -100,
                    map_id: 0,
                    map_key: 0,
                },
                to_dev: Some(s("lxc9")),
            },
            XdpNativeTaken(crate::verdict::xdp_native::XdpNativeTaken {
                dev: s("lxc0"),
                netns: s("node"),
                programs: vec![crate::node::bpf_progs::AttachedProgram {
                    id: 7,
                    name: s("xdp_redirect"),
                    hook: s("xdp"),
                    at: s("lxc0 (driver)"),
                }],
                copied_at: s("skb_pp_cow_data"),
            }),
            XdpMoved(crate::verdict::xdp_moved::XdpMove {
                dev: s("eth0"),
                netns: s("vm"),
                programs: Vec::new(),
                action: crate::model::hop::XdpAction::XdpTx,
                to_dev: None,
                seen_dev: s("p-vm"),
                seen_netns: s("host"),
                unchanged: false,
            }),
            BpfProgramDrop {
                hook: s("tc ingress"),
                dev: s("lxc0"),
                netns: s("node"),
                programs: vec![crate::node::bpf_progs::AttachedProgram {
                    id: 42,
                    name: s("cil_from_contai"),
                    hook: s("tc ingress"),
                    at: s("lxc0 (clsact prio 1)"),
                }],
            },
            SocketRewrite(crate::verdict::sock_lb::SocketRewrite {
                call: crate::model::hop::SockCall::Connect,
                asked: Endpoint::new("10.96.0.10".parse().unwrap(), 53),
                became: Endpoint::new("10.0.1.23".parse().unwrap(), 53),
                pid: 4242,
                comm: s("coredns"),
                netns: s("pod"),
                cgroup: Some(s("/kubepods/pod1")),
                programs: vec![crate::node::bpf_progs::AttachedProgram {
                    id: 7,
                    name: s("cil_sock4_connect"),
                    hook: s("connect4"),
                    at: s("/"),
                }],
                reply_source_kept: false,
            }),
            BpfRewrite(crate::verdict::bpf_nat::BpfRewrite {
                asked: Endpoint::new("10.96.0.20".parse().unwrap(), 80),
                became: Endpoint::new("10.0.1.24".parse().unwrap(), 8080),
                hook: s("tc ingress"),
                dev: s("lxc0"),
                netns: s("node"),
                programs: vec![crate::node::bpf_progs::AttachedProgram {
                    id: 43,
                    name: s("cil_from_contai"),
                    hook: s("tcx ingress"),
                    at: s("lxc0"),
                }],
                reply_untranslated: Some(crate::verdict::bpf_nat::UntranslatedReply {
                    netns: s("node"),
                    dev: s("eth1"),
                    programs: Vec::new(),
                    client_netns: s("client"),
                }),
            }),
            BpfPath(crate::verdict::bpf_path::BpfPath {
                sites: vec![crate::verdict::bpf_path::ProgramSite {
                    dir: crate::model::hop::Dir::Request,
                    hook: s("tc ingress"),
                    dev: s("lxc0"),
                    netns: s("node"),
                    programs: vec![crate::node::bpf_progs::AttachedProgram {
                        id: 43,
                        name: s("cil_from_contai"),
                        hook: s("tcx ingress"),
                        at: s("lxc0"),
                    }],
                    outcome: crate::verdict::bpf_path::Outcome::Redirected,
                    to_dev: Some(s("lxc1")),
                    xdp: None,
                }],
            }),
            ConntrackKept(crate::verdict::ct_state::ConntrackKept {
                kept: crate::verdict::ct_state::Kept::OldTranslation,
                netns: s("node"),
                service: Some(s("default/statsd:statsd")),
                original: Endpoint::new("10.96.0.25".parse().unwrap(), 8125),
                translated: Some(Endpoint::new("10.0.1.5".parse().unwrap(), 8125)),
                endpoints_now: vec![s("10.0.1.9:8125")],
                dev: None,
                tcp_be_liberal: None,
                invalid: None,
            }),
            BridgeWillNotForward(crate::verdict::bridge::BridgeRefusal {
                bridge: s("cni0"),
                port: s("vethpod"),
                netns: s("node"),
                setting: crate::verdict::bridge::BridgeSetting::HairpinOff,
                stp_state: None,
                peer: None,
                dst: Some(a),
                ingress: true,
                other_end_of: None,
                vlan: None,
                not_in_vlan: Vec::new(),
                no_pvid: false,
            }),
            BridgeWillNotForward(crate::verdict::bridge::BridgeRefusal {
                bridge: s("cni0"),
                port: s("veth1"),
                netns: s("node"),
                setting: crate::verdict::bridge::BridgeSetting::StpState,
                stp_state: Some(s("listening")),
                peer: None,
                dst: None,
                ingress: true,
                other_end_of: Some(s("eth0")),
                vlan: None,
                not_in_vlan: Vec::new(),
                no_pvid: false,
            }),
            BridgeWillNotForward(crate::verdict::bridge::BridgeRefusal {
                bridge: s("br1"),
                port: s("vethpod"),
                netns: s("node1"),
                setting: crate::verdict::bridge::BridgeSetting::VlanFiltering,
                stp_state: None,
                peer: None,
                dst: None,
                ingress: true,
                other_end_of: Some(s("eth0")),
                vlan: Some(100),
                not_in_vlan: vec![s("eth1")],
                no_pvid: false,
            }),
            SourceRefused(crate::verdict::source_addr::SourceRefusal {
                netns: s("node"),
                dev: s("cali1"),
                src: IpAddr::from([10, 1, 1, 7]),
                is_dst: false,
                sent_to: None,
                held_by: Some(s("vxlan.calico")),
                martian: None,
            }),
            ChecksumBad(crate::verdict::checksum::ChecksumFault {
                proto: s("UDP"),
                netns: s("node"),
                dev: s("eth0"),
                rewritten: None,
            }),
            FragmentsLost(crate::verdict::fragments::FragmentsLost {
                netns: s("client"),
                dev: s("c0"),
                first_len: Some(1500),
                frag_time: Some(30),
                forwarded_by: vec![s("router")],
            }),
            XfrmRefused(crate::verdict::xfrm_policy::XfrmRefusal {
                netns: s("node1"),
                policy: crate::node::xfrm::XfrmPolicy {
                    dir: s("out"),
                    action: s("allow"),
                    src: s("10.1.1.0/24"),
                    dst: s("10.1.2.0/24"),
                    proto: 0,
                    priority: 0,
                    mark: None,
                    templates: vec![crate::node::xfrm::XfrmTmpl {
                        proto: s("esp"),
                        mode: s("tunnel"),
                        reqid: 11,
                        src: Some(IpAddr::from([192, 0, 2, 1])),
                        dst: Some(IpAddr::from([192, 0, 2, 2])),
                        optional: false,
                    }],
                },
                problem: crate::verdict::xfrm_policy::XfrmProblem::NoState,
                policies: 2,
                states: 0,
            }),
            QdiscDropped(crate::verdict::qdisc_drop::QdiscDrops {
                netns: s("node"),
                dev: s("bwp1"),
                dropped: 8,
                qdiscs: vec![crate::node::qdisc::Qdisc {
                    kind: s("tbf"),
                    handle: s("1:0"),
                    parent: s("root"),
                    packets: 161,
                    bytes: 16100,
                    drops: 41,
                    overlimits: 52,
                    qlen: 0,
                    backlog: 0,
                    params: Some(crate::node::qdisc::QdiscParams::Tbf {
                        rate: 125_000,
                        burst: Some(1600),
                        buffer_ticks: 12800,
                        limit: 3000,
                    }),
                }],
            }),
            RoutingLoop(crate::verdict::routing_loop::RoutingLoop {
                dst: IpAddr::from([10, 1, 100, 7]),
                routes: vec![crate::verdict::routing_loop::LoopRoute {
                    netns: s("node"),
                    dev: s("eth0"),
                    gw: Some(IpAddr::from([10, 1, 0, 1])),
                    gw_netns: Some(s("tor")),
                }],
                passes: 3,
            }),
            CgroupProgramDrop(crate::verdict::cgroup_skb::CgroupSkbDrop {
                hook: s("cgroup_skb egress"),
                netns: s("node"),
                socket: Some(s("udp 10.1.1.2:5000")),
                cgroup: Some(s("/system.slice/x.service")),
                programs: vec![crate::node::bpf_progs::AttachedProgram {
                    id: 7,
                    name: s("sd_fw_egress"),
                    hook: s("cgroup_skb egress"),
                    at: s("/system.slice/x.service"),
                }],
            }),
            SysctlRefused(crate::verdict::sysctl::SysctlRefusal {
                netns: s("node"),
                dev: s("eth0"),
                sysctl: crate::verdict::sysctl::Sysctl::RouteLocalnet,
                addr: Some(IpAddr::from([127, 0, 0, 1])),
                sent_to: Some(a),
                other_end_of: None,
            }),
            VethOtherEnd(crate::verdict::veth::VethRefusal {
                dev: s("veth2"),
                netns: s("node"),
                other_dev: s("eth0"),
                other_netns: s("pod"),
                problem: crate::verdict::veth::VethProblem::MtuSmaller,
                mtu: Some(1400),
                dev_mtu: Some(1500),
                len: Some(1514),
            }),
            SysctlRefused(crate::verdict::sysctl::SysctlRefusal {
                netns: s("pod2"),
                dev: s("eth0"),
                sysctl: crate::verdict::sysctl::Sysctl::DisableIpv6,
                addr: None,
                sent_to: None,
                other_end_of: Some(s("lxc2")),
            }),
            TunnelWillNotSend(crate::verdict::tunnel::TunnelRefusal {
                dev: s("flannel.1"),
                netns: s("node"),
                vni: 1,
                port: 8472,
                problem: crate::verdict::tunnel::TunnelProblem::NoFdbEntry,
                next_hop: Some(b),
                mac: Some(s("0a:58:0a:cf:02:00")),
                fdb_entries: 0,
                learning: false,
                vtep: None,
                dev_mac: None,
                sender_netns: None,
                far_netns: None,
                far_devices: Vec::new(),
                gbp: false,
                gpe: false,
                external: false,
                underlay: None,
                local: None,
            }),
            ProtocolUnhandled(crate::verdict::no_protocol::ProtocolUnhandled {
                proto: 132,
                name: s("SCTP"),
                module: Some(s("sctp")),
                netns: s("pod"),
            }),
            Encapsulated(crate::verdict::tunnel::Encapsulation {
                tunnel: s("VXLAN"),
                dev: s("vxlan.calico"),
                netns: s("node1"),
                outer: s("udp 10.0.0.1:41234 -> 10.0.0.2:4789"),
                out_netns: Some(s("node2")),
                out_dev: Some(s("vxlan.calico")),
            }),
            PreNatRoute {
                dst: a,
                dev: s("glob"),
                gw: Some(b),
                src: a,
            },
            PreNatRoute {
                dst: a,
                dev: s("glob"),
                gw: None,
                src: a,
            },
            NatSourceMismatch {
                dst: Endpoint::new(b, 443),
                dev: s("priv"),
                src: a,
                src_dev: s("glob"),
            },
            NoReply,
            NoRouteBack {
                netns: s("m"),
                dst: b,
            },
            DestinationAnswered { netns: s("s") },
            SocketConsumed {
                func: s("tcp_rcv_state_process"),
                netns: s("s"),
            },
            ClientHandshake { netns: s("c") },
            ServerSocketState {
                state: s("SYN_RECV"),
                netns: s("s"),
            },
            SocketRead { netns: s("s") },
            SocketQueued { netns: s("s") },
            LaterDrop {
                reason: DropReason::QueuePurge,
                location: s("sk_stream_kill_queues+0x57"),
            },
            ForwardingDisabled {
                netns: s("r"),
                dev: s("r0"),
                family: s("ipv4"),
            },
            RpFilterMismatch {
                netns: s("r"),
                dev: s("r0"),
                mode: Some(1),
                src: a,
                back_dev: s("r1"),
            },
            NoListener {
                netns: s("s"),
                proto: s("udp"),
                endpoint: Endpoint::new(a, 53),
            },
            SocketBufferFull {
                netns: s("s"),
                proto: s("udp"),
                endpoint: Endpoint::new(a, 53),
                dropped: 1700,
                delivered: 300,
                rx_queue: Some(212_992),
                socket_drops: Some(1700),
            },
            ListensElsewhere {
                netns: s("s"),
                proto: s("udp"),
                endpoint: Endpoint::new(a, 53),
                bound: vec![Endpoint::new(b, 53)],
            },
            MtuExceeded {
                netns: s("r"),
                dev: s("r1"),
                mtu: 1280,
                in_dev: s("r0"),
                in_mtu: Some(1500),
                drops: 5,
                icmp_sent: 5,
                family: s("ipv4"),
            },
            MtuExceeded {
                netns: s("r"),
                dev: s("r1"),
                mtu: 1280,
                in_dev: s("r0"),
                in_mtu: Some(1500),
                drops: 8,
                icmp_sent: 0,
                family: s("ipv6"),
            },
            Evidence::EndpointUnanswered {
                netns: s("node"),
                endpoint: b,
                original: a,
            },
            Evidence::RouteRefused {
                netns: s("node"),
                dst: b,
                original: Some(a),
                iif: None,
                outcome: crate::node::route::RouteOutcome::NoRoute,
                after_nat_in_output: true,
            },
            Evidence::RouteRefused {
                netns: s("node"),
                dst: b,
                original: None,
                iif: Some(s("eth0")),
                outcome: crate::node::route::RouteOutcome::Blackhole,
                after_nat_in_output: false,
            },
            PacketTooBig {
                netns: s("r"),
                dev: s("flannel.1"),
                mtu: 1450,
                len: Some(1488),
                in_dev: s("lxc0"),
                in_mtu: Some(1500),
                icmp_sent: true,
                family: s("ipv4"),
            },
            Evidence::ListenQueueFull {
                netns: s("s"),
                endpoint: Endpoint::new(a, 8080),
                waiting: 1,
                backlog: 0,
                syns: 2,
                overflows: Some(2),
                listen_drops: Some(2),
            },
            Evidence::NoRouteAfterRules {
                netns: s("r"),
                dst: a,
                rules: vec![
                    s("0: from all lookup local (5 routes)"),
                    s("100: from all to 10.0.0.0/24 lookup 100 (empty)"),
                    s("32766: from all lookup main (3 routes)"),
                ],
                refused: false,
            },
            Evidence::ConntrackInvalid {
                netns: s("r"),
                dir: Dir::Reply,
                rule: s("ct state invalid drop"),
                invalid: Some(3),
                requests_seen: false,
            },
            Evidence::ConntrackInsertFailed {
                netns: s("r"),
                reply_src: Endpoint::new([10, 0, 2, 2].into(), 53),
                reply_dst: Endpoint::new([10, 0, 2, 1].into(), 5000),
                snat: true,
                dnat: false,
                insert_failed: 1,
                drop: 1,
            },
            Evidence::ConntrackFull {
                netns: s("r"),
                entries: 1,
                max: 1,
                drop: 3,
                early_drop: 0,
                insert_failed: 0,
            },
            PacketDropped {
                dir: Dir::Reply,
                location: s(""),
                dev: s(""),
                netns: s("r"),
            },
            NfHookDrop {
                hook: s("ipv4 INPUT"),
                backend: s("fentry"),
            },
            NfHookInferred { hook: s("FORWARD") },
            NfChainVerdict {
                func: s("nft_do_chain"),
                backend: s("fentry"),
                detail: s("nft table filter chain input: DROP"),
            },
            NfRuleMoved {
                family: s("ip"),
                table: s("filter"),
                chain: s("INPUT"),
                handle: 4,
                rule: s("tcp dport 8083 drop"),
                comment: None,
                verdict: s("drop"),
                method: NfMethod::Counters,
                delta: 3,
            },
            NoLocalEndpointsRuleMoved {
                family: s("ip"),
                table: s("filter"),
                chain: s("KUBE-EXTERNAL-SERVICES"),
                handle: 12,
                rule: s(
                    "meta l4proto tcp ip daddr 10.16.0.1 comment \"default/nginx:http has no local endpoints\" tcp dport 80 drop",
                ),
                comment: Some(s("default/nginx:http has no local endpoints")),
                verdict: s("drop"),
                method: NfMethod::Counters,
                delta: 1,
            },
            HostUnreachableInferred,
            DropReasonInferred {
                location: s("tcp_v4_rcv"),
                reason: Some(DropReason::NoSocket),
                one_of: vec![],
                site_only: false,
            },
            DropReasonInferred {
                location: s("ip_forward"),
                reason: None,
                one_of: vec![DropReason::PktTooBig, DropReason::Otherhost],
                site_only: false,
            },
            DropReasonInferred {
                location: s("neigh_invalidate"),
                reason: Some(DropReason::NeighFailed),
                one_of: vec![],
                site_only: true,
            },
            LocalDestination {
                addr: a,
                dev: s("kube-ipvs0"),
                netns: s("master"),
            },
            IpvsScheduled {
                service: Endpoint::new(a, 80),
                real_server: Some(Endpoint::new(b, 8080)),
                netns: s("node"),
                backend: s("kprobe"),
            },
            IpvsScheduled {
                service: Endpoint::new(a, 80),
                real_server: None,
                netns: s("node"),
                backend: s("kprobe"),
            },
            IpvsNoDestination {
                netns: s("node"),
                backend: s("kprobe"),
            },
            IpvsHooksSilent,
            IpvsService {
                service: s("TCP 10.0.0.9:80"),
                scheduler: s("rr"),
                real_servers: 2,
                usable: 1,
            },
            IpvsNoService { netns: s("node") },
            IpvsLocalAddress {
                addr: a,
                dev: s("kube-ipvs0"),
                netns: s("node"),
            },
            RequestDropped {
                location: Some(s("nf_hook_slow+0xa1")),
                reason: Some(DropReason::NetfilterDrop),
                netns: s("node"),
            },
            RequestDropped {
                location: None,
                reason: None,
                netns: s("node"),
            },
            NoReplyLeft,
            Forwarded {
                in_dev: s("r0"),
                out_dev: s("r1"),
            },
            RepliesCameBack {
                replies: 4,
                netns: s("r"),
            },
            PacketsSeen {
                requests: 1,
                replies: 0,
            },
            OwnerChanged {
                addr: a,
                changes: 7,
                first: vec![crate::node::vip::OwnerChange {
                    t_ms: 5,
                    netns: s("node1"),
                    dev: s("eth0"),
                    addr: a,
                    event: OwnerEvent::Added,
                }],
            },
            SeveralMacs {
                addr: a,
                macs: vec![s("aa:aa:aa:aa:aa:01"), s("aa:aa:aa:aa:aa:02")],
            },
            EventsLost { events: 3 },
            MapInsertsFailed { inserts: 2 },
            HooksUnavailable {
                hooks: vec![s("fib_lookup"), s("tcp_reset")],
            },
            FuncHookUnavailable {
                hook: s("ipvs_schedule"),
                why: s("kprobe: no PMU"),
            },
            HopsNotKept { hops: 5 },
            CountedInKernel { passages: 7 },
            NfRuleTraced {
                family: s("ip"),
                table: s("kube-proxy"),
                chain: s("reject-chain"),
                handle: 12,
                rule: s("reject"),
                comment: None,
                verdict: s("reject"),
                via: vec![s("service-endpoints-check: goto reject-chain")],
                element: Some(crate::node::nftrace::MapElement {
                    map: s("@no-endpoint-services"),
                    key: s("10.96.0.3 . tcp . 80"),
                    verdict: s("goto reject-chain"),
                    comment: Some(s("default/empty:http")),
                }),
                hook: Some(s("PREROUTING")),
                method: NfMethod::Nftrace,
            },
            KubeServiceNoEndpoints {
                service: s("default/empty:http"),
            },
            KubeClusterIpUnallocated { addr: a },
            KubeSourceRangesDrop {
                service: s("default/lb:http"),
                src: a,
            },
            NetworkPolicyDrop {
                enforcer: s("kube-router"),
                direction: PolicyDirection::Ingress,
                pod: Some(s("shop/web-0")),
                iface: None,
            },
            KubeNoLocalEndpoints {
                service: s("default/nginx:http"),
            },
            KubeServiceRouted {
                service: s("default/web:http"),
                endpoint: Some(s("10.244.2.2:80")),
                netns: s("node"),
            },
        ]
    }

    #[test]
    fn every_kind_has_a_sample() {
        let have: HashSet<EvidenceKind> = samples().iter().map(Evidence::kind).collect();
        for k in EvidenceKind::iter() {
            assert!(have.contains(&k), "no sample of {k:?}");
        }
    }

    #[test]
    fn round_trips_through_json_with_kind_and_text() {
        for e in samples() {
            let j = serde_json::to_value(&e).unwrap();
            assert_eq!(j["kind"], e.kind_name(), "{j}");
            assert_eq!(j["kind"], e.kind().name(), "{j}");
            assert_eq!(j["text"], e.to_string(), "{j}");
            // `count` and `text` belong to the evidence item: no fact has
            // fields of those names.
            assert!(j.get("count").is_none(), "{j}");
            let back: Evidence = serde_json::from_value(j.clone()).unwrap();
            assert_eq!(back, e, "{j}");
            // Without the text too (it is only read, never trusted).
            let mut bare = j.clone();
            bare.as_object_mut().unwrap().remove("text");
            assert_eq!(serde_json::from_value::<Evidence>(bare).unwrap(), e);
            let s = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<Evidence>(&s).unwrap(), e);
        }
        let bad = serde_json::json!({"kind": "no_such_fact"});
        assert!(serde_json::from_value::<Evidence>(bad).is_err());
    }

    #[test]
    fn json_shape() {
        let e = Evidence::TcpResetSent {
            netns: "s".into(),
            reason: Some("NO_SOCKET".into()),
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"kind":"tcp_reset_sent","netns":"s","reason":"NO_SOCKET","text":"tcp reset sent in netns s (NO_SOCKET)"}"#
        );
        assert_eq!(
            serde_json::to_string(&Evidence::NoReply).unwrap(),
            r#"{"kind":"no_reply","text":"no reply came back"}"#
        );
        let it = Item {
            fact: Evidence::HopsNotKept { hops: 5 },
            count: 2,
        };
        assert_eq!(
            serde_json::to_string(&it).unwrap(),
            r#"{"kind":"hops_not_kept","hops":5,"count":2,"text":"5 further hops not kept (2 times)"}"#
        );
    }

    #[test]
    fn sentences() {
        let t: Vec<String> = samples()
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        let has = |s: &str| assert!(t.iter().any(|x| x == s), "{s:?} not in {t:#?}");
        has("tcp reset sent in netns s");
        has("neighbour 10.0.0.9 on eth0 in netns c: INCOMPLETE|FAILED (timer)");
        has(
            "route lookup for 10.0.0.9 (before DNAT) chose glob via fd00::2, so the source became 10.0.0.9",
        );
        has("route lookup for 10.0.0.9 (before DNAT) chose glob, so the source became 10.0.0.9");
        has(
            "after DNAT to [fd00::2]:443 the packet left via priv with source 10.0.0.9, an address of glob",
        );
        has("reply packet dropped at ? on - in netns r");
        has("IPVS scheduled 10.0.0.9:80 to real server [fd00::2]:8080 in netns node [kprobe]");
        has("IPVS scheduled 10.0.0.9:80 to real server in netns node [kprobe]");
        has("IPVS virtual service TCP 10.0.0.9:80 (rr) has 2 real servers, 1 with weight > 0");
        has("request dropped at nf_hook_slow+0xa1 (NETFILTER_DROP) in netns node");
        has("request dropped at ? in netns node");
        has(
            "10.0.0.9 changed owner 7 times during the trace (added on eth0 in node1 at +5 ms; ...)",
        );
        has("hooks unavailable: fib_lookup, tcp_reset");
        has(
            "the accept queue of the tcp listener 10.0.0.9:8080 in netns s is full (1 connections waiting to be accepted, backlog 0): 2 SYNs taken and dropped without an answer (ListenOverflows 2, ListenDrops 2)",
        );
        has(
            "no route to 10.0.0.9 in netns r in any table its routing rules chose: 0: from all lookup local (5 routes), 100: from all to 10.0.0.0/24 lookup 100 (empty), 32766: from all lookup main (3 routes)",
        );
        has(
            "8 packets larger than the MTU 1280 of r1 dropped in netns r (they came in by r0, MTU 1500); ip6_forward() answers each with an ICMPv6 \"packet too big\" (not traced), yet the sender kept sending full-size packets: it never got them (PMTU black hole)",
        );
        has(
            "conntrack in netns r found the reply packet INVALID and rule `ct state invalid drop` dropped it (conntrack has counted 3 invalid packets there); the requests never passed that namespace: replies come back a way the requests did not go (asymmetric routing), so conntrack has no entry for them",
        );
        has(
            "the conntrack table of netns r is full (nf_conntrack_count 1, nf_conntrack_max 1): conntrack dropped 3 packets for want of an entry (early_drop 0, insert_failed 0)",
        );
        has(
            "conntrack of netns r could not insert the connection's entry: another entry holds its tuple (after source NAT, reply 10.0.2.2:53 -> 10.0.2.1:5000); insert_failed 1, drop 1",
        );
    }
}
