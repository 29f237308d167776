//! A cause: a sysctl of the device the packet came in or left by makes
//! the kernel drop it, no rule involved.
//!
//! - **Signals**: IP_LOCALNET (ip_route_input_slow(): a packet to or from
//!   127.0.0.0/8 that came in by a device whose route_localnet is off, as
//!   after a DNAT to 127.0.0.1 or a NodePort on localhost reached from
//!   outside), IPV6DISABLED (ip6_rcv_core(), ip6_output(): IPv6 is off on
//!   the device).
//! - **Facts**: the drop namespace's links (`Env::links`): each device's
//!   route_localnet (or `all`'s) and disable_ipv6 (node/link.rs, from
//!   /proc/sys/net/ipv{4,6}/conf/DEV/).
//! - **Evidence**: [`Evidence::SysctlRefused`] holding a [`SysctlRefusal`]:
//!   the device, the sysctl as set, the address concerned.
//! - **Where**: `ip_rcv_finish_core in netns node: 127.0.0.1 (its
//!   destination after NAT; it was sent to 10.96.0.10) came in by eth0,
//!   where net.ipv4.conf.eth0.route_localnet = 0 ...`.
//! - **Rules**: `rules::device_cause` asks [`judge`] for any drop the
//!   reason arms before it left; `rules::neigh_device_cause` asks
//!   [`at_other_end`] for an IPv6 neighbour failure on a veth whose other
//!   end (node/link.rs: IFLA_LINK, IFLA_LINK_NETNSID; read by
//!   run/facts.rs) has IPv6 disabled.
//! - **Hint**: [`HINTS`], one row per sysctl.

use crate::model::drop_reason::DropReason;
use std::{fmt, net::IpAddr};

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::{Env, Evidence, Kind, hints::Hint};
use crate::model::{flow::Flow, hop::Hop};

/// The sysctl that drops the packet.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Sysctl {
    /// net.ipv4.conf.DEV.route_localnet is 0 (and `all`'s too).
    RouteLocalnet,
    /// net.ipv6.conf.DEV.disable_ipv6 is 1.
    DisableIpv6,
}

/// A device's sysctl that refused the packet, as read from the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SysctlRefusal {
    pub netns: String,
    pub dev: String,
    pub sysctl: Sysctl,
    /// The loopback address the packet was to (or from), for
    /// `route_localnet`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<IpAddr>,
    /// The destination it was sent to, when NAT made it `addr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_to: Option<IpAddr>,
    /// `dev` is the other end of this veth, where a neighbour resolution
    /// failed (a node-side device whose pod has IPv6 off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_end_of: Option<String>,
}

impl SysctlRefusal {
    /// The sysctl as set.
    pub fn setting(&self) -> String {
        match self.sysctl {
            Sysctl::RouteLocalnet => format!("net.ipv4.conf.{}.route_localnet = 0", self.dev),
            Sysctl::DisableIpv6 => format!("net.ipv6.conf.{}.disable_ipv6 = 1", self.dev),
        }
    }

    /// What it does to the packet, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        match self.sysctl {
            Sysctl::RouteLocalnet => {
                let addr = self
                    .addr
                    .map_or_else(|| "a 127.0.0.0/8 address".to_string(), |a| a.to_string());
                let nat = self
                    .sent_to
                    .map(|s| format!(" (its destination after NAT; it was sent to {s})"))
                    .unwrap_or_default();
                format!(
                    "{addr}{nat} came in by {}, where {}: the kernel drops packets to or from 127.0.0.0/8 that arrive from outside",
                    self.dev,
                    self.setting()
                )
            }
            Sysctl::DisableIpv6 => format!(
                "IPv6 is disabled on {} ({}): the kernel drops every IPv6 packet there{}",
                self.dev,
                self.setting(),
                if self.other_end_of.is_some() {
                    ", the neighbour solicitations from this end too"
                } else {
                    ""
                }
            ),
        }
    }

    /// Its sentence as a verdict's fact ([`super::Evidence::SysctlRefused`]):
    /// as [`fmt::Display`] for the other end of a device, else what it
    /// does alone, without the namespace.
    pub(super) fn fact(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.other_end_of.is_some() {
            fmt::Display::fmt(self, f)
        } else {
            write!(f, "{}", self.said())
        }
    }
}

