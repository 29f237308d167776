//! tc ingress/egress (tcx links, or clsact filters on kernels < 6.6).
//!
//! Headers are parsed with bounds-checked direct packet access
//! (network-types structs read at checked offsets). The programs never change the packet and always return
//! TC_ACT_UNSPEC (-1), which is also TCX_NEXT: the next program, or the
//! default action, decides.

use aya_ebpf::{macros::classifier, programs::TcContext};
use network_types::{eth::EthHdr, ip::Ipv6Hdr};
use tracer_common::{Hook, PacketInfo};

use crate::{
    agg,
    emit::{Reserved, bytes_slot, emit_bytes, fill_skb_event, follow_by_conntrack, handoff_flags},
    filter::{
        DIR_REPLY, classify_matched, header_match, learn_rewritten, surely_not_followed_words,
        track, word_of,
    },
    kread::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, skb_dev},
    maps::Handoff,
};

const TC_ACT_UNSPEC: i32 = -1;

/// EtherTypes (include/uapi/linux/if_ether.h), host order.
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;

#[classifier]
pub fn tracer_tc_ingress(ctx: TcContext) -> i32 {
    if crate::empty_programs() {
        return TC_ACT_UNSPEC;
    }
    // The decision most packets stop at is inlined here, not behind the
    // BPF-to-BPF call to try_tc(): the JIT makes that a real call and
    // return, and with return thunks (SRSO, retbleed mitigations) a return
    // is not cheap. `bpftool prog dump xlated` shows the difference.
    if quick_reject(&ctx) {
        return TC_ACT_UNSPEC;
    }
    let _ = try_tc(&ctx, Hook::TcIngress);
    TC_ACT_UNSPEC
}

#[classifier]
pub fn tracer_tc_egress(ctx: TcContext) -> i32 {
    if crate::empty_programs() {
        return TC_ACT_UNSPEC;
    }
    // See tracer_tc_ingress. A locally generated packet may reach egress
    // already rewritten by OUTPUT's DNAT (kube-proxy's ClusterIP rules for
    // a host process: incident 4), with the target left only in its
    // conntrack entry; with `--netns`, tc egress stands in for the
    // net_dev_start_xmit tracepoint, which checks the same. Only packets
    // with a socket (skb->sk, a ctx field load) are locally generated:
    // forwarded ones skip the reads.
    if quick_reject(&ctx) && !(has_socket(&ctx) && ct_orig_in_target(skb_addr(&ctx))) {
        return TC_ACT_UNSPEC;
    }
    let _ = try_tc(&ctx, Hook::TcEgress);
    TC_ACT_UNSPEC
}

/// Direct packet access when the bytes are in the linear area (the usual
/// case for headers): a bounds check instead of a bpf_skb_load_bytes() call
/// per header, on every packet of the traced interfaces. Falls back to the
/// helper for headers in paged data. `read` reads the checked bytes.
#[inline(always)]
fn load_by<T: Copy>(ctx: &TcContext, off: usize, read: unsafe fn(*const T) -> T) -> Option<T> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + off + core::mem::size_of::<T>() <= end {
        // SAFETY: [start+off, start+off+size) lies before data_end (checked
        // above; the verifier checks the same bound).
        return Some(unsafe { read((start + off) as *const T) });
    }
    ctx.load::<T>(off).ok()
}

/// [`load_by`] with an unaligned read (byte arrays).
#[inline(always)]
fn load<T: Copy>(ctx: &TcContext, off: usize) -> Option<T> {
    load_by(ctx, off, core::ptr::read_unaligned::<T>)
}

/// The IP header: family, protocol, addresses and length. Returns the
/// transport header's offset. Word loads ([`load_word`]) of the fields it
/// needs, not copies of the whole headers (unaligned copies are byte loads).
#[inline(always)]
fn parse_ip(ctx: &TcContext, pkt: &mut PacketInfo) -> Option<usize> {
    let off = EthHdr::LEN;
    let l4_off = match u16::from_be(load_word::<u16>(ctx, 12)?) {
        ETH_P_IP => {
            let vihl: u8 = load_word(ctx, off)?;
            pkt.proto = load_word(ctx, off + 9)?;
            let a: [u32; 2] = load_word(ctx, off + 12)?;
            pkt.family = 4;
            put_words(&mut pkt.saddr, &[a[0]]);
            put_words(&mut pkt.daddr, &[a[1]]);
            off + ((vihl & 0x0f) as usize) * 4
        }
        ETH_P_IPV6 => {
            pkt.proto = load_word(ctx, off + 6)?;
            let a: [u32; 8] = load_word(ctx, off + 8)?;
            pkt.family = 6;
            put_words(&mut pkt.saddr, &[a[0], a[1], a[2], a[3]]);
            put_words(&mut pkt.daddr, &[a[4], a[5], a[6], a[7]]);
            off + Ipv6Hdr::LEN
        }
        _ => return None,
    };
    pkt.len = ctx.len();
    Some(l4_off)
}

