//! A hop: one event of a flow's timeline, with names resolved.

use std::{net::IpAddr, sync::Arc};

use serde::{Deserialize, Serialize};
use tracer_common::Hook;

use crate::model::event::{Tuple, tcp_flags};
use crate::model::{drop_reason::DropReason, intern::Name};
/// Neighbour states are read by node facts too (`node/nud.rs`).
pub use crate::node::nud::{Nud, nud_state};

/// Inverse of [`hook_name`] (neighbour events map to neigh_update).
pub fn hook_from_name(n: &str) -> Option<Hook> {
    Hook::ALL.iter().copied().find(|h| hook_name(*h) == n)
}

/// The hook's name in output (derived in tracer-common: snake case, the
/// neighbour events all `neigh`).
pub fn hook_name(h: Hook) -> &'static str {
    h.into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Request,
    Reply,
}

/// Routing table ids with names (include/uapi/linux/rtnetlink.h).
pub use crate::node::route::table_name;

/// RT_SCOPE_NOWHERE: fib_create_info() gives the nexthop of every
/// host-scope (local) route this scope, so with err 0 it marks a LOCAL
/// route. The table id does not: without policy rules the local table is
/// merged into main (fib_unmerge()), and inet_addr_type() looks up table 255
/// for any address.
pub const SCOPE_NOWHERE: u8 = 255;

/// -errno names used by fib lookups.
pub fn errno_name(e: i32) -> String {
    match -e {
        0 => "ok".into(),
        11 => "EAGAIN (no match in this table)".into(),
        101 => "ENETUNREACH".into(),
        113 => "EHOSTUNREACH".into(),
        13 => "EACCES (prohibit)".into(),
        22 => "EINVAL (blackhole)".into(),
        n => format!("errno {n}"),
    }
}

