//! The one cheap decision every packet on the node pays: is it followed?

use aya_ebpf::helpers::bpf_jiffies64;
use tracer_common::{CtTuple, PacketInfo, TrackInfo, stat};

use crate::{
    filter as cfg,
    maps::{FLOW_KEYS, FLOW_KEYS_USED, NETNS, TRACKED, TRACKED_AT, TRACKED_LIVE, bump},
};

pub const DIR_REQUEST: u8 = 1;
pub const DIR_REPLY: u8 = 2;

#[inline(always)]
fn words(b: &[u8; 16]) -> (u64, u64) {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&b[..8]);
    hi.copy_from_slice(&b[8..]);
    (u64::from_ne_bytes(lo), u64::from_ne_bytes(hi))
}

/// Does the address, as two native-endian words (an IPv4 address is the
/// low 32 bits of the first, the rest zero, as in a PacketInfo; see
/// [`pkt_words`]), fall in the target prefix? A masked compare as two
/// 64-bit words: two branches instead of sixteen keeps the verifier's path
/// count (and load time) down.
#[inline(always)]
pub fn prefix_eq_words((a0, a1): (u64, u64)) -> bool {
    let f = cfg();
    let (m0, m1) = aligned_words(&f.mask);
    let (f0, f1) = aligned_words(&f.addr);
    ((a0 & m0) ^ f0) | ((a1 & m1) ^ f1) == 0
}

/// An address of a PacketInfo as [`words`] gives it, from four u32 loads:
/// PacketInfo is 4-aligned (its u32 `len`) with its addresses at offsets 0
/// and 16 (tracer-common's layout test). [`words`] takes eight byte loads
/// and shifts per word, on every followed packet at every hook.
#[inline(always)]
pub fn pkt_words(a: &[u8; 16]) -> (u64, u64) {
    let p = a.as_ptr() as *const u32;
    // SAFETY: 16 readable bytes, 4-aligned (see above).
    let w = unsafe { [p.read(), p.add(1).read(), p.add(2).read(), p.add(3).read()] };
    (word_of(w[0], w[1]), word_of(w[2], w[3]))
}

/// The native-endian u64 of two u32 that lie in memory in this order (as
/// [`words`] reads eight address bytes). An IPv4 address `a` is
/// `word_of(a, 0)`.
#[inline(always)]
pub fn word_of(first: u32, second: u32) -> u64 {
    if cfg!(target_endian = "little") {
        first as u64 | (second as u64) << 32
    } else {
        (first as u64) << 32 | second as u64
    }
}

/// Two u64 loads. Only for the 8-aligned arrays of FilterConfig
/// (`#[repr(C, align(8))]`, addr at 0 and mask at 16: tracer-common's layout
/// test); [`words`] builds each word from eight byte loads.
#[inline(always)]
fn aligned_words(b: &[u8; 16]) -> (u64, u64) {
    let p = b.as_ptr() as *const u64;
    // SAFETY: 16 readable bytes at an 8-aligned address (see above).
    unsafe { (p.read(), p.add(1).read()) }
}

/// Does this tuple match the target (as request or reply)? `lenient_ports`
/// accepts port 0 (fib lookups on the input path carry no ports).
#[inline(always)]
pub fn match_tuple(p: &PacketInfo, lenient_ports: bool) -> u8 {
    let f = cfg();
    if p.family != f.family {
        return 0;
    }
    if f.proto != 0 && p.proto != f.proto && !(lenient_ports && p.proto == 0) {
        return 0;
    }
    let port_ok = |port: u16| f.has_port == 0 || port == f.port || (lenient_ports && port == 0);
    if prefix_eq_words(pkt_words(&p.daddr)) && port_ok(p.dport) {
        return DIR_REQUEST;
    }
    if prefix_eq_words(pkt_words(&p.saddr)) && port_ok(p.sport) {
        return DIR_REPLY;
    }
    learnt(p)
}

