//! Blind scenes of one class of cause: an XDP program (generic mode, on a
//! veth or a node's device) returns XDP_TX, XDP_REDIRECT or XDP_ABORTED
//! and the packet goes somewhere the operator did not expect, or is lost:
//! a frame bounced back out of its own device with its Ethernet header
//! untouched, a devmap redirect to a device the map does not hold (the
//! helper's XDP_ABORTED), a redirect into a device whose MTU is smaller
//! than the frame. Each rebuilds, in namespaces of its own, a failure
//! reported in a public thread, cited in its doc comment, written without
//! knowledge of tracer's rules. The programs are the tests' own raw
//! instructions (no compiler here), named as the reporters' programs are
//! named. They let ARP through. One scene is an honest trap: the XDP
//! program is there and passes the flow, and something else fails.
//!
//! Address ranges: 10.170.0.0/16 to 10.173.0.0/16. Pins live in a
//! directory of bpffs of the scene's own (`/sys/fs/bpf/tracer-PREFIX`),
//! removed with the scene; the XDP attachments go with their devices,
//! with the namespaces. `blind_bpf::build` falls back to [`build`], which
//! falls back to [`crate::blind_fw::build`] (then
//! [`crate::blind_veth::build`]).

use std::{net::Ipv4Addr, os::fd::RawFd};

use anyhow::{Context, Result};

use crate::{
    blind_bpf::{
        BPF_PROG_TYPE_XDP, Hook, IS_IPV4, XDP_PASS, addr, bpf_dir, matcher, pinned, port, proto,
        xdp_generic,
    },
    blind_l2::exchange,
    netns::{Netns, unique_prefix, veth},
    redirect::{bpf, insn},
    scenarios::{Scenario, listen, ns, serve, simple, strings, tcp_connect},
};

pub const BLIND_XDP: &[&str] = &[
    "blind_xdp_tx_mac_unswapped",
    "blind_xdp_devmap_miss_aborted",
    "blind_xdp_redirect_mtu",
    "blind_xdp_trap_pass_refused",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_xdp_tx_mac_unswapped" => tx_mac_unswapped(),
        "blind_xdp_devmap_miss_aborted" => devmap_miss_aborted(),
        "blind_xdp_redirect_mtu" => redirect_mtu(),
        "blind_xdp_trap_pass_refused" => trap_pass_refused(),
        _ => return crate::blind_fw::build(name),
    })
}

/// include/uapi/linux/bpf.h
const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_UPDATE_ELEM: i64 = 2;
const BPF_MAP_TYPE_DEVMAP: u32 = 14;
const BPF_FUNC_REDIRECT: i32 = 23;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_FUNC_FIB_LOOKUP: i32 = 69;
const XDP_TX: i32 = 3;

/// One instruction, a jump to a label, or a label of [`asm`].
pub(crate) enum Op {
    I([u8; 8]),
    /// A conditional jump `code` (dst `dst`, immediate `imm`, or source
    /// register `src`) to label `to`.
    J {
        code: u8,
        dst: u8,
        src: u8,
        imm: i32,
        to: &'static str,
    },
    L(&'static str),
}

/// Raw instructions with their jumps resolved to their labels.
pub(crate) fn asm(ops: &[Op]) -> Vec<u8> {
    let mut at = std::collections::HashMap::new();
    let mut n = 0i64;
    for op in ops {
        match op {
            Op::L(l) => {
                at.insert(*l, n);
            }
            _ => n += 1,
        }
    }
    let mut out = Vec::new();
    let mut pc = 0i64;
    for op in ops {
        match op {
            Op::I(i) => out.extend_from_slice(i),
            Op::J {
                code,
                dst,
                src,
                imm,
                to,
            } => {
                let off = at[to] - pc - 1;
                out.extend_from_slice(&insn(*code, *dst, *src, off as i16, *imm));
            }
            Op::L(_) => continue,
        }
        pc += 1;
    }
    out
}

/// The little-endian i32 a 4-byte load reads from these network bytes.
pub(crate) fn le32(b: [u8; 4]) -> i32 {
    i32::from_le_bytes(b)
}

/// What a u16 load of the IPv4 header's checksum must have added (one's
/// complement, RFC 1624: ~m + m') when the destination address changes
/// from `old` to `new`, in the words as a little-endian load reads them.
fn csum_delta(old: Ipv4Addr, new: Ipv4Addr) -> i32 {
    let (o, n) = (old.octets(), new.octets());
    let w = |b: [u8; 4]| {
        [
            u32::from(u16::from_le_bytes([b[0], b[1]])),
            u32::from(u16::from_le_bytes([b[2], b[3]])),
        ]
    };
    let (o, n) = (w(o), w(n));
    let mut s = (!o[0] & 0xffff) + (!o[1] & 0xffff) + n[0] + n[1];
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as i32
}

/// The MAC of `dev` in `n`.
pub(crate) fn mac(n: &Netns, dev: &str) -> Result<[u8; 6]> {
    let s = String::from_utf8_lossy(
        &n.exec(&["cat", &format!("/sys/class/net/{dev}/address")])?
            .stdout,
    )
    .trim()
    .to_string();
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("MAC {s:?}"))?;
    v.try_into()
        .map_err(|_| anyhow::anyhow!("MAC {s:?} is not 6 bytes"))
}

