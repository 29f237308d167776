//! Unit tests of the causes added from the blind scenes (docs/blind-
//! scenes.md), on their recordings: each names its cause from the facts
//! the run read, and the near misses (the fact absent, or saying the
//! opposite) do not.

use super::tests::{facts, judge, load, netns};
use super::*;
use crate::node::route::RouteOutcome;
use crate::verdict::EvidenceKind;

/// The routing facts of the namespace where the flow was dropped.
fn drop_ns(f: &Flow) -> u32 {
    f.hops
        .iter()
        .find(|h| h.hook == Hook::Drop)
        .expect("a drop")
        .netns_inode
}

/// One datagram too big for flannel.1: the device, its MTU and the size;
/// without the links read, the device alone and no MTU claimed.
#[test]
fn one_too_big_packet_names_the_egress_mtu() {
    let (f, mut env) = load("blind_vxlan_mtu");
    let node1 = netns(&f, "node1");
    let v = judge(&f, &env);
    assert_eq!((v.kind, v.reason.as_str()), (Kind::Dropped, "PKT_TOO_BIG"));
    assert_eq!(
        v.where_,
        format!(
            "ip_forward in netns {node1}: a 1488-byte packet with DF set is larger than the MTU 1450 of flannel.1"
        )
    );
    assert!(facts(&v).any(|e| matches!(
        e,
        Evidence::PacketTooBig {
            mtu: 1450,
            len: Some(1488),
            icmp_sent: true,
            in_mtu: Some(1500),
            ..
        }
    )));
    assert!(
        !v.has(EvidenceKind::MtuExceeded),
        "one drop is not a black hole"
    );
    assert!(v.hint.contains("tunnel"), "{}", v.hint);
    env.links.clear();
    let v = judge(&f, &env);
    assert!(
        v.where_.ends_with("is too big for flannel.1"),
        "{}",
        v.where_
    );
    assert!(!v.has(EvidenceKind::PacketTooBig));
    assert!(!v.hint.contains("tunnel"), "{}", v.hint);
}

/// DNAT in OUTPUT to an endpoint with no route: the route lookup again
/// after NAT, not a rule. With a route there (or the lookup not read),
/// no such claim: the netfilter drop as it was.
#[test]
fn a_netfilter_drop_no_rule_explains_is_the_route_after_nat() {
    let (f, mut env) = load("blind_output_dnat_no_route");
    let node = netns(&f, "node");
    let v = judge(&f, &env);
    assert_eq!(
        v.where_,
        format!(
            "netfilter OUTPUT (nf_hook_slow) in netns {node}: no rule dropped it: the route lookup again after NAT (ip_route_me_harder()) for 10.254.64.5 (its destination after NAT; it was sent to 10.254.96.1) found no route"
        )
    );
    assert!(facts(&v).any(|e| matches!(
        e,
        Evidence::RouteRefused {
            outcome: RouteOutcome::NoRoute,
            after_nat_in_output: true,
            iif: None,
            ..
        }
    )));
    assert!(
        v.hint.starts_with("No netfilter rule dropped it"),
        "{}",
        v.hint
    );
    let ino = drop_ns(&f);
    env.routing.get_mut(&ino).unwrap().lookups[0].outcome = RouteOutcome::Via {
        dev: "eth0".into(),
        gw: None,
        table: 254,
    };
    let v = judge(&f, &env);
    assert_eq!(
        v.where_,
        format!("netfilter OUTPUT (nf_hook_slow) in netns {node}")
    );
    assert!(!v.has(EvidenceKind::RouteRefused));
    env.routing.clear();
    assert!(!judge(&f, &env).has(EvidenceKind::RouteRefused));
}

/// Forwarded after DNAT into a blackholed block, or fenced off by a
/// prohibit rule: ip_error's drop names the refusing route; a usable
/// route in the facts (another cause) leaves the drop site alone.
#[test]
fn a_route_refusing_the_translated_destination_is_named() {
    for (name, role, refusal, said) in [
        (
            "blind_dnat_blackhole",
            "node1",
            RouteOutcome::Blackhole,
            "ip_error in netns {ns}: the route lookup for 10.202.64.9 (its destination after NAT; it was sent to 10.202.96.20) from lxc0 found a blackhole route (or rule)",
        ),
        (
            "blind_dnat_prohibit",
            "router",
            RouteOutcome::Prohibit,
            "ip_error in netns {ns}: the route lookup for 10.203.2.2 (its destination after NAT; it was sent to 10.203.96.30) from r0 found a prohibit route (or rule)",
        ),
    ] {
        let (f, mut env) = load(name);
        let ns = netns(&f, role);
        let v = judge(&f, &env);
        assert_eq!(v.where_, said.replace("{ns}", &ns), "{name}");
        assert!(
            facts(&v).any(|e| matches!(e, Evidence::RouteRefused { outcome, after_nat_in_output: false, .. } if *outcome == refusal)),
            "{name}"
        );
        assert!(v.hint.contains("ip route get"), "{name}: {}", v.hint);
        let ino = drop_ns(&f);
        env.routing.get_mut(&ino).unwrap().lookups[0].outcome = RouteOutcome::Local;
        let v = judge(&f, &env);
        assert_eq!(v.where_, format!("ip_error in netns {ns}"), "{name}");
    }
}
