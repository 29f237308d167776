//! Which flows of the runs carried the same packets: flows that share a
//! tuple (in the request's direction) at a device hop, or as their
//! original or translated tuple, are one path. A node that translated the packet saw
//! both tuples, so NAT links the nodes before and after it.

use std::collections::HashMap;

use super::{FlowIn, Run};
use crate::model::event::Tuple;

/// A flow of a run: (index of the run, index of its flow).
pub type FlowRef = (usize, usize);

/// The hooks where a hop's tuple is a packet's whole tuple (a route
/// lookup's or a neighbour event's has no ports, or no source: they would
/// join unrelated flows).
pub fn packet_hook(hook: &str) -> bool {
    matches!(hook, "tc_ingress" | "tc_egress" | "netif_receive" | "xmit")
}

/// The request-direction tuples a flow was seen with, with its protocol:
/// its original and translated tuples and those of its packets at device
/// hooks.
pub fn request_tuples(f: &FlowIn) -> Vec<(String, Tuple)> {
    let mut out = vec![f.original];
    out.extend(f.translated);
    for h in f.hops.iter().filter(|h| packet_hook(&h.hook)) {
        out.push(if h.dir == "reply" {
            h.tuple.reversed()
        } else {
            h.tuple
        });
    }
    out.sort_unstable();
    out.dedup();
    out.into_iter().map(|t| (f.proto.clone(), t)).collect()
}

/// The runs' flows grouped into paths (union of flows sharing a tuple),
/// each path's flows in (run, flow) order, paths by their first flow.
pub fn paths(runs: &[Run]) -> Vec<Vec<FlowRef>> {
    let refs: Vec<FlowRef> = runs
        .iter()
        .enumerate()
        .flat_map(|(r, run)| (0..run.flows.len()).map(move |f| (r, f)))
        .collect();
    let mut parent: Vec<usize> = (0..refs.len()).collect();
    let mut first_with: HashMap<(String, Tuple), usize> = HashMap::new();
    for (i, &(r, f)) in refs.iter().enumerate() {
        for key in request_tuples(&runs[r].flows[f]) {
            match first_with.get(&key) {
                Some(&j) => union(&mut parent, i, j),
                None => {
                    first_with.insert(key, i);
                }
            }
        }
    }
    let mut groups: Vec<Vec<FlowRef>> = Vec::new();
    let mut group_of: HashMap<usize, usize> = HashMap::new();
    for (i, r) in refs.iter().enumerate() {
        let root = find(&mut parent, i);
        let g = *group_of.entry(root).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(*r);
    }
    groups
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        // The earlier flow stays the root: paths keep the order they were
        // first seen in.
        parent[ra.max(rb)] = ra.min(rb);
    }
}
