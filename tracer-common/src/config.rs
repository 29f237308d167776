//! Load-time configuration passed to the programs as read-only globals
//! (`EbpfLoader::override_global`): what to follow and where kernel struct
//! fields live on the running kernel (resolved from its BTF in userspace).

/// Offset value meaning "this field does not exist on this kernel".
pub const OFFSET_NONE: u32 = u32::MAX;

/// What `tracer follow` matches. Addresses are in network byte order, IPv4 in
/// the first four bytes. Aligned to 8 so that the kernel side reads `addr`
/// and `mask` as two u64 words each (an align-1 read is split by LLVM's BPF
/// backend into eight byte loads and shifts per word, on every packet).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterConfig {
    /// Target address (network order), masked by `mask`.
    pub addr: [u8; 16],
    /// Prefix mask (network order).
    pub mask: [u8; 16],
    /// 4 or 6.
    pub family: u8,
    /// IPPROTO_* to follow, 0 for any.
    pub proto: u8,
    /// 1 when `port` must match.
    pub has_port: u8,
    /// 1 when only namespaces listed in the `NETNS` map are followed.
    pub netns_filter: u8,
    /// Destination port (host order) when `has_port`.
    pub port: u16,
    /// Bytes of each followed packet to copy, from its IP header on
    /// (kind BYTES records); 0 copies none.
    pub snaplen: u16,
    /// A DNS port besides 53 (`--dns-port`, e.g. 5353), 0 for none: its
    /// UDP packets carry their DNS id (`PacketInfo::dns_id`) too.
    pub dns_port: u16,
    /// UDP ports of the node's VXLAN devices beyond
    /// [`crate::tunnel::TUNNEL_UDP_PORTS`] (a device made with `dstport
    /// 4799`), 0 for none: their packets are a tunnel's outer ones too.
    pub tunnel_ports: [u16; 2],
}

impl FilterConfig {
    pub const fn empty() -> Self {
        Self {
            addr: [0; 16],
            mask: [0; 16],
            family: 0,
            proto: 0,
            has_port: 0,
            netns_filter: 0,
            port: 0,
            snaplen: 0,
            dns_port: 0,
            tunnel_ports: [0; 2],
        }
    }
}

