//! Which netfilter rule dropped a packet, as far as this kernel lets us
//! tell: without function hooks (kprobes on nft_do_chain/ipt_do_table) the
//! drop only says NETFILTER_DROP, so the rule is found by its counters
//! moving between a snapshot taken when tracing started and the verdict.
//!
//! Rules are read with `iptables-save -c` / `ip6tables-save -c` (both the
//! legacy and the nf_tables backends, with the operator's own rule text and
//! kube-proxy's comments) run inside the namespace.

use std::{path::Path, process::Command};

use crate::node::command::output_or_warn;

/// One rule with a DROP or REJECT target and its packet counter.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NfRule {
    pub table: String,
    pub chain: String,
    /// The rule as iptables-save prints it, without the counters.
    pub text: String,
    pub target: String,
    pub packets: u64,
}

impl NfRule {
    /// Identity across snapshots.
    fn key(&self) -> (&str, &str, &str) {
        (&self.table, &self.chain, &self.text)
    }

    /// kube-proxy's rule for a Service with externalTrafficPolicy: Local and
    /// no endpoint on this node: its comment says "<ns>/<svc> has no local
    /// endpoints" (iptables mode, KUBE-EXTERNAL-SERVICES and friends).
    pub fn drops_without_local_endpoints(&self) -> bool {
        self.text.contains("no local endpoints")
    }
}

/// Parse `iptables-save -c` output, keeping rules that drop or reject.
pub fn parse_save(text: &str) -> Vec<NfRule> {
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
            table: table.clone(),
            chain,
            text: rule.to_string(),
            target,
            packets,
        });
    }
    out
}

/// Rules of the namespace at `netns_path` (IPv4 and IPv6).
///
/// A namespace with no table of a family (most pods of a node) is not
/// asked: `iptables-save` would print nothing, and running it (with
/// nsenter) costs ~4 ms, so 2 s for a node of 250 pods.
pub fn snapshot(netns_path: &Path) -> Vec<NfRule> {
    let (v4, v6) = tables_in(netns_path).unwrap_or((true, true));
    let mut rules = Vec::new();
    for (tool, needed) in [("iptables-save", v4), ("ip6tables-save", v6)] {
        if !needed {
            continue;
        }
        let out = output_or_warn(
            tool,
            Command::new("nsenter")
                .arg(format!("--net={}", netns_path.display()))
                .args([tool, "-c"]),
            "its rule counters are left out",
        );
        if let Some(o) = out {
            rules.extend(parse_save(&String::from_utf8_lossy(&o)));
        }
    }
    rules
}

/// Whether the namespace has IPv4 and IPv6 tables, legacy (the
/// `ip{,6}_tables_names` of its /proc/net) or nf_tables (of family ip or
/// ip6, what iptables-nft lists). None when that cannot be told.
fn tables_in(netns_path: &Path) -> Option<(bool, bool)> {
    let _in = crate::node::netns::NetnsGuard::enter(netns_path).ok()?;
    let legacy = |f: &str| {
        std::fs::read_to_string(format!("/proc/thread-self/net/{f}"))
            .is_ok_and(|t| !t.trim().is_empty())
    };
    let (mut v4, mut v6) = (legacy("ip_tables_names"), legacy("ip6_tables_names"));
    for family in nft_table_families()? {
        match family {
            NFPROTO_IPV4 => v4 = true,
            NFPROTO_IPV6 => v6 = true,
            _ => {}
        }
    }
    Some((v4, v6))
}

const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

/// The family of every nf_tables table of this thread's namespace, by a
/// NFT_MSG_GETTABLE dump. None on any error (the caller then asks
/// iptables-save anyway).
fn nft_table_families() -> Option<Vec<u8>> {
    const NFNL_SUBSYS_NFTABLES: u16 = 10;
    const NFT_MSG_NEWTABLE: u16 = 0;
    const NFT_MSG_GETTABLE: u16 = 1;
    let mut families = Vec::new();
    // nfgenmsg: family AF_UNSPEC, version 0, res_id 0.
    super::netlink::dump(
        libc::NETLINK_NETFILTER,
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE,
        &[0u8; 4],
        &mut |ty, msg| {
            if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE
                && let Some(f) = msg.get(16)
            {
                families.push(*f);
            }
        },
    )?;
    Some(families)
}

