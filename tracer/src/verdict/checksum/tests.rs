use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn faults(v: &crate::verdict::Verdict) -> Vec<&ChecksumFault> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::ChecksumBad(r) => Some(r),
            _ => None,
        })
        .collect()
}

// On the recordings of blind scenes (tests/src/blind_stack.rs, written
// before the rule), with their near misses.

/// A tc NodePort DNAT that leaves the TCP checksum stale
/// (projectcalico/calico#3145): the backend drops the SYN, and the
/// rewrite and its program are named.
#[test]
fn a_stale_checksum_after_a_rewrite_names_the_program() {
    let (f, mut env) = load("blind_stack_nodeport_stale_tcp_csum");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::TcpCsum, "{v:?}");
    let c = faults(&v);
    assert_eq!(c.len(), 1, "{v:?}");
    let r = c[0].rewritten.as_ref().expect("the rewrite");
    assert_eq!(r.programs.len(), 1, "{v:?}");
    assert_eq!(r.programs[0].name, "nodeport_dnat");
    assert!(
        v.where_.contains("without updating its checksum"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("left its checksum"), "{}", v.hint);
    // Near miss: the programs were not read (none attached now): the
    // rewrite is still said, no program is blamed.
    env.dev_programs.clear();
    let v = verdict_of(&f, &env);
    assert!(!v.where_.contains("nodeport_dnat"), "{}", v.where_);
    assert!(
        !v.where_.contains("that program changed it"),
        "{}",
        v.where_
    );
}

/// A port redirect (:53 to :5353) in tc that leaves the UDP checksum
/// stale (netbird PR #6861): UDP_CSUM, the rewrite named; the same drop
/// with no rewrite on the path says the checksum was wrong on arrival.
#[test]
fn a_wrong_checksum_with_no_rewrite_is_said_to_come_from_before() {
    let (f, env) = load("blind_stack_dns_forwarder_stale_csum");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::UdpCsum, "{v:?}");
    assert!(faults(&v)[0].rewritten.is_some(), "{v:?}");
    assert!(v.where_.contains("dns_fwd_redir"), "{}", v.where_);
    // Near miss: the flow was not translated (no program rewrote it).
    let mut g = f.clone();
    g.nat_by = None;
    g.translated = None;
    let v = verdict_of(&g, &env);
    assert_eq!(v.reason, DropReason::UdpCsum, "{v:?}");
    assert!(faults(&v)[0].rewritten.is_none(), "{v:?}");
    assert!(v.where_.contains("so it was wrong before"), "{}", v.where_);
    assert!(
        v.hint.contains("arrived with a wrong checksum"),
        "{}",
        v.hint
    );
}
