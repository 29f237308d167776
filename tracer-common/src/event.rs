//! Records written by the kernel programs to the `EVENTS` ring buffer.
//!
//! Every record starts with an [`EventHeader`]; `kind` says which struct
//! follows (the whole record is one of [`PacketEvent`], [`FibEvent`],
//! [`SockEvent`], [`NeighEvent`], [`FuncEvent`]).

/// Discriminates the record type.
pub mod kind {
    pub const PACKET: u8 = 1;
    pub const FIB: u8 = 2;
    pub const SOCK: u8 = 3;
    pub const NEIGH: u8 = 4;
    pub const FUNC: u8 = 5;
    /// A [`BytesHeader`] and the packet's first bytes.
    pub const BYTES: u8 = 6;
    /// A [`SockAddrEvent`]: a socket's destination rewritten before any
    /// packet existed.
    pub const SOCK_ADDR: u8 = 7;
}

/// Where an event was observed. Stable numbers: they appear in the ABI.
/// Userspace names them (`user` feature): the neighbour events are all
/// `neigh`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "user",
    derive(strum::IntoStaticStr),
    strum(serialize_all = "snake_case")
)]
pub enum Hook {
    TcIngress = 1,
    TcEgress = 2,
    /// tracepoint net:netif_receive_skb
    NetifReceive = 3,
    /// tracepoint net:net_dev_start_xmit
    Xmit = 4,
    /// tracepoint skb:kfree_skb (a drop with a reason)
    Drop = 5,
    /// tracepoint skb:consume_skb (freed after normal processing)
    Consume = 6,
    /// tracepoint skb:skb_copy_datagram_iovec (data copied to a local socket reader)
    SockRecv = 7,
    /// tracepoint icmp:icmp_send (the kernel built an ICMP error about this skb)
    IcmpSend = 8,
    /// tracepoint tcp:tcp_send_reset
    TcpReset = 9,
    /// tracepoint fib:fib_table_lookup
    FibLookup = 10,
    /// tracepoint sock:inet_sock_set_state
    SockState = 11,
    /// tracepoint neigh:neigh_update
    #[cfg_attr(feature = "user", strum(serialize = "neigh"))]
    NeighUpdate = 12,
    /// tracepoint neigh:neigh_timer_handler
    #[cfg_attr(feature = "user", strum(serialize = "neigh"))]
    NeighTimer = 13,
    /// tracepoint neigh:neigh_event_send_dead
    #[cfg_attr(feature = "user", strum(serialize = "neigh"))]
    NeighDead = 14,
    /// tracepoint neigh:neigh_create
    #[cfg_attr(feature = "user", strum(serialize = "neigh"))]
    NeighCreate = 15,
    /// tracepoint sock:sk_data_ready while a followed skb is being queued
    /// to that socket (UDP delivery: udp_recvmsg() may copy without the
    /// skb_copy_datagram_iovec tracepoint)
    SockQueue = 16,
    /// A kernel function (fentry/fexit or kprobe/kretprobe): see [`func`].
    Func = 17,
    /// A socket call's destination rewritten by a cgroup sock_addr program
    /// (syscall tracepoints, claimed at the socket's first packet): see
    /// [`SockAddrEvent`].
    SockAddr = 18,
    /// An XDP program's action (XDP_TX, XDP_REDIRECT, XDP_ABORTED) on a
    /// followed packet: a `func::XDP` record (the xdp tracepoints).
    Xdp = 19,
}

impl Hook {
    pub const ALL: [Hook; 19] = [
        Hook::TcIngress,
        Hook::TcEgress,
        Hook::NetifReceive,
        Hook::Xmit,
        Hook::Drop,
        Hook::Consume,
        Hook::SockRecv,
        Hook::IcmpSend,
        Hook::TcpReset,
        Hook::FibLookup,
        Hook::SockState,
        Hook::NeighUpdate,
        Hook::NeighTimer,
        Hook::NeighDead,
        Hook::NeighCreate,
        Hook::SockQueue,
        Hook::Func,
        Hook::SockAddr,
        Hook::Xdp,
    ];

    pub fn from_u8(v: u8) -> Option<Hook> {
        Hook::ALL.iter().copied().find(|h| *h as u8 == v)
    }
}

