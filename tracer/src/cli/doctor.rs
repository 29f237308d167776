//! `tracer doctor`: everything about this node that decides what tracer can
//! see, reported at once.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use crate::{
    kernel::btf::{Btf, offsets, vmlinux_path},
    kernel::loader::probes::{self, ProbeStatus},
    output::{
        doctor::{Check, Report, Status, check},
        emit,
    },
};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Only the table of this kernel's drop reasons (enum
    /// skb_drop_reason): which cause explains each and the facts it reads.
    #[arg(long)]
    pub reasons: bool,
}

fn mounted(fs: &str, path: &str) -> bool {
    std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines().any(|l| {
            let mut it = l.split_whitespace();
            let _src = it.next();
            it.next() == Some(path) && it.next() == Some(fs)
        })
    })
}

fn lockdown() -> Check {
    // "confidentiality" forbids bpf_probe_read_kernel(); the file exists only
    // with securityfs mounted.
    let mode = std::fs::read_to_string("/sys/kernel/security/lockdown")
        .ok()
        .and_then(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(str::to_string)
        });
    match mode {
        Some(m) if m == "[confidentiality]" => check(
            "lockdown",
            false,
            Status::Fail,
            format!("{m}: bpf_probe_read_kernel is forbidden, packets cannot be read"),
        ),
        Some(m) => check("lockdown", true, Status::Ok, m),
        None => check(
            "lockdown",
            false,
            Status::Warn,
            "unknown (securityfs not mounted at /sys/kernel/security)",
        ),
    }
}

