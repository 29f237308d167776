//! The incidents of docs/incidents.md, each rebuilt in namespaces as its
//! card describes, traced with the real binary; asserts kind, reason, where
//! and the key words of the hint. Runs on this machine's kernel (tc,
//! tracepoints, tp_btf).
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use serde_json::Value;
use tracer_tests::{
    evidence, keep_recording, recording_path, replay, require_kernel_feature, require_privileges,
    scenarios, trace_scenario, trace_scenario_scoped, tracer::TracerRun,
};

fn trace(name: &str, dport: u64) -> Option<(Value, String)> {
    trace_scenario(name, dport)
}

#[test]
fn incident2_lb_ip_without_local_endpoint() {
    let Some((f, dump)) = trace("incident2", 80) else {
        return;
    };
    let v = &f["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("dropped"), Some("NETFILTER_DROP")),
        "{dump}"
    );
    let where_ = v["where"].as_str().unwrap();
    assert!(where_.starts_with("netfilter INPUT"), "{where_}");
    assert!(where_.contains("-master"), "{where_}");
    assert!(where_.contains("chain KUBE-EXTERNAL-SERVICES"), "{where_}");
    assert!(where_.contains("has no local endpoints"), "{where_}");
    let ev = evidence::text(&f);
    assert!(
        evidence::of_kind(&f, "local_destination")
            .iter()
            .any(|e| e["dev"] == "kube-ipvs0" && e["addr"] == f["original"]["dst"]),
        "{ev}"
    );
    assert!(ev.contains("ping works"), "{ev}");
    // nftrace names kube-proxy's rule (iptables-nft); where it is off
    // (a legacy backend), the rule's counter does.
    let traced = evidence::of_kind(&f, "nf_rule_traced");
    let rule = if traced.is_empty() {
        assert!(ev.contains("rule counter moved by"), "{ev}");
        evidence::of_kind(&f, "no_local_endpoints_rule_moved")
    } else {
        assert!(
            evidence::of_kind(&f, "kube_no_local_endpoints")
                .iter()
                .any(|e| evidence::field(e, "service").contains('/')),
            "{ev}"
        );
        // kube-proxy's rule (iptables-nft) names the Service of the flow.
        let svc = &f["service"];
        assert_eq!(svc["name"], "default/nginx:http", "{dump}");
        assert_eq!(svc["kind"], "LoadBalancer or ExternalIP", "{dump}");
        assert_eq!(svc["source"]["chain"], "KUBE-EXTERNAL-SERVICES", "{dump}");
        assert!(evidence::field(svc, "netns").ends_with("-master"), "{dump}");
        traced
    };
    assert!(
        rule.iter().any(|e| e["chain"] == "KUBE-EXTERNAL-SERVICES"
            && e["table"] == "filter"
            && evidence::field(e, "rule").contains("has no local endpoints")),
        "{ev}"
    );
    assert!(
        v["hint"]
            .as_str()
            .unwrap()
            .contains("externalTrafficPolicy: Local"),
        "{v}"
    );
    // The SYN arrived on the master's uplink and no SYN-ACK ever left.
    let hops = f["hops"].as_array().unwrap();
    assert!(hops.iter().any(|h| h["hook"] == "netif_receive"
        && h["netns"].as_str().unwrap().ends_with("-master")
        && h["dev"] == "eth0"));
    assert!(
        !hops
            .iter()
            .any(|h| h["dir"] == "reply" && h["hook"] == "xmit"),
        "{dump}"
    );
}

#[test]
fn incident4_clusterip_routed_by_the_default_route() {
    let Some((f, dump)) = trace("incident4", 443) else {
        return;
    };
    let v = &f["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("misrouted"), Some("nat_source_from_other_interface")),
        "{dump}"
    );
    let where_ = v["where"].as_str().unwrap();
    assert!(
        where_.contains("-hostA") && where_.contains("DNAT 10.43.0.1:443 -> 10.224.1.10:6443"),
        "{where_}"
    );
    assert!(
        where_.contains("left via priv with source 10.224.9.2 of glob"),
        "{where_}"
    );
    let ev = evidence::text(&f);
    assert!(
        evidence::of_kind(&f, "pre_nat_route")
            .iter()
            .any(|e| e["dev"] == "glob"
                && e["gw"] == "10.224.9.1"
                && e["src"] == "10.224.9.2"
                && e["dst"] == "10.43.0.1"),
        "{ev}"
    );
    assert!(ev.contains("chose glob via 10.224.9.1"), "{ev}");
    // kube-proxy's KUBE-SERVICES rule names the ClusterIP's Service.
    let svc = &f["service"];
    assert_eq!(
        (svc["name"].as_str(), svc["kind"].as_str()),
        (Some("default/kubernetes:https"), Some("ClusterIP")),
        "{dump}"
    );
    assert_eq!(
        (
            svc["source"]["kind"].as_str(),
            svc["source"]["table"].as_str(),
            svc["source"]["chain"].as_str()
        ),
        (Some("iptables_rule"), Some("nat"), Some("KUBE-SERVICES")),
        "{dump}"
    );
    assert!(
        evidence::of_kind(&f, "no_route_back")
            .iter()
            .any(|e| e["dst"] == "10.224.9.2"),
        "{ev}"
    );
    assert!(ev.contains("no route back to 10.224.9.2"), "{ev}");
    assert!(
        v["hint"]
            .as_str()
            .unwrap()
            .contains("route for the Service range"),
        "{v}"
    );
    assert_eq!(f["translated"]["dst"], "10.224.1.10");
}

