//! Building and sending records.

use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel_buf},
    maps::ring_buf::RingBufEntry,
};
use tracer_common::{
    BytesHeader, EventHeader, Hook, PacketEvent, PacketInfo, SNAP_MAX, kind, stat,
};

use crate::{
    agg,
    filter::{
        DIR_REPLY, classify_matched, header_match, learn_conntrack, learn_rewritten, netns_allowed,
        track,
    },
    kread::{
        dev_info, l4_ports, skb_conntrack, skb_dev, skb_has_conntrack_btf, skb_ip_btf, skb_packet,
        sock_netns,
    },
    maps::{BYTES, CtScratch, EVENTS, Handoff, LAST, bump},
    offsets,
};

/// Fill the header of a zeroed record (see `let_zeroed!`) field by field:
/// a header built as a literal makes LLVM call `memset` for its name, a
/// BPF-to-BPF call (zero.rs).
#[inline(always)]
pub fn set_header(h: &mut EventHeader, kind: u8, hook: Hook, skb: u64) {
    h.kind = kind;
    h.hook = hook as u8;
    h.cpu = unsafe { bpf_get_smp_processor_id() };
    h.ts_ns = unsafe { bpf_ktime_get_ns() };
    h.skb = skb;
}

/// Fill the header of a zeroed packet record (see `let_zeroed!`): building
/// the record as a literal makes LLVM call `memset` (zero.rs).
#[inline(always)]
pub fn packet_header(ev: &mut PacketEvent, hook: Hook, skb: u64, location: u64, reason: u32) {
    ev.hdr.kind = kind::PACKET;
    ev.hdr.hook = hook as u8;
    ev.hdr.cpu = unsafe { bpf_get_smp_processor_id() };
    ev.hdr.ts_ns = unsafe { bpf_ktime_get_ns() };
    ev.hdr.skb = skb;
    ev.location = location;
    ev.reason = reason;
}

/// A record of type `T` filled in place in the ring buffer, zeroed
/// first: never on the BPF stack, whose bytes the verifier tracks (see
/// maps::SCRATCH), and not copied again on output.
pub struct Slot<T: 'static>(RingBufEntry<T>);

impl<T: 'static> Slot<T> {
    /// None (counted as lost) when the ring buffer is full.
    #[inline(always)]
    pub fn new() -> Option<Self> {
        let Some(mut e) = EVENTS.reserve::<T>(0) else {
            bump(stat::LOST);
            return None;
        };
        // SAFETY: the reservation is size_of::<T>() writable bytes; the
        // records are plain integers, valid zeroed.
        unsafe { crate::zero::zero_in_place(e.as_mut_ptr()) };
        Some(Slot(e))
    }

    #[inline(always)]
    pub fn ev(&mut self) -> &mut T {
        // SAFETY: zeroed in `new`.
        unsafe { self.0.assume_init_mut() }
    }

    /// Submit when `keep`, else give the reservation back.
    #[inline(always)]
    pub fn finish(self, keep: bool) {
        if keep {
            self.0.submit(wake_flags());
            bump(stat::EVENTS);
        } else {
            self.0.discard(0);
        }
    }
}

/// A packet record filled in place in the ring buffer ([`Slot`]): the
/// ~220-byte record never sits on the 512-byte BPF stack (Debian 6.1's
/// verifier rejected the stack-built record, "combined stack size of 2
/// calls is 704"), and is not copied again on output.
pub struct Reserved(Slot<PacketEvent>);

impl Reserved {
    /// A zeroed record with its header filled; None (counted as lost) when
    /// the ring buffer is full.
    #[inline(always)]
    pub fn new(hook: Hook, skb: u64, location: u64, reason: u32) -> Option<Self> {
        let mut r = Reserved(Slot::new()?);
        packet_header(r.ev(), hook, skb, location, reason);
        Some(r)
    }

    #[inline(always)]
    pub fn ev(&mut self) -> &mut PacketEvent {
        self.0.ev()
    }

    /// Give the reservation back (a record that is not for us after all).
    #[inline(always)]
    pub fn discard(self) {
        self.0.finish(false);
    }

    /// Submit when `keep`, else discard.
    #[inline(always)]
    pub fn finish(self, keep: bool) {
        self.0.finish(keep);
    }
}

/// bpf_ringbuf_submit()/output() flags and the bpf_ringbuf_query() key
/// (include/uapi/linux/bpf.h).
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;
/// Wake the reader only once this much is waiting. By default a submit
/// wakes it whenever it has caught up (bpf_ringbuf_commit() queues an
/// irq_work): at a fast reader that is one wakeup per record, on the CPU
/// that carries the packet. Below the threshold the reader drains the ring
/// on a 10 ms tick (cli/follow.rs).
const WAKE_BYTES: u64 = 256 * 1024;