/// Rules whose counter moved since `before` (all rules with packets when
/// there is no baseline), most packets first.
pub fn moved(before: Option<&[NfRule]>, now: &[NfRule]) -> Vec<(NfRule, u64)> {
    let mut v: Vec<(NfRule, u64)> = now
        .iter()
        .filter_map(|r| {
            let base = before
                .and_then(|b| b.iter().find(|x| x.key() == r.key()))
                .map_or(0, |x| x.packets);
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

    /// The table check agrees with the tools it stands in for: a family is
    /// said to have tables exactly when its iptables-save prints some.
    /// Needs root (nfnetlink answers EPERM otherwise) and the tools.
    #[test]
    fn table_check_agrees_with_iptables_save() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED table_check_agrees_with_iptables_save: not root");
            return;
        }
        let own = Path::new("/proc/self/ns/net");
        let (v4, v6) = tables_in(own).expect("nf_tables dump as root");
        for (tool, said) in [("iptables-save", v4), ("ip6tables-save", v6)] {
            let Ok(out) = Command::new(tool).output() else {
                eprintln!("SKIPPED {tool} check: not installed");
                continue;
            };
            let has = String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.starts_with('*'));
            assert_eq!(said, has, "{tool}");
        }
    }

    const SAVE: &str = "# Generated by iptables-nft-save v1.8.9
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
        let r = parse_save(SAVE);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].table, "filter");
        assert_eq!(r[0].chain, "KUBE-EXTERNAL-SERVICES");
        assert_eq!(r[0].target, "DROP");
        assert_eq!(r[0].packets, 2);
        assert!(r[0].text.contains("has no local endpoints"));
        assert_eq!(r[1].target, "REJECT");
    }

    #[test]
    fn counters_that_moved() {
        let before = parse_save(SAVE);
        let now = parse_save(&SAVE.replace("[2:120] -A KUBE-EXTERNAL", "[5:300] -A KUBE-EXTERNAL"));
        let m = moved(Some(&before), &now);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].1, 3);
        // Without a baseline every rule with packets counts.
        assert_eq!(moved(None, &before).len(), 1);
        assert!(moved(Some(&before), &before).is_empty());
    }
}

/// The tc ingress filters of a device as `tc filter show` describes them:
/// BPF programs (name and id from the kernel) and mirred redirects, minus
/// tracer's own. Used to name what redirected a packet past the IP stack.
pub fn tc_ingress_filters(netns_path: &Path, dev: &str) -> Vec<String> {
    output_or_warn(
        "tc filter show",
        Command::new("nsenter")
            .arg(format!("--net={}", netns_path.display()))
            .args(["tc", "filter", "show", "dev", dev, "ingress"]),
        &format!("tc filters of {dev} are left out"),
    )
    .map(|o| parse_tc_filters(&String::from_utf8_lossy(&o)))
    .unwrap_or_default()
}

pub fn parse_tc_filters(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |k: &str| {
            words
                .iter()
                .position(|w| *w == k)
                .and_then(|i| words.get(i + 1))
        };
        if line.contains(" bpf ")
            && let Some(id) = after("id")
        {
            let name = after("name").copied().unwrap_or("?");
            if !name.starts_with("tracer_") {
                out.push(format!("tc BPF program {name} (id {id})"));
            }
        } else if let Some(i) = line.find("mirred (") {
            let desc = &line[i..];
            out.push(format!(
                "tc action {}",
                desc.split(')').next().unwrap_or(desc).to_string() + ")"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tc_tests {
    use super::*;

    #[test]
    fn names_bpf_programs_and_mirred() {
        let text = "filter protocol all pref 49152 bpf chain 0 \n\
filter protocol all pref 49152 bpf chain 0 handle 0x1 tt1-redir direct-action not_in_hw id 812 name hostroute_redir tag 1a2b jited \n\
filter protocol ip pref 49153 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 terminal flowid not_in_hw \n\
\taction order 1: mirred (Egress Redirect to device eth0) stolen\n\
filter protocol all pref 1 bpf chain 0 handle 0x1 x direct-action id 9 name tracer_tc_ingr tag 00\n";
        assert_eq!(
            parse_tc_filters(text),
            vec![
                "tc BPF program hostroute_redir (id 812)".to_string(),
                "tc action mirred (Egress Redirect to device eth0)".to_string(),
            ]
        );
    }
}
