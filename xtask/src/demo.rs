//! The built-in demo: incident 5 of docs/incidents.md (a Service
//! externalIP equal to a node's IP) rebuilt in namespaces, with tracer's
//! verdict printed.

use std::process::{Command, ExitCode};

use anyhow::{Result, bail};
use clap::Args;

use crate::cmd::{is_root, root, run as sh};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Another scenario (see `--list`).
    #[arg(long)]
    scenario: Option<String>,
    /// Print tracer's JSON instead of text.
    #[arg(long)]
    json: bool,
    /// List the scenarios.
    #[arg(long)]
    list: bool,
}

pub(crate) fn run_demo(a: DemoArgs) -> Result<ExitCode> {
    if !is_root() {
        bail!(
            "the demo creates network namespaces and loads eBPF: run it as root (sudo -E cargo xtask demo)"
        );
    }
    crate::setup::ensure()?;
    crate::build::release()?;
    let r = root();
    let mut c = Command::new(r.join("target/release/tracer-demo"));
    c.env("TRACER_BIN", r.join("target/release/tracer"));
    if let Some(s) = a.scenario {
        c.args(["--scenario", &s]);
    }
    if a.json {
        c.arg("--json");
    }
    if a.list {
        c.arg("--list");
    }
    sh(&mut c)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn run(a: DemoArgs) -> Result<ExitCode> {
    run_demo(a)
}