#[inline(always)]
fn wake_flags() -> u64 {
    if EVENTS.query(BPF_RB_AVAIL_DATA) >= WAKE_BYTES {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

#[inline(always)]
pub fn send<T: Copy + 'static>(ev: &T) {
    match EVENTS.output::<T>(ev, wake_flags()) {
        Ok(()) => bump(stat::EVENTS),
        Err(_) => bump(stat::LOST),
    }
}

#[inline(always)]
pub fn remember(skb: u64, netns: u32, ifindex: u32, ev: &PacketEvent) {
    if let Some(p) = LAST.get_ptr_mut(0) {
        // Field by field: a struct literal with padding becomes a memset.
        unsafe {
            (*p).skb = skb;
            (*p).ts_ns = ev.hdr.ts_ns;
            (*p).netns = netns;
            (*p).ifindex = ifindex;
            (*p).sport = ev.pkt.sport;
            (*p).dport = ev.pkt.dport;
            (*p).dir = 1 + ev.pkt.reply;
            (*p).hook = ev.hdr.hook;
        }
    }
}

/// The common path of the skb tracepoints (netif_receive_skb,
/// net_dev_start_xmit, kfree_skb): parse, decide whether it is followed,
/// count it or fill the device/netns, conntrack, and send. `skb` must be
/// the tp_btf argument itself (BTF-typed: see kread::load). `dev` is the
/// device to report (0: take skb->dev).
#[inline(always)]
pub fn skb_event(hook: Hook, skb: u64, dev: u64, location: u64, reason: u32) -> Option<()> {
    if skb == 0 {
        return None;
    }
    // Decide first; the record (and its timestamp) only for followed packets.
    let s = crate::maps::scratch(hook)?;
    let (pkt, k, ct) = (&mut s.pkt, &mut s.key, &mut s.ct);
    let l4 = skb_ip_btf(skb, pkt);
    // Most packets of the node stop here, after the IP header. Not at xmit
    // and drop when the skb has a conntrack entry: a locally generated
    // packet may already be DNATed there (follow_by_conntrack).
    if l4 != 0
        && crate::filter::surely_not_followed(skb, pkt, drop_window(hook))
        && !(matches!(hook, Hook::Xmit | Hook::Drop) && skb_has_conntrack_btf(skb))
    {
        return None;
    }
    // Ports (and TCP flags) now; skb->len only once a record is made.
    if l4 != 0 {
        l4_ports(l4, pkt);
    }
    // skb->dev as a plain load of the BTF-typed skb (xmit passes its device
    // argument): the key's site, and the record's device.
    let dev = if dev == 0 {
        crate::kread::load(skb, offsets().skb_dev).unwrap_or(0)
    } else {
        dev
    };
    // Drops are budgeted per drop site and reason, the rest per device and
    // DNS id (0 but for DNS over UDP): each query of a client socket that
    // asks many is recorded, and its bytes read.
    let (site, aux) = if hook == Hook::Drop {
        (location, reason)
    } else {
        (dev, pkt.dns_id as u32)
    };
    let m = header_match(pkt);
    let budgeted = m != 0 && agg::countable(pkt);
    if budgeted {
        agg::key(k, pkt, (m == DIR_REPLY) as u8, hook, site, aux);
        if agg::counted(k) {
            return None;
        }
    }
    let (mut dir, mut need_track) = classify_matched(skb, pkt, m);
    if hook == Hook::Xmit && m == 0 && dir != 0 {
        // A tracked skb leaving under a tuple neither the target's nor
        // learnt: a program rewrote it on its way here (tc.rs says more),
        // or NAT whose conntrack entry no hook has read yet (conntrack
        // then teaches the same). Only at xmit, where a forwarded packet
        // first shows a rewrite made at tc ingress, XDP or tc egress (the
        // tracepoint fires after tc egress): the other hooks' programs
        // (netif_receive, kfree_skb) are left without the code, which
        // costs each ~10-25% more instructions to verify.
        learn_rewritten(pkt, dir, ct);
    }
    if hook == Hook::Drop && m == 0 && need_track && !crate::filter::lately_or_wrapped(pkt) {
        // Past the recent window (a drop's longer one, drop_window()), a
        // tracked skb is taken only as it was tracked or wrapped by a
        // tunnel: a "rewritten" header there is more likely another
        // packet at a freed skb's address than NAT.
        dir = 0;
    }
    if dir == 0 && matches!(hook, Hook::Xmit | Hook::Drop) {
        dir = follow_by_conntrack(skb, pkt, ct);
        need_track = dir != 0;
    }
    if dir == 0 {
        return None;
    }
    pkt.len = crate::kread::load(skb, offsets().skb_len).unwrap_or(0);
    if need_track {
        track(skb, dir, pkt);
    }
    let (dev, f) = s
        .handoff
        .pass(dev, handoff_flags(dir == DIR_REPLY, need_track, budgeted));
    let (pkt, k, ct) = (&mut s.pkt, &mut s.key, &mut s.ct);
    let mut r = Reserved::new(hook, skb, location, reason)?;
    let ev = r.ev();
    crate::zero::copy_pkt(&mut ev.pkt, pkt);
    ev.pkt.reply = (f & Handoff::REPLY) as u8;
    let keep = fill_skb_event(ev, skb, dev, ct);
    if keep && f & Handoff::BUDGETED != 0 {
        agg::recorded(k, ev.hdr.ifindex, ev.hdr.netns);
    }
    if keep && f & Handoff::TRACK != 0 {
        packet_bytes(hook, skb, ev);
    }
    r.finish(keep);
    Some(())
}

/// How long after the last tracking a tracked skb is looked up at `hook`
/// (filter::TRACK_HELD_JIFFIES).
#[inline(always)]
fn drop_window(hook: Hook) -> u64 {
    if hook == Hook::Drop {
        crate::filter::TRACK_HELD_JIFFIES
    } else {
        crate::filter::TRACK_RECENT_JIFFIES
    }
}

/// [`Handoff`]'s flags for a followed packet: matched as a reply, to be
/// tracked, counted by agg.rs.
#[inline(always)]
pub fn handoff_flags(reply: bool, track: bool, budgeted: bool) -> u64 {
    (reply as u64 * Handoff::REPLY)
        | (track as u64 * Handoff::TRACK)
        | (budgeted as u64 * Handoff::BUDGETED)
}

/// The first bytes of a packet followed here for the first time (kind
/// BYTES), from its IP header on: at most the filter's snap length, and
/// only the skb's linear part (from skb->head + network_header to
/// skb->tail; paged data is not read: tc programs read it, see
/// `tc::packet_bytes`). `ev` is its packet record, for the header's
/// device, namespace and time.
#[inline(always)]
pub fn packet_bytes(hook: Hook, skb: u64, ev: &PacketEvent) {
    let snap = crate::filter().snaplen as u32;
    if snap == 0 || crate::maps::shed() & tracer_common::shed::BYTES != 0 {
        return;
    }
    let o = offsets();
    let (Some(head), Some(nh), Some(tail)) = (
        crate::kread::read::<u64>(skb, o.skb_head),
        crate::kread::read::<u16>(skb, o.skb_network_header),
        crate::kread::read::<u32>(skb, o.skb_tail),
    ) else {
        return;
    };
    if head == 0 || nh == 0xffff || tail <= nh as u32 {
        return;
    }
    let mut len = (tail - nh as u32).min(snap) as usize;
    if len > SNAP_MAX {
        len = SNAP_MAX;
    }
    let Some(rec) = bytes_slot(hook) else {
        return;
    };
    let Some(dst) = rec.data.get_mut(..len) else {
        return;
    };
    if unsafe { bpf_probe_read_kernel_buf((head + nh as u64) as *const u8, dst) }.is_err() {
        return;
    }
    emit_bytes(rec, ev, len);
}

/// This CPU's slot for building `hook`'s kind BYTES record.
#[inline(always)]
pub fn bytes_slot(hook: Hook) -> Option<&'static mut crate::maps::BytesRecord> {
    let rec = BYTES.get_ptr_mut(hook as u32)?;
    // SAFETY: this CPU's slot for this hook (see maps::BYTES).
    Some(unsafe { &mut *rec })
}

