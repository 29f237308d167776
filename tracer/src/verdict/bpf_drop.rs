//! A cause: a BPF program of the node's dataplane (Cilium, Calico eBPF)
//! dropped the packet at a device's tc or XDP hook.
//!
//! - **Signals**: the drop's reason and site. `TC_INGRESS`/`TC_EGRESS`:
//!   sch_handle_ingress()/sch_handle_egress() (clsact) and tcx_run()'s
//!   callers free an skb a program returned TC_ACT_SHOT for with that
//!   reason. `XDP`, or a drop inside the generic XDP path:
//!   netif_receive_generic_xdp() frees an skb its program returned
//!   XDP_DROP (or XDP_ABORTED) for with a plain kfree_skb(), seen as
//!   NOT_SPECIFIED at do_xdp_generic on 6.18; in native mode on a veth,
//!   veth_xdp_rcv_skb() frees it so (xdp_native::is_site). On a kernel
//!   whose kfree_skb
//!   gives no reason (5.10), a drop at the functions sch_handle_ingress()
//!   and sch_handle_egress() are inlined into, when a tc program is
//!   attached at that hook of the device: the reason is then inferred.
//! - **Facts**: the BPF programs attached to the drop's device at that hook
//!   (node::bpf_progs::dev_programs_in: clsact filters, tcx links, XDP by
//!   mode), tracer's own left out; `Env::dev_programs`, kept in a
//!   recording.
//! - **Evidence**: [`Evidence::BpfProgramDrop`]: the hook, device,
//!   namespace and the programs (name, id, how attached).
//! - **Where**: `tc ingress of lxc0 in netns node: dropped by tc BPF
//!   program cil_from_contai (id 42)`. The kernel does not say which of
//!   several programs on a hook returned the drop without fexit on each
//!   program (not here): all of them are named then.
//! - **Rules**: a request's drop is judged by `rules::dropped`, which asks
//!   [`judge`]; a reply's, when the client never got an answer, by
//!   [`reply_dropped_by_program`].
//! - **Hint**: hints.rs, the row of `BpfProgramDrop`.

use std::fmt;

use super::{Env, Evidence, Kind, Verdict, rules};
use crate::model::drop_reason::DropReason;
use crate::{
    model::{
        flow::Flow,
        hop::{Dir, Hop, HopData, XdpData},
        names::func_of,
    },
    node::bpf_progs::AttachedProgram,
};

/// The hook a BPF program dropped a packet at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BpfHook {
    TcIngress,
    TcEgress,
    Xdp,
}

/// The drop reasons this cause explains (verdict/explains.rs).
pub const EXPLAINS: &[super::explains::Explains] = &[super::explains::Explains {
    reasons: &[DropReason::TcIngress, DropReason::TcEgress, DropReason::Xdp],
    cause: "a BPF program of the dataplane dropped it at the device's tc or XDP hook (verdict/bpf_drop.rs)",
    at: "",
    facts: "the BPF programs attached to the device (tc clsact and tcx, XDP), by name and id",
}];

/// Functions of the generic XDP path that free an skb its program dropped
/// (net/core/dev.c; inlined into do_xdp_generic() on x86-64 builds).
const XDP_FUNCS: &[&str] = &[
    "do_xdp_generic",
    "netif_receive_generic_xdp",
    "bpf_prog_run_generic_xdp",
];

/// Functions a tc program's drop lands in with no reason of its own, on
/// a kernel whose kfree_skb gives none (before 5.17): sch_handle_ingress()
/// and sch_handle_egress() are inlined into __netif_receive_skb_core() and
/// __dev_queue_xmit() (5.10), which also drop for other causes (an
/// unhandled protocol, a full queue): a program attached there is then the
/// likely cause, not a certain one.
const TC_FUNCS_NO_REASON: &[(&str, BpfHook)] = &[
    ("__netif_receive_skb_core", BpfHook::TcIngress),
    ("sch_handle_ingress", BpfHook::TcIngress),
    ("__dev_queue_xmit", BpfHook::TcEgress),
    ("sch_handle_egress", BpfHook::TcEgress),
];

