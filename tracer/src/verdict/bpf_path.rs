//! The dataplane's BPF programs a followed packet passed: on an eBPF
//! dataplane (Cilium, Calico eBPF) every pod's packets cross tc programs
//! on both veths and XDP on the node's devices, and what each did is the
//! first question. Not a cause of its own: evidence on any verdict.
//!
//! - **Signals**: the flow's hops at a device's hooks: tracer's tc
//!   programs (first at their hook, tcx `LinkOrder::first` or clsact
//!   priority 1: the others run after them) and the netif_receive_skb
//!   tracepoint, which __netif_receive_skb_core() fires before generic
//!   XDP.
//! - **Facts**: the programs attached at that hook of that device, tracer's
//!   own left out (`Env::dev_programs`, node/bpf_progs.rs), kept in a
//!   recording.
//! - **Evidence**: [`Evidence::BpfPath`] holding a [`BpfPath`]: per site
//!   (direction, hook, device, namespace) its programs and what they did
//!   to the packet, read from the hops that follow (fexit on each program,
//!   which would give its return code, is not used: the hops say it).
//! - **Where**: unchanged.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, bpf_drop::BpfHook};
use crate::{
    model::{
        flow::Flow,
        hop::{Dir, Hop, HopData, XdpAction, XdpData},
        names::func_of,
    },
    node::bpf_progs::AttachedProgram,
};
use tracer_common::Hook;

/// What the programs of a hook did to a followed packet, as the hops after
/// it show.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    /// The packet went on unchanged.
    Passed,
    /// It went on with other addresses or ports.
    Rewrote,
    /// It was next seen leaving another device, without the IP stack
    /// between (bpf_redirect(), bpf_redirect_peer(); an XDP_REDIRECT).
    Redirected,
    /// An XDP program sent it back out the device it came in on (XDP_TX):
    /// it was next seen arriving where it had come from.
    SentBack,
    /// It was dropped at this hook.
    Dropped,
    /// It was not seen again.
    LastSeen,
}

/// One hook of one device, in one direction, with programs on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProgramSite {
    pub dir: Dir,
    /// `tc ingress`, `tc egress` or `XDP`.
    pub hook: String,
    pub dev: String,
    pub netns: String,
    pub programs: Vec<AttachedProgram>,
    pub outcome: Outcome,
    /// The device it was next seen on, when redirected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_dev: Option<String>,
    /// What the XDP program returned, as the xdp tracepoints told it (a
    /// redirect and its target or error, XDP_ABORTED, a refused XDP_TX).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp: Option<XdpData>,
}

/// The sites of a flow, in the order its packets met them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BpfPath {
    pub sites: Vec<ProgramSite>,
}

impl fmt::Display for ProgramSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let did = match (self.outcome, &self.to_dev, &self.xdp) {
            (Outcome::Redirected | Outcome::Dropped, to, Some(x)) => x.did(to.as_deref()),
            (Outcome::Redirected, Some(d), None) => format!("redirected it to {d}"),
            (Outcome::SentBack, _, _) => {
                "XDP_TX: sent it back out the device it came in on".to_string()
            }
            (o, _, _) => {
                let s: &'static str = o.into();
                s.replace('_', " ")
            }
        };
        write!(
            f,
            "{} at {} of {} in netns {}: {} ({did})",
            match self.dir {
                Dir::Request => "request",
                Dir::Reply => "reply",
            },
            self.hook,
            self.dev,
            self.netns,
            super::bpf_drop::named(&self.programs, ", ")
        )
    }
}

impl fmt::Display for BpfPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BPF programs on the path: ")?;
        for (i, s) in self.sites.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

