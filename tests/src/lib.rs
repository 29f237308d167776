//! Test support for tracer: network namespaces a test creates and removes,
//! bounded traffic, and running the real `tracer` binary against them.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

pub mod blind_bpf;
pub mod blind_bpfnat;
pub mod blind_ct;
pub mod blind_fw;
pub mod blind_l2;
pub mod blind_more;
pub mod blind_native;
pub mod blind_node;
pub mod blind_ovl;
pub mod blind_port;
pub mod blind_proto;
pub mod blind_scenes;
pub mod blind_sock;
pub mod blind_stack;
pub mod blind_sysctl;
pub mod blind_tunnel;
pub mod blind_veth;
pub mod blind_vtep;
pub mod blind_xdp;
pub mod bpfdrop;
pub mod bpfnat;
pub mod dataplane_scenes;
pub mod evidence;
pub mod ipvs;
pub mod kcost;
pub mod kubepod;
pub mod netns;
pub mod overlays;
pub mod pods;
pub mod redirect;
pub mod replay;
pub mod scenarios;
pub mod sockprog;
pub mod svcscale;
pub mod tracer;
pub mod verdict_log;

/// `TRACER_TIME_SCALE` (default 1): multiplies the tests' waits and
/// timeouts. The kernel-matrix VMs run under software emulation (qemu TCG),
/// several times slower than this machine; `cargo xtask vm` sets it there.
pub fn time_scale() -> f64 {
    std::env::var("TRACER_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s >= 1.0)
        .unwrap_or(1.0)
}

/// `ms` milliseconds, scaled by [`time_scale`].
pub fn scaled_ms(ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis((ms as f64 * time_scale()) as u64)
}

/// `ms` scaled, as a command-line argument (netprobe's `--timeout-ms`).
pub fn scaled_arg(ms: u64) -> String {
    scaled_ms(ms).as_millis().to_string()
}

/// Privileged tests need root and the kernel's BTF. Returns false (after a
/// loud SKIPPED line) only when TRACER_SKIP_PRIVILEGED=1 says skipping is
/// wanted; otherwise a missing privilege fails the test.
pub fn require_privileges(test: &str) -> bool {
    let reason = if unsafe { libc::geteuid() } != 0 {
        Some("not running as root")
    } else if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        Some("kernel has no BTF (/sys/kernel/btf/vmlinux)")
    } else {
        None
    };
    match reason {
        None => true,
        Some(r) if std::env::var("TRACER_SKIP_PRIVILEGED").as_deref() == Ok("1") => {
            eprintln!("\n!!!!! SKIPPED (privileged) {test}: {r} !!!!!\n");
            false
        }
        Some(r) => panic!(
            "{test} needs root and BTF: {r}. Run as root, or set TRACER_SKIP_PRIVILEGED=1 to skip it loudly"
        ),
    }
}

/// Whether the running kernel is at least `major.minor`.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (major, minor)
}

/// Tests of what only some kernels have (IPVS, kprobes, fentry): false,
/// after a loud SKIPPED line, when this kernel lacks it, unless
/// TRACER_REQUIRE_KERNEL_FEATURES=1 (set in the kernel-matrix VMs, which
/// have them) makes that a failure.
pub fn require_kernel_feature(test: &str, missing: Option<String>) -> bool {
    let Some(why) = missing else {
        return true;
    };
    assert!(
        std::env::var("TRACER_REQUIRE_KERNEL_FEATURES").as_deref() != Ok("1"),
        "{test}: {why} (required here: TRACER_REQUIRE_KERNEL_FEATURES=1)"
    );
    eprintln!(
        "\n!!!!! SKIPPED (kernel feature) {test}: {why}; it runs in `cargo xtask vm` (Debian 5.10, 6.1 and 6.12) !!!!!\n"
    );
    // `cargo xtask test` lists these in its summary (the harness hides a
    // passing test's stderr).
    if let Some(p) = std::env::var_os("TRACER_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            let _ = writeln!(f, "{test}: {why}");
        }
    }
    false
}

/// Build scenario `name`, run tracer on it, send its traffic, stop, and
/// return the final record of the flow to `dport` (with a dump of all
/// output for assertion messages). None when privileged tests are skipped.
pub fn trace_scenario(name: &str, dport: u64) -> Option<(serde_json::Value, String)> {
    trace_scenario_env(name, dport, &[])
}

/// Same, with extra environment for the tracer.
pub fn trace_scenario_env(
    name: &str,
    dport: u64,
    env: &[(&str, &str)],
) -> Option<(serde_json::Value, String)> {
    let (out, seen) = trace_scenario_out(name, env)?;
    let flow = out.flow_to(dport).clone();
    eprintln!("{name}: client saw {seen:?}; verdict {}", flow["verdict"]);
    Some((flow, out.dump()))
}

/// Build, trace, send, stop: the tracer's whole output (checked: exit 0,
/// a summary, no lost events) and what the client saw.
pub fn trace_scenario_out(
    name: &str,
    env: &[(&str, &str)],
) -> Option<(tracer::TracerOutput, String)> {
    trace_scenario_run(name, env, false, &[], &mut no_prep, &mut |_| {})
        .map(|(out, seen, _)| (out, seen))
}

/// [`trace_scenario_out`] with extra arguments for `tracer follow` (e.g.
/// `--pcap FILE`), and the run's recording handed to `with_recording`
/// before it is removed.
pub fn trace_scenario_with(
    name: &str,
    extra: &[&str],
    with_recording: &mut dyn FnMut(&std::path::Path),
) -> Option<(tracer::TracerOutput, String)> {
    trace_scenario_run(name, &[], false, extra, &mut no_prep, with_recording)
        .map(|(out, seen, _)| (out, seen))
}

