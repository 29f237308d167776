//! Topologies of the foundation tests and the demo, each in namespaces it
//! creates, with its own address range (so tests may run in parallel: the
//! tracer follows every namespace) and bounded traffic.

use anyhow::Result;

use crate::{
    netns::{Child, Netns, unique_prefix, veth},
    tracer::netprobe_bin,
};

/// A built scenario: namespaces (removed on drop), what to follow, extra
/// tracer arguments, and how to send its traffic.
pub struct Scenario {
    pub name: &'static str,
    pub description: &'static str,
    pub nss: Vec<Netns>,
    pub target: String,
    pub args: Vec<String>,
    /// Background servers, killed on drop (before the namespaces go).
    pub servers: Vec<Child>,
    /// A tc redirect program of the scenario's own (incident 3).
    pub redirect: Option<crate::redirect::Redirect>,
    /// Dropping programs of the scenario's own (dataplane_scenes.rs).
    pub droppers: Vec<crate::bpfdrop::Dropper>,
    /// Sysctls of the initial namespace the scene changed, restored on
    /// drop (after the servers go).
    pub host_sysctls: Vec<HostSysctl>,
    /// Directories of the servers' own files (dnsmasq's pid file and
    /// log), removed on drop (after the servers go).
    pub scratch: Vec<ScratchDir>,
    /// Cgroups of the scene's own, with the socket programs attached to
    /// them (blind_sock.rs), removed on drop (after the servers go).
    pub cgroups: Vec<crate::blind_sock::Cgroup>,
    /// The cgroup the client's own traffic runs in (one of `cgroups`).
    pub(crate) client_cgroup: Option<std::path::PathBuf>,
    pub(crate) client: usize,
    pub(crate) traffic: Vec<String>,
    /// Traffic sent after the client's, from other namespaces (index in
    /// `nss`, netprobe arguments), in turn.
    pub(crate) more_traffic: Vec<(usize, Vec<String>)>,
}

impl Scenario {
    pub fn ns(&self, role: &str) -> &Netns {
        self.nss
            .iter()
            .find(|n| n.name.ends_with(&format!("-{role}")))
            .unwrap_or_else(|| panic!("no namespace {role}"))
    }

    /// Run the scenario's bounded traffic from its client namespace (then
    /// from the others that send some); returns what the clients saw.
    pub fn traffic(&self) -> Result<String> {
        let probe = netprobe_bin();
        let mut seen = String::new();
        for (i, (ns, traffic)) in std::iter::once((self.client, &self.traffic))
            .chain(self.more_traffic.iter().map(|(n, t)| (*n, t)))
            .enumerate()
        {
            let mut args: Vec<&str> = vec![probe.to_str().unwrap()];
            args.extend(traffic.iter().map(String::as_str));
            let out = match &self.client_cgroup {
                Some(cg) if i == 0 => crate::blind_sock::exec_in(cg, &self.nss[ns], &args),
                _ => self.nss[ns].run_status(&args),
            };
            seen.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        Ok(seen)
    }

    pub fn arg_refs(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        // Programs first: detaching them needs their namespaces.
        self.droppers.clear();
        self.servers.clear();
        self.cgroups.clear();
        self.scratch.clear();
        self.host_sysctls.clear();
    }
}

/// A directory of a scene's own under the temporary directory, removed
/// (with what is in it) on drop.
pub struct ScratchDir(pub std::path::PathBuf);

impl ScratchDir {
    pub fn new(name: &str) -> Result<ScratchDir> {
        let dir = std::env::temp_dir().join(format!("tracer-{name}-{}", unique_prefix()));
        std::fs::create_dir_all(&dir)?;
        Ok(ScratchDir(dir))
    }

    /// The path of `name` in it, as an argument.
    pub fn at(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A sysctl of the initial namespace (this process's) set for a scene and
/// written back on drop: for the few that only the initial namespace may
/// write (net.netfilter.nf_conntrack_max).
pub struct HostSysctl {
    path: String,
    old: String,
}

impl HostSysctl {
    pub fn set(key: &str, val: &str) -> Result<HostSysctl> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let old = std::fs::read_to_string(&path)?.trim().to_string();
        std::fs::write(&path, val)?;
        Ok(HostSysctl { path, old })
    }
}

impl Drop for HostSysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.old) {
            eprintln!("could not restore {} to {}: {e}", self.path, self.old);
        }
    }
}

pub(crate) fn ns(prefix: &str, role: &str) -> Result<Netns> {
    Netns::new(format!("{prefix}-{role}"))
}

/// Owned copies of `args` (a scenario's traffic command line).
pub(crate) fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_string()).collect()
}

/// client c0 (10.B.1.2) — (10.B.1.1) r0 router r1 (10.B.2.1) — s0 (10.B.2.2) server
pub fn routed(b: u8) -> Result<Vec<Netns>> {
    let p = unique_prefix();
    let (c, r, s) = (ns(&p, "client")?, ns(&p, "router")?, ns(&p, "server")?);
    veth(&c, "c0", &r, "r0")?;
    veth(&r, "r1", &s, "s0")?;
    c.ip_batch(&[
        &["addr", "add", &format!("10.{b}.1.2/24"), "dev", "c0"],
        &["route", "add", "default", "via", &format!("10.{b}.1.1")],
    ])?;
    r.ip_batch(&[
        &["addr", "add", &format!("10.{b}.1.1/24"), "dev", "r0"],
        &["addr", "add", &format!("10.{b}.2.1/24"), "dev", "r1"],
    ])?;
    s.ip_batch(&[
        &["addr", "add", &format!("10.{b}.2.2/24"), "dev", "s0"],
        &["route", "add", "default", "via", &format!("10.{b}.2.1")],
    ])?;
    r.sysctl("net.ipv4.ip_forward", "1")?;
    Ok(vec![c, r, s])
}

