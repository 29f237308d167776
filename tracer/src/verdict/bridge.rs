//! A cause: a Linux bridge will not forward the frame, because of a
//! setting of one of its ports (or its own).
//!
//! - **Signals**: a drop in the bridge's forwarding path, any reason
//!   (6.18 gives NOT_SPECIFIED): br_handle_frame_finish() drops what a port
//!   not forwarding receives, and br_forward()/should_deliver()
//!   (net/bridge/br_forward.c, inlined into br_handle_frame_finish())
//!   drop a frame that would leave by its ingress port without hairpin
//!   mode, by a port not forwarding, between two isolated ports, or of a
//!   VLAN the port is not in. And a neighbour resolution failure on a
//!   bridge device with a port that is not forwarding: the neighbour's
//!   answer came in through that port and was dropped there. Or a
//!   neighbour failure on a veth whose other end is a bridge's port (a
//!   pod's eth0, the port in the node's namespace).
//! - **Facts**: the links of the drop's namespace (`Env::links`, read
//!   where a packet was dropped, kept in a recording): each port's bridge,
//!   STP state, hairpin mode and isolation, each bridge's VLAN filtering
//!   (node/link.rs, RTM_GETLINK); the sender's addresses (`Env::addrs`)
//!   to tell a frame that must go back out its ingress port; for a veth,
//!   the links of its other end's namespace (`Env::other_end`: IFLA_LINK
//!   and IFLA_LINK_NETNSID, read by run/facts.rs).
//! - **Evidence**: [`Evidence::BridgeWillNotForward`] holding a
//!   [`BridgeRefusal`]: the bridge, the port, the setting.
//! - **Where**: `bridge cni0 in netns node: port vethpod has hairpin mode
//!   off and 10.0.1.2 is behind it, where the frame came in`.
//! - **Rules**: `rules::dropped` asks [`judge`] for a drop at a bridge
//!   function, and [`behind_bridge`] for a neighbour failure.
//! - **Hint**: [`HINTS`], one row per setting (hints::hint asks causes'
//!   rows first).

use crate::model::drop_reason::DropReason;
use std::{fmt, net::IpAddr};

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::{Env, Evidence, Kind, hints::Hint};
use crate::{
    model::{flow::Flow, hop::Hop},
    node::link::{BR_STATE_FORWARDING, LinkConf, stp_state_name},
};

/// The setting that stops the frame.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum BridgeSetting {
    /// The port's STP state is not forwarding.
    StpState,
    /// The frame must leave by the port it came in by, and hairpin mode is
    /// off there.
    HairpinOff,
    /// It came in by an isolated port and another port is isolated.
    Isolated,
    /// The bridge filters VLANs (which VLANs the port is in is not read).
    VlanFiltering,
}

/// Why a bridge will not forward the frame: the setting read from the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BridgeRefusal {
    pub bridge: String,
    /// The port the setting is on.
    pub port: String,
    pub netns: String,
    pub setting: BridgeSetting,
    /// The port's STP state (`learning`, `blocking`, ...), for `stp_state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stp_state: Option<String>,
    /// The other isolated port, for `isolated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The frame's destination, behind the port it came in by, for
    /// `hairpin_off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<IpAddr>,
    /// The port was the drop's device (the frame came in by it); else
    /// another port of the bridge, whose hosts' frames it stops.
    pub ingress: bool,
    /// The bridge is at the other end of this veth, the drop's device in
    /// another namespace (a pod's eth0 whose host-side end is a port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_end_of: Option<String>,
    /// For `vlan_filtering`: the frame's VLAN on the bridge (the PVID of
    /// the port it came in by, untagged pod traffic's)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// ...and the bridge's other ports that are not in it: the bridge
    /// sends the frame out of none of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_vlan: Vec<String>,
    /// For `vlan_filtering`: the port has no PVID, the bridge drops the
    /// untagged frames it receives there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_pvid: bool,
}