/// Tuples learnt from NAT (see `learn_conntrack`).
#[inline(always)]
fn learnt(p: &PacketInfo) -> u8 {
    if !nat_learnt() {
        return 0;
    }
    // Field by field into a zeroed key: the literal's address copies
    // became a `memmove` call (zero.rs).
    crate::let_zeroed!(key: CtTuple);
    copy_addr(&mut key.saddr, &p.saddr);
    copy_addr(&mut key.daddr, &p.daddr);
    key.sport = p.sport;
    key.dport = p.dport;
    key.proto = p.proto;
    key.family = p.family;
    match unsafe { FLOW_KEYS.get(key) } {
        Some(d) => *d,
        None => 0,
    }
}

/// An address copied as eight u16: CtTuple and PacketInfo, which hold the
/// addresses this copies, are at least 2-aligned (a u16 field each).
#[inline(always)]
pub(crate) fn copy_addr(dst: &mut [u8; 16], src: &[u8; 16]) {
    // SAFETY: 16 bytes each, 2-aligned (see above).
    unsafe {
        crate::zero::copy_in_place(
            dst.as_mut_ptr() as *mut [u16; 8],
            src.as_ptr() as *const [u16; 8],
        )
    };
}

/// Has `learn_conntrack` put any tuple in FLOW_KEYS yet?
#[inline(always)]
fn nat_learnt() -> bool {
    FLOW_KEYS_USED.get(0).copied().unwrap_or(0) != 0
}

/// The cheap first test of every parsed packet of the node: true when it
/// cannot be followed: neither address is in the target, no NAT tuple has
/// been learnt, and the skb is not tracked. Needs only the IP header, so the
/// caller reads the transport header and length only for candidates.
#[inline(always)]
pub fn surely_not_followed(skb: u64, pkt: &PacketInfo, window: u64) -> bool {
    if pkt.family == 0 {
        return false;
    }
    surely_not_followed_in(
        skb,
        pkt.family,
        pkt_words(&pkt.saddr),
        pkt_words(&pkt.daddr),
        window,
    )
}

/// [`surely_not_followed`] on the addresses as words ([`prefix_eq_words`]),
/// for a caller that decides on the raw header, before it fills a
/// PacketInfo (tc: no scratch slot to find and zero for most packets).
#[inline(always)]
pub fn surely_not_followed_words(
    skb: u64,
    family: u8,
    saddr: (u64, u64),
    daddr: (u64, u64),
) -> bool {
    surely_not_followed_in(skb, family, saddr, daddr, TRACK_RECENT_JIFFIES)
}

/// [`surely_not_followed_words`] with the tracked-skb lookup made while
/// something was tracked in the last `window` jiffies.
#[inline(always)]
fn surely_not_followed_in(
    skb: u64,
    family: u8,
    saddr: (u64, u64),
    daddr: (u64, u64),
    window: u64,
) -> bool {
    if addrs_may_match(family, saddr, daddr)
        || (tracked_within(window) && unsafe { TRACKED.get(&skb) }.is_some())
    {
        return false;
    }
    bump(stat::FILTERED);
    true
}

/// [`surely_not_followed_words`] for a hook without an skb (a route
/// lookup): neither address is in the target and no NAT tuple has been
/// learnt.
#[inline(always)]
pub fn addrs_not_followed(family: u8, saddr: (u64, u64), daddr: (u64, u64)) -> bool {
    if addrs_may_match(family, saddr, daddr) {
        return false;
    }
    bump(stat::FILTERED);
    true
}

/// Either address in the target's prefix, or a NAT tuple learnt (which
/// the whole tuple must then be looked up for).
#[inline(always)]
fn addrs_may_match(family: u8, saddr: (u64, u64), daddr: (u64, u64)) -> bool {
    let f = cfg();
    (family == f.family && (prefix_eq_words(daddr) || prefix_eq_words(saddr))) || nat_learnt()
}

/// A tracked skb whose addresses no longer match was rewritten by a NAT
/// that conntrack does not know (a tc program, IPVS): that happens on the
/// CPU and in the softirq that tracked it, microseconds later. So the
/// tracked-skb lookup (a hash of the skb address) is only worth doing while
/// something was tracked in the last `TRACK_RECENT_JIFFIES`; the rest of
/// the time (nothing followed yet, or between two DNS queries) packets of
/// the node skip it. bpf_jiffies64() is inlined by the verifier on 64-bit
/// (do_misc_fixups()): a load, no call.
#[inline(always)]
fn tracked_within(window: u64) -> bool {
    let last = TRACKED_AT.get(0).copied().unwrap_or(0);
    last != 0 && unsafe { bpf_jiffies64() }.wrapping_sub(last) < window
}

