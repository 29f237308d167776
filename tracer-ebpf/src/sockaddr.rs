//! Socket calls to the target: the destination a cgroup sock_addr program
//! (connect4/6, sendmsg4/6: Cilium's and Calico's socket load balancing,
//! Cilium's Local Redirect Policy) rewrites before any packet exists.
//!
//! - At the call (classic tracepoints syscalls:sys_enter_connect, _sendto,
//!   _sendmsg; their format is the same on every architecture: the
//!   arguments are 8-byte slots from offset 16), a destination in the
//!   target is parked under the call's socket (fd -> struct sock through
//!   the task's file table) with the calling task's cgroup and comm. The
//!   cgroup programs run later in the same call (inet_stream_connect() ->
//!   tcp_v4_pre_connect(), ip4_datagram_connect(), udp_sendmsg()).
//! - At the socket's first packet (tp_btf net:net_dev_start_xmit, skb->sk
//!   parked), the packet's destination tells: the one asked (no rewrite),
//!   or one a conntrack entry maps back to the one asked (netfilter's DNAT
//!   in OUTPUT, followed by conntrack elsewhere), or another: the program
//!   rewrote it. Then the tuple is learnt in FLOW_KEYS, both directions,
//!   and a SockAddrEvent sent. The claim program is attached before the
//!   packet programs, so the same packet is already followed after it.
//!
//! Not matching costs: a syscall to elsewhere, one user read and a
//! compare; a packet while nothing is parked, one array load and a
//! compare (`parked_lately`).

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_jiffies64,
        bpf_probe_read_user, generated,
    },
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use tracer_common::{Hook, SockAddrEvent, kind, sockcall};

use crate::{
    emit::{Slot, set_header},
    filter::{netns_allowed, pkt_words, prefix_eq_words, word_of},
    kread::{IPPROTO_TCP, IPPROTO_UDP, ct_orig_daddr_words, dev_info, read, skb_packet},
    maps::{PARKED, PARKED_AT, Parked},
    offsets,
};

/// A parked call older than this is not claimed (a connected UDP socket
/// that never sends; glibc connects one to pick a source address): 1 s at
/// HZ=1000, 4 s at HZ=250.
const PARK_JIFFIES: u64 = 1000;

/// sys_enter_connect(int fd, struct sockaddr __user *uservaddr, int addrlen)
#[tracepoint(category = "syscalls", name = "sys_enter_connect")]
pub fn tracer_sys_connect(ctx: TracePointContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let fd: u64 = unsafe { ctx.read_at(16) }.unwrap_or(0);
    let addr: u64 = unsafe { ctx.read_at(24) }.unwrap_or(0);
    let _ = park(fd, addr, sockcall::CONNECT);
    0
}

/// sys_enter_sendto(int fd, void __user *buff, size_t len, unsigned int
/// flags, struct sockaddr __user *addr, int addr_len)
#[tracepoint(category = "syscalls", name = "sys_enter_sendto")]
pub fn tracer_sys_sendto(ctx: TracePointContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let fd: u64 = unsafe { ctx.read_at(16) }.unwrap_or(0);
    let addr: u64 = unsafe { ctx.read_at(48) }.unwrap_or(0);
    let _ = park(fd, addr, sockcall::SENDTO);
    0
}

/// sys_enter_sendmsg(int fd, struct user_msghdr __user *msg, unsigned int
/// flags): msg->msg_name (the first member, a pointer) is the address.
#[tracepoint(category = "syscalls", name = "sys_enter_sendmsg")]
pub fn tracer_sys_sendmsg(ctx: TracePointContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let fd: u64 = unsafe { ctx.read_at(16) }.unwrap_or(0);
    let msg: u64 = unsafe { ctx.read_at(24) }.unwrap_or(0);
    if msg == 0 {
        return 0;
    }
    let name: u64 = unsafe { bpf_probe_read_user(msg as *const u64) }.unwrap_or(0);
    let _ = park(fd, name, sockcall::SENDMSG);
    0
}