/// Store address words (network order in memory) at the start of a
/// PacketInfo address, as u32 stores: PacketInfo is 4-aligned (its u32
/// `len`) and its addresses are at offsets 0 and 16.
#[inline(always)]
fn put_words(dst: &mut [u8; 16], w: &[u32]) {
    let p = dst.as_mut_ptr() as *mut u32;
    for (i, v) in w.iter().enumerate() {
        // SAFETY: at most four u32 in 16 bytes, 4-aligned (see above).
        unsafe { p.add(i).write(*v) };
    }
}

/// Ports, TCP flags, ICMP type and code: only for packets that may be
/// followed.
#[inline(always)]
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
        // SCTP's common header starts with the ports too (RFC 9260 3.1).
        IPPROTO_UDP | IPPROTO_SCTP => {
            if let Some(ports) = load::<[u8; 4]>(ctx, l4_off) {
                pkt.sport = u16::from_be_bytes([ports[0], ports[1]]);
                pkt.dport = u16::from_be_bytes([ports[2], ports[3]]);
            }
            if pkt.proto == IPPROTO_UDP && crate::filter::dns(pkt) {
                // The DNS id, after the 8-byte UDP header (RFC 1035 4.1.1).
                if let Some(id) = load::<[u8; 2]>(ctx, l4_off + 8) {
                    pkt.dns_id = u16::from_be_bytes(id);
                }
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

/// A typed load of packet bytes ([`load_by`]), not declared unaligned:
/// LLVM's BPF backend splits an unaligned u32/u64 read into byte loads and
/// shifts (8 loads per u64). Packet data is not
/// aligned (the IPv4 addresses sit at byte 26 of the frame); the verifier
/// accepts a misaligned packet load unless alignment is strict, which it is
/// only with BPF_F_STRICT_ALIGNMENT or on architectures without efficient
/// unaligned access (check_pkt_ptr_alignment()): not x86-64 or arm64.
#[inline(always)]
fn load_word<T: Copy>(ctx: &TcContext, off: usize) -> Option<T> {
    // The hardware and the verifier take the misaligned load (see above).
    load_by(ctx, off, core::ptr::read_volatile::<T>)
}

/// The decision most packets of the node stop at, on the raw IP addresses:
/// true when the packet cannot be followed (see `surely_not_followed`), or
/// is not IP. Nothing else is touched for them: no scratch slot is looked
/// up and zeroed, no PacketInfo filled.
#[inline(always)]
fn quick_reject(ctx: &TcContext) -> bool {
    let skb = skb_addr(ctx);
    let Some(et) = load_word::<u16>(ctx, 12) else {
        return true;
    };
    match u16::from_be(et) {
        // EtherType IPv4: saddr and daddr at bytes 12..20 of the header.
        ETH_P_IP => {
            let Some(a) = load_word::<[u32; 2]>(ctx, EthHdr::LEN + 12) else {
                return true;
            };
            let (s, d) = (word_of(a[0], 0), word_of(a[1], 0));
            surely_not_followed_words(skb, 4, (s, 0), (d, 0))
        }
        // IPv6: saddr and daddr at bytes 8..40.
        ETH_P_IPV6 => {
            let Some(a) = load_word::<[u64; 4]>(ctx, EthHdr::LEN + 8) else {
                return true;
            };
            surely_not_followed_words(skb, 6, (a[0], a[1]), (a[2], a[3]))
        }
        _ => true,
    }
}

/// skb->sk is set: a local socket sent the packet (skb_set_owner_w());
/// forwarded packets have none. __sk_buff's `sk`, which the verifier turns
/// into a load of skb->sk (bpf_convert_ctx_access()).
#[inline(always)]
fn has_socket(ctx: &TcContext) -> bool {
    // SAFETY: a ctx field the verifier allows tc programs to read.
    !unsafe { (*ctx.skb.skb).__bindgen_anon_2.sk }.is_null()
}

/// Could the skb's conntrack entry be a request to the target (its original
/// destination in the target's prefix)? try_tc() then decides on the whole
/// original tuple (follow_by_conntrack()).
#[inline(always)]
fn ct_orig_in_target(skb: u64) -> bool {
    crate::kread::ct_orig_daddr_words(skb).is_some_and(crate::filter::prefix_eq_words)
}

/// The tc program's context is the kernel's struct sk_buff itself
/// (tcx_run()/tcf_classify() call bpf_prog_run(prog, skb)); its address is
/// the same skb id the tracepoints report, which ties tc hops to the rest.
#[inline(always)]
fn skb_addr(ctx: &TcContext) -> u64 {
    ctx.skb.skb as u64
}

/// A packet [`quick_reject`] let through: decided on its whole header, and
/// recorded (with its timestamp) only when followed.
#[inline(always)]
fn try_tc(ctx: &TcContext, hook: Hook) -> Option<()> {
    let skb = skb_addr(ctx);
    let s = crate::maps::scratch(hook)?;
    let (pkt, k, ct) = (&mut s.pkt, &mut s.key, &mut s.ct);
    let l4_off = parse_ip(ctx, pkt)?;
    parse_l4(ctx, pkt, l4_off);
    let dev = skb_dev(skb);
    let m = header_match(pkt);
    let budgeted = m != 0 && agg::countable(pkt);
    if budgeted {
        agg::key(k, pkt, (m == DIR_REPLY) as u8, hook, dev, pkt.dns_id as u32);
        if agg::counted(k) {
            return None;
        }
    }
    let (mut dir, mut need_track) = classify_matched(skb, pkt, m);
    if m == 0 && dir != 0 {
        // A tracked skb whose tuple is neither the target's nor a learnt
        // one: a program rewrote it since it was last seen (a tc program
        // before this hook, or one at a device it crossed), with no
        // conntrack entry that would have taught the new tuple.
        learn_rewritten(pkt, dir, ct);
    }
    if dir == 0 && hook == Hook::TcEgress {
        // As at xmit (skb_event()): after OUTPUT's DNAT, by conntrack.
        dir = follow_by_conntrack(skb, pkt, ct);
        need_track = dir != 0;
    }
    if dir == 0 {
        return None;
    }
    if need_track {
        track(skb, dir, pkt);
    }
    let (dev, f) = s
        .handoff
        .pass(dev, handoff_flags(dir == DIR_REPLY, need_track, budgeted));
    let (pkt, k, ct) = (&mut s.pkt, &mut s.key, &mut s.ct);
    let need_track = f & Handoff::TRACK != 0;
    let mut r = Reserved::new(hook, skb, 0, 0)?;
    let ev = r.ev();
    crate::zero::copy_pkt(&mut ev.pkt, pkt);
    ev.pkt.reply = (f & Handoff::REPLY) as u8;
    let keep = fill_skb_event(ev, skb, dev, ct);
    if keep && f & Handoff::BUDGETED != 0 {
        agg::recorded(k, ev.hdr.ifindex, ev.hdr.netns);
    }
    // A TCP segment to or from a DNS port is read at every tc hop: one a
    // local socket sent was first followed by the xmit tracepoint, which
    // reads the linear part only, and its payload is in page fragments
    // (userspace takes the same message on the same skb for one).
    if keep && (need_track || tcp_dns(pkt)) {
        packet_bytes(ctx, hook, ev);
    }
    r.finish(keep);
    Some(())
}

/// A TCP segment to or from a DNS port (53, or `--dns-port`).
#[inline(always)]
fn tcp_dns(pkt: &PacketInfo) -> bool {
    pkt.proto == IPPROTO_TCP && crate::filter::dns(pkt)
}

/// Snap lengths up to this are read with bpf_skb_load_bytes() (paged data
/// too); a longer capture reads the linear part ([`emit::packet_bytes`]).
const LOAD_MAX: usize = 1023;

/// `emit::packet_bytes` for tc: bpf_skb_load_bytes() reads paged data
/// too, where a locally sent TCP segment's payload is (tcp_sendmsg()
/// copies it to page fragments, the linear part holds the headers), so a
/// DNS message over TCP is read here and not by the tracepoints. From the
/// IP header on (after the Ethernet header [`parse_ip`] read), at most the
/// snap length.
///
/// The helper's size must be one the verifier bounds away from zero, and
/// LLVM folds a `len == 0` check into a compare on another register (6.1
/// refused the program: "invalid access to map value ... size=0"): so the
/// length is read in constant-size pieces, one per set bit of it, each at
/// the offset its higher bits make (`want & !(2n - 1)`, from `want` alone,
/// not summed along the way: the verifier then sees one bounded unknown
/// offset where a running sum would give it 2^10 paths of constants).
#[inline(always)]
fn packet_bytes(ctx: &TcContext, hook: Hook, ev: &tracer_common::PacketEvent) {
    let snap = if crate::maps::shed() & tracer_common::shed::BYTES == 0 {
        crate::filter().snaplen as u32
    } else {
        0
    };
    let want = ctx.len().saturating_sub(EthHdr::LEN as u32).min(snap) as usize;
    if want == 0 {
        return;
    }
    if want > LOAD_MAX {
        crate::emit::packet_bytes(hook, skb_addr(ctx), ev);
        return;
    }
    let Some(rec) = bytes_slot(hook) else {
        return;
    };
    let dst = rec.data.as_mut_ptr();
    macro_rules! piece {
        ($n:literal) => {
            if want & $n != 0 {
                let off = want & !(2 * $n - 1) & LOAD_MAX;
                // SAFETY: off + $n <= want <= LOAD_MAX < SNAP_MAX: within
                // the record's data.
                let ret = unsafe {
                    aya_ebpf::helpers::bpf_skb_load_bytes(
                        ctx.skb.skb.cast(),
                        (EthHdr::LEN + off) as u32,
                        dst.add(off).cast(),
                        $n,
                    )
                };
                if ret != 0 {
                    return;
                }
            }
        };
    }
    piece!(512);
    piece!(256);
    piece!(128);
    piece!(64);
    piece!(32);
    piece!(16);
    piece!(8);
    piece!(4);
    piece!(2);
    piece!(1);
    emit_bytes(rec, ev, want);
}
