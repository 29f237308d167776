//! A translation, not a drop: a tc or XDP program of the dataplane
//! rewrote the followed packet's destination (Cilium's and Calico eBPF's
//! Service and NodePort load balancing in tc: bpf_lxc's and nodeport's
//! DNAT, with the replies translated back by the same programs), with no
//! conntrack entry to say so.
//!
//! - **Signals**: the flow's request seen under another tuple than its
//!   key with no conntrack entry holding both (`nat_by: bpf`, model
//!   table.rs); tracer-ebpf's tc programs then follow the new tuple and
//!   its reverse (filter.rs `learn_rewritten`), so the backend's side and
//!   the untranslated replies are seen too.
//! - **Facts**: the tc and XDP programs attached where the rewrite can
//!   have happened: after the last hop that saw the old tuple, on its
//!   device (tracer's own tc programs run first: tcx `LinkOrder::first`,
//!   clsact priority 1), and before the first hop that saw the new one
//!   (tc egress before the device's xmit, XDP before tracer's tc
//!   ingress; bpf_path.rs `after`/`before`), by `Env::dev_programs`, kept
//!   in a recording.
//! - **Evidence**: [`Evidence::BpfRewrite`] holding a [`BpfRewrite`]: the
//!   address asked and the one it became, the site and its programs.
//! - **Where**: unchanged (the flow goes on under the new tuple to its
//!   verdict); the evidence names the rewrite and who made it. One rule,
//!   [`reply_not_translated`]: the backend's replies reached the client's
//!   namespace still from the backend's address (no program translated
//!   them back: they left the node by a device without it, or its program
//!   passed them as they were), and none from the address asked: refused
//!   by the client's kernel (a reset, NO_SOCKET) or queued to a socket
//!   that asked another address.
//! - **Hint**: [`HINTS`]: a refused or unanswered request the program
//!   sent to a backend; replies not translated back.

use crate::model::drop_reason::DropReason;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{
    Env, Evidence, EvidenceKind, Kind, Verdict,
    bpf_drop::{BpfHook, named},
    bpf_path::{after, before},
    evidence::Endpoint,
    hints::Hint,
};
use crate::{
    model::{
        event::Tuple,
        flow::{Flow, NatBy},
        hop::{Dir, Hop, HopData},
    },
    node::bpf_progs::AttachedProgram,
};
use tracer_common::Hook;

/// A request's destination rewritten by a tc or XDP program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BpfRewrite {
    /// The destination the client sent to.
    pub asked: Endpoint,
    /// The one the packet went on to.
    pub became: Endpoint,
    /// Where it happened: `tc ingress`, `tc egress` or `XDP` of `dev` in
    /// `netns`; empty when no site with a program was found.
    pub hook: String,
    pub dev: String,
    pub netns: String,
    /// The programs attached there (tracer's own left out): the ones that
    /// can have made the rewrite.
    pub programs: Vec<AttachedProgram>,
    /// The replies reached the client still from `became`
    /// ([`reply_not_translated`]): where they left the namespace of the
    /// rewrite, and the programs on that device's tc egress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_untranslated: Option<UntranslatedReply>,
}

/// Where a reply left the rewrite's namespace untranslated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UntranslatedReply {
    pub netns: String,
    pub dev: String,
    pub programs: Vec<AttachedProgram>,
    /// The client's namespace, where they arrived.
    pub client_netns: String,
}

impl fmt::Display for BpfRewrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} became {}", self.asked, self.became)?;
        if self.programs.is_empty() {
            return write!(
                f,
                " with no conntrack entry (a tc or XDP program; none is attached where it was last seen as {} now)",
                self.asked
            );
        }
        write!(
            f,
            " at {} of {} in netns {}: rewritten by {}",
            self.hook,
            self.dev,
            self.netns,
            named(&self.programs, " or ")
        )?;
        if let Some(u) = &self.reply_untranslated {
            write!(
                f,
                "; its replies were not translated back: they left netns {} by {} (",
                u.netns, u.dev
            )?;
            if u.programs.is_empty() {
                write!(f, "no tc program on its egress")?;
            } else {
                write!(f, "egress: {}", named(&u.programs, ", "))?;
            }
            write!(
                f,
                ") and reached netns {} from {}",
                u.client_netns, self.became
            )?;
        }
        Ok(())
    }
}

