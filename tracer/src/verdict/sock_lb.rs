//! A translation, not a drop: a cgroup socket-address program rewrote the
//! destination of a socket call to the target before any packet existed
//! (socket-level load balancing: Cilium's kube-proxy replacement and
//! Local Redirect Policy, Calico eBPF's connect-time load balancing).
//!
//! - **Signals**: a `sock_addr` hop (tracer-ebpf sockaddr.rs: a connect,
//!   sendto or sendmsg to the target whose socket's first packet left for
//!   another destination, with no conntrack entry holding the one asked).
//! - **Facts**: the calling task's cgroup and the connect/sendmsg/recvmsg
//!   programs attached to it or above it (`Env::cgroup_programs`,
//!   node/bpf_progs.rs), kept in recordings.
//! - **Evidence**: [`Evidence::SocketRewrite`] holding a [`SocketRewrite`]:
//!   the call, the address asked and the one it became, the process, the
//!   cgroup and its programs.
//! - **Where**: unchanged (the flow goes on under the new tuple to its
//!   verdict); the evidence names the rewrite, and the flow's
//!   `translated`/`nat_by: socket` carry it.
//! - **Hint**: [`HINTS`]: a refused or unanswered call the program sent
//!   to a backend.

use crate::model::drop_reason::DropReason;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, EvidenceKind, Kind, evidence::Endpoint, hints::Hint};
use crate::{
    model::{
        flow::Flow,
        hop::{HopData, SockCall},
    },
    node::bpf_progs::AttachedProgram,
};

/// A socket call's destination rewritten by a cgroup program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SocketRewrite {
    pub call: SockCall,
    /// What the application asked for.
    pub asked: Endpoint,
    /// What its first packet was sent to.
    pub became: Endpoint,
    pub pid: u32,
    pub comm: String,
    pub netns: String,
    /// The calling task's cgroup (below the cgroup2 mount), when it still
    /// exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The programs of that call's hook (connect4/6 for connect(),
    /// sendmsg4/6 for sendto() and sendmsg()) attached to the cgroup or
    /// above it: the ones that can have made the rewrite.
    pub programs: Vec<AttachedProgram>,
    /// A datagram's destination rewritten (sendto, sendmsg), its answers
    /// came back, and no recvmsg program is in the cgroup's reach to give
    /// them the address asked as their source: they still come from
    /// `became`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reply_source_kept: bool,
}

impl fmt::Display for SocketRewrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}() to {} by {} (pid {}) in netns {} was sent to {} by ",
            self.call, self.asked, self.comm, self.pid, self.netns, self.became
        )?;
        if self.programs.is_empty() {
            write!(f, "a cgroup socket program")?;
        } else {
            let named: Vec<String> = self.programs.iter().map(program).collect();
            write!(f, "cgroup program {}", named.join(", "))?;
        }
        match &self.cgroup {
            Some(c) => write!(f, " (the task's cgroup: {c})")?,
            None => write!(f, " (the task's cgroup is gone)")?,
        }
        if self.reply_source_kept {
            let hook = if self.asked.addr.is_ipv6() {
                "recvmsg6"
            } else {
                "recvmsg4"
            };
            write!(
                f,
                "; no {hook} program is attached there, so its answers come from {} instead of {}: a client that checks the source (glibc's resolver, dig, nslookup) drops them",
                self.became, self.asked
            )?;
        }
        Ok(())
    }
}

/// `name (id N, connect4 on /path)`.
pub fn program(p: &AttachedProgram) -> String {
    let name = if p.name.is_empty() { "?" } else { &p.name };
    format!("{name} (id {}, {} on {})", p.id, p.hook, p.at)
}

/// The hooks whose programs can rewrite `call` for this family.
fn hooks(call: SockCall, v6: bool) -> &'static [&'static str] {
    match (call, v6) {
        (SockCall::Connect, false) => &["connect4"],
        (SockCall::Connect, true) => &["connect6"],
        (_, false) => &["sendmsg4"],
        (_, true) => &["sendmsg6"],
    }
}

