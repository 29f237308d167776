//! Blind scenes of one class of cause: packets dropped by the BPF
//! programs of an eBPF dataplane (Cilium, Calico in eBPF mode). Each
//! rebuilds, in namespaces of its own, a failure reported in a public
//! issue thread, cited in its doc comment, written without knowledge of
//! tracer's rules. The programs are a few raw instructions of the tests'
//! own (no compiler here), named as the dataplane names its programs, and
//! attached where it attaches them: tc (a clsact qdisc's filter in
//! direct-action mode, or a tcx link on kernels >= 6.6) on a pod's
//! host-side veth or a node's device, and XDP (generic mode) on a node's
//! uplink. They let ARP through (a drop of ARP would be a neighbour
//! failure, another class). One scene is an honest trap: the programs
//! are there and pass everything, and something else fails.
//!
//! Address ranges: 10.230, 10.231, 10.233 and 10.234 with third octets
//! from 100 to 199 (the other scenes use the low ones). Pins live in a
//! directory of bpffs of the scene's own (`/sys/fs/bpf/tracer-PREFIX`),
//! removed with the scene; the tc filters, tcx links and XDP attachments
//! go with their devices, with the namespaces. `scenarios::build` falls
//! back to [`build`] (through `blind_scenes::build`, `blind_l2::build`,
//! `blind_tunnel::build`, `blind_sysctl::build`, `blind_sock::build` and
//! `blind_ct::build`), which falls back to [`crate::blind_xdp::build`]
//! (then [`crate::blind_veth::build`]).

use std::{os::fd::RawFd, path::PathBuf};

use anyhow::{Context, Result, bail};

use crate::{
    netns::{Netns, unique_prefix, veth},
    redirect::{bpf, insn, load, pin},
    scenarios::{Scenario, ScratchDir, listen, ns, serve, simple, strings, tcp_connect},
};

pub const BLIND_BPF: &[&str] = &[
    "blind_bpf_egress_policy_deny",
    "blind_bpf_dns_answer_denied",
    "blind_bpf_hostport_masquerade_denied",
    "blind_bpf_xdp_lb_remote_backend",
    "blind_bpf_stale_calico_filter",
    "blind_bpf_hostport_lost_refused",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_bpf_egress_policy_deny" => egress_policy_deny(),
        "blind_bpf_dns_answer_denied" => dns_answer_denied(),
        "blind_bpf_hostport_masquerade_denied" => hostport_masquerade_denied(),
        "blind_bpf_xdp_lb_remote_backend" => xdp_lb_remote_backend(),
        "blind_bpf_stale_calico_filter" => stale_calico_filter(),
        "blind_bpf_hostport_lost_refused" => hostport_lost_refused(),
        _ => return crate::blind_xdp::build(name),
    })
}

/// include/uapi/linux/bpf.h
const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_TYPE_PROG_ARRAY: u32 = 3;
pub(crate) const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
pub(crate) const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_FUNC_TAIL_CALL: i32 = 12;
/// TC_ACT_OK (TCX_PASS for tcx): what Cilium's CTX_ACT_OK is.
const TC_OK: i32 = 0;
/// TC_ACT_SHOT (TCX_DROP).
const TC_SHOT: i32 = 2;
const XDP_DROP: i32 = 1;
pub(crate) const XDP_PASS: i32 = 2;

/// Where a program finds the packet: __sk_buff.data and .data_end (tc),
/// xdp_md.data and .data_end (XDP).
#[derive(Clone, Copy)]
pub(crate) enum Hook {
    Tc,
    Xdp,
}

/// One field test of [`matcher`]: the `size` (a BPF_LDX|BPF_MEM opcode:
/// 0x61 u32, 0x69 u16, 0x71 u8) bytes at `off` from the frame's start
/// are (`equal`) or are not (`!equal`) `val`, as a little-endian load of
/// the network-order bytes reads them.
pub(crate) struct Field {
    size: u8,
    off: i16,
    val: i32,
    equal: bool,
}

const U32: u8 = 0x61;
const U16: u8 = 0x69;
const U8: u8 = 0x71;

