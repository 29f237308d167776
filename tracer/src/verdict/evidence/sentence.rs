//! Which function tells each fact's sentence: a line (or two) a variant,
//! handing its fields to the function of its family (the other files
//! here) or of its cause's module. Kept out of rustfmt's hands, which
//! would stack each pattern's fields a line each; a variant added to
//! [`Evidence`] does not compile until it has its line here.

use std::fmt::{self, Display};

use super::{
    Evidence,
    Evidence::{
        BpfPath, BpfProgramDrop, BpfRewrite, BridgeWillNotForward, CgroupProgramDrop, ChecksumBad,
        ClientHandshake, ConntrackFull, ConntrackInsertFailed, ConntrackInvalid, ConntrackKept,
        CountedInKernel, DestinationAnswered, DropReasonInferred, Encapsulated, EndpointUnanswered,
        EventsLost, Forwarded, ForwardedBack, ForwardingDisabled, FragmentsLost,
        FuncHookUnavailable, FunctionHook, HooksUnavailable, HopsNotKept, HostUnreachableInferred,
        IcmpSent, IpvsHooksSilent, IpvsLocalAddress, IpvsNoDestination, IpvsNoService,
        IpvsScheduled, IpvsService, KubeClusterIpUnallocated, KubeNoLocalEndpoints,
        KubeServiceNoEndpoints, KubeServiceRouted, KubeSourceRangesDrop, LaterDrop,
        ListenQueueFull, ListensElsewhere, LocalAddressTransmitted, LocalDestination, LocalRoute,
        MapInsertsFailed, MtuExceeded, NatSourceMismatch, NeighbourState, NetworkPolicyDrop,
        NfChainVerdict, NfHookDrop, NfHookInferred, NfRuleMoved, NfRuleTraced, NoListener,
        NoLocalEndpointsRuleMoved, NoReply, NoReplyLeft, NoRouteAfterRules, NoRouteBack,
        OtherHostsSubnet, OwnerChanged, PacketDropped, PacketTooBig, PacketsSeen, PreNatRoute,
        ProtocolUnhandled, QdiscDropped, RepliesCameBack, RequestDropped, RouteRefused,
        RoutingLoop, RpFilterMismatch, ServerSocketState, SeveralMacs, SocketBufferFull,
        SocketConsumed, SocketQueued, SocketRead, SocketRewrite, SourceRefused, SysctlRefused,
        TcFilter, TcRedirect, TcpResetSent, TunnelWillNotSend, VethOtherEnd, XdpAction, XdpMoved,
        XdpNativeTaken, XfrmRefused,
    },
    address, conntrack, drop, ipvs, mtu, netfilter, reply, route, socket, trace,
};
use crate::verdict::{bpf_drop, kube};