fn incident3_checks(f: &Value, dump: &str, by: &str) {
    let v = &f["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("misrouted"), Some("local_destination_transmitted")),
        "{dump}"
    );
    let where_ = v["where"].as_str().unwrap();
    assert!(
        where_.contains("-node: 169.254.25.10 is local (on nodelocaldns) but left via eth0"),
        "{where_}"
    );
    assert!(
        where_.contains("redirected at tc ingress of lxc0"),
        "{where_}"
    );
    assert!(where_.contains(by), "{where_}");
    assert_eq!(v["dev"], "eth0");
    let ev = evidence::text(f);
    assert!(
        evidence::of_kind(f, "tc_redirect")
            .iter()
            .any(|e| e["ingress_dev"] == "lxc0" && e["egress_dev"] == "eth0"),
        "{ev}"
    );
    assert!(ev.contains("the IP stack never saw it"), "{ev}");
    assert!(
        v["hint"].as_str().unwrap().contains("hostLegacyRouting"),
        "{v}"
    );
    let hops = f["hops"].as_array().unwrap();
    assert!(
        hops.iter()
            .any(|h| h["hook"] == "tc_ingress" && h["dev"] == "lxc0"),
        "{dump}"
    );
    assert!(
        // tc egress where tc is the device hook (--netns: tracer leaves
        // the xmit tracepoint to it), the xmit tracepoint otherwise.
        hops.iter()
            .any(|h| (h["hook"] == "xmit" || h["hook"] == "tc_egress")
                && h["dev"] == "eth0"
                && h["netns"].as_str().unwrap().ends_with("-node")),
        "{dump}"
    );
    // Never delivered to the DNS socket on nodelocaldns.
    assert!(!hops.iter().any(|h| h["hook"] == "sock_queue"), "{dump}");
}

#[test]
fn incident3_bpf_host_routing_sends_node_local_dns_out() {
    let Some((f, dump)) = trace("incident3", 53) else {
        return;
    };
    incident3_checks(&f, &dump, "by tc BPF program hostroute_redir (id ");
}

#[test]
fn incident3_same_misroute_with_tc_mirred() {
    let Some((f, dump)) = trace("incident3_mirred", 53) else {
        return;
    };
    incident3_checks(
        &f,
        &dump,
        "by tc action mirred (Egress Redirect to device eth0)",
    );
}