/// sys_enter_sendmmsg(int fd, struct mmsghdr __user *mmsg, unsigned int
/// vlen, unsigned int flags): the first message's msg_hdr.msg_name (the
/// first member of struct mmsghdr, whose first is struct user_msghdr's
/// msg_name); a batch to several destinations is parked for its first.
#[tracepoint(category = "syscalls", name = "sys_enter_sendmmsg")]
pub fn tracer_sys_sendmmsg(ctx: TracePointContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let fd: u64 = unsafe { ctx.read_at(16) }.unwrap_or(0);
    let mmsg: u64 = unsafe { ctx.read_at(24) }.unwrap_or(0);
    if mmsg == 0 {
        return 0;
    }
    let name: u64 = unsafe { bpf_probe_read_user(mmsg as *const u64) }.unwrap_or(0);
    let _ = park(fd, name, sockcall::SENDMMSG);
    0
}

/// struct sockaddr_in / sockaddr_in6 (include/uapi/linux/in.h, in6.h):
/// family (host order) at 0, port (network order) at 2, the IPv4 address
/// at 4, the IPv6 one at 8.
#[repr(C)]
#[derive(Clone, Copy)]
struct SockaddrIn6 {
    family: u16,
    port: u16,
    /// sin_addr of a sockaddr_in, sin6_flowinfo of a sockaddr_in6.
    v4_or_flowinfo: u32,
    addr: [u32; 4],
}

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

#[inline(always)]
fn park(fd: u64, uaddr: u64, call: u8) -> Option<()> {
    if uaddr == 0 {
        return None;
    }
    // 24 bytes cover sockaddr_in (16) and sockaddr_in6's address; a
    // sockaddr_in near the end of a page may fail the longer read: then
    // the 16 bytes of an IPv4 one.
    let sa: SockaddrIn6 = match unsafe { bpf_probe_read_user(uaddr as *const SockaddrIn6) } {
        Ok(sa) => sa,
        Err(_) => {
            let v4: [u32; 4] = unsafe { bpf_probe_read_user(uaddr as *const [u32; 4]) }.ok()?;
            SockaddrIn6 {
                family: v4[0] as u16,
                port: (v4[0] >> 16) as u16,
                v4_or_flowinfo: v4[1],
                addr: [0; 4],
            }
        }
    };
    let f = crate::filter();
    let (family, words) = match sa.family {
        AF_INET if f.family == 4 => (4u8, (word_of(sa.v4_or_flowinfo, 0), 0)),
        AF_INET6 if f.family == 6 => (
            6u8,
            (
                word_of(sa.addr[0], sa.addr[1]),
                word_of(sa.addr[2], sa.addr[3]),
            ),
        ),
        _ => return None,
    };
    let port = u16::from_be(sa.port);
    if !prefix_eq_words(words) || (f.has_port != 0 && port != f.port) {
        return None;
    }
    let sk = fd_sock(fd)?;
    crate::let_zeroed!(p: Parked);
    if family == 4 {
        p.asked[0] = sa.v4_or_flowinfo;
    } else {
        p.asked = sa.addr;
    }
    p.port = port;
    p.family = family;
    p.call = call;
    p.tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    p.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: 16 writable bytes; the helper NUL-terminates.
    unsafe { generated::bpf_get_current_comm(p.comm.as_mut_ptr() as *mut _, 16) };
    let now = unsafe { bpf_jiffies64() };
    p.at = now;
    let _ = PARKED.insert(&sk, p, 0);
    if let Some(a) = PARKED_AT.get_ptr_mut(0) {
        // SAFETY: a u64 slot; racing writers store a time as recent.
        unsafe { *a = now };
    }
    Some(())
}

