//! Verdicts of the foundation issue: each test builds its topology in
//! namespaces it creates, runs the real tracer with `-o json`, sends
//! bounded traffic and asserts on the verdict.

use serde_json::{Value, json};
use tracer_tests::{evidence, trace_scenario};

fn trace(name: &str, dport: u64) -> Option<(Value, String)> {
    trace_scenario(name, dport)
}

fn verdict(f: &Value) -> (&str, &str, &str) {
    (
        f["verdict"]["kind"].as_str().unwrap(),
        f["verdict"]["reason"].as_str().unwrap(),
        f["verdict"]["where"].as_str().unwrap(),
    )
}

fn hooks(f: &Value) -> Vec<&str> {
    f["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["hook"].as_str().unwrap())
        .collect()
}

#[test]
fn tcp_to_listening_port_is_delivered() {
    let Some((f, dump)) = trace("tcp_delivered", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("delivered", "local_socket"), "{dump}");
    assert!(where_.ends_with("-server"), "{where_}");
    // The same packet is followed across the three namespaces.
    let netns: Vec<&str> = f["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["netns"].as_str().unwrap())
        .collect();
    for role in ["-client", "-router", "-server"] {
        assert!(
            netns.iter().any(|n| n.ends_with(role)),
            "no hop in {role}: {dump}"
        );
    }
    assert!(f["replies"].as_u64().unwrap() > 0);
}

#[test]
fn tcp_to_closed_port_is_dropped_no_socket_with_reset() {
    let Some((f, dump)) = trace("tcp_closed_port", 8081) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NO_SOCKET"), "{dump}");
    assert!(
        where_.starts_with("tcp_v4_rcv in netns")
            && where_.contains("-server: nothing listens on tcp 10.212.2.2:8081"),
        "{where_}"
    );
    assert_eq!(evidence::of_kind(&f, "no_listener").len(), 1, "{dump}");
    assert!(hooks(&f).contains(&"tcp_reset"), "{dump}");
    let resets = evidence::of_kind(&f, "tcp_reset_sent");
    assert!(
        resets
            .iter()
            .any(|e| evidence::field(e, "netns").ends_with("-server")),
        "{dump}"
    );
    assert!(
        evidence::text(&f).contains("tcp reset sent in netns"),
        "{dump}"
    );
}

#[test]
fn iptables_drop_in_forward_names_the_hook() {
    let Some((f, dump)) = trace("netfilter_forward_drop", 8082) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert!(where_.starts_with("netfilter FORWARD"), "{where_}");
    // iptables here is iptables-nft: nftrace names the rule as `nft list
    // ruleset` prints it, with its family, table, chain and handle.
    assert!(
        where_.contains(
            "-router: rule `tcp dport 8082 drop` (table ip filter, chain FORWARD, handle "
        ) && where_.ends_with("; named by nftrace)"),
        "{where_}"
    );
    let traced = evidence::of_kind(&f, "nf_rule_traced");
    assert!(
        traced
            .iter()
            .any(|e| evidence::field(e, "chain") == "FORWARD"
                && evidence::field(e, "verdict") == "drop"
                && evidence::field(e, "method") == "nftrace"
                && e["handle"].as_u64().is_some_and(|h| h > 0)),
        "{dump}"
    );
    // The rule is named: the function hooks that are missing here would
    // add nothing, and the verdict does not list them.
    assert!(
        evidence::of_kind(&f, "func_hook_unavailable").is_empty(),
        "{dump}"
    );
    assert!(
        f["verdict"]["hint"]
            .as_str()
            .unwrap()
            .contains("nft delete rule"),
        "{dump}"
    );
}

#[test]
fn without_nftrace_the_rule_is_named_by_its_counter() {
    let Some((f, dump)) = trace("netfilter_forward_drop_counters", 8082) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert!(
        where_.contains("-router: rule `tcp dport 8082 drop` (table ip filter, chain FORWARD)"),
        "{where_}"
    );
    assert!(evidence::of_kind(&f, "nf_rule_traced").is_empty(), "{dump}");
    let moved = evidence::of_kind(&f, "nf_rule_moved");
    assert!(
        moved
            .iter()
            .any(|e| evidence::field(e, "chain") == "FORWARD"
                && evidence::field(e, "verdict") == "drop"
                && evidence::field(e, "method") == "counters"),
        "{dump}"
    );
}

/// DNS read from the followed packets' bytes: each question of the
/// client's socket with what came back, and the run's count by result.
#[test]
fn dns_questions_and_answers_are_read_from_the_packets() {
    let Some((out, seen)) = tracer_tests::trace_scenario_out("dns_queries", &[]) else {
        return;
    };
    let dump = out.dump();
    assert!(
        seen.contains("kubernetes.default.svc.cluster.local NoError 1 answers"),
        "{seen}"
    );
    let f = out.flow_to(53);
    let (kind, reason, _) = verdict(f);
    assert_eq!((kind, reason), ("delivered", "local_socket"), "{dump}");
    let q = f["dns"]["queries"].as_array().expect("dns queries");
    let by_name = |n: &str| {
        q.iter()
            .find(|x| x["name"] == n)
            .unwrap_or_else(|| panic!("no query {n}: {dump}"))
    };
    let ok = by_name("kubernetes.default.svc.cluster.local");
    assert_eq!(
        (&ok["id"], &ok["qtype"], &ok["rcode"], &ok["answer_count"]),
        (&json!(0x1000), &json!("A"), &json!("NOERROR"), &json!(1)),
        "{dump}"
    );
    assert_eq!(ok["answers"][0]["data"], "192.0.2.10", "{dump}");
    assert!(
        ok["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{dump}"
    );
    assert_eq!(
        (&ok["server"], &ok["verdict"]["kind"]),
        (&json!("10.248.2.2:53"), &json!("delivered")),
        "{dump}"
    );
    let text = ok["text"].as_str().unwrap();
    assert!(
        text.starts_with("A kubernetes.default.svc.cluster.local from 10.248.1.2:")
            && text.contains(" -> 10.248.2.2:53 (id 0x1000) => NOERROR 1 answer (192.0.2.10) "),
        "{dump}"
    );
    assert_eq!(by_name("nx.example.com")["rcode"], "NXDOMAIN", "{dump}");
    // The server got the query and kept silent: judged on its own packets,
    // the query was delivered to the server's socket.
    let silent = by_name("silent.example.com");
    assert!(silent["rcode"].is_null() && silent["sent"] == 1, "{dump}");
    assert_eq!(
        (&silent["verdict"]["kind"], &silent["verdict"]["reason"]),
        (&json!("delivered"), &json!("local_socket")),
        "{dump}"
    );
    assert!(
        silent["text"]
            .as_str()
            .unwrap()
            .contains("=> no answer: DELIVERED local_socket (local socket 10.248.2.2:53 in netns "),
        "{dump}"
    );
    let big = by_name("big.example.com");
    assert!(
        big["truncated"] == true && big["rcode"] == "NOERROR",
        "{dump}"
    );
    let summary = out.summary().unwrap();
    assert_eq!(
        summary["dns"],
        json!({"NOERROR": 2, "NXDOMAIN": 1, "unanswered": 1}),
        "{dump}"
    );
}

/// Twelve questions from one socket, the second dropped by an nftables
/// rule on the router: every question is read (the kernel side's record
/// budget is per DNS query), and each query is judged on its own packets:
/// the dropped one names the drop, the others were answered.
#[test]
fn each_dns_query_is_judged_on_its_own_packets() {
    let Some((out, _seen)) = tracer_tests::trace_scenario_out("dns_one_query_dropped", &[]) else {
        return;
    };
    let dump = out.dump();
    let f = out.flow_to(53);
    let q = f["dns"]["queries"].as_array().expect("dns queries");
    assert_eq!((q.len(), &f["dns"]["more"]), (12, &json!(0)), "{dump}");
    for (i, x) in q.iter().enumerate() {
        assert_eq!(x["name"], format!("q{i}.example.com"), "{dump}");
        if x["id"] == 0x1001 {
            assert!(x["rcode"].is_null(), "{dump}");
            assert_eq!(
                (&x["verdict"]["kind"], &x["verdict"]["reason"]),
                (&json!("dropped"), &json!("NETFILTER_DROP")),
                "{dump}"
            );
            assert!(
                x["text"]
                    .as_str()
                    .unwrap()
                    .contains("=> no answer: DROPPED NETFILTER_DROP"),
                "{dump}"
            );
            // The rule, as nft prints it: raw payload as one big-endian
            // number.
            assert!(
                x["verdict"]["where"]
                    .as_str()
                    .unwrap()
                    .contains("@th,64,16 0x1001 drop"),
                "{dump}"
            );
        } else {
            assert_eq!(x["rcode"], "NOERROR", "{dump}");
            assert_eq!(x["verdict"]["kind"], "delivered", "{dump}");
        }
    }
    let summary = out.summary().unwrap();
    assert_eq!(
        summary["dns"],
        json!({"NOERROR": 11, "unanswered": 1}),
        "{dump}"
    );
}

/// The final flows of `proto` to port 53 that asked `name`, each with
/// that query (`dns.queries[]`).
fn dns_asked<'a>(
    out: &'a tracer_tests::tracer::TracerOutput,
    proto: &str,
    name: &str,
) -> Vec<(&'a Value, &'a Value)> {
    out.final_flows()
        .into_iter()
        .filter(|f| f["proto"] == proto && f["original"]["dport"] == 53)
        .filter_map(|f| {
            let q = f["dns"]["queries"]
                .as_array()?
                .iter()
                .find(|q| q["name"] == name)?;
            Some((f, q))
        })
        .collect()
}

/// A truncated answer (TC bit) asked again over TCP, as a resolver does:
/// the UDP flow's answer is truncated, the TCP flow's (read by tc, from
/// the segments' page fragments) is the full one.
#[test]
fn dns_truncated_answer_is_asked_again_over_tcp() {
    let Some((out, seen)) = tracer_tests::trace_scenario_out("dns_truncated_tcp", &[]) else {
        return;
    };
    let dump = out.dump();
    assert!(
        seen.contains("big.example.com NoError 0 answers truncated")
            && seen.contains("big.example.com tcp NoError 40 answers"),
        "{seen}"
    );
    let udp = dns_asked(&out, "udp", "big.example.com");
    assert_eq!(udp.len(), 1, "{dump}");
    let (f, q) = udp[0];
    assert_eq!(verdict(f).0, "delivered", "{dump}");
    assert_eq!(
        (&q["rcode"], &q["truncated"], &q["sent"]),
        (&json!("NOERROR"), &json!(true), &json!(1)),
        "{dump}"
    );
    let tcp = dns_asked(&out, "tcp", "big.example.com");
    assert_eq!(tcp.len(), 1, "{dump}");
    let (f, q) = tcp[0];
    assert_eq!(verdict(f).0, "delivered", "{dump}");
    assert_eq!(
        (&q["rcode"], &q["truncated"], &q["qtype"]),
        (&json!("NOERROR"), &json!(false), &json!("A")),
        "{dump}"
    );
    assert!(q["answer_count"].as_u64().is_some_and(|n| n >= 1), "{dump}");
}

/// Node-local DNS served by a real server (dnsmasq on 169.254.25.10),
/// asked by name from two pods: `pod`'s questions reach it through the
/// host stack and are answered (NOERROR, NXDOMAIN outside its records);
/// `pod2`'s is redirected to the uplink by BPF host routing (incident 3)
/// and never answered.
#[test]
fn node_local_dns_answers_one_pod_and_the_misrouted_one_gets_nothing() {
    let Some((out, seen)) = tracer_tests::trace_scenario_out("dns_node_local", &[]) else {
        return;
    };
    let dump = out.dump();
    let k8s = "kubernetes.default.svc.cluster.local";
    assert!(
        seen.contains(&format!("{k8s} NoError 1 answers"))
            && seen.contains("nope.default.svc.cluster.local NameError 0 answers")
            && seen.contains(&format!("{k8s} no answer")),
        "{seen}"
    );
    let from = |src: &str| {
        let flows: Vec<&Value> = out
            .final_flows()
            .into_iter()
            .filter(|f| f["proto"] == "udp" && f["original"]["src"] == src)
            .collect();
        assert_eq!(flows.len(), 1, "one flow from {src}: {dump}");
        flows[0]
    };
    let query = |f: &Value, name: &str| {
        f["dns"]["queries"]
            .as_array()
            .and_then(|q| q.iter().find(|q| q["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no query {name}: {dump}"))
    };
    let answered = from("10.250.1.2");
    let (kind, reason, where_) = verdict(answered);
    assert_eq!((kind, reason), ("delivered", "local_socket"), "{dump}");
    assert!(where_.ends_with("-node"), "{where_}");
    for (name, _) in tracer_tests::scenarios::NODE_LOCAL_RECORDS {
        let q = query(answered, name);
        assert_eq!(
            (
                &q["qtype"],
                &q["rcode"],
                &q["answer_count"],
                &q["truncated"]
            ),
            (&json!("A"), &json!("NOERROR"), &json!(1), &json!(false)),
            "{name}: {dump}"
        );
    }
    let nx = query(answered, "nope.default.svc.cluster.local");
    assert_eq!(
        (&nx["rcode"], &nx["answer_count"]),
        (&json!("NXDOMAIN"), &json!(0)),
        "{dump}"
    );
    let misrouted = from("10.250.2.2");
    let (kind, reason, where_) = verdict(misrouted);
    assert_eq!(
        (kind, reason),
        ("misrouted", "local_destination_transmitted"),
        "{dump}"
    );
    assert!(
        where_.contains("169.254.25.10 is local (on nodelocaldns) but left via eth0")
            && where_.contains("redirected at tc ingress of lxc1"),
        "{where_}"
    );
    let q = query(misrouted, k8s);
    assert!(q["rcode"].is_null() && q["sent"] == 1, "{dump}");
}

/// A NetworkPolicy default deny (kube-router's pod firewall chain): the
/// rule is named by nftrace and read as the pod it protects.
#[test]
fn network_policy_default_deny_names_the_pod() {
    let Some((f, dump)) = trace("netpol_kube_router", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert!(
        where_.contains("chain KUBE-POD-FW-24CAQJ4LYSAY3PHB, handle ")
            && where_.ends_with(
                ": kube-router: no NetworkPolicy selecting pod shop/web-0 allows this ingress traffic (its default deny)"
            ),
        "{where_}"
    );
    let t = &evidence::of_kind(&f, "nf_rule_traced")[0];
    assert_eq!(
        t["via"],
        serde_json::json!([
            "FORWARD: jump KUBE-ROUTER-FORWARD",
            "KUBE-ROUTER-FORWARD: jump KUBE-POD-FW-24CAQJ4LYSAY3PHB"
        ]),
        "{dump}"
    );
    assert!(
        evidence::of_kind(&f, "network_policy_drop")
            .iter()
            .any(|e| e["enforcer"] == "kube-router"
                && e["pod"] == "shop/web-0"
                && e["direction"] == "ingress"),
        "{dump}"
    );
    let hint = f["verdict"]["hint"].as_str().unwrap();
    assert!(hint.contains("kubectl get networkpolicy"), "{hint}");
}

/// The flow's `service`: read from a map of kube-proxy's nftables table
/// in the router.
fn assert_service(f: &Value, name: &str, kind: &str, map: &str) {
    let s = &f["service"];
    assert_eq!(
        (s["name"].as_str(), s["kind"].as_str()),
        (Some(name), Some(kind)),
        "{f}"
    );
    assert_eq!(s["source"]["kind"], "nftables_map", "{f}");
    assert_eq!(
        (s["source"]["family"].as_str(), s["source"]["map"].as_str()),
        (Some("ip"), Some(map)),
        "{f}"
    );
    assert!(evidence::field(s, "netns").ends_with("-router"), "{f}");
}

/// kube-proxy's nftables mode: the verdict names the rule nftrace saw,
/// the verdict-map element and what it means for the Service.
fn kube_nft(name: &str) -> Option<(Value, String, String)> {
    let (f, dump) = trace(name, 80)?;
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert!(where_.contains("; named by nftrace)"), "{where_}");
    assert!(
        evidence::of_kind(&f, "nf_rule_traced")
            .iter()
            .any(|e| e["table"] == "kube-proxy" && e["family"] == "ip"),
        "{dump}"
    );
    let where_ = where_.to_string();
    Some((f, dump, where_))
}

#[test]
fn kube_proxy_nftables_service_without_endpoints() {
    let Some((f, dump, where_)) = kube_nft("kube_nft_no_endpoints") else {
        return;
    };
    // The Service by name, from the no-endpoints map's element comment.
    assert_service(
        &f,
        "default/empty:http",
        "ClusterIP",
        "no-endpoint-services",
    );
    assert!(
        where_.contains("rule `reject` (table ip kube-proxy, chain reject-chain, handle ")
            && where_.contains(
                "sent there by verdict map @no-endpoint-services element `10.245.96.3 . tcp . 80` \"default/empty:http\""
            )
            && where_.ends_with(": kube-proxy: Service default/empty:http has no endpoints, so its rule rejects connections to it"),
        "{where_}"
    );
    let t = &evidence::of_kind(&f, "nf_rule_traced")[0];
    assert_eq!(t["verdict"], "reject", "{dump}");
    assert_eq!(t["element"]["comment"], "default/empty:http", "{dump}");
    // The path to the rule: the jumps that returned are not in it.
    assert_eq!(
        t["via"],
        serde_json::json!([
            "filter-forward: jump service-endpoints-check",
            "service-endpoints-check: goto reject-chain"
        ]),
        "{dump}"
    );
    assert!(
        evidence::of_kind(&f, "kube_service_no_endpoints")
            .iter()
            .any(|e| e["service"] == "default/empty:http"),
        "{dump}"
    );
    assert!(
        f["verdict"]["hint"]
            .as_str()
            .unwrap()
            .contains("endpointslices"),
        "{dump}"
    );
}

#[test]
fn kube_proxy_nftables_names_the_service_and_endpoint_of_a_delivered_flow() {
    let Some((f, dump)) = trace("kube_nft_service_dnat", 80) else {
        return;
    };
    let (kind, reason, _) = verdict(&f);
    assert_eq!((kind, reason), ("delivered", "local_socket"), "{dump}");
    assert_eq!(f["translated"]["dst"], "10.244.2.2", "{dump}");
    // From the service-ips element's chain (`service-HASH-ns/svc/...`).
    assert_service(&f, "default/web:http", "ClusterIP", "service-ips");
    let routed = evidence::of_kind(&f, "kube_service_routed");
    assert!(
        routed.iter().any(|e| e["service"] == "default/web:http"
            && e["endpoint"] == "10.244.2.2:80"
            && evidence::field(e, "netns").ends_with("-router")),
        "{dump}"
    );
    assert!(
        evidence::text(&f)
            .contains("kube-proxy sent it to Service default/web:http, endpoint 10.244.2.2:80"),
        "{dump}"
    );
}

#[test]
fn kube_proxy_nftables_unallocated_cluster_ip() {
    let Some((f, dump, where_)) = kube_nft("kube_nft_unallocated") else {
        return;
    };
    // No Service has the address: none is named.
    assert!(f.get("service").is_none(), "{dump}");
    assert!(
        where_.contains(
            "rule `ip daddr 10.246.96.0/24 drop comment \"Drop traffic to unallocated ClusterIPs\"` (table ip kube-proxy, chain cluster-ips-check, handle "
        ) && where_.ends_with(": kube-proxy: 10.246.96.99 is in the Service CIDR but no Service has it (rule \"Drop traffic to unallocated ClusterIPs\")"),
        "{where_}"
    );
    assert!(
        evidence::of_kind(&f, "kube_cluster_ip_unallocated")
            .iter()
            .any(|e| e["addr"] == "10.246.96.99"),
        "{dump}"
    );
    assert!(
        f["verdict"]["hint"].as_str().unwrap().contains("ClusterIP"),
        "{dump}"
    );
}

#[test]
fn kube_proxy_nftables_load_balancer_source_ranges() {
    let Some((f, dump, where_)) = kube_nft("kube_nft_source_ranges") else {
        return;
    };
    assert_service(&f, "default/lb:http", "LoadBalancer", "firewall-ips");
    assert!(where_.starts_with("netfilter PREROUTING"), "{where_}");
    assert!(
        where_.contains("(table ip kube-proxy, chain firewall-4BQ3ZKGA-default/lb/tcp/http, handle ")
            && where_.contains("verdict map @firewall-ips element `10.243.200.50 . tcp . 80` \"default/lb:http\"")
            && where_.ends_with(": kube-proxy: 10.243.1.2 is not in Service default/lb:http's loadBalancerSourceRanges (its firewall chain drops it)"),
        "{where_}"
    );
    assert!(
        evidence::of_kind(&f, "kube_source_ranges_drop")
            .iter()
            .any(|e| e["service"] == "default/lb:http" && e["src"] == "10.243.1.2"),
        "{dump}"
    );
    assert!(
        f["verdict"]["hint"]
            .as_str()
            .unwrap()
            .contains("loadBalancerSourceRanges"),
        "{dump}"
    );
}

#[test]
fn iptables_drop_in_input_names_the_hook() {
    let Some((f, dump)) = trace("netfilter_input_drop", 8083) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert!(where_.starts_with("netfilter INPUT"), "{where_}");
    assert!(
        where_
            .contains("-server: rule `tcp dport 8083 drop` (table ip filter, chain INPUT, handle ")
            && where_.ends_with("; named by nftrace)"),
        "{where_}"
    );
}

#[test]
fn no_route_names_the_routing_decision_and_the_icmp_sent() {
    let Some((f, dump)) = trace("no_route", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "IP_INNOROUTES"), "{dump}");
    assert!(
        where_.starts_with("routing decision (fib_lookup) in netns"),
        "{where_}"
    );
    assert!(where_.contains("no route to 10.215.9.9"), "{where_}");
    let icmp = f["hops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hook"] == "icmp_send")
        .unwrap_or_else(|| panic!("no icmp_send hop: {dump}"));
    assert_eq!(icmp["fields"]["icmp_type"], 3, "{icmp}");
    assert!(icmp["netns"].as_str().unwrap().ends_with("-router"));
    let failed_lookup = f["hops"].as_array().unwrap().iter().any(|h| {
        h["hook"] == "fib_lookup"
            && h["fields"]["err"].as_i64().unwrap() != 0
            && h["netns"].as_str().unwrap().ends_with("-router")
    });
    assert!(failed_lookup, "{dump}");
}

#[test]
fn routed_through_the_traced_namespace_is_forwarded() {
    let Some((f, dump)) = trace("forwarded", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("forwarded", "routed"), "{dump}");
    assert_eq!(f["verdict"]["dev"], "r0 -> r1", "{dump}");
    assert!(where_.contains("in r0 -> out r1"), "{where_}");
    // Only the router namespace is reported, and tc saw it on both devices.
    for h in f["hops"].as_array().unwrap() {
        assert!(h["netns"].as_str().unwrap().ends_with("-router"), "{h}");
    }
    let hk = hooks(&f);
    assert!(
        hk.contains(&"tc_ingress") && hk.contains(&"tc_egress"),
        "{dump}"
    );
}

#[test]
fn dnat_in_output_is_followed_to_the_backend() {
    let Some((f, dump)) = trace("nat_output", 443) else {
        return;
    };
    let (kind, reason, _) = verdict(&f);
    assert_eq!((kind, reason), ("delivered", "local_socket"), "{dump}");
    assert_eq!(f["original"]["dst"], "10.43.218.1");
    assert_eq!(f["translated"]["dst"], "10.218.2.2", "{dump}");
    assert_eq!(f["translated"]["dport"], 6443);
    assert!(f["nat_at"].is_u64(), "{dump}");
    assert_eq!(f["nat_by"], "netfilter", "{dump}");
    assert!(
        f["replies"].as_u64().unwrap() > 0,
        "replies were associated: {dump}"
    );
}

#[test]
fn udp_query_to_a_listening_socket_is_delivered() {
    let Some((f, dump)) = trace("udp_delivered", 53) else {
        return;
    };
    let (kind, reason, _) = verdict(&f);
    assert_eq!((kind, reason), ("delivered", "local_socket"), "{dump}");
    assert!(hooks(&f).contains(&"sock_queue"), "{dump}");
}

/// `--debug-bpf`: the kernel programs say, through aya-log, why they
/// followed the packet; the verdict is the same. Without it they say
/// nothing (the log calls are dead code to the verifier).
#[test]
fn debug_bpf_shows_why_packets_are_followed() {
    if !tracer_tests::require_privileges("debug_bpf") {
        return;
    }
    let sc = tracer_tests::scenarios::build("nat_output").expect("build");
    let mut args = sc.arg_refs();
    args.push("--debug-bpf");
    let run = tracer_tests::tracer::TracerRun::start(&sc.target, &args).expect("start tracer");
    sc.traffic().expect("traffic");
    let out = run.stop().expect("stop");
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.dump());
    let f = out.flow_to(443);
    assert_eq!(verdict(f).0, "delivered", "{}", out.dump());
    let debug: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("tracer_ebpf"))
        .collect();
    assert!(
        debug
            .iter()
            .any(|l| l.contains("headers match the target as request")),
        "no match decision logged: {debug:#?}\n{}",
        out.dump()
    );
    // OUTPUT's DNAT rewrote the packet: followed by its tracked address or
    // its conntrack entry, and said so.
    assert!(
        debug
            .iter()
            .any(|l| l.contains("(NAT)") || l.contains("conntrack original tuple")),
        "no NAT decision logged: {debug:#?}"
    );
    // Without --debug-bpf there is no such log: every other run's
    // TracerRun::stop refuses it (tracer_tests::tracer).
}

