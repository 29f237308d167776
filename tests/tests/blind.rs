//! Scenes written blind, from public incident reports (tests/src/
//! blind_scenes.rs; docs/blind-scenes.md has each one's verdict before and
//! after): each traced with the real binary, recorded and replayed, and its
//! cause asserted where tracer names it. The scenes whose cause is not
//! named yet (docs/blind-scenes.md) are not asserted here.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use serde_json::Value;
use tracer_tests::trace_scenario;

/// The final flow to the scene's target: kind, reason, where, the
/// evidence kinds, the hint, and a dump for messages.
fn judged(name: &str, dport: u64) -> Option<(Value, String)> {
    trace_scenario(name, dport)
}

fn kinds(f: &Value) -> Vec<&str> {
    f["verdict"]["evidence"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default()
}

fn said(f: &Value, key: &str) -> String {
    f["verdict"][key].as_str().unwrap_or_default().to_string()
}

/// One DF datagram larger than flannel.1's MTU (projectcalico/calico#8953):
/// the device, its MTU and the packet's size, with the overlay MTU hint.
#[test]
fn one_datagram_too_big_names_the_tunnel_mtu() {
    let Some((f, dump)) = judged("blind_vxlan_mtu", 5353) else {
        return;
    };
    assert_eq!(said(&f, "reason"), "PKT_TOO_BIG", "{dump}");
    let w = said(&f, "where");
    assert!(
        w.contains("1488-byte packet") && w.contains("MTU 1450 of flannel.1"),
        "{dump}"
    );
    assert!(kinds(&f).contains(&"packet_too_big"), "{dump}");
    assert!(said(&f, "hint").contains("tunnel"), "{dump}");
}

/// DNAT in OUTPUT to an endpoint the node has no route to
/// (cloudnativelabs/kube-router#425): not a rule, the route lookup again
/// after NAT.
#[test]
fn output_dnat_without_a_route_is_not_blamed_on_a_rule() {
    let Some((f, dump)) = judged("blind_output_dnat_no_route", 443) else {
        return;
    };
    assert_eq!(said(&f, "reason"), "NETFILTER_DROP", "{dump}");
    let w = said(&f, "where");
    assert!(
        w.contains("no rule dropped it")
            && w.contains("ip_route_me_harder")
            && w.contains("found no route"),
        "{dump}"
    );
    assert!(kinds(&f).contains(&"route_refused"), "{dump}");
    let hint = said(&f, "hint");
    assert!(
        hint.starts_with("No netfilter rule dropped it") && !hint.contains("list the ruleset"),
        "{dump}"
    );
}

/// A Service DNAT'd to an address of the node's own blackholed IPAM block
/// (projectcalico/calico#3246), and one fenced off by a prohibit rule
/// (kubernetes/kubernetes#22698): the refusing route is named.
#[test]
fn routes_that_refuse_the_translated_destination_are_named() {
    for (name, dport, route) in [
        ("blind_dnat_blackhole", 80, "a blackhole route"),
        ("blind_dnat_prohibit", 8080, "a prohibit route"),
    ] {
        let Some((f, dump)) = judged(name, dport) else {
            return;
        };
        let w = said(&f, "where");
        assert!(
            w.contains("ip_error") && w.contains("after NAT") && w.contains(route),
            "{name}: {dump}"
        );
        assert!(kinds(&f).contains(&"route_refused"), "{name}: {dump}");
        assert!(said(&f, "hint").contains("ip route get"), "{name}: {dump}");
    }
}