/// The rewrite of the flow's request by a program, with the programs
/// where it happened; None unless the flow was translated with no
/// conntrack entry.
pub fn rewrite(flow: &Flow, env: &dyn Env) -> Option<Evidence> {
    if flow.nat_by != Some(NatBy::Bpf) {
        return None;
    }
    let to = flow.translated?;
    let request = |h: &&Hop| h.dir == Dir::Request;
    let first_new = flow
        .hops
        .iter()
        .position(|h| h.dir == Dir::Request && *h.tuple == to)?;
    let last_old = flow.hops[..first_new]
        .iter()
        .rev()
        .filter(request)
        .find(|h| *h.tuple == flow.key);
    let mut sites = last_old
        .into_iter()
        .flat_map(|h| after(h.hook).iter().map(move |k| (h, *k)))
        .chain(
            before(flow.hops[first_new].hook)
                .iter()
                .map(|k| (&flow.hops[first_new], *k)),
        );
    let found = sites.find_map(|(h, hook)| {
        let programs = hook.programs_at(env, h.netns_inode, &h.dev);
        (!programs.is_empty()).then_some((h, hook, programs))
    });
    let (hook, dev, netns, programs) = match found {
        Some((h, k, p)) => (
            k.label().to_string(),
            h.dev.to_string(),
            h.netns.to_string(),
            p,
        ),
        None => Default::default(),
    };
    Some(Evidence::BpfRewrite(BpfRewrite {
        asked: Endpoint::new(flow.key.dst, flow.key.dport),
        became: Endpoint::new(to.dst, to.dport),
        hook,
        dev,
        netns,
        programs,
        reply_untranslated: untranslated(flow, env),
    }))
}

/// A reply hop from `from` (address and port).
fn from(h: &Hop, from: &Tuple) -> bool {
    h.dir == Dir::Reply && h.tuple.src == from.dst && h.tuple.sport == from.dport
}

/// The replies of a flow a program translated that reached the client's
/// namespace (its first hop's) from the backend, with none from the
/// address asked: where they left the namespace of the rewrite.
fn untranslated(flow: &Flow, env: &dyn Env) -> Option<UntranslatedReply> {
    let to = flow.translated?;
    if (to.dst, to.dport) == (flow.key.dst, flow.key.dport) {
        return None;
    }
    let client = flow.hops.first()?;
    let in_client = |h: &&Hop| h.netns_inode == client.netns_inode;
    if !flow.hops.iter().filter(in_client).any(|h| from(h, &to)) {
        return None;
    }
    if flow
        .hops
        .iter()
        .filter(in_client)
        .any(|h| from(h, &flow.key))
    {
        return None;
    }
    // The namespace of the rewrite: where the request was first seen under
    // the new tuple.
    let nat = flow
        .hops
        .iter()
        .find(|h| h.dir == Dir::Request && *h.tuple == to)?;
    if nat.netns_inode == client.netns_inode {
        return None;
    }
    let out = flow.hops.iter().find(|h| {
        h.netns_inode == nat.netns_inode
            && from(h, &to)
            && matches!(h.hook, Hook::Xmit | Hook::TcEgress)
            && !h.dev.is_empty()
    })?;
    let programs = BpfHook::TcEgress.programs_at(env, out.netns_inode, &out.dev);
    Some(UntranslatedReply {
        netns: out.netns.to_string(),
        dev: out.dev.to_string(),
        programs,
        client_netns: client.netns.to_string(),
    })
}

