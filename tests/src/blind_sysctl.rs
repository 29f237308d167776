//! Blind scenes of one class of cause: a per-device or per-namespace
//! sysctl that makes the kernel itself drop the packet on a Kubernetes
//! node, with no firewall rule dropping it. Each rebuilds, in namespaces
//! of its own, a failure reported in a public thread, cited in its doc
//! comment, written without knowledge of tracer's rules: a DNAT to
//! docker's embedded DNS on 127.0.0.11 reached from a pod's interface
//! while `route_localnet` is 0 (kind with kube-proxy in IPVS mode), a
//! pod whose network namespace has IPv6 disabled (`disable_ipv6 = 1`) in
//! a dual-stack cluster. One scene is an honest trap: it looks like the
//! `route_localnet` failure, but the sysctl is 1 and the DNAT points at a
//! port on which nothing listens any more.
//!
//! Address ranges: 10.186, 10.188 and fd86:187::/32. `scenarios::build`
//! falls back (through `blind_scenes::build`, `blind_l2::build` and
//! `blind_tunnel::build`) to [`build`], which falls back to
//! [`crate::blind_sock::build`] (then [`crate::blind_ct::build`] and
//! [`crate::blind_bpf::build`]).

use anyhow::Result;

use crate::{
    blind_scenes::fast_arp,
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, serve, simple, strings, tcp_connect},
};

pub const BLIND_SYSCTL: &[&str] = &[
    "blind_sys_localnet_dnat",
    "blind_sys_pod_ipv6_disabled",
    "blind_sys_localnet_stale_port",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_sys_localnet_dnat" => localnet_dnat(),
        "blind_sys_pod_ipv6_disabled" => pod_ipv6_disabled(),
        "blind_sys_localnet_stale_port" => localnet_stale_port(),
        _ => return crate::blind_sock::build(name),
    })
}

/// A kind node with docker's embedded DNS and kind's DNAT to it:
/// coredns (10.B.1.2/24, gateway 10.B.1.1) — `veth1` (10.B.1.1) node
/// `eth0` (10.B.0.2/24, default via 10.B.0.1) — `eth0` (10.B.0.1) docker
/// (the docker network's gateway, `docker_host_ip`). The node's
/// resolv.conf says 10.B.0.1, and kind's entrypoint rewrote docker's
/// DOCKER_OUTPUT rules so that DNS to 10.B.0.1:53 from the node itself
/// (OUTPUT) and from pods (PREROUTING) is DNATed to 127.0.0.11:`dnat_port`,
/// replies SNATed back to 10.B.0.1:53. Docker's embedded DNS listens on
/// 127.0.0.11:`dns_port`. Namespaces (prefix `p`): coredns, node, docker.
fn kind_node(b: u8, dnat_port: u16, dns_port: u16) -> Result<(Vec<Netns>, crate::netns::Child)> {
    let p = unique_prefix();
    let (coredns, node, docker) = (ns(&p, "coredns")?, ns(&p, "node")?, ns(&p, "docker")?);
    veth(&coredns, "eth0", &node, "veth1")?;
    veth(&node, "eth0", &docker, "eth0")?;
    coredns.ip(&["addr", "add", &format!("10.{b}.1.2/24"), "dev", "eth0"])?;
    coredns.ip(&["route", "add", "default", "via", &format!("10.{b}.1.1")])?;
    node.ip(&["addr", "add", &format!("10.{b}.1.1/24"), "dev", "veth1"])?;
    node.ip(&["addr", "add", &format!("10.{b}.0.2/24"), "dev", "eth0"])?;
    node.ip(&["route", "add", "default", "via", &format!("10.{b}.0.1")])?;
    docker.ip(&["addr", "add", &format!("10.{b}.0.1/24"), "dev", "eth0"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    fast_arp(&coredns, "eth0")?;
    node.exec_file(
        &["nft", "-f"],
        &format!(
            r"table ip nat {{
	chain PREROUTING {{
		type nat hook prerouting priority -100; policy accept;
		ip daddr 10.{b}.0.1 jump DOCKER_OUTPUT
	}}
	chain OUTPUT {{
		type nat hook output priority -100; policy accept;
		ip daddr 10.{b}.0.1 jump DOCKER_OUTPUT
	}}
	chain POSTROUTING {{
		type nat hook postrouting priority 100; policy accept;
		ip saddr 127.0.0.11 jump DOCKER_POSTROUTING
	}}
	chain DOCKER_OUTPUT {{
		ip daddr 10.{b}.0.1 tcp dport 53 dnat to 127.0.0.11:{dnat_port}
		ip daddr 10.{b}.0.1 udp dport 53 dnat to 127.0.0.11:{dnat_port}
	}}
	chain DOCKER_POSTROUTING {{
		ip saddr 127.0.0.11 tcp sport {dnat_port} snat to 10.{b}.0.1:53
		ip saddr 127.0.0.11 udp sport {dnat_port} snat to 10.{b}.0.1:53
	}}
}}
"
        ),
    )?;
    let srv = serve(&node, "dns-serve", &format!("127.0.0.11:{dns_port}"), 15)?;
    Ok((vec![coredns, node, docker], srv))
}

