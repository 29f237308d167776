//! Reading kernel structs through offsets resolved from BTF at load time.
//!
//! Aya has no CO-RE for Rust programs, so every field is read with
//! bpf_probe_read_kernel at `base + OFFSETS.<field>`; a field that the running
//! kernel lacks has offset `OFFSET_NONE` and reads as `None`.

use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf};
use network_types::{ip::Ipv4Hdr, ip::Ipv6Hdr};
use tracer_common::{CtTuple, OFFSET_NONE, PacketInfo};

use crate::offsets;

pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMPV6: u8 = 58;
pub const IPPROTO_SCTP: u8 = 132;

#[inline(always)]
pub fn read<T: Copy>(base: u64, off: u32) -> Option<T> {
    if base == 0 || off == OFFSET_NONE {
        return None;
    }
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T).ok() }
}

/// A field of a struct the program holds as a BTF-typed pointer: a
/// tp_btf argument such as the skb of netif_receive_skb. A plain load: the
/// verifier checks it against the kernel's BTF (btf_struct_access()) and
/// the JIT makes it fault-safe (BPF_PROBE_MEM), so it costs a load instead
/// of a bpf_probe_read_kernel() call. `off` must be known at load time
/// (OFFSETS sits in .rodata, which aya freezes, so the verifier reads it as
/// a constant). Never for kprobe or tc pointers: those are plain numbers to
/// the verifier, and it rejects the load.
#[inline(always)]
pub fn load<T: Copy>(base: u64, off: u32) -> Option<T> {
    if base == 0 || off == OFFSET_NONE {
        return None;
    }
    Some(unsafe { core::ptr::read_volatile((base + off as u64) as *const T) })
}

#[inline(always)]
pub fn read_buf(base: u64, off: u32, dst: &mut [u8]) -> bool {
    if base == 0 || off == OFFSET_NONE {
        return false;
    }
    unsafe { bpf_probe_read_kernel_buf((base + off as u64) as *const u8, dst).is_ok() }
}

/// Device facts: ifindex, name, netns inode.
#[derive(Clone, Copy)]
pub struct DevInfo {
    pub ifindex: u32,
    pub netns: u32,
}

/// struct net_device: ifindex, name and nd_net (possible_net_t whose first
/// member is `struct net *net`) -> net->ns.inum.
#[inline(always)]
pub fn dev_info(dev: u64, name: &mut [u8; 16]) -> DevInfo {
    let o = offsets();
    let ifindex: u32 = read(dev, o.dev_ifindex).unwrap_or(0);
    read_buf(dev, o.dev_name, name);
    let net: u64 = read(dev, o.dev_nd_net).unwrap_or(0);
    let netns: u32 = read(net, o.net_ns_inum).unwrap_or(0);
    DevInfo { ifindex, netns }
}

/// netns inode of a struct sock (sock_common.skc_net).
#[inline(always)]
pub fn sock_netns(sk: u64) -> u32 {
    let o = offsets();
    let net: u64 = read(sk, o.sk_net).unwrap_or(0);
    read(net, o.net_ns_inum).unwrap_or(0)
}

#[inline(always)]
pub fn skb_dev(skb: u64) -> u64 {
    read(skb, offsets().skb_dev).unwrap_or(0)
}

/// Parse the IP and transport headers of an sk_buff from
/// `skb->head + skb->network_header`. The transport offset is computed from
/// the IP header because __netif_receive_skb_core() resets transport_header
/// to the network header on receive.
#[inline(always)]
pub fn skb_packet(skb: u64, pkt: &mut PacketInfo) -> bool {
    let l4 = skb_ip(skb, pkt);
    skb_rest(skb, l4, pkt);
    l4 != 0
}

/// First stage of [`skb_packet`], all a packet of the node that is not
/// followed pays: the IP header (family, protocol, addresses). Returns the
/// transport header's address, 0 when there is no readable IP header.
#[inline(always)]
pub fn skb_ip(skb: u64, pkt: &mut PacketInfo) -> u64 {
    let o = offsets();
    let head: u64 = match read(skb, o.skb_head) {
        Some(h) => h,
        None => return 0,
    };
    let nh: u16 = match read(skb, o.skb_network_header) {
        Some(n) => n,
        None => return 0,
    };
    // (u16)~0U marks an unset header offset (skb_network_header_was_set()).
    if nh == 0xffff || head == 0 {
        return 0;
    }
    ip_header(head + nh as u64, pkt)
}