/// Byte offsets of kernel struct fields on the running kernel, resolved from
/// `/sys/kernel/btf/vmlinux` by the loader. [`OFFSET_NONE`] when absent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOffsets {
    // struct sk_buff
    pub skb_len: u32,
    pub skb_head: u32,
    pub skb_data: u32,
    pub skb_network_header: u32,
    pub skb_transport_header: u32,
    pub skb_mac_header: u32,
    pub skb_dev: u32,
    pub skb_sk: u32,
    pub skb_nfct: u32,
    pub skb_mark: u32,
    // struct net_device
    pub dev_ifindex: u32,
    pub dev_name: u32,
    pub dev_nd_net: u32,
    // struct net -> ns_common
    pub net_ns_inum: u32,
    // struct flowi4 (the flowi_common is embedded first)
    pub fl4_oif: u32,
    pub fl4_iif: u32,
    pub fl4_mark: u32,
    pub fl4_proto: u32,
    pub fl4_saddr: u32,
    pub fl4_daddr: u32,
    pub fl4_sport: u32,
    pub fl4_dport: u32,
    // struct flowi6, fib6_result, fib6_table, fib6_nh
    pub fl6_oif: u32,
    pub fl6_iif: u32,
    pub fl6_proto: u32,
    pub fl6_saddr: u32,
    pub fl6_daddr: u32,
    pub fl6_sport: u32,
    pub fl6_dport: u32,
    pub f6res_nh: u32,
    pub f6res_type: u32,
    pub tb6_id: u32,
    pub fib6_nh_common: u32,
    // struct fib_nh_common
    pub nhc_dev: u32,
    pub nhc_gw_family: u32,
    pub nhc_gw: u32,
    pub nhc_scope: u32,
    // struct neighbour
    pub neigh_dev: u32,
    pub neigh_primary_key: u32,
    pub neigh_nud_state: u32,
    pub neigh_ha: u32,
    pub neigh_tbl: u32,
    pub neigh_table_family: u32,
    // struct sock_common
    pub sk_family: u32,
    pub sk_state: u32,
    pub sk_daddr: u32,
    pub sk_rcv_saddr: u32,
    pub sk_dport: u32,
    pub sk_num: u32,
    pub sk_net: u32,
    pub sk_v6_daddr: u32,
    pub sk_v6_rcv_saddr: u32,
    pub sk_protocol: u32,
    // struct nf_conn: tuplehash[0].tuple and tuplehash[1].tuple
    pub ct_orig_tuple: u32,
    pub ct_reply_tuple: u32,
    /// Layout of struct nf_conntrack_tuple: src.u3, src.u.all, dst.u3, dst.u.all, dst.protonum
    pub ctt_src_addr: u32,
    pub ctt_src_port: u32,
    pub ctt_dst_addr: u32,
    pub ctt_dst_port: u32,
    pub ctt_dst_protonum: u32,
    /// 1 when tcp_send_reset has a `reason` argument (kernel >= 6.10).
    pub tp_reset_has_reason: u32,
    /// 1 when the kfree_skb tracepoint has a `reason` argument.
    pub tp_kfree_has_reason: u32,
    /// 1 when consume_skb has a `location` argument (kernel >= 6.3; on 6.1
    /// its TP_PROTO is (struct sk_buff *skb) alone).
    pub tp_consume_has_location: u32,
    // struct nf_hook_state: pf and hook (u8 each)
    pub nfhs_pf: u32,
    pub nfhs_hook: u32,
    // nf_tables (module BTF): nft_pktinfo.skb, nft_chain.name/.table,
    // nft_table.name
    pub nftpi_skb: u32,
    pub nft_chain_name: u32,
    pub nft_chain_table: u32,
    pub nft_table_name: u32,
    // x_tables (module BTF): xt_table.name (inline char array)
    pub xt_table_name: u32,
    /// 1 when the kernel has the bpf_get_func_ip() helper (5.15+): the
    /// function hooks call it only then (before, the verifier refuses a
    /// program that calls it at all, unless the branch is dead).
    pub has_func_ip: u32,
    /// struct sk_buff: tail (an offset from head on 64-bit kernels,
    /// NET_SKBUFF_DATA_USES_OFFSET): the end of the linear data.
    pub skb_tail: u32,
    // A socket call's fd to its sock: task_struct.files, files_struct.fdt,
    // fdtable.fd, file.private_data (a struct socket for a socket's file),
    // socket.sk.
    pub task_files: u32,
    pub files_fdt: u32,
    pub fdt_fd: u32,
    pub file_private_data: u32,
    pub socket_sk: u32,
    // An XDP program's id: bpf_prog.aux, bpf_prog_aux.id.
    pub prog_aux: u32,
    pub prog_aux_id: u32,
    /// Arguments of the xdp_redirect tracepoints: 7 (dev, xdp, tgt, err,
    /// map_type, map_id, index; Linux >= 5.17) or 6 (dev, xdp, tgt, err,
    /// map, index: 5.10); 0 when absent.
    pub tp_xdp_redirect_arity: u32,
    /// struct bpf_map: id (a redirect's map, by its pointer on 5.10).
    pub bpf_map_id: u32,
}

