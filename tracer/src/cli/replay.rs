//! `tracer replay FILE`: print what `tracer follow --record FILE` printed,
//! from the recording alone (no root, BTF or kernel needed).

use std::{path::PathBuf, process::ExitCode};

use anyhow::Result;
use clap::Args;

use super::{Output, PcapArgs};
use crate::output::diag;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A recording made with `tracer follow --record FILE`.
    pub file: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Exit 1 when a replayed verdict (kind, reason, where) differs from
    /// the one the recording run printed, listing the differences.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub pcap: PcapArgs,
}

pub fn run(args: ReplayArgs) -> Result<ExitCode> {
    crate::output::files::distinct(&[
        ("the recording", Some(&args.file)),
        ("--pcap", args.pcap.pcap.as_deref()),
    ])?;
    let mut sink = super::sink(args.output, &args.pcap, super::overwrite(args.pcap.force))?;
    let r = crate::run::replay::replay(&args.file, sink.as_mut())?;
    if !args.check {
        return Ok(ExitCode::SUCCESS);
    }
    let diffs = r.differences();
    if diffs.is_empty() {
        diag::info(&format!(
            "replay check: {} flow verdict(s) as recorded",
            r.verdicts.len()
        ));
        return Ok(ExitCode::SUCCESS);
    }
    for d in &diffs {
        diag::error(&format!("replay check: {d}"));
    }
    Ok(ExitCode::from(1))
}