/// [`skb_ip`] for an skb the program holds as a BTF-typed pointer (a
/// tp_btf argument): skb->head and skb->network_header are loads, only the
/// IP header is a probe read. On every packet of the node.
#[inline(always)]
pub fn skb_ip_btf(skb: u64, pkt: &mut PacketInfo) -> u64 {
    let o = offsets();
    let head: u64 = match load(skb, o.skb_head) {
        Some(h) => h,
        None => return 0,
    };
    let nh: u16 = match load(skb, o.skb_network_header) {
        Some(n) => n,
        None => return 0,
    };
    if nh == 0xffff || head == 0 {
        return 0;
    }
    ip_header(head + nh as u64, pkt)
}

/// Does the skb carry a conntrack entry (skb->_nfct, see nf_ct_get())? For
/// a BTF-typed skb pointer.
#[inline(always)]
pub fn skb_has_conntrack_btf(skb: u64) -> bool {
    load::<u64>(skb, offsets().skb_nfct).unwrap_or(0) & !7u64 != 0
}

/// Second stage: length and transport header.
#[inline(always)]
pub fn skb_rest(skb: u64, l4: u64, pkt: &mut PacketInfo) {
    pkt.len = read(skb, offsets().skb_len).unwrap_or(0);
    if l4 != 0 {
        l4_ports(l4, pkt);
    }
}

/// The IP header at `ip`; returns the transport header's address, or 0.
/// One read for IPv4: the 20-byte header is read at once and its version
/// nibble checked (an IPv6 header is longer, so the read stays inside it).
#[inline(always)]
pub fn ip_header(ip: u64, pkt: &mut PacketInfo) -> u64 {
    let h4: Ipv4Hdr = match unsafe { bpf_probe_read_kernel(ip as *const Ipv4Hdr) } {
        Ok(h) => h,
        Err(_) => return 0,
    };
    let first = h4.vihl;
    let l4: u64;
    match first >> 4 {
        4 => {
            let h = h4;
            pkt.family = 4;
            pkt.proto = h.proto as u8;
            // IPv4 in the first 4 bytes, the rest zero, without a memset
            // call (see zero.rs); bpfel is little-endian.
            pkt.saddr = (u32::from_ne_bytes(h.src_addr) as u128).to_le_bytes();
            pkt.daddr = (u32::from_ne_bytes(h.dst_addr) as u128).to_le_bytes();
            l4 = ip + ((first & 0x0f) as u64) * 4;
        }
        6 => {
            let h: Ipv6Hdr = match unsafe { bpf_probe_read_kernel(ip as *const Ipv6Hdr) } {
                Ok(h) => h,
                Err(_) => return 0,
            };
            pkt.family = 6;
            pkt.proto = h.next_hdr as u8;
            pkt.saddr = h.src_addr;
            pkt.daddr = h.dst_addr;
            l4 = ip + 40;
        }
        _ => return 0,
    }
    l4
}

