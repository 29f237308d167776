//! Resolve the kernel struct offsets the programs need from BTF.

use tracer_common::{KernelOffsets, OFFSET_NONE};

use super::{Btf, BtfError};

/// Offsets plus what could not be resolved (reported by `doctor`).
#[derive(Debug, Clone)]
pub struct Resolved {
    pub offsets: KernelOffsets,
    pub missing: Vec<String>,
}

/// Every type name [`resolve`] and [`enum_names`]' callers look up, for
/// [`Btf::prefetch`] (a name missing here is still found, by a pass of its
/// own: `running_kernel_start_names_are_prefetched` says which).
pub const NAMES: &[&str] = &[
    "sk_buff",
    "net_device",
    "nf_conn",
    "net",
    "flowi4",
    "flowi6",
    "fib6_result",
    "fib6_table",
    "fib6_nh",
    "fib_nh_common",
    "neighbour",
    "neigh_table",
    "sock_common",
    "sock",
    "nf_conntrack_tuple",
    "nf_hook_state",
    "nft_pktinfo",
    "nft_chain",
    "nft_table",
    "xt_table",
    "task_struct",
    "files_struct",
    "fdtable",
    "file",
    "socket",
    "bpf_prog",
    "bpf_prog_aux",
    "bpf_map",
    "bpf_func_id",
    "skb_drop_reason",
    "sk_rst_reason",
    "btf_trace_tcp_send_reset",
    "btf_trace_kfree_skb",
    "btf_trace_consume_skb",
    "btf_trace_xdp_redirect",
];

/// Fields without which no packet can be followed.
const REQUIRED: &[(&str, &str)] = &[
    ("sk_buff", "head"),
    ("sk_buff", "network_header"),
    ("sk_buff", "dev"),
    ("net_device", "ifindex"),
    ("net_device", "name"),
];

