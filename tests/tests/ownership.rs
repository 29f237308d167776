//! tracer touches only what it created: several tracers on the same
//! namespace (netlink and tcx attachment) and a filter of someone else's
//! keep theirs when one exits; `tracer cleanup` leaves a running tracer
//! alone; a namespace deleted by name while tracing is still detached.

use std::{collections::BTreeSet, process::Command, time::Duration};

use tracer_tests::{
    netns::{Netns, unique_prefix, veth},
    require_privileges,
    tracer::{TracerRun, tracer_bin},
};

/// A namespace with a veth end to hook, and its peer.
fn topo() -> (Netns, Netns) {
    let p = unique_prefix();
    let a = Netns::new(format!("{p}-a")).unwrap();
    let b = Netns::new(format!("{p}-b")).unwrap();
    veth(&a, "oa0", &b, "ob0").unwrap();
    (a, b)
}

/// `tc filter show` of both hooks and `tc qdisc show` of `dev` in `ns`.
fn tc_state(ns: &str, dev: &str) -> String {
    let mut s = String::new();
    for args in [
        vec!["filter", "show", "dev", dev, "ingress"],
        vec!["filter", "show", "dev", dev, "egress"],
        vec!["qdisc", "show", "dev", dev],
    ] {
        let out = Command::new("tc")
            .args(["-n", ns])
            .args(&args)
            .output()
            .unwrap();
        s += &String::from_utf8_lossy(&out.stdout);
    }
    s
}

/// A u32 filter of someone else's (matching nothing) on `dev`'s ingress.
fn add_foreign_filter(ns: &str, dev: &str) {
    let ok = Command::new("tc")
        .args([
            "-n", ns, "filter", "add", "dev", dev, "ingress", "pref", "200",
        ])
        .args([
            "protocol",
            "ip",
            "u32",
            "match",
            "ip",
            "dst",
            "192.0.2.77/32",
        ])
        .args(["classid", "1:1"])
        .status()
        .unwrap();
    assert!(ok.success(), "tc filter add u32");
}

fn bpftool(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .expect("bpftool");
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// IDs of loaded programs named tracer_*.
fn tracer_progs() -> BTreeSet<u64> {
    bpftool(&["prog", "show"])
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with("tracer_")))
        .filter_map(|p| p["id"].as_u64())
        .collect()
}

/// tcx links (bpftool's type 11, or "tcx") running one of `progs`.
fn tcx_links(progs: &BTreeSet<u64>) -> usize {
    bpftool(&["link", "show"])
        .iter()
        .filter(|l| l["type"] == 11 || l["type"] == "tcx")
        .filter(|l| l["prog_id"].as_u64().is_some_and(|p| progs.contains(&p)))
        .count()
}

/// Start a tracer; the programs it loaded.
fn start_with_progs(args: &[&str]) -> (TracerRun, BTreeSet<u64>) {
    let before = tracer_progs();
    let run = TracerRun::start("10.232.0.2", args).unwrap();
    let ours = tracer_progs().difference(&before).copied().collect();
    (run, ours)
}

fn stop_ok(run: TracerRun) {
    let out = run.stop().unwrap();
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.dump());
    assert!(!out.stderr.contains("detach:"), "{}", out.stderr);
}

fn count(s: &str, needle: &str) -> usize {
    s.matches(needle).count()
}

/// Netlink mode: tracer A adds the clsact qdisc, B finds it; whichever
/// exits, the other's filters and the foreign u32 filter stay.
#[test]
fn netlink_tracers_keep_each_others_and_foreign_filters() {
    if !require_privileges("netlink_tracers_keep_each_others_and_foreign_filters") {
        return;
    }
    let (a, _b) = topo();
    let args = ["--netns", a.name.as_str(), "--tc-attach", "netlink"];
    let first = TracerRun::start("10.232.0.2", &args).unwrap();
    add_foreign_filter(&a.name, "oa0");
    let second = TracerRun::start("10.232.0.2", &args).unwrap();
    let st = tc_state(&a.name, "oa0");
    assert_eq!(count(&st, "tracer_tc_ingress"), 2, "{st}");
    // The one that added the qdisc goes first.
    stop_ok(first);
    let st = tc_state(&a.name, "oa0");
    assert_eq!(
        count(&st, "tracer_tc_ingress"),
        1,
        "B's filter went with A: {st}"
    );
    assert!(st.contains("u32"), "the foreign filter went with A: {st}");
    let third = TracerRun::start("10.232.0.2", &args).unwrap();
    stop_ok(second);
    let st = tc_state(&a.name, "oa0");
    assert_eq!(count(&st, "tracer_tc_ingress"), 1, "{st}");
    assert!(st.contains("u32"), "{st}");
    stop_ok(third);
    let st = tc_state(&a.name, "oa0");
    assert!(!st.contains("tracer"), "{st}");
    assert!(st.contains("u32") && st.contains("clsact"), "{st}");
}

