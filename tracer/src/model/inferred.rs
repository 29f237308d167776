//! Drop reasons inferred from where the packet was freed, for kernels
//! whose skb:kfree_skb carries none (before 5.17: the tracepoint has no
//! `reason` argument, `tp_kfree_has_reason` is 0 and BTF has no enum
//! skb_drop_reason).
//!
//! The drop location is kfree_skb()'s caller (`__builtin_return_address`),
//! resolved through kallsyms: a static function inlined into its caller
//! shows as that caller, hence the rows for both. Each row names the
//! kernel function behind it and what it does on 5.10 and on 6.x, where
//! the same sites pass the reason this table gives. A function that drops
//! for several reasons gives one only when a fact of the same packet, seen
//! just before in the same namespace (the ICMP error the kernel sent for
//! it, a TCP reset, the errno of the input route lookup), tells which
//! site freed it; otherwise it names none and says which it could be.
//!
//! This is the one table of inferred reasons; the rules read the reason
//! it gives like the kernel's own, and the verdict says it was inferred.

use crate::model::drop_reason::DropReason;

/// What the packet's own hops, before its drop and in the same
/// namespace, tell about the drop site.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent facts of one packet, not a state machine"
)]
pub struct Context {
    /// The ICMP error the kernel sent for it: (type, code). IPv4 only: no
    /// hook sees icmpv6_send().
    pub icmp: Option<(u8, u8)>,
    /// The icmp_send hook was not attached: no ICMP seen says nothing.
    pub icmp_unhooked: bool,
    /// The kernel sent a TCP reset in answer to it.
    pub tcp_reset: bool,
    /// The errno ip_route_input_noref() returned for it (function hooks).
    pub route_input_err: Option<i64>,
    /// It came in by a device of this namespace (not sent from it).
    pub ingress: bool,
    /// An earlier packet of its flow was queued to a socket in this
    /// namespace.
    pub queued_before: bool,
}

/// How a row decides.
#[derive(Debug, Clone)]
enum Rule {
    /// The function has one drop site (or all its sites have this reason).
    Sole(DropReason),
    /// Several sites; [`decide`] picks one by the packet's [`Context`].
    ByContext(fn(&Context) -> Option<DropReason>),
}

/// One function of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// The kernel function kfree_skb() was called from.
    pub func: &'static str,
    rule: Rule,
    /// Every reason its drop sites give on 6.x kernels (for the verdict's
    /// "one of" when the context does not tell).
    pub reasons: &'static [DropReason],
}

/// The reason given, and whether it was inferred at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inferred {
    /// One reason, from the location (and the context).
    Reason(DropReason),
    /// The function is known but drops for several reasons, and the
    /// context does not say which: these.
    OneOf(&'static [DropReason]),
    /// Not in the table.
    Unknown,
}

const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
const EXDEV: i64 = 18;

/// An ICMP (IPv4) error of this type (and code) sent for the packet.
fn icmp4(c: &Context, ty: u8, code: Option<u8>) -> bool {
    matches!(c.icmp, Some((t, k)) if t == ty && code.is_none_or(|x| x == k))
}