impl BridgeRefusal {
    /// What the setting does, after `bridge BR in netns N: `.
    pub fn said(&self) -> String {
        let port = &self.port;
        match self.setting {
            BridgeSetting::StpState => {
                let state = self.stp_state.as_deref().unwrap_or("?");
                if self.ingress {
                    format!(
                        "port {port} is in STP state {state}: the bridge drops what it receives there"
                    )
                } else {
                    format!(
                        "port {port} is in STP state {state}: the bridge sends nothing out of it, and drops what it receives there"
                    )
                }
            }
            BridgeSetting::HairpinOff => format!(
                "port {port} has hairpin mode off and {} is behind it, where the frame came in: the bridge does not send a frame back out the port it came in by",
                self.dst
                    .map_or_else(|| "the destination".to_string(), |a| a.to_string())
            ),
            BridgeSetting::Isolated => format!(
                "ports {port} and {} are both isolated: the bridge does not forward between isolated ports",
                self.peer.as_deref().unwrap_or("?")
            ),
            BridgeSetting::VlanFiltering => match (self.vlan, self.not_in_vlan.first()) {
                (Some(v), Some(first)) => format!(
                    "VLAN {v}, the PVID of port {port} where the frame came in, is not on port{} {}: a bridge that filters VLANs sends a frame out only of the ports in its VLAN (`bridge vlan add dev {first} vid {v}`)",
                    if self.not_in_vlan.len() > 1 { "s" } else { "" },
                    self.not_in_vlan.join(", ")
                ),
                _ if self.no_pvid => format!(
                    "port {port} has no PVID: a bridge that filters VLANs drops the untagged frames it receives there (`bridge vlan show dev {port}`)"
                ),
                _ => format!(
                    "the bridge filters VLANs (vlan_filtering 1): the frame's VLAN may not be allowed on port {port} (`bridge vlan show dev {port}`)"
                ),
            },
        }
    }
}

impl fmt::Display for BridgeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bridge {} in netns {}", self.bridge, self.netns)?;
        if let Some(dev) = &self.other_end_of {
            write!(f, ", at the other end of {dev}")?;
        }
        write!(f, ": {}", self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[
    super::explains::Explains {
        reasons: &[DropReason::NotSpecified, DropReason::BridgeIngressStpState],
        cause: "a bridge will not forward: a port's STP state, hairpin mode off, isolated ports, VLAN filtering (verdict/bridge.rs)",
        at: "a bridge function (br_*)",
        facts: "the bridge's ports: STP state, hairpin mode, isolation; the bridge's VLAN filtering (RTM_GETLINK)",
    },
    super::explains::Explains {
        reasons: &[
            DropReason::NeighFailed,
            DropReason::NeighQueuefull,
            DropReason::NeighDead,
        ],
        cause: "the neighbour's answer, or the request, is dropped by a bridge port that is not forwarding (verdict/bridge.rs)",
        at: "a bridge device, or a veth whose other end is a bridge's port",
        facts: "the bridge's ports' STP states (RTM_GETLINK); a veth's other end (IFLA_LINK, IFLA_LINK_NETNSID)",
    },
];

/// Bridge functions a frame the bridge will not forward is freed in
/// (net/bridge/: br_input.c, br_forward.c, br_device.c).
fn bridge_func(func: &str) -> bool {
    let f = crate::model::names::stem(func);
    f.starts_with("br_") || f.starts_with("__br_") || f == "deliver_clone" || f == "maybe_deliver"
}

/// The ports of bridge `bridge` among `links`.
fn ports<'a>(links: &'a [LinkConf], bridge: &'a str) -> impl Iterator<Item = &'a LinkConf> {
    links
        .iter()
        .filter(move |l| l.bridge_port.as_ref().is_some_and(|p| p.bridge == bridge))
}

fn refusal(
    bridge: &str,
    port: &LinkConf,
    drop: &Hop,
    setting: BridgeSetting,
    ingress: bool,
) -> BridgeRefusal {
    BridgeRefusal {
        bridge: bridge.to_string(),
        port: port.dev.clone(),
        netns: drop.netns.to_string(),
        setting,
        stp_state: (setting == BridgeSetting::StpState)
            .then(|| stp_state_name(port.bridge_port.as_ref().map_or(0, |p| p.state)).to_string()),
        peer: None,
        dst: None,
        ingress,
        other_end_of: None,
        vlan: None,
        not_in_vlan: Vec::new(),
        no_pvid: false,
    }
}

/// A port of `bridge` (other than `except`) that is not forwarding.
fn port_not_forwarding<'a>(
    links: &'a [LinkConf],
    bridge: &'a str,
    except: &'a str,
) -> Option<&'a LinkConf> {
    ports(links, bridge).find(|l| {
        l.dev != except
            && l.bridge_port
                .as_ref()
                .is_some_and(|p| p.state != BR_STATE_FORWARDING)
    })
}

