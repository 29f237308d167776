use super::*;
#[allow(unused_imports, reason = "not every test file names both")]
use crate::verdict::{DropReason, Found};

fn prog(id: u32, name: &str, hook: &str, at: &str) -> AttachedProgram {
    AttachedProgram {
        id,
        name: name.into(),
        hook: hook.into(),
        at: at.into(),
    }
}

#[test]
fn signals_are_the_reason_or_the_generic_xdp_site() {
    assert_eq!(
        BpfHook::of(&DropReason::TcIngress, "__netif_receive_skb_core"),
        Some(BpfHook::TcIngress)
    );
    assert_eq!(
        BpfHook::of(&DropReason::TcEgress, "__dev_queue_xmit"),
        Some(BpfHook::TcEgress)
    );
    assert_eq!(
        BpfHook::of(&DropReason::Xdp, "do_xdp_generic"),
        Some(BpfHook::Xdp)
    );
    assert_eq!(
        BpfHook::of(&DropReason::NotSpecified, "do_xdp_generic"),
        Some(BpfHook::Xdp)
    );
    // A drop elsewhere is not this cause, whatever programs are attached.
    assert_eq!(BpfHook::of(&DropReason::NotSpecified, "ip_rcv_core"), None);
    assert_eq!(
        BpfHook::of(&DropReason::NetfilterDrop, "nf_hook_slow"),
        None
    );
}

#[test]
fn programs_are_named_as_the_kernel_attaches_them() {
    assert_eq!(
        program(&prog(
            42,
            "cil_from_contai",
            "tc ingress",
            "lxc0 (clsact prio 1)"
        )),
        "tc BPF program cil_from_contai (id 42, clsact prio 1)"
    );
    assert_eq!(
        program(&prog(7, "cil_to_contain", "tcx egress", "lxc0")),
        "tcx BPF program cil_to_contain (id 7)"
    );
    assert_eq!(
        program(&prog(9, "", "xdp", "eth0 (generic)")),
        "XDP program ? (id 9, generic)"
    );
    assert_eq!(
        program(&prog(9, "x", "xdp", "eth0")),
        "XDP program x (id 9)"
    );
}

#[test]
fn a_hook_holds_only_its_own_programs() {
    let ing = prog(1, "a", "tc ingress", "d (clsact prio 1)");
    let tcx_eg = prog(2, "b", "tcx egress", "d");
    let xdp = prog(3, "c", "xdp", "d (generic)");
    assert!(BpfHook::TcIngress.holds(&ing));
    assert!(!BpfHook::TcIngress.holds(&tcx_eg));
    assert!(BpfHook::TcEgress.holds(&tcx_eg));
    assert!(BpfHook::Xdp.holds(&xdp));
    assert!(!BpfHook::Xdp.holds(&ing));
}

// On recordings of the dataplane scenes (tests/src/dataplane_scenes.rs),
// with their near misses.

use crate::verdict::{
    EvidenceKind, Kind,
    rules::tests::{facts, judge as verdict_of, load, netns},
};

/// The program the run read on the drop's device, by name.
fn named<'a>(v: &'a crate::verdict::Verdict, name: &str) -> Option<&'a AttachedProgram> {
    facts(v).find_map(|e| match e {
        Evidence::BpfProgramDrop { programs, .. } => programs.iter().find(|p| p.name == name),
        _ => None,
    })
}

#[test]
fn a_tc_drop_names_the_program_on_that_hook() {
    let (f, mut env) = load("dp_tc_from_pod_drop");
    let router = netns(&f, "router");
    let v = verdict_of(&f, &env);
    assert_eq!((v.kind, v.reason.as_str()), (Kind::Dropped, "TC_INGRESS"));
    let p = named(&v, "cil_from_contai").expect("the program");
    assert_eq!(p.hook, "tc ingress");
    assert!(v.where_.starts_with(&format!(
        "tc ingress of r0 in netns {router}: dropped by tc BPF program cil_from_contai (id {}",
        p.id
    )));
    assert!(v.hint.contains("cilium monitor"), "{}", v.hint);
    // Near miss: the program gone by the time the node was read. The
    // hook is still named, with what to look at instead.
    for progs in env.dev_programs.values_mut() {
        progs.clear();
    }
    let v = verdict_of(&f, &env);
    assert!(
        v.where_.contains("no BPF program is attached there now")
            && v.where_.contains("tc filter show dev r0 ingress"),
        "{}",
        v.where_
    );
    assert!(v.has(EvidenceKind::BpfProgramDrop));
}

