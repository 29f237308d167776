//! `tracer merge FILE...`: read several nodes' `follow -o json` output and
//! print one story per flow across them (the work is in crate::merge).

use std::{path::PathBuf, process::ExitCode};

use anyhow::Result;
use clap::Args;

use super::Output;
use crate::{
    merge::{MergeError, merge, read_run},
    output::{diag, merge::print},
};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The JSON output (`tracer follow --node NAME -o json`) of each
    /// node's run, one file per node.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

pub fn run(args: MergeArgs) -> Result<ExitCode> {
    match read_and_merge(&args.files) {
        Ok(m) => {
            print(&m, args.output == Output::Json);
            Ok(ExitCode::SUCCESS)
        }
        // Bad input: one line, exit 2 (as a usage error).
        Err(e) => {
            diag::error(&e.to_string());
            Ok(ExitCode::from(2))
        }
    }
}

fn read_and_merge(files: &[PathBuf]) -> Result<crate::merge::Merged, MergeError> {
    let mut runs = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let text = std::fs::read_to_string(f).map_err(|source| MergeError::Read {
            file: name.clone(),
            source,
        })?;
        runs.push(read_run(&name, &text)?);
    }
    merge(runs)
}
