//! Blind scenes of VXLAN overlays as the CNIs build them (flannel's
//! `flannel.1`, Calico's `vxlan.calico`, also in the eBPF dataplane's
//! flow-based form): two nodes whose VXLAN devices disagree on a header
//! extension, two VTEPs with one MAC address, a metadata-mode device that
//! the kernel routes a packet onto without a tunnel key, a VNI that the
//! node's socket on the right port does not carry after a half-done CNI
//! migration. Each rebuilds, in namespaces of its own, a failure reported
//! in a public thread, cited in its doc comment, written without
//! knowledge of tracer's rules. One scene is an honest trap: the overlay
//! carries the SYN to the far pod, whose server listens on localhost only.
//!
//! Two nodes, each with one pod, joined by a veth underlay (the
//! kernel these scenes were written on has VXLAN, veth and bridges, but
//! no IPIP, GRE or Geneve):
//! pod (10.192.C+1.2) — lxc0 (10.192.C+1.1) node1 eth0 (10.192.C.1) —
//! eth0 (10.192.C.2) node2 lxc0 (10.192.C+2.1) — pod2 (10.192.C+2.2),
//! /24s, each pod's default route via its node; each node's VTEP has the
//! address .0 of its pod subnet (what flannel and Calico's migration
//! give it). Each scene adds its overlay.
//!
//! Address ranges: 10.192.100 to 10.192.142 (C = 100, 110, 120, 130,
//! 140). `scenarios::build` falls back (through the other blind modules
//! and [`crate::blind_more::build`]) to [`build`], which returns None for
//! names it does not know.

use anyhow::Result;

use crate::{
    blind_tunnel::remote_vtep,
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, simple, tcp_connect},
};

pub const BLIND_OVL: &[&str] = &[
    "blind_ovl_gbp_one_side",
    "blind_ovl_cloned_vtep_mac",
    "blind_ovl_flow_device_no_key",
    "blind_ovl_migration_vni_on_port",
    "blind_ovl_trap_localhost_listener",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_ovl_gbp_one_side" => gbp_one_side(),
        "blind_ovl_cloned_vtep_mac" => cloned_vtep_mac(),
        "blind_ovl_flow_device_no_key" => flow_device_no_key(),
        "blind_ovl_migration_vni_on_port" => migration_vni_on_port(),
        "blind_ovl_trap_localhost_listener" => trap_localhost_listener(),
        _ => return crate::blind_proto::build(name),
    })
}

/// `10.192.{c + off}.{host}`.
fn a(c: u8, off: u8, host: u8) -> String {
    format!("10.192.{}.{host}", c + off)
}

/// The two nodes and their pods (see the module's doc): pod, node1,
/// node2, pod2. No route between the pod subnets.
fn two_nodes(c: u8) -> Result<Vec<Netns>> {
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
    for (node, i) in [(&n1, 1), (&n2, 2)] {
        node.ip_batch(&[
            &["addr", "add", &format!("{}/24", a(c, 0, i)), "dev", "eth0"],
            &["addr", "add", &format!("{}/24", a(c, i, 1)), "dev", "lxc0"],
        ])?;
        node.sysctl("net.ipv4.ip_forward", "1")?;
    }
    for (pod, i) in [(&pod, 1), (&pod2, 2)] {
        pod.ip_batch(&[
            &["addr", "add", &format!("{}/24", a(c, i, 2)), "dev", "eth0"],
            &["route", "add", "default", "via", &a(c, i, 1)],
        ])?;
    }
    Ok(vec![pod, n1, n2, pod2])
}

/// A VXLAN device `dev` on `node` with MAC `mac`, the device arguments
/// `kind` (after `type vxlan`), its address `addr`/32, up.
fn vxlan(node: &Netns, dev: &str, mac: &str, kind: &[&str], addr: &str) -> Result<()> {
    let mut args = vec!["link", "add", dev, "address", mac, "type", "vxlan"];
    args.extend_from_slice(kind);
    node.ip(&args)?;
    node.ip(&["addr", "add", &format!("{addr}/32"), "dev", dev])?;
    node.set_up(dev)
}

