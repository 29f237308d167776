//! tracer leaves nothing attached: SIGINT, SIGTERM, --duration expiry and
//! errors during attach all remove every tc link/filter and program; with
//! netlink (clsact) attachment the qdisc it created goes too. After SIGKILL
//! only netlink filters can survive, and `tracer cleanup` removes them.

use std::{collections::BTreeSet, process::Command, time::Duration};

use serde_json::Value;
use tracer_tests::{
    netns::{Netns, unique_prefix, veth},
    require_privileges,
    tracer::{TracerRun, tracer_bin},
};

fn bpftool(args: &[&str]) -> Value {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .expect("bpftool");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]))
}

/// IDs of loaded programs named tracer_*.
fn tracer_progs() -> BTreeSet<u64> {
    bpftool(&["prog", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with("tracer_")))
        .map(|p| p["id"].as_u64().unwrap())
        .collect()
}

/// Links (any type, tcx included) whose program is one of `ids`.
fn links_of(ids: &BTreeSet<u64>) -> Vec<Value> {
    bpftool(&["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["prog_id"].as_u64().is_some_and(|p| ids.contains(&p)))
        .cloned()
        .collect()
}

/// A namespace with two veth ends to hook.
fn topo() -> (Netns, Netns) {
    let p = unique_prefix();
    let a = Netns::new(format!("{p}-a")).unwrap();
    let b = Netns::new(format!("{p}-b")).unwrap();
    veth(&a, "ca0", &b, "cb0").unwrap();
    a.ip(&["addr", "add", "10.231.0.1/24", "dev", "ca0"])
        .unwrap();
    // An nf_tables table: tracer adds its nftrace table next to it.
    a.exec(&["nft", "add", "table", "ip", "filter"]).unwrap();
    (a, b)
}

/// The nf_tables tables of `ns`, as `nft list tables` prints them.
fn nft_tables(ns: &Netns) -> String {
    String::from_utf8_lossy(&ns.exec(&["nft", "list", "tables"]).unwrap().stdout).into_owned()
}

fn tc_state(ns: &Netns, dev: &str) -> String {
    let mut s = String::new();
    for dir in ["ingress", "egress"] {
        s += &String::from_utf8_lossy(
            &ns.exec(&["tc", "filter", "show", "dev", dev, dir])
                .unwrap()
                .stdout,
        );
    }
    s += &String::from_utf8_lossy(
        &ns.exec(&["tc", "qdisc", "show", "dev", dev])
            .unwrap()
            .stdout,
    );
    s
}

/// Start, check that our programs are attached, stop with `stop`, check
/// that nothing is left.
fn stops_cleanly(name: &str, extra: &[&str], stop: impl FnOnce(&TracerRun)) {
    if !require_privileges(name) {
        return;
    }
    let (a, _b) = topo();
    let before = tracer_progs();
    let mut args = vec!["--netns", a.name.as_str()];
    args.extend_from_slice(extra);
    let run = TracerRun::start("10.231.0.2", &args).expect("start");
    let ours: BTreeSet<u64> = tracer_progs().difference(&before).copied().collect();
    assert!(
        ours.len() >= 3,
        "expected tracer programs loaded, got {ours:?}"
    );
    assert!(
        nft_tables(&a).contains("table inet tracer_"),
        "no nftrace table: {}",
        nft_tables(&a)
    );
    let netlink = extra.contains(&"netlink");
    if netlink {
        let st = tc_state(&a, "ca0");
        assert!(
            st.contains("tracer_tc_ingress") && st.contains("clsact"),
            "not attached: {st}"
        );
    } else {
        assert!(
            links_of(&ours)
                .iter()
                .any(|l| l["type"] == 11 || l["type"] == "tcx"),
            "no tcx link"
        );
    }
    stop(&run);
    let out = run.stop().expect("stop");
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.dump());
    // Program teardown in the kernel is asynchronous (RCU): allow a moment.
    let mut left = BTreeSet::new();
    for _ in 0..50 {
        left = tracer_progs().intersection(&ours).copied().collect();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(left.is_empty(), "programs left loaded: {left:?}");
    assert!(links_of(&ours).is_empty(), "links left");
    assert!(
        !nft_tables(&a).contains("tracer_"),
        "nftrace table left: {}",
        nft_tables(&a)
    );
    let st = tc_state(&a, "ca0");
    assert!(!st.contains("tracer"), "tc filters left: {st}");
    if netlink {
        assert!(
            !st.contains("clsact"),
            "clsact qdisc we created was left: {st}"
        );
    }
}

#[test]
fn sigint_leaves_nothing() {
    stops_cleanly("sigint_leaves_nothing", &[], |r| r.signal(libc::SIGINT));
}

#[test]
fn sigterm_leaves_nothing() {
    stops_cleanly("sigterm_leaves_nothing", &[], |r| r.signal(libc::SIGTERM));
}

#[test]
fn duration_expiry_leaves_nothing() {
    // stop() sends SIGINT after 700 ms; the 300 ms duration ends the run first.
    stops_cleanly(
        "duration_expiry_leaves_nothing",
        &["--duration", "300ms"],
        |_| {},
    );
}

#[test]
fn netlink_mode_sigterm_removes_filters_and_qdisc() {
    stops_cleanly(
        "netlink_mode_sigterm_removes_filters_and_qdisc",
        &["--tc-attach", "netlink"],
        |r| r.signal(libc::SIGTERM),
    );
}

#[test]
fn error_during_attach_leaves_nothing() {
    if !require_privileges("error_during_attach_leaves_nothing") {
        return;
    }
    let (a, _b) = topo();
    let before = tracer_progs();
    let out = Command::new(tracer_bin())
        .args([
            "follow",
            "10.231.0.2",
            "--netns",
            &a.name,
            "--iface",
            "nosuchdev0",
            "--tc-attach",
            "netlink",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nosuchdev0") && err.contains("not found"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    let left: BTreeSet<u64> = tracer_progs().difference(&before).copied().collect();
    assert!(
        left.is_empty(),
        "programs left after a failed attach: {left:?}"
    );
    assert!(!tc_state(&a, "ca0").contains("clsact"));
}

/// SIGKILL cannot be handled: tcx links close with the process, netlink
/// filters survive (documented), and `tracer cleanup` removes them.
#[test]
fn after_sigkill_cleanup_removes_netlink_leftovers() {
    if !require_privileges("after_sigkill_cleanup_removes_netlink_leftovers") {
        return;
    }
    let (a, _b) = topo();
    let run = TracerRun::start(
        "10.231.0.2",
        &["--netns", &a.name, "--tc-attach", "netlink"],
    )
    .unwrap();
    assert!(nft_tables(&a).contains("table inet tracer_"));
    run.signal(libc::SIGKILL);
    let _ = run.stop();
    // The nftrace table is owned by the killed process's netlink socket
    // (NFT_TABLE_F_OWNER, Linux 5.12): the kernel removed it.
    let owner_flag = tracer_tests::kernel_at_least(5, 12);
    if owner_flag {
        assert!(
            !nft_tables(&a).contains("tracer_"),
            "the kernel kept the killed tracer's table: {}",
            nft_tables(&a)
        );
    }
    // A table tracer left on an older kernel (made here by hand): cleanup
    // deletes it.
    a.exec(&["nft", "add", "table", "inet", "tracer_4000000"])
        .unwrap();
    let st = tc_state(&a, "ca0");
    assert!(
        st.contains("tracer_tc_ingress"),
        "expected a surviving filter: {st}"
    );
    let out = Command::new(tracer_bin()).arg("cleanup").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("ca0"), "{said}");
    assert!(
        said.contains(&format!(
            "removed nf_tables table inet tracer_4000000 from netns {}",
            a.name
        )),
        "{said}"
    );
    assert!(!nft_tables(&a).contains("tracer_"), "{}", nft_tables(&a));
    let st = tc_state(&a, "ca0");
    assert!(!st.contains("tracer"), "cleanup left filters: {st}");
    assert!(
        !st.contains("clsact"),
        "cleanup left the empty clsact qdisc: {st}"
    );
}
