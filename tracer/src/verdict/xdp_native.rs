//! A cause: an XDP program in native (driver) mode took the packet and it
//! was lost there, before the stack had an skb of it to trace. On a veth
//! (a pod's host-side device, where Cilium, Calico and custom XDP load
//! balancers attach it), veth_xdp_rcv_skb() runs the program in veth's
//! NAPI poll, on a copy of the frame: XDP_REDIRECT and XDP_TX hand on an
//! xdp_frame, not an skb, and when that fails the frame is freed with no
//! skb tracepoint (a redirect into a veth whose other end has no XDP
//! program: EOPNOTSUPP; an XDP_TX whose other end has none: ENXIO at the
//! flush, xdp:xdp_bulk_tx).
//!
//! - **Signals**: the request's last sighting is where the packet went
//!   into native XDP on a device with a program in driver mode: the
//!   consume of the original skb veth copies the frame from
//!   (skb_pp_cow_data() on 6.x, veth_convert_skb_to_xdp_buff() or
//!   veth_xdp_rcv_skb() before), the packet's first sighting in that
//!   namespace (after a receive there, a consume is the stack's: a socket
//!   took it), with nothing of the request after it and no reply. XDP_PASS is seen next on the device (netif_receive),
//!   so a passed packet is not this cause. A frame the program dropped is
//!   freed by veth_xdp_rcv_skb() with kfree_skb() (NOT_SPECIFIED): a drop
//!   at [`is_site`], which bpf_drop.rs names with the program.
//! - **Facts**: the device's XDP programs (`Env::dev_programs`), their
//!   mode (driver, generic) from the link's IFLA_XDP attributes.
//! - **Evidence**: [`Evidence::XdpNativeTaken`] holding an
//!   [`XdpNativeTaken`].
//! - **Where**: `native XDP of lxc0 in netns node: XDP program
//!   xdp_redirect (id 7, driver) took the packet and it was not seen
//!   again`.
//! - **Rules**: [`taken`] (in `rules::RULES`, after `dropped`).
//! - **Hint**: [`HINTS`].
//! - **Not here**: which action the program returned. The xdp
//!   tracepoints fire for a native redirect, but name no packet, and the
//!   skb tracer followed was freed before the program ran (tracer-ebpf
//!   xdp.rs attributes them in generic mode only); fexit on the program
//!   (pwru's `--filter-trace-xdp`) would tell it where fentry is allowed.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, Kind, Verdict, bpf_drop::BpfHook, hints::Hint, reason::Found, rules};
use crate::{
    model::{
        flow::Flow,
        hop::{Dir, Hop, HopData},
    },
    node::bpf_progs::AttachedProgram,
};
use tracer_common::Hook;

/// Functions of veth's native XDP path that free the skb of a frame its
/// program dropped (drivers/net/veth.c; veth_xdp_rcv_skb() is inlined
/// into veth_xdp_rcv() and veth_poll() on some builds).
const SITES: &[&str] = &[
    "veth_xdp_rcv_skb",
    "veth_xdp_rcv_one",
    "veth_xdp_rcv",
    "veth_poll",
];

/// Is `func` where native XDP on a veth frees what its program dropped?
pub fn is_site(func: &str) -> bool {
    SITES.contains(&crate::model::names::stem(func))
}

/// Where veth consumes the skb it copied a frame from for XDP:
/// skb_pp_cow_data() (6.x), veth_convert_skb_to_xdp_buff() (6.1),
/// veth_xdp_rcv_skb() itself (before); empty when the kernel's
/// consume_skb gives no location (5.10).
const COPY_SITES: &[&str] = &[
    "skb_pp_cow_data",
    "veth_convert_skb_to_xdp_buff",
    "veth_xdp_rcv_skb",
    "veth_xdp_rcv",
    "veth_poll",
    "",
];

/// A packet a native-mode XDP program took, not seen again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XdpNativeTaken {
    pub dev: String,
    pub netns: String,
    /// The device's XDP programs in driver mode.
    pub programs: Vec<AttachedProgram>,
    /// Where the frame went into XDP: the function that consumed the skb
    /// veth copied it from (empty when the kernel did not say).
    pub copied_at: String,
}