/// The table, by function name.
const TABLE: &[Row] = &[
    // net/netfilter/core.c nf_hook_slow(): `case NF_DROP: kfree_skb(skb)`
    // (5.10), kfree_skb_reason(skb, SKB_DROP_REASON_NETFILTER_DROP) (6.x):
    // its only drop.
    Row {
        func: "nf_hook_slow",
        rule: Rule::Sole(DropReason::NetfilterDrop),
        reasons: &[DropReason::NetfilterDrop],
    },
    // net/ipv4/route.c ip_error(), the input of a route with dst.error
    // set, frees at its one `out:` label. Forwarding off on the device
    // (ip_route_input_slow() then sets EHOSTUNREACH, with or without a
    // route): no ICMP, 6.x says IP_INADDRERRORS. Forwarding on: ENETUNREACH
    // (no route) sends ICMP net unreachable and 6.x says IP_INNOROUTES;
    // an unreachable or prohibit route sends host unreachable or packet
    // filtered, NOT_SPECIFIED on 6.x.
    Row {
        func: "ip_error",
        rule: Rule::ByContext(|c| match c.icmp {
            None if c.icmp_unhooked => None,
            None => Some(DropReason::IpInaddrerrors),
            Some(_) if icmp4(c, ICMP_DEST_UNREACH, Some(0)) => Some(DropReason::IpInnoroutes),
            Some(_) => None,
        }),
        reasons: &[
            DropReason::IpInaddrerrors,
            DropReason::IpInnoroutes,
            DropReason::NotSpecified,
        ],
    },
    // net/ipv4/ip_forward.c ip_forward() frees at `drop:` for: too big
    // with DF (after icmp_send FRAG_NEEDED; PKT_TOO_BIG on 6.x), TTL
    // exceeded (after ICMP time exceeded; IP_INHDR), and silently for
    // not-for-us packets (OTHERHOST), xfrm policy, LRO, skb_cow (NOMEM).
    Row {
        func: "ip_forward",
        rule: Rule::ByContext(|c| {
            if icmp4(c, ICMP_DEST_UNREACH, Some(4)) {
                Some(DropReason::PktTooBig)
            } else if icmp4(c, ICMP_TIME_EXCEEDED, None) {
                Some(DropReason::IpInhdr)
            } else {
                None
            }
        }),
        reasons: &[
            DropReason::PktTooBig,
            DropReason::IpInhdr,
            DropReason::Otherhost,
            DropReason::XfrmPolicy,
            DropReason::Nomem,
        ],
    },
    // net/ipv6/ip6_output.c ip6_forward(): forwarding off
    // (devconf_all->forwarding != 1, its first check: `goto error`, no
    // ICMP; IP_INADDRERRORS on 6.x), hop limit (ICMPv6 time exceeded;
    // IP_INHDR), too big (ICMPv6 packet too big; PKT_TOO_BIG), and
    // silently xfrm policy, not-for-us, NOMEM. tracer sees no ICMPv6
    // error, so the location alone does not tell; with forwarding off (a
    // node fact) the verdict's forwarding rule gives IP_INADDRERRORS.
    Row {
        func: "ip6_forward",
        rule: Rule::ByContext(|_| None),
        reasons: &[
            DropReason::IpInaddrerrors,
            DropReason::PktTooBig,
            DropReason::IpInhdr,
            DropReason::XfrmPolicy,
            DropReason::Otherhost,
        ],
    },
    // net/ipv4/ip_input.c ip_rcv_finish_core() (static, often inlined into
    // ip_rcv_finish()): its `drop:` after ip_route_input_noref() failed,
    // IP_RPFILTER when that returned -EXDEV (fib_validate_source(), the
    // reverse-path filter), else martian source/destination, bad options
    // or L2 multicast with a unicast destination (NOT_SPECIFIED,
    // IP_INVALID_SOURCE, OTHERHOST on 6.x).
    Row {
        func: "ip_rcv_finish_core",
        rule: Rule::ByContext(rp_filter),
        reasons: &[
            DropReason::IpRpfilter,
            DropReason::NotSpecified,
            DropReason::Otherhost,
        ],
    },
    Row {
        func: "ip_rcv_finish",
        rule: Rule::ByContext(rp_filter),
        reasons: &[
            DropReason::IpRpfilter,
            DropReason::NotSpecified,
            DropReason::Otherhost,
        ],
    },
    // net/ipv4/tcp_ipv4.c tcp_v4_rcv(), net/ipv6/tcp_ipv6.c tcp_v6_rcv():
    // at `no_tcp_socket:` a segment for no socket is answered with a reset
    // (tcp_v4_send_reset(NULL, skb)) and freed at `discard_it:`: NO_SOCKET.
    // The same label frees bad checksums, short headers, xfrm and MD5
    // failures, socket filters, all without a reset.
    Row {
        func: "tcp_v4_rcv",
        rule: Rule::ByContext(|c| c.tcp_reset.then_some(DropReason::NoSocket)),
        reasons: &[
            DropReason::NoSocket,
            DropReason::TcpCsum,
            DropReason::PktTooSmall,
            DropReason::XfrmPolicy,
            DropReason::TcpMd5failure,
            DropReason::SocketFilter,
        ],
    },
    Row {
        func: "tcp_v6_rcv",
        rule: Rule::ByContext(|c| c.tcp_reset.then_some(DropReason::NoSocket)),
        reasons: &[
            DropReason::NoSocket,
            DropReason::TcpCsum,
            DropReason::PktTooSmall,
            DropReason::XfrmPolicy,
            DropReason::TcpMd5failure,
            DropReason::SocketFilter,
        ],
    },
    // net/ipv4/udp.c __udp4_lib_rcv(): no socket (after icmp_send(PORT_UNREACH),
    // NO_SOCKET) or short packet / bad checksum (`short_packet:`,
    // `csum_error:`: PKT_TOO_SMALL, UDP_CSUM), no ICMP sent.
    Row {
        func: "__udp4_lib_rcv",
        rule: Rule::ByContext(|c| {
            icmp4(c, ICMP_DEST_UNREACH, Some(3)).then_some(DropReason::NoSocket)
        }),
        reasons: &[
            DropReason::NoSocket,
            DropReason::PktTooSmall,
            DropReason::UdpCsum,
        ],
    },
    // net/ipv6/udp.c __udp6_lib_rcv(): the same, with ICMPv6 port
    // unreachable, which tracer does not see: the location does not tell.
    Row {
        func: "__udp6_lib_rcv",
        rule: Rule::ByContext(|_| None),
        reasons: &[
            DropReason::NoSocket,
            DropReason::PktTooSmall,
            DropReason::UdpCsum,
        ],
    },
    // net/ipv4/udp.c __udp_queue_rcv_skb(): __udp_enqueue_schedule_skb()
    // failed: -ENOMEM when the receive buffer is full (SOCKET_RCVBUFF),
    // -ENOBUFS over the protocol's memory limit (PROTO_MEM); both freed at
    // the one kfree_skb() there.
    Row {
        func: "__udp_queue_rcv_skb",
        rule: Rule::Sole(DropReason::SocketRcvbuff),
        reasons: &[DropReason::SocketRcvbuff, DropReason::ProtoMem],
    },
    // net/ipv6/udp.c __udpv6_queue_rcv_skb(): the same for IPv6.
    Row {
        func: "__udpv6_queue_rcv_skb",
        rule: Rule::Sole(DropReason::SocketRcvbuff),
        reasons: &[DropReason::SocketRcvbuff, DropReason::ProtoMem],
    },
    // net/ipv4/udp.c udp_queue_rcv_one_skb() (net/ipv6/udp.c
    // udpv6_queue_rcv_one_skb()), where Debian's 5.10 inlines the
    // function above: its `drop:` frees what an xfrm policy, a socket
    // filter or a checksum check refused, and the inlined site a full
    // receive buffer. Those refuse every packet of a flow alike; one
    // refused after others of its flow were queued to the socket is the
    // buffer (SOCKET_RCVBUFF). Otherwise it does not tell.
    Row {
        func: "udp_queue_rcv_one_skb",
        rule: Rule::ByContext(|c| c.queued_before.then_some(DropReason::SocketRcvbuff)),
        reasons: &[
            DropReason::SocketRcvbuff,
            DropReason::ProtoMem,
            DropReason::XfrmPolicy,
            DropReason::SocketFilter,
            DropReason::UdpCsum,
        ],
    },
    Row {
        func: "udpv6_queue_rcv_one_skb",
        rule: Rule::ByContext(|c| c.queued_before.then_some(DropReason::SocketRcvbuff)),
        reasons: &[
            DropReason::SocketRcvbuff,
            DropReason::ProtoMem,
            DropReason::XfrmPolicy,
            DropReason::SocketFilter,
            DropReason::UdpCsum,
        ],
    },
    // net/ipv4/ip_input.c ip_protocol_deliver_rcu(): no handler for the
    // protocol, after ICMP protocol unreachable (IP_NOPROTO), or an xfrm
    // policy refused it (XFRM_POLICY, no ICMP).
    Row {
        func: "ip_protocol_deliver_rcu",
        rule: Rule::ByContext(|c| {
            icmp4(c, ICMP_DEST_UNREACH, Some(2)).then_some(DropReason::IpNoproto)
        }),
        reasons: &[DropReason::IpNoproto, DropReason::XfrmPolicy],
    },
    // net/ipv6/route.c ip6_pkt_drop(): a reject route or no route, after
    // ICMPv6 unreachable; IP_INNOROUTES for a packet received
    // (ip6_pkt_discard), IP_OUTNOROUTES for one sent (ip6_pkt_discard_out).
    Row {
        func: "ip6_pkt_drop",
        rule: Rule::ByContext(|c| {
            Some(if c.ingress {
                DropReason::IpInnoroutes
            } else {
                DropReason::IpOutnoroutes
            })
        }),
        reasons: &[DropReason::IpInnoroutes, DropReason::IpOutnoroutes],
    },
    // net/ipv4/arp.c arp_error_report(), net/ipv6/ndisc.c
    // ndisc_error_report(): the packets queued on a neighbour whose
    // resolution failed, freed one by one from neigh_invalidate()
    // (NEIGH_FAILED on 6.x).
    Row {
        func: "arp_error_report",
        rule: Rule::Sole(DropReason::NeighFailed),
        reasons: &[DropReason::NeighFailed],
    },
    Row {
        func: "ndisc_error_report",
        rule: Rule::Sole(DropReason::NeighFailed),
        reasons: &[DropReason::NeighFailed],
    },
    // net/core/neighbour.c neigh_invalidate(): what is left on the
    // failed neighbour's queue, __skb_queue_purge() (inlined) after the
    // error reports (__skb_queue_purge_reason(.., NEIGH_FAILED) on 6.x).
    Row {
        func: "neigh_invalidate",
        rule: Rule::Sole(DropReason::NeighFailed),
        reasons: &[DropReason::NeighFailed],
    },
    // net/core/neighbour.c __neigh_event_send(): a packet to a neighbour
    // already FAILED (NEIGH_FAILED), the oldest queued packet pushed out
    // by a full queue (NEIGH_QUEUEFULL), a dead neighbour (NEIGH_DEAD):
    // no fact of the packet tells them apart here.
    Row {
        func: "__neigh_event_send",
        rule: Rule::ByContext(|_| None),
        reasons: &[
            DropReason::NeighFailed,
            DropReason::NeighQueuefull,
            DropReason::NeighDead,
        ],
    },
    // net/core/dev.c __netif_receive_skb_core(): no protocol handler took
    // it (`drop:`; UNHANDLED_PROTO), or copying user frags failed (NOMEM).
    Row {
        func: "__netif_receive_skb_core",
        rule: Rule::Sole(DropReason::UnhandledProto),
        reasons: &[DropReason::UnhandledProto, DropReason::Nomem],
    },
];

