//! A cause: the queueing discipline of the device the packet was to
//! leave by dropped it: a rate limit (the CNI bandwidth plugin's tbf on a
//! pod's host-side veth or its ifb, for kubernetes.io/egress-bandwidth
//! and ingress-bandwidth), a queue too short for a burst (pfifo, bfifo),
//! a fair-queueing flow limit.
//!
//! - **Signals**: QDISC_DROP and the other qdisc reasons (QDISC_OVERLIMIT,
//!   QDISC_CONGESTED, FQ_*, CAKE_FLOOD, DUALPI2_STEP_DROP), given by
//!   qdisc_drop()/kfree_skb_list_reason() from __dev_xmit_skb()
//!   (net/core/dev.c) and the qdiscs' enqueue; anywhere, whether or not
//!   the rest of the flow was delivered.
//! - **Facts**: the device's qdiscs (`Env::qdiscs`, node/qdisc.rs,
//!   RTM_GETQDISC): kind, limit, rate and burst, and their counters.
//! - **Evidence**: [`Evidence::QdiscDropped`] holding a [`QdiscDrops`].
//! - **Where**: `__dev_queue_xmit in netns node: 8 of the flow's packets
//!   were dropped by the qdisc of bwp1: tbf 1:0 root (rate 125000 B/s,
//!   burst 1600 B, limit 3000 B): 161 sent, 41 dropped, ...`.
//! - **Rules**: [`lost_in_queue`] (in `rules::RULES`, before `delivered`:
//!   a flow some of whose packets a qdisc dropped is not delivered whole);
//!   `rules::device_cause` asks [`judge`] for a drop that ended the flow.
//! - **Hint**: [`HINTS`]: a rate limit; a short queue.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, Kind, Verdict, hints::Hint, rules};
use crate::{
    model::{
        drop_reason::DropReason,
        flow::Flow,
        hop::{Dir, Hop, HopData},
    },
    node::qdisc::{Qdisc, QdiscParams},
};

/// The qdisc reasons (enum skb_drop_reason, 6.18).
const REASONS: &[DropReason] = &[
    DropReason::QdiscDrop,
    DropReason::QdiscOverlimit,
    DropReason::QdiscCongested,
    DropReason::CakeFlood,
    DropReason::FqBandLimit,
    DropReason::FqHorizonLimit,
    DropReason::FqFlowLimit,
    DropReason::Dualpi2StepDrop,
];

/// Packets a device's qdisc dropped, as the node shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QdiscDrops {
    pub netns: String,
    pub dev: String,
    /// The flow's packets seen dropped there (the first ones: a flow
    /// keeps a bounded number of hops; the qdisc's counters have all).
    pub dropped: u32,
    /// The device's qdiscs that drop (those with a limit, or with drops
    /// counted); empty when none was read.
    pub qdiscs: Vec<Qdisc>,
}

impl QdiscDrops {
    /// The qdisc that limits: the one with a rate, else the one with the
    /// most drops.
    fn limiting(&self) -> Option<&Qdisc> {
        self.qdiscs
            .iter()
            .find(|q| matches!(q.params, Some(QdiscParams::Tbf { .. })))
            .or_else(|| self.qdiscs.iter().max_by_key(|q| q.drops))
    }

    /// Is the limit a rate (a token bucket)?
    pub fn rate_limited(&self) -> bool {
        self.limiting()
            .is_some_and(|q| matches!(q.params, Some(QdiscParams::Tbf { .. })))
    }

    /// What happened, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        let n = match self.dropped {
            1 => "a packet of the flow was".to_string(),
            n => format!("{n} packets of the flow were"),
        };
        match self.limiting() {
            Some(q) => format!("{n} dropped by the qdisc of {}: {q}", self.dev),
            None => format!(
                "{n} dropped by the qdisc of {} (its qdiscs could not be read)",
                self.dev
            ),
        }
    }
}

impl fmt::Display for QdiscDrops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in netns {}: {}", self.netns, self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[super::explains::Explains {
    reasons: REASONS,
    cause: "the device's queueing discipline dropped it: a rate limit (the CNI bandwidth plugin's tbf), a queue shorter than the burst (verdict/qdisc_drop.rs)",
    at: "",
    facts: "the device's qdiscs (RTM_GETQDISC): kind, rate, burst, limit and drop counters",
}];

/// The request's qdisc drops, in order.
fn drops(flow: &Flow) -> Vec<&Hop> {
    flow.hops
        .iter()
        .filter(|h| h.dir == Dir::Request)
        .filter(|h| matches!(&h.data, HopData::Drop(d) if REASONS.contains(&d.reason)))
        .collect()
}

/// The evidence of the qdisc drops at `drop`'s device.
fn evidence(flow: &Flow, drop: &Hop, env: &dyn Env) -> QdiscDrops {
    let at_dev = |h: &&Hop| h.netns_inode == drop.netns_inode && h.dev == drop.dev;
    let dropped = drops(flow).into_iter().filter(at_dev).count();
    let qdiscs = env
        .qdiscs(drop.netns_inode, &drop.dev, drop.ifindex)
        .into_iter()
        .filter(|q| q.params.is_some() || q.drops > 0)
        .collect();
    QdiscDrops {
        netns: drop.netns.to_string(),
        dev: drop.dev.to_string(),
        dropped: u32::try_from(dropped).unwrap_or(u32::MAX),
        qdiscs,
    }
}

/// A qdisc drop that ended the flow, as `(where, evidence)`.
pub fn judge(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    if !REASONS.contains(reason) {
        return None;
    }
    let d = evidence(flow, drop, env);
    let at = super::rules::site(func);
    Some((
        format!("{at} in netns {}: {}", d.netns, d.said()),
        Evidence::QdiscDropped(d),
    ))
}

/// A rule: some of the request's packets were dropped by a qdisc, even if
/// others were delivered (a burst over a rate limit loses its tail).
pub fn lost_in_queue(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let first = *drops(flow).first()?;
    rules::dropped_though_delivered(flow, first, env, judge)
}

fn rate(e: &Evidence) -> bool {
    matches!(e, Evidence::QdiscDropped(d) if d.rate_limited())
}

fn queue(e: &Evidence) -> bool {
    matches!(e, Evidence::QdiscDropped(d) if !d.rate_limited())
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Dropped,
        rate,
        "A token-bucket rate limit on the device dropped what exceeded its rate and burst: on a Kubernetes node that is the CNI bandwidth plugin's tbf (on the pod's host-side veth, or an ifb device for ingress), set from the pod's kubernetes.io/egress-bandwidth and kubernetes.io/ingress-bandwidth annotations. Raise or remove the annotation (the plugin derives the burst from the rate, so bursty UDP like metrics or DNS loses its tail), or pace the sender; `tc -s qdisc show dev DEV` shows the rate and the drops.",
    ),
    Hint::when(
        Kind::Dropped,
        queue,
        "The device's queue was full and its qdisc dropped the packets that did not fit (a short pfifo/bfifo limit, a small txqueuelen, a fair-queueing flow limit): the device sends slower than the packets come. Lengthen the queue (`tc qdisc replace dev DEV root pfifo limit N`, `ip link set DEV txqueuelen N`), find what fills it, or spread the burst; `tc -s qdisc show dev DEV` shows the drops.",
    ),
];

#[cfg(test)]
mod tests;
