//! BTF tracepoints (tp_btf): the skb's path through the stack, routing
//! decisions, ICMP errors, TCP resets, socket state and neighbours.
//!
//! Argument positions follow the TP_PROTO of each tracepoint on Linux 6.x
//! (include/trace/events/{net,skb,fib,icmp,tcp,sock,neigh}.h).

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use tracer_common::{FibEvent, Hook, NeighEvent, PacketInfo, SockEvent, kind};

use crate::{
    agg,
    emit::{Reserved, Slot, send, set_header, skb_event, tracked_event},
    filter::{
        DIR_REPLY, addrs_not_followed, is_tracked, match_tuple, netns_allowed, untrack, word_of,
    },
    kread::{IPPROTO_TCP, dev_info, load, read, read_buf, skb_packet, sock_netns},
    maps::{LAST, LastCtx},
    offsets,
};

// ---- the skb's path ----------------------------------------------------

/// net:netif_receive_skb(struct sk_buff *skb): __netif_receive_skb_core()
/// is about to hand the packet to the stack of skb->dev's namespace.
#[btf_tracepoint(function = "netif_receive_skb")]
pub fn tracer_netif_receive(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    let _ = skb_event(Hook::NetifReceive, skb, 0, 0, 0);
    0
}

/// net:net_dev_start_xmit(const struct sk_buff *skb, const struct net_device *dev)
#[btf_tracepoint(function = "net_dev_start_xmit")]
pub fn tracer_xmit(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    let dev: u64 = ctx.arg(1);
    let _ = skb_event(Hook::Xmit, skb, dev, 0, 0);
    0
}

/// skb:kfree_skb(skb, location, reason[, rx_sk]): a drop. `reason` is an
/// enum skb_drop_reason whose names userspace reads from BTF.
#[btf_tracepoint(function = "kfree_skb")]
pub fn tracer_kfree_skb(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    let location: u64 = ctx.arg(1);
    let reason: u32 = if offsets().tp_kfree_has_reason != 0 {
        ctx.arg(2)
    } else {
        0
    };
    let _ = skb_event(Hook::Drop, skb, 0, location, reason);
    untrack(skb);
    0
}

/// skb:consume_skb(skb[, location]): freed after normal processing. Only
/// followed skbs are reported (this fires for most packets of the node).
#[btf_tracepoint(function = "consume_skb")]
pub fn tracer_consume_skb(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    if is_tracked(skb) != 0 {
        // Reading an argument past the TP_PROTO fails verification.
        let location: u64 = if offsets().tp_consume_has_location != 0 {
            ctx.arg(1)
        } else {
            0
        };
        let _ = tracked_event(Hook::Consume, skb, location, 0);
        untrack(skb);
    }
    0
}

/// skb:skb_copy_datagram_iovec(skb, len): a local reader (recvmsg) copies
/// this skb's data: the packet was delivered to a socket. skb->dev is not
/// valid here (UDP reuses it as dev_scratch), so the netns comes from skb->sk.
#[btf_tracepoint(function = "skb_copy_datagram_iovec")]
pub fn tracer_sock_recv(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    let _ = try_sock_recv(skb);
    0
}

fn try_sock_recv(skb: u64) -> Option<()> {
    let dir = is_tracked(skb);
    if dir == 0 {
        return None;
    }
    let mut r = Reserved::new(Hook::SockRecv, skb, 0, 0)?;
    let ev = r.ev();
    skb_packet(skb, &mut ev.pkt);
    if crate::filter::still_tracked(skb, &ev.pkt) != dir {
        r.discard();
        return None;
    }
    ev.pkt.reply = (dir == DIR_REPLY) as u8;
    let sk: u64 = read(skb, offsets().skb_sk).unwrap_or(0);
    ev.hdr.netns = sock_netns(sk);
    let keep = netns_allowed(ev.hdr.netns);
    r.finish(keep);
    Some(())
}

