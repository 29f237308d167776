//! The sentences of where a packet was dropped and why the kernel says
//! (or tracer infers) it was.

use std::fmt;

use crate::model::{drop_reason::DropReason, hop::Dir};

/// `s`, or `dflt` when it is empty.
fn or(s: &str, dflt: &'static str) -> String {
    if s.is_empty() {
        dflt.to_string()
    } else {
        s.to_string()
    }
}

/// [`super::Evidence::PacketDropped`].
pub(super) fn packet(
    f: &mut fmt::Formatter<'_>,
    dir: Dir,
    location: &str,
    dev: &str,
    netns: &str,
) -> fmt::Result {
    write!(
        f,
        "{} packet dropped at {} on {} in netns {netns}",
        match dir {
            Dir::Request => "request",
            Dir::Reply => "reply",
        },
        or(location, "?"),
        or(dev, "-"),
    )
}

/// [`super::Evidence::RequestDropped`].
pub(super) fn request(
    f: &mut fmt::Formatter<'_>,
    location: Option<&str>,
    reason: Option<&DropReason>,
    netns: &str,
) -> fmt::Result {
    match (location, reason) {
        (Some(l), Some(r)) => write!(f, "request dropped at {l} ({r}) in netns {netns}"),
        _ => write!(f, "request dropped at ? in netns {netns}"),
    }
}

/// [`super::Evidence::LaterDrop`].
pub(super) fn later(
    f: &mut fmt::Formatter<'_>,
    reason: &DropReason,
    location: &str,
) -> fmt::Result {
    write!(f, "a later packet was dropped: {reason} at {location}")
}

/// [`super::Evidence::DropReasonInferred`].
pub(super) fn reason_inferred(
    f: &mut fmt::Formatter<'_>,
    location: &str,
    reason: Option<&DropReason>,
    one_of: &[DropReason],
    site_only: bool,
) -> fmt::Result {
    if site_only {
        f.write_str("the kernel gives no drop reason at this site (NOT_SPECIFIED): ")?;
    } else {
        f.write_str("this kernel gives no drop reason (before 5.17): ")?;
    }
    match reason {
        Some(r) => write!(f, "{r} inferred from the drop location {location}"),
        None if one_of.is_empty() => write!(
            f,
            "{} is not a drop location tracer knows the reason of",
            or(location, "the drop location")
        ),
        None => write!(
            f,
            "{location} drops for one of {}, and nothing seen tells which",
            one_of
                .iter()
                .map(DropReason::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
