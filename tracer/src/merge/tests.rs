//! Merge on synthetic `follow -o json` output: incident 2's shape (a
//! router forwards to a master that drops at INPUT; the worker never sees
//! it), with NAT, clock offsets, runs cut short and a different target.

use serde_json::{Value, json};

use super::*;

const MS: i64 = 1_000_000;
/// A wall-clock base: 2026-01-01.
const T0: i64 = 1_767_225_600_000_000_000;

fn tuple(src: &str, sport: u16, dst: &str, dport: u16) -> Value {
    json!({"src": src, "sport": sport, "dst": dst, "dport": dport})
}

const SYN: (&str, u16, &str, u16) = ("10.222.1.2", 40000, "10.16.222.1", 80);

fn hop(at_us: i64, hook: &str, netns: &str, dev: &str, dir: &str, t: Value) -> Value {
    json!({"t_us": 0.0, "ts_ns": (1_000_000_000 + at_us) * 1000, "unix_ns": T0 + at_us * 1000, "hook": hook,
        "netns": netns, "netns_inode": 1, "dev": dev, "ifindex": 1, "dir": dir,
        "tuple": t, "skb": "0x1", "detail": "", "fields": {"type": "packet"}})
}

fn flow(node: &str, id: u64, verdict: Value, hops: Vec<Value>) -> Value {
    let original = hops[0]["tuple"].clone();
    json!({"type": "flow", "id": id, "final": true, "node": node,
        "clock": {"ktime_to_unix_ns": T0, "uncertainty_ns": 40},
        "proto": "tcp", "original": original, "translated": null, "nat_at": null,
        "nat_by": null, "verdict": verdict, "packets": 1, "replies": 0,
        "counted_in_kernel": 0, "hops": hops})
}

fn verdict(kind: &str, reason: &str, where_: &str, evidence: Vec<Value>) -> Value {
    json!({"kind": kind, "reason": reason, "where": where_, "hint": "", "netns": "",
        "dev": null, "incomplete": false, "reason_inferred": false, "evidence": evidence})
}

fn summary(node: &str, target: &str) -> Value {
    json!({"type": "summary", "node": node, "target": target, "stop": "interrupted",
        "lost_events": 0, "clock": {"ktime_to_unix_ns": T0, "uncertainty_ns": 40, "drift_ns": 0}})
}

fn lines(v: &[Value]) -> String {
    v.iter().map(|l| l.to_string() + "\n").collect()
}

fn syn() -> Value {
    tuple(SYN.0, SYN.1, SYN.2, SYN.3)
}

fn router() -> Vec<Value> {
    let hops = vec![
        hop(0, "tc_egress", "laptop", "eth0", "request", syn()),
        hop(10, "tc_ingress", "router", "lan0", "request", syn()),
        hop(20, "tc_egress", "router", "k0", "request", syn()),
    ];
    vec![
        flow(
            "router",
            1,
            verdict("forwarded", "forwarded", "router: lan0 -> k0", vec![]),
            hops,
        ),
        summary("router", "10.16.222.1:80"),
    ]
}

fn master_flow(shift_us: i64) -> Value {
    let hops = vec![
        hop(
            30 + shift_us,
            "tc_ingress",
            "master",
            "eth0",
            "request",
            syn(),
        ),
        hop(40 + shift_us, "drop", "master", "", "request", syn()),
    ];
    let ev = vec![
        json!({"kind": "nf_hook_drop", "hook": "ipv4 INPUT", "backend": "fentry", "text": ""}),
        json!({"kind": "nf_rule_traced", "family": "ip", "table": "filter",
            "chain": "KUBE-EXTERNAL-SERVICES", "handle": 4,
            "rule": "ip daddr 10.16.222.1 tcp dport 80 drop", "text": ""}),
    ];
    flow(
        "master",
        7,
        verdict(
            "dropped",
            "NETFILTER_DROP",
            "netfilter INPUT in netns master",
            ev,
        ),
        hops,
    )
}

fn master(shift_us: i64) -> Vec<Value> {
    vec![master_flow(shift_us), summary("master", "10.16.222.1:80")]
}

fn worker() -> Vec<Value> {
    vec![summary("worker", "10.16.222.1:80")]
}

/// A worker that traced only from `from_us` to `to_us` (of T0).
fn worker_traced(from_us: i64, to_us: i64) -> Vec<Value> {
    let mut w = worker();
    w[0]["traced_from_unix_ns"] = json!(T0 + from_us * 1000);
    w[0]["traced_to_unix_ns"] = json!(T0 + to_us * 1000);
    w
}

