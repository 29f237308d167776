//! Scenes written blind, from public incident reports (tests/src/
//! blind_scenes.rs; docs/blind-scenes.md has each one's verdict before and
//! after): each traced with the real binary, recorded and replayed, and its
//! cause asserted where tracer names it. The scenes whose cause is not
//! named yet (docs/blind-scenes.md) are not asserted here.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use serde_json::Value;
use tracer_tests::trace_scenario;

/// The final flow to the scene's target: kind, reason, where, the
/// evidence kinds, the hint, and a dump for messages.
fn judged(name: &str, dport: u64) -> Option<(Value, String)> {
    trace_scenario(name, dport)
}

/// One DF datagram larger than flannel.1's MTU (projectcalico/calico#8953):
/// the device, its MTU and the packet's size, with the overlay MTU hint.
#[test]
fn one_datagram_too_big_names_the_tunnel_mtu() {
    let Some((f, dump)) = judged("blind_vxlan_mtu", 5353) else {
        return;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "PKT_TOO_BIG",
        "{dump}"
    );
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains("1488-byte packet") && w.contains("MTU 1450 of flannel.1"),
        "{dump}"
    );
    assert!(
        tracer_tests::evidence_kinds(&f).contains(&"packet_too_big"),
        "{dump}"
    );
    assert!(
        tracer_tests::verdict_said(&f, "hint").contains("tunnel"),
        "{dump}"
    );
}

/// DNAT in OUTPUT to an endpoint the node has no route to
/// (cloudnativelabs/kube-router#425): not a rule, the route lookup again
/// after NAT.
#[test]
fn output_dnat_without_a_route_is_not_blamed_on_a_rule() {
    let Some((f, dump)) = judged("blind_output_dnat_no_route", 443) else {
        return;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "NETFILTER_DROP",
        "{dump}"
    );
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains("no rule dropped it")
            && w.contains("ip_route_me_harder")
            && w.contains("found no route"),
        "{dump}"
    );
    assert!(
        tracer_tests::evidence_kinds(&f).contains(&"route_refused"),
        "{dump}"
    );
    let hint = tracer_tests::verdict_said(&f, "hint");
    assert!(
        hint.starts_with("No netfilter rule dropped it") && !hint.contains("list the ruleset"),
        "{dump}"
    );
}

/// A Service DNAT'd to an address of the node's own blackholed IPAM block
/// (projectcalico/calico#3246), and one fenced off by a prohibit rule
/// (kubernetes/kubernetes#22698): the refusing route is named.
#[test]
fn routes_that_refuse_the_translated_destination_are_named() {
    for (name, dport, route) in [
        ("blind_dnat_blackhole", 80, "a blackhole route"),
        ("blind_dnat_prohibit", 8080, "a prohibit route"),
    ] {
        let Some((f, dump)) = judged(name, dport) else {
            return;
        };
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(
            w.contains("ip_error") && w.contains("after NAT") && w.contains(route),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&"route_refused"),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains("ip route get"),
            "{name}: {dump}"
        );
    }
}

/// A Linux bridge that will not forward, for a setting of its ports
/// (verdict/bridge.rs): a pod reaching itself through its Service with
/// hairpin off on its port (kubernetes/kubernetes#13375), and a server
/// pod's port stuck in STP learning (ipspace/netlab#2259), where the
/// node's ARP for the pod goes unanswered.
#[test]
fn bridge_settings_that_stop_frames_are_named() {
    for (name, dport, said, hint) in [
        (
            "blind_hairpin_off",
            80,
            "port vethpod has hairpin mode off and 10.204.1.2 is behind it",
            "hairpin-veth",
        ),
        (
            "blind_bridge_port_learning",
            8080,
            "bridge cni0: port vethpod is in STP state learning",
            "stp_state 0",
        ),
        // Written blind after the rule (tests/src/blind_l2.rs): a pod to
        // its own NodePort (kubernetes/kubernetes#45790), two pods on
        // isolated ports (containernetworking/plugins#1135).
        (
            "blind_l2_hairpin_nodeport",
            30080,
            "port vethpod has hairpin mode off and 10.198.1.2 is behind it",
            "hairpin-veth",
        ),
        (
            "blind_l2_port_isolated",
            8080,
            "bridge br1 in netns ",
            "isolated off",
        ),
        // The bridge is at the other end of the pod's veth, in the node's
        // namespace (kubevirt/kubevirtci#1821): the pod's ARP failure
        // names the port and its STP state.
        (
            "blind_l2_stp_listening",
            8080,
            "-node, at the other end of eth0: port veth1 is in STP state listening",
            "stp_state 0",
        ),
    ] {
        let Some((f, dump)) = judged(name, dport) else {
            return;
        };
        assert!(
            tracer_tests::verdict_said(&f, "where").contains(said),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&"bridge_will_not_forward"),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains(hint),
            "{name}: {dump}"
        );
    }
}

