//! tc by rtnetlink, in this thread's namespace: the ingress filters of a
//! device described as `tc filter show` would (BPF programs and mirred
//! redirects, plus tcx programs), whether a device still has filters, and
//! deleting a clsact qdisc (aya 0.14 has no qdisc delete).

use std::path::Path;

use aya::programs::{SchedClassifier, TcAttachType};

use super::{
    bpf_progs::AttachedProgram,
    netlink::{attr, attrs, dump, ne32, put_attr, request, string},
};

/// TC_H_CLSACT (== TC_H_INGRESS) and its two minor handles.
const TC_H_CLSACT: u32 = 0xFFFF_FFF1;
const TC_H_MIN_INGRESS: u32 = 0xFFF2;
const TC_H_MIN_EGRESS: u32 = 0xFFF3;
const TC_H_MAJ_MASK: u32 = 0xFFFF_0000;

const fn tc_h_make(maj: u32, min: u32) -> u32 {
    (maj & TC_H_MAJ_MASK) | (min & !TC_H_MAJ_MASK)
}

/// The filters' parent in `tc filter show dev D ingress` / `egress`.
pub const INGRESS_PARENT: u32 = tc_h_make(TC_H_CLSACT, TC_H_MIN_INGRESS);
pub const EGRESS_PARENT: u32 = tc_h_make(TC_H_CLSACT, TC_H_MIN_EGRESS);

const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_BPF_NAME: u16 = 7;
const TCA_BPF_ID: u16 = 11;
const TCA_ACT_KIND: u16 = 1;
const TCA_ACT_OPTIONS: u16 = 2;
const TCA_MIRRED_PARMS: u16 = 2;
/// Length of struct tcmsg.
const TCMSG_LEN: usize = 20;

/// struct tcmsg: family AF_UNSPEC, ifindex, handle, parent.
fn tcmsg(ifindex: u32, handle: u32, parent: u32) -> Vec<u8> {
    let mut b = vec![0u8; TCMSG_LEN];
    b[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    b[8..12].copy_from_slice(&handle.to_ne_bytes());
    b[12..16].copy_from_slice(&parent.to_ne_bytes());
    b
}

/// Every RTM_NEWTFILTER message (header included) of the filters under
/// `parent` of device `ifindex`, by an RTM_GETTFILTER dump. None on error.
pub fn filter_messages(ifindex: u32, parent: u32) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    dump(
        libc::NETLINK_ROUTE,
        libc::RTM_GETTFILTER,
        &tcmsg(ifindex, 0, parent),
        &mut |ty, msg| {
            if ty == libc::RTM_NEWTFILTER {
                out.push(msg.to_vec());
            }
        },
    )?;
    Some(out)
}

/// The attribute (in the classifier's options) holding its actions, per
/// classifier kind: TCA_BPF_ACT, TCA_U32_ACT, TCA_MATCHALL_ACT,
/// TCA_FLOWER_ACT, TCA_BASIC_ACT, TCA_CGROUP_ACT, TCA_FW_ACT.
fn actions_attr(kind: &str) -> Option<u16> {
    Some(match kind {
        "bpf" | "cgroup" => 1,
        "u32" => 7,
        "matchall" => 2,
        "flower" | "basic" => 3,
        "fw" => 4,
        _ => return None,
    })
}

/// What the filters in `msgs` (RTM_NEWTFILTER messages) do, as `tc filter
/// show` names it: `tc BPF program NAME (id N)` for BPF classifiers other
/// than tracer's own (`tracer_*`), named by `prog_name` from their id,
/// `tc action mirred (Egress Redirect to
/// device eth0)` for mirred actions. Malformed messages are skipped.
pub fn describe(
    msgs: &[Vec<u8>],
    dev_name: &dyn Fn(u32) -> String,
    prog_name: &dyn Fn(u32) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for msg in msgs {
        let Some(a) = msg.get(super::netlink::NLMSG_HDRLEN + TCMSG_LEN..) else {
            continue;
        };
        let Some(kind) = attr(a, TCA_KIND).map(string) else {
            continue;
        };
        let Some(opts) = attr(a, TCA_OPTIONS) else {
            continue;
        };
        if kind == "bpf"
            && let Some(id) = attr(opts, TCA_BPF_ID).and_then(ne32)
        {
            // The program's own name (what tc prints after `name`), else
            // the filter's (the object file and section of `tc filter add`).
            let filter = attr(opts, TCA_BPF_NAME).map(string);
            let name = prog_name(id)
                .or_else(|| filter.clone())
                .unwrap_or_else(|| "?".into());
            if !ours(&name) && !filter.as_deref().is_some_and(ours) {
                out.push(format!("tc BPF program {name} (id {id})"));
            }
        }
        let Some(acts) = actions_attr(&kind).and_then(|t| attr(opts, t)) else {
            continue;
        };
        // A list of nested actions, by order (1, 2, ...).
        for (_, act) in attrs(acts) {
            if attr(act, TCA_ACT_KIND).map(string).as_deref() != Some("mirred") {
                continue;
            }
            if let Some(p) = attr(act, TCA_ACT_OPTIONS).and_then(|o| attr(o, TCA_MIRRED_PARMS)) {
                if let Some(m) = mirred(p, dev_name) {
                    out.push(format!("tc action {m}"));
                }
            }
        }
    }
    out
}