#[test]
fn incident1_vip_flapping_between_two_nodes() {
    if !require_privileges("incident1") {
        return;
    }
    let sc = scenarios::build("incident1").expect("build");
    let rec = recording_path("incident1");
    let mut args = sc.arg_refs();
    let rec_arg = rec.display().to_string();
    args.extend(["--record", rec_arg.as_str()]);
    let run = TracerRun::start(&sc.target, &args).expect("start tracer");
    let seen = sc.flap_steps().expect("traffic");
    let out = run.stop().expect("stop");
    // The owner changes and MACs come back from the recording alone.
    replay::assert_replays_as_followed(&rec, &out, "incident1");
    keep_recording(&rec, "incident1", false);
    let dump = out.dump();
    eprintln!("client saw: {seen:?}");
    // ARP failure surfaces as EHOSTUNREACH (nginx's 113): the stack sends
    // itself an ICMP host unreachable (arp_error_report()), and
    // tcp_v4_err() sets sk_err before closing the socket. Once, on Debian
    // 6.1 under qemu TCG, connect(2) saw the socket closed (POLLHUP) with
    // SO_ERROR already 0 (std's "no error set after POLLHUP"): the same
    // failure, its errno lost on the client side. The tracer's verdict for
    // it is checked below either way.
    assert!(
        seen[0].contains("No route to host") || seen[0].contains("no error set after POLLHUP"),
        "ARP failure surfaces as a failed connect: {seen:?}"
    );
    let flows = out.final_flows();
    assert!(flows.len() >= 3, "{dump}");
    // Step 1: nobody answers ARP for the VIP.
    let neigh = flows
        .iter()
        .find(|f| f["verdict"]["reason"] == "NEIGH_FAILED")
        .unwrap_or_else(|| panic!("no NEIGH_FAILED flow: {dump}"));
    assert_eq!(neigh["verdict"]["kind"], "dropped");
    let w = neigh["verdict"]["where"].as_str().unwrap();
    assert!(
        w.contains("neighbour resolution (ARP/NDP) for 10.227.0.99 failed on eth0")
            && w.contains("-client"),
        "{w}"
    );
    assert!(evidence::has(neigh, "host_unreachable_inferred"), "{neigh}");
    assert!(
        evidence::text(neigh).contains("host-unreachable"),
        "{neigh}"
    );
    // Step 3: node1 lost the VIP but still got the SYN: forwarded back out
    // of eth0, with an ICMP redirect.
    let redirected = flows
        .iter()
        .find(|f| {
            // ICMP redirect (5), for the host (1).
            evidence::of_kind(f, "icmp_sent")
                .iter()
                .any(|e| e["icmp_type"] == 5 && e["icmp_code"] == 1)
        })
        .unwrap_or_else(|| panic!("no ICMP redirect: {dump}"));
    let ev = evidence::text(redirected);
    assert!(ev.contains("redirect host sent by netns"), "{ev}");
    assert!(
        evidence::of_kind(redirected, "forwarded_back")
            .iter()
            .any(|e| evidence::field(e, "netns").ends_with("-node1") && e["dev"] == "eth0"),
        "{ev}"
    );
    assert!(
        ev.contains("-node1 forwarded it back out of eth0, the interface it came in on"),
        "{ev}"
    );
    // Every flow to the VIP says it changed owner and was answered by two
    // MACs (seen by the neigh_update hook; 5.10's verifier refuses its
    // tp_btf program, which reads a `const u8 *` argument).
    let neigh_update = out.summary().unwrap()["probes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["hook"] == "neigh_update" && p["attached"] == true);
    let neigh_update = neigh_update
        || require_kernel_feature(
            "incident1 [answered by two MACs]",
            Some("the neigh_update hook is unavailable on this kernel".into()),
        );
    for f in &flows {
        let ev = evidence::text(f);
        let owner = evidence::of_kind(f, "owner_changed");
        assert!(
            owner.len() == 1
                && owner[0]["addr"] == "10.227.0.99"
                && owner[0]["changes"] == 3
                && owner[0]["first"].as_array().unwrap().len() == 3,
            "{ev}"
        );
        assert!(ev.contains("10.227.0.99 changed owner 3 times"), "{ev}");
        // The MACs come from the neighbour updates (neigh_update hook).
        if !neigh_update {
            continue;
        }
        let macs = evidence::of_kind(f, "several_macs");
        assert!(
            macs.len() == 1 && macs[0]["macs"].as_array().unwrap().len() == 2,
            "{ev}"
        );
        assert!(ev.contains("answered by 2 MACs"), "{ev}");
        assert!(
            f["verdict"]["hint"]
                .as_str()
                .unwrap()
                .contains("Two controllers"),
            "{f}"
        );
    }
    let vip = &out.summary().unwrap()["vip"];
    assert_eq!(vip["changes"].as_array().unwrap().len(), 3, "{vip}");
    assert!(
        vip["owners"][0].as_str().unwrap().contains("-node2"),
        "{vip}"
    );
}

#[test]
fn incident5_external_ip_equal_to_node_ip_is_misrouted() {
    let Some((f, dump)) = trace("incident5", 22) else {
        return;
    };
    let (kind, reason, where_) = (
        f["verdict"]["kind"].as_str().unwrap(),
        f["verdict"]["reason"].as_str().unwrap(),
        f["verdict"]["where"].as_str().unwrap(),
    );
    assert_eq!(
        (kind, reason),
        ("misrouted", "local_route_shadows_host"),
        "{dump}"
    );
    assert_eq!(f["verdict"]["dev"], "kube-ipvs0");
    assert!(
        where_.contains("kube-ipvs0") && where_.contains("-node1"),
        "{where_}"
    );
    assert!(
        f["verdict"]["hint"]
            .as_str()
            .unwrap()
            .contains("externalIP")
    );
    // The local route decision is in the timeline.
    let local = f["hops"].as_array().unwrap().iter().any(|h| {
        h["hook"] == "fib_lookup" && h["dev"] == "kube-ipvs0" && h["fields"]["nh_scope"] == 255
    });
    assert!(local, "{dump}");
}

/// Incident 4 with `--netns`: tc egress must itself know a locally
/// generated packet that OUTPUT's DNAT already rewrote (its conntrack
/// entry holds the ClusterIP), as the xmit tracepoint does.
#[test]
fn incident4_with_netns_scope() {
    let Some((out, dport)) = trace_scenario_scoped("incident4", true) else {
        return;
    };
    let f = out.flow_to(dport);
    let v = &f["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("misrouted"), Some("nat_source_from_other_interface")),
        "{}",
        out.dump()
    );
    assert_eq!(f["translated"]["dst"], "10.224.1.10", "{}", out.dump());
}
