//! `tracer cleanup`: remove what a killed tracer can leave behind.
//!
//! tcx links are owned by file descriptors and vanish with the process.
//! Netlink-attached filters (pre-6.6 kernels, or `--tc-attach netlink`)
//! survive a SIGKILL: they are found by program name on every interface of
//! every known namespace and removed, and a clsact qdisc left empty is
//! deleted. nf_tables tables named `tracer_*` are deleted too: on kernels
//! before 5.12 (no NFT_TABLE_F_OWNER) they outlive a killed tracer; a
//! running tracer's own table is owned by its socket and refused (EPERM).

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
    let mut removed_tables = 0;
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
        for table in crate::node::nftrace::delete_left_tables() {
            removed_tables += 1;
            crate::output::emit(
                &mut std::io::stdout(),
                &format!("removed nf_tables table inet {table} from netns {label}"),
            );
        }
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
            "cleanup done: {removed} filter(s) and {removed_tables} nf_tables table(s) removed; tcx links need no cleanup (they close with the process)"
        ),
    );
    Ok(ExitCode::SUCCESS)
}