/// An eBPF dataplane's drops (tests/src/blind_bpf.rs): the program that
/// dropped the packet is named with its hook and device, for a pod's
/// egress deny (cilium/cilium#40228, tcx), a hostPort reached through a
/// masquerading node (cilium/cilium#34517), an XDP load balancer
/// (cilium/cilium#18979) and a stale Calico filter on the node's device
/// (projectcalico/calico#6739).
#[test]
fn bpf_program_drops_name_the_program() {
    // Before Linux 6.6 (no tcx) the scenes attach by clsact instead.
    let tcx = if tracer_tests::bpfdrop::tcx_supported() {
        "tcx"
    } else {
        "tc"
    };
    for (name, dport, at, prog) in [
        (
            "blind_bpf_egress_policy_deny",
            443,
            "tc ingress of lxc0",
            "{tcx} BPF program cil_from_contai",
        ),
        (
            "blind_bpf_hostport_masquerade_denied",
            8080,
            "tc egress of lxc0",
            "{tcx} BPF program cil_to_containe",
        ),
        (
            "blind_bpf_xdp_lb_remote_backend",
            80,
            "XDP of eth0",
            "XDP program cil_xdp_entry",
        ),
        (
            "blind_bpf_stale_calico_filter",
            53,
            "tc egress of ens5",
            "tc BPF program calico_to_host_",
        ),
    ] {
        let Some((f, dump)) = judged(name, dport) else {
            return;
        };
        assert_eq!(
            tracer_tests::verdict_said(&f, "kind"),
            "dropped",
            "{name}: {dump}"
        );
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(
            w.contains(at)
                && w.contains(&format!("dropped by {} (id ", prog.replace("{tcx}", tcx))),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&"bpf_program_drop"),
            "{name}: {dump}"
        );
    }
}

/// XDP programs' actions (tests/src/blind_xdp.rs, written blind): an
/// XDP_TX that left the MACs as they were, bounced back into the bridge
/// (xdp-project/xdp-tutorial#286); a device-map miss that returned
/// XDP_ABORTED (xdp-tutorial#167); a redirect the target's MTU refused
/// (after cilium/cilium#3204). The program and what it returned are named.
#[test]
fn xdp_actions_name_the_program_and_what_it_did() {
    for (name, dport, said, kind) in [
        (
            "blind_xdp_tx_mac_unswapped",
            65535,
            "XDP program xdp_fwd_prog (id ",
            "xdp_moved",
        ),
        (
            "blind_xdp_devmap_miss_aborted",
            9100,
            "returned XDP_ABORTED",
            "xdp_action",
        ),
        (
            "blind_xdp_redirect_mtu",
            8125,
            "returned XDP_REDIRECT to lxc0, which failed: EMSGSIZE",
            "xdp_action",
        ),
    ] {
        let Some((f, dump)) = judged(name, dport) else {
            return;
        };
        assert_eq!(
            tracer_tests::verdict_said(&f, "kind"),
            "dropped",
            "{name}: {dump}"
        );
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(w.contains(said), "{name}: {dump}");
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&kind),
            "{name}: {dump}"
        );
    }
}

/// The trap (facebookincubator/katran#184): the XDP load balancer passes
/// port 80 and nothing listens there; the refusal is named, XDP is not
/// blamed.
#[test]
fn an_xdp_program_that_passed_is_not_blamed() {
    let Some((f, dump)) = judged("blind_xdp_trap_pass_refused", 80) else {
        return;
    };
    let kinds = tracer_tests::evidence_kinds(&f);
    assert!(
        !kinds.contains(&"xdp_action") && !kinds.contains(&"xdp_moved"),
        "{dump}"
    );
    assert!(
        tracer_tests::verdict_said(&f, "reason") == "NO_SOCKET"
            || tracer_tests::verdict_said(&f, "kind") == "refused",
        "{dump}"
    );
    assert!(
        !tracer_tests::verdict_said(&f, "where").contains("XDP"),
        "{dump}"
    );
}

/// xdp-filter in deny mode on the server's eth0 drops the client's ARP
/// (xdp-project/xdp-tools#266, written blind): the SYN waits for the
/// neighbour and no packet to the target reaches a traced device. The
/// "nothing seen" report names the client's unanswered entry for the
/// next hop, the XDP program on the far side, and the ARP hint.
#[test]
fn arp_dropped_by_xdp_leaves_the_neighbour_unanswered() {
    let Some((out, seen)) =
        tracer_tests::trace_scenario_out("blind_native_deny_all_drops_arp", &[])
    else {
        return;
    };
    let dump = out.dump();
    let summary = out.summary().expect("summary");
    assert_eq!(summary["flows"], 0, "client saw {seen}: {dump}");
    let n = &summary["nothing_seen"];
    let hop = n["neighbours"]
        .as_array()
        .and_then(|a| a.iter().find(|h| h["next_hop"] == "10.204.0.1"))
        .unwrap_or_else(|| panic!("no neighbour entry for the target: {dump}"));
    assert_eq!(hop["dev"], "eth0", "{dump}");
    assert!(
        hop["netns"].as_str().is_some_and(|s| s.ends_with("client")),
        "{dump}"
    );
    assert!(
        ["INCOMPLETE", "FAILED"].contains(&hop["state"].as_str().unwrap_or("")),
        "{dump}"
    );
    assert!(
        n["xdp_programs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["name"] == "xdpfilt_dny_all")),
        "{dump}"
    );
}

/// Native (driver) XDP on a pod's host-side veth took the packet and no
/// skb came out (tests/src/blind_native.rs, written blind): a redirect
/// into a veth whose other end has no XDP program
/// (xdp-project/xdp-tutorial#399, edgecomllc/eupf#116), an XDP_TX back to
/// such an end (xdp-tutorial#399). The program is named with its mode,
/// the hint says what a veth needs. The trap (katran#47: the health
/// check's answer passed by XDP, dropped as a local source) does not
/// blame XDP: the answer's drop is the verdict, with accept_local.
#[test]
fn native_xdp_that_took_the_packet_is_named() {
    for (name, dport, program) in [
        ("blind_native_redirect_peer_no_xdp", 8080, "xdp_redirect_fu"),
        ("blind_native_tx_peer_no_xdp", 7, "xdp_echo"),
    ] {
        let Some((f, dump)) = judged(name, dport) else {
            return;
        };
        assert_eq!(
            tracer_tests::verdict_said(&f, "reason"),
            "taken_by_native_xdp",
            "{name}: {dump}"
        );
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(
            w.contains("native XDP of lxc0") && w.contains(&format!("XDP program {program} (id ")),
            "{name}: {dump}"
        );
        assert!(w.contains(", driver)"), "{name}: {dump}");
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&"xdp_native_taken"),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains("other end"),
            "{name}: {dump}"
        );
    }
    let Some((f, dump)) = judged("blind_native_trap_local_source", 80) else {
        return;
    };
    assert!(
        !tracer_tests::evidence_kinds(&f).contains(&"xdp_native_taken"),
        "{dump}"
    );
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "IP_LOCAL_SOURCE",
        "{dump}"
    );
    assert!(
        tracer_tests::verdict_said(&f, "hint").contains("accept_local"),
        "{dump}"
    );
}