/// Was something tracked in the recent window, or is the packet a
/// tunnel's outer one? For a tracked skb seen at a drop under a header
/// other than the one it was tracked with (emit::skb_event).
#[inline(always)]
pub fn lately_or_wrapped(pkt: &PacketInfo) -> bool {
    tracked_within(TRACK_RECENT_JIFFIES) || encapsulated(pkt.proto, pkt.dport) != 0
}

/// 64 jiffies: 64 ms at HZ=1000, 256 ms at HZ=250.
pub const TRACK_RECENT_JIFFIES: u64 = 64;

/// The window at a drop: a packet may die long after its last hop when a
/// queue held it. The neighbour's arp_queue holds a packet until the
/// resolution fails (neigh_invalidate() drops it, NEIGH_FAILED:
/// mcast_solicit probes retrans_time apart, 3 s by default), a tunnel's
/// outer packet among them (vxlan_xmit_one() -> ip_local_out() ->
/// neigh_output() on the underlay, with no hook between that sees it).
/// 4,096 jiffies: 4 s at HZ=1000, 16 s at HZ=250. Drops are few beside
/// the packets a node forwards, and the lookup runs only while something
/// was followed.
pub const TRACK_HELD_JIFFIES: u64 = 4096;

/// Returns the direction flag when this skb is followed: its headers match
/// (newly matched skbs start being tracked), or its address is tracked and
/// the packet is plausibly the same one after NAT (same protocol, one port
/// unchanged), or its headers cannot be read here.
#[inline(always)]
pub fn follow_skb(skb: u64, pkt: &PacketInfo) -> u8 {
    let (dir, need_track) = classify_matched(skb, pkt, header_match(pkt));
    if need_track {
        track(skb, dir, pkt);
    }
    dir
}

/// The packet's own match ([`match_tuple`]), 0 for unparsed headers.
#[inline(always)]
pub fn header_match(pkt: &PacketInfo) -> u8 {
    if pkt.family == 0 {
        return 0;
    }
    bump(stat::FILTERED);
    match_tuple(pkt, false)
}

/// [`follow_skb`] without the map update, given the header match `d`: the
/// direction, and whether the skb still has to be tracked in it (the caller
/// may have counted the packet on `d` alone, agg.rs, and then leaves it
/// untracked).
#[inline(always)]
pub fn classify_matched(skb: u64, pkt: &PacketInfo, d: u8) -> (u8, bool) {
    // dir 0: not tracked. A plain value, not an Option<TrackInfo>: LLVM
    // spilled the undefined payload of a None, which the verifier rejects
    // ("R6 !read_ok").
    let t = match unsafe { TRACKED.get(&skb) } {
        Some(t) => *t,
        None => TrackInfo {
            dir: 0,
            proto: 0,
            dns_id: 0,
            sport: 0,
            dport: 0,
            addrs: 0,
        },
    };
    if pkt.family == 0 {
        return (t.dir, false);
    }
    if d != 0 {
        if t.dir != d {
            crate::debug::matched(d, pkt);
        }
        // Tracked in this direction already: tracked again (and its bytes
        // captured again, emit.rs) only when NAT rewrote it since.
        return (d, t.dir != d || rewritten(&t, pkt));
    }
    if t.dir == 0 {
        return (0, false);
    }
    if t.proto == pkt.proto && (t.sport == pkt.sport || t.dport == pkt.dport) {
        crate::debug::rewritten(pkt);
        return (t.dir, rewritten(&t, pkt));
    }
    // Wrapped by a tunnel device in place (outer headers pushed on the same
    // skb: vxlan_xmit_one() -> udp_tunnel_xmit_skb(), ip_tunnel_xmit() ->
    // iptunnel_xmit()): still tracked, under the outer tuple, which the
    // caller learns at xmit and tc (learn_rewritten), so the far side's
    // hops, up to the decapsulation, are the flow's too. Decided as data,
    // not as a branch to another return: any new path out of here made
    // LLVM lay the callers out anew and the verifier walk 40% more of
    // tracer_xmit, tc_egress and kfree_skb on 6.18.
    let kept = encapsulated(pkt.proto, pkt.dport);
    if kept == 0 {
        crate::debug::reused(pkt);
        bump(stat::STALE);
        untrack(skb);
    }
    (t.dir & 0u8.wrapping_sub(kept), kept != 0)
}

