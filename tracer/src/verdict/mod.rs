//! Verdicts: small rules over a flow's hop timeline, tried in order.

pub mod bpf_drop;
pub mod bpf_nat;
pub mod bpf_path;
pub mod bridge;
pub mod cgroup_skb;
pub mod checksum;
pub mod ct_state;
pub mod evidence;
pub mod explains;
pub mod fragments;
pub mod hints;
pub mod kube;
pub mod no_protocol;
pub mod node_facts;
pub mod qdisc_drop;
pub mod reason;
pub mod routing_loop;
pub mod rules;
pub mod service;
pub mod sock_lb;
pub mod source_addr;
pub mod sysctl;
pub mod tunnel;
pub mod veth;
pub mod xdp_moved;
pub mod xdp_native;
pub mod xfrm_policy;

pub use evidence::{Endpoint, Evidence, EvidenceKind, Item};
pub use reason::{DropReason, Found, Reason};

use std::{collections::HashMap, net::IpAddr};

use serde::Serialize;

use crate::{
    model::flow::Flow,
    model::hop::{HopData, ReasonFrom},
    model::inferred,
    model::names::func_of,
    node::conntrack::ConntrackTable,
    node::link::LinkConf,
    node::netfilter::NfRule,
    node::nftrace::{NfTraced, TracedGoto},
    node::route::Routing,
    node::services::ServiceAddr,
    node::sockets::{Bound, ListenStats},
};

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    PartialOrd,
    Ord,
    schemars::JsonSchema,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Kind {
    Delivered,
    Forwarded,
    Dropped,
    Misrouted,
    NoReply,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Verdict {
    pub kind: Kind,
    pub reason: Reason,
    /// `reason` was inferred from the drop location: this kernel's
    /// skb:kfree_skb gives none (before 5.17).
    pub reason_inferred: bool,
    #[serde(rename = "where")]
    pub where_: String,
    pub hint: String,
    pub netns: String,
    pub dev: Option<String>,
    pub incomplete: bool,
    /// Facts that led to the verdict, collapsed (see [`evidence::collapse`]).
    pub evidence: Vec<Item>,
    /// True when the fate is settled (a drop, a delivery, a misroute); false
    /// when more events could still change it (forwarded, no reply yet).
    #[serde(skip)]
    pub settled: bool,
    /// The verdict of each DNS query of the flow, judged on its own
    /// packets (model::dns_flow), in the order of `flow.dns`; rendered
    /// with the queries, not here.
    #[serde(skip)]
    pub queries: Vec<QueryVerdict>,
    /// The Service the flow is for, where kube-proxy's rules on its path
    /// name it; rendered on the flow, not here.
    #[serde(skip)]
    pub service: Option<service::FlowService>,
}

/// What became of one DNS query.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct QueryVerdict {
    pub kind: Kind,
    pub reason: Reason,
    #[serde(rename = "where")]
    pub where_: String,
}

impl Verdict {
    /// Add a fact (seen once).
    pub fn add(&mut self, fact: Evidence) {
        self.evidence.push(Item::once(fact));
    }

    pub fn add_all(&mut self, facts: impl IntoIterator<Item = Evidence>) {
        self.evidence.extend(facts.into_iter().map(Item::once));
    }

    /// Is there a fact of this kind?
    pub fn has(&self, kind: EvidenceKind) -> bool {
        self.evidence.iter().any(|e| e.fact.kind() == kind)
    }
}

