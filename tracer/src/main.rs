//! tracer: follow packets bound for a Service, VIP or link-local address
//! through a Kubernetes node's datapath and say where they died and why.

use std::process::ExitCode;

use clap::Parser;
use tracer::cli;

fn main() -> ExitCode {
    let args = match cli::Cli::try_parse_from(cli::plugin_args(std::env::args_os())) {
        Ok(a) => a,
        Err(e) => {
            // --help/--version print and exit 0; usage errors exit 2 with one
            // clear message (clap's own).
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
    if matches!(&args.cmd, cli::Cmd::Follow(f) if f.debug_bpf) {
        logger.filter_module("tracer_ebpf", log::LevelFilter::Debug);
    }
    logger.format_timestamp(None).init();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            tracer::output::diag::error(&format!("{e:#}"));
            ExitCode::from(cli::exit_code(&e))
        }
    }
}