/// 1 when the packet is a tunnel's outer one
/// ([`tracer_common::tunnel::is_tunnel_or`], with the node's own VXLAN
/// ports), else 0: a BPF-to-BPF call, so that its compares stay out of
/// the callers' code (see classify_matched).
#[inline(never)]
fn encapsulated(proto: u8, dport: u16) -> u8 {
    tracer_common::tunnel::is_tunnel_or(proto, dport, crate::filter().tunnel_ports) as u8
}

/// Is `port` a DNS port: 53, or the one `--dns-port` added?
#[inline(always)]
fn dns_port(port: u16) -> bool {
    port == tracer_common::DNS_PORT || (port != 0 && port == crate::filter().dns_port)
}

/// Is the packet to or from a DNS port?
#[inline(always)]
pub fn dns(pkt: &PacketInfo) -> bool {
    dns_port(pkt.sport) || dns_port(pkt.dport)
}

/// Is the tracked skb another packet than when it was tracked: its tuple
/// changed (NAT), or it carries another DNS message (its address reused
/// after a free no tracepoint saw; [`TrackInfo::dns_id`])?
#[inline(always)]
fn rewritten(t: &TrackInfo, pkt: &PacketInfo) -> bool {
    t.sport != pkt.sport
        || t.dport != pkt.dport
        || t.addrs != tracer_common::addr_fold(&pkt.saddr, &pkt.daddr)
        || (pkt.dns_id != 0 && pkt.dns_id != t.dns_id)
}

/// [`follow_skb`] for the function hooks that see only skbs an entry hook
/// (tc, netif_receive_skb, net_dev_start_xmit, nf_hook_slow at LOCAL_OUT)
/// already matched and tracked (func.rs, `Decide::Tracked`): the direction
/// comes from TRACKED, as at consume and the socket hooks
/// ([`still_tracked`]), without matching the header against the target
/// again. A header NAT rewrote since (same protocol, one port kept) is
/// tracked again with its new tuple, as [`classify_matched`] does; an skb
/// whose entry no longer fits its packet (freed and reused) is untracked.
/// The target match left out was most of these programs' verification:
/// Debian 6.1 processed ~22,900 instructions for each.
#[inline(always)]
pub fn follow_tracked(skb: u64, pkt: &PacketInfo) -> u8 {
    // A plain value, not an Option (see classify_matched).
    let t = match unsafe { TRACKED.get(&skb) } {
        Some(t) => *t,
        None => return 0,
    };
    if t.dir == 0 || pkt.family == 0 {
        return t.dir;
    }
    if t.proto == pkt.proto && (t.sport == pkt.sport || t.dport == pkt.dport) {
        if rewritten(&t, pkt) {
            crate::debug::rewritten(pkt);
            track(skb, t.dir, pkt);
        }
        return t.dir;
    }
    crate::debug::reused(pkt);
    bump(stat::STALE);
    untrack(skb);
    0
}

/// For hooks that only concern skbs already followed (consume, socket
/// reads, ICMP errors and resets about them): the direction when `skb` is
/// tracked and its headers are still those of the followed packet. An skb
/// freed without a tracepoint (e.g. __kfree_skb() of a pure TCP ACK) leaves
/// its address tracked; a later skb at that address (another flow's packet,
/// a netlink message) must not be taken for it: unreadable headers or a
/// different protocol/ports untrack it.
#[inline(always)]
pub fn still_tracked(skb: u64, pkt: &PacketInfo) -> u8 {
    let Some(t) = (unsafe { TRACKED.get(&skb) }).copied() else {
        return 0;
    };
    if pkt.family != 0 && t.proto == pkt.proto && (t.sport == pkt.sport || t.dport == pkt.dport) {
        return t.dir;
    }
    // Wrapped by a tunnel device in place ([`classify_matched`]): an ICMP
    // error about the outer packet (host-unreachable from
    // neigh_invalidate() -> arp_error_report() -> ipv4_link_failure(), when
    // the underlay's ARP for the remote endpoint failed) comes before the
    // outer packet's drop, which must still find the skb tracked.
    if pkt.family != 0 && encapsulated(pkt.proto, pkt.dport) != 0 {
        return t.dir;
    }
    bump(stat::STALE);
    untrack(skb);
    0
}

