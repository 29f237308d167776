//! Blind scenes of one class of cause: an XDP program attached in native
//! (driver) mode to a veth decides the packet's fate in veth's NAPI poll
//! (veth_xdp_rcv()), before the packet is an skb of the stack: a
//! redirect into a veth whose peer has no XDP program (the frame is lost
//! in veth_xdp_xmit(): the peer's NAPI is off), an XDP_TX back to a peer
//! without one (the same), a deny-all filter that drops ARP too. Each
//! rebuilds, in namespaces of its own, a failure reported in a public
//! thread, cited in its doc comment, written without knowledge of
//! tracer's rules. The programs are the tests' own raw instructions (no
//! compiler here), named as the reporters' programs are named, attached
//! with `ip link set dev D xdpdrv pinned P` (nsenter: `ip netns exec`
//! would hide bpffs). One scene is an honest trap: the native XDP program
//! is there and passes the flow, and something else fails.
//!
//! Address ranges: 10.202.0.0/16 to 10.205.0.0/16, one a scene. Pins live
//! in a directory of bpffs of the scene's own (`/sys/fs/bpf/tracer-PREFIX`),
//! removed with the scene; the XDP attachments go with their devices,
//! with the namespaces. `blind_proto::build` falls back to [`build`],
//! the end of the chain.

use std::net::Ipv4Addr;

use anyhow::Result;

use crate::{
    blind_bpf::{
        BPF_PROG_TYPE_SCHED_CLS, BPF_PROG_TYPE_XDP, Hook, IS_IPV4, XDP_PASS, addr, bpf_dir, clsact,
        matcher, pinned, port, proto, tc_filter,
    },
    blind_l2::exchange,
    blind_xdp::{Op, asm, le32, mac, store_mac},
    netns::{Netns, unique_prefix, veth},
    redirect::insn,
    scenarios::{Scenario, listen, ns, serve, simple, strings, tcp_connect},
};

pub const BLIND_NATIVE: &[&str] = &[
    "blind_native_redirect_peer_no_xdp",
    "blind_native_tx_peer_no_xdp",
    "blind_native_deny_all_drops_arp",
    "blind_native_trap_local_source",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_native_redirect_peer_no_xdp" => redirect_peer_no_xdp(),
        "blind_native_tx_peer_no_xdp" => tx_peer_no_xdp(),
        "blind_native_deny_all_drops_arp" => deny_all_drops_arp(),
        "blind_native_trap_local_source" => trap_local_source(),
        _ => return crate::blind_port::build(name),
    })
}

/// include/uapi/linux/bpf.h
const BPF_FUNC_REDIRECT: i32 = 23;
const XDP_DROP: i32 = 1;
const XDP_TX: i32 = 3;
const TC_ACT_OK: i32 = 0;

/// `if w5 != imm goto to`.
fn jne(imm: i32, to: &'static str) -> Op {
    Op::J {
        code: 0x56,
        dst: 5,
        src: 0,
        imm,
        to,
    }
}

/// `if w5 == imm goto to`.
fn jeq(imm: i32, to: &'static str) -> Op {
    Op::J {
        code: 0x16,
        dst: 5,
        src: 0,
        imm,
        to,
    }
}

/// A port as a u16 load of its network-order bytes reads it.
fn be16(p: u16) -> i32 {
    i32::from(p.to_be())
}

/// r2 = data, r3 = data_end (XDP: xdp_md at 0 and 4; tc: __sk_buff at
/// 76 and 80), and a frame of at least `len` bytes, else `short`.
fn head(hook: Hook, len: i32, short: &'static str) -> Vec<Op> {
    let (data, end) = match hook {
        Hook::Xdp => (0, 4),
        Hook::Tc => (76, 80),
    };
    vec![
        Op::I(insn(0x61, 2, 1, data, 0)),
        Op::I(insn(0x61, 3, 1, end, 0)),
        Op::I(insn(0xbf, 4, 2, 0, 0)),
        Op::I(insn(0x07, 4, 0, 0, len)),
        Op::J {
            code: 0x2d, // if r4 > r3
            dst: 4,
            src: 3,
            imm: 0,
            to: short,
        },
    ]
}

