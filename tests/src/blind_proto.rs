//! Blind scenes of IP protocols a node does not handle. Each rebuilds, in
//! namespaces of its own, a failure reported in a public thread, cited in
//! its doc comment, written without knowledge of tracer's rules: an SCTP
//! pod port on a node whose kernel has no SCTP, an SCTP Service whose
//! endpoint is on such a node (the INIT DNATed and routed there first),
//! Calico's IP-in-IP arriving at a node built without the ipip module.
//! One scene is an honest trap: VXLAN packets reach a node that handles
//! VXLAN (its devices are there, for their VNI and port) and a firewall
//! rule of the node drops them.
//!
//! This kernel has no SCTP (CONFIG_IP_SCTP unset) and no ipip module
//! (CONFIG_NET_IPIP unset), in every namespace: the nodes of the reports
//! had the same lack. The SCTP INITs are written by netprobe's `sctp-send`
//! (a raw socket of protocol 132), the IP-in-IP packets by its
//! `ipip-send` (protocol 4), on the sending side; both print what came
//! back. Conntrack and NAT of SCTP are built in (CONFIG_NF_CT_PROTO_SCTP),
//! so a Service's DNAT of SCTP works as on the reports' nodes.
//!
//! Address ranges: 10.195.41 to 10.195.90. `scenarios::build` falls back
//! (through the other blind modules, last [`crate::blind_more::build`]) to
//! [`build`], which falls back to [`crate::blind_port::build`].

use anyhow::Result;

use crate::{
    blind_scenes::fast_arp,
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, listen, ns, serve, simple, strings},
};

pub const BLIND_PROTO: &[&str] = &[
    "blind_proto_sctp_pod_no_module",
    "blind_proto_sctp_service_endpoint_no_module",
    "blind_proto_ipip_node_no_module",
    "blind_proto_trap_vxlan_dropped_by_firewall",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_proto_sctp_pod_no_module" => sctp_pod_no_module(),
        "blind_proto_sctp_service_endpoint_no_module" => sctp_service_endpoint_no_module(),
        "blind_proto_ipip_node_no_module" => ipip_node_no_module(),
        "blind_proto_trap_vxlan_dropped_by_firewall" => trap_vxlan_dropped_by_firewall(),
        _ => return crate::blind_native::build(name),
    })
}

/// `sctp-send ADDR` from a client: three INITs of one association, each
/// awaited a second (scaled), as a client's INIT retransmissions.
fn sctp_send(addr: &str) -> Vec<String> {
    strings(&[
        "sctp-send",
        addr,
        "--count",
        "3",
        "--timeout-ms",
        &crate::scaled_arg(1000),
    ])
}

/// A pod's addresses and default route: `addr`/24 on its eth0, the
/// gateway `gw`.
fn pod_addr(pod: &Netns, addr: &str, gw: &str) -> Result<()> {
    pod.ip_batch(&[
        &["addr", "add", &format!("{addr}/24"), "dev", "eth0"],
        &["route", "add", "default", "via", gw],
    ])?;
    fast_arp(pod, "eth0")
}