/// icmp:icmp_send(const struct sk_buff *skb, int type, int code): the kernel
/// is sending an ICMP error about `skb` (__icmp_send()).
#[btf_tracepoint(function = "icmp_send")]
pub fn tracer_icmp_send(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    let ty: i32 = ctx.arg(1);
    let code: i32 = ctx.arg(2);
    let reason = ((ty as u32 & 0xff) << 8) | (code as u32 & 0xff);
    let _ = tracked_event(Hook::IcmpSend, skb, 0, reason);
    0
}

/// tcp:tcp_send_reset(const struct sock *sk, const struct sk_buff *skb[,
/// enum sk_rst_reason reason]): a RST answers `skb` (tcp_v4_send_reset()).
#[btf_tracepoint(function = "tcp_send_reset")]
pub fn tracer_tcp_reset(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let skb: u64 = ctx.arg(1);
    let reason: u32 = if offsets().tp_reset_has_reason != 0 {
        ctx.arg(2)
    } else {
        u32::MAX
    };
    let _ = tracked_event(Hook::TcpReset, skb, 0, reason);
    0
}

// ---- routing -------------------------------------------------------------

/// fib:fib_table_lookup(u32 tb_id, const struct flowi4 *flp,
/// const struct fib_nh_common *nhc, int err): one table consulted by
/// fib_lookup(). A miss in a table is reported with nhc NULL and -EAGAIN.
#[btf_tracepoint(function = "fib_table_lookup")]
pub fn tracer_fib_lookup(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let table: u32 = ctx.arg(0);
    let flp: u64 = ctx.arg(1);
    let nhc: u64 = ctx.arg(2);
    let err: i32 = ctx.arg(3);
    let _ = try_fib(table, flp, nhc, err);
    0
}

#[inline(always)]
fn try_fib(table: u32, flp: u64, nhc: u64, err: i32) -> Option<()> {
    let o = offsets();
    // What every IPv4 route lookup of the node pays (a forwarded packet
    // makes up to six: input and output routes, a lookup per table of the
    // rules): the two addresses as plain loads of the BTF-typed flowi4
    // (kread::load; the program's argument, see tracer_fib_lookup) and a
    // compare, before a slot is zeroed or a helper called. The full
    // filter ran here for every lookup: 222 ns a run, 80% of tracer's
    // kernel time per packet not followed (issue 31).
    let (Some(saddr), Some(daddr)) = (load::<u32>(flp, o.fl4_saddr), load::<u32>(flp, o.fl4_daddr))
    else {
        return None;
    };
    if addrs_not_followed(4, (word_of(saddr, 0), 0), (word_of(daddr, 0), 0)) {
        return None;
    }
    // The packet and key in this CPU's scratch slot, not on the stack
    // (maps::SCRATCH): Debian's 6.1 verified the IPv6 program's stack
    // copies in 201,000 instructions.
    let s = crate::maps::scratch(Hook::FibLookup)?;
    let (pkt, k) = (&mut s.pkt, &mut s.key);
    pkt.family = 4;
    read_buf(flp, o.fl4_saddr, &mut pkt.saddr[..4]);
    read_buf(flp, o.fl4_daddr, &mut pkt.daddr[..4]);
    pkt.proto = read(flp, o.fl4_proto).unwrap_or(0);
    pkt.sport = u16::from_be(read(flp, o.fl4_sport).unwrap_or(0));
    pkt.dport = u16::from_be(read(flp, o.fl4_dport).unwrap_or(0));
    let dir = match_tuple(pkt, true);
    if dir == 0 {
        return None;
    }
    pkt.reply = (dir == DIR_REPLY) as u8;
    // Budgeted per table and nexthop: a forwarded flow looks its route up
    // for every packet.
    // Over the CPU budget, a lookup that found its route is left out.
    if err == 0 && crate::maps::shed() & tracer_common::shed::ROUTES != 0 {
        return None;
    }
    agg::key(k, pkt, pkt.reply, Hook::FibLookup, nhc, table);
    if agg::counted(k) {
        return None;
    }
    let mut r = Slot::<FibEvent>::new()?;
    let ev = r.ev();
    set_header(&mut ev.hdr, kind::FIB, Hook::FibLookup, 0);
    crate::zero::copy_pkt(&mut ev.pkt, pkt);
    ev.table = table;
    ev.err = err;
    ev.oif = read(flp, o.fl4_oif).unwrap_or(0);
    ev.iif = read(flp, o.fl4_iif).unwrap_or(0);
    let keep = fill_fib(ev, nhc);
    let (nh_ifindex, netns) = (ev.nh_ifindex, ev.hdr.netns);
    r.finish(keep);
    if keep {
        agg::recorded(k, nh_ifindex, netns);
    }
    Some(())
}