/// r5 = the `size` (0x61 u32, 0x69 u16, 0x71 u8 load) bytes at `off`.
fn load5(size: u8, off: i16) -> Op {
    Op::I(insn(size, 5, 2, off, 0))
}

/// `label:` r0 = `ret`, exit.
fn ret(label: &'static str, r: i32) -> [Op; 3] {
    [
        Op::L(label),
        Op::I(insn(0xb7, 0, 0, 0, r)),
        Op::I(insn(0x95, 0, 0, 0, 0)),
    ]
}

/// The pinned XDP program `pin` on `dev` of `n` in native (driver) mode:
/// veth runs it in its NAPI poll.
fn xdp_native(n: &Netns, dev: &str, pin: &str) -> Result<()> {
    crate::bpfdrop::nsenter(
        &n.path(),
        &["ip", "link", "set", "dev", dev, "xdpdrv", "pinned", pin],
    )?;
    Ok(())
}

/// xdp-tutorial's `xdp_redirect_func` with its addresses hard-coded, as
/// the reporters wrote it: IPv4 TCP to `dst` gets the MACs `smac` and
/// `dmac` and `bpf_redirect(ifindex, 0)`; the rest passes.
fn redirect_func(dst: Ipv4Addr, ifindex: u32, smac: [u8; 6], dmac: [u8; 6]) -> Vec<u8> {
    let mut p = head(Hook::Xdp, 34, "pass");
    p.extend([
        load5(0x69, 12),
        jne(0x0008, "pass"),
        load5(0x71, 23),
        jne(6, "pass"),
        load5(0x61, 30),
        jne(le32(dst.octets()), "pass"),
    ]);
    p.extend(store_mac(0, dmac));
    p.extend(store_mac(6, smac));
    p.extend([
        Op::I(insn(0xb7, 1, 0, 0, ifindex as i32)),
        Op::I(insn(0xb7, 2, 0, 0, 0)),
        Op::I(insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT)),
        Op::I(insn(0x95, 0, 0, 0, 0)),
    ]);
    p.extend(ret("pass", XDP_PASS));
    asm(&p)
}