/// `dev`'s ifindex in `n`.
fn ifindex(n: &Netns, dev: &str) -> Result<u32> {
    crate::bpfdrop::ifindex(n, dev)
}

/// Stores of `mac` at `off` of the frame (r2 holds its start): a u32 and
/// a u16, immediates.
pub(crate) fn store_mac(off: i16, m: [u8; 6]) -> [Op; 2] {
    [
        Op::I(insn(0x62, 2, 0, off, le32([m[0], m[1], m[2], m[3]]))),
        Op::I(insn(
            0x6a,
            2,
            0,
            off + 4,
            i32::from(u16::from_le_bytes([m[4], m[5]])),
        )),
    ]
}

/// The start of an XDP program: r2 = data, r3 = data_end, and IPv4 of
/// protocol `l4` in a frame of at least `len` bytes, else `pass`.
fn ipv4_head(len: i32, l4: i32) -> Vec<Op> {
    vec![
        Op::I(insn(0x61, 2, 1, 0, 0)), // r2 = ctx->data
        Op::I(insn(0x61, 3, 1, 4, 0)), // r3 = ctx->data_end
        Op::I(insn(0xbf, 4, 2, 0, 0)), // r4 = r2
        Op::I(insn(0x07, 4, 0, 0, len)),
        Op::J {
            code: 0x2d, // if r4 > r3
            dst: 4,
            src: 3,
            imm: 0,
            to: "pass",
        },
        Op::I(insn(0x69, 5, 2, 12, 0)), // r5 = h_proto
        Op::J {
            code: 0x56, // if w5 != ETH_P_IP (network order)
            dst: 5,
            src: 0,
            imm: 0x0008,
            to: "pass",
        },
        Op::I(insn(0x71, 5, 2, 23, 0)), // r5 = iph->protocol
        Op::J {
            code: 0x56,
            dst: 5,
            src: 0,
            imm: l4,
            to: "pass",
        },
    ]
}

/// The end of an XDP program: `pass:` r0 = XDP_PASS, exit.
fn pass_tail() -> [Op; 3] {
    [
        Op::L("pass"),
        Op::I(insn(0xb7, 0, 0, 0, XDP_PASS)),
        Op::I(insn(0x95, 0, 0, 0, 0)),
    ]
}