fn merged(files: &[(&str, Vec<Value>)]) -> Result<Merged, MergeError> {
    let runs = files
        .iter()
        .map(|(name, l)| read_run(name, &lines(l)))
        .collect::<Result<Vec<_>, _>>()?;
    merge(runs)
}

#[test]
fn one_path_across_nodes_with_one_verdict_and_each_nodes_beneath() {
    let m = merged(&[
        ("r.json", router()),
        ("m.json", master(0)),
        ("w.json", worker()),
    ])
    .unwrap();
    assert_eq!(m.paths.len(), 1, "{m:#?}");
    let p = &m.paths[0];
    assert_eq!(
        (p.verdict.kind.as_str(), p.verdict.node.as_str()),
        ("dropped", "master")
    );
    assert_eq!(
        p.verdict.text,
        "forwarded by router, dropped on master at INPUT by rule \"ip daddr 10.16.222.1 tcp dport 80 drop\" (chain KUBE-EXTERNAL-SERVICES), never reached worker"
    );
    let nodes: Vec<&str> = p.nodes.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(nodes, ["router", "master"]);
    assert_eq!(p.nodes[1].verdict.reason, "NETFILTER_DROP");
    assert_eq!(p.not_reached, ["worker"]);
    assert!(p.unknown.is_empty());
    // No offset: the clocks agree with the crossing, nothing corrected.
    assert_eq!(m.clocks[1].basis, "one_way");
    assert_eq!(m.clocks[1].correction_ns, 0);
    assert_eq!(m.clocks[2].basis, "none");
    let order: Vec<(&str, &str)> = p
        .hops
        .iter()
        .map(|h| (h.node.as_str(), h.hook.as_str()))
        .collect();
    assert_eq!(
        order[2..],
        [
            ("router", "tc_egress"),
            ("master", "tc_ingress"),
            ("master", "drop")
        ]
    );
}

/// The master's clock 400 ms behind: its receipt would come before the
/// router's sending. Merge shifts it by the least that orders them, and
/// says it is a bound.
#[test]
fn a_clock_400ms_behind_is_corrected_and_hops_ordered() {
    let m = merged(&[("r.json", router()), ("m.json", master(-400_000))]).unwrap();
    let c = &m.clocks[1];
    assert_eq!((c.node.as_str(), c.basis), ("master", "one_way"));
    // Sent by the router's way out (k0) at 20 us, received at 30 us - 400
    // ms: at least 400 ms - 10 us.
    assert_eq!(c.correction_ns, 400 * MS - 10_000);
    assert!((c.skew_ms + 399.99).abs() < 1e-6, "{c:?}");
    assert_eq!(c.uncertainty_ns, None);
    let p = &m.paths[0];
    let nodes: Vec<&str> = p.hops.iter().map(|h| h.node.as_str()).collect();
    assert_eq!(nodes, ["router", "router", "router", "master", "master"]);
    assert!(p.hops.windows(2).all(|w| w[0].unix_ns <= w[1].unix_ns));
    assert_eq!(p.verdict.node, "master");
}

/// With a reply coming back, crossings both ways bound the skew on both
/// sides: the estimate is their middle, give or take half the width.
#[test]
fn replies_bound_the_skew_on_both_sides() {
    let reply = tuple(SYN.2, SYN.3, SYN.0, SYN.1);
    let shift = 300_000; // the master 300 ms ahead
    let mut r = router();
    r[0]["hops"].as_array_mut().unwrap().push(hop(
        80,
        "tc_ingress",
        "router",
        "k0",
        "reply",
        reply.clone(),
    ));
    let mut m = master(shift);
    m[0]["verdict"] = verdict("delivered", "delivered", "socket in netns master", vec![]);
    m[0]["hops"].as_array_mut().unwrap().push(hop(
        70 + shift,
        "tc_egress",
        "master",
        "eth0",
        "reply",
        reply,
    ));
    let m = merged(&[("r.json", r), ("m.json", m)]).unwrap();
    let c = &m.clocks[1];
    assert_eq!(c.basis, "two_way");
    // Request: sent by k0 at 20 us, received at 30 us + shift; reply: sent
    // at 70 us + shift, received at 80 us: the correction is within
    // [-shift - 10 us, -shift + 10 us].
    assert_eq!(c.min_ns, Some(-300 * MS - 10_000));
    assert_eq!(c.max_ns, Some(-300 * MS + 10_000));
    assert_eq!(c.correction_ns, -300 * MS);
    assert!((c.skew_ms - 300.0).abs() < 1e-9, "{c:?}");
    assert_eq!(c.uncertainty_ns, Some(10_000 + 80));
    assert!(!c.inconsistent);
    let p = &m.paths[0];
    assert_eq!(p.verdict.text, "forwarded by router, delivered on master");
}