/// A drop at a bridge function: the setting of the bridge that explains
/// it, as `(where, evidence)`; None when the drop is not the bridge's or
/// no setting explains it (the other rules judge it).
pub fn judge(flow: &Flow, drop: &Hop, func: &str, env: &dyn Env) -> Option<(String, Evidence)> {
    if !bridge_func(func) {
        return None;
    }
    let links = env.links(drop.netns_inode);
    let dev = links.iter().find(|l| l.dev == *drop.dev)?;
    let r = match (&dev.bridge_port, &dev.bridge) {
        // The frame came in by a port of a bridge.
        (Some(p), _) => {
            let bridge = p.bridge.as_str();
            if p.state != BR_STATE_FORWARDING {
                refusal(bridge, dev, drop, BridgeSetting::StpState, true)
            } else if !p.hairpin && behind_sender(flow, drop, env) {
                BridgeRefusal {
                    dst: Some(drop.tuple.dst),
                    ..refusal(bridge, dev, drop, BridgeSetting::HairpinOff, true)
                }
            } else if let Some(peer) = p
                .isolated
                .then(|| {
                    ports(links, bridge).find(|l| {
                        l.dev != dev.dev && l.bridge_port.as_ref().is_some_and(|q| q.isolated)
                    })
                })
                .flatten()
            {
                BridgeRefusal {
                    peer: Some(peer.dev.clone()),
                    ..refusal(bridge, dev, drop, BridgeSetting::Isolated, true)
                }
            } else {
                other_ports(links, bridge, dev, drop)?
            }
        }
        // The bridge device itself (the node's own traffic out through it).
        (None, Some(_)) => other_ports(links, &dev.dev, dev, drop)?,
        (None, None) => return None,
    };
    let where_ = format!("bridge {} in netns {}: {}", r.bridge, r.netns, r.said());
    Some((where_, Evidence::BridgeWillNotForward(r)))
}

/// What the rest of the bridge says: a port not forwarding, else VLAN
/// filtering on.
fn other_ports(
    links: &[LinkConf],
    bridge: &str,
    dev: &LinkConf,
    drop: &Hop,
) -> Option<BridgeRefusal> {
    if let Some(p) = port_not_forwarding(links, bridge, &dev.dev) {
        return Some(refusal(bridge, p, drop, BridgeSetting::StpState, false));
    }
    let filters = links
        .iter()
        .find(|l| l.dev == bridge)
        .and_then(|b| b.bridge.as_ref())
        .is_some_and(|b| b.vlan_filtering);
    if !filters {
        return None;
    }
    let r = refusal(bridge, dev, drop, BridgeSetting::VlanFiltering, true);
    // The ports' VLANs, when read (node::link::port_vlans): the frame came
    // in by `dev` (a port) untagged, into its PVID.
    let read =
        ports(links, bridge).any(|l| l.bridge_port.as_ref().is_some_and(|p| !p.vlans.is_empty()));
    let Some(port) = dev.bridge_port.as_ref().filter(|_| read) else {
        return Some(r);
    };
    let Some(v) = port.pvid else {
        return Some(BridgeRefusal { no_pvid: true, ..r });
    };
    let not_in_vlan: Vec<String> = ports(links, bridge)
        .filter(|l| l.dev != dev.dev)
        .filter(|l| {
            l.bridge_port
                .as_ref()
                .is_some_and(|p| !p.vlans.contains(&v))
        })
        .map(|l| l.dev.clone())
        .collect();
    // Every other port is in the VLAN: the VLANs do not explain it.
    (!not_in_vlan.is_empty()).then_some(BridgeRefusal {
        vlan: Some(v),
        not_in_vlan,
        ..r
    })
}