pub use crate::node::bpf_progs::{AttachedProgram, CgroupPrograms, CgroupSkb};
pub use crate::node::netns::IfAddr;
pub use crate::node::qdisc::Qdisc;
pub use crate::node::xfrm::Xfrm;

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
    /// The BPF programs of others on device `dev` of that namespace (tc
    /// hooks both ways, XDP), read where a packet was dropped at a tc or
    /// XDP hook (bpf_drop.rs).
    fn dev_programs(&self, _netns: u32, _dev: &str) -> Vec<AttachedProgram> {
        Vec::new()
    }
    /// The cgroup with this id and the socket-address programs a call of
    /// its tasks runs through, read for a socket call a program rewrote
    /// (sock_lb.rs).
    fn cgroup_programs(&self, _id: u64) -> Option<CgroupPrograms> {
        None
    }
    /// The node's cgroup_skb programs, and the paths of the cgroups `ids`
    /// (sockets' cgroups), read for a drop one of them may have made
    /// (cgroup_skb.rs).
    fn cgroup_skb(&self, _ids: &[u64]) -> CgroupSkb {
        CgroupSkb::default()
    }
    /// The queueing disciplines of a device where packets were dropped
    /// by one (qdisc.rs).
    fn qdiscs(&self, _netns: u32, _dev: &str, _ifindex: u32) -> Vec<Qdisc> {
        Vec::new()
    }
    /// The IPsec policies and states of a namespace where an XFRM policy
    /// dropped (xfrm.rs).
    fn xfrm(&self, _netns: u32) -> Option<Xfrm> {
        None
    }
    /// net.ipv4.ipfrag_time of a namespace where a reassembly timed out
    /// (fragments.rs).
    fn frag_time(&self, _netns: u32) -> Option<u32> {
        None
    }
    /// The ifindex device map `map_id` holds at `key` (node/devmap.rs),
    /// read for an XDP redirect through it (bpf_drop.rs xdp_target).
    fn devmap_target(&self, _map_id: u32, _key: u32) -> Option<u32> {
        None
    }
    /// Facts about a destination address seen while tracing (VIP owner
    /// changes, several MACs answering for it).
    fn dst_facts(&self, _dst: IpAddr) -> Vec<Evidence> {
        Vec::new()
    }
    /// The IPVS table of that namespace (empty without IPVS).
    fn ipvs(&self, _netns: u32) -> &[crate::node::ipvs::VirtualService] {
        &[]
    }
    /// Its devices' MTU and sysctls (read where a packet was dropped).
    fn links(&self, _netns: u32) -> &[LinkConf] {
        &[]
    }
    /// The other end of the device a hop was on, when it is a veth whose
    /// peer's namespace was read (run/facts.rs reads it for a drop's
    /// device): a pod's eth0 and its host-side device.
    fn other_end(&self, at: &crate::model::hop::Hop) -> Option<OtherEnd<'_>> {
        let peer = self
            .links(at.netns_inode)
            .iter()
            .find(|l| l.dev == *at.dev)?
            .peer
            .as_ref()?;
        let (ino, netns) = match peer.netnsid {
            None => (at.netns_inode, at.netns.to_string()),
            Some(_) => (
                peer.netns?,
                peer.netns_name
                    .clone()
                    .unwrap_or_else(|| at.netns.to_string()),
            ),
        };
        let links = self.links(ino);
        let link = links.iter().find(|l| l.ifindex == peer.ifindex)?;
        Some(OtherEnd { netns, link, links })
    }
    /// Its TCP listeners and UDP sockets (read where a packet was
    /// dropped).
    fn bound(&self, _netns: u32) -> &[Bound] {
        &[]
    }
    /// Followed packets nf_tables tracing saw a rule or policy drop there,
    /// their rules named.
    fn nf_traced(&self, _netns: u32) -> &[NfTraced] {
        &[]
    }
    /// The gotos nf_tables tracing saw followed packets take there.
    fn nf_gotos(&self, _netns: u32) -> &[TracedGoto] {
        &[]
    }

    /// Its conntrack table's size and counters (read where a packet was
    /// dropped by netfilter).
    fn conntrack(&self, _netns: u32) -> Option<&ConntrackTable> {
        None
    }
    /// Its listen-queue counters (read with its sockets).
    fn listen_stats(&self, _netns: u32) -> Option<ListenStats> {
        None
    }
    /// Its routing rules and table sizes (read where a packet found no
    /// route).
    fn routing(&self, _netns: u32) -> Option<&Routing> {
        None
    }
    /// The addresses and ports kube-proxy serves Services on there.
    fn services(&self, _netns: u32) -> &[ServiceAddr] {
        &[]
    }
}

/// The other end of a veth ([`Env::other_end`]): the device, its
/// namespace and that namespace's links.
pub struct OtherEnd<'a> {
    /// Its namespace's name (the first end's when the veth is within one).
    pub netns: String,
    pub link: &'a LinkConf,
    pub links: &'a [LinkConf],
}

/// A fixed inventory (tests, and a snapshot taken by the loader).
#[derive(Debug, Default, Clone)]
pub struct Inventory {
    pub by_netns: HashMap<u32, Vec<IfAddr>>,
    pub nf: HashMap<u32, Vec<(NfRule, u64)>>,
    pub tc: HashMap<(u32, String), Vec<String>>,
    pub dev_programs: HashMap<(u32, String), Vec<AttachedProgram>>,
    pub cgroups: HashMap<u64, CgroupPrograms>,
    pub cgroup_skb: Option<CgroupSkb>,
    pub qdiscs: HashMap<(u32, String), Vec<Qdisc>>,
    pub xfrm: HashMap<u32, Xfrm>,
    pub frag_time: HashMap<u32, u32>,
    pub devmaps: HashMap<(u32, u32), u32>,
    pub facts: HashMap<IpAddr, Vec<Evidence>>,
    pub ipvs: HashMap<u32, Vec<crate::node::ipvs::VirtualService>>,
    pub links: HashMap<u32, Vec<LinkConf>>,
    pub nftrace: HashMap<u32, Vec<NfTraced>>,
    pub nf_gotos: HashMap<u32, Vec<TracedGoto>>,
    pub bound: HashMap<u32, Vec<Bound>>,
    pub conntrack: HashMap<u32, ConntrackTable>,
    pub listen: HashMap<u32, ListenStats>,
    pub routing: HashMap<u32, Routing>,
    pub services: HashMap<u32, Vec<ServiceAddr>>,
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

