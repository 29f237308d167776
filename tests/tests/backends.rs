//! The same scenario gives the same verdict whichever backend served its
//! hooks: icmp_send (fentry __icmp_send, kprobe __icmp_send, tp_btf
//! icmp_send) and sock_queue (fentry/kprobe sock_def_readable, tp_btf
//! sk_data_ready). TRACER_BACKENDS=hook:backend forces each backend in turn
//! for that hook alone. A backend this kernel does not offer is skipped
//! loudly; in the kernel-matrix VMs (TRACER_REQUIRE_KERNEL_FEATURES=1)
//! fentry and kprobe must be offered.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use serde_json::Value;
use tracer_tests::{evidence, require_kernel_feature, require_privileges, trace_scenario_out};

/// Namespace names carry a per-run prefix (tt<pid>x<n>-): drop it.
fn normalize(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"tt") {
            let mut j = i + 2;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'x') {
                j += 1;
            }
            if j > i + 2 && j < b.len() && b[j] == b'-' {
                out.push_str("NS-");
                i = j + 1;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

fn served_by(out: &tracer_tests::tracer::TracerOutput, hook: &str) -> String {
    out.summary().unwrap()["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["hook"] == hook && p["attached"] == true)
        .map_or_else(
            || "none".into(),
            |p| p["backend"].as_str().unwrap().to_string(),
        )
}

/// Run `scenario` once per backend set; the verdicts (kind, reason, where,
/// and the evidence the hook gives: an item of kind `must_kind` whose text
/// has `must_text`) must be equal.
fn same_verdict(
    test: &str,
    scenario: &str,
    dport: u64,
    hook: &str,
    must_kind: &str,
    must_text: &str,
) {
    if !require_privileges(test) {
        return;
    }
    let mut seen: Vec<(String, Value)> = Vec::new();
    for want in ["tp_btf", "kprobe", "fentry"] {
        // Only the hook under test is forced; the others keep their plan.
        let force = format!("{hook}:{want}");
        let (out, _) = trace_scenario_out(scenario, &[("TRACER_BACKENDS", &force)]).unwrap();
        let got = served_by(&out, hook);
        if got != want {
            let why = out.summary().unwrap()["probes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["hook"] == hook)
                .map(|p| p["fallbacks"].to_string())
                .unwrap_or_default();
            let why = format!("hook {hook} served by {got}, not {want}: {why}");
            // The VMs must offer fentry and kprobes; a tracepoint may be
            // newer than the kernel (sk_data_ready: 6.10).
            if want == "tp_btf" {
                eprintln!("\n!!!!! SKIPPED {test} [{want}]: {why} !!!!!\n");
                continue;
            }
            if !require_kernel_feature(&format!("{test} [{want}]"), Some(why)) {
                continue;
            }
        }
        let f = out.flow_to(dport);
        let v = &f["verdict"];
        assert!(
            evidence::of_kind(f, must_kind)
                .iter()
                .any(|e| evidence::field(e, "text").contains(must_text)),
            "{want}: evidence lacks {must_kind} {must_text:?}: {}",
            out.dump()
        );
        seen.push((want.to_string(), v.clone()));
    }
    let key = |v: &Value| {
        (
            v["kind"].to_string(),
            v["reason"].to_string(),
            // The bracketed detail (each routing table's answer) depends on
            // which skb-less fib lookups are tied to the flow, not on the
            // backend under test; what follows it (the policy rules) does
            // not (rehearsal 28, 6.12: " after rules ..." had gone with the
            // bracket in one run only).
            normalize(&without_bracket(v["where"].as_str().unwrap_or_default())),
            v["incomplete"].to_string(),
        )
    };
    if seen.len() < 2 {
        eprintln!(
            "\n!!!!! {test}: only {} backend(s) offered here, nothing to compare !!!!!\n",
            seen.len()
        );
        return;
    }
    let (first_b, first) = &seen[0];
    for (b, v) in &seen[1..] {
        assert_eq!(
            key(first),
            key(v),
            "verdict with {b} differs from {first_b}:\n{first}\n{v}"
        );
    }
    eprintln!(
        "{test}: same verdict with {:?}",
        seen.iter().map(|(b, _)| b.as_str()).collect::<Vec<_>>()
    );
}

#[test]
fn no_route_verdict_is_the_same_with_every_icmp_send_backend() {
    same_verdict(
        "no_route_verdict_is_the_same_with_every_icmp_send_backend",
        "no_route",
        8080,
        "icmp_send",
        "icmp_sent",
        "icmp dest-unreachable",
    );
}

#[test]
fn udp_delivery_is_the_same_with_every_sock_queue_backend() {
    same_verdict(
        "udp_delivery_is_the_same_with_every_sock_queue_backend",
        "udp_delivered",
        53,
        "sock_queue",
        "socket_queued",
        "queued to a local socket",
    );
}

#[test]
fn normalize_drops_run_prefixes() {
    assert_eq!(
        normalize("netns tt123x4-router and tt9x10-s"),
        "netns NS-router and NS-s"
    );
}

/// `s` without its first ` [...]` part.
fn without_bracket(s: &str) -> String {
    match s
        .find(" [")
        .and_then(|a| s[a..].find(']').map(|b| (a, a + b)))
    {
        Some((a, b)) => format!("{}{}", &s[..a], &s[b + 1..]),
        None => s.to_string(),
    }
}

#[test]
fn the_bracket_goes_and_the_rules_stay() {
    assert_eq!(
        without_bracket("no route to 10.0.0.9 [main: ENETUNREACH] after rules 0: local"),
        "no route to 10.0.0.9 after rules 0: local"
    );
    assert_eq!(
        without_bracket("no route to 10.0.0.9 after rules 0: local"),
        "no route to 10.0.0.9 after rules 0: local"
    );
}
