//! Scenes written "blind": each rebuilds, in namespaces of its own, a
//! failure reported in a public issue thread (Kubernetes, a CNI,
//! kube-proxy, Istio), cited in its doc comment, without knowledge of
//! tracer's rules. Address ranges: 10.200-10.210, 10.220, 10.225, 10.254
//! and 10.255 (two scenes: third octets below 100 and above 100).
//! They are not in `scenarios::NAMES`; `scenarios::build` falls back to
//! [`build`], which falls back to [`crate::blind_l2::build`] (then
//! [`crate::blind_tunnel::build`], [`crate::blind_sysctl::build`],
//! [`crate::blind_sock::build`], [`crate::blind_ct::build`] and
//! [`crate::blind_bpf::build`]).

use anyhow::Result;

use crate::{
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, routed, serve, simple, strings, tcp_connect},
    tracer::netprobe_bin,
};

pub const BLIND: &[&str] = &[
    "blind_vxlan_mtu",
    "blind_stale_udp_conntrack",
    "blind_dnat_blackhole",
    "blind_dnat_prohibit",
    "blind_hairpin_off",
    "blind_bridge_port_learning",
    "blind_wrong_vtep_mac",
    "blind_vxlan_missing_fdb",
    "blind_vxlan_wrong_vni",
    "blind_vxlan_wrong_port",
    "blind_forward_policy_drop",
    "blind_redirect_no_listener",
    "blind_reject_no_endpoints",
    "blind_output_dnat_no_route",
    "blind_proxy_arp_no_default",
    "blind_stale_endpoint_unreachable",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_vxlan_mtu" => vxlan_mtu(),
        "blind_stale_udp_conntrack" => stale_udp_conntrack(),
        "blind_dnat_blackhole" => dnat_blackhole(),
        "blind_dnat_prohibit" => dnat_prohibit(),
        "blind_hairpin_off" => hairpin_off(),
        "blind_bridge_port_learning" => bridge_port_learning(),
        "blind_wrong_vtep_mac" => wrong_vtep_mac(),
        "blind_vxlan_missing_fdb" => vxlan_missing_fdb(),
        "blind_vxlan_wrong_vni" => vxlan_wrong_vni(),
        "blind_vxlan_wrong_port" => vxlan_wrong_port(),
        "blind_forward_policy_drop" => forward_policy_drop(),
        "blind_redirect_no_listener" => redirect_no_listener(),
        "blind_reject_no_endpoints" => reject_no_endpoints(),
        "blind_output_dnat_no_route" => output_dnat_no_route(),
        "blind_proxy_arp_no_default" => proxy_arp_no_default(),
        "blind_stale_endpoint_unreachable" => stale_endpoint_unreachable(),
        _ => return crate::blind_l2::build(name),
    })
}

/// Short ARP timers on `dev` of `n`: a failed resolution takes ~300 ms,
/// not 3 s (so the ICMP error it causes comes within a client's timeout).
pub(crate) fn fast_arp(n: &Netns, dev: &str) -> Result<()> {
    n.sysctl(&format!("net.ipv4.neigh.{dev}.retrans_time_ms"), "100")?;
    n.sysctl(&format!("net.ipv4.neigh.{dev}.mcast_solicit"), "2")?;
    n.sysctl(&format!("net.ipv4.neigh.{dev}.ucast_solicit"), "1")?;
    Ok(())
}

/// Two nodes, each with one pod:
/// pod (10.B.1.2) — lxc0 (10.B.1.1) node1 eth0 (10.B.0.1) — eth0
/// (10.B.0.2) node2 lxc0 (10.B.2.1) — pod2 (`pod2_addr`, /24, gateway
/// 10.B.2.1). No route between the pod subnets: each scene adds its own
/// (underlay or overlay). Namespaces: pod, node1, node2, pod2.
fn two_nodes(b: u8, pod2_addr: &str) -> Result<Vec<Netns>> {
    let p = unique_prefix();
    let (pod, n1, n2, pod2) = (
        ns(&p, "pod")?,
        ns(&p, "node1")?,
        ns(&p, "node2")?,
        ns(&p, "pod2")?,
    );
    veth(&pod, "eth0", &n1, "lxc0")?;
    veth(&n1, "eth0", &n2, "eth0")?;
    veth(&n2, "lxc0", &pod2, "eth0")?;
    pod.ip(&["addr", "add", &format!("10.{b}.1.2/24"), "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", &format!("10.{b}.1.1")])?;
    n1.ip(&["addr", "add", &format!("10.{b}.1.1/24"), "dev", "lxc0"])?;
    n1.ip(&["addr", "add", &format!("10.{b}.0.1/24"), "dev", "eth0"])?;
    n2.ip(&["addr", "add", &format!("10.{b}.0.2/24"), "dev", "eth0"])?;
    n2.ip(&["addr", "add", &format!("10.{b}.2.1/24"), "dev", "lxc0"])?;
    pod2.ip(&["addr", "add", &format!("{pod2_addr}/24"), "dev", "eth0"])?;
    // The gateway on-link even when pod2's address is outside its /24.
    pod2.ip(&["route", "add", &format!("10.{b}.2.1"), "dev", "eth0"])?;
    pod2.ip(&["route", "add", "default", "via", &format!("10.{b}.2.1")])?;
    for n in [&n1, &n2] {
        n.sysctl("net.ipv4.ip_forward", "1")?;
    }
    Ok(vec![pod, n1, n2, pod2])
}

