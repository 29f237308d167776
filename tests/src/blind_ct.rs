//! Blind scenes of one class of cause: node state held in conntrack, not in
//! the rules. The rules on the node are right now, but an entry conntrack
//! made earlier (or conntrack's verdict on one packet) decides the
//! packet's fate: netfilter consults the nat table only for a flow's first
//! packet, and an entry keeps the translation (or the absence of one) it
//! was made with for as long as the flow keeps it alive. Each scene
//! rebuilds, in namespaces of its own, a failure reported in a public
//! thread, cited in its doc comment, written without knowledge of
//! tracer's rules: a UDP stream to a NodePort whose entry was made before
//! the Service existed (no NAT in it), a statsd flow whose entry still
//! DNATs to the address of a deleted endpoint that IPAM has since given to
//! another pod, and a TCP segment conntrack finds out of window
//! (INVALID), so it is not translated back and the client's RST resets
//! the connection. One scene is an honest trap: it looks like the stale
//! UDP entry of kubernetes/kubernetes#66651, but the operator has already
//! flushed conntrack, and kube-proxy's own rule still names the deleted
//! endpoint.
//!
//! Stale state is made while the scene is built, before tracer starts:
//! the old rules are applied, the flow sends (from the fixed source port
//! it keeps), then the rules are swapped to the new state with `nft`; the
//! entry stays, and the scene checks it in the node's
//! /proc/net/nf_conntrack. The traffic tracer sees is the same flow
//! again, within the UDP entry's 30 s timeout (scaled where tracer starts
//! slowly: `keep_udp_entries`). kube-proxy's rules are
//! written as its nftables mode writes them (pkg/proxy/nftables/
//! proxier.go; the chains' hashes are its hashAndTruncate of their
//! names).
//!
//! Address ranges: 10.170 to 10.173 (the Service CIDR of each is
//! 10.B.96.0/24). `scenarios::build` falls back (through
//! `blind_scenes::build`, `blind_l2::build`, `blind_tunnel::build`,
//! `blind_sysctl::build` and `blind_sock::build`) to [`build`], which
//! falls back to [`crate::blind_bpf::build`].

use std::fmt::Write as _;

use anyhow::Result;

use crate::{
    blind_scenes::fast_arp,
    netns::{Netns, unique_prefix, veth},
    scenarios::{Scenario, ns, serve, serve_with, simple, strings},
    tracer::netprobe_bin,
};

pub const BLIND_CT: &[&str] = &[
    "blind_ct_nodeport_udp_before_service",
    "blind_ct_udp_stale_dnat_ip_reused",
    "blind_ct_tcp_invalid_reset",
    "blind_ct_trap_rule_stale_endpoint",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_ct_nodeport_udp_before_service" => nodeport_udp_before_service(),
        "blind_ct_udp_stale_dnat_ip_reused" => udp_stale_dnat_ip_reused(),
        "blind_ct_tcp_invalid_reset" => tcp_invalid_reset(),
        "blind_ct_trap_rule_stale_endpoint" => trap_rule_stale_endpoint(),
        _ => return crate::blind_bpf::build(name),
    })
}

/// One Service port as kube-proxy's nftables mode writes it.
struct Svc<'a> {
    /// `namespace/name/protocol/port-name`, and kube-proxy's hash of it
    /// (the first 8 base32 characters of its SHA-256), the prefix of its
    /// chains' names.
    name: &'a str,
    hash: &'a str,
    proto: &'a str,
    cluster_ip: &'a str,
    port: u16,
    node_port: Option<u16>,
    /// Endpoints: address, port, and the hash of the endpoint chain's name
    /// (`NAME__ADDRESS/PORT`).
    endpoints: &'a [(&'a str, u16, &'a str)],
}