/// Forwarding switched off on the router's ingress device: the verdict
/// names the sysctl, not just the kernel's reason.
#[test]
fn forwarding_disabled_names_the_sysctl() {
    let Some((f, dump)) = trace("forwarding_disabled", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "IP_INADDRERRORS"), "{dump}");
    assert!(
        where_.contains("-router: forwarding is disabled on r0 (net.ipv4.conf.r0.forwarding = 0)"),
        "{where_}"
    );
    assert!(
        evidence::of_kind(&f, "forwarding_disabled")
            .iter()
            .any(|e| e["dev"] == "r0" && e["family"] == "ipv4"),
        "{dump}"
    );
    assert!(
        f["verdict"]["hint"]
            .as_str()
            .unwrap()
            .contains("sysctl -w net.ipv4.conf.<dev>.forwarding=1"),
        "{dump}"
    );
}

/// A path-MTU black hole: the handshake is delivered, the data is not;
/// the verdict is the drop, with both MTUs and the ICMP that never got
/// back.
#[test]
fn mtu_black_hole_names_the_link_and_its_mtu() {
    let Some((f, dump)) = trace("mtu_black_hole", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "PKT_TOO_BIG"), "{dump}");
    assert!(
        where_.contains("-router: packets larger than the MTU 1280 of r1 (DF set)"),
        "{where_}"
    );
    let mtu = evidence::of_kind(&f, "mtu_exceeded");
    assert!(
        mtu.iter().any(|e| e["dev"] == "r1"
            && e["mtu"] == 1280
            && e["in_dev"] == "r0"
            && e["in_mtu"] == 1500
            && e["drops"].as_u64().unwrap() >= 2
            && e["icmp_sent"].as_u64().unwrap() >= 1),
        "{dump}"
    );
    assert!(
        f["verdict"]["hint"]
            .as_str()
            .unwrap()
            .contains("path-MTU black hole"),
        "{dump}"
    );
}

