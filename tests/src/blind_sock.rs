//! Blind scenes of one class of cause: socket-level load balancing of an
//! eBPF dataplane. A cgroup BPF sock_addr program rewrites a pod's
//! connect() or sendto() to a Service ClusterIP (or, for a Local Redirect
//! Policy, to the cluster DNS address) to a backend before any packet
//! exists, and rewrites a UDP reply's source back (Cilium's kube-proxy
//! replacement `socketLB`, bpf/bpf_sock.c: cil_sock4_connect,
//! cil_sock4_sendmsg, cil_sock4_recvmsg; Calico eBPF's connect-time load
//! balancing). The operator follows the ClusterIP:port the app asked for;
//! no packet carries it. Each scene rebuilds, in namespaces and cgroups
//! of its own, a failure reported in a public thread, cited in its doc
//! comment, written without knowledge of tracer's rules: the backend the
//! socket program picked refuses the connection (it stopped listening
//! before the load balancer dropped it), a Local Redirect Policy sends a
//! pod's DNS to a node-local-dns pod that does not listen yet, and a
//! sendmsg4 rewrite with no recvmsg4 program leaves the reply's source
//! the backend's, which the resolver drops. One scene is an honest trap:
//! a socket program for the very Service is on the node, but attached to
//! the host's cgroup only (Cilium's `socketLB.hostNamespaceOnly`), and
//! the pod's SYN carries the ClusterIP to kube-proxy's DNAT, whose
//! target port nothing listens on.
//!
//! The programs are a few raw instructions of the tests' own (as
//! sockprog.rs and redirect.rs build theirs), named as Cilium names its
//! programs; each matches its address and port exactly and passes
//! everything else. The client runs in a cgroup of the scene's own
//! (below the cgroup2 mount; `/sys/fs/cgroup/unified` with hybrid
//! cgroups): the scene's traffic moves it there before it execs.
//! Cgroups go on drop, emptied (their programs with them), after the
//! servers.
//!
//! Address ranges: 10.190 (pods, third octets 10 to 41) and 10.205.96
//! (the ClusterIPs; blind_scenes.rs uses 10.205.1 and 10.205.2).
//! `scenarios::build` falls back (through
//! `blind_scenes::build`, `blind_l2::build`, `blind_tunnel::build` and
//! `blind_sysctl::build`) to [`build`], which falls back to
//! [`crate::blind_ct::build`] (then [`crate::blind_bpf::build`]).

use std::{
    net::SocketAddrV4,
    os::fd::{AsRawFd, RawFd},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

use crate::{
    blind_scenes::fast_arp,
    netns::{Netns, unique_prefix, veth},
    redirect::{bpf, insn, load},
    scenarios::{Scenario, listen, ns, serve, simple, strings, tcp_connect},
    sockprog::cgroup2_root,
};

pub const BLIND_SOCK: &[&str] = &[
    "blind_sock_backend_refused",
    "blind_sock_lrp_dns_not_listening",
    "blind_sock_udp_no_recvmsg",
    "blind_sock_hostns_only_target_port",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_sock_backend_refused" => backend_refused(),
        "blind_sock_lrp_dns_not_listening" => lrp_dns_not_listening(),
        "blind_sock_udp_no_recvmsg" => udp_no_recvmsg(),
        "blind_sock_hostns_only_target_port" => hostns_only_target_port(),
        _ => return crate::blind_ct::build(name),
    })
}

/// include/uapi/linux/bpf.h
const BPF_PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
const BPF_PROG_ATTACH: i64 = 8;
const BPF_CGROUP_INET4_CONNECT: u32 = 10;
const BPF_CGROUP_UDP4_SENDMSG: u32 = 14;
const BPF_CGROUP_UDP4_RECVMSG: u32 = 19;

/// The bytes of `a` as the u32 a BPF load of them reads (little endian).
fn le(a: std::net::Ipv4Addr) -> i32 {
    i32::from_le_bytes(a.octets())
}

/// A port in network order, as a BPF load of `user_port` reads it.
fn port(p: u16) -> i32 {
    i32::from(p.to_be())
}

