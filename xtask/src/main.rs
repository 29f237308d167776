//! Project chores: `cargo xtask setup | build | dist | image | demo | test | bench | vm`.
//! xtask only orchestrates; tracer/build.rs builds the kernel programs.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a developer tool: the terminal is its output"
)]

mod bench;
mod build;
mod cmd;
mod demo;
mod dist;
mod image;
mod setup;
mod test;
mod vm;
mod vm_arm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "tracer's development tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install everything tracer needs on this machine (idempotent).
    Setup,
    /// Build the release tracer (and the test helpers).
    Build,
    /// Static release binaries (musl, x86_64 and aarch64) and SHA256SUMS in dist/.
    Dist(dist::DistArgs),
    /// Container images (OCI archives of the static binaries) in dist/.
    Image(image::ImageArgs),
    /// Set up, build, and run the built-in demo incident.
    Demo(demo::DemoArgs),
    /// Set up and run every check and test (what CI runs).
    Test(test::TestArgs),
    /// Benchmarks: userspace pipeline, and traffic vs tcpdump (BENCHMARKS.md).
    Bench(bench::BenchArgs),
    /// Kernel matrix: boot Debian 5.10, 6.1 and 6.12 under qemu (TCG) and run the
    /// incident and verdict suites inside (`--arch aarch64`: boot Debian's
    /// arm64 kernel and run the static aarch64 binary).
    Vm(vm::VmArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Setup => setup::run(),
        Task::Build => build::run(),
        Task::Dist(a) => dist::run(a),
        Task::Image(a) => image::run(a),
        Task::Demo(a) => demo::run(a),
        Task::Test(a) => Ok(test::run(a)),
        Task::Bench(a) => bench::run(a),
        Task::Vm(a) => vm::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
