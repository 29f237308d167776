//! The incidents of shared/incidents.md, each rebuilt in namespaces as its
//! card describes, traced with the real binary; asserts kind, reason, where
//! and the key words of the hint. Runs on this machine's kernel (tc,
//! tracepoints, tp_btf).

use serde_json::Value;
use tracer_tests::{require_privileges, scenarios, tracer::TracerRun};

fn trace(name: &str, dport: u64) -> Option<(Value, String)> {
    if !require_privileges(name) {
        return None;
    }
    let sc = scenarios::build(name).expect("build scenario");
    let run = TracerRun::start(&sc.target, &sc.arg_refs()).expect("start tracer");
    let seen = sc.traffic().expect("traffic");
    let out = run.stop().expect("stop tracer");
    assert!(
        out.status.is_some_and(|s| s.success()),
        "tracer failed: {}",
        out.dump()
    );
    let flow = out.flow_to(dport).clone();
    eprintln!("{name}: client saw {seen:?}; verdict {}", flow["verdict"]);
    Some((flow, out.dump()))
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
    let ev = v["evidence"].to_string();
    assert!(
        ev.contains("local address on kube-ipvs0") && ev.contains("ping works"),
        "{ev}"
    );
    assert!(ev.contains("rule counter moved by"), "{ev}");
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
    let ev = v["evidence"].to_string();
    assert!(ev.contains("chose glob via 10.224.9.1"), "{ev}");
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
    let ev = v["evidence"].to_string();
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
        hops.iter().any(|h| h["hook"] == "xmit"
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