impl BpfHook {
    /// The hook where a drop with no reason from the kernel (`inferred`)
    /// at `func` may have come from a tc program.
    pub fn of_site(func: &str) -> Option<BpfHook> {
        let func = crate::model::names::stem(func);
        TC_FUNCS_NO_REASON
            .iter()
            .find(|(f, _)| *f == func)
            .map(|(_, h)| *h)
    }

    /// The reason a tc program's drop has on kernels that give one.
    pub fn reason(self) -> DropReason {
        match self {
            BpfHook::TcIngress => DropReason::TcIngress,
            BpfHook::TcEgress => DropReason::TcEgress,
            BpfHook::Xdp => DropReason::Xdp,
        }
    }

    /// The hook a drop's reason (its name) and function point at.
    pub fn of(reason: &DropReason, func: &str) -> Option<BpfHook> {
        match reason {
            DropReason::TcIngress => Some(BpfHook::TcIngress),
            DropReason::TcEgress => Some(BpfHook::TcEgress),
            DropReason::Xdp => Some(BpfHook::Xdp),
            _ if XDP_FUNCS.contains(&func) || super::xdp_native::is_site(func) => {
                Some(BpfHook::Xdp)
            }
            _ => None,
        }
    }

    /// As the verdict names it.
    pub fn label(self) -> &'static str {
        match self {
            BpfHook::TcIngress => "tc ingress",
            BpfHook::TcEgress => "tc egress",
            BpfHook::Xdp => "XDP",
        }
    }

    /// Is `p` (AttachedProgram::hook: `tc ingress`, `tcx egress`, `xdp`)
    /// attached at this hook?
    pub(super) fn holds(self, p: &AttachedProgram) -> bool {
        match self {
            BpfHook::TcIngress => matches!(p.hook.as_str(), "tc ingress" | "tcx ingress"),
            BpfHook::TcEgress => matches!(p.hook.as_str(), "tc egress" | "tcx egress"),
            BpfHook::Xdp => p.hook == "xdp",
        }
    }

    /// The programs of others attached at this hook of `dev` in that
    /// namespace (none for a hop without a device).
    pub(super) fn programs_at(self, env: &dyn Env, netns: u32, dev: &str) -> Vec<AttachedProgram> {
        if dev.is_empty() {
            return Vec::new();
        }
        env.dev_programs(netns, dev)
            .into_iter()
            .filter(|p| self.holds(p))
            .collect()
    }
}

/// What [`judge`] found: the `where`, the evidence, and the reason it
/// inferred when the kernel gave none.
pub struct Judged {
    pub where_: String,
    /// [`Evidence::BpfProgramDrop`], and [`Evidence::XdpAction`] when the
    /// xdp tracepoints told what the program returned.
    pub evidence: Vec<Evidence>,
    /// `TC_INGRESS`/`TC_EGRESS` for a drop the kernel gave no reason for
    /// (before 5.17) at a function a tc program's drop lands in, with a
    /// program attached at that hook.
    pub inferred: Option<DropReason>,
}

/// The XDP action the xdp tracepoints recorded for the dropped packet on
/// the drop's device, before the drop (tracer-ebpf xdp.rs).
pub fn xdp_action<'a>(flow: &'a Flow, drop: &Hop) -> Option<&'a XdpData> {
    flow.hops
        .iter()
        .take_while(|h| h.ts_ns <= drop.ts_ns)
        .filter(|h| {
            h.skb == drop.skb && h.ifindex == drop.ifindex && h.netns_inode == drop.netns_inode
        })
        .filter_map(|h| match &h.data {
            HopData::Xdp(x) => Some(&**x),
            _ => None,
        })
        .last()
}