/// A UDP "forwarder" as xdp-tutorial#286 wrote it: UDP to `local:lport`
/// gets its destination address rewritten to `dest` (the IPv4 checksum
/// updated, the UDP checksum zeroed) and is sent back out with XDP_TX;
/// the Ethernet header is left as it came in.
fn udp_forwarder(local: Ipv4Addr, lport: u16, dest: Ipv4Addr) -> Vec<u8> {
    let mut p = ipv4_head(42, 17);
    p.extend([
        Op::I(insn(0x61, 5, 2, 30, 0)), // r5 = iph->daddr
        Op::J {
            code: 0x56,
            dst: 5,
            src: 0,
            imm: le32(local.octets()),
            to: "pass",
        },
        Op::I(insn(0x69, 5, 2, 36, 0)), // r5 = udph->dest
        Op::J {
            code: 0x56,
            dst: 5,
            src: 0,
            imm: i32::from(lport.to_be()),
            to: "pass",
        },
        Op::I(insn(0x62, 2, 0, 30, le32(dest.octets()))), // iph->daddr = dest
        Op::I(insn(0x6a, 2, 0, 40, 0)),                   // udph->check = 0
        Op::I(insn(0x69, 5, 2, 24, 0)),                   // r5 = iph->check
        Op::I(insn(0xa7, 5, 0, 0, 0xffff)),               // r5 ^= 0xffff
        Op::I(insn(0x07, 5, 0, 0, csum_delta(local, dest))),
    ]);
    for _ in 0..2 {
        // r5 = (r5 & 0xffff) + (r5 >> 16)
        p.extend([
            Op::I(insn(0xbf, 6, 5, 0, 0)),
            Op::I(insn(0x77, 6, 0, 0, 16)),
            Op::I(insn(0x57, 5, 0, 0, 0xffff)),
            Op::I(insn(0x0f, 5, 6, 0, 0)),
        ]);
    }
    p.extend([
        Op::I(insn(0xa7, 5, 0, 0, 0xffff)),
        Op::I(insn(0x6b, 2, 5, 24, 0)), // iph->check = r5
        Op::I(insn(0xb7, 0, 0, 0, XDP_TX)),
        Op::I(insn(0x95, 0, 0, 0, 0)),
    ]);
    p.extend(pass_tail());
    asm(&p)
}