/// Start following an skb by its address.
#[inline(always)]
pub fn track(skb: u64, dir: u8, pkt: &PacketInfo) {
    let info = TrackInfo {
        dir,
        proto: pkt.proto,
        dns_id: pkt.dns_id,
        sport: pkt.sport,
        dport: pkt.dport,
        addrs: tracer_common::addr_fold(&pkt.saddr, &pkt.daddr),
    };
    // BPF_NOEXIST first: only a new entry counts as live.
    match TRACKED.insert(&skb, &info, BPF_NOEXIST) {
        Ok(()) => live_add(1),
        Err(_) => {
            if TRACKED.insert(&skb, &info, 0).is_err() {
                bump(stat::TRACK_FAIL);
            }
        }
    }
    if let Some(p) = TRACKED_AT.get_ptr_mut(0) {
        // SAFETY: a u64 slot; a racing writer stores a time as recent.
        unsafe { *p = bpf_jiffies64() };
    }
}

/// bpf_map_update_elem() flag: fail if the key exists.
const BPF_NOEXIST: u64 = 1;

/// Entries `track` added and `untrack` removed, all CPUs (TRACKED_LIVE):
/// while it is 0 the hooks that only concern tracked skbs (consume_skb and
/// kfree_skb on every freed skb of the node, socket reads, function hooks)
/// skip the hash lookup. Entries the LRU evicts, or whose skb was freed
/// without a tracepoint, are never subtracted: the count can only be too
/// high, which costs a lookup, never a missed skb.
#[inline(always)]
fn live() -> u64 {
    TRACKED_LIVE.get(0).copied().unwrap_or(1)
}

#[inline(always)]
fn live_add(d: i64) {
    if let Some(p) = TRACKED_LIVE.get_ptr_mut(0) {
        // SAFETY: an 8-byte aligned slot of an array map. Atomic, as every
        // CPU updates it: AtomicU64::fetch_add is not offered on BPF targets
        // (no compare-and-swap), the intrinsic is, and with its result unused
        // LLVM emits the plain atomic add every BPF kernel accepts.
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                p, d as u64,
            )
        };
    }
}

#[inline(always)]
pub fn is_tracked(skb: u64) -> u8 {
    if live() == 0 {
        return 0;
    }
    match unsafe { TRACKED.get(&skb) } {
        Some(t) => t.dir,
        None => 0,
    }
}

#[inline(always)]
pub fn untrack(skb: u64) {
    if live() != 0 && TRACKED.remove(&skb).is_ok() {
        live_add(-1);
    }
}

/// When `--netns` was given, only those namespaces are reported.
#[inline(always)]
pub fn netns_allowed(netns: u32) -> bool {
    if cfg().netns_filter == 0 {
        return true;
    }
    unsafe { NETNS.get(&netns).is_some() }
}

/// A followed skb that carries a conntrack entry teaches us the tuples its
/// replies (ct reply tuple) and its translated requests (reverse of the reply
/// tuple) will carry after NAT, so those are followed too.
#[inline(always)]
pub fn learn_conntrack(orig: &CtTuple, reply: &CtTuple) {
    if reply.family == 0 || same_tuple(orig, &reverse(reply)) {
        // No translation: the filter already matches both directions.
        return;
    }
    if unsafe { FLOW_KEYS.get(reply) }.is_none() {
        learn_reply(reply);
    }
}

