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
//! - **Far side** (the outer packet followed into the tunnel: tracer-ebpf
//!   filter.rs classify_matched, tracer_common::tunnel): a drop of the
//!   outer packet where it arrived: VXLAN_VNI_NOT_FOUND (no device of the
//!   sender's VNI on its port there), VXLAN_INVALID_HDR (header flags,
//!   GBP or GPE, the receiver was not configured for), LOCAL_MAC (the
//!   frame's source MAC is the receiving device's own), NO_SOCKET for
//!   the outer UDP (no VXLAN device on that port). Facts: the links of
//!   the sender's namespace (its device, found on the flow's last hop
//!   before the outer tuple) and of the receiver's.
//! - TUNNEL_TXINFO in vxlan_xmit: a device in metadata mode (`external`)
//!   was routed a packet that carries no tunnel key.
//! - [`encapsulation`] is evidence on any verdict of a flow that entered a
//!   tunnel: where, as what outer tuple, and where it came out.
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
    /// The far side has no VXLAN device for the sender's VNI on its port.
    VniNotFound,
    /// The far side's device for the VNI was not configured for a header
    /// extension the sender uses (GBP, GPE), or the reverse.
    FlagsMismatch,
    /// The far side's device has the sender's MAC: it takes the frames for
    /// its own, looped back.
    SameMac,
    /// Nothing listens on the far side on the UDP port the sender sends
    /// to: no VXLAN device there uses it.
    PortNotOpen,
    /// A device in metadata mode was handed a packet without a tunnel key.
    NoTunnelKey,
    /// The outer packet went to a remote VTEP that no host on the
    /// underlay answers for: its neighbour resolution failed on the
    /// sender's underlay device.
    RemoteUnanswered,
    /// The far side's VXLAN device on the sender's port is down, so
    /// nothing listens there.
    FarDeviceDown,
}

/// A VXLAN device of the far side, as the refusal names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FarDevice {
    pub dev: String,
    pub vni: u32,
    pub port: u16,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gbp: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpe: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Administratively down (not IFF_UP): it takes no frame.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub down: bool,
}

impl fmt::Display for FarDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (VNI {}, port {}{}{})",
            self.dev,
            self.vni,
            port_or_default(self.port),
            flags_said(self.gbp, self.gpe),
            if self.down { ", down" } else { "" }
        )
    }
}

/// ", GBP" / ", GPE" / "".
fn flags_said(gbp: bool, gpe: bool) -> &'static str {
    match (gbp, gpe) {
        (true, _) => ", GBP",
        (false, true) => ", GPE",
        _ => "",
    }
}

/// Why a VXLAN device lost the frame: what was read from the node.
#[expect(
    clippy::struct_excessive_bools,
    reason = "a device's settings as the kernel keeps them: each flag is a fact"
)]
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
    /// The far side's namespace, for the far side's problems (the device
    /// above is then the sender's), and its VXLAN devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub far_netns: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub far_devices: Vec<FarDevice>,
    /// The sender's header extensions (GBP, GPE), and whether it is in
    /// metadata mode (`external`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gbp: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpe: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
    /// For `remote_unanswered`: the underlay device the outer packet
    /// waited on for its neighbour, and the sending device's own local
    /// address (IFLA_VXLAN_LOCAL), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underlay: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<IpAddr>,
}

