//! Blind scenes of one class of cause: a tc BPF program of an eBPF
//! dataplane rewrote the packet's addresses or ports (Cilium's or Calico
//! eBPF's Service load balancing: the DNAT of a ClusterIP or NodePort to a
//! backend on the way in, the reverse translation of the reply on the way
//! back), and the failure comes at or because of that rewrite: a stale
//! backend (the pod is gone, the dataplane still sends the flow to its
//! address), a backend port nothing listens on (the Service's targetPort),
//! a reply that leaves untranslated (the client gets it from the backend's
//! address), a backend the node has no route to. Each rebuilds, in
//! namespaces of its own, a failure reported in a public thread, cited in
//! its doc comment, written without knowledge of tracer's rules. The
//! programs are the tests' own raw instructions ([`crate::bpfnat`]), named
//! as the dataplane names its programs and attached where it attaches
//! them. One scene is an honest trap: the rewrite is right and the backend
//! refuses for a reason of its own.
//!
//! Two scenes that are not blind (`bpfnat_answered_tcp`,
//! `bpfnat_answered_udp`, not in [`BLIND_BPFNAT`]) show the programs work:
//! a connection and a datagram answered through the rewrite, both ways
//! (tests/tests/ebpf_dataplane.rs).
//!
//! Address range: 10.241.100.0 to 10.241.199.255. Pins live in a
//! directory of bpffs of the scene's own (`/sys/fs/bpf/tracer-PREFIX`),
//! removed with the scene; the filters and tcx links go with their
//! devices, with the namespaces. `scenarios::build` falls back (through
//! `blind_scenes::build`, `blind_l2::build`, `blind_tunnel::build`,
//! `blind_sysctl::build`, `blind_sock::build`, `blind_ct::build`,
//! `blind_bpf::build` and `blind_veth::build`) to [`build`].

use std::net::Ipv4Addr;

use anyhow::{Result, ensure};

use crate::{
    blind_bpf::bpf_dir,
    blind_l2::exchange,
    bpfnat::{Dir, Link, TCP, UDP, attach, dnat, rev_snat},
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, ScratchDir, listen, ns, serve, simple, strings, tcp_connect},
    tracer::netprobe_bin,
};

pub const BLIND_BPFNAT: &[&str] = &[
    "blind_bpfnat_stale_backend",
    "blind_bpfnat_target_port_refused",
    "blind_bpfnat_nodeport_reply_unreversed",
    "blind_bpfnat_dns_reply_unreversed",
    "blind_bpfnat_backend_no_route",
    "blind_bpfnat_trap_loopback_bind",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_bpfnat_stale_backend" => stale_backend(),
        "blind_bpfnat_target_port_refused" => target_port_refused(),
        "blind_bpfnat_nodeport_reply_unreversed" => nodeport_reply_unreversed(),
        "blind_bpfnat_dns_reply_unreversed" => dns_reply_unreversed(),
        "blind_bpfnat_backend_no_route" => backend_no_route(),
        "blind_bpfnat_trap_loopback_bind" => trap_loopback_bind(),
        "bpfnat_answered_tcp" => answered(TCP),
        "bpfnat_answered_udp" => answered(UDP),
        _ => return crate::blind_node::build(name),
    })
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("an IPv4 address")
}

/// A pod's veth: eth0 in `pod` (`addr`/24, default route via `gw`) and
/// `dev` on `node` (`gw`/24).
fn pod_link(pod: &Netns, node: &Netns, dev: &str, addr: &str, gw: &str) -> Result<()> {
    veth(pod, "eth0", node, dev)?;
    pod.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", gw])?;
    node.ip(&["addr", "add", &format!("{gw}/24"), "dev", dev])?;
    Ok(())
}

