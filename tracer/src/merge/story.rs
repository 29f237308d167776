//! One path told across nodes: its hops on one clock, the NAT each node
//! learnt, one verdict for the whole path with each node's own beneath,
//! and the nodes it never reached (or that cannot say, their run cut
//! short).

use serde::Serialize;

use super::{Run, VerdictIn, skew::NodeClock, stitch::FlowRef};
use crate::model::event::Tuple;

/// A translation a node saw: the tuple it got, the tuple it sent on.
#[derive(Debug, Clone, Serialize)]
pub struct Nat {
    pub node: String,
    pub from: Tuple,
    pub to: Tuple,
    /// `netfilter` or `bpf`, as the node said.
    pub by: Option<String>,
}

/// One node's part of a path: its flow and its own verdict.
#[derive(Debug, Clone, Serialize)]
pub struct NodePart {
    pub node: String,
    /// The flow's id in that node's run.
    pub flow: u64,
    pub original: Tuple,
    pub translated: Option<Tuple>,
    pub verdict: VerdictIn,
    /// Its first hop, on the reference clock (ns since the epoch).
    pub first_ns: i64,
}

/// The whole path's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct PathVerdict {
    /// The deciding node's kind: the last node on the path whose verdict
    /// is `dropped`, `misrouted` or `delivered`, else the last node's.
    pub kind: String,
    pub reason: String,
    /// The deciding node.
    pub node: String,
    /// Where on that node (its verdict's `where`).
    #[serde(rename = "where")]
    pub where_: String,
    /// The path in one sentence: `forwarded by router, dropped on master
    /// at INPUT by rule "...", never reached worker`.
    pub text: String,
}

/// A node the path was not seen on, and why that says nothing.
#[derive(Debug, Clone, Serialize)]
pub struct Unknown {
    pub node: String,
    pub why: String,
}

/// A hop of the path, on the reference clock.
#[derive(Debug, Clone, Serialize)]
pub struct PathHop {
    pub node: String,
    /// On the reference clock (the node's wall clock plus its
    /// correction), ns since the epoch.
    pub unix_ns: i64,
    /// As the node's own wall clock dated it.
    pub node_unix_ns: i64,
    /// Microseconds since the path's first hop.
    pub t_us: f64,
    pub hook: String,
    pub netns: String,
    pub dev: String,
    pub dir: String,
    pub tuple: Tuple,
    pub detail: String,
}

/// A stitched path.
#[derive(Debug, Clone, Serialize)]
pub struct Path {
    pub id: usize,
    pub proto: String,
    /// The tuple as its first node saw it first.
    pub original: Tuple,
    pub nat: Vec<Nat>,
    pub verdict: PathVerdict,
    /// Each node's part, in the order the path reached them.
    pub nodes: Vec<NodePart>,
    /// Merged nodes whose complete run never saw it.
    pub not_reached: Vec<String>,
    /// Merged nodes whose run was cut short and did not see it: whether
    /// it got there is not known.
    pub unknown: Vec<Unknown>,
    /// The Service a node on the path named for it (its kube-proxy
    /// rules), with that node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<PathService>,
    pub hops: Vec<PathHop>,
}

/// A path's Service and the node whose rules named it.
#[derive(Debug, Clone, Serialize)]
pub struct PathService {
    pub name: String,
    pub kind: String,
    pub node: String,
}

/// Tell path `id` (its flows `group`) with the clocks' corrections.
pub fn tell(id: usize, runs: &[Run], group: &[FlowRef], clocks: &[NodeClock]) -> Path {
    let mut hops = Vec::new();
    let mut parts = Vec::new();
    let mut nat = Vec::new();
    for &(r, f) in group {
        let (run, flow) = (&runs[r], &runs[r].flows[f]);
        let corr = clocks.get(r).map_or(0, |c| c.correction_ns);
        for h in &flow.hops {
            let own = h.unix_ns.unwrap_or_default();
            hops.push(PathHop {
                node: run.node.clone(),
                unix_ns: own + corr,
                node_unix_ns: own,
                t_us: 0.0,
                hook: h.hook.clone(),
                netns: h.netns.clone(),
                dev: h.dev.clone(),
                dir: h.dir.clone(),
                tuple: h.tuple,
                detail: h.detail.clone(),
            });
        }
        if let Some(t) = flow.translated {
            nat.push(Nat {
                node: run.node.clone(),
                from: flow.original,
                to: t,
                by: flow.nat_by.clone(),
            });
        }
        // Its first packet seen at a device: a route lookup or neighbour
        // event the node tied to the flow may be older than the packet.
        let first = flow
            .hops
            .iter()
            .filter(|h| super::stitch::packet_hook(&h.hook))
            .filter_map(|h| h.unix_ns)
            .min()
            .or_else(|| flow.hops.iter().filter_map(|h| h.unix_ns).min());
        parts.push(NodePart {
            node: run.node.clone(),
            flow: flow.id,
            original: flow.original,
            translated: flow.translated,
            verdict: flow.verdict.clone(),
            first_ns: first.unwrap_or(i64::MAX).saturating_add(corr),
        });
    }
    // Stable: a node's own hops keep their order (one clock).
    hops.sort_by_key(|h| h.unix_ns);
    let t0 = hops.first().map_or(0, |h| h.unix_ns);
    for h in &mut hops {
        h.t_us = (h.unix_ns - t0) as f64 / 1000.0;
    }
    parts.sort_by_key(|p| p.first_ns);
    let span = (
        hops.first().map_or(0, |h| h.unix_ns),
        hops.last().map_or(0, |h| h.unix_ns),
    );
    let (not_reached, unknown) = unseen(runs, group, clocks, span);
    let first = &runs[group[0].0].flows[group[0].1];
    let service = group.iter().find_map(|&(r, f)| {
        let s = runs[r].flows[f].service.as_ref()?;
        Some(PathService {
            name: s.name.clone(),
            kind: s.kind.clone(),
            node: runs[r].node.clone(),
        })
    });
    Path {
        id,
        proto: first.proto.clone(),
        original: parts.first().map_or(first.original, |p| p.original),
        verdict: verdict(&parts, &not_reached, &unknown),
        nat,
        nodes: parts,
        not_reached,
        unknown,
        service,
        hops,
    }
}