/// Strict rp_filter with asymmetric routing: the verdict names the mode
/// and where the route back goes, and no "hook unavailable" line for the
/// rp_filter hook (the fib tracepoint saw the lookup).
#[test]
fn rp_filter_names_the_route_back() {
    let Some((f, dump)) = trace("rp_filter_strict", 53) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "IP_RPFILTER"), "{dump}");
    assert!(
        where_.contains("10.230.2.77 came in by r0 (rp_filter = 1, strict), but the route back to 10.230.2.77 leaves by r1"),
        "{where_}"
    );
    assert!(
        evidence::of_kind(&f, "rp_filter_mismatch")
            .iter()
            .any(|e| e["dev"] == "r0" && e["mode"] == 1 && e["back_dev"] == "r1"),
        "{dump}"
    );
    assert!(
        evidence::of_kind(&f, "func_hook_unavailable").is_empty(),
        "{dump}"
    );
}

/// A server bound to 127.0.0.1:53 only, queried on another address: the
/// verdict says where the port is bound.
#[test]
fn no_socket_names_where_the_port_is_bound() {
    let Some((f, dump)) = trace("dns_bound_elsewhere", 53) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NO_SOCKET"), "{dump}");
    assert!(
        where_.contains("-server: nothing listens on udp 10.231.2.2:53 (port 53 is bound there on 127.0.0.1:53 only)"),
        "{where_}"
    );
    assert!(
        evidence::of_kind(&f, "listens_elsewhere")
            .iter()
            .any(|e| e["bound"][0]["addr"] == "127.0.0.1"),
        "{dump}"
    );
    assert!(
        f["verdict"]["hint"]
            .as_str()
            .unwrap()
            .contains("not on the address the packet was sent to"),
        "{dump}"
    );
}