/// IPv6 on `routed(b)`'s links: fd00:B:1::/64 client side, fd00:B:2::/64
/// server side, default routes through the router. Returns once no
/// address is tentative: until the link-local address of r1 has passed
/// DAD, ndisc_send_ns() (net/ipv6/ndisc.c) has no source address and
/// sends nothing, so the router's first neighbour solicitations for the
/// server were silently not sent and the client's connect timed out
/// (one run in four).
pub(crate) fn routed_v6(nss: &[Netns], b: u8) -> Result<()> {
    for (n, dev, addr) in [
        (0, "c0", format!("fd00:{b}:1::2/64")),
        (1, "r0", format!("fd00:{b}:1::1/64")),
        (1, "r1", format!("fd00:{b}:2::1/64")),
        (2, "s0", format!("fd00:{b}:2::2/64")),
    ] {
        nss[n].ip(&["addr", "add", &addr, "dev", dev, "nodad"])?;
    }
    nss[0].ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        &format!("fd00:{b}:1::1"),
    ])?;
    nss[2].ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        &format!("fd00:{b}:2::1"),
    ])?;
    let deadline = std::time::Instant::now() + crate::scaled_ms(10_000);
    for ns in nss {
        loop {
            let out = ns.ip(&["-6", "addr", "show", "tentative"])?;
            if out.stdout.is_empty() {
                break;
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!(
                    "IPv6 addresses in {} still tentative (DAD): {}",
                    ns.name,
                    String::from_utf8_lossy(&out.stdout)
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Ok(())
}

pub(crate) fn listen(s: &Netns, addr: &str, secs: u32) -> Result<Child> {
    serve(s, "tcp-listen", addr, secs)
}

/// A netprobe server (`tcp-listen`, `udp-echo`, `udp-hold`) on `addr` in
/// `s`, started before the tracer and the traffic, and killed with the
/// scenario. `secs` (scaled) is how long it must serve once tracer is up;
/// it lives that long after the longest start-up a test accepts
/// ([`crate::tracer::READY_TIMEOUT_MS`]), so a slow start (the VMs, where
/// `--debug-bpf`'s programs take over a minute to verify) never meets a
/// server that has already gone, and a server a killed test leaves behind
/// still ends by itself.
pub(crate) fn serve(s: &Netns, mode: &str, addr: &str, secs: u32) -> Result<Child> {
    serve_with(s, mode, addr, secs, &[])
}

/// [`serve`] with `extra` netprobe arguments after the mode's own (e.g.
/// `tcp-listen`'s `--out-of-window`).
pub(crate) fn serve_with(
    s: &Netns,
    mode: &str,
    addr: &str,
    secs: u32,
    extra: &[&str],
) -> Result<Child> {
    let probe = netprobe_bin();
    let start = crate::tracer::READY_TIMEOUT_MS.div_ceil(1000) as f64;
    let secs = ((f64::from(secs) + start) * crate::time_scale())
        .ceil()
        .to_string();
    let mut args = vec![probe.to_str().unwrap(), mode, addr, "--for", &secs];
    args.extend_from_slice(extra);
    let child = s.spawn(&args)?;
    // Let the listener bind before traffic starts: watched in its own
    // socket tables, not slept for (a fixed 300 ms, scaled, was 1.5 s of
    // every server's start in the TCG guests).
    let port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    if let Some(port) = port {
        wait_bound(child.0.id(), !mode.starts_with("udp"), port);
    }
    Ok(child)
}

/// Wait (at most 5 s, scaled) until the process `pid` has `port` bound:
/// listening when `tcp` (a `dns-serve` binds UDP first, then TCP), else a
/// UDP socket. /proc/PID/net shows the tables of the process's own
/// namespace (`ip netns exec` execs the server in place). A server that
/// never binds is left to the traffic to report.
fn wait_bound(pid: u32, tcp: bool, port: u16) {
    let deadline = std::time::Instant::now() + crate::scaled_ms(5000);
    let tables: &[&str] = if tcp {
        &["tcp", "tcp6"]
    } else {
        &["udp", "udp6"]
    };
    while std::time::Instant::now() < deadline {
        let bound = tables.iter().any(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/net/{t}"))
                .is_ok_and(|s| bound_in(&s, port, tcp))
        });
        if bound {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Does a /proc/net/{tcp,udp}{,6} table have a socket on local `port`
/// (in state LISTEN, 0A, when `listening`)?
fn bound_in(table: &str, port: u16, listening: bool) -> bool {
    table.lines().skip(1).any(|l| {
        let mut f = l.split_whitespace();
        let local = f.nth(1).unwrap_or("");
        let state = f.nth(1).unwrap_or("");
        local
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
            == Some(port)
            && (!listening || state == "0A")
    })
}

pub(crate) fn tcp_connect(addr: &str) -> Vec<String> {
    let t = crate::scaled_arg(1000);
    strings(&["tcp-connect", addr, "--timeout-ms", &t, "--count", "1"])
}

pub const NAMES: &[&str] = &[
    "tcp_delivered",
    "tcp_closed_port",
    "netfilter_forward_drop",
    "netfilter_input_drop",
    "no_route",
    "forwarded",
    "incident5",
    "nat_output",
    "udp_delivered",
    "incident2",
    "incident4",
    "incident3",
    "incident3_mirred",
    "incident1",
    "forwarding_disabled",
    "forwarding_disabled_v6",
    "mtu_black_hole",
    "rp_filter_strict",
    "dns_bound_elsewhere",
    "udp_rcvbuf_full",
    "netfilter_forward_drop_counters",
    "kube_nft_no_endpoints",
    "kube_nft_unallocated",
    "kube_nft_source_ranges",
    "kube_nft_service_dnat",
    "conntrack_full",
    "conntrack_snat_clash",
    "nftrace_endpoint_drop",
    "nftrace_reply_drop",
    "listen_overflow",
    "policy_no_route",
    "policy_no_route_v6",
    "mtu_black_hole_v6",
    "conntrack_invalid_asymmetric",
    "netpol_kube_router",
    "dns_queries",
    "dns_one_query_dropped",
    "dns_service_dnat",
    "dns_truncated_tcp",
    "dns_node_local",
];

pub fn build(name: &str) -> Result<Scenario> {
    match name {
        "tcp_delivered" => tcp_delivered(),
        "netpol_kube_router" => netpol_kube_router(),
        "dns_queries" => dns_queries(),
        "dns_one_query_dropped" => dns_one_query_dropped(),
        "dns_service_dnat" => dns_service_dnat(),
        "dns_truncated_tcp" => dns_truncated_tcp(),
        "dns_node_local" => dns_node_local(),
        "tcp_closed_port" => tcp_closed_port(),
        "netfilter_forward_drop" => netfilter_forward_drop(),
        "netfilter_input_drop" => netfilter_input_drop(),
        "netfilter_forward_drop_counters" => netfilter_forward_drop_counters(),
        "kube_nft_no_endpoints" => kube_nft("kube_nft_no_endpoints", 245, "96.3"),
        "kube_nft_unallocated" => kube_nft("kube_nft_unallocated", 246, "96.99"),
        "kube_nft_source_ranges" => kube_nft("kube_nft_source_ranges", 243, "200.50"),
        "kube_nft_service_dnat" => {
            let mut sc = kube_nft("kube_nft_service_dnat", 244, "96.1")?;
            // The Service's endpoint.
            let server = listen(&sc.nss[2], "10.244.2.2:80", 15)?;
            sc.servers.push(server);
            Ok(sc)
        }
        "no_route" => no_route(),
        "forwarded" => forwarded(),
        "forwarding_disabled" => forwarding_disabled(),
        "forwarding_disabled_v6" => forwarding_disabled_v6(),
        "mtu_black_hole" => mtu_black_hole(),
        "mtu_black_hole_v6" => mtu_black_hole_v6(),
        "conntrack_invalid_asymmetric" => conntrack_invalid_asymmetric(),
        "rp_filter_strict" => rp_filter_strict(),
        "dns_bound_elsewhere" => dns_bound_elsewhere(),
        "udp_rcvbuf_full" => udp_rcvbuf_full(),
        "conntrack_full" => conntrack_full(),
        "conntrack_snat_clash" => conntrack_snat_clash(),
        "nftrace_endpoint_drop" => nftrace_endpoint_drop(),
        "nftrace_reply_drop" => nftrace_reply_drop(),
        "listen_overflow" => listen_overflow(),
        "policy_no_route" => policy_no_route(false),
        "policy_no_route_v6" => policy_no_route(true),
        "incident5" => incident5(),
        "nat_output" => nat_output(),
        "udp_delivered" => udp_delivered(),
        "incident2" => incident2(),
        "incident4" => incident4(),
        "incident3" => incident3(false),
        "incident3_mirred" => incident3(true),
        "incident1" => incident1(),
        "incident2_ipvs" => crate::ipvs::incident2_ipvs(),
        "incident5_ipvs" => crate::ipvs::incident5_ipvs(),
        "ipvs_nat" => crate::ipvs::ipvs_nat(),
        other => crate::blind_scenes::build(other)
            .or_else(|| crate::dataplane_scenes::build(other))
            .or_else(|| crate::overlays::build(other))
            .unwrap_or_else(|| {
                anyhow::bail!("unknown scenario {other}; one of: {}", NAMES.join(", "))
            }),
    }
}

pub(crate) fn simple(
    name: &'static str,
    description: &'static str,
    nss: Vec<Netns>,
    target: String,
    traffic: Vec<String>,
) -> Scenario {
    Scenario {
        name,
        description,
        nss,
        target,
        args: vec![],
        servers: vec![],
        redirect: None,
        droppers: vec![],
        host_sysctls: vec![],
        scratch: vec![],
        cgroups: vec![],
        client_cgroup: None,
        client: 0,
        traffic,
        more_traffic: vec![],
    }
}

pub fn tcp_delivered() -> Result<Scenario> {
    let nss = routed(211)?;
    let srv = listen(&nss[2], "10.211.2.2:8080", 15)?;
    let mut sc = simple(
        "tcp_delivered",
        "TCP to a listening port in another namespace, through a router",
        nss,
        "10.211.2.2:8080".into(),
        tcp_connect("10.211.2.2:8080"),
    );
    sc.servers.push(srv);
    Ok(sc)
}

pub fn tcp_closed_port() -> Result<Scenario> {
    let nss = routed(212)?;
    Ok(simple(
        "tcp_closed_port",
        "TCP to a port nothing listens on",
        nss,
        "10.212.2.2:8081".into(),
        tcp_connect("10.212.2.2:8081"),
    ))
}

pub fn netfilter_forward_drop() -> Result<Scenario> {
    let nss = routed(213)?;
    nss[1].exec(&[
        "iptables", "-w", "-A", "FORWARD", "-p", "tcp", "--dport", "8082", "-j", "DROP",
    ])?;
    Ok(simple(
        "netfilter_forward_drop",
        "an iptables DROP rule in the router's FORWARD chain",
        nss,
        "10.213.2.2:8082".into(),
        tcp_connect("10.213.2.2:8082"),
    ))
}

/// netfilter_forward_drop with `--no-nftrace`: the rule is named by its
/// counter moving.
pub fn netfilter_forward_drop_counters() -> Result<Scenario> {
    let nss = routed(240)?;
    nss[1].exec(&[
        "iptables", "-w", "-A", "FORWARD", "-p", "tcp", "--dport", "8082", "-j", "DROP",
    ])?;
    let mut sc = simple(
        "netfilter_forward_drop_counters",
        "an iptables DROP rule in the router's FORWARD chain, traced with --no-nftrace",
        nss,
        "10.240.2.2:8082".into(),
        tcp_connect("10.240.2.2:8082"),
    );
    sc.args = vec!["--no-nftrace".into()];
    Ok(sc)
}

/// kube-router's NetworkPolicy firewall in the router (the node), as
/// pkg/controllers/netpol writes it with iptables(-nft): traffic to the
/// pod `shop/web-0` (the server, 10.B.2.2) goes through its pod firewall
/// chain, whose only policy (`deny-all`, no ingress rules) marks nothing,
/// so the chain's last rule rejects it.
pub fn netpol_kube_router() -> Result<Scenario> {
    let b = 247;
    let nss = routed(b)?;
    let pod = format!("10.{b}.2.2");
    let rules = format!(
        r#"*filter
:KUBE-ROUTER-FORWARD - [0:0]
:KUBE-POD-FW-24CAQJ4LYSAY3PHB - [0:0]
:KUBE-NWPLCY-YHLEAEBS3CXTIVIH - [0:0]
-I FORWARD 1 -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD
-A KUBE-ROUTER-FORWARD -d {pod}/32 -m comment --comment "rule to jump traffic destined to POD name:web-0 namespace: shop to chain KUBE-POD-FW-24CAQJ4LYSAY3PHB" -j KUBE-POD-FW-24CAQJ4LYSAY3PHB
-A KUBE-POD-FW-24CAQJ4LYSAY3PHB -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "rule for stateful firewall for pod" -j ACCEPT
-A KUBE-POD-FW-24CAQJ4LYSAY3PHB -d {pod}/32 -m comment --comment "run through nw policy deny-all" -j KUBE-NWPLCY-YHLEAEBS3CXTIVIH
-A KUBE-POD-FW-24CAQJ4LYSAY3PHB -m comment --comment "rule to REJECT traffic destined for POD name:web-0 namespace: shop" -m mark ! --mark 0x10000/0x10000 -j REJECT --reject-with icmp-port-unreachable
-A KUBE-POD-FW-24CAQJ4LYSAY3PHB -j MARK --set-xmark 0x0/0x10000
COMMIT
"#
    );
    nss[1].exec_file(&["iptables-restore", "-w", "--noflush"], &rules)?;
    let srv = listen(&nss[2], &format!("{pod}:8080"), 10)?;
    let target = format!("{pod}:8080");
    let mut sc = simple(
        "netpol_kube_router",
        "a pod whose NetworkPolicy (kube-router, iptables) allows no ingress: its firewall chain rejects",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kube-proxy's nftables mode in the router (the node), as
/// pkg/proxy/nftables/proxier.go writes its table `ip kube-proxy`, for
/// three Services: `default/empty:http` (ClusterIP 10.B.96.3, no
/// endpoints), `default/web:http` (10.B.96.1, with an endpoint) and
/// `default/lb:http` (LoadBalancer IP 10.B.200.50, source ranges
/// 203.0.113.0/24); the Service CIDR is 10.B.96.0/24.
fn kube_proxy_nft_table(b: u8) -> String {
    format!(
        r#"table ip kube-proxy {{
	comment "rules for kube-proxy"
	set cluster-ips {{
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = {{ 10.{b}.96.1, 10.{b}.96.3 }}
	}}
	map no-endpoint-services {{
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "vmap to drop or reject packets to services with no endpoints"
		elements = {{ 10.{b}.96.3 . tcp . 80 comment "default/empty:http" : goto reject-chain }}
	}}
	map firewall-ips {{
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "destinations that are subject to LoadBalancerSourceRanges"
		elements = {{ 10.{b}.200.50 . tcp . 80 comment "default/lb:http" : goto firewall-4BQ3ZKGA-default/lb/tcp/http }}
	}}
	map service-ips {{
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = {{ 10.{b}.96.1 . tcp . 80 : goto service-ULMVA6XW-default/web/tcp/http }}
	}}
	chain filter-prerouting {{
		type filter hook prerouting priority -110; policy accept;
		ct state new jump firewall-check
	}}
	chain filter-forward {{
		type filter hook forward priority -110; policy accept;
		ct state new jump service-endpoints-check
		ct state new jump cluster-ips-check
	}}
	chain nat-prerouting {{
		type nat hook prerouting priority -100; policy accept;
		jump services
	}}
	chain firewall-check {{
		ip daddr . meta l4proto . th dport vmap @firewall-ips
	}}
	chain service-endpoints-check {{
		ip daddr . meta l4proto . th dport vmap @no-endpoint-services
	}}
	chain cluster-ips-check {{
		ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
		ip daddr 10.{b}.96.0/24 drop comment "Drop traffic to unallocated ClusterIPs"
	}}
	chain reject-chain {{
		comment "helper for @no-endpoint-services / @no-endpoint-nodeports"
		reject
	}}
	chain firewall-4BQ3ZKGA-default/lb/tcp/http {{
		comment "firewall rules for service default/lb:http"
		ip saddr != {{ 203.0.113.0/24 }} drop
	}}
	chain services {{
		ip daddr . meta l4proto . th dport vmap @service-ips
	}}
	chain service-ULMVA6XW-default/web/tcp/http {{
		numgen random mod 1 vmap {{ 0 : goto endpoint-5OJB2KTY-default/web/tcp/http__10.{b}.2.2/80 }}
	}}
	chain endpoint-5OJB2KTY-default/web/tcp/http__10.{b}.2.2/80 {{
		meta l4proto tcp dnat to 10.{b}.2.2:80
	}}
}}
"#
    )
}

/// A pod (client) to a Service address `10.B.VIP:80` through a node
/// (router) whose kube-proxy runs in nftables mode.
fn kube_nft(name: &'static str, b: u8, vip: &str) -> Result<Scenario> {
    let nss = routed(b)?;
    // The node routes the Service range on (a node's default route).
    nss[1].ip(&[
        "route",
        "add",
        &format!("10.{b}.96.0/24"),
        "via",
        &format!("10.{b}.2.2"),
    ])?;
    nss[1].exec_file(&["nft", "-f"], &kube_proxy_nft_table(b))?;
    let target = format!("10.{b}.{vip}:80");
    Ok(simple(
        name,
        "a Service address through a node whose kube-proxy runs in nftables mode",
        nss,
        target.clone(),
        tcp_connect(&target),
    ))
}

pub fn netfilter_input_drop() -> Result<Scenario> {
    let nss = routed(214)?;
    nss[2].exec(&[
        "iptables", "-w", "-A", "INPUT", "-p", "tcp", "--dport", "8083", "-j", "DROP",
    ])?;
    Ok(simple(
        "netfilter_input_drop",
        "an iptables DROP rule in the server's INPUT chain",
        nss,
        "10.214.2.2:8083".into(),
        tcp_connect("10.214.2.2:8083"),
    ))
}

pub fn no_route() -> Result<Scenario> {
    let nss = routed(215)?;
    Ok(simple(
        "no_route",
        "the router has no route to the destination",
        nss,
        "10.215.9.9:8080".into(),
        tcp_connect("10.215.9.9:8080"),
    ))
}

pub fn forwarded() -> Result<Scenario> {
    let nss = routed(216)?;
    let srv = listen(&nss[2], "10.216.2.2:8080", 15)?;
    let router = nss[1].name.clone();
    let mut sc = simple(
        "forwarded",
        "following only the router namespace: the flow is forwarded",
        nss,
        "10.216.2.2:8080".into(),
        tcp_connect("10.216.2.2:8080"),
    );
    sc.args = vec!["--netns".into(), router];
    sc.servers.push(srv);
    Ok(sc)
}

/// IP forwarding switched off on the router's client-side device (a node
/// whose sysctls were reset): the router drops what it should route.
pub fn forwarding_disabled() -> Result<Scenario> {
    let nss = routed(228)?;
    nss[1].sysctl("net.ipv4.conf.r0.forwarding", "0")?;
    Ok(simple(
        "forwarding_disabled",
        "IP forwarding is off on the router's client-side device",
        nss,
        "10.228.2.2:8080".into(),
        tcp_connect("10.228.2.2:8080"),
    ))
}

/// The same over IPv6: ip6_forward() reads net.ipv6.conf.all.forwarding.
pub fn forwarding_disabled_v6() -> Result<Scenario> {
    let nss = routed(236)?;
    routed_v6(&nss, 236)?;
    nss[1].sysctl("net.ipv6.conf.all.forwarding", "0")?;
    Ok(simple(
        "forwarding_disabled_v6",
        "IPv6 forwarding is off on the router (net.ipv6.conf.all.forwarding = 0)",
        nss,
        "[fd00:236:2::2]:8080".into(),
        tcp_connect("[fd00:236:2::2]:8080"),
    ))
}

/// A path-MTU black hole: the router's server-side link has MTU 1280, the
/// client's 1500, and the router's ICMP "fragmentation needed" is
/// dropped by its own firewall, so the client keeps sending full-size
/// segments. The handshake passes (small packets); the data does not.
pub fn mtu_black_hole() -> Result<Scenario> {
    let nss = routed(229)?;
    let srv = listen(&nss[2], "10.229.2.2:8080", 15)?;
    nss[1].ip(&["link", "set", "r1", "mtu", "1280"])?;
    nss[1].exec(&[
        "iptables",
        "-w",
        "-A",
        "OUTPUT",
        "-p",
        "icmp",
        "--icmp-type",
        "fragmentation-needed",
        "-j",
        "DROP",
    ])?;
    let mut sc = simple(
        "mtu_black_hole",
        "the router's next link has a smaller MTU and its ICMP frag-needed is firewalled",
        nss,
        "10.229.2.2:8080".into(),
        // 20 kB: more than one full-size segment; the kernel keeps
        // retransmitting after netprobe exits, until the scene goes.
        strings(&["tcp-source", "10.229.2.2:8080", "--bytes", "20000"]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// The same black hole over IPv6: the router's server-side link has the
/// IPv6 minimum MTU 1280, and its ICMPv6 "packet too big" is dropped by
/// its own firewall (routers never fragment IPv6).
pub fn mtu_black_hole_v6() -> Result<Scenario> {
    let nss = routed(241)?;
    routed_v6(&nss, 241)?;
    nss[1].sysctl("net.ipv6.conf.all.forwarding", "1")?;
    let srv = listen(&nss[2], "[fd00:241:2::2]:8080", 15)?;
    nss[1].ip(&["link", "set", "r1", "mtu", "1280"])?;
    nss[1].exec(&[
        "nft",
        "add table ip6 pmtu; add chain ip6 pmtu ptbout { type filter hook output priority 0; }; add rule ip6 pmtu ptbout icmpv6 type packet-too-big drop",
    ])?;
    let mut sc = simple(
        "mtu_black_hole_v6",
        "IPv6: the router's next link has a smaller MTU and its ICMPv6 packet-too-big is firewalled",
        nss,
        "[fd00:241:2::2]:8080".into(),
        ["tcp-source", "[fd00:241:2::2]:8080", "--bytes", "20000"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// Asymmetric routing through a stateful firewall: the client reaches the
/// server by a direct link (c1 - s1), the server answers by its default
/// route through the router, whose rule dropping conntrack-INVALID
/// packets (kube-proxy's KUBE-FORWARD has it) drops the SYN-ACK: conntrack there never
/// saw the SYN, so the reply is INVALID.
pub fn conntrack_invalid_asymmetric() -> Result<Scenario> {
    let nss = routed(242)?;
    veth(&nss[0], "c1", &nss[2], "s1")?;
    nss[0].ip(&["addr", "add", "10.242.3.1/30", "dev", "c1"])?;
    nss[2].ip(&["addr", "add", "10.242.3.2/30", "dev", "s1"])?;
    nss[0].ip(&[
        "route",
        "add",
        "10.242.2.2/32",
        "via",
        "10.242.3.2",
        "dev",
        "c1",
        "src",
        "10.242.1.2",
    ])?;
    // The server takes requests on s1 that it answers by s0.
    for dev in ["all", "s1"] {
        nss[2].sysctl(&format!("net.ipv4.conf.{dev}.rp_filter"), "0")?;
    }
    // kube-proxy's rule (KUBE-FORWARD), as iptables writes it.
    nss[1].exec(&[
        "iptables",
        "-w",
        "-A",
        "FORWARD",
        "-m",
        "conntrack",
        "--ctstate",
        "INVALID",
        "-j",
        "DROP",
    ])?;
    let srv = listen(&nss[2], "10.242.2.2:8080", 15)?;
    let mut sc = simple(
        "conntrack_invalid_asymmetric",
        "requests go by a direct link, replies through a router whose `ct state invalid drop` drops them",
        nss,
        "10.242.2.2:8080".into(),
        tcp_connect("10.242.2.2:8080"),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// Strict reverse-path filtering on the router's client side, and a
/// client that sends from an address the router routes back by its other
/// side (asymmetric routing): the router drops it.
pub fn rp_filter_strict() -> Result<Scenario> {
    let nss = routed(230)?;
    nss[1].sysctl("net.ipv4.conf.all.rp_filter", "0")?;
    nss[1].sysctl("net.ipv4.conf.r0.rp_filter", "1")?;
    nss[0].ip(&["addr", "add", "10.230.2.77/32", "dev", "c0"])?;
    // arp_process() checks the sender's route too, so the router would not
    // answer ARP from that source: a static entry for the gateway.
    let link = nss[1].ip(&["-br", "link", "show", "r0"])?;
    let mac = String::from_utf8_lossy(&link.stdout)
        .split_whitespace()
        .nth(2)
        .unwrap_or_default()
        .to_string();
    nss[0].ip(&["neigh", "add", "10.230.1.1", "lladdr", &mac, "dev", "c0"])?;
    Ok(simple(
        "rp_filter_strict",
        "strict rp_filter on the router; the client's source is routed back by the router's other side",
        nss,
        "10.230.2.2:53".into(),
        strings(&[
            "udp-spray",
            "10.230.2.2:53",
            "--src",
            "10.230.2.77",
            "--count",
            "2",
        ]),
    ))
}

/// A DNS server that listens on 127.0.0.1:53 only, queried on the
/// server's own address: NO_SOCKET, with the port bound elsewhere.
pub fn dns_bound_elsewhere() -> Result<Scenario> {
    let nss = routed(231)?;
    let srv = serve(&nss[2], "udp-echo", "127.0.0.1:53", 15)?;
    let mut sc = simple(
        "dns_bound_elsewhere",
        "a DNS server bound to 127.0.0.1:53 only, queried on the server's address",
        nss,
        "10.231.2.2:53".into(),
        strings(&["udp-send", "10.231.2.2:53", "--timeout-ms", "300"]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A UDP server that never reads (an overloaded DNS server) and a burst
/// of datagrams: its receive buffer fills and the kernel drops the rest.
pub fn udp_rcvbuf_full() -> Result<Scenario> {
    let nss = routed(235)?;
    let srv = serve(&nss[2], "udp-hold", "10.235.2.2:53", 15)?;
    let mut sc = simple(
        "udp_rcvbuf_full",
        "a UDP server that does not read, and a burst of 2000 datagrams",
        nss,
        "10.235.2.2:53".into(),
        strings(&["udp-flood", "10.235.2.2:53", "--count", "2000"]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A full conntrack table on the router: one established connection
/// through it (held open, so conntrack's garbage collector may not evict
/// it) and nf_conntrack_max lowered to the router's entry count; a new
/// connection then finds no room and netfilter drops its SYN. The limit
/// is one value for the node (only the initial namespace may write it):
/// it is written back when the scene goes, and no other namespace of
/// this machine's tests uses conntrack while the privileged-test lock is
/// held.
pub fn conntrack_full() -> Result<Scenario> {
    let nss = routed(237)?;
    // A stateful rule: conntrack tracks what the router forwards.
    nss[1].exec(&[
        "nft",
        "add table inet ctfull; add chain inet ctfull ctfwd { type filter hook forward priority 0; }; add rule inet ctfull ctfwd ct state established,related accept",
    ])?;
    let srv = serve(&nss[2], "tcp-backlog", "10.237.2.2:8080", 30)?;
    let hold = serve(&nss[0], "tcp-hold", "10.237.2.2:8080", 30)?;
    let count = nss[1].exec(&["cat", "/proc/sys/net/netfilter/nf_conntrack_count"])?;
    let count = String::from_utf8_lossy(&count.stdout).trim().to_string();
    anyhow::ensure!(
        count.parse::<u64>().is_ok_and(|c| c > 0),
        "no conntrack entry on the router ({count:?})"
    );
    let max = HostSysctl::set("net.netfilter.nf_conntrack_max", &count)?;
    let mut sc = simple(
        "conntrack_full",
        "the router's conntrack table is full (nf_conntrack_max lowered to its entry count): a new connection's SYN is dropped",
        nss,
        "10.237.2.2:8080".into(),
        tcp_connect("10.237.2.2:8080"),
    );
    sc.servers.extend([srv, hold]);
    sc.host_sysctls.push(max);
    Ok(sc)
}

/// A conntrack insertion failure: the router source-NATs UDP to one
/// address and port (a SNAT port range of one: exhausted after the first
/// flow), so a second flow to the same server gets the first one's reply
/// tuple; get_unique_tuple() keeps it (a range of one port leaves no
/// choice), and __nf_conntrack_confirm() finds the reply tuple taken:
/// nf_ct_resolve_clash() cannot merge two different connections, the
/// packet is dropped and insert_failed counts it. The first flow is
/// answered; the second is dropped.
pub fn conntrack_snat_clash() -> Result<Scenario> {
    let nss = routed(247)?;
    nss[1].exec(&[
        "nft",
        "add table ip snatclash; add chain ip snatclash post { type nat hook postrouting priority 100; }; add rule ip snatclash post oif r1 meta l4proto udp snat to 10.247.2.1:5000",
    ])?;
    let srv = serve(&nss[2], "udp-echo", "10.247.2.2:53", 15)?;
    let mut sc = simple(
        "conntrack_snat_clash",
        "the router source-NATs UDP to one port: the second flow to the server clashes with the first in conntrack and is dropped",
        nss,
        "10.247.2.2:53".into(),
        // Two flows, 200 ms apart: the first is confirmed before the
        // second comes.
        strings(&[
            "udp-spray",
            "10.247.2.2:53",
            "--src",
            "10.247.1.2",
            "--count",
            "2",
            "--pps",
            "5",
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A drop after DNAT, in the endpoint's own namespace: the router DNATs
/// the followed VIP 10.221.9.9:80 to 10.221.2.2:8080, and an nftables
/// rule in the server's namespace (a pod's own firewall) drops what comes
/// to 8080. The client's connect waits long enough for SYN retransmits:
/// tracer learns the endpoint from the first SYN's translation and traces
/// the next ones there too.
pub fn nftrace_endpoint_drop() -> Result<Scenario> {
    let nss = routed(221)?;
    nss[1].exec(&[
        "nft",
        "add table ip vipnat; add chain ip vipnat pre { type nat hook prerouting priority -100; }; add rule ip vipnat pre ip daddr 10.221.9.9 tcp dport 80 dnat to 10.221.2.2:8080",
    ])?;
    nss[2].exec(&[
        "nft",
        "add table inet podfw; add chain inet podfw input { type filter hook input priority 0; }; add rule inet podfw input tcp dport 8080 drop comment \"pod firewall\"",
    ])?;
    let srv = listen(&nss[2], "10.221.2.2:8080", 20)?;
    let t = crate::scaled_arg(3500);
    let mut sc = simple(
        "nftrace_endpoint_drop",
        "the router DNATs a VIP to a server whose own nftables rule drops the connection",
        nss,
        "10.221.9.9:80".into(),
        strings(&[
            "tcp-connect",
            "10.221.9.9:80",
            "--timeout-ms",
            &t,
            "--count",
            "1",
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A reply dropped by a rule: the router's forward chain drops what the
/// server sends from port 8080 (the SYN-ACKs), so the server answers and
/// the client never hears it.
pub fn nftrace_reply_drop() -> Result<Scenario> {
    let nss = routed(223)?;
    nss[1].exec(&[
        "nft",
        "add table inet fw; add chain inet fw replies { type filter hook forward priority 0; }; add rule inet fw replies ip saddr 10.223.2.2 tcp sport 8080 drop comment \"no replies\"",
    ])?;
    let srv = listen(&nss[2], "10.223.2.2:8080", 15)?;
    let mut sc = simple(
        "nftrace_reply_drop",
        "the router's forward chain drops the server's replies",
        nss,
        "10.223.2.2:8080".into(),
        tcp_connect("10.223.2.2:8080"),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A server stuck before accept() with a backlog of 0: one connection
/// (made before tracing, held open) fills its accept queue, and the
/// listener drops the next connection's SYNs (tcp_conn_request(),
/// LISTENOVERFLOWS / LISTENDROPS).
pub fn listen_overflow() -> Result<Scenario> {
    let nss = routed(238)?;
    let srv = serve(&nss[2], "tcp-backlog", "10.238.2.2:8080", 30)?;
    let hold = serve(&nss[0], "tcp-hold", "10.238.2.2:8080", 30)?;
    let mut sc = simple(
        "listen_overflow",
        "a server that never accepts, with a backlog of 0 and one connection queued: the next SYNs are dropped",
        nss,
        "10.238.2.2:8080".into(),
        tcp_connect("10.238.2.2:8080"),
    );
    sc.servers.extend([srv, hold]);
    Ok(sc)
}

/// A policy rule on the router sends the VIP's range to table 100, which
/// nothing filled (a CNI or a VPN that did not start), and main has no
/// route for it either: no route, after the rules that chose the tables.
/// `v6`: the same over IPv6.
pub fn policy_no_route(v6: bool) -> Result<Scenario> {
    let nss = routed(239)?;
    let (name, target) = if v6 {
        routed_v6(&nss, 239)?;
        nss[1].sysctl("net.ipv6.conf.all.forwarding", "1")?;
        nss[1].ip(&[
            "-6",
            "rule",
            "add",
            "to",
            "fd00:239:9::/64",
            "lookup",
            "100",
            "pref",
            "100",
        ])?;
        ("policy_no_route_v6", "[fd00:239:9::9]:8080")
    } else {
        nss[1].ip(&[
            "rule",
            "add",
            "to",
            "10.239.9.0/24",
            "lookup",
            "100",
            "pref",
            "100",
        ])?;
        ("policy_no_route", "10.239.9.9:8080")
    };
    Ok(simple(
        name,
        "a policy rule on the router sends the VIP to table 100, which is empty; main has no route for it",
        nss,
        target.into(),
        tcp_connect(target),
    ))
}

/// Incident 5: node2's address is bound on node1's kube-ipvs0 (a Service
/// externalIP equal to a node IP). This kernel has no dummy devices, so
/// kube-ipvs0 is one end of a veth pair kept inside node1.
pub fn incident5() -> Result<Scenario> {
    let p = unique_prefix();
    let (n1, n2) = (ns(&p, "node1")?, ns(&p, "node2")?);
    veth(&n1, "eth0", &n2, "eth0")?;
    n1.ip(&["addr", "add", "10.217.0.8/24", "dev", "eth0"])?;
    n2.ip(&["addr", "add", "10.217.0.9/24", "dev", "eth0"])?;
    n1.ip(&[
        "link",
        "add",
        "kube-ipvs0",
        "type",
        "veth",
        "peer",
        "name",
        "kipvs-peer",
    ])?;
    n1.ip(&["link", "set", "kube-ipvs0", "up"])?;
    n1.ip(&["link", "set", "kipvs-peer", "up"])?;
    n1.ip(&["addr", "add", "10.217.0.9/32", "dev", "kube-ipvs0"])?;
    Ok(simple(
        "incident5",
        "incident 5: a Service externalIP equal to node2's IP is bound on node1's kube-ipvs0; node1 connects to node2:22",
        vec![n1, n2],
        "10.217.0.9:22".into(),
        tcp_connect("10.217.0.9:22"),
    ))
}

/// A ClusterIP-like DNAT in the client's OUTPUT chain to the server.
pub fn nat_output() -> Result<Scenario> {
    let nss = routed(218)?;
    nss[0].exec(&[
        "iptables",
        "-w",
        "-t",
        "nat",
        "-A",
        "OUTPUT",
        "-d",
        "10.43.218.1",
        "-p",
        "tcp",
        "--dport",
        "443",
        "-j",
        "DNAT",
        "--to-destination",
        "10.218.2.2:6443",
    ])?;
    let srv = listen(&nss[2], "10.218.2.2:6443", 15)?;
    let mut sc = simple(
        "nat_output",
        "a Service VIP DNATed in OUTPUT to a backend",
        nss,
        "10.43.218.1:443".into(),
        tcp_connect("10.43.218.1:443"),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// DNS over UDP to a responder of the tests' own (netprobe dns-serve),
/// four questions from one client socket: one answered, one NXDOMAIN, one
/// the server ignores (no answer), one answered truncated (TC bit). (Within
/// the kernel side's budget of full records per tuple, hook and device: 8.)
pub fn dns_queries() -> Result<Scenario> {
    let nss = routed(248)?;
    let srv = serve(&nss[2], "dns-serve", "10.248.2.2:53", 15)?;
    let mut args: Vec<String> = strings(&["dns-query", "10.248.2.2:53"]);
    args.extend(
        [
            "kubernetes.default.svc.cluster.local",
            "nx.example.com",
            "silent.example.com",
            "big.example.com",
        ]
        .map(String::from),
    );

    // The truncated answer is taken as it is (dns_truncated_tcp retries
    // it over TCP).
    args.extend([
        "--timeout-ms".into(),
        crate::scaled_arg(500),
        "--ignore-tc".into(),
    ]);
    let mut sc = simple(
        "dns_queries",
        "DNS questions over UDP: answered, NXDOMAIN, unanswered, truncated",
        nss,
        "10.248.2.2:53".into(),
        args,
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// Twelve DNS questions from one client socket (more than the kernel
/// side's 8 full records per tuple, hook and device: the budget is per DNS
/// id), and an nftables rule on the router that drops the second one only
/// (DNS id 0x1001, matched in the payload): that query alone is dropped,
/// the others answered.
pub fn dns_one_query_dropped() -> Result<Scenario> {
    let nss = routed(253)?;
    nss[1].exec_file(
        &["nft", "-f"],
        "table ip dnsdrop {\n\
         \tchain filter_dns {\n\
         \t\ttype filter hook forward priority 0; policy accept;\n\
         \t\tudp dport 53 @th,64,16 0x1001 counter drop comment \"drop DNS id 0x1001\"\n\
         \t}\n\
         }\n",
    )?;
    let srv = serve(&nss[2], "dns-serve", "10.253.2.2:53", 15)?;
    let mut args: Vec<String> = vec!["dns-query".into(), "10.253.2.2:53".into()];
    args.extend((0..12).map(|i| format!("q{i}.example.com")));
    args.extend(["--timeout-ms".into(), crate::scaled_arg(500)]);
    let mut sc = simple(
        "dns_one_query_dropped",
        "twelve DNS questions from one socket; an nftables rule drops the second",
        nss,
        "10.253.2.2:53".into(),
        args,
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A DNS Service address (10.96.0.10:53) DNATed by the router to the
/// server, as kube-proxy does on a node: the query's bytes are read where
/// it is first followed and again after each rewrite (the request after
/// DNAT, the reply after its reverse translation).
pub fn dns_service_dnat() -> Result<Scenario> {
    let nss = routed(252)?;
    nss[1].exec_file(
        &["nft", "-f"],
        "table ip svcnat {\n\
         \tchain prerouting {\n\
         \t\ttype nat hook prerouting priority dstnat; policy accept;\n\
         \t\tip daddr 10.96.0.10 udp dport 53 dnat to 10.252.2.2\n\
         \t}\n\
         }\n",
    )?;
    let srv = serve(&nss[2], "dns-serve", "10.252.2.2:53", 15)?;
    let mut sc = simple(
        "dns_service_dnat",
        "a DNS query to a Service address the router DNATs to the server",
        nss,
        "10.96.0.10:53".into(),
        strings(&[
            "dns-query",
            "10.96.0.10:53",
            "kubernetes.default.svc.cluster.local",
            "--timeout-ms",
            &crate::scaled_arg(500),
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// A resolver's retry of a truncated answer: the question for
/// `big.example.com` over UDP gets an empty answer with the TC bit, and
/// the client asks again over TCP (RFC 7766), where the server (netprobe
/// dns-serve) answers in full. Two flows to :53, one UDP, one TCP.
/// Traced with `--netns` on every namespace: tc then sees each packet
/// first, and reads the TCP segments' payload, which a locally sent
/// segment has in page fragments the tracepoints do not read.
pub fn dns_truncated_tcp() -> Result<Scenario> {
    let nss = routed(249)?;
    let srv = serve(&nss[2], "dns-serve", "10.249.2.2:53", 15)?;
    let scope: Vec<String> = nss
        .iter()
        .flat_map(|n| ["--netns".to_string(), n.name.clone()])
        .collect();
    let mut sc = simple(
        "dns_truncated_tcp",
        "DNS over UDP answered truncated (TC bit), asked again over TCP and answered in full",
        nss,
        "10.249.2.2:53".into(),
        strings(&[
            "dns-query",
            "10.249.2.2:53",
            "big.example.com",
            "--timeout-ms",
            &crate::scaled_arg(1000),
        ]),
    );
    sc.args = scope;
    sc.servers.push(srv);
    Ok(sc)
}

pub fn udp_delivered() -> Result<Scenario> {
    let nss = routed(219)?;
    let srv = serve(&nss[2], "udp-echo", "10.219.2.2:53", 15)?;
    let mut sc = simple(
        "udp_delivered",
        "a UDP (DNS-like) query to a listening socket",
        nss,
        "10.219.2.2:53".into(),
        strings(&[
            "udp-send",
            "10.219.2.2:53",
            "--timeout-ms",
            &crate::scaled_arg(1000),
            "--count",
            "1",
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// Incident 2: the router sends the LB IP to the master, where kube-proxy
/// (IPVS mode) bound it on kube-ipvs0, but the Service has
/// externalTrafficPolicy: Local and no endpoint on the master, so
/// kube-proxy's KUBE-EXTERNAL-SERVICES chain drops new connections to it.
/// This kernel has no IPVS: the drop is the iptables rule kube-proxy writes.
pub fn incident2() -> Result<Scenario> {
    let p = unique_prefix();
    let (laptop, router, master, worker) = (
        ns(&p, "laptop")?,
        ns(&p, "router")?,
        ns(&p, "master")?,
        ns(&p, "worker")?,
    );
    veth(&laptop, "eth0", &router, "lan0")?;
    veth(&router, "k0", &master, "eth0")?;
    veth(&router, "k1", &worker, "eth0")?;
    laptop.ip(&["addr", "add", "10.222.1.2/24", "dev", "eth0"])?;
    laptop.ip(&["route", "add", "default", "via", "10.222.1.1"])?;
    router.ip(&["addr", "add", "10.222.1.1/24", "dev", "lan0"])?;
    router.ip(&["addr", "add", "10.222.2.1/24", "dev", "k0"])?;
    router.ip(&["addr", "add", "10.222.3.1/24", "dev", "k1"])?;
    router.sysctl("net.ipv4.ip_forward", "1")?;
    // BGP put the LB IP's route on the master.
    router.ip(&["route", "add", "10.16.222.1/32", "via", "10.222.2.10"])?;
    master.ip(&["addr", "add", "10.222.2.10/24", "dev", "eth0"])?;
    master.ip(&["route", "add", "default", "via", "10.222.2.1"])?;
    worker.ip(&["addr", "add", "10.222.3.10/24", "dev", "eth0"])?;
    worker.ip(&["route", "add", "default", "via", "10.222.3.1"])?;
    // IPVS mode binds every Service IP on kube-ipvs0 (a dummy device; a
    // veth here, this kernel has no dummy).
    master.ip(&[
        "link",
        "add",
        "kube-ipvs0",
        "type",
        "veth",
        "peer",
        "name",
        "kipvs-peer",
    ])?;
    master.ip(&["link", "set", "kube-ipvs0", "up"])?;
    master.ip(&["addr", "add", "10.16.222.1/32", "dev", "kube-ipvs0"])?;
    for rule in [
        &["-N", "KUBE-EXTERNAL-SERVICES"][..],
        &[
            "-A",
            "INPUT",
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-j",
            "KUBE-EXTERNAL-SERVICES",
        ],
        &[
            "-A",
            "KUBE-EXTERNAL-SERVICES",
            "-d",
            "10.16.222.1/32",
            "-p",
            "tcp",
            "-m",
            "comment",
            "--comment",
            "default/nginx:http has no local endpoints",
            "-m",
            "tcp",
            "--dport",
            "80",
            "-j",
            "DROP",
        ],
    ] {
        let mut args = vec!["iptables", "-w"];
        args.extend_from_slice(rule);
        master.exec(&args)?;
    }
    // The only nginx runs on the worker.
    let srv = listen(&worker, "10.222.3.10:80", 15)?;
    let mut sc = simple(
        "incident2",
        "incident 2: the LB IP is routed to the master, where kube-proxy drops it (externalTrafficPolicy Local, no local endpoint); ping works, TCP hangs",
        vec![laptop, router, master, worker],
        "10.16.222.1:80".into(),
        tcp_connect("10.16.222.1:80"),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// Incident 4: host A has a private NIC `priv` (cluster network, where the
/// master is) and a global NIC `glob` with the default route. kube-proxy
/// DNATs the kubernetes ClusterIP 10.43.0.1:443 to the master's private
/// address in OUTPUT; the route lookup for 10.43.0.1 used the default route
/// and picked glob's address as source, so the DNATed SYN reaches the master
/// from an address it cannot answer.
pub fn incident4() -> Result<Scenario> {
    let p = unique_prefix();
    let (host, master, gw) = (ns(&p, "hostA")?, ns(&p, "master")?, ns(&p, "glob-gw")?);
    veth(&host, "priv", &master, "eth0")?;
    veth(&host, "glob", &gw, "eth0")?;
    host.ip(&["addr", "add", "10.224.1.2/24", "dev", "priv"])?;
    host.ip(&["addr", "add", "10.224.9.2/24", "dev", "glob"])?;
    host.ip(&["route", "add", "default", "via", "10.224.9.1"])?;
    master.ip(&["addr", "add", "10.224.1.10/24", "dev", "eth0"])?;
    gw.ip(&["addr", "add", "10.224.9.1/24", "dev", "eth0"])?;
    // kube-proxy's iptables mode (pkg/proxy/iptables/proxier.go): OUTPUT
    // -> KUBE-SERVICES (the ClusterIP's rule, commented with the Service
    // port) -> KUBE-SVC-* -> KUBE-SEP-* (the endpoint's DNAT).
    host.exec_file(
        &["iptables-restore", "-w", "--noflush"],
        r#"*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
:KUBE-SEP-7XQKQKHA2PQUPOJN - [0:0]
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.43.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment "default/kubernetes:https -> 10.224.1.10:6443" -j KUBE-SEP-7XQKQKHA2PQUPOJN
-A KUBE-SEP-7XQKQKHA2PQUPOJN -p tcp -m comment --comment "default/kubernetes:https" -m tcp -j DNAT --to-destination 10.224.1.10:6443
COMMIT
"#,
    )?;
    let srv = listen(&master, "10.224.1.10:6443", 15)?;
    let mut sc = simple(
        "incident4",
        "incident 4: multi-NIC host; the kubernetes ClusterIP is routed by the default route (global NIC) and DNATed to the master on the private NIC",
        vec![host, master, gw],
        "10.43.0.1:443".into(),
        tcp_connect("10.43.0.1:443"),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// Incident 3: node-local DNS listens on 169.254.25.10 (on a device named
/// nodelocaldns; a veth here, this kernel has no dummy). The pod's packets
/// arrive on the node's lxc-style veth, where a tc BPF program (as Cilium's
/// BPF host routing does) redirects them straight to the uplink: they never
/// reach the host stack where the link-local address lives.
pub fn incident3(mirred: bool) -> Result<Scenario> {
    let p = unique_prefix();
    let (node, pod, fabric) = (ns(&p, "node")?, ns(&p, "pod")?, ns(&p, "fabric")?);
    veth(&node, "eth0", &fabric, "eth0")?;
    veth(&node, "lxc0", &pod, "eth0")?;
    node.ip(&["addr", "add", "10.226.9.2/24", "dev", "eth0"])?;
    fabric.ip(&["addr", "add", "10.226.9.1/24", "dev", "eth0"])?;
    node.ip(&["route", "add", "default", "via", "10.226.9.1"])?;
    node.ip(&["addr", "add", "10.226.1.1/24", "dev", "lxc0"])?;
    pod.ip(&["addr", "add", "10.226.1.2/24", "dev", "eth0"])?;
    pod.ip(&["route", "add", "default", "via", "10.226.1.1"])?;
    node.sysctl("net.ipv4.ip_forward", "1")?;
    node.ip(&[
        "link",
        "add",
        "nodelocaldns",
        "type",
        "veth",
        "peer",
        "name",
        "nld-peer",
    ])?;
    node.ip(&["link", "set", "nodelocaldns", "up"])?;
    node.ip(&["addr", "add", "169.254.25.10/32", "dev", "nodelocaldns"])?;
    let srv = serve(&node, "udp-echo", "169.254.25.10:53", 15)?;
    // The same steering without BPF: a tc mirred redirect on a u32 filter.
    let redirect = if mirred {
        crate::bpfdrop::clsact_add(&node.path(), "lxc0")?;
        crate::bpfdrop::nsenter(
            &node.path(),
            &[
                "tc", "filter", "add", "dev", "lxc0", "ingress", "protocol", "ip", "u32", "match",
                "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", "eth0",
            ],
        )?;
        None
    } else {
        Some(crate::redirect::Redirect::install(&node, "lxc0", "eth0")?)
    };
    let (node_name, pod_name) = (node.name.clone(), pod.name.clone());
    let mut sc = simple(
        "incident3",
        "incident 3: a tc BPF program on the pod's veth redirects node-local DNS queries (169.254.25.10:53) to the uplink",
        vec![pod, node, fabric],
        "169.254.25.10:53".into(),
        strings(&[
            "udp-send",
            "169.254.25.10:53",
            "--timeout-ms",
            &crate::scaled_arg(1000),
            "--count",
            "1",
        ]),
    );
    sc.args = vec!["--netns".into(), node_name, "--netns".into(), pod_name];
    sc.servers.push(srv);
    sc.redirect = redirect;
    if mirred {
        sc.name = "incident3_mirred";
    }
    Ok(sc)
}

/// The names node-local DNS answers in `dns_node_local`, as dnsmasq's
/// `--address=/NAME/ADDR` (and the rest of cluster.local is NXDOMAIN).
pub const NODE_LOCAL_RECORDS: &[(&str, &str)] = &[
    ("kubernetes.default.svc.cluster.local", "10.96.0.1"),
    ("kube-dns.kube-system.svc.cluster.local", "10.96.0.10"),
];

/// A program on PATH (or in /usr/sbin, /sbin: root's, which a test's
/// PATH may lack).
fn find_program(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// dnsmasq answering DNS on `addr` (port 53) in `node`, for the names of
/// [`NODE_LOCAL_RECORDS`], authoritative for cluster.local, with no
/// upstream, no /etc/hosts and no configuration file; its pid file and
/// log in `dir`. In the foreground, killed on drop; as root and group
/// root (its default group, dip, would change its gid, which clears the
/// parent-death signal setpriv gives it), so that dnsmasq is SIGKILLed
/// too if the thread that started it dies without dropping it (a killed
/// test or demo). Returns once its pid file is written (after its
/// sockets are bound).
fn dnsmasq(node: &Netns, addr: &str, dir: &std::path::Path) -> Result<Child> {
    let Some(bin) = find_program("dnsmasq") else {
        anyhow::bail!(
            "dnsmasq is not installed: run `cargo xtask setup` (it installs Debian's dnsmasq-base)"
        );
    };
    let pid = dir.join("dnsmasq.pid");
    let log = dir.join("dnsmasq.log");
    let mut args: Vec<String> = [
        "setpriv",
        "--pdeathsig",
        "KILL",
        bin.to_str().unwrap(),
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--user=root",
        "--group=root",
        "--bind-interfaces",
        "--port=53",
        "--local=/cluster.local/",
        "--local-ttl=30",
    ]
    .map(String::from)
    .to_vec();
    args.extend([
        format!("--listen-address={addr}"),
        format!("--pid-file={}", pid.display()),
        format!("--dhcp-leasefile={}", dir.join("dnsmasq.leases").display()),
        format!("--log-facility={}", log.display()),
    ]);
    for (name, a) in NODE_LOCAL_RECORDS {
        args.push(format!("--address=/{name}/{a}"));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = node.spawn(&refs)?;
    let deadline = std::time::Instant::now() + crate::scaled_ms(5000);
    loop {
        if std::fs::read_to_string(&pid).is_ok_and(|p| !p.trim().is_empty()) {
            return Ok(child);
        }
        let exited = child.0.try_wait()?;
        if exited.is_some() || std::time::Instant::now() > deadline {
            anyhow::bail!(
                "dnsmasq on {addr} in {} did not start ({}): {}",
                node.name,
                exited.map_or("no pid file".into(), |s| s.to_string()),
                std::fs::read_to_string(&log).unwrap_or_default().trim()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Node-local DNS served by a real server, dnsmasq, on 169.254.25.10
/// (incident 3's address, on a device named nodelocaldns), asked by name
/// from two pods of the node mid-way through a Cilium upgrade, which
/// regenerates endpoints one by one: `pod`'s (lxc0) still goes through
/// the host stack and gets its answers (NOERROR, and NXDOMAIN for a name
/// cluster.local does not have); `pod2`'s (lxc1) has BPF host routing's
/// redirect to the uplink (incident 3), so its question never reaches
/// dnsmasq: misrouted, no answer.
pub fn dns_node_local() -> Result<Scenario> {
    let p = unique_prefix();
    let (node, pod, pod2, fabric) = (
        ns(&p, "node")?,
        ns(&p, "pod")?,
        ns(&p, "pod2")?,
        ns(&p, "fabric")?,
    );
    veth(&node, "eth0", &fabric, "eth0")?;
    veth(&node, "lxc0", &pod, "eth0")?;
    veth(&node, "lxc1", &pod2, "eth0")?;
    node.ip(&["addr", "add", "10.250.9.2/24", "dev", "eth0"])?;
    fabric.ip(&["addr", "add", "10.250.9.1/24", "dev", "eth0"])?;
    node.ip(&["route", "add", "default", "via", "10.250.9.1"])?;
    for (n, dev, i) in [(&pod, "lxc0", 1), (&pod2, "lxc1", 2)] {
        node.ip(&["addr", "add", &format!("10.250.{i}.1/24"), "dev", dev])?;
        n.ip(&["addr", "add", &format!("10.250.{i}.2/24"), "dev", "eth0"])?;
        n.ip(&["route", "add", "default", "via", &format!("10.250.{i}.1")])?;
    }
    node.sysctl("net.ipv4.ip_forward", "1")?;
    node.ip(&[
        "link",
        "add",
        "nodelocaldns",
        "type",
        "veth",
        "peer",
        "name",
        "nld-peer",
    ])?;
    node.ip(&["link", "set", "nodelocaldns", "up"])?;
    node.ip(&["link", "set", "nld-peer", "up"])?;
    node.ip(&["addr", "add", "169.254.25.10/32", "dev", "nodelocaldns"])?;
    let dir = ScratchDir::new("dnsmasq")?;
    let srv = dnsmasq(&node, "169.254.25.10", &dir.0)?;
    let redirect = crate::redirect::Redirect::install(&node, "lxc1", "eth0")?;
    let ask = |names: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = vec!["dns-query".into(), "169.254.25.10:53".into()];
        a.extend(names.iter().map(|n| (*n).to_string()));
        a.extend(["--timeout-ms".into(), crate::scaled_arg(1000)]);
        a
    };
    let answered = ask(&[
        NODE_LOCAL_RECORDS[0].0,
        NODE_LOCAL_RECORDS[1].0,
        "nope.default.svc.cluster.local",
    ]);
    let misrouted = ask(&[NODE_LOCAL_RECORDS[0].0]);
    let args = [&node, &pod, &pod2]
        .iter()
        .flat_map(|n| ["--netns".to_string(), n.name.clone()])
        .collect();
    let mut sc = simple(
        "dns_node_local",
        "node-local DNS (dnsmasq on 169.254.25.10) asked by name from two pods: one answered through the host stack, one misrouted to the uplink by BPF host routing (incident 3)",
        vec![pod, pod2, node, fabric],
        "169.254.25.10:53".into(),
        answered,
    );
    sc.more_traffic = vec![(1, misrouted)];
    sc.args = args;
    sc.servers.push(srv);
    sc.scratch.push(dir);
    sc.redirect = Some(redirect);
    Ok(sc)
}

/// Incident 1: client, node1 and node2 on one L2 segment (a bridge in its
/// own namespace). The VIP 10.227.0.99 is moved between the nodes, as two
/// controllers fighting over one LoadBalancer Service do. Nodes forward (as
/// Kubernetes nodes do), so a node that lost the VIP but still receives its
/// traffic sends it on and answers with an ICMP redirect. The client's ARP
/// timers are short so a failed resolution takes ~300 ms, not 3 s.
/// `traffic()` sends one connection; `flap_steps()` runs the incident.
pub fn incident1() -> Result<Scenario> {
    let p = unique_prefix();
    let (client, node1, node2, lan) = (
        ns(&p, "client")?,
        ns(&p, "node1")?,
        ns(&p, "node2")?,
        ns(&p, "lan")?,
    );
    lan.ip(&["link", "add", "br0", "type", "bridge"])?;
    lan.ip(&["link", "set", "br0", "up"])?;
    for (n, port, addr) in [
        (&client, "p-client", "10.227.0.2/24"),
        (&node1, "p-node1", "10.227.0.11/24"),
        (&node2, "p-node2", "10.227.0.12/24"),
    ] {
        veth(n, "eth0", &lan, port)?;
        lan.ip(&["link", "set", port, "master", "br0"])?;
        n.ip(&["addr", "add", addr, "dev", "eth0"])?;
    }
    for n in [&node1, &node2] {
        n.sysctl("net.ipv4.ip_forward", "1")?;
    }
    client.sysctl("net.ipv4.neigh.eth0.retrans_time_ms", "100")?;
    client.sysctl("net.ipv4.neigh.eth0.mcast_solicit", "2")?;
    client.sysctl("net.ipv4.neigh.eth0.ucast_solicit", "1")?;
    Ok(simple(
        "incident1",
        "incident 1: a LoadBalancer VIP flaps between node1 and node2 (two controllers); the client connects to VIP:443",
        vec![client, node1, node2, lan],
        "10.227.0.99:443".into(),
        tcp_connect("10.227.0.99:443"),
    ))
}

impl Scenario {
    /// Incident 1, step by step: no owner (ARP fails), node1 owns it, the
    /// VIP moves to node2 while the client still has node1's MAC (node1
    /// forwards and redirects), then the client re-resolves to node2.
    /// Returns what the client saw at each step.
    pub fn flap_steps(&self) -> Result<Vec<String>> {
        let pause = || std::thread::sleep(crate::scaled_ms(600));
        let vip = "10.227.0.99/32";
        let (client, node1, node2) = (self.ns("client"), self.ns("node1"), self.ns("node2"));
        let mut seen = vec![self.traffic()?];
        node1.ip(&["addr", "add", vip, "dev", "eth0"])?;
        pause();
        seen.push(self.traffic()?);
        node1.ip(&["addr", "del", vip, "dev", "eth0"])?;
        pause();
        node2.ip(&["addr", "add", vip, "dev", "eth0"])?;
        pause();
        seen.push(self.traffic()?);
        client.ip(&["neigh", "flush", "dev", "eth0"])?;
        seen.push(self.traffic()?);
        pause();
        Ok(seen)
    }
}

#[cfg(test)]
mod bound_tests {
    use super::bound_in;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0202D30A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0202D30A:0035 0102D30A:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
";

    #[test]
    fn a_listener_is_found_by_its_port_and_state() {
        assert!(bound_in(TCP, 8080, true));
        // Port 53 is only a connected socket here: not listening, but bound.
        assert!(!bound_in(TCP, 53, true));
        assert!(bound_in(TCP, 53, false));
        assert!(!bound_in(TCP, 8081, false));
        assert!(!bound_in("", 8080, false));
    }
}