/// ip_rcv_finish_core(): IP_RPFILTER when the input route lookup
/// returned -EXDEV.
fn rp_filter(c: &Context) -> Option<DropReason> {
    (c.route_input_err == Some(-EXDEV)).then_some(DropReason::IpRpfilter)
}

/// The row of a kernel function, if the table has one. The compiler's
/// suffixes of a specialised copy (`ip_rcv_finish_core.constprop.0`,
/// `.isra.0`, `.part.0`) name the same function.
pub fn row(func: &str) -> Option<&'static Row> {
    let func = crate::model::names::stem(func);
    TABLE.iter().find(|r| r.func == func)
}

/// The reason to give a drop in `func` (a kernel function name), on a
/// kernel that gives none.
pub fn infer(func: &str, c: &Context) -> Inferred {
    let Some(r) = row(func) else {
        return Inferred::Unknown;
    };
    let one = match &r.rule {
        Rule::Sole(reason) => Some(reason.clone()),
        Rule::ByContext(f) => f(c),
    };
    match one {
        Some(reason) => Inferred::Reason(reason),
        None => Inferred::OneOf(r.reasons),
    }
}

/// The reason of a NOT_SPECIFIED drop at `func` on a kernel that gives
/// reasons, where the site is known to give none: IPv6's neighbour
/// failure. ndisc_error_report() (net/ipv6/ndisc.c) frees each packet
/// queued on a failed neighbour with a plain kfree_skb(), where IPv4's
/// arp_error_report() passes NEIGH_FAILED; called from neigh_invalidate()
/// through neigh->ops->error_report, its kfree_skb() is a tail call, so
/// the drop shows at neigh_invalidate.
pub fn unreasoned(func: &str) -> Option<DropReason> {
    matches!(func, "ndisc_error_report" | "neigh_invalidate").then_some(DropReason::NeighFailed)
}