/// A redirect's target device by name, from its ifindex in `netns`: the
/// tracepoint's, or a device map's entry at the redirect's key
/// (`Env::devmap_target`), told with the map.
pub fn xdp_target(env: &dyn Env, netns: u32, x: &XdpData) -> Option<String> {
    let via_map = x.to_ifindex == 0 && x.map_id != 0;
    let ifindex = if via_map {
        env.devmap_target(x.map_id, x.map_key)?
    } else {
        x.to_ifindex
    };
    if ifindex == 0 {
        return None;
    }
    let dev = env
        .links(netns)
        .iter()
        .find(|l| l.ifindex == ifindex)
        .map_or_else(|| format!("ifindex {ifindex}"), |l| l.dev.clone());
    Some(if via_map {
        format!("{dev} (device map id {}, key {})", x.map_id, x.map_key)
    } else {
        dev
    })
}

/// The XDP program of an xdp tracepoint's record: as [`program`] names
/// it, or by the record's id when it was not attached there when the
/// node was read.
pub fn xdp_program(program: Option<&AttachedProgram>, id: u32) -> String {
    program.map_or_else(|| format!("XDP program id {id}"), self::program)
}

/// The drop's `where` and evidence when its signals point at a tc or XDP
/// hook; None otherwise (the other rules judge it). Where the kernel gave
/// no reason (it was inferred from the site, or is unknown), a program
/// at the site is what makes it this cause; what the XDP program
/// returned is told when the xdp tracepoints recorded it
/// ([`xdp_action`]).
pub fn judge(
    flow: &Flow,
    drop: &Hop,
    reason: &DropReason,
    func: &str,
    env: &dyn Env,
) -> Option<Judged> {
    let inferred = matches!(&drop.data, HopData::Drop(d) if !d.reason_from.is_kernel());
    let xdp = xdp_action(flow, drop);
    let (hook, from_site) = match BpfHook::of(reason, func) {
        Some(h) => (h, false),
        // The xdp tracepoints saw the program not pass it, on this device,
        // right before: the drop is XDP's, wherever generic XDP is inlined
        // (into __netif_receive_skb_core() on Debian's 5.10).
        None if xdp.is_some() => (BpfHook::Xdp, inferred),
        None if inferred => (BpfHook::of_site(func)?, true),
        None => return None,
    };
    let programs = hook.programs_at(env, drop.netns_inode, &drop.dev);
    // Without the kernel's reason, a program there is what makes it this
    // cause; with none, the site's own inference stands.
    if from_site && programs.is_empty() {
        return None;
    }
    let dev = if drop.dev.is_empty() { "-" } else { &drop.dev };
    let by = match programs.as_slice() {
        [] if hook == BpfHook::Xdp => "no XDP program is attached there now".to_string(),
        [] => format!(
            "no BPF program is attached there now: a tc filter's action (`tc filter show dev {dev} {}`), or a program detached since",
            if hook == BpfHook::TcEgress {
                "egress"
            } else {
                "ingress"
            }
        ),
        [p] => format!("dropped by {}", program(p)),
        many => format!(
            "dropped by one of its {} BPF programs: {}",
            many.len(),
            named(many, ", ")
        ),
    };
    let xdp = xdp.filter(|_| hook == BpfHook::Xdp);
    let action = xdp.map(|x| {
        let program = programs.iter().find(|p| p.id == x.prog_id).cloned();
        let to_dev = xdp_target(env, drop.netns_inode, x);
        Evidence::XdpAction {
            dev: dev.to_string(),
            netns: drop.netns.to_string(),
            program,
            action: x.clone(),
            to_dev,
        }
    });
    // The program that returned it, and what, when the tracepoint said.
    let by = match &action {
        Some(Evidence::XdpAction {
            program,
            action,
            to_dev,
            ..
        }) => format!(
            "{} returned {}",
            xdp_program(program.as_ref(), action.prog_id),
            action.did(to_dev.as_deref())
        ),
        _ => by,
    };
    let where_ = format!("{} of {dev} in netns {}: {by}", hook.label(), drop.netns);
    let mut evidence = vec![Evidence::BpfProgramDrop {
        hook: hook.label().to_string(),
        dev: dev.to_string(),
        netns: drop.netns.to_string(),
        programs,
    }];
    evidence.extend(action);
    Some(Judged {
        where_,
        evidence,
        inferred: from_site.then(|| hook.reason()),
    })
}

