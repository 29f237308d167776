//! Record and replay, without root: the recordings of real runs in
//! tests/recordings (each scenario of the suites, on Linux 6.18 here and
//! on the kernel-matrix VMs' Debian 6.1 and 6.12) replayed by the real
//! binary.
//! Each replay must print the verdicts its run printed (`replay --check`),
//! and each scenario's verdict must be the one it exists for.
//!
//! To re-record after a change to the rules or the format:
//! `TRACER_KEEP_RECORDINGS=DIR cargo xtask test --no-vm --filter NAME`
//! (or `cargo xtask vm` for the VM kernels), then copy the files here as
//! `SCENARIO-KERNEL.rec`.

use std::{path::PathBuf, process::Command};

use tracer_tests::{replay::replay_json, tracer::tracer_bin};

/// The verdict (kind, reason) some final flow of each scenario must have.
const EXPECTED: &[(&str, &str, &str)] = &[
    ("incident1", "dropped", "NEIGH_FAILED"),
    ("incident2", "dropped", "NETFILTER_DROP"),
    ("incident2_ipvs", "dropped", "ipvs_no_destination"),
    ("incident3", "misrouted", "local_destination_transmitted"),
    (
        "incident3_mirred",
        "misrouted",
        "local_destination_transmitted",
    ),
    ("incident4", "misrouted", "nat_source_from_other_interface"),
    (
        "incident4-netns",
        "misrouted",
        "nat_source_from_other_interface",
    ),
    ("incident5", "misrouted", "local_route_shadows_host"),
    ("incident5_ipvs", "misrouted", "local_route_shadows_host"),
    ("forwarded", "forwarded", "routed"),
    ("nat_output", "delivered", "local_socket"),
    ("netfilter_forward_drop", "dropped", "NETFILTER_DROP"),
    ("netfilter_input_drop", "dropped", "NETFILTER_DROP"),
    ("no_route", "dropped", "IP_INNOROUTES"),
    ("tcp_closed_port", "dropped", "NO_SOCKET"),
    ("tcp_delivered", "delivered", "local_socket"),
    ("udp_delivered", "delivered", "local_socket"),
    ("ipvs_nat", "delivered", "local_socket"),
    (
        "netfilter_forward_drop_counters",
        "dropped",
        "NETFILTER_DROP",
    ),
    ("kube_nft_no_endpoints", "dropped", "NETFILTER_DROP"),
    ("kube_nft_unallocated", "dropped", "NETFILTER_DROP"),
    ("kube_nft_source_ranges", "dropped", "NETFILTER_DROP"),
    ("kube_nft_service_dnat", "delivered", "local_socket"),
    ("conntrack_full", "dropped", "NETFILTER_DROP"),
    ("conntrack_snat_clash", "dropped", "NETFILTER_DROP"),
    ("nftrace_endpoint_drop", "dropped", "NETFILTER_DROP"),
    ("nftrace_reply_drop", "dropped", "NETFILTER_DROP"),
    ("conntrack_invalid_asymmetric", "dropped", "NETFILTER_DROP"),
    ("dns_bound_elsewhere", "dropped", "NO_SOCKET"),
    ("forwarding_disabled", "dropped", "IP_INADDRERRORS"),
    ("forwarding_disabled_v6", "dropped", "IP_INADDRERRORS"),
    ("listen_overflow", "dropped", "listen_overflow"),
    ("mtu_black_hole", "dropped", "PKT_TOO_BIG"),
    ("mtu_black_hole_v6", "dropped", "PKT_TOO_BIG"),
    ("policy_no_route", "dropped", "IP_INNOROUTES"),
    ("policy_no_route_v6", "dropped", "IP_INNOROUTES"),
    ("rp_filter_strict", "dropped", "IP_RPFILTER"),
    ("udp_rcvbuf_full", "dropped", "SOCKET_RCVBUFF"),
    ("netpol_kube_router", "dropped", "NETFILTER_DROP"),
    ("dns_queries", "delivered", "local_socket"),
    ("dns_one_query_dropped", "delivered", "local_socket"),
    ("dns_service_dnat", "delivered", "local_socket"),
    ("dns_truncated_tcp", "delivered", "local_socket"),
    (
        "dns_node_local",
        "misrouted",
        "local_destination_transmitted",
    ),
    ("blind_vxlan_mtu", "dropped", "PKT_TOO_BIG"),
    ("blind_output_dnat_no_route", "dropped", "NETFILTER_DROP"),
    ("blind_dnat_blackhole", "dropped", "NOT_SPECIFIED"),
    ("blind_dnat_prohibit", "dropped", "NOT_SPECIFIED"),
    ("blind_hairpin_off", "dropped", "NOT_SPECIFIED"),
    ("blind_bridge_port_learning", "dropped", "NEIGH_FAILED"),
    ("blind_l2_hairpin_nodeport", "dropped", "NOT_SPECIFIED"),
    ("blind_l2_port_isolated", "dropped", "NOT_SPECIFIED"),
    ("blind_vxlan_missing_fdb", "dropped", "NO_TX_TARGET"),
    ("blind_wrong_vtep_mac", "dropped", "OTHERHOST"),
    ("blind_tun_vtep_arp_deleted", "dropped", "NEIGH_FAILED"),
    ("blind_tun_same_public_ip", "dropped", "IP_INHDR"),
    ("blind_tun_stale_endpoint_ip", "dropped", "NEIGH_FAILED"),
    (
        "blind_vtep_flannel_node_ip_changed",
        "dropped",
        "NEIGH_FAILED",
    ),
    (
        "blind_vtep_calico_mgmt_interface",
        "dropped",
        "NEIGH_FAILED",
    ),
    ("blind_vtep_trap_far_vxlan_down", "dropped", "NO_SOCKET"),
    // Recorded in the kernel matrix only (this host makes neither device).
    ("overlay_ipip", "delivered", "local_socket"),
    ("overlay_geneve", "delivered", "local_socket"),
    ("blind_sys_localnet_dnat", "dropped", "IP_LOCALNET"),
    ("blind_sys_localnet_stale_port", "dropped", "NO_SOCKET"),
    ("blind_l2_stp_listening", "dropped", "NEIGH_FAILED"),
    ("blind_sys_pod_ipv6_disabled", "dropped", "NEIGH_FAILED"),
    ("blind_veth_mtu_pod_smaller", "dropped", "NOT_SPECIFIED"),
    ("blind_veth_host_side_down", "dropped", "NEIGH_FAILED"),
    ("blind_veth_host_ipv6_disabled", "dropped", "NEIGH_FAILED"),
    ("blind_veth_trap_ndp_policy", "dropped", "NEIGH_FAILED"),
    ("blind_sock_backend_refused", "dropped", "NO_SOCKET"),
    ("blind_sock_lrp_dns_not_listening", "dropped", "NO_SOCKET"),
    ("blind_sock_udp_no_recvmsg", "delivered", "local_socket"),
    ("blind_sock_hostns_only_target_port", "dropped", "NO_SOCKET"),
    ("incident3_lrp", "delivered", "local_socket"),
    ("blind_ct_udp_stale_dnat_ip_reused", "dropped", "NO_SOCKET"),
    (
        "blind_ct_nodeport_udp_before_service",
        "dropped",
        "NO_SOCKET",
    ),
    (
        "blind_ct_tcp_invalid_reset",
        "dropped",
        "reply_not_translated",
    ),
    (
        "blind_ct_trap_rule_stale_endpoint",
        "dropped",
        "NEIGH_FAILED",
    ),
    (
        "blind_node_vxlan_vni_mismatch",
        "dropped",
        "VXLAN_VNI_NOT_FOUND",
    ),
    ("blind_vxlan_wrong_vni", "dropped", "VXLAN_VNI_NOT_FOUND"),
    ("blind_vxlan_wrong_port", "dropped", "NO_SOCKET"),
    ("dp_xdp_redirect_down", "dropped", "XDP"),
    ("dp_xdp_tx_back", "dropped", "OTHERHOST"),
    ("dp_xdp_native_drop", "dropped", "NOT_SPECIFIED"),
    ("dp_xdp_devmap_down", "dropped", "XDP"),
    (
        "blind_port_antrea_custom_tunnel_port",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_port_flannel_port_firewalld_service",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_port_calico_vxlanport_oci_reject",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_port_trap_calico_port_mismatch",
        "dropped",
        "NO_SOCKET",
    ),
    (
        "blind_native_redirect_peer_no_xdp",
        "no_reply",
        "taken_by_native_xdp",
    ),
    (
        "blind_native_tx_peer_no_xdp",
        "no_reply",
        "taken_by_native_xdp",
    ),
    (
        "blind_native_trap_local_source",
        "dropped",
        "IP_LOCAL_SOURCE",
    ),
    ("blind_xdp_tx_mac_unswapped", "dropped", "NOT_SPECIFIED"),
    ("blind_xdp_devmap_miss_aborted", "dropped", "NOT_SPECIFIED"),
    ("blind_xdp_redirect_mtu", "dropped", "XDP"),
    ("blind_xdp_trap_pass_refused", "dropped", "NO_SOCKET"),
    (
        "blind_ovl_migration_vni_on_port",
        "dropped",
        "VXLAN_VNI_NOT_FOUND",
    ),
    ("blind_ovl_gbp_one_side", "dropped", "VXLAN_INVALID_HDR"),
    ("blind_ovl_cloned_vtep_mac", "dropped", "LOCAL_MAC"),
    ("blind_ovl_flow_device_no_key", "dropped", "TUNNEL_TXINFO"),
    ("blind_ovl_trap_localhost_listener", "dropped", "NO_SOCKET"),
    ("blind_proto_sctp_pod_no_module", "dropped", "IP_NOPROTO"),
    (
        "blind_proto_sctp_service_endpoint_no_module",
        "dropped",
        "IP_NOPROTO",
    ),
    ("blind_proto_ipip_node_no_module", "dropped", "IP_NOPROTO"),
    (
        "blind_proto_trap_vxlan_dropped_by_firewall",
        "dropped",
        "NETFILTER_DROP",
    ),
    ("dp_tc_from_pod_drop", "dropped", "TC_INGRESS"),
    ("dp_tcx_to_pod_drop", "dropped", "TC_EGRESS"),
    ("dp_xdp_drop", "dropped", "NOT_SPECIFIED"),
    ("dp_tc_passes_closed_port", "dropped", "NO_SOCKET"),
    ("dp_tc_service_dnat", "delivered", "local_socket"),
    ("blind_bpfnat_stale_backend", "dropped", "NOT_SPECIFIED"),
    (
        "blind_bpfnat_nodeport_reply_unreversed",
        "dropped",
        "reply_not_translated",
    ),
    (
        "blind_bpfnat_dns_reply_unreversed",
        "delivered",
        "reply_not_translated",
    ),
    ("blind_bpfnat_trap_loopback_bind", "dropped", "NO_SOCKET"),
    ("blind_bpf_egress_policy_deny", "dropped", "TC_INGRESS"),
    ("blind_bpf_dns_answer_denied", "dropped", "TC_EGRESS"),
    (
        "blind_bpf_hostport_masquerade_denied",
        "dropped",
        "TC_EGRESS",
    ),
    (
        "blind_bpf_xdp_lb_remote_backend",
        "dropped",
        "NOT_SPECIFIED",
    ),
    ("blind_bpf_stale_calico_filter", "dropped", "TC_EGRESS"),
    ("blind_bpf_hostport_lost_refused", "dropped", "NO_SOCKET"),
    ("blind_node_egress_bandwidth_burst", "dropped", "QDISC_DROP"),
    ("blind_node_service_range_loop", "dropped", "IP_INHDR"),
    ("blind_node_stale_ipsec_policy", "dropped", "XFRM_POLICY"),
    ("blind_node_pod_ip_on_tunnel", "dropped", "IP_LOCAL_SOURCE"),
    (
        "blind_node_trap_ipsec_allows_firewall_rejects",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_stack_ingress_somaxconn",
        "dropped",
        "listen_overflow",
    ),
    (
        "blind_stack_logind_ipaddressdeny",
        "dropped",
        "BPF_CGROUP_EGRESS",
    ),
    (
        "blind_stack_unit_allow_localhost",
        "dropped",
        "SOCKET_FILTER",
    ),
    (
        "blind_stack_dns_forwarder_stale_csum",
        "dropped",
        "UDP_CSUM",
    ),
    ("blind_stack_nodeport_stale_tcp_csum", "dropped", "TCP_CSUM"),
    (
        "blind_stack_trap_kubelet_firewalld",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_tun_firewalld_vxlan_port",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_fw_ufw_denies_vxlan_4789",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_fw_service_endpoint_over_vxlan_blocked",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_fw_trap_forward_policy_drop",
        "dropped",
        "NETFILTER_DROP",
    ),
    (
        "blind_more_dns_fragments_stateless_acl",
        "dropped",
        "FRAG_REASM_TIMEOUT",
    ),
    (
        "blind_more_service_dnat_zero_address",
        "dropped",
        "IP_INVALID_DEST",
    ),
    (
        "blind_more_trap_fragments_arrive_no_listener",
        "dropped",
        "NO_SOCKET",
    ),
];