/// [`trace_scenario_with`], with `prepare` run on the built scenario
/// before tracer starts: what it returns (e.g. a fixture that makes a
/// namespace a pod) is dropped after the run, before the scenario.
pub fn trace_scenario_prepared(
    name: &str,
    prepare: &mut dyn FnMut(&scenarios::Scenario) -> Box<dyn std::any::Any>,
    with_recording: &mut dyn FnMut(&std::path::Path),
) -> Option<(tracer::TracerOutput, String)> {
    trace_scenario_run(name, &[], false, &[], prepare, with_recording)
        .map(|(out, seen, _)| (out, seen))
}

/// No preparation.
fn no_prep(_: &scenarios::Scenario) -> Box<dyn std::any::Any> {
    Box::new(())
}

/// [`trace_scenario_out`] with `--netns` on every namespace of the scene
/// when `netns_scope` (unless its arguments already scope it): tc then
/// covers every interface and the netif_receive_skb and net_dev_start_xmit
/// tracepoints are left to it. Returns the output and the target's port.
pub fn trace_scenario_scoped(name: &str, netns_scope: bool) -> Option<(tracer::TracerOutput, u64)> {
    trace_scenario_run(name, &[], netns_scope, &[], &mut no_prep, &mut |_| {})
        .map(|(out, _, dport)| (out, dport))
}

fn trace_scenario_run(
    name: &str,
    env: &[(&str, &str)],
    netns_scope: bool,
    extra: &[&str],
    prepare: &mut dyn FnMut(&scenarios::Scenario) -> Box<dyn std::any::Any>,
    with_recording: &mut dyn FnMut(&std::path::Path),
) -> Option<(tracer::TracerOutput, String, u64)> {
    if !require_privileges(name) {
        return None;
    }
    let sc = scenarios::build(name).expect("build scenario");
    // Dropped before the scenario (declared after it).
    let prepared = prepare(&sc);
    let mut args: Vec<String> = sc
        .arg_refs()
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    if netns_scope && !args.iter().any(|a| a == "--netns") {
        for n in &sc.nss {
            args.push("--netns".into());
            args.push(n.name.clone());
        }
    }
    // Every traced scenario is recorded, and its replay must print the
    // same final flows and verdicts (record and replay's golden test, on
    // every kernel the suites run on).
    args.extend(extra.iter().map(std::string::ToString::to_string));
    let recording = recording_path(name);
    args.push("--record".into());
    args.push(recording.display().to_string());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = tracer::TracerRun::start_env(&sc.target, "json", &refs, env).expect("start tracer");
    let seen = sc.traffic().expect("traffic");
    let out = run.stop().expect("stop tracer");
    assert!(
        out.status.is_some_and(|s| s.success()),
        "tracer failed: {}",
        out.dump()
    );
    let summary = out.summary().expect("summary line");
    assert_eq!(summary["lost_events"], 0, "{}", out.dump());
    replay::assert_replays_as_followed(&recording, &out, name);
    with_recording(&recording);
    keep_recording(&recording, name, netns_scope);
    // A target without a port (an address, as for IP in IP) has no flow
    // the sweep could pick by port.
    let dport: Option<u64> = sc.target.rsplit_once(':').and_then(|(_, p)| p.parse().ok());
    // A plain run (the scene's own arguments, nothing prepared or added,
    // the binary itself) is what the `--netns` sweep compares against.
    if let Some(dport) = dport
        && env.is_empty()
        && extra.is_empty()
        && prepared.is::<()>()
        && !tracer::launcher_active()
        // A scene where nothing reached a traced hook has no verdict.
        && let Some(flow) = out
            .final_flows()
            .into_iter()
            .find(|f| f["original"]["dport"] == dport)
    {
        verdict_log::record(name, netns_scope, &verdict_log::of_flow(flow));
    }
    Some((out, seen, dport.unwrap_or(0)))
}

/// `TRACER_KEEP_RECORDINGS=DIR`: keep each scenario's recording there as
/// `SCENARIO[-netns]-KERNEL.rec` (how tests/recordings was made); else
/// it is removed.
pub fn keep_recording(path: &std::path::Path, name: &str, netns_scope: bool) {
    if let Some(dir) = std::env::var_os("TRACER_KEEP_RECORDINGS") {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let scope = if netns_scope { "-netns" } else { "" };
        let dest = std::path::Path::new(&dir).join(format!("{name}{scope}-{}.rec", kernel.trim()));
        let _ = std::fs::create_dir_all(&dir);
        std::fs::copy(path, &dest).expect("keep recording");
    }
    let _ = std::fs::remove_file(path);
}

/// A fresh path for a scenario's recording.
pub fn recording_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tracer-rec-{}-{name}.rec", netns::unique_prefix()))
}

/// The evidence kinds of a judged flow's verdict (`verdict.evidence[].kind`).
pub fn evidence_kinds(f: &serde_json::Value) -> Vec<&str> {
    f["verdict"]["evidence"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default()
}

/// The first fact of kind `kind` of a judged flow's verdict; a test
/// failure (with the flow) when it has none.
pub fn evidence_of<'a>(f: &'a serde_json::Value, kind: &str) -> &'a serde_json::Value {
    f["verdict"]["evidence"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["kind"] == kind))
        .unwrap_or_else(|| panic!("no {kind} fact in {f}"))
}

/// A string field of a judged flow's verdict (`kind`, `reason`, `where`,
/// `hint`), empty when absent.
pub fn verdict_said(f: &serde_json::Value, key: &str) -> String {
    f["verdict"][key].as_str().unwrap_or_default().to_string()
}