/// Common prefix of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventHeader {
    /// One of [`kind`].
    pub kind: u8,
    /// A [`Hook`] as u8.
    pub hook: u8,
    pub _pad: [u8; 2],
    /// ifindex of the device (in `netns`), 0 when none.
    pub ifindex: u32,
    /// Inode number of the network namespace, 0 when unknown.
    pub netns: u32,
    pub cpu: u32,
    /// bpf_ktime_get_ns().
    pub ts_ns: u64,
    /// Kernel address of the sk_buff (0 when the hook has none).
    pub skb: u64,
    /// Device name, NUL padded.
    pub ifname: [u8; 16],
}

/// The DNS port: UDP packets to or from it carry their DNS id in
/// [`PacketInfo::dns_id`], and userspace reads their bytes as DNS.
pub const DNS_PORT: u16 = 53;

/// The packet as seen at a hook. Addresses in network order (IPv4 in the
/// first four bytes), ports in host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketInfo {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    /// 4 or 6; 0 when the headers could not be read.
    pub family: u8,
    /// IPPROTO_*.
    pub proto: u8,
    pub tcp_flags: u8,
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// 1 when this packet matched as a reply (source side of the filter).
    pub reply: u8,
    /// The DNS message id of a UDP packet to or from port 53 (the first two
    /// bytes after the UDP header), else 0: each query of one client socket
    /// gets its own budget of full records (tracer-ebpf agg.rs).
    pub dns_id: u16,
    /// skb->len.
    pub len: u32,
}

impl PacketInfo {
    pub const fn zeroed() -> Self {
        Self {
            saddr: [0; 16],
            daddr: [0; 16],
            sport: 0,
            dport: 0,
            family: 0,
            proto: 0,
            tcp_flags: 0,
            icmp_type: 0,
            icmp_code: 0,
            reply: 0,
            dns_id: 0,
            len: 0,
        }
    }
}

/// A packet seen at a hook: tc, receive, transmit, drop, consume, socket
/// read, ICMP error sent about it, TCP reset sent in answer to it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketEvent {
    pub hdr: EventHeader,
    pub pkt: PacketInfo,
    /// Kernel text address (drop/consume location), 0 otherwise.
    pub location: u64,
    /// Drop: enum skb_drop_reason value. IcmpSend: type << 8 | code.
    /// TcpReset: enum sk_rst_reason value (or u32::MAX when the kernel has none).
    pub reason: u32,
    /// skb->mark.
    pub mark: u32,
    /// Conntrack original tuple when the skb carries a conntrack entry.
    pub ct_orig: CtTuple,
    /// Conntrack reply tuple (its reverse is the translated forward tuple).
    pub ct_reply: CtTuple,
}

/// A conntrack tuple (struct nf_conntrack_tuple), `family` 0 when absent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtTuple {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: u8,
    pub _pad: [u8; 2],
}

impl CtTuple {
    pub const fn zeroed() -> Self {
        Self {
            saddr: [0; 16],
            daddr: [0; 16],
            sport: 0,
            dport: 0,
            proto: 0,
            family: 0,
            _pad: [0; 2],
        }
    }
}

/// One fib_table_lookup() result (IPv4).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FibEvent {
    pub hdr: EventHeader,
    /// Tuple from the flowi4 key (saddr 0 when the caller let the kernel pick).
    pub pkt: PacketInfo,
    /// Routing table id (255 local, 254 main, 253 default).
    pub table: u32,
    /// 0 found; -EAGAIN (-11) no match in this table; -ENETUNREACH,
    /// -EHOSTUNREACH, -EACCES, -EINVAL for unreachable/prohibit/blackhole routes.
    pub err: i32,
    pub oif: u32,
    pub iif: u32,
    /// ifindex of the nexthop device (0 when no nexthop).
    pub nh_ifindex: u32,
    pub gw_family: u8,
    pub nh_scope: u8,
    /// Route type (RTN_*) when the hook knows it (IPv6), else 0.
    pub rtype: u8,
    pub _pad: u8,
    pub gw: [u8; 16],
    pub nh_dev: [u8; 16],
}

