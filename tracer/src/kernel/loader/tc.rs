//! tc attachment on every interface of the traced namespaces, kept in sync
//! as interfaces come and go, and removed in the right namespace at exit.
//!
//! tcx links (Linux >= 6.6) are bpf_link file descriptors: the kernel removes
//! them when the last fd closes, even after SIGKILL. Netlink (clsact)
//! filters outlive the process, so they are removed explicitly, from inside
//! their namespace (netlink talks to the caller's namespace).

use std::{collections::HashMap, path::PathBuf, process::Command};

use anyhow::{Context, Result, anyhow};
use aya::{
    Ebpf,
    programs::{
        LinkOrder, SchedClassifier, TcAttachType,
        tc::{NlOptions, SchedClassifierLink, TcAttachOptions, qdisc_add_clsact},
    },
};

use crate::node::netns::{NetnsGuard, interfaces};

pub const INGRESS_PROG: &str = "tracer_tc_ingress";
pub const EGRESS_PROG: &str = "tracer_tc_egress";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcMode {
    /// tcx links, first in the chain so other programs' redirects are seen.
    Tcx,
    /// clsact qdisc + direct-action filter (pre-6.6 kernels).
    Netlink,
}

/// Where to attach: a namespace (None: the tracer's own) and an optional
/// interface allow-list.
#[derive(Debug, Clone)]
pub struct TcScope {
    pub netns: Option<PathBuf>,
    pub label: String,
}

struct Attachment {
    scope: usize,
    iface: String,
    links: Vec<SchedClassifierLink>,
    created_qdisc: bool,
}

pub struct TcManager {
    mode: TcMode,
    scopes: Vec<TcScope>,
    only: Vec<String>,
    attached: HashMap<(usize, u32), Attachment>,
    pub errors: Vec<String>,
}

impl TcManager {
    pub fn new(mode: TcMode, scopes: Vec<TcScope>, only: Vec<String>) -> TcManager {
        TcManager {
            mode,
            scopes,
            only,
            attached: HashMap::new(),
            errors: Vec::new(),
        }
    }

    pub fn mode(&self) -> TcMode {
        self.mode
    }

    pub fn attached_count(&self) -> usize {
        self.attached.len()
    }

    /// Interfaces named with --iface that exist in no traced namespace.
    pub fn missing_ifaces(&self) -> Vec<String> {
        self.only
            .iter()
            .filter(|name| !self.attached.values().any(|a| &a.iface == *name))
            .cloned()
            .collect()
    }

    /// Attach to interfaces that appeared, forget those that vanished.
    /// Returns how many were newly attached.
    pub fn sync(&mut self, ebpf: &mut Ebpf) -> Result<usize> {
        let mut added = 0;
        for si in 0..self.scopes.len() {
            let scope = self.scopes[si].clone();
            let _guard = match &scope.netns {
                Some(p) => Some(NetnsGuard::enter(p)?),
                None => None,
            };
            let present = interfaces();
            // Vanished interfaces: the kernel already dropped their tc state.
            let gone: Vec<(usize, u32)> = self
                .attached
                .keys()
                .filter(|(s, idx)| *s == si && !present.iter().any(|(_, i)| i == idx))
                .copied()
                .collect();
            for k in gone {
                if let Some(mut a) = self.attached.remove(&k) {
                    // Dropping detaches; errors are expected (device gone).
                    a.links.clear();
                }
            }
            for (name, idx) in present {
                if self.attached.contains_key(&(si, idx)) {
                    continue;
                }
                if !self.only.is_empty() && !self.only.contains(&name) {
                    continue;
                }
                match self.attach_one(ebpf, &name) {
                    Ok((links, created_qdisc)) => {
                        self.attached.insert(
                            (si, idx),
                            Attachment {
                                scope: si,
                                iface: name,
                                links,
                                created_qdisc,
                            },
                        );
                        added += 1;
                    }
                    Err(e) => self
                        .errors
                        .push(format!("tc on {name} in netns {}: {e:#}", scope.label)),
                }
            }
        }
        Ok(added)
    }