/// DNS answers dropped at the client pod's veth (cilium/cilium#21391):
/// the query was delivered, the answer never came back; dropped, by the
/// program, not delivered.
#[test]
fn an_answer_a_program_dropped_is_not_delivered() {
    let Some((f, dump)) = judged("blind_bpf_dns_answer_denied", 53) else {
        return;
    };
    assert_eq!(tracer_tests::verdict_said(&f, "kind"), "dropped", "{dump}");
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "TC_EGRESS",
        "{dump}"
    );
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains("the reply from 10.230.112.2:53 was dropped on its way back")
            && w.contains("cil_to_containe"),
        "{dump}"
    );
}

/// A lost hostPort mapping behind passing Cilium programs
/// (cilium/cilium#32805): the node refuses it; the programs are not
/// blamed.
#[test]
fn passing_programs_are_not_blamed_for_a_refusal() {
    let Some((f, dump)) = judged("blind_bpf_hostport_lost_refused", 29472) else {
        return;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "NO_SOCKET",
        "{dump}"
    );
    assert!(
        !tracer_tests::evidence_kinds(&f).contains(&"bpf_program_drop"),
        "{dump}"
    );
}

/// A VXLAN device that has nowhere to send the frame: node1's flannel.1
/// resolves node2's VTEP but has no FDB entry for its MAC
/// (flannel-io/flannel#1155 in tests/src/blind_scenes.rs); and the far
/// side's device that is not the one the frame was sent to: node1 keeps a
/// stale MAC for node2's VTEP, node2 drops the frames as another host's
/// (flannel-io/flannel#1473). The device, the MAC and the next hop are
/// named, with the FDB hint.
#[test]
fn vxlan_devices_that_lose_frames_are_named() {
    for (name, said, hint) in [
        (
            "blind_vxlan_missing_fdb",
            "(VNI 1, port 8472): no FDB entry for ",
            "bridge fdb show dev",
        ),
        (
            "blind_wrong_vtep_mac",
            "the frame came for 0e:00:00:00:02:99",
            "ip neigh replace",
        ),
        // Written blind after the rule (tests/src/blind_tunnel.rs): Felix
        // deleted a remote VTEP's ARP entry (projectcalico/calico#9450),
        // every node published the same public IP (flannel on Vagrant,
        // flannel-io/flannel#764).
        (
            "blind_tun_vtep_arp_deleted",
            "no neighbour entry for 10.180.2.0 (the next hop, a remote VTEP's address)",
            "Deleting ARP entry",
        ),
        (
            "blind_tun_same_public_ip",
            "sends to 10.181.15.15, an address of this namespace itself",
            "--iface",
        ),
        // Written blind in session 18 (cilium/cilium#31066): node2's IP
        // changed, node1's metadata-mode cilium_vxlan still sends to the
        // old one, whose ARP fails on node1's eth0 (the outer packet,
        // held in the neighbour queue, is followed to its drop).
        (
            "blind_tun_stale_endpoint_ip",
            "its outer packet to the remote VTEP 10.183.0.2 (the packet's tunnel key",
            "kubectl get nodes -o wide",
        ),
        // Written blind after the rule (tests/src/blind_vtep.rs): node2's
        // IP changed and node1's flannel.1 FDB entry kept the old one
        // (flannel-io/flannel#1052); Calico autodetected a management
        // interface the nodes do not reach each other by
        // (projectcalico/calico#8203); the trap: the far node's
        // vxlan.calico is down (projectcalico/calico#4468), not blamed on
        // the VTEP.
        (
            "blind_vtep_flannel_node_ip_changed",
            "its outer packet to the remote VTEP 10.157.0.2 (its FDB entry for ",
            "kubectl get nodes -o wide",
        ),
        (
            "blind_vtep_calico_mgmt_interface",
            "its outer packet to the remote VTEP 10.158.50.2 (its FDB entry for ",
            "IP_AUTODETECTION_METHOD",
        ),
        (
            "blind_vtep_trap_far_vxlan_down",
            "and the device for it in netns ",
            "brings the device up",
        ),
    ] {
        let Some((f, dump)) = judged(name, 8080) else {
            return;
        };
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(w.contains("vxlan ") && w.contains(said), "{name}: {dump}");
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&"tunnel_will_not_send"),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains(hint),
            "{name}: {dump}"
        );
    }
}