/// A sock_addr program: when the address in its context (`struct
/// bpf_sock_addr`: user_ip4 at 4, user_port at 24, both in network
/// order) is exactly `from`, it becomes `to`; anything else passes as it
/// is. For connect4 and sendmsg4 the address is the destination the app
/// gave (a Service's, rewritten to a backend's); for recvmsg4 it is the
/// source of a datagram received (a backend's, rewritten back).
fn rewrite(from: SocketAddrV4, to: SocketAddrV4) -> Vec<u8> {
    [
        insn(0x61, 2, 1, 4, 0),                 // r2 = ctx->user_ip4
        insn(0x56, 2, 0, 6, le(*from.ip())),    // if w2 != from goto allow
        insn(0x61, 2, 1, 24, 0),                // r2 = ctx->user_port
        insn(0x56, 2, 0, 4, port(from.port())), // if w2 != port goto allow
        insn(0xb4, 3, 0, 0, le(*to.ip())),      // w3 = to
        insn(0x63, 1, 3, 4, 0),                 // ctx->user_ip4 = r3
        insn(0xb4, 3, 0, 0, port(to.port())),   // w3 = to's port
        insn(0x63, 1, 3, 24, 0),                // ctx->user_port = r3
        insn(0xb7, 0, 0, 0, 1),                 // allow: r0 = 1
        insn(0x95, 0, 0, 0, 0),
    ]
    .concat()
}

/// A cgroup of the scene's own below the cgroup2 mount, with the sock_addr
/// programs attached to it. Removed on drop (once its processes have
/// exited), and its programs with it.
pub struct Cgroup {
    pub path: PathBuf,
    progs: Vec<RawFd>,
}

impl Cgroup {
    pub fn new(role: &str) -> Result<Cgroup> {
        let root = cgroup2_root().context("no cgroup2 mount")?;
        let path = root.join(format!("tracer-test-{}-{role}", unique_prefix()));
        // What a killed demo (fixed prefix) left: empty, so it goes.
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path).with_context(|| format!("mkdir {}", path.display()))?;
        Ok(Cgroup {
            path,
            progs: vec![],
        })
    }

    /// Load `prog` as a sock_addr program named `name` for `attach_type`
    /// and attach it here.
    fn attach(&mut self, attach_type: u32, prog: &[u8], name: &str) -> Result<()> {
        self.attach_typed(BPF_PROG_TYPE_CGROUP_SOCK_ADDR, attach_type, prog, name)
    }

    /// Load `prog` as `prog_type` named `name` for `attach_type` and
    /// attach it here (blind_stack.rs's cgroup_skb programs).
    pub(crate) fn attach_typed(
        &mut self,
        prog_type: u32,
        attach_type: u32,
        prog: &[u8],
        name: &str,
    ) -> Result<()> {
        let fd = load(prog_type, attach_type, prog, name)?;
        self.progs.push(fd);
        let dir = std::fs::File::open(&self.path)?;
        let mut attr = [0u8; 16];
        attr[0..4].copy_from_slice(&(dir.as_raw_fd() as u32).to_le_bytes());
        attr[4..8].copy_from_slice(&(fd as u32).to_le_bytes());
        attr[8..12].copy_from_slice(&attach_type.to_le_bytes());
        bpf(BPF_PROG_ATTACH, &mut attr)
            .with_context(|| format!("BPF_PROG_ATTACH {name} to {}", self.path.display()))?;
        Ok(())
    }

    /// Cilium's socket LB for TCP: connect() to `vip` goes to `backend`.
    pub(crate) fn connect4(&mut self, vip: SocketAddrV4, backend: SocketAddrV4) -> Result<()> {
        self.attach(
            BPF_CGROUP_INET4_CONNECT,
            &rewrite(vip, backend),
            "cil_sock4_connect",
        )
    }

    /// Cilium's socket LB for unconnected UDP: sendto() `vip` goes to
    /// `backend`.
    pub(crate) fn sendmsg4(&mut self, vip: SocketAddrV4, backend: SocketAddrV4) -> Result<()> {
        self.attach(
            BPF_CGROUP_UDP4_SENDMSG,
            &rewrite(vip, backend),
            "cil_sock4_sendmsg",
        )
    }

    /// Its reverse translation: a datagram from `backend` is received as
    /// from `vip`.
    pub(crate) fn recvmsg4(&mut self, vip: SocketAddrV4, backend: SocketAddrV4) -> Result<()> {
        self.attach(
            BPF_CGROUP_UDP4_RECVMSG,
            &rewrite(backend, vip),
            "cil_sock4_recvmsg",
        )
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The processes run in it have exited and been reaped; the kernel
        // may take a moment to release them.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for fd in &self.progs {
            unsafe { libc::close(*fd) };
        }
    }
}

