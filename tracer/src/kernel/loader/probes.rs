//! The probe registry: which hooks this kernel offers, with which backend,
//! and what happened when attaching them.
//!
//! Each hook lists the backends that can serve it, best first: fentry/fexit
//! (a BPF trampoline: cheapest, sees arguments and the return value), then
//! kprobe/kretprobe, then a tracepoint (tp_btf) giving the same evidence.
//! The plan takes the first backend this kernel offers; the loader falls
//! back to the next one when loading or attaching fails, and every step is
//! reported (`tracer doctor`, the `probes` of the summary).

use serde::Serialize;

use crate::{kernel::btf::Btf, model::names::Kallsyms};

/// Program names of a function hook: the entry program and, when the
/// return value matters, the return program.
#[derive(Debug, Clone, Copy)]
pub struct FnProgs {
    pub entry: &'static str,
    pub ret: Option<&'static str>,
}

/// A kernel hook the tracer wants, and the programs that can serve it.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSpec {
    /// Name shown to the user.
    pub hook: &'static str,
    /// Kernel functions (fentry and kprobe backends); several for one hook
    /// when one program is attached to each (kprobe only).
    pub funcs: &'static [&'static str],
    /// Module that holds `funcs`, when not vmlinux.
    pub module: Option<&'static str>,
    pub fentry: Option<FnProgs>,
    pub kprobe: Option<FnProgs>,
    /// (tracepoint, program) for the tp_btf backend.
    pub tracepoint: Option<(&'static str, &'static str)>,
    /// Without it no packet can be followed at all.
    pub required: bool,
    /// Part of the core timeline: when missing, every verdict is marked
    /// incomplete. Function hooks that only add detail (netfilter chain
    /// names, rp_filter, IPVS decisions) mark the verdicts they feed.
    pub core: bool,
    /// What verdicts lose when it is missing.
    pub feeds: &'static str,
    /// When non-zero: the tracepoint is complete (and carries more than the
    /// function hooks) from this arity on, and is then tried first; below
    /// it, the function hooks go first and the tracepoint is the last resort.
    pub tp_complete_from_arity: usize,
    /// Classic tracepoints (category, name, program) attached with the
    /// tp_btf backend's program: the syscall tracepoints of `sock_addr`,
    /// whose arguments tp_btf cannot give (raw_syscalls passes pt_regs).
    pub syscalls: &'static [(&'static str, &'static str, &'static str)],
}

const fn tp(
    hook: &'static str,
    tracepoint: &'static str,
    program: &'static str,
    required: bool,
    feeds: &'static str,
) -> ProbeSpec {
    ProbeSpec {
        hook,
        funcs: &[],
        module: None,
        fentry: None,
        kprobe: None,
        tracepoint: Some((tracepoint, program)),
        required,
        core: true,
        feeds,
        tp_complete_from_arity: 0,
        syscalls: &[],
    }
}

#[expect(
    clippy::unnecessary_wraps,
    reason = "the registry's fields are Options; these build them"
)]
const fn ret(entry: &'static str, ret: &'static str) -> Option<FnProgs> {
    Some(FnProgs {
        entry,
        ret: Some(ret),
    })
}

#[expect(
    clippy::unnecessary_wraps,
    reason = "the registry's fields are Options; these build them"
)]
const fn entry(entry: &'static str) -> Option<FnProgs> {
    Some(FnProgs { entry, ret: None })
}

/// The socket calls whose destination a cgroup sock_addr program may
/// rewrite (tracer-ebpf sockaddr.rs).
const SOCK_CALLS: &[(&str, &str, &str)] = &[
    ("syscalls", "sys_enter_connect", "tracer_sys_connect"),
    ("syscalls", "sys_enter_sendto", "tracer_sys_sendto"),
    ("syscalls", "sys_enter_sendmsg", "tracer_sys_sendmsg"),
    ("syscalls", "sys_enter_sendmmsg", "tracer_sys_sendmmsg"),
];

