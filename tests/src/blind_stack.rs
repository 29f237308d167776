//! Blind scenes of one class of place: the receiving stack and its
//! sockets, where a packet that routing and the firewalls let through is
//! still not delivered (or never leaves): a listener's accept queue that
//! is full, a cgroup's IP firewall (systemd's `IPAddressDeny=`, cgroup_skb
//! programs on egress and ingress), an L4 checksum left stale by a
//! dataplane's rewrite. Each rebuilds, in namespaces and cgroups of its
//! own, a failure reported in a public thread, cited in its doc comment,
//! written without knowledge of tracer's rules. One scene is an honest
//! trap: a unit's IP firewall runs on the client's packets and allows
//! them, and the server's firewalld rejects them.
//!
//! The cgroup programs are a few raw instructions of the tests' own
//! ([`ip_firewall`]), named as systemd names its programs
//! (`sd_fw_ingress`, `sd_fw_egress`: src/core/bpf-firewall.c), attached to
//! a cgroup of the scene's own below the cgroup2 mount
//! (`/sys/fs/cgroup/unified` here); the process is moved there before it
//! execs. The checksum scenes use bpfnat.rs's tc rewrite with the L4
//! checksum left as it was ([`crate::bpfnat::dnat_stale_l4`]).
//!
//! Scenes named `blind_stack_ctl_*` (not in [`BLIND_STACK`]) are the same
//! topologies with the cause removed, kept to check by hand that the
//! traffic then works.
//!
//! Address ranges: 10.160 to 10.165. `scenarios::build` falls back
//! (through the other blind files, last `blind_node::build`) to [`build`],
//! the last of the fallbacks.

use std::{net::Ipv4Addr, path::Path};

use anyhow::{Context, Result};

use crate::{
    blind_bpf::bpf_dir,
    blind_scenes::fast_arp,
    blind_sock::Cgroup,
    bpfnat::{Dir, Link, TCP, UDP, attach, dnat, dnat_stale_l4, rev_snat},
    netns::{Child, Netns, unique_prefix, veth},
    redirect::insn,
    scenarios::{Scenario, listen, ns, routed, serve, serve_with, simple, strings, tcp_connect},
    tracer::netprobe_bin,
};

pub const BLIND_STACK: &[&str] = &[
    "blind_stack_ingress_somaxconn",
    "blind_stack_logind_ipaddressdeny",
    "blind_stack_unit_allow_localhost",
    "blind_stack_dns_forwarder_stale_csum",
    "blind_stack_nodeport_stale_tcp_csum",
    "blind_stack_trap_kubelet_firewalld",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_stack_ingress_somaxconn" => ingress_somaxconn(true),
        "blind_stack_ctl_ingress_somaxconn" => ingress_somaxconn(false),
        "blind_stack_logind_ipaddressdeny" => logind_ipaddressdeny(true),
        "blind_stack_ctl_logind_ipaddressdeny" => logind_ipaddressdeny(false),
        "blind_stack_unit_allow_localhost" => unit_allow_localhost(true),
        "blind_stack_ctl_unit_allow_localhost" => unit_allow_localhost(false),
        "blind_stack_dns_forwarder_stale_csum" => dns_forwarder_stale_csum(true),
        "blind_stack_ctl_dns_forwarder_stale_csum" => dns_forwarder_stale_csum(false),
        "blind_stack_nodeport_stale_tcp_csum" => nodeport_stale_tcp_csum(true),
        "blind_stack_ctl_nodeport_stale_tcp_csum" => nodeport_stale_tcp_csum(false),
        "blind_stack_trap_kubelet_firewalld" => trap_kubelet_firewalld(true),
        "blind_stack_ctl_trap_kubelet_firewalld" => trap_kubelet_firewalld(false),
        _ => return crate::blind_more::build(name),
    })
}

/// include/uapi/linux/bpf.h
const BPF_PROG_TYPE_CGROUP_SKB: u32 = 8;
const BPF_CGROUP_INET_INGRESS: u32 = 0;
const BPF_CGROUP_INET_EGRESS: u32 = 1;