/// A UDP server that never reads, and a burst: the verdict is the full
/// receive buffer, with the socket's own counters.
#[test]
fn full_receive_buffer_is_named() {
    let Some((f, dump)) = trace("udp_rcvbuf_full", 53) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "SOCKET_RCVBUFF"), "{dump}");
    assert!(
        where_.contains("-server: the receive buffer of the udp socket 10.235.2.2:53 is full"),
        "{where_}"
    );
    let full = evidence::of_kind(&f, "socket_buffer_full");
    assert!(
        full.iter().any(|e| e["dropped"].as_u64().unwrap() > 0
            && e["delivered"].as_u64().unwrap() > 0
            && e["socket_drops"].as_u64().unwrap_or(0) > 0),
        "{dump}"
    );
}

/// IPv6 forwarding off: ip6_forward()'s drop names the global sysctl.
#[test]
fn ipv6_forwarding_disabled_names_the_sysctl() {
    let Some((f, dump)) = trace("forwarding_disabled_v6", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "IP_INADDRERRORS"), "{dump}");
    assert!(
        where_.contains("-router: forwarding is disabled on r0 (net.ipv6.conf.all.forwarding = 0)"),
        "{where_}"
    );
    assert!(
        evidence::of_kind(&f, "forwarding_disabled")
            .iter()
            .any(|e| e["family"] == "ipv6"),
        "{dump}"
    );
}

