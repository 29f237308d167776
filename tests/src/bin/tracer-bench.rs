//! Traffic benchmark (issue 5): iperf3 between two namespaces over a veth
//! pair, small-packet UDP (packets/s) and a TCP stream (bits/s), for four
//! cases side by side: no tracing, tracer following an address the traffic
//! does not match, tracer following the flow, and tcpdump with the
//! equivalent filter. Prints a Markdown section (median and spread, ratio to
//! the baseline) and, with --write, replaces it in BENCHMARKS.md.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::Value;
use tracer_tests::{
    kcost,
    netns::{Child, Netns, unique_prefix, veth},
    pods::{Node, Pods, tracer_hooked},
    require_privileges, svcscale,
    tracer::{Keep, TracerRun, status_kib},
};

#[derive(Parser)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one flag per section run alone"
)]
struct Args {
    /// Repetitions per case.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seconds per iperf3 run.
    #[arg(long, default_value_t = 4)]
    secs: u32,
    /// Replace the traffic section of this file.
    #[arg(long)]
    write: Option<std::path::PathBuf>,
    /// Flows of the memory case (DNS-like UDP flows, one datagram and its
    /// echo each); 0 skips it.
    #[arg(long, default_value_t = 100_000)]
    flows: u32,
    /// Their rate, flows/s.
    #[arg(long, default_value_t = 10_000)]
    flow_rate: u32,
    /// Pod counts of the node-scale case (comma-separated); empty skips it.
    #[arg(long, default_value = "0,50,250", value_delimiter = ',')]
    pods: Vec<usize>,
    /// Repetitions per pod count.
    #[arg(long, default_value_t = 3)]
    pods_reps: usize,
    /// Only the node-scale case (replaces its section alone with --write).
    #[arg(long)]
    pods_only: bool,
    /// Only the kernel time per packet (bpf_stats; replaces its section
    /// alone with --write).
    #[arg(long)]
    kernel_cost_only: bool,
    /// Service counts of the cluster-scale case (comma-separated); empty
    /// skips it.
    #[arg(long, default_value = "20,5000", value_delimiter = ',')]
    services: Vec<usize>,
    /// Conntrack entries of its loaded case.
    #[arg(long, default_value_t = 100_000)]
    conntrack: u32,
    /// Only the cluster-scale case (replaces its section alone with
    /// --write).
    #[arg(long)]
    services_only: bool,
    /// Only followed traffic against tcpdump (baseline, following, with
    /// --no-nftrace, tcpdump), UDP and TCP: replaces its section alone
    /// with --write.
    #[arg(long)]
    followed_only: bool,
}

/// Each round's rate of `pair.0` over that of `pair.1`, as "median
/// [min-max]" in `line`; nothing when either case did not run.
fn paired_over(
    cases: &[Case],
    samples: &[Vec<Sample>],
    pair: (Case, Case),
    line: impl Fn(String) -> String,
) -> String {
    let idx = |c: Case| cases.iter().position(|&x| x == c);
    let (Some(a), Some(b)) = (idx(pair.0), idx(pair.1)) else {
        return String::new();
    };
    let mut r: Vec<f64> = samples[a]
        .iter()
        .zip(&samples[b])
        .map(|(x, y)| x.rate / y.rate)
        .collect();
    let m = median(&mut r);
    format!(
        "\n{}\n",
        line(format!("{m:.3} [{:.3}-{:.3}]", r[0], r[r.len() - 1]))
    )
}