    fn attach_one(&self, ebpf: &mut Ebpf, iface: &str) -> Result<(Vec<SchedClassifierLink>, bool)> {
        let mut created_qdisc = false;
        if self.mode == TcMode::Netlink {
            match qdisc_add_clsact(iface) {
                Ok(()) => created_qdisc = true,
                // EEXIST: a clsact qdisc is already there (someone else's).
                // Linux 6.1 answers with only its extack message,
                // "Exclusivity flag on, cannot modify" (qdisc_create() path
                // of tc_modify_qdisc() with NLM_F_EXCL).
                Err(e)
                    if e.to_string().contains("exists")
                        || e.to_string().contains("os error 17")
                        || e.to_string().contains("Exclusivity flag on") => {}
                Err(e) => return Err(anyhow!("add clsact qdisc: {e}")),
            }
        }
        let mut links = Vec::new();
        for (prog_name, at) in [
            (INGRESS_PROG, TcAttachType::Ingress),
            (EGRESS_PROG, TcAttachType::Egress),
        ] {
            let prog: &mut SchedClassifier = ebpf
                .program_mut(prog_name)
                .ok_or_else(|| anyhow!("program {prog_name} missing from the object"))?
                .try_into()?;
            let opts = match self.mode {
                TcMode::Tcx => TcAttachOptions::TcxOrder(LinkOrder::first()),
                // Priority 1 runs before other filters (a redirect would
                // otherwise take the packet before tracer sees it). Left to
                // the kernel (0), tcf_auto_prio() gives 49152 when the
                // chain has no filter in front, the priority the usual
                // `tc filter add` already took: tracer would run after it.
                TcMode::Netlink => TcAttachOptions::Netlink(NlOptions {
                    priority: 1,
                    ..Default::default()
                }),
            };
            let first = prog.attach_with_options(iface, at, opts);
            // Priority 1 held by another classifier kind: let the kernel pick.
            let first = match first {
                Err(_) if self.mode == TcMode::Netlink => prog.attach_with_options(
                    iface,
                    at,
                    TcAttachOptions::Netlink(NlOptions::default()),
                ),
                r => r,
            };
            let id = match first {
                Ok(id) => id,
                Err(e) => {
                    drop(links);
                    if created_qdisc {
                        del_clsact(iface);
                    }
                    return Err(anyhow!("attach {prog_name}: {e}"));
                }
            };
            links.push(prog.take_link(id).context("take tc link")?);
        }
        Ok((links, created_qdisc))
    }

    /// Remove everything, each namespace from inside itself.
    pub fn detach_all(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        let mut by_scope: HashMap<usize, Vec<Attachment>> = HashMap::new();
        for (_, a) in self.attached.drain() {
            by_scope.entry(a.scope).or_default().push(a);
        }
        for (si, atts) in by_scope {
            let scope = &self.scopes[si];
            let guard = match &scope.netns {
                Some(p) => match NetnsGuard::enter(p) {
                    Ok(g) => Some(g),
                    Err(e) => {
                        // The namespace is gone, and its interfaces with it.
                        errors.push(format!("netns {}: {e:#}", scope.label));
                        continue;
                    }
                },
                None => None,
            };
            for mut a in atts {
                a.links.clear();
                if a.created_qdisc {
                    del_clsact(&a.iface);
                }
            }
            drop(guard);
        }
        errors
    }
}

impl Drop for TcManager {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}

/// Remove a clsact qdisc we created (iproute2's `tc`, present on every node;
/// aya 0.14 has no qdisc delete call).
fn del_clsact(iface: &str) {
    let _ = crate::node::command::output_or_warn(
        "tc qdisc del",
        Command::new("tc").args(["qdisc", "del", "dev", iface, "clsact"]),
        &format!("the clsact qdisc of {iface} may remain (`tracer cleanup` removes it)"),
    );
}