/// xdp-tutorial#286 ("XDP_TX not working in virtio net driver"): an XDP
/// program on a cloud VM's only NIC eth0 was to "Receive packet on server
/// port LOCAL:65535, and redirect to DESTINATION:65535": it rewrote the
/// destination address and returned XDP_TX; "I'm not receiving TCP
/// packets on my destination server ... and also on the local server the
/// packet doesn't appear in tcpdump". The maintainer's answer: "AFAIK
/// you're not updating the MAC address? So how are you expecting the
/// packet to reach the destination, exactly? :)". Here the VM ("server",
/// 10.170.100.1) sits on an L2 segment (a bridge in "lan") with a client
/// (10.170.100.2) and the gateway (10.170.100.254), behind which the
/// destination 10.170.101.2 runs a UDP echo on 65535. Generic XDP
/// `xdp_fwd_prog` on the server's eth0 rewrites UDP to
/// 10.170.100.1:65535 to 10.170.101.2:65535 (IPv4 checksum updated, UDP
/// checksum zeroed) and returns XDP_TX, leaving the Ethernet header as it
/// came: destination MAC the server's own, source MAC the client's. The
/// client sends one datagram to 10.170.100.1:65535. True cause: the XDP
/// program sends the frame back out of eth0 (XDP_TX) without rewriting
/// its MACs to the gateway's; the bridge sees a frame for the server's
/// own MAC coming from the server's port and does not forward it (it
/// also learns the client's MAC on the server's port); the destination
/// never gets it and the client gets no answer.
fn tx_mac_unswapped() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, lan, server, gw, dest) = (
        ns(&p, "client")?,
        ns(&p, "lan")?,
        ns(&p, "server")?,
        ns(&p, "gw")?,
        ns(&p, "dest")?,
    );
    lan.ip(&["link", "add", "br0", "type", "bridge"])?;
    lan.ip(&["link", "set", "br0", "up"])?;
    for (n, port) in [(&client, "p-client"), (&server, "p-server"), (&gw, "p-gw")] {
        veth(n, "eth0", &lan, port)?;
        lan.ip(&["link", "set", port, "master", "br0"])?;
    }
    veth(&gw, "eth1", &dest, "eth0")?;
    client.ip(&["addr", "add", "10.170.100.2/24", "dev", "eth0"])?;
    client.ip(&["route", "add", "default", "via", "10.170.100.254"])?;
    server.ip(&["addr", "add", "10.170.100.1/24", "dev", "eth0"])?;
    server.ip(&["route", "add", "default", "via", "10.170.100.254"])?;
    gw.ip(&["addr", "add", "10.170.100.254/24", "dev", "eth0"])?;
    gw.ip(&["addr", "add", "10.170.101.1/24", "dev", "eth1"])?;
    gw.sysctl("net.ipv4.ip_forward", "1")?;
    dest.ip(&["addr", "add", "10.170.101.2/24", "dev", "eth0"])?;
    dest.ip(&["route", "add", "default", "via", "10.170.101.1"])?;
    let dir = bpf_dir(&p)?;
    let prog = pinned(
        &dir,
        "eth0-xdp",
        BPF_PROG_TYPE_XDP,
        &udp_forwarder("10.170.100.1".parse()?, 65535, "10.170.101.2".parse()?),
        "xdp_fwd_prog",
    )?;
    xdp_generic(&server, "eth0", &prog)?;
    let srv = serve(&dest, "udp-echo", "10.170.101.2:65535", 15)?;
    let target = "10.170.100.1:65535".to_string();
    let mut sc = simple(
        "blind_xdp_tx_mac_unswapped",
        "a UDP forwarder in XDP on a VM's eth0 rewrites the destination address and returns XDP_TX without rewriting the MACs: the frame goes back to the segment addressed to the VM itself",
        vec![client, lan, server, gw, dest],
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

/// A device map named `name` holding `ifindexes` of the namespace `n`
/// (key and value each ifindex), as xdp-tutorial's `tx_port` is filled
/// by its loader.
pub(crate) fn devmap(n: &Netns, name: &str, ifindexes: &[u32]) -> Result<RawFd> {
    let mut attr = [0u8; 64];
    attr[0..4].copy_from_slice(&BPF_MAP_TYPE_DEVMAP.to_le_bytes());
    attr[4..8].copy_from_slice(&4u32.to_le_bytes()); // key_size
    attr[8..12].copy_from_slice(&4u32.to_le_bytes()); // value_size
    attr[12..16].copy_from_slice(&256u32.to_le_bytes()); // max_entries
    let b = name.as_bytes();
    attr[28..28 + b.len().min(15)].copy_from_slice(&b[..b.len().min(15)]);
    let fd = bpf(BPF_MAP_CREATE, &mut attr).context("BPF_MAP_CREATE devmap")? as RawFd;
    for i in ifindexes {
        if let Err(e) = devmap_put(n, fd, *i, *i) {
            unsafe { libc::close(fd) };
            return Err(e);
        }
    }
    Ok(fd)
}

/// Set device map `fd`'s entry `key` to `ifindex` of the namespace `n`:
/// the kernel takes the ifindex in the updater's namespace
/// (dev_map_update_elem(), current->nsproxy->net_ns), so the update is
/// made from a thread in `n` (from the host's, the entry would be a host
/// device's).
pub(crate) fn devmap_put(n: &Netns, fd: RawFd, key: u32, ifindex: u32) -> Result<()> {
    crate::bpfdrop::in_netns(&n.path(), || {
        let (k, v) = (key.to_le_bytes(), ifindex.to_le_bytes());
        let mut a = [0u8; 32];
        a[0..4].copy_from_slice(&(fd as u32).to_le_bytes());
        a[8..16].copy_from_slice(&(k.as_ptr() as u64).to_le_bytes());
        a[16..24].copy_from_slice(&(v.as_ptr() as u64).to_le_bytes());
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).context("BPF_MAP_UPDATE_ELEM devmap")?;
        Ok(())
    })
}