/// The cluster-scale section (issue 31 item 3): ready time and RSS of
/// `follow` on a node with kube-proxy's rules for few and many Services,
/// in both modes, with and without a full conntrack table, against the
/// smallest case of the same mode.
fn services_section(counts: &[usize], conntrack: u32, reps: usize) -> Result<String> {
    let mut md = format!(
        "<!-- services:begin -->\n## Cluster scale: kube-proxy's rules for N Services\n\n\
         A node namespace holding kube-proxy's rules for N ClusterIP Services (`tests/src/svcscale.rs`: iptables mode as \
         iptables-nft loads it, half the Services with two endpoints; nftables mode, a `service-ips` map element and chains \
         per Service), the last Service without endpoints; `tracer follow` of that Service with `--netns`, a client connecting \
         three times: each run checks the verdict (`dropped`) names kube-proxy's rule that rejected it. With conntrack: {conntrack} entries \
         (unreplied UDP flows) made before tracer starts. {reps} runs per case, median [min-max]; ratios of medians to the \
         first row of the same mode. Ready (wall): from spawning tracer to its ready file. Made by `tracer-bench --services-only` \
         (in `cargo xtask bench`).\n\n\
         | mode | Services | rules or map elements | conntrack entries | ready ms (wall) | ready ms (tracer) | x ready | start RSS MiB | peak RSS MiB | x peak | verdict |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let stat = |v: Vec<f64>| -> Option<(f64, f64, f64)> {
        if v.is_empty() {
            return None;
        }
        let mut v = v;
        let m = median(&mut v);
        Some((m, v[0], v[v.len() - 1]))
    };
    let show = |s: Option<(f64, f64, f64)>, prec: usize| {
        s.map_or("-".into(), |(m, lo, hi)| {
            format!("{m:.prec$} [{lo:.prec$}-{hi:.prec$}]")
        })
    };
    for mode in [svcscale::Mode::Iptables, svcscale::Mode::Nftables] {
        let mut first: Option<(f64, f64)> = None;
        for &n in counts {
            let node = svcscale::Node::new(mode, n)?;
            for ct in [0, conntrack] {
                if ct > 0 && n != *counts.last().unwrap_or(&n) {
                    continue;
                }
                let entries = node.fill_conntrack(ct)?;
                let mut runs = Vec::new();
                for _ in 0..reps {
                    let r = svcscale::run(&node)?;
                    eprintln!(
                        "services {} {n} ct {entries}: ready {:.0} ms (tracer {:?}), start {:?} KiB, peak {:?} KiB: {} at {}",
                        mode.name(),
                        r.wall_ready_ms,
                        r.ready_ms,
                        r.start_hwm_kib,
                        r.peak_kib,
                        r.verdict,
                        r.where_
                    );
                    runs.push(r);
                }
                let mib = |k: Option<u64>| k.map(|k| k as f64 / 1024.0);
                let wall = stat(runs.iter().map(|r| r.wall_ready_ms).collect());
                let peak = stat(runs.iter().filter_map(|r| mib(r.peak_kib)).collect());
                let base = *first.get_or_insert((
                    wall.map_or(f64::NAN, |w| w.0),
                    peak.map_or(f64::NAN, |p| p.0),
                ));
                let ratio = |s: Option<(f64, f64, f64)>, b: f64| {
                    s.map_or("-".into(), |(m, _, _)| format!("{:.2}", m / b))
                };
                md += &format!(
                    "| {} | {n} | {} | {entries} | {} | {} | {} | {} | {} | {} | {} |\n",
                    mode.name(),
                    node.size,
                    show(wall, 0),
                    show(
                        stat(
                            runs.iter()
                                .filter_map(|r| r.ready_ms.map(|x| x as f64))
                                .collect()
                        ),
                        0
                    ),
                    ratio(wall, base.0),
                    show(
                        stat(runs.iter().filter_map(|r| mib(r.start_hwm_kib)).collect()),
                        1
                    ),
                    show(peak, 1),
                    ratio(peak, base.1),
                    runs.first().map_or("-", |r| r.verdict.as_str()),
                );
            }
        }
    }
    md += "\n<!-- services:end -->\n";
    Ok(md)
}

#[derive(Clone, Copy, PartialEq)]
enum Case {
    Baseline,
    NonMatching,
    /// Without `--netns`: tc on the host's interfaces only, so the device
    /// tracepoints are attached for the rest (the default mode on a node).
    NonMatchingAllNs,
    /// tracer as in `NonMatching`, its kernel programs empty
    /// (TRACER_EMPTY_PROGRAMS=1): what the same hooks cost with nothing in
    /// them, the floor under `NonMatching`.
    EmptyPrograms,
    /// As `NonMatching` with `--no-nftrace`: what tracer's nf_tables
    /// table (one rule per packet at prerouting and output in each
    /// namespace with tables) costs, by difference.
    NonMatchingNoNftrace,
    Following,
    /// As `Following` with `--no-nftrace`: the followed packets' nftrace
    /// cost (a trace message per rule they meet), by difference.
    FollowingNoNftrace,
    /// As `Following` with `--snaplen 0`: the cost of copying the
    /// followed packets' bytes, by difference.
    FollowingNoBytes,
    Tcpdump,
    /// tcpdump with a filter the traffic does not match: the peer's cost
    /// on traffic it is not capturing.
    TcpdumpNonMatching,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Baseline => "baseline (no tracing)",
            Case::NonMatching => "tracer, address not matched",
            Case::NonMatchingAllNs => "tracer, not matched, all namespaces (no --netns)",
            Case::EmptyPrograms => "tracer, not matched, empty programs (the hooks' own cost)",
            Case::NonMatchingNoNftrace => "tracer, not matched, --no-nftrace",
            Case::Following => "tracer following the flow",
            Case::FollowingNoNftrace => "tracer following, --no-nftrace",
            Case::FollowingNoBytes => "tracer following, --snaplen 0 (no bytes)",
            Case::Tcpdump => "tcpdump -i any -w /dev/null",
            Case::TcpdumpNonMatching => "tcpdump -i any -w /dev/null, not matched",
        }
    }
}

struct Sample {
    rate: f64,
    events_per_s: Option<f64>,
    counted_per_s: Option<f64>,
    lost: Option<u64>,
    ready_ms: Option<u64>,
    detach_ms: Option<u64>,
    rss_kib: Option<u64>,
}