/// struct tc_mirred: tc_gen (20 bytes), then eaction and ifindex.
fn mirred(parms: &[u8], dev_name: &dyn Fn(u32) -> String) -> Option<String> {
    let eaction = ne32(parms.get(20..)?)?;
    let ifindex = ne32(parms.get(24..)?)?;
    let what = match eaction {
        1 => "Egress Redirect",
        2 => "Egress Mirror",
        3 => "Ingress Redirect",
        4 => "Ingress Mirror",
        _ => "unknown",
    };
    Some(format!("mirred ({what} to device {})", dev_name(ifindex)))
}

/// The device name of `ifindex` in this thread's namespace, as iproute2
/// prints an unknown one otherwise (`ifN`).
fn dev_name(ifindex: u32) -> String {
    nix::net::if_::if_indextoname(ifindex)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("if{ifindex}"))
}

/// The name of the loaded BPF program `id` (what `tc filter show` asks
/// the kernel for).
fn prog_name(id: u32) -> Option<String> {
    aya::programs::loaded_programs()
        .flatten()
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_string))
}

fn ifindex(dev: &str) -> Option<u32> {
    nix::net::if_::if_nametoindex(dev).ok()
}

/// The tc ingress filters of `dev` in the namespace at `netns_path`, as
/// [`describe`] names them, then its tcx ingress programs (`tcx BPF
/// program NAME (id N)`), tracer's own left out. Used to name what
/// redirected a packet past the IP stack.
pub fn ingress_filters(netns_path: &Path, dev: &str) -> Vec<String> {
    let Ok(_in) = super::netns::NetnsGuard::enter(netns_path) else {
        return Vec::new();
    };
    let Some(index) = ifindex(dev) else {
        return Vec::new();
    };
    let mut out = filter_messages(index, INGRESS_PARENT)
        .map(|m| describe(&m, &dev_name, &prog_name))
        .unwrap_or_default();
    out.extend(
        tcx_programs(dev, TcAttachType::Ingress, "tcx ingress")
            .into_iter()
            .map(|p| {
                let name = if p.name.is_empty() { "?" } else { &p.name };
                format!("tcx BPF program {name} (id {})", p.id)
            }),
    );
    out
}

/// Is this program tracer's own (its programs are all `tracer_*`)?
fn ours(name: &str) -> bool {
    name.starts_with("tracer_")
}

/// The tcx programs on `dev`'s `ty` hook in this thread's namespace, as
/// `hook` (`tcx ingress`, `tcx egress`), tracer's own left out. Before
/// Linux 6.6 there is no tcx: the query fails, and there are none.
fn tcx_programs(dev: &str, ty: TcAttachType, hook: &str) -> Vec<AttachedProgram> {
    let Ok((_, progs)) = SchedClassifier::query_tcx(dev, ty) else {
        return Vec::new();
    };
    progs
        .into_iter()
        .map(|p| AttachedProgram {
            id: p.id(),
            name: p.name_as_str().unwrap_or_default().to_string(),
            hook: hook.into(),
            at: dev.to_string(),
        })
        .filter(|p| !ours(&p.name))
        .collect()
}

/// The BPF programs on `dev`'s tc hooks in this thread's namespace, both
/// directions, tracer's own (`tracer_*`) left out: clsact `bpf` filters
/// (hook `tc ingress`/`tc egress`, at `DEV (clsact prio P)`) and, from
/// Linux 6.6, tcx links (`tcx ingress`/`tcx egress`, at `DEV`).
pub fn bpf_programs(dev: &str) -> Vec<AttachedProgram> {
    let mut out = Vec::new();
    if let Some(index) = ifindex(dev) {
        for (parent, hook) in [(INGRESS_PARENT, "tc ingress"), (EGRESS_PARENT, "tc egress")] {
            let msgs = filter_messages(index, parent).unwrap_or_default();
            for f in bpf_filters_of(&msgs, &prog_name) {
                if !ours(&f.name) {
                    out.push(AttachedProgram {
                        id: f.prog_id,
                        name: f.name.clone(),
                        hook: hook.into(),
                        at: format!("{dev} (clsact prio {})", f.prio()),
                    });
                }
            }
        }
    }
    out.extend(tcx_programs(dev, TcAttachType::Ingress, "tcx ingress"));
    out.extend(tcx_programs(dev, TcAttachType::Egress, "tcx egress"));
    out
}