/// kube-proxy's table `ip kube-proxy` (nftables mode) for `svcs`, Service
/// CIDR 10.B.96.0/24: ClusterIPs and NodePorts DNATed in prerouting (pods
/// and outside) and output (the node), NodePort traffic masqueraded, new
/// connections to a ClusterIP port it does not serve rejected. Written
/// whole: `nft -f` of it after [`DELETE_TABLE`] replaces the table in one
/// transaction, as a sync of kube-proxy rewrites its chains.
fn kube_proxy_table(b: u8, svcs: &[Svc]) -> String {
    let mut cluster_ips = vec![];
    let mut service_ips = vec![];
    let mut node_ports = vec![];
    let mut chains = String::new();
    for s in svcs {
        let svc_chain = format!("service-{}-{}", s.hash, s.name);
        cluster_ips.push(s.cluster_ip.to_string());
        service_ips.push(format!(
            "{} . {} . {} : goto {svc_chain}",
            s.cluster_ip, s.proto, s.port
        ));
        let picks: Vec<String> = s
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, (ip, port, h))| format!("{i} : goto endpoint-{h}-{}__{ip}/{port}", s.name))
            .collect();
        let _ = write!(
            chains,
            "\tchain {svc_chain} {{\n\t\tnumgen random mod {} vmap {{ {} }}\n\t}}\n",
            s.endpoints.len(),
            picks.join(", ")
        );
        if let Some(np) = s.node_port {
            let ext = format!("external-{}-{}", s.hash, s.name);
            node_ports.push(format!("{} . {np} : goto {ext}", s.proto));
            let _ = write!(
                chains,
                "\tchain {ext} {{\n\t\tjump mark-for-masquerade\n\t\tgoto {svc_chain}\n\t}}\n"
            );
        }
        for (ip, port, h) in s.endpoints {
            let _ = write!(
                chains,
                "\tchain endpoint-{h}-{}__{ip}/{port} {{\n\t\tip saddr {ip} jump mark-for-masquerade\n\t\tmeta l4proto {} dnat to {ip}:{port}\n\t}}\n",
                s.name, s.proto
            );
        }
    }
    let elements = |v: &[String]| {
        if v.is_empty() {
            String::new()
        } else {
            format!("\t\telements = {{ {} }}\n", v.join(", "))
        }
    };
    format!(
        r#"table ip kube-proxy {{
	comment "rules for kube-proxy"
	set cluster-ips {{
		type ipv4_addr
		comment "Active ClusterIPs"
{}	}}
	map service-ips {{
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
{}	}}
	map service-nodeports {{
		type inet_proto . inet_service : verdict
		comment "NodePort traffic"
{}	}}
	chain filter-forward {{
		type filter hook forward priority -110; policy accept;
		ct state new jump cluster-ips-check
	}}
	chain cluster-ips-check {{
		ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
		ip daddr 10.{b}.96.0/24 drop comment "Drop traffic to unallocated ClusterIPs"
	}}
	chain nat-prerouting {{
		type nat hook prerouting priority -100; policy accept;
		jump services
	}}
	chain nat-output {{
		type nat hook output priority -100; policy accept;
		jump services
	}}
	chain nat-postrouting {{
		type nat hook postrouting priority 100; policy accept;
		jump masquerading
	}}
	chain mark-for-masquerade {{
		meta mark set meta mark | 0x00004000
	}}
	chain masquerading {{
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}}
	chain services {{
		ip daddr . meta l4proto . th dport vmap @service-ips
		fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports
	}}
{chains}}}
"#,
        elements(&cluster_ips),
        elements(&service_ips),
        elements(&node_ports),
    )
}

/// Prepended to a table to replace it in the same transaction.
const DELETE_TABLE: &str = "add table ip kube-proxy\ndelete table ip kube-proxy\n";

/// kube-proxy syncs its rules on the node: the table for `svcs` replaces
/// the one there.
fn sync_kube_proxy(node: &Netns, b: u8, svcs: &[Svc]) -> Result<()> {
    node.exec_file(
        &["nft", "-f"],
        &format!("{DELETE_TABLE}{}", kube_proxy_table(b, svcs)),
    )?;
    Ok(())
}

/// Pod `pod` on a veth of its own, `dev` on `node`: the node's side
/// 10.B.S.1/24, the pod's eth0 10.B.S.2/24, its default route via the
/// node.
fn pod_on(node: &Netns, pod: &Netns, dev: &str, b: u8, s: u8) -> Result<()> {
    veth(pod, "eth0", node, dev)?;
    node.ip(&["addr", "add", &format!("10.{b}.{s}.1/24"), "dev", dev])?;
    pod.ip(&["addr", "add", &format!("10.{b}.{s}.2/24"), "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", &format!("10.{b}.{s}.1")])?;
    fast_arp(pod, "eth0")?;
    fast_arp(node, dev)?;
    Ok(())
}

