//! A cause: the other end of a veth will not take the frame, because it is
//! down or its MTU is smaller than the frame. A pod's eth0 and its
//! node-side device (cali*, lxc*, vethXXX) are the two ends of one veth,
//! in two namespaces: the failure shows at one end, its cause is at the
//! other.
//!
//! - **Signals**: a drop where a veth hands a frame to its other end:
//!   veth_xmit() -> veth_forward_skb() -> __dev_forward_skb() (and, since
//!   5.15, __dev_forward_skb2()) frees a frame is_skb_forwardable() refuses
//!   (net/core/dev.c): the other end is not up, or the frame (not GSO) is
//!   longer than its MTU + hard_header_len + VLAN_HLEN. No drop reason
//!   (NOT_SPECIFIED on 6.x). And a neighbour resolution failure on a veth
//!   whose other end is down: this end has no carrier, nothing it sends
//!   arrives.
//! - **Facts**: the drop device's other end (`Env::other_end`: IFLA_LINK
//!   and IFLA_LINK_NETNSID, its namespace's links read by run/facts.rs):
//!   its admin state (IFF_UP) and MTU (node/link.rs); the frame's length
//!   from the packet's hop on that device.
//! - **Evidence**: [`Evidence::VethOtherEnd`] holding a [`VethRefusal`].
//! - **Where**: `veth veth2 in netns node (MTU 1500) hands frames to its
//!   other end eth0 in netns pod, whose MTU is 1400: ...`.
//! - **Rules**: `rules::device_cause` asks [`judge`] for a drop at the
//!   crossing; `rules::neigh_device_cause` asks [`down_at_other_end`].
//! - **Hint**: [`HINTS`], one row per problem.

use crate::model::drop_reason::DropReason;
use std::fmt;

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::{Env, Evidence, Kind, OtherEnd, hints::Hint};
use crate::model::{
    flow::Flow,
    hop::{Hop, HopData},
};

/// What the other end does to the frame.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum VethProblem {
    /// The other end is administratively down.
    Down,
    /// The frame is longer than the other end's MTU allows.
    MtuSmaller,
}

/// Why the other end of a veth did not take the frame, as read from the
/// node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VethRefusal {
    /// The end the frame was dropped on (or a neighbour failed on).
    pub dev: String,
    pub netns: String,
    /// Its other end.
    pub other_dev: String,
    pub other_netns: String,
    pub problem: VethProblem,
    /// The other end's MTU, for `mtu_smaller`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// This end's MTU (what the sender sized its packets for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_mtu: Option<u32>,
    /// The frame's length at this end (skb->len, Ethernet header
    /// included), for `mtu_smaller`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<u32>,
}

/// What is_skb_forwardable() adds to the MTU: the Ethernet header
/// (hard_header_len) and a VLAN tag (VLAN_HLEN).
const L2_ALLOWANCE: u32 = 14 + 4;

impl VethRefusal {
    /// What the other end does, after `veth DEV in netns N: `.
    pub fn said(&self) -> String {
        let other = format!("{} in netns {}", self.other_dev, self.other_netns);
        match self.problem {
            VethProblem::Down => format!(
                "its other end {other} is down: {} has no carrier and nothing sent on it arrives",
                self.dev
            ),
            VethProblem::MtuSmaller => {
                let mtu = self.mtu.unwrap_or(0);
                let this = self
                    .dev_mtu
                    .map(|m| format!("MTU {m} here, "))
                    .unwrap_or_default();
                let len = self
                    .len
                    .map_or_else(|| "the".to_string(), |l| format!("the {l}-byte"));
                format!(
                    "{this}MTU {mtu} at its other end {other}: {len} frame is longer than {} (that MTU, the Ethernet header, a VLAN tag), and a veth drops what its other end cannot receive (is_skb_forwardable()), with no ICMP error",
                    mtu + L2_ALLOWANCE
                )
            }
        }
    }
}

impl fmt::Display for VethRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "veth {} in netns {}: {}",
            self.dev,
            self.netns,
            self.said()
        )
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[
    super::explains::Explains {
        reasons: &[DropReason::NotSpecified],
        cause: "the other end of the veth is down, or its MTU is smaller than the frame (verdict/veth.rs)",
        at: "__dev_forward_skb2, __dev_forward_skb (a veth handing a frame to its other end)",
        facts: "the veth's other end (IFLA_LINK, IFLA_LINK_NETNSID): its admin state and MTU",
    },
    super::explains::Explains {
        reasons: &[DropReason::NeighFailed],
        cause: "the other end of the veth is down: no carrier (verdict/veth.rs)",
        at: "a veth",
        facts: "the veth's other end: its admin state",
    },
];

