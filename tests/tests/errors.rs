//! Bad input gets one clear line and a non-zero exit (2 for a usage
//! error), never a panic.
//! These run unprivileged too: arguments are checked before anything else.

use std::process::Command;

use tracer_tests::tracer::tracer_bin;

fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(tracer_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{args:?}: {err}"
    );
    (out.status.code().unwrap_or(-1), err)
}

#[test]
fn bad_inputs_are_one_clear_error() {
    let cases: &[(&[&str], i32, &str)] = &[
        (&["follow", "10.0.0.300"], 2, "not an IPv4/IPv6 address"),
        (&["follow", "10.0.0.1:0"], 2, "bad port"),
        (&["follow", "10.0.0.1:99999"], 2, "bad port"),
        (&["follow", "10.0.0.1/33"], 2, "bad prefix length"),
        (&["follow", "[fd00::1"], 2, "not an IPv4/IPv6 address"),
        (
            &["follow", "10.0.0.1:53", "--proto", "icmp"],
            2,
            "a port only applies to tcp or udp",
        ),
        (
            &["follow", "10.0.0.1", "--proto", "sctp"],
            2,
            "invalid value",
        ),
        (
            &["follow", "10.0.0.1", "--netns", "no-such-netns-xyz"],
            2,
            "not found",
        ),
        (
            &["follow", "10.0.0.1", "--netns", "999999999"],
            2,
            "not found",
        ),
        (
            &["follow", "10.0.0.1", "-o", "yaml"],
            2,
            "invalid value 'yaml'",
        ),
        (
            &["follow", "10.0.0.1", "--duration", "5x"],
            2,
            "bad duration",
        ),
        (
            &["follow", "10.0.0.1", "--max-cpu", "150"],
            2,
            "bad CPU budget '150'",
        ),
        (
            &["follow", "10.0.0.1", "--max-cpu", "NaN"],
            2,
            "bad CPU budget 'NaN'",
        ),
        (
            &["follow", "10.0.0.1", "--duration", "0s"],
            2,
            "out of range",
        ),
        (
            &["follow", "10.0.0.1", "--snaplen", "9000"],
            2,
            "bad snap length '9000': a number of bytes from 0 to 1600",
        ),
        (
            &["follow", "10.0.0.1", "--dns-port", "853"],
            2,
            "port 853 is DNS over TLS: encrypted, its questions cannot be read",
        ),
        (
            &["follow", "10.0.0.1", "--dns-port", "0"],
            2,
            "bad DNS port '0': a port number from 1 to 65535",
        ),
        (
            &[
                "replay",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/recordings/dns_queries-6.18.rec"
                ),
                "--pcap",
                "/nonexistent/dir/x.pcapng",
            ],
            1,
            "cannot write pcap file /nonexistent/dir/x.pcapng: No such file or directory",
        ),
        (
            &[
                "replay",
                "x.rec",
                "--pcap",
                "x.pcapng",
                "--pcap-max-mb",
                "0",
            ],
            2,
            "invalid value '0' for '--pcap-max-mb <MB>'",
        ),
        (&["follow"], 2, "required"),
        (&["follow", "10.0.0.1", "--bogus"], 2, "unexpected argument"),
        (&["frobnicate"], 2, "unrecognized subcommand"),
    ];
    for (args, code, needle) in cases {
        let (c, err) = run(args, &[]);
        assert_eq!(c, *code, "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
    }
}