/// Run `args` in `ns` as a process of the cgroup `cgroup` (moved there
/// before it execs); its output.
pub(crate) fn exec_in(cgroup: &Path, ns: &Netns, args: &[&str]) -> std::process::Output {
    let script = format!(
        "echo $$ > '{}' && exec ip netns exec {} \"$@\"",
        cgroup.join("cgroup.procs").display(),
        ns.name
    );
    std::process::Command::new("sh")
        .args(["-c", &script, "sh"])
        .args(args)
        .output()
        .expect("spawn sh")
}

/// One node with pods on veths: pod `role` at 10.190.S.2/24 on its eth0,
/// the node's `lxcS` 10.190.S.1/24, the pod's default route via the node;
/// forwarding on. Returns the pods' namespaces (in order) and the node's.
pub(crate) fn node_with_pods(p: &str, pods: &[(&str, u8)]) -> Result<(Vec<Netns>, Netns)> {
    let node = ns(p, "node")?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let mut nss = vec![];
    for (role, s) in pods {
        let pod = ns(p, role)?;
        let dev = format!("lxc{s}");
        veth(&pod, "eth0", &node, &dev)?;
        node.ip(&["addr", "add", &format!("10.190.{s}.1/24"), "dev", &dev])?;
        pod.ip(&["addr", "add", &format!("10.190.{s}.2/24"), "dev", "eth0"])?;
        pod.ip(&["route", "add", "default", "via", &format!("10.190.{s}.1")])?;
        fast_arp(&pod, "eth0")?;
        fast_arp(&node, &dev)?;
        nss.push(pod);
    }
    Ok((nss, node))
}

pub(crate) fn addr(s: &str) -> SocketAddrV4 {
    s.parse().expect("an IPv4 address:port")
}

/// One DNS question (A kubernetes.io) to `server` from one UDP socket,
/// waiting 1 s (scaled); `extra` netprobe arguments.
pub(crate) fn dns_query(server: &str, extra: &[&str]) -> Vec<String> {
    let t = crate::scaled_arg(1000);
    let mut v = strings(&["dns-query", server, "kubernetes.io", "--timeout-ms", &t]);
    v.extend(strings(extra));
    v
}

/// The scene: the client (the pods' first) first, then the node, then
/// the other pods; the client runs in the first of `cgroups` (the
/// scene's own).
pub(crate) fn scene(
    name: &'static str,
    description: &'static str,
    (pods, node): (Vec<Netns>, Netns),
    target: &str,
    traffic: Vec<String>,
    cgroups: Vec<Cgroup>,
) -> Scenario {
    let mut pods = pods.into_iter();
    let mut nss = vec![pods.next().expect("a client pod"), node];
    nss.extend(pods);
    let mut sc = simple(name, description, nss, target.into(), traffic);
    sc.client_cgroup = cgroups.first().map(|c| c.path.clone());
    sc.cgroups = cgroups;
    sc
}

