//! Blind scenes of one class of cause: a firewall between the nodes and
//! the overlay (VXLAN) tunnel. A node's host firewall (ufw's chains in
//! iptables-nft, a hand-written nftables `table inet`, docker's FORWARD
//! policy) drops either the encapsulated packet (the overlay's UDP port,
//! 4789 for Calico, 8472 for flannel) or the decapsulated pod packet.
//! Each rebuilds, in namespaces of its own, a failure reported in a
//! public thread, cited in its doc comment, written without knowledge of
//! tracer's rules. One scene is an honest trap: the overlay's port is
//! open everywhere, and the decapsulated packet is dropped by the FORWARD
//! chain's policy.
//!
//! Address ranges: 10.226, 10.227 and 10.228 (10.228.0.0/24 also stands,
//! in a rule only, for a node subnet nothing uses). `blind_xdp::build`
//! falls back to [`build`], which falls back to
//! [`crate::blind_veth::build`].

use anyhow::Result;

use crate::{
    blind_tunnel::{Vtep, remote_vtep, two_nodes},
    netns::{Netns, unique_prefix},
    scenarios::{Scenario, listen, simple, tcp_connect},
};

pub const BLIND_FW: &[&str] = &[
    "blind_fw_ufw_denies_vxlan_4789",
    "blind_fw_service_endpoint_over_vxlan_blocked",
    "blind_fw_trap_forward_policy_drop",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_fw_ufw_denies_vxlan_4789" => ufw_denies_vxlan_4789(),
        "blind_fw_service_endpoint_over_vxlan_blocked" => service_endpoint_over_vxlan_blocked(),
        "blind_fw_trap_forward_policy_drop" => trap_forward_policy_drop(),
        _ => return crate::blind_veth::build(name),
    })
}

/// The overlay as the CNI agent programs it on both nodes of
/// [`two_nodes`] (blind_tunnel.rs, on eth0): a VXLAN device `dev` (VNI `vni`, UDP `port`, no
/// learning) on eth0 with MAC `macs[i]` and tunnel address 10.B.i.0/32,
/// and on each node the other's ARP entry, FDB entry and pod-subnet
/// route (`10.B.j.0/24 via 10.B.j.0 dev DEV onlink`). Both sides right.
fn overlay(nss: &[Netns], b: u8, dev: &str, vni: u32, port: u16, macs: [&str; 2]) -> Result<()> {
    for (node, i) in [(&nss[1], 1usize), (&nss[2], 2)] {
        Vtep {
            dev,
            vni,
            port,
            mac: macs[i - 1],
            local: &format!("10.{b}.0.{i}"),
            parent: "eth0",
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
            &format!("10.{b}.0.{peer}"),
            &format!("10.{b}.{peer}.0/24"),
        )?;
    }
    Ok(())
}

const CALI: [&str; 2] = ["66:3c:b4:26:00:01", "66:3c:b4:26:00:02"];
const FLANNEL: [&str; 2] = ["0e:b5:27:00:01:01", "0e:b5:27:00:02:02"];

