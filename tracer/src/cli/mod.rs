//! Command line: one module per subcommand.

pub mod cleanup;
pub mod doctor;
pub mod follow;
pub mod kube;
pub mod merge;
pub mod replay;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{Result, bail};
use clap::{Parser, Subcommand, ValueEnum};

use crate::output::{
    PcapSink, Sink,
    files::{FileError, Overwrite},
    pcap::PcapWriter,
    stdout_sink,
};

/// Bad input on the command line (a target, a namespace, a count): the
/// error line, then exit 2.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UsageError(pub Box<dyn std::error::Error + Send + Sync>);

/// `e` as a usage error (exit 2).
pub fn usage(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> anyhow::Error {
    UsageError(e.into()).into()
}

/// The exit status of a failed command: 2 for bad input (a usage error,
/// a path refused), 1 for a failure of the run.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let bad_input = e.chain().any(|c| {
        c.is::<UsageError>()
            || c.downcast_ref::<FileError>()
                .is_some_and(FileError::is_usage)
    });
    if bad_input { 2 } else { 1 }
}

/// `--force`: whether an existing output file may be replaced.
pub fn overwrite(force: bool) -> Overwrite {
    if force {
        Overwrite::Replace
    } else {
        Overwrite::Refuse
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "tracer",
    version = env!("TRACER_VERSION_LINE"),
    about = "Follow packets to a Service ClusterIP, VIP or link-local address through this node and say where they were dropped or misrouted, and why."
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
    /// The node's root filesystem when tracer runs in a container (where
    /// /run/netns is found). Default: detected (`/proc/1/root` with the
    /// host's PID namespace, `/host` in `kubectl debug node`, else `/`).
    #[arg(long, global = true, value_name = "DIR")]
    pub host_root: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Follow packets to ADDR[:PORT] (or a CIDR) and print per-flow verdicts.
    Follow(follow::FollowArgs),
    /// Check this node: privileges, BTF, hooks and the backend each would use.
    Doctor(doctor::DoctorArgs),
    /// Remove tc filters/qdiscs a killed tracer may have left (netlink mode).
    Cleanup(cleanup::CleanupArgs),
    /// Print a recording's verdicts again (`follow --record FILE`), without root.
    Replay(replay::ReplayArgs),
    /// Run tracer on a cluster's nodes through kubectl (also the kubectl
    /// plugin: `kubectl tracer follow svc/NAME`, this binary named
    /// `kubectl-tracer`).
    Kube(kube::KubeArgs),
    /// Stitch several nodes' `follow --node NAME -o json` output into one
    /// story per flow, without root.
    Merge(merge::MergeArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

/// `--pcap FILE` and its cap, for `follow` and `replay`, and `--force`
/// for their output files.
#[derive(Debug, Clone, clap::Args)]
pub struct PcapArgs {
    /// Also write the followed packets' captured bytes (see --snaplen) to
    /// this pcapng file: one interface per namespace and device, one
    /// packet per hop where its bytes were captured, each commented with
    /// the hop, the namespace, the flow and its verdict.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// The most the pcap file, with the packets held until their flow is
    /// printed, may take (MiB); packets past it are counted, not written.
    #[arg(long, value_name = "MB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub pcap_max_mb: u64,
    /// Replace existing output files (--pcap, and --record for `follow`);
    /// without it an existing file is refused and left as it is.
    #[arg(long)]
    pub force: bool,
}

/// The sink for `-o text|json` on stdout, and the pcap file when asked
/// (created now: an unwritable path is an error before anything runs).
pub fn sink(output: Output, pcap: &PcapArgs, overwrite: Overwrite) -> Result<Box<dyn Sink>> {
    let out = stdout_sink(output == Output::Json);
    let Some(path) = &pcap.pcap else {
        return Ok(out);
    };
    let writer = PcapWriter::create(path, pcap.pcap_max_mb << 20, overwrite)?;
    Ok(Box::new(PcapSink::new(out, writer)))
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum TcAttach {
    /// tcx on Linux >= 6.6, netlink/clsact otherwise
    Auto,
    Tcx,
    Netlink,
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    crate::node::hostroot::init(cli.host_root.as_deref())?;
    match cli.cmd {
        Cmd::Follow(a) => follow::run(a),
        Cmd::Doctor(a) => doctor::run(a),
        Cmd::Cleanup(a) => cleanup::run(a),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Kube(a) => kube::run(a.cmd),
        Cmd::Merge(a) => merge::run(a),
    }
}

/// The arguments as `tracer` takes them: run as `kubectl-tracer` (kubectl
/// runs `kubectl tracer ARGS` so), the `kube` subcommand's.
pub fn plugin_args(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.collect();
    let plugin = args.first().is_some_and(|a0| {
        std::path::Path::new(a0)
            .file_name()
            .is_some_and(|n| n == "kubectl-tracer")
    });
    if plugin {
        args.insert(1, "kube".into());
    }
    args
}

/// `10s`, `500ms`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("bad duration '{s}': expected e.g. 10s, 500ms, 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration unit in '{s}': use ms, s, m or h")),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 7.0 * 86400.0 {
        return Err(format!("duration '{s}' out of range (0 < d <= 7 days)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Root, or the capabilities BPF tracing and tc attach need.
pub fn check_privileges() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    bail!(
        "tracer needs root (CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN and CAP_SYS_ADMIN to enter namespaces): run it with sudo"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("99999h").is_err());
    }

    #[test]
    fn cli_parses_and_rejects() {
        let c = Cli::try_parse_from([
            "tracer",
            "follow",
            "10.0.0.1:80",
            "--proto",
            "tcp",
            "--netns",
            "a",
            "--netns",
            "b",
            "-o",
            "json",
            "--duration",
            "5s",
        ])
        .unwrap();
        let Cmd::Follow(f) = c.cmd else { panic!() };
        assert_eq!(f.netns, vec!["a", "b"]);
        assert_eq!(f.output, Output::Json);
        assert!(Cli::try_parse_from(["tracer", "follow", "1.2.3.4", "-o", "yaml"]).is_err());
        assert!(Cli::try_parse_from(["tracer", "follow", "1.2.3.4", "--duration", "x"]).is_err());
        assert!(Cli::try_parse_from(["tracer", "follow", "1.2.3.4", "--bogus"]).is_err());
        assert!(Cli::try_parse_from(["tracer", "follow"]).is_err());
    }
}