/// A device sysctl that drops the packet, no rule involved: kind's DNAT
/// of a pod's DNS to 127.0.0.11 arrives by a device whose route_localnet
/// is 0 (kubernetes-sigs/kind#2326, tests/src/blind_sysctl.rs, written
/// blind before the rule): the device, the sysctl as set and the address
/// NAT made of the destination are named; so is IPv6 disabled in a pod,
/// read at the other end of the node's veth. Its trap, a DNAT to a port
/// nothing listens on with route_localnet on, is not blamed on it.
#[test]
fn a_sysctl_that_drops_is_named() {
    let Some((f, dump)) = judged("blind_sys_localnet_dnat", 53) else {
        return;
    };
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains("127.0.0.11 (its destination after NAT; it was sent to 10.186.0.1) came in by veth1, where net.ipv4.conf.veth1.route_localnet = 0"),
        "{dump}"
    );
    assert!(
        tracer_tests::evidence_kinds(&f).contains(&"sysctl_refused"),
        "{dump}"
    );
    assert!(
        tracer_tests::verdict_said(&f, "hint").contains("route_localnet=1"),
        "{dump}"
    );
    // IPv6 off in the pod, seen from the node (danm-cni/danm#68): the
    // node's NDP fails on the pod's host-side veth, whose other end has
    // disable_ipv6 on.
    let Some((f, dump)) = judged("blind_sys_pod_ipv6_disabled", 8080) else {
        return;
    };
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains("-pod2 is the other end of lxc2: IPv6 is disabled on eth0 (net.ipv6.conf.eth0.disable_ipv6 = 1)"),
        "{dump}"
    );
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "NEIGH_FAILED",
        "{dump}"
    );
    assert!(
        tracer_tests::evidence_kinds(&f).contains(&"sysctl_refused"),
        "{dump}"
    );
    let Some((f, dump)) = judged("blind_sys_localnet_stale_port", 53) else {
        return;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "NO_SOCKET",
        "{dump}"
    );
    assert!(
        !tracer_tests::evidence_kinds(&f).contains(&"sysctl_refused"),
        "{dump}"
    );
}

/// Socket-level load balancing (tests/src/blind_sock.rs, written blind
/// before the socket hooks): a connect() or sendto() to a ClusterIP that
/// a cgroup program rewrites before any packet exists is followed under
/// the backend's tuple to its end, and the rewrite names the call, the
/// program and the cgroup: a backend that refuses (cilium PR #45593), a
/// Local Redirect Policy to a node-local DNS not listening yet
/// (cilium#43080), answers whose source no recvmsg program turns back
/// (cilium PR #7925). The trap, a host-only socket LB while kube-proxy's
/// DNAT meets a closed targetPort, is netfilter's, not the program's.
#[test]
fn socket_rewrites_are_followed_and_named() {
    for (scene, dport, reason, call, prog) in [
        (
            "blind_sock_backend_refused",
            80,
            "NO_SOCKET",
            "connect() to 10.205.96.20:80",
            "cil_sock4_conne (id ",
        ),
        (
            "blind_sock_lrp_dns_not_listening",
            53,
            "NO_SOCKET",
            "sendto() to 10.205.96.10:53",
            "cil_sock4_sendm (id ",
        ),
        (
            "blind_sock_udp_no_recvmsg",
            53,
            "local_socket",
            "sendto() to 10.205.96.10:53",
            "cil_sock4_sendm (id ",
        ),
    ] {
        let Some((f, dump)) = judged(scene, dport) else {
            return;
        };
        assert_eq!(f["nat_by"], "socket", "{scene}: {dump}");
        assert_eq!(f["hops"][0]["hook"], "sock_addr", "{scene}: {dump}");
        assert_eq!(
            tracer_tests::verdict_said(&f, "reason"),
            reason,
            "{scene}: {dump}"
        );
        let rewrite = tracer_tests::evidence_of(&f, "socket_rewrite");
        let text = rewrite["text"].as_str().unwrap_or("");
        assert!(
            text.contains(call) && text.contains(prog) && text.contains("/tracer-test-"),
            "{scene}: {dump}"
        );
        let kept = scene == "blind_sock_udp_no_recvmsg";
        assert_eq!(
            text.contains("no recvmsg4 program is attached there"),
            kept,
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains(if kept {
                "no recvmsg program"
            } else {
                "sent the call to this backend"
            }),
            "{scene}: {dump}"
        );
    }
    let Some((f, dump)) = judged("blind_sock_hostns_only_target_port", 80) else {
        return;
    };
    assert_eq!(f["nat_by"], "netfilter", "{dump}");
    assert!(
        !tracer_tests::evidence_kinds(&f).contains(&"socket_rewrite"),
        "{dump}"
    );
}

