use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn loops(v: &crate::verdict::Verdict) -> Vec<&RoutingLoop> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::RoutingLoop(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// A Service range routed back and forth between a node and its ToR
/// (projectcalico/confd#322, written blind): the loop, both routes and
/// who holds each gateway are named.
#[test]
fn a_loop_names_both_routes() {
    let (f, env) = load("blind_node_service_range_loop");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::IpInhdr, "{v:?}");
    let l = loops(&v);
    assert_eq!(l.len(), 1, "{v:?}");
    assert_eq!(l[0].routes.len(), 2, "{v:?}");
    assert!(l[0].routes.iter().all(|r| r.gw_netns.is_some()), "{v:?}");
    assert!(l[0].passes >= 2, "{v:?}");
    assert!(v.hint.contains("blackhole"), "{}", v.hint);
    // Near miss: the packet entered the namespace once (a TTL that was
    // low from the start): not a loop.
    let mut g = f.clone();
    let drop_ns = g
        .hops
        .iter()
        .find(|h| h.hook == Hook::Drop)
        .map(|h| h.netns_inode)
        .expect("a drop");
    let mut first = true;
    g.hops.retain(|h| {
        let entry = h.dir == Dir::Request
            && h.netns_inode == drop_ns
            && matches!(h.hook, Hook::NetifReceive | Hook::TcIngress);
        if entry && !first {
            return false;
        }
        first &= !entry;
        true
    });
    let v = verdict_of(&g, &env);
    assert!(loops(&v).is_empty(), "{v:?}");
    assert!(!v.hint.contains("routing loop"), "{}", v.hint);
}
