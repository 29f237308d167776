//! Blind scenes of one class of cause: a firewall between two nodes (the
//! far node's host firewall: firewalld, an iptables INPUT chain, a
//! product's default-drop node policy) drops the overlay's outer packets
//! because the overlay runs on a UDP port other than the defaults 4789
//! and 8472 (Antrea's `tunnelPort`, flannel's `Backend.Port`, Calico's
//! `vxlanPort`) while the firewall was opened for the default port. Each
//! rebuilds, in namespaces of its own, a failure reported in a public
//! thread, cited in its doc comment, written without knowledge of
//! tracer's rules. One scene is an honest trap: the overlay runs on a
//! non-default port that the far node's firewall accepts, and the far
//! node's VTEP listens on another port (nothing is bound to the one the
//! packets are sent to).
//!
//! The followed flow is always the inner one (pod to pod, or pod to a
//! ClusterIP), as an operator would follow it.
//!
//! Address ranges: 10.206, 10.207, 10.208 and 10.209.
//! `scenarios::build` falls back (through the other blind modules, last
//! [`crate::blind_proto::build`]) to [`build`], which returns None for
//! names it does not know.

use anyhow::Result;

use crate::{
    blind_tunnel::{Vtep, remote_vtep, two_nodes},
    netns::{Netns, unique_prefix},
    scenarios::{Scenario, listen, simple, tcp_connect},
};

pub const BLIND_PORT: &[&str] = &[
    "blind_port_antrea_custom_tunnel_port",
    "blind_port_flannel_port_firewalld_service",
    "blind_port_calico_vxlanport_oci_reject",
    "blind_port_trap_calico_port_mismatch",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_port_antrea_custom_tunnel_port" => antrea_custom_tunnel_port(),
        "blind_port_flannel_port_firewalld_service" => flannel_port_firewalld_service(),
        "blind_port_calico_vxlanport_oci_reject" => calico_vxlanport_oci_reject(),
        "blind_port_trap_calico_port_mismatch" => trap_calico_port_mismatch(),
        _ => return None,
    })
}