/// ellanetworks/core#1158 ("docs: add native xdp veth how-to guide"):
/// "native XDP's `bpf_redirect()` on a veth pair requires an XDP program
/// attached to BOTH sides of the pair ... Without one on the receiving
/// peer, the veth drive will not deliver redirected frames through the
/// native XDP path and downlink packets are silently lost"; the same in
/// edgecomllc/eupf#116 ("packets aren't redirected (XDP_REDIRECT). To fix
/// it just load 'zero' xdp program in native(driver) mode on the opposite
/// interface of veth pair") and in the maintainer's explanation on
/// xdp-project/xdp-tutorial#167 ("the veth driver will only activate the
/// NAPI context (and thus be able to deliver XDP_REDIRECT'ed packets)
/// when there's an XDP program running on the other end").
/// xdp-project/xdp-tutorial#399 ("Trying to write XDP for redirecting
/// packets in veth inside kubernetes") is this scene's topology: a node
/// with two pods, an XDP program with hard-coded IPs and MACs redirecting
/// pod1's traffic for pod2 straight to pod2's veth. Here the node's lxc0
/// (pod1's host side, 10.202.1.1) has native XDP `xdp_redirect_func`:
/// TCP for pod2 (10.202.2.2) gets pod2's MACs and `bpf_redirect()` to
/// lxc1 (pod2's host side). pod2 listens on 8080; its eth0 (lxc1's peer)
/// has no XDP program and GRO off. pod1 connects to 10.202.2.2:8080.
/// True cause: the XDP program on lxc0 redirects the SYN into lxc1, and
/// veth cannot take an XDP frame for a peer whose NAPI is off (no XDP
/// program on pod2's eth0, GRO off): on this kernel (6.18) lxc1 does not
/// advertise NETDEV_XDP_ACT_NDO_XMIT then, so xdp_do_redirect() fails at
/// once with EOPNOTSUPP (tracepoint xdp:xdp_redirect_err err=-95; older
/// kernels failed later in veth_xdp_xmit() with ENXIO, as #399's 5.4 did)
/// and the frame is freed as an rx drop of lxc0: no kfree_skb of the
/// stack. The fix is an XDP_PASS program on pod2's eth0 (or GRO on it).
fn redirect_peer_no_xdp() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod1, node, pod2) = (ns(&p, "pod1")?, ns(&p, "node")?, ns(&p, "pod2")?);
    veth(&pod1, "eth0", &node, "lxc0")?;
    veth(&node, "lxc1", &pod2, "eth0")?;
    pod1.ip(&["addr", "add", "10.202.1.2/24", "dev", "eth0"])?;
    pod1.ip(&["route", "add", "default", "via", "10.202.1.1"])?;
    node.ip(&["addr", "add", "10.202.1.1/24", "dev", "lxc0"])?;
    node.ip(&["addr", "add", "10.202.2.1/24", "dev", "lxc1"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    pod2.ip(&["addr", "add", "10.202.2.2/24", "dev", "eth0"])?;
    pod2.ip(&["route", "add", "default", "via", "10.202.2.1"])?;
    let dir = bpf_dir(&p)?;
    let prog = pinned(
        &dir,
        "lxc0-xdp",
        BPF_PROG_TYPE_XDP,
        &redirect_func(
            "10.202.2.2".parse()?,
            crate::bpfdrop::ifindex(&node, "lxc1")?,
            mac(&node, "lxc1")?,
            mac(&pod2, "eth0")?,
        ),
        "xdp_redirect_func",
    )?;
    xdp_native(&node, "lxc0", &prog)?;
    let target = "10.202.2.2:8080".to_string();
    let srv = listen(&pod2, &target, 15)?;
    let mut sc = simple(
        "blind_native_redirect_peer_no_xdp",
        "native XDP on pod1's host veth redirects TCP for pod2 into pod2's host veth; pod2's eth0 has no XDP program (veth NAPI off): the redirected frames are lost",
        vec![pod1, node, pod2],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// An XDP UDP echo for `port`: Ethernet addresses, IPv4 addresses and
/// UDP ports swapped (the checksums stay valid: a swap keeps the sums),
/// XDP_TX; the rest passes.
fn udp_echo(port: u16) -> Vec<u8> {
    let mut p = head(Hook::Xdp, 42, "pass");
    p.extend([
        load5(0x69, 12),
        jne(0x0008, "pass"),
        load5(0x71, 23),
        jne(17, "pass"),
        load5(0x69, 36),
        jne(be16(port), "pass"),
        // MACs: r5/r6 the destination's, r7/r8 the source's.
        Op::I(insn(0x61, 5, 2, 0, 0)),
        Op::I(insn(0x69, 6, 2, 4, 0)),
        Op::I(insn(0x61, 7, 2, 6, 0)),
        Op::I(insn(0x69, 8, 2, 10, 0)),
        Op::I(insn(0x63, 2, 7, 0, 0)),
        Op::I(insn(0x6b, 2, 8, 4, 0)),
        Op::I(insn(0x63, 2, 5, 6, 0)),
        Op::I(insn(0x6b, 2, 6, 10, 0)),
        // Addresses.
        Op::I(insn(0x61, 5, 2, 26, 0)),
        Op::I(insn(0x61, 6, 2, 30, 0)),
        Op::I(insn(0x63, 2, 6, 26, 0)),
        Op::I(insn(0x63, 2, 5, 30, 0)),
        // Ports.
        Op::I(insn(0x69, 5, 2, 34, 0)),
        Op::I(insn(0x69, 6, 2, 36, 0)),
        Op::I(insn(0x6b, 2, 6, 34, 0)),
        Op::I(insn(0x6b, 2, 5, 36, 0)),
    ]);
    p.extend(ret("tx", XDP_TX));
    p.extend(ret("pass", XDP_PASS));
    asm(&p)
}

/// xdp-project/xdp-tutorial#399 ("Trying to write XDP for redirecting
/// packets in veth inside kubernetes"): pods on a flannel node, an XDP
/// program on a pod's veth; for the XDP_TX variant `perf trace -e
/// 'xdp:*'` showed `xdp:xdp_bulk_tx:ifindex=66 action=TX sent=0 drops=1
/// err=-6`, and the reply never arrived. The tutorial's own
/// packet03-redirecting README (xdp-project/xdp-tutorial#40) says why:
/// "veth devices won't deliver redirected/retransmitted XDP frames unless
/// there is an XDP program attached to the receiving side of the target
/// veth interface"; xdp-project/xdp-tools#421 the fix: "For veth you
/// need to either enable GRO on veth peers, or load a dummy XDP program on
/// the *other* side of the veth pair". Here pod1's host-side veth lxc0
/// (10.203.1.1) has native XDP `xdp_echo` answering UDP echo (port 7) in
/// XDP for pod2's echo service (10.203.2.2:7, which runs too): MACs,
/// addresses and ports swapped, XDP_TX back to pod1. pod1's eth0 has no
/// XDP program and GRO off. pod1 sends one datagram to 10.203.2.2:7.
/// True cause: the XDP program answers with XDP_TX, and veth drops the
/// answer on transmit to pod1's eth0 (veth_xdp_xmit(): ENXIO, the peer's
/// NAPI off; tracepoint xdp:xdp_bulk_tx sent 0 drops 1 err -6); the
/// request never reaches the stack or pod2, the answer never reaches
/// pod1.
fn tx_peer_no_xdp() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod1, node, pod2) = (ns(&p, "pod1")?, ns(&p, "node")?, ns(&p, "pod2")?);
    veth(&pod1, "eth0", &node, "lxc0")?;
    veth(&node, "lxc1", &pod2, "eth0")?;
    pod1.ip(&["addr", "add", "10.203.1.2/24", "dev", "eth0"])?;
    pod1.ip(&["route", "add", "default", "via", "10.203.1.1"])?;
    node.ip(&["addr", "add", "10.203.1.1/24", "dev", "lxc0"])?;
    node.ip(&["addr", "add", "10.203.2.1/24", "dev", "lxc1"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    pod2.ip(&["addr", "add", "10.203.2.2/24", "dev", "eth0"])?;
    pod2.ip(&["route", "add", "default", "via", "10.203.2.1"])?;
    let dir = bpf_dir(&p)?;
    let prog = pinned(
        &dir,
        "lxc0-xdp",
        BPF_PROG_TYPE_XDP,
        &udp_echo(7),
        "xdp_echo",
    )?;
    xdp_native(&node, "lxc0", &prog)?;
    let target = "10.203.2.2:7".to_string();
    let srv = serve(&pod2, "udp-echo", &target, 15)?;
    let mut sc = simple(
        "blind_native_tx_peer_no_xdp",
        "native XDP on pod1's host veth answers UDP echo with XDP_TX; pod1's eth0 has no XDP program (veth NAPI off): the answers are lost on transmit",
        vec![pod1, node, pod2],
        target.clone(),
        strings(&[
            "udp-send",
            &target,
            "--timeout-ms",
            &crate::scaled_arg(1000),
        ]),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// xdp-filter's deny-mode program with one allowed port: IPv4 TCP from
/// or to `port` passes; everything else, ARP included, is dropped.
fn deny_all(port: u16) -> Vec<u8> {
    let mut p = head(Hook::Xdp, 38, "drop");
    p.extend([
        load5(0x69, 12),
        jne(0x0008, "drop"),
        load5(0x71, 23),
        jne(6, "drop"),
        load5(0x69, 36),
        jeq(be16(port), "pass"),
        load5(0x69, 34),
        jeq(be16(port), "pass"),
    ]);
    p.extend(ret("drop", XDP_DROP));
    p.extend(ret("pass", XDP_PASS));
    asm(&p)
}

/// xdp-project/xdp-tools#266 ("./xdp-filter load -p deny ens3 && works
/// for a few times but then hung"): `xdp-filter load ens3 -p deny &&
/// xdp-filter port 80` "will work initially (like 3-7 times) then denied
/// / hang", resolved by the reporter: "u have to also do ether and ip
/// address of the local host"; the same in xdp-project/xdp-tools#181
/// (deny mode, ports 80 and 443 allowed: "For the first couple of tries
/// it allows connections, but then it doesn't connect"), and the
/// maintainer on xdp-project/xdp-tools#182: "a miss is still a miss (so
/// in deny mode that's a 'deny')". xdp-filter loads natively where the
/// driver can (#182, #470: "(native mode)"). Here a server (10.204.0.1,
/// eth0) has native XDP `xdpfilt_dny_all` allowing TCP port 80 (source or
/// destination) and dropping the rest; a client (10.204.0.2) connected
/// to 10.204.0.1:80 before the filter was loaded (its neighbour entry for
/// the server was valid), and the entry has since gone (flushed here, as
/// it ages out). The client connects to 10.204.0.1:80 again. True cause:
/// the client's ARP requests for 10.204.0.1 reach the server's eth0 and
/// the deny-mode XDP program drops them (ARP is a miss, and a miss is a
/// deny); the client never resolves the server, and its SYN never leaves
/// (the neighbour fails). Port 80 itself is allowed and listening.
fn deny_all_drops_arp() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, server) = (ns(&p, "client")?, ns(&p, "server")?);
    veth(&client, "eth0", &server, "eth0")?;
    client.ip(&["addr", "add", "10.204.0.2/24", "dev", "eth0"])?;
    server.ip(&["addr", "add", "10.204.0.1/24", "dev", "eth0"])?;
    let target = "10.204.0.1:80".to_string();
    let srv = listen(&server, &target, 15)?;
    // It worked before the filter.
    exchange(&client, &target)?;
    let dir = bpf_dir(&p)?;
    let prog = pinned(
        &dir,
        "eth0-xdp",
        BPF_PROG_TYPE_XDP,
        &deny_all(80),
        "xdpfilt_dny_all",
    )?;
    xdp_native(&server, "eth0", &prog)?;
    // The client's entry for the server ages out.
    client.ip(&["neigh", "flush", "dev", "eth0"])?;
    let mut sc = simple(
        "blind_native_deny_all_drops_arp",
        "xdp-filter in deny mode (native XDP on the server's eth0) allows TCP port 80 only: the client's ARP requests for the server are dropped",
        vec![client, server],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// Katran's `healthcheck_encap` (a tc program on the healthcheck
/// interface's egress) for a DSR real server on the same L2: TCP to
/// `vip:80` gets the real server's MAC `dmac` and the LB's `smac` and is
/// redirected to `ifindex`'s egress; the rest goes on (TC_ACT_OK).
fn healthcheck_encap(vip: Ipv4Addr, ifindex: u32, smac: [u8; 6], dmac: [u8; 6]) -> Vec<u8> {
    let mut p = head(Hook::Tc, 38, "ok");
    p.extend([
        load5(0x69, 12),
        jne(0x0008, "ok"),
        load5(0x71, 23),
        jne(6, "ok"),
        load5(0x61, 30),
        jne(le32(vip.octets()), "ok"),
        load5(0x69, 36),
        jne(be16(80), "ok"),
    ]);
    p.extend(store_mac(0, dmac));
    p.extend(store_mac(6, smac));
    p.extend([
        Op::I(insn(0xb7, 1, 0, 0, ifindex as i32)),
        Op::I(insn(0xb7, 2, 0, 0, 0)),
        Op::I(insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT)),
        Op::I(insn(0x95, 0, 0, 0, 0)),
    ]);
    p.extend(ret("ok", TC_ACT_OK));
    asm(&p)
}

/// The honest trap. facebookincubator/katran#47 ("healthcheck problem"):
/// on a Katran LB (XDP balancer on eth0, the VIP configured locally, a
/// healthcheck program steering the health checker's SYN to the VIP out
/// to the real server), the health checker bound to the LB's own address
/// "do not recv ACK while i can capture ACK packet in LB with tcpdump",
/// and "strangely when i ifconfig down the vip in LB, hc program can recv
/// ACK". The maintainer: the answers, with the VIP as their source, are
/// dropped by the LB's own stack (he named rp_filter) "with vip
/// configured on lo. In general if you see packets in tcpdump - then it
/// has passed xdp (as xdp works before tcpdump)". Here the LB (eth0
/// 10.205.0.1, the VIP 10.205.200.1 on lo) has native XDP
/// `balancer_ingress` on eth0 (TCP to VIP:80 would be balanced, XDP_TX;
/// everything else, the answers included, XDP_PASS) and Katran's
/// `healthcheck_encap` on lo's tc egress, which sends the health check's
/// SYN for VIP:80 to the real server's MAC out of eth0 (IPIP left out:
/// no IPIP module here; the real server is a DSR one on the same L2,
/// the VIP on its lo, listening on VIP:80). The health checker (the LB's
/// own connect to 10.205.200.1:80) gets no answer. True cause: the real
/// server's SYN-ACK, from the VIP to 10.205.0.1, passes the XDP program
/// and is dropped by the LB's input route lookup: its source is one of
/// the LB's own addresses (a martian "local source", fib_validate_source;
/// IN_DEV_ACCEPT_LOCAL is off); the XDP program passed it.
fn trap_local_source() -> Result<Scenario> {
    let p = unique_prefix();
    let (lb, rs) = (ns(&p, "lb")?, ns(&p, "rs")?);
    veth(&lb, "eth0", &rs, "eth0")?;
    lb.ip(&["addr", "add", "10.205.0.1/24", "dev", "eth0"])?;
    lb.ip(&["addr", "add", "10.205.200.1/32", "dev", "lo"])?;
    // The health checker binds the LB's own address (netprobe does not
    // bind: the VIP's local route names it as the preferred source).
    lb.ip(&[
        "route",
        "replace",
        "local",
        "10.205.200.1",
        "dev",
        "lo",
        "proto",
        "kernel",
        "scope",
        "host",
        "src",
        "10.205.0.1",
        "table",
        "local",
    ])?;
    rs.ip(&["addr", "add", "10.205.0.2/24", "dev", "eth0"])?;
    rs.ip(&["addr", "add", "10.205.200.1/32", "dev", "lo"])?;
    // A DSR real server answers from the VIP and does not announce it.
    rs.sysctl("net.ipv4.conf.all.arp_ignore", "1")?;
    rs.sysctl("net.ipv4.conf.all.arp_announce", "2")?;
    let vip: Ipv4Addr = "10.205.200.1".parse()?;
    let dir = bpf_dir(&p)?;
    let balancer = pinned(
        &dir,
        "eth0-xdp",
        BPF_PROG_TYPE_XDP,
        &matcher(
            Hook::Xdp,
            38,
            &[IS_IPV4, proto(6), addr(false, vip, true), port(false, 80)],
            XDP_TX,
            XDP_PASS,
        ),
        "balancer_ingress",
    )?;
    xdp_native(&lb, "eth0", &balancer)?;
    let hc = pinned(
        &dir,
        "lo-hc",
        BPF_PROG_TYPE_SCHED_CLS,
        &healthcheck_encap(
            vip,
            crate::bpfdrop::ifindex(&lb, "eth0")?,
            mac(&lb, "eth0")?,
            mac(&rs, "eth0")?,
        ),
        "healthcheck_encap",
    )?;
    clsact(&lb, "lo")?;
    tc_filter(&lb, "lo", "egress", &hc)?;
    let target = "10.205.200.1:80".to_string();
    let srv = listen(&rs, &target, 15)?;
    let mut sc = simple(
        "blind_native_trap_local_source",
        "Katran's health check of a DSR real server: the SYN-ACK from the VIP passes the LB's native XDP balancer and is dropped by the LB's stack (source is a local address)",
        vec![lb, rs],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_resolve_to_their_labels() {
        let p = asm(&[
            jne(0, "end"),
            Op::I(insn(0xb7, 0, 0, 0, 1)),
            Op::L("end"),
            Op::I(insn(0x95, 0, 0, 0, 0)),
        ]);
        assert_eq!(i16::from_le_bytes([p[2], p[3]]), 1);
    }

    #[test]
    fn names_are_prefixed_and_unknown_names_end_the_chain() {
        for n in BLIND_NATIVE {
            assert!(n.starts_with("blind_native_"));
        }
        assert!(build("blind_nope").is_none());
    }
}