/// The program hooks of a hop's device a packet meets right after the
/// hop: tracer's tc programs run first at theirs, and the
/// netif_receive_skb tracepoint fires before generic XDP and tc ingress
/// (__netif_receive_skb_core()).
pub(super) fn after(hook: Hook) -> &'static [BpfHook] {
    match hook {
        Hook::NetifReceive => &[BpfHook::Xdp, BpfHook::TcIngress],
        Hook::TcIngress => &[BpfHook::TcIngress],
        Hook::TcEgress => &[BpfHook::TcEgress],
        _ => &[],
    }
}

/// The program hooks a packet met right before the hop: the
/// net_dev_start_xmit tracepoint fires after tc egress
/// (__dev_queue_xmit()), tracer's tc ingress program after XDP.
pub(super) fn before(hook: Hook) -> &'static [BpfHook] {
    match hook {
        Hook::Xmit => &[BpfHook::TcEgress],
        Hook::TcIngress => &[BpfHook::Xdp],
        _ => &[],
    }
}

/// A hop that carries the packet's whole tuple: not a route lookup or a
/// neighbour entry (their tuples hold the addresses only).
fn whole(h: &Hop) -> bool {
    !matches!(h.data, HopData::Fib(_) | HopData::Neigh(_))
}

/// What a site before `hops[k]` did: the packet reached the hop, with
/// the tuple the same skb had before, or another.
fn outcome_before(hops: &[Hop], k: usize) -> Outcome {
    let h = &hops[k];
    match hops[..k].iter().rev().find(|p| p.skb == h.skb && whole(p)) {
        Some(p) if *p.tuple != *h.tuple => Outcome::Rewrote,
        _ => Outcome::Passed,
    }
}

/// A hop that saw `h`'s skb itself: its whole tuple, not an XDP
/// program's record about it.
fn sighting(h: &Hop, n: &Hop) -> bool {
    n.skb == h.skb && whole(n) && n.hook != Hook::Xdp
}

/// Where the packet of `hops[k]` was seen next.
pub(super) fn next_sighting(hops: &[Hop], k: usize) -> Option<&Hop> {
    hops[k + 1..].iter().find(|n| sighting(&hops[k], n))
}

/// What the hops after `hops[k]` (a site's hop) say the site's programs
/// did.
fn outcome(hops: &[Hop], k: usize, hook: BpfHook) -> (Outcome, Option<String>) {
    let h = &hops[k];
    let Some(next) = next_sighting(hops, k) else {
        return (Outcome::LastSeen, None);
    };
    if let HopData::Drop(d) = &next.data
        && BpfHook::of(&d.reason, func_of(&d.location)) == Some(hook)
    {
        return (Outcome::Dropped, None);
    }
    // Sent on by XDP first (a rewrite it made on the way is evidence of
    // its own, bpf_nat.rs).
    if hook == BpfHook::Xdp
        && let Some(o) = xdp_move(hops, k)
    {
        return (o, None);
    }
    if *next.tuple != *h.tuple {
        return (Outcome::Rewrote, None);
    }
    // From tc ingress straight to another device's egress in the same
    // namespace, with no route lookup for it between (as
    // rules::misrouted_local_transmitted tells a redirect).
    let routed = || {
        hops.iter().any(|r| {
            r.netns_inode == h.netns_inode
                && r.ts_ns >= h.ts_ns
                && r.ts_ns <= next.ts_ns
                && matches!(&r.data, HopData::Fib(f) if f.iif == h.ifindex)
        })
    };
    if hook == BpfHook::TcIngress
        && next.netns_inode == h.netns_inode
        && !next.dev.is_empty()
        && next.dev != h.dev
        && matches!(next.hook, Hook::TcEgress | Hook::Xmit)
        && !routed()
    {
        return (Outcome::Redirected, Some(next.dev.to_string()));
    }
    (Outcome::Passed, None)
}

