//! The sentences of packets dropped for being larger than the next
//! link's MTU. Each device is passed with its MTU: `(dev, mtu)` for the
//! one the packet would have left by, `(in_dev, in_mtu)` for the one it
//! came in by.

use std::fmt;

/// [`super::Evidence::MtuExceeded`].
pub(super) fn exceeded(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    (dev, mtu): (&str, u32),
    (in_dev, in_mtu): (&str, Option<u32>),
    drops: u32,
    icmp_sent: u32,
    family: &str,
) -> fmt::Result {
    write!(
        f,
        "{drops} packets larger than the MTU {mtu} of {dev} dropped in netns {netns}"
    )?;
    if let Some(m) = in_mtu {
        write!(f, " (they came in by {in_dev}, MTU {m})")?;
    }
    if family == "ipv6" {
        write!(
            f,
            "; ip6_forward() answers each with an ICMPv6 \"packet too big\" (not traced), yet the sender kept sending full-size packets: it never got them (PMTU black hole)"
        )
    } else if icmp_sent > 0 {
        write!(
            f,
            "; {icmp_sent} ICMP \"fragmentation needed\" built, yet the sender kept sending full-size packets: it never got them (PMTU black hole)"
        )
    } else {
        write!(f, "; no ICMP \"fragmentation needed\" was sent back")
    }
}

/// [`super::Evidence::PacketTooBig`].
pub(super) fn too_big(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    (dev, mtu): (&str, u32),
    len: Option<u32>,
    (in_dev, in_mtu): (&str, Option<u32>),
    icmp_sent: bool,
    family: &str,
) -> fmt::Result {
    match len {
        Some(l) => write!(f, "a {l}-byte packet")?,
        None => write!(f, "a packet")?,
    }
    write!(
        f,
        " larger than the MTU {mtu} of {dev} dropped in netns {netns}"
    )?;
    if let Some(m) = in_mtu {
        write!(f, " (it came in by {in_dev}, MTU {m})")?;
    }
    if family == "ipv6" {
        write!(
            f,
            "; ip6_forward() answers it with an ICMPv6 \"packet too big\" (not traced)"
        )
    } else if icmp_sent {
        write!(
            f,
            "; an ICMP \"fragmentation needed\" (MTU {mtu}) was sent back to the sender"
        )
    } else {
        write!(f, "; no ICMP \"fragmentation needed\" was sent back")
    }
}