/// A VTEP as flannel's vxlan backend makes it: `flannel.1` (VNI `vni`,
/// UDP `port`, no learning) on eth0 of `node`, with MAC `mac` and the
/// address 10.B.`i`.0/32.
fn flannel_vtep(node: &Netns, b: u8, i: u8, vni: u32, port: u16, mac: &str) -> Result<()> {
    node.ip(&[
        "link",
        "add",
        "flannel.1",
        "address",
        mac,
        "type",
        "vxlan",
        "id",
        &vni.to_string(),
        "local",
        &format!("10.{b}.0.{i}"),
        "dev",
        "eth0",
        "nolearning",
        "dstport",
        &port.to_string(),
    ])?;
    node.ip(&[
        "addr",
        "add",
        &format!("10.{b}.{i}.0/32"),
        "dev",
        "flannel.1",
    ])?;
    node.ip(&["link", "set", "flannel.1", "up"])?;
    Ok(())
}

/// What flanneld writes on `node` for the peer whose pod subnet is
/// 10.B.`peer`.0/24: the route via the peer's VTEP address (onlink), the
/// VTEP's neighbour entry (`mac`), and (when `fdb`) the FDB entry that
/// sends that MAC to the peer's underlay address.
fn flannel_peer(node: &Netns, b: u8, peer: u8, mac: &str, fdb: bool) -> Result<()> {
    let vtep = format!("10.{b}.{peer}.0");
    node.ip(&[
        "neigh",
        "replace",
        &vtep,
        "lladdr",
        mac,
        "dev",
        "flannel.1",
        "nud",
        "permanent",
    ])?;
    if fdb {
        node.exec(&[
            "bridge",
            "fdb",
            "append",
            mac,
            "dev",
            "flannel.1",
            "dst",
            &format!("10.{b}.0.{peer}"),
        ])?;
    }
    node.ip(&[
        "route",
        "add",
        &format!("10.{b}.{peer}.0/24"),
        "via",
        &vtep,
        "dev",
        "flannel.1",
        "onlink",
    ])?;
    Ok(())
}

const MAC1: &str = "0e:00:00:00:01:01";
const MAC2: &str = "0e:00:00:00:02:02";

/// Two nodes joined by flannel's vxlan backend, node1 (VNI, port) =
/// `one`, node2's = `two`; node1's entries for node2 with `mac_of_2` and
/// the FDB entry when `fdb`; node2's entries for node1 right. pod2
/// (10.B.2.2) listens on 8080 (TCP) when `tcp`.
fn flannel_pair(
    b: u8,
    one: (u32, u16),
    two: (u32, u16),
    mac_of_2: &str,
    fdb: bool,
) -> Result<Vec<Netns>> {
    let nss = two_nodes(b, &format!("10.{b}.2.2"))?;
    flannel_vtep(&nss[1], b, 1, one.0, one.1, MAC1)?;
    flannel_vtep(&nss[2], b, 2, two.0, two.1, MAC2)?;
    flannel_peer(&nss[1], b, 2, mac_of_2, fdb)?;
    flannel_peer(&nss[2], b, 1, MAC1, true)?;
    Ok(nss)
}

/// Pod-to-pod TCP across a flannel pair, pod2 listening: what most of the
/// overlay scenes send.
fn overlay_tcp(
    name: &'static str,
    description: &'static str,
    b: u8,
    nss: Vec<Netns>,
) -> Result<Scenario> {
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    let mut sc = simple(name, description, nss, target.clone(), tcp_connect(&target));
    sc.servers.push(srv);
    Ok(sc)
}

