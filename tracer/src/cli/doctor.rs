//! `tracer doctor`: everything about this node that decides what tracer can
//! see, reported at once.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use crate::{
    btf::{Btf, offsets, vmlinux_path},
    loader::probes,
};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    /// Worth knowing, does not stop `follow` on this kernel.
    Warn,
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

struct Check {
    name: &'static str,
    status: Status,
    detail: String,
}

fn check(name: &'static str, ok: bool, if_not: Status, detail: impl Into<String>) -> Check {
    Check {
        name,
        status: if ok { Status::Ok } else { if_not },
        detail: detail.into(),
    }
}

fn mounted(fs: &str, path: &str) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines().any(|l| {
                let mut it = l.split_whitespace();
                let _src = it.next();
                it.next() == Some(path) && it.next() == Some(fs)
            })
        })
        .unwrap_or(false)
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
    let mut checks = Vec::new();
    let root = nix::unistd::geteuid().is_root();
    checks.push(check(
        "privileges",
        root,
        Status::Fail,
        if root {
            "running as root"
        } else {
            "not root: run with sudo (needs CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_SYS_ADMIN)"
        },
    ));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    checks.push(check("kernel", true, Status::Ok, kernel.trim()));
    checks.push(lockdown());
    checks.push(check(
        "bpffs",
        mounted("bpf", "/sys/fs/bpf"),
        Status::Warn,
        "/sys/fs/bpf (not needed by follow: nothing is pinned)",
    ));
    checks.push(check(
        "tracefs",
        mounted("tracefs", "/sys/kernel/tracing")
            || mounted("tracefs", "/sys/kernel/debug/tracing"),
        Status::Warn,
        "needed only by kprobe/tracepoint fallbacks; tp_btf does not need it",
    ));
    let btf_path = vmlinux_path();
    let btf = if btf_path.exists() {
        Btf::from_sys().ok()
    } else {
        None
    };
    checks.push(check(
        "btf",
        btf.is_some(),
        Status::Fail,
        match &btf {
            Some(b) => format!("{} types", b.len()),
            None => format!(
                "missing {}: need CONFIG_DEBUG_INFO_BTF=y",
                btf_path.display()
            ),
        },
    ));
    let mut plan = Vec::new();
    if let Some(b) = &btf {
        match offsets::resolve(b) {
            Ok(r) if r.missing.is_empty() => checks.push(check(
                "offsets",
                true,
                Status::Ok,
                "all kernel struct fields resolved",
            )),
            Ok(r) => checks.push(check(
                "offsets",
                false,
                Status::Warn,
                format!("unresolved (features degrade): {}", r.missing.join(", ")),
            )),
            Err(e) => checks.push(check("offsets", false, Status::Fail, e.to_string())),
        }
        let reasons = offsets::enum_names(b, "skb_drop_reason", "SKB_DROP_REASON_");
        checks.push(check(
            "drop reasons",
            !reasons.is_empty(),
            Status::Warn,
            format!("{} names from enum skb_drop_reason", reasons.len()),
        ));
        let mut caps = probes::KernelCaps::probe();
        caps.fentry_error = crate::loader::fentry_trial();
        plan = probes::plan(b, &caps);
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
    }
    let tcx = aya::util::KernelVersion::current()
        .map(|v| v >= aya::util::KernelVersion::new(6, 6, 0))
        .unwrap_or(false);
    checks.push(check(
        "tc",
        true,
        Status::Ok,
        if tcx {
            "tcx links (fd-owned: nothing survives the process)"
        } else {
            "clsact + netlink filters (run `tracer cleanup` after a SIGKILL)"
        },
    ));

    let ok = checks.iter().all(|c| c.status != Status::Fail);
    if args.json {
        let v = serde_json::json!({
            "ok": ok,
            "checks": checks
                .iter()
                .map(|c| serde_json::json!({"name": c.name, "status": c.status.as_str(), "detail": c.detail}))
                .collect::<Vec<_>>(),
            "hooks": plan,
        });
        println!("{v}");
    } else {
        for c in &checks {
            println!("{:<4} {:<13} {}", c.status.as_str(), c.name, c.detail);
        }
        println!("\nhooks (plan for this kernel):");
        for p in &plan {
            println!(
                "  {:<14} {:<7} {:<26} {}",
                p.hook,
                p.backend,
                p.target,
                p.error
                    .clone()
                    .unwrap_or_else(|| format!("feeds {}", p.feeds))
            );
            // Why a better backend was not taken.
            for f in p.fallbacks.iter().filter(|f| Some(*f) != p.error.as_ref()) {
                println!("  {:<14} {:<7} {:<26} passed over: {f}", "", "", "");
            }
        }
        println!("\nbackends: {}", probes::backend_summary_planned(&plan));
        println!(
            "\n{}",
            if ok {
                "tracer can run here"
            } else {
                "tracer cannot run here: see FAIL lines"
            }
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