impl fmt::Display for SysctlRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.other_end_of {
            Some(end) => write!(
                f,
                "{} in netns {} is the other end of {end}: {}",
                self.dev,
                self.netns,
                self.said()
            ),
            None => write!(f, "in netns {}: {}", self.netns, self.said()),
        }
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[
    super::explains::Explains {
        reasons: &[DropReason::IpLocalnet],
        cause: "route_localnet is off on the device a packet to or from 127.0.0.0/8 came in by (verdict/sysctl.rs)",
        at: "",
        facts: "the device's and all's net.ipv4.conf route_localnet; the flow's NAT translation",
    },
    super::explains::Explains {
        reasons: &[DropReason::Ipv6disabled],
        cause: "IPv6 is disabled on the device (verdict/sysctl.rs)",
        at: "",
        facts: "the device's net.ipv6.conf disable_ipv6",
    },
    super::explains::Explains {
        reasons: &[DropReason::NeighFailed],
        cause: "IPv6 is disabled at the other end of the veth an IPv6 neighbour resolution failed on (verdict/sysctl.rs)",
        at: "a veth",
        facts: "the veth's other end (IFLA_LINK, IFLA_LINK_NETNSID) and its net.ipv6.conf disable_ipv6",
    },
];

/// A drop a device sysctl explains, as `(where, evidence)`; None when the
/// reason is not one of them or the device's sysctl does not show it.
pub fn judge(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    let link = env
        .links(drop.netns_inode)
        .iter()
        .find(|l| l.dev == *drop.dev)?;
    let r = match reason {
        DropReason::IpLocalnet if link.route_localnet == Some(false) => {
            let t = &drop.tuple;
            let addr = [t.dst, t.src].into_iter().find(is_loopback);
            let sent_to = flow
                .translated
                .as_ref()
                .filter(|x| Some(x.dst) == addr && flow.key.dst != x.dst)
                .map(|_| flow.key.dst);
            SysctlRefusal {
                netns: drop.netns.to_string(),
                dev: link.dev.clone(),
                sysctl: Sysctl::RouteLocalnet,
                addr,
                sent_to,
                other_end_of: None,
            }
        }
        DropReason::Ipv6disabled if link.disable_ipv6 == Some(true) => SysctlRefusal {
            netns: drop.netns.to_string(),
            dev: link.dev.clone(),
            sysctl: Sysctl::DisableIpv6,
            addr: None,
            sent_to: None,
            other_end_of: None,
        },
        _ => return None,
    };
    let at = super::rules::site(func);
    let where_ = format!("{at} in netns {}: {}", r.netns, r.said());
    Some((where_, Evidence::SysctlRefused(r)))
}

/// An IPv6 neighbour resolution failed on a veth whose other end has
/// IPv6 disabled: the other end's namespace drops the solicitations
/// (ip6_rcv_core(), IPV6DISABLED) and sends no advertisement. None when
/// the neighbour is not IPv6, the device is no veth whose other end was
/// read, or IPv6 is on there.
pub fn at_other_end(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<SysctlRefusal> {
    if !super::rules::neigh_addr(flow, drop).is_ipv6() {
        return None;
    }
    let end = env.other_end(drop)?;
    (end.link.disable_ipv6 == Some(true)).then(|| SysctlRefusal {
        netns: end.netns,
        dev: end.link.dev.clone(),
        sysctl: Sysctl::DisableIpv6,
        addr: None,
        sent_to: None,
        other_end_of: Some(drop.dev.to_string()),
    })
}

fn is_loopback(a: &IpAddr) -> bool {
    a.is_loopback()
}

/// Is this the refusal of `sysctl`?
fn is(e: &Evidence, sysctl: Sysctl) -> bool {
    matches!(e, Evidence::SysctlRefused(r) if r.sysctl == sysctl)
}

/// The cause's hints, one per sysctl (hints::hint asks them before its
/// own table).
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Dropped,
        |e| is(e, Sysctl::RouteLocalnet),
        "The kernel takes 127.0.0.0/8 arriving by any device but lo for a martian unless route_localnet is on for that device (or all). kube-proxy turns it on (net.ipv4.conf.all.route_localnet=1) for NodePorts on localhost in iptables mode; a DNAT to 127.0.0.1 (a cache or proxy listening on loopback) needs it too. Set it (`sysctl -w net.ipv4.conf.DEV.route_localnet=1`), or have the service listen on a non-loopback address (NodeLocal DNSCache uses the link-local 169.254.20.10).",
    ),
    Hint::when(
        Kind::Dropped,
        |e| is(e, Sysctl::DisableIpv6),
        "IPv6 is disabled on the device (disable_ipv6 = 1), so the kernel drops every IPv6 packet it receives or sends there. On a dual-stack cluster the node's sysctl profile (net.ipv6.conf.all/default.disable_ipv6 in sysctl.d, a hardened image) or the CNI must leave IPv6 on for pod and node interfaces: `sysctl -w net.ipv6.conf.DEV.disable_ipv6=0`, then fix the setting at its source.",
    ),
];

#[cfg(test)]
mod tests;