impl TunnelRefusal {
    /// "netns N has no VXLAN device" / "netns N's VXLAN devices: a (...), b (...)".
    fn far_said(&self) -> String {
        let far = self.far_netns.as_deref().unwrap_or("?");
        if self.far_devices.is_empty() {
            return format!("netns {far} has no VXLAN device");
        }
        let devs: Vec<String> = self.far_devices.iter().map(ToString::to_string).collect();
        format!("netns {far}'s VXLAN devices: {}", devs.join(", "))
    }

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
            TunnelProblem::VniNotFound => format!(
                "netns {} has no VXLAN device for VNI {} on port {} ({}), so it drops every frame of this tunnel",
                self.far_netns.as_deref().unwrap_or("?"),
                self.vni,
                port_or_default(self.port),
                self.far_said()
            ),
            TunnelProblem::FlagsMismatch => format!(
                "its frames carry {} and the device for VNI {} in netns {} does not take them ({}): the receiver drops a header with flags it was not configured for",
                match (self.gbp, self.gpe) {
                    (true, _) => "the GBP extension (a group policy id)",
                    (false, true) => "the GPE extension",
                    _ => "no extension",
                },
                self.vni,
                self.far_netns.as_deref().unwrap_or("?"),
                self.far_said()
            ),
            TunnelProblem::SameMac => format!(
                "its MAC {} is also the MAC of {} in netns {}, which takes the frames for its own, looped back, and drops them",
                self.dev_mac.as_deref().unwrap_or("?"),
                self.far_devices
                    .first()
                    .map_or("its VXLAN device", |d| d.dev.as_str()),
                self.far_netns.as_deref().unwrap_or("?"),
            ),
            TunnelProblem::FarDeviceDown => format!(
                "it sends to UDP port {}, and the device for it in netns {} is down ({}): nothing takes the frames there",
                port_or_default(self.port),
                self.far_netns.as_deref().unwrap_or("?"),
                self.far_said()
            ),
            TunnelProblem::PortNotOpen => format!(
                "it sends to UDP port {}, where nothing listens in netns {} ({})",
                port_or_default(self.port),
                self.far_netns.as_deref().unwrap_or("?"),
                self.far_said()
            ),
            TunnelProblem::RemoteUnanswered => {
                let vtep = self.vtep.map_or_else(|| "?".to_string(), |v| v.to_string());
                let from = match (&self.mac, self.external) {
                    (Some(m), _) => {
                        let hop = self
                            .next_hop
                            .map(|h| format!(", the MAC of {h}, the next hop,"))
                            .unwrap_or_default();
                        format!(" (its FDB entry for {m}{hop} sends there)")
                    }
                    (None, true) => {
                        " (the packet's tunnel key, which a route's `encap` or the dataplane's BPF program sets)".to_string()
                    }
                    (None, false) => String::new(),
                };
                let local = self
                    .local
                    .map(|l| format!(" (this device sends from {l})"))
                    .unwrap_or_default();
                format!(
                    "its outer packet to the remote VTEP {vtep}{from} waited on {} for an ARP/NDP answer that never came: no host on that link has {vtep}{local}",
                    self.underlay.as_deref().unwrap_or("the underlay")
                )
            }
            TunnelProblem::NoTunnelKey => "the device is in metadata mode (external): it sends only packets that carry a tunnel key (set by a BPF program with bpf_skb_set_tunnel_key(), or by a route's `encap`), and the kernel routed this one onto it without one".to_string(),
        }
    }
}

impl fmt::Display for TunnelRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.external {
            return write!(
                f,
                "vxlan {} in netns {} (metadata mode, port {}): {}",
                self.dev,
                self.netns,
                port_or_default(self.port),
                self.said()
            );
        }
        write!(
            f,
            "vxlan {} in netns {} (VNI {}, port {}{}): {}",
            self.dev,
            self.netns,
            self.vni,
            port_or_default(self.port),
            flags_said(self.gbp, self.gpe),
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
        reasons: &[DropReason::NeighFailed, DropReason::NeighQueuefull],
        cause: "a tunnel's outer packet went to a remote VTEP no host on the underlay answers for (verdict/tunnel.rs)",
        at: "the sender's underlay device, the outer packet followed from its VXLAN device",
        facts: "the sending VXLAN device's VNI, port, metadata mode and FDB (RTM_GETLINK, RTM_GETNEIGH)",
    },
    super::explains::Explains {
        reasons: &[DropReason::VxlanVniNotFound],
        cause: "the far side has no VXLAN device for the sender's VNI on its port (verdict/tunnel.rs)",
        at: "vxlan_rcv, the outer packet followed from the sender's VXLAN device",
        facts: "the sender's and the receiver's VXLAN devices: VNI, port (RTM_GETLINK)",
    },
    super::explains::Explains {
        reasons: &[DropReason::VxlanInvalidHdr],
        cause: "the sender's VXLAN header extension (GBP, GPE) is not the receiver's (verdict/tunnel.rs)",
        at: "vxlan_rcv, the outer packet followed from the sender's VXLAN device",
        facts: "the sender's and the receiver's VXLAN devices: VNI, port, GBP, GPE (RTM_GETLINK)",
    },
    super::explains::Explains {
        reasons: &[DropReason::LocalMac],
        cause: "the receiving VXLAN device has the sender device's MAC (verdict/tunnel.rs)",
        at: "vxlan_rcv, the outer packet followed from the sender's VXLAN device",
        facts: "both VXLAN devices' MACs (RTM_GETLINK)",
    },
    super::explains::Explains {
        reasons: &[DropReason::TunnelTxinfo],
        cause: "a VXLAN device in metadata mode was routed a packet without a tunnel key (verdict/tunnel.rs)",
        at: "vxlan_xmit on a device in metadata mode (external)",
        facts: "the device's metadata mode (IFLA_VXLAN_COLLECT_METADATA)",
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
    let f = crate::model::names::stem(func);
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
    } else if vxlan_xmit_func(func) && *reason == DropReason::TunnelTxinfo {
        no_tunnel_key(drop, env)?
    } else if vxlan_xmit_func(func) {
        no_fdb_entry(flow, drop, env)?
    } else if *reason == DropReason::Otherhost {
        mac_mismatch(flow, drop, env)?
    } else {
        far_side(flow, drop, reason, func, env)?
    };
    // The far side's drop opens with its own site; the refusal names the
    // sender's device.
    let at = if r.far_netns.is_some() {
        format!("{} in netns {}: {r}", super::rules::site(func), drop.netns)
    } else {
        r.to_string()
    };
    Some((at, Evidence::TunnelWillNotSend(r)))
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
        far_netns: None,
        far_devices: Vec::new(),
        gbp: v.gbp,
        gpe: v.gpe,
        external: v.external,
        underlay: None,
        local: None,
    }
}

