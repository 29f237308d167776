use super::*;
use crate::verdict::rules::tests::{facts, judge, load};
#[allow(unused_imports, reason = "not every test file names both")]
use crate::verdict::{DropReason, Found};

/// The verdict's rewrite facts.
fn rewrites(v: &crate::verdict::Verdict) -> Vec<&BpfRewrite> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::BpfRewrite(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// A Service translated in tc (tests/src/dataplane_scenes.rs): the
/// program on the client veth's tc ingress rewrote 10.189.9.9:80 to the
/// backend, and is named; the flow is delivered at the backend's socket.
#[test]
fn the_program_that_rewrote_is_named() {
    let (f, env) = load("dp_tc_service_dnat");
    let v = judge(&f, &env);
    assert_eq!(v.kind, Kind::Delivered, "{v:?}");
    let r = rewrites(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(
        (r[0].asked.to_string(), r[0].became.to_string()),
        ("10.189.9.9:80".to_string(), "10.189.2.2:8080".to_string())
    );
    assert_eq!(
        (r[0].hook.as_str(), r[0].dev.as_str()),
        ("tc ingress", "r0")
    );
    assert_eq!(r[0].programs.len(), 1, "{v:?}");
    assert_eq!(r[0].programs[0].name, "cil_from_contai");
    assert!(
        r[0].to_string()
            .contains("10.189.9.9:80 became 10.189.2.2:8080 at tc ingress of r0 in netns ")
            && r[0].to_string().contains(": rewritten by tc"),
        "{}",
        r[0]
    );
}

/// Near misses: with no program on the devices now, the rewrite is still
/// said (no conntrack entry held it) without a program; a flow that
/// conntrack translated, or none did, has no such fact.
#[test]
fn near_misses() {
    let (f, mut env) = load("dp_tc_service_dnat");
    env.dev_programs.clear();
    let v = judge(&f, &env);
    let r = rewrites(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert!(r[0].programs.is_empty() && r[0].hook.is_empty(), "{v:?}");
    assert!(
        r[0].to_string().contains("with no conntrack entry"),
        "{}",
        r[0]
    );
    let (mut g, env) = load("dp_tc_service_dnat");
    g.nat_by = Some(NatBy::Netfilter);
    assert!(rewrites(&judge(&g, &env)).is_empty());
    let (f, env) = load("dp_tc_passes_closed_port");
    assert!(rewrites(&judge(&f, &env)).is_empty());
}

/// The sites a rewrite can have happened at, around the hops that saw
/// the old tuple last and the new one first.
#[test]
fn sites_around_the_hops() {
    assert_eq!(
        after(Hook::NetifReceive),
        [BpfHook::Xdp, BpfHook::TcIngress]
    );
    assert_eq!(after(Hook::TcEgress), [BpfHook::TcEgress]);
    assert!(after(Hook::Xmit).is_empty());
    assert_eq!(before(Hook::Xmit), [BpfHook::TcEgress]);
    assert_eq!(before(Hook::TcIngress), [BpfHook::Xdp]);
    assert!(before(Hook::NetifReceive).is_empty());
}

// On recordings of the blind scenes of this class (tests/src/blind_bpfnat.rs,
// written before this cause), with their near misses.

/// cilium/cilium#40521: a NodePort's replies leave the node by eth1,
/// where no program translates them back; the client resets them.
#[test]
fn replies_that_left_by_a_device_without_the_program_are_named() {
    let (f, env) = load("blind_bpfnat_nodeport_reply_unreversed");
    let v = judge(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "reply_not_translated"),
        "{v:?}"
    );
    assert!(
        v.where_
            .contains("the replies from 10.241.133.2:8080 reached netns"),
        "{}",
        v.where_
    );
    assert!(
        v.where_
            .contains("by eth1, where no tc program is attached to its egress"),
        "{}",
        v.where_
    );
    let r = rewrites(&v);
    let u = r[0].reply_untranslated.as_ref().expect("untranslated");
    assert_eq!(u.dev, "eth1");
    assert!(u.programs.is_empty());
    assert_eq!(r[0].programs[0].name, "cil_from_netdev");
    assert!(v.hint.contains("never saw them"), "{}", v.hint);
}

/// kubernetes/kubernetes#68367 as a tc program's miss: the DNS answer
/// passes the to-container program unchanged and is queued to the
/// client's socket from the pod's address.
#[test]
fn answers_queued_from_the_backend_are_named() {
    let (f, env) = load("blind_bpfnat_dns_reply_unreversed");
    let v = judge(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Delivered, "reply_not_translated"),
        "{v:?}"
    );
    assert!(
        v.where_.contains("tc BPF program cil_to_containe"),
        "{}",
        v.where_
    );
    assert!(v.where_.contains("glibc's resolver"), "{}", v.where_);
}

/// Near misses: the same flows with the client seeing a reply from the
/// address it asked (translated back), or with the rewrite made by
/// netfilter, are not this rule's; a stale backend and a loopback-bound
/// server keep their own verdicts, with the rewrite named.
#[test]
fn near_misses_of_the_reply_rule() {
    let (mut f, env) = load("blind_bpfnat_nodeport_reply_unreversed");
    let client = f.hops[0].netns_inode;
    let back = f
        .hops
        .iter()
        .find(|h| h.netns_inode == client && h.dir == Dir::Reply)
        .cloned()
        .unwrap();
    let mut translated = back.clone();
    translated.tuple = std::sync::Arc::new(Tuple {
        src: f.key.dst,
        sport: f.key.dport,
        ..*back.tuple
    });
    f.hops.push(translated);
    assert!(reply_not_translated(&f, &env).is_none());
    let (mut g, env) = load("blind_bpfnat_dns_reply_unreversed");
    g.nat_by = Some(NatBy::Netfilter);
    assert!(reply_not_translated(&g, &env).is_none());
    let (s, env) = load("blind_bpfnat_stale_backend");
    let v = judge(&s, &env);
    assert!(
        v.where_.contains("10.241.112.7 (its destination after NAT"),
        "{}",
        v.where_
    );
    assert_eq!(rewrites(&v)[0].programs[0].name, "calico_from_wor");
    assert!(rewrites(&v)[0].reply_untranslated.is_none());
    let (t, env) = load("blind_bpfnat_trap_loopback_bind");
    let v = judge(&t, &env);
    assert_eq!(v.reason, DropReason::NoSocket, "{v:?}");
    assert!(rewrites(&v)[0].reply_untranslated.is_none(), "{v:?}");
}
