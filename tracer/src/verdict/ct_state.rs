//! A cause: conntrack state, not the rules, decided the packet's fate.
//! Netfilter consults its NAT rules only for a connection's first packet;
//! after that the entry's translation (or its lack of one) holds for as
//! long as the flow keeps the entry alive, and conntrack's own verdict on
//! a segment (INVALID) decides whether a reply is translated back.
//!
//! - **Signals**: a flow translated by netfilter to an endpoint, or not
//!   translated at all, in a namespace whose kube-proxy rules name its
//!   Service; a reply that left the translating namespace with the
//!   endpoint's address still as its source, refused by the client
//!   (NO_SOCKET, a reset).
//! - **Facts**: the endpoints kube-proxy's rules send the Service to now
//!   (node/services.rs: the nftables mode's endpoint chains, kept with
//!   the Services in recordings); the translating namespace's conntrack
//!   counters and `nf_conntrack_tcp_be_liberal` (node/conntrack.rs, asked
//!   for by [`conntrack_wanted`]).
//! - **Evidence**: [`Evidence::ConntrackKept`] holding a [`ConntrackKept`].
//! - **Where**: `conntrack in netns node still sends default/statsd:statsd
//!   to 10.0.1.5:8125, ... (kube-proxy's rules now send it to
//!   10.0.1.9:8125): ` before the drop's own; for a reply conntrack left
//!   untranslated, a verdict of its own ([`reply_not_translated`]).
//! - **Hint**: [`HINTS`], one row per kind.
//! - Not claimed: iptables mode (its endpoint chains are not read), a
//!   flow whose translation a rule still makes ([`Kept::RuleStillSends`]:
//!   the rule, not conntrack).

use crate::model::drop_reason::DropReason;
use std::fmt;

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::{
    Env, Evidence, EvidenceKind, Kind, Verdict, evidence::Endpoint, hints::Hint, rules::verdict,
};
use crate::model::{
    event::Tuple,
    flow::{Flow, NatBy},
    hop::{Dir, Hop, HopData},
};

/// What conntrack kept.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Kept {
    /// A translation to an endpoint kube-proxy's rules no longer name.
    OldTranslation,
    /// No translation, although kube-proxy's rules DNAT the Service now:
    /// the entry was made before the rule.
    NoTranslation,
    /// Not conntrack: kube-proxy's rules themselves still name the
    /// endpoint the flow was sent to.
    RuleStillSends,
    /// A reply conntrack did not translate back (it found it INVALID).
    ReplyNotTranslated,
}

/// Conntrack state that decided the flow, with what the rules say now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConntrackKept {
    pub kept: Kept,
    /// The namespace whose conntrack (and kube-proxy rules) it is.
    pub netns: String,
    /// The Service, as kube-proxy names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The flow's destination as sent.
    pub original: Endpoint,
    /// What conntrack translated it to (none: untranslated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translated: Option<Endpoint>,
    /// The endpoints kube-proxy's rules send the Service to now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints_now: Vec<String>,
    /// The device the untranslated reply left by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// `net.netfilter.nf_conntrack_tcp_be_liberal` there, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_be_liberal: Option<bool>,
    /// Packets conntrack found INVALID there, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<u64>,
}

impl ConntrackKept {
    fn now(&self) -> String {
        if self.endpoints_now.is_empty() {
            "no endpoint".to_string()
        } else {
            self.endpoints_now.join(", ")
        }
    }

    fn service(&self) -> String {
        self.service
            .clone()
            .unwrap_or_else(|| format!("the flow to {}", self.original))
    }

    /// The sentence, after `in netns N: ` where a caller adds it.
    pub fn said(&self) -> String {
        let to = self
            .translated
            .map_or_else(|| "?".to_string(), |t| t.to_string());
        match self.kept {
            Kept::OldTranslation => format!(
                "conntrack still sends {}'s flow to {to}, a translation made before its endpoints changed: kube-proxy's rules now send it to {}",
                self.service(),
                self.now()
            ),
            Kept::NoTranslation => format!(
                "conntrack lets {}'s flow to {} through untranslated: its entry was made before kube-proxy's rule, which DNATs it to {} now",
                self.service(),
                self.original,
                self.now()
            ),
            Kept::RuleStillSends => format!(
                "kube-proxy's rules still send {} to {to} now (not a stale conntrack entry: new connections go there too)",
                self.service()
            ),
            Kept::ReplyNotTranslated => {
                let mut s = format!(
                    "a reply from {to} left by {} untranslated: conntrack did not map it back to {} (it found it INVALID)",
                    self.dev.as_deref().unwrap_or("?"),
                    self.original
                );
                match self.tcp_be_liberal {
                    Some(false) => s.push_str("; net.netfilter.nf_conntrack_tcp_be_liberal = 0"),
                    Some(true) => s.push_str("; net.netfilter.nf_conntrack_tcp_be_liberal = 1"),
                    None => {}
                }
                if let Some(n) = self.invalid.filter(|n| *n > 0) {
                    s.push_str(&format!(" ({n} packets found INVALID there)"));
                }
                s
            }
        }
    }
}