/// cilium/cilium PR #45593 ("docs: race conditions between EndpointSlice
/// update and Pod termination", Documentation/network/kubernetes/
/// kubeproxy-free.rst): when a backend pod is deleted, the EndpointSlice
/// update and the kubelet's SIGTERM happen at the same time, so "the
/// application may start refusing connections before Cilium can stop
/// directing traffic to the Pod", and clients get errors; socket-LB picks
/// the backend in connect() (cilium/cilium#14844: "Backend is selected at
/// the time of the socket `Connect` call via a lookup in the `lb` map").
/// The same RST from a backend that does not serve is what
/// cilium/cilium#17252 saw (a connection "routed to bad other-server pod
/// (and RSTed by it)"). Here a node with a client pod (10.190.10.2) and
/// a backend pod (10.190.11.2) whose app has closed its listener on 8080
/// (SIGTERM) while it is still the Service's backend; Cilium's
/// cil_sock4_connect, attached to the client's cgroup, rewrites connect()
/// to the ClusterIP 10.205.96.20:80 to 10.190.11.2:8080. The client
/// connects once to 10.205.96.20:80. The operator follows
/// 10.205.96.20:80. True story: the socket program rewrote the connect()
/// to 10.205.96.20:80 to the backend 10.190.11.2:8080 before any packet
/// existed (no packet carries the ClusterIP); the SYN went to the backend
/// pod, where nothing listens on 8080, and it answered RST: the client
/// gets "connection refused". The backend is terminating (or not ready)
/// but still in the load balancer's map.
fn backend_refused() -> Result<Scenario> {
    let p = unique_prefix();
    let (pods, node) = node_with_pods(&p, &[("client", 10), ("backend", 11)])?;
    let vip = "10.205.96.20:80";
    let mut cg = Cgroup::new("pod")?;
    cg.connect4(addr(vip), addr("10.190.11.2:8080"))?;
    Ok(scene(
        "blind_sock_backend_refused",
        "socket LB: the pod's connect() to a ClusterIP is rewritten to a backend pod that no longer listens (terminating)",
        (pods, node),
        vip,
        tcp_connect(vip),
        vec![cg],
    ))
}

/// cilium/cilium#43080 ("Local Redirect Policy for local DNS cache -
/// observing intermittent DNS failures on new nodes if node-local-dns pod
/// has not yet started fully"): with a CiliumLocalRedirectPolicy sending
/// the kube-dns Service's DNS to the node's node-local-dns pod, "when a
/// new node is created, DNS queries fail on any pod that is started
/// before node local dns is ready". The redirect is done by the socket
/// LB's sendmsg4/recvmsg4 programs for a pod's UDP DNS (the LRP guide's
/// node-local-dns setup, where the cache listens on its pod IP). Here a
/// node with a client pod (10.190.20.2), the node-local-dns pod
/// (10.190.21.2: its address is set, its cache is not listening yet) and
/// a CoreDNS pod (10.190.22.2, the kube-dns Service's backend, answering
/// on 53); the client's cgroup has cil_sock4_sendmsg (kube-dns
/// 10.205.96.10:53 to 10.190.21.2:53, the LRP's backend) and
/// cil_sock4_recvmsg (its reverse). The client asks one question to
/// 10.205.96.10:53. The operator follows 10.205.96.10:53. True story: the
/// sendmsg4 program rewrote the query's destination from 10.205.96.10:53
/// to the node-local-dns pod 10.190.21.2:53 before any packet existed;
/// nothing listens on UDP 53 there, so that pod answered ICMP port
/// unreachable, which an unconnected UDP socket never reports: the
/// resolver times out ("no answer"). CoreDNS, which works, never saw the
/// query: the redirect points at a backend that is not ready.
fn lrp_dns_not_listening() -> Result<Scenario> {
    let p = unique_prefix();
    let (pods, node) =
        node_with_pods(&p, &[("client", 20), ("nodelocaldns", 21), ("coredns", 22)])?;
    let coredns = serve(&pods[2], "dns-serve", "10.190.22.2:53", 15)?;
    let vip = "10.205.96.10:53";
    let mut cg = Cgroup::new("pod")?;
    cg.sendmsg4(addr(vip), addr("10.190.21.2:53"))?;
    cg.recvmsg4(addr(vip), addr("10.190.21.2:53"))?;
    let mut sc = scene(
        "blind_sock_lrp_dns_not_listening",
        "Local Redirect Policy: the pod's DNS to kube-dns is rewritten by sendmsg4 to a node-local-dns pod not listening yet",
        (pods, node),
        vip,
        dns_query(vip, &[]),
        vec![cg],
    );
    sc.servers.push(coredns);
    Ok(sc)
}

