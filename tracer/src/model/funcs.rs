//! Function-hook records (fentry/fexit or kprobe/kretprobe) into hops.

use tracer_common::{FuncEvent, Hook, func};

use crate::{
    model::event::cname,
    model::hop::{FuncBackend, FuncData, HopData, XdpAction, XdpData, icmp_desc},
    model::names::Names,
};

/// Kernel function name of a [`func`] id (IPVS xmit: the symbol at the
/// recorded address tells which variant).
pub fn func_name(f: u8) -> &'static str {
    match f {
        func::NF_HOOK_SLOW => "nf_hook_slow",
        func::NFT_DO_CHAIN => "nft_do_chain",
        func::IPT_DO_TABLE => "ipt_do_table",
        func::FIB_VALIDATE_SOURCE => "fib_validate_source",
        func::IP_ROUTE_INPUT => "ip_route_input_noref",
        func::IP_FORWARD => "ip_forward",
        func::IP_LOCAL_DELIVER => "ip_local_deliver",
        func::ICMP_SEND => "__icmp_send",
        func::IPVS_CONN_IN => "ip_vs_conn_in_get_proto",
        func::IPVS_SCHEDULE => "ip_vs_schedule",
        func::IPVS_XMIT => "ip_vs_xmit",
        func::TCP_RESET => "tcp_v4_send_reset",
        func::XDP => "do_xdp_generic",
        _ => "?",
    }
}

/// NFPROTO_* (include/uapi/linux/netfilter.h).
pub fn nf_family(pf: u32) -> &'static str {
    match pf {
        2 => "ipv4",
        10 => "ipv6",
        7 => "bridge",
        3 => "arp",
        5 => "netdev",
        1 => "inet",
        _ => "?",
    }
}

/// NF_INET_* hook numbers (include/uapi/linux/netfilter.h), named as the
/// iptables chains are.
pub fn nf_hook(h: u32) -> &'static str {
    match h {
        5 => "INGRESS",
        h => crate::node::nftables::inet_hook_name(h).unwrap_or("?"),
    }
}

/// A verdict's NF_* code (the low byte; include/uapi/linux/netfilter.h).
pub fn nf_verdict(v: i64) -> &'static str {
    match v & 0xff {
        0 => "DROP",
        1 => "ACCEPT",
        // NF_DROP_REASON() (include/linux/netfilter.h, nf_tables' drops
        // since 6.0): the skb freed with its drop reason, then NF_STOLEN
        // with the errno above bit 16; a plain steal has none there.
        2 if (v >> 16) & 0xffff != 0 => "DROP",
        2 => "STOLEN",
        3 => "QUEUE",
        4 => "REPEAT",
        5 => "STOP",
        _ => "?",
    }
}

/// errno names for the function hooks' negative returns.
pub fn errno(e: i64) -> String {
    match -e {
        1 => "EPERM".into(),
        18 => "EXDEV".into(),
        22 => "EINVAL".into(),
        101 => "ENETUNREACH".into(),
        113 => "EHOSTUNREACH".into(),
        13 => "EACCES".into(),
        n => format!("errno {n}"),
    }
}

