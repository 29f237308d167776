//! The built-in demo: rebuild an incident in network namespaces, run the
//! real tracer against it, send its traffic, and print tracer's verdicts.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use anyhow::{Context, Result};
use clap::Parser;
use tracer_tests::{require_privileges, scenarios, tracer::TracerRun};

#[derive(Parser)]
#[command(about = "Run tracer against an incident rebuilt in network namespaces")]
struct Args {
    /// Scenario to rebuild (default: incident 5 of docs/incidents.md).
    #[arg(long, default_value = "incident5")]
    scenario: String,
    /// Print tracer's JSON instead of its text report.
    #[arg(long)]
    json: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.list {
        for n in scenarios::NAMES {
            println!("{n}");
        }
        return Ok(());
    }
    if !require_privileges("tracer-demo") {
        return Ok(());
    }
    // Readable namespace names; remove what a killed earlier demo left.
    // SAFETY: single-threaded at this point.
    unsafe { std::env::set_var("TRACER_NS_PREFIX", "demo") };
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("demo-") {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", &n])
                    .output();
            }
        }
    }
    let sc = scenarios::build(&args.scenario)?;
    println!("== tracer demo: {}", sc.description);
    println!(
        "== namespaces: {}",
        sc.nss
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut cmdline = format!("tracer follow {}", sc.target);
    for a in &sc.args {
        cmdline.push(' ');
        cmdline.push_str(a);
    }
    println!("== running: {cmdline}");
    let mut run = TracerRun::start_fmt(
        &sc.target,
        if args.json { "json" } else { "text" },
        &[&sc.arg_refs()[..], &["--duration", "60s"]].concat(),
    )
    .context("start tracer")?;
    let seen = if sc.name == "incident1" {
        sc.flap_steps()?.join(" | ")
    } else {
        sc.traffic()?
    };
    println!("== client saw: {}", seen.trim().replace('\n', " "));
    let out = run.stop_raw()?;
    println!("== tracer output:\n{out}");
    if let Some(st) = run.status
        && !st.success()
    {
        anyhow::bail!("tracer exited with {st}: {}", run.stderr);
    }
    Ok(())
}