/// How generic XDP moved the packet of `hops[k]` (its netif_receive_skb)
/// elsewhere, as its next sighting shows: received on another device
/// right after, with neither tc ingress nor a transmit between. Generic
/// XDP handed it to a device (generic_xdp_tx(), which fires no
/// tracepoint) and that device's other end received it: back where it
/// came from (the veth peer that sent it) is XDP_TX; elsewhere, a
/// redirect. None when the next sighting is not such.
pub(super) fn xdp_move(hops: &[Hop], k: usize) -> Option<Outcome> {
    let h = &hops[k];
    if h.hook != Hook::NetifReceive {
        return None;
    }
    let next = next_sighting(hops, k)?;
    if next.hook != Hook::NetifReceive || (next.dev == h.dev && next.netns_inode == h.netns_inode) {
        return None;
    }
    let came_from = hops[..k].iter().rev().find(|p| sighting(h, p));
    let back = came_from.is_some_and(|p| {
        p.hook == Hook::Xmit && p.dev == next.dev && p.netns_inode == next.netns_inode
    });
    Some(if back {
        Outcome::SentBack
    } else {
        Outcome::Redirected
    })
}

/// The XDP program's action on the packet of `hops[k]` (its
/// netif_receive_skb), as the xdp tracepoints recorded it right after, on
/// the same device; and the redirect's target device by name.
pub(super) fn xdp_action(
    hops: &[Hop],
    k: usize,
    env: &dyn Env,
) -> Option<(XdpData, Option<String>)> {
    let h = &hops[k];
    let x = hops[k + 1..]
        .iter()
        .take_while(|n| n.skb != h.skb || n.hook == Hook::Xdp || !whole(n))
        .find_map(|n| match &n.data {
            HopData::Xdp(x)
                if n.skb == h.skb && n.ifindex == h.ifindex && n.netns_inode == h.netns_inode =>
            {
                Some(x)
            }
            _ => None,
        })?;
    let to = super::bpf_drop::xdp_target(env, h.netns_inode, x);
    Some(((**x).clone(), to))
}

/// The flow's sites with programs of others; None when it met none.
pub fn path(flow: &Flow, env: &dyn Env) -> Option<Evidence> {
    let mut sites: Vec<ProgramSite> = Vec::new();
    for (k, h) in flow.hops.iter().enumerate() {
        if h.dev.is_empty() {
            continue;
        }
        let drop_site = match &h.data {
            HopData::Drop(d) => BpfHook::of(&d.reason, func_of(&d.location)),
            _ => None,
        };
        let here = before(h.hook)
            .iter()
            .map(|k2| (*k2, false))
            .chain(after(h.hook).iter().map(|k2| (*k2, true)))
            .chain(drop_site.map(|k2| (k2, true)));
        for (hook, is_after) in here {
            let label = hook.label();
            if sites.iter().any(|s| {
                s.dir == h.dir && s.hook == label && s.dev == *h.dev && s.netns == *h.netns
            }) {
                continue;
            }
            let programs = hook.programs_at(env, h.netns_inode, &h.dev);
            if programs.is_empty() {
                continue;
            }
            let xdp = (hook == BpfHook::Xdp && h.hook == Hook::NetifReceive)
                .then(|| xdp_action(&flow.hops, k, env))
                .flatten();
            let (outcome, to_dev) = match &xdp {
                Some((x, to)) if x.action == XdpAction::XdpRedirect && x.err == 0 => {
                    (Outcome::Redirected, to.clone())
                }
                Some((_, to)) => (Outcome::Dropped, to.clone()),
                None if drop_site == Some(hook) => (Outcome::Dropped, None),
                None if is_after => outcome(&flow.hops, k, hook),
                None => (outcome_before(&flow.hops, k), None),
            };
            sites.push(ProgramSite {
                dir: h.dir,
                hook: label.to_string(),
                dev: h.dev.to_string(),
                netns: h.netns.to_string(),
                programs,
                outcome,
                to_dev,
                xdp: xdp.map(|(x, _)| x),
            });
        }
    }
    (!sites.is_empty()).then_some(Evidence::BpfPath(BpfPath { sites }))
}

#[cfg(test)]
mod tests;
