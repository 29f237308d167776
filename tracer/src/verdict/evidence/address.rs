//! The sentences of facts about an address: whose it is, who answered
//! for it (neighbour resolution, MACs), and how its owner changed.

use std::{fmt, net::IpAddr};

use crate::{model::hop::Nud, node::vip::OwnerChange};

/// [`super::Evidence::NeighbourState`].
pub(super) fn neighbour(
    f: &mut fmt::Formatter<'_>,
    addr: &IpAddr,
    dev: &str,
    netns: &str,
    state: Nud,
    event: &str,
) -> fmt::Result {
    write!(
        f,
        "neighbour {addr} on {dev} in netns {netns}: {state} ({event})"
    )
}

/// [`super::Evidence::EndpointUnanswered`].
pub(super) fn unanswered(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    endpoint: &IpAddr,
    original: &IpAddr,
) -> fmt::Result {
    write!(
        f,
        "{endpoint}, the endpoint NAT translated {original} to, did not answer ARP/NDP from netns {netns}: it is gone or not on that link"
    )
}

/// [`super::Evidence::LocalAddressTransmitted`].
pub(super) fn transmitted(
    f: &mut fmt::Formatter<'_>,
    dev: &str,
    netns: &str,
    addr: &IpAddr,
) -> fmt::Result {
    write!(
        f,
        "the request was transmitted on {dev} in netns {netns} although {addr} is an address of that namespace"
    )
}

/// [`super::Evidence::LocalDestination`].
pub(super) fn local(
    f: &mut fmt::Formatter<'_>,
    addr: &IpAddr,
    dev: &str,
    netns: &str,
) -> fmt::Result {
    write!(
        f,
        "{addr} is a local address on {dev} in netns {netns}: ICMP echo to it is answered by this node itself, which is why ping works while this flow is dropped"
    )
}

/// [`super::Evidence::OwnerChanged`].
pub(super) fn owner_changed(
    f: &mut fmt::Formatter<'_>,
    addr: &IpAddr,
    changes: usize,
    first: &[OwnerChange],
) -> fmt::Result {
    let list: Vec<String> = first
        .iter()
        .map(|c| format!("{} on {} in {} at +{} ms", c.event, c.dev, c.netns, c.t_ms))
        .collect();
    write!(
        f,
        "{addr} changed owner {changes} times during the trace ({}{})",
        list.join("; "),
        if changes > first.len() { "; ..." } else { "" }
    )
}

/// [`super::Evidence::SeveralMacs`].
pub(super) fn several_macs(
    f: &mut fmt::Formatter<'_>,
    addr: &IpAddr,
    macs: &[String],
) -> fmt::Result {
    write!(
        f,
        "{addr} was answered by {} MACs: {}",
        macs.len(),
        macs.join(", ")
    )
}
