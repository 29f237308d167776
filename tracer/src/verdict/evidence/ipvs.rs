//! The sentences of IPVS: what its hooks saw it schedule, and its table.

use std::{fmt, net::IpAddr};

use super::Endpoint;

/// [`super::Evidence::IpvsScheduled`].
pub(super) fn scheduled(
    f: &mut fmt::Formatter<'_>,
    service: &Endpoint,
    real_server: Option<&Endpoint>,
    netns: &str,
    backend: &str,
) -> fmt::Result {
    write!(f, "IPVS scheduled {service} to real server")?;
    if let Some(r) = real_server {
        write!(f, " {r}")?;
    }
    write!(f, " in netns {netns} [{backend}]")
}

/// [`super::Evidence::IpvsNoDestination`].
pub(super) fn no_destination(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    backend: &str,
) -> fmt::Result {
    write!(
        f,
        "ip_vs_schedule() found no destination for the request in netns {netns} [{backend}]"
    )
}

/// [`super::Evidence::IpvsHooksSilent`].
pub(super) fn hooks_silent(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str(
        "IPVS hooks did not report (unavailable here): inferred from the drop and the IPVS table",
    )
}

/// [`super::Evidence::IpvsService`]: `n` real servers, `u` usable.
pub(super) fn service(
    f: &mut fmt::Formatter<'_>,
    service: &str,
    scheduler: &str,
    n: usize,
    u: usize,
) -> fmt::Result {
    write!(
        f,
        "IPVS virtual service {service} ({scheduler}) has {n} real server{}",
        if n == 1 { "" } else { "s" }
    )?;
    if n > 0 && u < n {
        write!(f, ", {u} with weight > 0")?;
    }
    Ok(())
}

/// [`super::Evidence::IpvsNoService`].
pub(super) fn no_service(f: &mut fmt::Formatter<'_>, netns: &str) -> fmt::Result {
    write!(
        f,
        "no virtual service for it in the IPVS table of netns {netns}"
    )
}

/// [`super::Evidence::IpvsLocalAddress`].
pub(super) fn local_address(
    f: &mut fmt::Formatter<'_>,
    addr: &IpAddr,
    dev: &str,
    netns: &str,
) -> fmt::Result {
    write!(
        f,
        "{addr} is a local address on {dev} in netns {netns} (as kube-proxy binds Service IPs in IPVS mode): the node answers ICMP echo itself, which is why ping works"
    )
}