/// A prefix as the little-endian u32 load of its network-order bytes
/// reads it: (the network's bits, the mask).
fn prefix_le(net: Ipv4Addr, len: u8) -> (i32, i32) {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    let mask_le = u32::from_le_bytes(mask.to_be_bytes());
    let net_le = u32::from_le_bytes(net.octets()) & mask_le;
    (net_le as i32, mask_le as i32)
}

/// A cgroup_skb program as systemd's IP firewall behaves for a unit with
/// `IPAddressAllow=` `allow` and `IPAddressDeny=any`: an IPv4 packet whose
/// remote address (the destination on egress, the source on ingress) is
/// in one of `allow` passes (1), any other IPv4 packet is dropped (0).
/// Non-IPv4 packets pass (systemd's own program matches IPv6 too; the
/// scenes have none). Direct packet access: at cgroup_skb the data
/// starts at the IP header (saddr at 12, daddr at 16).
fn ip_firewall(egress: bool, allow: &[(Ipv4Addr, u8)]) -> Vec<u8> {
    let mut insns: Vec<[u8; 8]> = vec![];
    let mut to_allow: Vec<usize> = vec![];
    insns.push(insn(0xbf, 6, 1, 0, 0)); // r6 = skb
    insns.push(insn(0x61, 2, 6, 16, 0)); // r2 = skb->protocol
    to_allow.push(insns.len());
    insns.push(insn(0x56, 2, 0, 0, 0x0008)); // if w2 != htons(ETH_P_IP) goto allow
    insns.push(insn(0x61, 2, 6, 76, 0)); // r2 = skb->data
    insns.push(insn(0x61, 3, 6, 80, 0)); // r3 = skb->data_end
    insns.push(insn(0xbf, 4, 2, 0, 0)); // r4 = r2
    insns.push(insn(0x07, 4, 0, 0, 20)); // r4 += 20
    to_allow.push(insns.len());
    insns.push(insn(0x2d, 4, 3, 0, 0)); // if r4 > r3 goto allow
    let remote = if egress { 16 } else { 12 };
    insns.push(insn(0x61, 5, 2, remote, 0)); // r5 = remote address
    for (net, len) in allow {
        let (n, m) = prefix_le(*net, *len);
        insns.push(insn(0xbf, 4, 5, 0, 0)); // r4 = r5
        insns.push(insn(0x54, 4, 0, 0, m)); // w4 &= mask
        to_allow.push(insns.len());
        insns.push(insn(0x16, 4, 0, 0, n)); // if w4 == net goto allow
    }
    insns.push(insn(0xb7, 0, 0, 0, 0)); // deny: r0 = 0
    insns.push(insn(0x95, 0, 0, 0, 0));
    let allow_at = insns.len();
    for &i in &to_allow {
        let off = i16::try_from(allow_at - i - 1).expect("short program");
        insns[i][2..4].copy_from_slice(&off.to_le_bytes());
    }
    insns.push(insn(0xb7, 0, 0, 0, 1)); // allow: r0 = 1
    insns.push(insn(0x95, 0, 0, 0, 0));
    insns.concat()
}

/// A unit's cgroup with systemd's IP firewall for `IPAddressDeny=any`
/// and `IPAddressAllow=` `allow` (both directions, as systemd attaches
/// it).
fn unit_cgroup(role: &str, allow: &[(Ipv4Addr, u8)]) -> Result<Cgroup> {
    let mut cg = Cgroup::new(role)?;
    cg.attach_typed(
        BPF_PROG_TYPE_CGROUP_SKB,
        BPF_CGROUP_INET_INGRESS,
        &ip_firewall(false, allow),
        "sd_fw_ingress",
    )?;
    cg.attach_typed(
        BPF_PROG_TYPE_CGROUP_SKB,
        BPF_CGROUP_INET_EGRESS,
        &ip_firewall(true, allow),
        "sd_fw_egress",
    )?;
    Ok(cg)
}

/// `IPAddressAllow=localhost` (systemd: 127.0.0.0/8 and ::1).
const LOCALHOST: (Ipv4Addr, u8) = (Ipv4Addr::new(127, 0, 0, 0), 8);