/// CPUs for the iperf3 client and server: apart, and the same in every
/// run. Left to the scheduler, the two (and the softirq work, which on a
/// veth pair runs on the sender's CPU) landed differently from run to run:
/// the baseline alone spread over 15%.
fn cpus() -> (String, String) {
    let n = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    ("0".into(), (n - 1).to_string())
}

fn iperf(a: &Netns, udp: bool, secs: u32) -> Result<f64> {
    let j = iperf_json(a, udp, secs)?;
    Ok(if udp {
        let sum = &j["end"]["sum"];
        let pk =
            sum["packets"].as_f64().unwrap_or(0.0) - sum["lost_packets"].as_f64().unwrap_or(0.0);
        pk / sum["seconds"].as_f64().unwrap_or(1.0)
    } else {
        j["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0)
    })
}

/// One iperf3 run's JSON report (`-J`).
fn iperf_json(a: &Netns, udp: bool, secs: u32) -> Result<Value> {
    let (client_cpu, _) = cpus();
    let mut args = vec![
        "taskset",
        "-c",
        &client_cpu,
        "iperf3",
        "-c",
        "10.240.0.2",
        "-J",
        "-t",
    ];
    let s = secs.to_string();
    args.push(&s);
    if udp {
        args.extend_from_slice(&["-u", "-b", "0", "-l", "64"]);
    }
    let out = a.exec_status(&args);
    let j: Value = serde_json::from_slice(&out.stdout).context("iperf3 JSON")?;
    if let Some(e) = j["error"].as_str() {
        bail!("iperf3: {e}");
    }
    Ok(j)
}

fn run_case(case: Case, a: &Netns, b: &Netns, udp: bool, secs: u32) -> Result<Sample> {
    let scope = ["--netns", a.name.as_str(), "--netns", b.name.as_str()];
    let mut s = Sample {
        rate: 0.0,
        events_per_s: None,
        counted_per_s: None,
        lost: None,
        ready_ms: None,
        detach_ms: None,
        rss_kib: None,
    };
    match case {
        Case::Baseline => s.rate = iperf(a, udp, secs)?,
        Case::Tcpdump | Case::TcpdumpNonMatching => {
            let host = if case == Case::Tcpdump {
                "10.240.0.2"
            } else {
                "10.99.99.99"
            };
            let mut td = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &a.name,
                    "tcpdump",
                    "-i",
                    "any",
                    "-w",
                    "/dev/null",
                    "host",
                    host,
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            std::thread::sleep(Duration::from_millis(800));
            s.rate = iperf(a, udp, secs)?;
            let _ = td.kill();
            let _ = td.wait();
        }
        Case::NonMatching
        | Case::NonMatchingAllNs
        | Case::EmptyPrograms
        | Case::NonMatchingNoNftrace
        | Case::Following
        | Case::FollowingNoNftrace
        | Case::FollowingNoBytes => {
            let (target, args, env) = tracer_case(case, &scope);
            let run = TracerRun::start_env(target, "json", &args, env)?;
            let t0 = std::time::Instant::now();
            s.rate = iperf(a, udp, secs)?;
            s.rss_kib = status_kib(run.pid(), "VmHWM:");
            let elapsed = t0.elapsed().as_secs_f64();
            let out = run.stop()?;
            let sum = out.summary().context("summary")?;
            s.events_per_s = sum["events"].as_f64().map(|e| e / elapsed);
            s.counted_per_s = sum["counted_in_kernel"].as_f64().map(|e| e / elapsed);
            s.lost = sum["lost_events"].as_u64();
            s.ready_ms = sum["tc"]["ready_ms"].as_u64();
            s.detach_ms = sum["tc"]["detach_ms"].as_u64();
        }
    }
    Ok(s)
}

/// How a tracer case runs: its target, arguments and environment.
fn tracer_case<'a>(
    case: Case,
    scope: &[&'a str],
) -> (
    &'static str,
    Vec<&'a str>,
    &'static [(&'static str, &'static str)],
) {
    let following = matches!(
        case,
        Case::Following | Case::FollowingNoNftrace | Case::FollowingNoBytes
    );
    let target = if following {
        "10.240.0.2:5201"
    } else {
        "10.99.99.99"
    };
    let mut args = if case == Case::NonMatchingAllNs {
        vec![]
    } else {
        scope.to_vec()
    };
    args.extend_from_slice(&["--max-flows", "1000", "--duration", "10m"]);
    if matches!(case, Case::NonMatchingNoNftrace | Case::FollowingNoNftrace) {
        args.push("--no-nftrace");
    }
    if case == Case::FollowingNoBytes {
        args.extend_from_slice(&["--snaplen", "0"]);
    }
    let env: &[(&str, &str)] = if case == Case::EmptyPrograms {
        &[("TRACER_EMPTY_PROGRAMS", "1")]
    } else {
        &[]
    };
    (target, args, env)
}

/// The kernel-cost section: per tracer program, runs per packet and ns
/// per run (bpf_stats, on for the measurement only) while `secs` seconds
/// of 64-byte UDP cross the veth pair, for tracer not following the
/// traffic, following it, and the same hooks with empty programs (the
/// floor); the median of `reps` rounds, the order rotating.
fn kernel_cost_section(a: &Netns, b: &Netns, reps: usize, secs: u32) -> Result<String> {
    let cases = [
        Case::EmptyPrograms,
        Case::NonMatching,
        Case::NonMatchingAllNs,
        Case::Following,
    ];
    let scope = ["--netns", a.name.as_str(), "--netns", b.name.as_str()];
    let _stats = kcost::StatsOn::new()?;
    let mut runs: Vec<Vec<BTreeMap<String, kcost::Cost>>> = cases.iter().map(|_| vec![]).collect();
    for round in 0..reps {
        for j in 0..cases.len() {
            let i = (round + j) % cases.len();
            let (target, args, env) = tracer_case(cases[i], &scope);
            let run = TracerRun::start_env(target, "json", &args, env)?;
            let before = kcost::snapshot()?;
            let report = iperf_json(a, true, secs)?;
            let after = kcost::snapshot()?;
            run.stop()?;
            let packets = report["end"]["sum"]["packets"].as_u64().unwrap_or(0);
            let c = kcost::per_packet(&before, &after, packets);
            eprintln!(
                "kernel cost / {}: {:.0} ns per packet over {packets} packets",
                cases[i].name(),
                kcost::total(&c)
            );
            runs[i].push(c);
        }
    }
    let total = |i: usize| median(&mut runs[i].iter().map(kcost::total).collect::<Vec<_>>());
    let floor = total(0);
    let mut md = format!(
        "### Kernel time per packet (bpf_stats)\n\n\
         {reps} rounds of {secs} s of 64-byte UDP (iperf3) per case, the order rotating; \
         `kernel.bpf_stats_enabled` on only for this section. Per tracer program: runs per \
         packet and ns per run (median over rounds); the floor is the same hooks with empty \
         programs (TRACER_EMPTY_PROGRAMS=1), which no program body can go below. Goals \
         (issue 31): not followed at most 1.5x the floor, followed at most 3x.\n\n\
         | case | ns per packet | x floor |\n|---|---|---|\n"
    );
    for (i, c) in cases.iter().enumerate() {
        let t = total(i);
        md += &format!(
            "| {} | {t:.0} | {:.2} |
",
            c.name(),
            t / floor.max(1.0)
        );
    }
    md += "
| program | ";
    md += &cases
        .iter()
        .map(|c| format!("{}: runs/pkt, ns/run", c.name()))
        .collect::<Vec<_>>()
        .join(" | ");
    md += " |
|---|";
    md += &"---|".repeat(cases.len());
    md += "
";
    let names: std::collections::BTreeSet<&String> =
        runs.iter().flatten().flat_map(|m| m.keys()).collect();
    for name in names {
        md += &format!("| {name} |");
        for r in &runs {
            let mut per: Vec<f64> = r
                .iter()
                .filter_map(|m| m.get(name))
                .map(|c| c.runs_per_packet)
                .collect();
            let mut ns: Vec<f64> = r
                .iter()
                .filter_map(|m| m.get(name))
                .map(|c| c.ns_per_run)
                .collect();
            if per.is_empty() {
                md += " - |";
            } else {
                md += &format!(" {:.2}, {:.0} |", median(&mut per), median(&mut ns));
            }
        }
        md += "\n";
    }
    Ok(md + "\n")
}

/// Two namespaces on a veth pair (10.240.0.1 and .2), each with an
/// nf_tables table as a node has, and an iperf3 server in the second.
fn bench_pair() -> Result<(Netns, Netns, Child)> {
    let p = unique_prefix();
    let a = Netns::new(format!("{p}-bench-a"))?;
    let b = Netns::new(format!("{p}-bench-b"))?;
    veth(&a, "ba0", &b, "bb0")?;
    a.ip(&["addr", "add", "10.240.0.1/24", "dev", "ba0"])?;
    b.ip(&["addr", "add", "10.240.0.2/24", "dev", "bb0"])?;
    // A node has an nf_tables ruleset (kube-proxy, iptables-nft): one
    // empty input chain in each namespace, so that tracer adds its nftrace
    // table there as it would on a node.
    for n in [&a, &b] {
        n.exec(&["nft", "add", "table", "ip", "bench"])?;
        n.exec(&[
            "nft",
            "add",
            "chain",
            "ip",
            "bench",
            "input",
            "{ type filter hook input priority 0; }",
        ])?;
    }
    let (_, server_cpu) = cpus();
    let server: Child = b.spawn(&[
        "taskset",
        "-c",
        &server_cpu,
        "iperf3",
        "-s",
        "-B",
        "10.240.0.2",
        "--logfile",
        "/dev/null",
    ])?;
    std::thread::sleep(Duration::from_millis(500));
    Ok((a, b, server))
}

/// The memory case: `flows` short UDP flows (a datagram to 10.240.0.2:53
/// and its echo, each from its own source port, from two client
/// addresses) at `rate` flows/s, with tracer following them all
/// (`--max-flows` = `flows`). Its stdout (a JSON record per flow, twice)
/// is counted and dropped; only the summary is kept.
fn memory_case(a: &Netns, b: &Netns, flows: u32, rate: u32) -> Result<String> {
    a.ip(&["addr", "add", "10.240.0.3/24", "dev", "ba0"])?;
    let probe = tracer_tests::tracer::netprobe_bin();
    let _echo: Child = b.spawn(&[
        probe.to_str().unwrap(),
        "udp-echo",
        "10.240.0.2:53",
        "--for",
        "900",
    ])?;
    let max = flows.to_string();
    let mut run = TracerRun::start_keep(
        "10.240.0.2:53",
        "json",
        &[
            "--netns",
            &a.name,
            "--netns",
            &b.name,
            "--max-flows",
            &max,
            "--duration",
            "15m",
        ],
        &[],
        Keep::Summary,
    )?;
    let pid = run.pid();
    // VmHWM can miss a peak: the kernel updates its high-water mark lazily
    // (update_hiwater_rss() at munmap and exit, not when free()/malloc_trim()
    // give pages back with madvise()). So RSS is also sampled every 10 ms,
    // until the process exits.
    let sampler = std::thread::spawn(move || {
        let mut max = 0;
        while let Some(k) = status_kib(pid, "VmRSS:") {
            max = max.max(k);
            std::thread::sleep(Duration::from_millis(10));
        }
        max
    });
    std::thread::sleep(Duration::from_millis(500));
    let idle_rss = status_kib(pid, "VmRSS:");
    let start_hwm = status_kib(pid, "VmHWM:");
    let t1 = std::time::Instant::now();
    let said = a.exec_status(&[
        probe.to_str().unwrap(),
        "udp-spray",
        "10.240.0.2:53",
        "--src",
        "10.240.0.1",
        "--src",
        "10.240.0.3",
        "--count",
        &flows.to_string(),
        "--pps",
        &rate.to_string(),
    ]);
    let spray_s = t1.elapsed().as_secs_f64();
    // Every flow quiet and printed (500 ms), the last ones packed.
    std::thread::sleep(Duration::from_millis(1500));
    let live_hwm = status_kib(pid, "VmHWM:");
    let live_rss = status_kib(pid, "VmRSS:");
    run.signal(libc::SIGINT);
    let t2 = std::time::Instant::now();
    run.collect()?;
    let report_s = t2.elapsed().as_secs_f64();
    let sampled_max = sampler.join().map_err(|_| anyhow::anyhow!("sampler"))?;
    let lines = run.stdout_lines;
    let s: Value = serde_json::from_str(&run.stdout).context("summary")?;
    let mib = |k: Option<u64>| k.map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0));
    let per_flow = s["packed_bytes"].as_f64().unwrap_or(0.0)
        / s["packed_flows"].as_f64().unwrap_or(1.0).max(1.0);
    eprintln!(
        "memory case: {}",
        String::from_utf8_lossy(&said.stdout).trim()
    );
    Ok(format!(
        "### Memory: {flows} short UDP flows\n\n\
         tracer follows 10.240.0.2:53 with `--netns` on both namespaces and `--max-flows {flows}`; \
         `netprobe udp-spray` sends one datagram from each of {flows} (address, port) pairs at {rate} flows/s, \
         and a UDP echo answers each (a DNS server's view). Peak RSS is the kernel's VmHWM of the tracer \
         process, read 1.5 s after the last flow (every flow printed and packed), and in the summary, after \
         the final report of every flow; the kernel updates that mark lazily, so RSS is also sampled every \
         10 ms from start to exit. RSS includes the ring buffer, mapped twice (8 MiB for the default \
         4 MiB).\n\n\
         | flows sent | flows in table | events | lost | packed flows | bytes per packed flow | idle RSS MiB | start peak MiB (BTF) | RSS after the flows MiB | peak RSS MiB (live) | peak RSS MiB (summary) | sampled max RSS MiB | spray s | final report s | JSON lines |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n\
         | {flows} | {} | {} | {} | {} | {per_flow:.0} | {} | {} | {} | {} | {} | {} | {spray_s:.1} | {report_s:.1} | {lines} |\n\n",
        s["flows"],
        s["events"],
        s["lost_events"],
        s["packed_flows"],
        mib(idle_rss),
        mib(start_hwm),
        mib(live_rss),
        mib(live_hwm),
        mib(s["peak_rss_kib"].as_u64()),
        mib(Some(sampled_max)),
    ))
}

