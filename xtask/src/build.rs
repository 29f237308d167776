//! Release build of tracer and the test helpers.

use std::process::{Command, ExitCode};

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

pub(crate) fn run() -> Result<ExitCode> {
    crate::setup::ensure()?;
    release()?;
    eprintln!("built {}", root().join("target/release/tracer").display());
    Ok(ExitCode::SUCCESS)
}