/// How long a background process of a scene lives, as `serve` counts it
/// (tracer's longest start-up added, scaled).
fn lifetime(secs: u32) -> String {
    let start = crate::tracer::READY_TIMEOUT_MS.div_ceil(1000) as f64;
    ((f64::from(secs) + start) * crate::time_scale())
        .ceil()
        .to_string()
}

/// A netprobe server (`mode` on `addr`, `tcp` or not) run in `ns` as a
/// process of the cgroup `cgroup` (a unit's), killed with the scene.
/// Returns once its port is bound (at most 5 s, scaled).
fn serve_in(cgroup: &Path, n: &Netns, mode: &str, addr: &str, secs: u32) -> Result<Child> {
    let probe = netprobe_bin();
    let script = format!(
        "echo $$ > '{}' && exec ip netns exec {} \"$@\"",
        cgroup.join("cgroup.procs").display(),
        n.name
    );
    let child = std::process::Command::new("sh")
        .args(["-c", &script, "sh"])
        .arg(&probe)
        .args([mode, addr, "--for", &lifetime(secs)])
        .spawn()
        .context("spawn a server in a cgroup")?;
    let child = Child(child);
    let port: u16 = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .context("port")?;
    let table = if mode.starts_with("udp") {
        "udp"
    } else {
        "tcp"
    };
    let hex = format!(":{port:04X} ");
    let deadline = std::time::Instant::now() + crate::scaled_ms(5000);
    while std::time::Instant::now() < deadline {
        let t = std::fs::read_to_string(format!("/proc/{}/net/{table}", child.0.id()))
            .unwrap_or_default();
        if t.lines().skip(1).any(|l| l.contains(&hex)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(child)
}

/// Turn `dev`'s transmit checksum offload off (`ethtool -K DEV tx off`,
/// by the legacy ETHTOOL_STXCSUM ioctl from a thread in `n`): its
/// packets then leave with their TCP and UDP checksums computed, as they
/// arrive from a real wire. A veth otherwise hands its peer a
/// CHECKSUM_PARTIAL packet whose checksum nobody verifies.
fn tx_checksum_off(n: &Netns, dev: &str) -> Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    const ETHTOOL_STXCSUM: u32 = 0x17;
    let dev = dev.to_string();
    n.within(move || {
        // SAFETY: socket(2); the fd is owned from here.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd of ours.
        let sock = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let mut v = EthtoolValue {
            cmd: ETHTOOL_STXCSUM,
            data: 0,
        };
        // SAFETY: ifreq is plain data; zeroed is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, b) in ifr.ifr_name.iter_mut().zip(dev.bytes()) {
            *d = b as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = std::ptr::from_mut(&mut v).cast();
        // SAFETY: SIOCETHTOOL with an ifreq pointing at an ethtool_value
        // that outlives the call.
        if unsafe {
            libc::ioctl(
                sock.as_raw_fd(),
                libc::SIOCETHTOOL,
                std::ptr::from_mut(&mut ifr),
            )
        } < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    })
    .with_context(|| format!("tx checksum offload off on {}", n.name))
}

/// The accept queue's length of the listener on `port` in `n` (`ss
/// -ltn`'s Recv-Q).
fn accept_queue(n: &Netns, port: u16) -> Option<u32> {
    let out = n.run_status(&["ss", "-Hltn", &format!("sport = :{port}")]);
    let s = String::from_utf8_lossy(&out.stdout);
    s.split_whitespace().nth(1).and_then(|q| q.parse().ok())
}

/// kubernetes/ingress-nginx#1630 ("Backlog size parameter incorrectly set
/// in nginx config": "The backlog size parameter in the listen directive
/// should be in tune with the kernel parameters") and
/// kontena/pharos-cluster#518 ("Ingress-nginx could use k8s native
/// sysctl"): net.core.somaxconn is per network namespace, so the
/// controller's pod has its own, not the node's tuned one, and "the
/// default `net.core.somaxconn = 128` could cause slowdowns with very high
/// rates of new connections (faster than nginx is able to accept them)";
/// raising it needs `--allowed-unsafe-sysctls net.core.somaxconn`. nginx
/// listens with `backlog=511`, which the kernel caps at the pod's
/// somaxconn. Here (scaled down so that three connections fill the queue
/// instead of 129) the ingress pod 10.160.2.2 (routed: client
/// 10.160.1.2, router, pod) has net.core.somaxconn = 2 in its namespace;
/// nginx listens on :80 with a backlog of 511 (capped to 2) and its
/// workers are busy (they do not accept); three clients' connections
/// already wait in the accept queue (`ss -ltn`: Recv-Q 3, Send-Q 2). The
/// client then connects once to 10.160.2.2:80. The operator follows
/// 10.160.2.2:80. True cause: the listener's accept queue is full
/// (ListenOverflows and ListenDrops count up in the pod's namespace,
/// `nstat`), so the pod's TCP drops the client's SYN and the client
/// retransmits until its connect times out; raise net.core.somaxconn in
/// the pod (a pod sysctl) or let nginx accept faster. Checked by hand:
/// `blind_stack_ctl_ingress_somaxconn` (somaxconn 4096) connects.
fn ingress_somaxconn(overflow: bool) -> Result<Scenario> {
    let nss = routed(160)?;
    nss[2].sysctl("net.core.somaxconn", if overflow { "2" } else { "4096" })?;
    let target = "10.160.2.2:80";
    let srv = serve_with(&nss[2], "tcp-backlog", target, 30, &["--backlog", "511"])?;
    let probe = netprobe_bin();
    let mut sc = simple(
        if overflow {
            "blind_stack_ingress_somaxconn"
        } else {
            "blind_stack_ctl_ingress_somaxconn"
        },
        "ingress-nginx in a pod whose namespace has a tiny net.core.somaxconn: its accept queue is full of connections its busy workers have not accepted",
        nss,
        target.into(),
        tcp_connect(target),
    );
    sc.servers.push(srv);
    for _ in 0..3 {
        // Its "connected" line is not the followed client's: not shown.
        let hold = std::process::Command::new("ip")
            .args(["netns", "exec", &sc.nss[0].name])
            .arg(&probe)
            .args(["tcp-hold", target, "--for", &lifetime(30)])
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("spawn tcp-hold")?;
        sc.servers.push(Child(hold));
    }
    // The three held connections in the queue before tracer starts.
    let deadline = std::time::Instant::now() + crate::scaled_ms(5000);
    while accept_queue(&sc.nss[2], 80).unwrap_or(0) < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(sc)
}

/// systemd/systemd#7074 ("systemd-logind's IP sandbox breaks nss-nis and
/// suchlike"): systemd 235 gave systemd-logind.service `IPAddressDeny=any`
/// (the cgroup BPF IP firewall); logging in as a NIS user, "systemd-logind:
/// do_ypcall: clnt_call: RPC: Unable to send; errno = Operation not
/// permitted" and "pam_systemd(login:session): Failed to create session:
/// Connection timed out"; commenting out `IPAddressDeny=any` fixed it, and
/// poettering answered that logind runs in an IP sandbox on purpose
/// (NEWS for 235). Here a node (routed: node 10.161.1.2, router, NIS
/// server 10.161.2.2, whose portmapper answers on UDP 111); the node's
/// logind runs in its unit's cgroup with systemd's `sd_fw_egress` and
/// `sd_fw_ingress` for `IPAddressDeny=any` (no allow). logind's NSS
/// lookup sends one RPC datagram to 10.161.2.2:111. The operator follows
/// 10.161.2.2:111. True cause: the unit's cgroup BPF egress program
/// (systemd's IPAddressDeny=any on systemd-logind.service) dropped the
/// datagram as it left; sendmsg() returned EPERM and nothing reached the
/// network. Allow the NIS server (IPAddressAllow=) in a drop-in, or use
/// nscd/sssd. Checked by hand: `blind_stack_ctl_logind_ipaddressdeny`
/// (no programs) gets the reply.
fn logind_ipaddressdeny(deny: bool) -> Result<Scenario> {
    let nss = routed(161)?;
    let server = "10.161.2.2:111";
    let portmap = serve(&nss[2], "udp-echo", server, 15)?;
    let cg = if deny {
        unit_cgroup("logind", &[])?
    } else {
        Cgroup::new("logind")?
    };
    let mut sc = simple(
        if deny {
            "blind_stack_logind_ipaddressdeny"
        } else {
            "blind_stack_ctl_logind_ipaddressdeny"
        },
        "systemd-logind with IPAddressDeny=any: its NIS lookup (an RPC datagram to the NIS server's portmapper) is sent from the unit's cgroup",
        nss,
        server.into(),
        strings(&[
            "udp-send",
            server,
            "--timeout-ms",
            &crate::scaled_arg(1000),
            "--count",
            "1",
        ]),
    );
    sc.servers.push(portmap);
    sc.client_cgroup = Some(cg.path.clone());
    sc.cgroups.push(cg);
    Ok(sc)
}

/// sbrown7792/duTime's README ("To serve the network, say so at install
/// time", and its Troubleshooting): "The unit ships with
/// `IPAddressAllow=localhost`, so a config change alone gives you a
/// service that starts cleanly, reports itself listening, holds a port
/// that `ss` confirms is open — and drops every packet from the network."
/// (systemd's IPAddressAllow=/IPAddressDeny= act on a unit's ingress as
/// on its egress: systemd/systemd PR #6764, "add simple eBPF-based per-unit
/// IP access lists", filters "just before the packet is delivered to
/// userspace".) Here a server 10.162.2.2 (routed: a LAN client
/// 10.162.1.2, router, server) runs the web UI's unit with
/// `IPAddressDeny=any` and `IPAddressAllow=localhost` (`sd_fw_ingress`
/// and `sd_fw_egress` on its cgroup); its config was edited to listen on
/// 0.0.0.0:8471. The client connects once to 10.162.2.2:8471. The
/// operator follows 10.162.2.2:8471. True cause: the SYN reached the
/// listening socket and the unit's cgroup BPF ingress program (systemd's
/// IP firewall: only localhost allowed) dropped it there, before TCP
/// answered; the client retransmits until its connect times out. Add
/// the clients' network to IPAddressAllow= (`--listen` writes both).
/// Checked by hand: `blind_stack_ctl_unit_allow_localhost` (no programs)
/// gets its echo.
fn unit_allow_localhost(deny: bool) -> Result<Scenario> {
    let nss = routed(162)?;
    let cg = if deny {
        unit_cgroup("dutime", &[LOCALHOST])?
    } else {
        Cgroup::new("dutime")?
    };
    let srv = serve_in(&cg.path, &nss[2], "tcp-listen", "0.0.0.0:8471", 15)?;
    let target = "10.162.2.2:8471";
    let mut sc = simple(
        if deny {
            "blind_stack_unit_allow_localhost"
        } else {
            "blind_stack_ctl_unit_allow_localhost"
        },
        "a web UI's systemd unit with IPAddressAllow=localhost listening on 0.0.0.0: a LAN client connects",
        nss,
        target.into(),
        tcp_connect(target),
    );
    sc.servers.push(srv);
    sc.cgroups.push(cg);
    Ok(sc)
}

/// A pod and its node: pod eth0 10.B.1.2/24 (gateway 10.B.1.1) — node
/// `lxc1` 10.B.1.1; the pod's eth0 sends complete checksums (tx offload
/// off: a veth would otherwise pass CHECKSUM_PARTIAL packets, never
/// verified). Returns [pod, node].
fn pod_on_node(p: &str, b: u8) -> Result<Vec<Netns>> {
    let (pod, node) = (ns(p, "pod")?, ns(p, "node")?);
    veth(&pod, "eth0", &node, "lxc1")?;
    pod.ip(&["addr", "add", &format!("10.{b}.1.2/24"), "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", &format!("10.{b}.1.1")])?;
    node.ip(&["addr", "add", &format!("10.{b}.1.1/24"), "dev", "lxc1"])?;
    fast_arp(&pod, "eth0")?;
    fast_arp(&node, "lxc1")?;
    tx_checksum_off(&pod, "eth0")?;
    Ok(vec![pod, node])
}

/// netbirdio/netbird PR #6861 ("[client] Clear stale UDP checksum in eBPF
/// XDP proxy after port rewrite"): "The eBPF XDP programs ... rewrite UDP
/// ports (... the DNS forwarder redirects `:53`) but left the UDP
/// checksum unchanged. On kernels that software-verify ... UDP checksums
/// this leaves a stale value, so a fraction of those packets are dropped
/// ... with `UDP_CSUM`"; the Kubernetes face of a stale UDP checksum is
/// flannel-io/flannel#1279 ("UDP: bad checksum on VXLAN interface":
/// "CoreDNS does not work", `nslookup` "connection timed out; no servers
/// could be reached", dmesg "UDP: bad checksum"). Here a node 10.163.1.1
/// whose DNS forwarder listens on 10.163.1.1:5353, and a pod 10.163.1.2
/// on its lxc1 that sends complete checksums; the forwarder's redirect
/// is a tc program on lxc1's ingress (`dns_fwd_redir`: DNS to
/// 10.163.1.1:53 goes to port 5353, the IP checksum fixed, the UDP one
/// not; its reverse on lxc1's egress, `dns_fwd_rev`, is right). The pod
/// asks one question to 10.163.1.1:53. The operator follows
/// 10.163.1.1:53. True cause: the redirect rewrote the destination port
/// without updating the UDP checksum; the node's UDP stack verified it
/// (UdpInCsumErrors, `nstat`) and dropped the query before the forwarder's
/// socket got it; the pod times out. Fix the program's checksum update
/// (bpf_l4_csum_replace, or clear the UDP checksum as netbird did).
/// Checked by hand: `blind_stack_ctl_dns_forwarder_stale_csum` (the
/// checksum fixed) gets its answer.
fn dns_forwarder_stale_csum(stale: bool) -> Result<Scenario> {
    let b = 163;
    let nss = pod_on_node(&unique_prefix(), b)?;
    let node_ip = Ipv4Addr::new(10, b, 1, 1);
    let fwd = serve(&nss[1], "dns-serve", "10.163.1.1:5353", 15)?;
    let pins = bpf_dir(&nss[1].name)?;
    let redir = if stale {
        dnat_stale_l4(UDP, node_ip, 53, node_ip, 5353)
    } else {
        dnat(UDP, node_ip, 53, node_ip, 5353)
    };
    attach(
        &nss[1],
        "lxc1",
        Dir::Ingress,
        Link::Clsact,
        &pins,
        "redir",
        &redir,
        "dns_fwd_redir",
    )?;
    attach(
        &nss[1],
        "lxc1",
        Dir::Egress,
        Link::Clsact,
        &pins,
        "rev",
        &rev_snat(UDP, node_ip, 5353, node_ip, 53),
        "dns_fwd_rev",
    )?;
    let target = "10.163.1.1:53";
    let mut sc = simple(
        if stale {
            "blind_stack_dns_forwarder_stale_csum"
        } else {
            "blind_stack_ctl_dns_forwarder_stale_csum"
        },
        "a node's DNS forwarder redirect (a tc program: :53 to :5353) rewrites a pod's query without fixing its UDP checksum",
        nss,
        target.into(),
        crate::blind_sock::dns_query(target, &[]),
    );
    sc.servers.push(fwd);
    sc.scratch.push(pins);
    Ok(sc)
}

/// projectcalico/calico#3145 ("TCP offloading on vxlan.calico adaptor
/// causing 63 second delays in VXLAN communications node->nodeport or
/// node->clusterip:port"): the NATed SYN reached the backend's node with a
/// TCP checksum that was not recomputed after the rewrite (the kernel's
/// vxlan checksum offload bug, flannel-io/flannel PR #1282: "The root
/// cause is the kernel bug"), the backend dropped it, and only a later
/// retransmission got through: 63 s (the SYN's retries); `ethtool
/// --offload ... tx off` worked around it. That kernel bug is fixed on
/// this kernel; the scene stands in for it with what a dataplane's bug
/// gives the same receiver: a NodePort DNAT in tc that leaves the TCP
/// checksum stale. Here a client 10.164.1.2 (its eth0 sends complete
/// checksums, as a wire delivers them) reaches the node 10.164.1.1 on
/// lxc1; the node's tc ingress program on lxc1 (`nodeport_dnat`) sends
/// 10.164.1.1:30080 to the backend pod 10.164.2.2:8080 on lxc2, fixing
/// the IP checksum but not the TCP one (the reply's reverse translation
/// on lxc1's egress, `nodeport_rev`, is right). The client connects once
/// to 10.164.1.1:30080. The operator follows 10.164.1.1:30080. True
/// cause: the DNAT left the TCP checksum stale; the backend pod's TCP
/// verified it (TcpInCsumErrors in the pod's namespace) and dropped the
/// SYN; the client retransmits until its connect times out. Fix the
/// program's checksum update (or, for the kernel bug, turn tx checksum
/// offload off on the vxlan device). Checked by hand:
/// `blind_stack_ctl_nodeport_stale_tcp_csum` (checksum fixed) connects.
fn nodeport_stale_tcp_csum(stale: bool) -> Result<Scenario> {
    let b = 164;
    let p = unique_prefix();
    let mut nss = pod_on_node(&p, b)?;
    let backend = ns(&p, "backend")?;
    veth(&nss[1], "lxc2", &backend, "eth0")?;
    nss[1].ip(&["addr", "add", "10.164.2.1/24", "dev", "lxc2"])?;
    nss[1].sysctl("net.ipv4.ip_forward", "1")?;
    backend.ip(&["addr", "add", "10.164.2.2/24", "dev", "eth0"])?;
    backend.ip(&["route", "add", "default", "via", "10.164.2.1"])?;
    fast_arp(&nss[1], "lxc2")?;
    fast_arp(&backend, "eth0")?;
    let web = listen(&backend, "10.164.2.2:8080", 15)?;
    let (node_ip, be_ip) = (Ipv4Addr::new(10, b, 1, 1), Ipv4Addr::new(10, b, 2, 2));
    let pins = bpf_dir(&nss[1].name)?;
    let prog = if stale {
        dnat_stale_l4(TCP, node_ip, 30080, be_ip, 8080)
    } else {
        dnat(TCP, node_ip, 30080, be_ip, 8080)
    };
    attach(
        &nss[1],
        "lxc1",
        Dir::Ingress,
        Link::Clsact,
        &pins,
        "dnat",
        &prog,
        "nodeport_dnat",
    )?;
    attach(
        &nss[1],
        "lxc1",
        Dir::Egress,
        Link::Clsact,
        &pins,
        "rev",
        &rev_snat(TCP, be_ip, 8080, node_ip, 30080),
        "nodeport_rev",
    )?;
    nss.push(backend);
    let target = "10.164.1.1:30080";
    let mut sc = simple(
        if stale {
            "blind_stack_nodeport_stale_tcp_csum"
        } else {
            "blind_stack_ctl_nodeport_stale_tcp_csum"
        },
        "a NodePort DNAT in tc that leaves the TCP checksum stale: the backend pod drops the rewritten SYN",
        nss,
        target.into(),
        tcp_connect(target),
    );
    sc.servers.push(web);
    sc.scratch.push(pins);
    Ok(sc)
}

/// firewalld's INPUT rules on a CentOS 7 control plane (its iptables
/// backend): established and loopback traffic, then the zone's allowed
/// services (ssh only), then REJECT with icmp-host-prohibited.
const FIREWALLD_PUBLIC: &str = "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:INPUT_ZONES - [0:0]
:IN_public - [0:0]
:IN_public_allow - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -j INPUT_ZONES
-A INPUT -m conntrack --ctstate INVALID -j DROP
-A INPUT -j REJECT --reject-with icmp-host-prohibited
-A INPUT_ZONES -g IN_public
-A IN_public -j IN_public_allow
-A IN_public -p icmp -j ACCEPT
-A IN_public_allow -p tcp -m tcp --dport 22 -m conntrack --ctstate NEW -j ACCEPT
COMMIT
";

/// An honest trap. kubernetes/kubeadm#725 ("No default iptable rule to
/// allow incoming traffic to port 6443 on master (Kubernetes 1.9.3)"):
/// on CentOS 7.4 "nodes couldn't reach master API on port 6443"
/// (`kubeadm join` "Failed to request cluster info, will try again");
/// "the default firewall configuration on master node, not permitting
/// incoming traffic to port 6443 in table IN_public_allow" (firewalld,
/// kubernetes/kubeadm#21 "firewalld breaks kubeadm"). Here the worker's
/// kubelet runs in a hardened unit, `IPAddressDeny=any` with
/// `IPAddressAllow=10.165.0.0/16 localhost` (systemd's `sd_fw_egress`
/// and `sd_fw_ingress` on its cgroup), on a node 10.165.1.2 (routed:
/// worker, router, control plane 10.165.2.2, where the API server listens
/// on 6443 and firewalld's public zone allows ssh only, then REJECT with
/// icmp-host-prohibited). The kubelet connects once to 10.165.2.2:6443.
/// The operator follows 10.165.2.2:6443. It looks like the unit's IP
/// firewall (a cgroup BPF egress program runs on every packet the
/// kubelet sends), but that program allows the control plane. True
/// cause: the control plane's firewalld (INPUT: REJECT
/// --reject-with icmp-host-prohibited, 6443 not in IN_public_allow)
/// rejected the SYN; the kubelet gets "no route to host". Open 6443/tcp
/// in the zone (`firewall-cmd --add-port=6443/tcp`). Checked by hand:
/// `blind_stack_ctl_trap_kubelet_firewalld` (no firewalld rules) connects
/// through the same unit firewall.
fn trap_kubelet_firewalld(firewalld: bool) -> Result<Scenario> {
    let nss = routed(165)?;
    let target = "10.165.2.2:6443";
    let api = listen(&nss[2], target, 15)?;
    if firewalld {
        nss[2].exec_file(&["iptables-restore"], FIREWALLD_PUBLIC)?;
    }
    let cg = unit_cgroup("kubelet", &[(Ipv4Addr::new(10, 165, 0, 0), 16), LOCALHOST])?;
    let mut sc = simple(
        if firewalld {
            "blind_stack_trap_kubelet_firewalld"
        } else {
            "blind_stack_ctl_trap_kubelet_firewalld"
        },
        "a kubelet in a unit with IPAddressDeny=any and the cluster allowed connects to the API server behind the control plane's firewalld",
        nss,
        target.into(),
        tcp_connect(target),
    );
    sc.servers.push(api);
    sc.client_cgroup = Some(cg.path.clone());
    sc.cgroups.push(cg);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_STACK {
            assert!(n.starts_with("blind_stack_"), "{n}");
            assert!(!n.starts_with("blind_stack_ctl_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
        assert!(build("blind_stack_nope").is_none());
    }

    #[test]
    fn prefixes_read_as_a_little_endian_load_reads_them() {
        assert_eq!(prefix_le(Ipv4Addr::new(127, 0, 0, 0), 8), (127, 0xff));
        let (n, m) = prefix_le(Ipv4Addr::new(10, 165, 0, 0), 16);
        assert_eq!((n, m), (i32::from_le_bytes([10, 165, 0, 0]), 0xffff));
        assert_eq!(prefix_le(Ipv4Addr::new(1, 2, 3, 4), 0), (0, 0));
    }

    /// Every jump lands on `r0 = 1` (allow); the fall-through denies.
    #[test]
    fn the_firewall_jumps_to_allow_and_falls_through_to_deny() {
        let p = ip_firewall(true, &[LOCALHOST, (Ipv4Addr::new(10, 165, 0, 0), 16)]);
        let is: Vec<&[u8]> = p.chunks(8).collect();
        let allow = is.len() - 2;
        assert_eq!((is[allow][0], is[allow][4]), (0xb7, 1));
        assert_eq!((is[allow - 2][0], is[allow - 2][4]), (0xb7, 0));
        let mut jumps = 0;
        for (i, ins) in is.iter().enumerate() {
            if matches!(ins[0], 0x56 | 0x2d | 0x16) {
                jumps += 1;
                let off = i16::from_le_bytes([ins[2], ins[3]]);
                assert_eq!(i + 1 + usize::try_from(off).unwrap(), allow, "insn {i}");
            }
        }
        assert_eq!(jumps, 4);
        // Egress reads the destination (16), ingress the source (12).
        let load = |p: &[u8]| {
            p.chunks(8)
                .find(|i| i[0] == 0x61 && i[1] & 0x0f == 5)
                .map(|i| i16::from_le_bytes([i[2], i[3]]))
        };
        assert_eq!(load(&p), Some(16));
        assert_eq!(load(&ip_firewall(false, &[])), Some(12));
    }
}