/// Send `rec` with its first `len` data bytes filled, as the kind BYTES
/// record of the packet whose record is `ev`.
#[inline(always)]
pub fn emit_bytes(rec: &mut crate::maps::BytesRecord, ev: &PacketEvent, len: usize) {
    // Field by field, its padding zeroed first: a literal becomes a
    // `memset` call for the padding (zero.rs).
    // SAFETY: a BytesHeader of this CPU's slot; and two EventHeader.
    unsafe {
        crate::zero::zero_in_place(&mut rec.hdr as *mut BytesHeader);
        crate::zero::copy_in_place(&mut rec.hdr.hdr, &ev.hdr);
    }
    rec.hdr.caplen = len as u16;
    rec.hdr.reply = ev.pkt.reply;
    rec.hdr.hdr.kind = kind::BYTES;
    let size = core::mem::size_of::<BytesHeader>() + len;
    // SAFETY: BytesRecord is repr(C): its header, then `data`, so its
    // first `size` bytes are the header and the `len` bytes read.
    let bytes = unsafe {
        core::slice::from_raw_parts((rec as *const crate::maps::BytesRecord).cast::<u8>(), size)
    };
    match EVENTS.output::<[u8]>(bytes, wake_flags()) {
        Ok(()) => bump(stat::EVENTS),
        Err(_) => bump(stat::LOST),
    }
}

