use super::*;
#[allow(unused_imports, reason = "not every test file names both")]
use crate::verdict::{DropReason, Found};

#[test]
fn signals_are_the_veth_crossing() {
    for f in [
        "__dev_forward_skb2",
        "__dev_forward_skb",
        "veth_xmit",
        "__dev_forward_skb2.cold",
    ] {
        assert!(crossing_func(f), "{f}");
    }
    for f in [
        "neigh_invalidate",
        "br_handle_frame_finish",
        "ip_rcv_core",
        "",
    ] {
        assert!(!crossing_func(f), "{f}");
    }
}

use crate::verdict::rules::tests::{facts, judge as verdict_of, load, set_link};

/// The refusals of a verdict.
fn refusals(v: &crate::verdict::Verdict) -> Vec<&VethRefusal> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::VethOtherEnd(r) => Some(r),
            _ => None,
        })
        .collect()
}

// On recordings of the blind veth scenes (tests/src/blind_veth.rs,
// written before this cause), with their near misses.

/// A statsd pod's eth0 has MTU 1400 (the tuning plugin), its node-side
/// veth2 1500 (rancher/rancher#10498): the node's 1472-byte datagram is
/// dropped where veth2 hands it to eth0.
#[test]
fn a_smaller_mtu_at_the_other_end_is_named() {
    let (f, mut env) = load("blind_veth_mtu_pod_smaller");
    let v = verdict_of(&f, &env);
    assert_eq!(v.kind, Kind::Dropped, "{v:?}");
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(
        (
            r[0].problem,
            r[0].dev.as_str(),
            r[0].other_dev.as_str(),
            r[0].mtu,
            r[0].dev_mtu,
            r[0].len
        ),
        (
            VethProblem::MtuSmaller,
            "veth2",
            "eth0",
            Some(1400),
            Some(1500),
            Some(1514)
        ),
        "{v:?}"
    );
    assert!(
        v.where_
            .contains("MTU 1500 here, MTU 1400 at its other end eth0 in netns "),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("same MTU"), "{}", v.hint);
    // Near miss: the frame fits (the other end's MTU is the same): not
    // this cause.
    set_link(&mut env, "eth0", |l| l.mtu = 1500);
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(!v.hint.contains("same MTU"), "{}", v.hint);
    // The other end down is what the crossing's drop says then.
    set_link(&mut env, "eth0", |l| l.up = Some(false));
    let r = verdict_of(&f, &env);
    assert_eq!(
        refusals(&r).first().map(|r| r.problem),
        Some(VethProblem::Down),
        "{r:?}"
    );
}

/// A Calico pod's node-side cali1 is down (projectcalico/calico#9648): the
/// pod's ARP for its gateway fails on eth0, which has no carrier.
#[test]
fn the_other_end_down_is_named() {
    let (f, mut env) = load("blind_veth_host_side_down");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "NEIGH_FAILED"),
        "{v:?}"
    );
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(
        (r[0].problem, r[0].dev.as_str(), r[0].other_dev.as_str()),
        (VethProblem::Down, "eth0", "cali1"),
        "{v:?}"
    );
    assert!(
        v.where_.contains("is down: eth0 has no carrier"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("ip link set DEV up"), "{}", v.hint);
    // Near miss: cali1 up: the veth is not blamed.
    set_link(&mut env, "cali1", |l| l.up = Some(true));
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    // Near miss: its state was not read (an older recording): not claimed.
    set_link(&mut env, "cali1", |l| l.up = None);
    assert!(refusals(&verdict_of(&f, &env)).is_empty());
}

/// The trap (cloudnativelabs/kube-router#1895): the pod's neighbour
/// solicitations are rejected by a policy chain; the veth's ends are up,
/// with one MTU and IPv6 on: no cause of this module or the others that
/// read the other end is claimed.
#[test]
fn a_policy_chain_is_not_blamed_on_the_veth() {
    let (f, env) = load("blind_veth_trap_ndp_policy");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::NeighFailed, "{v:?}");
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(
        !facts(&v).any(|e| matches!(
            e,
            Evidence::SysctlRefused(_) | Evidence::BridgeWillNotForward(_)
        )),
        "{v:?}"
    );
}