/// xdp-tutorial's `xdp_router` (packet-solutions/xdp_prog_kern_03.c) for
/// IPv4 TCP: a bpf_fib_lookup() of the packet (family, protocol, length,
/// addresses, the ingress ifindex); on success the MACs it returned
/// written into the frame and `bpf_redirect_map(&tx_port,
/// fib_params.ifindex, 0)` returned; anything else XDP_PASS. (No TTL
/// decrement: nothing here depends on it.)
fn xdp_router(tx_port: RawFd) -> Vec<u8> {
    let mut p = vec![Op::I(insn(0xbf, 6, 1, 0, 0))]; // r6 = ctx
    p.extend(ipv4_head(34, 6));
    // struct bpf_fib_lookup at fp-64, zeroed.
    for off in (-64..0).step_by(8) {
        p.push(Op::I(insn(0x7a, 10, 0, off, 0)));
    }
    p.extend([
        Op::I(insn(0x72, 10, 0, -64, 2)), // family = AF_INET
        Op::I(insn(0x71, 5, 2, 23, 0)),
        Op::I(insn(0x73, 10, 5, -63, 0)), // l4_protocol
        Op::I(insn(0x69, 5, 2, 16, 0)),   // iph->tot_len
        Op::I(insn(0xdc, 5, 0, 0, 16)),   // bpf_ntohs
        Op::I(insn(0x6b, 10, 5, -58, 0)), // tot_len
        Op::I(insn(0x61, 5, 2, 26, 0)),
        Op::I(insn(0x63, 10, 5, -48, 0)), // ipv4_src
        Op::I(insn(0x61, 5, 2, 30, 0)),
        Op::I(insn(0x63, 10, 5, -32, 0)), // ipv4_dst
        Op::I(insn(0x61, 5, 6, 12, 0)),   // ctx->ingress_ifindex
        Op::I(insn(0x63, 10, 5, -56, 0)), // ifindex
        Op::I(insn(0xbf, 1, 6, 0, 0)),
        Op::I(insn(0xbf, 2, 10, 0, 0)),
        Op::I(insn(0x07, 2, 0, 0, -64)),
        Op::I(insn(0xb7, 3, 0, 0, 64)),
        Op::I(insn(0xb7, 4, 0, 0, 0)),
        Op::I(insn(0x85, 0, 0, 0, BPF_FUNC_FIB_LOOKUP)),
        Op::J {
            code: 0x55, // if r0 != BPF_FIB_LKUP_RET_SUCCESS
            dst: 0,
            src: 0,
            imm: 0,
            to: "pass",
        },
        // The packet again (the helper call invalidated the pointers).
        Op::I(insn(0x61, 2, 6, 0, 0)),
        Op::I(insn(0x61, 3, 6, 4, 0)),
        Op::I(insn(0xbf, 4, 2, 0, 0)),
        Op::I(insn(0x07, 4, 0, 0, 14)),
        Op::J {
            code: 0x2d,
            dst: 4,
            src: 3,
            imm: 0,
            to: "pass",
        },
    ]);
    // h_dest = fib dmac (fp-6), h_source = fib smac (fp-12), by u16
    // (the verifier wants stack accesses aligned).
    for i in 0..6i16 {
        p.push(Op::I(insn(0x69, 5, 10, -12 + 2 * ((i + 3) % 6), 0)));
        p.push(Op::I(insn(0x6b, 2, 5, 2 * i, 0)));
    }
    p.extend([
        // bpf_redirect_map(&tx_port, fib_params.ifindex, 0)
        Op::I(insn(0x18, 1, 1, 0, tx_port)),
        Op::I(insn(0, 0, 0, 0, 0)),
        Op::I(insn(0x61, 2, 10, -56, 0)),
        Op::I(insn(0xb7, 3, 0, 0, 0)),
        Op::I(insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP)),
        Op::I(insn(0x95, 0, 0, 0, 0)),
    ]);
    p.extend(pass_tail());
    asm(&p)
}

