//! A cause: a VXLAN tunnel device (flannel's `flannel.1`, Calico's
//! `vxlan.calico`, Cilium's `cilium_vxlan`) has nowhere to send the inner
//! frame, or the far side's device is not the one the frame was sent to.
//!
//! - **Signals**: a drop in vxlan_xmit() on a VXLAN device, any reason
//!   (6.18 gives NO_TX_TARGET, later kernels VXLAN_NO_REMOTE): the frame's
//!   destination MAC has no FDB entry and the device no default (all-zeros)
//!   entry (drivers/net/vxlan/vxlan_core.c). And OTHERHOST on a VXLAN
//!   device: the decapsulated frame carried a destination MAC other than
//!   the device's own (eth_type_trans() marks it PACKET_OTHERHOST and
//!   ip_rcv_core() drops it).
//! - **Facts**: the links of the drop's namespace (`Env::links`): each
//!   VXLAN device's VNI, port, FDB and neighbour entries, each device's
//!   MAC (node/link.rs: RTM_GETLINK, RTM_GETNEIGH dumps); for OTHERHOST,
//!   the links of the namespace that sent the flow into its tunnel, where
//!   the MAC its next hop resolves to is read. The next hop is the
//!   gateway of the route the flow took there (its fib hop).
//! - **Evidence**: [`Evidence::TunnelWillNotSend`] holding a
//!   [`TunnelRefusal`]: the device, its VNI and port, the next hop and its
//!   MAC, the FDB's size; for a MAC mismatch, the receiving device's MAC.
//! - **Where**: `vxlan flannel.1 in netns node1 (VNI 1, port 8472): no
//!   FDB entry for 0a:58:0a:cf:02:00 (the MAC of 10.207.2.0, the next hop)
//!   and no default remote ...`.
//! - **Rules**: `rules::dropped` asks [`judge`] for any drop the reason
//!   arms before it left.
//! - **Hint**: [`HINTS`], one row per problem.

use crate::model::drop_reason::DropReason;
use std::{fmt, net::IpAddr};

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::{Env, Evidence, Kind, hints::Hint};
use crate::{
    model::{
        flow::Flow,
        hop::{Dir, Hop, HopData},
    },
    node::link::{DEFAULT_FDB_MAC, LinkConf, VxlanConf},
};

/// What stops the frame.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TunnelProblem {
    /// The sending device has no FDB entry for the frame's destination
    /// MAC and no default remote.
    NoFdbEntry,
    /// The receiving device's MAC is not the one the sender's neighbour
    /// entry gives its next hop.
    MacMismatch,
    /// The device has no usable neighbour entry for the next hop (a
    /// remote VTEP's tunnel address) and cannot resolve it: it does not
    /// learn, and has no default remote to send the ARP request to.
    NoNeighbour,
    /// The FDB entry for the next hop's MAC sends to an address of this
    /// namespace itself: the frame comes back and loops.
    FdbToSelf,
}

/// Why a VXLAN device lost the frame: what was read from the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TunnelRefusal {
    /// The VXLAN device (the sender's for `no_fdb_entry`, the receiver's
    /// for `mac_mismatch`).
    pub dev: String,
    pub netns: String,
    pub vni: u32,
    /// Its UDP port (0: the kernel's default).
    pub port: u16,
    pub problem: TunnelProblem,
    /// The inner next hop (the gateway of the flow's route onto the
    /// sending device), when a fib hop showed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<IpAddr>,
    /// The MAC the next hop resolves to on the sending device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The sending device's FDB entries (none of them for `mac`).
    pub fdb_entries: usize,
    /// Whether the device learns remote MACs (`no_neighbour`).
    #[serde(default)]
    pub learning: bool,
    /// For `fdb_to_self`: the VTEP the FDB entry sends to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtep: Option<IpAddr>,
    /// For `mac_mismatch`: the receiving device's own MAC, and the
    /// namespace that sent the frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_netns: Option<String>,
}

