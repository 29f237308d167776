//! Node scale (issue 16): with many pod namespaces every interface gets
//! tracer's tc programs, one that appears while tracing gets them too, and
//! nothing stays behind. Functional checks only: the times are the bench's
//! (`cargo xtask bench`, node-scale section of BENCHMARKS.md).

use std::time::Instant;

use tracer_tests::{
    pods::{Node, Pods, tracer_hooked},
    require_privileges, scaled_ms,
    tracer::TracerRun,
};

const PODS: usize = 50;

/// Poll `f` until true or `ms` (scaled) pass.
fn eventually(ms: u64, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t0.elapsed() > scaled_ms(ms) {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// tracer with `--netns` on the node and on every pod: tc on every
/// interface of all 51 namespaces when it is ready, and on a pod's veth
/// created afterwards.
fn pods_in_traced_namespaces(mode: &str) {
    if !require_privileges("pods_in_traced_namespaces") {
        return;
    }
    let mut pods = Pods::new(PODS, Node::Owned).expect("pods");
    let node = pods.node_netns_path().expect("owned node");
    let node_name = pods.node.as_ref().unwrap().name.clone();
    let mut args = vec!["--tc-attach", mode, "--netns", node_name.as_str()];
    for p in &pods.pods {
        args.extend_from_slice(&["--netns", p.as_str()]);
    }
    let run = TracerRun::start("10.99.99.99", &args).expect("start tracer");
    // Ready means hooked, with --netns (the device tracepoints are left
    // to tc there): every node-side veth and each pod's eth0.
    let unhooked: Vec<&String> = pods
        .veths
        .iter()
        .filter(|v| !tracer_hooked(Some(&node), v))
        .collect();
    assert!(unhooked.is_empty(), "not hooked at ready: {unhooked:?}");
    for p in pods.pods.iter().step_by(7) {
        assert!(
            tracer_hooked(Some(&format!("/run/netns/{p}")), "eth0"),
            "eth0 of {p} not hooked at ready"
        );
    }
    let new = pods.add(1).expect("one more pod");
    let hooked = eventually(5000, || tracer_hooked(Some(&node), &new[0]));
    let node_ifaces = pods.node_interfaces().expect("node interfaces").len();
    let out = run.stop().expect("stop");
    assert!(hooked, "veth {} added while tracing never hooked", new[0]);
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.dump());
    let sum = out.summary().expect("summary");
    let n = sum["tc"]["interfaces"].as_u64().unwrap_or(0);
    // The node's (bridge, lo, a veth per pod, the new one's) and lo and
    // eth0 of each traced pod; the new pod's namespace is not traced.
    let expected = node_ifaces + 2 * PODS;
    assert!(n >= 100, "tc on {n} interfaces: {}", out.dump());
    assert_eq!(n as usize, expected, "{}", out.dump());
    assert!(
        !out.stderr.contains("tracer: warning: tc on"),
        "{}",
        out.stderr
    );
    // Detached on exit.
    let left: Vec<&String> = pods
        .veths
        .iter()
        .filter(|v| tracer_hooked(Some(&node), v))
        .collect();
    assert!(left.is_empty(), "still hooked after exit: {left:?}");
}

#[test]
fn pods_in_traced_namespaces_tcx() {
    pods_in_traced_namespaces("tcx");
}

#[test]
fn pods_in_traced_namespaces_netlink() {
    pods_in_traced_namespaces("netlink");
}

/// tracer without `--netns` on a node whose pods' veths are in the host
/// namespace: tc ends up on every one of them (in tcx mode partly after
/// ready, the device tracepoints seeing every device meanwhile), on one
/// created while tracing too, and on none after exit.
#[test]
fn pods_on_the_host_bridge() {
    if !require_privileges("pods_on_the_host_bridge") {
        return;
    }
    let mut pods = Pods::new(PODS, Node::Host).expect("pods");
    let run = TracerRun::start("10.99.99.99", &[]).expect("start tracer");
    let all_hooked = |veths: &[String]| veths.iter().all(|v| tracer_hooked(None, v));
    let hooked = eventually(20_000, || all_hooked(&pods.veths));
    let new = pods.add(1).expect("one more pod");
    let new_hooked = eventually(5000, || tracer_hooked(None, &new[0]));
    let host_ifaces = pods.node_interfaces().expect("host interfaces").len();
    let out = run.stop().expect("stop");
    assert!(hooked, "the pods' veths were not all hooked");
    assert!(
        new_hooked,
        "veth {} added while tracing never hooked",
        new[0]
    );
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.dump());
    let n = out.summary().expect("summary")["tc"]["interfaces"]
        .as_u64()
        .unwrap_or(0);
    assert!(n > PODS as u64, "tc on {n} interfaces: {}", out.dump());
    assert_eq!(n as usize, host_ifaces, "{}", out.dump());
    let left: Vec<&String> = pods
        .veths
        .iter()
        .filter(|v| tracer_hooked(None, v))
        .collect();
    assert!(left.is_empty(), "still hooked after exit: {left:?}");
}
