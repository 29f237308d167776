//! Real IPVS (incidents 2 and 5 of docs/incidents.md as kube-proxy's IPVS
//! mode builds them: ipvsadm virtual services, Service IPs on a dummy
//! kube-ipvs0). This machine's kernel has no IPVS: these tests say so loudly
//! here and run in the kernel-matrix VMs (`cargo xtask vm`), where
//! TRACER_REQUIRE_KERNEL_FEATURES=1 makes a missing feature a failure.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use serde_json::Value;
use tracer_tests::{
    evidence as ev_items, ipvs::ipvs_unavailable, require_kernel_feature, require_privileges,
    trace_scenario_out,
};

fn ready(test: &str) -> bool {
    require_privileges(test) && require_kernel_feature(test, ipvs_unavailable())
}

fn required() -> bool {
    std::env::var("TRACER_REQUIRE_KERNEL_FEATURES").as_deref() == Ok("1")
}

/// Which backend served `hook` (from the summary), "none" when unattached.
fn backend(out: &tracer_tests::tracer::TracerOutput, hook: &str) -> String {
    out.summary().unwrap()["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["hook"] == hook)
        .map_or_else(
            || "none".into(),
            |p| {
                if p["attached"] == true {
                    p["backend"].as_str().unwrap().to_string()
                } else {
                    "none".to_string()
                }
            },
        )
}

/// The evidence sentences, one a line.
fn evidence(f: &Value) -> String {
    ev_items::text(f)
}

/// The `ipvs_service` item of the flow's verdict.
fn service(f: &Value) -> &Value {
    let s = ev_items::of_kind(f, "ipvs_service");
    assert_eq!(s.len(), 1, "{}", evidence(f));
    s[0]
}

#[test]
fn incident2_ipvs_names_the_virtual_service_without_real_server() {
    if !ready("incident2_ipvs_names_the_virtual_service_without_real_server") {
        return;
    }
    let (out, seen) = trace_scenario_out("incident2_ipvs", &[]).unwrap();
    let dump = out.dump();
    let f = out.flow_to(80);
    eprintln!(
        "incident2_ipvs: client saw {seen:?}; verdict {}",
        f["verdict"]
    );
    let v = &f["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("dropped"), Some("ipvs_no_destination")),
        "{dump}"
    );
    let w = v["where"].as_str().unwrap();
    assert!(
        w.contains("IPVS virtual service TCP 10.16.232.1:80") && w.contains("-master"),
        "{w}"
    );
    let ev = evidence(f);
    let vs = service(f);
    assert_eq!(
        (&vs["service"], &vs["scheduler"], &vs["real_servers"]),
        (&"TCP 10.16.232.1:80".into(), &"rr".into(), &0.into()),
        "{ev}"
    );
    assert!(
        ev.contains("IPVS virtual service TCP 10.16.232.1:80 (rr) has 0 real servers"),
        "{ev}"
    );
    assert!(
        ev_items::of_kind(f, "ipvs_local_address")
            .iter()
            .any(|e| e["dev"] == "kube-ipvs0" && e["addr"] == "10.16.232.1"),
        "{ev}"
    );
    assert!(ev.contains("local address on kube-ipvs0"), "{ev}");
    assert!(
        v["hint"]
            .as_str()
            .unwrap()
            .contains("externalTrafficPolicy"),
        "{v}"
    );
    let b = backend(&out, "ipvs_schedule");
    if b == "none" {
        assert!(
            !required(),
            "ipvs_schedule hook unavailable in the VM: {dump}"
        );
        assert_eq!(v["incomplete"], true, "{v}");
    } else {
        assert_eq!(b, "kprobe", "module functions are served by kprobes");
        assert!(
            ev_items::of_kind(f, "ipvs_no_destination")
                .iter()
                .any(|e| e["backend"] == "kprobe"),
            "{ev}"
        );
        assert!(
            ev.contains("ip_vs_schedule() found no destination") && ev.contains("[kprobe]"),
            "{ev}"
        );
        assert_eq!(v["incomplete"], false, "{v}");
    }
}

/// The same incident without any function hook (tracepoints only, as on
/// this machine): the same verdict from the drop and the IPVS table, marked
/// incomplete because the IPVS decision itself was not seen.
#[test]
fn incident2_ipvs_same_verdict_with_tracepoints_only() {
    if !ready("incident2_ipvs_same_verdict_with_tracepoints_only") {
        return;
    }
    let (out, _) = trace_scenario_out("incident2_ipvs", &[("TRACER_BACKENDS", "tp_btf")]).unwrap();
    let dump = out.dump();
    let f = out.flow_to(80);
    let v = &f["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("dropped"), Some("ipvs_no_destination")),
        "{dump}"
    );
    assert!(
        v["where"]
            .as_str()
            .unwrap()
            .contains("IPVS virtual service TCP 10.16.232.1:80"),
        "{v}"
    );
    assert_eq!(v["incomplete"], true, "{v}");
    let ev = evidence(f);
    assert_eq!(service(f)["real_servers"], 0, "{ev}");
    assert!(ev.contains("has 0 real servers"), "{ev}");
    assert!(ev_items::has(f, "ipvs_hooks_silent"), "{ev}");
    assert!(
        ev_items::of_kind(f, "func_hook_unavailable")
            .iter()
            .any(|e| e["hook"] == "ipvs_schedule"),
        "{ev}"
    );
    assert!(ev.contains("hook ipvs_schedule unavailable"), "{ev}");
    assert_eq!(backend(&out, "ipvs_schedule"), "none");
}

#[test]
fn ipvs_nat_is_followed_to_the_real_server() {
    if !ready("ipvs_nat_is_followed_to_the_real_server") {
        return;
    }
    let (out, seen) = trace_scenario_out("ipvs_nat", &[]).unwrap();
    let dump = out.dump();
    let f = out.flow_to(80);
    eprintln!("ipvs_nat: client saw {seen:?}; verdict {}", f["verdict"]);
    assert!(seen.contains("connected"), "client: {seen}");
    let v = &f["verdict"];
    assert_eq!(v["kind"], "delivered", "{dump}");
    assert_eq!(f["translated"]["dst"], "10.233.2.2", "{dump}");
    assert_eq!(f["translated"]["dport"], 8080, "{dump}");
    if backend(&out, "ipvs_schedule") == "none" {
        assert!(!required(), "IPVS hooks unavailable in the VM: {dump}");
        return;
    }
    assert_eq!(f["nat_by"], "ipvs", "{dump}");
    let ev = evidence(f);
    assert!(
        ev_items::of_kind(f, "ipvs_scheduled").iter().any(|e| {
            e["service"] == serde_json::json!({"addr": "10.96.233.1", "port": 80})
                && e["real_server"] == serde_json::json!({"addr": "10.233.2.2", "port": 8080})
        }),
        "{ev}"
    );
    assert!(
        ev.contains("IPVS scheduled 10.96.233.1:80 to real server 10.233.2.2:8080"),
        "{ev}"
    );
    assert!(
        ev.contains("IPVS forwards with NAT (masquerade) (ip_vs_nat_xmit)"),
        "{ev}"
    );
    // Packets after the SYN belong to the connection IPVS made for it.
    assert!(ev.contains("IPVS: existing connection reused"), "{ev}");
}

#[test]
fn incident5_ipvs_external_ip_shadows_the_node() {
    if !ready("incident5_ipvs_external_ip_shadows_the_node") {
        return;
    }
    let (out, _) = trace_scenario_out("incident5_ipvs", &[]).unwrap();
    let dump = out.dump();
    let f = out.flow_to(22);
    let v = &f["verdict"];
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("misrouted"), Some("local_route_shadows_host")),
        "{dump}"
    );
    assert_eq!(v["dev"], "kube-ipvs0", "{v}");
    let w = v["where"].as_str().unwrap();
    assert!(w.contains("kube-ipvs0") && w.contains("-node1"), "{w}");
    assert!(v["hint"].as_str().unwrap().contains("externalIP"), "{v}");
}
