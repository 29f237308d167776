//! Verdicts: small rules over a flow's hop timeline, tried in order.

pub mod hints;
pub mod rules;

use std::{collections::HashMap, net::IpAddr};

use serde::Serialize;

use crate::{model::flow::Flow, node::netfilter::NfRule};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Delivered,
    Forwarded,
    Dropped,
    Misrouted,
    NoReply,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Delivered => "delivered",
            Kind::Forwarded => "forwarded",
            Kind::Dropped => "dropped",
            Kind::Misrouted => "misrouted",
            Kind::NoReply => "no_reply",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub kind: Kind,
    pub reason: String,
    #[serde(rename = "where")]
    pub where_: String,
    pub hint: String,
    pub netns: String,
    pub dev: Option<String>,
    pub incomplete: bool,
    pub evidence: Vec<String>,
    /// True when the fate is settled (a drop, a delivery, a misroute); false
    /// when more events could still change it (forwarded, no reply yet).
    #[serde(skip)]
    pub settled: bool,
}

/// An address on an interface of a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct IfAddr {
    pub dev: String,
    pub addr: IpAddr,
    pub prefix: u8,
}

/// What the rules may know about the node beyond the events.
pub trait Env {
    /// Addresses of the namespace with this inode, when it can be read.
    fn addrs(&self, netns: u32) -> Option<&[IfAddr]>;
    /// DROP/REJECT netfilter rules of that namespace whose packet counters
    /// moved while tracing, with by how much.
    fn nf_moved(&self, _netns: u32) -> &[(NfRule, u64)] {
        &[]
    }
    /// Descriptions of the tc ingress filters on `dev` (not tracer's own).
    fn tc_filters(&self, _netns: u32, _dev: &str) -> Vec<String> {
        Vec::new()
    }
    /// Facts about a destination address seen while tracing (VIP owner
    /// changes, several MACs answering for it).
    fn dst_facts(&self, _dst: IpAddr) -> Vec<String> {
        Vec::new()
    }
    /// The IPVS table of that namespace (empty without IPVS).
    fn ipvs(&self, _netns: u32) -> &[crate::node::ipvs::VirtualService] {
        &[]
    }
}

/// A fixed inventory (tests, and a snapshot taken by the loader).
#[derive(Debug, Default, Clone)]
pub struct Inventory {
    pub by_netns: HashMap<u32, Vec<IfAddr>>,
    pub nf: HashMap<u32, Vec<(NfRule, u64)>>,
    pub tc: HashMap<(u32, String), Vec<String>>,
    pub facts: HashMap<IpAddr, Vec<String>>,
    pub ipvs: HashMap<u32, Vec<crate::node::ipvs::VirtualService>>,
}

impl Env for Inventory {
    fn addrs(&self, netns: u32) -> Option<&[IfAddr]> {
        self.by_netns.get(&netns).map(Vec::as_slice)
    }

    fn nf_moved(&self, netns: u32) -> &[(NfRule, u64)] {
        self.nf.get(&netns).map(Vec::as_slice).unwrap_or(&[])
    }

    fn tc_filters(&self, netns: u32, dev: &str) -> Vec<String> {
        self.tc
            .get(&(netns, dev.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    fn dst_facts(&self, dst: IpAddr) -> Vec<String> {
        self.facts.get(&dst).cloned().unwrap_or_default()
    }

    fn ipvs(&self, netns: u32) -> &[crate::node::ipvs::VirtualService] {
        self.ipvs.get(&netns).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// Run-wide facts that make a verdict incomplete.
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize)]
pub struct Completeness {
    pub lost_events: u64,
    pub missing_hooks: Vec<String>,
    /// Function hooks (not core) unavailable, with why: they mark only the
    /// verdicts they feed.
    pub missing_func_hooks: Vec<(String, String)>,
    /// Kernel map inserts that failed (tracked skbs, NAT tuples): packets
    /// that could not be followed.
    pub map_failures: u64,
}

/// Does a verdict depend on what function hook `hook` would have said?
/// IPVS hooks feed IPVS verdicts; the netfilter ones feed netfilter drops
/// (whose hook is then inferred, whose chain comes from rule counters).
pub fn func_hook_feeds(hook: &str, v: &Verdict) -> bool {
    match hook {
        "ipvs_schedule" | "ipvs_conn" | "ipvs_xmit" => v.reason.starts_with("ipvs"),
        "nf_verdict" | "nft_chain" | "ipt_table" => v.reason == "NETFILTER_DROP",
        "rp_filter" => v.reason == "IP_RPFILTER",
        _ => false,
    }
}

pub fn evaluate(flow: &Flow, env: &dyn Env, c: &Completeness) -> Verdict {
    let mut v = rules::RULES
        .iter()
        .find_map(|rule| rule(flow, env))
        .unwrap_or_else(|| rules::fallback(flow));
    for dst in flow.dsts() {
        v.evidence.extend(env.dst_facts(dst));
    }
    v.hint = hints::hint(v.kind, &v.reason, &v.where_, &v.evidence);
    if c.lost_events > 0 {
        v.incomplete = true;
        v.evidence.push(format!(
            "{} events lost (ring buffer full): timeline may be incomplete",
            c.lost_events
        ));
    }
    if c.map_failures > 0 {
        v.incomplete = true;
        v.evidence.push(format!(
            "{} kernel map inserts failed (maps full): some packets could not be followed",
            c.map_failures
        ));
    }
    if !c.missing_hooks.is_empty() {
        v.incomplete = true;
        v.evidence
            .push(format!("hooks unavailable: {}", c.missing_hooks.join(", ")));
    }
    for (hook, why) in &c.missing_func_hooks {
        if func_hook_feeds(hook, &v) {
            // Without the IPVS hooks the IPVS decision itself is unseen;
            // the netfilter ones only add detail the verdict infers.
            if hook.starts_with("ipvs") {
                v.incomplete = true;
            }
            v.evidence.push(format!(
                "hook {hook} unavailable ({why}): its evidence is missing"
            ));
        }
    }
    if flow.hops_truncated > 0 {
        v.evidence
            .push(format!("{} further hops not kept", flow.hops_truncated));
    }
    if flow.counted > 0 {
        v.evidence.push(format!(
            "{} more hook passages were counted in the kernel, not recorded one by one",
            flow.counted
        ));
    }
    v.evidence = collapse(std::mem::take(&mut v.evidence));
    v
}

/// The same line from several hops (one per recorded drop of a bulk flow)
/// once, with how many times, in order of first appearance.
fn collapse(lines: Vec<String>) -> Vec<String> {
    let mut out: Vec<(String, usize)> = Vec::with_capacity(lines.len());
    for l in lines {
        match out.iter_mut().find(|(o, _)| *o == l) {
            Some((_, n)) => *n += 1,
            None => out.push((l, 1)),
        }
    }
    out.into_iter()
        .map(|(l, n)| if n > 1 { format!("{l} ({n} times)") } else { l })
        .collect()
}

#[cfg(test)]
mod collapse_tests {
    #[test]
    fn repeated_evidence_is_collapsed() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            super::collapse(v(&["a", "b", "a", "c", "a"])),
            v(&["a (3 times)", "b", "c"])
        );
        assert_eq!(super::collapse(v(&["x"])), v(&["x"]));
    }
}
