//! `tracer cleanup`: remove what a killed tracer can leave behind, and
//! nothing of a tracer still running.
//!
//! tcx links are owned by file descriptors and vanish with the process.
//! Netlink-attached filters (pre-6.6 kernels, or `--tc-attach netlink`)
//! survive a SIGKILL. Every tracer holds a lock file under /run/tracer
//! for its lifetime, naming its tc programs and the clsact qdiscs it
//! added (kernel::tracer_lock): a filter running a live tracer's program
//! is left alone; other `tracer_tc_*` filters, on every interface of
//! every known namespace, are removed one by one (by hook, priority and
//! handle), and a clsact qdisc is deleted when a dead tracer added it or
//! lost its last filter here, and no filter is left on it. nf_tables
//! tables named `tracer_*` are deleted too, but a live tracer's: on
//! kernels before 5.12 (no NFT_TABLE_F_OWNER) they outlive a killed
//! tracer.

use std::{collections::HashSet, path::PathBuf, process::ExitCode};

use anyhow::Result;
use clap::Args;

use super::check_privileges;
use crate::{
    kernel::tracer_lock::{self, QdiscRecord, Tracers},
    node::netns::{NetnsGuard, interfaces, netns_inode},
    node::nftrace::TABLE_PREFIX,
    node::tc::{BpfFilter, bpf_filters, del_clsact, del_filter, no_filters},
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

fn say(line: &str) {
    crate::output::emit(&mut std::io::stdout(), line);
}

/// What cleanup did, over every namespace.
#[derive(Default)]
struct Tally {
    filters: usize,
    tables: usize,
    qdiscs: usize,
    /// Filters of running tracers, left alone.
    kept: usize,
}

/// A tracer's tc filter (its program's name, or the filter's).
fn is_tracer_filter(f: &BpfFilter) -> bool {
    f.name.starts_with("tracer_tc_")
}

/// One interface of the namespace entered: the leftovers of dead tracers
/// removed, then the clsact qdisc when a dead tracer added it (or it held
/// only leftovers) and nothing is left on it.
fn clean_interface(
    iface: &str,
    label: &str,
    tracers: &Tracers,
    dead_qdisc: Option<&QdiscRecord>,
    tally: &mut Tally,
) {
    let live = tracers.live_progs();
    let ours: Vec<BpfFilter> = bpf_filters(iface)
        .unwrap_or_default()
        .into_iter()
        .filter(is_tracer_filter)
        .collect();
    let (kept, left): (Vec<_>, Vec<_>) = ours.into_iter().partition(|f| live.contains(&f.prog_id));
    tally.kept += kept.len();
    let mut here = 0;
    for f in &left {
        match del_filter(iface, f) {
            Ok(()) => here += 1,
            Err(e) => crate::output::diag::warn(&format!(
                "cannot remove tc filter {} (pref {}) from {iface} in netns {label}: {e}",
                f.name,
                f.prio()
            )),
        }
    }
    if here > 0 {
        tally.filters += here;
        say(&format!(
            "removed {here} tracer tc filter(s) from {iface} in netns {label}"
        ));
    }
    if !(here > 0 || dead_qdisc.is_some()) {
        return;
    }
    if no_filters(iface) {
        if del_clsact(iface).is_ok() {
            tally.qdiscs += 1;
            say(&format!(
                "removed the clsact qdisc a tracer added to {iface} in netns {label}"
            ));
        }
    } else if let Some(q) = dead_qdisc {
        // A running tracer's filters are on it: that tracer removes it
        // once it leaves it empty.
        let progs = kept.iter().map(|f| f.prog_id).collect();
        tracers.hand_over(&progs, q);
    }
}

fn clean_namespace(label: &str, path: Option<&PathBuf>, tracers: &Tracers, tally: &mut Tally) {
    let _g = match path {
        Some(p) => match NetnsGuard::enter(p) {
            Ok(g) => Some(g),
            Err(e) => {
                crate::output::diag::info(&format!("skip netns {label}: {e:#}"));
                return;
            }
        },
        None => None,
    };
    let inode = netns_inode(std::path::Path::new("/proc/thread-self/ns/net")).unwrap_or(0);
    let live_tables: HashSet<String> = tracers
        .live_pids()
        .iter()
        .map(|p| format!("{TABLE_PREFIX}{p}"))
        .collect();
    for table in crate::node::nftrace::delete_left_tables(&|n| live_tables.contains(n)) {
        tally.tables += 1;
        say(&format!(
            "removed nf_tables table inet {table} from netns {label}"
        ));
    }
    for (iface, ifindex) in interfaces() {
        let dead_qdisc = tracers
            .dead
            .iter()
            .flat_map(|d| &d.recorded.qdiscs)
            .find(|q| q.netns == inode && q.ifindex == ifindex);
        clean_interface(&iface, label, tracers, dead_qdisc, tally);
    }
}

pub fn run(_args: CleanupArgs) -> Result<ExitCode> {
    check_privileges()?;
    // Dead tracers' lock files stay locked (by us) until their leftovers
    // are gone.
    let tracers = tracer_lock::tracers();
    let mut tally = Tally::default();
    for (label, path) in namespaces() {
        clean_namespace(&label, path.as_ref(), &tracers, &mut tally);
    }
    let running = tracers.live.len();
    let Tracers { dead, .. } = tracers;
    for d in dead {
        d.forget();
    }
    say(&format!(
        "cleanup done: {} filter(s), {} clsact qdisc(s) and {} nf_tables table(s) removed; \
         {running} running tracer(s) left alone ({} of their filter(s)); \
         tcx links need no cleanup (they close with the process)",
        tally.filters, tally.qdiscs, tally.tables, tally.kept
    ));
    Ok(ExitCode::SUCCESS)
}