/// xdp-tutorial#167 ("packet03 seems to be causing huge packet loss"):
/// a router running the tutorial's `xdp_router` (bpf_fib_lookup, then
/// `bpf_redirect_map(&tx_port, fib_params.ifindex, 0)`) on its two
/// forwarding ports lost traffic; the maintainer: "you're looking for
/// which ifindex results in XDP_ABORTED", and the reporter found the FIB
/// lookup "occasionally" returned "ifindex 5 (a different interface on
/// the system not XDP enabled, used for management)", which was not in
/// `tx_port`: with flags 0 the helper's answer for a missing key is
/// XDP_ABORTED. terassyi/seccamp-xdp#7 ("LB: Stop invalid
/// bpf_redirect_map calls") fixed the same in an XDP load balancer:
/// "When no redirect interface is configured, LB still call
/// bpf_redirect_map and it causes packet drop". Here a router has eth0
/// (clients, 10.171.100.1), eth1 (servers, 10.171.101.1) and mgmt (the
/// management network, 10.171.102.1); `tx_port` holds eth0 and eth1, as
/// the loader was told; `xdp_router` is on eth0 in generic mode. A client
/// connects to 10.171.102.2:9100 (a metrics endpoint on the management
/// network, listening; the router reached it before, so its neighbour
/// entry is valid and the FIB lookup succeeds with mgmt). True cause: the
/// FIB lookup returns mgmt's ifindex, which is not in the devmap
/// `tx_port`; bpf_redirect_map returns XDP_ABORTED (its flags 0) and the
/// SYN is dropped at eth0's XDP hook; the fix is to put mgmt in
/// `tx_port` or to pass (XDP_PASS) what the map does not hold.
fn devmap_miss_aborted() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, router, servers, mgmt) = (
        ns(&p, "client")?,
        ns(&p, "router")?,
        ns(&p, "servers")?,
        ns(&p, "mgmt")?,
    );
    veth(&client, "eth0", &router, "eth0")?;
    veth(&router, "eth1", &servers, "eth0")?;
    veth(&router, "mgmt", &mgmt, "eth0")?;
    client.ip(&["addr", "add", "10.171.100.2/24", "dev", "eth0"])?;
    client.ip(&["route", "add", "default", "via", "10.171.100.1"])?;
    router.ip(&["addr", "add", "10.171.100.1/24", "dev", "eth0"])?;
    router.ip(&["addr", "add", "10.171.101.1/24", "dev", "eth1"])?;
    router.ip(&["addr", "add", "10.171.102.1/24", "dev", "mgmt"])?;
    router.sysctl("net.ipv4.ip_forward", "1")?;
    servers.ip(&["addr", "add", "10.171.101.2/24", "dev", "eth0"])?;
    servers.ip(&["route", "add", "default", "via", "10.171.101.1"])?;
    mgmt.ip(&["addr", "add", "10.171.102.2/24", "dev", "eth0"])?;
    mgmt.ip(&["route", "add", "default", "via", "10.171.102.1"])?;
    let target = "10.171.102.2:9100".to_string();
    let srv = listen(&mgmt, &target, 15)?;
    // The router has talked to the metrics endpoint: its neighbour entry
    // for it is valid (bpf_fib_lookup answers NO_NEIGH otherwise).
    exchange(&router, &target)?;
    let dir = bpf_dir(&p)?;
    let tx_port = devmap(
        &router,
        "tx_port",
        &[ifindex(&router, "eth0")?, ifindex(&router, "eth1")?],
    )?;
    let prog = pinned(
        &dir,
        "eth0-xdp",
        BPF_PROG_TYPE_XDP,
        &xdp_router(tx_port),
        "xdp_router",
    );
    // The program holds the map.
    unsafe { libc::close(tx_port) };
    xdp_generic(&router, "eth0", &prog?)?;
    let mut sc = simple(
        "blind_xdp_devmap_miss_aborted",
        "xdp_router on a router's eth0: the FIB lookup gives the management port, which is not in the devmap tx_port; bpf_redirect_map returns XDP_ABORTED",
        vec![client, router, servers, mgmt],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// A redirect of UDP to `pod` straight to `ifindex`'s transmit, with the
/// frame's MACs set to `smac` (the node's side) and `dmac` (the pod's),
/// as xdp-tutorial's `xdp_redirect_func` does with a fixed ifindex.
fn pod_redirect(pod: Ipv4Addr, ifindex: u32, smac: [u8; 6], dmac: [u8; 6]) -> Vec<u8> {
    let mut p = ipv4_head(34, 17);
    p.extend([
        Op::I(insn(0x61, 5, 2, 30, 0)),
        Op::J {
            code: 0x56,
            dst: 5,
            src: 0,
            imm: le32(pod.octets()),
            to: "pass",
        },
    ]);
    p.extend(store_mac(0, dmac));
    p.extend(store_mac(6, smac));
    p.extend([
        Op::I(insn(0xb7, 1, 0, 0, ifindex as i32)),
        Op::I(insn(0xb7, 2, 0, 0, 0)),
        Op::I(insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT)),
        Op::I(insn(0x95, 0, 0, 0, 0)),
    ]);
    p.extend(pass_tail());
    asm(&p)
}