/// Ethertype IPv4 (0x0800 in network order).
pub(crate) const IS_IPV4: Field = Field {
    size: U16,
    off: 12,
    val: 0x0008,
    equal: true,
};

/// The IPv4 protocol is `proto` (6 TCP, 17 UDP).
pub(crate) fn proto(proto: i32) -> Field {
    Field {
        size: U8,
        off: 14 + 9,
        val: proto,
        equal: true,
    }
}

/// The IPv4 source (`src`) or destination address is (`equal`) `a`.
pub(crate) fn addr(src: bool, a: std::net::Ipv4Addr, equal: bool) -> Field {
    Field {
        size: U32,
        off: if src { 14 + 12 } else { 14 + 16 },
        val: i32::from_le_bytes(a.octets()),
        equal,
    }
}

/// The L4 source (`src`) or destination port is `port` (a 20-byte IPv4
/// header, as the scenes' packets have).
pub(crate) fn port(src: bool, port: u16) -> Field {
    Field {
        size: U16,
        off: if src { 34 } else { 36 },
        val: i32::from(port.to_be()),
        equal: true,
    }
}

/// A program that returns `hit` for a frame of at least `len` bytes whose
/// fields all pass their tests, else `miss`: direct packet access after
/// one bounds check, then a load and a 32-bit compare per field.
pub(crate) fn matcher(hook: Hook, len: i32, fields: &[Field], hit: i32, miss: i32) -> Vec<u8> {
    let (data, end) = match hook {
        Hook::Tc => (76, 80),
        Hook::Xdp => (0, 4),
    };
    let n = fields.len() as i16;
    let mut p = vec![
        insn(0x61, 2, 1, data, 0), // r2 = data
        insn(0x61, 3, 1, end, 0),  // r3 = data_end
        insn(0xbf, 4, 2, 0, 0),    // r4 = r2
        insn(0x07, 4, 0, 0, len),  // r4 += len
        // if r4 > r3 goto miss (the miss label is at 7 + 2n).
        insn(0x2d, 4, 3, 2 + 2 * n, 0),
    ];
    for (i, f) in fields.iter().enumerate() {
        let i = i as i16;
        p.push(insn(f.size, 5, 2, f.off, 0)); // r5 = *(size *)(r2 + off)
        // JMP32: if w5 != val (JNE), or == val (JEQ), goto miss.
        let op = if f.equal { 0x56 } else { 0x16 };
        p.push(insn(op, 5, 0, 2 * n - 2 * i, f.val));
    }
    p.extend([
        insn(0xb7, 0, 0, 0, hit),
        insn(0x95, 0, 0, 0, 0),
        insn(0xb7, 0, 0, 0, miss),
        insn(0x95, 0, 0, 0, 0),
    ]);
    p.concat()
}

/// A program that returns `ret` for every packet.
fn constant(ret: i32) -> Vec<u8> {
    [insn(0xb7, 0, 0, 0, ret), insn(0x95, 0, 0, 0, 0)].concat()
}

