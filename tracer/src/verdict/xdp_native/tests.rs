use super::*;
use crate::verdict::rules::tests::{facts, judge as verdict_of, load};

fn taken_of(v: &Verdict) -> Option<&XdpNativeTaken> {
    facts(v).find_map(|e| match e {
        Evidence::XdpNativeTaken(t) => Some(t),
        _ => None,
    })
}

/// The blind scene of xdp-project/xdp-tutorial#399 and eupf#116: native
/// XDP on lxc0 redirects the SYN into lxc1, whose other end has no XDP
/// program; the frame is lost with no skb freed. The request's last
/// sighting is the copy veth made for XDP on lxc0.
#[test]
fn a_redirect_lost_in_native_xdp_names_the_program() {
    let (f, env) = load("blind_native_redirect_peer_no_xdp");
    let v = verdict_of(&f, &env);
    assert_eq!(
        (v.kind, v.reason.as_str()),
        (Kind::NoReply, "taken_by_native_xdp")
    );
    let t = taken_of(&v).expect("the fact");
    assert_eq!(t.dev, "lxc0");
    assert_eq!(t.programs[0].name, "xdp_redirect_fu");
    assert!(
        v.where_.starts_with("native XDP of lxc0 in netns "),
        "{}",
        v.where_
    );
    assert!(v.where_.contains("(id "), "{}", v.where_);
    assert!(v.hint.contains("other end"), "{}", v.hint);
}

/// XDP_TX back to a veth end with no XDP program (xdp-tutorial#399's
/// second report): the same story, the same cause.
#[test]
fn an_xdp_tx_lost_in_native_xdp_is_the_same_cause() {
    let (f, env) = load("blind_native_tx_peer_no_xdp");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason.as_str(), "taken_by_native_xdp", "{}", v.where_);
    assert_eq!(taken_of(&v).expect("the fact").programs[0].name, "xdp_echo");
}

/// Near misses: the same flow where the device's program runs in generic
/// mode (the skb goes on through the stack: not this cause), or where
/// the device has no program now; and the trap (katran#47), whose answer
/// XDP passed on (seen on the device after the copy).
#[test]
fn near_misses_are_not_taken_by_xdp() {
    let (f, env) = load("blind_native_redirect_peer_no_xdp");
    let mut generic = env.clone();
    for ps in generic.dev_programs.values_mut() {
        for p in ps.iter_mut() {
            p.at = p.at.replace("(driver)", "(generic)");
        }
    }
    assert!(judge(&f, &generic).is_none());
    let mut none = env.clone();
    none.dev_programs.clear();
    assert!(judge(&f, &none).is_none());
    // The stack consumed it after receiving it there (a socket took it):
    // a receive on the device before the consume.
    let mut taken = f.clone();
    let k = taken.hops.len() - 1;
    let mut recv = taken.hops[k].clone();
    recv.hook = Hook::NetifReceive;
    taken.hops.insert(k, recv);
    assert!(judge(&taken, &env).is_none());
    // Consumed elsewhere than veth's copy for XDP.
    let mut elsewhere = f.clone();
    if let Some(h) = elsewhere.hops.last_mut() {
        h.data = HopData::Consume {
            location: "tcp_rcv_state_process+0x809".into(),
        };
    }
    assert!(judge(&elsewhere, &env).is_none());
    let (f, env) = load("blind_native_trap_local_source");
    let v = verdict_of(&f, &env);
    assert!(taken_of(&v).is_none(), "{}", v.where_);
    assert_ne!(v.reason.as_str(), "taken_by_native_xdp");
}

/// A drop by the program (XDP_DROP): veth frees the copy in its own XDP
/// path, and the drop is named with the program and its mode
/// (bpf_drop.rs, by [`is_site`]).
#[test]
fn a_native_xdp_drop_names_the_program() {
    let (f, env) = load("dp_xdp_native_drop");
    let v = verdict_of(&f, &env);
    assert_eq!(v.kind, Kind::Dropped);
    assert!(
        v.where_.contains("XDP of r0") && v.where_.contains(", driver)"),
        "{}",
        v.where_
    );
    assert!(is_site("veth_xdp_rcv_skb") && is_site("veth_poll.cold"));
    assert!(!is_site("veth_xmit"));
}