/// Conntrack state, not rules (tests/src/blind_ct.rs, written blind
/// before the cause): a UDP entry that still DNATs to an endpoint
/// kube-proxy no longer names (kubernetes/kubernetes#59368), an entry made
/// before a NodePort's rule that keeps the flow untranslated
/// (kubernetes/kubernetes#31983), a reply conntrack found INVALID and left
/// untranslated, which the client resets (kubernetes/kubernetes#74839).
/// Its trap, kube-proxy's own rule still naming the dead endpoint, is
/// named as the rule's, not conntrack's.
#[test]
fn conntrack_state_that_decides_is_named() {
    for (scene, dport, reason, said) in [
        (
            "blind_ct_udp_stale_dnat_ip_reused",
            8125,
            "NO_SOCKET",
            "conntrack still sends default/statsd:statsd's flow to 10.171.11.2:8125, a translation made before its endpoints changed: kube-proxy's rules now send it to 10.171.12.2:8125",
        ),
        (
            "blind_ct_nodeport_udp_before_service",
            30514,
            "NO_SOCKET",
            "conntrack lets default/syslog:syslog's flow to 10.170.0.1:30514 through untranslated: its entry was made before kube-proxy's rule, which DNATs it to 10.170.1.2:5514 now",
        ),
        (
            "blind_ct_tcp_invalid_reset",
            80,
            "reply_not_translated",
            "a reply from 10.172.11.2:8080 left by lxc10 untranslated: conntrack did not map it back to 10.172.96.80:80 (it found it INVALID); net.netfilter.nf_conntrack_tcp_be_liberal = 0",
        ),
    ] {
        let Some((f, dump)) = judged(scene, dport) else {
            return;
        };
        assert_eq!(
            tracer_tests::verdict_said(&f, "reason"),
            reason,
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "where").contains(said),
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains(if reason == "reply_not_translated" {
                "nf_conntrack_tcp_be_liberal=1"
            } else {
                "conntrack -D"
            }),
            "{scene}: {dump}"
        );
    }
    let Some((out, _)) = tracer_tests::trace_scenario_out("blind_ct_trap_rule_stale_endpoint", &[])
    else {
        return;
    };
    let (flows, dump) = (out.final_flows(), out.dump());
    let f = out.flow_to(53);
    assert_eq!(
        tracer_tests::verdict_said(f, "reason"),
        "NEIGH_FAILED",
        "{dump}"
    );
    let hint = tracer_tests::verdict_said(f, "hint");
    assert!(
        hint.contains("kube-proxy is out of sync") && !hint.contains("conntrack -D"),
        "{dump}"
    );
    // The host-unreachable the node sent back when ARP for the endpoint
    // failed (seconds after the packet was queued, under its tuple after
    // DNAT) is the flow's evidence, not a flow of its own that the client
    // never sent (issue 29: ICMP errors on the flow that caused them).
    assert_eq!(flows.len(), 1, "{dump}");
    assert!(
        tracer_tests::evidence_kinds(f).contains(&"icmp_sent"),
        "{dump}"
    );
}

/// The other end of a veth (tests/src/blind_veth.rs, written blind before
/// the veth cause and the peer's namespace were read): a pod's eth0 with a
/// smaller MTU than its node-side veth, the large datagram refused at the
/// crossing (rancher/rancher#10498); a node-side cali1 set down, the pod's
/// eth0 without carrier (projectcalico/calico#9648); IPv6 off on cali1,
/// the pod's NDP for its gateway lost there (projectcalico/
/// libnetwork-plugin#162). The trap, a policy chain rejecting the pod's
/// neighbour solicitations (cloudnativelabs/kube-router#1895), is not
/// blamed on the veth.
#[test]
fn the_other_end_of_a_veth_is_named() {
    for (scene, dport, reason, said, kind, hint) in [
        (
            "blind_veth_mtu_pod_smaller",
            8125,
            "NOT_SPECIFIED",
            "MTU 1500 here, MTU 1400 at its other end eth0 in netns ",
            "veth_other_end",
            "same MTU",
        ),
        (
            "blind_veth_host_side_down",
            6443,
            "NEIGH_FAILED",
            "-node is down: eth0 has no carrier",
            "veth_other_end",
            "ip link set DEV up",
        ),
        (
            "blind_veth_host_ipv6_disabled",
            8080,
            "NEIGH_FAILED",
            "-node is the other end of eth0: IPv6 is disabled on cali1",
            "sysctl_refused",
            "disable_ipv6=0",
        ),
    ] {
        let Some((f, dump)) = judged(scene, dport) else {
            return;
        };
        assert_eq!(
            tracer_tests::verdict_said(&f, "reason"),
            reason,
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "where").contains(said),
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&kind),
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains(hint),
            "{scene}: {dump}"
        );
    }
    let Some((f, dump)) = judged("blind_veth_trap_ndp_policy", 8080) else {
        return;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "NEIGH_FAILED",
        "{dump}"
    );
    let kinds = tracer_tests::evidence_kinds(&f);
    for k in [
        "veth_other_end",
        "sysctl_refused",
        "bridge_will_not_forward",
    ] {
        assert!(!kinds.contains(&k), "{k}: {dump}");
    }
}

/// A tc program's Service translation (tests/src/blind_bpfnat.rs, written
/// blind before verdict/bpf_nat.rs): the rewrite and its program are named
/// on every scene; a stale backend (projectcalico/calico#4509) is the
/// translated destination the route refuses; replies that reached the
/// client untranslated are named where they left the node, by a device
/// without the program (cilium/cilium#40521, a reset) or past a program
/// that let them pass (kubernetes/kubernetes#68367, a DNS answer from the
/// pod's address); the trap (a server bound to loopback) is not blamed on
/// the translation.
#[test]
fn tc_translations_are_followed_and_named() {
    for (name, dport, kind, reason, where_has) in [
        (
            "blind_bpfnat_stale_backend",
            53,
            "dropped",
            "NOT_SPECIFIED",
            "the route lookup for 10.241.112.7 (its destination after NAT",
        ),
        (
            "blind_bpfnat_nodeport_reply_unreversed",
            30080,
            "dropped",
            "reply_not_translated",
            "by eth1, where no tc program is attached to its egress; the client's kernel",
        ),
        (
            "blind_bpfnat_dns_reply_unreversed",
            53,
            "delivered",
            "reply_not_translated",
            "by lxc0, where tc BPF program cil_to_containe",
        ),
        (
            "blind_bpfnat_trap_loopback_bind",
            18081,
            "dropped",
            "NO_SOCKET",
            "bound there on 127.0.0.1:18081 only",
        ),
    ] {
        let Some((f, dump)) = judged(name, dport) else {
            return;
        };
        assert_eq!(
            tracer_tests::verdict_said(&f, "kind"),
            kind,
            "{name}: {dump}"
        );
        assert_eq!(
            tracer_tests::verdict_said(&f, "reason"),
            reason,
            "{name}: {dump}"
        );
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(w.contains(where_has), "{name}: {dump}");
        assert_eq!(f["nat_by"], "bpf", "{name}: {dump}");
        let rw = tracer_tests::evidence_of(&f, "bpf_rewrite");
        assert!(
            rw["programs"].as_array().is_some_and(|p| !p.is_empty()),
            "{name}: {dump}"
        );
    }
}

