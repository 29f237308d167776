//! Everything CI checks, in order, continuing after a failure so the
//! summary is complete: formatting, clippy (host and eBPF), unit tests,
//! then the privileged integration tests against the release binary.

use std::process::{Command, ExitCode};

use anyhow::Result;
use clap::Args;

use crate::cmd::{is_root, root, run as sh, run_tee, target_dir};

#[derive(Args)]
pub(crate) struct TestArgs {
    /// Skip `setup` (tools already installed).
    #[arg(long)]
    no_setup: bool,
    /// Only formatting, clippy and unit tests.
    #[arg(long)]
    unit_only: bool,
    /// Only integration tests whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// Skip the kernel-matrix tier (Debian 5.10, 6.1 and 6.12 under qemu).
    #[arg(long)]
    no_vm: bool,
}

#[derive(Default)]
struct Tally {
    passed: u64,
    failed: u64,
    stages: Vec<(String, bool)>,
    /// Tests that skipped themselves for a missing kernel feature.
    skipped: Vec<String>,
}

impl Tally {
    /// Add the counts of cargo's "test result:" lines.
    fn cargo_results(&mut self, out: &str) {
        for l in out.lines().filter(|l| l.starts_with("test result:")) {
            let num = |key: &str| -> u64 {
                l.split(';')
                    .find(|p| p.contains(key))
                    .and_then(|p| p.split_whitespace().rev().nth(1))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            };
            self.passed += num(" passed");
            self.failed += num(" failed");
        }
    }

    fn stage(&mut self, name: &str, ok: bool) {
        eprintln!("==> {name}: {}", if ok { "ok" } else { "FAILED" });
        self.stages.push((name.to_string(), ok));
    }
}

fn cargo(args: &[&str]) -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root()).args(args);
    c
}

