//! Pods by name from the node alone: a scenario's client namespace made a
//! pod the way kubelet and containerd leave one (a process of it in the
//! pod's cgroup, kubelet's /var/log/pods directory: tracer_tests::kubepod),
//! traced by the real tracer. The client's hops name the pod, in `follow`
//! and in `replay` (JSON and text); the other namespaces name none, and
//! the verdict keeps namespace names. Nothing is left behind.

use std::{path::PathBuf, process::Command};

use serde_json::Value;
use tracer_tests::{
    kubepod::KubePod, replay::replay_json, trace_scenario_prepared, tracer::tracer_bin,
};

/// Each hop's namespace and pod (None: no `pod`).
fn hop_pods(f: &Value) -> Vec<(String, Option<String>)> {
    f["hops"]
        .as_array()
        .expect("hops")
        .iter()
        .map(|h| {
            (
                h["netns"].as_str().unwrap_or_default().to_string(),
                h.get("pod")
                    .map(|p| p.as_str().expect("pod is a string").to_string()),
            )
        })
        .collect()
}

#[test]
fn hops_in_a_pods_namespace_name_the_pod() {
    // What the fixture made: the pod, its paths, the client's namespace.
    let mut made: Option<(String, Vec<PathBuf>, String)> = None;
    let mut replayed: Vec<Value> = Vec::new();
    let mut replayed_text = String::new();
    let run = trace_scenario_prepared(
        "tcp_delivered",
        &mut |sc| {
            let client = &sc.nss[0];
            let pod = KubePod::new(client).expect("make the client namespace a pod");
            eprintln!("pod {} (uid {}) in {}", pod.pod, pod.uid, client.name);
            made = Some((pod.pod.clone(), pod.made(), client.name.clone()));
            Box::new(pod)
        },
        &mut |rec| {
            replayed = replay_json(rec);
            let out = Command::new(tracer_bin())
                .args(["replay", "-o", "text"])
                .arg(rec)
                .output()
                .expect("run tracer replay");
            replayed_text = String::from_utf8_lossy(&out.stdout).into_owned();
        },
    );
    let Some((out, _seen)) = run else {
        return;
    };
    let (pod, paths, client) = made.expect("the fixture ran");
    let dump = out.dump();

    let f = out.flow_to(8080);
    let (kind, where_) = (&f["verdict"]["kind"], &f["verdict"]["where"]);
    assert_eq!(kind, "delivered", "{dump}");
    // The verdict keeps namespace names.
    assert!(
        where_.as_str().is_some_and(|w| w.ends_with("-server")),
        "{where_}"
    );
    let hops = hop_pods(f);
    assert!(
        hops.iter().any(|(n, _)| *n == client),
        "no hop in {client}: {dump}"
    );
    for (netns, p) in &hops {
        if *netns == client {
            assert_eq!(p.as_deref(), Some(pod.as_str()), "{dump}");
        } else {
            assert_eq!(p, &None, "a hop in {netns} names a pod: {dump}");
        }
    }

    // The recording keeps the pod: replay shows it the same.
    let again = replayed
        .iter()
        .find(|l| l["type"] == "flow" && l["final"] == true && l["original"]["dport"] == 8080)
        .expect("replayed flow to 8080");
    assert_eq!(hop_pods(again), hops, "replay: {again}");
    let pod_lines = replayed_text
        .lines()
        .filter(|l| l.contains(&format!(" {pod} ")))
        .count();
    assert!(pod_lines > 0, "text replay names no pod:\n{replayed_text}");
    assert!(
        replayed_text.contains("  where: ") && !replayed_text.contains(&format!("where: {pod}")),
        "{replayed_text}"
    );

    // Every line, hops with `pod` included, matches the generated schema.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/json-schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("docs/json-schema.json"))
            .expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    for line in out.lines.iter().chain(&replayed) {
        let errors: Vec<String> = validator
            .iter_errors(line)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .take(5)
            .collect();
        assert!(
            errors.is_empty(),
            "not as the schema says: {errors:#?}\n{line}"
        );
    }

    // Nothing is left: the pod's cgroups and directories, the namespaces.
    for p in &paths {
        assert!(!p.exists(), "{} left behind", p.display());
    }
    let netns = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let scene = format!("{}-", client.trim_end_matches("-client"));
    let listed = String::from_utf8_lossy(&netns.stdout);
    assert!(
        !listed.lines().any(|l| l
            .split_whitespace()
            .next()
            .is_some_and(|n| n.starts_with(&scene))),
        "namespaces left behind: {listed}"
    );
}
