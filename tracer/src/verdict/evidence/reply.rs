//! The sentences of what the kernel answered the sender, and of the
//! replies seen or missed.

use std::fmt;

/// [`super::Evidence::TcpResetSent`].
pub(super) fn tcp_reset_sent(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    reason: Option<&str>,
) -> fmt::Result {
    write!(f, "tcp reset sent in netns {netns}")?;
    if let Some(r) = reason {
        write!(f, " ({r})")?;
    }
    Ok(())
}

/// [`super::Evidence::IcmpSent`].
pub(super) fn icmp_sent(f: &mut fmt::Formatter<'_>, netns: &str, desc: &str) -> fmt::Result {
    write!(f, "icmp {desc} sent by netns {netns}")
}

/// [`super::Evidence::HostUnreachableInferred`].
pub(super) fn host_unreachable(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str(
        "a failed resolution is reported to the sender as ICMP host-unreachable (ipv4_link_failure(); ICMPv6 address-unreachable, ip6_link_failure()); a local client gets EHOSTUNREACH, \"No route to host\" (errno 113) [inferred from the drop reason]",
    )
}

/// [`super::Evidence::DestinationAnswered`].
pub(super) fn answered(f: &mut fmt::Formatter<'_>, netns: &str) -> fmt::Result {
    write!(f, "the destination answered (netns {netns})")
}

/// [`super::Evidence::NoReply`].
pub(super) fn no_reply(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str("no reply came back")
}

/// [`super::Evidence::NoReplyLeft`].
pub(super) fn no_reply_left(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str("no reply ever left (no SYN-ACK)")
}

/// [`super::Evidence::RepliesCameBack`].
pub(super) fn replies(f: &mut fmt::Formatter<'_>, replies: u32, netns: &str) -> fmt::Result {
    write!(f, "{replies} reply packets came back through netns {netns}")
}

/// [`super::Evidence::PacketsSeen`].
pub(super) fn packets_seen(f: &mut fmt::Formatter<'_>, requests: u32, replies: u32) -> fmt::Result {
    write!(f, "{requests} request packets, {replies} replies seen")
}