/// projectcalico/calico#6208 ("Pod to pod communication doesn't work with
/// Calico and vxlan in Kubernetes 1.21"): pods on different nodes could
/// not talk with Calico in VXLAN mode; the working fix posted there opens
/// the Calico ports in the host's INPUT chain, among them
/// `-p udp --dport 4789 -j ACCEPT` (VXLAN). canonical/microk8s#1712 and
/// #2418 (Calico with ufw enabled: pods cannot reach the API server
/// until ufw is told about Calico's traffic) and projectcalico/calico#4927
/// (ufw "Default: deny (incoming)" on the nodes, Calico traffic sometimes
/// blocked) are the same firewall. Here node1 and node2 run Calico's VXLAN
/// (vxlan.calico, VNI 4096, port 4789, both VTEPs right), and node2 runs
/// ufw as it writes itself into iptables (here iptables-nft): INPUT
/// policy DROP, `ufw-before-input` (loopback, established, ICMP, DHCP),
/// `ufw-user-input` with the operator's `ufw allow` rules (22, 6443,
/// 10250, 179/tcp for BGP) and nothing for 4789/udp. pod connects to pod2
/// (10.226.2.2:8080, listening). True cause: node2's ufw (default deny
/// incoming, INPUT policy DROP) drops the VXLAN packets to UDP 4789 from
/// node1; `ufw allow 4789/udp` (from the node subnet) fixes it.
fn ufw_denies_vxlan_4789() -> Result<Scenario> {
    let b = 226;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(&nss, b, "vxlan.calico", 4096, 4789, CALI)?;
    nss[2].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r"*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:ufw-after-input - [0:0]
:ufw-after-logging-input - [0:0]
:ufw-before-input - [0:0]
:ufw-before-logging-input - [0:0]
:ufw-reject-input - [0:0]
:ufw-track-input - [0:0]
:ufw-user-input - [0:0]
:ufw-user-limit - [0:0]
:ufw-user-limit-accept - [0:0]
:ufw-user-logging-input - [0:0]
-A INPUT -j ufw-before-logging-input
-A INPUT -j ufw-before-input
-A INPUT -j ufw-after-input
-A INPUT -j ufw-after-logging-input
-A INPUT -j ufw-reject-input
-A INPUT -j ufw-track-input
-A ufw-before-input -i lo -j ACCEPT
-A ufw-before-input -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A ufw-before-input -m conntrack --ctstate INVALID -j DROP
-A ufw-before-input -p icmp -m icmp --icmp-type 3 -j ACCEPT
-A ufw-before-input -p icmp -m icmp --icmp-type 11 -j ACCEPT
-A ufw-before-input -p icmp -m icmp --icmp-type 12 -j ACCEPT
-A ufw-before-input -p icmp -m icmp --icmp-type 8 -j ACCEPT
-A ufw-before-input -p udp -m udp --sport 67 --dport 68 -j ACCEPT
-A ufw-before-input -j ufw-user-input
-A ufw-after-input -p udp -m udp --dport 137 -j RETURN
-A ufw-after-input -p udp -m udp --dport 138 -j RETURN
-A ufw-after-input -p tcp -m tcp --dport 139 -j RETURN
-A ufw-after-input -p tcp -m tcp --dport 445 -j RETURN
-A ufw-user-input -p tcp -m tcp --dport 22 -j ACCEPT
-A ufw-user-input -p tcp -m tcp --dport 6443 -j ACCEPT
-A ufw-user-input -p tcp -m tcp --dport 10250 -j ACCEPT
-A ufw-user-input -p tcp -m tcp --dport 179 -j ACCEPT
-A ufw-user-limit-accept -j ACCEPT
-A ufw-user-limit -j REJECT --reject-with icmp-port-unreachable
COMMIT
",
    )?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    let mut sc = simple(
        "blind_fw_ufw_denies_vxlan_4789",
        "Calico VXLAN, both VTEPs right; node2's ufw (INPUT policy DROP, ufw-user-input without 4789/udp) drops the encapsulated packets",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubeadm#836 ("Requests to a cluster IP service only get to
/// the pod when it is on the same node, otherwise they timeout"; flannel
/// VXLAN, kube-proxy in iptables mode); flannel-io/flannel#710 ("Flannel
/// cant access without `iptabels -I INPUT -s`": pods on other nodes
/// unreachable until the node subnet was accepted in INPUT; "Sloved, The
/// port 8472 have to accept with iptables"); NixOS/nixpkgs#98766 (k3s:
/// the host firewall's chain had no accept for UDP 8472, "the port used
/// for in-cluster communication"); kubernetes/website#13789 (flannel's
/// VXLAN needs UDP 8472 allowed "for all hosts participating in the
/// overlay network"). Here a ClusterIP Service web:http 10.227.96.10:80
/// has one endpoint, pod2 10.227.2.2:8080 on node2; node1's kube-proxy
/// (iptables-nft, nat PREROUTING -> KUBE-SERVICES -> KUBE-SVC -> KUBE-SEP)
/// DNATs the client pod's connection to it, and flannel.1 (VNI 1, port
/// 8472, both VTEPs right) carries it to node2. node2's own nftables
/// ruleset (`table inet filter`, input policy drop) accepts 8472/udp, the
/// API server and kubelet only from the set `k8s_nodes`, which holds
/// 10.228.0.0/24 (the node subnet written when the firewall was made),
/// not 10.227.0.0/24 where node1 is. pod connects to the ClusterIP
/// (10.227.96.10:80). True cause: node2's nftables input chain drops
/// node1's VXLAN packets (UDP 8472 from 10.227.0.1, not in `k8s_nodes`);
/// the Service's DNAT and the endpoint are fine: add node1's subnet to
/// the set (allow 8472/udp from every node).
fn service_endpoint_over_vxlan_blocked() -> Result<Scenario> {
    let b = 227;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(&nss, b, "flannel.1", 1, 8472, FLANNEL)?;
    nss[1].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        &format!(
            r#"*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-WEB4HTTPZ3QK2XYA - [0:0]
:KUBE-SEP-POD2WEB5N7KQJ3LM - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES -d 10.{b}.96.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-WEB4HTTPZ3QK2XYA
-A KUBE-SVC-WEB4HTTPZ3QK2XYA ! -s 10.{b}.0.0/16 -d 10.{b}.96.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-WEB4HTTPZ3QK2XYA -m comment --comment "default/web:http -> 10.{b}.2.2:8080" -j KUBE-SEP-POD2WEB5N7KQJ3LM
-A KUBE-SEP-POD2WEB5N7KQJ3LM -s 10.{b}.2.2/32 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A KUBE-SEP-POD2WEB5N7KQJ3LM -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 10.{b}.2.2:8080
COMMIT
"#
        ),
    )?;
    nss[2].exec_file(
        &["nft", "-f"],
        r#"table inet filter {
	set k8s_nodes {
		type ipv4_addr
		flags interval
		elements = { 10.228.0.0/24 }
	}
	chain input {
		type filter hook input priority filter; policy drop;
		ct state vmap { invalid : drop, established : accept, related : accept }
		iifname "lo" accept
		meta l4proto { icmp, ipv6-icmp } accept
		tcp dport 22 accept
		ip saddr @k8s_nodes tcp dport { 6443, 10250 } accept
		ip saddr @k8s_nodes udp dport 8472 accept
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
	}
	chain output {
		type filter hook output priority filter; policy accept;
	}
}
"#,
    )?;
    let srv = listen(&nss[3], &format!("10.{b}.2.2:8080"), 15)?;
    let target = format!("10.{b}.96.10:80");
    let mut sc = simple(
        "blind_fw_service_endpoint_over_vxlan_blocked",
        "ClusterIP DNATed on node1 to an endpoint on node2 over flannel VXLAN; node2's nftables input accepts 8472/udp only from the wrong node subnet",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// An honest trap. kubernetes/kubernetes#40182 ("Upgrading docker 1.13
/// on nodes causes outbound container traffic to stop working": docker
/// 1.13 sets the filter table's FORWARD policy to DROP);
/// kubernetes/kubernetes#39823 ("Handle nodes with iptables FORWARD DROP
/// better": with flannel, pod-to-pod across nodes fails);
/// flannel-io/flannel#799 and #699 (VXLAN between the nodes works, pods
/// on other nodes unreachable; fixed by `iptables -P FORWARD ACCEPT` or
/// accepting the pod traffic in FORWARD), flannel-io/flannel PR #872
/// (flannel adds its own FORWARD rules "to work around the Docker change
/// from v1.13 which changed the default FORWARD policy to DROP"). Here
/// flannel's VXLAN (flannel.1, VNI 1, port 8472) is right on both nodes
/// and both nodes accept 8472/udp in INPUT explicitly; node2 runs docker
/// (iptables-nft): FORWARD policy DROP with docker's chains, which accept
/// only traffic of docker0, and no rule for the pod subnets (an old
/// flannel without PR #872's rules). pod connects to pod2
/// (10.228.2.2:8080, listening). It looks like the overlay is blocked,
/// but the encapsulated packet is accepted and decapsulated. True cause:
/// node2's FORWARD policy DROP (docker's) drops the decapsulated SYN
/// (flannel.1 -> lxc0); `iptables -P FORWARD ACCEPT`, or FORWARD accepts
/// for the pod CIDR; not the VXLAN port.
fn trap_forward_policy_drop() -> Result<Scenario> {
    let b = 228;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(&nss, b, "flannel.1", 1, 8472, FLANNEL)?;
    for node in [&nss[1], &nss[2]] {
        node.exec(&[
            "iptables",
            "-w",
            "-A",
            "INPUT",
            "-s",
            "10.228.0.0/24",
            "-p",
            "udp",
            "-m",
            "udp",
            "--dport",
            "8472",
            "-m",
            "comment",
            "--comment",
            "flannel vxlan",
            "-j",
            "ACCEPT",
        ])?;
    }
    nss[2].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r"*filter
:FORWARD DROP [0:0]
:DOCKER - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-ISOLATION-STAGE-2 - [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -o docker0 -j DOCKER
-A FORWARD -i docker0 ! -o docker0 -j ACCEPT
-A FORWARD -i docker0 -o docker0 -j ACCEPT
-A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2
-A DOCKER-ISOLATION-STAGE-1 -j RETURN
-A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP
-A DOCKER-ISOLATION-STAGE-2 -j RETURN
-A DOCKER-USER -j RETURN
COMMIT
",
    )?;
    let target = format!("10.{b}.2.2:8080");
    let srv = listen(&nss[3], &target, 15)?;
    let mut sc = simple(
        "blind_fw_trap_forward_policy_drop",
        "flannel VXLAN, 8472/udp accepted on both nodes; node2's FORWARD policy DROP (docker) drops the decapsulated pod packet",
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
        for n in BLIND_FW {
            assert!(n.starts_with("blind_fw_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }
}