/// tcx mode: each tracer's links are its own; a foreign u32 filter stays.
#[test]
fn tcx_tracers_keep_each_others_and_foreign_filters() {
    if !require_privileges("tcx_tracers_keep_each_others_and_foreign_filters") {
        return;
    }
    if !tracer_tests::kernel_at_least(6, 6) {
        eprintln!("SKIPPED (kernel feature): tcx needs Linux 6.6");
        return;
    }
    let (a, _b) = topo();
    Command::new("tc")
        .args(["-n", &a.name, "qdisc", "add", "dev", "oa0", "clsact"])
        .status()
        .unwrap();
    add_foreign_filter(&a.name, "oa0");
    let args = ["--netns", a.name.as_str(), "--tc-attach", "tcx"];
    let (first, first_progs) = start_with_progs(&args);
    let (second, second_progs) = start_with_progs(&args);
    // Both directions on lo and oa0.
    assert_eq!(tcx_links(&first_progs), 4);
    assert_eq!(tcx_links(&second_progs), 4);
    stop_ok(first);
    assert_eq!(tcx_links(&first_progs), 0);
    assert_eq!(tcx_links(&second_progs), 4, "B's links went with A");
    assert!(tc_state(&a.name, "oa0").contains("u32"));
    stop_ok(second);
    assert_eq!(tcx_links(&second_progs), 0);
    let st = tc_state(&a.name, "oa0");
    assert!(st.contains("u32") && st.contains("clsact"), "{st}");
}

/// `tracer cleanup` while a tracer runs: its filters stay (and it still
/// removes them itself at exit); a SIGKILLed tracer's are removed.
#[test]
fn cleanup_leaves_a_running_tracer_alone() {
    if !require_privileges("cleanup_leaves_a_running_tracer_alone") {
        return;
    }
    let (a, _b) = topo();
    let args = ["--netns", a.name.as_str(), "--tc-attach", "netlink"];
    let killed = TracerRun::start("10.232.0.2", &args).unwrap();
    killed.signal(libc::SIGKILL);
    drop(killed);
    let live = TracerRun::start("10.232.0.2", &args).unwrap();
    assert_eq!(count(&tc_state(&a.name, "oa0"), "tracer_tc_ingress"), 2);
    let out = Command::new(tracer_bin()).arg("cleanup").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 running tracer(s) left alone"), "{said}");
    let st = tc_state(&a.name, "oa0");
    assert_eq!(
        count(&st, "tracer_tc_ingress"),
        1,
        "cleanup stripped the live tracer: {st}"
    );
    assert_eq!(count(&st, "tracer_tc_egress"), 1, "{st}");
    stop_ok(live);
    let st = tc_state(&a.name, "oa0");
    assert!(!st.contains("tracer"), "{st}");
    assert!(!st.contains("clsact"), "{st}");
}

/// A namespace deleted by name (`ip netns del`) while a process keeps it
/// alive: tracer holds it open, and detaches there at exit.
#[test]
fn a_namespace_deleted_by_name_is_still_detached() {
    if !require_privileges("a_namespace_deleted_by_name_is_still_detached") {
        return;
    }
    let (a, _b) = topo();
    let keeper = a.spawn(&["sleep", "30"]).unwrap();
    let held = format!("/proc/{}/ns/net", keeper.0.id());
    // `ip netns exec` has entered the namespace once the pid's differs.
    for _ in 0..100 {
        if std::fs::read_link(&held).ok() != std::fs::read_link("/proc/self/ns/net").ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let run = TracerRun::start(
        "10.232.0.2",
        &["--netns", a.name.as_str(), "--tc-attach", "netlink"],
    )
    .unwrap();
    let show = |what: &[&str]| {
        let out = Command::new("nsenter")
            .arg(format!("--net={held}"))
            .arg("tc")
            .args(what)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(show(&["filter", "show", "dev", "oa0", "ingress"]).contains("tracer"));
    Command::new("ip")
        .args(["netns", "del", &a.name])
        .status()
        .unwrap();
    stop_ok(run);
    let st = show(&["filter", "show", "dev", "oa0", "ingress"])
        + &show(&["qdisc", "show", "dev", "oa0"]);
    assert!(
        !st.contains("tracer"),
        "filters left in the deleted namespace: {st}"
    );
    assert!(
        !st.contains("clsact"),
        "qdisc left in the deleted namespace: {st}"
    );
    drop(keeper);
}