/// fib6:fib6_table_lookup(const struct net *net, const struct fib6_result *res,
/// struct fib6_table *table, const struct flowi6 *flp): one IPv6 table
/// consulted (fib6_table_lookup()); res->nh is NULL on a miss.
#[btf_tracepoint(function = "fib6_table_lookup")]
pub fn tracer_fib6_lookup(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let net: u64 = ctx.arg(0);
    let res: u64 = ctx.arg(1);
    let table: u64 = ctx.arg(2);
    let flp: u64 = ctx.arg(3);
    let _ = try_fib6(net, res, table, flp);
    0
}

fn try_fib6(net: u64, res: u64, table: u64, flp: u64) -> Option<()> {
    let o = offsets();
    // As in try_fib: scratch, not stack.
    let s = crate::maps::scratch_at(crate::maps::FIB6_SLOT)?;
    let (pkt, k) = (&mut s.pkt, &mut s.key);
    pkt.family = 6;
    read_buf(flp, o.fl6_saddr, &mut pkt.saddr);
    read_buf(flp, o.fl6_daddr, &mut pkt.daddr);
    pkt.proto = read(flp, o.fl6_proto).unwrap_or(0);
    pkt.sport = u16::from_be(read(flp, o.fl6_sport).unwrap_or(0));
    pkt.dport = u16::from_be(read(flp, o.fl6_dport).unwrap_or(0));
    let dir = match_tuple(pkt, true);
    if dir == 0 {
        return None;
    }
    pkt.reply = (dir == DIR_REPLY) as u8;
    let nh: u64 = read(res, o.f6res_nh).unwrap_or(0);
    let tb_id: u32 = read(table, o.tb6_id).unwrap_or(0);
    let rtype: u8 = read(res, o.f6res_type).unwrap_or(0);
    // Over the CPU budget, a lookup that found its route is left out (as
    // in try_fib; the failures are the route types below).
    if nh != 0 && !matches!(rtype, 6..=8) && crate::maps::shed() & tracer_common::shed::ROUTES != 0
    {
        return None;
    }
    agg::key(k, pkt, pkt.reply, Hook::FibLookup, nh, tb_id);
    if agg::counted(k) {
        return None;
    }
    let mut r = Slot::<FibEvent>::new()?;
    let ev = r.ev();
    set_header(&mut ev.hdr, kind::FIB, Hook::FibLookup, 0);
    crate::zero::copy_pkt(&mut ev.pkt, pkt);
    ev.table = tb_id;
    // The IPv4 convention: -EAGAIN when nothing matched, and the errors
    // fib_props[] gives unreachable (RTN_UNREACHABLE 7: -EHOSTUNREACH),
    // blackhole (6: -EINVAL) and prohibit (8: -EACCES) routes. A miss in
    // one table returns net->ipv6.fib6_null_entry, an unreachable route.
    ev.err = match (nh, rtype) {
        (0, _) => -11,
        (_, 7) => -113,
        (_, 6) => -22,
        (_, 8) => -13,
        _ => 0,
    };
    ev.oif = read(flp, o.fl6_oif).unwrap_or(0);
    ev.iif = read(flp, o.fl6_iif).unwrap_or(0);
    ev.rtype = rtype;
    ev.hdr.netns = read(net, o.net_ns_inum).unwrap_or(0);
    let nhc = if nh == 0 || o.fib6_nh_common == tracer_common::OFFSET_NONE {
        0
    } else {
        nh + o.fib6_nh_common as u64
    };
    let keep = fill_fib(ev, nhc);
    let (nh_ifindex, netns) = (ev.nh_ifindex, ev.hdr.netns);
    r.finish(keep);
    if keep {
        agg::recorded(k, nh_ifindex, netns);
    }
    Some(())
}