#[expect(
    clippy::too_many_lines,
    reason = "the CI stages in order, each a few lines"
)]
pub(crate) fn run(a: TestArgs) -> Result<ExitCode> {
    let mut t = Tally::default();
    if !a.no_setup {
        let r = crate::setup::ensure();
        if let Err(e) = &r {
            eprintln!("setup failed: {e:#}");
        }
        t.stage("setup", r.is_ok());
    }
    t.stage(
        "fmt",
        sh(&mut cargo(&["fmt", "--all", "--", "--check"])).is_ok(),
    );
    t.stage(
        "clippy (host)",
        sh(&mut cargo(&[
            "clippy",
            "--workspace",
            "--exclude",
            "tracer-ebpf",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
        .is_ok(),
    );
    let mut ebpf = Command::new("rustup");
    ebpf.current_dir(root()).args([
        "run",
        "nightly",
        "cargo",
        "clippy",
        "-p",
        "tracer-ebpf",
        "--target",
        "bpfel-unknown-none",
        "-Z",
        "build-std=core",
        "--",
        "-D",
        "warnings",
    ]);
    t.stage("clippy (ebpf)", sh(&mut ebpf).is_ok());
    // Unit and property tests of every crate; the privileged integration
    // tests of tracer-tests come later, against the release binary.
    let (ok, out) = run_tee(&mut cargo(&[
        "test",
        "--workspace",
        "--exclude",
        "tracer-ebpf",
        "--exclude",
        "tracer-tests",
        "--lib",
        "--bins",
        "--tests",
    ]))?;
    t.cargo_results(&out);
    let (ok2, out) = run_tee(&mut cargo(&[
        "test",
        "-p",
        "tracer-tests",
        "--lib",
        "--bins",
    ]))?;
    t.cargo_results(&out);
    t.stage("unit and property tests", ok && ok2);
    // The same unit tests of tracer with the stable toolchain alone: no
    // nightly, no bpf-linker (AYA_BUILD_SKIP=1 builds without the kernel
    // object), so that they stay runnable for anyone; its own target dir,
    // not to rebuild the main one.
    let mut stable = cargo(&["+stable", "test", "-p", "tracer", "--lib", "--tests"]);
    stable
        .env("AYA_BUILD_SKIP", "1")
        .env("CARGO_TARGET_DIR", root().join("target/no-ebpf"));
    // rustup's proxy picks the toolchain from "+stable" only when cargo
    // is started through it.
    stable.env_remove("RUSTUP_TOOLCHAIN");
    let (ok, out) = run_tee(&mut stable)?;
    t.cargo_results(&out);
    t.stage("unit tests on stable without the eBPF toolchain", ok);

    if !a.unit_only {
        let built = crate::build::release().is_ok();
        t.stage("release build", built);
        // The release artifacts the dist tests check (static binaries,
        // images); their failure shows in those tests too.
        let dist = crate::image::build(&[]);
        if let Err(e) = &dist {
            eprintln!("dist: {e:#}");
        }
        t.stage("static binaries and images (dist/)", dist.is_ok());
        if built {
            if !is_root() {
                eprintln!(
                    "\n!!!!! integration tests need root (network namespaces, eBPF); {} !!!!!\n",
                    if std::env::var("TRACER_SKIP_PRIVILEGED").as_deref() == Ok("1") {
                        "TRACER_SKIP_PRIVILEGED=1: they will print SKIPPED"
                    } else {
                        "they will FAIL (set TRACER_SKIP_PRIVILEGED=1 to skip them loudly)"
                    }
                );
            }
            let mut c = cargo(&["test", "--release", "-p", "tracer-tests", "--tests"]);
            c.env("TRACER_BIN", target_dir().join("release/tracer"));
            // Tests of kernel features this machine lacks (IPVS, kprobes,
            // fentry) list themselves here; the summary names them.
            let skips = std::env::temp_dir().join(format!("tracer-skips-{}", std::process::id()));
            let _ = std::fs::remove_file(&skips);
            c.env("TRACER_SKIP_LOG", &skips);
            c.arg("--");
            if let Some(f) = &a.filter {
                c.arg(f);
            }
            c.arg("--test-threads=1");
            let (ok, out) = run_tee(&mut c)?;
            t.cargo_results(&out);
            t.stage("integration tests (netns, real binary, kernel 6.x)", ok);
            t.skipped = std::fs::read_to_string(&skips)
                .map(|s| s.lines().map(str::to_string).collect())
                .unwrap_or_default();
            let _ = std::fs::remove_file(&skips);
        }
        if !a.no_vm {
            vm_stages(&a, &mut t);
        }
    }

    if !t.skipped.is_empty() {
        eprintln!(
            "\n!!!!! {} test(s) SKIPPED on this kernel (they run in the kernel matrix) !!!!!",
            t.skipped.len()
        );
        for l in &t.skipped {
            eprintln!("    SKIPPED {l}");
        }
    }
    eprintln!("\n==== summary ====");
    for (name, ok) in &t.stages {
        eprintln!("{:<55} {}", name, if *ok { "ok" } else { "FAILED" });
    }
    let failed_stages = t.stages.iter().filter(|(_, ok)| !ok).count() as u64;
    // Failed stages that ran no test (fmt, clippy, build) count as failures.
    let failed = t.failed.max(failed_stages);
    println!(
        "tests: {} passed, {} failed ({} skipped here for kernel features, run in the VMs)",
        t.passed,
        failed,
        t.skipped.len()
    );
    Ok(if failed_stages == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The VM tier: the x86 kernel matrix (Debian 6.1
/// with the static binary too, and 6.12), then the aarch64 boot test.
fn vm_stages(a: &TestArgs, t: &mut Tally) {
    // The static binaries were built with the images before the
    // integration tests ("static binaries and images" stage).
    let vm = crate::vm::VmArgs {
        kernels: vec![],
        filter: a.filter.clone(),
        arch: "x86_64".into(),
    };
    let matrix = "kernel matrix (qemu TCG: Debian 5.10, 6.1, 6.12)";
    match crate::vm::matrix(&vm) {
        Ok(results) => {
            let (p, f) = crate::vm::report("kernel matrix", &results);
            t.passed += p;
            t.failed += f;
            t.stage(matrix, f == 0);
        }
        Err(e) => {
            eprintln!("kernel matrix: {e:#}");
            t.stage(matrix, false);
        }
    }
    let arm = "aarch64 boot (qemu TCG: Debian arm64, static binary)";
    match crate::vm::ensure_tools().and_then(|()| crate::vm_arm::run()) {
        Ok(r) => {
            let (p, f) = crate::vm::report("aarch64 boot", std::slice::from_ref(&r));
            t.passed += p;
            t.failed += f;
            t.stage(arm, f == 0);
        }
        Err(e) => {
            eprintln!("aarch64 boot: {e:#}");
            t.stage(arm, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_cargo_result_lines() {
        let mut t = Tally::default();
        t.cargo_results(
            "running 3 tests\ntest result: ok. 40 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.2s\n\
             test result: FAILED. 8 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 17s\n",
        );
        assert_eq!((t.passed, t.failed), (48, 1));
    }
}