/// projectcalico/calico#8953 ("large pod packets is not encapsulated in
/// ip-in-ip packets and are silently dropped"): pods' large packets did
/// not fit the tunnel and never arrived, while small ones did. Here a pod
/// whose eth0 keeps MTU 1500 sends one 1460-byte UDP datagram (DF set,
/// Linux's default path-MTU discovery) to a pod on another node over
/// flannel's VXLAN (flannel.1 MTU 1450): node1 cannot forward it into
/// flannel.1, drops it and answers "fragmentation needed". True cause:
/// the pod MTU is larger than the overlay's (1500 > 1450).
fn vxlan_mtu() -> Result<Scenario> {
    let b = 200;
    let nss = flannel_pair(b, (1, 8472), (1, 8472), MAC2, true)?;
    let target = format!("10.{b}.2.2:5353");
    let srv = serve(&nss[3], "udp-echo", &target, 15)?;
    let mut sc = simple(
        "blind_vxlan_mtu",
        "a pod with MTU 1500 sends one 1460-byte DF datagram into flannel's VXLAN (MTU 1450)",
        nss,
        target.clone(),
        strings(&[
            "udp-send",
            &target,
            "--size",
            "1460",
            "--timeout-ms",
            &crate::scaled_arg(1000),
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubernetes#66651 ("Conntrack table not flushed when pod
/// deleted"): a client kept sending UDP from one source port to a
/// Service; the server pod was recreated with a new IP, and the client's
/// packets kept hitting the old conntrack entry (DNAT to the dead pod's
/// IP): a black hole. Here the node DNATs the Service 10.201.96.10:53 to
/// the pod 10.201.2.2 on its bridge cni0; one exchange from the client's
/// port 40053 creates the entry; the pod is deleted and recreated as
/// 10.201.2.3, the DNAT rule follows it, but the same flow still goes to
/// 10.201.2.2, which nobody answers. True cause: the stale conntrack
/// entry (`conntrack -D -p udp --orig-dst 10.201.96.10`).
fn stale_udp_conntrack() -> Result<Scenario> {
    let b = 201;
    let p = unique_prefix();
    let (client, node, old, new) = (
        ns(&p, "client")?,
        ns(&p, "node")?,
        ns(&p, "podold")?,
        ns(&p, "podnew")?,
    );
    veth(&client, "c0", &node, "r0")?;
    client.ip(&["addr", "add", &format!("10.{b}.1.2/24"), "dev", "c0"])?;
    client.ip(&["route", "add", "default", "via", &format!("10.{b}.1.1")])?;
    node.ip(&["addr", "add", &format!("10.{b}.1.1/24"), "dev", "r0"])?;
    node.ip(&["link", "add", "cni0", "type", "bridge"])?;
    node.ip(&["link", "set", "cni0", "up"])?;
    node.ip(&["addr", "add", &format!("10.{b}.2.1/24"), "dev", "cni0"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    for (pod, port, addr) in [(&old, "vethold", "2.2"), (&new, "vethnew", "2.3")] {
        veth(pod, "eth0", &node, port)?;
        node.ip(&["link", "set", port, "master", "cni0"])?;
        pod.ip(&["addr", "add", &format!("10.{b}.{addr}/24"), "dev", "eth0"])?;
        pod.ip(&["route", "add", "default", "via", &format!("10.{b}.2.1")])?;
    }
    fast_arp(&node, "cni0")?;
    let dnat = |ep: &str| {
        format!(
            "flush chain ip kube svc; add rule ip kube svc ip daddr 10.{b}.96.10 udp dport 53 dnat to 10.{b}.{ep}:53"
        )
    };
    node.exec(&[
        "nft",
        "add table ip kube; add chain ip kube svc { type nat hook prerouting priority -100; }",
    ])?;
    node.exec(&["nft", &dnat("2.2")])?;
    let vip = format!("10.{b}.96.10:53");
    let from = format!("10.{b}.1.2:40053");
    let send = strings(&[
        "udp-send",
        &vip,
        "--bind",
        &from,
        "--timeout-ms",
        &crate::scaled_arg(1000),
    ]);
    let first_srv = serve(&old, "udp-echo", &format!("10.{b}.2.2:53"), 15)?;
    let probe = netprobe_bin();
    let mut args: Vec<&str> = vec![probe.to_str().unwrap()];
    args.extend(send.iter().map(String::as_str));
    let first = client.exec_status(&args);
    let first = String::from_utf8_lossy(&first.stdout).trim().to_string();
    anyhow::ensure!(
        first.starts_with("reply"),
        "the first exchange was not answered: {first:?}"
    );
    // The pod is deleted (its namespace and veth go) and recreated with a
    // new IP; kube-proxy moves the DNAT rule, not the conntrack entry.
    drop(first_srv);
    drop(old);
    node.ip(&["neigh", "flush", "dev", "cni0"])?;
    node.exec(&["nft", &dnat("2.3")])?;
    let srv = serve(&new, "udp-echo", &format!("10.{b}.2.3:53"), 15)?;
    let mut sc = simple(
        "blind_stale_udp_conntrack",
        "a UDP flow to a Service keeps its conntrack entry to a deleted pod after the endpoint moved",
        vec![client, node, new],
        vip,
        send,
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// projectcalico/calico#3246 ("Calico blackhole route and IP from this
/// subnet on the other host"): node1 held the IPAM block 10.192.79.128/26
/// (so a `blackhole` route for it) while Calico gave free IPs of that
/// block to pods of node2; pods of node1 could not reach them. Here a pod
/// on node1 connects to a Service whose endpoint is such a pod
/// (10.202.64.9 on node2): node1 DNATs the Service to it, and the route
/// for the translated address is node1's blackhole for its block. True
/// cause: the block's blackhole route on node1 (an IPAM block borrowed
/// by another node, no /32 route for it).
fn dnat_blackhole() -> Result<Scenario> {
    let b = 202;
    let nss = two_nodes(b, &format!("10.{b}.64.9"))?;
    // pod2's address is outside node2's lxc0 /24: a host route, as Calico
    // writes one per pod.
    nss[2].ip(&["route", "add", &format!("10.{b}.64.9/32"), "dev", "lxc0"])?;
    nss[2].ip(&[
        "route",
        "add",
        &format!("10.{b}.1.0/24"),
        "via",
        &format!("10.{b}.0.1"),
    ])?;
    // node1: the pool's routes to node2, and its own block's blackhole.
    nss[1].ip(&[
        "route",
        "add",
        &format!("10.{b}.64.0/24"),
        "via",
        &format!("10.{b}.0.2"),
    ])?;
    nss[1].ip(&["route", "add", "blackhole", &format!("10.{b}.64.0/26")])?;
    nss[1].exec(&[
        "iptables",
        "-w",
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-d",
        &format!("10.{b}.96.20/32"),
        "-p",
        "tcp",
        "--dport",
        "80",
        "-m",
        "comment",
        "--comment",
        "default/api:http cluster IP",
        "-j",
        "DNAT",
        "--to-destination",
        &format!("10.{b}.64.9:8080"),
    ])?;
    let srv = listen(&nss[3], &format!("10.{b}.64.9:8080"), 15)?;
    let target = format!("10.{b}.96.20:80");
    let mut sc = simple(
        "blind_dnat_blackhole",
        "a Service DNATed to a pod whose address is in the node's own blackholed IPAM block",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubernetes#22698 ("Using iptables kube-proxy, additional IP
/// address routed over second interface doesn't route anywhere"): traffic
/// for an extra IP fell into a custom policy rule and, once kube-proxy
/// DNATed it, had no route onward. Here the node (router) DNATs the
/// externalIP 10.203.96.30:8080 to the pod 10.203.2.2:8080, and a policy
/// rule left by a former setup (`from 10.203.1.0/24 to 10.203.2.0/24
/// prohibit`) matches the translated packet. True cause: the policy rule
/// (ip rule), not the Service or the pod.
fn dnat_prohibit() -> Result<Scenario> {
    let b = 203;
    let nss = routed(b)?;
    nss[1].exec(&[
        "nft",
        &format!(
            "add table ip kube; add chain ip kube svc {{ type nat hook prerouting priority -100; }}; add rule ip kube svc ip daddr 10.{b}.96.30 tcp dport 8080 dnat to 10.{b}.2.2:8080"
        ),
    ])?;
    nss[1].ip(&[
        "rule",
        "add",
        "pref",
        "100",
        "from",
        &format!("10.{b}.1.0/24"),
        "to",
        &format!("10.{b}.2.0/24"),
        "prohibit",
    ])?;
    let srv = listen(&nss[2], &format!("10.{b}.2.2:8080"), 15)?;
    let target = format!("10.{b}.96.30:8080");
    let mut sc = simple(
        "blind_dnat_prohibit",
        "an externalIP DNATed to a pod; a policy rule prohibits the translated destination",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubernetes#13375 ("Pod-to-self networking require hairpin
/// mode"): with kube-proxy in iptables mode, a pod connecting to a
/// Service it backs is DNATed back to itself, and the Linux bridge drops
/// the frame because it would leave by the port it came in on; the fix is
/// hairpin mode on the bridge ports (kubelet --hairpin-mode). Here the
/// node's bridge cni0 has br_netfilter on (bridge-nf-call-iptables = 1),
/// kube-proxy's DNAT of 10.204.96.40:80 to the pod 10.204.1.2:8080, and
/// the pod's port with hairpin off. True cause: hairpin mode off on the
/// pod's bridge port.
fn hairpin_off() -> Result<Scenario> {
    let b = 204;
    let p = unique_prefix();
    let (pod, node) = (ns(&p, "pod")?, ns(&p, "node")?);
    node.ip(&["link", "add", "cni0", "type", "bridge"])?;
    node.ip(&["link", "set", "cni0", "up"])?;
    node.ip(&["addr", "add", &format!("10.{b}.1.1/24"), "dev", "cni0"])?;
    veth(&pod, "eth0", &node, "vethpod")?;
    node.ip(&["link", "set", "vethpod", "master", "cni0"])?;
    node.exec(&["bridge", "link", "set", "dev", "vethpod", "hairpin", "off"])?;
    pod.ip(&["addr", "add", &format!("10.{b}.1.2/24"), "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", &format!("10.{b}.1.1")])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    node.sysctl("net.bridge.bridge-nf-call-iptables", "1")?;
    node.exec_file(
        &["iptables-restore", "-w", "--noflush"],
        &format!(
            r#"*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-WEB - [0:0]
:KUBE-SEP-WEB - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE
-A KUBE-SERVICES -d 10.{b}.96.40/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-WEB
-A KUBE-SVC-WEB -m comment --comment "default/web:http -> 10.{b}.1.2:8080" -j KUBE-SEP-WEB
-A KUBE-SEP-WEB -s 10.{b}.1.2/32 -m comment --comment "default/web:http" -j MARK --set-xmark 0x4000/0x4000
-A KUBE-SEP-WEB -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 10.{b}.1.2:8080
COMMIT
"#
        ),
    )?;
    let srv = listen(&pod, &format!("10.{b}.1.2:8080"), 15)?;
    let target = format!("10.{b}.96.40:80");
    let mut sc = simple(
        "blind_hairpin_off",
        "a pod connects to its own Service through a bridge (br_netfilter on) whose port has hairpin off",
        vec![pod, node],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// ipspace/netlab#2259 ("Change STP parameters on bridge and VXLAN
/// interface"): Linux bridge access ports stayed in the STP *learning*
/// state forever, so hosts behind them were unreachable. Here the node's
/// bridge cni0 has the server pod's port stuck in `learning` (state 2):
/// the node's ARP requests for the pod are not forwarded to it. True
/// cause: the pod's bridge port is not forwarding (its STP state).
fn bridge_port_learning() -> Result<Scenario> {
    let b = 205;
    let p = unique_prefix();
    let (client, node, pod) = (ns(&p, "client")?, ns(&p, "node")?, ns(&p, "pod")?);
    veth(&client, "c0", &node, "r0")?;
    client.ip(&["addr", "add", &format!("10.{b}.1.2/24"), "dev", "c0"])?;
    client.ip(&["route", "add", "default", "via", &format!("10.{b}.1.1")])?;
    node.ip(&["addr", "add", &format!("10.{b}.1.1/24"), "dev", "r0"])?;
    node.ip(&["link", "add", "cni0", "type", "bridge"])?;
    node.ip(&["link", "set", "cni0", "up"])?;
    node.ip(&["addr", "add", &format!("10.{b}.2.1/24"), "dev", "cni0"])?;
    veth(&pod, "eth0", &node, "vethpod")?;
    node.ip(&["link", "set", "vethpod", "master", "cni0"])?;
    pod.ip(&["addr", "add", &format!("10.{b}.2.2/24"), "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", &format!("10.{b}.2.1")])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    fast_arp(&node, "cni0")?;
    node.exec(&["bridge", "link", "set", "dev", "vethpod", "state", "2"])?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&pod, &target, 15)?;
    let mut sc = simple(
        "blind_bridge_port_learning",
        "the server pod's bridge port is stuck in the STP learning state",
        vec![client, node, pod],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// flannel-io/flannel#1473 ("k8s packets dropped between flannel.1 and
/// cni0, no connectivity between hosts"): flanneld programmed a VTEP MAC
/// for the peer that was not the MAC of the peer's flannel.1 (a stale
/// one), so the peer received the encapsulated frames and dropped them
/// (not addressed to it). Here node1's neighbour and FDB entries for
/// node2's VTEP carry a wrong MAC: node2 decapsulates frames addressed to
/// another host (PACKET_OTHERHOST). The far side is traced too. True
/// cause: node1's stale VTEP MAC for node2 (flanneld's neighbour/FDB
/// entries).
fn wrong_vtep_mac() -> Result<Scenario> {
    let b = 206;
    let nss = flannel_pair(b, (1, 8472), (1, 8472), "0e:00:00:00:02:99", true)?;
    overlay_tcp(
        "blind_wrong_vtep_mac",
        "flannel vxlan: node1's entries for node2's VTEP have a stale MAC; node2 gets frames addressed to another host",
        b,
        nss,
    )
}

/// flannel-io/flannel#592 ("Flannel.1 drop packets regularly in a 80
/// nodes cluster"): flannel.1's TX drops grew, suspected to be FDB entries
/// for peers missing (expired, not yet rewritten from etcd) so the VXLAN
/// device had nowhere to send. Here node1 has the route and the neighbour
/// entry for node2's VTEP but no FDB entry: flannel.1 cannot encapsulate.
/// True cause: the missing FDB entry on node1 (`bridge fdb append MAC dev
/// flannel.1 dst NODE2`).
fn vxlan_missing_fdb() -> Result<Scenario> {
    let b = 207;
    let nss = flannel_pair(b, (1, 8472), (1, 8472), MAC2, false)?;
    overlay_tcp(
        "blind_vxlan_missing_fdb",
        "flannel vxlan: node1 has no FDB entry for node2's VTEP MAC",
        b,
        nss,
    )
}

/// flannel-io/flannel#2018 ("[QUESTION] VXLAN VNI"): asked whether nodes
/// may use different VNIs, the maintainers answered that the VNI must be
/// the same on every node. Here node1's flannel.1 has VNI 1 and node2's
/// VNI 2 (same UDP port): node2 receives the encapsulated packets and
/// has no device for VNI 1. True cause: the VNI mismatch between nodes.
fn vxlan_wrong_vni() -> Result<Scenario> {
    let b = 208;
    let nss = flannel_pair(b, (1, 8472), (2, 8472), MAC2, true)?;
    overlay_tcp(
        "blind_vxlan_wrong_vni",
        "flannel vxlan: node1 uses VNI 1, node2 VNI 2",
        b,
        nss,
    )
}

/// projectcalico/calico#10692 ("K8s on Ubuntu 24.04, VXLAN - no traffic
/// to pods on other nodes"): the VXLAN port came from FELIX_VXLANPORT in
/// the DaemonSet (4799) on some nodes and 4789 elsewhere, so nodes sent
/// to a port their peers did not listen on. Here node1 sends to UDP 4799,
/// node2 listens on 4789. True cause: the VXLAN port mismatch.
fn vxlan_wrong_port() -> Result<Scenario> {
    let b = 209;
    let nss = flannel_pair(b, (4096, 4799), (4096, 4789), MAC2, true)?;
    overlay_tcp(
        "blind_vxlan_wrong_port",
        "vxlan: node1 sends to UDP 4799, node2 listens on 4789",
        b,
        nss,
    )
}

/// kubernetes/kubernetes#40182 ("Upgrading docker 1.13 on nodes causes
/// outbound container traffic to stop working"), also flannel-io/flannel
/// #799 and PR #872: Docker 1.13 set the FORWARD policy to DROP, so
/// nodes dropped pod traffic they had to forward. Here node2 (the far
/// side of flannel's VXLAN) has Docker's FORWARD rules and policy DROP:
/// the decapsulated packet for pod2 is dropped there. True cause: node2's
/// FORWARD policy DROP (`iptables -P FORWARD ACCEPT`, or flannel's
/// FORWARD rules for the pod CIDR).
fn forward_policy_drop() -> Result<Scenario> {
    let b = 210;
    let nss = flannel_pair(b, (1, 8472), (1, 8472), MAC2, true)?;
    nss[2].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r"*filter
:FORWARD DROP [0:0]
:DOCKER - [0:0]
:DOCKER-ISOLATION - [0:0]
-A FORWARD -j DOCKER-ISOLATION
-A FORWARD -o docker0 -j DOCKER
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -i docker0 ! -o docker0 -j ACCEPT
-A FORWARD -i docker0 -o docker0 -j ACCEPT
-A DOCKER-ISOLATION -j RETURN
COMMIT
",
    )?;
    overlay_tcp(
        "blind_forward_policy_drop",
        "flannel vxlan: node2 (Docker 1.13) has FORWARD policy DROP",
        b,
        nss,
    )
}

/// istio/istio#11838 ("Sidecar does not open TCP port and ends up failing
/// the service and liveness probes"): istio-init's iptables redirected
/// the pod's inbound port 80 to 15001, where the sidecar was not
/// listening, so connections to the app failed. Here the server pod has
/// the ISTIO_INBOUND / ISTIO_IN_REDIRECT chains (REDIRECT --to-port
/// 15001) and the app listening on 80, nothing on 15001: the SYN is
/// answered by a reset. True cause: nothing listens on the redirect's
/// port 15001 (the sidecar is not up), not the app's port 80.
fn redirect_no_listener() -> Result<Scenario> {
    let b = 220;
    let nss = routed(b)?;
    nss[2].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r"*nat
:ISTIO_INBOUND - [0:0]
:ISTIO_IN_REDIRECT - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A ISTIO_INBOUND -p tcp --dport 80 -j ISTIO_IN_REDIRECT
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
",
    )?;
    let target = format!("10.{b}.2.2:80");
    let srv = listen(&nss[2], &target, 15)?;
    let mut sc = simple(
        "blind_redirect_no_listener",
        "istio-init redirects the pod's port 80 to 15001, where no sidecar listens",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubernetes#44516 ("Need ICMP reject rules for externalIPs
/// and port as well"): kube-proxy (iptables) writes, for a Service with no
/// endpoints, `-A KUBE-SERVICES -d CLUSTER_IP ... "has no endpoints" -j
/// REJECT --reject-with icmp-port-unreachable`, so clients get
/// "connection refused" as from a closed port. Here the node rejects a
/// TCP connection to the ClusterIP 10.225.96.50:80 of `default/web:http`,
/// whose pods are gone. True cause: the Service has no (ready)
/// endpoints; kube-proxy's REJECT rule answered, no socket was involved.
fn reject_no_endpoints() -> Result<Scenario> {
    let b = 225;
    let nss = routed(b)?;
    nss[1].ip(&[
        "route",
        "add",
        &format!("10.{b}.96.0/24"),
        "via",
        &format!("10.{b}.2.2"),
    ])?;
    nss[1].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        &format!(
            r#"*filter
:KUBE-SERVICES - [0:0]
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.{b}.96.50/32 -p tcp -m comment --comment "default/web:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
"#
        ),
    )?;
    let target = format!("10.{b}.96.50:80");
    Ok(simple(
        "blind_reject_no_endpoints",
        "kube-proxy (iptables) rejects a ClusterIP whose Service has no endpoints",
        nss,
        target.clone(),
        tcp_connect(&target),
    ))
}

/// cloudnativelabs/kube-router#425 ("Service proxy: No route to host"):
/// connections to the kubernetes Service (10.96.0.1:443) through the
/// service proxy failed with "No route to host" / timeouts. Here a
/// process on a node without a default route (the Service CIDR routed on
/// eth0, as air-gapped nodes do) connects to the ClusterIP 10.254.96.1:443;
/// kube-proxy's OUTPUT DNAT sends it to the endpoint 10.254.64.5:6443 (a
/// pod network the node has no route to: its CNI is not up), and the
/// re-route after NAT in OUTPUT fails. True cause: no route to the
/// endpoint's network on the node (the CNI's routes are missing).
fn output_dnat_no_route() -> Result<Scenario> {
    let b = 254;
    let p = unique_prefix();
    let (node, peer) = (ns(&p, "node")?, ns(&p, "peer")?);
    veth(&node, "eth0", &peer, "eth0")?;
    node.ip(&["addr", "add", &format!("10.{b}.0.1/24"), "dev", "eth0"])?;
    peer.ip(&["addr", "add", &format!("10.{b}.0.2/24"), "dev", "eth0"])?;
    node.ip(&["route", "add", &format!("10.{b}.96.0/24"), "dev", "eth0"])?;
    node.exec_file(
        &["iptables-restore", "-w", "--noflush"],
        &format!(
            r#"*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
:KUBE-SEP-API - [0:0]
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.{b}.96.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment "default/kubernetes:https -> 10.{b}.64.5:6443" -j KUBE-SEP-API
-A KUBE-SEP-API -p tcp -m comment --comment "default/kubernetes:https" -m tcp -j DNAT --to-destination 10.{b}.64.5:6443
COMMIT
"#
        ),
    )?;
    let target = format!("10.{b}.96.1:443");
    Ok(simple(
        "blind_output_dnat_no_route",
        "a node process to a ClusterIP: OUTPUT DNAT to an endpoint the node has no route to",
        vec![node, peer],
        target.clone(),
        tcp_connect(&target),
    ))
}

/// projectcalico/calico#3270 ("Host won't respond to workload ARPs if
/// host has no default route"): Calico pods route via 169.254.1.1 and
/// rely on proxy ARP on the host's cali veth, but Linux only proxies ARP
/// for addresses it has a route to, so on a host without a default route
/// pods get no ARP answer. Here the node has proxy_arp on cali0, routes
/// to the pod and to the server's network, and no default route: the
/// pod's ARP for 169.254.1.1 is not answered and its SYN never leaves.
/// True cause: the node has no route to 169.254.1.1 (no default route),
/// so proxy ARP does not answer.
fn proxy_arp_no_default() -> Result<Scenario> {
    let b = 255;
    let p = unique_prefix();
    let (pod, node, server) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "server")?);
    veth(&pod, "eth0", &node, "cali0")?;
    veth(&node, "eth1", &server, "eth0")?;
    pod.ip(&["addr", "add", &format!("10.{b}.1.2/32"), "dev", "eth0"])?;
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
    fast_arp(&pod, "eth0")?;
    node.ip(&[
        "route",
        "add",
        &format!("10.{b}.1.2/32"),
        "dev",
        "cali0",
        "scope",
        "link",
    ])?;
    node.ip(&["addr", "add", &format!("10.{b}.2.1/24"), "dev", "eth1"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    node.sysctl("net.ipv4.conf.cali0.proxy_arp", "1")?;
    server.ip(&["addr", "add", &format!("10.{b}.2.2/24"), "dev", "eth0"])?;
    server.ip(&["route", "add", "default", "via", &format!("10.{b}.2.1")])?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&server, &target, 15)?;
    let mut sc = simple(
        "blind_proxy_arp_no_default",
        "a Calico-style pod (gateway 169.254.1.1) on a node without a default route: proxy ARP does not answer",
        vec![pod, node, server],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubernetes#24092 ("Service IP not available (no route to
/// host) after pod has been restarted on another node"): kube-proxy's
/// rules still DNATed the Service to the pod's old IP, which nobody had
/// any more, and clients got "no route to host". Here the node DNATs
/// 10.255.196.60:80 to 10.255.102.9:80, an address on its pod network
/// that no pod has: the node's ARP fails and it answers the client's SYN
/// with ICMP host unreachable. True cause: the Service's endpoint is
/// stale (the pod moved; kube-proxy's rules or the Endpoints were not
/// updated).
fn stale_endpoint_unreachable() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, node, pod) = (ns(&p, "client")?, ns(&p, "node")?, ns(&p, "pod")?);
    veth(&client, "c0", &node, "r0")?;
    veth(&node, "cni0", &pod, "eth0")?;
    client.ip(&["addr", "add", "10.255.101.2/24", "dev", "c0"])?;
    client.ip(&["route", "add", "default", "via", "10.255.101.1"])?;
    node.ip(&["addr", "add", "10.255.101.1/24", "dev", "r0"])?;
    node.ip(&["addr", "add", "10.255.102.1/24", "dev", "cni0"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    fast_arp(&node, "cni0")?;
    // Another pod of the node, still there (at .2).
    pod.ip(&["addr", "add", "10.255.102.2/24", "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", "10.255.102.1"])?;
    node.exec(&[
        "iptables",
        "-w",
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-d",
        "10.255.196.60/32",
        "-p",
        "tcp",
        "--dport",
        "80",
        "-m",
        "comment",
        "--comment",
        "default/app:http cluster IP",
        "-j",
        "DNAT",
        "--to-destination",
        "10.255.102.9:80",
    ])?;
    let target = "10.255.196.60:80".to_string();
    Ok(simple(
        "blind_stale_endpoint_unreachable",
        "a Service DNATed to a pod IP nobody has any more: ARP fails, ICMP host unreachable",
        vec![client, node, pod],
        target.clone(),
        tcp_connect(&target),
    ))
}
