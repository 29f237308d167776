use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn refusals(v: &crate::verdict::Verdict) -> Vec<&SourceRefusal> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::SourceRefused(r) => Some(r),
            _ => None,
        })
        .collect()
}

// On the recording of a blind scene (tests/src/blind_node.rs, written
// before the rule), with its near misses.

/// A pod's address also on the node's vxlan.calico
/// (projectcalico/calico#6244): the device that holds it is named.
#[test]
fn a_source_the_namespace_holds_is_named_with_its_device() {
    let (f, mut env) = load("blind_node_pod_ip_on_tunnel");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::IpLocalSource, "{v:?}");
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(r[0].held_by.as_deref(), Some("vxlan.calico"));
    assert_eq!(r[0].dev, "cali1");
    assert!(v.where_.contains("(a duplicate address)"), "{}", v.where_);
    assert!(
        v.hint.contains("Two interfaces hold the same IP"),
        "{}",
        v.hint
    );
    // Near miss: no device of the namespace holds it (the addresses read
    // then): not claimed, and no duplicate hint.
    let src = r[0].src;
    for addrs in env.by_netns.values_mut() {
        addrs.retain(|a| a.addr != src);
    }
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(!v.hint.contains("same IP"), "{}", v.hint);
}

/// A martian source is named by its class; an ordinary one is not.
#[test]
fn martian_sources_are_named_by_class() {
    let (f, env) = load("blind_node_pod_ip_on_tunnel");
    let mut drop = f
        .hops
        .iter()
        .find(|h| h.hook == tracer_common::Hook::Drop)
        .expect("a drop")
        .clone();
    let mut t = *drop.tuple;
    t.src = IpAddr::from([0, 0, 0, 5]);
    drop.tuple = t.into();
    let (w, e) = judge(
        &f,
        &drop,
        &DropReason::IpInvalidSource,
        "ip_rcv_finish_core",
        &env,
    )
    .expect("judged");
    assert!(w.contains("its source 0.0.0.5 is in 0.0.0.0/8"), "{w}");
    assert!(matches!(e, Evidence::SourceRefused(ref r) if r.martian.is_some()));
    t.src = IpAddr::from([10, 1, 1, 1]);
    drop.tuple = t.into();
    assert!(
        judge(
            &f,
            &drop,
            &DropReason::IpInvalidSource,
            "ip_rcv_finish_core",
            &env
        )
        .is_none()
    );
    // Another reason is not this cause's.
    assert!(
        judge(
            &f,
            &drop,
            &DropReason::IpRpfilter,
            "ip_rcv_finish_core",
            &env
        )
        .is_none()
    );
}

/// A Service DNAT to 0.0.0.0:0 (kubernetes/kubernetes#114537, written
/// blind): the martian destination and the address the client asked.
#[test]
fn a_dnat_to_zero_names_the_martian_destination() {
    let (f, env) = load("blind_more_service_dnat_zero_address");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::IpInvalidDest, "{v:?}");
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert!(r[0].is_dst, "{v:?}");
    assert_eq!(
        r[0].sent_to,
        Some(IpAddr::from([10, 141, 100, 10])),
        "{v:?}"
    );
    assert!(v.hint.contains("0.0.0.0/8"), "{}", v.hint);
}

/// The trap of blind_native.rs (facebookincubator/katran#47): the load
/// balancer's health check to its VIP (on lo) is steered out to a real
/// server, which answers from the VIP; the answers die at the load
/// balancer as a local source. The verdict is that drop, the misroute
/// its evidence, the accept_local hint; XDP, which passed them, is not
/// blamed. Near miss: without the namespace's addresses nothing claims
/// the source, and this is not the cause.
#[test]
fn an_answer_from_the_vip_steered_out_to_is_refused_as_a_local_source() {
    let (f, env) = load("blind_native_trap_local_source");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "IP_LOCAL_SOURCE")
    );
    assert!(
        v.where_
            .starts_with("the reply from 10.205.200.1:80 was dropped on its way back: "),
        "{}",
        v.where_
    );
    assert_eq!(refusals(&v)[0].held_by.as_deref(), Some("lo"));
    assert!(facts(&v).any(|e| matches!(e, Evidence::LocalAddressTransmitted { .. })));
    assert!(v.hint.contains("accept_local"), "{}", v.hint);
    let mut no_addrs = env.clone();
    no_addrs.by_netns.clear();
    let v = verdict_of(&f, &no_addrs);
    assert_ne!(v.reason.as_str(), "IP_LOCAL_SOURCE", "{}", v.where_);
}