/// Is the dropped frame's destination its sender (a pod reaching itself
/// through a Service): the address belongs to the namespace the flow
/// started in, so the frame must leave by the port it came in by.
fn behind_sender(flow: &Flow, drop: &Hop, env: &dyn Env) -> bool {
    let dst = drop.tuple.dst;
    if dst == drop.tuple.src {
        return true;
    }
    flow.hops.first().is_some_and(|first| {
        first.netns_inode != drop.netns_inode
            && env
                .addrs(first.netns_inode)
                .is_some_and(|a| a.iter().any(|i| i.addr == dst))
    })
}

/// A neighbour resolution failed on a bridge device: a port of it that is
/// not forwarding (the neighbour's answer came in through it and was
/// dropped there). Or on a veth whose other end is a bridge's port: that
/// port not forwarding (the bridge drops the requests it receives there),
/// another port not forwarding, or the bridge filtering VLANs. None when
/// no bridge is there or nothing of it explains the failure.
pub fn behind_bridge(drop: &Hop, env: &dyn Env) -> Option<BridgeRefusal> {
    let links = env.links(drop.netns_inode);
    if let Some(br) = links
        .iter()
        .find(|l| l.dev == *drop.dev && l.bridge.is_some())
    {
        let p = port_not_forwarding(links, &br.dev, "")?;
        return Some(refusal(&br.dev, p, drop, BridgeSetting::StpState, false));
    }
    let end = env.other_end(drop)?;
    let port = end.link;
    let bridge = port.bridge_port.as_ref()?.bridge.as_str();
    let r = if port
        .bridge_port
        .as_ref()
        .is_some_and(|p| p.state != BR_STATE_FORWARDING)
    {
        refusal(bridge, port, drop, BridgeSetting::StpState, true)
    } else {
        other_ports(end.links, bridge, port, drop)?
    };
    Some(BridgeRefusal {
        netns: end.netns,
        other_end_of: Some(drop.dev.to_string()),
        ..r
    })
}

/// Is this the refusal of `setting`?
fn is(e: &Evidence, setting: BridgeSetting) -> bool {
    matches!(e, Evidence::BridgeWillNotForward(r) if r.setting == setting)
}

/// The cause's hints, one per setting (hints::hint asks them before its
/// own table).
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Dropped,
        |e| is(e, BridgeSetting::HairpinOff),
        "The bridge will not send a frame back out the port it came in by unless hairpin mode is on there: a pod reaching itself through a Service (DNAT to its own address) needs it. Turn hairpin on for the pod's port (`bridge link set dev PORT hairpin on`); on Kubernetes, kubelet's --hairpin-mode=hairpin-veth or the bridge CNI plugin's \"hairpinMode\": true set it for every pod.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, BridgeSetting::StpState),
        "A bridge port that is not in STP state forwarding drops what it receives and sends nothing: with STP on the bridge, a new port listens and learns for 2 x forward_delay (30 s by default) first, and a blocking port stays so. CNI bridges do not need STP: turn it off (`ip link set BRIDGE type bridge stp_state 0`) or set the port forwarding (`bridge link set dev PORT state 3`); `bridge link show` lists the ports' states.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, BridgeSetting::Isolated),
        "Isolated bridge ports do not exchange frames (only with non-isolated ports, such as the uplink): if these pods must talk, turn isolation off on one of the two ports (`bridge link set dev PORT isolated off`), or route their traffic through the node.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, BridgeSetting::VlanFiltering),
        "The bridge filters VLANs and the frame's VLAN is not allowed on the port it came in by or should leave by: `bridge vlan show` lists each port's VLANs; add the VLAN (and PVID, for untagged pod traffic) to the port (`bridge vlan add dev PORT vid N pvid untagged`) or turn filtering off (`ip link set BRIDGE type bridge vlan_filtering 0`).",
    ),
];

#[cfg(test)]
mod tests;
