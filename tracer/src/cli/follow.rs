//! `tracer follow`: parse the arguments and wire a live session to a sink
//! (the work is in crate::run::live).

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Result;
use clap::Args;

use super::{Output, PcapArgs, TcAttach, check_privileges, parse_duration, usage};
use crate::{
    kernel::loader::tc::TcMode,
    kernel::session::SessionOptions,
    model::target::Target,
    node::netns::{NetnsRef, resolve_netns},
    output::files,
    run::live::{FollowOptions, RecordTo, follow},
    run::record::Recorder,
};
#[derive(Debug, Args)]
pub struct FollowArgs {
    /// ADDR, ADDR:PORT, [IPv6]:PORT or CIDR to follow (e.g. 169.254.25.10:53).
    pub target: String,
    /// Only this protocol.
    #[arg(long, value_parser = ["tcp", "udp", "icmp"])]
    pub proto: Option<String>,
    /// Follow and hook only these namespaces (name under /run/netns, path, or PID). Repeatable.
    #[arg(long)]
    pub netns: Vec<String>,
    /// Hook tc only on these interfaces. Repeatable.
    #[arg(long)]
    pub iface: Vec<String>,
    /// Stop after this long (e.g. 30s, 2m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after this many flows reached a verdict.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Create this file once every probe is attached.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// How tc programs are attached.
    #[arg(long, value_enum, default_value_t = TcAttach::Auto)]
    pub tc_attach: TcAttach,
    /// Most flows kept; the quietest is evicted (and counted) beyond.
    #[arg(long, default_value_t = 10_000, value_parser = parse_max_flows)]
    pub max_flows: usize,
    /// Kernel-to-user ring buffer size in bytes (a power of two, >= 4096).
    /// Events that do not fit are counted as lost and the verdicts marked
    /// incomplete.
    #[arg(long, default_value_t = tracer_common::RING_BYTES, value_parser = parse_ring_bytes)]
    pub ring_bytes: u32,
    /// Attach the netif_receive_skb and net_dev_start_xmit tracepoints even
    /// where tc already sees every packet (`--netns` without `--iface`):
    /// two more programs on every packet of the node, for a hop after the
    /// qdisc and one before generic XDP.
    #[arg(long)]
    pub device_tracepoints: bool,
    /// Also write the raw event stream, and what replaying it needs, to
    /// this file (`tracer replay FILE` prints this run's verdicts again,
    /// anywhere, without root).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Show on stderr why the kernel programs followed a packet or not
    /// (also with RUST_LOG=tracer_ebpf=debug). Off by default: the log
    /// calls are then dead code to the verifier.
    #[arg(long)]
    pub debug_bpf: bool,
    /// Do not add tracer's nf_tables table (`inet tracer_PID`, which sets
    /// nftrace on followed packets to name the rule that dropped them):
    /// netfilter rules are then named by their counters only.
    #[arg(long)]
    pub no_nftrace: bool,
    /// Bytes of each followed packet to keep, from its IP header on
    /// (copied in the kernel where a packet is first followed, never for
    /// other packets): what DNS questions and answers are read from, and
    /// what `--record` keeps. 0 keeps none. The default, 576, is the
    /// datagram every IPv4 host must accept: a whole classic (512-byte)
    /// DNS message over UDP.
    #[arg(long, default_value_t = 576, value_parser = parse_snaplen)]
    pub snaplen: u16,
    /// Also read DNS on this port besides 53 (e.g. 5353, mDNS): left out
    /// unless asked. DNS over TLS (853) is encrypted and cannot be read.
    #[arg(long, value_name = "PORT", value_parser = parse_dns_port)]
    pub dns_port: Option<u16>,
    /// The node's name in `-o json` records, which also date each hop by
    /// the wall clock (`tracer merge` stitches several nodes' runs).
    /// Default: the hostname.
    #[arg(long, value_name = "NAME", value_parser = parse_node)]
    pub node: Option<String>,
    /// tracer's own CPU budget, percent of one CPU (its user and system
    /// time over 2 s): past it, tracer leaves out packet bytes, then
    /// nftrace, then the records of route lookups that found their route,
    /// says so on stderr and in the summary, and takes them back once
    /// under half the budget for 5 s. Traffic is never touched. 0: no
    /// budget (measured only).
    #[arg(long, value_name = "PERCENT", default_value_t = crate::run::budget::DEFAULT_MAX_CPU, value_parser = parse_max_cpu)]
    pub max_cpu: f64,
    #[command(flatten)]
    pub pcap: PcapArgs,
}

fn parse_max_flows(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "bad flow count '{s}': a number of flows of at least 1"
        )),
    }
}

fn parse_max_cpu(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p.is_finite() && (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "bad CPU budget '{s}': a percent of one CPU from 0 (none) to 100"
        )),
    }
}

fn parse_node(s: &str) -> Result<String, String> {
    if s.trim().is_empty() || s.chars().any(char::is_control) {
        return Err(format!("bad node name {s:?}: a non-empty name"));
    }
    Ok(s.to_string())
}

/// `--node`, else the hostname (else `localhost`).
fn node_name(arg: Option<String>) -> String {
    arg.unwrap_or_else(|| {
        nix::sys::utsname::uname()
            .ok()
            .map(|u| u.nodename().to_string_lossy().into_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into())
    })
}

fn parse_dns_port(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(853) => Err(
            "port 853 is DNS over TLS: encrypted, its questions cannot be read (its flows are followed as any other)"
                .into(),
        ),
        Ok(p) if p != 0 => Ok(p),
        _ => Err(format!("bad DNS port '{s}': a port number from 1 to 65535")),
    }
}