/// Trace scene `name`: its flow to `dport` says `reason`, a `where` with
/// `where_has`, a fact of kind `evidence`, and a hint of its own (not the
/// generic one). False when the scene cannot run here.
fn cause_named(name: &str, dport: u64, reason: &str, where_has: &str, evidence: &str) -> bool {
    let Some((f, dump)) = judged(name, dport) else {
        return false;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        reason,
        "{name}: {dump}"
    );
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(w.contains(where_has), "{name}: {dump}");
    assert!(
        tracer_tests::evidence_kinds(&f).contains(&evidence),
        "{name}: {dump}"
    );
    assert!(
        !tracer_tests::verdict_said(&f, "hint").starts_with("The kernel dropped it"),
        "{name}: {dump}"
    );
    true
}

/// The node's own state, written blind (tests/src/blind_node.rs, session
/// 26): a pod's address also on the node's tunnel device
/// (projectcalico/calico#6244) names the device that holds it; the CNI
/// bandwidth plugin's tbf (containernetworking/plugins#922) names the
/// qdisc, its rate and drops, though most of the burst was delivered; a
/// stale IPsec policy (k3s-io/k3s#2808) names the policy and the missing
/// SA; a Service
/// range routed back and forth between a node and its ToR
/// (projectcalico/confd#322) names the loop and both routes; the trap (an
/// IPsec policy that allows, a FORWARD reject, cilium/cilium#18256) names
/// the rule.
#[test]
fn node_state_that_drops_is_named() {
    for (name, dport, reason, where_has, evidence) in [
        (
            "blind_node_pod_ip_on_tunnel",
            8080,
            "IP_LOCAL_SOURCE",
            "is an address of this namespace too (on vxlan.calico)",
            "source_refused",
        ),
        (
            "blind_node_egress_bandwidth_burst",
            8125,
            "QDISC_DROP",
            "dropped by the qdisc of bwp1: tbf",
            "qdisc_dropped",
        ),
        (
            "blind_node_stale_ipsec_policy",
            8080,
            "XFRM_POLICY",
            "and no SA matches its template",
            "xfrm_refused",
        ),
        (
            "blind_node_service_range_loop",
            443,
            "IP_INHDR",
            "routing loop for 10.151.100.7",
            "routing_loop",
        ),
        (
            "blind_node_trap_ipsec_allows_firewall_rejects",
            8080,
            "NETFILTER_DROP",
            "tcp dport 8080 reject` (table ip filter, chain FORWARD",
            "nf_rule_traced",
        ),
    ] {
        if !cause_named(name, dport, reason, where_has, evidence) {
            return;
        }
    }
}

/// The receiving stack, written blind (tests/src/blind_stack.rs, session
/// 26): systemd's IPAddressDeny= as cgroup programs on the sender's unit
/// (systemd/systemd#7074) and on the listener's (IPAddressAllow=localhost)
/// are named with the program and the socket's cgroup; checksums a tc
/// program left stale after its rewrite (netbird PR #6861, calico#3145)
/// name the rewrite; a listener whose queue a pod's somaxconn caps
/// (kubernetes/ingress-nginx#1630) says its real backlog; the trap (the
/// unit's firewall allows, firewalld rejects, kubeadm#725) names the rule.
#[test]
fn receiving_stack_drops_are_named() {
    for (name, dport, reason, where_has, evidence) in [
        (
            "blind_stack_logind_ipaddressdeny",
            111,
            "BPF_CGROUP_EGRESS",
            "sd_fw_egress",
            "cgroup_program_drop",
        ),
        (
            "blind_stack_unit_allow_localhost",
            8471,
            "SOCKET_FILTER",
            "sd_fw_ingress",
            "cgroup_program_drop",
        ),
        (
            "blind_stack_dns_forwarder_stale_csum",
            53,
            "UDP_CSUM",
            "without updating its checksum",
            "checksum_bad",
        ),
        (
            "blind_stack_nodeport_stale_tcp_csum",
            30080,
            "TCP_CSUM",
            "without updating its checksum",
            "checksum_bad",
        ),
        (
            "blind_stack_ingress_somaxconn",
            80,
            "listen_overflow",
            "backlog 2)",
            "listen_queue_full",
        ),
        (
            "blind_stack_trap_kubelet_firewalld",
            6443,
            "NETFILTER_DROP",
            "rule `reject`",
            "nf_rule_traced",
        ),
    ] {
        if !cause_named(name, dport, reason, where_has, evidence) {
            return;
        }
    }
}