/// cilium/cilium PR #7925 ("bpf: Disable UDP support in svc LB for host
/// applications"): with only the request rewritten, "some UDP
/// applications checks source IP address of a received packet. In the
/// case of `host A --> svc IP --> pod B`, a received packed by the host A
/// from the pod B will have an IP address of the pod B instead of the svc
/// IP. This makes such applications to ignore the packet", busybox's
/// nslookup among them; cilium/cilium PR #8100 ("bpf: implement
/// unconnected udp based host lb") added the recvmsg4 program
/// (sock4_xlate_rcv) that rewrites the reply's source back, which needs
/// kernel 5.2. The resolvers' message is `;; reply from unexpected
/// source: 100.96.3.202#53, expected 100.64.0.10#53`
/// (kubernetes/kubernetes#68367). Here a node with a client pod
/// (10.190.30.2) and a CoreDNS pod (10.190.31.2, answering on 53); the
/// client's cgroup has cil_sock4_sendmsg (kube-dns 10.205.96.10:53 to
/// 10.190.31.2:53) and no recvmsg4 program. The client asks one question
/// to 10.205.96.10:53 and, as stub resolvers do, takes a reply only from
/// that address. The operator follows 10.205.96.10:53. True story: the
/// sendmsg4 program rewrote the query's destination from 10.205.96.10:53
/// to the CoreDNS pod 10.190.31.2:53 before any packet existed; CoreDNS
/// answered and the answer was delivered to the client's socket, but with
/// no recvmsg4 program to rewrite its source back it came from
/// 10.190.31.2:53, not 10.205.96.10:53, and the resolver dropped it
/// ("reply from unexpected source") and timed out. The network delivered
/// both ways; the missing reverse translation is the fault.
fn udp_no_recvmsg() -> Result<Scenario> {
    let p = unique_prefix();
    let (pods, node) = node_with_pods(&p, &[("client", 30), ("coredns", 31)])?;
    let coredns = serve(&pods[1], "dns-serve", "10.190.31.2:53", 15)?;
    let vip = "10.205.96.10:53";
    let mut cg = Cgroup::new("pod")?;
    cg.sendmsg4(addr(vip), addr("10.190.31.2:53"))?;
    let mut sc = scene(
        "blind_sock_udp_no_recvmsg",
        "socket LB for UDP with sendmsg4 and no recvmsg4: the DNS answer comes back from the CoreDNS pod's address and the resolver drops it",
        (pods, node),
        vip,
        dns_query(vip, &["--expect-source"]),
        vec![cg],
    );
    sc.servers.push(coredns);
    Ok(sc)
}

/// kube-proxy's nftables table (pkg/proxy/nftables/proxier.go) for one
/// Service, `default/web:http` (ClusterIP `vip`:80, one endpoint
/// `ep`:`ep_port`), DNAT in prerouting (pods) and output (the node); the
/// Service CIDR is 10.205.96.0/24.
fn kube_proxy_nft(vip: &str, ep: &str, ep_port: u16) -> String {
    format!(
        r#"table ip kube-proxy {{
	comment "rules for kube-proxy"
	set cluster-ips {{
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = {{ {vip} }}
	}}
	map service-ips {{
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = {{ {vip} . tcp . 80 : goto service-ULMVA6XW-default/web/tcp/http }}
	}}
	chain filter-forward {{
		type filter hook forward priority -110; policy accept;
		ct state new jump cluster-ips-check
	}}
	chain cluster-ips-check {{
		ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
		ip daddr 10.205.96.0/24 drop comment "Drop traffic to unallocated ClusterIPs"
	}}
	chain nat-prerouting {{
		type nat hook prerouting priority -100; policy accept;
		jump services
	}}
	chain nat-output {{
		type nat hook output priority -100; policy accept;
		jump services
	}}
	chain services {{
		ip daddr . meta l4proto . th dport vmap @service-ips
	}}
	chain service-ULMVA6XW-default/web/tcp/http {{
		numgen random mod 1 vmap {{ 0 : goto endpoint-5OJB2KTY-default/web/tcp/http__{ep}/{ep_port} }}
	}}
	chain endpoint-5OJB2KTY-default/web/tcp/http__{ep}/{ep_port} {{
		meta l4proto tcp dnat to {ep}:{ep_port}
	}}
}}
"#
    )
}