/// The struct sock of the calling task's file descriptor `fd`:
/// current->files->fdt->fd[fd]->private_data (struct socket, sock_alloc_file())
/// ->sk. RCU-protected pointers read as plain ones: a racing close gives
/// a stale address, which no packet's skb->sk will match.
#[inline(always)]
fn fd_sock(fd: u64) -> Option<u64> {
    if fd > 1 << 20 {
        return None;
    }
    let o = offsets();
    let task = unsafe { bpf_get_current_task() };
    let files: u64 = read(task, o.task_files)?;
    let fdt: u64 = read(files, o.files_fdt)?;
    let arr: u64 = read(fdt, o.fdt_fd)?;
    let file: u64 = read(arr + fd * 8, 0)?;
    let sock: u64 = read(file, o.file_private_data)?;
    let sk: u64 = read(sock, o.socket_sk)?;
    (sk != 0).then_some(sk)
}

/// Has a call been parked lately? One array load and a compare: every
/// packet transmitted on the node pays it.
#[inline(always)]
fn parked_lately() -> bool {
    let last = PARKED_AT.get(0).copied().unwrap_or(0);
    last != 0 && unsafe { bpf_jiffies64() }.wrapping_sub(last) < PARK_JIFFIES
}

/// net:net_dev_start_xmit(const struct sk_buff *skb, const struct net_device *dev)
#[btf_tracepoint(function = "net_dev_start_xmit")]
pub fn tracer_sock_claim(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() || !parked_lately() {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    let dev: u64 = ctx.arg(1);
    let _ = claim(skb, dev);
    0
}

#[inline(always)]
fn claim(skb: u64, dev: u64) -> Option<()> {
    let sk: u64 = read(skb, offsets().skb_sk)?;
    if sk == 0 {
        return None;
    }
    let p = unsafe { PARKED.get(&sk) }?;
    if unsafe { bpf_jiffies64() }.wrapping_sub(p.at) >= PARK_JIFFIES {
        let _ = PARKED.remove(&sk);
        return None;
    }
    // SockAddr's own scratch slot (this program's only; the packet hooks
    // use theirs), for the keys learn_rewritten builds: taken before the
    // ring buffer reservation, which every path must then release.
    let s = crate::maps::scratch(Hook::SockAddr)?;
    let mut slot = Slot::<SockAddrEvent>::new()?;
    let ev = slot.ev();
    let pkt = &mut ev.pkt;
    let asked = (
        word_of(p.asked[0], p.asked[1]),
        word_of(p.asked[2], p.asked[3]),
    );
    let ours = skb_packet(skb, pkt)
        && pkt.family == p.family
        && (pkt.proto == IPPROTO_TCP || pkt.proto == IPPROTO_UDP);
    // netfilter's DNAT in OUTPUT (kube-proxy) came first when the packet's
    // conntrack entry holds the address asked: the packet programs follow
    // that by conntrack.
    let rewritten = ours
        && (pkt_words(&pkt.daddr) != asked || pkt.dport != p.port)
        && ct_orig_daddr_words(skb) != Some(asked);
    if !rewritten {
        let _ = PARKED.remove(&sk);
        slot.finish(false);
        return None;
    }
    crate::filter::learn_rewritten(pkt, crate::filter::DIR_REQUEST, &mut s.ct);
    set_header(&mut ev.hdr, kind::SOCK_ADDR, Hook::SockAddr, skb);
    let d = dev_info(dev, &mut ev.hdr.ifname);
    ev.hdr.ifindex = d.ifindex;
    ev.hdr.netns = d.netns;
    ev.cgroup_id = p.cgroup_id;
    ev.asked_port = p.port;
    ev.asked_family = p.family;
    ev.call = p.call;
    ev.tgid = p.tgid;
    // SAFETY: 16 bytes each, 8-aligned in both records (tracer-common's
    // layout test, maps::Parked).
    unsafe {
        crate::zero::copy_in_place(
            ev.asked.as_mut_ptr() as *mut [u64; 2],
            p.asked.as_ptr() as *const [u64; 2],
        );
        crate::zero::copy_in_place(
            ev.comm.as_mut_ptr() as *mut [u64; 2],
            p.comm.as_ptr() as *const [u64; 2],
        );
    }
    let _ = PARKED.remove(&sk);
    let keep = netns_allowed(d.netns);
    slot.finish(keep);
    Some(())
}