/// Functions a veth's frame refused by its other end is freed in
/// (net/core/dev.c; veth_xmit() in drivers/net/veth.c calls them).
fn crossing_func(func: &str) -> bool {
    let f = crate::model::names::stem(func);
    matches!(
        f,
        "__dev_forward_skb2" | "__dev_forward_skb" | "dev_forward_skb" | "veth_xmit"
    )
}

fn refusal(drop: &Hop, end: &OtherEnd<'_>, problem: VethProblem) -> VethRefusal {
    VethRefusal {
        dev: drop.dev.to_string(),
        netns: drop.netns.to_string(),
        other_dev: end.link.dev.clone(),
        other_netns: end.netns.clone(),
        problem,
        mtu: None,
        dev_mtu: None,
        len: None,
    }
}

/// A drop at a veth's crossing that its other end explains, as `(where,
/// evidence)`: down, or a frame longer than its MTU allows. None when the
/// drop is elsewhere, the device's other end was not read, or neither
/// holds (the other rules judge it).
pub fn judge(flow: &Flow, drop: &Hop, func: &str, env: &dyn Env) -> Option<(String, Evidence)> {
    if !crossing_func(func) {
        return None;
    }
    let end = env.other_end(drop)?;
    let r = if end.link.up == Some(false) {
        refusal(drop, &end, VethProblem::Down)
    } else {
        let len = frame_len(flow, drop)?;
        if len <= end.link.mtu + L2_ALLOWANCE {
            return None;
        }
        VethRefusal {
            mtu: Some(end.link.mtu),
            dev_mtu: env
                .links(drop.netns_inode)
                .iter()
                .find(|l| l.dev == *drop.dev)
                .map(|l| l.mtu),
            len: Some(len),
            ..refusal(drop, &end, VethProblem::MtuSmaller)
        }
    };
    Some((r.to_string(), Evidence::VethOtherEnd(r)))
}

/// The length of the dropped frame at its device: the last packet hop of
/// the same skb on that device before the drop (skb->len at transmit, the
/// Ethernet header included, as is_skb_forwardable() counts it).
fn frame_len(flow: &Flow, drop: &Hop) -> Option<u32> {
    flow.hops
        .iter()
        .filter(|h| h.skb == drop.skb && h.dev == drop.dev && h.ts_ns <= drop.ts_ns)
        .filter_map(|h| match h.data {
            HopData::Packet { len, .. } => Some(len),
            _ => None,
        })
        .next_back()
}

/// A neighbour resolution failed on a veth whose other end is down: this
/// end has no carrier, the solicitations go nowhere. None when the device
/// is no veth whose other end was read, or that end is up.
pub fn down_at_other_end(drop: &Hop, env: &dyn Env) -> Option<VethRefusal> {
    let end = env.other_end(drop)?;
    (end.link.up == Some(false)).then(|| refusal(drop, &end, VethProblem::Down))
}

/// Is this the refusal for `problem`?
fn is(e: &Evidence, problem: VethProblem) -> bool {
    matches!(e, Evidence::VethOtherEnd(r) if r.problem == problem)
}

/// The cause's hints, one per problem (hints::hint asks them before its
/// own table).
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Dropped,
        |e| is(e, VethProblem::Down),
        "The other end of this veth is down, so this end has no carrier (NO-CARRIER in `ip link`) and nothing sent on it arrives: nothing answers ARP/NDP. The CNI plugin or its agent sets the node-side end up when it wires the pod (Calico's cali*, Cilium's lxc*, the bridge plugin's veth*); an agent restart, a cleanup script, or NetworkManager managing the device can leave it down. `ip link set DEV up` on the down end brings the pod back; then find what took it down (the agent's logs, NetworkManager's unmanaged-devices).",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, VethProblem::MtuSmaller),
        "The two ends of this veth have different MTUs: the sender sizes its packets for its own end, and the veth drops at the crossing every frame longer than the other end's MTU allows, without an ICMP error, so only large packets vanish (big UDP datagrams, DNS answers, TLS handshakes). Give both ends the same MTU: the CNI's MTU setting (Calico's veth_mtu, Cilium's --mtu, the tuning plugin's mtu) must match what the pod's eth0 gets; `ip link show` in both namespaces shows them.",
    ),
];

#[cfg(test)]
mod tests;