/// More node state, written blind (tests/src/blind_more.rs, session 26):
/// a DNS answer whose later fragments a stateless ACL drops
/// (cilium/cilium#9755) is not delivered and names the lost fragments; a
/// Service DNAT to 0.0.0.0 (kubernetes/kubernetes#114537) names the
/// martian destination and the address asked; the trap (fragments that
/// all arrive at a port nobody serves, kubernetes/dns#205) is NO_SOCKET.
#[test]
fn more_node_state_is_named() {
    for (name, dport, reason, where_has, evidence) in [
        (
            "blind_more_dns_fragments_stateless_acl",
            40053,
            "FRAG_REASM_TIMEOUT",
            "the others, which carry no ports, were lost on the way",
            "fragments_lost",
        ),
        (
            "blind_more_service_dnat_zero_address",
            9100,
            "IP_INVALID_DEST",
            "(after NAT; it was sent to 10.141.100.10)",
            "source_refused",
        ),
        (
            "blind_more_trap_fragments_arrive_no_listener",
            53,
            "NO_SOCKET",
            "nothing listens",
            "packet_dropped",
        ),
    ] {
        if !cause_named(name, dport, reason, where_has, evidence) {
            return;
        }
    }
}

/// Overlays, followed into their tunnel (tests/src/blind_ovl.rs and the
/// older VXLAN scenes, written blind before the far side was read): the
/// far node refuses the outer packet, and the verdict names both ends'
/// devices: a VNI the far side lacks (projectcalico/calico#10692; a
/// flannel VNI 1 vs 2; a half-done flannel-to-Calico migration,
/// projectcalico/calico#3543), GBP on one side only
/// (flannel-io/flannel#562), both devices with one MAC (cloned machines,
/// flannel-io/flannel#1155), a metadata-mode device handed a packet
/// with no tunnel key (projectcalico/calico PR #10680), a device on a
/// port of its own that the far node's does not listen on
/// (projectcalico/calico#10692's FELIX_VXLANPORT). The trap (the
/// server on localhost, kubernetes/website#7281) does not blame the
/// tunnel.
#[test]
fn overlay_tunnels_are_followed_to_the_far_side() {
    for (name, reason, where_has) in [
        (
            "blind_node_vxlan_vni_mismatch",
            "VXLAN_VNI_NOT_FOUND",
            "has no VXLAN device for VNI 4096 on port 4789",
        ),
        (
            "blind_vxlan_wrong_vni",
            "VXLAN_VNI_NOT_FOUND",
            "has no VXLAN device for VNI 1 on port 8472",
        ),
        (
            "blind_ovl_migration_vni_on_port",
            "VXLAN_VNI_NOT_FOUND",
            "vxlan.calico (VNI 4096, port 8472)",
        ),
        (
            "blind_ovl_gbp_one_side",
            "VXLAN_INVALID_HDR",
            "carry the GBP extension",
        ),
        (
            "blind_ovl_cloned_vtep_mac",
            "LOCAL_MAC",
            "is also the MAC of flannel.1 in netns",
        ),
        (
            "blind_ovl_flow_device_no_key",
            "TUNNEL_TXINFO",
            "(metadata mode, port 4789)",
        ),
        (
            "blind_vxlan_wrong_port",
            "NO_SOCKET",
            "it sends to UDP port 4799, where nothing listens in netns",
        ),
    ] {
        if !cause_named(name, 8080, reason, where_has, "tunnel_will_not_send") {
            return;
        }
    }
    // The far side's drops come with the way in.
    let Some((f, dump)) = judged("blind_node_vxlan_vni_mismatch", 8080) else {
        return;
    };
    assert!(
        tracer_tests::evidence_kinds(&f).contains(&"encapsulated"),
        "{dump}"
    );
    let Some((f, dump)) = judged("blind_ovl_trap_localhost_listener", 8080) else {
        return;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "NO_SOCKET",
        "{dump}"
    );
    assert!(
        !tracer_tests::evidence_kinds(&f).contains(&"tunnel_will_not_send"),
        "{dump}"
    );
}

/// The far node's firewall rejects the overlay's port (the honest trap
/// of the tunnel class, flannel-io/flannel#2055, kubernetes/website#13789):
/// nftrace traces the VXLAN packets that carry the followed flow by their
/// inner headers, so the rule that rejected the outer packet is named,
/// with the firewall-between-nodes hint; the tunnel is not blamed.
#[test]
fn a_firewall_rejecting_the_overlay_port_is_named_by_its_rule() {
    let Some((f, dump)) = judged("blind_tun_firewalld_vxlan_port", 8080) else {
        return;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "NETFILTER_DROP",
        "{dump}"
    );
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains(
            "rule `reject with icmpx admin-prohibited` (table inet firewalld, chain filter_INPUT"
        ) && w.contains("named by nftrace"),
        "{dump}"
    );
    assert!(
        tracer_tests::verdict_said(&f, "hint").contains("UDP 8472"),
        "{dump}"
    );
    let kinds = tracer_tests::evidence_kinds(&f);
    assert!(
        kinds.contains(&"encapsulated") && !kinds.contains(&"tunnel_will_not_send"),
        "{dump}"
    );
}