/// Fill the nexthop and namespace of a fib event; false when its
/// namespace is not followed (the caller then discards it).
#[inline(always)]
fn fill_fib(ev: &mut FibEvent, nhc: u64) -> bool {
    let o = offsets();
    if nhc != 0 {
        let dev: u64 = read(nhc, o.nhc_dev).unwrap_or(0);
        let d = dev_info(dev, &mut ev.nh_dev);
        ev.nh_ifindex = d.ifindex;
        if ev.hdr.netns == 0 {
            ev.hdr.netns = d.netns;
        }
        ev.gw_family = read(nhc, o.nhc_gw_family).unwrap_or(0);
        ev.nh_scope = read(nhc, o.nhc_scope).unwrap_or(0);
        read_buf(nhc, o.nhc_gw, &mut ev.gw);
    }
    // Borrow the netns and skb of the followed packet this CPU is processing
    // (fib_table_lookup runs synchronously inside ip_route_input_slow() /
    // ip_route_output_key_hash() of that skb) when recent enough: micro-
    // seconds on hardware, but a router's failed lookup came 2-6 ms after
    // its netif_receive_skb under qemu TCG (Debian 6.1, fentry hooks in
    // between). A failed lookup has no nexthop, hence no netns of its own:
    // without this it cannot be tied to its flow. A lookup whose nexthop
    // names another namespace is never borrowed for this skb.
    if let Some(last) = LAST.get(0)
        && ev.hdr.ts_ns.wrapping_sub(last.ts_ns) < 20_000_000
        && (ev.hdr.netns == 0 || ev.hdr.netns == last.netns)
    {
        ev.hdr.netns = last.netns;
        ev.hdr.skb = last.skb;
        ev.hdr.ifindex = last.ifindex;
    }
    ev.hdr.netns == 0 || netns_allowed(ev.hdr.netns)
}

// ---- sockets -------------------------------------------------------------

/// sock:inet_sock_set_state(const struct sock *sk, int oldstate, int newstate)
#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn tracer_sock_state(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let sk: u64 = ctx.arg(0);
    let old: i32 = ctx.arg(1);
    let new: i32 = ctx.arg(2);
    let _ = try_sock_state(sk, old, new);
    0
}

fn try_sock_state(sk: u64, old: i32, new: i32) -> Option<()> {
    let o = offsets();
    let proto: u16 = read(sk, o.sk_protocol)?;
    if proto as u8 != IPPROTO_TCP {
        return None;
    }
    let family: u16 = read(sk, o.sk_family)?;
    crate::let_zeroed!(pkt: PacketInfo);
    pkt.proto = IPPROTO_TCP;
    // AF_INET 2, AF_INET6 10
    match family {
        2 => {
            pkt.family = 4;
            read_buf(sk, o.sk_rcv_saddr, &mut pkt.saddr[..4]);
            read_buf(sk, o.sk_daddr, &mut pkt.daddr[..4]);
        }
        10 => {
            pkt.family = 6;
            read_buf(sk, o.sk_v6_rcv_saddr, &mut pkt.saddr);
            read_buf(sk, o.sk_v6_daddr, &mut pkt.daddr);
        }
        _ => return None,
    }
    // skc_num is the local port in host order, skc_dport the remote one in
    // network order.
    pkt.sport = read(sk, o.sk_num).unwrap_or(0);
    pkt.dport = u16::from_be(read(sk, o.sk_dport).unwrap_or(0));
    let dir = match_tuple(pkt, false);
    if dir == 0 {
        return None;
    }
    pkt.reply = (dir == DIR_REPLY) as u8;
    crate::let_zeroed!(ev: SockEvent);
    set_header(&mut ev.hdr, kind::SOCK, Hook::SockState, 0);
    crate::zero::copy_pkt(&mut ev.pkt, pkt);
    ev.old_state = old as u32;
    ev.new_state = new as u32;
    ev.sk = sk;
    ev.hdr.netns = sock_netns(sk);
    if !netns_allowed(ev.hdr.netns) {
        return None;
    }
    send(ev);
    Some(())
}