pub const REGISTRY: &[ProbeSpec] = &[
    tp(
        "netif_receive",
        "netif_receive_skb",
        "tracer_netif_receive",
        true,
        "receive hops",
    ),
    // Before `xmit`: its claim must run first on the same tracepoint, so
    // that the packet it learns is followed there too (tracepoint probes
    // run in the order they were registered, tracepoint_add_func()).
    ProbeSpec {
        hook: "sock_addr",
        funcs: &[],
        module: None,
        fentry: None,
        kprobe: None,
        tracepoint: Some(("net_dev_start_xmit", "tracer_sock_claim")),
        required: false,
        core: false,
        feeds: "socket-level load balancing (a cgroup program's rewrite of connect/sendto/sendmsg)",
        tp_complete_from_arity: 0,
        syscalls: SOCK_CALLS,
    },
    tp(
        "xmit",
        "net_dev_start_xmit",
        "tracer_xmit",
        true,
        "transmit hops, forwarded verdicts",
    ),
    tp(
        "drop",
        "kfree_skb",
        "tracer_kfree_skb",
        true,
        "dropped verdicts",
    ),
    tp(
        "consume",
        "consume_skb",
        "tracer_consume_skb",
        false,
        "end of followed packets",
    ),
    tp(
        "sock_recv",
        "skb_copy_datagram_iovec",
        "tracer_sock_recv",
        false,
        "delivered verdicts (data read by a socket)",
    ),
    ProbeSpec {
        hook: "sock_queue",
        funcs: &["sock_def_readable"],
        module: None,
        fentry: entry("tracer_fe_sock_def_readable"),
        kprobe: entry("tracer_kp_sock_def_readable"),
        tracepoint: Some(("sk_data_ready", "tracer_sk_data_ready")),
        required: false,
        core: true,
        feeds: "delivered verdicts (queued to a socket; UDP)",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "icmp_send",
        funcs: &["__icmp_send"],
        module: None,
        fentry: entry("tracer_fe_icmp_send"),
        kprobe: entry("tracer_kp_icmp_send"),
        tracepoint: Some(("icmp_send", "tracer_icmp_send")),
        required: false,
        core: true,
        feeds: "ICMP errors sent by the kernel",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "tcp_reset",
        funcs: &["tcp_v4_send_reset"],
        module: None,
        fentry: entry("tracer_fe_tcp_v4_send_reset"),
        kprobe: entry("tracer_kp_tcp_v4_send_reset"),
        tracepoint: Some(("tcp_send_reset", "tracer_tcp_reset")),
        required: false,
        core: true,
        feeds: "TCP resets sent by the kernel",
        // tcp:tcp_send_reset gained `reason` (a third argument) in 6.10.
        // Measured in the kernel matrix: Debian's 6.1 (two arguments) does
        // not fire it for tcp_v4_send_reset(NULL, skb), the reset of a
        // refused connection (NO_SOCKET); 6.12 and 6.18 do. Below that
        // arity the function hooks go first.
        tp_complete_from_arity: 3,
        syscalls: &[],
    },
    tp(
        "fib_lookup",
        "fib_table_lookup",
        "tracer_fib_lookup",
        false,
        "routing decisions, misrouted verdicts",
    ),
    tp(
        "fib6_lookup",
        "fib6_table_lookup",
        "tracer_fib6_lookup",
        false,
        "IPv6 routing decisions",
    ),
    tp(
        "sock_state",
        "inet_sock_set_state",
        "tracer_sock_state",
        false,
        "delivered verdicts (TCP handshakes)",
    ),
    tp(
        "neigh_update",
        "neigh_update",
        "tracer_neigh_update",
        false,
        "neighbour state of the target",
    ),
    tp(
        "neigh_timer",
        "neigh_timer_handler",
        "tracer_neigh_timer",
        false,
        "neighbour resolution failures",
    ),
    tp(
        "neigh_dead",
        "neigh_event_send_dead",
        "tracer_neigh_dead",
        false,
        "packets sent to a failed neighbour",
    ),
    tp(
        "xdp_redirect",
        "xdp_redirect",
        "tracer_xdp_redirect",
        false,
        "XDP redirects of followed packets (the program and its target)",
    ),
    tp(
        "xdp_redirect_err",
        "xdp_redirect_err",
        "tracer_xdp_redirect_err",
        false,
        "failed XDP redirects (the program, its target and the error)",
    ),
    tp(
        "xdp_exception",
        "xdp_exception",
        "tracer_xdp_exception",
        false,
        "XDP_ABORTED and refused XDP_TX (the program)",
    ),
    // ---- function hooks: what tracepoints cannot see ----
    ProbeSpec {
        hook: "nf_verdict",
        funcs: &["nf_hook_slow"],
        module: None,
        fentry: ret("tracer_fe_nf_hook_slow", "tracer_fx_nf_hook_slow"),
        kprobe: ret("tracer_kp_nf_hook_slow", "tracer_krp_nf_hook_slow"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "netfilter verdicts per hook (family and hook of a DROP)",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "nft_chain",
        funcs: &["nft_do_chain"],
        module: Some("nf_tables"),
        fentry: None,
        kprobe: ret("tracer_kp_nft_do_chain", "tracer_krp_nft_do_chain"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "nf_tables table/chain of a netfilter verdict",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "ipt_table",
        funcs: &["ipt_do_table"],
        module: Some("ip_tables"),
        fentry: None,
        kprobe: ret("tracer_kp_ipt_do_table", "tracer_krp_ipt_do_table"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "iptables-legacy table of a netfilter verdict",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "rp_filter",
        funcs: &["fib_validate_source"],
        module: None,
        fentry: ret(
            "tracer_fe_fib_validate_source",
            "tracer_fx_fib_validate_source",
        ),
        kprobe: ret(
            "tracer_kp_fib_validate_source",
            "tracer_krp_fib_validate_source",
        ),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "reverse-path filter (rp_filter) and martian source failures",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "route_input",
        funcs: &["ip_route_input_noref"],
        module: None,
        fentry: ret("tracer_fe_ip_route_input", "tracer_fx_ip_route_input"),
        kprobe: ret("tracer_kp_ip_route_input", "tracer_krp_ip_route_input"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "input route failures (errno of ip_route_input_noref)",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "ip_forward",
        funcs: &["ip_forward"],
        module: None,
        fentry: entry("tracer_fe_ip_forward"),
        kprobe: entry("tracer_kp_ip_forward"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "forwarding by the IPv4 stack",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "local_deliver",
        funcs: &["ip_local_deliver"],
        module: None,
        fentry: entry("tracer_fe_ip_local_deliver"),
        kprobe: entry("tracer_kp_ip_local_deliver"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "local delivery by the IPv4 stack",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "ipvs_conn",
        funcs: &["ip_vs_conn_in_get_proto"],
        module: Some("ip_vs"),
        fentry: None,
        kprobe: ret("tracer_kp_ipvs_conn_in", "tracer_krp_ipvs_conn_in"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "IPVS connection reuse",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "ipvs_schedule",
        funcs: &["ip_vs_schedule"],
        module: Some("ip_vs"),
        fentry: None,
        kprobe: ret("tracer_kp_ipvs_schedule", "tracer_krp_ipvs_schedule"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "IPVS scheduling (virtual service without a usable real server)",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
    ProbeSpec {
        hook: "ipvs_xmit",
        funcs: &[
            "ip_vs_nat_xmit",
            "ip_vs_dr_xmit",
            "ip_vs_tunnel_xmit",
            "ip_vs_bypass_xmit",
        ],
        module: Some("ip_vs"),
        fentry: None,
        kprobe: entry("tracer_kp_ipvs_xmit"),
        tracepoint: None,
        required: false,
        core: false,
        feeds: "IPVS forwarding method (NAT, DR, tunnel, bypass)",
        tp_complete_from_arity: 0,
        syscalls: &[],
    },
];

pub fn spec(hook: &str) -> Option<&'static ProbeSpec> {
    REGISTRY.iter().find(|p| p.hook == hook)
}

/// A backend of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Backend {
    Fentry,
    Kprobe,
    TpBtf,
    None,
}

impl Backend {
    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Backend> {
        match s {
            "fentry" | "fexit" => Some(Backend::Fentry),
            "kprobe" | "kretprobe" => Some(Backend::Kprobe),
            "tp_btf" | "tracepoint" => Some(Backend::TpBtf),
            _ => None,
        }
    }
}

/// What this kernel offers, gathered once.
#[derive(Debug, Clone, Default)]
pub struct KernelCaps {
    /// The kprobe PMU (perf_kprobe) exists: kprobes can be created.
    pub kprobes: bool,
    /// Why fentry cannot be used at all (a trial load failed), if so.
    pub fentry_error: Option<String>,
    /// Loaded modules (/proc/modules).
    pub modules: Vec<String>,
    /// Traceable text symbols (/sys/kernel/tracing/available_filter_functions
    /// or /proc/kallsyms) of the registry's functions that exist.
    pub symbols: Vec<String>,
    /// The most arguments an fentry/fexit trampoline takes here, when known
    /// to be limited (see [`fentry_max_args`]).
    pub fentry_max_args: Option<usize>,
}

/// x86-64 trampolines took at most 6 arguments before Linux 6.6
/// (arch_prepare_bpf_trampoline() in arch/x86/net/bpf_jit_comp.c returned
/// -ENOTSUPP, errno 524, at attach; 6.6 raised the limit to 12, commit
/// 473e3150e30a "bpf, x86: allow function arguments up to 12 for
/// TRACING"). The program still loads, so only attach fails: seen on
/// Debian 6.1 for fib_validate_source(), which takes 8. `release` is the
/// kernel release ("6.1.0-56-amd64").
pub fn fentry_max_args(arch: &str, release: &str) -> Option<usize> {
    if arch != "x86_64" {
        return None;
    }
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    let (major, minor) = (it.next()??, it.next()??);
    ((major, minor) < (6, 6)).then_some(6)
}

impl KernelCaps {
    /// Read the kernel's facts (fentry is tried by the loader).
    pub fn probe() -> KernelCaps {
        Self::probe_with(&Kallsyms::read_proc())
    }

    /// [`KernelCaps::probe`] with /proc/kallsyms already read (it takes
    /// ~50 ms of kernel time to format: `follow` reads it once for this and
    /// for naming drop locations).
    pub fn probe_with(kallsyms: &Kallsyms) -> KernelCaps {
        let modules = std::fs::read_to_string("/proc/modules")
            .map(|s| {
                s.lines()
                    .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let wanted: Vec<&str> = REGISTRY
            .iter()
            .flat_map(|p| p.funcs.iter().copied())
            .collect();
        let symbols = registry_symbols(kallsyms.text_names(), &wanted);
        KernelCaps {
            // perf_kprobe PMU: perf_event_open() for a kprobe needs it
            // (kernel/trace/trace_event_perf.c, perf_kprobe_init()).
            kprobes: std::path::Path::new("/sys/bus/event_source/devices/kprobe/type").exists(),
            fentry_error: None,
            modules,
            symbols,
            fentry_max_args: fentry_max_args(
                std::env::consts::ARCH,
                std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim(),
            ),
        }
    }
}

/// The registry functions among the kernel's text symbols.
pub fn registry_symbols<'a>(
    text_symbols: impl Iterator<Item = &'a str>,
    wanted: &[&str],
) -> Vec<String> {
    let mut out: Vec<String> = text_symbols
        .filter(|name| wanted.contains(name))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What was decided and what happened for one hook.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "a status record: each flag is a fact reported as such"
)]
pub struct ProbeStatus {
    pub hook: String,
    pub backend: String,
    pub target: String,
    pub attached: bool,
    pub error: Option<String>,
    /// Backends passed over, each with why.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub fallbacks: Vec<String>,
    /// Loaded but deliberately not attached: tc gives the same events
    /// ([`TC_COVERED`]). Not a gap.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub left_to_tc: bool,
    /// Neither loaded nor attached because nothing on this node needs it
    /// (why): not a gap. `sock_addr` with no cgroup socket-address
    /// program loaded, the IPVS hooks with no IPVS virtual service
    /// ([`skip_unneeded`]).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub not_needed: Option<String>,
    #[serde(skip)]
    pub required: bool,
    #[serde(skip)]
    pub core: bool,
    #[serde(skip)]
    pub feeds: String,
    /// Candidates still to try, best first (after `backend`).
    #[serde(skip)]
    pub remaining: Vec<Backend>,
    /// A hook left out as not needed keeps its candidates here, best
    /// first, for when the node comes to need it ([`now_needed`]).
    #[serde(skip)]
    pub parked: Vec<Backend>,
}

impl ProbeStatus {
    /// Neither attached nor left to tc on purpose: a gap.
    pub fn missing(&self) -> bool {
        !self.attached && !self.left_to_tc && self.not_needed.is_none()
    }

    pub fn backend(&self) -> Backend {
        Backend::parse(&self.backend).unwrap_or(Backend::None)
    }

    /// Programs of the current backend.
    pub fn programs(&self) -> Vec<&'static str> {
        let Some(s) = spec(&self.hook) else {
            return vec![];
        };
        let fp = |p: Option<FnProgs>| {
            p.map(|p| std::iter::once(p.entry).chain(p.ret).collect())
                .unwrap_or_default()
        };
        match self.backend() {
            Backend::Fentry => fp(s.fentry),
            Backend::Kprobe => fp(s.kprobe),
            Backend::TpBtf => s
                .tracepoint
                .map(|(_, p)| p)
                .into_iter()
                .chain(s.syscalls.iter().map(|(_, _, p)| *p))
                .collect(),
            Backend::None => vec![],
        }
    }

    /// Record why the current backend failed and move to the next one.
    /// Returns false when none is left.
    pub fn fall_back(&mut self, why: String) -> bool {
        self.fallbacks.push(format!("{}: {why}", self.backend));
        if let Some(b) = self.remaining.first().copied() {
            self.remaining.remove(0);
            self.set(b);
            true
        } else {
            self.backend = Backend::None.name().into();
            self.error = Some(why);
            false
        }
    }

    fn set(&mut self, b: Backend) {
        let s = spec(&self.hook).expect("registry hook");
        self.backend = b.name().into();
        self.target = match b {
            Backend::TpBtf => {
                let tp = s.tracepoint.map(|(t, _)| t).unwrap_or_default();
                let calls: Vec<String> = s
                    .syscalls
                    .iter()
                    .map(|(c, n, _)| format!("{c}:{n}"))
                    .collect();
                std::iter::once(tp.to_string())
                    .chain(calls)
                    .collect::<Vec<_>>()
                    .join(",")
            }
            Backend::Fentry | Backend::Kprobe => s.funcs.join(","),
            Backend::None => String::new(),
        };
    }
}

/// "13 tp_btf, 6 kprobe, 4 fentry, 0 unavailable": how the hooks are served.
pub fn backend_summary(plan: &[ProbeStatus]) -> String {
    let n = |b: &str| plan.iter().filter(|p| p.attached && p.backend == b).count();
    let none = plan.iter().filter(|p| p.missing()).count();
    let mut s = format!(
        "{} fentry, {} kprobe, {} tp_btf, {} unavailable",
        n("fentry"),
        n("kprobe"),
        n("tp_btf"),
        none
    );
    s += &not_needed_said(plan);
    let left: Vec<&str> = plan
        .iter()
        .filter(|p| p.left_to_tc)
        .map(|p| p.hook.as_str())
        .collect();
    if !left.is_empty() {
        s += &format!(", {} left to tc ({})", left.len(), left.join(", "));
    }
    s
}

/// Device hooks whose every event tc gives too when tc sits on every
/// interface of every traced namespace (`--netns` without `--iface`): the
/// same skb, device and namespace, a few instructions apart, and tracepoint
/// events are reported for the traced namespaces only (netns_allowed() in
/// the programs). Attaching them would run two more programs on every
/// packet of the node, traced or not.
/// - net:netif_receive_skb fires at the top of __netif_receive_skb_core(),
///   the tc ingress hook (sch_handle_ingress()) further down the same
///   function; between them run only generic XDP and packet taps (a drop
///   there is still a kfree_skb). A bpf_redirect_peer() into a namespace
///   re-enters that function past the tracepoint, so only tc sees it.
/// - net:net_dev_start_xmit fires in xmit_one() after tc egress
///   (sch_handle_egress() in __dev_queue_xmit()) and the qdisc, whose drops
///   are kfree_skb too.
pub const TC_COVERED: &[&str] = &["netif_receive", "xmit"];

/// Leave the [`TC_COVERED`] hooks to tc: they stay loaded (so that they can
/// be attached later, see [`tc_failed`]) but are not attached. Not
/// netif_receive where XDP programs are loaded: generic XDP runs between
/// its tracepoint and tc ingress, and the xdp tracepoints' programs take
/// their packet from it (tracer-ebpf xdp.rs).
pub fn leave_to_tc(plan: &mut [ProbeStatus], needs: NodeNeeds) {
    for st in plan.iter_mut() {
        if TC_COVERED.contains(&st.hook.as_str())
            && st.backend() != Backend::None
            && !(needs.xdp_programs && st.hook == "netif_receive")
        {
            st.left_to_tc = true;
        }
    }
}

/// What this node has that some hooks need, read once at start
/// ([`skip_unneeded`]).
#[expect(
    clippy::struct_excessive_bools,
    reason = "what the node has, each read apart: each is a fact"
)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeNeeds {
    /// A cgroup socket-address program is loaded (connect4/6, sendmsg4/6,
    /// ...): something can rewrite a socket call.
    pub sock_addr: bool,
    /// Some namespace has an IPVS virtual service (kube-proxy's IPVS mode).
    pub ipvs: bool,
    /// An XDP program of others is loaded: the xdp tracepoints can tell
    /// what it did to a followed packet.
    pub xdp_programs: bool,
    /// A tunnel driver is loaded (node/link.rs): the node's own VXLAN
    /// ports are read for the skb programs (session.rs tunnel_ports).
    pub tunnel_drivers: bool,
}

impl NodeNeeds {
    /// What the loaded programs say alone (one walk of them, no
    /// namespace entered): what [`now_needed`] is asked with while
    /// tracing.
    pub fn programs() -> NodeNeeds {
        let progs = crate::node::bpf_progs::loaded_kinds();
        NodeNeeds {
            sock_addr: progs.sock_addr,
            xdp_programs: progs.xdp,
            ..NodeNeeds::default()
        }
    }

    /// Read from the node (bpf_progs, ipvs, link): one walk of the loaded
    /// programs.
    pub fn read() -> NodeNeeds {
        let progs = crate::node::bpf_progs::loaded_kinds();
        NodeNeeds {
            sock_addr: progs.sock_addr,
            ipvs: crate::node::ipvs::services_anywhere(),
            xdp_programs: progs.xdp,
            tunnel_drivers: crate::node::link::tunnel_drivers_loaded(),
        }
    }

    /// Whether what the node has calls for `hook`, one of those
    /// [`skip_unneeded`] can leave out.
    fn want(self, hook: &str) -> bool {
        match hook {
            "sock_addr" => self.sock_addr,
            h if XDP_HOOKS.contains(&h) => self.xdp_programs,
            h if IPVS_HOOKS.contains(&h) => self.ipvs,
            _ => false,
        }
    }
}

/// Leave out the hooks nothing on this node needs, their candidates
/// parked: a dataplane that loads its programs later gets them then
/// ([`now_needed`], asked while tracing); IPVS services that appear later
/// are not seen (`tracer doctor` and the start report say which hooks
/// were left out, and why).
/// - `sock_addr` when no cgroup socket-address program (connect4/6,
///   sendmsg4/6, ...) is loaded, so nothing can rewrite a socket call. Its
///   syscall tracepoints would put every syscall of every task on the
///   tracing slow path (TIF_SYSCALL_TRACEPOINT: ~70-130 ns more per
///   syscall measured here, BENCHMARKS.md) for nothing.
/// - the IPVS hooks when no namespace has a virtual service: ip_vs_in()
///   returns before any of their functions while `ipvs->enable` is 0 (it
///   is set by the first service added, ip_vs_ctl.c), so they could not
///   fire. A node that loads ip_vs without using it (or kube-proxy's
///   modules loaded on a node in iptables mode) pays nothing: their six
///   kprobes and two kretprobes are each an ftrace update over every
///   patchable function, on attach and again on detach.
pub fn skip_unneeded(plan: &mut [ProbeStatus], needs: NodeNeeds) {
    let mut skip = |hook: &str, why: &str| {
        for st in plan.iter_mut().filter(|s| s.hook == hook) {
            st.parked = std::iter::once(st.backend())
                .chain(st.remaining.drain(..))
                .filter(|b| *b != Backend::None)
                .collect();
            st.backend = Backend::None.name().into();
            st.not_needed = Some(why.into());
        }
    };
    if !needs.sock_addr {
        skip(
            "sock_addr",
            "no cgroup socket-address program is loaded on this node: nothing rewrites socket calls (attached once one is)",
        );
    }
    if !needs.ipvs {
        for hook in IPVS_HOOKS {
            skip(
                hook,
                "no IPVS virtual service in any namespace of this node: IPVS handles no packet",
            );
        }
    }
    if !needs.xdp_programs {
        for hook in XDP_HOOKS {
            skip(
                hook,
                "no XDP program is loaded on this node: no XDP action to see (attached once one is)",
            );
        }
    }
}

/// The hooks left out at start that `needs` (what the node has now)
/// calls for, their candidates back; and netif_receive, left to tc, once
/// XDP programs are loaded ([`leave_to_tc`]). Returns the hooks to load
/// and attach now.
pub fn now_needed(plan: &mut [ProbeStatus], needs: NodeNeeds) -> Vec<String> {
    let mut now = Vec::new();
    for st in plan.iter_mut() {
        if st.not_needed.is_some() && !st.parked.is_empty() && needs.want(&st.hook) {
            let mut parked = std::mem::take(&mut st.parked).into_iter();
            if let Some(first) = parked.next() {
                st.set(first);
            }
            st.remaining = parked.collect();
            st.not_needed = None;
            now.push(st.hook.clone());
        } else if needs.xdp_programs && st.left_to_tc && st.hook == "netif_receive" {
            st.left_to_tc = false;
            now.push(st.hook.clone());
        }
    }
    now
}

/// Whether a hook left out at start could still be wanted by what the
/// loaded programs say ([`NodeNeeds::programs`], [`now_needed`]): only
/// then is the node asked again.
pub fn any_parked(plan: &[ProbeStatus]) -> bool {
    // Everything the loaded programs can say.
    let programs = NodeNeeds {
        sock_addr: true,
        xdp_programs: true,
        ..NodeNeeds::default()
    };
    plan.iter()
        .any(|st| !st.parked.is_empty() && programs.want(&st.hook))
}

/// The hooks of XDP programs' actions ([`skip_unneeded`]).
pub const XDP_HOOKS: &[&str] = &["xdp_redirect", "xdp_redirect_err", "xdp_exception"];

/// The hooks of the IPVS module ([`skip_unneeded`]).
pub const IPVS_HOOKS: &[&str] = &["ipvs_conn", "ipvs_schedule", "ipvs_xmit"];

/// tc could not attach somewhere: the hooks left to it are needed after
/// all. Returns the hooks to attach now.
pub fn tc_failed(plan: &mut [ProbeStatus]) -> Vec<String> {
    plan.iter_mut()
        .filter(|st| st.left_to_tc)
        .map(|st| {
            st.left_to_tc = false;
            st.hook.clone()
        })
        .collect()
}

/// The same, for a plan not yet attached (doctor).
pub fn backend_summary_planned(plan: &[ProbeStatus]) -> String {
    let n = |b: &str| plan.iter().filter(|p| p.backend == b).count();
    let unneeded = plan.iter().filter(|p| p.not_needed.is_some()).count();
    format!(
        "{} fentry, {} kprobe, {} tp_btf, {} unavailable{}",
        n("fentry"),
        n("kprobe"),
        n("tp_btf"),
        n("none") - unneeded,
        not_needed_said(plan)
    )
}

/// ", N not needed" for the hooks [`skip_unneeded`] left out, or nothing.
fn not_needed_said(plan: &[ProbeStatus]) -> String {
    match plan.iter().filter(|p| p.not_needed.is_some()).count() {
        0 => String::new(),
        n => format!(", {n} not needed"),
    }
}

/// Backends allowed for `hook` by TRACER_BACKENDS (default: all): a comma
/// list of backends (for every hook) and/or `hook:backend` entries (for that
/// hook only, overriding). Forces a fallback on purpose, to check that every
/// backend gives the same verdict.
fn allowed_backends(hook: &str) -> Vec<Backend> {
    let all = vec![Backend::Fentry, Backend::Kprobe, Backend::TpBtf];
    let Ok(v) = std::env::var("TRACER_BACKENDS") else {
        return all;
    };
    parse_allowed(&v, hook).unwrap_or(all)
}

fn parse_allowed(spec: &str, hook: &str) -> Option<Vec<Backend>> {
    let mut global = Vec::new();
    let mut mine = Vec::new();
    for e in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match e.split_once(':') {
            Some((h, b)) if h == hook => mine.extend(Backend::parse(b)),
            Some(_) => {}
            None => global.extend(Backend::parse(e)),
        }
    }
    if !mine.is_empty() {
        Some(mine)
    } else if !global.is_empty() {
        Some(global)
    } else {
        None
    }
}

/// Why `b` cannot serve `s` on this kernel, or None when it can (as far
/// as can be known before loading).
fn unavailable(s: &ProbeSpec, b: Backend, btf: &Btf, caps: &KernelCaps) -> Option<String> {
    let module_gap = || {
        let m = s.module?;
        (!caps.modules.iter().any(|x| x == m)).then(|| format!("module {m} not loaded"))
    };
    let missing_syms = || {
        let missing: Vec<&str> = s
            .funcs
            .iter()
            .copied()
            .filter(|f| !caps.symbols.iter().any(|x| x == f))
            .collect();
        // A hook with several functions (IPVS xmit) works with any of them.
        (missing.len() == s.funcs.len())
            .then(|| format!("no symbol {} in kallsyms", missing.join(",")))
    };
    match b {
        Backend::Fentry => {
            s.fentry?;
            if let Some(e) = &caps.fentry_error {
                return Some(e.clone());
            }
            if let Some(g) = module_gap() {
                return Some(g);
            }
            let f = s.funcs.first()?;
            match btf.func_in_vmlinux(f) {
                Some(true) => match (btf.func_arg_count(f), caps.fentry_max_args) {
                    (Some(n), Some(max)) if n > max => Some(format!(
                        "{f} takes {n} arguments; this kernel's fentry trampoline takes at most {max} (x86-64 before Linux 6.6)"
                    )),
                    _ => None,
                },
                Some(false) => Some(format!(
                    "{f} is a module function: aya 0.14 attaches fentry to vmlinux BTF only"
                )),
                None => Some(format!("no BTF function {f} (absent or inlined)")),
            }
        }
        Backend::Kprobe => {
            s.kprobe?;
            if !caps.kprobes {
                return Some("no kprobe PMU (/sys/bus/event_source/devices/kprobe)".into());
            }
            module_gap().or_else(missing_syms)
        }
        Backend::TpBtf => {
            let (t, _) = s.tracepoint?;
            btf.tracepoint_arity(t)
                .is_none()
                .then(|| format!("kernel has no tracepoint {t} (btf_trace_{t} not in BTF)"))
        }
        Backend::None => Some("none".into()),
    }
}

/// The BTF names [`plan`] looks up: every registry function and each
/// tracepoint's `btf_trace_` typedef (for [`crate::kernel::btf::Btf::prefetch`]).
pub fn btf_names() -> Vec<String> {
    REGISTRY
        .iter()
        .flat_map(|s| {
            s.funcs
                .iter()
                .map(|f| (*f).to_string())
                .chain(s.tracepoint.map(|(t, _)| format!("btf_trace_{t}")))
        })
        .collect()
}

/// The plan for this kernel, before loading: per hook, the first backend
/// that this kernel offers, with the reasons the better ones were passed
/// over, and the rest kept for fallback.
pub fn plan(btf: &Btf, caps: &KernelCaps) -> Vec<ProbeStatus> {
    // TRACER_SKIP_HOOKS=a,b makes hooks unavailable on purpose (to see what
    // verdicts lose without them, and to test that path).
    let skip: Vec<String> = std::env::var("TRACER_SKIP_HOOKS")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    REGISTRY
        .iter()
        .map(|s| {
            let allowed = allowed_backends(s.hook);
            let mut st = ProbeStatus {
                hook: s.hook.into(),
                backend: Backend::None.name().into(),
                target: String::new(),
                attached: false,
                error: None,
                fallbacks: vec![],
                left_to_tc: false,
                not_needed: None,
                required: s.required,
                core: s.core,
                feeds: s.feeds.into(),
                remaining: vec![],
                parked: vec![],
            };
            if skip.iter().any(|x| x == s.hook) {
                st.error = Some("disabled by TRACER_SKIP_HOOKS".into());
                return st;
            }
            let mut usable = Vec::new();
            let tp_first = s.tp_complete_from_arity > 0
                && s.tracepoint
                    .and_then(|(t, _)| btf.tracepoint_arity(t))
                    .is_some_and(|a| a >= s.tp_complete_from_arity);
            let order = if tp_first {
                [Backend::TpBtf, Backend::Fentry, Backend::Kprobe]
            } else {
                [Backend::Fentry, Backend::Kprobe, Backend::TpBtf]
            };
            for b in order {
                let offered = match b {
                    Backend::Fentry => s.fentry.is_some(),
                    Backend::Kprobe => s.kprobe.is_some(),
                    _ => s.tracepoint.is_some(),
                };
                if !offered {
                    continue;
                }
                if !allowed.contains(&b) {
                    st.fallbacks
                        .push(format!("{}: not in TRACER_BACKENDS", b.name()));
                    continue;
                }
                match unavailable(s, b, btf, caps) {
                    Some(why) => st.fallbacks.push(format!("{}: {why}", b.name())),
                    None => usable.push(b),
                }
            }
            if usable.is_empty() {
                st.error = Some(
                    st.fallbacks
                        .last()
                        .cloned()
                        .unwrap_or_else(|| "no backend".into()),
                );
            } else {
                st.set(usable.remove(0));
                st.remaining = usable;
            }
            st
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> KernelCaps {
        KernelCaps {
            kprobes: true,
            fentry_error: None,
            modules: vec!["ip_vs".into()],
            symbols: vec![
                "__icmp_send".into(),
                "ip_vs_schedule".into(),
                "ip_vs_nat_xmit".into(),
            ],
            fentry_max_args: None,
        }
    }

    #[test]
    fn plan_marks_missing_tracepoints() {
        let btf = Btf::parse(&crate::kernel::btf::fixture::sample_btf()).unwrap();
        let p = plan(&btf, &KernelCaps::default());
        let drop = p.iter().find(|s| s.hook == "drop").unwrap();
        assert_eq!(drop.backend, "tp_btf");
        assert!(drop.error.is_none());
        let fib = p.iter().find(|s| s.hook == "fib_lookup").unwrap();
        assert_eq!(fib.backend, "none");
        assert!(fib.error.as_ref().unwrap().contains("fib_table_lookup"));
    }

    /// With no IPVS virtual service anywhere, the IPVS hooks are left out
    /// (not a gap, counted apart from the unavailable ones); with one,
    /// they keep their plan.
    #[test]
    fn ipvs_hooks_only_where_a_virtual_service_is() {
        let btf = Btf::parse(&crate::kernel::btf::fixture::sample_btf()).unwrap();
        let planned = plan(&btf, &KernelCaps::default());
        let needs = |ipvs| NodeNeeds {
            sock_addr: true,
            ipvs,
            xdp_programs: true,
            tunnel_drivers: false,
        };
        let mut with = planned.clone();
        skip_unneeded(&mut with, needs(true));
        assert!(with.iter().all(|s| s.not_needed.is_none()));
        let mut without = planned;
        skip_unneeded(&mut without, needs(false));
        for hook in IPVS_HOOKS {
            let st = without.iter().find(|s| s.hook == *hook).unwrap();
            assert!(st.programs().is_empty() && !st.missing(), "{st:?}");
            assert!(st.not_needed.as_deref().unwrap().contains("IPVS"), "{st:?}");
        }
        let (a, b) = (
            backend_summary_planned(&with),
            backend_summary_planned(&without),
        );
        assert!(
            !a.contains("not needed") && b.ends_with(", 3 not needed"),
            "{a} / {b}"
        );
    }

    /// Hooks left out at start come back with their plan when the node
    /// loads what needs them: XDP programs bring the xdp hooks and take
    /// netif_receive back from tc (generic XDP runs between the two); a
    /// cgroup socket-address program brings `sock_addr`. Nothing comes
    /// back for what is still absent, and IPVS is not asked for while
    /// tracing.
    #[test]
    fn parked_hooks_come_back_when_the_node_needs_them() {
        // The xdp tracepoints are not in the sample BTF: this kernel's.
        let Ok(btf) = Btf::from_sys() else {
            eprintln!("!!!!! SKIPPED: no /sys/kernel/btf/vmlinux here !!!!!");
            return;
        };
        let planned = plan(&btf, &caps());
        assert!(
            planned
                .iter()
                .filter(|s| XDP_HOOKS.contains(&s.hook.as_str()))
                .all(|s| s.backend() != Backend::None),
            "{planned:?}"
        );
        let mut p = planned.clone();
        skip_unneeded(&mut p, NodeNeeds::default());
        leave_to_tc(&mut p, NodeNeeds::default());
        assert!(any_parked(&p));
        assert!(now_needed(&mut p, NodeNeeds::default()).is_empty());
        let xdp = NodeNeeds {
            xdp_programs: true,
            ..NodeNeeds::default()
        };
        let mut back = now_needed(&mut p, xdp);
        back.sort();
        let mut want: Vec<&str> = XDP_HOOKS.to_vec();
        want.push("netif_receive");
        want.sort_unstable();
        assert_eq!(back, want);
        for h in XDP_HOOKS {
            let (was, now) = (
                planned.iter().find(|s| s.hook == *h).unwrap(),
                p.iter().find(|s| s.hook == *h).unwrap(),
            );
            assert_eq!(
                (&now.backend, &now.remaining),
                (&was.backend, &was.remaining)
            );
            assert!(now.not_needed.is_none() && now.parked.is_empty() && now.missing());
        }
        let rx = p.iter().find(|s| s.hook == "netif_receive").unwrap();
        assert!(!rx.left_to_tc);
        // Asked again, nothing more; sock_addr is still parked.
        assert!(now_needed(&mut p, xdp).is_empty());
        assert!(any_parked(&p));
        let sock = NodeNeeds {
            sock_addr: true,
            ..NodeNeeds::default()
        };
        assert_eq!(now_needed(&mut p, sock), ["sock_addr"]);
        // Only IPVS is left parked: not asked for while tracing.
        assert!(!any_parked(&p));
        assert!(
            p.iter()
                .any(|s| IPVS_HOOKS.contains(&s.hook.as_str()) && !s.parked.is_empty())
        );
        // With XDP programs at start, netif_receive is not left to tc.
        let mut q = planned.clone();
        leave_to_tc(&mut q, xdp);
        assert!(q.iter().all(|s| s.hook != "netif_receive" || !s.left_to_tc));
        assert!(q.iter().any(|s| s.hook == "xmit" && s.left_to_tc));
    }

    /// With no cgroup socket-address program loaded, `sock_addr` is left
    /// out on purpose (no program of it loaded, not a gap); with one it
    /// keeps its plan, the syscall programs riding with its tp_btf one.
    #[test]
    fn socket_hooks_only_where_a_program_can_rewrite() {
        let btf = Btf::parse(&crate::kernel::btf::fixture::sample_btf()).unwrap();
        let planned = plan(&btf, &KernelCaps::default());
        let mut p = planned.clone();
        skip_unneeded(
            &mut p,
            NodeNeeds {
                sock_addr: true,
                ipvs: true,
                xdp_programs: false,
                tunnel_drivers: false,
            },
        );
        let st = p.iter().find(|s| s.hook == "sock_addr").unwrap();
        assert_eq!(
            st.backend,
            planned
                .iter()
                .find(|s| s.hook == "sock_addr")
                .unwrap()
                .backend
        );
        assert!(st.not_needed.is_none());
        let mut p = planned;
        skip_unneeded(
            &mut p,
            NodeNeeds {
                sock_addr: false,
                ipvs: true,
                xdp_programs: false,
                tunnel_drivers: false,
            },
        );
        let st = p.iter().find(|s| s.hook == "sock_addr").unwrap();
        assert!(st.programs().is_empty() && !st.missing(), "{st:?}");
        assert!(
            st.not_needed
                .as_deref()
                .unwrap()
                .contains("no cgroup socket-address program")
        );
        let tp = spec("sock_addr").unwrap();
        let mut with = ProbeStatus {
            backend: "tp_btf".into(),
            not_needed: None,
            ..st.clone()
        };
        with.set(Backend::TpBtf);
        assert_eq!(
            with.programs(),
            [
                tp.tracepoint.unwrap().1,
                "tracer_sys_connect",
                "tracer_sys_sendto",
                "tracer_sys_sendmsg",
                "tracer_sys_sendmmsg"
            ]
        );
    }

    #[test]
    fn device_hooks_left_to_tc_are_not_gaps_until_tc_fails() {
        let btf = Btf::parse(&crate::kernel::btf::fixture::sample_btf()).unwrap();
        let mut p = plan(&btf, &KernelCaps::default());
        leave_to_tc(&mut p, NodeNeeds::default());
        let left: Vec<&str> = p
            .iter()
            .filter(|s| s.left_to_tc)
            .map(|s| s.hook.as_str())
            .collect();
        // Only hooks this kernel offers; the fixture has both tracepoints.
        assert_eq!(left, ["netif_receive", "xmit"]);
        assert!(p.iter().filter(|s| s.left_to_tc).all(|s| !s.missing()));
        let sum = backend_summary(&p);
        assert!(
            sum.ends_with(", 2 left to tc (netif_receive, xmit)"),
            "{sum}"
        );
        // A hook with no backend stays a gap, never "left to tc".
        let mut q = plan(&btf, &KernelCaps::default());
        for s in q.iter_mut().filter(|s| s.hook == "xmit") {
            s.backend = Backend::None.name().into();
        }
        leave_to_tc(&mut q, NodeNeeds::default());
        assert!(q.iter().any(|s| s.hook == "xmit" && s.missing()));
        // tc failed somewhere: both come back, once.
        assert_eq!(tc_failed(&mut p), ["netif_receive", "xmit"]);
        assert!(tc_failed(&mut p).is_empty());
        assert!(p.iter().all(|s| !s.left_to_tc));
        assert!(!backend_summary(&p).contains("left to tc"));
    }

    #[test]
    fn falls_back_fentry_kprobe_tracepoint_with_reasons() {
        let btf = Btf::parse(&crate::kernel::btf::fixture::sample_btf()).unwrap();
        // No kprobes, fentry refused: function hooks unavailable, with why.
        let mut c = KernelCaps {
            kprobes: false,
            fentry_error: Some("fentry load returned EPERM".into()),
            ..caps()
        };
        let p = plan(&btf, &c);
        let ipvs = p.iter().find(|s| s.hook == "ipvs_schedule").unwrap();
        assert_eq!(ipvs.backend, "none");
        assert!(
            ipvs.error.as_ref().unwrap().contains("kprobe PMU"),
            "{ipvs:?}"
        );
        let nf = p.iter().find(|s| s.hook == "nf_verdict").unwrap();
        assert_eq!(nf.fallbacks.len(), 2, "{nf:?}");
        assert!(nf.fallbacks[0].starts_with("fentry: fentry load returned EPERM"));
        // With kprobes: module functions go to kprobes, a missing module is
        // a reported gap.
        c.kprobes = true;
        let p = plan(&btf, &c);
        let ipvs = p.iter().find(|s| s.hook == "ipvs_schedule").unwrap();
        assert_eq!(
            (ipvs.backend.as_str(), ipvs.target.as_str()),
            ("kprobe", "ip_vs_schedule")
        );
        let nft = p.iter().find(|s| s.hook == "nft_chain").unwrap();
        assert_eq!(nft.backend, "none");
        assert!(
            nft.error
                .as_ref()
                .unwrap()
                .contains("module nf_tables not loaded")
        );
        // A runtime failure moves to the next backend, then to none.
        let mut icmp = p.iter().find(|s| s.hook == "icmp_send").unwrap().clone();
        assert_eq!(icmp.backend, "kprobe");
        assert!(!icmp.fall_back("attach: EINVAL".into()));
        assert_eq!(icmp.backend, "none");
        assert_eq!(icmp.fallbacks.last().unwrap(), "kprobe: attach: EINVAL");
    }

    #[test]
    fn fentry_argument_limit_by_kernel_release() {
        assert_eq!(fentry_max_args("x86_64", "6.1.0-56-amd64"), Some(6));
        assert_eq!(fentry_max_args("x86_64", "5.15.0-91-generic"), Some(6));
        assert_eq!(fentry_max_args("x86_64", "6.6.0"), None);
        assert_eq!(fentry_max_args("x86_64", "6.12.117+deb12-amd64"), None);
        assert_eq!(fentry_max_args("x86_64", "6.18.44"), None);
        assert_eq!(fentry_max_args("aarch64", "6.1.0"), None);
        assert_eq!(fentry_max_args("x86_64", "garbage"), None);
    }

    #[test]
    fn fentry_passed_over_for_a_function_with_too_many_arguments() {
        // sample_btf(): fib_validate_source takes 8 arguments, ip_forward 1.
        let btf = Btf::parse(&crate::kernel::btf::fixture::sample_btf()).unwrap();
        assert_eq!(btf.func_arg_count("fib_validate_source"), Some(8));
        assert_eq!(btf.func_arg_count("ip_forward"), Some(1));
        assert_eq!(btf.func_arg_count("nope"), None);
        let mut c = KernelCaps {
            symbols: vec!["fib_validate_source".into(), "ip_forward".into()],
            fentry_max_args: Some(6),
            ..caps()
        };
        let p = plan(&btf, &c);
        let rp = p.iter().find(|s| s.hook == "rp_filter").unwrap();
        assert_eq!(rp.backend, "kprobe", "{rp:?}");
        assert!(
            rp.fallbacks[0].contains("takes 8 arguments") && rp.fallbacks[0].contains("at most 6"),
            "{rp:?}"
        );
        let fwd = p.iter().find(|s| s.hook == "ip_forward").unwrap();
        assert_eq!(fwd.backend, "fentry", "{fwd:?}");
        // Linux 6.6 and later: no limit below 12, fentry kept.
        c.fentry_max_args = None;
        let p = plan(&btf, &c);
        let rp = p.iter().find(|s| s.hook == "rp_filter").unwrap();
        assert_eq!(rp.backend, "fentry", "{rp:?}");
    }

    #[test]
    fn backends_can_be_restricted_per_hook() {
        use Backend::{Fentry, Kprobe, TpBtf};
        assert_eq!(parse_allowed("tp_btf", "xmit"), Some(vec![TpBtf]));
        assert_eq!(
            parse_allowed("icmp_send:kprobe", "icmp_send"),
            Some(vec![Kprobe])
        );
        assert_eq!(parse_allowed("icmp_send:kprobe", "xmit"), None);
        assert_eq!(
            parse_allowed("tp_btf,sock_queue:fentry", "sock_queue"),
            Some(vec![Fentry])
        );
        assert_eq!(parse_allowed("bogus", "xmit"), None);
    }

    #[test]
    fn kallsyms_filter_keeps_text_symbols_of_the_registry() {
        let ks = "ffffffff81000000 T __icmp_send\nffffffffc0000000 t ip_vs_schedule\t[ip_vs]\nffffffff82000000 D ip_forward\nffffffff81000100 T other\n";
        assert_eq!(
            registry_symbols(
                Kallsyms::parse(ks).text_names(),
                &["__icmp_send", "ip_vs_schedule", "ip_forward"]
            ),
            vec!["__icmp_send".to_string(), "ip_vs_schedule".to_string()]
        );
    }

    #[test]
    fn registry_names_are_unique() {
        let mut names: Vec<&str> = REGISTRY
            .iter()
            .flat_map(|p| {
                let fp = |f: Option<FnProgs>| f.map_or([None, None], |f| [Some(f.entry), f.ret]);
                fp(p.fentry)
                    .into_iter()
                    .chain(fp(p.kprobe))
                    .chain([p.tracepoint.map(|t| t.1)])
                    .flatten()
            })
            .collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        let mut hooks: Vec<_> = REGISTRY.iter().map(|p| p.hook).collect();
        hooks.sort_unstable();
        hooks.dedup();
        assert_eq!(hooks.len(), REGISTRY.len());
    }
}