/// Ports (host order), TCP flags, ICMP type/code. ICMP echo id goes in sport,
/// as conntrack does.
#[inline(always)]
pub fn l4_ports(l4: u64, pkt: &mut PacketInfo) {
    match pkt.proto {
        IPPROTO_TCP => {
            // Ports and flags (byte 13) in one read.
            let h: [u8; 14] = match unsafe { bpf_probe_read_kernel(l4 as *const [u8; 14]) } {
                Ok(p) => p,
                Err(_) => return,
            };
            pkt.sport = u16::from_be_bytes([h[0], h[1]]);
            pkt.dport = u16::from_be_bytes([h[2], h[3]]);
            pkt.tcp_flags = h[13];
        }
        // SCTP's common header starts with the ports too (RFC 9260 3.1):
        // a Service's SCTP port is followed like a UDP one.
        IPPROTO_UDP | IPPROTO_SCTP => {
            let ports: [u8; 4] = match unsafe { bpf_probe_read_kernel(l4 as *const [u8; 4]) } {
                Ok(p) => p,
                Err(_) => return,
            };
            pkt.sport = u16::from_be_bytes([ports[0], ports[1]]);
            pkt.dport = u16::from_be_bytes([ports[2], ports[3]]);
            if pkt.proto == IPPROTO_UDP && crate::filter::dns(pkt) {
                // The DNS id, after the 8-byte UDP header (RFC 1035 4.1.1).
                if let Ok(id) = unsafe { bpf_probe_read_kernel((l4 + 8) as *const [u8; 2]) } {
                    pkt.dns_id = u16::from_be_bytes(id);
                }
            }
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 => {
            let h: [u8; 8] = match unsafe { bpf_probe_read_kernel(l4 as *const [u8; 8]) } {
                Ok(p) => p,
                Err(_) => return,
            };
            pkt.icmp_type = h[0];
            pkt.icmp_code = h[1];
            // echo request/reply (v4 8/0, v6 128/129): identifier
            if h[0] == 8 || h[0] == 0 || h[0] == 128 || h[0] == 129 {
                pkt.sport = u16::from_be_bytes([h[4], h[5]]);
            }
        }
        _ => {}
    }
}

/// The original destination address of the skb's conntrack entry
/// (skb->_nfct, see skb_conntrack()) as the two native words
/// filter::prefix_eq_words() takes, or None without an entry. Two reads:
/// the cheap look tc egress takes at a packet whose own headers do not
/// match. An IPv4 address leaves bytes 4..16 zero (nf_ct_get_tuple()
/// clears the tuple), as a packet's IPv4 word does.
#[inline(always)]
pub fn ct_orig_daddr_words(skb: u64) -> Option<(u64, u64)> {
    let o = offsets();
    if o.ct_orig_tuple == OFFSET_NONE || o.ctt_dst_addr == OFFSET_NONE {
        return None;
    }
    let w: [u64; 2] = read(skb_ct(skb)? + o.ct_orig_tuple as u64, o.ctt_dst_addr)?;
    Some((w[0], w[1]))
}

/// The conntrack entry attached to the skb: skb->_nfct, whose low 3 bits
/// hold ctinfo (nf_ct_get()). None without one.
#[inline(always)]
fn skb_ct(skb: u64) -> Option<u64> {
    let nfct: u64 = read(skb, offsets().skb_nfct)?;
    let ct = nfct & !7u64;
    (ct != 0).then_some(ct)
}

/// The conntrack entry attached to the skb ([`skb_ct`]), as (original,
/// reply) tuples.
#[inline(always)]
pub fn skb_conntrack(skb: u64, orig: &mut CtTuple, reply: &mut CtTuple) -> bool {
    let o = offsets();
    let Some(ct) = skb_ct(skb) else {
        return false;
    };
    ct_tuple(ct, o.ct_orig_tuple, orig) && ct_tuple(ct, o.ct_reply_tuple, reply)
}

#[inline(always)]
fn ct_tuple(ct: u64, off: u32, t: &mut CtTuple) -> bool {
    if off == OFFSET_NONE {
        return false;
    }
    let o = offsets();
    let base = ct + off as u64;
    if !read_buf(base, o.ctt_src_addr, &mut t.saddr)
        || !read_buf(base, o.ctt_dst_addr, &mut t.daddr)
    {
        return false;
    }
    let sp: u16 = read(base, o.ctt_src_port).unwrap_or(0);
    let dp: u16 = read(base, o.ctt_dst_port).unwrap_or(0);
    t.sport = u16::from_be(sp);
    t.dport = u16::from_be(dp);
    t.proto = read(base, o.ctt_dst_protonum).unwrap_or(0);
    // An IPv4 tuple leaves bytes 4..16 of the address zero.
    let tail = |a: &[u8; 16]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&a[8..]);
        u64::from_ne_bytes(w) | (u32::from_ne_bytes([a[4], a[5], a[6], a[7]]) as u64)
    };
    t.family = if tail(&t.saddr) | tail(&t.daddr) == 0 {
        4
    } else {
        6
    };
    if t.proto == IPPROTO_ICMP || t.proto == IPPROTO_ICMPV6 {
        // dst.u.icmp is {type, code}: not a port.
        t.dport = 0;
    }
    true
}