/// A sender that never pauses keeps its UDP entry alive; the scenes send
/// once before tracer starts and once after. Where tracer starts slowly
/// (`TRACER_TIME_SCALE` above 1: the emulated VMs) the node's UDP timeout
/// (30 s) is scaled with the waits, so the entry outlives the start.
fn keep_udp_entries(node: &Netns) -> Result<()> {
    let scale = crate::time_scale();
    if scale > 1.0 {
        let secs = (30.0 * scale).ceil().to_string();
        node.sysctl("net.netfilter.nf_conntrack_udp_timeout", &secs)?;
    }
    Ok(())
}

/// Run netprobe with `args` in `n` while the scene is built (before
/// tracer starts); what it printed.
fn probe(n: &Netns, args: &[String]) -> String {
    let bin = netprobe_bin();
    let mut v: Vec<&str> = vec![bin.to_str().unwrap()];
    v.extend(args.iter().map(String::as_str));
    String::from_utf8_lossy(&n.exec_status(&v).stdout)
        .trim()
        .to_string()
}

/// The node's conntrack table: its namespace's /proc/net/nf_conntrack.
fn conntrack_table(node: &Netns) -> Result<String> {
    let out = node.exec(&["cat", "/proc/net/nf_conntrack"])?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The entries of `table` whose text has every one of `parts`.
fn entries<'a>(table: &'a str, parts: &[&str]) -> Vec<&'a str> {
    table
        .lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .collect()
}

/// One datagram from `from` (a fixed source port) to `to`, waiting
/// `wait_ms` (scaled) for an answer.
fn udp_from(to: &str, from: &str, wait_ms: u64) -> Vec<String> {
    strings(&[
        "udp-send",
        to,
        "--bind",
        from,
        "--timeout-ms",
        &crate::scaled_arg(wait_ms),
    ])
}