/// kubernetes/test-infra#22314 ("skip sctp connectivity test for azure
/// dual-stack 1.20"): the `[Feature:SCTPConnectivity]` e2e tests failed
/// on clusters built from the AKS node image, which "currently doesn't
/// have sctp enabled"; the test's netserver pod started its HTTP server on
/// 8080 and its UDP server on 8081, then "failed to create listener for
/// SCTP address :8082: protocol not supported". antrea-io/antrea#4132
/// ("SCTP NetworkPolicy tests are failing AKS clusters") is the same
/// node image: "This is because AKS Nodes doesn't SCTP", shown by its
/// `/proc/net/protocols`, which has no SCTP line (the image's security
/// hardening keeps the sctp module from loading: Azure/aks-engine#1096
/// writes `install sctp /bin/true`, and Azure/aks-engine#4108: "they
/// block it during security hardening"). Here one such node as kubenet
/// wires it: a bridge `cbr0` (10.195.41.1/24) with two pods, the e2e's
/// test-container-pod (10.195.41.11) and a netserver pod (10.195.41.12,
/// its HTTP server on 8080 up). The test pod opens an SCTP association to
/// the netserver's SCTP port, 10.195.41.12:8082 (an INIT, retransmitted
/// twice). True cause: the node's kernel has no SCTP (no sctp module
/// loaded, or none that can be): the INIT reaches the pod's namespace,
/// where no handler for IP protocol 132 exists, and the kernel answers
/// ICMP protocol unreachable (the pod's `InUnknownProtos` counts the
/// INITs); nothing could listen on 8082 there in the first place. Load
/// the sctp module on the node (an image with SCTP enabled), or skip SCTP
/// on such nodes. Not checkable here with the cause removed (this kernel
/// has no SCTP); an HTTP connection to the same pod on 8080 is answered.
fn sctp_pod_no_module() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, node, server) = (ns(&p, "testpod")?, ns(&p, "node")?, ns(&p, "netserver")?);
    node.ip_batch(&[
        &["link", "add", "cbr0", "type", "bridge"],
        &["addr", "add", "10.195.41.1/24", "dev", "cbr0"],
        &["link", "set", "cbr0", "up"],
    ])?;
    veth(&client, "eth0", &node, "vethtestpod")?;
    veth(&server, "eth0", &node, "vethnetserver")?;
    node.ip_batch(&[
        &["link", "set", "vethtestpod", "master", "cbr0"],
        &["link", "set", "vethnetserver", "master", "cbr0"],
    ])?;
    pod_addr(&client, "10.195.41.11", "10.195.41.1")?;
    pod_addr(&server, "10.195.41.12", "10.195.41.1")?;
    // netserver's HTTP server, up (its SCTP listener could not be).
    let http = listen(&server, "10.195.41.12:8080", 15)?;
    let target = "10.195.41.12:8082".to_string();
    let mut sc = simple(
        "blind_proto_sctp_pod_no_module",
        "AKS-style node without SCTP: a pod sends SCTP INITs to a netserver pod's SCTP port 8082 on the same bridge",
        vec![client, node, server],
        target.clone(),
        sctp_send(&target),
    );
    sc.servers.push(http);
    Ok(sc)
}

/// Two nodes, each with one pod on a veth (the node's end /24 .1):
/// pod1 (10.B3.1+1.2) — node1 eth0 (10.B3.0.1) — eth0 (10.B3.0.2) node2 —
/// pod2 (10.B3.2+1.2), where B3 is `third` (the pod subnets are the next
/// two third octets), forwarding on, each node routing the other's pod
/// /24 via the other (host-gw, or a cloud's routes per node). Namespaces
/// (prefix `p`) named as `names`: pod1, node1, node2, pod2.
fn two_nodes(p: &str, third: u8, names: [&str; 4]) -> Result<Vec<Netns>> {
    let (pod1, n1, n2, pod2) = (
        ns(p, names[0])?,
        ns(p, names[1])?,
        ns(p, names[2])?,
        ns(p, names[3])?,
    );
    veth(&pod1, "eth0", &n1, "veth0")?;
    veth(&n1, "eth0", &n2, "eth0")?;
    veth(&n2, "veth0", &pod2, "eth0")?;
    for (node, i, peer) in [(&n1, 1u8, 2u8), (&n2, 2, 1)] {
        node.ip_batch(&[
            &[
                "addr",
                "add",
                &format!("10.195.{third}.{i}/24"),
                "dev",
                "eth0",
            ],
            &[
                "addr",
                "add",
                &format!("10.195.{}.1/24", third + i),
                "dev",
                "veth0",
            ],
            &[
                "route",
                "add",
                &format!("10.195.{}.0/24", third + peer),
                "via",
                &format!("10.195.{third}.{peer}"),
            ],
        ])?;
        node.sysctl("net.ipv4.ip_forward", "1")?;
        fast_arp(node, "eth0")?;
        fast_arp(node, "veth0")?;
    }
    for (pod, i) in [(&pod1, 1u8), (&pod2, 2)] {
        pod_addr(
            pod,
            &format!("10.195.{}.2", third + i),
            &format!("10.195.{}.1", third + i),
        )?;
    }
    Ok(vec![pod1, n1, n2, pod2])
}