/// A TCP state as the kernel numbers it (include/net/tcp_states.h);
/// named as the kernel names it (`SYN_RECV`) in output.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::FromRepr,
    strum::Display,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[repr(u8)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum TcpState {
    /// Not a state the kernel defines.
    Unknown = 0,
    Established = 1,
    SynSent = 2,
    SynRecv = 3,
    #[serde(rename = "FIN_WAIT1")]
    #[strum(serialize = "FIN_WAIT1")]
    FinWait1 = 4,
    #[serde(rename = "FIN_WAIT2")]
    #[strum(serialize = "FIN_WAIT2")]
    FinWait2 = 5,
    TimeWait = 6,
    Close = 7,
    CloseWait = 8,
    LastAck = 9,
    Listen = 10,
    Closing = 11,
    NewSynRecv = 12,
}

impl TcpState {
    /// The state numbered `s` (UNKNOWN for a number the kernel does not
    /// define).
    pub fn of(s: u32) -> TcpState {
        u8::try_from(s)
            .ok()
            .and_then(TcpState::from_repr)
            .unwrap_or(TcpState::Unknown)
    }
}

/// Which function hook saw a kernel function: an fentry program or a
/// kprobe (tracer_common::backend).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::FromRepr,
    strum::Display,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[repr(u8)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum FuncBackend {
    Fentry,
    Kprobe,
    /// A number this tracer does not know.
    Unknown,
}

impl FuncBackend {
    /// From tracer_common::backend's number.
    pub fn of(b: u8) -> FuncBackend {
        match b {
            tracer_common::backend::FENTRY => FuncBackend::Fentry,
            tracer_common::backend::KPROBE => FuncBackend::Kprobe,
            _ => FuncBackend::Unknown,
        }
    }
}

/// What a neighbour event was: which of the neighbour hooks saw it
/// (neigh_create, neigh_update, neigh_timer_handler,
/// neigh_event_send_dead).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::FromRepr,
    strum::Display,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[repr(u8)]
pub enum NeighEvent {
    #[serde(rename = "created")]
    #[strum(serialize = "created")]
    Created,
    #[serde(rename = "update")]
    #[strum(serialize = "update")]
    Update,
    #[serde(rename = "timer")]
    #[strum(serialize = "timer")]
    Timer,
    #[serde(rename = "send to failed entry")]
    #[strum(serialize = "send to failed entry")]
    SendToFailedEntry,
}

impl NeighEvent {
    /// The event a neighbour hook reports.
    pub fn of(hook: Option<Hook>) -> NeighEvent {
        match hook {
            Some(Hook::NeighUpdate) => NeighEvent::Update,
            Some(Hook::NeighTimer) => NeighEvent::Timer,
            Some(Hook::NeighDead) => NeighEvent::SendToFailedEntry,
            _ => NeighEvent::Created,
        }
    }
}

pub fn icmp_desc(family_v6: bool, ty: u8, code: u8) -> String {
    if family_v6 {
        return format!("icmpv6 type {ty} code {code}");
    }
    let t = match ty {
        3 => {
            let c = match code {
                0 => "net-unreachable",
                1 => "host-unreachable",
                2 => "protocol-unreachable",
                3 => "port-unreachable",
                4 => "frag-needed",
                // As iptables' --reject-with and nft's icmp codes name
                // them (include/uapi/linux/icmp.h ICMP_NET_ANO,
                // ICMP_HOST_ANO, ICMP_PKT_FILTERED).
                9 => "net-prohibited",
                10 => "host-prohibited",
                13 => "admin-prohibited",
                _ => "unreachable",
            };
            return format!("dest-unreachable {c}");
        }
        5 => {
            let c = match code {
                0 => "net",
                1 => "host",
                _ => "tos",
            };
            return format!("redirect {c}");
        }
        11 => "time-exceeded",
        12 => "parameter-problem",
        0 => "echo-reply",
        8 => "echo-request",
        _ => "other",
    };
    format!("{t} (type {ty} code {code})")
}

/// Hook-specific facts of a hop. Kept small (the common `Packet` variant is
/// 12 bytes): every hop of every flow pays the size of the largest variant,
/// so the rare large ones are boxed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HopData {
    Packet {
        tcp_flags: u8,
        len: u32,
        mark: u32,
    },
    Drop(Box<DropData>),
    Consume {
        location: Name,
    },
    IcmpSend {
        icmp_type: u8,
        icmp_code: u8,
        desc: Name,
    },
    TcpReset {
        reason: Option<Name>,
    },
    Fib(Box<FibData>),
    Sock(Box<SockData>),
    SockRecv,
    SockQueue,
    /// A kernel function seen by a function hook (fentry or kprobe).
    Func(Box<FuncData>),
    Neigh(Box<NeighData>),
    /// The socket call that asked for the target, whose destination a
    /// cgroup sock_addr program rewrote before any packet existed; the
    /// hop's tuple is the packet as it left.
    SockAddr(Box<SockAddrData>),
    /// An XDP program's action on the packet (the xdp tracepoints:
    /// redirects, failed redirects, XDP_ABORTED, a refused XDP_TX); the
    /// hop's device is the one the program ran on.
    Xdp(Box<XdpData>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DropData {
    pub reason: DropReason,
    pub reason_code: u32,
    pub location: Name,
    /// Where `reason` comes from: the kernel (absent from JSON), or, on a
    /// kernel that gives none (before 5.17), the drop location.
    #[serde(default, skip_serializing_if = "ReasonFrom::is_kernel")]
    pub reason_from: ReasonFrom,
}

/// Where a drop's reason comes from.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ReasonFrom {
    /// skb:kfree_skb's own `reason`.
    #[default]
    Kernel,
    /// Inferred from the drop location (model/inferred.rs): this kernel's
    /// skb:kfree_skb has no reason.
    Location,
    /// This kernel gives no reason and the location does not tell one:
    /// `reason` is `NOT_SPECIFIED`.
    Unknown,
    /// This kernel gives reasons, but the site gave NOT_SPECIFIED where
    /// its reason is known (model/inferred.rs `unreasoned`: IPv6's
    /// neighbour failure).
    Site,
}

impl ReasonFrom {
    pub fn is_kernel(&self) -> bool {
        *self == ReasonFrom::Kernel
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SockData {
    pub old_state: TcpState,
    pub new_state: TcpState,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FibData {
    pub table: u32,
    pub err: i32,
    pub oif: u32,
    pub iif: u32,
    pub nh_dev: Name,
    pub nh_ifindex: u32,
    pub gw: Option<IpAddr>,
    pub nh_scope: u8,
    /// RTN_* route type when the kernel reports it (IPv6), else 0.
    #[serde(default)]
    pub rtype: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FuncData {
    /// Kernel function name.
    pub func: Name,
    /// fentry or kprobe.
    pub backend: FuncBackend,
    /// Return value, when the hook follows the return.
    pub ret: Option<i64>,
    /// nf_hook_slow: netfilter family and hook ("ipv4 INPUT").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nf_hook: Option<Name>,
    /// nft_do_chain / ipt_do_table: table name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<Name>,
    /// nft_do_chain: chain name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<Name>,
    /// One line for people.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NeighData {
    pub addr: IpAddr,
    /// The state before the event.
    pub state: Nud,
    /// The state after it (neigh_update only).
    pub new_state: Option<Nud>,
    pub lladdr: Option<String>,
    pub err: i32,
    pub event: NeighEvent,
}

/// enum xdp_action (include/uapi/linux/bpf.h), as an XDP program returns
/// it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::FromRepr,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
#[repr(u8)]
pub enum XdpAction {
    XdpAborted = 0,
    XdpDrop = 1,
    XdpPass = 2,
    XdpTx = 3,
    XdpRedirect = 4,
    /// A number the kernel does not know either (bpf_warn_invalid_xdp_action():
    /// the packet is dropped).
    Invalid = 255,
}

impl XdpAction {
    pub fn of(code: u32) -> XdpAction {
        u8::try_from(code)
            .ok()
            .and_then(XdpAction::from_repr)
            .unwrap_or(XdpAction::Invalid)
    }
}

impl std::fmt::Display for XdpAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.into())
    }
}

/// What an XDP program did to the packet, as the xdp tracepoints tell it
/// (tracer_common::func::XDP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XdpData {
    pub action: XdpAction,
    /// The program's id (bpftool prog show id N); its name is a node fact
    /// (the device's XDP program), resolved when judged.
    pub prog_id: u32,
    /// A redirect's target device (its ifindex in the hop's namespace), 0
    /// when not a device or not known.
    #[serde(default, skip_serializing_if = "zero::u32")]
    pub to_ifindex: u32,
    /// A redirect's error (negative errno: -ENETDOWN the target is down,
    /// -EMSGSIZE the packet is larger than its MTU, -EINVAL no such
    /// device, ...), 0 when it succeeded.
    #[serde(default, skip_serializing_if = "zero::i32")]
    pub err: i32,
    /// A redirect through a map (bpf_redirect_map()): its id and the key,
    /// 0 when none. A device map's entry names the target
    /// (node/devmap.rs), resolved when judged.
    #[serde(default, skip_serializing_if = "zero::u32")]
    pub map_id: u32,
    #[serde(default, skip_serializing_if = "zero::u32")]
    pub map_key: u32,
}

/// serde's `skip_serializing_if` for zero numbers (it passes a reference).
#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
mod zero {
    pub(super) fn u32(v: &u32) -> bool {
        *v == 0
    }

    pub(super) fn i32(v: &i32) -> bool {
        *v == 0
    }
}

impl XdpData {
    /// A failed redirect's error, with what it means there
    /// (xdp_do_generic_redirect(), xdp_ok_fwd_dev(), dev_map_generic_redirect()).
    pub fn error(&self) -> String {
        match -self.err {
            22 => "EINVAL (no device with that ifindex in this namespace)".into(),
            100 => "ENETDOWN (the target device is down)".into(),
            90 => "EMSGSIZE (the packet is larger than the target's MTU)".into(),
            95 => "EOPNOTSUPP (the target does not take redirected packets)".into(),
            n => format!("errno {n}"),
        }
    }

    /// What the program returned and what came of it: `XDP_REDIRECT to
    /// r2, which failed: ENETDOWN (...)` (`to_dev`: the target by name;
    /// else by its ifindex).
    pub fn did(&self, to_dev: Option<&str>) -> String {
        let to = match (to_dev, self.to_ifindex) {
            (Some(d), _) => format!(" to {d}"),
            (None, 0) => String::new(),
            (None, i) => format!(" to ifindex {i}"),
        };
        match self.action {
            XdpAction::XdpRedirect if self.err != 0 => {
                format!("XDP_REDIRECT{to}, which failed: {}", self.error())
            }
            XdpAction::XdpRedirect => format!("XDP_REDIRECT{to}"),
            XdpAction::XdpTx => "XDP_TX, which the device did not take (dropped)".into(),
            XdpAction::Invalid => "an action the kernel does not know (dropped)".into(),
            a => format!("{a} (dropped)"),
        }
    }
}

/// The socket call a [`SockAddrData`] saw (tracer_common::sockcall).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::FromRepr,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[repr(u8)]
pub enum SockCall {
    Connect = 1,
    Sendto = 2,
    Sendmsg = 3,
    /// The first message of a sendmmsg(2) batch.
    Sendmmsg = 4,
}

impl std::fmt::Display for SockCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.into())
    }
}