impl fmt::Display for XdpNativeTaken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} in netns {} took the packet",
            super::bpf_drop::named(&self.programs, ", "),
            self.dev,
            self.netns
        )?;
        if !self.copied_at.is_empty() {
            write!(f, " (its frame copied for XDP at {})", self.copied_at)?;
        }
        write!(
            f,
            " and it was not seen again: no skb came out of XDP (an XDP_REDIRECT or XDP_TX whose frame was lost or went where tracer does not look, or a drop the kernel did not report)"
        )
    }
}

/// The device's XDP programs in driver mode (`AttachedProgram::at`: `DEV
/// (driver)`).
fn driver_programs(env: &dyn Env, h: &Hop) -> Vec<AttachedProgram> {
    BpfHook::Xdp
        .programs_at(env, h.netns_inode, &h.dev)
        .into_iter()
        .filter(|p| p.at.ends_with("(driver)"))
        .collect()
}

/// Where the request went into native XDP and was not seen again, and
/// the fact ([`taken`]'s).
fn judge<'a>(flow: &'a Flow, env: &dyn Env) -> Option<(&'a Hop, XdpNativeTaken)> {
    if flow.replies > 0 {
        return None;
    }
    let mut requests = flow.hops.iter().rev().filter(|h| h.dir == Dir::Request);
    let last = requests.next()?;
    let HopData::Consume { location } = &last.data else {
        return None;
    };
    let site = crate::model::names::func_of(location);
    if last.hook != Hook::Consume
        || last.dev.is_empty()
        || !COPY_SITES.contains(&crate::model::names::stem(site))
    {
        return None;
    }
    // Native XDP runs before the stack sees the packet: the consume is
    // its first sighting in that namespace. After a receive there, it is
    // the stack's (a socket took it).
    if requests
        .next()
        .is_some_and(|h| h.netns_inode == last.netns_inode)
    {
        return None;
    }
    let programs = driver_programs(env, last);
    if programs.is_empty() {
        return None;
    }
    Some((
        last,
        XdpNativeTaken {
            dev: last.dev.to_string(),
            netns: last.netns.to_string(),
            programs,
            copied_at: site.to_string(),
        },
    ))
}

/// A rule: the request went into a native XDP program and nothing came
/// out. No reply, not dropped by the stack: its fate is XDP's.
pub fn taken(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let (at, t) = judge(flow, env)?;
    let mut v = rules::verdict(
        Kind::NoReply,
        Found::TakenByNativeXdp,
        format!(
            "native XDP of {} in netns {}: {} took the packet and it was not seen again",
            t.dev,
            t.netns,
            super::bpf_drop::named(&t.programs, ", ")
        ),
        &at.netns,
        Some(at.dev.to_string()),
    );
    v.settled = false;
    v.add(Evidence::XdpNativeTaken(t));
    v.add(Evidence::PacketsSeen {
        requests: flow.packets - flow.replies,
        replies: flow.replies,
    });
    v.add_all(rules::side_evidence(flow));
    Some(v)
}

fn is_taken(e: &Evidence) -> bool {
    matches!(e, Evidence::XdpNativeTaken(_))
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[Hint::when(
    Kind::NoReply,
    is_taken,
    "An XDP program in native (driver) mode took the packet before the stack had an skb of it, and nothing came out: it dropped it, or redirected or sent it back (XDP_REDIRECT, XDP_TX) as a frame that was lost. On a veth, a redirect into another veth and an XDP_TX both need an XDP program on the receiving other end (veth only takes XDP frames with its NAPI on: load a program that passes everything there, or turn GRO on, `ethtool -K DEV gro on`); the failures count as drops of the device (`ip -s link show DEV`, `ethtool -S DEV | grep xdp`) and show in the xdp tracepoints (`perf record -e 'xdp:*'`, xdpdump, pwru --filter-trace-xdp). Check what the program returns for this flow (`bpftool prog show id N`, its maps, its agent's logs).",
)];

#[cfg(test)]
mod tests;