pub fn run(args: DoctorArgs) -> Result<ExitCode> {
    if args.reasons {
        return reasons(args.json);
    }
    let mut checks = host_checks();
    let (btf_checks, plan) = btf_checks();
    checks.extend(btf_checks);
    checks.push(tc_check());
    checks.push(helpers_check());
    checks.push(nftrace_check());
    checks.extend(dataplane_checks());
    let report = Report { checks, plan };
    let mut out = std::io::stdout();
    if args.json {
        emit(&mut out, &report.json());
    } else {
        emit(&mut out, &report.text());
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Privileges, kernel, lockdown and the kernel filesystems.
fn host_checks() -> Vec<Check> {
    let root = nix::unistd::geteuid().is_root();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        check(
            "privileges",
            root,
            Status::Fail,
            if root {
                "running as root"
            } else {
                "not root: run with sudo (needs CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_SYS_ADMIN)"
            },
        ),
        check("kernel", true, Status::Ok, kernel.trim()),
        check(
            "host root",
            true,
            Status::Ok,
            crate::node::hostroot::get().describe(),
        ),
        named_netns(),
        pods(),
        lockdown(),
        check(
            "bpffs",
            mounted("bpf", "/sys/fs/bpf"),
            Status::Warn,
            "/sys/fs/bpf (not needed by follow: nothing is pinned)",
        ),
        check(
            "tracefs",
            mounted("tracefs", "/sys/kernel/tracing")
                || mounted("tracefs", "/sys/kernel/debug/tracing"),
            Status::Warn,
            "needed only by kprobe/tracepoint fallbacks; tp_btf does not need it",
        ),
    ]
}

/// The node's named namespaces, where tracer looks for them.
fn named_netns() -> Check {
    let dir = crate::node::netns::named_dir();
    let n = crate::node::netns::named().len();
    check(
        "named netns",
        true,
        Status::Ok,
        if dir.is_dir() {
            format!("{n} in {}", dir.display())
        } else {
            format!(
                "none ({} does not exist; pods are still found by their processes)",
                dir.display()
            )
        },
    )
}

/// The pods that own namespaces, as follow names them (node::pods).
fn pods() -> Check {
    let names = crate::model::names::NetnsNames::default();
    let n = names.pods().len();
    let logs = crate::node::hostroot::get()
        .join("/")
        .join(crate::node::pods::POD_LOGS);
    check(
        "pods",
        true,
        Status::Ok,
        if n > 0 {
            format!("{n} namespaces owned by pods (hops show the pod)")
        } else if logs.is_dir() {
            format!(
                "none found ({} has no pod owning a namespace here)",
                logs.display()
            )
        } else {
            format!(
                "none ({} does not exist: not a kubelet node; hops show namespace names)",
                logs.display()
            )
        },
    )
}

/// BTF, the offsets and names read from it, and the hook plan.
fn btf_checks() -> (Vec<Check>, Vec<ProbeStatus>) {
    let btf_path = vmlinux_path();
    let btf = if btf_path.exists() {
        Btf::from_sys().ok()
    } else {
        None
    };
    let mut checks = vec![check(
        "btf",
        btf.is_some(),
        Status::Fail,
        match &btf {
            Some(b) => format!("{} types in {}", b.len(), btf_path.display()),
            None => format!(
                "missing {}: need CONFIG_DEBUG_INFO_BTF=y",
                btf_path.display()
            ),
        },
    )];
    let Some(b) = &btf else {
        return (checks, Vec::new());
    };
    checks.push(match offsets::resolve(b) {
        Ok(r) if r.missing.is_empty() => check(
            "offsets",
            true,
            Status::Ok,
            "all kernel struct fields resolved",
        ),
        Ok(r) => check(
            "offsets",
            false,
            Status::Warn,
            format!("unresolved (features degrade): {}", r.missing.join(", ")),
        ),
        Err(e) => check("offsets", false, Status::Fail, e.to_string()),
    });
    let reasons = offsets::enum_names(b, "skb_drop_reason", "SKB_DROP_REASON_");
    // Before 5.17 skb:kfree_skb has no reason (and BTF no enum): the
    // reasons are inferred from the drop locations (model/inferred.rs).
    let kernel_reasons = b.tracepoint_arity("kfree_skb").unwrap_or(0) >= 3;
    checks.push(if kernel_reasons || !reasons.is_empty() {
        check(
            "drop reasons",
            !reasons.is_empty(),
            Status::Warn,
            format!("{} names from enum skb_drop_reason", reasons.len()),
        )
    } else {
        check(
            "drop reasons",
            false,
            Status::Warn,
            format!(
                "none from this kernel (skb:kfree_skb has no reason before 5.17): inferred from the drop location ({} kernel functions known); verdicts say so",
                crate::model::inferred::len()
            ),
        )
    });
    let mut caps = probes::KernelCaps::probe();
    caps.fentry_error = crate::kernel::loader::fentry_trial();
    let mut plan = probes::plan(b, &caps);
    probes::skip_unneeded(&mut plan, probes::NodeNeeds::read());
    let missing_required: Vec<&str> = plan
        .iter()
        .filter(|p| p.required && p.error.is_some())
        .map(|p| p.hook.as_str())
        .collect();
    checks.push(check(
        "hooks",
        missing_required.is_empty(),
        Status::Fail,
        if missing_required.is_empty() {
            format!(
                "{}/{} available",
                plan.iter().filter(|p| p.error.is_none()).count(),
                plan.len()
            )
        } else {
            format!("required hooks missing: {}", missing_required.join(", "))
        },
    ));
    (checks, plan)
}

fn tc_check() -> Check {
    let tcx = aya::util::KernelVersion::current()
        .is_ok_and(|v| v >= aya::util::KernelVersion::new(6, 6, 0));
    check(
        "tc",
        true,
        Status::Ok,
        if tcx {
            "tcx links (fd-owned: nothing survives the process)"
        } else {
            "clsact + netlink filters (run `tracer cleanup` after a SIGKILL)"
        },
    )
}

/// Other BPF programs that decide packets' fate where tracer's hooks do
/// not see it first: cgroup programs (socket-level load balancing rewrites
/// a Service address in connect()/sendmsg(), before any packet), and XDP
/// and tc programs on this namespace's devices (a policy drop there names
/// them: verdict/bpf_drop.rs). Informational: listed, never a failure.
fn dataplane_checks() -> Vec<Check> {
    use crate::node::bpf_progs;
    let list = |progs: &[bpf_progs::AttachedProgram]| -> String {
        if progs.is_empty() {
            return "none".into();
        }
        progs
            .iter()
            .map(|p| format!("{} (id {}, {}) on {}", p.name, p.id, p.hook, p.at))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let cgroup = match bpf_progs::cgroup2_root() {
        Some(root) => {
            let (progs, truncated) = bpf_progs::cgroup_programs(&root);
            let more = if truncated {
                " (not every cgroup was read)"
            } else {
                ""
            };
            check(
                "cgroup programs",
                true,
                Status::Ok,
                format!("{} below {}{more}", list(&progs), root.display()),
            )
        }
        None => check("cgroup programs", true, Status::Warn, "no cgroup2 mount"),
    };
    vec![
        cgroup,
        check(
            "xdp programs",
            true,
            Status::Ok,
            list(&bpf_progs::xdp_programs()),
        ),
        check(
            "tc programs",
            true,
            Status::Ok,
            list(&bpf_progs::tc_programs()),
        ),
    ]
}

/// The external commands tracer may run here. Everything is read by
/// netlink and setns in-process; only a namespace with legacy iptables
/// tables has its rules read by iptables-legacy-save (this one is checked).
/// Whether `follow` can name netfilter rules by nf_tables tracing.
fn nftrace_check() -> Check {
    match crate::node::nftrace::probe() {
        Ok(true) => check(
            "nftrace",
            true,
            Status::Ok,
            "available: follow adds table inet tracer_PID (owned by its socket: the kernel removes it even if tracer is killed) to name the nf_tables rule that dropped a packet; --no-nftrace turns it off",
        ),
        Ok(false) => check(
            "nftrace",
            true,
            Status::Ok,
            "available without table ownership (before Linux 5.12): follow adds table inet tracer_PID and removes it on exit; after a SIGKILL run `tracer cleanup`",
        ),
        Err(e) => check(
            "nftrace",
            false,
            Status::Warn,
            format!("unavailable: {e}; netfilter rules are named by their counters only"),
        ),
    }
}

fn helpers_check() -> Check {
    use crate::node::{command::installed, netfilter::LEGACY_HELPERS};
    let legacy: Vec<&str> = LEGACY_HELPERS
        .iter()
        .filter(|(names, _)| crate::node::netfilter::legacy_tables(names))
        .map(|(_, tool)| *tool)
        .collect();
    let missing: Vec<&str> = legacy.iter().copied().filter(|t| !installed(t)).collect();
    if legacy.is_empty() {
        check(
            "helpers",
            true,
            Status::Ok,
            "none: netlink and setns in-process (iptables-legacy-save runs only for a namespace with legacy iptables tables; this one has none)",
        )
    } else if missing.is_empty() {
        check(
            "helpers",
            true,
            Status::Ok,
            format!(
                "{} (legacy iptables tables here); everything else in-process",
                legacy.join(", ")
            ),
        )
    } else {
        check(
            "helpers",
            false,
            Status::Warn,
            format!(
                "legacy iptables tables here but {} not installed: their rule counters are left out",
                missing.join(", ")
            ),
        )
    }
}

/// `doctor --reasons`: every drop reason of this kernel (in the enum's
/// order), the causes that explain it, where and from which facts
/// (verdict/explains.rs), then `N of M drop reasons explained`.
fn reasons(json: bool) -> Result<ExitCode> {
    let btf = Btf::from_sys()
        .map_err(|e| anyhow::anyhow!("cannot read the kernel's BTF ({e}): no drop reasons"))?;
    let mut names: Vec<(u32, String)> = offsets::enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_")
            .into_iter()
            // SKB_DROP_REASON_MAX and the subsystem mask are no reasons.
            .filter(|(_, n)| n != "MAX" && n != "SUBSYS_MASK")
            .collect();
    if names.is_empty() {
        anyhow::bail!(
            "this kernel has no enum skb_drop_reason (before 5.17): tracer infers reasons from the drop location"
        );
    }
    names.sort_unstable();
    let rows: Vec<(&str, Vec<&crate::verdict::explains::Explains>)> = names
        .iter()
        .map(|(_, n)| {
            let reason = crate::model::drop_reason::DropReason::named(n);
            (n.as_str(), crate::verdict::explains::explaining(&reason))
        })
        .collect();
    let explained = rows.iter().filter(|(_, c)| !c.is_empty()).count();
    let mut out = std::io::stdout();
    if json {
        let reasons: Vec<serde_json::Value> = rows
            .iter()
            .map(|(n, c)| {
                serde_json::json!({
                    "reason": n,
                    "causes": c.iter().map(|e| serde_json::json!({
                        "cause": e.cause, "at": e.at, "facts": e.facts,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let v = serde_json::json!({
            "reasons": reasons, "explained": explained, "total": rows.len(),
        });
        emit(&mut out, &v.to_string());
    } else {
        let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        let mut text = String::new();
        for (n, causes) in &rows {
            if causes.is_empty() {
                text += &format!("{n:width$}  -\n");
            }
            for (i, e) in causes.iter().enumerate() {
                let name = if i == 0 { *n } else { "" };
                let at = if e.at.is_empty() {
                    String::new()
                } else {
                    format!(" [at {}]", e.at)
                };
                text += &format!("{name:width$}  {}{at}; reads {}\n", e.cause, e.facts);
            }
        }
        text += &format!("{explained} of {} drop reasons explained", rows.len());
        emit(&mut out, &text);
    }
    Ok(ExitCode::SUCCESS)
}