impl fmt::Display for ConntrackKept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in netns {}: {}", self.netns, self.said())
    }
}

/// The Service of the flow's original destination in a namespace on its
/// path whose kube-proxy endpoints were read: (inode, label, service).
fn service_with_endpoints<'a>(
    flow: &Flow,
    env: &'a dyn Env,
) -> Option<(u32, String, &'a crate::node::services::ServiceAddr)> {
    let k = &flow.key;
    flow.path_netns().into_iter().find_map(|(ino, label)| {
        let local = env
            .addrs(ino)
            .is_some_and(|a| a.iter().any(|a| a.addr == k.dst));
        let s = crate::node::services::find(env.services(ino), k.proto, k.dst, k.dport, local)?;
        s.endpoints.as_ref()?;
        Some((ino, label.to_string(), s))
    })
}

/// Conntrack state behind a verdict the rules reached: `(where prefix,
/// evidence)`; the prefix is empty when the verdict's own `where` stands.
pub fn kept(flow: &Flow, v: &Verdict, env: &dyn Env) -> Option<(String, Evidence)> {
    // A failure, and not one this cause already made its own.
    let failed = matches!(v.kind, Kind::Dropped | Kind::NoReply);
    if !failed || v.has(EvidenceKind::ConntrackKept) {
        return None;
    }
    let (_, label, s) = service_with_endpoints(flow, env)?;
    let eps = s.endpoints.clone().unwrap_or_default();
    let original = Endpoint::new(flow.key.dst, flow.key.dport);
    let mk = |kept, translated| ConntrackKept {
        kept,
        netns: label.clone(),
        service: Some(s.service.clone()),
        original,
        translated,
        endpoints_now: eps.clone(),
        dev: None,
        tcp_be_liberal: None,
        invalid: None,
    };
    let k = match (flow.nat_by, flow.translated) {
        (Some(NatBy::Netfilter), Some(t)) if (t.dst, t.dport) != (flow.key.dst, flow.key.dport) => {
            let to = Endpoint::new(t.dst, t.dport);
            if eps.contains(&to.to_string()) {
                mk(Kept::RuleStillSends, Some(to))
            } else {
                mk(Kept::OldTranslation, Some(to))
            }
        }
        // An untranslated datagram that stayed in the Service's own
        // namespace, where kube-proxy DNATs it now.
        (None, None) if flow.key.proto == 17 && !eps.is_empty() && v.netns == label => {
            mk(Kept::NoTranslation, None)
        }
        _ => return None,
    };
    let prefix = match k.kept {
        Kept::RuleStillSends => String::new(),
        _ => format!("in netns {}: {}", k.netns, k.said()),
    };
    Some((prefix, Evidence::ConntrackKept(k)))
}

/// A reply that left the namespace which translated the flow with the
/// endpoint's address still as its source, and that the client refused
/// (no socket has that peer: NO_SOCKET, a reset): conntrack did not
/// translate it back. Before `delivered`, which the exchanges before it
/// would give.
pub fn reply_not_translated(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let (nat, left, t) = untranslated_exit(flow)?;
    let nat = &flow.hops[nat];
    let client = flow.hops.first()?.netns_inode;
    if nat.netns_inode == client {
        return None;
    }
    let refused = flow.hops[left..].iter().find(|h| {
        h.netns_inode == client
            && is_untranslated(h, &t)
            && match &h.data {
                HopData::Drop(d) => d.reason == DropReason::NoSocket,
                HopData::TcpReset { .. } => true,
                _ => false,
            }
    })?;
    let out = &flow.hops[left];
    let ct = env.conntrack(nat.netns_inode);
    let k = ConntrackKept {
        kept: Kept::ReplyNotTranslated,
        netns: nat.netns.to_string(),
        service: super::service::of_flow(flow, env).map(|s| s.name),
        original: Endpoint::new(flow.key.dst, flow.key.dport),
        translated: Some(Endpoint::new(t.dst, t.dport)),
        endpoints_now: Vec::new(),
        dev: Some(out.dev.to_string()),
        tcp_be_liberal: ct.and_then(|c| c.tcp_be_liberal),
        invalid: ct.map(|c| c.invalid),
    };
    let where_ = format!(
        "in netns {}: {}; netns {} has no connection from it and refused it ({})",
        k.netns,
        k.said(),
        refused.netns,
        if flow.key.proto == 6 {
            "tcp_v4_rcv NO_SOCKET, a reset sent back"
        } else {
            "NO_SOCKET"
        }
    );
    let mut v = verdict(
        Kind::Dropped,
        super::Found::ReplyNotTranslated,
        where_,
        &out.netns,
        Some(out.dev.to_string()),
    );
    v.settled = true;
    v.add(Evidence::ConntrackKept(k));
    Some(v)
}