/// A followed packet whose tuple something rewrote without conntrack
/// knowing: a cgroup program in the socket call (sockaddr.rs), or a tc
/// program (Cilium's and Calico's Service DNAT in bpf_lxc/nodeport, and
/// their reverse translation of the replies; tc.rs, emit.rs). Its tuple
/// (as `dir`) and the reverse (as the other direction) are followed from
/// now on, as [`learn_conntrack`] does for a translation conntrack knows:
/// the answers of a request a program sent elsewhere come back under the
/// new tuple until the program translates them back, and the backend's
/// side of the path is otherwise unseen.
///
/// Both keys are built in `ct` (the caller's scratch, a map value) and
/// nothing on the stack: a branch whose arm writes the stack leaves the
/// verifier two states it cannot prune where the arms meet, and it walks
/// the rest of the program twice (tracer_xmit: 4,762 instructions
/// verified on 6.18 without the learning, 8,740 with a stack-built key).
#[inline(always)]
pub fn learn_rewritten(pkt: &PacketInfo, dir: u8, ct: &mut crate::maps::CtScratch) {
    let (seen, rev) = (&mut ct.orig, &mut ct.reply);
    copy_addr(&mut seen.saddr, &pkt.saddr);
    copy_addr(&mut seen.daddr, &pkt.daddr);
    copy_addr(&mut rev.saddr, &pkt.daddr);
    copy_addr(&mut rev.daddr, &pkt.saddr);
    seen.sport = pkt.sport;
    seen.dport = pkt.dport;
    rev.sport = pkt.dport;
    rev.dport = pkt.sport;
    seen.proto = pkt.proto;
    rev.proto = pkt.proto;
    seen.family = pkt.family;
    rev.family = pkt.family;
    seen._pad = [0; 2];
    rev._pad = [0; 2];
    // Pointers to the two constants: the direction picks them in
    // registers.
    let (d_seen, d_rev) = if dir == DIR_REQUEST {
        (&DIR_REQUEST, &DIR_REPLY)
    } else {
        (&DIR_REPLY, &DIR_REQUEST)
    };
    if FLOW_KEYS.insert(&*seen, d_seen, 0).is_err() {
        bump(stat::FLOWKEY_FAIL);
    }
    let _ = FLOW_KEYS.insert(&*rev, d_rev, 0);
    mark_learnt();
}

/// Follow the tuple `reply` (as a reply) and its reverse (as a request)
/// from now on: a translation conntrack knows (`learn_conntrack`; one it
/// does not is [`learn_rewritten`]'s).
#[inline(always)]
fn learn_reply(reply: &CtTuple) {
    if FLOW_KEYS.insert(reply, &DIR_REPLY, 0).is_err() {
        bump(stat::FLOWKEY_FAIL);
    }
    let fwd = reverse(reply);
    let _ = FLOW_KEYS.insert(&fwd, &DIR_REQUEST, 0);
    mark_learnt();
}

/// FLOW_KEYS holds a tuple now: packets look it up from here on
/// ([`nat_learnt`]).
#[inline(always)]
fn mark_learnt() {
    if let Some(p) = FLOW_KEYS_USED.get_ptr_mut(0) {
        // SAFETY: a u32 slot; racing writers all store 1.
        unsafe { *p = 1 };
    }
}

/// Word-wise equality (a derived `==` compares byte by byte: dozens of
/// branches for the verifier to walk).
#[inline(always)]
fn same_tuple(a: &CtTuple, b: &CtTuple) -> bool {
    let (a0, a1) = words(&a.saddr);
    let (a2, a3) = words(&a.daddr);
    let (b0, b1) = words(&b.saddr);
    let (b2, b3) = words(&b.daddr);
    let pa = (a.sport as u64) | (a.dport as u64) << 16 | (a.proto as u64) << 32;
    let pb = (b.sport as u64) | (b.dport as u64) << 16 | (b.proto as u64) << 32;
    (a0 ^ b0) | (a1 ^ b1) | (a2 ^ b2) | (a3 ^ b3) | (pa ^ pb) == 0
}

#[inline(always)]
fn reverse(t: &CtTuple) -> CtTuple {
    CtTuple {
        saddr: t.daddr,
        daddr: t.saddr,
        sport: t.dport,
        dport: t.sport,
        proto: t.proto,
        family: t.family,
        _pad: [0; 2],
    }
}
