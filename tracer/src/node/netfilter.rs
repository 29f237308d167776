//! Which netfilter rule dropped a packet, as far as this kernel lets us
//! tell: without function hooks (kprobes on nft_do_chain/ipt_do_table) the
//! drop only says NETFILTER_DROP, so the rule is found by its counters
//! moving between a snapshot taken when tracing started and the verdict.
//!
//! Rules are read in-process inside the namespace: nf_tables (native
//! nftables and iptables-nft) by a netlink dump (node::nftables), its rules
//! written as `nft list ruleset` prints them. Only a namespace with legacy
//! iptables tables (its /proc/net/ip{,6}_tables_names not empty) runs a
//! helper, `iptables-legacy-save -c` / `ip6tables-legacy-save -c`, started
//! from the thread that entered the namespace (no nsenter).

use std::{
    net::IpAddr,
    path::Path,
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
};

use crate::node::{
    command::{CommandError, LIMIT, output_within},
    nftables::{self, NftRule},
};

/// How a rule was found to have dropped the packet: its counter moved,
/// or nf_tables tracing reported it (node::nftrace).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum NfMethod {
    #[default]
    Counters,
    Nftrace,
}

/// One rule with a drop or reject verdict and its packet counter.
///
/// Recordings made before the nf_tables reader hold only table, chain,
/// text, target (now `verdict`) and packets: the other fields default.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NfRule {
    /// `ip`, `ip6`, `inet`, ... ("" in older recordings).
    #[serde(default)]
    pub family: String,
    pub table: String,
    pub chain: String,
    /// The nf_tables rule handle (0 for legacy iptables).
    #[serde(default)]
    pub handle: u64,
    /// The rule as `nft list ruleset` prints it without its counter (as
    /// `iptables-legacy-save` prints it for legacy tables).
    pub text: String,
    /// `drop` or `reject` (`DROP`/`REJECT` in older recordings).
    #[serde(alias = "target")]
    pub verdict: String,
    /// The rule's comment (nft's, or an iptables comment match).
    #[serde(default)]
    pub comment: Option<String>,
    pub packets: u64,
}

impl NfRule {
    /// Identity across snapshots.
    fn key(&self) -> (&str, &str, &str, &str) {
        (&self.family, &self.table, &self.chain, &self.text)
    }

    /// kube-proxy's rule for a Service with externalTrafficPolicy: Local and
    /// no endpoint on this node: its comment says "<ns>/<svc> has no local
    /// endpoints" (iptables mode, KUBE-EXTERNAL-SERVICES and friends).
    pub fn drops_without_local_endpoints(&self) -> bool {
        const SAYS: &str = "no local endpoints";
        self.comment.as_deref().is_some_and(|c| c.contains(SAYS)) || self.text.contains(SAYS)
    }

    /// Whether the rule matches destination `addr` (`ip daddr A`, `ip6
    /// daddr A`, iptables' `-d A/32`).
    pub fn names_destination(&self, addr: IpAddr) -> bool {
        let nft = format!("daddr {addr}");
        self.text.contains(&format!(" {addr}/"))
            || self.text.match_indices(&nft).any(|(i, _)| {
                matches!(
                    self.text[i + nft.len()..].chars().next(),
                    None | Some(' ' | '/')
                )
            })
    }

    /// A kept nf_tables rule: one with a counter and a drop or reject.
    fn from_nft(r: NftRule) -> Option<NfRule> {
        let verdict = r.verdict.filter(|v| v == "drop" || v == "reject")?;
        Some(NfRule {
            family: r.family,
            table: r.table,
            chain: r.chain,
            handle: r.handle,
            text: r.text,
            verdict,
            comment: r.comment,
            packets: r.packets?,
        })
    }
}

