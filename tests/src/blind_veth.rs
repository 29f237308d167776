//! Blind scenes of one class of cause: the other end of the wire. A pod's
//! traffic fails because of the state or configuration of the *peer* of
//! its veth pair, the end that lives in another network namespace than
//! the one where the failure shows (the pod's eth0 and the node's cali*,
//! veth* or lxc* device). Each rebuilds, in namespaces of its own, a
//! failure reported in a public thread, cited in its doc comment, written
//! without knowledge of tracer's rules: the pod side's MTU changed but not
//! the node side's (large datagrams into the pod dropped by the veth),
//! the node side administratively down (the pod's eth0 has no carrier),
//! the node side created with IPv6 disabled (inherited from the node's
//! `default`), so the pod's neighbour solicitations for its gateway are
//! dropped there. One scene is an honest trap: the pod's solicitations
//! for its gateway go unanswered as in the IPv6 scene, but the node's
//! side of the veth is up, has IPv6 and would answer; kube-router's
//! egress policy chain for the pod rejects them.
//!
//! Address ranges: 10.199.0.0/16 and fd99::/16. `scenarios::build` falls
//! back (through `blind_scenes::build`, `blind_l2::build`,
//! `blind_tunnel::build`, `blind_sysctl::build`, `blind_sock::build`,
//! `blind_ct::build` and `blind_bpf::build`) to [`build`], which falls
//! back to [`crate::blind_bpfnat::build`].

use anyhow::Result;

use crate::{
    blind_l2::exchange,
    blind_scenes::fast_arp,
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, serve, simple, strings, tcp_connect},
    tracer::netprobe_bin,
};

pub const BLIND_VETH: &[&str] = &[
    "blind_veth_mtu_pod_smaller",
    "blind_veth_host_side_down",
    "blind_veth_host_ipv6_disabled",
    "blind_veth_trap_ndp_policy",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_veth_mtu_pod_smaller" => mtu_pod_smaller(),
        "blind_veth_host_side_down" => host_side_down(),
        "blind_veth_host_ipv6_disabled" => host_ipv6_disabled(),
        "blind_veth_trap_ndp_policy" => trap_ndp_policy(),
        _ => return crate::blind_bpfnat::build(name),
    })
}

/// Neighbour solicitation on `dev` of `n` gives up after 200 ms (two
/// probes 100 ms apart), as [`fast_arp`] does for ARP: the client sees
/// the failure within its timeout.
fn fast_ndp(n: &Netns, dev: &str) -> Result<()> {
    n.sysctl(&format!("net.ipv6.neigh.{dev}.retrans_time_ms"), "100")?;
    n.sysctl(&format!("net.ipv6.neigh.{dev}.mcast_solicit"), "2")?;
    n.sysctl(&format!("net.ipv6.neigh.{dev}.ucast_solicit"), "1")?;
    Ok(())
}

/// One datagram of `size` bytes from `from` to `target` before tracer
/// starts; it must be answered (what worked before the failure).
fn udp_exchange(from: &Netns, target: &str, size: &str) -> Result<()> {
    let probe = netprobe_bin();
    let t = crate::scaled_arg(1000);
    let out = from.exec_status(&[
        probe.to_str().unwrap(),
        "udp-send",
        target,
        "--size",
        size,
        "--timeout-ms",
        &t,
    ]);
    let seen = String::from_utf8_lossy(&out.stdout).trim().to_string();
    anyhow::ensure!(
        seen.starts_with("reply"),
        "the exchange before the failure did not work: {seen:?}"
    );
    Ok(())
}

/// A Calico workload's veth: `eth0` in `pod` (`addr`/32, its gateway the
/// link-local 169.254.1.1, which nobody has) and `cali1` on `node` (MAC
/// ee:ee:ee:ee:ee:ee, proxy ARP answering for the gateway at once, a /32
/// route to the pod). What Calico's CNI plugin and felix write.
fn calico_pod_v4(pod: &Netns, node: &Netns, addr: &str) -> Result<()> {
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
    node.sysctl("net.ipv4.conf.cali1.proxy_arp", "1")?;
    node.sysctl("net.ipv4.neigh.cali1.proxy_delay", "0")?;
    node.ip(&["route", "add", addr, "dev", "cali1", "scope", "link"])?;
    Ok(())
}