/// coredns forwards one query to the node's resolver 10.B.0.1:53.
fn forward_query(b: u8) -> Vec<String> {
    strings(&[
        "dns-query",
        &format!("10.{b}.0.1:53"),
        "kubernetes.io",
        "--timeout-ms",
        &crate::scaled_arg(1000),
    ])
}

/// kubernetes-sigs/kind#2326 ("Kind clusters using ipvs kubeProxyMode
/// doesn't work On v1.21.1"): aojea: "pods in kind doesn't resolve dns
/// if route.localnet is not enable" — docker's embedded DNS is on
/// 127.0.0.11 with DNAT rules to it (DOCKER_OUTPUT, `dnat to
/// 127.0.0.11:PORT`), kind's entrypoint (kubernetes-sigs/kind PR #1414,
/// "embedded dns compatibility") points them at the docker network's
/// gateway and applies them in PREROUTING too, for traffic from pods;
/// kube-proxy in iptables mode sets net.ipv4.conf.all.route_localnet=1,
/// in IPVS mode it did not, and the node showed `route_localnet = 0`:
/// CoreDNS's forwarded queries, DNATed to a loopback address on arrival
/// from a pod's interface, are martian destinations. Here kind's rules
/// on the node (DNAT 10.186.0.1:53 to 127.0.0.11:37345, docker's DNS
/// listening there), route_localnet 0 (all and veth1); coredns forwards
/// one query to 10.186.0.1:53. True cause (what an SRE needs to hear):
/// the node routes the query, DNATed to 127.0.0.11 on arrival on veth1,
/// as a martian destination because net.ipv4.conf.veth1.route_localnet
/// (and `all`) is 0; set route_localnet=1 (what kube-proxy's iptables
/// mode does) or point the DNAT at a non-loopback address.
fn localnet_dnat() -> Result<Scenario> {
    let b = 186;
    let (nss, srv) = kind_node(b, 37345, 37345)?;
    nss[1].sysctl("net.ipv4.conf.all.route_localnet", "0")?;
    nss[1].sysctl("net.ipv4.conf.veth1.route_localnet", "0")?;
    let mut sc = simple(
        "blind_sys_localnet_dnat",
        "kind, kube-proxy in IPVS mode: a pod's DNS to the node DNATed to docker's 127.0.0.11 while route_localnet is 0",
        nss,
        format!("10.{b}.0.1:53"),
        forward_query(b),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// danm-cni/danm#68 ("IPv6 does not work because IPv6 is disabled in
/// Pod's network namespace"): in a dual-stack setup "CNIs fail to set
/// IPv6 address(es) on interfaces, because IPv6 is disabled (sysctl:
/// `disable_ipv6=1`) in the Pod's network namespace"; the pod's IPv6 was
/// allocated and routed but the pod's interface had IPv6 disabled. (The
/// same sysctls, `net.ipv6.conf.{all,default,eth0}.disable_ipv6 = 1`, are
/// what a node image's hardening drop-in writes, as in
/// mysticaltech/terraform-hcloud-kube-hetzner#772, and what a new
/// namespace inherits from `default`.) Here a node routes two pods'
/// IPv6 /64s by their veths (lxc1: fd86:187:1::1, lxc2: fd86:187:2::1,
/// forwarding on); pod1 is fd86:187:1::2; pod2's namespace has
/// disable_ipv6 = 1 (all, default, hence eth0), so its IPAM address
/// fd86:187:2::2 could not be set; its server listens on [::]:8080.
/// pod1 connects to [fd86:187:2::2]:8080. True cause: pod2's eth0 has
/// net.ipv6.conf.eth0.disable_ipv6 = 1 (from its namespace's `all` and
/// `default`): it has no IPv6 address and drops every IPv6 packet,
/// including the node's neighbour solicitations for fd86:187:2::2.
fn pod_ipv6_disabled() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod1, node, pod2) = (ns(&p, "pod1")?, ns(&p, "node")?, ns(&p, "pod2")?);
    pod2.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
    pod2.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    veth(&pod1, "eth0", &node, "lxc1")?;
    veth(&node, "lxc2", &pod2, "eth0")?;
    node.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    for (dev, i) in [("lxc1", 1), ("lxc2", 2)] {
        node.ip(&[
            "-6",
            "addr",
            "add",
            &format!("fd86:187:{i}::1/64"),
            "dev",
            dev,
            "nodad",
        ])?;
        node.sysctl(&format!("net.ipv6.neigh.{dev}.retrans_time_ms"), "100")?;
        node.sysctl(&format!("net.ipv6.neigh.{dev}.mcast_solicit"), "2")?;
    }
    pod1.ip(&[
        "-6",
        "addr",
        "add",
        "fd86:187:1::2/64",
        "dev",
        "eth0",
        "nodad",
    ])?;
    pod1.ip(&["-6", "route", "add", "default", "via", "fd86:187:1::1"])?;
    // The CNI's write of pod2's address, refused (EACCES: IPv6 is
    // disabled on this device).
    let refused = pod2.ip(&[
        "-6",
        "addr",
        "add",
        "fd86:187:2::2/64",
        "dev",
        "eth0",
        "nodad",
    ]);
    anyhow::ensure!(refused.is_err(), "pod2's IPv6 address was accepted");
    let target = "[fd86:187:2::2]:8080".to_string();
    let srv = listen(&pod2, "[::]:8080", 15)?;
    let mut sc = simple(
        "blind_sys_pod_ipv6_disabled",
        "dual-stack: pod2's namespace has disable_ipv6 = 1 (eth0 has no IPv6 address); pod1 connects to its routed IPv6",
        vec![pod1, node, pod2],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// An honest trap. moby/moby#31560 ("nslookup doesn't work after
/// checkpoint/restart"): the container's nat rule still sent DNS (port
/// 53 on 127.0.0.11) "to the previous UDP dns server ports", while
/// docker's embedded DNS had opened new ones when the container started
/// again; and kubernetes-sigs/kind#2383 ("DNS not working after
/// reboot"), where the kind node's DOCKER_OUTPUT rules (`dnat to
/// 127.0.0.11:37345`) are written once by kind's entrypoint (aojea:
/// "that kind of problem is not possible to fix from kind"). Here kind's
/// node as in `blind_sys_localnet_dnat`, with route_localnet = 1 (all
/// and veth1, as kube-proxy's iptables mode sets it): the sysctl is
/// right. kind's DNAT still says 127.0.0.11:37345, but docker's embedded
/// DNS now listens on 127.0.0.11:41555. coredns forwards one query to
/// 10.188.0.1:53. It looks like the route_localnet failure (a pod's DNS
/// DNATed to loopback that gets no answer), but the packet is routed and
/// delivered locally. True cause: nothing listens on 127.0.0.11:37345,
/// the port kind's DNAT rule names (docker's DNS moved to 41555): the
/// node answers port unreachable; rewrite the DOCKER_OUTPUT rules for
/// the new port (restart the node container), route_localnet is not at
/// fault.
fn localnet_stale_port() -> Result<Scenario> {
    let b = 188;
    let (nss, srv) = kind_node(b, 37345, 41555)?;
    nss[1].sysctl("net.ipv4.conf.all.route_localnet", "1")?;
    nss[1].sysctl("net.ipv4.conf.veth1.route_localnet", "1")?;
    let mut sc = simple(
        "blind_sys_localnet_stale_port",
        "kind: route_localnet = 1, but the DNAT to docker's 127.0.0.11 names a port its DNS no longer listens on",
        nss,
        format!("10.{b}.0.1:53"),
        forward_query(b),
    );
    sc.servers.push(srv);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_SYSCTL {
            assert!(n.starts_with("blind_sys_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }
}