/// A socket call to the target and what its first packet carried instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SockAddrData {
    pub call: SockCall,
    /// The destination the application asked for.
    pub asked: IpAddr,
    pub asked_port: u16,
    /// The calling process and its name.
    pub pid: u32,
    pub comm: String,
    /// The calling task's cgroup (v2 id: the inode of its directory),
    /// whose programs (and its ancestors') made the rewrite.
    pub cgroup_id: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hop {
    pub ts_ns: u64,
    #[serde(serialize_with = "ser_hook")]
    pub hook: Hook,
    pub netns: Name,
    pub netns_inode: u32,
    pub dev: Name,
    pub ifindex: u32,
    pub dir: Dir,
    /// Shared with the flow's other hops that carry the same tuple
    /// (`Flow::share`): 8 bytes per hop instead of 40.
    #[serde(serialize_with = "ser_tuple")]
    pub tuple: Arc<Tuple>,
    #[serde(serialize_with = "ser_hex")]
    pub skb: u64,
    pub data: HopData,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's serialize_with signature"
)]
fn ser_hook<S: serde::Serializer>(h: &Hook, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(hook_name(*h))
}

fn ser_tuple<S: serde::Serializer>(t: &Arc<Tuple>, s: S) -> Result<S::Ok, S::Error> {
    t.as_ref().serialize(s)
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's serialize_with signature"
)]
fn ser_hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