/// A rule, before `delivered`: the backend answered, and its answers
/// reached the client still from its own address (cilium/cilium#40521: a
/// NodePort's replies leaving by a device without Cilium's program), so
/// the client's kernel refused them (a TCP reset, NO_SOCKET), or they were
/// queued to a socket that asked the Service (a resolver drops them:
/// kubernetes/kubernetes#68367).
pub fn reply_not_translated(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    if flow.nat_by != Some(NatBy::Bpf) {
        return None;
    }
    let to = flow.translated?;
    let u = untranslated(flow, env)?;
    let client = flow.hops.first()?.netns_inode;
    let arrived = flow
        .hops
        .iter()
        .filter(|h| h.netns_inode == client && from(h, &to));
    let mut refused = false;
    let mut queued = false;
    for h in arrived {
        match &h.data {
            HopData::TcpReset { .. } => refused = true,
            HopData::Drop(d) if d.reason == DropReason::NoSocket => refused = true,
            HopData::SockQueue | HopData::SockRecv => queued = true,
            _ => {}
        }
    }
    let became = Endpoint::new(to.dst, to.dport);
    let asked = Endpoint::new(flow.key.dst, flow.key.dport);
    let past = if u.programs.is_empty() {
        "no tc program is attached to its egress".to_string()
    } else {
        format!("{} let them pass as they were", named(&u.programs, ", "))
    };
    let fate = if refused {
        if flow.key.proto == 6 {
            "the client's kernel has no connection from it and reset it (NO_SOCKET)"
        } else {
            "the client's kernel has no socket for it (NO_SOCKET)"
        }
    } else if queued {
        "they were queued to the client's socket, which asked the Service: a client that checks the source (glibc's resolver, dig, nslookup) drops them"
    } else {
        return None;
    };
    let where_ = format!(
        "the replies from {became} reached netns {} untranslated (it asked {asked}): they left netns {} by {}, where {past}; {fate}",
        u.client_netns, u.netns, u.dev
    );
    let mut v = super::rules::verdict(
        if refused {
            Kind::Dropped
        } else {
            Kind::Delivered
        },
        super::Found::ReplyNotTranslated,
        where_,
        &u.netns,
        Some(u.dev.clone()),
    );
    v.settled = true;
    Some(v)
}

/// The hint rows of a request a tc or XDP program sent elsewhere.
pub const HINTS: &[Hint] = &[
    Hint {
        kind: Some(Kind::Dropped),
        reason: Some(super::Reason::Kernel(DropReason::NoSocket)),
        evidence: &[EvidenceKind::BpfRewrite],
        when: None,
        text: "The client sent to the Service address, and a tc or XDP program of the dataplane (Cilium's or Calico eBPF's Service load balancing) rewrote it to this backend, where nothing listens on that port: the dataplane's backend table holds an endpoint that does not serve it (a wrong targetPort, a pod not ready or restarted, gone). Compare the Service's endpoints (`kubectl get endpointslices -l kubernetes.io/service-name=SVC`) with what the dataplane holds (`cilium service list` / `cilium bpf lb list`; Calico: `calico-node -bpf nat dump`); `bpftool prog show id N` names the program.",
    },
    Hint {
        kind: None,
        reason: Some(super::Reason::Found(super::Found::ReplyNotTranslated)),
        evidence: &[EvidenceKind::BpfRewrite],
        when: None,
        text: "A tc program of the dataplane translated the request to the backend, and the backend's replies came back to the client still from the backend's address: the program that translates them back (Cilium's to-container or to-netdev, Calico's) never saw them, or passed them as they were. Look at where they left the node: a device the dataplane does not manage (a second interface, a route that bypasses it: Cilium's multi-device and `devices=` setting, Calico's `bpfDataIfacePattern`), asymmetric routing between nodes, or the program's reverse-NAT entry gone (`cilium bpf nat list`, `cilium bpf ct list global`; Calico: `calico-node -bpf conntrack dump`).",
    },
    Hint {
        kind: Some(Kind::NoReply),
        reason: None,
        evidence: &[EvidenceKind::BpfRewrite],
        when: None,
        text: "The client sent to the Service address, and a tc or XDP program of the dataplane rewrote it to this backend, which did not answer (or whose answer did not come back translated): the packets went to the backend, not to the Service address. Check that backend (is it up, does it serve that port, does a policy or route on its side drop it: `tracer follow BACKEND:PORT`), whether the dataplane's backend table is current (`cilium service list`, `cilium bpf lb list`; Calico: `calico-node -bpf nat dump`), and that the answers pass the program that translates them back (the client's own device, on the same node).",
    },
];

#[cfg(test)]
mod tests;