/// A socket state change (inet_sock_set_state). `pkt.saddr/sport` is the
/// local side, `daddr/dport` the remote side.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockEvent {
    pub hdr: EventHeader,
    pub pkt: PacketInfo,
    pub old_state: u32,
    pub new_state: u32,
    /// Kernel address of the sock.
    pub sk: u64,
}

/// A neighbour entry event.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighEvent {
    pub hdr: EventHeader,
    /// Neighbour address (primary_key).
    pub addr: [u8; 16],
    /// Link-layer address (ha), or the new one for neigh_update.
    pub lladdr: [u8; 8],
    pub family: u8,
    /// NUD_* state before the event (n->nud_state).
    pub old_state: u8,
    /// New NUD_* state for neigh_update, else 0.
    pub new_state: u8,
    /// 1 when `lladdr` holds a new address from neigh_update.
    pub has_lladdr: u8,
    /// err argument of neigh_timer_handler / neigh_event_send_dead, or flags.
    pub err: i32,
}

/// The socket calls whose destination [`SockAddrEvent::call`] names.
pub mod sockcall {
    /// connect(2): a cgroup connect4/connect6 program may rewrite it
    /// (__cgroup_bpf_run_filter_sock_addr() from inet_stream_connect's
    /// pre_connect, or ip4_datagram_connect's).
    pub const CONNECT: u8 = 1;
    /// sendto(2) with an address: sendmsg4/sendmsg6 (udp_sendmsg()).
    pub const SENDTO: u8 = 2;
    /// sendmsg(2) with msg_name: sendmsg4/sendmsg6.
    pub const SENDMSG: u8 = 3;
    /// sendmmsg(2): its first message's msg_name (sendmsg4/sendmsg6 run
    /// for each message, __sys_sendmmsg()); the later messages' addresses
    /// are not read.
    pub const SENDMMSG: u8 = 4;
}

/// A socket asked for `asked` (connect, sendto or sendmsg to the target)
/// and its first packet left with another destination, without a
/// conntrack entry holding the asked one: a cgroup sock_addr program
/// (Cilium's and Calico's socket load balancing) rewrote it in the call.
/// Sent where that packet is first transmitted (net_dev_start_xmit);
/// `pkt` is that packet. The program has learnt its tuple (both
/// directions) so the rest of the flow is followed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockAddrEvent {
    pub hdr: EventHeader,
    /// bpf_get_current_cgroup_id() of the calling task (cgroup v2).
    pub cgroup_id: u64,
    /// The first packet as it left.
    pub pkt: PacketInfo,
    /// The destination passed to the call (network order; IPv4 in the
    /// first four bytes).
    pub asked: [u8; 16],
    /// Its port, host order.
    pub asked_port: u16,
    /// 4 or 6.
    pub asked_family: u8,
    /// One of [`sockcall`].
    pub call: u8,
    /// The calling process (tgid).
    pub tgid: u32,
    /// The calling task's comm.
    pub comm: [u8; 16],
}

/// The most packet bytes a [`kind::BYTES`] record carries: a full
/// 1500-byte MTU packet, and room for IPv6 extension headers.
pub const SNAP_MAX: usize = 1600;

/// The first bytes of a followed packet, from its IP header on (kind
/// BYTES): once per skb, where the kernel side first follows it (so once
/// per packet and namespace hop where a new skb is made). `caplen` bytes
/// follow this header in the record; the record is `size_of::<BytesHeader>()
/// + caplen` long. Its `hook` is the hook that saw it first.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BytesHeader {
    pub hdr: EventHeader,
    /// Bytes that follow (at most the snap length and [`SNAP_MAX`]).
    pub caplen: u16,
    /// 1 when the packet matched as a reply.
    pub reply: u8,
    pub _pad: [u8; 5],
}

