//! DNS on a node as tracer runs there by default (no `--netns`): pods on a
//! bridge in the host namespace, tc on the host's side of their veths, the
//! device tracepoints seeing every device.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::json;
use tracer_tests::{
    pods::{Node, Pods, tracer_hooked},
    require_privileges, scaled_arg, scaled_ms,
    tracer::{TracerRun, netprobe_bin},
};

fn eventually(ms: u64, f: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() > scaled_ms(ms) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// A pod's resolver gets a truncated answer over UDP and asks again over
/// TCP. Its TCP segments are first followed by the xmit tracepoint in the
/// pod, which reads only an skb's linear part, and a local socket's TCP
/// payload is in page fragments: the question and the full answer are read
/// at tc on the node's side of the veths.
#[test]
fn dns_over_tcp_from_a_pod_is_read_without_netns() {
    if !require_privileges("dns_over_tcp_from_a_pod_is_read_without_netns") {
        return;
    }
    let pods = Pods::new(2, Node::Host).expect("pods");
    let (client, server) = (&pods.pods[0], &pods.pods[1]);
    let probe = netprobe_bin();
    let mut srv = Command::new("ip")
        .args(["netns", "exec", server])
        .arg(&probe)
        .args(["dns-serve", "10.251.0.2:53", "--for", "20"])
        .stdout(Stdio::null())
        .spawn()
        .expect("dns-serve");
    let run = TracerRun::start("10.251.0.2:53", &[]).expect("start tracer");
    let hooked = eventually(20_000, || pods.veths.iter().all(|v| tracer_hooked(None, v)));
    let asked = Command::new("ip")
        .args(["netns", "exec", client])
        .arg(&probe)
        .args([
            "dns-query",
            "10.251.0.2:53",
            "big.example.com",
            "--timeout-ms",
            &scaled_arg(2000),
        ])
        .output()
        .expect("dns-query");
    std::thread::sleep(scaled_ms(700));
    let out = run.stop().expect("stop tracer");
    let _ = srv.kill();
    let _ = srv.wait();
    let dump = out.dump();
    assert!(hooked, "tc never on every pod veth: {dump}");
    assert!(
        asked.status.success(),
        "dns-query: {}",
        String::from_utf8_lossy(&asked.stderr)
    );
    let tcp = out
        .final_flows()
        .into_iter()
        .find(|f| f["proto"] == "tcp" && f["original"]["dport"] == 53)
        .unwrap_or_else(|| panic!("no TCP flow to :53: {dump}"));
    let q = &tcp["dns"]["queries"][0];
    assert_eq!(
        (&q["name"], &q["rcode"], &q["truncated"], &q["answer_count"]),
        (
            &json!("big.example.com"),
            &json!("NOERROR"),
            &json!(false),
            &json!(40)
        ),
        "{dump}"
    );
    // Read at each tc hop, it is still one question sent once.
    assert_eq!(q["sent"], 1, "{dump}");
}