/// The hook and hop data of a function record. `__icmp_send` becomes the
/// same `icmp_send` hop the tracepoint gives, so that verdicts do not depend
/// on the backend.
pub fn hop_data(e: &FuncEvent, names: &mut Names) -> (Hook, HopData) {
    if e.func == func::ICMP_SEND {
        let (ty, code) = (e.arg[0] as u8, e.arg[1] as u8);
        return (
            Hook::IcmpSend,
            HopData::IcmpSend {
                icmp_type: ty,
                icmp_code: code,
                desc: names.intern(&icmp_desc(e.pkt.family == 6, ty, code)),
            },
        );
    }
    if e.func == func::XDP {
        // The xdp tracepoints (tracer-ebpf xdp.rs): the program's id rides
        // in `location`.
        let (map_id, map_key) = e.xdp_map();
        return (
            Hook::Xdp,
            HopData::Xdp(Box::new(XdpData {
                action: XdpAction::of(e.arg[0]),
                prog_id: e.location as u32,
                to_ifindex: e.arg[1],
                err: e.ret as i32,
                map_id,
                map_key,
            })),
        );
    }
    if e.func == func::TCP_RESET {
        // As the tcp:tcp_send_reset tracepoint's hop (no reason before 6.10).
        return (Hook::TcpReset, HopData::TcpReset { reason: None });
    }
    let ret = (e.has_ret != 0).then_some(e.ret);
    let symbol = names.kallsyms.symbolize(e.location);
    let name = match symbol.split('+').next() {
        Some(s) if e.func == func::IPVS_XMIT && !s.is_empty() && !s.starts_with("0x") => {
            s.to_string()
        }
        _ => func_name(e.func).to_string(),
    };
    let table = cname(&e.table);
    let chain = cname(&e.chain);
    let r = ret.unwrap_or(0);
    let (nf_hook_name, detail) = match e.func {
        func::NF_HOOK_SLOW => {
            let h = format!("{} {}", nf_family(e.arg[0]), nf_hook(e.arg[1]));
            let v = if r == 1 {
                "ACCEPT".to_string()
            } else if r < 0 {
                format!("DROP ({})", errno(r))
            } else {
                "STOLEN/QUEUED".to_string()
            };
            (Some(h.clone()), format!("netfilter hook {h}: {v}"))
        }
        func::NFT_DO_CHAIN => (
            None,
            format!("nf_tables chain {table}/{chain}: {}", nf_verdict(r)),
        ),
        func::IPT_DO_TABLE => (None, format!("iptables table {table}: {}", nf_verdict(r))),
        func::FIB_VALIDATE_SOURCE => (
            None,
            match -r {
                18 => "reverse-path check failed (rp_filter): EXDEV".to_string(),
                22 => "source address check failed (martian or local source): EINVAL".to_string(),
                _ => format!("source validation failed: {}", errno(r)),
            },
        ),
        func::IP_ROUTE_INPUT => (None, format!("input route lookup failed: {}", errno(r))),
        func::IP_FORWARD => (None, "forwarded by the IPv4 stack (ip_forward)".into()),
        func::IP_LOCAL_DELIVER => (None, "local delivery (ip_local_deliver)".into()),
        func::IPVS_CONN_IN => (
            None,
            if r != 0 {
                "IPVS: existing connection reused".into()
            } else {
                "IPVS: no existing connection".into()
            },
        ),
        func::IPVS_SCHEDULE => (
            None,
            if r != 0 {
                "IPVS: scheduled to a real server".into()
            } else {
                "IPVS: no usable real server for the virtual service".into()
            },
        ),
        func::IPVS_XMIT => {
            let method = match name.as_str() {
                "ip_vs_nat_xmit" => "NAT (masquerade)",
                "ip_vs_dr_xmit" => "direct routing",
                "ip_vs_tunnel_xmit" => "tunnel",
                "ip_vs_bypass_xmit" => "bypass",
                _ => "?",
            };
            (None, format!("IPVS forwards with {method} ({name})"))
        }
        _ => (None, name.clone()),
    };
    (
        Hook::Func,
        HopData::Func(Box::new(FuncData {
            func: names.intern(&name),
            backend: FuncBackend::of(e.backend),
            ret,
            nf_hook: nf_hook_name.map(|h| names.intern(&h)),
            table: (!table.is_empty()).then(|| names.intern(&table)),
            chain: (!chain.is_empty()).then(|| names.intern(&chain)),
            detail,
        })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::tests::{header, v4};
    use tracer_common::{PacketInfo, backend, kind};

    fn ev(f: u8, ret: Option<i64>, arg: [u32; 2]) -> FuncEvent {
        let mut table = [0u8; 32];
        table[..6].copy_from_slice(b"filter");
        let mut chain = [0u8; 32];
        chain[..5].copy_from_slice(b"INPUT");
        FuncEvent {
            hdr: header(kind::FUNC, Hook::Func),
            pkt: v4([10, 0, 0, 1], 40000, [10, 0, 0, 2], 80, 6),
            location: 0,
            ret: ret.unwrap_or(0),
            arg,
            func: f,
            backend: backend::KPROBE,
            has_ret: ret.is_some() as u8,
            _pad: [0; 5],
            table,
            chain,
        }
    }

    fn detail(e: &FuncEvent) -> (Hook, HopData) {
        hop_data(e, &mut Names::default())
    }

    #[test]
    fn netfilter_verdicts_name_family_hook_and_chain() {
        let (h, d) = detail(&ev(func::NF_HOOK_SLOW, Some(-1), [2, 1]));
        assert_eq!(h, Hook::Func);
        let HopData::Func(f) = d else { panic!() };
        assert_eq!(f.nf_hook.as_deref(), Some("ipv4 INPUT"));
        assert_eq!(f.detail, "netfilter hook ipv4 INPUT: DROP (EPERM)");
        let (_, d) = detail_of(func::NFT_DO_CHAIN, Some(0));
        assert_eq!(d, "nf_tables chain filter/INPUT: DROP");
        // 6.x: nft_do_chain() drops with NF_DROP_REASON(.., EPERM), which
        // returns NF_STOLEN | EPERM << 16 (seen on Debian 6.1).
        let (_, d) = detail_of(func::NFT_DO_CHAIN, Some((1 << 16) | 2));
        assert_eq!(d, "nf_tables chain filter/INPUT: DROP");
        let (_, d) = detail_of(func::NFT_DO_CHAIN, Some(2));
        assert_eq!(d, "nf_tables chain filter/INPUT: STOLEN");
        let (_, d) = detail_of(func::FIB_VALIDATE_SOURCE, Some(-18));
        assert_eq!(d, "reverse-path check failed (rp_filter): EXDEV");
        let (_, d) = detail_of(func::IPVS_SCHEDULE, Some(0));
        assert_eq!(d, "IPVS: no usable real server for the virtual service");
    }

    fn detail_of(f: u8, ret: Option<i64>) -> (String, String) {
        match detail(&ev(f, ret, [0; 2])).1 {
            HopData::Func(f) => (f.func.to_string(), f.detail),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hook_numbers_are_named_as_nftables_names_them() {
        use crate::node::nftables::hook_name;
        let names: Vec<&str> = (0..7).map(nf_hook).collect();
        assert_eq!(
            names,
            [
                "PREROUTING",
                "INPUT",
                "FORWARD",
                "OUTPUT",
                "POSTROUTING",
                "INGRESS",
                "?"
            ]
        );
        // A base chain's hook, by family: inet/ip/ip6/bridge, arp, netdev.
        assert_eq!(hook_name(1, 1), Some("INPUT"));
        assert_eq!(hook_name(1, 5), Some("ingress"));
        assert_eq!(hook_name(3, 0), Some("input"));
        assert_eq!(hook_name(5, 1), Some("egress"));
        assert_eq!(hook_name(2, 9), None);
    }

    #[test]
    fn icmp_send_function_gives_the_tracepoint_hop() {
        let mut e = ev(func::ICMP_SEND, None, [3, 3]);
        e.pkt = PacketInfo { ..e.pkt };
        let (h, d) = detail(&e);
        assert_eq!(h, Hook::IcmpSend);
        assert_eq!(
            d,
            HopData::IcmpSend {
                icmp_type: 3,
                icmp_code: 3,
                desc: "dest-unreachable port-unreachable".into()
            }
        );
    }
}
