//! Why a packet was or was not followed, for `tracer follow --debug-bpf`
//! (aya-log, read by the loader). The loader sets `AYA_LOG_LEVEL` (a
//! read-only global) to Debug only then, and to Off otherwise: with it
//! off, the verifier knows every branch below is dead and does not explore
//! it. Each call sits on a decision about a packet that already matched
//! or was tracked, never on the path of packets of the node that cannot
//! be followed.

use aya_log_ebpf::debug;
use tracer_common::PacketInfo;

// No skb address in these lines: in tp_btf and fentry programs it is a
// trusted pointer, and formatting it is pointer arithmetic the verifier
// refuses.

/// The skb started being followed: its headers match the target.
#[inline(always)]
pub fn matched(dir: u8, p: &PacketInfo) {
    debug!(
        &(),
        target: "tracer_ebpf",
        "follow: headers match the target as {} (proto {} port {} -> {})",
        if dir == crate::filter::DIR_REPLY { "reply" } else { "request" },
        p.proto,
        p.sport,
        p.dport
    );
}

/// A tracked skb whose headers no longer match: rewritten by NAT.
#[inline(always)]
pub fn rewritten(p: &PacketInfo) {
    debug!(
        &(),
        target: "tracer_ebpf",
        "follow: a tracked skb, headers rewritten since (NAT): proto {} port {} -> {}",
        p.proto,
        p.sport,
        p.dport
    );
}

/// A tracked skb address now holds another packet: tracking ends.
#[inline(always)]
pub fn reused(p: &PacketInfo) {
    debug!(
        &(),
        target: "tracer_ebpf",
        "not followed: a tracked skb address now holds another packet (proto {} port {} -> {}): untracked",
        p.proto,
        p.sport,
        p.dport
    );
}

/// Followed by its conntrack entry's original tuple (NAT happened before
/// this hook, e.g. OUTPUT's DNAT).
#[inline(always)]
pub fn by_conntrack(p: &PacketInfo) {
    debug!(
        &(),
        target: "tracer_ebpf",
        "follow: its conntrack original tuple matches the target (seen as proto {} port {} -> {})",
        p.proto,
        p.sport,
        p.dport
    );
}

/// A packet that matched in a namespace `--netns` left out.
#[inline(always)]
pub fn other_netns(netns: u32) {
    debug!(&(), target: "tracer_ebpf", "not followed: namespace {} is not traced (--netns)", netns);
}
