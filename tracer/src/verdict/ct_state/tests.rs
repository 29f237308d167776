use super::*;
#[allow(unused_imports, reason = "not every test file names both")]
use crate::verdict::{DropReason, Found};
use crate::verdict::{
    Inventory,
    rules::tests::{facts, judge as verdict_of, load},
};

/// The conntrack facts of a verdict.
fn kept_of(v: &Verdict) -> Vec<&ConntrackKept> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::ConntrackKept(k) => Some(k),
            _ => None,
        })
        .collect()
}

/// The endpoints kube-proxy's rules name now for `service`, changed by
/// `f` in every namespace's Services.
fn set_endpoints(env: &mut Inventory, service: &str, f: impl Fn(&mut Option<Vec<String>>)) {
    for table in env.services.values_mut() {
        for s in table.iter_mut().filter(|s| s.service == service) {
            f(&mut s.endpoints);
        }
    }
}

// On recordings of the blind conntrack scenes (tests/src/blind_ct.rs,
// written before the cause), with their near misses.

/// A UDP entry still DNATs a statsd Service to the deleted endpoint
/// 10.171.11.2 (its address reused by a web pod), while kube-proxy's
/// rules name 10.171.12.2 (kubernetes/kubernetes#59368).
#[test]
fn an_old_translation_is_named() {
    let (f, mut env) = load("blind_ct_udp_stale_dnat_ip_reused");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::NoSocket, "{v:?}");
    let k = kept_of(&v);
    assert!(k.len() == 1 && k[0].kept == Kept::OldTranslation, "{v:?}");
    assert_eq!(k[0].endpoints_now, ["10.171.12.2:8125"]);
    assert!(v.where_.starts_with("in netns "), "{}", v.where_);
    assert!(v.hint.contains("conntrack -D"), "{}", v.hint);
    // Near miss: the rules name that endpoint too: the rule's, not
    // conntrack's.
    set_endpoints(&mut env, "default/statsd:statsd", |e| {
        e.as_mut().unwrap().push("10.171.11.2:8125".into());
    });
    let v = verdict_of(&f, &env);
    assert_eq!(kept_of(&v)[0].kept, Kept::RuleStillSends, "{v:?}");
    assert!(!v.hint.contains("conntrack -D"), "{}", v.hint);
    // Near miss: the endpoints were not read (iptables mode): nothing
    // claimed.
    set_endpoints(&mut env, "default/statsd:statsd", |e| *e = None);
    let v = verdict_of(&f, &env);
    assert!(kept_of(&v).is_empty(), "{v:?}");
}

/// A syslog stream to a NodePort whose entry predates the Service stays
/// untranslated and reaches the node itself (kubernetes/kubernetes#31983).
#[test]
fn no_translation_where_the_rule_dnats_now_is_named() {
    let (f, mut env) = load("blind_ct_nodeport_udp_before_service");
    let v = verdict_of(&f, &env);
    let k = kept_of(&v);
    assert!(k.len() == 1 && k[0].kept == Kept::NoTranslation, "{v:?}");
    assert_eq!(k[0].endpoints_now, ["10.170.1.2:5514"]);
    // Near miss: the Service has no endpoint (kube-proxy would not DNAT
    // it either): not claimed.
    set_endpoints(&mut env, "default/syslog:syslog", |e| *e = Some(Vec::new()));
    let v = verdict_of(&f, &env);
    assert!(kept_of(&v).is_empty(), "{v:?}");
}

/// A reply segment conntrack found INVALID left the node untranslated
/// and the client reset the connection (kubernetes/kubernetes#74839).
#[test]
fn a_reply_left_untranslated_is_named() {
    let (f, env) = load("blind_ct_tcp_invalid_reset");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::Dropped, "reply_not_translated"),
        "{v:?}"
    );
    let k = kept_of(&v);
    assert!(
        k.len() == 1 && k[0].kept == Kept::ReplyNotTranslated,
        "{v:?}"
    );
    assert_eq!(k[0].tcp_be_liberal, Some(false));
    assert!(
        v.hint.contains("nf_conntrack_tcp_be_liberal=1"),
        "{}",
        v.hint
    );
    // Near miss: the client did not refuse it (its drop and reset
    // taken out): the exchanges' delivery stands.
    let mut g = f.clone();
    g.hops.retain(|h| {
        !(h.netns_inode == f.hops[0].netns_inode
            && matches!(h.data, HopData::Drop(_) | HopData::TcpReset { .. }))
    });
    let v = verdict_of(&g, &env);
    assert_ne!(v.reason, Found::ReplyNotTranslated, "{v:?}");
}

/// The trap: kube-proxy's own rule still names the dead endpoint (the
/// operator already flushed conntrack): the rule is named, conntrack is
/// not blamed.
#[test]
fn a_rule_that_still_sends_is_not_blamed_on_conntrack() {
    let (f, mut env) = load("blind_ct_trap_rule_stale_endpoint");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::NeighFailed, "{v:?}");
    let k = kept_of(&v);
    assert!(k.len() == 1 && k[0].kept == Kept::RuleStillSends, "{v:?}");
    assert!(v.hint.contains("out of sync") && !v.hint.contains("conntrack -D"));
    // Near miss: had kube-proxy moved on to 10.173.1.4, the entry would
    // be the stale one.
    set_endpoints(&mut env, "kube-system/kube-dns:dns", |e| {
        *e = Some(vec!["10.173.1.4:53".into()]);
    });
    let v = verdict_of(&f, &env);
    assert_eq!(kept_of(&v)[0].kept, Kept::OldTranslation, "{v:?}");
}
