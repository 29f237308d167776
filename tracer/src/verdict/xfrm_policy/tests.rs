use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn refusals(v: &crate::verdict::Verdict) -> Vec<&XfrmRefusal> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::XfrmRefused(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// flannel's IPsec policies left after a switch of backend
/// (k3s-io/k3s#2808, written blind): the policy and the missing SA.
#[test]
fn a_policy_without_its_sa_is_named() {
    let (f, mut env) = load("blind_node_stale_ipsec_policy");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::XfrmPolicy, "{v:?}");
    let r = refusals(&v);
    assert_eq!(r.len(), 1, "{v:?}");
    assert_eq!(r[0].problem, XfrmProblem::NoState);
    assert_eq!(r[0].policy.dir, "out");
    assert!(v.hint.contains("ip xfrm policy"), "{}", v.hint);
    // A block policy is named as blocking.
    let x = env.xfrm.values_mut().next().expect("read");
    for p in &mut x.policies {
        p.action = "block".into();
    }
    let v = verdict_of(&f, &env);
    assert_eq!(refusals(&v)[0].problem, XfrmProblem::Block, "{v:?}");
    // Near miss: no policy selects the packet: not claimed.
    for x in env.xfrm.values_mut() {
        for p in &mut x.policies {
            p.dst = "192.0.2.0/24".into();
        }
    }
    let v = verdict_of(&f, &env);
    assert!(refusals(&v).is_empty(), "{v:?}");
    assert!(!v.hint.contains("xfrm"), "{}", v.hint);
}