/// `e`'s sentence.
#[rustfmt::skip]
pub(super) fn of(e: &Evidence, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match e {
        TcpResetSent { netns, reason } => reply::tcp_reset_sent(f, netns, reason.as_deref()),
        IcmpSent { netns, desc, .. } => reply::icmp_sent(f, netns, desc),
        FunctionHook { backend, netns, detail, .. } => trace::function(f, backend, netns, detail),
        NeighbourState { addr, dev, netns, state, event } =>
            address::neighbour(f, addr, dev, netns, *state, event),
        ForwardedBack { netns, dev } => route::forwarded_back(f, netns, dev),
        LocalRoute { dst, dev } => route::local_route(f, dst, dev),
        OtherHostsSubnet { dst, net, prefix, dev } => route::subnet(f, dst, net, *prefix, dev),
        LocalAddressTransmitted { dev, netns, addr } => address::transmitted(f, dev, netns, addr),
        TcRedirect { ingress_dev, egress_dev } => route::tc_redirect(f, ingress_dev, egress_dev),
        TcFilter { dev, filter } => route::tc_filter(f, dev, filter),
        // Facts of a type of their own, which tells its sentence.
        BridgeWillNotForward(r) => r.fmt(f), TunnelWillNotSend(r) => r.fmt(f),
        Encapsulated(e) => e.fmt(f), ProtocolUnhandled(u) => u.fmt(f),
        SysctlRefused(r) => r.fact(f), VethOtherEnd(r) => r.fmt(f),
        SourceRefused(r) => r.fmt(f), ChecksumBad(r) => r.fmt(f),
        CgroupProgramDrop(r) => r.fmt(f), RoutingLoop(r) => r.fmt(f),
        QdiscDropped(r) => r.fmt(f), XfrmRefused(r) => r.fmt(f),
        FragmentsLost(r) => r.fmt(f), SocketRewrite(r) => r.fmt(f),
        BpfRewrite(r) => r.fmt(f), BpfPath(p) => p.fmt(f),
        XdpMoved(m) => m.fmt(f), XdpNativeTaken(t) => t.fmt(f),
        ConntrackKept(k) => k.fmt(f),
        XdpAction { dev, netns, program, action, to_dev } =>
            bpf_drop::xdp_returned(f, dev, netns, program.as_ref(), action, to_dev.as_deref()),
        BpfProgramDrop { hook, dev, netns, programs } =>
            bpf_drop::program_drop(f, hook, dev, netns, programs),
        PreNatRoute { dst, dev, gw, src } => route::pre_nat(f, dst, dev, gw.as_ref(), src),
        NatSourceMismatch { dst, dev, src, src_dev } =>
            route::nat_source(f, dst, dev, src, src_dev),
        NoReply => reply::no_reply(f),
        NoRouteBack { netns, dst } => route::no_route_back(f, netns, dst),
        DestinationAnswered { netns } => reply::answered(f, netns),
        SocketConsumed { func, netns } => socket::consumed(f, func, netns),
        ClientHandshake { netns } => socket::client_handshake(f, netns),
        ServerSocketState { state, netns } => socket::server_state(f, state, netns),
        SocketRead { netns } => socket::read(f, netns),
        SocketQueued { netns } => socket::queued(f, netns),
        LaterDrop { reason, location } => drop::later(f, reason, location),
        ForwardingDisabled { netns, dev, family } => route::forwarding_off(f, netns, dev, family),
        SocketBufferFull { netns, proto, endpoint, dropped, delivered, rx_queue, socket_drops } =>
            socket::buffer_full(f, netns, proto, endpoint, *dropped, *delivered,
                (*rx_queue, *socket_drops)),
        NoListener { netns, proto, endpoint } => socket::no_listener(f, netns, proto, endpoint),
        ListensElsewhere { netns, proto, endpoint, bound } =>
            socket::listens_elsewhere(f, netns, proto, endpoint, bound),
        ConntrackFull { netns, entries, max, drop, early_drop, insert_failed } =>
            conntrack::full(f, netns, *entries, *max, *drop, *early_drop, *insert_failed),
        ConntrackInsertFailed { netns, reply_src, reply_dst, snat, dnat, insert_failed, drop } =>
            conntrack::insert_failed(f, netns, reply_src, reply_dst, (*snat, *dnat),
                *insert_failed, *drop),
        ListenQueueFull { netns, endpoint, waiting, backlog, syns, overflows, listen_drops } =>
            socket::queue_full(f, netns, endpoint, *waiting, *backlog, *syns,
                (*overflows, *listen_drops)),
        NoRouteAfterRules { netns, dst, rules, refused } =>
            route::after_rules(f, netns, dst, rules, *refused),
        ConntrackInvalid { netns, dir, rule, invalid, requests_seen } =>
            conntrack::invalid(f, netns, *dir, rule, *invalid, *requests_seen),
        RpFilterMismatch { netns, dev, mode, src, back_dev } =>
            route::rp_filter(f, netns, dev, *mode, src, back_dev),
        MtuExceeded { netns, dev, mtu, in_dev, in_mtu, drops, icmp_sent, family } =>
            mtu::exceeded(f, netns, (dev, *mtu), (in_dev, *in_mtu), *drops, *icmp_sent, family),
        EndpointUnanswered { netns, endpoint, original } =>
            address::unanswered(f, netns, endpoint, original),
        RouteRefused { netns, dst, original, iif, outcome, after_nat_in_output } =>
            route::refused(f, netns, dst, original.as_ref(), iif.as_deref(), outcome,
                *after_nat_in_output),
        PacketTooBig { netns, dev, mtu, len, in_dev, in_mtu, icmp_sent, family } =>
            mtu::too_big(f, netns, (dev, *mtu), *len, (in_dev, *in_mtu), *icmp_sent, family),
        PacketDropped { dir, location, dev, netns } => drop::packet(f, *dir, location, dev, netns),
        NfHookDrop { hook, backend } => netfilter::hook_drop(f, hook, backend),
        NfHookInferred { hook } => netfilter::hook_inferred(f, hook),
        NfChainVerdict { backend, detail, .. } => netfilter::chain_verdict(f, backend, detail),
        NfRuleMoved { family, table, chain, delta, .. }
        | NoLocalEndpointsRuleMoved { family, table, chain, delta, .. } =>
            netfilter::rule_moved(f, family, table, chain, *delta),
        NfRuleTraced {
            family, table, chain, handle, rule, comment, verdict, via, element, hook, ..
        } => netfilter::RuleTraced {
            family, table, chain, handle, rule, comment, verdict, via, element, hook,
        }.fmt(f),
        KubeServiceRouted { service, endpoint, netns } =>
            kube::service_routed(f, service, endpoint.as_deref(), netns),
        KubeNoLocalEndpoints { service } => kube::no_local_endpoints(f, service),
        KubeServiceNoEndpoints { service } => kube::service_no_endpoints(f, service),
        KubeClusterIpUnallocated { addr } => kube::cluster_ip_unallocated(f, addr),
        KubeSourceRangesDrop { service, src } => kube::source_ranges_drop(f, service, src),
        NetworkPolicyDrop { enforcer, direction, pod, iface } =>
            kube::network_policy_drop(f, enforcer, *direction, pod.as_deref(), iface.as_deref()),
        HostUnreachableInferred => reply::host_unreachable(f),
        DropReasonInferred { location, reason, one_of, site_only } =>
            drop::reason_inferred(f, location, reason.as_ref(), one_of, *site_only),
        LocalDestination { addr, dev, netns } => address::local(f, addr, dev, netns),
        IpvsScheduled { service, real_server, netns, backend } =>
            ipvs::scheduled(f, service, real_server.as_ref(), netns, backend),
        IpvsNoDestination { netns, backend } => ipvs::no_destination(f, netns, backend),
        IpvsHooksSilent => ipvs::hooks_silent(f),
        IpvsService { service, scheduler, real_servers, usable } =>
            ipvs::service(f, service, scheduler, *real_servers, *usable),
        IpvsNoService { netns } => ipvs::no_service(f, netns),
        IpvsLocalAddress { addr, dev, netns } => ipvs::local_address(f, addr, dev, netns),
        RequestDropped { location, reason, netns } =>
            drop::request(f, location.as_deref(), reason.as_ref(), netns),
        NoReplyLeft => reply::no_reply_left(f),
        Forwarded { in_dev, out_dev } => route::forwarded(f, in_dev, out_dev),
        RepliesCameBack { replies, netns } => reply::replies(f, *replies, netns),
        PacketsSeen { requests, replies } => reply::packets_seen(f, *requests, *replies),
        OwnerChanged { addr, changes, first } => address::owner_changed(f, addr, *changes, first),
        SeveralMacs { addr, macs } => address::several_macs(f, addr, macs),
        EventsLost { events } => trace::events_lost(f, *events),
        MapInsertsFailed { inserts } => trace::map_inserts_failed(f, *inserts),
        HooksUnavailable { hooks } => trace::hooks_unavailable(f, hooks),
        FuncHookUnavailable { hook, why } => trace::func_hook_unavailable(f, hook, why),
        HopsNotKept { hops } => trace::hops_not_kept(f, *hops),
        CountedInKernel { passages } => trace::counted_in_kernel(f, *passages),
    }
}