#[test]
fn a_program_on_the_other_hook_is_not_blamed() {
    // The tcx program drops at r1's egress; had the run read only an
    // ingress program on r1, the verdict names none.
    let (f, mut env) = load("dp_tcx_to_pod_drop");
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::TcEgress);
    let p = named(&v, "cil_to_contain").expect("the program").clone();
    assert_eq!(p.hook, "tcx egress");
    assert!(v.where_.contains(&format!(
        "dropped by tcx BPF program cil_to_contain (id {})",
        p.id
    )));
    for progs in env.dev_programs.values_mut() {
        for q in progs.iter_mut() {
            q.hook = "tc ingress".into();
        }
    }
    let v = verdict_of(&f, &env);
    assert!(named(&v, "cil_to_contain").is_none());
    assert!(
        v.where_.contains("no BPF program is attached there now"),
        "{}",
        v.where_
    );
}

#[test]
fn an_xdp_drop_without_a_reason_names_the_xdp_program() {
    let (f, env) = load("dp_xdp_drop");
    let v = verdict_of(&f, &env);
    assert_eq!(v.kind, Kind::Dropped);
    let p = named(&v, "cil_xdp_entry").expect("the program");
    assert_eq!((p.hook.as_str(), p.at.as_str()), ("xdp", "r0 (generic)"));
    assert!(v.where_.contains("XDP of r0"), "{}", v.where_);
}

#[test]
fn a_program_that_let_the_packet_pass_is_not_blamed() {
    let (f, env) = load("dp_tc_passes_closed_port");
    let v = verdict_of(&f, &env);
    assert!(!v.has(EvidenceKind::BpfProgramDrop), "{}", v.where_);
    assert!(!v.where_.contains("cil_"), "{}", v.where_);
}

/// DNS answers dropped at the client's veth (the blind scene of
/// cilium/cilium#21391): dropped by the program, not delivered; had the
/// client read an answer, the query was delivered after all.
#[test]
fn a_reply_the_client_never_got_is_a_drop_by_the_program() {
    let (f, env) = load("blind_bpf_dns_answer_denied");
    let v = verdict_of(&f, &env);
    assert_eq!((v.kind, v.reason.as_str()), (Kind::Dropped, "TC_EGRESS"));
    assert!(
        v.where_.starts_with(
            "the reply from 10.230.112.2:53 was dropped on its way back: tc egress of lxc0"
        ),
        "{}",
        v.where_
    );
    assert!(named(&v, "cil_to_containe").is_some());
    assert!(v.has(EvidenceKind::SocketRead) || v.has(EvidenceKind::SocketQueued));
    // Near miss: an answer read by the client (a hop of the reply at a
    // socket) makes the drop a later one.
    let mut g = f.clone();
    let mut read = g
        .hops
        .iter()
        .find(|h| h.dir == Dir::Reply)
        .expect("a reply hop")
        .clone();
    read.data = HopData::SockRecv;
    read.ts_ns = g.hops.last().map_or(0, |h| h.ts_ns + 1);
    g.hops.push(read);
    let v = verdict_of(&g, &env);
    assert_eq!(v.kind, Kind::Delivered, "{}", v.where_);
}