/// A Service's load balancing on a pod's host-side veth `dev` of `node`,
/// as Cilium's bpf_lxc does it: `cil_from_container` on its ingress (what
/// the pod sends) translates `proto` to `vip:vport` into `backend:bport`;
/// `cil_to_container` on its egress (what the pod receives) translates
/// replies of `rev_proto` from `backend:bport` back. Pins as `dev-*` in
/// `pins`.
#[expect(
    clippy::too_many_arguments,
    reason = "the service (proto, VIP, port), the backend, the reply's protocol, where"
)]
fn lxc_lb(
    node: &Netns,
    dev: &str,
    link: Link,
    pins: &ScratchDir,
    proto: u8,
    rev_proto: u8,
    (vip, vport): (Ipv4Addr, u16),
    (backend, bport): (Ipv4Addr, u16),
) -> Result<()> {
    attach(
        node,
        dev,
        Dir::Ingress,
        link,
        pins,
        &format!("{dev}-from-container"),
        &dnat(proto, vip, vport, backend, bport),
        "cil_from_container",
    )?;
    attach(
        node,
        dev,
        Dir::Egress,
        link,
        pins,
        &format!("{dev}-to-container"),
        &rev_snat(rev_proto, backend, bport, vip, vport),
        "cil_to_container",
    )
}

/// The programs' proof, not a blind scene: a client pod — lxc0 node lxc1
/// — backend pod, and a Service 10.241.B.10 whose translation (on lxc0,
/// as [`lxc_lb`]) is right: TCP 10.241.100.10:80 to a listener on
/// 10.241.102.2:8080 connects and gets its echo, UDP 10.241.104.10:53 to
/// an echo on 10.241.106.2:5353 gets its reply from 10.241.104.10:53.
fn answered(proto: u8) -> Result<Scenario> {
    let (b, vport, bport, name, description) = if proto == TCP {
        (
            100,
            80,
            8080,
            "bpfnat_answered_tcp",
            "a pod connects to a ClusterIP: tc programs on its lxc0 translate it to the backend and the replies back; answered",
        )
    } else {
        (
            104,
            53,
            5353,
            "bpfnat_answered_udp",
            "a pod sends a datagram to a ClusterIP: tc programs on its lxc0 translate it to the backend and the reply back; answered",
        )
    };
    let p = unique_prefix();
    let (pod, node, backend) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "backend")?);
    pod_link(
        &pod,
        &node,
        "lxc0",
        &format!("10.241.{}.2", b + 1),
        &format!("10.241.{}.1", b + 1),
    )?;
    pod_link(
        &backend,
        &node,
        "lxc1",
        &format!("10.241.{}.2", b + 2),
        &format!("10.241.{}.1", b + 2),
    )?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let pins = bpf_dir(&p)?;
    let vip = ip(&format!("10.241.{b}.10"));
    let be = ip(&format!("10.241.{}.2", b + 2));
    lxc_lb(
        &node,
        "lxc0",
        if proto == TCP {
            Link::Tcx
        } else {
            Link::Clsact
        },
        &pins,
        proto,
        proto,
        (vip, vport),
        (be, bport),
    )?;
    let target = format!("{vip}:{vport}");
    let (srv, traffic) = if proto == TCP {
        (
            listen(&backend, &format!("{be}:{bport}"), 15)?,
            tcp_connect(&target),
        )
    } else {
        (
            serve(&backend, "udp-echo", &format!("{be}:{bport}"), 15)?,
            strings(&[
                "udp-send",
                &target,
                "--timeout-ms",
                &crate::scaled_arg(1000),
            ]),
        )
    };
    let mut sc = simple(name, description, vec![pod, node, backend], target, traffic);
    sc.servers.push(srv);
    sc.scratch.push(pins);
    Ok(sc)
}

/// A Calico workload's veth: eth0 in `pod` (`addr`/32, its gateway the
/// link-local 169.254.1.1 that nobody has) and `dev` on `node` (proxy
/// ARP answering for the gateway at once, a /32 route to the pod): what
/// Calico's CNI plugin and felix write.
fn calico_pod(pod: &Netns, node: &Netns, dev: &str, addr: &str) -> Result<()> {
    veth(pod, "eth0", node, dev)?;
    pod.ip(&["addr", "add", &format!("{addr}/32"), "dev", "eth0"])?;
    pod.ip(&[
        "route",
        "add",
        "169.254.1.1",
        "dev",
        "eth0",
        "scope",
        "link",
    ])?;
    pod.ip(&[
        "route",
        "add",
        "default",
        "via",
        "169.254.1.1",
        "dev",
        "eth0",
    ])?;
    node.sysctl(&format!("net.ipv4.conf.{dev}.proxy_arp"), "1")?;
    node.sysctl(&format!("net.ipv4.neigh.{dev}.proxy_delay"), "0")?;
    node.ip(&["route", "add", addr, "dev", dev, "scope", "link"])?;
    Ok(())
}

