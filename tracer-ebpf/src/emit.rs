//! Building and sending records.

use aya_ebpf::helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns};
use tracer_common::{CtTuple, EventHeader, Hook, PacketEvent, PacketInfo, kind, stat};

use crate::{
    filter::{follow_skb, learn_conntrack, netns_allowed},
    kread::{dev_info, skb_conntrack, skb_dev, skb_packet, sock_netns},
    maps::{EVENTS, LAST, LastCtx, bump},
    offsets,
};

#[inline(always)]
pub fn header(kind: u8, hook: Hook, skb: u64) -> EventHeader {
    EventHeader {
        kind,
        hook: hook as u8,
        _pad: [0; 2],
        ifindex: 0,
        netns: 0,
        cpu: unsafe { bpf_get_smp_processor_id() },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        skb,
        ifname: [0; 16],
    }
}

/// A packet record with nothing filled in but the header.
#[inline(always)]
pub fn packet_event(hook: Hook, skb: u64, location: u64, reason: u32) -> PacketEvent {
    PacketEvent {
        hdr: header(kind::PACKET, hook, skb),
        pkt: PacketInfo::zeroed(),
        location,
        reason,
        mark: 0,
        ct_orig: CtTuple::zeroed(),
        ct_reply: CtTuple::zeroed(),
    }
}

#[inline(always)]
pub fn send<T: 'static>(ev: &T) {
    match EVENTS.output::<T>(ev, 0) {
        Ok(()) => bump(stat::EVENTS),
        Err(_) => bump(stat::LOST),
    }
}

#[inline(always)]
pub fn remember(skb: u64, netns: u32, ifindex: u32, ev: &PacketEvent) {
    if let Some(p) = LAST.get_ptr_mut(0) {
        unsafe {
            *p = LastCtx {
                skb,
                ts_ns: ev.hdr.ts_ns,
                netns,
                ifindex,
                sport: ev.pkt.sport,
                dport: ev.pkt.dport,
                dir: 1 + ev.pkt.reply,
                _pad: [0; 3],
            }
        };
    }
}

/// The common path of every skb hook: parse (unless `pkt` is given), decide
/// whether it is followed, fill the device/netns, conntrack, and send.
/// `dev` is the device to report (0: take skb->dev).
#[inline(always)]
pub fn skb_event(hook: Hook, skb: u64, dev: u64, location: u64, reason: u32) -> Option<()> {
    if skb == 0 {
        return None;
    }
    // Decide first; the record (and its timestamp) only for followed packets.
    let mut pkt = PacketInfo::zeroed();
    skb_packet(skb, &mut pkt);
    let mut dir = follow_skb(skb, &pkt);
    if dir == 0 && matches!(hook, Hook::Xmit | Hook::Drop) {
        dir = follow_by_conntrack(skb, &pkt);
    }
    if dir == 0 {
        return None;
    }
    let mut ev = packet_event(hook, skb, location, reason);
    ev.pkt = pkt;
    ev.pkt.reply = (dir == crate::filter::DIR_REPLY) as u8;
    finish_skb_event(&mut ev, skb, dev);
    Some(())
}

/// A locally generated packet is first seen after the OUTPUT hook, where
/// DNAT may already have rewritten it (kube-proxy's ClusterIP rules): its
/// conntrack entry still holds the original tuple. Costs one read of
/// skb->_nfct for packets without conntrack.
#[inline(always)]
pub fn follow_by_conntrack(skb: u64, pkt: &PacketInfo) -> u8 {
    let mut orig = CtTuple::zeroed();
    let mut reply = CtTuple::zeroed();
    if pkt.family == 0 || !skb_conntrack(skb, &mut orig, &mut reply) {
        return 0;
    }
    let mut o = PacketInfo::zeroed();
    o.family = orig.family;
    o.proto = orig.proto;
    o.saddr = orig.saddr;
    o.daddr = orig.daddr;
    o.sport = orig.sport;
    o.dport = orig.dport;
    if crate::filter::match_tuple(&o, false) != crate::filter::DIR_REQUEST {
        return 0;
    }
    crate::filter::track(skb, crate::filter::DIR_REQUEST, pkt);
    crate::filter::DIR_REQUEST
}

/// For hooks that only concern skbs already followed (an ICMP error or a
/// reset answering a packet that was received, hence seen, first): one map
/// lookup decides, no matching, no conntrack. Much cheaper to verify.
#[inline(always)]
pub fn tracked_event(hook: Hook, skb: u64, location: u64, reason: u32) -> Option<()> {
    let dir = crate::filter::is_tracked(skb);
    if skb == 0 || dir == 0 {
        return None;
    }
    let mut ev = packet_event(hook, skb, location, reason);
    skb_packet(skb, &mut ev.pkt);
    ev.pkt.reply = (dir == crate::filter::DIR_REPLY) as u8;
    let d = dev_info(skb_dev(skb), &mut ev.hdr.ifname);
    ev.hdr.ifindex = d.ifindex;
    ev.hdr.netns = d.netns;
    if ev.hdr.netns == 0 {
        let sk: u64 = crate::kread::read(skb, offsets().skb_sk).unwrap_or(0);
        ev.hdr.netns = sock_netns(sk);
    }
    if !netns_allowed(ev.hdr.netns) {
        return None;
    }
    send(&ev);
    Some(())
}

/// Fill device, netns, mark and conntrack of a followed skb event and send it.
#[inline(always)]
pub fn finish_skb_event(ev: &mut PacketEvent, skb: u64, dev: u64) {
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
        return;
    }
    ev.mark = crate::kread::read(skb, offsets().skb_mark).unwrap_or(0);
    if skb_conntrack(skb, &mut ev.ct_orig, &mut ev.ct_reply) {
        learn_conntrack(&ev.ct_orig, &ev.ct_reply);
    }
    remember(skb, d.netns, d.ifindex, ev);
    send(ev);
}