/// One run of the node-scale case.
struct PodRun {
    /// From spawning tracer to its ready file.
    wall_ready_ms: f64,
    /// tracer's own figure (summary tc.ready_ms).
    ready_ms: Option<u64>,
    /// VmHWM right after the ready file: the start-up peak.
    start_hwm_kib: Option<u64>,
    /// VmHWM at exit (summary).
    peak_kib: Option<u64>,
    interfaces: Option<u64>,
    /// From starting to add a pod to tracer's programs on its veth.
    late_ms: Option<f64>,
    /// From spawning tracer to tc on every interface of the host
    /// namespace (tcx: its link fds; netlink attaches before ready).
    all_hooked_ms: Option<f64>,
    detach_ms: Option<u64>,
}

/// tracer without `--netns` (tc on every interface of the host namespace)
/// on a node with `pods` (already made), following an address nothing
/// sends to; then one more pod is added and its veth watched until tracer's
/// tc programs are on it.
fn pods_run(pods: &mut Pods, mode: &str) -> Result<PodRun> {
    let t0 = std::time::Instant::now();
    let run = TracerRun::start_keep(
        "10.99.99.99",
        "json",
        &[
            "--tc-attach",
            mode,
            "--max-flows",
            "1000",
            "--duration",
            "10m",
        ],
        &[],
        Keep::All,
    )?;
    let wall_ready_ms = t0.elapsed().as_secs_f64() * 1e3;
    let start_hwm_kib = status_kib(run.pid(), "VmHWM:");
    let all_hooked_ms = if mode == "netlink" {
        Some(wall_ready_ms)
    } else {
        let want = 2 * pods.node_interfaces()?.len();
        let mut at = None;
        while t0.elapsed() < Duration::from_secs(60) {
            if tcx_links(run.pid()) >= want {
                at = Some(t0.elapsed().as_secs_f64() * 1e3);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        at
    };
    let t1 = std::time::Instant::now();
    let new = pods.add(1)?;
    let mut late_ms = None;
    while t1.elapsed() < Duration::from_secs(10) {
        if tracer_hooked(None, &new[0]) {
            late_ms = Some(t1.elapsed().as_secs_f64() * 1e3);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = run.stop()?;
    let sum = out.summary().context("summary")?;
    Ok(PodRun {
        wall_ready_ms,
        ready_ms: sum["tc"]["ready_ms"].as_u64(),
        start_hwm_kib,
        peak_kib: sum["peak_rss_kib"].as_u64(),
        interfaces: sum["tc"]["interfaces"].as_u64(),
        late_ms,
        all_hooked_ms,
        detach_ms: sum["tc"]["detach_ms"].as_u64(),
    })
}

/// tcx links the process holds (its fds' fdinfo says `link_type: tcx`).
fn tcx_links(pid: i32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf_link")
        })
        .filter(|e| {
            std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                e.file_name().to_string_lossy()
            ))
            .is_ok_and(|i| {
                i.lines()
                    .any(|l| l.starts_with("link_type:") && l.ends_with("tcx"))
            })
        })
        .count()
}