/// A full conntrack table: netfilter's drop is conntrack's own (no rule's
/// counter moved), named with the router's count, the limit and
/// conntrack's drop counter.
#[test]
fn conntrack_table_full_names_count_and_max() {
    let Some((f, dump)) = trace("conntrack_full", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert!(
        where_.starts_with("netfilter PREROUTING (nf_hook_slow) in netns")
            && where_.contains("-router: the conntrack table is full (nf_conntrack_count "),
        "{where_}"
    );
    let full = evidence::of_kind(&f, "conntrack_full");
    assert!(
        full.iter().any(|e| {
            let n = |k: &str| e[k].as_u64().unwrap();
            n("max") > 0 && n("entries") >= n("max") && n("drop") > 0
        }),
        "{dump}"
    );
    assert!(!evidence::has(&f, "nf_rule_moved"), "{dump}");
    let hint = f["verdict"]["hint"].as_str().unwrap();
    assert!(hint.contains("nf_conntrack_max"), "{hint}");
}

/// A conntrack insertion failure after source NAT to one port: the
/// first flow is answered; the second, given the same reply tuple, is
/// dropped where conntrack confirms it, and the verdict names the clash,
/// the tuple, the SNAT address and conntrack's insert_failed counter, not
/// a full table.
#[test]
fn conntrack_snat_clash_names_the_taken_reply_tuple() {
    let Some((out, seen)) = tracer_tests::trace_scenario_out("conntrack_snat_clash", &[]) else {
        return;
    };
    let dump = out.dump();
    let flows = out.final_flows();
    let kinds: Vec<&str> = flows
        .iter()
        .map(|f| f["verdict"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(flows.len(), 2, "client saw {seen:?}\n{dump}");
    assert!(kinds.contains(&"delivered"), "{kinds:?}\n{dump}");
    let f = flows
        .iter()
        .find(|f| f["verdict"]["kind"] == "dropped")
        .unwrap_or_else(|| panic!("no dropped flow: {kinds:?}\n{dump}"));
    let (_, reason, where_) = verdict(f);
    assert_eq!(reason, "NETFILTER_DROP", "{dump}");
    assert!(
        where_.starts_with("netfilter POSTROUTING (nf_hook_slow) in netns")
            && where_.contains("-router: conntrack could not insert this connection: its reply tuple 10.247.2.2:53 -> 10.247.2.1:5000 (after source NAT to 10.247.2.1:5000) is another connection's (insert_failed "),
        "{where_}"
    );
    let clash = evidence::of_kind(f, "conntrack_insert_failed");
    assert!(
        clash.iter().any(
            |e| e["reply_src"] == json!({"addr": "10.247.2.2", "port": 53})
                && e["reply_dst"] == json!({"addr": "10.247.2.1", "port": 5000})
                && e["snat"] == true
                && e["dnat"] == false
                && e["insert_failed"].as_u64().unwrap() >= 1
        ),
        "{dump}"
    );
    assert!(!evidence::has(f, "conntrack_full"), "{dump}");
    let hint = f["verdict"]["hint"].as_str().unwrap();
    assert!(hint.contains("--random-fully"), "{hint}");
}

/// A drop in the endpoint's namespace after DNAT is named by nftrace:
/// tracer traces the endpoint it learnt from the translation.
#[test]
fn nftrace_names_a_rule_in_the_endpoint_namespace_after_dnat() {
    let Some((f, dump)) = trace("nftrace_endpoint_drop", 80) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert_eq!(f["translated"]["dst"], "10.221.2.2", "{dump}");
    assert!(
        where_.starts_with("netfilter INPUT (")
            && where_.contains("-server: rule `tcp dport 8080 drop comment \"pod firewall\"` (table inet podfw, chain input"),
        "{where_}"
    );
    assert!(
        evidence::of_kind(&f, "nf_rule_traced")
            .iter()
            .any(|e| e["table"] == "podfw" && e["chain"] == "input" && e["hook"] == "INPUT"),
        "{dump}"
    );
}

/// A reply dropped by a rule is named by nftrace: tracer traces the
/// followed target's replies too.
#[test]
fn nftrace_names_the_rule_that_dropped_the_replies() {
    let Some((f, dump)) = trace("nftrace_reply_drop", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert!(
        where_.starts_with("netfilter FORWARD (")
            && where_.contains("-router: rule `ip saddr 10.223.2.2 tcp sport 8080 drop comment \"no replies\"` (table inet fw, chain replies")
            && where_.ends_with(": the server's reply was dropped there: the client never completed its handshake"),
        "{where_}"
    );
    assert!(
        evidence::of_kind(&f, "nf_rule_traced")
            .iter()
            .any(|e| e["table"] == "fw" && e["chain"] == "replies" && e["hook"] == "FORWARD"),
        "{dump}"
    );
    assert!(evidence::has(&f, "destination_answered"), "{dump}");
}

/// A listener that never accepts, its queue full: the SYNs it took and
/// never answered are dropped (no drop reason: tcp_conn_request() consumes
/// them), named with the queue, the backlog and the namespace's counters.
#[test]
fn listen_overflow_names_the_accept_queue() {
    let Some((f, dump)) = trace("listen_overflow", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "listen_overflow"), "{dump}");
    assert!(
        where_.starts_with("tcp_conn_request in netns")
            && where_.contains(
                "-server: the accept queue of the tcp listener 10.238.2.2:8080 is full (1 waiting, backlog 0)"
            ),
        "{where_}"
    );
    let full = evidence::of_kind(&f, "listen_queue_full");
    assert!(
        full.iter().any(|e| e["syns"].as_u64().unwrap() > 0
            && e["overflows"].as_u64().unwrap_or(0) > 0
            && e["listen_drops"].as_u64().unwrap_or(0) > 0),
        "{dump}"
    );
    let hint = f["verdict"]["hint"].as_str().unwrap();
    assert!(hint.contains("accept queue is full"), "{hint}");
}

/// No route after policy rules: the verdict names the rules that chose
/// the tables, the empty table the VIP's rule points at, and main.
fn policy_no_route(name: &str, vip: &str, rule: &str) {
    let Some((f, dump)) = trace(name, 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "IP_INNOROUTES"), "{dump}");
    assert!(
        where_.starts_with("routing decision (fib_lookup) in netns")
            && where_.contains(&format!("-router: no route to {vip}"))
            && where_.contains(" after rules 0: from all lookup local (")
            && where_.contains(&format!(
                ", {rule} lookup 100 (empty), 32766: from all lookup main ("
            )),
        "{where_}"
    );
    let ev = evidence::of_kind(&f, "no_route_after_rules");
    assert!(
        ev.iter().any(|e| e["refused"] == false
            && e["dst"] == vip
            && e["rules"].as_array().is_some_and(|r| r.len() >= 3)),
        "{dump}"
    );
    let hint = f["verdict"]["hint"].as_str().unwrap();
    assert!(hint.contains("ip rule"), "{hint}");
}

#[test]
fn no_route_after_policy_rules_names_them() {
    policy_no_route(
        "policy_no_route",
        "10.239.9.9",
        "100: from all to 10.239.9.0/24",
    );
}

#[test]
fn ipv6_no_route_after_policy_rules_names_them() {
    policy_no_route(
        "policy_no_route_v6",
        "fd00:239:9::9",
        "100: from all to fd00:239:9::/64",
    );
}

/// The IPv6 path-MTU black hole: ip6_forward()'s PKT_TOO_BIG drops, named
/// with the link and its MTU (no DF in IPv6: routers never fragment).
#[test]
fn ipv6_mtu_black_hole_names_the_link_and_its_mtu() {
    let Some((f, dump)) = trace("mtu_black_hole_v6", 8080) else {
        return;
    };
    // Debian's 5.10 completed the transfer in this scene (20000 bytes
    // sent, verdict delivered): the black hole does not form there, and
    // ip6_forward()'s drop reason could not be inferred anyway (the ICMPv6
    // packet-too-big that would tell is not traced). Not yet understood.
    if !tracer_tests::kernel_at_least(5, 17)
        && !tracer_tests::require_kernel_feature(
            "ipv6_mtu_black_hole_names_the_link_and_its_mtu",
            Some(format!(
                "before 5.17 (no drop reasons) the IPv6 black hole scene does not hold: verdict {}",
                f["verdict"]["kind"]
            )),
        )
    {
        return;
    }
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "PKT_TOO_BIG"), "{dump}");
    assert!(
        where_.starts_with("ip6_forward in netns")
            && where_.contains("-router: packets larger than the MTU 1280 of r1 dropped "),
        "{where_}"
    );
    let mtu = evidence::of_kind(&f, "mtu_exceeded");
    assert!(
        mtu.iter().any(|e| e["dev"] == "r1"
            && e["mtu"] == 1280
            && e["in_dev"] == "r0"
            && e["in_mtu"] == 1500
            && e["family"] == "ipv6"
            && e["drops"].as_u64().unwrap() >= 2),
        "{dump}"
    );
    assert!(
        evidence::text(&f).contains("ICMPv6 \"packet too big\" (not traced)"),
        "{dump}"
    );
    let hint = f["verdict"]["hint"].as_str().unwrap();
    assert!(hint.contains("path-MTU black hole"), "{hint}");
}

