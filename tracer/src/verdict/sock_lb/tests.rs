use super::*;
#[allow(unused_imports, reason = "not every test file names both")]
use crate::verdict::{DropReason, Found};
use crate::verdict::{
    Inventory,
    rules::tests::{facts, judge as verdict_of, load},
};

/// The rewrites of a verdict.
fn rewrites(v: &crate::verdict::Verdict) -> Vec<&SocketRewrite> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::SocketRewrite(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// The only cgroup a recording's facts hold, to change.
fn cgroup(env: &mut Inventory) -> &mut crate::verdict::CgroupPrograms {
    assert_eq!(env.cgroups.len(), 1, "{:?}", env.cgroups);
    env.cgroups.values_mut().next().expect("one cgroup")
}

// On recordings of the blind socket-LB scenes (tests/src/blind_sock.rs,
// written before the socket hooks), with their near misses.

/// A connect() to a ClusterIP that a connect4 program sent to a backend
/// that no longer listens (cilium PR #45593): followed to the backend's
/// refusal, the call, the program and its cgroup named, and the socket-LB
/// hint rather than the generic targetPort one.
#[test]
fn a_refused_backend_names_the_socket_rewrite() {
    let (f, env) = load("blind_sock_backend_refused");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "NO_SOCKET"),
        "{v:?}"
    );
    let r = rewrites(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(r[0].call, SockCall::Connect);
    assert_eq!(r[0].asked.to_string(), "10.205.96.20:80");
    assert_eq!(r[0].became.to_string(), "10.190.11.2:8080");
    assert_eq!(
        r[0].programs
            .iter()
            .map(|p| (p.name.as_str(), p.hook.as_str()))
            .collect::<Vec<_>>(),
        [("cil_sock4_conne", "connect4")]
    );
    assert!(!r[0].reply_source_kept);
    assert!(
        v.hint.contains("sent the call to this backend"),
        "{}",
        v.hint
    );
    assert_eq!(f.nat_by, Some(crate::model::flow::NatBy::Socket));
}

/// Near miss: the task's cgroup gone when the node was read. The rewrite
/// is still shown (from the kernel's record), its program unnamed.
#[test]
fn a_gone_cgroup_still_shows_the_rewrite() {
    let (f, mut env) = load("blind_sock_backend_refused");
    env.cgroups.clear();
    let v = verdict_of(&f, &env);
    let r = rewrites(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert!(r[0].programs.is_empty() && r[0].cgroup.is_none());
    assert!(
        r[0].to_string()
            .contains("by a cgroup socket program (the task's cgroup is gone)"),
        "{}",
        r[0]
    );
}

/// A sendto() a sendmsg4 program sent to a backend whose answers keep
/// their source, with no recvmsg4 program (cilium PR #7925): delivered by
/// the kernel, and the hint says the client drops the answers.
#[test]
fn answers_whose_source_is_not_restored_are_named() {
    let (f, mut env) = load("blind_sock_udp_no_recvmsg");
    let v = verdict_of(&f, &env);
    assert_eq!(v.kind, Kind::Delivered, "{v:?}");
    let r = rewrites(&v);
    assert!(r.len() == 1 && r[0].reply_source_kept, "{v:?}");
    assert!(v.hint.contains("no recvmsg program"), "{}", v.hint);
    // Near miss: a recvmsg4 program in the cgroup's reach restores it.
    let cg = cgroup(&mut env);
    let mut recv = cg.programs[0].clone();
    recv.hook = "recvmsg4".into();
    recv.name = "cil_sock4_recvm".into();
    cg.programs.push(recv);
    let v = verdict_of(&f, &env);
    let r = rewrites(&v);
    assert!(r.len() == 1 && !r[0].reply_source_kept, "{v:?}");
    assert!(!v.hint.contains("no recvmsg program"), "{}", v.hint);
}

/// A Local Redirect Policy's sendto() to a node-local DNS that does not
/// listen yet (cilium#43080): refused there; no answer came back, so the
/// missing-recvmsg fact does not apply even though the scene has one.
#[test]
fn a_redirect_to_a_dns_not_listening_is_named() {
    let (f, env) = load("blind_sock_lrp_dns_not_listening");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "NO_SOCKET"),
        "{v:?}"
    );
    let r = rewrites(&v);
    assert!(r.len() == 1 && r[0].call == SockCall::Sendto, "{v:?}");
    assert!(!r[0].reply_source_kept);
    assert_eq!(r[0].programs[0].hook, "sendmsg4");
}

/// The trap: kube-proxy's DNAT to a closed targetPort while a socket
/// program sits on the host's cgroup only. Netfilter's translation, no
/// rewrite blamed.
#[test]
fn a_netfilter_dnat_is_not_a_socket_rewrite() {
    let (f, env) = load("blind_sock_hostns_only_target_port");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::NoSocket, "{v:?}");
    assert!(rewrites(&v).is_empty(), "{v:?}");
    assert_eq!(f.nat_by, Some(crate::model::flow::NatBy::Netfilter));
}