pub fn resolve(btf: &Btf) -> Result<Resolved, BtfError> {
    for (st, f) in REQUIRED {
        btf.member_offset(st, f)?;
    }
    let mut missing = Vec::new();
    let mut get = |st: &str, path: &str| -> u32 {
        if let Ok(o) = btf.member_offset(st, path) {
            o
        } else {
            missing.push(format!("{st}.{path}"));
            OFFSET_NONE
        }
    };
    // nf_conn.tuplehash[IP_CT_DIR_ORIGINAL|IP_CT_DIR_REPLY].tuple
    let ct_orig = get("nf_conn", "tuplehash[0].tuple");
    let ct_reply = get("nf_conn", "tuplehash[1].tuple");
    let mut o = KernelOffsets {
        skb_len: get("sk_buff", "len"),
        skb_head: get("sk_buff", "head"),
        skb_data: get("sk_buff", "data"),
        skb_network_header: get("sk_buff", "network_header"),
        skb_transport_header: get("sk_buff", "transport_header"),
        skb_mac_header: get("sk_buff", "mac_header"),
        skb_dev: get("sk_buff", "dev"),
        skb_sk: get("sk_buff", "sk"),
        skb_nfct: get("sk_buff", "_nfct"),
        skb_mark: get("sk_buff", "mark"),
        dev_ifindex: get("net_device", "ifindex"),
        dev_name: get("net_device", "name"),
        // possible_net_t { struct net *net; } (only when CONFIG_NET_NS)
        dev_nd_net: get("net_device", "nd_net.net"),
        net_ns_inum: get("net", "ns.inum"),
        fl4_oif: get("flowi4", "__fl_common.flowic_oif"),
        fl4_iif: get("flowi4", "__fl_common.flowic_iif"),
        fl4_mark: get("flowi4", "__fl_common.flowic_mark"),
        fl4_proto: get("flowi4", "__fl_common.flowic_proto"),
        fl4_saddr: get("flowi4", "saddr"),
        fl4_daddr: get("flowi4", "daddr"),
        fl4_sport: get("flowi4", "uli.ports.sport"),
        fl4_dport: get("flowi4", "uli.ports.dport"),
        fl6_oif: get("flowi6", "__fl_common.flowic_oif"),
        fl6_iif: get("flowi6", "__fl_common.flowic_iif"),
        fl6_proto: get("flowi6", "__fl_common.flowic_proto"),
        fl6_saddr: get("flowi6", "saddr"),
        fl6_daddr: get("flowi6", "daddr"),
        fl6_sport: get("flowi6", "uli.ports.sport"),
        fl6_dport: get("flowi6", "uli.ports.dport"),
        f6res_nh: get("fib6_result", "nh"),
        f6res_type: get("fib6_result", "fib6_type"),
        tb6_id: get("fib6_table", "tb6_id"),
        fib6_nh_common: get("fib6_nh", "nh_common"),
        nhc_dev: get("fib_nh_common", "nhc_dev"),
        nhc_gw_family: get("fib_nh_common", "nhc_gw_family"),
        nhc_gw: get("fib_nh_common", "nhc_gw"),
        nhc_scope: get("fib_nh_common", "nhc_scope"),
        neigh_dev: get("neighbour", "dev"),
        neigh_primary_key: get("neighbour", "primary_key"),
        neigh_nud_state: get("neighbour", "nud_state"),
        neigh_ha: get("neighbour", "ha"),
        neigh_tbl: get("neighbour", "tbl"),
        neigh_table_family: get("neigh_table", "family"),
        sk_family: get("sock_common", "skc_family"),
        sk_state: get("sock_common", "skc_state"),
        sk_daddr: get("sock_common", "skc_daddr"),
        sk_rcv_saddr: get("sock_common", "skc_rcv_saddr"),
        sk_dport: get("sock_common", "skc_dport"),
        sk_num: get("sock_common", "skc_num"),
        sk_net: get("sock_common", "skc_net.net"),
        sk_v6_daddr: get("sock_common", "skc_v6_daddr"),
        sk_v6_rcv_saddr: get("sock_common", "skc_v6_rcv_saddr"),
        sk_protocol: get("sock", "sk_protocol"),
        ct_orig_tuple: ct_orig,
        ct_reply_tuple: ct_reply,
        ctt_src_addr: get("nf_conntrack_tuple", "src.u3"),
        ctt_src_port: get("nf_conntrack_tuple", "src.u.all"),
        ctt_dst_addr: get("nf_conntrack_tuple", "dst.u3"),
        ctt_dst_port: get("nf_conntrack_tuple", "dst.u.all"),
        ctt_dst_protonum: get("nf_conntrack_tuple", "dst.protonum"),
        tp_reset_has_reason: 0,
        tp_kfree_has_reason: 0,
        tp_consume_has_location: 0,
        nfhs_pf: get("nf_hook_state", "pf"),
        nfhs_hook: get("nf_hook_state", "hook"),
        // Module types (nf_tables, x_tables): resolved from the module's
        // split BTF when it is loaded, else reported missing (the chain or
        // table name of a netfilter verdict is then empty).
        nftpi_skb: get("nft_pktinfo", "skb"),
        nft_chain_name: get("nft_chain", "name"),
        nft_chain_table: get("nft_chain", "table"),
        nft_table_name: get("nft_table", "name"),
        xt_table_name: get("xt_table", "name"),
        has_func_ip: 0,
        skb_tail: get("sk_buff", "tail"),
        task_files: get("task_struct", "files"),
        files_fdt: get("files_struct", "fdt"),
        fdt_fd: get("fdtable", "fd"),
        file_private_data: get("file", "private_data"),
        socket_sk: get("socket", "sk"),
        prog_aux: get("bpf_prog", "aux"),
        prog_aux_id: get("bpf_prog_aux", "id"),
        tp_xdp_redirect_arity: 0,
        bpf_map_id: get("bpf_map", "id"),
    };
    // Module types are absent while their module is not loaded: that is
    // the hook's reported gap (`module X not loaded`), not a missing field.
    for (field, module_types) in [
        ("nft_pktinfo.skb", "nft_pktinfo"),
        ("nft_chain.name", "nft_chain"),
        ("nft_chain.table", "nft_chain"),
        ("nft_table.name", "nft_table"),
        ("xt_table.name", "xt_table"),
    ] {
        if !btf.has_type(module_types) {
            missing.retain(|m| m != field);
        }
    }
    // struct sock starts with struct sock_common __sk_common, so sock_common
    // offsets are valid on a struct sock pointer; check rather than assume.
    if btf.member_offset("sock", "__sk_common").ok() != Some(0) {
        missing.push("sock.__sk_common at offset 0".into());
    }
    tracepoint_shapes(btf, &mut o);
    // bpf_get_func_ip() came in 5.15 (kprobes and fentry alike): the
    // function hooks name their function's address only with it.
    o.has_func_ip = btf
        .enum_values("bpf_func_id")
        .is_some_and(|v| v.iter().any(|(name, _)| name == "BPF_FUNC_get_func_ip"))
        as u32;
    Ok(Resolved {
        offsets: o,
        missing,
    })
}