/// flannel's VXLAN device on node `i` of scene `c` (VNI 1, port 8472,
/// no learning, on eth0), with `extra` device arguments.
fn flannel(node: &Netns, c: u8, i: u8, mac: &str, extra: &[&str]) -> Result<()> {
    let local = a(c, 0, i);
    let mut kind = vec![
        "id",
        "1",
        "local",
        &local,
        "dev",
        "eth0",
        "nolearning",
        "dstport",
        "8472",
    ];
    kind.extend_from_slice(extra);
    vxlan(node, "flannel.1", mac, &kind, &a(c, i, 0))
}

/// What flanneld writes on each node for the other (its VTEP's ARP and
/// FDB entries, the route for its pod subnet), with the MACs it read from
/// the other's Node annotation: `macs[0]` node1's, `macs[1]` node2's.
fn flannel_peers(nss: &[Netns], c: u8, dev: &str, macs: [&str; 2]) -> Result<()> {
    for (node, peer) in [(&nss[1], 2u8), (&nss[2], 1u8)] {
        remote_vtep(
            node,
            dev,
            &a(c, peer, 0),
            macs[usize::from(peer - 1)],
            &a(c, 0, peer),
            &format!("{}/24", a(c, peer, 0)),
        )?;
    }
    Ok(())
}

/// Pod-to-pod TCP from pod to pod2's 10.192.C+2.2:8080, where `listen_on`
/// listens (pod2's address, or another).
fn to_pod2(
    name: &'static str,
    description: &'static str,
    c: u8,
    nss: Vec<Netns>,
    listen_on: &str,
) -> Result<Scenario> {
    let target = format!("{}:8080", a(c, 2, 2));
    let srv = listen(&nss[3], listen_on, 15)?;
    let mut sc = simple(name, description, nss, target.clone(), tcp_connect(&target));
    sc.servers.push(srv);
    Ok(sc)
}

const FLANNEL1: &str = "0e:5a:c1:01:00:01";
const FLANNEL2: &str = "0e:5a:c1:02:00:02";
const CALI1: &str = "66:c4:71:01:00:01";
const CALI2: &str = "66:c4:71:02:00:02";
/// A MAC as systemd's `MACAddressPolicy=persistent` derives it (locally
/// administered, from /etc/machine-id and the interface's name).
const PERSISTENT: &str = "a6:3f:0d:9e:51:c7";

/// flannel-io/flannel#562 ("vxlan: vxlanLinksIncompat function doesn't
/// check all link features": "GBP is missing. This could mean that when
/// configuration is changed, vxlan devices aren't recreated"), fixed by
/// flannel-io/flannel PR #750 ("vxlanLinkIncompat function did not check
/// GBP so it was possible that changes in the config would not be
/// refreshed"). flannel's `"GBP": true` (flannel-io/flannel PR #455, added
/// for Cloud Foundry, whose policy agent marks each app's packets and has
/// the mark carried as the VXLAN group policy ID) turned on in the network
/// config: a node whose flannel.1 was created anew (a new or rebuilt node)
/// has `gbp`, a node whose flanneld restarted with its old flannel.1 kept
/// the device without it. A Linux VXLAN device without `gbp` takes the G
/// flag and the policy ID in the header's reserved bits as a malformed
/// header and drops the frame. Here node1's flannel.1 (VNI 1, port 8472)
/// has `gbp` and node1's policy rule marks the pod's packets with its tag
/// 0x5 (nftables, prerouting); node2's flannel.1 was kept from before,
/// without `gbp`; FDB, ARP entries and routes are right on both. pod
/// connects to pod2 (10.192.102.2:8080, listening): node1 sends the SYN
/// with the G flag and policy ID 5. Checked by hand: node2 drops it in
/// vxlan_rcv (drop reason VXLAN_INVALID_HDR, flannel.1's RX frame errors
/// 1); with `gbp` on both devices the connection is echoed. True cause:
/// node2's flannel.1 has no GBP extension while node1's sends it (the two
/// VTEPs disagree on `gbp`); node2 drops the frames as a malformed VXLAN
/// header. Recreate node2's flannel.1 (delete it and restart flanneld) so
/// both have `gbp`.
fn gbp_one_side() -> Result<Scenario> {
    let c = 100;
    let nss = two_nodes(c)?;
    flannel(&nss[1], c, 1, FLANNEL1, &["gbp"])?;
    flannel(&nss[2], c, 2, FLANNEL2, &[])?;
    flannel_peers(&nss, c, "flannel.1", [FLANNEL1, FLANNEL2])?;
    nss[1].exec_file(
        &["nft", "-f"],
        &format!(
            "table ip app_policy {{\n\tchain tag {{\n\t\ttype filter hook prerouting priority mangle; policy accept;\n\t\tiifname \"lxc0\" ip saddr {} meta mark set 0x00000005\n\t}}\n}}\n",
            a(c, 1, 2)
        ),
    )?;
    let listen_on = format!("{}:8080", a(c, 2, 2));
    to_pod2(
        "blind_ovl_gbp_one_side",
        "flannel VXLAN: node1's flannel.1 has gbp and sends the pod's mark as policy ID; node2's flannel.1 was kept without gbp",
        c,
        nss,
        &listen_on,
    )
}