/// Whether `dev` of this thread's namespace has no tc filter, ingress or
/// egress (`tc filter show` prints nothing). False when that cannot be
/// told.
pub fn no_filters(dev: &str) -> bool {
    let Some(index) = ifindex(dev) else {
        return false;
    };
    [INGRESS_PARENT, EGRESS_PARENT]
        .iter()
        .all(|p| filter_messages(index, *p).is_some_and(|m| m.is_empty()))
}

/// TCA_CHAIN: the filter chain (absent: chain 0).
const TCA_CHAIN: u16 = 11;

/// A BPF filter on a device's clsact hooks, as the kernel names it: what
/// deleting exactly it takes, and the program it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfFilter {
    pub parent: u32,
    /// tcm_info: priority (high 16 bits) and protocol.
    pub info: u32,
    pub handle: u32,
    pub chain: Option<u32>,
    pub prog_id: u32,
    /// The program's name, else the filter's.
    pub name: String,
}

impl BpfFilter {
    pub fn prio(&self) -> u32 {
        self.info >> 16
    }
}

/// The BPF filters in RTM_NEWTFILTER messages `msgs` (malformed ones and
/// other kinds skipped), named by `prog_name` from their id.
fn bpf_filters_of(msgs: &[Vec<u8>], prog_name: &dyn Fn(u32) -> Option<String>) -> Vec<BpfFilter> {
    let mut out = Vec::new();
    for msg in msgs {
        let h = super::netlink::NLMSG_HDRLEN;
        let (Some(tcm), Some(a)) = (msg.get(h..h + TCMSG_LEN), msg.get(h + TCMSG_LEN..)) else {
            continue;
        };
        if attr(a, TCA_KIND).map(string).as_deref() != Some("bpf") {
            continue;
        }
        let Some(opts) = attr(a, TCA_OPTIONS) else {
            continue;
        };
        let Some(prog_id) = attr(opts, TCA_BPF_ID).and_then(ne32) else {
            continue;
        };
        let word = |at: usize| ne32(&tcm[at..]).unwrap_or(0);
        let filter = attr(opts, TCA_BPF_NAME).map(string);
        out.push(BpfFilter {
            handle: word(8),
            parent: word(12),
            info: word(16),
            chain: attr(a, TCA_CHAIN).and_then(ne32),
            prog_id,
            name: prog_name(prog_id).or(filter).unwrap_or_default(),
        });
    }
    out
}

/// The BPF filters on `dev`'s ingress and egress hooks, in this thread's
/// namespace; None when they cannot be listed.
pub fn bpf_filters(dev: &str) -> Option<Vec<BpfFilter>> {
    let index = ifindex(dev)?;
    let mut out = Vec::new();
    for parent in [INGRESS_PARENT, EGRESS_PARENT] {
        out.extend(bpf_filters_of(&filter_messages(index, parent)?, &prog_name));
    }
    Some(out)
}

/// Delete exactly filter `f` of `dev` (its hook, priority, protocol,
/// chain and handle), in this thread's namespace.
pub fn del_filter(dev: &str, f: &BpfFilter) -> std::io::Result<()> {
    let index = ifindex(dev)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no {dev}")))?;
    let mut body = tcmsg(index, f.handle, f.parent);
    body[16..20].copy_from_slice(&f.info.to_ne_bytes());
    put_attr(&mut body, TCA_KIND, b"bpf\0");
    if let Some(c) = f.chain {
        put_attr(&mut body, TCA_CHAIN, &c.to_ne_bytes());
    }
    request(libc::NETLINK_ROUTE, libc::RTM_DELTFILTER, &body)
        .map_err(std::io::Error::from_raw_os_error)
}

/// Delete the clsact qdisc of `dev` in this thread's namespace (`tc qdisc
/// del dev DEV clsact`), with the filters still on it.
pub fn del_clsact(dev: &str) -> std::io::Result<()> {
    let index = ifindex(dev)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no {dev}")))?;
    let mut body = tcmsg(index, tc_h_make(TC_H_CLSACT, 0), TC_H_CLSACT);
    put_attr(&mut body, TCA_KIND, b"clsact\0");
    request(libc::NETLINK_ROUTE, libc::RTM_DELQDISC, &body)
        .map_err(std::io::Error::from_raw_os_error)
}

#[cfg(test)]
mod tests;
