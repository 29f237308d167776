//! A cause: an XDP program sent the packet somewhere (XDP_TX back out the
//! device it came in on, XDP_REDIRECT to another device) and it died
//! where it went: a responder or forwarder that did not rewrite the
//! frame for its new way (MACs and addresses unswapped, so the sender's
//! side drops it as another host's, or a bridge will not send it back out
//! the port it came from), or a redirect to the wrong device.
//!
//! - **Signals**: a drop of the same skb after the XDP site of a device
//!   that has an XDP program: the xdp:xdp_redirect tracepoint's record of
//!   a redirect (tracer-ebpf xdp.rs), or, for XDP_TX (generic_xdp_tx()
//!   fires no tracepoint), the packet's next sighting right after its
//!   netif_receive_skb on another device, with neither tc ingress nor a
//!   transmit between (bpf_path::xdp_move).
//! - **Facts**: the device's XDP programs (`Env::dev_programs`); the
//!   redirect's target device by its ifindex (`Env::links`).
//! - **Evidence**: [`Evidence::XdpMoved`] holding an [`XdpMove`].
//! - **Where**: the drop's own, then `; XDP program xdp_fwd (id 7,
//!   generic) on eth0 in netns vm had sent it back out eth0 (XDP_TX),
//!   unchanged`.
//! - **Rules**: `rules::dropped` asks [`judge`] for every drop it names.
//! - **Hint**: [`HINTS`], asked before the drop site's own.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{
    Env, Evidence, Kind,
    bpf_drop::BpfHook,
    bpf_path::{Outcome, next_sighting, xdp_action, xdp_move},
    hints::Hint,
};
use crate::{
    model::{
        flow::Flow,
        hop::{Hop, XdpAction},
    },
    node::bpf_progs::AttachedProgram,
};
use tracer_common::Hook;

/// How an XDP program moved the packet before it died.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XdpMove {
    /// The device whose XDP program moved it, and its namespace.
    pub dev: String,
    pub netns: String,
    pub programs: Vec<AttachedProgram>,
    /// XDP_TX (sent back out `dev`) or XDP_REDIRECT.
    pub action: XdpAction,
    /// A redirect's target, as the tracepoint named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_dev: Option<String>,
    /// Where the packet was next seen, and in which namespace.
    pub seen_dev: String,
    pub seen_netns: String,
    /// Its addresses and ports were the same there (nothing rewritten).
    pub unchanged: bool,
}

impl fmt::Display for XdpMove {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = match self.programs.as_slice() {
            [] => "an XDP program (detached since)".to_string(),
            ps => super::bpf_drop::named(ps, ", "),
        };
        write!(f, "{who} on {} in netns {} had ", self.dev, self.netns)?;
        match (self.action, &self.to_dev) {
            (XdpAction::XdpTx, _) => write!(f, "sent it back out {} (XDP_TX)", self.dev)?,
            (_, Some(to)) => write!(f, "redirected it to {to} (XDP_REDIRECT)")?,
            (_, None) => write!(f, "redirected it (XDP_REDIRECT)")?,
        }
        if self.unchanged {
            write!(f, ", unchanged")?;
        }
        write!(
            f,
            ": next seen on {} in netns {}",
            self.seen_dev, self.seen_netns
        )
    }
}

/// The XDP move of the dropped packet, as `(said, evidence)`: what to add
/// to the drop's `where`. None when no XDP program moved that skb on its
/// way to the drop.
pub fn judge(flow: &Flow, drop: &Hop, env: &dyn Env) -> Option<(String, Evidence)> {
    let hops = &flow.hops;
    let end = hops.iter().position(|h| std::ptr::eq(h, drop))?;
    // The last XDP site of this skb before the drop that moved it.
    let (k, outcome, to_dev) = (0..end).rev().find_map(|k| {
        let h = &hops[k];
        if h.skb != drop.skb || h.hook != Hook::NetifReceive {
            return None;
        }
        if BpfHook::Xdp
            .programs_at(env, h.netns_inode, &h.dev)
            .is_empty()
        {
            return None;
        }
        match xdp_action(hops, k, env) {
            Some((x, to)) if x.action == XdpAction::XdpRedirect && x.err == 0 => {
                Some((k, Outcome::Redirected, to))
            }
            Some(_) => None,
            None => xdp_move(hops, k).map(|o| (k, o, None)),
        }
    })?;
    let h = &hops[k];
    // The drop itself at the latest: a sighting of the same skb.
    let next = next_sighting(hops, k)?;
    let m = XdpMove {
        dev: h.dev.to_string(),
        netns: h.netns.to_string(),
        programs: BpfHook::Xdp.programs_at(env, h.netns_inode, &h.dev),
        action: if outcome == Outcome::SentBack {
            XdpAction::XdpTx
        } else {
            XdpAction::XdpRedirect
        },
        to_dev,
        seen_dev: next.dev.to_string(),
        seen_netns: next.netns.to_string(),
        unchanged: *next.tuple == *h.tuple,
    };
    Some((m.to_string(), Evidence::XdpMoved(m)))
}

/// `where_` with the XDP move told after it, and its evidence added, when
/// an XDP program sent the dropped packet where it died: the first part
/// of the story (`rules::dropped`).
pub fn told(
    flow: &Flow,
    drop: &Hop,
    env: &dyn Env,
    where_: String,
    evidence: &mut Vec<Evidence>,
) -> String {
    match judge(flow, drop, env) {
        Some((said, ev)) => {
            evidence.push(ev);
            format!("{where_}; {said}")
        }
        None => where_,
    }
}

fn is_move(e: &Evidence) -> bool {
    matches!(e, Evidence::XdpMoved(_))
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[Hint::when(
    Kind::Dropped,
    is_move,
    "An XDP program sent the packet on before the stack saw it, and it died where it went: what the program wrote (or did not) is the cause. A program that returns XDP_TX must rewrite the frame for its way back: swap the MAC addresses (and the IP addresses and ports, for a responder), or the sender's side takes it for another host's frame (OTHERHOST) and a bridge will not send it back out the port it came in on. A redirect must go to the right device, with the next hop's MAC written (bpf_fib_lookup() gives both). Check the program's maps and the device it sends to: `bpftool prog show id N`, `bpftool map dump`, `ip -d link show DEV`; in a dataplane, its agent's logs.",
)];

#[cfg(test)]
mod tests;
