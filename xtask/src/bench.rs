//! `cargo xtask bench`: the userspace pipeline bench, the netns traffic
//! benchmark (iperf3, tracer vs tcpdump), the node-scale case (N pods on
//! a bridge) and the cluster-scale case (kube-proxy's rules for N
//! Services); the traffic and node-scale figures replace their sections of
//! BENCHMARKS.md.

use std::process::{Command, ExitCode};

use anyhow::{Result, bail};
use clap::Args;

use crate::cmd::{is_root, root, run as sh};

#[derive(Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one flag per section run alone, as tracer-bench takes them"
)]
pub(crate) struct BenchArgs {
    /// Repetitions per case.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seconds per iperf3 run.
    #[arg(long, default_value_t = 4)]
    secs: u32,
    /// Only the node-scale case (N pods on a bridge: ready time, start-up
    /// RSS, late pod hooked), replacing its section alone.
    #[arg(long)]
    pods_only: bool,
    /// Only the kernel time per packet of tracer's programs (bpf_stats,
    /// beside the same hooks with empty programs), replacing its section
    /// alone.
    #[arg(long)]
    kernel_cost_only: bool,
    /// Only the cluster-scale case (kube-proxy's rules for 20 and 5,000
    /// Services, both modes, 100,000 conntrack entries: ready time and
    /// RSS), replacing its section alone.
    #[arg(long)]
    services_only: bool,
    /// Only followed traffic against tcpdump (UDP and TCP), replacing its
    /// section alone.
    #[arg(long)]
    followed_only: bool,
}

pub(crate) fn run(a: BenchArgs) -> Result<ExitCode> {
    if !is_root() {
        bail!("the benchmark creates network namespaces and loads eBPF: run it as root");
    }
    crate::setup::ensure()?;
    crate::build::release()?;
    let r = root();
    if !a.pods_only && !a.kernel_cost_only && !a.services_only && !a.followed_only {
        sh(Command::new("cargo")
            .current_dir(&r)
            .args(["bench", "-p", "tracer", "--bench", "pipeline"]))?;
    }
    let mut bench = Command::new(r.join("target/release/tracer-bench"));
    bench
        .env("TRACER_BIN", r.join("target/release/tracer"))
        .args([
            "--reps",
            &a.reps.to_string(),
            "--pods-reps",
            &a.reps.to_string(),
            "--secs",
            &a.secs.to_string(),
        ]);
    if a.pods_only {
        bench.arg("--pods-only");
    }
    if a.kernel_cost_only {
        bench.arg("--kernel-cost-only");
    }
    if a.services_only {
        bench.arg("--services-only");
    }
    if a.followed_only {
        bench.arg("--followed-only");
    }
    sh(bench.arg("--write").arg(r.join("BENCHMARKS.md")))?;
    Ok(ExitCode::SUCCESS)
}