/// The router DNATs; the master sees only the translated tuple: the
/// router's flow holds both, and links them.
#[test]
fn nat_learnt_on_one_node_links_the_next() {
    let dnat = tuple(SYN.0, SYN.1, "10.222.3.10", 8080);
    let mut r = router();
    r[0]["hops"][2]["tuple"] = dnat.clone();
    r[0]["translated"] = dnat.clone();
    r[0]["nat_by"] = json!("netfilter");
    let mut m = master(0);
    for h in m[0]["hops"].as_array_mut().unwrap() {
        h["tuple"] = dnat.clone();
    }
    m[0]["original"] = dnat;
    let m = merged(&[("r.json", r), ("m.json", m)]).unwrap();
    assert_eq!(m.paths.len(), 1, "{m:#?}");
    let p = &m.paths[0];
    assert_eq!(p.nat.len(), 1);
    assert_eq!(p.nat[0].node, "router");
    assert_eq!(
        p.nat[0].to.endpoints(),
        "10.222.1.2:40000 -> 10.222.3.10:8080"
    );
    assert_eq!(p.original.endpoints(), "10.222.1.2:40000 -> 10.16.222.1:80");
}

/// The flow's packets from another source port.
fn from_port(flow: &mut Value, sport: u16) {
    flow["original"]["sport"] = json!(sport);
    for h in flow["hops"].as_array_mut().unwrap() {
        h["tuple"]["sport"] = json!(sport);
    }
}

/// The first packet's passage through a node ends where it comes back in
/// to a namespace it left (through another node) or a new packet starts.
#[test]
fn a_packet_leaves_a_node_where_its_passage_ends() {
    let h = |t, out, ns, dev| (t, out, ns, dev);
    // Sent by the client, through the LAN's bridge to node1, back in from
    // node1 and out to node2: it left the node at 3.
    let back = [
        h(1, true, "client", "eth0"),
        h(2, false, "lan", "p-client"),
        h(3, true, "lan", "p-node1"),
        h(5, false, "lan", "p-node1"),
        h(6, true, "lan", "p-node2"),
    ];
    assert_eq!(skew::exit_time_for_test(&back), Some(3));
    // A second packet (a retransmission) starts a new passage.
    let again = [
        h(1, true, "laptop", "eth0"),
        h(2, false, "router", "lan0"),
        h(3, true, "router", "k0"),
        h(9, true, "laptop", "eth0"),
        h(10, false, "router", "lan0"),
        h(11, true, "router", "k0"),
    ];
    assert_eq!(skew::exit_time_for_test(&again), Some(3));
    assert_eq!(skew::exit_time_for_test(&[h(1, false, "a", "x")]), None);
}

/// A route lookup's hop has no ports: it joins no flows.
#[test]
fn route_lookups_join_no_flows() {
    let mut r = router();
    r[0]["hops"].as_array_mut().unwrap().push(hop(
        5,
        "fib_lookup",
        "router",
        "",
        "request",
        tuple(SYN.0, 0, SYN.2, 0),
    ));
    let mut m = master(0);
    from_port(&mut m[0], 40001);
    m[0]["hops"].as_array_mut().unwrap().push(hop(
        35,
        "fib_lookup",
        "master",
        "",
        "request",
        tuple(SYN.0, 0, SYN.2, 0),
    ));
    let m = merged(&[("r.json", r), ("m.json", m)]).unwrap();
    assert_eq!(m.paths.len(), 2, "{m:#?}");
}

#[test]
fn unrelated_flows_are_separate_paths() {
    let mut m = master(0);
    from_port(&mut m[0], 40001);
    let m = merged(&[("r.json", router()), ("m.json", m)]).unwrap();
    assert_eq!(m.paths.len(), 2);
    assert_eq!(m.paths[0].not_reached, ["master"]);
    assert_eq!(m.paths[1].not_reached, ["router"]);
}

/// A node that was not tracing while the path went cannot say it never
/// got there.
#[test]
fn a_run_not_tracing_then_is_not_known() {
    let m = merged(&[
        ("r.json", router()),
        ("m.json", master(0)),
        ("w.json", worker_traced(-10, 100)),
    ])
    .unwrap();
    assert_eq!(m.paths[0].not_reached, ["worker"]);
    let m = merged(&[
        ("r.json", router()),
        ("m.json", master(0)),
        ("w.json", worker_traced(25, 100)),
    ])
    .unwrap();
    let p = &m.paths[0];
    assert!(p.not_reached.is_empty(), "{p:#?}");
    assert!(
        p.unknown[0]
            .why
            .starts_with("worker was not tracing all the while"),
        "{p:#?}"
    );
    let text = &p.verdict.text;
    assert!(
        text.ends_with("not known whether it reached worker"),
        "{text}"
    );
}