/// An honest trap. Cilium's "Socket LoadBalancer Bypass in Pod Namespace"
/// (`socketLB.hostNamespaceOnly`, `bpf-lb-sock-hostns-only`: cilium/cilium
/// PR #17276, "bpf: Add a new option to skip socket lb when in pod ns",
/// and gardener/gardener-extension-networking-cilium PR #86: "This flag
/// will skip socket LB for services when inside a pod namespace, in
/// favor of service LB at the pod interface"), with kube-proxy still
/// running beside Cilium (the hybrid setup of cilium/cilium#35012): the
/// socket LB serves the host's sockets only, and a pod's Service traffic
/// leaves as packets to the ClusterIP, which kube-proxy DNATs. The fault
/// is the Service's: kubernetes/website#16158 ("Can't access my
/// cluster"), `targetPort: 8080` while the container listens on
/// `containerPort: 3000`, gave ERR_CONNECTION_REFUSED. Here a node with a
/// client pod (10.190.40.2) and a web pod (10.190.41.2, listening on
/// 3000); the node's kube-proxy (nftables mode) DNATs the ClusterIP
/// 10.205.96.40:80 to 10.190.41.2:8080; cil_sock4_connect, rewriting
/// 10.205.96.40:80 to the same 10.190.41.2:8080, is attached to the
/// host's cgroup only; the client runs in its pod's cgroup, which has no
/// program. The client connects once to 10.205.96.40:80. The operator
/// follows 10.205.96.40:80. It looks like a socket LB failure (a
/// connect4 program for this very ClusterIP is on the node, and the
/// connection is refused), but the socket program never ran for the pod's
/// socket. True story: the SYN carried 10.205.96.40:80 out of the pod;
/// the node's nft DNAT (kube-proxy's endpoint chain for default/web)
/// rewrote it to 10.190.41.2:8080, where nothing listens (the app is on
/// 3000), and the web pod answered RST: connection refused. Fix the
/// Service's targetPort (3000); the socket LB is not at fault.
fn hostns_only_target_port() -> Result<Scenario> {
    let p = unique_prefix();
    let (pods, node) = node_with_pods(&p, &[("client", 40), ("web", 41)])?;
    let vip = "10.205.96.40:80";
    node.exec_file(
        &["nft", "-f"],
        &kube_proxy_nft("10.205.96.40", "10.190.41.2", 8080),
    )?;
    let web = listen(&pods[1], "10.190.41.2:3000", 15)?;
    let pod_cg = Cgroup::new("pod")?;
    let mut host_cg = Cgroup::new("host")?;
    host_cg.connect4(addr(vip), addr("10.190.41.2:8080"))?;
    let mut sc = scene(
        "blind_sock_hostns_only_target_port",
        "socket LB for the host's sockets only: the pod's SYN to the ClusterIP is DNATed by kube-proxy to a target port nothing listens on",
        (pods, node),
        vip,
        tcp_connect(vip),
        vec![pod_cg, host_cg],
    );
    sc.servers.push(web);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_SOCK {
            assert!(n.starts_with("blind_sock_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }

    #[test]
    fn the_rewrite_skips_to_allow_on_a_mismatch() {
        let prog = rewrite(addr("10.205.96.20:80"), addr("10.190.11.2:8080"));
        assert_eq!(prog.len(), 10 * 8);
        // Both jumps land on `r0 = 1`, the 9th instruction.
        for (at, off) in [(1usize, 6i16), (3, 4)] {
            let i = &prog[at * 8..at * 8 + 8];
            assert_eq!(i[0], 0x56);
            assert_eq!(i16::from_le_bytes([i[2], i[3]]) as usize + at + 1, 8);
            assert_eq!(i16::from_le_bytes([i[2], i[3]]), off);
        }
        assert_eq!(port(80), 0x5000);
    }
}