/// Parse `iptables-save -c` output (of family `family`), keeping rules
/// that drop or reject.
pub fn parse_save(text: &str, family: &str) -> Vec<NfRule> {
    let mut table = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim().to_string();
            continue;
        }
        // "[pkts:bytes] -A CHAIN ..."
        let Some(rest) = line.strip_prefix('[') else {
            continue;
        };
        let Some((counters, rule)) = rest.split_once("] ") else {
            continue;
        };
        let packets = counters
            .split(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let mut words = rule.split_whitespace();
        if words.next() != Some("-A") {
            continue;
        }
        let chain = words.next().unwrap_or_default().to_string();
        let target = rule
            .split(" -j ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .unwrap_or_default()
            .to_string();
        if target != "DROP" && target != "REJECT" {
            continue;
        }
        out.push(NfRule {
            family: family.to_string(),
            table: table.clone(),
            chain,
            handle: 0,
            text: rule.to_string(),
            verdict: target.to_lowercase(),
            comment: save_comment(rule),
            packets,
        });
    }
    out
}

/// The `--comment "..."` of an iptables-save rule.
fn save_comment(rule: &str) -> Option<String> {
    let rest = rule.split_once("--comment ")?.1;
    Some(match rest.strip_prefix('"') {
        Some(q) => q.split_once('"').map_or(q, |(c, _)| c).to_string(),
        None => rest.split_whitespace().next()?.to_string(),
    })
}

/// Rules of the namespace at `netns_path` that drop or reject, with their
/// counters: nf_tables by netlink, legacy tables by iptables-legacy-save
/// where there are any.
/// With `followed`, also the endpoints kube-proxy's rules there send it
/// to ([`crate::node::services::endpoints_from`]), found among the rules
/// of the same dump that name its address: nftrace traces them from the
/// first packet, which a ClusterIP's is translated before it could teach.
pub fn snapshot(
    netns_path: &Path,
    followed: Option<&crate::node::nftrace::Followed>,
) -> (Vec<NfRule>, crate::node::services::Endpoints) {
    let Ok(_in) = crate::node::netns::NetnsGuard::enter(netns_path) else {
        return (Vec::new(), Vec::new());
    };
    let full =
        |f: &&crate::node::nftrace::Followed| f.prefix >= if f.addr.is_ipv4() { 32 } else { 128 };
    let target = followed.filter(full);
    let names = target.map(|t| crate::node::services::names_addr(t.addr));
    let keep = |m: &[u8]| nftables::may_drop(m) || names.as_ref().is_some_and(|n| n(m));
    let (nft, chains) = nftables::rules_and_chains_where(&keep).unwrap_or_default();
    let endpoints = target
        .map(|t| crate::node::services::endpoints_from((&nft, &chains), t.addr, t.port, t.l4proto))
        .unwrap_or_default();
    let mut rules: Vec<NfRule> = nft.into_iter().filter_map(NfRule::from_nft).collect();
    for ((names, tool), family) in LEGACY_HELPERS.into_iter().zip(["ip", "ip6"]) {
        if legacy_tables(names) {
            rules.extend(legacy_save(tool, family, netns_path));
        }
    }
    (rules, endpoints)
}

/// The helpers tracer may run, each for a namespace whose
/// /proc/net/FILE lists legacy iptables tables: (FILE, tool).
pub const LEGACY_HELPERS: [(&str, &str); 2] = [
    ("ip_tables_names", "iptables-legacy-save"),
    ("ip6_tables_names", "ip6tables-legacy-save"),
];

/// Whether this thread's namespace has legacy iptables tables of a family.
pub fn legacy_tables(names: &str) -> bool {
    std::fs::read_to_string(format!("/proc/thread-self/net/{names}"))
        .is_ok_and(|t| !t.trim().is_empty())
}

/// Said once per process: legacy tables are there but their tool is not.
static MISSING_SAID: AtomicBool = AtomicBool::new(false);

