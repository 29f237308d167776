//! Blind scenes of one class of cause: an overlay tunnel (VXLAN, as
//! flannel's `flannel.1` and Calico's `vxlan.calico` make it) whose outer
//! packets go to a remote tunnel endpoint that no one answers on the
//! underlay, so the packet for a pod on another node dies on the sending
//! node (its ARP request for the endpoint goes unanswered). Each
//! rebuilds, in namespaces of its own, a failure reported in a public
//! thread, cited in its doc comment, written without knowledge of
//! tracer's rules: flannel's FDB entry still at a node's old IP after
//! the node's address changed, Calico's VTEPs on a management interface
//! that does not reach the other nodes (the wrong interface
//! autodetected). One scene is an honest trap: it looks the same from
//! the sender (outer packets to the far node's VTEP, no answer), but the
//! endpoint is there and answers ARP; the far node's vxlan.calico is
//! down, so no one decapsulates what arrives.
//!
//! They differ from `blind_tun_stale_endpoint_ip` (blind_tunnel.rs: a
//! metadata-mode `cilium_vxlan` and a route `encap ip ... dst`): here the
//! endpoint is a unicast FDB entry of a VXLAN device without learning
//! (`bridge fdb append MAC dev DEV dst IP self permanent`), as flanneld
//! and felix write it.
//!
//! Address ranges: 10.157, 10.158 and 10.159. `scenarios::build` falls
//! back (through `blind_scenes::build`, `blind_l2::build` and
//! `blind_tunnel::build`) to [`build`], which falls back to
//! [`crate::blind_sysctl::build`] (then the other blind modules).

use anyhow::Result;

use crate::{
    blind_l2::exchange,
    blind_scenes::fast_arp,
    blind_tunnel::{Vtep, remote_vtep, two_nodes},
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, simple, tcp_connect},
};

pub const BLIND_VTEP: &[&str] = &[
    "blind_vtep_flannel_node_ip_changed",
    "blind_vtep_calico_mgmt_interface",
    "blind_vtep_trap_far_vxlan_down",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_vtep_flannel_node_ip_changed" => flannel_node_ip_changed(),
        "blind_vtep_calico_mgmt_interface" => calico_mgmt_interface(),
        "blind_vtep_trap_far_vxlan_down" => trap_far_vxlan_down(),
        _ => return crate::blind_sysctl::build(name),
    })
}

const FLANNEL1: &str = "2e:57:01:00:00:01";
const FLANNEL2: &str = "2e:57:02:00:00:02";
const CALI1: &str = "66:58:01:00:00:01";
const CALI2: &str = "66:58:02:00:00:02";
const TRAP1: &str = "66:59:01:00:00:01";
const TRAP2: &str = "66:59:02:00:00:02";

/// The overlay as flanneld or felix programs it on node1 and node2
/// (`nss[1]`, `nss[2]` of [`two_nodes`]): a VXLAN device `dev` without
/// learning (VNI `vni`, UDP `port`) on `parent` with source address
/// `underlay(i)`, MAC `macs[i - 1]` and tunnel address 10.B.i.0/32; and
/// on each node the other's permanent ARP entry, FDB entry (`dst
/// underlay(j)`) and pod-subnet route (`10.B.j.0/24 via 10.B.j.0 dev DEV
/// onlink`).
fn overlay(
    nss: &[Netns],
    b: u8,
    dev: &str,
    (vni, port): (u32, u16),
    parent: &str,
    underlay: impl Fn(usize) -> String,
    macs: [&str; 2],
) -> Result<()> {
    for (node, i) in [(&nss[1], 1usize), (&nss[2], 2)] {
        Vtep {
            dev,
            vni,
            port,
            mac: macs[i - 1],
            local: &underlay(i),
            parent,
            addr: &format!("10.{b}.{i}.0"),
        }
        .create(node)?;
    }
    for (node, peer) in [(&nss[1], 2usize), (&nss[2], 1)] {
        remote_vtep(
            node,
            dev,
            &format!("10.{b}.{peer}.0"),
            macs[peer - 1],
            &underlay(peer),
            &format!("10.{b}.{peer}.0/24"),
        )?;
    }
    Ok(())
}

