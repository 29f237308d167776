//! The `--netns` sweep: every scenario driven by its own traffic is judged
//! the same with `--netns` on all its namespaces as with its usual
//! arguments. The unscoped verdicts come from the tests that already
//! traced each scenario in this run (`follow`, `incidents`, ...; this file
//! runs after them, cargo runs test files in name order), through
//! `TRACER_VERDICT_LOG` (tracer_tests::verdict_log); a scenario no other
//! test traced is traced here.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use tracer_tests::{require_privileges, scenarios, trace_scenario_scoped, verdict_log};

/// Each scenario's verdict with `--netns` against its usual one.
#[test]
fn every_scenario_is_judged_the_same_with_netns_scope() {
    if !require_privileges("every_scenario_is_judged_the_same_with_netns_scope") {
        return;
    }
    // Not driven by Scenario::traffic() alone (incident 1's flap steps), or
    // already scoped (incident 3, and the DNS scenes that need tc to read
    // TCP payloads or send from two pods, whose flows to :53 differ in
    // verdict). The IPVS scenarios are not in NAMES.
    let apart = [
        "incident1",
        "incident3",
        "incident3_mirred",
        "dns_truncated_tcp",
        "dns_node_local",
    ];
    // Under emulation (the kernel-matrix VMs) each traced run takes about
    // a minute: the scenarios added with the node-fact and nftrace
    // verdicts, which read the same hooks as those before them, run on
    // the host only.
    let host_only = [
        "netfilter_forward_drop_counters",
        "kube_nft_no_endpoints",
        "kube_nft_unallocated",
        "kube_nft_source_ranges",
        "kube_nft_service_dnat",
        "conntrack_full",
        "conntrack_snat_clash",
        "nftrace_endpoint_drop",
        "nftrace_reply_drop",
        "listen_overflow",
        "policy_no_route",
        "policy_no_route_v6",
        "conntrack_invalid_asymmetric",
        "mtu_black_hole_v6",
        "netpol_kube_router",
        "dns_queries",
        "dns_one_query_dropped",
        "dns_service_dnat",
    ];
    let emulated = tracer_tests::time_scale() > 1.0;
    if emulated {
        eprintln!(
            "\n!!!!! SKIPPED (emulated, wall time) the netns-scope sweep of {}: they run on the host !!!!!\n",
            host_only.join(", ")
        );
    }
    let (mut reused, mut traced) = (0, 0);
    let mut differ = Vec::new();
    for &name in scenarios::NAMES
        .iter()
        .filter(|n| !(apart.contains(n) || emulated && host_only.contains(n)))
    {
        let mut verdicts = Vec::new();
        for scoped in [false, true] {
            // A verdict another test of this run reached in the same mode
            // is not traced again (tracer_tests::verdict_log).
            let v = if let Some(v) = verdict_log::lookup(name, scoped) {
                reused += 1;
                v
            } else {
                let (out, dport) = trace_scenario_scoped(name, scoped).expect("privileged");
                traced += 1;
                verdict_log::of_flow(out.flow_to(dport))
            };
            verdicts.push(v);
        }
        eprintln!("{name}: {verdicts:?}");
        if verdicts[0] != verdicts[1] {
            differ.push(format!(
                "{name}: {:?} vs --netns {:?}",
                verdicts[0], verdicts[1]
            ));
        }
    }
    eprintln!(
        "netns-scope sweep: {traced} traced, {reused} verdicts taken from this run's other tests"
    );
    assert!(differ.is_empty(), "{differ:#?}");
}