/// The node-scale section: ready time, start-up RSS and late hooking for
/// each pod count, tcx and netlink.
fn pods_section(counts: &[usize], reps: usize) -> Result<String> {
    let mut md = format!(
        "<!-- pods:begin -->\n## Node scale: N pods on a bridge\n\n\
         N network namespaces, each joined by a veth pair to a bridge in the host namespace (the node side \
         enslaved and up, the pod side addressed and up); `tracer follow 10.99.99.99` without `--netns` \
         (tc on every interface of the host namespace, the host's own interfaces included). \
         {reps} runs per case, median [min-max]. Ready (wall): from spawning tracer to its ready file; \
         ready (tracer): its own `ready_ms`. Start RSS: VmHWM right after the ready file. \
         All hooked: from spawning tracer to tc on every interface of the host namespace (tcx: as many \
         tcx links in its fds as two per interface; netlink attaches all before ready). \
         Late pod: from starting to create one more pod (once all are hooked) to tracer's two tc programs on its veth \
         (BPF_PROG_QUERY, polled every 10 ms). Interfaces hooked: the summary's count at exit. Made by `tracer-bench --pods-only` (in `cargo xtask bench`).\n\n\
         | pods | tc | interfaces hooked | ready ms (wall) | ready ms (tracer) | all hooked ms | start RSS MiB | peak RSS MiB | late pod hooked ms | detach ms |\n\
         |---|---|---|---|---|---|---|---|---|---|\n"
    );
    let fmt = |v: Vec<f64>, prec: usize| -> String {
        if v.is_empty() {
            return "-".into();
        }
        let mut v = v;
        let m = median(&mut v);
        format!("{m:.prec$} [{:.prec$}-{:.prec$}]", v[0], v[v.len() - 1])
    };
    for &n in counts {
        let mut pods = Pods::new(n, Node::Host)?;
        for mode in ["tcx", "netlink"] {
            let mut runs = Vec::new();
            for _ in 0..reps {
                let r = pods_run(&mut pods, mode)?;
                eprintln!(
                    "pods {n} {mode}: ready {:.0} ms (tracer {:?}), all hooked {:?} ms, start RSS {:?} KiB, {:?} interfaces, late {:?} ms, detach {:?} ms",
                    r.wall_ready_ms,
                    r.ready_ms,
                    r.all_hooked_ms,
                    r.start_hwm_kib,
                    r.interfaces,
                    r.late_ms,
                    r.detach_ms
                );
                runs.push(r);
            }
            let col = |f: &dyn Fn(&PodRun) -> Option<f64>, prec: usize| {
                fmt(runs.iter().filter_map(f).collect(), prec)
            };
            let mib = |k: Option<u64>| k.map(|k| k as f64 / 1024.0);
            md += &format!(
                "| {n} | {mode} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                col(&|r| r.interfaces.map(|i| i as f64), 0),
                col(&|r| Some(r.wall_ready_ms), 0),
                col(&|r| r.ready_ms.map(|x| x as f64), 0),
                col(&|r| r.all_hooked_ms, 0),
                col(&|r| mib(r.start_hwm_kib), 1),
                col(&|r| mib(r.peak_kib), 1),
                col(&|r| r.late_ms, 0),
                col(&|r| r.detach_ms.map(|x| x as f64), 0),
            );
        }
    }
    md += "\n<!-- pods:end -->\n";
    Ok(md)
}