impl TunnelRefusal {
    /// What is wrong, after `vxlan DEV in netns N (VNI v, port p): `.
    pub fn said(&self) -> String {
        let mac = self.mac.as_deref().unwrap_or("the frame's destination MAC");
        let of_hop = self
            .next_hop
            .map(|h| format!(" (the MAC of {h}, the next hop)"))
            .unwrap_or_default();
        match self.problem {
            TunnelProblem::NoFdbEntry => format!(
                "no FDB entry for {mac}{of_hop} and no default remote ({} entries): the device has no VTEP to send the frame to",
                self.fdb_entries
            ),
            TunnelProblem::NoNeighbour => format!(
                "no neighbour entry for {} (the next hop, a remote VTEP's address) and the device cannot resolve it: learning {}, no default remote ({} FDB entries)",
                self.next_hop
                    .map_or_else(|| "the next hop".to_string(), |h| h.to_string()),
                if self.learning { "on" } else { "off" },
                self.fdb_entries
            ),
            TunnelProblem::FdbToSelf => format!(
                "the FDB entry for {mac}{of_hop} sends to {}, an address of this namespace itself: the frame comes back and loops until its TTL runs out",
                self.vtep.map_or_else(|| "?".to_string(), |v| v.to_string())
            ),
            TunnelProblem::MacMismatch => format!(
                "the frame came for {mac}{of_hop}, as netns {} resolves it, but this device's MAC is {}: the kernel takes it for another host's and drops it",
                self.sender_netns.as_deref().unwrap_or("?"),
                self.dev_mac.as_deref().unwrap_or("?")
            ),
        }
    }
}

impl fmt::Display for TunnelRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "vxlan {} in netns {} (VNI {}, port {}): {}",
            self.dev,
            self.netns,
            self.vni,
            port_or_default(self.port),
            self.said()
        )
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[
    super::explains::Explains {
        reasons: &[DropReason::NoTxTarget],
        cause: "a VXLAN device has no FDB entry for the next hop's MAC and no default remote (verdict/tunnel.rs)",
        at: "vxlan_xmit on a VXLAN device",
        facts: "the VXLAN device's VNI, port, FDB and neighbours (RTM_GETLINK, RTM_GETNEIGH); the flow's route onto it",
    },
    super::explains::Explains {
        reasons: &[
            DropReason::NeighFailed,
            DropReason::NeighQueuefull,
            DropReason::NeighDead,
        ],
        cause: "a VXLAN device that does not learn has no neighbour entry for a remote VTEP (verdict/tunnel.rs)",
        at: "a VXLAN device",
        facts: "the VXLAN device's neighbours, FDB and learning (RTM_GETLINK, RTM_GETNEIGH)",
    },
    super::explains::Explains {
        reasons: &[DropReason::Otherhost],
        cause: "the far side's VXLAN device is not the MAC the sender resolves its VTEP to (verdict/tunnel.rs)",
        at: "a VXLAN device",
        facts: "the receiving device's MAC; the sending namespace's VXLAN neighbours and route (RTM_GETLINK, RTM_GETNEIGH)",
    },
];

/// The port as the kernel uses it: 0 is its default, 8472
/// (IANA_VXLAN_UDP_PORT is 4789; the Linux default predates it).
fn port_or_default(port: u16) -> u16 {
    if port == 0 { 8472 } else { port }
}

/// vxlan_xmit() and the functions it drops in (drivers/net/vxlan/).
fn vxlan_xmit_func(func: &str) -> bool {
    let f = func.split('.').next().unwrap_or(func);
    f.starts_with("vxlan_xmit")
}

/// The VXLAN device `dev` among `links`.
fn vxlan_dev<'a>(links: &'a [LinkConf], dev: &str) -> Option<(&'a LinkConf, &'a VxlanConf)> {
    links
        .iter()
        .find(|l| l.dev == dev)
        .and_then(|l| l.vxlan.as_ref().map(|v| (l, v)))
}

/// The MAC `addr` resolves to on the VXLAN device.
fn mac_of(v: &VxlanConf, addr: IpAddr) -> Option<&str> {
    v.neighbours
        .iter()
        .find(|n| n.addr == addr)
        .and_then(|n| n.mac.as_deref())
}

/// A drop the tunnel explains, as `(where, evidence)`; None when the drop
/// is not a VXLAN device's or its facts do not show why.
pub fn judge(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    let r = if let Some(r) = fdb_to_self(flow, drop, env) {
        r
    } else if vxlan_xmit_func(func) {
        no_fdb_entry(flow, drop, env)?
    } else if *reason == DropReason::Otherhost {
        mac_mismatch(flow, drop, env)?
    } else {
        return None;
    };
    Some((r.to_string(), Evidence::TunnelWillNotSend(r)))
}

