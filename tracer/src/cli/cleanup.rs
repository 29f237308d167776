//! `tracer cleanup`: remove what a killed tracer can leave behind.
//!
//! tcx links are owned by file descriptors and vanish with the process.
//! Netlink-attached filters (pre-6.6 kernels, or `--tc-attach netlink`)
//! survive a SIGKILL: they are found by program name on every interface of
//! every known namespace and removed, and a clsact qdisc left empty is
//! deleted.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Result;
use aya::programs::{TcAttachType, tc::qdisc_detach_program};
use clap::Args;

use super::check_privileges;
use crate::{
    kernel::loader::tc::{EGRESS_PROG, INGRESS_PROG},
    node::netns::{NetnsGuard, interfaces},
};

#[derive(Debug, Args)]
pub struct CleanupArgs {}

fn namespaces() -> Vec<(String, Option<PathBuf>)> {
    let mut v = vec![("host".to_string(), None)];
    v.extend(
        crate::node::netns::named()
            .into_iter()
            .map(|(n, p)| (n, Some(p))),
    );
    v
}

pub fn run(_args: CleanupArgs) -> Result<ExitCode> {
    check_privileges()?;
    let mut removed = 0;
    for (label, path) in namespaces() {
        let _g = match &path {
            Some(p) => match NetnsGuard::enter(p) {
                Ok(g) => Some(g),
                Err(e) => {
                    crate::output::diag::info(&format!("skip netns {label}: {e:#}"));
                    continue;
                }
            },
            None => None,
        };
        for (iface, _) in interfaces() {
            let mut here = 0;
            for (at, name) in [
                (TcAttachType::Ingress, INGRESS_PROG),
                (TcAttachType::Egress, EGRESS_PROG),
            ] {
                // aya matches the filter's program name (truncated to 15 chars by the kernel).
                if qdisc_detach_program(&iface, at, name).is_ok() {
                    here += 1;
                }
            }
            if here > 0 {
                removed += here;
                crate::output::emit(
                    &mut std::io::stdout(),
                    &format!("removed {here} tracer tc filter(s) from {iface} in netns {label}"),
                );
                if crate::node::tc::no_filters(&iface) {
                    let _ = crate::node::tc::del_clsact(&iface);
                }
            }
        }
    }
    crate::output::emit(
        &mut std::io::stdout(),
        &format!(
            "cleanup done: {removed} filter(s) removed; tcx links need no cleanup (they close with the process)"
        ),
    );
    Ok(ExitCode::SUCCESS)
}