/// The overlay as the CNI agent programs it on both nodes of
/// [`two_nodes`] (on eth0): a VXLAN device `dev` (VNI `vni`, no learning)
/// on node i with UDP port `ports[i - 1]`, MAC `macs[i - 1]` and tunnel
/// address 10.B.i.0/32, and on each node the other's ARP entry, FDB
/// entry and pod-subnet route (`10.B.j.0/24 via 10.B.j.0 dev DEV onlink`).
fn overlay(
    nss: &[Netns],
    b: u8,
    dev: &str,
    vni: u32,
    ports: [u16; 2],
    macs: [&str; 2],
) -> Result<()> {
    for (node, i) in [(&nss[1], 1usize), (&nss[2], 2)] {
        Vtep {
            dev,
            vni,
            port: ports[i - 1],
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

const ANTREA: [&str; 2] = ["aa:e1:06:00:01:01", "aa:e1:06:00:02:02"];
const FLANNEL: [&str; 2] = ["0e:b5:07:00:01:01", "0e:b5:07:00:02:02"];
const CALI_OCI: [&str; 2] = ["66:3c:b4:08:00:01", "66:3c:b4:08:00:02"];
const CALI_TRAP: [&str; 2] = ["66:3c:b4:09:00:01", "66:3c:b4:09:00:02"];

/// antrea-io/antrea#7823 ("Install IPtables rules to allow encapsulation
/// traffic between Nodes unconditionally": "in some K8s products, the
/// default policy would be DROP", and Antrea should install ALLOW rules
/// for tunnel traffic "no matter it's a default port or customized
/// port") and antrea-io/antrea PR #7824 ("Fix host rules using fixed
/// tunnel port even the port is configured": the host rules for tunnel
/// traffic used the fixed default UDP port of the tunnel type, "ignoring
/// the configured TunnelPort"); antrea-io/antrea PR #4065 made
/// `tunnelPort` configurable because the cloud's own underlay may use the
/// same tunnel type and port. Here Antrea runs `tunnelType: vxlan` with
/// `tunnelPort: 10789` (antrea-tun0, VNI 1, both VTEPs right); node2 is
/// a product node whose filter INPUT policy is DROP (iptables-nft), with
/// its own allow list (established, lo, ICMP, ssh, API server, kubelet)
/// and the agent's `ANTREA-INPUT` chain, whose tunnel rule accepts the
/// VXLAN default `udp dport 4789`, not 10789. pod connects to pod2
/// (10.206.2.2:8080, listening). True cause: node2's INPUT policy DROP
/// drops node1's VXLAN packets to UDP 10789 (ANTREA-INPUT accepts 4789
/// only, the fixed default, not the configured tunnelPort); accept UDP
/// 10789 from the nodes (Antrea with PR #7824).
fn antrea_custom_tunnel_port() -> Result<Scenario> {
    let b = 206;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(&nss, b, "antrea-tun0", 1, [10789, 10789], ANTREA)?;
    nss[2].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r#"*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:ANTREA-INPUT - [0:0]
-A INPUT -m comment --comment "Antrea: jump to Antrea input rules" -j ANTREA-INPUT
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p icmp -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 6443 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 10250 -j ACCEPT
-A ANTREA-INPUT -p udp -m udp --dport 4789 -m comment --comment "Antrea: allow tunnel traffic" -j ACCEPT
-A ANTREA-INPUT -p tcp -m tcp --dport 10349:10351 -m comment --comment "Antrea: allow agent and controller APIs" -j ACCEPT
COMMIT
"#,
    )?;
    to_pod2(
        "blind_port_antrea_custom_tunnel_port",
        "Antrea VXLAN on tunnelPort 10789; node2's INPUT policy DROP, ANTREA-INPUT accepts the default 4789 only",
        b,
        nss,
    )
}

/// kubernetes/kubernetes#121530 ("Can't connect from Pods on one server
/// to Pods on different server using VXLAN", flannel on RHEL 8.6):
/// "on default port for vxlan there is already some other process
/// running", solved by moving flannel's VXLAN to another port,
/// `"Backend": {"Type": "vxlan", "Port": 8285}`; k3s-io/k3s#1719 (pods
/// on different nodes cannot communicate, flannel/vxlan on Fedora with
/// firewalld, where the operator had opened exactly
/// `firewall-cmd --permanent --add-port=8472/udp  # flannel`) and
/// kubernetes/website#13789 (the documented port is 8472 for the vxlan
/// backend). A node opened per the documentation for 8472 and a flannel
/// moved to 8285 meet. Here a ClusterIP Service web:http 10.207.96.10:80
/// has one endpoint, pod2 10.207.2.2:8080 on node2; node1's kube-proxy
/// (iptables-nft) DNATs the client pod's connection to it; flannel.1
/// (VNI 1, `Backend.Port` 8285 on both nodes, both VTEPs right) carries
/// it. node2 runs firewalld (its nftables ruleset: zone public on eth0
/// allowing ssh, the API server, kubelet and 8472/udp, everything else
/// rejected with admin-prohibited). pod connects to the ClusterIP
/// (10.207.96.10:80). True cause: node2's firewalld rejects node1's
/// VXLAN packets to UDP 8285 (only 8472/udp is open, the default flannel
/// no longer uses): `firewall-cmd --permanent --add-port=8285/udp`; the
/// Service, DNAT and endpoint are fine.
fn flannel_port_firewalld_service() -> Result<Scenario> {
    let b = 207;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(&nss, b, "flannel.1", 1, [8285, 8285], FLANNEL)?;
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
		tcp dport 6443 ct state { new, untracked } accept
		tcp dport 10250 ct state { new, untracked } accept
		udp dport 8472 ct state { new, untracked } accept
	}
	chain filter_IN_public_post {
	}
}
"#,
    )?;
    let srv = listen(&nss[3], &format!("10.{b}.2.2:8080"), 15)?;
    let target = format!("10.{b}.96.10:80");
    let mut sc = simple(
        "blind_port_flannel_port_firewalld_service",
        "ClusterIP DNATed on node1 to an endpoint on node2 over flannel VXLAN on Backend.Port 8285; node2's firewalld opened 8472/udp only",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// projectcalico/calico#10692 ("K8s on Ubuntu 24.04, VXLAN - no traffic
/// to pods on other nodes"; the same cluster in
/// kubernetes-sigs/kubespray#12412): the operator moved Calico's VXLAN
/// off 4789 with FelixConfiguration `vxlanPort: 4799`; and
/// projectcalico/calico#6208 ("Pod to pod communication doesn't work
/// with Calico and vxlan"), whose posted fix on Oracle Cloud (OCI) inserts
/// the Calico ports into the node's INPUT chain before the image's final
/// `REJECT --reject-with icmp-host-prohibited`, VXLAN as
/// `iptables -I INPUT 6 -m state --state NEW -p udp --dport 4789 -j ACCEPT`.
/// A node opened that way, for the default port, and a Calico whose
/// vxlanPort is 4799 meet. Here Calico's vxlan.calico (VNI 4096, port
/// 4799 on both nodes, both VTEPs right); node2's INPUT (iptables-nft) is
/// the OCI image's (established, ICMP, lo, NTP replies, ssh, final
/// REJECT icmp-host-prohibited) with the Kubernetes and Calico accepts of
/// that fix inserted at position 6: 6443, 10250, 179, 4789/udp, 5473,
/// 51820-51821/udp. pod connects to pod2 (10.208.2.2:8080, listening).
/// True cause: node2's INPUT chain rejects node1's VXLAN packets to UDP
/// 4799 (its last rule, REJECT icmp-host-prohibited; the accept is for
/// 4789, the default Calico no longer uses): accept UDP 4799 from the
/// nodes.
fn calico_vxlanport_oci_reject() -> Result<Scenario> {
    let b = 208;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(&nss, b, "vxlan.calico", 4096, [4799, 4799], CALI_OCI)?;
    nss[2].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r"*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m state --state RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p icmp -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p udp -m udp --sport 123 -j ACCEPT
-A INPUT -p tcp -m state --state NEW -m tcp --dport 22 -j ACCEPT
-A INPUT -p tcp -m state --state NEW -m tcp --dport 6443 -j ACCEPT
-A INPUT -p tcp -m state --state NEW -m tcp --dport 10250 -j ACCEPT
-A INPUT -p tcp -m state --state NEW -m tcp --dport 179 -j ACCEPT
-A INPUT -p udp -m state --state NEW -m udp --dport 4789 -j ACCEPT
-A INPUT -p tcp -m state --state NEW -m tcp --dport 5473 -j ACCEPT
-A INPUT -p udp -m state --state NEW -m udp --dport 51820 -j ACCEPT
-A INPUT -p udp -m state --state NEW -m udp --dport 51821 -j ACCEPT
-A INPUT -j REJECT --reject-with icmp-host-prohibited
COMMIT
",
    )?;
    to_pod2(
        "blind_port_calico_vxlanport_oci_reject",
        "Calico VXLAN on vxlanPort 4799; node2's INPUT (OCI image) accepts 4789/udp and ends with REJECT icmp-host-prohibited",
        b,
        nss,
    )
}