fn parse_snaplen(s: &str) -> Result<u16, String> {
    let max = tracer_common::SNAP_MAX;
    match s.parse::<usize>() {
        Ok(n) if n <= max => Ok(n as u16),
        _ => Err(format!(
            "bad snap length '{s}': a number of bytes from 0 to {max}"
        )),
    }
}

fn parse_ring_bytes(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("bad ring size '{s}': a number of bytes"))?;
    if n < 4096 || !n.is_power_of_two() {
        return Err(format!(
            "ring size {n} must be a power of two of at least 4096"
        ));
    }
    Ok(n)
}

fn tc_mode(choice: TcAttach) -> TcMode {
    match choice {
        TcAttach::Tcx => TcMode::Tcx,
        TcAttach::Netlink => TcMode::Netlink,
        TcAttach::Auto => {
            // tcx links exist since Linux 6.6 (bpf_mprog).
            let v = aya::util::KernelVersion::current().ok();
            if v.is_some_and(|v| v >= aya::util::KernelVersion::new(6, 6, 0)) {
                TcMode::Tcx
            } else {
                TcMode::Netlink
            }
        }
    }
}

/// The namespaces of `--netns`, each once (the first name given for it).
fn namespaces(specs: &[String]) -> Result<Vec<NetnsRef>> {
    let mut out: Vec<NetnsRef> = Vec::new();
    for s in specs {
        let n = resolve_netns(s).map_err(usage)?;
        if !out.iter().any(|o| o.inode == n.inode) {
            out.push(n);
        }
    }
    Ok(out)
}

/// `--record`, `--pcap` and `--ready-file` name files of their own, each
/// one tracer may write (before any is created: a refusal leaves none);
/// the ready file is tracer's to create, so it must not be there yet.
fn check_outputs(args: &FollowArgs) -> Result<()> {
    files::distinct(&[
        ("--record", args.record.as_deref()),
        ("--pcap", args.pcap.pcap.as_deref()),
        ("--ready-file", args.ready_file.as_deref()),
    ])?;
    for p in [&args.record, &args.pcap.pcap].into_iter().flatten() {
        files::check_output(p, super::overwrite(args.pcap.force))?;
    }
    if let Some(p) = &args.ready_file
        && p.symlink_metadata().is_ok()
    {
        return Err(usage(format!(
            "ready file {} already exists: tracer creates it and removes it on exit, so it must not be there (remove it first)",
            p.display()
        )));
    }
    Ok(())
}

pub fn run(args: FollowArgs) -> Result<ExitCode> {
    let target = Target::parse(&args.target, args.proto.as_deref()).map_err(usage)?;
    let netns = namespaces(&args.netns)?;
    check_privileges()?;
    check_outputs(&args)?;
    let overwrite = super::overwrite(args.pcap.force);
    let record = match args.record {
        Some(path) => Some(RecordTo {
            file: Recorder::open_file(&path, overwrite)?,
            path,
        }),
        None => None,
    };
    let opts = FollowOptions {
        session: SessionOptions {
            target,
            netns,
            iface: args.iface,
            tc_mode: tc_mode(args.tc_attach),
            ring_bytes: args.ring_bytes,
            device_tracepoints: args.device_tracepoints,
            debug_bpf: args.debug_bpf
                || std::env::var("RUST_LOG").is_ok_and(|v| ebpf_log_asked(&v)),
            snaplen: args.snaplen,
            dns_port: args.dns_port,
            tunnel_ports: None,
        },
        target_arg: args.target,
        proto_arg: args.proto,
        max_flows: args.max_flows,
        duration: args.duration,
        count: args.count,
        ready_file: args.ready_file,
        record,
        nftrace: !args.no_nftrace,
        node: node_name(args.node),
        max_cpu: args.max_cpu,
    };
    let mut sink = super::sink(args.output, &args.pcap, overwrite)?;
    follow(opts, sink.as_mut())?;
    Ok(ExitCode::SUCCESS)
}

/// Does `RUST_LOG` name tracer_ebpf at debug or trace (the programs' own
/// log, as --debug-bpf)? Only by that name: env_logger also applies
/// `tracer=debug` or a bare `debug` to the target tracer_ebpf, and the
/// programs' log calls make them several times larger to the verifier
/// (`tracer_xmit`: 39,432 instructions verified on 6.18 instead of 4,762).
fn ebpf_log_asked(rust_log: &str) -> bool {
    rust_log.split(',').any(|d| {
        let (name, level) = d.split_once('=').unwrap_or((d, ""));
        name.trim() == "tracer_ebpf"
            && matches!(
                level.trim().to_ascii_lowercase().as_str(),
                "debug" | "trace"
            )
    })
}

#[cfg(test)]
mod ebpf_log_tests {
    use super::ebpf_log_asked;

    #[test]
    fn only_tracer_ebpf_by_name_turns_the_programs_log_on() {
        for on in [
            "tracer_ebpf=debug",
            "tracer=info,tracer_ebpf=trace",
            " tracer_ebpf = DEBUG",
        ] {
            assert!(ebpf_log_asked(on), "{on}");
        }
        for off in [
            "tracer=debug",
            "debug",
            "tracer_ebpf=info",
            "tracer_ebpfx=debug",
            "",
        ] {
            assert!(!ebpf_log_asked(off), "{off}");
        }
    }
}