/// The sending device has no entry for the next hop's MAC and no default.
fn no_fdb_entry(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<TunnelRefusal> {
    let (_, v) = vxlan_dev(env.links(drop.netns_inode), &drop.dev)?;
    if v.fdb.iter().any(|e| e.mac == DEFAULT_FDB_MAC) || v.remote.is_some() {
        return None;
    }
    let hop = super::rules::next_hop_gw(flow, drop.netns_inode);
    let mac = hop.and_then(|h| mac_of(v, h));
    let entries: Vec<&str> = v.fdb.iter().map(|e| e.mac.as_str()).collect();
    match mac {
        Some(m) if entries.contains(&m) => return None,
        // The MAC unknown: only an empty FDB shows there is no entry.
        None if !entries.is_empty() => return None,
        _ => {}
    }
    Some(TunnelRefusal {
        next_hop: mac.and(hop),
        mac: mac.map(str::to_string),
        ..refusal(drop, v)
    })
}

/// A neighbour failure on a VXLAN device that cannot resolve the next
/// hop by itself: no entry for it (or one that failed), learning off and
/// no default FDB entry (the ARP request has nowhere to go: flannel and
/// Calico program one permanent entry per remote VTEP instead). None when
/// the device is no VXLAN device or could resolve it.
pub fn unresolved(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<TunnelRefusal> {
    let (_, v) = vxlan_dev(env.links(drop.netns_inode), &drop.dev)?;
    if v.learning || v.remote.is_some() || v.fdb.iter().any(|e| e.mac == DEFAULT_FDB_MAC) {
        return None;
    }
    let hop = super::rules::neigh_addr(flow, drop);
    // NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_STALE | NUD_DELAY |
    // NUD_PROBE: an entry that resolves (include/uapi/linux/neighbour.h).
    const NUD_VALID: u16 = 0x80 | 0x40 | 0x02 | 0x04 | 0x08 | 0x10;
    if v.neighbours
        .iter()
        .any(|n| n.addr == hop && n.mac.is_some() && n.state & NUD_VALID != 0)
    {
        return None;
    }
    Some(TunnelRefusal {
        problem: TunnelProblem::NoNeighbour,
        next_hop: Some(hop),
        mac: None,
        learning: v.learning,
        ..refusal(drop, v)
    })
}

/// The flow left the drop's namespace by a VXLAN device whose FDB entry
/// for the next hop's MAC sends to an address of that namespace itself
/// (every node took the same public address: flannel on Vagrant's NAT
/// interface): the encapsulated frame is delivered back, decapsulated and
/// forwarded out again, until its TTL runs out.
fn fdb_to_self(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<TunnelRefusal> {
    let links = env.links(drop.netns_inode);
    let own = env.addrs(drop.netns_inode)?;
    let (dev, v) = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode == drop.netns_inode && h.is_egress())
        .find_map(|h| vxlan_dev(links, &h.dev))?;
    let hop = super::rules::next_hop_gw(flow, drop.netns_inode)?;
    let mac = mac_of(v, hop)?;
    let vtep = v.fdb.iter().find(|e| e.mac == mac).and_then(|e| e.dst)?;
    if !own.iter().any(|a| a.addr == vtep) {
        return None;
    }
    Some(TunnelRefusal {
        dev: dev.dev.clone(),
        problem: TunnelProblem::FdbToSelf,
        next_hop: Some(hop),
        mac: Some(mac.to_string()),
        vtep: Some(vtep),
        ..refusal(drop, v)
    })
}

/// A refusal on the drop's device and namespace, its VXLAN settings
/// filled, the problem's own fields left to the caller.
fn refusal(drop: &Hop, v: &VxlanConf) -> TunnelRefusal {
    TunnelRefusal {
        dev: drop.dev.to_string(),
        netns: drop.netns.to_string(),
        vni: v.vni,
        port: v.port,
        problem: TunnelProblem::NoFdbEntry,
        next_hop: None,
        mac: None,
        fdb_entries: v.fdb.len(),
        learning: v.learning,
        vtep: None,
        dev_mac: None,
        sender_netns: None,
    }
}

/// OTHERHOST on a VXLAN device: the namespace that sent the flow into a
/// VXLAN device of its own resolves its next hop to a MAC other than this
/// device's.
fn mac_mismatch(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<TunnelRefusal> {
    let (dev, v) = vxlan_dev(env.links(drop.netns_inode), &drop.dev)?;
    let dev_mac = dev.mac.as_deref()?;
    // The sender: an earlier namespace of the flow whose route took it
    // onto a VXLAN device.
    let (sender, hop, mac) = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode != drop.netns_inode && h.ts_ns < drop.ts_ns)
        .find_map(|h| {
            let gw = super::rules::next_hop_gw(flow, h.netns_inode)?;
            let mac = env
                .links(h.netns_inode)
                .iter()
                .filter_map(|l| l.vxlan.as_ref())
                .find_map(|sv| mac_of(sv, gw))?;
            Some((h, gw, mac))
        })?;
    if mac.eq_ignore_ascii_case(dev_mac) {
        return None;
    }
    Some(TunnelRefusal {
        problem: TunnelProblem::MacMismatch,
        next_hop: Some(hop),
        mac: Some(mac.to_string()),
        dev_mac: Some(dev_mac.to_string()),
        sender_netns: Some(sender.netns.to_string()),
        ..refusal(drop, v)
    })
}

/// The namespaces, beyond the drop's, whose links [`judge`] reads for
/// this flow: for OTHERHOST, those the request passed before it (the
/// sender's tunnel device and neighbours). The facts reader
/// (run/facts.rs) reads them where it reads the drop's.
pub fn links_wanted(flow: &Flow) -> Vec<u32> {
    let Some(drop) = flow
        .hops
        .iter()
        .find(|h| matches!(&h.data, HopData::Drop(d) if d.reason == DropReason::Otherhost))
    else {
        return Vec::new();
    };
    let mut v: Vec<u32> = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode != drop.netns_inode && h.dir == Dir::Request)
        .map(|h| h.netns_inode)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Is this the refusal for `problem`?
fn is(e: &Evidence, problem: TunnelProblem) -> bool {
    matches!(e, Evidence::TunnelWillNotSend(r) if r.problem == problem)
}

/// The cause's hints, one per problem (hints::hint asks them before its
/// own table).
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::NoFdbEntry),
        "A VXLAN device sends a frame to the VTEP its FDB names for the frame's destination MAC (or to its default remote); without either the kernel drops it. The CNI agent adds one FDB entry and one permanent neighbour entry per remote node (flannel from each node's flannel.alpha.coreos.com/backend-data and public-ip annotations, Calico's Felix from the nodes' VXLAN tunnel addresses): check the agent on this node (its logs, a restart re-adds them) and the remote node's annotations. `bridge fdb show dev DEV` lists the entries, `ip neigh show dev DEV` the remote VTEPs' MACs.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::MacMismatch),
        "The sender's neighbour entry for the remote VTEP holds a MAC the receiving VXLAN device does not have, so the far side drops every decapsulated frame as another host's. The device was re-created with a new MAC (a node or agent restart) and the sender kept the old one: flannel publishes the MAC in the node annotation flannel.alpha.coreos.com/backend-data, which the other nodes' agents copy; restart the agent on the sending node, or fix the entry (`ip neigh replace ADDR lladdr MAC dev DEV nud permanent`, and the FDB entry for that MAC).",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::NoNeighbour),
        "A VXLAN device that does not learn and has no default remote cannot resolve a remote VTEP's address by ARP: the CNI agent programs one permanent neighbour entry (and one FDB entry) per remote node, and this one is missing or failed. Calico's Felix (vxlan.calico) and flanneld (flannel.1) write them from the nodes' tunnel addresses and MACs: check the agent's logs on this node (a \"Deleting ARP entry\" for a live node) and restart it to rewrite them; `ip neigh show dev DEV` and `bridge fdb show dev DEV` list what is there.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::FdbToSelf),
        "The VTEP address this node sends the remote node's frames to is its own: the nodes advertised the same public address (flannel picked the first, NAT'd interface, as on Vagrant with 10.0.2.15 everywhere). Start flanneld with --iface (or --iface-regex) naming the interface the nodes reach each other by (Calico: its IP autodetection method), so each node publishes its own address; `bridge fdb show dev DEV` shows the VTEPs.",
    ),
];

#[cfg(test)]
mod tests;
