//! Blind scenes of one class of cause: a tunnel or overlay as a CNI uses
//! it (flannel's VXLAN `flannel.1`, Calico's `vxlan.calico`, Cilium's
//! `cilium_vxlan` in tunnel mode, a second VXLAN device of an edge
//! add-on) that loses a packet bound for a pod on another node, because
//! of the tunnel device's configuration or state. Each rebuilds, in
//! namespaces of its own, a failure reported in a public thread, cited in
//! its doc comment, written without knowledge of tracer's rules: a
//! remote VTEP's ARP entry deleted on a device that does not learn, every
//! node's VTEP on a NAT interface with the same address (Vagrant), a
//! tunnel endpoint still at a node's old IP, strict reverse-path
//! filtering on the far side where the overlay's routes are asymmetric.
//! One scene is an honest trap: it looks like the tunnel does not carry
//! the packet, but both VTEPs are right and the far node's firewall
//! rejects the tunnel's port.
//!
//! The kernel these scenes were written on has VXLAN but neither IPIP
//! nor Geneve (CONFIG_NET_IPIP, CONFIG_GENEVE unset, no modules), so the
//! Calico IPIP and Cilium Geneve variants of these failures are written
//! with VXLAN devices.
//!
//! Address ranges: 10.180, 10.181, 10.183, 10.184 and 10.185.
//! `scenarios::build` falls back (through `blind_scenes::build` and
//! `blind_l2::build`) to [`build`], which falls back to
//! [`crate::blind_vtep::build`] (then [`crate::blind_sysctl::build`],
//! [`crate::blind_sock::build`], [`crate::blind_ct::build`] and
//! [`crate::blind_bpf::build`]).

use anyhow::Result;

use crate::{
    blind_l2::exchange,
    blind_scenes::fast_arp,
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, simple, tcp_connect},
};

pub const BLIND_TUNNEL: &[&str] = &[
    "blind_tun_vtep_arp_deleted",
    "blind_tun_same_public_ip",
    "blind_tun_stale_endpoint_ip",
    "blind_tun_rpfilter_asymmetric",
    "blind_tun_firewalld_vxlan_port",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_tun_vtep_arp_deleted" => vtep_arp_deleted(),
        "blind_tun_same_public_ip" => same_public_ip(),
        "blind_tun_stale_endpoint_ip" => stale_endpoint_ip(),
        "blind_tun_rpfilter_asymmetric" => rpfilter_asymmetric(),
        "blind_tun_firewalld_vxlan_port" => firewalld_vxlan_port(),
        _ => return crate::blind_vtep::build(name),
    })
}

/// Two nodes, each with one pod:
/// pod (10.B.1.2) — lxc0 (10.B.1.1) node1 `uplink` (10.B.0.1) —
/// `uplink` (10.B.0.2) node2 lxc0 (10.B.2.1) — pod2 (10.B.2.2), /24s,
/// each pod's default route via its node. No route between the pod
/// subnets: each scene adds its overlay. Namespaces (prefix `p`): pod,
/// node1, node2, pod2.
pub(crate) fn two_nodes(p: &str, b: u8, uplink: &str) -> Result<Vec<Netns>> {
    let (pod, n1, n2, pod2) = (
        ns(p, "pod")?,
        ns(p, "node1")?,
        ns(p, "node2")?,
        ns(p, "pod2")?,
    );
    veth(&pod, "eth0", &n1, "lxc0")?;
    veth(&n1, uplink, &n2, uplink)?;
    veth(&n2, "lxc0", &pod2, "eth0")?;
    for (node, i) in [(&n1, 1), (&n2, 2)] {
        node.ip(&["addr", "add", &format!("10.{b}.0.{i}/24"), "dev", uplink])?;
        node.ip(&["addr", "add", &format!("10.{b}.{i}.1/24"), "dev", "lxc0"])?;
        node.sysctl("net.ipv4.ip_forward", "1")?;
    }
    for (pod, i) in [(&pod, 1), (&pod2, 2)] {
        pod.ip(&["addr", "add", &format!("10.{b}.{i}.2/24"), "dev", "eth0"])?;
        pod.ip(&["route", "add", "default", "via", &format!("10.{b}.{i}.1")])?;
    }
    Ok(vec![pod, n1, n2, pod2])
}