/// Kernel functions the function hooks follow. Stable numbers: they appear
/// in the ABI ([`FuncEvent::func`]) and key pending calls.
pub mod func {
    /// nf_hook_slow(skb, state, e, s): one netfilter hook's verdict
    /// (1 accept, -EPERM drop, 0 stolen/queued). Only non-accepts are sent.
    pub const NF_HOOK_SLOW: u8 = 1;
    /// nft_do_chain(pkt, priv): an nf_tables base chain's verdict.
    pub const NFT_DO_CHAIN: u8 = 2;
    /// ipt_do_table(priv, skb, state): an iptables (legacy) table's verdict.
    pub const IPT_DO_TABLE: u8 = 3;
    /// fib_validate_source(skb, ...): reverse-path (rp_filter) and martian
    /// source checks; < 0 on failure (-EXDEV: rp_filter, -EINVAL: martian).
    pub const FIB_VALIDATE_SOURCE: u8 = 4;
    /// ip_route_input_noref(skb, ...): the input route lookup; < 0 on failure.
    pub const IP_ROUTE_INPUT: u8 = 5;
    /// ip_forward(skb): the IPv4 stack forwards it.
    pub const IP_FORWARD: u8 = 6;
    /// ip_local_deliver(skb): the IPv4 stack delivers it to this host.
    pub const IP_LOCAL_DELIVER: u8 = 7;
    /// __icmp_send(skb, type, code, ...): an ICMP error about skb.
    pub const ICMP_SEND: u8 = 8;
    /// ip_vs_conn_in_get_proto(ipvs, af, skb, iph): an existing IPVS
    /// connection for this packet (non-NULL: reused).
    pub const IPVS_CONN_IN: u8 = 9;
    /// ip_vs_schedule(svc, skb, ...): a new IPVS connection to a real server
    /// (NULL: the virtual service had no usable destination).
    pub const IPVS_SCHEDULE: u8 = 10;
    /// ip_vs_{nat,dr,tunnel,bypass}_xmit(skb, cp, ...): the IPVS xmit path
    /// (`location` says which).
    pub const IPVS_XMIT: u8 = 11;
    /// tcp_v4_send_reset(sk, skb, ...): a RST in answer to skb.
    pub const TCP_RESET: u8 = 12;
    /// An XDP program's action on a followed packet, from the tracepoints
    /// xdp:xdp_redirect, xdp:xdp_redirect_err and xdp:xdp_exception
    /// (include/trace/events/xdp.h): `arg` is [action (XDP_ABORTED 0,
    /// XDP_TX 3, XDP_REDIRECT 4, ...), the redirect's target ifindex (0
    /// when not known)], `ret` the redirect's error (0 on success),
    /// `location` the program's id (struct bpf_prog_aux.id), and the
    /// header's device the one the program ran on.
    pub const XDP: u8 = 13;
    pub const COUNT: u8 = 14;
}

/// Which backend produced a function event.
pub mod backend {
    pub const FENTRY: u8 = 1;
    pub const KPROBE: u8 = 2;
    /// A tracepoint (tp_btf) that carries a function-like record (func::XDP).
    pub const TRACEPOINT: u8 = 3;
}

/// A kernel function seen for a followed skb (kind FUNC, hook Func).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncEvent {
    pub hdr: EventHeader,
    /// Parsed at function entry (family 0 when unreadable).
    pub pkt: PacketInfo,
    /// Entry address of the function (bpf_get_func_ip()), 0 when unknown.
    pub location: u64,
    /// Return value (when `has_ret`).
    pub ret: i64,
    /// Function-specific values: NF_HOOK_SLOW: pf, hooknum; ICMP_SEND:
    /// type, code.
    pub arg: [u32; 2],
    /// One of [`func`].
    pub func: u8,
    /// One of [`backend`].
    pub backend: u8,
    pub has_ret: u8,
    pub _pad: [u8; 5],
    /// NFT_DO_CHAIN: table name; IPT_DO_TABLE: table name. XDP: a
    /// redirect through a map, its id and key (u32 each, native endian,
    /// [`FuncEvent::xdp_map`]); zeros otherwise.
    pub table: [u8; 32],
    /// NFT_DO_CHAIN: chain name.
    pub chain: [u8; 32],
}

impl FuncEvent {
    /// XDP: the map a redirect went through and its key, `(0, 0)` for
    /// none (a redirect to an ifindex, or another action).
    pub fn xdp_map(&self) -> (u32, u32) {
        let word = |k: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&self.table[k..k + 4]);
            u32::from_ne_bytes(b)
        };
        (word(0), word(4))
    }

    /// Set what [`FuncEvent::xdp_map`] reads.
    #[inline]
    pub fn set_xdp_map(&mut self, map_id: u32, key: u32) {
        self.table[..4].copy_from_slice(&map_id.to_ne_bytes());
        self.table[4..8].copy_from_slice(&key.to_ne_bytes());
    }
}

