//! A cause: a fragmented datagram whose fragments did not all arrive:
//! its first fragment (the one with the ports) reached the receiver,
//! which gave up reassembling it when net.ipv4.ipfrag_time ran out. The
//! later fragments carry no ports, so a filter that matches on ports (a
//! stateless ACL, a cloud security group, a rule without a fragment
//! clause) drops them; large DNS answers over UDP (EDNS0) hit this.
//!
//! - **Signals**: FRAG_REASM_TIMEOUT (ip_expire(), net/ipv4/
//!   ip_fragment.c; ip6_frag_expire_frag_queue(), net/ipv6/reassembly.c:
//!   the queue's timer fired before the last fragment came), wherever,
//!   whether or not the flow's other packets were delivered.
//! - **Facts**: the receiving namespace's net.ipv4.ipfrag_time
//!   (`Env::frag_time`); the flow's own hops: the first fragment's size and
//!   the namespaces that forwarded it.
//! - **Evidence**: [`Evidence::FragmentsLost`] holding a
//!   [`FragmentsLost`].
//! - **Where**: `ip_expire in netns client: the datagram came in fragments,
//!   and only the first (1500 bytes, by c0) arrived within ipfrag_time
//!   (1 s) ...`.
//! - **Rules**: [`fragments_lost`] (in `rules::RULES`, before
//!   `delivered`); `rules::device_cause` asks [`judge`].
//! - **Hint**: [`HINTS`].

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, Kind, Verdict, hints::Hint, rules};
use crate::model::{
    drop_reason::DropReason,
    flow::Flow,
    hop::{Dir, Hop, HopData},
};
use tracer_common::Hook;

/// A datagram whose reassembly timed out, as the flow and the node show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FragmentsLost {
    pub netns: String,
    /// The device the first fragment came in by.
    pub dev: String,
    /// The first fragment's length as it arrived (IP header and payload).
    pub first_len: Option<u32>,
    /// net.ipv4.ipfrag_time there, in seconds.
    pub frag_time: Option<u32>,
    /// The namespaces that forwarded the first fragment on its way.
    pub forwarded_by: Vec<String>,
}

impl FragmentsLost {
    /// What happened, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        let first = match self.first_len {
            Some(l) => format!("the first ({l} bytes, by {})", self.dev),
            None => format!("the first (by {})", self.dev),
        };
        let time = match self.frag_time {
            Some(t) => format!("within ipfrag_time ({t} s)"),
            None => "within ipfrag_time".to_string(),
        };
        let via = if self.forwarded_by.is_empty() {
            String::new()
        } else {
            format!(
                "; look for them where the first passed: netns {}",
                self.forwarded_by.join(", ")
            )
        };
        format!(
            "the datagram came in fragments and only {first} arrived {time}: the others, which carry no ports, were lost on the way{via}"
        )
    }
}

impl fmt::Display for FragmentsLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in netns {}: {}", self.netns, self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[super::explains::Explains {
    reasons: &[DropReason::FragReasmTimeout],
    cause: "a fragmented datagram whose later fragments (no ports) were lost on the way: reassembly timed out (verdict/fragments.rs)",
    at: "",
    facts: "the receiving namespace's net.ipv4.ipfrag_time; the flow's hops (the first fragment's size, who forwarded it)",
}];

/// The evidence of the reassembly timeout at `drop`.
fn evidence(flow: &Flow, drop: &Hop, env: &dyn Env) -> FragmentsLost {
    let same_dir = |h: &&Hop| h.dir == drop.dir;
    let arrived = flow
        .hops
        .iter()
        .filter(same_dir)
        .rfind(|h| h.netns_inode == drop.netns_inode && h.hook == Hook::NetifReceive);
    // The namespaces that sent it on: every one that transmitted it but
    // the first (its sender) and the receiver.
    let mut sent: Vec<(u32, String)> = Vec::new();
    for h in flow.hops.iter().filter(same_dir) {
        if h.hook == Hook::Xmit && !sent.iter().any(|(n, _)| *n == h.netns_inode) {
            sent.push((h.netns_inode, h.netns.to_string()));
        }
    }
    let forwarded_by = sent
        .into_iter()
        .skip(1)
        .filter(|(n, _)| *n != drop.netns_inode)
        .map(|(_, name)| name)
        .collect();
    FragmentsLost {
        netns: drop.netns.to_string(),
        dev: arrived.map_or_else(|| drop.dev.to_string(), |h| h.dev.to_string()),
        first_len: arrived.and_then(|h| match h.data {
            HopData::Packet { len, .. } => Some(len),
            _ => None,
        }),
        frag_time: env.frag_time(drop.netns_inode),
        forwarded_by,
    }
}

/// A reassembly timeout, as `(where, evidence)`.
pub fn judge(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    if *reason != DropReason::FragReasmTimeout {
        return None;
    }
    let l = evidence(flow, drop, env);
    let at = super::rules::site(func);
    Some((
        format!("{at} in netns {}: {}", l.netns, l.said()),
        Evidence::FragmentsLost(l),
    ))
}

/// A rule: a datagram of the flow was never reassembled, even if the
/// flow's other packets went through (its request, here, came back as
/// a reply).
pub fn fragments_lost(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let drop = flow.hops.iter().find(|h| {
        h.dir == Dir::Request
            && matches!(&h.data, HopData::Drop(d) if d.reason == DropReason::FragReasmTimeout)
    })?;
    rules::dropped_though_delivered(flow, drop, env, judge)
}

fn lost(e: &Evidence) -> bool {
    matches!(e, Evidence::FragmentsLost(_))
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[Hint::when(
    Kind::Dropped,
    lost,
    "The datagram was fragmented and its later fragments never arrived. Fragments after the first carry no UDP/TCP ports, so anything that filters on ports without tracking reassembly drops them: a stateless ACL or cloud security group, an nftables/iptables rule without a fragment clause, a NetworkPolicy implemented statelessly; a path with a smaller MTU and ICMP blocked does the same. Let fragments through where the first one passed (nft: `ip frag-off & 0x1fff != 0 accept`), or avoid fragmenting: make DNS answers fit (CoreDNS `bufsize 1232`, or TCP), and keep MTUs consistent along the path.",
)];

#[cfg(test)]
mod tests;