/// A VTEP as the CNI agents make them: a VXLAN device without learning.
pub(crate) struct Vtep<'a> {
    pub(crate) dev: &'a str,
    pub(crate) vni: u32,
    pub(crate) port: u16,
    pub(crate) mac: &'a str,
    /// Underlay source address and device.
    pub(crate) local: &'a str,
    pub(crate) parent: &'a str,
    /// The device's own address (/32, the agent's "tunnel address").
    pub(crate) addr: &'a str,
}

impl Vtep<'_> {
    pub(crate) fn create(&self, node: &Netns) -> Result<()> {
        node.ip(&[
            "link",
            "add",
            self.dev,
            "address",
            self.mac,
            "type",
            "vxlan",
            "id",
            &self.vni.to_string(),
            "local",
            self.local,
            "dev",
            self.parent,
            "nolearning",
            "dstport",
            &self.port.to_string(),
        ])?;
        node.ip(&["addr", "add", &format!("{}/32", self.addr), "dev", self.dev])?;
        node.ip(&["link", "set", self.dev, "up"])?;
        Ok(())
    }
}

/// What flanneld or felix writes on `node` for a remote VTEP of `dev`
/// with address `vtep` and MAC `mac` behind the underlay address
/// `underlay`: its ARP entry (permanent), its FDB entry, and the route
/// for its pod subnet `subnet` via its address (onlink).
pub(crate) fn remote_vtep(
    node: &Netns,
    dev: &str,
    vtep: &str,
    mac: &str,
    underlay: &str,
    subnet: &str,
) -> Result<()> {
    node.ip(&[
        "neigh",
        "replace",
        vtep,
        "lladdr",
        mac,
        "dev",
        dev,
        "nud",
        "permanent",
    ])?;
    node.exec(&[
        "bridge",
        "fdb",
        "append",
        mac,
        "dev",
        dev,
        "dst",
        underlay,
        "self",
        "permanent",
    ])?;
    node.ip(&["route", "add", subnet, "via", vtep, "dev", dev, "onlink"])?;
    Ok(())
}

/// The sysctl name of a device whose name has dots (`vxlan.calico`,
/// `flannel.1`): sysctl reads a slash there.
fn sysctl_dev(dev: &str) -> String {
    dev.replace('.', "/")
}

