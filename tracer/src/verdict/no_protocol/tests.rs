use super::*;
use crate::model::hop::HopData;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn unhandled(v: &crate::verdict::Verdict) -> Vec<&ProtocolUnhandled> {
    facts(v)
        .filter_map(|e| match e {
            Evidence::ProtocolUnhandled(u) => Some(u),
            _ => None,
        })
        .collect()
}

/// The recorded UDP datagram refused for want of a socket, turned into
/// an SCTP one the kernel had no handler for (IP_NOPROTO): the protocol
/// and its module are named; as recorded (NO_SOCKET) it is not.
#[test]
fn a_protocol_with_no_handler_is_named_with_its_module() {
    let (mut f, env) = load("blind_more_trap_fragments_arrive_no_listener");
    let v = verdict_of(&f, &env);
    assert!(unhandled(&v).is_empty(), "{v:?}");
    let drop = f
        .hops
        .iter_mut()
        .rfind(|h| matches!(h.data, HopData::Drop(_)))
        .expect("the recorded drop");
    drop.tuple = std::sync::Arc::new(crate::model::event::Tuple {
        proto: 132,
        ..*drop.tuple
    });
    if let HopData::Drop(d) = &mut drop.data {
        d.reason = DropReason::IpNoproto;
    }
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::IpNoproto, "{v:?}");
    let u = unhandled(&v);
    assert_eq!(u.len(), 1, "{v:?}");
    assert_eq!((u[0].proto, u[0].module.as_deref()), (132, Some("sctp")));
    assert!(
        v.where_.contains("no handler for IP protocol 132 (SCTP)"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("modprobe sctp"), "{}", v.hint);
}

/// Names and modules: the tunnels' protocols, SCTP, and one the table
/// does not know.
#[test]
fn protocols_are_named() {
    assert_eq!(known(4), ("IP in IP".to_string(), Some("ipip")));
    assert_eq!(known(47).1, Some("ip_gre"));
    assert_eq!(known(132).1, Some("sctp"));
    assert_eq!(known(253), ("protocol 253".to_string(), None));
}
