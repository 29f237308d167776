//! A node's kube-proxy rules for N ClusterIP Services, as kube-proxy
//! writes them, for the cluster-scale bench (issue 31 item 3): iptables
//! mode (pkg/proxy/iptables/proxier.go: KUBE-SERVICES -> KUBE-SVC-* ->
//! KUBE-SEP-*, half the Services with two endpoints, about 6.5 rules a
//! Service) and nftables mode (pkg/proxy/nftables/proxier.go: the
//! `service-ips` verdict map, a chain per Service and per endpoint). The
//! last Service has no endpoints: a client's connection to it is rejected
//! (filter KUBE-SERVICES's REJECT; `no-endpoint-services` -> reject-chain),
//! the verdict the bench checks.

use std::fmt::Write as _;

use anyhow::{Context, Result, bail};

use crate::{
    netns::{Netns, unique_prefix},
    tracer::{Keep, TracerRun, netprobe_bin},
};

/// kube-proxy's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Iptables,
    Nftables,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
        }
    }
}

/// A node namespace with `services` Services in `mode` and `conntrack`
/// entries (unreplied UDP flows, 30 s each: refilled per case).
pub struct Node {
    pub ns: Netns,
    pub services: usize,
    /// Rules (iptables mode) or map elements (nftables mode).
    pub size: usize,
}

impl Node {
    pub fn new(mode: Mode, services: usize) -> Result<Node> {
        let ns = Netns::new(format!("{}svc", unique_prefix()))?;
        // The client's address, and Services routed out of lo: the OUTPUT
        // hook rejects first.
        ns.ip(&["addr", "add", "10.200.0.1/16", "dev", "lo"])?;
        ns.ip(&["route", "add", "default", "dev", "lo"])?;
        let size = match mode {
            Mode::Iptables => {
                let rules = iptables(services);
                ns.exec_file(&["iptables-restore"], &rules)?;
                rules.lines().filter(|l| l.starts_with("-A ")).count()
            }
            Mode::Nftables => {
                ns.exec_file(&["nft", "-f"], &nftables(services))?;
                services
            }
        };
        Ok(Node { ns, services, size })
    }