/// RTN_LOCAL (include/uapi/linux/rtnetlink.h).
pub const RTN_LOCAL: u8 = 2;

impl HopData {
    /// A successful lookup that resolved to a LOCAL route: delivery to
    /// this host (IPv4: the nexthop scope, IPv6: the route type).
    pub fn is_local_route(&self) -> bool {
        matches!(self, HopData::Fib(f)
            if f.err == 0 && (f.nh_scope == SCOPE_NOWHERE || f.rtype == RTN_LOCAL))
    }
}

impl Hop {
    /// A packet hop on the request path that means "the packet was here".
    pub fn is_ingress(&self) -> bool {
        matches!(self.hook, Hook::NetifReceive | Hook::TcIngress)
    }

    pub fn is_egress(&self) -> bool {
        matches!(self.hook, Hook::Xmit | Hook::TcEgress)
    }

    pub fn is_request(&self) -> bool {
        self.dir == Dir::Request
    }

    /// One human line of what happened at this hop.
    pub fn detail(&self) -> String {
        match &self.data {
            HopData::Packet {
                tcp_flags: f, len, ..
            } => {
                if self.tuple.proto == 6 {
                    format!("[{}] len {len}", tcp_flags(*f))
                } else {
                    format!("len {len}")
                }
            }
            HopData::Drop(d) => format!(
                "DROP reason {}{} at {}",
                d.reason,
                match d.reason_from {
                    ReasonFrom::Kernel => "",
                    ReasonFrom::Location | ReasonFrom::Site => " (inferred)",
                    ReasonFrom::Unknown => " (none from this kernel)",
                },
                d.location
            ),
            HopData::Consume { location } => format!("consumed at {location}"),
            HopData::IcmpSend { desc, .. } => format!("kernel sent ICMP {desc}"),
            HopData::TcpReset { reason } => match reason {
                Some(r) => format!("kernel sent TCP RST (reason {r})"),
                None => "kernel sent TCP RST".into(),
            },
            HopData::Fib(f) => {
                let FibData {
                    table,
                    err,
                    nh_dev,
                    gw,
                    ..
                } = &**f;
                if *err == 0 {
                    let via = gw.map(|g| format!(" via {g}")).unwrap_or_default();
                    let kind = if self.data.is_local_route() {
                        "LOCAL route"
                    } else {
                        "route"
                    };
                    format!("{kind} in table {}: dev {nh_dev}{via}", table_name(*table))
                } else {
                    format!("table {}: {}", table_name(*table), errno_name(*err))
                }
            }
            HopData::Sock(s) => format!("socket {} -> {}", s.old_state, s.new_state),
            HopData::SockRecv => "read by a local socket (recvmsg)".into(),
            HopData::SockQueue => "queued to a local socket (sk_data_ready)".into(),
            HopData::Func(f) => format!("{} [{}]", f.detail, f.backend),
            HopData::Xdp(x) => format!("XDP program id {}: {}", x.prog_id, x.did(None)),
            HopData::SockAddr(a) => {
                let asked = std::net::SocketAddr::new(a.asked, a.asked_port);
                format!(
                    "{}() to {asked} by {} (pid {}) left for {}:{}: rewritten in the socket call (cgroup program)",
                    a.call, a.comm, a.pid, self.tuple.dst, self.tuple.dport
                )
            }
            HopData::Neigh(n) => {
                let NeighData {
                    addr,
                    state,
                    new_state,
                    lladdr,
                    event,
                    ..
                } = &**n;
                let mut s = format!("neighbour {addr} {event}: {state}");
                if let Some(n) = new_state {
                    s.push_str(&format!(" -> {n}"));
                }
                if let Some(l) = lladdr {
                    s.push_str(&format!(" lladdr {l}"));
                }
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prohibited codes by the names a ruleset uses for them
    /// (`--reject-with icmp-host-prohibited` sends code 10).
    #[test]
    fn icmp_prohibited_codes_are_told_apart() {
        assert_eq!(icmp_desc(false, 3, 9), "dest-unreachable net-prohibited");
        assert_eq!(icmp_desc(false, 3, 10), "dest-unreachable host-prohibited");
        assert_eq!(icmp_desc(false, 3, 13), "dest-unreachable admin-prohibited");
    }

    #[test]
    fn names() {
        assert_eq!(table_name(255), "local");
        assert_eq!(errno_name(-101), "ENETUNREACH");
        assert_eq!(<&str>::from(TcpState::of(10)), "LISTEN");
        // Every number the kernel defines, by its name, the same as text,
        // JSON and back; others are UNKNOWN.
        let kernel = [
            "UNKNOWN",
            "ESTABLISHED",
            "SYN_SENT",
            "SYN_RECV",
            "FIN_WAIT1",
            "FIN_WAIT2",
            "TIME_WAIT",
            "CLOSE",
            "CLOSE_WAIT",
            "LAST_ACK",
            "LISTEN",
            "CLOSING",
            "NEW_SYN_RECV",
        ];
        for (n, name) in kernel.iter().enumerate() {
            let st = TcpState::of(n as u32);
            assert_eq!((<&str>::from(st), st.to_string().as_str()), (*name, *name));
            let j = serde_json::to_string(&st).unwrap();
            assert_eq!(j, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<TcpState>(&j).unwrap(), st);
        }
        assert_eq!(TcpState::of(13), TcpState::Unknown);
        assert_eq!(TcpState::of(300), TcpState::Unknown);
        assert_eq!(
            serde_json::to_string(&NeighEvent::of(Some(Hook::NeighDead))).unwrap(),
            "\"send to failed entry\""
        );
        assert_eq!(
            FuncBackend::of(tracer_common::backend::KPROBE).to_string(),
            "kprobe"
        );
        assert_eq!(nud_state(0x20), "FAILED");
        assert_eq!(nud_state(0x0), "NONE");
        for bits in [0x00, 0x01, 0x20, 0x21, 0x82, 0xff] {
            let n = Nud(bits);
            assert_eq!(Nud::from_names(&n.to_string()), Some(n));
            let j = serde_json::to_string(&n).unwrap();
            assert_eq!(serde_json::from_str::<Nud>(&j).unwrap(), n);
        }
        assert_eq!(serde_json::to_string(&Nud::FAILED).unwrap(), "\"FAILED\"");
        assert!(Nud(0x21).contains(Nud::FAILED) && !Nud::INCOMPLETE.contains(Nud::FAILED));
        assert_eq!(Nud::from_names("FAILED|BOGUS"), None);
        assert_eq!(icmp_desc(false, 3, 0), "dest-unreachable net-unreachable");
        assert_eq!(icmp_desc(false, 5, 1), "redirect host");
    }

    #[test]
    fn hops_stay_small() {
        // 100k flows x 4 hops must fit the 64 MiB budget (issue 5).
        assert!(
            std::mem::size_of::<HopData>() <= 16,
            "{}",
            std::mem::size_of::<HopData>()
        );
        assert!(
            std::mem::size_of::<Hop>() <= 72,
            "{}",
            std::mem::size_of::<Hop>()
        );
    }
}