fn recordings() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("recordings");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/recordings")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rec"))
        .collect();
    v.sort();
    v
}

/// `incident4-netns-6.18.rec` -> ("incident4-netns", "6.18").
fn scenario_and_kernel(p: &std::path::Path) -> (String, String) {
    let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
    let (s, k) = stem.rsplit_once('-').expect("SCENARIO-KERNEL.rec");
    (s.to_string(), k.to_string())
}

#[test]
fn every_recording_replays_as_recorded_with_its_scenarios_verdict() {
    let recs = recordings();
    assert!(recs.len() >= 15, "recordings: {recs:?}");
    for p in &recs {
        let (scenario, kernel) = scenario_and_kernel(p);
        let (_, kind, reason) = EXPECTED
            .iter()
            .find(|(s, _, _)| *s == scenario)
            .unwrap_or_else(|| panic!("{}: no expected verdict for {scenario}", p.display()));
        let lines = replay_json(p);
        let flows: Vec<_> = lines
            .iter()
            .filter(|l| l["type"] == "flow" && l["final"] == true)
            .collect();
        assert!(
            flows
                .iter()
                .any(|f| f["verdict"]["kind"] == *kind && f["verdict"]["reason"] == *reason),
            "{scenario} on {kernel}: no {kind}/{reason} flow in {flows:?}"
        );
        let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
        assert_eq!(summary["flows"], flows.len(), "{scenario} on {kernel}");
    }
    // Every scenario of the suites has its recording on this machine's
    // kernel (re-record a new one as the header says).
    for name in tracer_tests::scenarios::NAMES {
        assert!(
            recs.iter()
                .any(|p| scenario_and_kernel(p) == ((*name).to_string(), "6.18".into())),
            "no recording of scenario {name} on 6.18 in tests/recordings"
        );
    }
    // The five incidents are all there on each kernel.
    for kernel in ["6.18", "6.12", "6.1"] {
        for i in 1..=5 {
            let name = format!("incident{i}");
            assert!(
                recs.iter()
                    .any(|p| scenario_and_kernel(p) == (name.clone(), kernel.into())),
                "no recording of {name} on {kernel}"
            );
        }
    }
}