/// An honest trap. projectcalico/calico#10692 ("K8s on Ubuntu 24.04,
/// VXLAN - no traffic to pods on other nodes"): the operator set
/// FelixConfiguration `vxlanPort: 4799`, but the calico-node DaemonSet
/// still carried `FELIX_VXLANPORT` in its environment, which Felix reads
/// first ("Parsed value for VXLANPort: 4789 (from environment
/// variable)"); the node's VTEP stayed on the old port, and traffic to
/// pods on other nodes failed until the DaemonSet's variable was changed
/// too ("I can confirm that the node is listening on 4799, and VXLAN
/// communication works properly across nodes"). Here node1's calico-node
/// runs with 4799 (vxlan.calico, VNI 4096, dstport 4799, the new
/// config) and node2's still with the environment's 4789 (its
/// vxlan.calico listens on 4789); both VTEPs' FDB, ARP entries and routes
/// are right. node2's host firewall is open for both ports: INPUT policy
/// DROP with explicit accepts for 4789/udp and 4799/udp from the node
/// subnet (plus established, lo, ICMP, ssh, API server, kubelet). pod
/// connects to pod2 (10.209.2.2:8080, listening). It looks like the
/// non-default port is blocked, but node2's firewall accepts it. True
/// cause: node2's VTEP listens on UDP 4789 (FELIX_VXLANPORT of the
/// DaemonSet overrides the FelixConfiguration), node1 sends to 4799: no
/// socket on 4799 at node2 (the kernel answers ICMP port unreachable);
/// fix the DaemonSet's FELIX_VXLANPORT and restart calico-node. Not the
/// firewall.
fn trap_calico_port_mismatch() -> Result<Scenario> {
    let b = 209;
    let nss = two_nodes(&unique_prefix(), b, "eth0")?;
    overlay(&nss, b, "vxlan.calico", 4096, [4799, 4789], CALI_TRAP)?;
    nss[2].exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r#"*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p icmp -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 6443 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 10250 -j ACCEPT
-A INPUT -s 10.209.0.0/24 -p udp -m udp --dport 4789 -m comment --comment "calico vxlan (old port)" -j ACCEPT
-A INPUT -s 10.209.0.0/24 -p udp -m udp --dport 4799 -m comment --comment "calico vxlan (vxlanPort)" -j ACCEPT
COMMIT
"#,
    )?;
    to_pod2(
        "blind_port_trap_calico_port_mismatch",
        "Calico VXLAN: node1 sends to vxlanPort 4799, node2's VTEP still on 4789 (FELIX_VXLANPORT); node2's firewall accepts both",
        b,
        nss,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_PORT {
            assert!(n.starts_with("blind_port_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }
}
