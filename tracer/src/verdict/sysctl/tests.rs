use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load, set_link};
#[allow(unused_imports, reason = "not every test file names both")]
use crate::verdict::{DropReason, Found};

/// The refusals of a verdict.
fn refusals(v: &crate::verdict::Verdict) -> Vec<&SysctlRefusal> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::SysctlRefused(r) => Some(r),
            _ => None,
        })
        .collect()
}

// On recordings of the blind sysctl scenes (tests/src/blind_sysctl.rs,
// written before the rule), with their near misses.

/// kind's DNAT of a pod's DNS to 127.0.0.11 arrives by veth1, whose
/// route_localnet is 0 (kubernetes-sigs/kind#2326): the sysctl as set,
/// the loopback address and the destination it was sent to are named.
#[test]
fn route_localnet_off_is_named() {
    let (f, mut env) = load("blind_sys_localnet_dnat");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "IP_LOCALNET"),
        "{v:?}"
    );
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(r[0].sysctl, Sysctl::RouteLocalnet);
    assert_eq!(r[0].addr, Some(IpAddr::from([127, 0, 0, 11])), "{v:?}");
    assert_eq!(r[0].sent_to, Some(IpAddr::from([10, 186, 0, 1])), "{v:?}");
    assert!(
        v.where_
            .contains("came in by veth1, where net.ipv4.conf.veth1.route_localnet = 0"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("route_localnet=1"), "{}", v.hint);
    // Near miss: the sysctl is on (the drop is then not this cause's).
    set_link(&mut env, "veth1", |l| l.route_localnet = Some(true));
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(!v.hint.contains("route_localnet"), "{}", v.hint);
    // Near miss: the sysctl was not read (an old recording): not claimed.
    set_link(&mut env, "veth1", |l| l.route_localnet = None);
    assert!(refusals(&verdict_of(&f, &env)).is_empty());
}

/// The trap: route_localnet is on and the DNAT names a port nothing
/// listens on any more (moby/moby#31560): NO_SOCKET, not the sysctl.
#[test]
fn a_closed_port_behind_a_localnet_dnat_is_not_the_sysctl() {
    let (f, env) = load("blind_sys_localnet_stale_port");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::NoSocket, "{v:?}");
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(!v.hint.contains("route_localnet"), "{}", v.hint);
}

/// IPv6 disabled on the device a packet came in by: named from the
/// device's sysctl alone, whatever the scene.
#[test]
fn ipv6_disabled_is_named_from_the_device() {
    let (f, mut env) = load("blind_sys_localnet_dnat");
    let drop = f
        .hops
        .iter()
        .find(|h| h.hook == tracer_common::Hook::Drop)
        .expect("a drop");
    set_link(&mut env, "veth1", |l| l.disable_ipv6 = Some(true));
    let (w, e) = judge(&f, drop, &DropReason::Ipv6disabled, "ip6_rcv_core", &env).expect("judged");
    assert!(
        w.starts_with("ip6_rcv_core in netns ")
            && w.contains("IPv6 is disabled on veth1 (net.ipv6.conf.veth1.disable_ipv6 = 1)"),
        "{w}"
    );
    assert!(matches!(e, Evidence::SysctlRefused(r) if r.sysctl == Sysctl::DisableIpv6));
    set_link(&mut env, "veth1", |l| l.disable_ipv6 = Some(false));
    assert!(judge(&f, drop, &DropReason::Ipv6disabled, "ip6_rcv_core", &env).is_none());
}

/// IPv6 off in a pod (danm-cni/danm#68, tests/src/blind_sysctl.rs,
/// written before the other end of a veth was read): the node's NDP for
/// the pod fails on lxc2, whose other end, eth0 in the pod, has
/// disable_ipv6 on. The failure's reason is inferred (IPv6's neighbour
/// failure frees with NOT_SPECIFIED) and the other end is named.
#[test]
fn ipv6_off_at_the_other_end_is_named() {
    let (f, mut env) = load("blind_sys_pod_ipv6_disabled");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str(), v.reason_inferred),
        (Kind::Dropped, "NEIGH_FAILED", true),
        "{v:?}"
    );
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(
        (r[0].sysctl, r[0].dev.as_str(), r[0].other_end_of.as_deref()),
        (Sysctl::DisableIpv6, "eth0", Some("lxc2")),
        "{v:?}"
    );
    assert!(r[0].netns.ends_with("-pod2"), "{v:?}");
    assert!(
        v.where_
            .contains("-pod2 is the other end of lxc2: IPv6 is disabled on eth0"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("disable_ipv6=0"), "{}", v.hint);
    // Near miss: IPv6 on at the other end: not this cause.
    set_link(&mut env, "eth0", |l| l.disable_ipv6 = Some(false));
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert_eq!(v.reason, DropReason::NeighFailed, "{v:?}");
    // Near miss: the other end's namespace was not found: nothing claimed.
    set_link(&mut env, "eth0", |l| l.disable_ipv6 = Some(true));
    set_link(&mut env, "lxc2", |l| {
        if let Some(p) = l.peer.as_mut() {
            p.netns = None;
        }
    });
    assert!(refusals(&verdict_of(&f, &env)).is_empty());
}