/// DNS questions from `from` to `target`, each name waiting up to 1 s
/// (scaled), from the fixed local address `bind`; what the client saw.
fn dns_query(from: &Netns, target: &str, bind: &str, names: &[&str]) -> String {
    let probe = netprobe_bin();
    let t = crate::scaled_arg(1000);
    let mut args = vec![probe.to_str().unwrap(), "dns-query", target];
    args.extend_from_slice(names);
    args.extend_from_slice(&["--timeout-ms", &t, "--bind", bind]);
    String::from_utf8_lossy(&from.exec_status(&args).stdout)
        .trim()
        .to_string()
}

/// Wait (at most 5 s, scaled) until `dev` is gone from `n` (its other
/// end's namespace was deleted: the kernel removes the pair, and the
/// routes through it, in the background).
fn wait_gone(n: &Netns, dev: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + crate::scaled_ms(5000);
    while n.ip(&["link", "show", dev]).is_ok() {
        ensure!(
            std::time::Instant::now() < deadline,
            "{dev} still in {} after its pod was deleted",
            n.name
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// projectcalico/calico#4509 ("DNS lookups from Nginx to CoreDNS in eBPF
/// mode fail when the CoreDNS Pods move"): nginx sends all its DNS
/// queries from one source port; Calico's eBPF dataplane chose a CoreDNS
/// backend for that flow when it first saw it and kept the choice for the
/// flow (its NAT and conntrack entries), so when the CoreDNS pods moved,
/// every later lookup went to a pod that no longer existed and nginx's
/// resolution failed until it was restarted. Here the node has Calico's
/// workload programs on the nginx pod's cali0 (clsact, as Calico attaches
/// them): `calico_from_workload_ep` on ingress translates UDP to the
/// kube-dns ClusterIP 10.241.110.10:53 into the old CoreDNS pod
/// 10.241.112.7:53, and `calico_to_workload_ep` on egress translates its
/// answers back. Pods are routed as Calico routes them (a /32 route per
/// pod through its cali device, gateway 169.254.1.1 answered by proxy ARP,
/// the node's IPAM block 10.241.112.0/26 blackholed, a default route by
/// its uplink eth0 to an upstream router). Before tracer starts, nginx
/// asks once from 10.241.112.20:41000 and is answered by the old CoreDNS;
/// then that pod is deleted (its namespace, cali1 and its route go) and a
/// new CoreDNS pod serves at 10.241.112.9 (cali2). nginx asks again from
/// the same port; the program still sends the flow to 10.241.112.7, which
/// the node now routes to its blackhole. True cause: the dataplane's
/// translation for the flow is stale: it points to the deleted CoreDNS
/// pod 10.241.112.7 instead of a live backend (10.241.112.9); the fix is
/// to drop the flow's NAT entry when its backend goes (what the issue
/// asks of Calico), or a new source port (restarting nginx).
fn stale_backend() -> Result<Scenario> {
    let p = unique_prefix();
    let (nginx, node, coredns, upstream) = (
        ns(&p, "nginx")?,
        ns(&p, "node")?,
        ns(&p, "coredns")?,
        ns(&p, "upstream")?,
    );
    veth(&node, "eth0", &upstream, "eth0")?;
    node.ip(&["addr", "add", "10.241.119.10/24", "dev", "eth0"])?;
    upstream.ip(&["addr", "add", "10.241.119.1/24", "dev", "eth0"])?;
    node.ip(&["route", "add", "default", "via", "10.241.119.1"])?;
    node.ip(&["route", "add", "blackhole", "10.241.112.0/26"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    calico_pod(&nginx, &node, "cali0", "10.241.112.20")?;
    calico_pod(&coredns, &node, "cali2", "10.241.112.9")?;
    let pins = bpf_dir(&p)?;
    let (vip, old) = ((ip("10.241.110.10"), 53), (ip("10.241.112.7"), 53));
    attach(
        &node,
        "cali0",
        Dir::Ingress,
        Link::Clsact,
        &pins,
        "cali0-from-wep",
        &dnat(UDP, vip.0, vip.1, old.0, old.1),
        "calico_from_workload_ep",
    )?;
    attach(
        &node,
        "cali0",
        Dir::Egress,
        Link::Clsact,
        &pins,
        "cali0-to-wep",
        &rev_snat(UDP, old.0, old.1, vip.0, vip.1),
        "calico_to_workload_ep",
    )?;
    let target = "10.241.110.10:53".to_string();
    let bind = "10.241.112.20:41000";
    {
        // The old CoreDNS pod answers nginx's first lookup, then is
        // deleted.
        let gone = ns(&p, "coredns-old")?;
        calico_pod(&gone, &node, "cali1", "10.241.112.7")?;
        let srv = serve(&gone, "dns-serve", "10.241.112.7:53", 15)?;
        let seen = dns_query(
            &nginx,
            &target,
            bind,
            &["upstream.default.svc.cluster.local"],
        );
        ensure!(
            seen.ends_with("1 answers"),
            "the lookup before the CoreDNS pod moved was not answered: {seen:?}"
        );
        drop(srv);
    }
    wait_gone(&node, "cali1")?;
    let srv = serve(&coredns, "dns-serve", "10.241.112.9:53", 15)?;
    let mut sc = simple(
        "blind_bpfnat_stale_backend",
        "nginx's DNS lookups from one source port: Calico's eBPF workload program still translates the kube-dns ClusterIP to the deleted CoreDNS pod",
        vec![nginx, node, coredns, upstream],
        target.clone(),
        strings(&[
            "dns-query",
            &target,
            "upstream.default.svc.cluster.local",
            "--timeout-ms",
            &crate::scaled_arg(1000),
            "--bind",
            bind,
        ]),
    );
    sc.servers.push(srv);
    sc.scratch.push(pins);
    Ok(sc)
}

/// kubernetes/kubernetes#20677 ("nginx deployment with containerPort
/// other than 80, doesnt work"): a Service with port 81 and targetPort 84
/// in front of nginx pods whose deployment said containerPort 84, but
/// nginx still listened on 80 (containerPort does not configure the
/// application); the Service did not work (there, kube-proxy's userspace
/// proxy accepted and closed: "Empty reply from server"). The maintainer's
/// answer: containerPort tells Kubernetes what the application listens
/// on, it does not make it listen there. Here the Service is Cilium's
/// (kube-proxy replacement, tcx links on the client pod's lxc0):
/// `cil_from_container` translates TCP 10.241.120.10:81 into the nginx
/// pod 10.241.122.2:84 and `cil_to_container` translates replies from
/// there back. nginx listens on 0.0.0.0:80. A client pod connects to the
/// ClusterIP: the SYN reaches the nginx pod on port 84, which resets; the
/// reset is translated back and the client gets "Connection refused".
/// True cause: the Service's targetPort (84) is not the port the backend
/// listens on (80); the translation itself is what the Service says.
fn target_port_refused() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, nginx) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "nginx")?);
    pod_link(&pod, &node, "lxc0", "10.241.121.2", "10.241.121.1")?;
    pod_link(&nginx, &node, "lxc1", "10.241.122.2", "10.241.122.1")?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let pins = bpf_dir(&p)?;
    lxc_lb(
        &node,
        "lxc0",
        Link::Tcx,
        &pins,
        TCP,
        TCP,
        (ip("10.241.120.10"), 81),
        (ip("10.241.122.2"), 84),
    )?;
    let srv = listen(&nginx, "0.0.0.0:80", 15)?;
    let target = "10.241.120.10:81".to_string();
    let mut sc = simple(
        "blind_bpfnat_target_port_refused",
        "a pod connects to a ClusterIP whose targetPort (84) is not nginx's port (80): Cilium's tc program translates it there and nginx's pod resets",
        vec![pod, node, nginx],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(pins);
    Ok(sc)
}

/// cilium/cilium#40521 ("Cilium replies from wrong interface in multi
/// interface setup"): a node with two interfaces (eth0 with the default
/// route, eth1 where the LoadBalancer IPs are announced); connections to
/// a LoadBalancer IP failed because the replies left by the interface of
/// the default route. canonical/k8s-snap#2802 explains the mechanism
/// (reproduced with Cilium 1.17 and 1.20): Cilium reverse-translates the
/// reply of a NodePort/LoadBalancer connection served by a local pod in
/// its program on the egress device; the kernel routes the reply while
/// its source is still the pod's address, by the default route; when
/// that device is not in Cilium's `devices`, no program is there, and the
/// reply leaves with the pod's address as its source. Here a client
/// behind a router connects to the NodePort 10.241.131.10:30080 on the
/// node's eth0 (the service-facing interface, Cilium's only device):
/// `cil_from_netdev` (tcx ingress of eth0) translates it into the pod
/// 10.241.133.2:8080 and `cil_to_netdev` (tcx egress of eth0) would
/// translate the replies back. The node's default route is by eth1
/// (10.241.132.0/24, through the same router), which has no program: the
/// SYN-ACK leaves eth1 from 10.241.133.2:8080, reaches the client, which
/// has no connection with that address and resets; its connect times
/// out. True cause: the reply is routed out of eth1, a device without
/// Cilium's programs (not in its `devices`), so it is not reverse
/// translated; add eth1 to the devices (or route the replies out of
/// eth0).
fn nodeport_reply_unreversed() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, router, node, pod) = (
        ns(&p, "client")?,
        ns(&p, "router")?,
        ns(&p, "node")?,
        ns(&p, "pod")?,
    );
    veth(&client, "eth0", &router, "eth0")?;
    veth(&router, "eth1", &node, "eth0")?;
    veth(&router, "eth2", &node, "eth1")?;
    client.ip(&["addr", "add", "10.241.130.2/24", "dev", "eth0"])?;
    client.ip(&["route", "add", "default", "via", "10.241.130.1"])?;
    router.ip(&["addr", "add", "10.241.130.1/24", "dev", "eth0"])?;
    router.ip(&["addr", "add", "10.241.131.1/24", "dev", "eth1"])?;
    router.ip(&["addr", "add", "10.241.132.1/24", "dev", "eth2"])?;
    router.sysctl("net.ipv4.ip_forward", "1")?;
    node.ip(&["addr", "add", "10.241.131.10/24", "dev", "eth0"])?;
    node.ip(&["addr", "add", "10.241.132.10/24", "dev", "eth1"])?;
    node.ip(&[
        "route",
        "add",
        "default",
        "via",
        "10.241.132.1",
        "dev",
        "eth1",
    ])?;
    pod_link(&pod, &node, "lxc0", "10.241.133.2", "10.241.133.1")?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let pins = bpf_dir(&p)?;
    let (nodeport, backend) = ((ip("10.241.131.10"), 30080), (ip("10.241.133.2"), 8080));
    attach(
        &node,
        "eth0",
        Dir::Ingress,
        Link::Tcx,
        &pins,
        "eth0-from-netdev",
        &dnat(TCP, nodeport.0, nodeport.1, backend.0, backend.1),
        "cil_from_netdev",
    )?;
    attach(
        &node,
        "eth0",
        Dir::Egress,
        Link::Tcx,
        &pins,
        "eth0-to-netdev",
        &rev_snat(TCP, backend.0, backend.1, nodeport.0, nodeport.1),
        "cil_to_netdev",
    )?;
    let srv = listen(&pod, "10.241.133.2:8080", 15)?;
    let target = "10.241.131.10:30080".to_string();
    let mut sc = simple(
        "blind_bpfnat_nodeport_reply_unreversed",
        "a client to a NodePort on the node's eth0: Cilium translates it to a local pod, the reply leaves by the default route's eth1 (no Cilium program) with the pod's address",
        vec![client, router, node, pod],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(pins);
    Ok(sc)
}

/// kubernetes/kubernetes#68367 ("DNS resolution issue when getting
/// response from pod IP instead of service IP"): a pod's lookups through
/// the kube-dns Service failed with `reply from unexpected source:
/// 100.96.3.202#53, expected 100.64.0.10#53`, the first the kube-dns
/// pod's address, the second the Service's: the answer came back without
/// its source translated to the Service address, and the resolver
/// ignored it. The same in cilium/cilium#7677 ("the package recv from"):
/// with Cilium, a pod asking its kube-dns Service 10.233.0.3 sometimes
/// got the answers from the DNS pod's address (tcpdump in the pod). Here
/// the Service is Cilium's, clsact filters on the client pod's lxc0:
/// `cil_from_container` translates UDP to 10.241.140.10:53 into the
/// CoreDNS pod 10.241.142.2:53, and `cil_to_container` reverse-translates
/// the Service's TCP replies only: its reverse entry for the UDP port is
/// missing. The client asks once as dig does (answers from another source
/// than the server asked are printed and ignored): CoreDNS answers, the
/// answer reaches the client from 10.241.142.2:53, and the client times
/// out. True cause: the Service's UDP replies are not reverse translated
/// on the client's lxc0 (the reverse NAT entry for the UDP flow is
/// missing), so the answers keep the backend's address; the query, its
/// translation and CoreDNS are fine.
fn dns_reply_unreversed() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, coredns) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "coredns")?);
    pod_link(&pod, &node, "lxc0", "10.241.141.2", "10.241.141.1")?;
    pod_link(&coredns, &node, "lxc1", "10.241.142.2", "10.241.142.1")?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let pins = bpf_dir(&p)?;
    lxc_lb(
        &node,
        "lxc0",
        Link::Clsact,
        &pins,
        UDP,
        TCP,
        (ip("10.241.140.10"), 53),
        (ip("10.241.142.2"), 53),
    )?;
    let srv = serve(&coredns, "dns-serve", "10.241.142.2:53", 15)?;
    let target = "10.241.140.10:53".to_string();
    let mut sc = simple(
        "blind_bpfnat_dns_reply_unreversed",
        "a pod asks the kube-dns ClusterIP: Cilium's tc program translates the query to CoreDNS, the answer comes back untranslated from CoreDNS's address",
        vec![pod, node, coredns],
        target.clone(),
        strings(&[
            "dns-query",
            &target,
            "kubernetes.default.svc.cluster.local",
            "--timeout-ms",
            &crate::scaled_arg(1000),
            "--expect-source",
        ]),
    );
    sc.servers.push(srv);
    sc.scratch.push(pins);
    Ok(sc)
}

