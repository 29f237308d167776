//! Clock skew between nodes, from the packets that crossed between them.
//!
//! Each node dates its hops by its own wall clock. A packet that left node
//! A (a tc egress or xmit hop) and came in on node B (tc ingress or
//! netif_receive) with the same tuple was received after it was sent: B's
//! correction minus A's is at least A's sending minus B's receipt. For
//! each tuple and direction, B's first receipt is compared with when A's
//! first packet left A (the end of its passage through A's namespaces:
//! whatever packet B received first left A no earlier), so each crossing
//! gives a bound. Crossings both
//! ways (a request one way, its reply back) bound the difference on both
//! sides: the estimate is the middle (a path as fast both ways), give or
//! take half the width. Crossings one way only give the least correction
//! that puts every receipt after its sending (none when the clocks already
//! agree with what was seen): a bound, said as such.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::{Run, stitch::FlowRef};
use crate::model::event::Tuple;

/// One node's clock against the reference (the first run given).
#[derive(Debug, Clone, Serialize)]
pub struct NodeClock {
    pub node: String,
    pub reference: bool,
    /// Added to this node's wall-clock times to put them on the
    /// reference's clock, ns.
    pub correction_ns: i64,
    /// How far this node's wall clock is ahead of the reference's, ms
    /// (minus the correction).
    pub skew_ms: f64,
    /// `reference`, `two_way` (crossings both ways: the middle of the
    /// bounds), `one_way` (bounded on one side only: the least correction
    /// that keeps every receipt after its sending), `none` (no packet seen
    /// crossing to or from the other nodes: not corrected).
    pub basis: &'static str,
    /// The bounds the crossings set on the correction, ns (null:
    /// unbounded on that side).
    pub min_ns: Option<i64>,
    pub max_ns: Option<i64>,
    /// Half the bounds' width plus the clocks' own reading uncertainty,
    /// ns; null when bounded on one side only.
    pub uncertainty_ns: Option<u64>,
    /// This node's own uncertainty of reading its clocks (its `clock`).
    pub read_uncertainty_ns: u64,
    /// The node it was bounded against, and by how many crossings.
    pub against: Option<String>,
    pub crossings: usize,
    /// The bounds contradict each other (the lower above the upper):
    /// clocks that moved during the runs, or tuples reused.
    pub inconsistent: bool,
}

fn is_ingress(hook: &str) -> bool {
    matches!(hook, "tc_ingress" | "netif_receive")
}

fn is_egress(hook: &str) -> bool {
    matches!(hook, "tc_egress" | "xmit")
}

/// Per node (run), per tuple and direction: the first receipt and the
/// first sending, wall clock ns.
/// A node's first receipt and first sending of a tuple in one direction;
/// `sent`: when the first packet left the node (see [`exit_time`]).
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    first_in: Option<i64>,
    first_out: Option<i64>,
    sent: Option<i64>,
}

/// A tuple in one direction: (protocol, tuple, reply).
type Key = (String, Tuple, bool);

type Firsts = HashMap<Key, Seen>;

/// A packet's passage at a device: (time, egress, netns, device).
type Passage<'a> = (i64, bool, &'a str, &'a str);

/// When the first packet left the node: from its first sending, the chain
/// of its passages through the node's namespaces (sent from one namespace,
/// received in another, sent on by that one; the same device's two hooks
/// count as one passage), up to its last sending. The chain ends where a
/// hop cannot be the same packet's next passage inside the node: it came
/// back in to the namespace it left (from another node), or a new packet
/// starts. `hops`: (time, egress, netns, dev), in time order.
fn exit_time(hops: &[Passage]) -> Option<i64> {
    let start = hops.iter().position(|h| h.1)?;
    let mut prev = hops[start];
    let mut out = prev.0;
    for &h in &hops[start + 1..] {
        let next = match (prev.1, h.1) {
            (true, false) => h.2 != prev.2,
            (false, true) => h.2 == prev.2,
            _ => h.2 == prev.2 && h.3 == prev.3,
        };
        if !next {
            break;
        }
        if h.1 {
            out = h.0;
        }
        prev = h;
    }
    Some(out)
}

fn firsts(runs: &[Run], group: &[FlowRef]) -> BTreeMap<usize, Firsts> {
    let mut passages: BTreeMap<(usize, Key), Vec<Passage>> = BTreeMap::new();
    for &(r, f) in group {
        let flow = &runs[r].flows[f];
        for h in &flow.hops {
            let Some(t) = h.unix_ns else { continue };
            let (ingress, egress) = (is_ingress(&h.hook), is_egress(&h.hook));
            if ingress || egress {
                let key = (flow.proto.clone(), h.tuple, h.dir == "reply");
                passages
                    .entry((r, key))
                    .or_default()
                    .push((t, egress, &h.netns, &h.dev));
            }
        }
    }
    let mut out: BTreeMap<usize, Firsts> = BTreeMap::new();
    for ((r, key), mut hops) in passages {
        hops.sort_by_key(|h| h.0);
        let seen = Seen {
            first_in: hops.iter().find(|h| !h.1).map(|h| h.0),
            first_out: hops.iter().find(|h| h.1).map(|h| h.0),
            sent: exit_time(&hops),
        };
        out.entry(r).or_default().insert(key, seen);
    }
    out
}