/// sock:sk_data_ready(const struct sock *sk): a socket is told data arrived
/// (sock_def_readable(), tcp_data_ready()). It runs synchronously while the
/// skb is queued, so the followed skb this CPU is processing is the one
/// delivered when the socket's local port is that skb's destination port.
#[btf_tracepoint(function = "sk_data_ready")]
pub fn tracer_sk_data_ready(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    sk_data_ready(ctx.arg(0));
    0
}

/// A socket woken, from any backend (this tracepoint, or the fentry and
/// kprobe on sock_def_readable()). The check every socket wakeup of the
/// node stops at, whether this CPU has a followed skb to attribute it to,
/// is inlined into the caller, not behind the BPF-to-BPF call (see
/// tracer_tc_ingress).
#[inline(always)]
pub(crate) fn sk_data_ready(sk: u64) {
    if let Some(last) = followed_skb() {
        let _ = try_sk_data_ready(sk, last);
    }
}

/// This CPU's last followed skb (LAST, per CPU: zero until one is seen,
/// and cleared when a counted passage takes its place, agg::forget_last()).
#[inline(always)]
fn followed_skb() -> Option<&'static LastCtx> {
    LAST.get(0).filter(|l| l.skb != 0)
}

#[inline(always)]
fn try_sk_data_ready(sk: u64, last: &LastCtx) -> Option<()> {
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    // The socket is woken in the same softirq that received the skb
    // (__udp_enqueue_schedule_skb(), tcp_data_queue()): microseconds on
    // hardware, but past 1 ms under qemu TCG, and past 20 ms there through
    // the kprobe backend on a loaded host (the request's hop missing in a
    // kernel-matrix run). 50 ms still excludes an unrelated old skb; the
    // port and still-tracked checks below do the rest.
    if now.wrapping_sub(last.ts_ns) > 50_000_000 {
        return None;
    }
    let dir = is_tracked(last.skb);
    if dir == 0 {
        return None;
    }
    // Only an inet socket can take the skb: a netlink socket woken on this
    // CPU meanwhile (tracer's own nftrace subscription is told of the
    // followed packet at once, nft_trace_notify()) has port 0, as an ICMP
    // error's ports are.
    let family: u16 = read(sk, offsets().sk_family)?;
    // AF_INET 2, AF_INET6 10
    if family != 2 && family != 10 {
        return None;
    }
    // skc_num: the socket's local port, host order.
    let num: u16 = read(sk, offsets().sk_num)?;
    let local = if dir == DIR_REPLY {
        last.sport
    } else {
        last.dport
    };
    // The skb was followed before NAT; after DNAT the socket port is the
    // translated one, so accept the port of either side of the last hop.
    if num != local && num != last.dport && num != last.sport {
        return None;
    }
    let mut r = Reserved::new(Hook::SockQueue, last.skb, 0, 0)?;
    let ev = r.ev();
    skb_packet(last.skb, &mut ev.pkt);
    if crate::filter::still_tracked(last.skb, &ev.pkt) != dir {
        r.discard();
        return None;
    }
    ev.pkt.reply = (dir == DIR_REPLY) as u8;
    ev.hdr.netns = sock_netns(sk);
    let keep = netns_allowed(ev.hdr.netns);
    r.finish(keep);
    Some(())
}