/// A directory of bpffs of the scene's own, removed (with its pins) with
/// the scene.
pub(crate) fn bpf_dir(prefix: &str) -> Result<ScratchDir> {
    let mounts = std::fs::read_to_string("/proc/self/mounts")?;
    if !mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1) == Some(&"/sys/fs/bpf") && f.get(2) == Some(&"bpf")
    }) {
        bail!("bpffs is not mounted at /sys/fs/bpf (cargo xtask setup mounts it)");
    }
    let dir = PathBuf::from(format!("/sys/fs/bpf/tracer-{prefix}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
    Ok(ScratchDir(dir))
}

/// Load `prog` as `prog_type` named `name` (the kernel keeps 15 bytes of
/// it) and pin it as `file` in `dir`; the pin's path.
pub(crate) fn pinned(
    dir: &ScratchDir,
    file: &str,
    prog_type: u32,
    prog: &[u8],
    name: &str,
) -> Result<String> {
    let fd = load(prog_type, 0, prog, name)?;
    let path = dir.at(file);
    let r = pin(fd, &path);
    unsafe { libc::close(fd) };
    r.map(|()| path)
}

/// A clsact qdisc on `dev` of `n` (once per device).
pub(crate) fn clsact(n: &Netns, dev: &str) -> Result<()> {
    crate::bpfdrop::clsact_add(&n.path(), dev)
}

/// The pinned program `pin` as a direct-action bpf filter on `dev`'s
/// `dir` ("ingress" or "egress") hook of its clsact qdisc.
pub(crate) fn tc_filter(n: &Netns, dev: &str, dir: &str, pin: &str) -> Result<()> {
    crate::bpfdrop::tc_filter_pinned(&n.path(), dev, dir, pin)
}

/// `prog` (sched_cls, named `name`) attached to `dev` of `n` by a tcx
/// link (BPF_LINK_CREATE, BPF_TCX_INGRESS or BPF_TCX_EGRESS: kernels >=
/// 6.6), as Cilium >= 1.16 attaches its programs there (this bpftool has
/// no `net attach tcx_*`). The link is created from a thread that entered
/// the namespace (the ifindex is resolved in the caller's), and pinned as
/// `file` in `dir` so it outlives the descriptor. Before 6.6, a clsact
/// filter instead.
pub(crate) fn tcx(
    n: &Netns,
    dev: &str,
    egress: bool,
    dir: &ScratchDir,
    file: &str,
    prog: &[u8],
    name: &str,
) -> Result<()> {
    if !crate::bpfdrop::tcx_supported() {
        // Before Linux 6.6 there is no tcx: the same program as a clsact
        // filter, where Cilium attaches it on those kernels (the qdisc may
        // be there already).
        let p = pinned(dir, file, BPF_PROG_TYPE_SCHED_CLS, prog, name)?;
        let _ = clsact(n, dev);
        return tc_filter(n, dev, if egress { "egress" } else { "ingress" }, &p);
    }
    let ifindex = crate::bpfdrop::ifindex(n, dev)?;
    let fd = load(BPF_PROG_TYPE_SCHED_CLS, 0, prog, name)?;
    let linked = crate::bpfdrop::tcx_link(&n.path(), fd, ifindex, egress);
    unsafe { libc::close(fd) };
    let link = linked?;
    let pinned = pin(link, &dir.at(file));
    unsafe { libc::close(link) };
    pinned
}

/// The pinned XDP program `pin` on `dev` of `n`, in generic mode (what
/// works on a veth here).
pub(crate) fn xdp_generic(n: &Netns, dev: &str, pin: &str) -> Result<()> {
    crate::bpfdrop::xdp_generic_pinned(&n.path(), dev, pin)
}

/// cilium/cilium#40228 ("Add 'reject' option to return TCP RST/ICMP
/// instead of silent DROP for policy-denied flows"): a pod selected by a
/// CiliumNetworkPolicy whose egress allows only `toFQDNs: *.github.com`
/// and DNS to kube-dns connects elsewhere; Cilium drops the SYN silently
/// and the client retransmits until its connect timeout ("the request
/// appears to hang"). Here the pod's host-side veth lxc0 has Cilium's
/// from-container program `cil_from_container` on its tc ingress, by a
/// tcx link (Cilium 1.17 on a kernel >= 6.6): it drops IPv4 TCP to every
/// address but 10.230.100.9 (what the FQDN rule allowed). The pod
/// connects to 10.230.100.2:443, a server that is up and listening. True
/// cause: the pod's egress policy, enforced by the from-container
/// program on lxc0, denies the destination (a silent drop, no RST).
fn egress_policy_deny() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, world) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "world")?);
    veth(&pod, "eth0", &node, "lxc0")?;
    veth(&node, "eth0", &world, "eth0")?;
    pod.ip(&["addr", "add", "10.230.101.2/24", "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", "10.230.101.1"])?;
    node.ip(&["addr", "add", "10.230.101.1/24", "dev", "lxc0"])?;
    node.ip(&["addr", "add", "10.230.100.1/24", "dev", "eth0"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    world.ip(&["addr", "add", "10.230.100.2/24", "dev", "eth0"])?;
    world.ip(&["route", "add", "default", "via", "10.230.100.1"])?;
    let dir = bpf_dir(&p)?;
    let prog = matcher(
        Hook::Tc,
        34,
        &[
            IS_IPV4,
            proto(6),
            addr(false, "10.230.100.9".parse()?, false),
        ],
        TC_SHOT,
        TC_OK,
    );
    tcx(
        &node,
        "lxc0",
        false,
        &dir,
        "lxc0-from-container",
        &prog,
        "cil_from_container",
    )?;
    let target = "10.230.100.2:443".to_string();
    let srv = listen(&world, &target, 15)?;
    let mut sc = simple(
        "blind_bpf_egress_policy_deny",
        "Cilium's from-container program (tcx ingress of the pod's lxc0) denies the pod's egress TCP to a server outside its FQDN allow-list",
        vec![pod, node, world],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// cilium/cilium#21391 ("dns lookup answers are dropped sometimes"): with
/// an FQDN policy, DNS resolution was slow, and `cilium monitor` showed
/// the answers from the DNS server (10.35.133.77:53) to the client denied
/// by the client endpoint's ingress policy ("ingress, action deny, match
/// none", then "xx drop (Policy denied)"): the answer was not taken as
/// the reply of the query it answered. Here a client pod asks the
/// coredns pod (10.230.112.2:53, same node) over UDP. The query passes
/// `cil_from_container` (clsact tc ingress of the client's lxc0, which
/// allows everything); coredns answers; the answer is dropped by
/// `cil_to_container` on lxc0's tc egress (clsact), which denies UDP from
/// port 53 to the pod, on every query (as on the flows that failed in
/// the report). True cause: the client's ingress policy (the
/// to-container program on the client's lxc0) drops the DNS answers; the
/// query, coredns and the routes are fine.
fn dns_answer_denied() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, dns) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "coredns")?);
    veth(&pod, "eth0", &node, "lxc0")?;
    veth(&dns, "eth0", &node, "lxc1")?;
    pod.ip(&["addr", "add", "10.230.111.2/24", "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", "10.230.111.1"])?;
    dns.ip(&["addr", "add", "10.230.112.2/24", "dev", "eth0"])?;
    dns.ip(&["route", "add", "default", "via", "10.230.112.1"])?;
    node.ip(&["addr", "add", "10.230.111.1/24", "dev", "lxc0"])?;
    node.ip(&["addr", "add", "10.230.112.1/24", "dev", "lxc1"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let dir = bpf_dir(&p)?;
    let from = pinned(
        &dir,
        "lxc0-from-container",
        BPF_PROG_TYPE_SCHED_CLS,
        &constant(TC_OK),
        "cil_from_container",
    )?;
    let to = pinned(
        &dir,
        "lxc0-to-container",
        BPF_PROG_TYPE_SCHED_CLS,
        &matcher(
            Hook::Tc,
            42,
            &[IS_IPV4, proto(17), port(true, 53)],
            TC_SHOT,
            TC_OK,
        ),
        "cil_to_container",
    )?;
    clsact(&node, "lxc0")?;
    tc_filter(&node, "lxc0", "ingress", &from)?;
    tc_filter(&node, "lxc0", "egress", &to)?;
    let target = "10.230.112.2:53".to_string();
    let srv = serve(&dns, "dns-serve", &target, 15)?;
    let mut sc = simple(
        "blind_bpf_dns_answer_denied",
        "a pod's DNS query reaches coredns; the answer is dropped by Cilium's to-container program (clsact egress of the pod's lxc0)",
        vec![pod, node, dns],
        target.clone(),
        strings(&[
            "dns-query",
            &target,
            "kubernetes.default.svc.cluster.local",
            "--timeout-ms",
            &crate::scaled_arg(1000),
        ]),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// cilium/cilium#34517 ("Ingress policy drops pod-to-hostport traffic on
/// tunnel routing (needs to allow remote-node identity)"): an ingress
/// policy of pod2 (node2) allows pod1 (node1), yet pod1's connections to
/// pod2's hostPort on node2 are dropped: node1 masquerades them to its
/// own address, node2's hostPort DNAT sends them to pod2, and pod2's
/// ingress policy sees a remote-node source ("xx drop (Policy denied)
/// ... to endpoint 682 ... identity remote-node->30332: 172.21.0.4:40736
/// -> 10.244.2.10:8080 tcp SYN", at bpf_lxc.c). Here node1 masquerades
/// pod traffic leaving eth0, node2 DNATs 10.231.100.2:8080 (the
/// hostPort, as the portmap plugin's CNI-HOSTPORT-DNAT does) to pod2
/// 10.231.102.2:8080, and node2's lxc0 has `cil_to_container` on its tc
/// egress by a tcx link: it allows TCP from pod1 (10.231.101.2) only.
/// pod1 connects to the hostPort. True cause: pod2's ingress policy (the
/// to-container program on node2's lxc0) denies the connection because
/// node1's masquerading replaced pod1's address by node1's (10.231.100.1);
/// the policy must allow the remote-node identity (or the traffic must
/// keep its source).
fn hostport_masquerade_denied() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod1, n1, n2, pod2) = (
        ns(&p, "pod1")?,
        ns(&p, "node1")?,
        ns(&p, "node2")?,
        ns(&p, "pod2")?,
    );
    veth(&pod1, "eth0", &n1, "lxc0")?;
    veth(&n1, "eth0", &n2, "eth0")?;
    veth(&n2, "lxc0", &pod2, "eth0")?;
    pod1.ip(&["addr", "add", "10.231.101.2/24", "dev", "eth0"])?;
    pod1.ip(&["route", "add", "default", "via", "10.231.101.1"])?;
    n1.ip(&["addr", "add", "10.231.101.1/24", "dev", "lxc0"])?;
    n1.ip(&["addr", "add", "10.231.100.1/24", "dev", "eth0"])?;
    n2.ip(&["addr", "add", "10.231.100.2/24", "dev", "eth0"])?;
    n2.ip(&["addr", "add", "10.231.102.1/24", "dev", "lxc0"])?;
    n2.ip(&["route", "add", "10.231.101.0/24", "via", "10.231.100.1"])?;
    n1.ip(&["route", "add", "10.231.102.0/24", "via", "10.231.100.2"])?;
    pod2.ip(&["addr", "add", "10.231.102.2/24", "dev", "eth0"])?;
    pod2.ip(&["route", "add", "default", "via", "10.231.102.1"])?;
    for n in [&n1, &n2] {
        n.sysctl("net.ipv4.ip_forward", "1")?;
    }
    // Pod traffic to a node address leaves node1 masqueraded.
    n1.exec(&[
        "nft",
        "add table ip cilium; add chain ip cilium post { type nat hook postrouting priority 100; }; add rule ip cilium post ip saddr 10.231.101.0/24 ip daddr 10.231.100.0/24 oifname eth0 masquerade",
    ])?;
    n2.exec(&[
        "nft",
        "add table ip cni; add chain ip cni CNI-HOSTPORT-DNAT { type nat hook prerouting priority -100; }; add rule ip cni CNI-HOSTPORT-DNAT ip daddr 10.231.100.2 tcp dport 8080 dnat to 10.231.102.2:8080",
    ])?;
    let dir = bpf_dir(&p)?;
    let prog = matcher(
        Hook::Tc,
        34,
        &[
            IS_IPV4,
            proto(6),
            addr(true, "10.231.101.2".parse()?, false),
        ],
        TC_SHOT,
        TC_OK,
    );
    tcx(
        &n2,
        "lxc0",
        true,
        &dir,
        "lxc0-to-container",
        &prog,
        "cil_to_container",
    )?;
    let srv = listen(&pod2, "10.231.102.2:8080", 15)?;
    let target = "10.231.100.2:8080".to_string();
    let mut sc = simple(
        "blind_bpf_hostport_masquerade_denied",
        "pod1 to pod2's hostPort on node2: node1 masquerades, node2 DNATs, Cilium's to-container program (tcx egress of pod2's lxc0) allows pod1 only",
        vec![pod1, n1, n2, pod2],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// cilium/cilium#18979 ("Access to LB outside the cluster timeout"):
/// with Cilium's XDP acceleration, connections from outside the cluster
/// to a LoadBalancer service timed out; debugging the BPF code showed
/// the packets discarded by the XDP program (bpf_xdp.c, tail_lb_ipv4 ->
/// nodeport_lb4): the backend was not local, the tail call to the NAT
/// program was missed and the program returned DROP_MISSED_TAIL_CALL.
/// Here node1's uplink eth0 has generic XDP `cil_xdp_entry` that drops
/// TCP to the VIP 10.233.196.10 (the service is found, its backend is on
/// another node); behind it node1 would DNAT 10.233.196.10:80 to the
/// backend 10.233.102.2:8080 on node2 (nft prerouting) and route it
/// there. A client outside connects to the VIP. True cause: node1's XDP
/// program drops the LB traffic for a remote backend before the stack
/// sees it (XDP acceleration; `loadBalancer.acceleration=disabled`
/// avoids it).
fn xdp_lb_remote_backend() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, n1, n2, pod) = (
        ns(&p, "client")?,
        ns(&p, "node1")?,
        ns(&p, "node2")?,
        ns(&p, "pod")?,
    );
    veth(&client, "eth0", &n1, "eth0")?;
    veth(&n1, "eth1", &n2, "eth0")?;
    veth(&n2, "lxc0", &pod, "eth0")?;
    client.ip(&["addr", "add", "10.233.101.2/24", "dev", "eth0"])?;
    client.ip(&["route", "add", "default", "via", "10.233.101.1"])?;
    n1.ip(&["addr", "add", "10.233.101.1/24", "dev", "eth0"])?;
    n1.ip(&["addr", "add", "10.233.100.1/24", "dev", "eth1"])?;
    n1.ip(&["route", "add", "10.233.102.0/24", "via", "10.233.100.2"])?;
    n2.ip(&["addr", "add", "10.233.100.2/24", "dev", "eth0"])?;
    n2.ip(&["addr", "add", "10.233.102.1/24", "dev", "lxc0"])?;
    n2.ip(&["route", "add", "10.233.101.0/24", "via", "10.233.100.1"])?;
    pod.ip(&["addr", "add", "10.233.102.2/24", "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", "10.233.102.1"])?;
    for n in [&n1, &n2] {
        n.sysctl("net.ipv4.ip_forward", "1")?;
    }
    n1.exec(&[
        "nft",
        "add table ip lb; add chain ip lb pre { type nat hook prerouting priority -100; }; add rule ip lb pre ip daddr 10.233.196.10 tcp dport 80 dnat to 10.233.102.2:8080",
    ])?;
    let dir = bpf_dir(&p)?;
    let xdp = pinned(
        &dir,
        "eth0-xdp",
        BPF_PROG_TYPE_XDP,
        &matcher(
            Hook::Xdp,
            34,
            &[
                IS_IPV4,
                proto(6),
                addr(false, "10.233.196.10".parse()?, true),
            ],
            XDP_DROP,
            XDP_PASS,
        ),
        "cil_xdp_entry",
    )?;
    xdp_generic(&n1, "eth0", &xdp)?;
    let srv = listen(&pod, "10.233.102.2:8080", 15)?;
    let target = "10.233.196.10:80".to_string();
    let mut sc = simple(
        "blind_bpf_xdp_lb_remote_backend",
        "a client outside connects to a LoadBalancer VIP; Cilium's XDP program on node1's uplink drops it (backend on another node, missed tail call)",
        vec![client, n1, n2, pod],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// A Calico host-endpoint program left behind: IPv4 goes to a tail call
/// into `jump` (a program array), and when the call fails (the array is
/// empty) the packet is denied (TC_ACT_SHOT); other protocols (ARP) pass.
fn calico_hep(jump: RawFd) -> Vec<u8> {
    [
        insn(0x61, 2, 1, 16, 0),     // r2 = skb->protocol
        insn(0x55, 2, 0, 6, 0x0008), // if r2 != htons(ETH_P_IP) goto pass
        insn(0x18, 2, 1, 0, jump),   // r2 = map (BPF_PSEUDO_MAP_FD)
        insn(0, 0, 0, 0, 0),
        insn(0xb7, 3, 0, 0, 0), // r3 = 0 (index)
        insn(0x85, 0, 0, 0, BPF_FUNC_TAIL_CALL),
        insn(0xb7, 0, 0, 0, TC_SHOT), // tail call missed: deny
        insn(0x95, 0, 0, 0, 0),
        insn(0xb7, 0, 0, 0, TC_OK), // pass:
        insn(0x95, 0, 0, 0, 0),
    ]
    .concat()
}

/// An empty program array named `name` (what Calico's jump maps are).
fn prog_array(name: &str) -> Result<RawFd> {
    let mut attr = [0u8; 64];
    attr[0..4].copy_from_slice(&BPF_MAP_TYPE_PROG_ARRAY.to_le_bytes());
    attr[4..8].copy_from_slice(&4u32.to_le_bytes()); // key_size
    attr[8..12].copy_from_slice(&4u32.to_le_bytes()); // value_size
    attr[12..16].copy_from_slice(&8u32.to_le_bytes()); // max_entries
    let n = name.as_bytes();
    attr[28..28 + n.len().min(15)].copy_from_slice(&n[..n.len().min(15)]);
    Ok(bpf(BPF_MAP_CREATE, &mut attr).context("BPF_MAP_CREATE prog_array")? as RawFd)
}

/// projectcalico/calico#6739 ("ebpf mode can break host networking when
/// calico-node rotates"): when a calico-node pod (eBPF mode) terminated,
/// the node became unreachable and "other connectivity is broken": the
/// programs' prog_array (jump) maps were emptied while the tc ingress and
/// egress filters stayed on the uplink ens5, so every packet was denied;
/// the workaround was `tc filter del dev ens5 ingress` / `egress` (or
/// deleting the clsact qdisc). Here the node's ens5 keeps Calico's
/// host-endpoint filters (clsact, direct-action) `calico_from_host_ep`
/// (ingress) and `calico_to_host_ep` (egress), which the kernel names
/// `calico_from_hos` and `calico_to_host_`: each tail-calls into its
/// empty `cali_jump` map and denies IPv4 when the call fails (ARP passes).
/// The node's own DNS query to its upstream resolver 10.234.100.53:53 is
/// dropped at ens5's tc egress. True cause: stale Calico tc programs on
/// ens5 whose jump maps are empty (calico-node gone); remove the filters
/// (or the clsact qdisc), or restart calico-node.
fn stale_calico_filter() -> Result<Scenario> {
    let p = unique_prefix();
    let (node, resolver) = (ns(&p, "node")?, ns(&p, "resolver")?);
    veth(&node, "ens5", &resolver, "eth0")?;
    node.ip(&["addr", "add", "10.234.100.1/24", "dev", "ens5"])?;
    resolver.ip(&["addr", "add", "10.234.100.53/24", "dev", "eth0"])?;
    let dir = bpf_dir(&p)?;
    clsact(&node, "ens5")?;
    for (hook, name) in [
        ("ingress", "calico_from_host_ep"),
        ("egress", "calico_to_host_ep"),
    ] {
        let jump = prog_array("cali_jump")?;
        let prog = pinned(
            &dir,
            &format!("ens5-{hook}"),
            BPF_PROG_TYPE_SCHED_CLS,
            &calico_hep(jump),
            name,
        );
        // The program holds the map.
        unsafe { libc::close(jump) };
        tc_filter(&node, "ens5", hook, &prog?)?;
    }
    let target = "10.234.100.53:53".to_string();
    let srv = serve(&resolver, "dns-serve", &target, 15)?;
    let mut sc = simple(
        "blind_bpf_stale_calico_filter",
        "the node's DNS query to its upstream resolver: Calico's tc filters left on ens5 (jump maps emptied) deny everything",
        vec![node, resolver],
        target.clone(),
        strings(&[
            "dns-query",
            &target,
            "registry.example.com",
            "--timeout-ms",
            &crate::scaled_arg(1000),
        ]),
    );
    sc.servers.push(srv);
    sc.scratch.push(dir);
    Ok(sc)
}

/// The honest trap. cilium/cilium#32805 ("Cilium sporadically loses track
/// of HostPort associated with daemonset pods"): after a rollout of a
/// daemonset with a hostPort, the hostPort stopped being served
/// (it was gone from `cilium service list`) and clients got "Connection
/// refused" from HOST_IP:29472; restarting the Cilium agent restored it.
/// Here the node's uplink eth0 has Cilium's `cil_from_netdev` (tc
/// ingress) and `cil_to_netdev` (tc egress), clsact filters (the report's
/// kernel, 5.10, has no tcx), both passing every packet; the daemonset's
/// pod listens on 10.234.112.2:29472, but nothing translates the node's
/// 10.234.110.1:29472 to it any more, so a client's SYN reaches the
/// node's own stack, where nothing listens: the node answers RST. True
/// cause: the hostPort mapping (Cilium's service entry for it) is
/// missing, so the connection lands on the node, which has no listener
/// on 29472; the BPF programs on eth0 passed the packets and did not
/// drop anything.
fn hostport_lost_refused() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, node, pod) = (ns(&p, "client")?, ns(&p, "node")?, ns(&p, "pod")?);
    veth(&client, "eth0", &node, "eth0")?;
    veth(&node, "lxc0", &pod, "eth0")?;
    client.ip(&["addr", "add", "10.234.110.2/24", "dev", "eth0"])?;
    client.ip(&["route", "add", "default", "via", "10.234.110.1"])?;
    node.ip(&["addr", "add", "10.234.110.1/24", "dev", "eth0"])?;
    node.ip(&["addr", "add", "10.234.112.1/24", "dev", "lxc0"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    pod.ip(&["addr", "add", "10.234.112.2/24", "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", "10.234.112.1"])?;
    let dir = bpf_dir(&p)?;
    clsact(&node, "eth0")?;
    for (hook, name) in [("ingress", "cil_from_netdev"), ("egress", "cil_to_netdev")] {
        let prog = pinned(
            &dir,
            &format!("eth0-{hook}"),
            BPF_PROG_TYPE_SCHED_CLS,
            &constant(TC_OK),
            name,
        )?;
        tc_filter(&node, "eth0", hook, &prog)?;
    }
    let srv = listen(&pod, "10.234.112.2:29472", 15)?;
    let target = "10.234.110.1:29472".to_string();
    let mut sc = simple(
        "blind_bpf_hostport_lost_refused",
        "a client to a daemonset's hostPort whose mapping Cilium lost: its BPF programs on eth0 pass the SYN, the node has no listener and resets",
        vec![client, node, pod],
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

    /// Every jump of a matcher lands on its miss label, and the program
    /// ends with the two returns.
    #[test]
    fn matcher_jumps_land_on_the_miss_return() {
        let fields = [IS_IPV4, proto(6), port(false, 443)];
        let p = matcher(Hook::Tc, 38, &fields, TC_SHOT, TC_OK);
        let insns: Vec<&[u8]> = p.chunks(8).collect();
        assert_eq!(insns.len(), 5 + 2 * fields.len() + 4);
        let miss = insns.len() - 2;
        assert_eq!(insns[miss][0], 0xb7);
        assert_eq!(
            i32::from_le_bytes(insns[miss][4..8].try_into().unwrap()),
            TC_OK
        );
        for (i, ins) in insns.iter().enumerate() {
            if matches!(ins[0], 0x2d | 0x56 | 0x16) {
                let off = i16::from_le_bytes([ins[2], ins[3]]);
                assert_eq!(i as i64 + 1 + i64::from(off), miss as i64, "insn {i}");
            }
        }
    }

    #[test]
    fn network_order_fields() {
        assert_eq!(port(true, 53).val, 0x3500);
        assert_eq!(
            addr(false, "10.233.196.10".parse().unwrap(), true).val,
            i32::from_le_bytes([10, 233, 196, 10])
        );
    }

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_BPF {
            assert!(n.starts_with("blind_bpf_"));
        }
        assert!(build("blind_nope").is_none());
    }
}