/// A rule: the request was delivered, but its answer was dropped at a tc
/// or XDP hook on its way back and the client never got it (a UDP answer
/// no client socket took, a TCP handshake the client never completed): a
/// policy that denies the replies (cilium/cilium#21391: DNS answers
/// dropped at the client pod's veth). Dropped, as [`judge`] names it.
pub fn reply_dropped_by_program(flow: &Flow, env: &dyn Env) -> Option<Verdict> {
    let (drop, dd) = flow.hops.iter().find_map(|h| match &h.data {
        HopData::Drop(d) if h.dir == Dir::Reply => {
            let func = func_of(&d.location);
            (BpfHook::of(&d.reason, func).is_some()
                || !d.reason_from.is_kernel() && BpfHook::of_site(func).is_some())
            .then_some((h, d))
        }
        _ => None,
    })?;
    if rules::client_answered(flow) {
        return None;
    }
    let func = func_of(&dd.location);
    let j = judge(flow, drop, &dd.reason, func, env)?;
    let mut v = rules::verdict(
        Kind::Dropped,
        j.inferred.clone().unwrap_or_else(|| dd.reason.clone()),
        format!(
            "the reply from {} was dropped on its way back: {}",
            endpoint(drop.tuple.src, drop.tuple.sport),
            j.where_
        ),
        &drop.netns,
        Some(drop.dev.to_string()),
    );
    v.add(rules::dropped_at(drop, &dd.location));
    if let Some(r) = j.inferred {
        v.reason_inferred = true;
        v.add(inferred_at(func, r));
    }
    v.add_all(j.evidence);
    v.add_all(rules::delivered_and_side_evidence(flow));
    Some(v)
}

/// The reason inferred for a drop the kernel gave none for.
pub fn inferred_at(func: &str, reason: DropReason) -> Evidence {
    Evidence::DropReasonInferred {
        location: func.to_string(),
        reason: Some(reason),
        one_of: Vec::new(),
        site_only: false,
    }
}

/// `ADDR:PORT`, `[ADDR]:PORT` for IPv6.
fn endpoint(a: std::net::IpAddr, port: u16) -> String {
    super::Endpoint::new(a, port).to_string()
}

/// Each program as [`program`] names it, joined by `sep`.
pub fn named(programs: &[AttachedProgram], sep: &str) -> String {
    programs.iter().map(program).collect::<Vec<_>>().join(sep)
}

/// `tc BPF program NAME (id N)`, `XDP program NAME (id N, generic)`.
pub fn program(p: &AttachedProgram) -> String {
    let name = if p.name.is_empty() { "?" } else { &p.name };
    let mode =
        p.at.split_once(" (")
            .map(|(_, m)| m.trim_end_matches(')'))
            .filter(|m| !m.is_empty());
    let kind = match p.hook.as_str() {
        "xdp" => "XDP program",
        h if h.starts_with("tcx") => "tcx BPF program",
        _ => "tc BPF program",
    };
    match mode {
        Some(m) => format!("{kind} {name} (id {}, {m})", p.id),
        None => format!("{kind} {name} (id {})", p.id),
    }
}

/// [`Evidence::XdpAction`]'s sentence: the program, and what it returned.
pub(super) fn xdp_returned(
    f: &mut fmt::Formatter<'_>,
    dev: &str,
    netns: &str,
    program: Option<&AttachedProgram>,
    action: &XdpData,
    to_dev: Option<&str>,
) -> fmt::Result {
    write!(
        f,
        "{} on {dev} in netns {netns} returned {}",
        xdp_program(program, action.prog_id),
        action.did(to_dev)
    )
}

/// [`Evidence::BpfProgramDrop`]'s sentence: where, and the programs
/// attached there.
pub(super) fn program_drop(
    f: &mut fmt::Formatter<'_>,
    hook: &str,
    dev: &str,
    netns: &str,
    programs: &[AttachedProgram],
) -> fmt::Result {
    write!(f, "dropped at {hook} of {dev} in netns {netns}")?;
    if programs.is_empty() {
        return write!(f, "; no BPF program of others is attached there now");
    }
    write!(f, "; attached there: {}", named(programs, ", "))
}

#[cfg(test)]
mod tests;