/// A locally generated packet is first seen after the OUTPUT hook, where
/// DNAT may already have rewritten it (kube-proxy's ClusterIP rules): its
/// conntrack entry still holds the original tuple. Costs one read of
/// skb->_nfct for packets without conntrack. The caller tracks the skb.
#[inline(always)]
pub fn follow_by_conntrack(skb: u64, pkt: &PacketInfo, ct: &mut CtScratch) -> u8 {
    // SAFETY: plain integers; zeroes are valid.
    unsafe { crate::zero::zero_in_place(ct as *mut CtScratch) };
    let CtScratch { orig, reply, o } = ct;
    if pkt.family == 0 || !skb_conntrack(skb, orig, reply) {
        return 0;
    }
    // An ICMP error the stack built about a followed packet carries that
    // packet's conntrack entry (icmp_send() -> nf_ct_attach(), as
    // IP_CT_RELATED_REPLY): it is not the flow's request rewritten.
    if pkt.proto != orig.proto {
        return 0;
    }
    o.family = orig.family;
    o.proto = orig.proto;
    o.saddr = orig.saddr;
    o.daddr = orig.daddr;
    o.sport = orig.sport;
    o.dport = orig.dport;
    if crate::filter::match_tuple(o, false) != crate::filter::DIR_REQUEST {
        return 0;
    }
    crate::debug::by_conntrack(pkt);
    crate::filter::DIR_REQUEST
}

/// For hooks that only concern skbs already followed (an ICMP error or a
/// reset answering a packet that was received, hence seen, first): one map
/// lookup decides, no matching, no conntrack. Much cheaper to verify.
#[inline(always)]
pub fn tracked_event(hook: Hook, skb: u64, location: u64, reason: u32) -> Option<()> {
    if skb == 0 || crate::filter::is_tracked(skb) == 0 {
        return None;
    }
    let mut r = Reserved::new(hook, skb, location, reason)?;
    let ev = r.ev();
    skb_packet(skb, &mut ev.pkt);
    let dir = crate::filter::still_tracked(skb, &ev.pkt);
    if dir == 0 {
        r.discard();
        return None;
    }
    ev.pkt.reply = (dir == crate::filter::DIR_REPLY) as u8;
    let d = dev_info(skb_dev(skb), &mut ev.hdr.ifname);
    ev.hdr.ifindex = d.ifindex;
    ev.hdr.netns = d.netns;
    if ev.hdr.netns == 0 {
        let sk: u64 = crate::kread::read(skb, offsets().skb_sk).unwrap_or(0);
        ev.hdr.netns = sock_netns(sk);
    }
    let keep = netns_allowed(ev.hdr.netns);
    r.finish(keep);
    Some(())
}

/// Fill device, netns, mark and conntrack of a followed skb event; false
/// when its namespace is not followed (the record is then discarded).
#[inline(always)]
pub fn fill_skb_event(ev: &mut PacketEvent, skb: u64, dev: u64, ct: &mut CtScratch) -> bool {
    let dev = if dev == 0 { skb_dev(skb) } else { dev };
    let d = dev_info(dev, &mut ev.hdr.ifname);
    ev.hdr.ifindex = d.ifindex;
    ev.hdr.netns = d.netns;
    if ev.hdr.netns == 0 {
        // skb->dev is gone or reused once a socket owns the skb: take the
        // namespace of skb->sk instead.
        let sk: u64 = crate::kread::read(skb, offsets().skb_sk).unwrap_or(0);
        ev.hdr.netns = sock_netns(sk);
    }
    let d = crate::kread::DevInfo {
        ifindex: d.ifindex,
        netns: ev.hdr.netns,
    };
    if !netns_allowed(d.netns) {
        crate::debug::other_netns(d.netns);
        return false;
    }
    ev.mark = crate::kread::read(skb, offsets().skb_mark).unwrap_or(0);
    // Through scratch copies: on older kernels a map key may not point
    // into ring buffer memory ("R2 type=alloc_mem expected=fp, ...",
    // check_func_arg() on Debian's 6.1); a map value is accepted.
    unsafe { crate::zero::zero_in_place(ct as *mut CtScratch) };
    let CtScratch { orig, reply, .. } = ct;
    if skb_conntrack(skb, orig, reply) {
        learn_conntrack(orig, reply);
        // SAFETY: CtTuple to CtTuple (see zero::copy_in_place).
        unsafe {
            crate::zero::copy_in_place(&mut ev.ct_orig, &*orig);
            crate::zero::copy_in_place(&mut ev.ct_reply, &*reply);
        }
    }
    remember(skb, d.netns, d.ifindex, ev);
    true
}