/// The rewrite of the flow's socket call, with its cgroup's programs.
pub fn rewrite(flow: &Flow, env: &dyn Env) -> Option<Evidence> {
    let (h, a) = flow.hops.iter().find_map(|h| match &h.data {
        HopData::SockAddr(a) => Some((h, a)),
        _ => None,
    })?;
    let cg = env.cgroup_programs(a.cgroup_id);
    let wanted = hooks(a.call, a.asked.is_ipv6());
    let recv = if a.asked.is_ipv6() {
        "recvmsg6"
    } else {
        "recvmsg4"
    };
    // Only a datagram's answers: a connected socket's peer is the
    // backend, and the kernel matches its replies by it.
    let reply_source_kept = a.call != SockCall::Connect
        && h.tuple.proto == 17
        && flow.replies > 0
        && cg
            .as_ref()
            .is_some_and(|c| !c.programs.iter().any(|p| p.hook == recv));
    Some(Evidence::SocketRewrite(SocketRewrite {
        call: a.call,
        asked: Endpoint::new(a.asked, a.asked_port),
        became: Endpoint::new(h.tuple.dst, h.tuple.dport),
        pid: a.pid,
        comm: a.comm.clone(),
        netns: h.netns.to_string(),
        cgroup: cg.as_ref().map(|c| c.path.clone()),
        programs: cg
            .map(|c| {
                c.programs
                    .into_iter()
                    .filter(|p| wanted.contains(&p.hook.as_str()))
                    .collect()
            })
            .unwrap_or_default(),
        reply_source_kept,
    }))
}

/// The hint rows of a call a socket program sent elsewhere.
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Delivered,
        |e| matches!(e, Evidence::SocketRewrite(r) if r.reply_source_kept),
        "The answers reached the client's socket, but from the backend's address: a cgroup sendmsg program sent the query there and no recvmsg program turns the answers' source back into the Service address, so a client that checks it (glibc's resolver, dig, nslookup: \"reply from unexpected source\") throws them away and times out. Attach the dataplane's recvmsg4/recvmsg6 programs with its sendmsg ones (Cilium: socket LB needs both hooks; a kernel before 4.20 has no recvmsg hook, so use kube-proxy or Cilium's tc-level load balancing there), or have the client connect() its UDP socket.",
    ),
    Hint {
        kind: Some(Kind::Dropped),
        reason: Some(super::Reason::Kernel(DropReason::NoSocket)),
        evidence: &[EvidenceKind::SocketRewrite],
        when: None,
        text: "The application asked for the Service address, and a cgroup socket program (socket-level load balancing: Cilium's kube-proxy replacement or a Local Redirect Policy, Calico eBPF's connect-time load balancing) sent the call to this backend, where nothing listens on that port: the dataplane's backend table holds an endpoint that does not serve (not ready, restarted on another port, gone). Compare it with the Service's endpoints (`kubectl get endpointslices -l kubernetes.io/service-name=SVC`) and with what the dataplane holds (`cilium service list` / `cilium bpf lb list`; Calico: `calico-node -bpf nat dump`); `bpftool prog show id N` names the program.",
    },
    Hint {
        kind: Some(Kind::NoReply),
        reason: None,
        evidence: &[EvidenceKind::SocketRewrite],
        when: None,
        text: "The application asked for the Service address, and a cgroup socket program (socket-level load balancing) sent the call to this backend, which did not answer: the packets went there, not to the Service address. Check that backend (is it up, does it serve that port, does a policy or route on its side drop it: `tracer follow BACKEND:PORT` on its node), and whether the dataplane's backend table is current (`cilium service list`, `cilium bpf lb list`; Calico: `calico-node -bpf nat dump`). A UDP answer that comes back from the backend's address needs the recvmsg program to turn it back into the Service's, or the client drops it.",
    },
];

#[cfg(test)]
mod tests;