/// The same drop as a kernel without drop reasons reports it (5.10:
/// sch_handle_ingress() inlined into __netif_receive_skb_core(), which the
/// site table reads as UNHANDLED_PROTO): with a tc ingress program on the
/// device, TC_INGRESS is inferred and the program named; with none, the
/// site's own inference stands.
#[test]
fn without_drop_reasons_a_program_on_the_hook_makes_it_tc_ingress() {
    let (mut f, mut env) = load("dp_tc_from_pod_drop");
    for h in &mut f.hops {
        if let HopData::Drop(d) = &mut h.data {
            d.reason = "UNHANDLED_PROTO".into();
            d.reason_from = crate::model::hop::ReasonFrom::Location;
            d.location = "__netif_receive_skb_core+0xe65".into();
        }
    }
    let v = verdict_of(&f, &env);
    assert_eq!((v.kind, v.reason.as_str()), (Kind::Dropped, "TC_INGRESS"));
    assert!(v.reason_inferred);
    assert!(named(&v, "cil_from_contai").is_some(), "{}", v.where_);
    assert!(facts(&v).any(
        |e| matches!(e, Evidence::DropReasonInferred { reason: Some(r), .. } if r == "TC_INGRESS")
    ));
    for progs in env.dev_programs.values_mut() {
        progs.clear();
    }
    let v = verdict_of(&f, &env);
    assert_eq!(v.reason, DropReason::UnhandledProto);
    assert!(!v.has(EvidenceKind::BpfProgramDrop));
}

/// The xdp tracepoints' record of what the program returned: a redirect
/// the kernel refused (its target down, dp_xdp_redirect_down; over its
/// MTU, the blind scene after cilium/cilium#3204) and XDP_ABORTED (a
/// device-map miss, the blind scene of xdp-project/xdp-tutorial#167).
#[test]
fn an_xdp_action_names_what_the_program_returned() {
    for (name, prog_name, said) in [
        (
            "dp_xdp_redirect_down",
            "xdp_lb_redir",
            "returned XDP_REDIRECT to r2, which failed: ENETDOWN",
        ),
        (
            "blind_xdp_redirect_mtu",
            "xdp_redirect_fu",
            "returned XDP_REDIRECT to lxc0, which failed: EMSGSIZE",
        ),
        (
            "blind_xdp_devmap_miss_aborted",
            "xdp_router",
            "returned XDP_ABORTED (dropped)",
        ),
    ] {
        let (f, mut env) = load(name);
        let v = verdict_of(&f, &env);
        assert_eq!(v.kind, Kind::Dropped, "{name}");
        assert!(
            v.where_.contains(&format!("XDP program {prog_name} (id ")) && v.where_.contains(said),
            "{name}: {}",
            v.where_
        );
        assert!(v.has(EvidenceKind::XdpAction), "{name}");
        assert!(v.hint.contains("XDP_ABORTED"), "{name}: {}", v.hint);
        // Near miss: the tracepoint's record is of another device (an
        // ifindex of another namespace): the drop is the program's, what
        // it returned is not claimed.
        let mut g = f.clone();
        for h in &mut g.hops {
            if matches!(h.data, HopData::Xdp(_)) {
                h.ifindex += 100;
            }
        }
        let v = verdict_of(&g, &env);
        assert!(!v.has(EvidenceKind::XdpAction), "{name}: {}", v.where_);
        assert!(
            v.where_
                .contains(&format!("dropped by XDP program {prog_name}")),
            "{name}: {}",
            v.where_
        );
        // Near miss: the program detached before the node was read: the
        // action is told by its id.
        for progs in env.dev_programs.values_mut() {
            progs.clear();
        }
        let v = verdict_of(&f, &env);
        assert!(v.where_.contains("XDP program id "), "{name}: {}", v.where_);
    }
}

/// A redirect through a device map (dp_xdp_devmap_down): the tracepoint
/// gives the map's id and key, the map's entry the device, told with the
/// map. Near miss: the entry could not be read (the map is gone): the
/// refusal is told without a target, not guessed.
#[test]
fn a_devmap_redirect_names_the_maps_entry() {
    let (f, env) = load("dp_xdp_devmap_down");
    let v = verdict_of(&f, &env);
    assert!(
        v.where_
            .contains("returned XDP_REDIRECT to r2 (device map id ")
            && v.where_.contains(", key 7), which failed: ENETDOWN"),
        "{}",
        v.where_
    );
    let mut gone = env.clone();
    gone.devmaps.clear();
    let v = verdict_of(&f, &gone);
    assert!(
        v.where_
            .contains("returned XDP_REDIRECT, which failed: ENETDOWN"),
        "{}",
        v.where_
    );
}