/// rancher/rancher#10498 ("Incorrect MTU on veth interfaces on the host
/// makes packets drop that are too large and not fragmented"): the
/// container's eth0 had MTU 1402, its host-side veth (a port of docker0)
/// 1500; an SNMP walk's 1419-byte response was seen on docker0 and never
/// reached the container, curl of small responses worked and large
/// downloads hung; "forcing the veth interface (on the host) to MTU 1402
/// fixes this problem". The same in cilium/cilium PR #3766 (joestringer:
/// "a frame of size 1476 is seen via tcpdump on the host-side of a veth
/// pair, but not seen on the container side of the same veth pair. MTU
/// was 1500 on host-side, 1450 inside"), and in
/// containernetworking/plugins#352 ("Tuning plugin: configure MTU for
/// veth"): chained after the bridge plugin, the tuning plugin changes the
/// MTU "only ... inside the pod namespace veth but not on the host
/// interface side", and there is no connectivity. Here pods on the bridge
/// cni0 (10.199.1.0/24, MTU 1500): the client pod's veth is 1500 on both
/// ends; the statsd pod (10.199.1.12, UDP 8125, answering each datagram)
/// had the tuning plugin set `"mtu": 1400` on its eth0, its node side
/// veth2 kept 1500. A 100-byte datagram gets its answer (before tracer
/// starts). The client sends one 1472-byte datagram (a 1500-byte packet,
/// DF set): the bridge forwards it to veth2, which may send 1500 bytes,
/// and the veth hands it to the pod's eth0, which refuses a frame larger
/// than its MTU allows and counts it as an rx drop. True cause: the two
/// ends of the statsd pod's veth disagree on the MTU (eth0 1400 in the
/// pod, veth2 1500 on the node); set both to the same value (the bridge
/// plugin's `mtu`, not the tuning plugin on one side only).
fn mtu_pod_smaller() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, node, statsd) = (ns(&p, "client")?, ns(&p, "node")?, ns(&p, "statsd")?);
    node.ip(&["link", "add", "cni0", "type", "bridge"])?;
    node.ip(&["link", "set", "cni0", "up"])?;
    node.ip(&["addr", "add", "10.199.1.1/24", "dev", "cni0"])?;
    for (pod, port, addr) in [
        (&client, "veth1", "10.199.1.11"),
        (&statsd, "veth2", "10.199.1.12"),
    ] {
        veth(pod, "eth0", &node, port)?;
        node.ip(&["link", "set", port, "master", "cni0"])?;
        pod.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
        pod.ip(&["route", "add", "default", "via", "10.199.1.1"])?;
    }
    // The tuning plugin's `"mtu": 1400`, applied in the pod only.
    statsd.ip(&["link", "set", "eth0", "mtu", "1400"])?;
    let target = "10.199.1.12:8125".to_string();
    let srv = serve(&statsd, "udp-echo", &target, 15)?;
    udp_exchange(&client, &target, "100")?;
    let mut sc = simple(
        "blind_veth_mtu_pod_smaller",
        "a statsd pod's eth0 has MTU 1400, its node-side veth 1500; a pod sends it one 1472-byte datagram",
        vec![client, node, statsd],
        target.clone(),
        strings(&[
            "udp-send",
            &target,
            "--size",
            "1472",
            "--timeout-ms",
            &crate::scaled_arg(1000),
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// projectcalico/calico#9648 ("Cali* Interface is in DOWN state"): on
/// nodes newly added with kubespray, a pod's cali* interface "was updated
/// to DOWN state as soon as it's summoned", the pods of some DaemonSets
/// went into CrashLoopBackOff, and "manually execute `ip link set
/// <interface> up` will temporarily resolve the issue"; felix only logged
/// `Linux interface state changed ... state="down"`. Something on the
/// node other than Calico set the node side down: in
/// poseidon/typhoon#1007 ("Prevent NetworkManager from interfering with
/// Calico interfaces") NetworkManager took cali* devices ("connecting
/// (getting IP configuration)") and containers lost connectivity until
/// they were made unmanaged (the same advice in projectcalico/calico PR
/// #1793 for Fedora Atomic). Here a Calico pod (10.199.2.2/32, gateway
/// 169.254.1.1 answered by proxy ARP on cali1) talked to the API server
/// beyond the node (10.199.3.10:6443, listening) once; then the node side
/// cali1 was set down. In the pod, eth0 is still up but has lost its
/// carrier (NO-CARRIER, state LOWERLAYERDOWN; its routes say linkdown);
/// the kernel removed the node's route to the pod with the device. The
/// pod connects to the API server again. True cause: the node-side veth
/// cali1 is administratively down (`ip link set cali1 up`, and find what
/// on the node sets it down: NetworkManager or systemd-networkd managing
/// cali*).
fn host_side_down() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, api) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "apiserver")?);
    veth(&node, "eth0", &api, "eth0")?;
    node.ip(&["addr", "add", "10.199.3.1/24", "dev", "eth0"])?;
    // The node's default route (its upstream router): proxy ARP answers
    // only for an address the node has a route to.
    node.ip(&["route", "add", "default", "via", "10.199.3.254"])?;
    api.ip(&["addr", "add", "10.199.3.10/24", "dev", "eth0"])?;
    api.ip(&["route", "add", "default", "via", "10.199.3.1"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    veth(&pod, "eth0", &node, "cali1")?;
    node.ip(&["link", "set", "cali1", "address", "ee:ee:ee:ee:ee:ee"])?;
    calico_pod_v4(&pod, &node, "10.199.2.2")?;
    fast_arp(&pod, "eth0")?;
    let target = "10.199.3.10:6443".to_string();
    let srv = listen(&api, &target, 15)?;
    exchange(&pod, &target)?;
    node.ip(&["link", "set", "cali1", "down"])?;
    let mut sc = simple(
        "blind_veth_host_side_down",
        "a Calico pod talked to the API server, then its node-side veth cali1 was set down",
        vec![pod, node, api],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// projectcalico/libnetwork-plugin#162: Docker had started to set
/// `net.ipv6.conf.all.disable_ipv6 = 1` in the namespace where the
/// plugin ran, and "the calico interface created in the dind container
/// [had] ipv6 disabled as well (net.ipv6.conf.calidc49bd71b45.disable_ipv6
/// = 1) as the setting was inherited from the default value"; the IPv6
/// tests failed, and the maintainers' analogy is a host with IPv6
/// disabled where "I would expect ipv6 to fail"; the proposed fix was to
/// "enable ipv6 for every cali interface in the host". What Calico's CNI
/// plugin does since projectcalico/cni-plugin PR #380 ("Enable necessary
/// sysctls in the container and host net namespace for IPv6": without
/// them, "interfaces will come up but they won't get a link local IPv6
/// address which is required to add the default IPv6 route"). Here a
/// dual-stack node: its uplink eth0 (10.199.5.1/24, fd99:5::1/64) existed
/// before a hardening drop-in set `net.ipv6.conf.default.disable_ipv6 =
/// 1` (not `all`), so the pod's node-side veth cali1, created after,
/// inherits disable_ipv6 = 1: it has no link-local address
/// (fe80::ecee:eeff:feee:eeee, the pod's IPv6 gateway), and felix's route
/// to the pod is refused ("IPv6 is disabled on nexthop device"). The pod
/// (10.199.4.2/32, fd99:4::2/128) reaches the server (10.199.5.10,
/// fd99:5::10, listening on [::]:8080) by IPv4 (once, before tracer
/// starts), then connects to [fd99:5::10]:8080: its neighbour
/// solicitations for fe80::ecee:eeff:feee:eeee reach cali1, which drops
/// every IPv6 packet. True cause: IPv6 is disabled on the node-side veth
/// cali1 (net.ipv6.conf.cali1.disable_ipv6 = 1, inherited from the node's
/// `default`); set it to 0 on the workload interfaces (and fix the
/// node's `default`), then the route to the pod can be added.
fn host_ipv6_disabled() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, srv_ns) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "server")?);
    veth(&node, "eth0", &srv_ns, "eth0")?;
    node.ip(&["addr", "add", "10.199.5.1/24", "dev", "eth0"])?;
    node.ip(&["-6", "addr", "add", "fd99:5::1/64", "dev", "eth0", "nodad"])?;
    node.ip(&["route", "add", "default", "via", "10.199.5.254"])?;
    srv_ns.ip(&["addr", "add", "10.199.5.10/24", "dev", "eth0"])?;
    srv_ns.ip(&["-6", "addr", "add", "fd99:5::10/64", "dev", "eth0", "nodad"])?;
    srv_ns.ip(&["route", "add", "default", "via", "10.199.5.1"])?;
    srv_ns.ip(&["-6", "route", "add", "default", "via", "fd99:5::1"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    node.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    // The hardening drop-in: only devices made from now on inherit it.
    node.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    veth(&pod, "eth0", &node, "cali1")?;
    node.ip(&["link", "set", "cali1", "address", "ee:ee:ee:ee:ee:ee"])?;
    calico_pod_v4(&pod, &node, "10.199.4.2")?;
    pod.ip(&["-6", "addr", "add", "fd99:4::2/128", "dev", "eth0", "nodad"])?;
    pod.ip(&[
        "-6",
        "route",
        "add",
        "fe80::ecee:eeff:feee:eeee",
        "dev",
        "eth0",
    ])?;
    pod.ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fe80::ecee:eeff:feee:eeee",
        "dev",
        "eth0",
    ])?;
    // felix's route to the pod, refused (EACCES) on this device.
    let refused = node.ip(&["-6", "route", "add", "fd99:4::2", "dev", "cali1"]);
    anyhow::ensure!(
        refused.is_err(),
        "the route by cali1 was accepted: cali1 has IPv6"
    );
    fast_arp(&pod, "eth0")?;
    fast_ndp(&pod, "eth0")?;
    let srv = listen(&srv_ns, "[::]:8080", 15)?;
    exchange(&pod, "10.199.5.10:8080")?;
    let target = "[fd99:5::10]:8080".to_string();
    let mut sc = simple(
        "blind_veth_host_ipv6_disabled",
        "dual-stack Calico pod: its node-side veth cali1 inherited disable_ipv6 = 1; IPv4 works, the pod connects by IPv6",
        vec![pod, node, srv_ns],
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// An honest trap. cloudnativelabs/kube-router#1895 ("IPv6 NDP NA/NS
/// dropped when using egress network policy"): with an egress
/// NetworkPolicy on an IPv6 pod, its DNS failed, and a capture on the
/// node showed the pod's neighbour solicitations for its gateway on the
/// pod's veth and on kube-bridge, again and again, with no answer ("The
/// node does not answer to the neighbor solicitation from the pod").
/// The fix, kube-router PR #1913 ("Fix IPv6 NDP on Egress Policy Use
/// Cases"), "allows ICMP traffic always ... this fixes IPv6 use-cases
/// where an egress policy was applied to a workload, where ICMP traffic
/// is used for neighbor discovery"; before it, the pod's firewall chain
/// ran its traffic through the policy's chain and REJECTed what no rule
/// marked. (The same symptom in cilium/cilium#16285, "IPv6 Neighbor
/// solicitation packets dropped when network policy is enabled".) Here a
/// node with kube-bridge (fd99:6::1/64) and a pod (fd99:6::5/64, default
/// via fd99:6::1, its node-side veth veth1 a port of kube-bridge, up,
/// IPv6 enabled); kube-router's ip6tables chains for the pod and an
/// egress policy allowing only TCP to the server [fd99:7::10]:8080
/// (listening, beyond the node's eth0). The pod connects to it: its
/// neighbour solicitations for fd99:6::1 cross veth1 and kube-bridge and
/// reach the node's INPUT hook, where KUBE-ROUTER-INPUT sends them (source
/// the pod) to the pod's KUBE-POD-FW chain, which rejects them (to a
/// multicast destination: no ICMPv6 error is sent). It looks like the
/// node's end of the pod's veth will not do IPv6 (as in
/// `blind_veth_host_ipv6_disabled`), but veth1 and kube-bridge are up,
/// have IPv6 and would answer. True cause: kube-router's egress policy
/// chain for the pod (KUBE-POD-FW-..., through KUBE-NWPLCY-...) rejects
/// the pod's ICMPv6 neighbour solicitations; allow ICMPv6 neighbour
/// discovery in it (kube-router with PR #1913), the veth is not at
/// fault.
fn trap_ndp_policy() -> Result<Scenario> {
    let p = unique_prefix();
    let (pod, node, srv_ns) = (ns(&p, "pod")?, ns(&p, "node")?, ns(&p, "server")?);
    veth(&node, "eth0", &srv_ns, "eth0")?;
    node.ip(&["-6", "addr", "add", "fd99:7::1/64", "dev", "eth0", "nodad"])?;
    srv_ns.ip(&["-6", "addr", "add", "fd99:7::10/64", "dev", "eth0", "nodad"])?;
    srv_ns.ip(&["-6", "route", "add", "default", "via", "fd99:7::1"])?;
    node.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    node.ip(&["link", "add", "kube-bridge", "type", "bridge"])?;
    node.ip(&["link", "set", "kube-bridge", "up"])?;
    node.ip(&[
        "-6",
        "addr",
        "add",
        "fd99:6::1/64",
        "dev",
        "kube-bridge",
        "nodad",
    ])?;
    veth(&pod, "eth0", &node, "veth1")?;
    node.ip(&["link", "set", "veth1", "master", "kube-bridge"])?;
    pod.ip(&["-6", "addr", "add", "fd99:6::5/64", "dev", "eth0", "nodad"])?;
    pod.ip(&["-6", "route", "add", "default", "via", "fd99:6::1"])?;
    fast_ndp(&pod, "eth0")?;
    node.exec_file(
        &["ip6tables-restore", "-w", "--noflush"],
        r#"*filter
:KUBE-ROUTER-INPUT - [0:0]
:KUBE-ROUTER-FORWARD - [0:0]
:KUBE-ROUTER-OUTPUT - [0:0]
:KUBE-POD-FW-Q5NNQHX7RUM4OWPA - [0:0]
:KUBE-NWPLCY-DEFAULT - [0:0]
:KUBE-NWPLCY-3TBM2XFW3WBKNTIQ - [0:0]
-A INPUT -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-INPUT
-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD
-A OUTPUT -m comment --comment "kube-router netpol - VEAAIY32XVBHCSCY" -j KUBE-ROUTER-OUTPUT
-A KUBE-ROUTER-INPUT -s fd99:6::5/128 -m comment --comment "rule to jump traffic from POD name:web-0 namespace: default to POD FW chain" -j KUBE-POD-FW-Q5NNQHX7RUM4OWPA
-A KUBE-ROUTER-FORWARD -d fd99:6::5/128 -m comment --comment "rule to jump traffic destined to POD name:web-0 namespace: default to POD FW chain" -j KUBE-POD-FW-Q5NNQHX7RUM4OWPA
-A KUBE-ROUTER-FORWARD -s fd99:6::5/128 -m comment --comment "rule to jump traffic from POD name:web-0 namespace: default to POD FW chain" -j KUBE-POD-FW-Q5NNQHX7RUM4OWPA
-A KUBE-ROUTER-OUTPUT -d fd99:6::5/128 -m comment --comment "rule to jump traffic destined to POD name:web-0 namespace: default to POD FW chain" -j KUBE-POD-FW-Q5NNQHX7RUM4OWPA
-A KUBE-POD-FW-Q5NNQHX7RUM4OWPA -m comment --comment "rule for stateful firewall for pod" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-POD-FW-Q5NNQHX7RUM4OWPA -m comment --comment "rule to drop invalid state for pod" -m conntrack --ctstate INVALID -j DROP
-A KUBE-POD-FW-Q5NNQHX7RUM4OWPA -d fd99:6::5/128 -m comment --comment "rule to permit the traffic traffic to pods when source is the pod's local node" -m addrtype --src-type LOCAL -j ACCEPT
-A KUBE-POD-FW-Q5NNQHX7RUM4OWPA -d fd99:6::5/128 -m comment --comment "run through default ingress network policy  chain" -j KUBE-NWPLCY-DEFAULT
-A KUBE-POD-FW-Q5NNQHX7RUM4OWPA -s fd99:6::5/128 -m comment --comment "run through nw policy allow-api-egress" -j KUBE-NWPLCY-3TBM2XFW3WBKNTIQ
-A KUBE-POD-FW-Q5NNQHX7RUM4OWPA -m comment --comment "rule to REJECT traffic destined for POD name:web-0 namespace: default" -m mark ! --mark 0x10000/0x10000 -j REJECT --reject-with icmp6-port-unreachable
-A KUBE-POD-FW-Q5NNQHX7RUM4OWPA -j MARK --set-xmark 0x0/0x10000
-A KUBE-NWPLCY-DEFAULT -m comment --comment "rule to mark traffic matching a network policy" -j MARK --set-xmark 0x10000/0x10000
-A KUBE-NWPLCY-3TBM2XFW3WBKNTIQ -d fd99:7::10/128 -p tcp -m comment --comment "rule to ACCEPT traffic from source pods to dest pods selected by policy name allow-api-egress namespace default" -m tcp --dport 8080 -j MARK --set-xmark 0x10000/0x10000
COMMIT
"#,
    )?;
    let target = "[fd99:7::10]:8080".to_string();
    let srv = listen(&srv_ns, &target, 15)?;
    let mut sc = simple(
        "blind_veth_trap_ndp_policy",
        "an IPv6 pod under a kube-router egress policy connects out; its gateway's neighbour solicitations go unanswered",
        vec![pod, node, srv_ns],
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
        for n in BLIND_VETH {
            assert!(n.starts_with("blind_veth_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }
}
