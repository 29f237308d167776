//! The sentences of conntrack's own drops: a full table, an entry it
//! could not insert, a packet it found INVALID.

use std::fmt;

use super::Endpoint;
use crate::model::hop::Dir;

/// [`super::Evidence::ConntrackFull`].
pub(super) fn full(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    entries: u64,
    max: u64,
    drop: u64,
    early_drop: u64,
    insert_failed: u64,
) -> fmt::Result {
    write!(
        f,
        "the conntrack table of netns {netns} is full (nf_conntrack_count {entries}, nf_conntrack_max {max}): conntrack dropped {drop} packets for want of an entry (early_drop {early_drop}, insert_failed {insert_failed})"
    )
}

/// [`super::Evidence::ConntrackInsertFailed`]; `nat` is `(snat, dnat)`.
pub(super) fn insert_failed(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    reply_src: &Endpoint,
    reply_dst: &Endpoint,
    nat: (bool, bool),
    insert_failed: u64,
    drop: u64,
) -> fmt::Result {
    let nat = match nat {
        (true, true) => "after source and destination NAT, ",
        (true, false) => "after source NAT, ",
        (false, true) => "after destination NAT, ",
        (false, false) => "",
    };
    write!(
        f,
        "conntrack of netns {netns} could not insert the connection's entry: another entry holds its tuple ({nat}reply {reply_src} -> {reply_dst}); insert_failed {insert_failed}, drop {drop}"
    )
}

/// [`super::Evidence::ConntrackInvalid`].
pub(super) fn invalid(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    dir: Dir,
    rule: &str,
    invalid: Option<u64>,
    requests_seen: bool,
) -> fmt::Result {
    write!(
        f,
        "conntrack in netns {netns} found the {} packet INVALID and rule `{rule}` dropped it",
        match dir {
            Dir::Request => "request",
            Dir::Reply => "reply",
        }
    )?;
    if let Some(n) = invalid {
        write!(f, " (conntrack has counted {n} invalid packets there)")?;
    }
    if dir == Dir::Reply && !requests_seen {
        write!(
            f,
            "; the requests never passed that namespace: replies come back a way the requests did not go (asymmetric routing), so conntrack has no entry for them"
        )?;
    }
    Ok(())
}