impl KernelOffsets {
    pub const fn none() -> Self {
        Self {
            skb_len: OFFSET_NONE,
            skb_head: OFFSET_NONE,
            skb_data: OFFSET_NONE,
            skb_network_header: OFFSET_NONE,
            skb_transport_header: OFFSET_NONE,
            skb_mac_header: OFFSET_NONE,
            skb_dev: OFFSET_NONE,
            skb_sk: OFFSET_NONE,
            skb_nfct: OFFSET_NONE,
            skb_mark: OFFSET_NONE,
            dev_ifindex: OFFSET_NONE,
            dev_name: OFFSET_NONE,
            dev_nd_net: OFFSET_NONE,
            net_ns_inum: OFFSET_NONE,
            fl4_oif: OFFSET_NONE,
            fl4_iif: OFFSET_NONE,
            fl4_mark: OFFSET_NONE,
            fl4_proto: OFFSET_NONE,
            fl4_saddr: OFFSET_NONE,
            fl4_daddr: OFFSET_NONE,
            fl4_sport: OFFSET_NONE,
            fl4_dport: OFFSET_NONE,
            fl6_oif: OFFSET_NONE,
            fl6_iif: OFFSET_NONE,
            fl6_proto: OFFSET_NONE,
            fl6_saddr: OFFSET_NONE,
            fl6_daddr: OFFSET_NONE,
            fl6_sport: OFFSET_NONE,
            fl6_dport: OFFSET_NONE,
            f6res_nh: OFFSET_NONE,
            f6res_type: OFFSET_NONE,
            tb6_id: OFFSET_NONE,
            fib6_nh_common: OFFSET_NONE,
            nhc_dev: OFFSET_NONE,
            nhc_gw_family: OFFSET_NONE,
            nhc_gw: OFFSET_NONE,
            nhc_scope: OFFSET_NONE,
            neigh_dev: OFFSET_NONE,
            neigh_primary_key: OFFSET_NONE,
            neigh_nud_state: OFFSET_NONE,
            neigh_ha: OFFSET_NONE,
            neigh_tbl: OFFSET_NONE,
            neigh_table_family: OFFSET_NONE,
            sk_family: OFFSET_NONE,
            sk_state: OFFSET_NONE,
            sk_daddr: OFFSET_NONE,
            sk_rcv_saddr: OFFSET_NONE,
            sk_dport: OFFSET_NONE,
            sk_num: OFFSET_NONE,
            sk_net: OFFSET_NONE,
            sk_v6_daddr: OFFSET_NONE,
            sk_v6_rcv_saddr: OFFSET_NONE,
            sk_protocol: OFFSET_NONE,
            ct_orig_tuple: OFFSET_NONE,
            ct_reply_tuple: OFFSET_NONE,
            ctt_src_addr: OFFSET_NONE,
            ctt_src_port: OFFSET_NONE,
            ctt_dst_addr: OFFSET_NONE,
            ctt_dst_port: OFFSET_NONE,
            ctt_dst_protonum: OFFSET_NONE,
            tp_reset_has_reason: 0,
            tp_kfree_has_reason: 0,
            tp_consume_has_location: 0,
            nfhs_pf: OFFSET_NONE,
            nfhs_hook: OFFSET_NONE,
            nftpi_skb: OFFSET_NONE,
            nft_chain_name: OFFSET_NONE,
            nft_chain_table: OFFSET_NONE,
            nft_table_name: OFFSET_NONE,
            xt_table_name: OFFSET_NONE,
            has_func_ip: 0,
            skb_tail: OFFSET_NONE,
            task_files: OFFSET_NONE,
            files_fdt: OFFSET_NONE,
            fdt_fd: OFFSET_NONE,
            file_private_data: OFFSET_NONE,
            socket_sk: OFFSET_NONE,
            prog_aux: OFFSET_NONE,
            prog_aux_id: OFFSET_NONE,
            tp_xdp_redirect_arity: 0,
            bpf_map_id: OFFSET_NONE,
        }
    }
}

/// Value of the tracked-skb map: the direction the skb matched in and the
/// ports it had then, so that a reused skb address (some frees, such as
/// TCP's __kfree_skb(), have no tracepoint to untrack it) is recognised.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackInfo {
    pub dir: u8,
    pub proto: u8,
    /// The DNS id it carried ([`crate::PacketInfo::dns_id`], 0 when not
    /// read): a DNS message of the same socket pair at a reused skb
    /// address (a UDP skb a socket read is freed by
    /// __consume_stateless_skb(), which has no tracepoint, so its address
    /// stays tracked) is another packet, tracked and captured afresh.
    pub dns_id: u16,
    pub sport: u16,
    pub dport: u16,
    /// The addresses it had then, folded (`addr_fold`): a change means NAT
    /// rewrote the packet, and its bytes are captured again.
    pub addrs: u32,
}

