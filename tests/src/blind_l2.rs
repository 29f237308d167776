//! Blind scenes of one class of cause: a Linux bridge (the pods' bridge of
//! a CNI: the bridge plugin's cni0, a Multus secondary network's br1)
//! that will not forward, because of its own configuration or state. Each
//! rebuilds, in namespaces of its own, a failure reported in a public
//! thread, cited in its doc comment, written without knowledge of
//! tracer's rules: a bridge with STP on whose new ports are still
//! listening, port isolation between two pods, VLAN filtering with an
//! uplink that lacks the pods' VLAN, hairpin off for a pod reaching itself
//! through a NodePort. One scene is an honest trap: it looks like the
//! bridge does not forward to a new pod, but the bridge is fine and the
//! node's stale neighbour entry sends to a MAC nobody has any more.
//!
//! Address ranges: 10.196, 10.197 and 10.198. `scenarios::build` falls
//! back to [`build`] (through `blind_scenes::build`), which falls back to
//! [`crate::blind_tunnel::build`] (then [`crate::blind_sysctl::build`],
//! [`crate::blind_sock::build`], [`crate::blind_ct::build`] and
//! [`crate::blind_bpf::build`]).

use anyhow::{Context, Result};

use crate::{
    blind_scenes::fast_arp,
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, simple, tcp_connect},
    tracer::netprobe_bin,
};

pub const BLIND_L2: &[&str] = &[
    "blind_l2_stp_listening",
    "blind_l2_port_isolated",
    "blind_l2_vlan_uplink_missing",
    "blind_l2_hairpin_nodeport",
    "blind_l2_stale_neighbor_new_pod",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_l2_stp_listening" => stp_listening(),
        "blind_l2_port_isolated" => port_isolated(),
        "blind_l2_vlan_uplink_missing" => vlan_uplink_missing(),
        "blind_l2_hairpin_nodeport" => hairpin_nodeport(),
        "blind_l2_stale_neighbor_new_pod" => stale_neighbor_new_pod(),
        _ => return crate::blind_tunnel::build(name),
    })
}

/// A pod `pod` on bridge `br` of `node`: a veth eth0 (`addr`, a /24) in
/// the pod and `port` on the node, enslaved to `br`.
fn pod_on(pod: &Netns, node: &Netns, br: &str, port: &str, addr: &str) -> Result<()> {
    veth(pod, "eth0", node, port)?;
    node.ip(&["link", "set", port, "master", br])?;
    pod.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
    Ok(())
}

/// The MAC of `pod`'s eth0 (set while it is down).
fn set_mac(pod: &Netns, mac: &str) -> Result<()> {
    pod.ip(&["link", "set", "eth0", "down"])?;
    pod.ip(&["link", "set", "eth0", "address", mac])?;
    pod.ip(&["link", "set", "eth0", "up"])?;
    Ok(())
}

/// One TCP connection from `from` to `target` before tracer starts (what
/// the pods did before the failure); it must succeed.
pub(crate) fn exchange(from: &Netns, target: &str) -> Result<()> {
    let probe = netprobe_bin();
    let t = crate::scaled_arg(1000);
    let out = from.exec_status(&[
        probe.to_str().unwrap(),
        "tcp-connect",
        target,
        "--timeout-ms",
        &t,
    ]);
    let seen = String::from_utf8_lossy(&out.stdout).trim().to_string();
    anyhow::ensure!(
        seen.starts_with("connected"),
        "the exchange before the failure did not work: {seen:?}"
    );
    Ok(())
}