/// kubernetes/kubernetes#31983 ("Incoming UDP packets not reach newly
/// deployed services"): a router sends a long-lived stream of UDP to a
/// NodePort; the stream started before the Service existed, "therefore
/// conntrack entry already created BEFORE our service is created
/// (iptable rules added), the iptable rule didn't take effect", and
/// since the stream never pauses the entry never times out; `conntrack
/// -D` or stopping the stream for a while fixed it. The same for a UDP
/// hostPort whose pod was not up yet (projectcalico/felix#1880: "Any UDP
/// traffic to the host IP/port tuple which was received by the host
/// before the pod is launched creates a session. So long as the same
/// source IP/port tuple sends UDP traffic regularly (< every 30 seconds)
/// those packets will be lost indefinitely"), and for a NodePort whose
/// only pod restarted (kubernetes/kubernetes#102618). Here a router
/// (10.170.0.2) sends syslog over UDP from port 41514 to the node's
/// NodePort 10.170.0.1:30514. The first datagram came before the Service
/// `default/syslog` existed: the node had no rule for 30514 and nothing
/// listening, answered port unreachable, and conntrack kept the entry
/// `10.170.0.2:41514 -> 10.170.0.1:30514 [UNREPLIED]` with no NAT. Then
/// kube-proxy wrote the Service (NodePort 30514 DNATed to the syslog pod
/// 10.170.1.2:5514, which is up and answers). The router sends again from
/// the same port. The operator follows 10.170.0.1:30514. True story: the
/// node's conntrack entry for 10.170.0.2:41514 -> 10.170.0.1:30514 was
/// made before the NodePort rule existed and has no NAT in it; later
/// packets of the flow match it, so the nat table (kube-proxy's DNAT to
/// 10.170.1.2:5514) is never consulted for them, and they are delivered
/// to the node itself, where nothing listens on UDP 30514: port
/// unreachable. The rules are right; delete the entry (`conntrack -D -p
/// udp --orig-port-dst 30514`), or let the sender pause for the UDP
/// timeout (30 s).
fn nodeport_udp_before_service() -> Result<Scenario> {
    let b = 170;
    let p = unique_prefix();
    let (router, node, pod) = (ns(&p, "router")?, ns(&p, "node")?, ns(&p, "syslog")?);
    veth(&router, "eth0", &node, "eth0")?;
    router.ip(&["addr", "add", "10.170.0.2/24", "dev", "eth0"])?;
    node.ip(&["addr", "add", "10.170.0.1/24", "dev", "eth0"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    pod_on(&node, &pod, "lxc1", b, 1)?;
    keep_udp_entries(&node)?;
    let syslog = Svc {
        name: "default/syslog/udp/syslog",
        hash: "EW3BS3M4",
        proto: "udp",
        cluster_ip: "10.170.96.14",
        port: 514,
        node_port: Some(30514),
        endpoints: &[("10.170.1.2", 5514, "BMTFV4A5")],
    };
    // Before the Service: kube-proxy's table has nothing for 30514.
    sync_kube_proxy(&node, b, &[])?;
    let target = "10.170.0.1:30514";
    let send = udp_from(target, "10.170.0.2:41514", 1000);
    let first = probe(&router, &udp_from(target, "10.170.0.2:41514", 300));
    anyhow::ensure!(
        first.starts_with("no reply"),
        "the first datagram was answered: {first:?}"
    );
    // The pod comes up and kube-proxy writes the Service.
    let srv = serve(&pod, "udp-echo", "10.170.1.2:5514", 15)?;
    sync_kube_proxy(&node, b, &[syslog])?;
    let table = conntrack_table(&node)?;
    let stale = entries(
        &table,
        &[
            "src=10.170.0.2 dst=10.170.0.1 sport=41514 dport=30514",
            "src=10.170.0.1 dst=10.170.0.2 sport=30514 dport=41514",
        ],
    );
    anyhow::ensure!(
        stale.len() == 1,
        "no un-NATed entry for the stream in the node's conntrack:\n{table}"
    );
    let mut sc = simple(
        "blind_ct_nodeport_udp_before_service",
        "a UDP stream to a NodePort keeps the conntrack entry (no NAT) made before the Service existed",
        vec![router, node, pod],
        target.into(),
        send,
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubernetes#59368 ("kube-proxy/iptables, UDP conntrack data
/// not removed on endpoint changes"): "When deleting/recreating pods
/// backing a UDP service, traffic from external senders stops flowing",
/// for a statsd sender that "uses the same source-port for every packet
/// sent"; kubernetes/kubernetes#58336 ("Traffic to hostPorts
/// blackholed/misdirected when hostPort's pod IP changes"): the traffic
/// "is captured by the conntrack mapping referring to pod A's IP, and is
/// misdirected there"; and kubernetes/kubernetes PR #141371 ("kube-proxy:
/// clean stale conntrack for deleted UDP services"): one-way UDP flows
/// keep "being DNATed to the old endpoint IP, which may already have
/// been reassigned". Here a node with a client pod (10.171.10.2) whose
/// statsd client sends from port 48125 to the Service `default/statsd`
/// (ClusterIP 10.171.96.25:8125, UDP), and the statsd pods. The first
/// exchange went to statsd-a (10.171.11.2:8125, answered). Then a
/// rollout: statsd-a was deleted, kube-proxy moved the endpoint to
/// statsd-b (10.171.12.2:8125, up and answering), and IPAM gave
/// statsd-a's address 10.171.11.2 to a new pod, `web`, which serves TCP
/// 8080 only. The client sends again from the same port. The operator
/// follows 10.171.96.25:8125. True story: the node's conntrack entry for
/// 10.171.10.2:48125 -> 10.171.96.25:8125, made before the rollout,
/// still DNATs the flow to 10.171.11.2:8125; kube-proxy's rule says
/// 10.171.12.2 but is never consulted for this flow. 10.171.11.2 is now
/// the web pod, where nothing listens on UDP 8125: port unreachable (the
/// statsd client never hears of it). Delete the entry (`conntrack -D -p
/// udp --orig-dst 10.171.96.25`); kube-proxy's UDP conntrack cleanup
/// missed it.
fn udp_stale_dnat_ip_reused() -> Result<Scenario> {
    let b = 171;
    let p = unique_prefix();
    let node = ns(&p, "node")?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let (client, statsd_a, statsd_b) = (ns(&p, "client")?, ns(&p, "statsda")?, ns(&p, "statsdb")?);
    pod_on(&node, &client, "lxc10", b, 10)?;
    pod_on(&node, &statsd_a, "lxc11", b, 11)?;
    keep_udp_entries(&node)?;
    pod_on(&node, &statsd_b, "lxc12", b, 12)?;
    let svc = |ep: &'static [(&'static str, u16, &'static str)]| Svc {
        name: "default/statsd/udp/statsd",
        hash: "5XGTPGZ2",
        proto: "udp",
        cluster_ip: "10.171.96.25",
        port: 8125,
        node_port: None,
        endpoints: ep,
    };
    sync_kube_proxy(&node, b, &[svc(&[("10.171.11.2", 8125, "Q4EBKO5X")])])?;
    let target = "10.171.96.25:8125";
    let send = udp_from(target, "10.171.10.2:48125", 1000);
    let srv_a = serve(&statsd_a, "udp-echo", "10.171.11.2:8125", 15)?;
    let first = probe(&client, &send);
    anyhow::ensure!(
        first.starts_with("reply"),
        "the first exchange was not answered: {first:?}"
    );
    // The rollout: statsd-a goes (its namespace and veth with it),
    // kube-proxy moves the endpoint to statsd-b, and the web pod gets
    // statsd-a's address.
    let srv_b = serve(&statsd_b, "udp-echo", "10.171.12.2:8125", 15)?;
    drop(srv_a);
    drop(statsd_a);
    sync_kube_proxy(&node, b, &[svc(&[("10.171.12.2", 8125, "FFLWR66Q")])])?;
    let web = ns(&p, "web")?;
    pod_on(&node, &web, "lxc13", b, 11)?;
    let srv_web = serve(&web, "tcp-listen", "10.171.11.2:8080", 15)?;
    let table = conntrack_table(&node)?;
    let stale = entries(
        &table,
        &[
            "src=10.171.10.2 dst=10.171.96.25 sport=48125 dport=8125",
            "src=10.171.11.2 dst=10.171.10.2 sport=8125 dport=48125",
        ],
    );
    anyhow::ensure!(
        stale.len() == 1,
        "no entry DNATing the flow to 10.171.11.2 in the node's conntrack:\n{table}"
    );
    let mut sc = simple(
        "blind_ct_udp_stale_dnat_ip_reused",
        "a statsd flow's conntrack entry still DNATs to a deleted endpoint whose IP another pod now has",
        vec![client, node, statsd_b, web],
        target.into(),
        send,
    );
    sc.servers.extend([srv_b, srv_web]);
    Ok(sc)
}

/// kubernetes/kubernetes#74839 ("\"Connection reset by peer\" due to
/// invalid conntrack packets"): "When packets with sequence number
/// out-of-window arrived k8s node, conntrack marked them as INVALID.
/// kube-proxy will ignore them, without rewriting DNAT. The packet goes
/// back the the original pod, who doesn't recognize the packet because
/// of the wrong source ip, end up RSTing the connection" (the Kubernetes
/// blog's "kube-proxy Subtleties: Debugging an Intermittent Connection
/// Reset", 2019-03-29). kube-proxy's iptables mode has dropped INVALID
/// packets since (PR #74840); its nftables mode does not (PR #122663
/// removed the rule there: set net.netfilter.nf_conntrack_tcp_be_liberal
/// instead; aojea on #117924, after nftables test jobs kept "hitting the
/// conntrack bug", proposed to default kube-proxy's flag for it, PR
/// #120354); kubernetes/kubernetes#119887 (resets with large payloads,
/// gone with `nf_conntrack_tcp_be_liberal = 1`). Since Florian
/// Westphal's "netfilter: conntrack: ignore overly delayed tcp packets"
/// (2022; the kernel 6.1 aojea expected the bug to go with) conntrack
/// lets a retransmission of data already acknowledged pass (ignored, not
/// INVALID), but a segment beyond the receiver's window is still INVALID
/// ("SEQ is over upper bound"). Here a node whose kube-proxy runs in nftables mode
/// (no INVALID drop) with nf_conntrack_tcp_be_liberal = 0 (the kernel's
/// default), a client pod (10.172.10.2) and the api pod (10.172.11.2,
/// listening on 8080) behind the Service `default/api` (ClusterIP
/// 10.172.96.80:80). The client connects once to 10.172.96.80:80 and on
/// that connection sends a line and reads its echo twice, 300 ms apart.
/// After its first echo the api pod sends one more segment of the
/// connection, acknowledging what it received but with a sequence number
/// 1 MB beyond what it has sent, far past the client's window (netprobe
/// writes it with a raw socket). The operator follows 10.172.96.80:80.
/// True story: conntrack on the node found that segment out of window
/// and marked it INVALID, so it was not translated back: it reached the
/// client from 10.172.11.2:8080, not from 10.172.96.80:80; the client's
/// kernel has no socket for that and answered RST to 10.172.11.2:8080
/// (also INVALID on the node, and forwarded as it was), which reset the
/// api pod's end of the connection; the client's second line then met
/// an RST ("Connection reset by peer"). The rules are right; set
/// net.netfilter.nf_conntrack_tcp_be_liberal = 1 on the node (or drop
/// `ct state invalid` in forward, as kube-proxy's iptables mode does).
fn tcp_invalid_reset() -> Result<Scenario> {
    let b = 172;
    let p = unique_prefix();
    let node = ns(&p, "node")?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    node.sysctl("net.netfilter.nf_conntrack_tcp_be_liberal", "0")?;
    let (client, api) = (ns(&p, "client")?, ns(&p, "api")?);
    pod_on(&node, &client, "lxc10", b, 10)?;
    pod_on(&node, &api, "lxc11", b, 11)?;
    sync_kube_proxy(
        &node,
        b,
        &[Svc {
            name: "default/api/tcp/http",
            hash: "FKIP43JP",
            proto: "tcp",
            cluster_ip: "10.172.96.80",
            port: 80,
            node_port: None,
            endpoints: &[("10.172.11.2", 8080, "L2VQK3OX")],
        }],
    )?;
    let srv = serve_with(
        &api,
        "tcp-listen",
        "10.172.11.2:8080",
        15,
        &["--out-of-window"],
    )?;
    let target = "10.172.96.80:80";
    let mut sc = simple(
        "blind_ct_tcp_invalid_reset",
        "conntrack marks a backend's out-of-window segment INVALID: it is not un-DNATed and the client's RST resets the connection",
        vec![client, node, api],
        target.into(),
        strings(&[
            "tcp-connect",
            target,
            "--timeout-ms",
            &crate::scaled_arg(1000),
            "--rounds",
            "2",
            "--interval-ms",
            &crate::scaled_arg(300),
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// An honest trap. kubernetes/kubernetes#47589 ("kube-proxy losing
/// sync"): "Sometimes kube-proxy appears to stop syncing iptables rules
/// correctly. In particular I've seen this when removing an endpoint from
/// a service. Restarting kube-proxy causes it to correctly sync"; it
/// looks like kubernetes/kubernetes#125467 ("Conntrack tables having
/// stale entries for UDP connection": after CoreDNS pods restart,
/// resolvers that keep one source port, envoy's and nginx's, fail until
/// the entry is deleted) and #66651. Here a node with a client pod
/// (10.173.10.2, a resolver that asks from port 45353) and the CoreDNS
/// pods on the node's bridge cni0 (10.173.1.0/24); kube-dns is
/// 10.173.96.10:53. The resolver's first question was answered by
/// coredns-a (10.173.1.3). coredns-a was then deleted and coredns-b
/// (10.173.1.4) is up and answering, but kube-proxy on this node lost
/// sync: its table still sends kube-dns to 10.173.1.3. The operator,
/// knowing #66651, deleted the node's conntrack entries (`conntrack -F`)
/// and the resolver asks again from the same port. The operator follows
/// 10.173.96.10:53. It looks like a stale UDP conntrack entry (same
/// source port, the endpoint just moved, the old pod's address gets the
/// query), but there is none: the question makes a new entry. True
/// story: kube-proxy's nft rule (the endpoint chain of
/// kube-system/kube-dns for 10.173.1.3:53, the only one its service
/// chain picks) DNATs the new flow to 10.173.1.3, which nobody has any
/// more: the node's ARP for it on cni0 fails and the query is dropped
/// (ICMP host unreachable). Fix kube-proxy (restart it so it resyncs to
/// 10.173.1.4); flushing conntrack again changes nothing.
fn trap_rule_stale_endpoint() -> Result<Scenario> {
    let b = 173;
    let p = unique_prefix();
    let node = ns(&p, "node")?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    let client = ns(&p, "client")?;
    pod_on(&node, &client, "lxc10", b, 10)?;
    node.ip(&["link", "add", "cni0", "type", "bridge"])?;
    node.ip(&["link", "set", "cni0", "up"])?;
    node.ip(&["addr", "add", "10.173.1.1/24", "dev", "cni0"])?;
    fast_arp(&node, "cni0")?;
    let (dns_a, dns_b) = (ns(&p, "corednsa")?, ns(&p, "corednsb")?);
    for (pod, port, addr) in [(&dns_a, "vetha", "1.3"), (&dns_b, "vethb", "1.4")] {
        veth(pod, "eth0", &node, port)?;
        node.ip(&["link", "set", port, "master", "cni0"])?;
        pod.ip(&["addr", "add", &format!("10.{b}.{addr}/24"), "dev", "eth0"])?;
        pod.ip(&["route", "add", "default", "via", "10.173.1.1"])?;
    }
    sync_kube_proxy(
        &node,
        b,
        &[Svc {
            name: "kube-system/kube-dns/udp/dns",
            hash: "FY5PMXPG",
            proto: "udp",
            cluster_ip: "10.173.96.10",
            port: 53,
            node_port: None,
            endpoints: &[("10.173.1.3", 53, "DO63X62H")],
        }],
    )?;
    let target = "10.173.96.10:53";
    let ask = |wait_ms: u64| {
        strings(&[
            "dns-query",
            target,
            "kubernetes.default.svc.cluster.local",
            "--bind",
            "10.173.10.2:45353",
            "--timeout-ms",
            &crate::scaled_arg(wait_ms),
        ])
    };
    let srv_a = serve(&dns_a, "dns-serve", "10.173.1.3:53", 15)?;
    let first = probe(&client, &ask(1000));
    anyhow::ensure!(
        first.contains("NoError"),
        "the first question was not answered: {first:?}"
    );
    // coredns-a is deleted, coredns-b serves; kube-proxy does not sync.
    let srv_b = serve(&dns_b, "dns-serve", "10.173.1.4:53", 15)?;
    drop(srv_a);
    drop(dns_a);
    node.ip(&["neigh", "flush", "dev", "cni0"])?;
    // The operator's `conntrack -F` on the node.
    let flushed = probe(&node, &strings(&["conntrack-flush"]));
    anyhow::ensure!(
        flushed.starts_with("flushed"),
        "conntrack flush: {flushed:?}"
    );
    let table = conntrack_table(&node)?;
    anyhow::ensure!(
        entries(&table, &["sport=45353"]).is_empty(),
        "the resolver's entry is still in the node's conntrack:\n{table}"
    );
    let mut sc = simple(
        "blind_ct_trap_rule_stale_endpoint",
        "conntrack flushed, yet DNS to kube-dns still goes to the deleted CoreDNS pod: kube-proxy's rule still names it",
        vec![client, node, dns_b],
        target.into(),
        ask(1000),
    );
    sc.servers.push(srv_b);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_CT {
            assert!(n.starts_with("blind_ct_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }

    #[test]
    fn the_table_dispatches_to_the_endpoint_chain() {
        let t = kube_proxy_table(
            171,
            &[Svc {
                name: "default/statsd/udp/statsd",
                hash: "5XGTPGZ2",
                proto: "udp",
                cluster_ip: "10.171.96.25",
                port: 8125,
                node_port: Some(30125),
                endpoints: &[("10.171.12.2", 8125, "FFLWR66Q")],
            }],
        );
        assert!(t.contains(
            "10.171.96.25 . udp . 8125 : goto service-5XGTPGZ2-default/statsd/udp/statsd"
        ));
        assert!(t.contains("udp . 30125 : goto external-5XGTPGZ2-default/statsd/udp/statsd"));
        assert!(
            t.contains("0 : goto endpoint-FFLWR66Q-default/statsd/udp/statsd__10.171.12.2/8125")
        );
        assert!(t.contains("meta l4proto udp dnat to 10.171.12.2:8125"));
        assert!(!kube_proxy_table(171, &[]).contains("elements"));
    }
}