/// `TOOL -c` run from this thread (in the namespace it entered), parsed.
fn legacy_save(tool: &'static str, family: &str, netns_path: &Path) -> Vec<NfRule> {
    match output_within(tool, Command::new(tool).arg("-c"), LIMIT) {
        Ok(o) => parse_save(&String::from_utf8_lossy(&o), family),
        Err(e) => {
            let missing = matches!(&e, CommandError::Spawn(_, io) if io.kind() == std::io::ErrorKind::NotFound);
            let say = match e {
                CommandError::TimedOut(..) => Some(format!("{e}: its rule counters are left out")),
                _ if missing && !MISSING_SAID.swap(true, Ordering::Relaxed) => Some(format!(
                    "netns {} has legacy iptables tables but {tool} is not installed: their rule counters are left out",
                    netns_path.display()
                )),
                _ => None,
            };
            if let Some(s) = say {
                #[allow(
                    clippy::print_stderr,
                    reason = "the node layer is below output: said where it is noticed, in output::diag's form"
                )]
                {
                    eprintln!("tracer: note: {s}");
                }
            }
            Vec::new()
        }
    }
}

/// Rules whose counter moved since `before` (all rules with packets when
/// there is no baseline), most packets first.
pub fn moved(before: Option<&[NfRule]>, now: &[NfRule]) -> Vec<(NfRule, u64)> {
    // By key: a node's rejects (one per Service without endpoints) are
    // thousands where clusters are large.
    let mut by_key = std::collections::HashMap::new();
    for x in before.unwrap_or_default() {
        by_key.entry(x.key()).or_insert(x.packets);
    }
    let mut v: Vec<(NfRule, u64)> = now
        .iter()
        .filter_map(|r| {
            let base = by_key.get(&r.key()).copied().unwrap_or(0);
            let d = r.packets.saturating_sub(base);
            (d > 0).then(|| (r.clone(), d))
        })
        .collect();
    v.sort_by_key(|r| std::cmp::Reverse(r.1));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVE: &str = "# Generated by iptables-legacy-save v1.8.9
*filter
:INPUT ACCEPT [12:720]
:KUBE-EXTERNAL-SERVICES - [0:0]
[3:180] -A INPUT -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES
[2:120] -A KUBE-EXTERNAL-SERVICES -d 10.16.0.1/32 -p tcp -m comment --comment \"default/nginx:http has no local endpoints\" -m tcp --dport 80 -j DROP
[0:0] -A KUBE-EXTERNAL-SERVICES -d 10.16.0.2/32 -p tcp -m tcp --dport 443 -j REJECT --reject-with icmp-port-unreachable
COMMIT
*nat
[5:300] -A OUTPUT -d 10.43.0.1/32 -p tcp -j DNAT --to-destination 192.168.1.10:6443
COMMIT
";

    #[test]
    fn parses_drop_and_reject_rules() {
        let r = parse_save(SAVE, "ip");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].table, "filter");
        assert_eq!(r[0].family, "ip");
        assert_eq!(r[0].chain, "KUBE-EXTERNAL-SERVICES");
        assert_eq!(r[0].verdict, "drop");
        assert_eq!(r[0].packets, 2);
        assert_eq!(
            r[0].comment.as_deref(),
            Some("default/nginx:http has no local endpoints")
        );
        assert!(r[0].drops_without_local_endpoints());
        assert!(r[0].names_destination("10.16.0.1".parse().unwrap()));
        assert!(!r[0].names_destination("10.16.0.2".parse().unwrap()));
        assert_eq!(r[1].verdict, "reject");
        assert!(!r[1].drops_without_local_endpoints());
    }

    #[test]
    fn counters_that_moved() {
        let before = parse_save(SAVE, "ip");
        let now = parse_save(
            &SAVE.replace("[2:120] -A KUBE-EXTERNAL", "[5:300] -A KUBE-EXTERNAL"),
            "ip",
        );
        let m = moved(Some(&before), &now);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].1, 3);
        // Without a baseline every rule with packets counts.
        assert_eq!(moved(None, &before).len(), 1);
        assert!(moved(Some(&before), &before).is_empty());
    }

    fn nft(text: &str, verdict: Option<&str>, packets: Option<u64>) -> NftRule {
        NftRule {
            family: "ip".into(),
            table: "filter".into(),
            chain: "INPUT".into(),
            handle: 4,
            packets,
            verdict: verdict.map(str::to_string),
            comment: None,
            text: text.into(),
            dst: Default::default(),
        }
    }

    #[test]
    fn nf_tables_rules_kept_are_counted_drops_and_rejects() {
        let keep = NfRule::from_nft(nft(
            "ip daddr 10.16.0.1 tcp dport 80 drop",
            Some("drop"),
            Some(3),
        ))
        .unwrap();
        assert_eq!(
            (keep.handle, keep.packets, keep.verdict.as_str()),
            (4, 3, "drop")
        );
        assert!(keep.names_destination("10.16.0.1".parse().unwrap()));
        assert!(!keep.names_destination("10.16.0.10".parse().unwrap()));
        assert!(NfRule::from_nft(nft("reject", Some("reject"), Some(0))).is_some());
        assert!(NfRule::from_nft(nft("accept", Some("accept"), Some(1))).is_none());
        assert!(NfRule::from_nft(nft("jump X", Some("jump X"), Some(1))).is_none());
        // Without a counter nothing can be told from it.
        assert!(NfRule::from_nft(nft("drop", Some("drop"), None)).is_none());
    }

    /// Recordings made before the nf_tables reader still read.
    #[test]
    fn old_recorded_rules_deserialize() {
        let old = r#"{"table":"filter","chain":"INPUT","text":"-A INPUT -p tcp -m tcp --dport 8083 -j DROP","target":"DROP","packets":1}"#;
        let r: NfRule = serde_json::from_str(old).unwrap();
        assert_eq!(
            (r.verdict.as_str(), r.handle, r.family.as_str()),
            ("DROP", 0, "")
        );
        assert_eq!(r.comment, None);
    }

    /// In a fresh namespace: an iptables-nft rule dropping UDP sent out is
    /// read with its counter, which moves by the datagrams dropped, and
    /// rules of legacy tables come from iptables-legacy-save run in the
    /// namespace. Needs root and iptables.
    #[test]
    fn snapshot_of_a_fresh_namespace_sees_counters_move() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED snapshot_of_a_fresh_namespace_sees_counters_move: not root");
            return;
        }
        let ns = crate::node::netns::TestNetns::add("tracer-nf");
        let run = |args: &[&str]| ns.run(args);
        assert!(run(&["ip", "link", "set", "lo", "up"]));
        if !run(&[
            "iptables-nft",
            "-w",
            "-A",
            "OUTPUT",
            "-p",
            "udp",
            "-m",
            "comment",
            "--comment",
            "no local endpoints here",
            "-j",
            "DROP",
        ]) {
            eprintln!("SKIPPED snapshot_of_a_fresh_namespace_sees_counters_move: no iptables-nft");
            return;
        }
        let path = std::path::PathBuf::from(format!("/run/netns/{}", ns.0));
        let before = snapshot(&path, None).0;
        assert_eq!(before.len(), 1, "{before:?}");
        let r = &before[0];
        assert_eq!(
            (r.family.as_str(), r.table.as_str(), r.chain.as_str()),
            ("ip", "filter", "OUTPUT")
        );
        assert_eq!(
            r.text,
            "meta l4proto udp comment \"no local endpoints here\" drop"
        );
        assert!(r.drops_without_local_endpoints());
        assert!(r.handle > 0);
        {
            let _in = crate::node::netns::NetnsGuard::enter(&path).unwrap();
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for _ in 0..2 {
                // Dropped at OUTPUT: the send fails with EPERM.
                assert!(sock.send_to(b"x", "127.0.0.1:9").is_err());
            }
        }
        let now = snapshot(&path, None).0;
        let m = moved(Some(&before), &now);
        assert_eq!(m.len(), 1, "{now:?}");
        assert_eq!(m[0].1, 2);
        // Legacy tables: their rules through iptables-legacy-save.
        if run(&[
            "iptables-legacy",
            "-w",
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "-j",
            "DROP",
        ]) {
            let all = snapshot(&path, None).0;
            assert!(
                all.iter()
                    .any(|r| r.text == "-A INPUT -p tcp -j DROP" && r.handle == 0),
                "{all:?}"
            );
            assert_eq!(all.len(), 2, "{all:?}");
        } else {
            eprintln!(
                "SKIPPED legacy part of snapshot_of_a_fresh_namespace_sees_counters_move: no iptables-legacy"
            );
        }
        drop(ns);
    }
}