/// flannel-io/flannel#1155 ("cross node traffic does not work with
/// latest systemd 242 due to a race"): with systemd 242's default
/// `MACAddressPolicy=persistent`, udev rewrites the MAC of the flannel.1
/// that flanneld created; and systemd/systemd#14744 (with that policy the
/// MAC "is generated from the machine-id", so VMs cloned with one
/// /etc/machine-id get the same MAC on the same interface name; also
/// Mellanox/network-operator#418, duplicate MACs on cloned VMs). Nodes
/// cloned from one image, flannel.1 created on each: every flannel.1 ends
/// up with the same MAC, which flanneld publishes as each node's VtepMAC
/// (once it checks the MAC the device really has, flannel-io/flannel PR
/// #1796, after a restart), so each node's
/// ARP and FDB entries for the other VTEP carry its own MAC. The fix
/// Flatcar shipped (flatcar-archive/coreos-overlay PR #279) is
/// `MACAddressPolicy=none` for flannel's devices (and a fresh
/// /etc/machine-id on clones). Here both nodes' flannel.1 (VNI 1, port
/// 8472) have MAC a6:3f:0d:9e:51:c7; node1's ARP entry for node2's VTEP
/// 10.192.112.0 and its FDB entry (dst 10.192.110.2) carry that MAC,
/// node2's for node1 the same. pod connects to pod2 (10.192.112.2:8080,
/// listening): node1 sends node2 a frame whose source MAC is node2's
/// flannel.1's own. Checked by hand: node2 drops it in vxlan_rcv (drop
/// reason LOCAL_MAC, no device counter moves); with distinct MACs (the
/// trap's overlay) the SYN reaches pod2. True cause: node1's and node2's
/// flannel.1 have the same MAC address (cloned machine-id with
/// MACAddressPolicy=persistent); node2's VXLAN device drops frames whose
/// source MAC is its own. Give each node a unique machine-id (or
/// MACAddressPolicy=none for flannel.1) and recreate flannel.1.
fn cloned_vtep_mac() -> Result<Scenario> {
    let c = 110;
    let nss = two_nodes(c)?;
    flannel(&nss[1], c, 1, PERSISTENT, &[])?;
    flannel(&nss[2], c, 2, PERSISTENT, &[])?;
    flannel_peers(&nss, c, "flannel.1", [PERSISTENT, PERSISTENT])?;
    let listen_on = format!("{}:8080", a(c, 2, 2));
    to_pod2(
        "blind_ovl_cloned_vtep_mac",
        "flannel VXLAN on cloned nodes: both flannel.1 have the same MAC (systemd's persistent MAC from one machine-id)",
        c,
        nss,
        &listen_on,
    )
}