/// helper-18's blind scenes of the same class (tests/src/blind_fw.rs):
/// ufw's default deny of Calico's VXLAN port (projectcalico/calico#6208),
/// and a ClusterIP's endpoint on the far node behind a host firewall that
/// accepts flannel's port only from another subnet (kubernetes/kubeadm#836,
/// flannel-io/flannel#710). The endpoint's VXLAN packets are traced from
/// the first packet: its address comes from kube-proxy's rules. The trap
/// (docker's FORWARD policy DROP on the decapsulated packet,
/// kubernetes/kubernetes#40182) names the FORWARD policy and does not
/// blame the overlay's port.
#[test]
fn a_firewall_between_nodes_is_named_blind() {
    for (name, port, chain) in [
        (
            "blind_fw_ufw_denies_vxlan_4789",
            8080,
            "policy drop of chain INPUT (table ip filter",
        ),
        (
            "blind_fw_service_endpoint_over_vxlan_blocked",
            80,
            "policy drop of chain input (table inet filter",
        ),
    ] {
        let Some((f, dump)) = judged(name, port) else {
            return;
        };
        assert!(
            tracer_tests::verdict_said(&f, "where").contains(chain),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains("the overlay's port"),
            "{name}: {dump}"
        );
    }
    let Some((f, dump)) = judged("blind_fw_trap_forward_policy_drop", 8080) else {
        return;
    };
    assert!(
        tracer_tests::verdict_said(&f, "where")
            .contains("policy drop of chain FORWARD (table ip filter"),
        "{dump}"
    );
    assert!(
        !tracer_tests::verdict_said(&f, "hint").contains("the overlay's port"),
        "{dump}"
    );
}

/// A firewall between the nodes against an overlay on a port of its own
/// (tests/src/blind_port.rs, written blind): Antrea's tunnelPort 10789
/// with an INPUT policy drop (antrea-io/antrea#7823), flannel's
/// Backend.Port 8285 with firewalld opened for 8472 (kubernetes#121530,
/// k3s#1719), Calico's vxlanPort 4799 with a REJECT after 4789
/// (projectcalico/calico#10692, #6208): nftrace follows the flow into
/// VXLAN on the node's own port and names the rule at INPUT, with the
/// overlay port's hint. The trap (node1 sends to 4799, node2 listens on
/// 4789; the firewall allows both) is the port mismatch, not a rule.
#[test]
fn a_firewall_against_an_overlay_port_of_its_own_is_named_blind() {
    for (name, port, said) in [
        (
            "blind_port_antrea_custom_tunnel_port",
            8080,
            "policy drop of chain INPUT (table ip filter",
        ),
        (
            "blind_port_flannel_port_firewalld_service",
            80,
            "(table inet firewalld, chain filter_INPUT",
        ),
        (
            "blind_port_calico_vxlanport_oci_reject",
            8080,
            "rule `reject` (table ip filter, chain INPUT",
        ),
    ] {
        let Some((f, dump)) = judged(name, port) else {
            return;
        };
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(
            w.starts_with("netfilter INPUT (nft_do_chain) in netns ") && w.contains(said),
            "{name}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains("the overlay's port"),
            "{name}: {dump}"
        );
    }
    let Some((f, dump)) = judged("blind_port_trap_calico_port_mismatch", 8080) else {
        return;
    };
    assert_eq!(
        tracer_tests::verdict_said(&f, "reason"),
        "NO_SOCKET",
        "{dump}"
    );
    assert!(
        tracer_tests::verdict_said(&f, "where").contains("it sends to UDP port 4799"),
        "{dump}"
    );
    assert!(
        !tracer_tests::evidence_kinds(&f).contains(&"nf_rule_traced"),
        "{dump}"
    );
}

/// IP protocols the receiving kernel has no handler for
/// (tests/src/blind_proto.rs, written blind): SCTP to a pod on a node
/// without SCTP (kubernetes/test-infra#22314), through a Service to such
/// a pod (kubernetes/test-infra#34860), Calico IPIP to a node without
/// the ipip module, followed on its address (projectcalico/calico#3507):
/// its protocol unreachables are evidence on its flow, not a flow.
/// The trap (VXLAN handled, dropped by Calico's cali-INPUT rule,
/// projectcalico/calico#6752) names the rule.
#[test]
fn unhandled_protocols_are_named() {
    for (name, dport, where_has) in [
        (
            "blind_proto_sctp_pod_no_module",
            8082,
            "no handler for IP protocol 132 (SCTP)",
        ),
        (
            "blind_proto_sctp_service_endpoint_no_module",
            95,
            "its module sctp is not loaded",
        ),
    ] {
        if !cause_named(name, dport, "IP_NOPROTO", where_has, "protocol_unhandled") {
            return;
        }
    }
    let Some((out, _)) = tracer_tests::trace_scenario_out("blind_proto_ipip_node_no_module", &[])
    else {
        return;
    };
    let dump = out.dump();
    let f = out
        .final_flows()
        .into_iter()
        .find(|f| f["proto"] == "ipip")
        .unwrap_or_else(|| panic!("no ipip flow: {dump}"));
    assert!(
        tracer_tests::verdict_said(f, "where").contains("its module ipip is not loaded"),
        "{dump}"
    );
    // The protocol unreachables back are evidence on the IPIP flow (the
    // kernel sent them for its packets), not a flow of their own.
    assert!(
        tracer_tests::evidence_kinds(f).contains(&"icmp_sent"),
        "{dump}"
    );
    assert_eq!(out.final_flows().len(), 1, "{dump}");
    let Some((out, _)) =
        tracer_tests::trace_scenario_out("blind_proto_trap_vxlan_dropped_by_firewall", &[])
    else {
        return;
    };
    let dump = out.dump();
    let f = out.flow_to(4789);
    assert_eq!(
        tracer_tests::verdict_said(f, "reason"),
        "NETFILTER_DROP",
        "{dump}"
    );
    assert!(
        !tracer_tests::evidence_kinds(f).contains(&"protocol_unhandled"),
        "{dump}"
    );
}