// ---- neighbours ------------------------------------------------------------

/// neigh:neigh_update(struct neighbour *n, const u8 *lladdr, u8 new, u32 flags, u32 nlmsg_pid)
#[btf_tracepoint(function = "neigh_update")]
pub fn tracer_neigh_update(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let n: u64 = ctx.arg(0);
    let lladdr: u64 = ctx.arg(1);
    let new: u32 = ctx.arg(2);
    let flags: u32 = ctx.arg(3);
    let _ = try_neigh(Hook::NeighUpdate, n, lladdr, new as u8, flags as i32);
    0
}

/// neigh:neigh_timer_handler(struct neighbour *n, int err): state machine
/// step; NUD_FAILED here means resolution failed and queued packets drop.
#[btf_tracepoint(function = "neigh_timer_handler")]
pub fn tracer_neigh_timer(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let n: u64 = ctx.arg(0);
    let err: i32 = ctx.arg(1);
    let _ = try_neigh(Hook::NeighTimer, n, 0, 0, err);
    0
}

/// neigh:neigh_event_send_dead(struct neighbour *n, int err): a packet was
/// handed to a neighbour already in NUD_FAILED (__neigh_event_send()).
#[btf_tracepoint(function = "neigh_event_send_dead")]
pub fn tracer_neigh_dead(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let n: u64 = ctx.arg(0);
    let err: i32 = ctx.arg(1);
    let _ = try_neigh(Hook::NeighDead, n, 0, 0, err);
    0
}

#[inline(always)]
fn try_neigh(hook: Hook, n: u64, lladdr: u64, new: u8, err: i32) -> Option<()> {
    let o = offsets();
    let tbl: u64 = read(n, o.neigh_tbl)?;
    let family: i32 = read(tbl, o.neigh_table_family)?;
    crate::let_zeroed!(pkt: PacketInfo);
    match family {
        2 => {
            pkt.family = 4;
            read_buf(n, o.neigh_primary_key, &mut pkt.daddr[..4]);
        }
        10 => {
            pkt.family = 6;
            read_buf(n, o.neigh_primary_key, &mut pkt.daddr);
        }
        _ => return None,
    }
    if !neigh_matches(pkt) {
        return None;
    }
    crate::let_zeroed!(ev: NeighEvent);
    set_header(&mut ev.hdr, kind::NEIGH, hook, 0);
    // SAFETY: two addresses (see zero::copy_in_place).
    unsafe { crate::zero::copy_in_place(&mut ev.addr, &pkt.daddr) };
    ev.family = pkt.family;
    ev.old_state = read(n, o.neigh_nud_state).unwrap_or(0);
    ev.new_state = new;
    ev.err = err;
    if lladdr != 0 {
        if unsafe {
            aya_ebpf::helpers::bpf_probe_read_kernel_buf(lladdr as *const u8, &mut ev.lladdr[..6])
        }
        .is_ok()
        {
            ev.has_lladdr = 1;
        }
    } else {
        read_buf(n, o.neigh_ha, &mut ev.lladdr[..6]);
    }
    let dev: u64 = read(n, o.neigh_dev).unwrap_or(0);
    let d = dev_info(dev, &mut ev.hdr.ifname);
    ev.hdr.ifindex = d.ifindex;
    ev.hdr.netns = d.netns;
    if !netns_allowed(d.netns) {
        return None;
    }
    send(ev);
    Some(())
}

/// A neighbour entry is relevant when its address is the target (a VIP on
/// the same L2, incident 1) — ports do not apply.
#[inline(always)]
fn neigh_matches(pkt: &PacketInfo) -> bool {
    pkt.family == crate::filter().family
        && crate::filter::prefix_eq_words(crate::filter::pkt_words(&pkt.daddr))
}