    /// `n` conntrack entries: a datagram from each of `n` (address,
    /// port) pairs to a port nobody serves; returns the table's count.
    pub fn fill_conntrack(&self, n: u32) -> Result<u64> {
        if n > 0 {
            let probe = netprobe_bin();
            let mut args = vec![
                probe.to_str().context("netprobe path")?.to_string(),
                "udp-spray".into(),
                "10.201.0.1:9".into(),
            ];
            for k in 0..n.div_ceil(60_000) {
                args.extend(["--src".into(), format!("10.200.1.{}", k + 1)]);
            }
            args.extend(["--count".into(), n.to_string(), "--open".into(), "1".into()]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.ns.exec(&args)?;
        }
        self.conntrack_count()
    }

    pub fn conntrack_count(&self) -> Result<u64> {
        let out = self
            .ns
            .exec(&["cat", "/proc/sys/net/netfilter/nf_conntrack_count"])?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
    }
}

/// One start of tracer on a [`Node`].
#[derive(Debug)]
pub struct Run {
    /// From spawning tracer to its ready file.
    pub wall_ready_ms: f64,
    /// tracer's own `ready_ms`.
    pub ready_ms: Option<u64>,
    /// VmHWM right after the ready file, and the summary's peak.
    pub start_hwm_kib: Option<u64>,
    pub peak_kib: Option<u64>,
    /// The rejected Service's flow: its verdict's kind and `where`.
    pub verdict: String,
    pub where_: String,
}

/// tracer follows the Service without endpoints; a client connects to it
/// three times; the flow's verdict must name the rule that rejected it.
pub fn run(node: &Node) -> Result<Run> {
    let target = rejected(node.services);
    let t0 = std::time::Instant::now();
    let run = TracerRun::start_keep(
        &target,
        "json",
        &["--netns", &node.ns.path(), "--duration", "2m"],
        &[],
        Keep::All,
    )?;
    let wall_ready_ms = t0.elapsed().as_secs_f64() * 1e3;
    let start_hwm_kib = crate::tracer::status_kib(run.pid(), "VmHWM:");
    let probe = netprobe_bin();
    node.ns.exec_status(&[
        probe.to_str().context("netprobe path")?,
        "tcp-connect",
        &target,
        "--count",
        "3",
        "--timeout-ms",
        "500",
    ]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = run.stop()?;
    let sum = out.summary().context("summary")?;
    let flow = out.flow_to(80);
    let verdict = flow["verdict"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let where_ = flow["verdict"]["where"].as_str().unwrap_or_default();
    // The rule named: kube-proxy's REJECT (iptables mode) or the
    // reject-chain the no-endpoint-services element sent it to.
    if verdict != "dropped"
        || !where_.contains("reject")
        || !where_.contains("no endpoints") && !where_.contains("reject-chain")
    {
        bail!(
            "the Service without endpoints: {verdict} at {where_}, not its rule: {}",
            out.dump()
        );
    }
    Ok(Run {
        wall_ready_ms,
        ready_ms: sum["tc"]["ready_ms"].as_u64(),
        start_hwm_kib,
        peak_kib: sum["peak_rss_kib"].as_u64(),
        verdict,
        where_: where_.to_string(),
    })
}

/// kube-proxy's chain-name hash, stood in for: 16 hex digits of a
/// name-derived value, stable across runs.
fn hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// Service `i`'s ClusterIP (10.96.0.0/12).
pub fn cluster_ip(i: usize) -> String {
    format!("10.96.{}.{}", i / 250, i % 250 + 1)
}

/// The Service without endpoints, `IP:80`, of a node with `n` Services.
pub fn rejected(n: usize) -> String {
    format!("{}:80", cluster_ip(n - 1))
}

/// Service `i`'s endpoints (one or two pods, port 8080).
fn endpoints(i: usize) -> Vec<String> {
    let a = format!("10.244.{}.{}", i / 250, i % 250 + 2);
    if i % 2 == 1 {
        vec![a]
    } else {
        vec![a, format!("10.245.{}.{}", i / 250, i % 250 + 2)]
    }
}

/// iptables-restore input: tables filter and nat for `n` Services.
pub fn iptables(n: usize) -> String {
    let mut filter = String::from(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         :KUBE-SERVICES - [0:0]\n:KUBE-EXTERNAL-SERVICES - [0:0]\n:KUBE-FORWARD - [0:0]\n\
         -A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
         -A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n\
         -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n",
    );
    let mut chains = String::from(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
         :KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n",
    );
    let mut rules = String::from(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
         -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
         -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
         -A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n\
         -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n",
    );
    for i in 0..n {
        let (ip, name) = (cluster_ip(i), format!("ns{}/svc{i}:http", i % 50));
        if i == n - 1 {
            let _ = writeln!(
                filter,
                "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"{name} has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"
            );
            continue;
        }
        let svc = format!("KUBE-SVC-{}", hash(&name));
        let _ = writeln!(chains, ":{svc} - [0:0]");
        let _ = writeln!(
            rules,
            "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"{name} cluster IP\" -m tcp --dport 80 -j {svc}\n\
             -A {svc} ! -s 10.244.0.0/16 -d {ip}/32 -p tcp -m comment --comment \"{name} cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ"
        );
        let eps = endpoints(i);
        for (k, e) in eps.iter().enumerate() {
            let sep = format!("KUBE-SEP-{}", hash(&format!("{name}{e}")));
            let _ = writeln!(chains, ":{sep} - [0:0]");
            let prob = if eps.len() == 2 && k == 0 {
                " -m statistic --mode random --probability 0.50000000000"
            } else {
                ""
            };
            let _ = writeln!(
                rules,
                "-A {svc} -m comment --comment \"{name} -> {e}:8080\"{prob} -j {sep}\n\
                 -A {sep} -s {e}/32 -m comment --comment \"{name}\" -j KUBE-MARK-MASQ\n\
                 -A {sep} -p tcp -m comment --comment \"{name}\" -m tcp -j DNAT --to-destination {e}:8080"
            );
        }
    }
    rules += "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n";
    format!("{filter}COMMIT\n{chains}{rules}COMMIT\n")
}

/// `nft -f` input: table `ip kube-proxy` for `n` Services (map elements
/// in `service-ips`, a chain per Service and per endpoint).
pub fn nftables(n: usize) -> String {
    let (mut services, mut cluster, mut chains) = (Vec::new(), Vec::new(), String::new());
    for i in 0..n - 1 {
        let (ip, name) = (cluster_ip(i), format!("ns{}/svc{i}", i % 50));
        cluster.push(ip.clone());
        let sc = format!("service-{}-{name}/tcp/http", &hash(&name)[..8]);
        services.push(format!("{ip} . tcp . 80 : goto {sc}"));
        let eps = endpoints(i);
        let mut vmap = Vec::new();
        for (k, e) in eps.iter().enumerate() {
            let ec = format!(
                "endpoint-{}-{name}/tcp/http__{e}/8080",
                &hash(&format!("{name}{e}"))[..8]
            );
            vmap.push(format!("{k} : goto {ec}"));
            let _ = writeln!(
                chains,
                "\tchain {ec} {{\n\t\tip saddr {e} jump mark-for-masquerade\n\t\tmeta l4proto tcp dnat to {e}:8080\n\t}}"
            );
        }
        let _ = writeln!(
            chains,
            "\tchain {sc} {{\n\t\tip daddr {ip} tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade\n\t\tnumgen random mod {} vmap {{ {} }}\n\t}}",
            eps.len(),
            vmap.join(", ")
        );
    }
    let last = cluster_ip(n - 1);
    cluster.push(last.clone());
    format!(
        "table ip kube-proxy {{\n\
         \tcomment \"rules for kube-proxy\"\n\
         \tset cluster-ips {{\n\t\ttype ipv4_addr\n\t\telements = {{ {} }}\n\t}}\n\
         \tmap no-endpoint-services {{\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\
         \t\telements = {{ {last} . tcp . 80 comment \"ns{}/svc{}:http\" : goto reject-chain }}\n\t}}\n\
         \tmap service-ips {{\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\telements = {{ {} }}\n\t}}\n\
         \tchain filter-output {{\n\t\ttype filter hook output priority -110; policy accept;\n\
         \t\tct state new jump service-endpoints-check\n\t\tct state new jump cluster-ips-check\n\t}}\n\
         \tchain nat-output {{\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump services\n\t}}\n\
         \tchain nat-postrouting {{\n\t\ttype nat hook postrouting priority 100; policy accept;\n\t\tjump masquerading\n\t}}\n\
         \tchain masquerading {{\n\t\tmeta mark & 0x00004000 == 0x00000000 return\n\
         \t\tmeta mark set meta mark ^ 0x00004000\n\t\tmasquerade fully-random\n\t}}\n\
         \tchain mark-for-masquerade {{\n\t\tmeta mark set meta mark | 0x00004000\n\t}}\n\
         \tchain service-endpoints-check {{\n\t\tip daddr . meta l4proto . th dport vmap @no-endpoint-services\n\t}}\n\
         \tchain cluster-ips-check {{\n\
         \t\tip daddr @cluster-ips reject comment \"Reject traffic to invalid ports of ClusterIPs\"\n\
         \t\tip daddr 10.96.0.0/12 drop comment \"Drop traffic to unallocated ClusterIPs\"\n\t}}\n\
         \tchain reject-chain {{\n\t\treject\n\t}}\n\
         \tchain services {{\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t}}\n\
         {chains}}}\n",
        cluster.join(", "),
        (n - 1) % 50,
        n - 1,
        services.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_a_kube_proxy_nodes() {
        let ipt = iptables(5000);
        let rules = ipt.lines().filter(|l| l.starts_with("-A ")).count();
        assert!((30_000..36_000).contains(&rules), "{rules}");
        assert!(ipt.contains(
            "10.96.19.250/32 -p tcp -m comment --comment \"ns49/svc4999:http has no endpoints\""
        ));
        assert_eq!(rejected(5000), "10.96.19.250:80");
        let nft = nftables(20);
        assert_eq!(nft.matches(" : goto service-").count(), 19);
        assert!(
            nft.contains("10.96.0.20 . tcp . 80 comment \"ns19/svc19:http\" : goto reject-chain")
        );
    }
}