/// projectcalico/calico PR #10680 ("[BPF] Set missing tunnel key on vxlan
/// if BYPASS is set"): in Calico's eBPF dataplane vxlan.calico is a
/// flow-based (metadata-mode) device; "workload endpoints set the vxlan
/// tunnel key just before they redirect the packet to the vxlan device.
/// If for any reason redirection is disabled, but the packet is routed via
/// vxlan", on an established connection marked BYPASS, nothing set the
/// key and the device could not send it. (The same in Cilium's tunnel
/// mode, where cilium_vxlan is `external` and the key is set by its BPF
/// programs: cilium/cilium#793, packets reach cilium_vxlan, "but it does
/// not do encapsulation".) A metadata-mode VXLAN device has no remote of
/// its own: a packet the kernel routes onto it without tunnel metadata
/// has nowhere to go. Here both nodes have vxlan.calico in external mode
/// (port 4789), Felix's route `10.192.122.0/24 via 10.192.122.0 dev
/// vxlan.calico onlink` and the neighbour entry for node2's VTEP on node1
/// (and the same back), and no program on node1 sets the key for the
/// flow. pod connects to pod2 (10.192.122.2:8080, listening): node1
/// routes the SYN onto vxlan.calico with no tunnel key. Checked by hand:
/// node1 drops it in vxlan_xmit (drop reason TUNNEL_TXINFO); with the key
/// set (a route with `encap ip id 4096 dst 10.192.120.2`) the connection
/// is echoed. True cause:
/// node1 routes the packet onto a metadata-mode VXLAN device with no
/// tunnel key (the eBPF program that sets it did not run for this
/// packet); the device drops it for want of a destination. Fix the
/// dataplane so every packet routed onto the device gets a key (Calico
/// PR #10680), or route by a device with a remote of its own.
fn flow_device_no_key() -> Result<Scenario> {
    let c = 120;
    let nss = two_nodes(c)?;
    for (node, i, mac) in [(&nss[1], 1u8, CALI1), (&nss[2], 2u8, CALI2)] {
        vxlan(
            node,
            "vxlan.calico",
            mac,
            &["external", "dstport", "4789"],
            &a(c, i, 0),
        )?;
    }
    for (node, peer, mac) in [(&nss[1], 2u8, CALI2), (&nss[2], 1u8, CALI1)] {
        let vtep = a(c, peer, 0);
        node.ip_batch(&[
            &[
                "neigh",
                "replace",
                &vtep,
                "lladdr",
                mac,
                "dev",
                "vxlan.calico",
                "nud",
                "permanent",
            ],
            &[
                "route",
                "add",
                &format!("{vtep}/24"),
                "via",
                &vtep,
                "dev",
                "vxlan.calico",
                "onlink",
            ],
        ])?;
    }
    let listen_on = format!("{}:8080", a(c, 2, 2));
    to_pod2(
        "blind_ovl_flow_device_no_key",
        "Calico eBPF VXLAN: node1 routes the pod's packet onto the metadata-mode vxlan.calico, and nothing set its tunnel key",
        c,
        nss,
        &listen_on,
    )
}