/// The tracepoints whose arguments changed across kernels: which shape
/// this one has.
fn tracepoint_shapes(btf: &Btf, o: &mut KernelOffsets) {
    // tcp_send_reset gained `enum sk_rst_reason reason` in 6.10;
    // kfree_skb gained `reason` in 5.17.
    o.tp_reset_has_reason = (btf.tracepoint_arity("tcp_send_reset").unwrap_or(0) >= 3) as u32;
    o.tp_kfree_has_reason = (btf.tracepoint_arity("kfree_skb").unwrap_or(0) >= 3) as u32;
    o.tp_consume_has_location = (btf.tracepoint_arity("consume_skb").unwrap_or(0) >= 2) as u32;
    // xdp_redirect's `const struct bpf_map *map` became map_type and
    // map_id in 5.17 (one more argument).
    o.tp_xdp_redirect_arity = btf.tracepoint_arity("xdp_redirect").unwrap_or(0) as u32;
}

/// Enum value -> name with the prefix stripped (`SKB_DROP_REASON_NO_SOCKET`
/// -> `NO_SOCKET`).
pub fn enum_names(
    btf: &Btf,
    enum_name: &str,
    prefix: &str,
) -> std::collections::HashMap<u32, String> {
    btf.enum_values(enum_name)
        .map(|vals| {
            vals.iter()
                .map(|(n, v)| (*v as u32, n.strip_prefix(prefix).unwrap_or(n).to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::btf::fixture::Writer;

    fn mini_kernel() -> Vec<u8> {
        let mut w = Writer::new();
        let int = w.int("int", 4);
        let ptr = w.ptr(0);
        let u16t = w.int("u16", 2);
        let chr = w.int("char", 1);
        let name = w.array(chr, int, 16);
        // sk_buff with dev inside an anonymous union, as on 6.x
        let dev_union = w.composite(true, "", 8, &[("dev", ptr, 0), ("dev_scratch", ptr, 0)]);
        w.composite(
            false,
            "sk_buff",
            64,
            &[
                ("", dev_union, 128),
                ("len", int, 256),
                ("network_header", u16t, 320),
                ("head", ptr, 384),
            ],
        );
        let pnet = w.composite(false, "", 8, &[("net", ptr, 0)]);
        w.composite(
            false,
            "net_device",
            64,
            &[
                ("name", name, 0),
                ("ifindex", int, 256),
                ("nd_net", pnet, 320),
            ],
        );
        w.finish()
    }

    #[test]
    fn resolves_from_fixture_and_reports_missing() {
        let btf = Btf::parse(&mini_kernel()).unwrap();
        let r = resolve(&btf).unwrap();
        assert_eq!(r.offsets.skb_dev, 16);
        assert_eq!(r.offsets.skb_len, 32);
        assert_eq!(r.offsets.skb_network_header, 40);
        assert_eq!(r.offsets.skb_head, 48);
        assert_eq!(r.offsets.dev_ifindex, 32);
        assert_eq!(r.offsets.dev_nd_net, 40);
        assert_eq!(r.offsets.net_ns_inum, OFFSET_NONE);
        assert!(r.missing.contains(&"net.ns.inum".to_string()));
        assert_eq!(r.offsets.tp_kfree_has_reason, 0);
    }

    #[test]
    fn required_fields_missing_is_an_error() {
        let mut w = Writer::new();
        let int = w.int("int", 4);
        w.composite(false, "sk_buff", 8, &[("len", int, 0)]);
        let btf = Btf::parse(&w.finish()).unwrap();
        assert!(resolve(&btf).is_err());
    }

    #[test]
    fn drop_reason_names_strip_prefix() {
        let btf = Btf::parse(&crate::kernel::btf::fixture::sample_btf()).unwrap();
        let names = enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_");
        assert_eq!(names.get(&3).map(String::as_str), Some("NO_SOCKET"));
        assert_eq!(names.get(&1).map(String::as_str), Some("SKB_CONSUMED"));
    }

    #[test]
    fn running_kernel_offsets() {
        let p = std::path::Path::new("/sys/kernel/btf/vmlinux");
        if !p.exists() {
            eprintln!("no /sys/kernel/btf/vmlinux: real-kernel offset check not run");
            return;
        }
        let btf = Btf::from_file(p).unwrap();
        let r = resolve(&btf).unwrap();
        assert_ne!(r.offsets.skb_head, OFFSET_NONE);
        assert_ne!(r.offsets.net_ns_inum, OFFSET_NONE);
        assert_ne!(r.offsets.fl4_daddr, OFFSET_NONE);
        assert_eq!(r.offsets.tp_kfree_has_reason, 1);
    }
}
