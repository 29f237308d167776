//! `tracer kube follow` (the kubectl plugin) against a stand-in kubectl:
//! a script that answers `get` from files (a Service, its
//! EndpointSlices, the nodes), keeps what `create` is given, replays a
//! node's tracer output for `logs -f`, and notes every call. No cluster
//! is reachable from here: what a live cluster would add (pulling the
//! image, the pods running tracer) is not exercised.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tracer_tests::tracer::tracer_bin;

const FAKE: &str = r#"#!/bin/bash
# A stand-in kubectl: answers from $FAKE_KUBE, notes each call.
echo "$*" >> "$FAKE_KUBE/calls"
case "$1 $2" in
"get service")
    f="$FAKE_KUBE/service-$3.json"
    if [ -f "$f" ]; then cat "$f"; else
        echo "Error from server (NotFound): services \"$3\" not found" >&2; exit 1; fi ;;
"get endpointslices") cat "$FAKE_KUBE/slices.json" ;;
"get nodes")
    if [[ " $* " == *" -l "* ]]; then cat "$FAKE_KUBE/nodes-selected.json"
    else cat "$FAKE_KUBE/nodes.json"; fi ;;
"create -f") n=$(ls "$FAKE_KUBE"/created-*.json 2>/dev/null | wc -l)
    cat > "$FAKE_KUBE/created-$n.json" ;;
"logs -f")
    pod="$4"; node=$(echo "$pod" | sed 's/^tracer-[0-9a-f]*-[0-9]*-//')
    cat "$FAKE_KUBE/logs/$node.json"
    echo "tracer: note: a line on stderr" >&2
    if [ -n "$FAKE_HANG" ]; then
        # As a pod's log ends when the pod goes.
        for _ in $(seq 600); do [ -f "$FAKE_KUBE/deleted" ] && exit 0; sleep 0.1; done
        exit 1
    fi ;;
"delete pod") touch "$FAKE_KUBE/deleted" ;;
*) echo "fake kubectl: unexpected: $*" >&2; exit 1 ;;
esac
"#;

