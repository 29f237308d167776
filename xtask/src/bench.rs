//! `cargo xtask bench`: the userspace pipeline bench and the netns traffic
//! benchmark (iperf3, tracer vs tcpdump); the traffic figures replace their
//! section of BENCHMARKS.md.

use std::process::{Command, ExitCode};

use anyhow::{Result, bail};
use clap::Args;

use crate::cmd::{is_root, root, run as sh};

#[derive(Args)]
pub struct BenchArgs {
    /// Repetitions per case.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seconds per iperf3 run.
    #[arg(long, default_value_t = 4)]
    secs: u32,
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    if !is_root() {
        bail!("the benchmark creates network namespaces and loads eBPF: run it as root");
    }
    crate::setup::ensure()?;
    crate::build::release()?;
    let r = root();
    sh(Command::new("cargo")
        .current_dir(&r)
        .args(["bench", "-p", "tracer", "--bench", "pipeline"]))?;
    sh(Command::new(r.join("target/release/tracer-bench"))
        .env("TRACER_BIN", r.join("target/release/tracer"))
        .args([
            "--reps",
            &a.reps.to_string(),
            "--secs",
            &a.secs.to_string(),
            "--write",
        ])
        .arg(r.join("BENCHMARKS.md")))?;
    Ok(ExitCode::SUCCESS)
}
