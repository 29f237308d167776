//! A cause: the packet's checksum was wrong where the receiving stack
//! checked it, after a BPF program on its path rewrote it without fixing
//! the checksum (a dataplane's DNAT or port redirect), or, with no
//! rewrite on the traced path, as it arrived (a sender's checksum
//! offload, a NIC, the vxlan offload bug flannel hit).
//!
//! - **Signals**: TCP_CSUM (tcp_v4_rcv(), tcp_v6_rcv():
//!   tcp_checksum_complete()), UDP_CSUM (__udp4_lib_rcv(),
//!   udp_queue_rcv_one_skb(): udp_lib_checksum_complete()), IP_CSUM
//!   (ip_rcv_core(): ip_fast_csum() of the header), ICMP_CSUM (icmp_rcv()).
//! - **Facts**: the flow's rewrite by a tc or XDP program
//!   (`bpf_nat::rewrite`: the request seen under another tuple with no
//!   conntrack entry, and the programs attached where it changed), from
//!   the recorded programs of the devices (`Env::dev_programs`).
//! - **Evidence**: [`Evidence::ChecksumBad`] holding a [`ChecksumFault`].
//! - **Where**: `tcp_v4_rcv in netns backend: the TCP checksum is wrong
//!   ... after 10.1.1.1:30080 became 10.1.2.2:8080 at tc ingress of eth0
//!   in netns node: rewritten by nodeport_dnat (id 7)`.
//! - **Rules**: `rules::device_cause` asks [`judge`] for these reasons.
//! - **Hint**: [`HINTS`]: the program that does not fix the checksum;
//!   a checksum wrong on arrival.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Env, Evidence, Kind, bpf_nat::BpfRewrite, hints::Hint};
use crate::model::{drop_reason::DropReason, flow::Flow, hop::Hop};

/// A checksum the receiving stack found wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChecksumFault {
    /// `TCP`, `UDP`, `IP` (the header's) or `ICMP`.
    pub proto: String,
    pub netns: String,
    /// The device it came in by.
    pub dev: String,
    /// The rewrite a BPF program made on its way, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten: Option<BpfRewrite>,
}

impl ChecksumFault {
    /// What happened, after `FUNC in netns N: `.
    pub fn said(&self) -> String {
        let what = format!("the {} checksum is wrong", self.proto);
        match &self.rewritten {
            Some(r) if !r.programs.is_empty() => format!(
                "{what}, and the packet was rewritten on its way ({r}): that program changed it without updating its checksum"
            ),
            Some(r) => format!("{what}, and the packet was rewritten on its way ({r})"),
            None => format!(
                "{what} as it arrived by {}: no tc or XDP program on the traced path rewrote it, so it was wrong before (its sender, or a device before the first traced hook)",
                self.dev
            ),
        }
    }
}

impl fmt::Display for ChecksumFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in netns {}: {}", self.netns, self.said())
    }
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[super::explains::Explains {
    reasons: &[
        DropReason::TcpCsum,
        DropReason::UdpCsum,
        DropReason::IpCsum,
        DropReason::IcmpCsum,
    ],
    cause: "a wrong checksum: left stale by a BPF program that rewrote the packet on its path, or wrong on arrival (verdict/checksum.rs)",
    at: "",
    facts: "the flow's rewrite by a tc or XDP program and the programs attached where it changed (BPF_PROG_QUERY, IFLA_XDP)",
}];

/// The protocol whose checksum `reason` says was wrong.
fn proto(reason: &DropReason) -> Option<&'static str> {
    Some(match reason {
        DropReason::TcpCsum => "TCP",
        DropReason::UdpCsum => "UDP",
        DropReason::IpCsum => "IP header",
        DropReason::IcmpCsum => "ICMP",
        _ => return None,
    })
}

/// A checksum drop, as `(where, evidence)`; None for another reason.
pub fn judge(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<(String, Evidence)> {
    let proto = proto(reason)?;
    let rewritten = match super::bpf_nat::rewrite(flow, env) {
        Some(Evidence::BpfRewrite(r)) => Some(r),
        _ => None,
    };
    let f = ChecksumFault {
        proto: proto.to_string(),
        netns: drop.netns.to_string(),
        dev: drop.dev.to_string(),
        rewritten,
    };
    let at = super::rules::site(func);
    Some((
        format!("{at} in netns {}: {}", f.netns, f.said()),
        Evidence::ChecksumBad(f),
    ))
}

fn after_rewrite(e: &Evidence) -> bool {
    matches!(e, Evidence::ChecksumBad(f) if f.rewritten.is_some())
}

fn on_arrival(e: &Evidence) -> bool {
    matches!(e, Evidence::ChecksumBad(f) if f.rewritten.is_none())
}

/// The cause's hints.
pub const HINTS: &[Hint] = &[
    Hint::when(
        Kind::Dropped,
        after_rewrite,
        "A BPF program of the dataplane rewrote the packet's address or port and left its checksum as it was, so the receiving stack dropped it (nstat InCsumErrors counts them). The program must update the checksum with the rewrite (bpf_l4_csum_replace() with BPF_F_PSEUDO_HDR for an address, bpf_l3_csum_replace() for the IP header, or store with BPF_F_RECOMPUTE_CSUM); a packet still CHECKSUM_PARTIAL (tx offload on a veth) hides the bug until it crosses a device that verifies. Upgrade or fix that program (`bpftool prog show id N` names it and who loaded it); until then the dataplane's own fallback (kube-proxy, or its non-BPF mode) avoids it.",
    ),
    Hint::when(
        Kind::Dropped,
        on_arrival,
        "The packet arrived with a wrong checksum and nothing on the traced path rewrote it: it was damaged before, by the sender's checksum offload (a tunnel device offloading to a NIC that does not do it: the vxlan checksum-offload bug behind flannel's 63-second DNS delays), a NIC or driver, or a program on the sending node. Trace the sending node too; check its devices' offloads (`ethtool -k DEV | grep checksum`) and turn tx checksumming off on the tunnel device as flannel does (`ethtool -K flannel.1 tx-checksum-ip-generic off`); `nstat -az InCsumErrors` counts them here.",
    ),
];

#[cfg(test)]
mod tests;