/// Source and destination addresses folded into one word (xor of their
/// 32-bit words): equal for the same pair, different after a NAT rewrite
/// of either (but for a crafted collision, which costs only a capture).
#[expect(
    clippy::inline_always,
    reason = "called by the kernel programs, which must not make BPF-to-BPF calls for it"
)]
#[inline(always)]
#[must_use]
pub fn addr_fold(saddr: &[u8; 16], daddr: &[u8; 16]) -> u32 {
    let w = |a: &[u8; 16], i: usize| u32::from_ne_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
    // The source rotated, so that swapping source and destination (a
    // reply) does not give the same fold.
    (w(saddr, 0) ^ w(saddr, 4) ^ w(saddr, 8) ^ w(saddr, 12)).rotate_left(16)
        ^ w(daddr, 0)
        ^ w(daddr, 4)
        ^ w(daddr, 8)
        ^ w(daddr, 12)
}

/// What the programs leave out while tracer is over its CPU budget
/// (`--max-cpu`): bits of the one-element `SHED` array, which userspace
/// writes while the programs run.
pub mod shed {
    /// No packet bytes (kind BYTES records; `--snaplen 0`).
    pub const BYTES: u32 = 1;
    /// No record of a route lookup that found its route (a failed one is
    /// still recorded): three or more per packet sent from an unconnected
    /// socket, before the packet exists.
    pub const ROUTES: u32 = 2;
}

/// Indexes into the per-CPU `STATS` counter array.
pub mod stat {
    /// Events written to the ring buffer.
    pub const EVENTS: u32 = 0;
    /// Events lost because the ring buffer was full.
    pub const LOST: u32 = 1;
    /// Inserts into the tracked-skb map that failed.
    pub const TRACK_FAIL: u32 = 2;
    /// Packets that went through the match filter (cost indicator).
    pub const FILTERED: u32 = 3;
    /// Inserts into the flow-key map that failed.
    pub const FLOWKEY_FAIL: u32 = 4;
    /// Tracked skb addresses found reused by an unrelated packet.
    pub const STALE: u32 = 5;
    /// Packets counted instead of recorded (agg): while it stays the same
    /// the `AGG` map holds nothing new, and userspace does not walk it.
    pub const COUNTED: u32 = 6;
    pub const COUNT: u32 = 8;
}

/// Entries of the tracked-skb LRU map (kernel address -> flags).
pub const TRACKED_SKBS_MAX: u32 = 16384;
/// Entries of the flow-key map (tuples learnt from NAT/conntrack).
pub const FLOW_KEYS_MAX: u32 = 8192;
/// Ring buffer size in bytes.
pub const RING_BYTES: u32 = 4 << 20;

#[cfg(feature = "user")]
unsafe impl aya::Pod for FilterConfig {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for KernelOffsets {}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn filter_layout() {
        assert_eq!(size_of::<FilterConfig>(), 48);
        assert_eq!(align_of::<FilterConfig>(), 8);
        assert_eq!(offset_of!(FilterConfig, addr), 0);
        assert_eq!(offset_of!(FilterConfig, mask), 16);
        assert_eq!(offset_of!(FilterConfig, family), 32);
        assert_eq!(offset_of!(FilterConfig, port), 36);
        assert_eq!(offset_of!(FilterConfig, snaplen), 38);
        assert_eq!(offset_of!(FilterConfig, dns_port), 40);
    }

    #[test]
    fn offsets_layout() {
        // 80 u32 fields, no implicit padding.
        assert_eq!(size_of::<KernelOffsets>(), 81 * 4);
        assert_eq!(offset_of!(KernelOffsets, skb_len), 0);
        assert_eq!(offset_of!(KernelOffsets, tp_consume_has_location), 62 * 4);
        assert_eq!(offset_of!(KernelOffsets, xt_table_name), 69 * 4);
        assert_eq!(offset_of!(KernelOffsets, has_func_ip), 70 * 4);
        assert_eq!(offset_of!(KernelOffsets, skb_tail), 71 * 4);
        assert_eq!(offset_of!(KernelOffsets, socket_sk), 76 * 4);
        assert_eq!(offset_of!(KernelOffsets, tp_xdp_redirect_arity), 79 * 4);
        assert_eq!(offset_of!(KernelOffsets, bpf_map_id), 80 * 4);
        assert_eq!(KernelOffsets::none().skb_head, OFFSET_NONE);
    }

    #[test]
    fn track_info_layout() {
        assert_eq!(size_of::<TrackInfo>(), 12);
        assert_eq!(offset_of!(TrackInfo, sport), 4);
    }
}