/// projectcalico/calico#3543 ("Flannel to Calico Migration works after
/// restarting all the nodes": after the migration job finished, pods
/// across nodes could not communicate until every node was rebooted).
/// During the rolling migration, migrated nodes (vxlan.calico) and nodes
/// still on flannel (flannel.1) reach each other's pods only because the
/// migration controller makes Calico's VTEP look like flannel's
/// (projectcalico/calico kube-controllers/pkg/controllers/flannelmigration/
/// ipam_migrator.go: each Calico Node gets flannel's VTEP IP, MAC and
/// public IP, and the default FelixConfiguration flannel's VNI, port and
/// MTU); the nodes not yet migrated keep routing by flannel.1 with the
/// VTEPs from the other nodes' flannel annotations. Here node2 has been
/// migrated: its flannel.1 is gone and vxlan.calico has flannel's VTEP
/// address 10.192.132.0 and MAC and sits on flannel's port 8472, but with
/// Calico's default VNI 4096 (the FelixConfiguration did not get
/// flannel's VNI); node1 has not: its flannel.1 (VNI 1, port 8472) still
/// holds the route `10.192.132.0/24 via 10.192.132.0 dev flannel.1
/// onlink` and the ARP and FDB entries for node2's VTEP. pod connects to
/// pod2 (10.192.132.2:8080, listening): node1 encapsulates with VNI 1 to
/// node2's port 8472, where the socket is vxlan.calico's, with no device
/// for VNI 1. Checked by hand: with VNI 1 on vxlan.calico the connection
/// is echoed. True cause: node2's VXLAN socket on 8472 carries only VNI
/// 4096 (vxlan.calico) while node1, still on flannel.1, sends VNI 1: the
/// VNI does not match, though the port, the VTEP address and MAC do. Give
/// Calico flannel's VNI for the migration (FelixConfiguration vxlanVNI
/// 1), or finish migrating node1.
fn migration_vni_on_port() -> Result<Scenario> {
    let c = 130;
    let nss = two_nodes(c)?;
    flannel(&nss[1], c, 1, FLANNEL1, &[])?;
    let local = a(c, 0, 2);
    vxlan(
        &nss[2],
        "vxlan.calico",
        FLANNEL2,
        &[
            "id",
            "4096",
            "local",
            &local,
            "dev",
            "eth0",
            "nolearning",
            "dstport",
            "8472",
        ],
        &a(c, 2, 0),
    )?;
    // node1 (flannel) for node2: node2's VTEP from its flannel annotation
    // (which vxlan.calico took over); node2 (Felix) for node1: node1's
    // flannel VTEP.
    remote_vtep(
        &nss[1],
        "flannel.1",
        &a(c, 2, 0),
        FLANNEL2,
        &a(c, 0, 2),
        &format!("{}/24", a(c, 2, 0)),
    )?;
    remote_vtep(
        &nss[2],
        "vxlan.calico",
        &a(c, 1, 0),
        FLANNEL1,
        &a(c, 0, 1),
        &format!("{}/24", a(c, 1, 0)),
    )?;
    let listen_on = format!("{}:8080", a(c, 2, 2));
    to_pod2(
        "blind_ovl_migration_vni_on_port",
        "flannel to Calico migration: node1 still on flannel.1 (VNI 1, 8472); node2's vxlan.calico holds port 8472 with VNI 4096",
        c,
        nss,
        &listen_on,
    )
}

/// An honest trap. kubernetes/website#7281 (debug-service: "localhost
/// connection worked; svc and endpoint didn't": `curl localhost:50105`
/// in the pod answered, the pod's IP gave "connection refused"; "I at
/// first thought some type of firewall but iptables on the pod showed
/// nothing. I eventually found that my app was listening on 'localhost'
/// and not '0.0.0.0' (via ExpressJS)"). Here flannel's VXLAN is right on
/// both nodes (VNI 1, port 8472, FDB, ARP entries and routes for each
/// other) and pod2's server listens on 127.0.0.1:8080 only. pod connects
/// to pod2 (10.192.142.2:8080): the SYN crosses the overlay and reaches
/// pod2, which answers with a reset. It looks like a cross-node overlay
/// failure (only pods on other nodes are refused), but the tunnel carries
/// both ways. True cause: nothing listens on 10.192.142.2:8080 in pod2
/// (the server is bound to 127.0.0.1); bind it to 0.0.0.0 (or the pod's
/// address). The overlay is not at fault.
fn trap_localhost_listener() -> Result<Scenario> {
    let c = 140;
    let nss = two_nodes(c)?;
    flannel(&nss[1], c, 1, FLANNEL1, &[])?;
    flannel(&nss[2], c, 2, FLANNEL2, &[])?;
    flannel_peers(&nss, c, "flannel.1", [FLANNEL1, FLANNEL2])?;
    to_pod2(
        "blind_ovl_trap_localhost_listener",
        "flannel VXLAN right on both nodes; pod2's server listens on 127.0.0.1:8080 only",
        c,
        nss,
        "127.0.0.1:8080",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_OVL {
            assert!(n.starts_with("blind_ovl_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }

    #[test]
    fn addresses_stay_in_the_range() {
        assert_eq!(a(140, 2, 2), "10.192.142.2");
        assert_eq!(a(100, 0, 1), "10.192.100.1");
    }
}
