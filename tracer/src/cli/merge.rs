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
            for r in m.runs.iter().filter(|r| !r.complete) {
                diag::warn(&format!(
                    "{} was cut short (no summary line: the run was killed or its output truncated); merged as far as it goes",
                    r.file
                ));
            }
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

/// A file not read (not a regular file, too big), or not merged.
#[derive(Debug, thiserror::Error)]
enum MergeInputError {
    #[error(transparent)]
    File(crate::output::files::FileError),
    #[error(transparent)]
    Merge(#[from] MergeError),
}

fn read_and_merge(files: &[PathBuf]) -> Result<crate::merge::Merged, MergeInputError> {
    let mut runs = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let data = crate::output::files::read_input(f).map_err(|e| match e {
            crate::output::files::FileError::Io { source, .. } => {
                MergeInputError::Merge(MergeError::Read {
                    file: name.clone(),
                    source,
                })
            }
            e => MergeInputError::File(e),
        })?;
        let text = String::from_utf8(data).map_err(|e| MergeError::Read {
            file: name.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
        })?;
        runs.push(read_run(&name, &text)?);
    }
    Ok(merge(runs)?)
}