/// kubernetes/test-infra#34860 ("do not run sctpconnectivity tests"):
/// "SCTP kernel module is not available in COS images so those test
/// fail". One of them is the e2e "Granular Checks: Services should
/// function for pod-Service: sctp": the test-container-pod dials the
/// Service's cluster IP on port 95 (ClusterSCTPPort) over SCTP, and
/// kube-proxy sends it to a netserver endpoint's 8082 (EndpointSCTPPort)
/// on another node. Here two nodes of such an image with host-gw routes
/// between their pod subnets: the test pod (10.195.51.2) on node1, the
/// netserver endpoint (10.195.52.2, its HTTP server on 8080 up) on node2;
/// node1's kube-proxy (iptables mode) has the Service's rules: cluster IP
/// 10.195.60.20, `-p sctp -m sctp --dport 95` to KUBE-SVC, its one
/// KUBE-SEP DNAT `--to-destination 10.195.52.2:8082`. The test pod opens
/// an SCTP association to 10.195.60.20:95. The INIT is DNATed on node1,
/// routed to node2 and forwarded to the endpoint pod. True cause: the
/// endpoint's node kernel has no SCTP: in the endpoint pod's namespace no
/// handler for IP protocol 132 exists and the kernel answers ICMP protocol
/// unreachable (which node1's conntrack turns back to the cluster IP);
/// the Service, its DNAT and the routes are right. Use a node image with
/// the sctp module (or keep SCTP workloads off such nodes). Not checkable
/// here with the cause removed (this kernel has no SCTP); a TCP
/// connection from the test pod to the endpoint's 8080 is answered.
fn sctp_service_endpoint_no_module() -> Result<Scenario> {
    let p = unique_prefix();
    let nss = two_nodes(&p, 50, ["testpod", "node1", "node2", "netserver"])?;
    nss[1].exec_file(
        &["iptables-restore", "--noflush"],
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-Q5PE7NH2WD5RRYUF - [0:0]\n:KUBE-SEP-XLX7DHBJ3G6EJNTS - [0:0]\n\
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A KUBE-SERVICES -d 10.195.60.20/32 -p sctp -m comment --comment \"nettest-6153/node-port-service:sctp cluster IP\" -m sctp --dport 95 -j KUBE-SVC-Q5PE7NH2WD5RRYUF\n\
-A KUBE-SVC-Q5PE7NH2WD5RRYUF -m comment --comment \"nettest-6153/node-port-service:sctp -> 10.195.52.2:8082\" -j KUBE-SEP-XLX7DHBJ3G6EJNTS\n\
-A KUBE-SEP-XLX7DHBJ3G6EJNTS -p sctp -m comment --comment \"nettest-6153/node-port-service:sctp\" -m sctp -j DNAT --to-destination 10.195.52.2:8082\n\
COMMIT\n",
    )?;
    let http = listen(&nss[3], "10.195.52.2:8080", 15)?;
    let target = "10.195.60.20:95".to_string();
    let mut sc = simple(
        "blind_proto_sctp_service_endpoint_no_module",
        "a pod sends SCTP INITs to a Service's cluster IP:95; kube-proxy DNATs them to an endpoint :8082 on a node whose kernel has no SCTP",
        nss,
        target.clone(),
        sctp_send(&target),
    );
    sc.servers.push(http);
    Ok(sc)
}

