use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn lost(v: &crate::verdict::Verdict) -> Vec<&FragmentsLost> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::FragmentsLost(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// A DNS answer in fragments, the later ones dropped by a stateless ACL
/// that allows `udp sport 53` (cilium/cilium#9755, written blind): not
/// delivered; the first fragment, who forwarded it, and ipfrag_time.
#[test]
fn a_datagram_whose_fragments_were_lost_is_not_delivered() {
    let (f, mut env) = load("blind_more_dns_fragments_stateless_acl");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.clone()),
        (Kind::Dropped, DropReason::FragReasmTimeout.into()),
        "{v:?}"
    );
    let l = lost(&v);
    assert_eq!(l.len(), 1, "{v:?}");
    assert_eq!(l[0].frag_time, Some(1), "{v:?}");
    assert_eq!(l[0].first_len, Some(1500), "{v:?}");
    assert_eq!(l[0].forwarded_by.len(), 1, "{v:?}");
    assert!(v.hint.contains("frag-off"), "{}", v.hint);
    // ipfrag_time not read: still the cause, without the figure.
    env.frag_time.clear();
    let v = verdict_of(&f, &env);
    assert_eq!(lost(&v)[0].frag_time, None, "{v:?}");
    // Near miss: without the timeout the flow is what it was (delivered).
    let mut g = f.clone();
    g.hops.retain(
        |h| !matches!(&h.data, HopData::Drop(d) if d.reason == DropReason::FragReasmTimeout),
    );
    let v = verdict_of(&g, &env);
    assert_ne!(v.kind, Kind::Dropped, "{v:?}");
    assert!(lost(&v).is_empty());
}

/// The trap (kubernetes/dns#205, written blind): the fragments all
/// arrive, at a port nobody serves: NO_SOCKET, no fragments blamed.
#[test]
fn fragments_that_arrive_are_not_blamed() {
    let (f, env) = load("blind_more_trap_fragments_arrive_no_listener");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::NoSocket, "{v:?}");
    assert!(lost(&v).is_empty(), "{v:?}");
}