/// Every line the recordings replay to (flows of every scenario, with the
/// evidence kinds of all of them, and their summaries) is valid against
/// docs/json-schema.json, the schema generated from the output types.
#[test]
fn replayed_lines_match_the_generated_schema() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/json-schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("docs/json-schema.json"))
            .expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let mut checked = 0;
    for p in recordings() {
        for line in replay_json(&p) {
            let errors: Vec<String> = validator
                .iter_errors(&line)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .take(5)
                .collect();
            assert!(
                errors.is_empty(),
                "{}: a line does not match the schema: {errors:#?}\n{line}",
                p.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 40, "{checked} lines checked");
    // And the schema can fail: a flow without its verdict does not match.
    let bad = serde_json::json!({"type": "flow", "id": 1});
    assert!(!validator.is_valid(&bad));
}

#[test]
fn text_replay_prints_the_verdict_and_says_it_is_a_replay() {
    let rec = recordings()
        .into_iter()
        .find(|p| scenario_and_kernel(p) == ("incident5".into(), "6.18".into()))
        .expect("incident5 recording");
    let out = Command::new(tracer_bin())
        .arg("replay")
        .arg(&rec)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("=>  MISROUTED local_route_shadows_host"),
        "{text}"
    );
    assert!(text.contains("replayed from "), "{text}");
    assert!(text.contains("MACs seen: none"), "{text}");
}