/// A reply of a flow netfilter translated to another destination that
/// left the translating namespace with the endpoint's address still as
/// its source: (index of the translation's hop, index of that reply's
/// exit, the translated tuple).
fn untranslated_exit(flow: &Flow) -> Option<(usize, usize, Tuple)> {
    if flow.nat_by != Some(NatBy::Netfilter) {
        return None;
    }
    let t = flow.translated?;
    if (t.dst, t.dport) == (flow.key.dst, flow.key.dport) {
        return None;
    }
    let nat = flow.nat_at()?;
    let ns = flow.hops[nat].netns_inode;
    let left = flow
        .hops
        .iter()
        .position(|h| h.netns_inode == ns && h.is_egress() && is_untranslated(h, &t))?;
    Some((nat, left, t))
}

/// A reply whose source is still the endpoint of translation `t`.
fn is_untranslated(h: &Hop, t: &Tuple) -> bool {
    h.dir == Dir::Reply && h.tuple.src == t.dst && h.tuple.sport == t.dport
}

/// The namespaces whose conntrack counters and sysctls the rules want
/// beyond the netfilter drops' (run/facts.rs): the translating one of a
/// flow whose reply came back untranslated.
pub fn conntrack_wanted(flow: &Flow) -> Option<u32> {
    let (nat, _, _) = untranslated_exit(flow)?;
    Some(flow.hops[nat].netns_inode)
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[super::explains::Explains {
    reasons: &[DropReason::NoSocket],
    cause: "a conntrack entry older than the rules: a translation to an endpoint kube-proxy no longer names, none where its rule DNATs now, or a reply conntrack left untranslated (verdict/ct_state.rs)",
    at: "",
    facts: "kube-proxy's endpoint chains (nftables mode); the translating namespace's conntrack counters and nf_conntrack_tcp_be_liberal",
}];

/// Is this the fact of kind `k`?
fn is(e: &Evidence, k: Kept) -> bool {
    matches!(e, Evidence::ConntrackKept(c) if c.kept == k)
}

/// The hint rows, one per kind.
pub const HINTS: &[Hint] = &[
    Hint {
        kind: None,
        reason: None,
        evidence: &[EvidenceKind::ConntrackKept],
        when: Some(|e| is(e, Kept::ReplyNotTranslated)),
        text: "Conntrack found a reply segment INVALID (out of its TCP window: after a stall, a lost or a late packet) and let it through untranslated, from the endpoint's own address; the client has no such connection, answers with a reset, and the connection dies (\"connection reset by peer\"). Set net.netfilter.nf_conntrack_tcp_be_liberal=1 on the node (kube-proxy's --conntrack-tcp-be-liberal) or drop INVALID packets before they leave (kube-proxy's iptables mode adds `-m conntrack --ctstate INVALID -j DROP`).",
    },
    Hint {
        kind: None,
        reason: None,
        evidence: &[EvidenceKind::ConntrackKept],
        when: Some(|e| is(e, Kept::OldTranslation)),
        text: "A conntrack entry made before the Service's endpoints changed still translates this flow to an endpoint kube-proxy no longer names: netfilter consults its NAT rules only for a connection's first packet, and a UDP client that keeps its source port (a statsd or syslog sender, a long-lived DNS client) keeps the entry alive. Delete it (`conntrack -D -p udp --orig-dst SERVICE_IP --orig-port-dst PORT`, or `-d OLD_ENDPOINT`). kube-proxy clears the UDP entries of removed endpoints itself: if it did not, check its version and logs (an endpoint address reused by another pod hides the stale entry from it).",
    },
    Hint {
        kind: None,
        reason: None,
        evidence: &[EvidenceKind::ConntrackKept],
        when: Some(|e| is(e, Kept::NoTranslation)),
        text: "The flow's conntrack entry was made before kube-proxy's rule for this Service existed (the client was already sending when the Service, its NodePort or its first endpoint appeared), so the flow stays untranslated: netfilter's NAT rules apply only to a connection's first packet. Delete the entry (`conntrack -D -p udp --dport PORT` on the node); kube-proxy deletes such UDP entries when a Service gets its first endpoint: if it did not, check its version and logs.",
    },
    Hint {
        kind: None,
        reason: None,
        evidence: &[EvidenceKind::ConntrackKept],
        when: Some(|e| is(e, Kept::RuleStillSends)),
        text: "kube-proxy's rules themselves still send the Service to this endpoint, which no longer serves: kube-proxy is out of sync with the EndpointSlices (check its logs for sync errors, and that it runs; restart it). Deleting conntrack entries does not help while the rule names the endpoint.",
    },
];

#[cfg(test)]
mod tests;