/// kubevirt/kubevirtci#1821 ("gocli, node bridges: Disable stp"): the
/// nodes' bridges were created with STP enabled, which "causes delays in
/// their availability to forward"; the fix disabled STP on these acyclic
/// networks. The same in OpenNebula/one-deploy#290 ("Create
/// NetworkManager bridges with STP disabled"): NetworkManager turns STP on
/// by default and its forward delay "keeps every new VM tap from
/// forwarding for 30s". Here a Multus secondary network's bridge br1 was
/// created by NetworkManager with STP on (forward delay 30 s), and two
/// pods were attached to it just before: both ports are in the STP
/// *listening* state (then learning: 60 s in all) and forward nothing.
/// pod1 connects to pod2 (10.196.1.12:8080, listening); its ARP request
/// is dropped by the bridge on entry. True cause: STP on the bridge (its
/// new ports not forwarding yet); turn STP off (`ip link set br1 type
/// bridge stp_state 0`, `bridge.stp no` in NetworkManager) or set the
/// forward delay to its minimum.
fn stp_listening() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod1, node, pod2) = (ns(&p, "pod1")?, ns(&p, "node")?, ns(&p, "pod2")?);
    node.ip(&[
        "link",
        "add",
        "br1",
        "type",
        "bridge",
        "stp_state",
        "1",
        "forward_delay",
        "3000",
    ])?;
    node.ip(&["link", "set", "br1", "up"])?;
    pod_on(&pod1, &node, "br1", "veth1", "10.196.1.11")?;
    pod_on(&pod2, &node, "br1", "veth2", "10.196.1.12")?;
    fast_arp(&pod1, "eth0")?;
    let target = "10.196.1.12:8080".to_string();
    let srv = listen(&pod2, &target, 15)?;
    let mut sc = simple(
        "blind_l2_stp_listening",
        "two pods on a secondary bridge with STP on (forward delay 30 s): their new ports are still listening",
        vec![pod1, node, pod2],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// containernetworking/plugins#1135 ("bridge: Add port isolation option",
/// merged as PR #1141, `portIsolation`): a port set `isolated` cannot
/// communicate with another isolated port of the bridge; "containers
/// connected to the network cannot communicate with each other over the
/// linux-bridge". cocoonstack/cocoon#68 ("add --isolated to fence
/// same-node VMs at the bridge") shows what it does on a live node:
/// "same-node VM<->VM (RDP/ping) is dropped, while the gateway, egress
/// and routed (cross-node) traffic are unaffected", the flag "re-applied
/// on NIC recover". Here two pods on the secondary bridge br1 talked
/// (pod1's ARP entry for pod2 and the bridge's FDB are warm), then their
/// NetworkAttachmentDefinition got `portIsolation: true` and both ports
/// were set isolated. pod1 connects to pod2 (10.196.101.12:8080,
/// listening) again: its SYN goes to pod2's MAC and the bridge does not
/// forward it from one isolated port to another. True cause: port
/// isolation on both pods' bridge ports (`bridge link set dev veth1
/// isolated off`, or `portIsolation: false` in the NAD if the pods must
/// talk).
fn port_isolated() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod1, node, pod2) = (ns(&p, "pod1")?, ns(&p, "node")?, ns(&p, "pod2")?);
    node.ip(&["link", "add", "br1", "type", "bridge"])?;
    node.ip(&["link", "set", "br1", "up"])?;
    pod_on(&pod1, &node, "br1", "veth1", "10.196.101.11")?;
    pod_on(&pod2, &node, "br1", "veth2", "10.196.101.12")?;
    let target = "10.196.101.12:8080".to_string();
    let srv = listen(&pod2, &target, 15)?;
    exchange(&pod1, &target)?;
    for port in ["veth1", "veth2"] {
        node.exec(&["bridge", "link", "set", "dev", port, "isolated", "on"])?;
    }
    let mut sc = simple(
        "blind_l2_port_isolated",
        "two pods on a bridge talked, then both their ports were set isolated (portIsolation)",
        vec![pod1, node, pod2],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// TAPPaaS/TAPPaaS#65 ("bridge `lan` missing bridge-vids, VLAN traffic
/// dropped"): a VLAN-aware bridge had no `bridge-vids`, so frames of VLAN
/// 210 from its guests "were dropped at bridge level — never reached the
/// physical NIC"; the fix added the VLANs to the bridge's uplink
/// (`bridge-vids 210 310 610`). The CNI bridge plugin documents the same
/// for pods: with `"vlan": N` it tags the pod's port and turns
/// vlan_filtering on, and "to configure up link for L2 network you need to
/// allow the vlan on the up link interface" (containernetworking/plugins
/// PR #231, `bridge vlan add vid VLAN_ID dev DEV`). Here pod1 (node1) and
/// pod2 (node2) are on a Multus network with `"vlan": 100`: each node's
/// br1 has vlan_filtering 1 and the pod's port in VLAN 100 (PVID,
/// untagged, VLAN 1 removed); node2's uplink eth1 carries VLAN 100, node1's
/// eth1 only the default VLAN 1. pod1 connects to pod2 (10.197.1.12:8080,
/// listening): its ARP request, in VLAN 100, may not leave node1's bridge
/// by eth1. True cause: node1's uplink eth1 is not a member of VLAN 100
/// (`bridge vlan add dev eth1 vid 100` on node1).
fn vlan_uplink_missing() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod1, node1, node2, pod2) = (
        ns(&p, "pod1")?,
        ns(&p, "node1")?,
        ns(&p, "node2")?,
        ns(&p, "pod2")?,
    );
    veth(&node1, "eth1", &node2, "eth1")?;
    for (node, pod, addr) in [
        (&node1, &pod1, "10.197.1.11"),
        (&node2, &pod2, "10.197.1.12"),
    ] {
        node.ip(&[
            "link",
            "add",
            "br1",
            "type",
            "bridge",
            "vlan_filtering",
            "1",
        ])
        .context("this scene needs bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING)")?;
        node.ip(&["link", "set", "br1", "up"])?;
        node.ip(&["link", "set", "eth1", "master", "br1"])?;
        pod_on(pod, node, "br1", "vethpod", addr)?;
        // The bridge plugin's `"vlan": 100` with preserveDefaultVlan false.
        node.exec(&["bridge", "vlan", "del", "dev", "vethpod", "vid", "1"])?;
        node.exec(&[
            "bridge", "vlan", "add", "dev", "vethpod", "vid", "100", "pvid", "untagged",
        ])?;
    }
    // Only node2's uplink was given the pods' VLAN.
    node2.exec(&["bridge", "vlan", "add", "dev", "eth1", "vid", "100"])?;
    fast_arp(&pod1, "eth0")?;
    let target = "10.197.1.12:8080".to_string();
    let srv = listen(&pod2, &target, 15)?;
    let mut sc = simple(
        "blind_l2_vlan_uplink_missing",
        "pods in VLAN 100 on two nodes' vlan_filtering bridges; node1's uplink lacks VLAN 100",
        vec![pod1, node1, node2, pod2],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubernetes#45790 ("hairpin not set by kubelet with CNI
/// plugin"): with the CRI kubelet, `--hairpin-mode=hairpin-veth` was no
/// longer applied, the pods' bridge ports kept hairpin_mode 0, and a pod
/// connecting to its own Service hung after its SYN ("the same is true if
/// you use type: NodePort and access the node IP and port"). The CNI
/// maintainers' answer: the plugin must set hairpin on the bridge port
/// (the bridge plugin's `"hairpinMode": true`; kube-router#1657 points
/// users to the same option). Here the node (eth0 10.198.0.10) has the
/// pod on cni0 (10.198.1.2, its port's hairpin off: the CNI config has no
/// hairpinMode), br_netfilter on (bridge-nf-call-iptables = 1) and
/// kube-proxy's NodePort rules: 10.198.0.10:30080 (any local address) is
/// DNATed to the pod's 10.198.1.2:8080, masqueraded when the pod is its
/// own client. The pod connects to the node's IP and the NodePort: the
/// translated frame would leave the bridge by the port it came in on.
/// True cause: hairpin mode off on the pod's bridge port (`"hairpinMode":
/// true` in the CNI bridge config, or `bridge link set dev vethpod
/// hairpin on`).
fn hairpin_nodeport() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, lan) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "lan")?);
    // The node's uplink, its address the one the pod uses.
    veth(&node, "eth0", &lan, "eth0")?;
    node.ip(&["addr", "add", "10.198.0.10/24", "dev", "eth0"])?;
    lan.ip(&["addr", "add", "10.198.0.1/24", "dev", "eth0"])?;
    node.ip(&["link", "add", "cni0", "type", "bridge"])?;
    node.ip(&["link", "set", "cni0", "up"])?;
    node.ip(&["addr", "add", "10.198.1.1/24", "dev", "cni0"])?;
    pod_on(&pod, &node, "cni0", "vethpod", "10.198.1.2")?;
    node.exec(&["bridge", "link", "set", "dev", "vethpod", "hairpin", "off"])?;
    pod.ip(&["route", "add", "default", "via", "10.198.1.1"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    node.sysctl("net.bridge.bridge-nf-call-iptables", "1")?;
    node.exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r#"*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-EXT-WEB - [0:0]
:KUBE-SVC-WEB - [0:0]
:KUBE-SEP-WEB - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp -m comment --comment "default/web:http" -m tcp --dport 30080 -j KUBE-EXT-WEB
-A KUBE-EXT-WEB -m comment --comment "masquerade traffic for default/web:http external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-WEB -j KUBE-SVC-WEB
-A KUBE-SVC-WEB -m comment --comment "default/web:http -> 10.198.1.2:8080" -j KUBE-SEP-WEB
-A KUBE-SEP-WEB -s 10.198.1.2/32 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A KUBE-SEP-WEB -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 10.198.1.2:8080
COMMIT
"#,
    )?;
    let srv = listen(&pod, "10.198.1.2:8080", 15)?;
    let target = "10.198.0.10:30080".to_string();
    let mut sc = simple(
        "blind_l2_hairpin_nodeport",
        "a pod connects to its own NodePort on the node's IP; br_netfilter on, its cni0 port's hairpin off",
        vec![pod, node, lan],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// An honest trap. containernetworking/plugins#858 ("bridge: ARP entry
/// not populated when reusing pod IP"): a new pod that reused a deleted
/// pod's IP was unreachable from its node for a while ("connection
/// timeout problems"), because the node's neighbour entry on cni0 still
/// had the old pod's MAC (`10.244.0.13 dev cni0 lladdr 22:47:9a:ce:70:88
/// STALE`) and the new pod announced nothing; the reporter's fix was the
/// older plugin (0.9.1, whose MACs were derived from the IP, so a reused
/// IP kept its MAC), the general one a gratuitous ARP from the new pod or
/// `ip neigh del` of the stale entry (same as moby/moby#36069, "New
/// containers may be unreachable by the host due to stale ARP entries",
/// and containernetworking/plugins#756). Here the node (the client, as
/// kubelet's probes are) talked to a pod 10.197.101.5 with MAC
/// 0a:58:0a:c5:65:05; the pod was deleted and a new one got the same IP
/// with MAC 2e:db:fb:ac:d1:d6 and sent no gratuitous ARP; another pod
/// stays on cni0 (so the bridge keeps its carrier and the node its
/// entry). The node connects to 10.197.101.5:8080 (listening): its SYN
/// goes to the old MAC, which the bridge no longer knows and floods; the
/// new pod receives it addressed to another host and drops it. It looks
/// like the bridge does not forward to the new pod's port, but the port
/// is forwarding and the bridge delivered the frame. True cause: the
/// node's stale neighbour entry for the reused IP (old MAC); delete it
/// (`ip neigh del 10.197.101.5 dev cni0`) and have the CNI announce new
/// pods (gratuitous ARP).
fn stale_neighbor_new_pod() -> Result<Scenario> {
    let p = unique_prefix();
    let (node, old, other) = (ns(&p, "node")?, ns(&p, "podold")?, ns(&p, "podother")?);
    node.ip(&["link", "add", "cni0", "type", "bridge"])?;
    // A MAC of its own, as the bridge plugin sets: removing a port does
    // not change it (which would flush the node's neighbour entries).
    node.ip(&["link", "set", "cni0", "address", "0a:58:0a:c5:65:01"])?;
    node.ip(&["link", "set", "cni0", "up"])?;
    node.ip(&["addr", "add", "10.197.101.1/24", "dev", "cni0"])?;
    pod_on(&other, &node, "cni0", "vethother", "10.197.101.3")?;
    pod_on(&old, &node, "cni0", "vetha", "10.197.101.5")?;
    set_mac(&old, "0a:58:0a:c5:65:05")?;
    let target = "10.197.101.5:8080".to_string();
    let first = listen(&old, &target, 15)?;
    exchange(&node, &target)?;
    // The pod is deleted (its namespace and veth go); a new pod reuses its
    // IP with a new MAC and no gratuitous ARP.
    drop(first);
    drop(old);
    let new = ns(&p, "pod")?;
    pod_on(&new, &node, "cni0", "vethb", "10.197.101.5")?;
    set_mac(&new, "2e:db:fb:ac:d1:d6")?;
    let srv = listen(&new, &target, 15)?;
    let mut sc = simple(
        "blind_l2_stale_neighbor_new_pod",
        "the node connects to a new pod that reused a deleted pod's IP; the node's neighbour entry still has the old MAC",
        vec![node, other, new],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}
