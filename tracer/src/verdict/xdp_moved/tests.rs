use super::*;
use crate::verdict::{
    EvidenceKind,
    rules::tests::{facts, judge as verdict_of, load},
};

fn moved(v: &crate::verdict::Verdict) -> Option<&XdpMove> {
    facts(v).find_map(|e| match e {
        Evidence::XdpMoved(m) => Some(m),
        _ => None,
    })
}

/// XDP_TX of an unchanged frame (dp_xdp_tx_back): the client drops its
/// own packet back as another host's (OTHERHOST); the program that sent
/// it back is named, and its hint comes first.
#[test]
fn a_packet_sent_back_unchanged_names_the_program() {
    let (f, env) = load("dp_xdp_tx_back");
    let v = verdict_of(&f, &env);
    assert_eq!((v.kind, v.reason.as_str()), (Kind::Dropped, "OTHERHOST"));
    let m = moved(&v).expect("the move");
    assert_eq!(
        (m.action, m.dev.as_str(), m.seen_dev.as_str(), m.unchanged),
        (XdpAction::XdpTx, "r0", "c0", true)
    );
    assert_eq!(m.programs[0].name, "xdp_responder");
    assert!(
        v.where_
            .contains("had sent it back out r0 (XDP_TX), unchanged"),
        "{}",
        v.where_
    );
    assert!(v.hint.contains("XDP_TX must rewrite"), "{}", v.hint);
}

/// The blind scene of xdp-project/xdp-tutorial#286: the forwarder
/// rewrote the address, not the MACs, and returned XDP_TX; the bridge
/// will not send the frame back out the port it came in on.
#[test]
fn a_rewritten_packet_sent_back_into_a_bridge_names_the_program() {
    let (f, env) = load("blind_xdp_tx_mac_unswapped");
    let v = verdict_of(&f, &env);
    assert_eq!(v.kind, Kind::Dropped);
    let m = moved(&v).expect("the move");
    assert_eq!(
        (m.action, m.dev.as_str(), m.seen_dev.as_str(), m.unchanged),
        (XdpAction::XdpTx, "eth0", "p-server", false)
    );
    assert!(
        v.where_.starts_with("br_handle_frame_finish"),
        "{}",
        v.where_
    );
}

/// Near misses: no XDP program on the device when the node was read; the
/// next sighting not on another device (it passed XDP); a program that
/// passed (the Katran trap); a redirect the kernel refused (that is the
/// XDP action's own cause, bpf_drop.rs).
#[test]
fn near_misses_are_not_a_move() {
    let (f, mut env) = load("dp_xdp_tx_back");
    for progs in env.dev_programs.values_mut() {
        progs.clear();
    }
    let v = verdict_of(&f, &env);
    assert!(!v.has(EvidenceKind::XdpMoved), "{}", v.where_);

    let (mut f, env) = load("dp_xdp_tx_back");
    let (dev, netns) = f
        .hops
        .iter()
        .find(|h| h.hook == Hook::NetifReceive && h.dev.as_str() == "r0")
        .map(|h| (h.dev.clone(), h.netns_inode))
        .expect("r0's receive");
    for h in &mut f.hops {
        if h.hook == Hook::NetifReceive && h.dev.as_str() == "c0" {
            h.dev = dev.clone();
            h.netns_inode = netns;
        }
    }
    let v = verdict_of(&f, &env);
    assert!(!v.has(EvidenceKind::XdpMoved), "{}", v.where_);

    for name in ["blind_xdp_trap_pass_refused", "dp_xdp_redirect_down"] {
        let (f, env) = load(name);
        let v = verdict_of(&f, &env);
        assert!(!v.has(EvidenceKind::XdpMoved), "{name}: {}", v.where_);
    }
}