/// cilium/cilium#3204 ("bpf: Fix lack of monitoring of redirect
/// failure"): "if redirect into an interface fails, there would be no
/// monitor drop logged and the packet would just disappear on its way
/// into the endpoint", with the to-do "Validate that this picks up the
/// MTU issue we were observing in minikube" (a redirect into a pod's veth
/// whose MTU is smaller than the packet); the kernel's own guide
/// (Documentation/bpf/redirect.rst, "Debugging packet drops") calls these
/// "Silent packet drops for XDP_REDIRECT". Here a node's uplink eth0 (a
/// jumbo network: MTU 9000, as the client's) has generic XDP
/// `xdp_redirect_func` that sends UDP for the pod 10.172.102.2 straight
/// to the pod's host-side veth lxc0 (bpf_redirect to its ifindex, MACs
/// set), whose MTU is 1500 (the pod's). The client sends one 4000-byte
/// datagram to the pod's UDP echo on 10.172.102.2:8125. True cause: the
/// XDP redirect into lxc0 fails on its MTU (the 4042-byte frame is larger
/// than lxc0's 1500 + header), so the kernel drops the frame at eth0's
/// XDP hook: no fragmentation, no ICMP "fragmentation needed", as the
/// stack's forwarding would have given.
fn redirect_mtu() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, node, pod) = (ns(&p, "client")?, ns(&p, "node")?, ns(&p, "pod")?);
    veth(&client, "eth0", &node, "eth0")?;
    veth(&node, "lxc0", &pod, "eth0")?;
    client.ip(&["link", "set", "eth0", "mtu", "9000"])?;
    node.ip(&["link", "set", "eth0", "mtu", "9000"])?;
    client.ip(&["addr", "add", "10.172.100.2/24", "dev", "eth0"])?;
    client.ip(&["route", "add", "default", "via", "10.172.100.1"])?;
    node.ip(&["addr", "add", "10.172.100.1/24", "dev", "eth0"])?;
    node.ip(&["addr", "add", "10.172.102.1/24", "dev", "lxc0"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    pod.ip(&["addr", "add", "10.172.102.2/24", "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", "10.172.102.1"])?;
    let dir = bpf_dir(&p)?;
    let prog = pinned(
        &dir,
        "eth0-xdp",
        BPF_PROG_TYPE_XDP,
        &pod_redirect(
            "10.172.102.2".parse()?,
            ifindex(&node, "lxc0")?,
            mac(&node, "lxc0")?,
            mac(&pod, "eth0")?,
        ),
        "xdp_redirect_func",
    )?;
    xdp_generic(&node, "eth0", &prog)?;
    let target = "10.172.102.2:8125".to_string();
    let srv = serve(&pod, "udp-echo", &target, 15)?;
    let mut sc = simple(
        "blind_xdp_redirect_mtu",
        "XDP on a jumbo uplink redirects a pod's UDP straight into the pod's veth (MTU 1500): a 4000-byte datagram does not fit and is dropped at the XDP hook",
        vec![client, node, pod],
        target.clone(),
        strings(&[
            "udp-send",
            &target,
            "--size",
            "4000",
            "--timeout-ms",
            &crate::scaled_arg(1000),
        ]),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// The honest trap. facebookincubator/katran#184 ("katran doesn't
/// forward packets"): with Katran's XDP balancer on the LB host's
/// enp0s3 and the VIP 10.200.200.1 on its lo, "telnet 10.200.200.1 80"
/// failed with "Connection refused", and the client's tcpdump showed the
/// SYN to 10.200.200.1.80 answered by "Flags [R.]" from 10.200.200.1.80:
/// the VIP configured in Katran was 10.200.200.1:22, so the balancer
/// passed port 80 (XDP_PASS) to the host's own stack, where nothing
/// listened. Here the LB host's eth0 (10.173.100.1) has generic XDP
/// `balancer_ingress` (Katran's program, the kernel keeps 15 bytes of the
/// name) that sends TCP to the VIP 10.173.200.1:22 back out (XDP_TX, the
/// encapsulation left out: no traffic here goes there) and passes
/// everything else; the VIP is on the host's lo. A client connects to
/// 10.173.200.1:80. True cause: nothing listens on port 80 of the LB
/// host, and port 80 is not a VIP of the balancer; the XDP program
/// passed the SYN and the host's TCP answered RST.
fn trap_pass_refused() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, lb) = (ns(&p, "client")?, ns(&p, "lb")?);
    veth(&client, "eth0", &lb, "eth0")?;
    client.ip(&["addr", "add", "10.173.100.2/24", "dev", "eth0"])?;
    client.ip(&["route", "add", "default", "via", "10.173.100.1"])?;
    lb.ip(&["addr", "add", "10.173.100.1/24", "dev", "eth0"])?;
    lb.ip(&["addr", "add", "10.173.200.1/32", "dev", "lo"])?;
    let vip: Ipv4Addr = "10.173.200.1".parse()?;
    let dir = bpf_dir(&p)?;
    let prog = pinned(
        &dir,
        "eth0-xdp",
        BPF_PROG_TYPE_XDP,
        &matcher(
            Hook::Xdp,
            38,
            &[IS_IPV4, proto(6), addr(false, vip, true), port(false, 22)],
            XDP_TX,
            XDP_PASS,
        ),
        "balancer_ingress",
    )?;
    xdp_generic(&lb, "eth0", &prog)?;
    let target = "10.173.200.1:80".to_string();
    let mut sc = simple(
        "blind_xdp_trap_pass_refused",
        "Katran's XDP balancer on the LB host passes TCP to VIP:80 (only VIP:22 is configured); the host has the VIP on lo and nothing listening on 80: RST",
        vec![client, lb],
        target.clone(),
        tcp_connect(&target),
    );
    sc.scratch.push(dir);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One's complement sum of an IPv4 header's 16-bit words, as
    /// little-endian loads read them.
    fn sum(h: &[u8; 20]) -> u32 {
        let mut s: u32 = h
            .chunks(2)
            .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s
    }

    /// The program's checksum update, done here on a real header, gives
    /// a header whose checksum verifies.
    #[test]
    fn checksum_update_verifies() {
        let (old, new): (Ipv4Addr, Ipv4Addr) = (
            "10.170.100.1".parse().unwrap(),
            "10.170.101.2".parse().unwrap(),
        );
        let mut h = [
            0x45, 0, 0, 33, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 170, 100, 2, 0, 0, 0, 0,
        ];
        h[16..20].copy_from_slice(&old.octets());
        let c = !sum(&h) as u16;
        h[10..12].copy_from_slice(&c.to_le_bytes());
        assert_eq!(sum(&h), 0xffff);
        h[16..20].copy_from_slice(&new.octets());
        let mut r = u32::from(u16::from_le_bytes([h[10], h[11]])) ^ 0xffff;
        r += csum_delta(old, new) as u32;
        for _ in 0..2 {
            r = (r & 0xffff) + (r >> 16);
        }
        let c = (r ^ 0xffff) as u16;
        h[10..12].copy_from_slice(&c.to_le_bytes());
        assert_eq!(sum(&h), 0xffff);
    }

    #[test]
    fn jumps_resolve_to_their_labels() {
        let p = asm(&[
            Op::J {
                code: 0x55,
                dst: 0,
                src: 0,
                imm: 0,
                to: "end",
            },
            Op::I(insn(0xb7, 0, 0, 0, 1)),
            Op::L("end"),
            Op::I(insn(0x95, 0, 0, 0, 0)),
        ]);
        assert_eq!(i16::from_le_bytes([p[2], p[3]]), 1);
    }

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_XDP {
            assert!(n.starts_with("blind_xdp_"));
        }
        assert!(build("blind_nope").is_none());
    }
}