/// Replace the text between `begin` and `end` (markers included) in
/// `path` with `md`, or append it.
fn replace_section(path: &std::path::Path, begin: &str, end: &str, md: &str) -> Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let end_line = format!("{end}\n");
    let new = match (old.find(begin), old.find(&end_line)) {
        (Some(i), Some(j)) => format!("{}{}{}", &old[..i], md, &old[j + end_line.len()..]),
        _ => format!("{old}\n{md}"),
    };
    std::fs::write(path, new)?;
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[expect(
    clippy::too_many_lines,
    reason = "the bench cases in order, each a few lines of setup and a table row"
)]
fn main() -> Result<()> {
    let args = Args::parse();
    if !require_privileges("tracer-bench") {
        return Ok(());
    }
    let only = args.kernel_cost_only || args.pods_only || args.followed_only;
    if !args.services.is_empty() && !only {
        let md = services_section(&args.services, args.conntrack, args.pods_reps)?;
        println!("{md}");
        if let Some(path) = &args.write {
            replace_section(
                path,
                "<!-- services:begin -->",
                "<!-- services:end -->",
                &md,
            )?;
        }
    }
    if args.services_only {
        return Ok(());
    }
    if !args.pods.is_empty() && !args.kernel_cost_only && !args.followed_only {
        let md = pods_section(&args.pods, args.pods_reps)?;
        println!("{md}");
        if let Some(path) = &args.write {
            replace_section(path, "<!-- pods:begin -->", "<!-- pods:end -->", &md)?;
        }
    }
    if args.pods_only {
        return Ok(());
    }
    let (a, b, _server) = bench_pair()?;
    if args.reps > 0 && !args.followed_only {
        let md = format!(
            "<!-- kcost:begin -->\n{}<!-- kcost:end -->\n",
            kernel_cost_section(&a, &b, args.reps, args.secs)?
        );
        println!("{md}");
        if let Some(path) = &args.write {
            replace_section(path, "<!-- kcost:begin -->", "<!-- kcost:end -->", &md)?;
        }
    }
    if args.kernel_cost_only {
        return Ok(());
    }
    let followed = [
        Case::Baseline,
        Case::Following,
        Case::FollowingNoNftrace,
        Case::Tcpdump,
    ];
    let all = [
        Case::Baseline,
        Case::NonMatching,
        Case::NonMatchingAllNs,
        Case::EmptyPrograms,
        Case::NonMatchingNoNftrace,
        Case::Following,
        Case::FollowingNoNftrace,
        Case::FollowingNoBytes,
        Case::Tcpdump,
        Case::TcpdumpNonMatching,
    ];
    let (cases, section): (&[Case], _) = if args.followed_only {
        (
            &followed,
            ("<!-- followed:begin -->", "<!-- followed:end -->"),
        )
    } else {
        (&all, ("<!-- traffic:begin -->", "<!-- traffic:end -->"))
    };
    let mut md = format!(
        "{}\n## {}: veth pair, iperf3\n\n",
        section.0,
        if args.followed_only {
            "Followed traffic against tcpdump"
        } else {
            "Traffic"
        }
    );
    md += &format!(
        "{} rounds of {} s per case, interleaved (each round runs every case once, the order rotating); median [min-max]; \
         ratio of medians = case median / baseline median; paired ratio = median over rounds of \
         (case rate / baseline rate of the same round), which cancels drift between rounds. \
         tracer runs with `--netns` on both namespaces, so its tc programs sit on both veths and it leaves the \
         netif_receive_skb/net_dev_start_xmit tracepoints to them; the \"all namespaces\" case runs without `--netns` \
         (tc on the host's interfaces only, device tracepoints attached), the default on a node. \
         The \"empty programs\" case attaches the same hooks as \"address not matched\" with every program \
         returning at once (TRACER_EMPTY_PROGRAMS=1): the kernel's own cost of running a program there, which no \
         program body can go below. Both namespaces hold an nf_tables table (one empty input chain), as a node does, \
         so tracer adds its nftrace table there; \"--no-nftrace\" is the same run without it. tcpdump runs once with the followed flow's filter and once with the \
         not-matched address. \
         iperf3 client pinned to CPU 0, server to the last CPU. \
         Counted in kernel: hook passages of followed packets counted past the budget of full records (tracer_common::agg).\n\n",
        args.reps, args.secs
    );
    // --reps 0: the memory case alone.
    let protos: &[(bool, &str, &str)] = if args.reps == 0 {
        &[]
    } else {
        &[
            (true, "UDP, 64-byte datagrams", "pps"),
            (false, "TCP stream", "Gbit/s"),
        ]
    };
    for &(udp, title, unit) in protos {
        let mut samples: Vec<Vec<Sample>> = cases.iter().map(|_| Vec::new()).collect();
        // Interleave cases so drift on this noisy machine hits all alike.
        // The order rotates each round, so that no case always runs right
        // after a tracer detach or first in a round.
        for round in 0..args.reps {
            for j in 0..cases.len() {
                let i = (round + j) % cases.len();
                let c = &cases[i];
                let s = run_case(*c, &a, &b, udp, args.secs)?;
                eprintln!("{title} / {}: {:.0}", c.name(), s.rate);
                samples[i].push(s);
            }
        }
        let scale = if udp { 1.0 } else { 1e9 };
        let base = median(&mut samples[0].iter().map(|s| s.rate).collect::<Vec<_>>());
        md += &format!(
            "### {title}\n\n| case | {unit} | ratio of medians | paired ratio [min-max] | events/s to userspace | counted in kernel /s | lost | ready ms | detach ms | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|\n"
        );
        for (i, c) in cases.iter().enumerate() {
            let mut r: Vec<f64> = samples[i].iter().map(|s| s.rate).collect();
            let m = median(&mut r);
            // Each round's rate over the baseline of the same round: drift
            // between rounds (which moves the baseline by up to 25% here)
            // cancels out.
            let mut paired: Vec<f64> = samples[i]
                .iter()
                .zip(&samples[0])
                .map(|(s, b)| s.rate / b.rate)
                .collect();
            let pm = median(&mut paired);
            let (lo, hi) = (r[0], r[r.len() - 1]);
            let opt = |f: &dyn Fn(&Sample) -> Option<f64>, prec: usize| -> String {
                let mut v: Vec<f64> = samples[i].iter().filter_map(f).collect();
                if v.is_empty() {
                    "-".into()
                } else {
                    format!("{:.*}", prec, median(&mut v))
                }
            };
            md += &format!(
                "| {} | {:.2} [{:.2}-{:.2}] | {:.3} | {:.3} [{:.3}-{:.3}] | {} | {} | {} | {} | {} | {} |\n",
                c.name(),
                m / scale,
                lo / scale,
                hi / scale,
                m / base,
                pm,
                paired[0],
                paired[paired.len() - 1],
                opt(&|s| s.events_per_s, 0),
                opt(&|s| s.counted_per_s, 0),
                opt(&|s| s.lost.map(|l| l as f64), 0),
                opt(&|s| s.ready_ms.map(|l| l as f64), 0),
                opt(&|s| s.detach_ms.map(|l| l as f64), 0),
                opt(&|s| s.rss_kib.map(|k| k as f64 / 1024.0), 1),
            );
        }
        md += &paired_over(
            cases,
            &samples,
            (Case::NonMatching, Case::EmptyPrograms),
            |r| {
                format!(
                    "Not matched over empty programs, paired: {r} (what tracer's programs cost \
                 beyond the hooks' own)."
                )
            },
        );
        md += &paired_over(cases, &samples, (Case::Following, Case::Tcpdump), |r| {
            format!("Following over tcpdump, paired: {r} (above 1: tracer costs less).")
        });
        md += "\n";
    }
    if args.flows > 0 && !args.followed_only {
        md += &memory_case(&a, &b, args.flows, args.flow_rate)?;
    }
    md += section.1;
    md += "\n";
    println!("{md}");
    if let Some(path) = args.write {
        replace_section(&path, section.0, section.1, &md)?;
    }
    Ok(())
}