#[cfg(feature = "user")]
mod pod {
    use super::{
        BytesHeader, CtTuple, EventHeader, FibEvent, FuncEvent, NeighEvent, PacketEvent,
        PacketInfo, SockAddrEvent, SockEvent,
    };
    unsafe impl aya::Pod for SockAddrEvent {}
    unsafe impl aya::Pod for BytesHeader {}
    unsafe impl aya::Pod for EventHeader {}
    unsafe impl aya::Pod for PacketInfo {}
    unsafe impl aya::Pod for PacketEvent {}
    unsafe impl aya::Pod for CtTuple {}
    unsafe impl aya::Pod for FibEvent {}
    unsafe impl aya::Pod for SockEvent {}
    unsafe impl aya::Pod for NeighEvent {}
    unsafe impl aya::Pod for FuncEvent {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn header_layout() {
        assert_eq!(size_of::<EventHeader>(), 48);
        assert_eq!(offset_of!(EventHeader, kind), 0);
        assert_eq!(offset_of!(EventHeader, hook), 1);
        assert_eq!(offset_of!(EventHeader, ifindex), 4);
        assert_eq!(offset_of!(EventHeader, netns), 8);
        assert_eq!(offset_of!(EventHeader, ts_ns), 16);
        assert_eq!(offset_of!(EventHeader, skb), 24);
        assert_eq!(offset_of!(EventHeader, ifname), 32);
    }

    #[test]
    fn payload_layouts() {
        assert_eq!(size_of::<PacketInfo>(), 48);
        // The kernel side reads the addresses as u32 words (pkt_words).
        assert!(align_of::<PacketInfo>() >= 4);
        assert_eq!(offset_of!(PacketInfo, saddr), 0);
        assert_eq!(offset_of!(PacketInfo, daddr), 16);
        assert_eq!(offset_of!(PacketInfo, sport), 32);
        assert_eq!(offset_of!(PacketInfo, family), 36);
        assert_eq!(offset_of!(PacketInfo, len), 44);
        assert_eq!(size_of::<CtTuple>(), 40);
        assert_eq!(size_of::<PacketEvent>(), 48 + 48 + 16 + 80);
        assert_eq!(offset_of!(PacketEvent, location), 96);
        assert_eq!(offset_of!(PacketEvent, ct_orig), 112);
        assert_eq!(size_of::<FibEvent>(), 48 + 48 + 24 + 32);
        assert_eq!(offset_of!(FibEvent, gw), 120);
        assert_eq!(size_of::<SockEvent>(), 48 + 48 + 16);
        assert_eq!(size_of::<NeighEvent>(), 48 + 16 + 8 + 8);
        assert_eq!(size_of::<BytesHeader>(), 48 + 8);
        assert_eq!(offset_of!(BytesHeader, caplen), 48);
        assert_eq!(size_of::<FuncEvent>(), 48 + 48 + 8 + 8 + 8 + 8 + 64);
        assert_eq!(offset_of!(FuncEvent, location), 96);
        assert_eq!(offset_of!(FuncEvent, ret), 104);
        assert_eq!(offset_of!(FuncEvent, arg), 112);
        assert_eq!(offset_of!(FuncEvent, func), 120);
        assert_eq!(offset_of!(FuncEvent, table), 128);
        assert_eq!(offset_of!(FuncEvent, chain), 160);
        assert_eq!(offset_of!(NeighEvent, err), 76);
        assert_eq!(size_of::<SockAddrEvent>(), 48 + 8 + 48 + 16 + 8 + 16);
        assert_eq!(offset_of!(SockAddrEvent, pkt), 56);
        assert_eq!(offset_of!(SockAddrEvent, asked_port), 120);
        assert_eq!(offset_of!(SockAddrEvent, tgid), 124);
        assert_eq!(offset_of!(SockAddrEvent, comm), 128);
    }

    #[test]
    fn hook_roundtrip() {
        for h in Hook::ALL {
            assert_eq!(Hook::from_u8(h as u8), Some(h));
        }
        assert_eq!(Hook::from_u8(0), None);
        assert_eq!(Hook::from_u8(200), None);
    }
}