    fn dev_programs(&self, netns: u32, dev: &str) -> Vec<AttachedProgram> {
        self.dev_programs
            .get(&(netns, dev.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    fn cgroup_programs(&self, id: u64) -> Option<CgroupPrograms> {
        self.cgroups.get(&id).cloned()
    }

    fn cgroup_skb(&self, _ids: &[u64]) -> CgroupSkb {
        self.cgroup_skb.clone().unwrap_or_default()
    }

    fn qdiscs(&self, netns: u32, dev: &str, _ifindex: u32) -> Vec<Qdisc> {
        self.qdiscs
            .get(&(netns, dev.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    fn xfrm(&self, netns: u32) -> Option<Xfrm> {
        self.xfrm.get(&netns).cloned()
    }

    fn frag_time(&self, netns: u32) -> Option<u32> {
        self.frag_time.get(&netns).copied()
    }

    fn devmap_target(&self, map_id: u32, key: u32) -> Option<u32> {
        self.devmaps.get(&(map_id, key)).copied()
    }

    fn dst_facts(&self, dst: IpAddr) -> Vec<Evidence> {
        self.facts.get(&dst).cloned().unwrap_or_default()
    }

    fn ipvs(&self, netns: u32) -> &[crate::node::ipvs::VirtualService] {
        self.ipvs.get(&netns).map(Vec::as_slice).unwrap_or(&[])
    }

    fn links(&self, netns: u32) -> &[LinkConf] {
        self.links.get(&netns).map(Vec::as_slice).unwrap_or(&[])
    }

    fn bound(&self, netns: u32) -> &[Bound] {
        self.bound.get(&netns).map(Vec::as_slice).unwrap_or(&[])
    }

    fn nf_traced(&self, netns: u32) -> &[NfTraced] {
        self.nftrace.get(&netns).map(Vec::as_slice).unwrap_or(&[])
    }

    fn nf_gotos(&self, netns: u32) -> &[TracedGoto] {
        self.nf_gotos.get(&netns).map(Vec::as_slice).unwrap_or(&[])
    }

    fn conntrack(&self, netns: u32) -> Option<&ConntrackTable> {
        self.conntrack.get(&netns)
    }

    fn listen_stats(&self, netns: u32) -> Option<ListenStats> {
        self.listen.get(&netns).copied()
    }

    fn routing(&self, netns: u32) -> Option<&Routing> {
        self.routing.get(&netns)
    }

    fn services(&self, netns: u32) -> &[ServiceAddr] {
        self.services.get(&netns).map(Vec::as_slice).unwrap_or(&[])
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
        "ipvs_schedule" | "ipvs_conn" | "ipvs_xmit" => v.reason == Found::IpvsNoDestination,
        // nftrace named the rule: what they would add is already there.
        "nf_verdict" | "nft_chain" | "ipt_table" => {
            v.reason == DropReason::NetfilterDrop && !v.has(EvidenceKind::NfRuleTraced)
        }
        // The fib tracepoint saw fib_validate_source()'s lookup: what the
        // hook would add is already there.
        "rp_filter" => v.reason == DropReason::IpRpfilter && !v.has(EvidenceKind::RpFilterMismatch),
        _ => false,
    }
}

/// On a kernel without drop reasons, a dropped verdict says where its
/// reason came from: inferred from the location of the drop it names, or,
/// when that told none, which reasons the location may stand for.
fn reason_origin(flow: &Flow, v: &mut Verdict) {
    // Dropped, and not already inferred by the rule (with a node fact).
    if v.kind != Kind::Dropped || v.reason_inferred {
        return;
    }
    let drops = || {
        flow.hops.iter().filter_map(|h| match &h.data {
            HopData::Drop(d) if !d.reason_from.is_kernel() => Some(d),
            _ => None,
        })
    };
    let Some(d) = drops()
        .find(|d| v.reason == d.reason)
        .or_else(|| drops().next())
    else {
        return;
    };
    let location = func_of(&d.location).to_string();
    let inferred = matches!(d.reason_from, ReasonFrom::Location | ReasonFrom::Site);
    let fact = if inferred && v.reason == d.reason {
        v.reason_inferred = true;
        Evidence::DropReasonInferred {
            location,
            reason: Some(d.reason.clone()),
            one_of: Vec::new(),
            site_only: d.reason_from == ReasonFrom::Site,
        }
    } else if d.reason_from == ReasonFrom::Unknown {
        let one_of = inferred::row(&location)
            .map(|r| r.reasons.to_vec())
            .unwrap_or_default();
        Evidence::DropReasonInferred {
            location,
            reason: None,
            one_of,
            site_only: false,
        }
    } else {
        return;
    };
    v.add(fact);
}

/// The first rule's verdict, its reason's origin said: what decides a
/// verdict's kind, reason and where (the rest of [`evaluate`] adds facts
/// and the hint).
fn decide(flow: &Flow, env: &dyn Env) -> Verdict {
    let mut v = rules::RULES
        .iter()
        .find_map(|rule| rule(flow, env))
        .unwrap_or_else(|| rules::fallback(flow));
    reason_origin(flow, &mut v);
    v
}

pub fn evaluate(flow: &Flow, env: &dyn Env, c: &Completeness) -> Verdict {
    let mut v = decide(flow, env);
    if let Some(e) = sock_lb::rewrite(flow, env) {
        v.add(e);
    }
    if let Some(e) = bpf_nat::rewrite(flow, env) {
        v.add(e);
    }
    if let Some(e) = bpf_path::path(flow, env) {
        v.add(e);
    }
    if let Some(e) = tunnel::encapsulation(flow) {
        v.add(e);
    }
    if let Some((prefix, e)) = ct_state::kept(flow, &v, env) {
        if !prefix.is_empty() {
            v.where_ = format!("{prefix}; {}", v.where_);
        }
        v.add(e);
    }
    for dst in flow.dsts() {
        v.add_all(env.dst_facts(dst));
    }
    if let Some(e) = kube::routed(flow, env) {
        v.add(e);
    }
    v.service = service::of_flow(flow, env);
    v.hint = hints::hint(v.kind, &v.reason, &v.evidence);
    if c.lost_events > 0 {
        v.incomplete = true;
        v.add(Evidence::EventsLost {
            events: c.lost_events,
        });
    }
    if c.map_failures > 0 {
        v.incomplete = true;
        v.add(Evidence::MapInsertsFailed {
            inserts: c.map_failures,
        });
    }
    if !c.missing_hooks.is_empty() {
        v.incomplete = true;
        v.add(Evidence::HooksUnavailable {
            hooks: c.missing_hooks.clone(),
        });
    }
    for (hook, why) in &c.missing_func_hooks {
        if func_hook_feeds(hook, &v) {
            // Without the IPVS hooks the IPVS decision itself is unseen;
            // the netfilter ones only add detail the verdict infers.
            if hook.starts_with("ipvs") {
                v.incomplete = true;
            }
            v.add(Evidence::FuncHookUnavailable {
                hook: hook.clone(),
                why: why.clone(),
            });
        }
    }
    if flow.hops_truncated > 0 {
        v.add(Evidence::HopsNotKept {
            hops: flow.hops_truncated,
        });
    }
    if flow.counted > 0 {
        v.add(Evidence::CountedInKernel {
            passages: flow.counted,
        });
    }
    v.evidence = evidence::collapse(std::mem::take(&mut v.evidence));
    v.queries = query_verdicts(flow, env);
    v
}

/// Each DNS query of the flow judged as its own flow (its packets only):
/// kind, reason and where, without the facts and hint a query does not
/// show.
fn query_verdicts(flow: &Flow, env: &dyn Env) -> Vec<QueryVerdict> {
    let n = flow.dns.as_deref().map_or(0, |d| d.queries.len());
    (0..n)
        .filter_map(|i| {
            let sub = crate::model::dns_flow::query_flow(flow, i)?;
            let v = decide(&sub, env);
            Some(QueryVerdict {
                kind: v.kind,
                reason: v.reason,
                where_: v.where_,
            })
        })
        .collect()
}

#[cfg(test)]
mod collapse_tests {
    use super::{Evidence, Item, evidence::collapse};

    fn lost(n: u64) -> Item {
        Item::once(Evidence::EventsLost { events: n })
    }

    #[test]
    fn repeated_evidence_is_collapsed() {
        let out = collapse(vec![lost(1), lost(2), lost(1), lost(3), lost(1)]);
        assert_eq!(
            out,
            vec![
                Item {
                    fact: Evidence::EventsLost { events: 1 },
                    count: 3
                },
                lost(2),
                lost(3)
            ]
        );
        assert_eq!(
            out[0].to_string(),
            "1 events lost (ring buffer full): timeline may be incomplete (3 times)"
        );
        assert_eq!(out[1].to_string(), out[1].fact.to_string());
        let j = serde_json::to_value(&out[0]).unwrap();
        assert_eq!(j["kind"], "events_lost");
        assert_eq!(j["count"], 3);
        assert_eq!(j["text"], out[0].to_string());
        // Seen once: no count field.
        assert!(
            serde_json::to_value(&out[1])
                .unwrap()
                .get("count")
                .is_none()
        );
        assert_eq!(collapse(vec![lost(7)]), vec![lost(7)]);
    }
}
