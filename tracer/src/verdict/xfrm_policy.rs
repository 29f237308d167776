//! A cause: an IPsec (XFRM) policy of the namespace refused the packet:
//! a `block` policy, or one that requires IPsec for which no security
//! association exists (policies a CNI's encryption, strongSwan or an
//! agent left behind after encryption was turned off or the daemon went
//! away: flannel's and Cilium's IPsec modes).
//!
//! - **Signals**: XFRM_POLICY (__xfrm_policy_check() on input and
//!   forwarding, xfrm_lookup() on output, net/xfrm/xfrm_policy.c; counted
//!   as XfrmInNoPols, XfrmFwdHdrError, XfrmOutNoStates...).
//! - **Facts**: the namespace's policies and states (`Env::xfrm`,
//!   node/xfrm.rs, XFRM_MSG_GETPOLICY and XFRM_MSG_GETSA dumps).
//! - **Evidence**: [`Evidence::XfrmRefused`] holding an [`XfrmRefusal`].
//! - **Where**: `ip_forward in netns node1: IPsec policy src 10.1.1.0/24
//!   dst 10.1.2.0/24 dir out ... tmpl ... proto esp reqid 11 mode tunnel
//!   applies, and no SA matches its template ...`.
//! - **Rules**: `rules::device_cause` asks [`judge`]; None when no policy
//!   of the namespace selects the packet's addresses.
//! - **Hint**: [`HINTS`].

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, Kind, hints::Hint};
use crate::{
    model::{drop_reason::DropReason, hop::Hop},
    node::xfrm::XfrmPolicy,
};

/// Why the policy refused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum XfrmProblem {
    /// The policy's action is `block`.
    Block,
    /// The policy requires IPsec and no state serves its template.
    NoState,
    /// The policy applies and its states exist (a packet that arrived
    /// unencrypted where an in/fwd policy wants it decrypted).
    NotDecrypted,
}

/// The policy that refused the packet, as the node shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XfrmRefusal {
    pub netns: String,
    pub policy: XfrmPolicy,
    pub problem: XfrmProblem,
    /// The namespace's policies and states, counted.
    pub policies: usize,
    pub states: usize,
}

impl XfrmRefusal {
    /// What happened, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        let why = match self.problem {
            XfrmProblem::Block => "blocks it".to_string(),
            XfrmProblem::NoState => format!(
                "requires IPsec for it, and no SA matches its template ({} states in this namespace): the kernel cannot encrypt it and drops it",
                self.states
            ),
            XfrmProblem::NotDecrypted => {
                "requires it to have arrived through IPsec, and it came in unencrypted".to_string()
            }
        };
        format!("IPsec policy `{}` applies and {why}", self.policy)
    }
}

impl fmt::Display for XfrmRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in netns {}: {}", self.netns, self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[super::explains::Explains {
    reasons: &[DropReason::XfrmPolicy],
    cause: "an IPsec policy blocks the packet, or requires an SA that does not exist (verdict/xfrm_policy.rs)",
    at: "",
    facts: "the namespace's XFRM policies and states (XFRM_MSG_GETPOLICY, XFRM_MSG_GETSA)",
}];

/// An XFRM policy drop, as `(where, evidence)`; None when no policy of
/// the namespace selects the packet.
pub fn judge(
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    if *reason != DropReason::XfrmPolicy {
        return None;
    }
    let x = env.xfrm(drop.netns_inode)?;
    let t = &drop.tuple;
    let mut matching: Vec<&XfrmPolicy> = x
        .policies
        .iter()
        .filter(|p| p.matches(t.src, t.dst))
        .collect();
    // The kernel takes the policy of highest priority (lowest number).
    matching.sort_by_key(|p| p.priority);
    let missing_state = |p: &XfrmPolicy| {
        p.templates
            .iter()
            .any(|tm| !tm.optional && x.state_for(tm).is_none())
    };
    let (policy, problem) = matching
        .iter()
        .find(|p| p.action == "block")
        .map(|p| (*p, XfrmProblem::Block))
        .or_else(|| {
            matching
                .iter()
                .find(|p| missing_state(p))
                .map(|p| (*p, XfrmProblem::NoState))
        })
        .or_else(|| {
            matching
                .iter()
                .find(|p| p.dir != "out" && !p.templates.is_empty())
                .map(|p| (*p, XfrmProblem::NotDecrypted))
        })?;
    let r = XfrmRefusal {
        netns: drop.netns.to_string(),
        policy: policy.clone(),
        problem,
        policies: x.policies.len(),
        states: x.states.len(),
    };
    let at = super::rules::site(func);
    Some((
        format!("{at} in netns {}: {}", r.netns, r.said()),
        Evidence::XfrmRefused(r),
    ))
}

fn refused(e: &Evidence) -> bool {
    matches!(e, Evidence::XfrmRefused(_))
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[Hint::when(
    Kind::Dropped,
    refused,
    "An IPsec (XFRM) policy of this namespace decides this traffic: it blocks it, or requires an SA nobody set up. On Kubernetes nodes these are the CNI's encryption (flannel's ipsec backend, Cilium's or Calico's IPsec) or a VPN daemon; policies left after encryption was turned off or the daemon stopped keep dropping pod traffic. If this traffic should not be encrypted, delete the stale policies (`ip xfrm policy` lists them; `ip xfrm policy delete ...`, or `ip xfrm policy flush` and `ip xfrm state flush` when nothing else on the node uses IPsec) and restart the CNI agent; if it should, restart the IPsec daemon or agent so it installs its SAs (`ip xfrm state`).",
)];

#[cfg(test)]
mod tests;