/// projectcalico/calico#3507 ("Calico does not create tunl0 interface on
/// ARM64 Ubuntu 16.04"): a mixed cluster, ten AMD64 VMs (Ubuntu 18.04,
/// 4.15 kernels) and one ARM64 board as a worker (`mpsoc10`, a custom
/// 4.14 kernel); Calico with IPIP; on the ARM64 node `tunl0` is missing
/// and its pods cannot be reached from the others. The reporter's finding:
/// "We use a custom kernel for the ARM64 nodes, which is lacking a lot of
/// the kernel modules required by Calico (e.g. IPIP and others)", and
/// "building a kernel with the required modules has indeed fixed my
/// problem". Here worker-01 (10.195.70.1) sends what its `tunl0` sends for
/// its pod 10.195.71.4 talking to a pod on mpsoc10, 10.195.72.5:8080 (UDP,
/// a listener there): IP protocol 4 to mpsoc10's address 10.195.70.2,
/// the inner datagram inside. mpsoc10 is wired as Calico wires a node
/// (the pod on a cali veth, a /32 route to it, proxy ARP, forwarding on),
/// without `tunl0`: its kernel has no ipip module. The operator, who
/// suspects mpsoc10, follows its address (IP-in-IP has no ports). Three
/// namespaces: worker01, mpsoc10, pod. True cause: mpsoc10's kernel
/// cannot decapsulate IP-in-IP (no ipip module, so no `tunl0`): the outer
/// packets are delivered to mpsoc10 itself, where no handler for IP
/// protocol 4 exists, and it answers ICMP protocol unreachable
/// (`InUnknownProtos` counts them); build the kernel with IPIP (or use
/// VXLAN, or no encapsulation). Not checkable here with the cause removed
/// (this kernel has no ipip module); the inner datagram sent
/// unencapsulated from worker01 reaches the pod.
fn ipip_node_no_module() -> Result<Scenario> {
    let p = unique_prefix();
    let (w1, mpsoc, pod) = (ns(&p, "worker01")?, ns(&p, "mpsoc10")?, ns(&p, "pod")?);
    veth(&w1, "eth0", &mpsoc, "eth0")?;
    veth(&mpsoc, "cali1", &pod, "eth0")?;
    w1.ip(&["addr", "add", "10.195.70.1/24", "dev", "eth0"])?;
    // The node's default route (the LAN's gateway), which proxy ARP for
    // the pods' 169.254.1.1 needs.
    mpsoc.ip_batch(&[
        &["addr", "add", "10.195.70.2/24", "dev", "eth0"],
        &["route", "add", "default", "via", "10.195.70.254"],
        &[
            "route",
            "add",
            "10.195.72.5",
            "dev",
            "cali1",
            "scope",
            "link",
        ],
    ])?;
    mpsoc.sysctl("net.ipv4.ip_forward", "1")?;
    mpsoc.sysctl("net.ipv4.conf.cali1.proxy_arp", "1")?;
    mpsoc.sysctl("net.ipv4.neigh.cali1.proxy_delay", "0")?;
    pod.ip_batch(&[
        &["addr", "add", "10.195.72.5/32", "dev", "eth0"],
        &[
            "route",
            "add",
            "169.254.1.1",
            "dev",
            "eth0",
            "scope",
            "link",
        ],
        &[
            "route",
            "add",
            "default",
            "via",
            "169.254.1.1",
            "dev",
            "eth0",
        ],
    ])?;
    fast_arp(&w1, "eth0")?;
    fast_arp(&mpsoc, "eth0")?;
    let srv = serve(&pod, "udp-echo", "10.195.72.5:8080", 15)?;
    let mut sc = simple(
        "blind_proto_ipip_node_no_module",
        "Calico IPIP: worker-01 sends IP-in-IP (protocol 4) to mpsoc10, whose custom kernel has no ipip module; followed on mpsoc10's address",
        vec![w1, mpsoc, pod],
        "10.195.70.2".into(),
        strings(&[
            "ipip-send",
            "10.195.70.2",
            "10.195.72.5:8080",
            "--inner-src",
            "10.195.71.4",
            "--count",
            "3",
            "--report-icmp",
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A VXLAN device `dev` in `n`: VNI `vni`, UDP port 4789, over eth0 from
/// `local`; `remote` a point-to-point peer (learning, ARP through the
/// tunnel) or None (Calico's: no learning, Felix writes the FDB); the
/// address `addr` (with its prefix) on it.
fn vxlan(
    n: &Netns,
    dev: &str,
    vni: u32,
    local: &str,
    remote: Option<&str>,
    addr: &str,
) -> Result<()> {
    let vni = vni.to_string();
    let mut cmd = vec![
        "link", "add", dev, "type", "vxlan", "id", &vni, "local", local, "dev", "eth0", "dstport",
        "4789",
    ];
    match remote {
        Some(r) => cmd.extend(["remote", r]),
        None => cmd.push("nolearning"),
    }
    n.ip(&cmd)?;
    n.ip_batch(&[
        &["addr", "add", addr, "dev", dev],
        &["link", "set", dev, "up"],
    ])
}

/// An honest trap. projectcalico/calico#6752 ("Calico unconditionally
/// drops VXLAN packets that are not related to Calico"), from
/// confidential-containers/cloud-api-adaptor#244 ("Pod IP is unreachable
/// when Calico VXLAN mode is set to Always": `curl http://172.20.189.195`
/// from the worker, "Failed to connect ... No route to host"): a worker
/// node with Calico's VXLAN (VNI 4096, port 4789) and a second VXLAN
/// tunnel of its own on the same port with another VNI (555000, the
/// peer-pods tunnel to a pod VM). Both tunnels are there and working
/// devices; but Felix's rule `cali-INPUT -p udp --dports 4789 -m addrtype
/// --dst-type LOCAL -j DROP` ("Drop IPv4 VXLAN packets from
/// non-whitelisted hosts", after the ACCEPT for the hosts in the ipset
/// `cali40all-vxlan-net`) drops every VXLAN packet from a host that is not
/// a Calico node, the pod VM's among them. Here the worker (10.195.80.2)
/// has `vxlan.calico` (VNI 4096, nolearning) and `vxlan555000` (VNI
/// 555000, remote the pod VM 10.195.80.50, 10.195.90.1/24), and Calico's
/// filter rules as the issue lists them (the ipset's members, the Calico
/// nodes, written as `-s 10.195.80.3`: no ipset tool here); the pod VM has
/// the other end (10.195.90.7/24, a server on :80). The worker connects to
/// 10.195.90.7:80. An operator who suspects the second tunnel is not
/// handled by the worker (a VNI it has no device for) follows the
/// worker's VXLAN address and port, 10.195.80.2:4789. True cause: the
/// worker's own firewall rule (Calico's cali-INPUT DROP of VXLAN from
/// non-Calico hosts) drops the pod VM's VXLAN packets (its ARP replies,
/// so the worker's connect fails with "No route to host"); VXLAN is
/// handled here (the VNI 555000 device exists and its UDP socket is
/// bound); the fix is to let the VM's VXLAN in (an ACCEPT for its address
/// before Calico's chain, or another port for the second tunnel). Checked
/// by hand: with the VM's address accepted the connection is answered.
fn trap_vxlan_dropped_by_firewall() -> Result<Scenario> {
    let p = unique_prefix();
    let (worker, vm) = (ns(&p, "worker")?, ns(&p, "podvm")?);
    veth(&worker, "eth0", &vm, "eth0")?;
    // Felix's rules are there before the second tunnel comes up; no IPv6
    // on the tunnels (their link-local chatter would be VXLAN to the
    // worker too).
    worker.exec_file(
        &["iptables-restore", "--noflush"],
        "*filter\n:cali-INPUT - [0:0]\n:cali-OUTPUT - [0:0]\n\
-A INPUT -m comment --comment \"cali:Cz_u1IQiXIMmKD4c\" -j cali-INPUT\n\
-A OUTPUT -m comment --comment \"cali:tVnHkvAo15HuiPy0\" -j cali-OUTPUT\n\
-A cali-INPUT -s 10.195.80.3/32 -p udp -m comment --comment \"cali:MYAij0dXtIVCOZ-i\" -m comment --comment \"Allow IPv4 VXLAN packets from whitelisted hosts\" -m multiport --dports 4789 -m addrtype --dst-type LOCAL -j ACCEPT\n\
-A cali-INPUT -p udp -m comment --comment \"cali:c3JpWekSTKWcdGH0\" -m comment --comment \"Drop IPv4 VXLAN packets from non-whitelisted hosts\" -m multiport --dports 4789 -m addrtype --dst-type LOCAL -j DROP\n\
-A cali-OUTPUT -d 10.195.80.3/32 -p udp -m comment --comment \"cali:gPT-T3DOftxv-f7s\" -m comment --comment \"Allow IPv4 VXLAN packets to other whitelisted hosts\" -m multiport --dports 4789 -m addrtype --src-type LOCAL -j ACCEPT\n\
COMMIT\n",
    )?;
    for n in [&worker, &vm] {
        n.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    }
    worker.ip(&["addr", "add", "10.195.80.2/24", "dev", "eth0"])?;
    vm.ip(&["addr", "add", "10.195.80.50/24", "dev", "eth0"])?;
    vxlan(
        &worker,
        "vxlan.calico",
        4096,
        "10.195.80.2",
        None,
        "10.195.81.1/32",
    )?;
    vxlan(
        &worker,
        "vxlan555000",
        555_000,
        "10.195.80.2",
        Some("10.195.80.50"),
        "10.195.90.1/24",
    )?;
    vxlan(
        &vm,
        "vxlan555000",
        555_000,
        "10.195.80.50",
        Some("10.195.80.2"),
        "10.195.90.7/24",
    )?;
    for (n, dev) in [
        (&worker, "eth0"),
        (&vm, "eth0"),
        (&worker, "vxlan555000"),
        (&vm, "vxlan555000"),
    ] {
        fast_arp(n, dev)?;
    }
    let srv = listen(&vm, "10.195.90.7:80", 15)?;
    let mut sc = simple(
        "blind_proto_trap_vxlan_dropped_by_firewall",
        "a worker with Calico VXLAN (VNI 4096) and a second VXLAN tunnel (VNI 555000, port 4789) to a pod VM; Calico's cali-INPUT drops VXLAN from non-Calico hosts",
        vec![worker, vm],
        "10.195.80.2:4789".into(),
        strings(&[
            "tcp-connect",
            "10.195.90.7:80",
            "--timeout-ms",
            &crate::scaled_arg(3000),
            "--count",
            "1",
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_PROTO {
            assert!(n.starts_with("blind_proto_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }
}