/// cilium/cilium#28984 ("cilium v1.14.3, kubernetes v1.28.2 Endpoint
/// unreachability for only one node"): in native routing with
/// autoDirectNodeRoutes, one node's agent logged `Unable to install
/// direct node route {... Dst: 10.42.0.0/24 ... Gw: 172.16.30.20 ...}
/// error="route to destination 172.16.30.20 contains gateway
/// 172.16.30.1, must be directly reachable"`: the other node was behind
/// a gateway, so the route to its pod CIDR was not installed, and the
/// endpoints on that node were unreachable from this one. Here node1
/// (10.241.150.10, default route through the gateway 10.241.150.1) and
/// node2 (10.241.152.20) are on two subnets joined by that gateway, which
/// knows no pod CIDR; node1 has no route to node2's pod CIDR
/// 10.241.153.0/24. A pod on node1 connects to the ClusterIP
/// 10.241.156.10:80, whose only backend is on node2: Cilium's
/// `cil_from_container` (tcx ingress of the pod's lxc0) translates it
/// into 10.241.153.2:8080 (`cil_to_container` on egress would translate
/// the replies back); node1 routes the translated SYN by its default
/// route to the gateway, which has no route to it and drops it; the
/// connect times out. True cause: node1 has no route to the backend's pod
/// CIDR (the direct node route was not installed because node2 is not
/// directly reachable); the translation is right.
fn backend_no_route() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, n1, gw, n2, pod2) = (
        ns(&p, "pod")?,
        ns(&p, "node1")?,
        ns(&p, "gw")?,
        ns(&p, "node2")?,
        ns(&p, "pod2")?,
    );
    pod_link(&pod, &n1, "lxc0", "10.241.151.2", "10.241.151.1")?;
    veth(&n1, "eth0", &gw, "eth0")?;
    veth(&gw, "eth1", &n2, "eth0")?;
    pod_link(&pod2, &n2, "lxc0", "10.241.153.2", "10.241.153.1")?;
    n1.ip(&["addr", "add", "10.241.150.10/24", "dev", "eth0"])?;
    n1.ip(&["route", "add", "default", "via", "10.241.150.1"])?;
    gw.ip(&["addr", "add", "10.241.150.1/24", "dev", "eth0"])?;
    gw.ip(&["addr", "add", "10.241.152.1/24", "dev", "eth1"])?;
    n2.ip(&["addr", "add", "10.241.152.20/24", "dev", "eth0"])?;
    n2.ip(&["route", "add", "default", "via", "10.241.152.1"])?;
    for n in [&n1, &gw, &n2] {
        n.sysctl("net.ipv4.ip_forward", "1")?;
    }
    let pins = bpf_dir(&p)?;
    lxc_lb(
        &n1,
        "lxc0",
        Link::Tcx,
        &pins,
        TCP,
        TCP,
        (ip("10.241.156.10"), 80),
        (ip("10.241.153.2"), 8080),
    )?;
    let srv = listen(&pod2, "10.241.153.2:8080", 15)?;
    let target = "10.241.156.10:80".to_string();
    let mut sc = simple(
        "blind_bpfnat_backend_no_route",
        "a pod to a ClusterIP whose backend is on another node: Cilium's tc program translates it, node1 has no route to that node's pod CIDR, the gateway drops it",
        vec![pod, n1, gw, n2, pod2],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(pins);
    Ok(sc)
}