/// A device in metadata mode handed a packet with no tunnel key
/// (vxlan_xmit(): TUNNEL_TXINFO).
fn no_tunnel_key(drop: &Hop, env: &dyn Env) -> Option<TunnelRefusal> {
    let (_, v) = vxlan_dev(env.links(drop.netns_inode), &drop.dev)?;
    v.external.then(|| TunnelRefusal {
        problem: TunnelProblem::NoTunnelKey,
        ..refusal(drop, v)
    })
}

/// A neighbour failure of the flow's outer packet in the namespace that
/// wrapped it: the remote VTEP it was sent to (the FDB entry's `dst`, or
/// in metadata mode the tunnel key's) is answered by no host on the
/// underlay. The packet waited in the neighbour's queue
/// (__neigh_event_send()) while ARP/NDP probed, and neigh_invalidate()
/// dropped it (NEIGH_FAILED; NEIGH_QUEUEFULL when later packets pushed it
/// out). A node whose address changed leaves its old one in the other
/// nodes' FDBs or tunnel maps. None when the packet is not the flow's
/// outer one, was not wrapped there, or the failed neighbour is another
/// address than the VTEP (an underlay gateway).
pub fn remote_unanswered(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<TunnelRefusal> {
    if !flow.is_outer(&drop.tuple) {
        return None;
    }
    let (sent, _) = entered(flow)?;
    if sent.netns_inode != drop.netns_inode {
        return None;
    }
    let (dev, v) = vxlan_dev(env.links(sent.netns_inode), &sent.dev)?;
    let vtep = drop.tuple.dst;
    if super::rules::neigh_addr(flow, drop) != vtep {
        return None;
    }
    let fdb = v.fdb.iter().find(|e| e.dst == Some(vtep));
    let mac = fdb.map(|e| e.mac.clone());
    Some(TunnelRefusal {
        dev: dev.dev.clone(),
        netns: sent.netns.to_string(),
        problem: TunnelProblem::RemoteUnanswered,
        next_hop: mac
            .as_ref()
            .and_then(|_| super::rules::next_hop_gw(flow, sent.netns_inode)),
        mac,
        vtep: Some(vtep),
        underlay: (!drop.dev.is_empty()).then(|| drop.dev.to_string()),
        local: v.local,
        ..refusal(sent, v)
    })
}

/// The hop that took the flow into its tunnel: the last request hop
/// before the first outer one, in that hop's namespace (the tunnel
/// device's xmit), and that first outer hop.
fn entered(flow: &Flow) -> Option<(&Hop, &Hop)> {
    let first = flow.hops.iter().position(|h| flow.is_outer(&h.tuple))?;
    let outer = &flow.hops[first];
    let inner = flow.hops[..first]
        .iter()
        .rev()
        .find(|h| h.dir == Dir::Request && !h.dev.is_empty() && h.is_egress())?;
    Some((inner, outer))
}

/// The far side's drop of the outer packet, with the sender's device and
/// the receiver's devices read.
fn far_side(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<TunnelRefusal> {
    if !flow.is_outer(&drop.tuple) {
        return None;
    }
    let (sent, outer) = entered(flow)?;
    let (dev, v) = vxlan_dev(env.links(sent.netns_inode), &sent.dev)?;
    let far: Vec<FarDevice> = env
        .links(drop.netns_inode)
        .iter()
        .filter_map(|l| {
            let fv = l.vxlan.as_ref()?;
            Some(FarDevice {
                dev: l.dev.clone(),
                vni: fv.vni,
                port: fv.port,
                gbp: fv.gbp,
                gpe: fv.gpe,
                mac: l.mac.clone(),
                down: l.up == Some(false),
            })
        })
        .collect();
    let port = port_or_default(v.port);
    let on_port = |d: &&FarDevice| port_or_default(d.port) == port;
    let same_tunnel = |d: &&FarDevice| on_port(d) && d.vni == v.vni;
    let senders_mac = |d: &&FarDevice| {
        d.mac
            .as_deref()
            .zip(dev.mac.as_deref())
            .is_some_and(|(m, s)| m.eq_ignore_ascii_case(s))
    };
    let f = crate::model::names::stem(func);
    let problem = match reason {
        DropReason::VxlanVniNotFound => TunnelProblem::VniNotFound,
        DropReason::VxlanInvalidHdr => TunnelProblem::FlagsMismatch,
        DropReason::LocalMac => TunnelProblem::SameMac,
        DropReason::NoSocket if outer.tuple.proto == 17 => {
            if far.iter().any(|d| on_port(&d)) && far.iter().filter(on_port).all(|d| d.down) {
                TunnelProblem::FarDeviceDown
            } else {
                TunnelProblem::PortNotOpen
            }
        }
        // Kernels before VXLAN's drop reasons (6.13): vxlan_rcv's drops
        // are NOT_SPECIFIED; the facts tell which.
        DropReason::NotSpecified if f == "vxlan_rcv" => match far.iter().find(same_tunnel) {
            None => TunnelProblem::VniNotFound,
            Some(d) if (d.gbp, d.gpe) != (v.gbp, v.gpe) => TunnelProblem::FlagsMismatch,
            Some(d) if senders_mac(&d) => TunnelProblem::SameMac,
            Some(_) => return None,
        },
        _ => return None,
    };
    // Each problem only where the facts show it.
    let shown = match problem {
        TunnelProblem::VniNotFound => !far.iter().any(|d| same_tunnel(&d)),
        TunnelProblem::FlagsMismatch => far
            .iter()
            .find(same_tunnel)
            .is_some_and(|d| (d.gbp, d.gpe) != (v.gbp, v.gpe)),
        TunnelProblem::SameMac => far.iter().any(|d| senders_mac(&d)),
        TunnelProblem::PortNotOpen => !far.iter().any(|d| on_port(&d)),
        TunnelProblem::FarDeviceDown => true,
        _ => false,
    };
    if !shown {
        return None;
    }
    let far = match problem {
        TunnelProblem::FlagsMismatch => far.into_iter().filter(|d| same_tunnel(&d)).collect(),
        TunnelProblem::SameMac => far.into_iter().filter(|d| senders_mac(&d)).collect(),
        TunnelProblem::FarDeviceDown => far.into_iter().filter(|d| on_port(&d)).collect(),
        _ => far,
    };
    Some(TunnelRefusal {
        dev: dev.dev.clone(),
        netns: sent.netns.to_string(),
        problem,
        dev_mac: dev.mac.clone(),
        far_netns: Some(drop.netns.to_string()),
        far_devices: far,
        ..refusal(sent, v)
    })
}

/// How a flow went into a tunnel and came out of it (evidence on any
/// verdict): the device it was sent into, the outer packet, and where
/// the inner packet was seen again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Encapsulation {
    /// `VXLAN`, `Geneve`, `WireGuard`, `IPIP`, `SIT`, `GRE`.
    pub tunnel: String,
    /// The device the inner packet was last sent by, and its namespace.
    pub dev: String,
    pub netns: String,
    /// The outer packet: `udp 10.0.0.1:41234 -> 10.0.0.2:4789`.
    pub outer: String,
    /// Where the inner packet came out again, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_netns: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_dev: Option<String>,
}

impl fmt::Display for Encapsulation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // "an IPIP tunnel", "a VXLAN tunnel": IPIP is read as letters.
        let article = if self.tunnel == "IPIP" { "an" } else { "a" };
        write!(
            f,
            "sent into {article} {} tunnel by {} in netns {} as {}",
            self.tunnel, self.dev, self.netns, self.outer
        )?;
        match (&self.out_netns, &self.out_dev) {
            (Some(n), Some(d)) => write!(f, "; decapsulated in netns {n} (out of {d})"),
            (Some(n), None) => write!(f, "; decapsulated in netns {n}"),
            _ => write!(f, "; not seen decapsulated"),
        }
    }
}

