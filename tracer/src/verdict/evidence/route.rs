//! The sentences of the way the packet was routed and forwarded: route
//! lookups and rules, the reverse-path filter, forwarding, tc's shortcuts.

use std::{fmt, net::IpAddr};

use crate::node::route::RouteOutcome;

/// The sysctl that switched forwarding off, as set: IPv4's is the
/// device's own, IPv6's the namespace's `all` (ip6_forward()).
pub fn forwarding_sysctl(family: &str, dev: &str) -> String {
    if family == "ipv6" {
        "net.ipv6.conf.all.forwarding = 0".to_string()
    } else {
        format!("net.ipv4.conf.{dev}.forwarding = 0")
    }
}

/// [`super::Evidence::ForwardedBack`].
pub(super) fn forwarded_back(f: &mut fmt::Formatter<'_>, netns: &str, dev: &str) -> fmt::Result {
    write!(
        f,
        "netns {netns} forwarded it back out of {dev}, the interface it came in on"
    )
}

/// [`super::Evidence::LocalRoute`].
pub(super) fn local_route(f: &mut fmt::Formatter<'_>, dst: &IpAddr, dev: &str) -> fmt::Result {
    write!(
        f,
        "route lookup for {dst} matched a LOCAL route via {dev}: delivered to this node itself"
    )
}

/// [`super::Evidence::OtherHostsSubnet`].
pub(super) fn subnet(
    f: &mut fmt::Formatter<'_>,
    dst: &IpAddr,
    net: &IpAddr,
    prefix: u8,
    dev: &str,
) -> fmt::Result {
    write!(
        f,
        "{dst} lies in {net}/{prefix} on {dev}: it is another host's address"
    )
}

/// [`super::Evidence::TcRedirect`].
pub(super) fn tc_redirect(
    f: &mut fmt::Formatter<'_>,
    ingress_dev: &str,
    egress_dev: &str,
) -> fmt::Result {
    write!(
        f,
        "no routing decision between {ingress_dev} ingress and {egress_dev} egress: the IP stack never saw it (tc redirect)"
    )
}

/// [`super::Evidence::TcFilter`].
pub(super) fn tc_filter(f: &mut fmt::Formatter<'_>, dev: &str, filter: &str) -> fmt::Result {
    write!(f, "on {dev} ingress: {filter}")
}

/// [`super::Evidence::PreNatRoute`].
pub(super) fn pre_nat(
    f: &mut fmt::Formatter<'_>,
    dst: &IpAddr,
    dev: &str,
    gw: Option<&IpAddr>,
    src: &IpAddr,
) -> fmt::Result {
    write!(f, "route lookup for {dst} (before DNAT) chose {dev}")?;
    if let Some(g) = gw {
        write!(f, " via {g}")?;
    }
    write!(f, ", so the source became {src}")
}

/// [`super::Evidence::NatSourceMismatch`].
pub(super) fn nat_source(
    f: &mut fmt::Formatter<'_>,
    dst: &super::Endpoint,
    dev: &str,
    src: &IpAddr,
    src_dev: &str,
) -> fmt::Result {
    write!(
        f,
        "after DNAT to {dst} the packet left via {dev} with source {src}, an address of {src_dev}"
    )
}

/// [`super::Evidence::NoRouteBack`].
pub(super) fn no_route_back(f: &mut fmt::Formatter<'_>, netns: &str, dst: &IpAddr) -> fmt::Result {
    write!(f, "netns {netns} has no route back to {dst}")
}

/// [`super::Evidence::ForwardingDisabled`].
pub(super) fn forwarding_off(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    dev: &str,
    family: &str,
) -> fmt::Result {
    write!(
        f,
        "forwarding is disabled on {dev} in netns {netns} ({}): a packet for another host that arrives there is dropped",
        forwarding_sysctl(family, dev)
    )
}

/// [`super::Evidence::NoRouteAfterRules`].
pub(super) fn after_rules(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    dst: &IpAddr,
    rules: &[String],
    refused: bool,
) -> fmt::Result {
    if refused {
        write!(
            f,
            "the routing rules of netns {netns} refused {dst}: {}",
            rules.join(", ")
        )
    } else {
        write!(
            f,
            "no route to {dst} in netns {netns} in any table its routing rules chose: {}",
            rules.join(", ")
        )
    }
}

/// [`super::Evidence::RpFilterMismatch`].
pub(super) fn rp_filter(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    dev: &str,
    mode: Option<u8>,
    src: &IpAddr,
    back_dev: &str,
) -> fmt::Result {
    let m = match mode {
        Some(1) => "rp_filter = 1 (strict)",
        Some(2) => "rp_filter = 2 (loose)",
        _ => "the reverse-path filter",
    };
    if back_dev.is_empty() {
        write!(
            f,
            "{m} on {dev} in netns {netns}: there is no route back to the source {src}"
        )
    } else {
        write!(
            f,
            "{m} on {dev} in netns {netns}: the route back to the source {src} leaves by {back_dev}, not {dev}"
        )
    }
}

/// [`super::Evidence::RouteRefused`].
pub(super) fn refused(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    dst: &IpAddr,
    original: Option<&IpAddr>,
    iif: Option<&str>,
    outcome: &RouteOutcome,
    after_nat_in_output: bool,
) -> fmt::Result {
    write!(f, "in netns {netns} the route lookup for {dst}")?;
    if let Some(o) = original {
        write!(f, " (after NAT from {o})")?;
    }
    match iif {
        Some(d) => write!(f, " from {d}")?,
        None => write!(f, " sent from there")?,
    }
    write!(f, " finds {}", outcome.said())?;
    if after_nat_in_output {
        write!(
            f,
            ": the netfilter drop is the lookup again after NAT (ip_route_me_harder()), no rule was traced or counted"
        )?;
    }
    Ok(())
}

/// [`super::Evidence::Forwarded`].
pub(super) fn forwarded(f: &mut fmt::Formatter<'_>, in_dev: &str, out_dev: &str) -> fmt::Result {
    write!(f, "received on {in_dev}, transmitted on {out_dev}")
}
