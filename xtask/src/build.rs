//! Release build of tracer and the test helpers.

use std::{
    path::PathBuf,
    process::{Command, ExitCode},
};

use anyhow::{Context, Result, bail};

use crate::cmd::{root, run as sh};

pub(crate) fn release() -> Result<()> {
    sh(Command::new("cargo").current_dir(root()).args([
        "build",
        "--release",
        "-p",
        "tracer",
        "-p",
        "tracer-tests",
        "--bins",
    ]))
}

/// What the tests run, built before they start: the static x86_64
/// binary (`dist/`, what an operator copies to a node; the host's
/// integration tests and every guest of the kernel matrix run it, so no
/// second, glibc, release build of tracer is made for them), the tests'
/// helpers (netprobe, tracer-demo) and the test executables. Returns the
/// binary's path.
///
/// The helpers are built by `cargo test --no-run`, with the test
/// executables, not by `cargo build --bins`: the two resolve the
/// dependencies' features differently (the dev-dependencies count only
/// for tests), so the latter built serde_json, regex and the test crate
/// itself a second time (52 s of the release stage, session 33). The two
/// builds run side by side (their target directories differ): the
/// static binary's last crate, tracer, compiles alone for most of its
/// 115 s, its front end on one core.
pub(crate) fn for_tests() -> Result<PathBuf> {
    let args = test_build();
    let mut tests = Command::new("cargo");
    tests.current_dir(root()).args(&args);
    eprintln!("+ cargo {} (beside the static binary)", args.join(" "));
    let mut child = tests.spawn().context("spawn cargo test --no-run")?;
    let bin = crate::dist::build_one("x86_64-unknown-linux-musl", "x86_64");
    let st = child.wait().context("wait for cargo test --no-run")?;
    let bin = bin?;
    if !st.success() {
        bail!("`cargo {}` failed: {st}", args.join(" "));
    }
    Ok(bin)
}

/// `cargo` arguments for the release build of the test crate: its
/// library, helpers and test executables, as the integration stage runs
/// them (and, with `--no-run`, [`for_tests`] builds them).
pub(crate) const TEST_ARGS: [&str; 7] = [
    "test",
    "--release",
    "-p",
    "tracer-tests",
    "--lib",
    "--bins",
    "--tests",
];

/// [`TEST_ARGS`] built, not run.
pub(crate) fn test_build() -> Vec<&'static str> {
    let mut v = TEST_ARGS.to_vec();
    v.push("--no-run");
    v
}

pub(crate) fn run() -> Result<ExitCode> {
    crate::setup::ensure()?;
    release()?;
    eprintln!("built {}", root().join("target/release/tracer").display());
    Ok(ExitCode::SUCCESS)
}
