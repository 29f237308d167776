//! One story across nodes: incidents 1 and 2 rebuilt as several "nodes"
//! (groups of the scene's namespaces), one `tracer follow --netns ...
//! --node NAME -o json` per node, side by side, then `tracer merge`.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use std::process::Command;

use serde_json::Value;
use tracer_tests::{
    require_privileges,
    scenarios::{self, Scenario, ScratchDir},
    tracer::{TracerRun, tracer_bin},
};

/// Start one tracer per node (its namespaces by role), run `traffic`,
/// stop them all; write each node's JSON to `dir` and return the files.
fn trace_nodes(
    sc: &Scenario,
    nodes: &[(&str, &[&str])],
    dir: &std::path::Path,
    traffic: impl FnOnce() -> String,
) -> Vec<std::path::PathBuf> {
    let mut runs = Vec::new();
    for (node, roles) in nodes {
        let mut args: Vec<String> = sc.args.clone();
        for r in *roles {
            args.extend(["--netns".into(), sc.ns(r).name.clone()]);
        }
        args.extend(["--node".into(), (*node).to_string()]);
        let rec = dir.join(format!("{node}.rec"));
        args.extend(["--record".into(), rec.display().to_string()]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        runs.push(TracerRun::start(&sc.target, &refs).expect("start tracer"));
    }
    let seen = traffic();
    eprintln!("{}: client saw {seen:?}", sc.name);
    let mut files = Vec::new();
    for ((node, _), mut run) in nodes.iter().zip(runs) {
        let out = run.stop_raw().expect("stop tracer");
        assert!(
            run.status.is_some_and(|s| s.success()),
            "tracer for {node} failed: {}",
            run.stderr
        );
        let f = dir.join(format!("{node}.json"));
        std::fs::write(&f, out).unwrap();
        files.push(f);
        // TRACER_KEEP_RECORDINGS=DIR: each node's recording as
        // DIR/nodes/SCENARIO-NODE.rec (how tests/recordings/nodes was
        // made: the kubectl plugin's tests replay them as pods' logs).
        if let Some(keep) = std::env::var_os("TRACER_KEEP_RECORDINGS") {
            let to = std::path::Path::new(&keep).join("nodes");
            std::fs::create_dir_all(&to).unwrap();
            std::fs::copy(
                dir.join(format!("{node}.rec")),
                to.join(format!("{}-{node}.rec", sc.name)),
            )
            .unwrap();
        }
    }
    files
}

/// `tracer merge FILES -o json`: the `merge` line and the `path` lines.
fn merge(files: &[std::path::PathBuf]) -> (Value, Vec<Value>) {
    let out = Command::new(tracer_bin())
        .arg("merge")
        .args(files)
        .args(["-o", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "merge failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let head = lines.remove(0);
    assert_eq!(head["type"], "merge", "{head}");
    assert!(lines.iter().all(|l| l["type"] == "path"));
    (head, lines)
}

fn nodes_of(p: &Value) -> Vec<&str> {
    p["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect()
}

fn clock<'a>(head: &'a Value, node: &str) -> &'a Value {
    head["clocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["node"] == node)
        .unwrap_or_else(|| panic!("no clock for {node}: {head}"))
}

/// Every hop of `node` in the file moved by `by_ns` (its wall clock that
/// much off).
fn shift_clock(file: &std::path::Path, node_file: &std::path::Path, by_ns: i64) {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = String::new();
    for l in text.lines() {
        let mut v: Value = serde_json::from_str(l).unwrap();
        if let Some(hops) = v["hops"].as_array_mut() {
            for h in hops {
                h["unix_ns"] = (h["unix_ns"].as_i64().unwrap() + by_ns).into();
            }
        }
        for c in [&mut v["clock"]] {
            if let Some(o) = c["ktime_to_unix_ns"].as_i64() {
                c["ktime_to_unix_ns"] = (o + by_ns).into();
            }
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    std::fs::write(node_file, out).unwrap();
}

/// Incident 2 as three nodes: the router (with the laptop) forwards the
/// LB IP to the master, which drops it at INPUT; the worker, where nginx
/// runs, never sees it. Then the master's clock set 450 ms behind.
#[test]
fn incident2_across_nodes_and_with_a_clock_offset() {
    if !require_privileges("incident2 across nodes") {
        return;
    }
    let sc = scenarios::build("incident2").expect("build");
    let dir = ScratchDir::new("multinode-incident2").unwrap();
    let nodes: &[(&str, &[&str])] = &[
        ("router", &["laptop", "router"]),
        ("master", &["master"]),
        ("worker", &["worker"]),
    ];
    let files = trace_nodes(&sc, nodes, &dir.0, || sc.traffic().expect("traffic"));
    let (head, paths) = merge(&files);
    let dump = format!(
        "{head}\n{}",
        paths
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(head["target"], "10.16.222.1:80", "{dump}");
    assert!(
        head["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["complete"] == true && r["merged"] == true),
        "{dump}"
    );
    let p = paths
        .iter()
        .find(|p| p["original"]["dst"] == "10.16.222.1" && p["original"]["dport"] == 80)
        .unwrap_or_else(|| panic!("no path to the LB IP: {dump}"));
    assert_eq!(nodes_of(p), ["router", "master"], "{dump}");
    let v = &p["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["node"].as_str()),
        (Some("dropped"), Some("master")),
        "{dump}"
    );
    let text = v["text"].as_str().unwrap();
    assert!(
        text.starts_with("forwarded by router, dropped on master at INPUT by rule"),
        "{text}"
    );
    assert!(text.contains("has no local endpoints"), "{text}");
    assert!(text.ends_with("never reached worker"), "{text}");
    assert_eq!(p["nodes"][0]["verdict"]["kind"], "forwarded", "{dump}");
    assert_eq!(
        p["nodes"][1]["verdict"]["reason"], "NETFILTER_DROP",
        "{dump}"
    );
    assert_eq!(p["not_reached"], serde_json::json!(["worker"]));
    // The same as text.
    let out = Command::new(tracer_bin())
        .arg("merge")
        .args(&files)
        .output()
        .unwrap();
    let text_out = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text_out}");
    assert!(text_out.contains(text), "{text_out}");
    assert!(
        text_out.contains("DROPPED NETFILTER_DROP on master"),
        "{text_out}"
    );
    // One kernel, one clock: nothing to correct beyond the wire's time.
    let m = clock(&head, "master");
    assert_eq!(m["basis"], "one_way", "{dump}");
    assert!(m["skew_ms"].as_f64().unwrap().abs() < 5.0, "{m}");

    // A node's recording replayed (anywhere, later) merges as its run.
    let replayed = dir.0.join("master-replayed.json");
    let out = Command::new(tracer_bin())
        .arg("replay")
        .arg(dir.0.join("master.rec"))
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&replayed, &out.stdout).unwrap();
    let (_, again) = merge(&[files[0].clone(), replayed, files[2].clone()]);
    let p2 = again
        .iter()
        .find(|p| p["original"]["dport"] == 80)
        .expect("the path, replayed");
    assert_eq!(p2["verdict"]["text"], p["verdict"]["text"], "{p2}");

    // The master's wall clock 450 ms behind: its receipt would come
    // before the router sent it. Merge says so, corrects it, and orders.
    let behind = dir.0.join("master-behind.json");
    shift_clock(&files[1], &behind, -450_000_000);
    let (head, paths) = merge(&[files[0].clone(), behind, files[2].clone()]);
    let m = clock(&head, "master");
    let skew = m["skew_ms"].as_f64().unwrap();
    assert!((skew + 450.0).abs() < 5.0, "estimated {skew} ms: {m}");
    assert_eq!(m["against"], "router", "{m}");
    let p = paths
        .iter()
        .find(|p| p["original"]["dport"] == 80)
        .expect("the path");
    let hops = p["hops"].as_array().unwrap();
    let at = |h: &Value| h["unix_ns"].as_i64().unwrap();
    assert!(hops.windows(2).all(|w| at(&w[0]) <= at(&w[1])));
    let sent = hops
        .iter()
        .position(|h| h["node"] == "router" && h["dev"] == "k0" && h["dir"] == "request")
        .expect("the router sent it to the master");
    let received = hops.iter().position(|h| h["node"] == "master").unwrap();
    assert!(sent < received, "{p}");
    assert_eq!(p["verdict"]["node"], "master");
}

/// Incident 1 as three nodes: the client (with the LAN's bridge), node1
/// and node2. While no node holds the VIP the client's ARP fails and no
/// node sees it; after the VIP moved, node1 still gets the SYN and sends
/// it back out to node2, whose RST comes back: one path over three nodes,
/// in order, the clocks bounded both ways.
#[test]
fn incident1_across_nodes() {
    if !require_privileges("incident1 across nodes") {
        return;
    }
    let sc = scenarios::build("incident1").expect("build");
    let dir = ScratchDir::new("multinode-incident1").unwrap();
    let nodes: &[(&str, &[&str])] = &[
        ("client", &["client", "lan"]),
        ("node1", &["node1"]),
        ("node2", &["node2"]),
    ];
    let files = trace_nodes(&sc, nodes, &dir.0, || {
        format!("{:?}", sc.flap_steps().expect("traffic"))
    });
    let (head, paths) = merge(&files);
    let dump = format!(
        "{head}\n{}",
        paths
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let arp = paths
        .iter()
        .find(|p| p["verdict"]["reason"] == "NEIGH_FAILED")
        .unwrap_or_else(|| panic!("no NEIGH_FAILED path: {dump}"));
    assert_eq!(nodes_of(arp), ["client"], "{dump}");
    assert_eq!(arp["verdict"]["node"], "client");
    assert_eq!(
        arp["not_reached"],
        serde_json::json!(["node1", "node2"]),
        "{dump}"
    );
    let across = paths
        .iter()
        .find(|p| nodes_of(p).len() == 3)
        .unwrap_or_else(|| panic!("no path over the three nodes: {dump}"));
    assert_eq!(nodes_of(across), ["client", "node1", "node2"], "{dump}");
    // node1 lost the VIP but still got the SYN: it sent it back out, to
    // node2, where nothing listens.
    let v = &across["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["node"].as_str()),
        (Some("dropped"), Some("node2")),
        "{dump}"
    );
    let text = v["text"].as_str().unwrap();
    assert!(
        text.starts_with("forwarded by client, sent on by node1")
            && text.contains("dropped on node2: NO_SOCKET"),
        "{text}"
    );
    assert!(
        across["not_reached"].as_array().unwrap().is_empty(),
        "{dump}"
    );
    // node1 sent it back out; node2 received it after.
    let hops = across["hops"].as_array().unwrap();
    // (Each node's first packet at a device: a node ties older route
    // lookups of the address to the flow too.)
    let first = |n: &str| {
        hops.iter()
            .position(|h| h["node"] == n && h["hook"].as_str().unwrap().starts_with("tc_"))
            .unwrap()
    };
    assert!(
        first("client") < first("node1") && first("node1") < first("node2"),
        "{across}"
    );
    for n in ["node1", "node2"] {
        let c = clock(&head, n);
        assert_eq!(c["basis"], "two_way", "{dump}");
        assert_eq!(c["inconsistent"], false, "{c}");
        assert!(c["skew_ms"].as_f64().unwrap().abs() < 5.0, "{c}");
    }

    // node2's wall clock 400 ms ahead: the RSTs it sent back bound it from
    // the other side, so merge estimates it (not just a bound) and orders
    // the path again.
    let ahead = dir.0.join("node2-ahead.json");
    shift_clock(&files[2], &ahead, 400_000_000);
    let (head, paths) = merge(&[files[0].clone(), files[1].clone(), ahead]);
    let c = clock(&head, "node2");
    assert_eq!(c["basis"], "two_way", "{c}");
    let skew = c["skew_ms"].as_f64().unwrap();
    assert!((skew - 400.0).abs() < 5.0, "estimated {skew} ms: {c}");
    assert!(c["uncertainty_ns"].as_u64().unwrap() < 5_000_000, "{c}");
    let across = paths
        .iter()
        .find(|p| nodes_of(p).len() == 3)
        .expect("the path over three nodes");
    assert_eq!(nodes_of(across), ["client", "node1", "node2"], "{across}");
    let hops = across["hops"].as_array().unwrap();
    let first = |n: &str| {
        hops.iter()
            .position(|h| h["node"] == n && h["hook"].as_str().unwrap().starts_with("tc_"))
            .unwrap()
    };
    assert!(first("node1") < first("node2"), "{across}");
}