/// The tunnel a tuple's outer protocol and port name.
fn tunnel_name(proto: u8, dport: u16) -> &'static str {
    match (proto, dport) {
        (17, 6081) => "Geneve",
        (17, 51820 | 51871) => "WireGuard",
        (17, _) => "VXLAN",
        (4, _) => "IPIP",
        (41, _) => "SIT",
        _ => "GRE",
    }
}

/// A flow that entered a tunnel, as evidence (any verdict). It came out
/// where its inner packet is next seen in a namespace it had not passed
/// before the tunnel: a retransmission starting again from the client
/// is not a decapsulation.
pub fn encapsulation(flow: &Flow) -> Option<Evidence> {
    let (sent, outer) = entered(flow)?;
    let first = flow.hops.iter().position(|h| std::ptr::eq(h, outer))?;
    let before: Vec<u32> = flow.hops[..first]
        .iter()
        .filter(|h| h.dir == Dir::Request)
        .map(|h| h.netns_inode)
        .chain([sent.netns_inode])
        .collect();
    let out = flow.hops[first..].iter().find(|h| {
        h.dir == Dir::Request && !flow.is_outer(&h.tuple) && !before.contains(&h.netns_inode)
    });
    let t = &outer.tuple;
    Some(Evidence::Encapsulated(Encapsulation {
        tunnel: tunnel_name(t.proto, t.dport).into(),
        dev: sent.dev.to_string(),
        netns: sent.netns.to_string(),
        outer: t.to_string(),
        out_netns: out.map(|h| h.netns.to_string()),
        out_dev: out.map(|h| h.dev.to_string()).filter(|d| !d.is_empty()),
    }))
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
/// this flow: for OTHERHOST, and for a drop of the outer packet on the
/// far side, those the request passed before it (the sender's tunnel
/// device and neighbours). The facts reader
/// (run/facts.rs) reads them where it reads the drop's.
pub fn links_wanted(flow: &Flow) -> Vec<u32> {
    let Some(drop) = flow.hops.iter().find(|h| {
        matches!(&h.data, HopData::Drop(d) if d.reason == DropReason::Otherhost)
            || matches!(h.data, HopData::Drop(_)) && flow.is_outer(&h.tuple)
    }) else {
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
    // A rule nftrace named dropped the outer packet (traced by its inner
    // headers, node/nftrace.rs vxlan_rule), before any decapsulation.
    Hint {
        kind: Some(Kind::Dropped),
        reason: None,
        evidence: &[super::EvidenceKind::NfRuleTraced],
        when: Some(|e| matches!(e, Evidence::Encapsulated(x) if x.out_netns.is_none())),
        text: "A netfilter rule (named above) dropped the tunnel's own packets, the outer ones, before they were decapsulated: a host firewall between the nodes (firewalld, ufw, rules a cloud's security groups are mirrored into) that does not allow the overlay's port. Allow it on every node, for the nodes' addresses: UDP 8472 for VXLAN of flannel and Cilium, 4789 for Calico's and IANA's, 6081 Geneve, 51820/51871 WireGuard (`firewall-cmd --permanent --add-port=8472/udp; firewall-cmd --reload`), or change the rule named.",
    },
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
        |e| is(e, TunnelProblem::VniNotFound),
        "The nodes' VXLAN devices disagree on the VNI (or the port): the receiver has no device for the sender's VNI on that port and drops every frame. A CNI setting that differs between nodes does this (Calico's FELIX_VXLANVNI or FELIX_VXLANPORT env on some nodes over the FelixConfiguration, a VNI kept from a flannel migration, flannel's Backend.VNI changed on some nodes only): make every node's setting the same and restart the agent; `ip -d link show DEV` on each node shows `vxlan id N ... dstport P`.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::FlagsMismatch),
        "The two nodes' VXLAN devices do not agree on a header extension: a device with GBP (group policy, `ip link ... gbp`) marks its frames with a policy id a device without it refuses (and a GPE device's header likewise). Create the devices the same way on every node (the CNI's setting for the extension, or a mixed version of its agent during an upgrade); `ip -d link show DEV` shows `gbp`/`gpe`.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::SameMac),
        "Two nodes' VXLAN devices have the same MAC, so each takes the other's frames for its own looped back and drops them: nodes cloned from one image keep a MAC written in a config (systemd's MACAddressPolicy=persistent derives it from /etc/machine-id, which the clones share), or an agent copied one node's MAC. Give each node its own machine-id (`systemd-machine-id-setup` after emptying /etc/machine-id) or MAC and re-create the device (restart the CNI agent); `ip link show DEV` on each node shows it.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::PortNotOpen),
        "The sender's VXLAN device sends to a UDP port no VXLAN device listens on at the far side: the nodes disagree on the port (flannel's Backend.Port, Calico's vxlanPort or FELIX_VXLANPORT, Cilium's tunnel-port), so the far side answers port unreachable. Set the same port on every node and restart the agent; `ip -d link show DEV` shows `dstport`.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::NoTunnelKey),
        "A VXLAN device in metadata mode (Cilium's cilium_vxlan, Calico eBPF's) has no remote of its own: only the dataplane's BPF program, which sets the tunnel key per packet, can send through it. This packet was routed onto it by the kernel instead (a route to the pod CIDR via the tunnel device with no BPF program on the path, or the agent down): check the dataplane's programs on the pod's device (`bpftool net`, `cilium status`) and the routes that point at the device.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::RemoteUnanswered),
        "The tunnel sends this pod's packets to a remote VTEP address no node answers for on the underlay. Compare the address named with the Nodes' InternalIP (`kubectl get nodes -o wide`): not a node's address now, it is a node whose IP changed (a new DHCP lease, a VM re-created with the same name) or a node removed, kept by the agents on the other nodes; restart the agent on the node whose address changed (it republishes it) and on this one (it rewrites its tables: Cilium `cilium-dbg bpf tunnel list`, cilium/cilium#31066; flannel `bridge fdb show dev flannel.1` and the node annotation flannel.alpha.coreos.com/public-ip; Calico `bridge fdb show dev vxlan.calico`). A node's address, but on a network the nodes do not reach each other by (a management or NAT interface the agent autodetected: the underlay device and this device's local address named above): pin the interface, Calico IP_AUTODETECTION_METHOD=interface=NAME (projectcalico/calico#8203), flanneld --iface=NAME, Cilium's devices/--direct-routing-device.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::FarDeviceDown),
        "The far node's VXLAN device for this tunnel's port is down, so the frames reach the node and nothing takes them (it answers port unreachable). The CNI agent creates the device and brings it up at start (Calico's Felix vxlan.calico, flanneld flannel.1, the cilium agent cilium_vxlan), but a restart of the agent alone may leave an existing device down (projectcalico/calico#4468): on that node, `ip link set DEV up`, or delete the device so that the agent brings the device up anew (projectcalico/calico#3271); then look for what set it down (the agent's logs, a network service restart). `ip -d link show DEV` shows its state.",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, TunnelProblem::FdbToSelf),
        "The VTEP address this node sends the remote node's frames to is its own: the nodes advertised the same public address (flannel picked the first, NAT'd interface, as on Vagrant with 10.0.2.15 everywhere). Start flanneld with --iface (or --iface-regex) naming the interface the nodes reach each other by (Calico: its IP autodetection method), so each node publishes its own address; `bridge fdb show dev DEV` shows the VTEPs.",
    ),
];

#[cfg(test)]
mod tests;
