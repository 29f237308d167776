use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn qdrops(v: &crate::verdict::Verdict) -> Vec<&QdiscDrops> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::QdiscDropped(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// The CNI bandwidth plugin's tbf on an ifb drops a burst's tail
/// (containernetworking/plugins#922, written blind): dropped, though most
/// of the burst was delivered, with the tbf's rate and counters.
#[test]
fn a_rate_limits_drops_are_named_though_the_rest_was_delivered() {
    let (f, mut env) = load("blind_node_egress_bandwidth_burst");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.clone()),
        (Kind::Dropped, DropReason::QdiscDrop.into())
    );
    let q = qdrops(&v);
    assert_eq!(q.len(), 1, "{v:?}");
    assert!(q[0].rate_limited(), "{v:?}");
    assert_eq!(q[0].dev, "bwp1");
    assert!(
        v.where_.contains("by the qdisc of bwp1: tbf"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("egress-bandwidth"), "{}", v.hint);
    // Near miss: the qdiscs were not read: the drop is still the qdisc's,
    // but no rate limit is claimed.
    env.qdiscs.clear();
    let v = verdict_of(&f, &env);
    assert!(!qdrops(&v)[0].rate_limited(), "{v:?}");
    assert!(!v.hint.contains("egress-bandwidth"), "{}", v.hint);
    // Near miss: without the qdisc's drops the flow is delivered.
    let mut g = f.clone();
    g.hops
        .retain(|h| !matches!(&h.data, HopData::Drop(d) if d.reason == DropReason::QdiscDrop));
    assert_eq!(verdict_of(&g, &env).kind, Kind::Delivered);
}