/// How many functions the table knows.
pub fn len() -> usize {
    TABLE.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn icmp(ty: u8, code: u8) -> Context {
        Context {
            icmp: Some((ty, code)),
            ..Context::default()
        }
    }

    /// IPv6's neighbour failure gives no reason on kernels that give
    /// them; nothing else is taken for it.
    #[test]
    fn unreasoned_sites_are_the_neighbour_failure() {
        assert_eq!(
            unreasoned("neigh_invalidate"),
            Some(DropReason::NeighFailed)
        );
        assert_eq!(
            unreasoned("ndisc_error_report"),
            Some(DropReason::NeighFailed)
        );
        for f in ["arp_error_report", "ip_rcv_core", "__neigh_event_send", ""] {
            assert_eq!(unreasoned(f), None, "{f}");
        }
    }

    #[test]
    fn one_row_per_function_and_reasons_listed() {
        for (i, r) in TABLE.iter().enumerate() {
            assert!(
                TABLE[i + 1..].iter().all(|o| o.func != r.func),
                "{} twice",
                r.func
            );
            if let Rule::Sole(reason) = &r.rule {
                assert!(r.reasons.contains(reason), "{}", r.func);
            }
            // Every reason a context may give is listed in the row.
            for c in [
                Context::default(),
                icmp(3, 0),
                icmp(3, 2),
                icmp(3, 3),
                icmp(3, 4),
                icmp(11, 0),
                Context {
                    tcp_reset: true,
                    ingress: true,
                    route_input_err: Some(-18),
                    queued_before: true,
                    ..Context::default()
                },
            ] {
                if let Inferred::Reason(x) = infer(r.func, &c) {
                    assert!(r.reasons.contains(&x), "{}: {x} not listed", r.func);
                }
            }
        }
    }

    #[test]
    fn sole_sites() {
        let c = Context::default();
        assert_eq!(
            infer("nf_hook_slow", &c),
            Inferred::Reason(DropReason::NetfilterDrop)
        );
        assert_eq!(
            infer("arp_error_report", &c),
            Inferred::Reason(DropReason::NeighFailed)
        );
        assert_eq!(
            infer("__udp_queue_rcv_skb", &c),
            Inferred::Reason(DropReason::SocketRcvbuff)
        );
        assert_eq!(infer("kfree_skb_list", &c), Inferred::Unknown);
        // A specialised copy is the same function.
        assert_eq!(
            infer("nf_hook_slow.part.0", &c),
            Inferred::Reason(DropReason::NetfilterDrop)
        );
        assert_eq!(infer("", &c), Inferred::Unknown);
    }

    #[test]
    fn the_packets_facts_pick_among_several_sites() {
        // A reset answered the segment: no socket; no reset: could be a
        // bad checksum as well.
        let rst = Context {
            tcp_reset: true,
            ..Context::default()
        };
        assert_eq!(
            infer("tcp_v4_rcv", &rst),
            Inferred::Reason(DropReason::NoSocket)
        );
        assert!(matches!(
            infer("tcp_v4_rcv", &Context::default()),
            Inferred::OneOf(r) if r.contains(&DropReason::NoSocket) && r.contains(&DropReason::TcpCsum)
        ));
        // UDP: port unreachable sent.
        assert_eq!(
            infer("__udp4_lib_rcv", &icmp(3, 3)),
            Inferred::Reason(DropReason::NoSocket)
        );
        assert!(matches!(
            infer("__udp4_lib_rcv", &Context::default()),
            Inferred::OneOf(_)
        ));
        // ip_error: silent with forwarding off, net unreachable without a
        // route, host unreachable for an unreachable route (no 6.x name).
        assert_eq!(
            infer("ip_error", &Context::default()),
            Inferred::Reason(DropReason::IpInaddrerrors)
        );
        assert_eq!(
            infer("ip_error", &icmp(3, 0)),
            Inferred::Reason(DropReason::IpInnoroutes)
        );
        assert!(matches!(infer("ip_error", &icmp(3, 1)), Inferred::OneOf(_)));
        // Without the icmp_send hook, no ICMP seen says nothing.
        let unhooked = Context {
            icmp_unhooked: true,
            ..Context::default()
        };
        assert!(matches!(infer("ip_error", &unhooked), Inferred::OneOf(_)));
        // Forwarding: frag needed is a path-MTU drop, time exceeded a TTL.
        assert_eq!(
            infer("ip_forward", &icmp(3, 4)),
            Inferred::Reason(DropReason::PktTooBig)
        );
        assert_eq!(
            infer("ip_forward", &icmp(11, 0)),
            Inferred::Reason(DropReason::IpInhdr)
        );
        assert!(matches!(
            infer("ip_forward", &Context::default()),
            Inferred::OneOf(_)
        ));
        // No ICMPv6 is seen: ip6_forward's reasons stay open here.
        assert!(matches!(
            infer("ip6_forward", &Context::default()),
            Inferred::OneOf(r) if r.contains(&DropReason::IpInaddrerrors)
        ));
        // The input route's errno: -EXDEV is the reverse-path filter.
        let exdev = Context {
            route_input_err: Some(-18),
            ..Context::default()
        };
        assert_eq!(
            infer("ip_rcv_finish_core.constprop.0", &exdev),
            Inferred::Reason(DropReason::IpRpfilter)
        );
        // UDP with the enqueue inlined: the buffer only once others of
        // the flow were queued.
        let queued = Context {
            queued_before: true,
            ..Context::default()
        };
        assert_eq!(
            infer("udp_queue_rcv_one_skb", &queued),
            Inferred::Reason(DropReason::SocketRcvbuff)
        );
        assert!(matches!(
            infer("udp_queue_rcv_one_skb", &Context::default()),
            Inferred::OneOf(r) if r.contains(&DropReason::SocketFilter)
        ));
        assert!(matches!(
            infer("ip_rcv_finish", &Context::default()),
            Inferred::OneOf(_)
        ));
        let sent = Context::default();
        let received = Context {
            ingress: true,
            ..sent
        };
        assert_eq!(
            infer("ip6_pkt_drop", &received),
            Inferred::Reason(DropReason::IpInnoroutes)
        );
        assert_eq!(
            infer("ip6_pkt_drop", &sent),
            Inferred::Reason(DropReason::IpOutnoroutes)
        );
    }
}
