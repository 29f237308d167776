use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn drops(v: &crate::verdict::Verdict) -> Vec<&CgroupSkbDrop> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::CgroupProgramDrop(r) => Some(r),
            _ => None,
        })
        .collect()
}

// On the recordings of blind scenes (tests/src/blind_stack.rs, written
// before the rule), with their near misses.

/// systemd's IPAddressDeny= on the sender's unit (systemd/systemd#7074):
/// the egress program is named; the sending socket was closed, so it is
/// the node's only one.
#[test]
fn an_egress_program_that_refuses_is_named() {
    let (f, mut env) = load("blind_stack_logind_ipaddressdeny");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::BpfCgroupEgress, "{v:?}");
    let d = drops(&v);
    assert_eq!(d.len(), 1, "{v:?}");
    assert_eq!(d[0].programs.len(), 1, "{v:?}");
    assert_eq!(d[0].programs[0].name, "sd_fw_egress");
    assert!(v.where_.contains("sd_fw_egress (id "), "{}", v.where_);
    assert!(v.hint.contains("IPAddressDeny"), "{}", v.hint);
    // Near miss: no cgroup program on the node now: none is blamed.
    env.cgroup_skb = None;
    let v = verdict_of(&f, &env);
    assert!(drops(&v)[0].programs.is_empty(), "{v:?}");
    assert!(
        v.where_.contains("none is attached on the node now"),
        "{}",
        v.where_
    );
    assert!(!v.hint.contains("IPAddressDeny"), "{}", v.hint);
}

/// IPAddressAllow=localhost on the listener's unit (systemd PR #6764):
/// the ingress program of the listener's own cgroup is named; one on
/// another cgroup is not, and then the socket's own filter is said.
#[test]
fn an_ingress_program_of_the_sockets_cgroup_is_named() {
    let (f, mut env) = load("blind_stack_unit_allow_localhost");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::SocketFilter, "{v:?}");
    let d = drops(&v);
    assert_eq!(d[0].programs.len(), 1, "{v:?}");
    assert_eq!(d[0].programs[0].name, "sd_fw_ingress");
    let cg = d[0].cgroup.clone().expect("the listener's cgroup");
    assert!(v.where_.contains(&format!("(cgroup {cg})")), "{}", v.where_);
    // Near miss: the program is on a cgroup the socket is not in.
    let skb = env.cgroup_skb.as_mut().expect("read");
    for p in &mut skb.programs {
        p.at = "/elsewhere.slice".into();
    }
    let v = verdict_of(&f, &env);
    assert!(drops(&v)[0].programs.is_empty(), "{v:?}");
    assert!(v.where_.contains("socket's own filter"), "{}", v.where_);
    assert!(v.hint.contains("SO_ATTACH_FILTER"), "{}", v.hint);
}

#[test]
fn cgroup_paths_hold_their_descendants_only() {
    assert!(under("/system.slice/a.service", "/system.slice"));
    assert!(under("/system.slice", "/system.slice"));
    assert!(under("/x", "/"));
    assert!(!under("/system.slice2/a", "/system.slice"));
}