/// A reply dropped as conntrack-INVALID where its requests never passed
/// (asymmetric routing): the rule, conntrack's counter and why.
#[test]
fn conntrack_invalid_reply_names_asymmetric_routing() {
    let Some((f, dump)) = trace("conntrack_invalid_asymmetric", 8080) else {
        return;
    };
    let (kind, reason, where_) = verdict(&f);
    assert_eq!((kind, reason), ("dropped", "NETFILTER_DROP"), "{dump}");
    assert!(
        where_.starts_with("netfilter FORWARD")
            && where_.contains("-router: rule `xt match \"conntrack\" drop` (table ip filter, chain FORWARD, handle ")
            // nftrace follows the target's replies.
            && where_.contains("; named by nftrace): conntrack found the reply INVALID: the requests never passed this namespace (asymmetric routing)"),
        "{where_}"
    );
    let inv = evidence::of_kind(&f, "conntrack_invalid");
    assert!(
        inv.iter().any(|e| e["dir"] == "reply"
            && e["requests_seen"] == false
            && e["invalid"].as_u64().unwrap_or(0) > 0),
        "{dump}"
    );
    let hint = f["verdict"]["hint"].as_str().unwrap();
    assert!(hint.contains("asymmetric routing"), "{hint}");
}

/// Overlays this host cannot make, run in the kernel-matrix guests
/// (tests/src/overlays.rs): Calico's IPIP and Cilium's Geneve tunnel
/// mode carry a connection from a pod to a pod on another node. The flow
/// is followed into the tunnel (its outer packet, IP protocol 4 or UDP
/// 6081) and out of it on the far node: delivered, with the tunnel named.
#[test]
fn ipip_and_geneve_overlays_are_followed_across() {
    for (name, kind, tunnel, dev) in [
        ("overlay_ipip", "ipip", "IPIP", "tunl0"),
        ("overlay_geneve", "geneve", "Geneve", "cilium_geneve"),
    ] {
        if !tracer_tests::require_privileges("ipip_and_geneve_overlays_are_followed_across") {
            return;
        }
        if !tracer_tests::require_kernel_feature(
            &format!("ipip_and_geneve_overlays_are_followed_across [{kind}]"),
            tracer_tests::overlays::missing_device_kind(kind),
        ) {
            continue;
        }
        let Some((f, dump)) = trace(name, 8080) else {
            return;
        };
        let (kind_said, reason, _) = verdict(&f);
        assert_eq!(
            (kind_said, reason),
            ("delivered", "local_socket"),
            "{name}: {dump}"
        );
        let enc = evidence::of_kind(&f, "encapsulated");
        assert!(
            enc.iter().any(|e| e["tunnel"] == tunnel
                && e["dev"] == dev
                && e["netns"].as_str().is_some_and(|n| n.ends_with("-node1"))
                && e["out_netns"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-node2"))),
            "{name}: {dump}"
        );
    }
}