/// flannel-io/flannel#1052 ("Public dynamic IP"): flannel's VXLAN
/// between hosts works "until your ISP change your public IP, then
/// flannel stop working. if this happens you need to restart the flannel
/// on the host" whose IP changed (the reporter restarted it from a cron
/// job that watched the address); flannel-io/flannel#760 ("flannel has
/// problems if public IP changes"), and flannel's troubleshooting guide
/// (PR #764): "This address is chosen when flannel starts, and if the
/// address changes then flannel needs to be restarted." flanneld
/// publishes its node's public IP in its lease (the
/// `flannel.alpha.coreos.com/public-ip` annotation), and every other
/// node's flanneld writes it as the FDB entry of that node's VTEP MAC on
/// flannel.1 (`bridge fdb append MAC dev flannel.1 dst PUBLIC_IP`); until
/// the node's flanneld restarts, the lease keeps the old address. Here
/// flannel.1 (VNI 1, port 8472, nolearning, tunnel addresses
/// 10.157.1.0 and 10.157.2.0) on eth0 of both nodes, each with the
/// other's permanent ARP entry, FDB entry and route (`10.157.2.0/24 via
/// 10.157.2.0 dev flannel.1 onlink`). pod connects to pod2 once (works);
/// then node2's eth0 changes from 10.157.0.2 to 10.157.0.12 (a new DHCP
/// lease), node2's flanneld is not restarted, so node1's FDB entry stays
/// `dst 10.157.0.2` (and node1's ARP entry for the old address has
/// expired). pod connects again (10.157.2.2:8080, listening): node1
/// encapsulates the SYN to 10.157.0.2, which no one has on eth0. True
/// cause: node1's flannel.1 FDB entry for node2's VTEP
/// (2e:57:02:00:00:02) points at node2's old IP 10.157.0.2 (node2 is now
/// 10.157.0.12): restart flanneld on node2 so it publishes its new
/// public IP and node1's flanneld rewrites the entry (or pin the node's
/// address). Rewriting node1's entry alone is not enough: node2's
/// flannel.1 still has the old address as its `local`, so node2's reply
/// would fail there too (checked by hand); the restart remakes both.
fn flannel_node_ip_changed() -> Result<Scenario> {
    let b = 157;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(
        &nss,
        b,
        "flannel.1",
        (1, 8472),
        "eth0",
        |i| format!("10.{b}.0.{i}"),
        [FLANNEL1, FLANNEL2],
    )?;
    fast_arp(&nss[1], "eth0")?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    exchange(&nss[0], &target)?;
    // node2's new DHCP lease; its flanneld keeps publishing the old one,
    // and node1's ARP entry for the old address has expired.
    nss[2].ip(&["addr", "del", &format!("10.{b}.0.2/24"), "dev", "eth0"])?;
    nss[2].ip(&["addr", "add", &format!("10.{b}.0.12/24"), "dev", "eth0"])?;
    nss[1].ip(&["neigh", "flush", "dev", "eth0"])?;
    let mut sc = simple(
        "blind_vtep_flannel_node_ip_changed",
        "flannel vxlan: node2's IP changed (10.157.0.2 -> .12), node1's flannel.1 FDB entry still says dst 10.157.0.2",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// projectcalico/calico#8203 ("vxlan debugging"): on a new OpenStack
/// cluster "pod-to-pod networking was not working across hosts"; routing
/// tables and OpenStack's port security looked right, "tcpdump on
/// interfaces, but we only saw packets leaving the node, no errors"; in
/// the end a log line early in calico-node's start showed it "had
/// autodetected the wrong interface (eth1 instead of eth0) which is a
/// management network that's not supposed to reach other hosts and
/// therefore the tunnel was not working"; fixed with
/// `IP_AUTODETECTION_METHOD=interface=eth0`. felix makes vxlan.calico on
/// the interface of the node's autodetected address and writes that
/// address as the other nodes' FDB entry for its VTEP. Here each node
/// has eth0 on the node network (10.158.0.1, 10.158.0.2, where the
/// nodes reach each other) and eth1 on the management network
/// (10.158.50.1/24, 10.158.50.2/24), whose port security lets each
/// node's port reach only the management gateway 10.158.50.254 (a
/// distributed router port, answered on each hypervisor: namespaces
/// mgmt1 and mgmt2), never another node's port. calico-node picked eth1
/// on both: vxlan.calico (VNI 4096, port 4789) has `local 10.158.50.i dev
/// eth1`, and node1's FDB entry for node2's VTEP says `dst 10.158.50.2`.
/// pod connects to pod2 (10.158.2.2:8080, listening): node1 encapsulates
/// the SYN to 10.158.50.2 and its ARP request on eth1 is answered by no
/// one. True cause: Calico's VXLAN endpoints are on the management
/// interface (eth1), which does not reach the other nodes: node1's FDB
/// entry for node2's VTEP points at 10.158.50.2, unreachable from node1;
/// set `IP_AUTODETECTION_METHOD=interface=eth0` (or `kubernetes-internal-ip`)
/// so the VTEPs use the node network.
fn calico_mgmt_interface() -> Result<Scenario> {
    let b = 158;
    let p = unique_prefix();
    let mut nss = two_nodes(&p, b, "eth0")?;
    let (mgmt1, mgmt2) = (ns(&p, "mgmt1")?, ns(&p, "mgmt2")?);
    for (node, i, mgmt) in [(&nss[1], 1, &mgmt1), (&nss[2], 2, &mgmt2)] {
        veth(node, "eth1", mgmt, "eth0")?;
        node.ip(&["addr", "add", &format!("10.{b}.50.{i}/24"), "dev", "eth1"])?;
        mgmt.ip(&["addr", "add", &format!("10.{b}.50.254/24"), "dev", "eth0"])?;
    }
    overlay(
        &nss,
        b,
        "vxlan.calico",
        (4096, 4789),
        "eth1",
        |i| format!("10.{b}.50.{i}"),
        [CALI1, CALI2],
    )?;
    fast_arp(&nss[1], "eth1")?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    nss.push(mgmt1);
    nss.push(mgmt2);
    let mut sc = simple(
        "blind_vtep_calico_mgmt_interface",
        "Calico vxlan: calico-node autodetected eth1 (management network, nodes isolated); node1's FDB entry for node2 says dst 10.158.50.2",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// An honest trap. projectcalico/calico#4468 ("VXLAN interface in
/// permanently bad state on node and does not autorecover even with
/// calico-node restart"): pods on several nodes timed out connecting to
/// a pod's port ("Connection timed out"); on the pod's node vxlan.calico
/// was DOWN (`<BROADCAST,MULTICAST> ... state DOWN`), and tcpdump on its
/// eth0 showed the encapsulated SYNs arriving (`172.31.75.107.60135 >
/// 172.31.70.156.4789: VXLAN, flags [I] (0x08), vni 4096`) and going no
/// further; restarting calico-node did not help, deleting the device (so
/// felix recreated it) did. projectcalico/calico#3271 ("vxlan interface
/// always down, cause calico-node failed to add route for pods on other
/// node"): the same device down on one node, fixed the same way. Here
/// Calico's VXLAN (vxlan.calico, VNI 4096, port 4789) is right on both
/// nodes (on eth0, FDB entries `dst` the other's node IP, ARP entries,
/// routes); pod connects to pod2 once (works); then node2's vxlan.calico
/// goes down, and node1's ARP entry for node2 (10.159.0.2) has expired.
/// pod connects again (10.159.2.2:8080, listening): node1 encapsulates
/// the SYN to 10.159.0.2, resolves it (node2 answers), and node2's eth0
/// receives the UDP packet to 4789, which nothing decapsulates. It looks
/// like the class (outer packets to the far VTEP, no answer), but the
/// endpoint is right and answered. True cause: node2's vxlan.calico is
/// down (no VXLAN socket on 4789 on node2): set it up, or delete it and
/// let felix recreate it; node1's tunnel state is right.
fn trap_far_vxlan_down() -> Result<Scenario> {
    let b = 159;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(
        &nss,
        b,
        "vxlan.calico",
        (4096, 4789),
        "eth0",
        |i| format!("10.{b}.0.{i}"),
        [TRAP1, TRAP2],
    )?;
    fast_arp(&nss[1], "eth0")?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    exchange(&nss[0], &target)?;
    nss[2].ip(&["link", "set", "vxlan.calico", "down"])?;
    nss[1].ip(&["neigh", "flush", "dev", "eth0"])?;
    let mut sc = simple(
        "blind_vtep_trap_far_vxlan_down",
        "Calico vxlan, both VTEPs right; node2's vxlan.calico is down (the SYN's outer packet reaches node2's eth0)",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_VTEP {
            assert!(n.starts_with("blind_vtep_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }
}
