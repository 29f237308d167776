//! tc ingress/egress (tcx links, or clsact filters on kernels < 6.6).
//!
//! Headers are parsed with bounds-checked direct packet access
//! (network-types structs read at checked offsets). The programs never change the packet and always return
//! TC_ACT_UNSPEC (-1), which is also TCX_NEXT: the next program, or the
//! default action, decides.

use aya_ebpf::{macros::classifier, programs::TcContext};
use network_types::{
    eth::{EthHdr, EtherType},
    ip::{Ipv4Hdr, Ipv6Hdr},
};
use tracer_common::{Hook, PacketInfo};

use crate::{
    agg,
    emit::{Reserved, fill_skb_event},
    filter::{DIR_REPLY, classify_matched, header_match, surely_not_followed, track},
    kread::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, skb_dev},
};

const TC_ACT_UNSPEC: i32 = -1;

#[classifier]
pub fn tracer_tc_ingress(ctx: TcContext) -> i32 {
    let _ = try_tc(&ctx, Hook::TcIngress);
    TC_ACT_UNSPEC
}

#[classifier]
pub fn tracer_tc_egress(ctx: TcContext) -> i32 {
    let _ = try_tc(&ctx, Hook::TcEgress);
    TC_ACT_UNSPEC
}

/// Direct packet access when the bytes are in the linear area (the usual
/// case for headers): a bounds check instead of a bpf_skb_load_bytes() call
/// per header, on every packet of the traced interfaces. Falls back to the
/// helper for headers in paged data.
#[inline(always)]
fn load<T: Copy>(ctx: &TcContext, off: usize) -> Option<T> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + off + core::mem::size_of::<T>() <= end {
        // SAFETY: [start+off, start+off+size) lies before data_end (checked
        // above; the verifier checks the same bound).
        return Some(unsafe { core::ptr::read_unaligned((start + off) as *const T) });
    }
    ctx.load::<T>(off).ok()
}

/// The IP header: family, protocol, addresses and length. Returns the
/// transport header's offset.
fn parse_ip(ctx: &TcContext, pkt: &mut PacketInfo) -> Option<usize> {
    let eth: EthHdr = load(ctx, 0)?;
    let off = EthHdr::LEN;
    let l4_off = match eth.ether_type() {
        Ok(EtherType::Ipv4) => {
            let ip: Ipv4Hdr = load(ctx, off)?;
            pkt.family = 4;
            pkt.proto = ip.proto;
            pkt.saddr[..4].copy_from_slice(&ip.src_addr);
            pkt.daddr[..4].copy_from_slice(&ip.dst_addr);
            // ihl() already returns the header length in bytes.
            off + ip.ihl() as usize
        }
        Ok(EtherType::Ipv6) => {
            let ip: Ipv6Hdr = load(ctx, off)?;
            pkt.family = 6;
            pkt.proto = ip.next_hdr;
            pkt.saddr = ip.src_addr;
            pkt.daddr = ip.dst_addr;
            off + Ipv6Hdr::LEN
        }
        _ => return None,
    };
    pkt.len = ctx.len();
    Some(l4_off)
}

/// Ports, TCP flags, ICMP type and code: only for packets that may be
/// followed.
fn parse_l4(ctx: &TcContext, pkt: &mut PacketInfo, l4_off: usize) {
    match pkt.proto {
        IPPROTO_TCP => {
            // Ports and flags (byte 13) in one read: a one-byte direct read
            // is checked as `ptr < data_end`, a form the verifier does not
            // take as a bound ("R1 offset is outside of the packet").
            if let Some(h) = load::<[u8; 14]>(ctx, l4_off) {
                pkt.sport = u16::from_be_bytes([h[0], h[1]]);
                pkt.dport = u16::from_be_bytes([h[2], h[3]]);
                pkt.tcp_flags = h[13];
            }
        }
        IPPROTO_UDP => {
            if let Some(ports) = load::<[u8; 4]>(ctx, l4_off) {
                pkt.sport = u16::from_be_bytes([ports[0], ports[1]]);
                pkt.dport = u16::from_be_bytes([ports[2], ports[3]]);
            }
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 => {
            if let Some(h) = load::<[u8; 8]>(ctx, l4_off) {
                pkt.icmp_type = h[0];
                pkt.icmp_code = h[1];
                if h[0] == 8 || h[0] == 0 || h[0] == 128 || h[0] == 129 {
                    pkt.sport = u16::from_be_bytes([h[4], h[5]]);
                }
            }
        }
        _ => {}
    }
}

fn try_tc(ctx: &TcContext, hook: Hook) -> Option<()> {
    // The tc program's context is the kernel's struct sk_buff itself
    // (tcx_run()/tcf_classify() call bpf_prog_run(prog, skb)); its address is
    // the same skb id the tracepoints report, which ties tc hops to the rest.
    let skb = ctx.skb.skb as u64;
    // Decide first; the record (and its timestamp) only for followed packets.
    let s = crate::maps::scratch(hook)?;
    let (pkt, k, ct) = (&mut s.pkt, &mut s.key, &mut s.ct);
    let l4_off = parse_ip(ctx, pkt)?;
    // Most packets of the node stop here, after the IP header.
    if surely_not_followed(skb, pkt) {
        return None;
    }
    parse_l4(ctx, pkt, l4_off);
    let dev = skb_dev(skb);
    let m = header_match(pkt);
    let budgeted = m != 0 && agg::countable(pkt);
    if budgeted {
        agg::key(k, pkt, (m == DIR_REPLY) as u8, hook, dev, 0);
        if agg::counted(k) {
            return None;
        }
    }
    let (dir, need_track) = classify_matched(skb, pkt, m);
    if dir == 0 {
        return None;
    }
    let reply = (dir == DIR_REPLY) as u8;
    if need_track {
        track(skb, dir, pkt);
    }
    let mut r = Reserved::new(hook, skb, 0, 0)?;
    let ev = r.ev();
    ev.pkt = *pkt;
    ev.pkt.reply = reply;
    let keep = fill_skb_event(ev, skb, dev, ct);
    if keep && budgeted {
        agg::recorded(k, ev.hdr.ifindex, ev.hdr.netns);
    }
    r.finish(keep);
    Some(())
}