/// The honest trap. kubernetes/kubernetes#58019 ("ClusterIP exposed
/// service not reachable"): `kubectl port-forward` to the pod's port
/// 18081 worked, but `curl http://<service>:18081/` got "Connection
/// refused". kubernetes/website#7281 reports the same (the app answered
/// `curl localhost:50105` inside the pod, the Service and the pod's own
/// address got "connection refused") and its cause: the app listened on
/// localhost, not 0.0.0.0 (port-forward connects to the pod's loopback,
/// so it works). Here the Service is Cilium's, clsact filters on the
/// client pod's lxc0: `cil_from_container` translates TCP
/// 10.241.160.10:18081 into the API pod 10.241.162.2:18081 and
/// `cil_to_container` translates the replies back, both right (the
/// targetPort is the app's port). The app listens on 127.0.0.1:18081
/// only (a connection from inside its pod works before tracer starts).
/// The client pod connects to the ClusterIP: the translated SYN reaches
/// the API pod, whose kernel has no socket for 10.241.162.2:18081 and
/// resets; the reset comes back translated: "Connection refused". True
/// cause: the application is bound to the loopback address only; the
/// translation, the routes and the programs are right.
fn trap_loopback_bind() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, api) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "api")?);
    pod_link(&pod, &node, "lxc0", "10.241.161.2", "10.241.161.1")?;
    pod_link(&api, &node, "lxc1", "10.241.162.2", "10.241.162.1")?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let pins = bpf_dir(&p)?;
    lxc_lb(
        &node,
        "lxc0",
        Link::Clsact,
        &pins,
        TCP,
        TCP,
        (ip("10.241.160.10"), 18081),
        (ip("10.241.162.2"), 18081),
    )?;
    let srv = listen(&api, "127.0.0.1:18081", 15)?;
    // What `kubectl port-forward` reaches: the pod's loopback.
    exchange(&api, "127.0.0.1:18081")?;
    let target = "10.241.160.10:18081".to_string();
    let mut sc = simple(
        "blind_bpfnat_trap_loopback_bind",
        "a pod to a ClusterIP: Cilium's tc programs translate both ways correctly; the API pod's app listens on 127.0.0.1 only and its kernel resets",
        vec![pod, node, api],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    sc.scratch.push(pins);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        assert!((4..=6).contains(&BLIND_BPFNAT.len()));
        for n in BLIND_BPFNAT {
            assert!(n.starts_with("blind_bpfnat_"));
        }
        assert!(build("blind_nope").is_none());
    }
}