/// A stand-in cluster: a directory of answers and the fake kubectl.
struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    fn new(name: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("tracer-kube-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let bin = dir.join("kubectl");
        std::fs::write(&bin, FAKE).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let nodes = |names: &[&str]| {
            json!({"apiVersion": "v1", "kind": "List", "items":
                names.iter().map(|n| json!({"kind": "Node", "metadata": {"name": n}})).collect::<Vec<_>>()})
        };
        let c = Cluster { dir };
        c.write(
            "nodes.json",
            &nodes(&["master", "router", "worker", "worker-1", "worker-2"]),
        );
        c.write("nodes-selected.json", &nodes(&["worker-2"]));
        c.write(
            "service-nginx.json",
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "nginx", "namespace": "default"},
                "spec": {"type": "LoadBalancer", "clusterIP": "10.96.7.7", "clusterIPs": ["10.96.7.7"],
                         "externalTrafficPolicy": "Local",
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "10.16.222.1"}]}}
            }),
        );
        c.write(
            "slices.json",
            &json!({"apiVersion": "v1", "kind": "List", "items": [
                {"kind": "EndpointSlice", "endpoints": [{"addresses": ["10.222.3.10"], "nodeName": "worker-1"}]}]}),
        );
        c
    }

    fn write(&self, name: &str, v: &Value) {
        std::fs::write(self.dir.join(name), v.to_string()).unwrap();
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(tracer_bin());
        c.args(["kube", "follow"])
            .args(args)
            .env("KUBECTL", self.dir.join("kubectl"))
            .env("FAKE_KUBE", &self.dir);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.join("calls")).unwrap_or_default()
    }

    /// The pods `create` was given.
    fn created(&self) -> Vec<Value> {
        let mut v = Vec::new();
        for i in 0.. {
            let Ok(t) = std::fs::read_to_string(self.dir.join(format!("created-{i}.json"))) else {
                break;
            };
            v.push(serde_json::from_str(&t).unwrap());
        }
        v
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Read into the Kubernetes API's type and written back, a manifest is
/// unchanged: no misspelt or misplaced field (those are dropped), every
/// value of its field's type.
fn assert_valid<T: serde::de::DeserializeOwned + serde::Serialize>(what: &str, v: &Value) {
    let typed: T = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("{what} is not a valid object: {e}\n{v:#}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(&back, v, "{what}: fields the API types do not have");
}

fn stdout_json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn dry_run_resolves_the_service_and_prints_valid_pods_for_its_endpoints_nodes() {
    let c = Cluster::new("dry");
    let list = stdout_json(&c.run(&["svc/nginx:http", "--dry-run", "--duration", "20s"]));
    assert_eq!(list["kind"], "List");
    let pods = list["items"].as_array().unwrap();
    // The only endpoint runs on worker-1.
    assert_eq!(pods.len(), 1, "{list:#}");
    let p = &pods[0];
    assert_valid::<k8s_openapi::api::core::v1::Pod>("the pod", p);
    assert_eq!(p["spec"]["nodeName"], "worker-1");
    assert_eq!(p["spec"]["hostNetwork"], true);
    assert_eq!(p["spec"]["hostPID"], true);
    assert_eq!(
        p["spec"]["containers"][0]["securityContext"]["privileged"],
        true
    );
    assert_eq!(
        p["spec"]["containers"][0]["command"],
        json!([
            "tracer",
            "follow",
            "10.96.7.7:80",
            "--node",
            "worker-1",
            "-o",
            "json",
            "--duration",
            "20000ms"
        ])
    );
    // Nothing was created.
    assert!(c.created().is_empty());
    assert!(!c.calls().contains("create"), "{}", c.calls());
    assert!(
        c.calls()
            .contains("get endpointslices -l kubernetes.io/service-name=nginx")
    );
}

#[test]
fn nodes_and_addresses_are_chosen_as_asked() {
    let c = Cluster::new("choose");
    let nodes = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["--dry-run"];
        a.extend_from_slice(args);
        stdout_json(&c.run(&a))["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["spec"]["nodeName"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        nodes(&["svc/nginx", "--nodes", "all"]),
        ["master", "router", "worker", "worker-1", "worker-2"]
    );
    assert_eq!(nodes(&["svc/nginx", "--nodes", "role=edge"]), ["worker-2"]);
    assert_eq!(
        nodes(&["svc/nginx", "--nodes", "master,worker-2"]),
        ["master", "worker-2"]
    );
    // An address: every node by default.
    assert_eq!(nodes(&["169.254.25.10:53"]).len(), 5);
    // The LoadBalancer address: incident 2's.
    let list = stdout_json(&c.run(&[
        "svc/nginx",
        "--address",
        "lb",
        "--nodes",
        "master",
        "--dry-run",
    ]));
    assert_eq!(
        list["items"][0]["spec"]["containers"][0]["command"][2],
        "10.16.222.1:80"
    );
    // More follow options after `--`.
    let list = stdout_json(&c.run(&["svc/nginx", "--dry-run", "--", "--proto", "tcp"]));
    let cmd = list["items"][0]["spec"]["containers"][0]["command"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(cmd[cmd.len() - 2..], [json!("--proto"), json!("tcp")]);
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let c = Cluster::new("bad");
    let cases: [(&[&str], i32, &str); 5] = [
        (&["pod/x"], 2, "bad target 'pod/x'"),
        (
            &["svc/nginx:https", "--dry-run"],
            2,
            "Service default/nginx has no port https (its ports: http=80)",
        ),
        (
            &["svc/missing", "--dry-run"],
            1,
            "services \"missing\" not found",
        ),
        (
            &["svc/nginx", "--nodes", "nosuch", "--dry-run"],
            2,
            "no node named nosuch",
        ),
        (
            &["svc/nginx", "--address", "external", "--dry-run"],
            2,
            "has no external IP address",
        ),
    ];
    for (args, code, says) in cases {
        let o = c.run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    // Without kubectl at all.
    let o = c
        .cmd(&["svc/nginx", "--dry-run"])
        .env("KUBECTL", "/nonexistent/kubectl")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("install kubectl, or set KUBECTL"), "{err}");
}

/// A node's pod log: `tracer follow --node NODE -o json` of incident 2
/// on that node (router, master, worker), as `tracer replay -o json`
/// prints the node's recording in tests/recordings/nodes. `as_node`: the
/// stand-in node whose pod prints it.
fn node_log(c: &Cluster, node: &str, as_node: &str) {
    let rec = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("recordings/nodes")
        .join(format!("incident2-{node}.rec"));
    let out = Command::new(tracer_bin())
        .args(["replay", "-o", "json"])
        .arg(&rec)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        c.dir.join("logs").join(format!("{as_node}.json")),
        out.stdout,
    )
    .unwrap();
}

/// A stand-in cluster whose router, master and worker pods print
/// incident 2 as those nodes saw it.
fn incident2_cluster(name: &str) -> Cluster {
    let c = Cluster::new(name);
    for n in ["router", "master", "worker"] {
        node_log(&c, n, n);
    }
    c
}

/// JSON lines.
fn lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn a_run_creates_the_pods_streams_their_output_merges_it_and_deletes_them() {
    let c = incident2_cluster("run");
    let save = c.dir.join("saved");
    let o = c.run(&[
        "svc/nginx",
        "--address",
        "lb",
        "--nodes",
        "router,master,worker",
        "-o",
        "json",
        "--save",
        save.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let pods = c.created();
    assert_eq!(pods.len(), 3);
    for p in &pods {
        assert_valid::<k8s_openapi::api::core::v1::Pod>("a created pod", p);
        assert_eq!(p["spec"]["containers"][0]["command"][2], "10.16.222.1:80");
    }
    let out = lines(&o.stdout);
    // Each node's records as they came, tagged with its node...
    for node in ["router", "master", "worker"] {
        assert!(
            out.iter()
                .any(|l| l["type"] == "summary" && l["node"] == node),
            "{node}"
        );
        let saved = std::fs::read_to_string(save.join(format!("{node}.json"))).unwrap();
        assert!(saved.contains("\"type\":\"summary\""), "{saved}");
    }
    // ...paths as the streams stitched them while the pods ran...
    assert!(
        out.iter()
            .any(|l| l["type"] == "live_path" && l["proto"] == "tcp"),
        "no live path"
    );
    // ...then the merge: the path across the nodes, one verdict.
    let merge = out
        .iter()
        .find(|l| l["type"] == "merge")
        .expect("merge line");
    assert_eq!(merge["runs"].as_array().unwrap().len(), 3, "{merge}");
    let path = out
        .iter()
        .find(|l| l["type"] == "path" && l["original"]["dport"] == 80)
        .expect("a path");
    assert_eq!(path["verdict"]["node"], "master", "{path}");
    assert_eq!(path["verdict"]["kind"], "dropped", "{path}");
    assert_eq!(path["service"]["name"], "default/nginx:http", "{path}");
    assert!(
        path["not_reached"]
            .as_array()
            .unwrap()
            .contains(&json!("worker")),
        "{path}"
    );
    // tracer's other lines on stderr, with the node.
    assert!(
        err.contains("master: tracer: note: a line on stderr"),
        "{err}"
    );
    // The pods went, by the run's label.
    let run = pods[0]["metadata"]["labels"]["tracer.dev/run"]
        .as_str()
        .unwrap();
    assert!(
        c.calls().contains(&format!(
            "delete pod -l tracer.dev/run={run} --wait=false --ignore-not-found"
        )),
        "{}",
        c.calls()
    );
    // As text: the story, then each node's part.
    let c = incident2_cluster("run-text");
    let o = c.run(&[
        "svc/nginx",
        "--address",
        "lb",
        "--nodes",
        "router,master,worker",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("live: tcp 10.222.1.2:"), "{text}");
    assert!(
        text.contains("forwarded by router, dropped on master at INPUT by rule")
            && text.contains("never reached worker")
            && text.contains("  service: default/nginx:http (LoadBalancer or ExternalIP; named by node master's kube-proxy rules)"),
        "{text}"
    );
}

#[test]
fn ctrl_c_deletes_the_pods_and_reads_their_last_lines() {
    let c = Cluster::new("sigint");
    node_log(&c, "master", "worker-1");
    let mut child = c
        .cmd(&["svc/nginx", "-o", "json"])
        .env("FAKE_HANG", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once its log is being read.
    let t = Instant::now();
    while !c.calls().contains("logs -f") && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(!Path::new(&c.dir.join("deleted")).exists());
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "still running after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let o = child.wait_with_output().unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(c.dir.join("deleted").exists(), "{}", c.calls());
    // What the one node printed, then its story.
    let out = lines(&o.stdout);
    assert!(out.iter().any(|l| l["type"] == "summary"));
    assert!(
        out.iter()
            .any(|l| l["type"] == "path" && l["verdict"]["node"] == "master")
    );
}

#[test]
fn the_daemonset_manifests_are_valid_kubernetes_objects() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/daemonset.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut kinds = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        match v["kind"].as_str().unwrap() {
            "Namespace" => assert_valid::<k8s_openapi::api::core::v1::Namespace>("Namespace", &v),
            "DaemonSet" => {
                assert_valid::<k8s_openapi::api::apps::v1::DaemonSet>("DaemonSet", &v);
                let spec = &v["spec"]["template"]["spec"];
                assert_eq!(spec["hostNetwork"], true);
                assert_eq!(spec["hostPID"], true);
                let cmd = &spec["containers"][0]["command"];
                assert_eq!(cmd[0], "tracer");
                assert_eq!(cmd[1], "follow");
            }
            k => panic!("unexpected kind {k}"),
        }
        kinds.push(v["kind"].as_str().unwrap().to_string());
    }
    assert_eq!(kinds, ["Namespace", "DaemonSet"]);
}