/// Bad input: one clear line on stderr, exit 1. A recording cut short (no
/// trailer: the recording tracer was killed) is read as far as it goes:
/// one warning line, its flows, exit 0.
#[test]
fn bad_recordings_fail_with_one_line() {
    let dir = std::env::temp_dir().join(format!("tracer-replay-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read(&recordings()[0]).unwrap();
    let mut newer = good.clone();
    newer[8] = 0xff;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not", b"hello, world".to_vec(), "is not a tracer recording"),
        ("header", good[..14].to_vec(), "was cut short at byte 10"),
        ("empty", Vec::new(), "is not a tracer recording"),
        ("version", newer, "recording format version"),
    ];
    for (name, bytes, says) in cases {
        let p = dir.join(format!("{name}.rec"));
        std::fs::write(&p, bytes).unwrap();
        let out = Command::new(tracer_bin())
            .arg("replay")
            .arg(&p)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(out.stdout.is_empty(), "{name}");
    }
    let cut = dir.join("cut.rec");
    std::fs::write(&cut, &good[..good.len() / 2]).unwrap();
    let out = Command::new(tracer_bin())
        .arg("replay")
        .arg(&cut)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("was cut short at byte"), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(cut short) ===="),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = Command::new(tracer_bin())
        .args(["replay", "/nonexistent/x.rec"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replay names the Services follow named: the kube-proxy rules read
/// during the run are in the recording (iptables mode in incidents 2 and
/// 4, nftables mode in kube_nft_service_dnat).
#[test]
fn replay_names_the_flows_service() {
    let cases = [
        (
            "incident2",
            "default/nginx:http",
            "LoadBalancer or ExternalIP",
        ),
        ("incident4", "default/kubernetes:https", "ClusterIP"),
        ("kube_nft_service_dnat", "default/web:http", "ClusterIP"),
    ];
    for (scenario, name, kind) in cases {
        let rec = recordings()
            .into_iter()
            .find(|p| scenario_and_kernel(p) == (scenario.into(), "6.18".into()))
            .unwrap_or_else(|| panic!("{scenario} recording"));
        let lines = replay_json(&rec);
        let flow = lines
            .iter()
            .find(|l| l["type"] == "flow" && l["final"] == true && l["original"]["dport"] != 0)
            .unwrap_or_else(|| panic!("{scenario}: no flow"));
        assert_eq!(flow["service"]["name"], name, "{scenario}: {flow}");
        assert_eq!(flow["service"]["kind"], kind, "{scenario}: {flow}");
        let text = Command::new(tracer_bin())
            .arg("replay")
            .arg(&rec)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains(&format!("  service: {name} ({kind}; kube-proxy ")),
            "{scenario}: {text}"
        );
    }
}