/// A run cut short (no summary) is reported; where it did not see the
/// path, that is not known, not "never reached".
#[test]
fn a_run_cut_short_is_reported_not_guessed() {
    let mut w = worker();
    w.clear();
    let mut other = master_flow(0);
    other["node"] = json!("worker");
    other["final"] = json!(false);
    from_port(&mut other, 40009);
    w.push(other);
    let m = merged(&[("r.json", router()), ("m.json", master(0)), ("w.json", w)]).unwrap();
    assert!(!m.runs[2].complete);
    assert!(
        m.runs[2].problems[0].starts_with("cut short"),
        "{:?}",
        m.runs[2]
    );
    let p = &m.paths[0];
    assert!(p.not_reached.is_empty(), "{p:#?}");
    assert_eq!(p.unknown[0].node, "worker");
    assert!(p.unknown[0].why.contains("cut short"), "{p:#?}");
    let text = &p.verdict.text;
    assert!(
        text.ends_with("not known whether it reached worker"),
        "{text}"
    );
}

#[test]
fn a_run_of_another_target_is_reported_and_left_out() {
    let mut w = master(0);
    w[1] = summary("worker", "10.16.222.2:80");
    w[0]["node"] = json!("worker");
    let m = merged(&[("r.json", router()), ("m.json", master(0)), ("w.json", w)]).unwrap();
    assert!(!m.runs[2].merged);
    assert!(
        m.runs[2].problems[0].contains("a different target"),
        "{:?}",
        m.runs[2]
    );
    assert_eq!(m.paths.len(), 1);
    assert_eq!(m.paths[0].nodes.len(), 2);
    assert_eq!(m.clocks.len(), 2);
}

#[test]
fn bad_inputs_are_one_clear_error() {
    let err = |name: &str, text: &str| read_run(name, text).unwrap_err().to_string();
    assert_eq!(err("a", ""), "a: empty: no tracer JSON records");
    assert_eq!(err("a", "\n  \n"), "a: empty: no tracer JSON records");
    assert!(err("a", "hello\n").starts_with("a:1: not tracer JSON"));
    assert!(err("a", "{\"x\":1}\n").contains("without \"type\""));
    assert!(err("a", "{\"type\":\"merge\"}\n").contains("type \"merge\""));
    let e = err("a", "{\"type\":\"flow\",\"id\":1}\n");
    assert!(
        e.ends_with(": a bad flow record (missing field `final`)"),
        "{e}"
    );
    // Hops without wall-clock times: a tracer before --node.
    let mut old = router();
    for h in old[0]["hops"].as_array_mut().unwrap() {
        h.as_object_mut().unwrap().remove("unix_ns");
    }
    assert!(err("old", &lines(&old)).contains("no wall-clock times"));
    let two = merged(&[("a.json", router()), ("b.json", router())]).unwrap_err();
    assert_eq!(
        two.to_string(),
        "a.json and b.json both name node router: give each run its own `--node`"
    );
    assert!(matches!(
        merged(&[("a.json", router())]),
        Err(MergeError::TooFew)
    ));
}

/// A run killed while printing a line: the partial last line is left
/// out, the run read as cut short; a whole last line without its newline
/// is kept.
#[test]
fn a_last_line_cut_in_the_middle_is_left_out() {
    assert_eq!(super::whole_lines("{\"a\":1}\n{\"b\":"), "{\"a\":1}\n");
    assert_eq!(
        super::whole_lines("{\"a\":1}\n{\"b\":2}"),
        "{\"a\":1}\n{\"b\":2}"
    );
    assert_eq!(super::whole_lines("{\"a"), "");
    assert_eq!(super::whole_lines("x\n"), "x\n");
}

/// A hop dated beyond what merge can correct without wrapping (an
/// edited or corrupt file): one line saying which, not a silent wrap.
#[test]
fn an_out_of_range_unix_ns_is_refused() {
    let line = r#"{"type":"flow","id":1,"final":true,"proto":"tcp","original":{"src":"10.0.0.1","dst":"10.0.0.2","sport":1,"dport":80},"verdict":{"kind":"delivered","reason":"x","where":"y"},"hops":[{"ts_ns":1,"unix_ns":9223372036854775807,"hook":"h","netns":"n","dir":"request","tuple":{"src":"10.0.0.1","dst":"10.0.0.2","sport":1,"dport":80}}]}"#;
    let e = read_run("a.json", line).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a.json:1: hop unix_ns 9223372036854775807 is out of range (wall-clock ns from 1970 to 2200)"
    );
}