/// Pod-to-pod TCP to pod2 (`nss[3]`) on 10.B.2.2:8080, listening.
fn to_pod2(
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

const CALI1: &str = "66:3c:b4:01:00:01";
const CALI2: &str = "66:3c:b4:02:00:02";
const FLANNEL1: &str = "0e:b5:01:00:01:01";
const FLANNEL2: &str = "0e:b5:02:00:02:02";
const CIL1: &str = "ce:9a:b7:01:00:01";
const CIL2: &str = "ce:9a:b7:02:00:02";

/// projectcalico/calico#9450 ("ARP entries are deleted/recreated
/// periodically when using VXLANCrossSubnet, leading to no
/// connectivity"): every 2-3 minutes calico-node logged "Deleting ARP
/// entry" for the VXLAN tunnel address of a node that was still up; the
/// working state had one PERMANENT entry per remote VTEP on vxlan.calico
/// (`172.17.78.0 lladdr 66:f4:cd:d2:0b:14 PERMANENT`), and while the
/// entry was gone traffic to that node's pods failed ("Destination Host
/// Unreachable", the API server's webhook calls "no route to host")
/// until felix wrote it again. vxlan.calico does not learn and has no
/// default FDB entry, so an ARP request on it goes nowhere: the entry
/// must be programmed. Here node1 and node2 run Calico's VXLAN
/// (vxlan.calico, VNI 4096, port 4789, tunnel addresses 10.180.1.0 and
/// 10.180.2.0, route `10.180.2.0/24 via 10.180.2.0 dev vxlan.calico
/// onlink`, FDB and ARP entries for each other); pod connects to pod2
/// once (works), then felix deletes node1's ARP entry for node2's VTEP.
/// pod connects again (10.180.2.2:8080, listening): node1 has to resolve
/// 10.180.2.0 on vxlan.calico and cannot. True cause (what an SRE needs
/// to hear): node1 has no ARP entry for node2's VTEP 10.180.2.0 on
/// vxlan.calico (a device that cannot resolve it by itself): felix
/// deleted it; the FDB entry and route are there.
fn vtep_arp_deleted() -> Result<Scenario> {
    let b = 180;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    for (node, i, mac) in [(&nss[1], 1, CALI1), (&nss[2], 2, CALI2)] {
        Vtep {
            dev: "vxlan.calico",
            vni: 4096,
            port: 4789,
            mac,
            local: &format!("10.{b}.0.{i}"),
            parent: "eth0",
            addr: &format!("10.{b}.{i}.0"),
        }
        .create(node)?;
    }
    for (node, peer, mac) in [(&nss[1], 2, CALI2), (&nss[2], 1, CALI1)] {
        remote_vtep(
            node,
            "vxlan.calico",
            &format!("10.{b}.{peer}.0"),
            mac,
            &format!("10.{b}.0.{peer}"),
            &format!("10.{b}.{peer}.0/24"),
        )?;
    }
    fast_arp(&nss[1], &sysctl_dev("vxlan.calico"))?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    exchange(&nss[0], &target)?;
    // felix's "Deleting ARP entry" for a node that is still there.
    nss[1].ip(&[
        "neigh",
        "del",
        &format!("10.{b}.2.0"),
        "dev",
        "vxlan.calico",
    ])?;
    let mut sc = simple(
        "blind_tun_vtep_arp_deleted",
        "Calico VXLAN: felix deleted node1's ARP entry for node2's VTEP on vxlan.calico (no learning)",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// flannel-io/flannel PR #764 (the troubleshooting guide's Vagrant
/// section), kubernetes/website#6870 (the same in kubeadm's
/// troubleshooting) and k3s-io/k3s#72 ("Wrong interface selection on
/// Vagrant"): Vagrant gives every VM a first, NATed interface with the
/// same address, 10.0.2.15; flannel picks the first interface by default,
/// "this leads to all hosts thinking they have the same public IP
/// address", and pods on different nodes cannot reach each other; the fix
/// is `--iface eth1` (the private network). Here each node has eth0 on
/// its own NAT (10.181.15.15/24 on both, default route via 10.181.15.2)
/// and eth1 on the private network (10.181.0.1, 10.181.0.2); flanneld
/// made flannel.1 on eth0 (`local 10.181.15.15`) and published
/// 10.181.15.15 as each node's public IP, so node1's FDB entry for
/// node2's VTEP MAC says `dst 10.181.15.15`, node1's own address (and
/// node2's for node1 the same). pod connects to pod2 (10.181.2.2:8080,
/// listening): node1 encapsulates towards its own address. True cause:
/// flannel.1 is on the NAT interface and every node's public IP is the
/// same 10.181.15.15, so node1's FDB entry for node2 points at node1
/// itself; run flanneld with `--iface eth1` (or the public-ip
/// annotation) so the VTEPs use the private network.
fn same_public_ip() -> Result<Scenario> {
    let b = 181;
    let p = unique_prefix();
    let mut nss = two_nodes(&p, b, "eth1")?;
    let (nat1, nat2) = (ns(&p, "nat1")?, ns(&p, "nat2")?);
    for (node, nat) in [(&nss[1], &nat1), (&nss[2], &nat2)] {
        veth(node, "eth0", nat, "eth0")?;
        node.ip(&["addr", "add", &format!("10.{b}.15.15/24"), "dev", "eth0"])?;
        nat.ip(&["addr", "add", &format!("10.{b}.15.2/24"), "dev", "eth0"])?;
        node.ip(&["route", "add", "default", "via", &format!("10.{b}.15.2")])?;
    }
    let public = format!("10.{b}.15.15");
    for (node, i, mac) in [(&nss[1], 1, FLANNEL1), (&nss[2], 2, FLANNEL2)] {
        Vtep {
            dev: "flannel.1",
            vni: 1,
            port: 8472,
            mac,
            local: &public,
            parent: "eth0",
            addr: &format!("10.{b}.{i}.0"),
        }
        .create(node)?;
    }
    for (node, peer, mac) in [(&nss[1], 2, FLANNEL2), (&nss[2], 1, FLANNEL1)] {
        remote_vtep(
            node,
            "flannel.1",
            &format!("10.{b}.{peer}.0"),
            mac,
            &public,
            &format!("10.{b}.{peer}.0/24"),
        )?;
    }
    nss.push(nat1);
    nss.push(nat2);
    to_pod2(
        "blind_tun_same_public_ip",
        "flannel on Vagrant: flannel.1 on the NAT interface, every node's public IP 10.181.15.15; node1's FDB entry for node2 points at itself",
        b,
        nss,
    )
}

/// cilium/cilium#31066 ("If the IP of a node changes, the other nodes
/// don't handle it"): node B's InternalIP changed from 172.18.18.12 to
/// .13 (DHCP, maintenance), its Node resource was updated, but the agent
/// on node A kept using the old address (`cilium-health`: HTTP to
/// 172.18.18.12 "no route to host", an address no one has); and
/// cilium/cilium#31528 ("No connectivity between nodes after node IP
/// changes"): after a node's IP changed, "Cilium loses connectivity
/// between nodes until the cilium-agent is restarted" (kind, Cilium's
/// default tunnel mode). In tunnel mode the tunnel endpoint of each
/// remote pod CIDR is a node IP kept by the agent (the BPF tunnel map),
/// and cilium_vxlan is a metadata-mode device (`external`) with no FDB.
/// Here cilium_vxlan (external, port 8472) on both nodes, and node1's
/// route for node2's pod CIDR carries the tunnel endpoint as its
/// encapsulation (`encap ip id 2 dst 10.183.0.2`, what the BPF tunnel map
/// holds in Cilium); pod connects to pod2 once (works); then node2's IP
/// changes to 10.183.0.12 (node1's stale ARP entry for the old address
/// has expired) and node1's endpoint stays 10.183.0.2. pod connects
/// again (10.183.2.2:8080, listening): node1 encapsulates to 10.183.0.2,
/// which no one answers on eth0. True cause: node1's tunnel endpoint for
/// node2's pod CIDR is node2's old IP 10.183.0.2 (node2 is now
/// 10.183.0.12); restart the agent on node1 (or fix its node IP
/// handling) so the endpoint follows the Node's new address.
fn stale_endpoint_ip() -> Result<Scenario> {
    let b = 183;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    for (node, mac) in [(&nss[1], CIL1), (&nss[2], CIL2)] {
        node.ip(&[
            "link",
            "add",
            "cilium_vxlan",
            "address",
            mac,
            "type",
            "vxlan",
            "external",
            "dstport",
            "8472",
        ])?;
        node.ip(&["link", "set", "cilium_vxlan", "up"])?;
    }
    // Each node's route for the other's pod CIDR, its router (the
    // other's lxc0 address) and that router's MAC: the other's
    // cilium_vxlan.
    for (node, peer, mac) in [(&nss[1], 2, CIL2), (&nss[2], 1, CIL1)] {
        let router = format!("10.{b}.{peer}.1");
        node.ip(&[
            "neigh",
            "replace",
            &router,
            "lladdr",
            mac,
            "dev",
            "cilium_vxlan",
            "nud",
            "permanent",
        ])?;
        node.ip(&[
            "route",
            "add",
            &format!("10.{b}.{peer}.0/24"),
            "encap",
            "ip",
            "id",
            &peer.to_string(),
            "dst",
            &format!("10.{b}.0.{peer}"),
            "via",
            &router,
            "dev",
            "cilium_vxlan",
            "onlink",
        ])?;
    }
    fast_arp(&nss[1], "eth0")?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    exchange(&nss[0], &target)?;
    // node2's address changes (a new DHCP lease); node1's agent does not
    // follow, and its ARP entry for the old address has expired.
    nss[2].ip(&["addr", "del", &format!("10.{b}.0.2/24"), "dev", "eth0"])?;
    nss[2].ip(&["addr", "add", &format!("10.{b}.0.12/24"), "dev", "eth0"])?;
    nss[1].ip(&["neigh", "flush", "dev", "eth0"])?;
    let mut sc = simple(
        "blind_tun_stale_endpoint_ip",
        "Cilium tunnel mode: node2's IP changed, node1 still encapsulates to its old IP (no one has it)",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// openyurtio/raven#30 ("Should configure loose mode reverse path
/// filtering (rp_filter) for both `flannel.1` and `raven` nic"): raven
/// carries cross-pool traffic in a VXLAN device of its own (raven0)
/// beside flannel's flannel.1; "usually, the rp_filter defaults to strict
/// mode", and a non-gateway node "will not be able to communicate with
/// nodes in other gateways": traffic from another pool reaches it from
/// the gateway by flannel.1, while its route back to that pool is by
/// raven0, so strict reverse-path filtering drops it (fixed in raven
/// PR #32: loose mode on raven0, a reverse-path route). submariner-io/
/// submariner PR #217 did the same for its VXLAN device with flannel.
/// Here node1 is the pool's gateway (the client pod, 10.185.1.2, stands
/// for a pod of the other pool behind its VPN) and node2 a non-gateway
/// node with net.ipv4.conf.all.rp_filter = 1 (the distribution's
/// default); flannel.1 joins them (node2's pods, 10.185.2.0/24, by
/// flannel.1 from node1), and raven0 (VNI 2, port 4789, its FDB
/// flooding to the gateway) carries node2's route to the other pool:
/// `10.185.1.0/24 via 10.185.240.1 dev raven0`. pod connects to pod2
/// (10.185.2.2:8080, listening): node2 decapsulates the SYN on
/// flannel.1, whose source is routed back by raven0. True cause: strict
/// rp_filter on node2 with asymmetric overlay routes (in by flannel.1,
/// back by raven0): set loose mode (rp_filter 2) on flannel.1 and raven0
/// (or make the routes symmetric).
fn rpfilter_asymmetric() -> Result<Scenario> {
    let b = 185;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    // flannel: node1's own subnet is 10.185.3.0/24 (the gateway's pods),
    // node2's 10.185.2.0/24.
    for (node, i, sub, mac) in [(&nss[1], 1, 3, FLANNEL1), (&nss[2], 2, 2, FLANNEL2)] {
        Vtep {
            dev: "flannel.1",
            vni: 1,
            port: 8472,
            mac,
            local: &format!("10.{b}.0.{i}"),
            parent: "eth0",
            addr: &format!("10.{b}.{sub}.0"),
        }
        .create(node)?;
    }
    for (node, peer, sub, mac) in [(&nss[1], 2, 2, FLANNEL2), (&nss[2], 1, 3, FLANNEL1)] {
        remote_vtep(
            node,
            "flannel.1",
            &format!("10.{b}.{sub}.0"),
            mac,
            &format!("10.{b}.0.{peer}"),
            &format!("10.{b}.{sub}.0/24"),
        )?;
    }
    // raven0: the pool's VXLAN to (or from) its gateway, flooding to the
    // other end (raven's all-zero FDB entry).
    for (node, i, peer) in [(&nss[1], 1, 2), (&nss[2], 2, 1)] {
        node.ip(&[
            "link",
            "add",
            "raven0",
            "type",
            "vxlan",
            "id",
            "2",
            "local",
            &format!("10.{b}.0.{i}"),
            "dev",
            "eth0",
            "nolearning",
            "dstport",
            "4789",
        ])?;
        node.ip(&[
            "addr",
            "add",
            &format!("10.{b}.240.{i}/24"),
            "dev",
            "raven0",
        ])?;
        node.ip(&["link", "set", "raven0", "up"])?;
        node.exec(&[
            "bridge",
            "fdb",
            "append",
            "00:00:00:00:00:00",
            "dev",
            "raven0",
            "dst",
            &format!("10.{b}.0.{peer}"),
            "self",
            "permanent",
        ])?;
    }
    // node2's route to the other pool (where the client is) by raven0.
    nss[2].ip(&[
        "route",
        "add",
        &format!("10.{b}.1.0/24"),
        "via",
        &format!("10.{b}.240.1"),
        "dev",
        "raven0",
    ])?;
    nss[2].sysctl("net.ipv4.conf.all.rp_filter", "1")?;
    to_pod2(
        "blind_tun_rpfilter_asymmetric",
        "flannel + raven: node2 (strict rp_filter) gets the SYN on flannel.1, its route back is by raven0",
        b,
        nss,
    )
}

/// An honest trap. kubernetes/website#13789 ("Flannel will not work
/// unless UDP ports 8285 and 8472 are allowed for all hosts": with the
/// vxlan backend the kernel sends the encapsulated packets to UDP 8472,
/// "make sure that your firewall rules allow this traffic");
/// flannel-io/flannel#2055 ("firewalld blocks traffic on flannel network
/// installed via kubeadm"), flannel-io/flannel#871 (cross-node pods
/// unreachable until the security group allowed UDP between the nodes).
/// Here flannel's VXLAN is right on both nodes (same VNI, port 8472,
/// FDB, ARP entries and routes for each other), and node2 runs firewalld
/// (its nftables ruleset: zone public on eth0 allowing ssh, cockpit, the
/// API server and kubelet, everything else rejected with
/// admin-prohibited); 8472/udp was never opened. pod connects to pod2
/// (10.184.2.2:8080, listening): node2 rejects the encapsulated SYN in
/// its input chain. It looks like flannel.1 does not carry the packet,
/// but both VTEPs are right. True cause: node2's firewalld rejects the
/// VXLAN port 8472/udp (`firewall-cmd --permanent --add-port=8472/udp`),
/// not the tunnel's configuration.
fn firewalld_vxlan_port() -> Result<Scenario> {
    let b = 184;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    for (node, i, mac) in [(&nss[1], 1, FLANNEL1), (&nss[2], 2, FLANNEL2)] {
        Vtep {
            dev: "flannel.1",
            vni: 1,
            port: 8472,
            mac,
            local: &format!("10.{b}.0.{i}"),
            parent: "eth0",
            addr: &format!("10.{b}.{i}.0"),
        }
        .create(node)?;
    }
    for (node, peer, mac) in [(&nss[1], 2, FLANNEL2), (&nss[2], 1, FLANNEL1)] {
        remote_vtep(
            node,
            "flannel.1",
            &format!("10.{b}.{peer}.0"),
            mac,
            &format!("10.{b}.0.{peer}"),
            &format!("10.{b}.{peer}.0/24"),
        )?;
    }
    nss[2].exec_file(
        &["nft", "-f"],
        r#"table inet firewalld {
	chain filter_INPUT {
		type filter hook input priority filter + 10; policy accept;
		ct state { established, related } accept
		ct status dnat accept
		iifname "lo" accept
		jump filter_INPUT_ZONES
		ct state invalid drop
		reject with icmpx type admin-prohibited
	}
	chain filter_INPUT_ZONES {
		iifname "eth0" goto filter_IN_public
		goto filter_IN_public
	}
	chain filter_IN_public {
		jump filter_IN_public_pre
		jump filter_IN_public_log
		jump filter_IN_public_deny
		jump filter_IN_public_allow
		jump filter_IN_public_post
		meta l4proto { icmp, ipv6-icmp } accept
	}
	chain filter_IN_public_pre {
	}
	chain filter_IN_public_log {
	}
	chain filter_IN_public_deny {
	}
	chain filter_IN_public_allow {
		tcp dport 22 ct state { new, untracked } accept
		ip6 daddr fe80::/64 udp dport 546 ct state { new, untracked } accept
		tcp dport 9090 ct state { new, untracked } accept
		tcp dport 6443 ct state { new, untracked } accept
		tcp dport 10250 ct state { new, untracked } accept
	}
	chain filter_IN_public_post {
	}
}
"#,
    )?;
    to_pod2(
        "blind_tun_firewalld_vxlan_port",
        "flannel vxlan, both VTEPs right; node2's firewalld rejects UDP 8472 (never opened)",
        b,
        nss,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_TUNNEL {
            assert!(n.starts_with("blind_tun_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }

    #[test]
    fn dotted_device_names_become_sysctl_slashes() {
        assert_eq!(sysctl_dev("vxlan.calico"), "vxlan/calico");
        assert_eq!(sysctl_dev("eth0"), "eth0");
    }
}