/// `tracer merge` on bad input: one line each, exit 2, nothing on stdout.
#[test]
fn merge_bad_inputs_are_one_clear_line() {
    let dir = std::env::temp_dir().join(format!("tracer-merge-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let empty = write("empty.json", "");
    let text = write(
        "text.json",
        "flow #1 tcp 10.0.0.1:1 -> 10.0.0.2:80  =>  DROPPED\n",
    );
    let other = write("other.json", "{\"type\":\"path\",\"id\":1}\n");
    let old = write(
        "old.json",
        "{\"type\":\"summary\",\"flows\":0,\"stop\":\"interrupted\"}\n",
    );
    let missing = dir.join("missing.json").display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["merge"], "required"),
        (
            vec!["merge", &missing, &empty],
            "missing.json: No such file or directory",
        ),
        (
            vec!["merge", &empty, &old],
            "empty.json: empty: no tracer JSON records",
        ),
        (
            vec!["merge", &text, &old],
            "text.json:1: not tracer JSON (`tracer follow -o json`): not JSON",
        ),
        (vec!["merge", &other, &old], "a record of type \"path\""),
        (vec!["merge", &old, &old], "no wall-clock times"),
        (vec!["merge", "-o", "yaml", &old], "invalid value 'yaml'"),
    ];
    for (args, needle) in &cases {
        let out = Command::new(tracer_bin()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
        if args.len() > 2 && !args.contains(&"-o") {
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `follow --pcap` to a path that cannot be written: one line, exit 1,
/// before anything is attached (root: the privilege check comes first).
#[test]
fn unwritable_pcap_is_one_clear_error() {
    if unsafe { libc::geteuid() } != 0 {
        // Without root the privilege check answers first (below).
        return;
    }
    let (c, err) = run(
        &["follow", "10.0.0.1", "--pcap", "/nonexistent/dir/x.pcapng"],
        &[],
    );
    assert_eq!(c, 1, "{err}");
    assert_eq!(
        err.trim_end(),
        "tracer: error: cannot write pcap file /nonexistent/dir/x.pcapng: No such file or directory (os error 2)"
    );
}

#[test]
fn missing_btf_is_explained() {
    if unsafe { libc::geteuid() } != 0 {
        // Without root the privilege check answers first; that is covered below.
        return;
    }
    let (c, err) = run(
        &["follow", "10.0.0.1"],
        &[("TRACER_BTF", "/nonexistent/vmlinux")],
    );
    assert_eq!(c, 1);
    assert!(
        err.contains("no BTF") && err.contains("CONFIG_DEBUG_INFO_BTF"),
        "{err}"
    );
}

#[test]
fn not_root_is_explained() {
    if unsafe { libc::geteuid() } != 0 {
        let (c, err) = run(&["follow", "10.0.0.1"], &[]);
        assert_eq!(c, 1);
        assert!(err.contains("needs root"), "{err}");
        return;
    }
    // As root: drop to nobody for the one call.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(tracer_bin())
        .args(["follow", "10.0.0.1"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs root") && err.contains("sudo"), "{err}");
}

/// `doctor --reasons`: every drop reason of this kernel with the causes
/// that explain it (no root needed: the kernel's BTF is world-readable),
/// the count last; without BTF, one clear line and exit 1.
#[test]
fn doctor_lists_the_drop_reasons_the_causes_explain() {
    let out = Command::new(tracer_bin())
        .args(["doctor", "--reasons", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reasons = v["reasons"].as_array().unwrap();
    assert_eq!(v["total"].as_u64(), Some(reasons.len() as u64), "{v}");
    let causes = |r: &str| {
        reasons
            .iter()
            .find(|x| x["reason"] == r)
            .and_then(|x| x["causes"].as_array().cloned())
            .unwrap_or_else(|| panic!("no {r}: {v}"))
    };
    assert!(
        causes("NO_SOCKET")[0]["facts"]
            .as_str()
            .unwrap()
            .contains("listeners")
    );
    assert!(
        causes("NO_TX_TARGET")[0]["cause"]
            .as_str()
            .unwrap()
            .contains("VXLAN")
    );
    assert!(
        causes("TCP_CSUM")[0]["cause"]
            .as_str()
            .unwrap_or_default()
            .contains("checksum.rs"),
        "{v}"
    );
    assert!(causes("PROTO_MEM").is_empty(), "{v}");
    let explained = reasons
        .iter()
        .filter(|x| !x["causes"].as_array().unwrap().is_empty())
        .count();
    assert_eq!(v["explained"].as_u64(), Some(explained as u64));
    assert!(explained >= 38, "{v}");
    let out = Command::new(tracer_bin())
        .args(["doctor", "--reasons"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!("{explained} of {} drop reasons explained", reasons.len()),
        "{text}"
    );
    let out = Command::new(tracer_bin())
        .args(["doctor", "--reasons"])
        .env("TRACER_BTF", "/nonexistent/vmlinux")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn doctor_reports_everything_at_once() {
    if unsafe { libc::geteuid() } != 0 {
        let (c, _) = run(&["doctor"], &[]);
        assert_eq!(c, 1, "doctor fails without root");
        return;
    }
    let out = Command::new(tracer_bin())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for n in [
        "privileges",
        "kernel",
        "lockdown",
        "bpffs",
        "tracefs",
        "btf",
        "offsets",
        "drop reasons",
        "hooks",
        "tc",
        "helpers",
    ] {
        assert!(names.contains(&n), "doctor lacks {n}: {v}");
    }
    assert_eq!(v["ok"], true, "{v}");
    // Every hook has a backend, or none with the reason; the core timeline
    // hooks are served here; kprobes only where the kernel has the PMU.
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
    for h in v["hooks"].as_array().unwrap() {
        let b = h["backend"].as_str().unwrap();
        assert!(["fentry", "kprobe", "tp_btf", "none"].contains(&b), "{h}");
        if b == "none" {
            // Why: an error, or why nothing on this node needs it.
            let why = h["error"].as_str().or(h["not_needed"].as_str());
            assert!(why.is_some_and(|e| !e.is_empty()), "{h}");
        }
        if b == "kprobe" {
            assert!(kprobes, "{h}");
        }
        if ["netif_receive", "xmit", "drop"].contains(&h["hook"].as_str().unwrap()) {
            assert_eq!(b, "tp_btf", "{h}");
        }
    }
    if !kprobes {
        let ipvs = v["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["hook"] == "ipvs_schedule")
            .unwrap();
        assert_eq!(ipvs["backend"], "none", "{ipvs}");
        assert!(ipvs["error"].as_str().unwrap().contains("kprobe"), "{ipvs}");
    }
    // Without BTF: the check fails, with the reason, and the exit code says so.
    let out = Command::new(tracer_bin())
        .args(["doctor"])
        .env("TRACER_BTF", "/nonexistent/vmlinux")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text.contains("FAIL btf") && text.contains("CONFIG_DEBUG_INFO_BTF"),
        "{text}"
    );
    // A hook the kernel lacks shows up in the plan with why.
    let out = Command::new(tracer_bin())
        .args(["doctor"])
        .env("TRACER_SKIP_HOOKS", "fib_lookup")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fib_lookup     none") && text.contains("disabled by TRACER_SKIP_HOOKS"),
        "{text}"
    );
}