/// The merged nodes that did not see the path: complete runs that were
/// tracing while it went (never reached), runs cut short or tracing at
/// another time (not known). `span`: the path's first and last hop, on the
/// reference clock.
fn unseen(
    runs: &[Run],
    group: &[FlowRef],
    clocks: &[NodeClock],
    span: (i64, i64),
) -> (Vec<String>, Vec<Unknown>) {
    let mut never = Vec::new();
    let mut unknown = Vec::new();
    for (r, run) in runs.iter().enumerate() {
        if group.iter().any(|&(g, _)| g == r) {
            continue;
        }
        let corr = clocks.get(r).map_or(0, |c| c.correction_ns);
        let window = run.traced.map(|(a, b)| (a + corr, b + corr));
        if let Some((from, to)) = window.filter(|&(a, b)| span.0 < a || span.1 > b) {
            unknown.push(Unknown {
                node: run.node.clone(),
                why: format!(
                    "{} was not tracing all the while the path went (it traced {:.3} s to {:.3} s of the path's first hop): not known whether the path got there",
                    run.node,
                    (from - span.0) as f64 / 1e9,
                    (to - span.0) as f64 / 1e9
                ),
            });
        } else if run.complete {
            never.push(run.node.clone());
        } else {
            unknown.push(Unknown {
                node: run.node.clone(),
                why: format!(
                    "{}'s run was cut short: not known whether the path got there",
                    run.node
                ),
            });
        }
    }
    (never, unknown)
}

fn verdict(parts: &[NodePart], never: &[String], unknown: &[Unknown]) -> PathVerdict {
    let decisive = parts
        .iter()
        .rev()
        .find(|p| {
            matches!(
                p.verdict.kind.as_str(),
                "dropped" | "misrouted" | "delivered"
            )
        })
        .or(parts.last())
        .expect("a path has a flow");
    let mut said: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| part_text(p, i + 1 == parts.len()))
        .collect();
    said.extend(never.iter().map(|n| format!("never reached {n}")));
    // Why not is in `unknown` (cut short, or not tracing then).
    said.extend(
        unknown
            .iter()
            .map(|u| format!("not known whether it reached {}", u.node)),
    );
    PathVerdict {
        kind: decisive.verdict.kind.clone(),
        reason: decisive.verdict.reason.clone(),
        node: decisive.node.clone(),
        where_: decisive.verdict.where_.clone(),
        text: said.join(", "),
    }
}

/// One node's part in the path's sentence (`last`: no node saw the path
/// after it).
fn part_text(p: &NodePart, last: bool) -> String {
    let v = &p.verdict;
    let n = &p.node;
    match v.kind.as_str() {
        "forwarded" => format!("forwarded by {n}"),
        "delivered" => format!("delivered on {n}"),
        "dropped" => match drop_place(v) {
            Some(place) => format!("dropped on {n} {place}"),
            None => format!("dropped on {n}: {} ({})", v.reason, v.where_),
        },
        // A later node saw it: this one sent it on (its own verdict only
        // saw no reply come back).
        "no_reply" if !last => format!("sent on by {n} ({})", v.where_),
        "no_reply" => format!("no reply seen on {n}"),
        kind => format!("{kind} on {n}: {} ({})", v.reason, v.where_),
    }
}

/// `at INPUT by rule "..."`, from a netfilter drop's evidence.
fn drop_place(v: &VerdictIn) -> Option<String> {
    let field = |e: &serde_json::Value, k: &str| {
        e.get(k)
            .and_then(|x| x.as_str())
            .map(str::to_string)
            .filter(|s| !s.is_empty())
    };
    let of = |kinds: &[&str]| {
        v.evidence.iter().find(|e| {
            kinds
                .iter()
                .any(|k| e.get("kind").and_then(|x| x.as_str()) == Some(k))
        })
    };
    // nf_hook_slow's word or the path's; else the traced rule's chain's.
    let hook = of(&["nf_hook_drop", "nf_hook_inferred"])
        .or_else(|| of(&["nf_rule_traced"]))
        .and_then(|e| field(e, "hook"))
        .map(|h| h.rsplit(' ').next().unwrap_or_default().to_string());
    let rule = of(&[
        "nf_rule_traced",
        "no_local_endpoints_rule_moved",
        "nf_rule_moved",
    ])
    .and_then(|e| {
        let rule = field(e, "rule")?;
        Some(match field(e, "chain") {
            Some(c) => format!("by rule \"{rule}\" (chain {c})"),
            None => format!("by rule \"{rule}\""),
        })
    });
    match (hook, rule) {
        (None, None) => None,
        (Some(h), None) => Some(format!("at {h}: {}", v.reason)),
        (None, Some(r)) => Some(r),
        (Some(h), Some(r)) => Some(format!("at {h} {r}")),
    }
}
