//! Release build of tracer and the test helpers.

use std::{
    path::PathBuf,
    process::{Command, ExitCode},
};

use anyhow::Result;

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
/// second, glibc, release build of tracer is made for them) and the
/// tests' helpers (netprobe, tracer-demo). Returns the binary's path.
pub(crate) fn for_tests() -> Result<PathBuf> {
    let bin = crate::dist::build_one("x86_64-unknown-linux-musl", "x86_64")?;
    sh(Command::new("cargo").current_dir(root()).args([
        "build",
        "--release",
        "-p",
        "tracer-tests",
        "--bins",
    ]))?;
    Ok(bin)
}

pub(crate) fn run() -> Result<ExitCode> {
    crate::setup::ensure()?;
    release()?;
    eprintln!("built {}", root().join("target/release/tracer").display());
    Ok(ExitCode::SUCCESS)
}
