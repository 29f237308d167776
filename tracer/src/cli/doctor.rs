//! `tracer doctor`: everything about this node that decides what tracer can
//! see, reported at once.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use crate::{
    btf::{Btf, offsets},
    loader::probes,
};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
}

/// Checks that inform but do not stop `follow` on this kernel.
const ADVISORY: &[&str] = &["bpffs", "tracefs", "lockdown"];

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

pub fn run(args: DoctorArgs) -> Result<ExitCode> {
    let mut checks = Vec::new();
    let root = nix::unistd::geteuid().is_root();
    checks.push(Check {
        name: "privileges",
        ok: root,
        detail: if root {
            "running as root".into()
        } else {
            "not root: run with sudo (needs CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_SYS_ADMIN)"
                .into()
        },
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    checks.push(Check {
        name: "kernel",
        ok: true,
        detail: kernel.trim().to_string(),
    });
    let lockdown = std::fs::read_to_string("/sys/kernel/security/lockdown").unwrap_or_default();
    let lock = lockdown
        .split_whitespace()
        .find(|w| w.starts_with('['))
        .unwrap_or("[unknown]")
        .to_string();
    checks.push(Check {
        name: "lockdown",
        ok: lock != "[confidentiality]",
        detail: format!("{lock} (confidentiality mode forbids bpf_probe_read_kernel)"),
    });
    checks.push(Check {
        name: "bpffs",
        ok: mounted("bpf", "/sys/fs/bpf"),
        detail: "/sys/fs/bpf (not needed by follow: nothing is pinned)".into(),
    });
    checks.push(Check {
        name: "tracefs",
        ok: mounted("tracefs", "/sys/kernel/tracing")
            || mounted("tracefs", "/sys/kernel/debug/tracing"),
        detail: "needed by the kprobe/tracepoint fallbacks; tp_btf does not need it".into(),
    });
    let btf_path = crate::btf::vmlinux_path();
    let btf = if btf_path.exists() {
        Btf::from_sys().ok()
    } else {
        None
    };
    checks.push(Check {
        name: "btf",
        ok: btf.is_some(),
        detail: match &btf {
            Some(b) => format!("{} types", b.len()),
            None => format!(
                "missing {}: need CONFIG_DEBUG_INFO_BTF=y",
                btf_path.display()
            ),
        },
    });
    let mut plan = Vec::new();
    if let Some(b) = &btf {
        match offsets::resolve(b) {
            Ok(r) => checks.push(Check {
                name: "offsets",
                ok: true,
                detail: if r.missing.is_empty() {
                    "all kernel struct fields resolved".into()
                } else {
                    format!("unresolved (features degrade): {}", r.missing.join(", "))
                },
            }),
            Err(e) => checks.push(Check {
                name: "offsets",
                ok: false,
                detail: e.to_string(),
            }),
        }
        let reasons = offsets::enum_names(b, "skb_drop_reason", "SKB_DROP_REASON_");
        checks.push(Check {
            name: "drop reasons",
            ok: !reasons.is_empty(),
            detail: format!("{} names from enum skb_drop_reason", reasons.len()),
        });
        plan = probes::plan(b);
    }
    let tcx = aya::util::KernelVersion::current()
        .map(|v| v >= aya::util::KernelVersion::new(6, 6, 0))
        .unwrap_or(false);
    checks.push(Check {
        name: "tc",
        ok: true,
        detail: if tcx {
            "tcx links (fd-owned: nothing survives the process)".into()
        } else {
            "clsact + netlink filters (run `tracer cleanup` after a SIGKILL)".into()
        },
    });

    let ok = checks
        .iter()
        .all(|c| c.ok || c.name == "bpffs" || c.name == "tracefs")
        && plan
            .iter()
            .filter(|p| p.required)
            .all(|p| p.error.is_none());
    if args.json {
        let v = serde_json::json!({
            "ok": ok,
            "checks": checks.iter().map(|c| serde_json::json!({"name": c.name, "ok": c.ok, "detail": c.detail})).collect::<Vec<_>>(),
            "hooks": plan,
        });
        println!("{v}");
    } else {
        for c in &checks {
            println!(
                "{:<4} {:<13} {}",
                if c.ok { "ok" } else { "FAIL" },
                c.name,
                c.detail
            );
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
        }
        println!(
            "\n{}",
            if ok {
                "tracer can run here"
            } else {
                "tracer cannot run fully here: see FAIL lines"
            }
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