/// Lower bounds on `corr[b] - corr[a]` from every crossing a -> b, with
/// their count: `(a, b) -> (bound, crossings)`.
pub type Bounds = BTreeMap<(usize, usize), (i64, usize)>;

/// The crossings of one path: for each tuple and direction, the one node
/// that sent it first (it left before it came in, or never came in) and
/// every node that received it. A tuple sent first by two nodes is left
/// out (which one the receiver got it from is not known).
pub fn crossings(runs: &[Run], group: &[FlowRef], bounds: &mut Bounds) {
    let by_node = firsts(runs, group);
    let mut keys: Vec<&Key> = by_node.values().flat_map(|m| m.keys()).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let seen: Vec<(usize, Seen)> = by_node
            .iter()
            .filter_map(|(n, m)| m.get(key).map(|s| (*n, *s)))
            .collect();
        let origins: Vec<(usize, i64)> = seen
            .iter()
            .filter_map(|&(n, s)| match (s.first_in, s.first_out) {
                (None, Some(_)) => Some((n, s.sent?)),
                (Some(i), Some(o)) if o < i => Some((n, s.sent?)),
                _ => None,
            })
            .collect();
        let [(a, sent)] = origins[..] else { continue };
        for &(b, Seen { first_in: recv, .. }) in &seen {
            let Some(recv) = recv.filter(|_| b != a) else {
                continue;
            };
            let e = bounds.entry((a, b)).or_insert((i64::MIN, 0));
            e.0 = e.0.max(sent - recv);
            e.1 += 1;
        }
    }
}

/// Each merged run's clock against the first's, from every path's
/// crossings.
pub fn estimate(runs: &[Run], groups: &[Vec<FlowRef>]) -> Vec<NodeClock> {
    let mut bounds = Bounds::new();
    for g in groups {
        crossings(runs, g, &mut bounds);
    }
    let mut clocks: Vec<Option<NodeClock>> = vec![None; runs.len()];
    if runs.is_empty() {
        return Vec::new();
    }
    clocks[0] = Some(NodeClock {
        basis: "reference",
        reference: true,
        min_ns: Some(0),
        max_ns: Some(0),
        uncertainty_ns: Some(0),
        ..unbounded(&runs[0])
    });
    // Breadth first from the reference, in run order.
    let mut queue = vec![0];
    while let Some(a) = queue.pop() {
        let base = clocks[a].clone().expect("queued nodes have a clock");
        for b in 0..runs.len() {
            if clocks[b].is_some() {
                continue;
            }
            if let Some(c) = against(&base, &runs[b], a, b, &bounds) {
                clocks[b] = Some(c);
                queue.insert(0, b);
            }
        }
    }
    clocks
        .into_iter()
        .zip(runs)
        .map(|(c, r)| c.unwrap_or_else(|| unbounded(r)))
        .collect()
}

/// A node with no crossing to the others: not corrected.
fn unbounded(r: &Run) -> NodeClock {
    NodeClock {
        node: r.node.clone(),
        reference: false,
        correction_ns: 0,
        skew_ms: 0.0,
        basis: "none",
        min_ns: None,
        max_ns: None,
        uncertainty_ns: None,
        read_uncertainty_ns: r.clock.uncertainty_ns,
        against: None,
        crossings: 0,
        inconsistent: false,
    }
}

/// Node `b`'s clock from the crossings between it and `a` (whose clock
/// is `base`), if any.
fn against(base: &NodeClock, rb: &Run, a: usize, b: usize, bounds: &Bounds) -> Option<NodeClock> {
    let lo = bounds.get(&(a, b)).copied();
    let hi = bounds.get(&(b, a)).map(|&(v, n)| (-v, n));
    let crossings = lo.map_or(0, |x| x.1) + hi.map_or(0, |x| x.1);
    let (d, basis, inconsistent) = match (lo.map(|x| x.0), hi.map(|x| x.0)) {
        (None, None) => return None,
        (Some(l), Some(h)) => (l + (h - l) / 2, "two_way", l > h),
        (Some(l), None) => (l.max(0), "one_way", false),
        (None, Some(h)) => (h.min(0), "one_way", false),
    };
    let correction_ns = base.correction_ns + d;
    let uncertainty_ns = match (lo, hi, base.uncertainty_ns) {
        (Some((l, _)), Some((h, _)), Some(u)) => Some(
            (h - l).unsigned_abs() / 2 + u + base.read_uncertainty_ns + rb.clock.uncertainty_ns,
        ),
        _ => None,
    };
    Some(NodeClock {
        node: rb.node.clone(),
        reference: false,
        correction_ns,
        skew_ms: -correction_ns as f64 / 1e6,
        basis,
        min_ns: lo.map(|(l, _)| base.correction_ns + l),
        max_ns: hi.map(|(h, _)| base.correction_ns + h),
        uncertainty_ns,
        read_uncertainty_ns: rb.clock.uncertainty_ns,
        against: Some(base.node.clone()),
        crossings,
        inconsistent,
    })
}

#[cfg(test)]
pub(super) fn exit_time_for_test(hops: &[Passage]) -> Option<i64> {
    exit_time(hops)
}
