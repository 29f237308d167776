//! nf_tables tracing: which rule decided a followed packet, on any kernel
//! with nf_tables, without kprobes (issue 17).
//!
//! In each namespace with nf_tables tables tracer adds a table of its own,
//! `inet tracer_<pid>`, owned by the netlink socket that made it
//! (NFT_TABLE_F_OWNER, Linux 5.12: nf_tables_netlink_event() removes it
//! when the socket closes, so also after SIGKILL; on older kernels `tracer
//! cleanup` removes it). Its two chains, at prerouting and output before
//! every other (priority -500: raw is -300, conntrack -200), set `meta
//! nftrace` on packets to the followed target only. nft_do_chain() then
//! reports each rule that matched such a packet, in every table of that
//! namespace, to listeners of NFNLGRP_NFTRACE (nft_trace_notify() in
//! net/netfilter/nf_tables_trace.c), as `nft monitor trace` shows them.
//! The bit stays with the packet until it leaves the namespace
//! (skb_scrub_packet() clears it on a veth).
//!
//! What is kept per namespace: the packets a rule or a chain policy
//! dropped, with the jumps and gotos (verdict maps among them) that led
//! there. Naming the rule's text and the map element is left to the
//! moment a verdict needs it ([`resolve`]).

use std::{
    collections::{HashMap, VecDeque},
    net::IpAddr,
    os::fd::{AsRawFd, OwnedFd},
    path::PathBuf,
};

use super::{
    netlink::{self, NLMSG_HDRLEN, attr, be32, be64, put_attr, string},
    netns::NetnsGuard,
    nftables::{self, NFNL_SUBSYS_NFTABLES, NftRule, SetElem, nul},
};

/// The packets to trace: to `addr`/`prefix`, of protocol `l4proto` and
/// to port `port` when given (the followed target, as numbers).
#[derive(Debug, Clone, Copy)]
pub struct Followed {
    pub addr: IpAddr,
    pub prefix: u8,
    pub port: Option<u16>,
    pub l4proto: Option<u8>,
    /// Also inside VXLAN on these ports: where the VXLAN driver is
    /// loaded, a firewall between the nodes that drops the outer packets
    /// is named by its rule.
    pub vxlan: VxlanPorts,
}

/// The UDP ports of VXLAN traced into: none, or the usual ones
/// ([`VXLAN_PORTS`]) and the node's devices' own (Calico's `vxlanPort`,
/// Cilium's `tunnel-port`, flannel's `Backend.Port`, Antrea's
/// `tunnelPort`: `FilterConfig::tunnel_ports`, at most two), 0 for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VxlanPorts([u16; 4]);

impl VxlanPorts {
    /// Not into VXLAN.
    pub const NONE: VxlanPorts = VxlanPorts([0; 4]);

    /// [`VXLAN_PORTS`] and `extra` (0s and repeats left out).
    pub fn usual_and(extra: &[u16]) -> VxlanPorts {
        let mut out = [0; 4];
        let ports = VXLAN_PORTS.iter().chain(extra).filter(|p| **p != 0);
        let mut n = 0;
        for p in ports {
            if n < out.len() && !out[..n].contains(p) {
                out[n] = *p;
                n += 1;
            }
        }
        VxlanPorts(out)
    }

    pub fn ports(self) -> impl Iterator<Item = u16> {
        self.0.into_iter().filter(|p| *p != 0)
    }
}

impl Followed {
    /// An endpoint traced besides the target ([`NfTrace::follow_also`]):
    /// one address; into VXLAN as the table's target says, not by its own.
    pub fn endpoint(addr: IpAddr, port: Option<u16>, l4proto: Option<u8>) -> Followed {
        Followed {
            addr,
            prefix: if addr.is_ipv4() { 32 } else { 128 },
            port,
            l4proto,
            vxlan: VxlanPorts::NONE,
        }
    }
}

const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_DELRULE: u16 = 8;
const NFT_MSG_TRACE: u16 = 17;
const NFNLGRP_NFTRACE: u32 = 9;
const NFT_TABLE_F_OWNER: u32 = 2;

const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

/// Trace attributes (enum nft_trace_attributes).
const NFTA_TRACE_TABLE: u16 = 1;
const NFTA_TRACE_CHAIN: u16 = 2;
const NFTA_TRACE_RULE_HANDLE: u16 = 3;
const NFTA_TRACE_TYPE: u16 = 4;
const NFTA_TRACE_VERDICT: u16 = 5;
const NFTA_TRACE_ID: u16 = 6;
const NFTA_TRACE_NETWORK_HEADER: u16 = 8;
const NFTA_TRACE_TRANSPORT_HEADER: u16 = 9;
const NFTA_TRACE_POLICY: u16 = 16;
/// enum nft_trace_types.
const NFT_TRACETYPE_POLICY: u32 = 1;

/// Netfilter verdict codes (NF_DROP, NF_QUEUE, NFT_JUMP, NFT_GOTO).
const NF_DROP: i32 = 0;
const NF_QUEUE: i32 = 3;
const NFT_JUMP: i32 = -3;
const NFT_GOTO: i32 = -4;

/// Packets whose trace is being followed per namespace, and drops kept.
const PENDING_MAX: usize = 1024;
const DROPS_MAX: usize = 512;
const JUMPS_MAX: usize = 64;

/// The name of the table this process adds.
pub fn table_name() -> String {
    format!("{TABLE_PREFIX}{}", std::process::id())
}

/// What every tracer table's name starts with (`tracer cleanup`).
pub const TABLE_PREFIX: &str = "tracer_";

/// A packet's addresses and ports as nf_tables saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TracedTuple {
    pub proto: u8,
    pub src: IpAddr,
    pub sport: u16,
    pub dst: IpAddr,
    pub dport: u16,
}

/// A goto a followed packet took (kube-proxy sends a packet to its
/// Service's and endpoint's chains by goto): what a verdict that is not a
/// drop may still tell.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TracedGoto {
    pub tuple: TracedTuple,
    pub table: String,
    pub chain: String,
    /// `goto X`.
    pub verdict: String,
}

/// One jump or goto on the way to the drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jump {
    pub table: String,
    pub chain: String,
    pub handle: u64,
    /// `jump X` or `goto X`.
    pub verdict: String,
    pub tuple: Option<TracedTuple>,
}

/// A followed packet a rule (or a chain's policy) dropped, as traced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceDrop {
    pub tuple: TracedTuple,
    /// The table's family (NFPROTO_*).
    pub family: u8,
    pub table: String,
    pub chain: String,
    /// 0 for a chain's policy.
    pub handle: u64,
    pub policy: bool,
    /// `drop` or `queue`.
    pub verdict: String,
    pub via: Vec<Jump>,
}

/// The element of a verdict map that sent the packet on.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct MapElement {
    /// The map, as `@name`.
    pub map: String,
    /// Its key as nft prints it (`10.96.0.10 . tcp . 80`).
    pub key: String,
    /// Its verdict (`goto reject-chain`).
    pub verdict: String,
    pub comment: Option<String>,
}

/// A traced drop with its rule named: what a verdict reports and a
/// recording keeps.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NfTraced {
    pub tuple: TracedTuple,
    pub family: String,
    pub table: String,
    pub chain: String,
    /// 0 for a chain's policy.
    pub handle: u64,
    /// The rule as `nft list ruleset` prints it ("" for a policy, or a
    /// rule gone before it was read).
    pub rule: String,
    pub comment: Option<String>,
    /// `drop`, `reject`, `queue`, or `policy drop`.
    pub verdict: String,
    /// The jumps and gotos that led there, as `chain: verdict`.
    #[serde(default)]
    pub via: Vec<String>,
    /// The verdict-map element that sent it on its way, if one did.
    #[serde(default)]
    pub element: Option<MapElement>,
    /// The hook of the base chain it started from (`INPUT`), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
}

/// One namespace being traced.
struct Traced {
    label: String,
    path: PathBuf,
    /// The socket that made (and owns) the table.
    ctl: OwnedFd,
    /// Subscribed to NFNLGRP_NFTRACE.
    sub: OwnedFd,
    ino: u32,
    /// Per trace id: the latest headers and the jumps so far.
    pending: HashMap<u32, (Option<TracedTuple>, Vec<Jump>)>,
    order: VecDeque<u32>,
    drops: VecDeque<TraceDrop>,
    gotos: VecDeque<TracedGoto>,
    /// The trace socket overflowed: events were lost.
    lost: bool,
}

/// nftrace in every namespace it was set up in; the tables go on drop.
pub struct NfTrace {
    table: String,
    netns: Vec<Traced>,
    /// Endpoints traced besides the target ([`NfTrace::follow_also`]).
    also: std::collections::HashSet<(IpAddr, Option<u16>, Option<u8>)>,
    /// The target's family, the endpoint set's (NAT keeps the family).
    v6: bool,
    /// What the rules trace ([`NfTrace::pause`] adds them again).
    target: Followed,
    /// The rules are out of the chains ([`NfTrace::pause`]).
    paused: bool,
}

/// At most this many endpoints are traced besides the target (elements
/// of one set in each traced namespace: the lookup costs the same however
/// many there are).
const ALSO_MAX: usize = 1024;

/// Why nftrace is not on in a namespace.
#[derive(Debug, thiserror::Error)]
pub enum NfTraceError {
    #[error("cannot enter the namespace: {0}")]
    Netns(#[from] super::netns::NetnsError),
    #[error("no netlink socket for nf_tables")]
    Socket,
    #[error("adding table inet {table}: {err}")]
    Table { table: String, err: std::io::Error },
    #[error("cannot subscribe to nf_tables trace events")]
    Subscribe,
}

impl NfTrace {
    /// Add the tracing table in each namespace of `namespaces` (label,
    /// path) that has nf_tables tables, matching `target`. Namespaces
    /// without tables are skipped; the others that fail are returned with
    /// why.
    pub fn start(
        target: &Followed,
        namespaces: &[(String, PathBuf)],
    ) -> (NfTrace, Vec<(String, NfTraceError)>) {
        let table = table_name();
        let mut t = NfTrace {
            table: table.clone(),
            netns: Vec::new(),
            also: std::collections::HashSet::new(),
            v6: target.addr.is_ipv6(),
            target: *target,
            paused: false,
        };
        let mut failed = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (label, path) in namespaces {
            let Some(ino) = super::netns::netns_inode(path) else {
                continue;
            };
            if !seen.insert(ino) {
                continue;
            }
            match set_up(&table, target, path) {
                Ok(Some((ctl, sub))) => t.netns.push(Traced {
                    label: label.clone(),
                    path: path.clone(),
                    ctl,
                    sub,
                    ino,
                    pending: HashMap::new(),
                    order: VecDeque::new(),
                    drops: VecDeque::new(),
                    gotos: VecDeque::new(),
                    lost: false,
                }),
                Ok(None) => {}
                Err(e) => failed.push((label.clone(), e)),
            }
        }
        (t, failed)
    }

    /// Trace `endpoints` (the target's Service's, from its rules) as
    /// [`NfTrace::follow_also`] does those a followed packet taught: the
    /// first packet to a ClusterIP is translated before it could teach
    /// them. How many were added.
    pub fn follow_endpoints(&mut self, endpoints: super::services::Endpoints) -> usize {
        endpoints
            .into_iter()
            .filter(|(e, l4)| {
                self.follow_also(Followed::endpoint(e.ip(), Some(e.port()), Some(*l4)))
            })
            .count()
    }

    /// Trace packets to `to` and their replies too, in every traced
    /// namespace: an endpoint the target was translated to (DNAT), learnt
    /// from a followed packet. The packet that taught it has gone by;
    /// the next ones (retransmits, later queries) are traced where the
    /// translated packets go, the endpoint's own namespace among them,
    /// where the target's rules no longer match them. Whether rules were
    /// added (not already traced, not past [`ALSO_MAX`]).
    pub fn follow_also(&mut self, to: Followed) -> bool {
        let Some(key) = endpoint_key(&to) else {
            return false;
        };
        if to.addr.is_ipv6() != self.v6
            || self.also.len() >= ALSO_MAX
            || !self.also.insert((to.addr, to.port, to.l4proto))
        {
            return false;
        }
        // Paused (a flood, the CPU budget): the set and its element only;
        // pause(false) adds the rules that look it up.
        let mut add = match (self.also.len(), self.paused) {
            (1, false) => endpoint_messages(&self.table, self.v6, self.target.vxlan),
            (1, true) => vec![endpoint_set(&self.table, self.v6)],
            _ => Vec::new(),
        };
        add.push(endpoint_element(&self.table, &key));
        for n in &self.netns {
            if let Err(e) = netlink::nft_batch(&n.ctl, &add) {
                log::debug!(
                    "nftrace: tracing {} in netns {}: errno {e}",
                    to.addr,
                    n.label
                );
            }
        }
        true
    }

    /// Stop tracing (`true`, over the CPU budget or during a flood of
    /// followed packets, run/trace_load.rs: the rules taken out of the
    /// table's chains) or trace again (the rules added back, the
    /// endpoints' too); the table, its chains and its endpoint set stay.
    /// (A table's flags cannot make it dormant here: since Linux 6.9
    /// nf_tables_updtable() refuses any flag change of a table with an
    /// owner.) The namespaces where the kernel refused, with its errno.
    pub fn pause(&mut self, paused: bool) -> Vec<(String, i32)> {
        if paused == self.paused {
            return Vec::new();
        }
        self.paused = paused;
        let batch = if paused {
            CHAINS
                .iter()
                .map(|(chain, _)| flush_chain(&self.table, chain))
                .collect()
        } else {
            let mut v = rule_messages(&self.table, &self.target);
            if !self.also.is_empty() {
                v.extend(endpoint_rules(&self.table, self.v6, self.target.vxlan));
            }
            v
        };
        let mut failed = Vec::new();
        for n in &self.netns {
            if let Err(e) = netlink::nft_batch(&n.ctl, &batch) {
                failed.push((n.label.clone(), e));
            }
        }
        failed
    }

    /// The namespaces traced, by label.
    pub fn labels(&self) -> Vec<String> {
        self.netns.iter().map(|n| n.label.clone()).collect()
    }

    /// Read every trace event waiting.
    pub fn poll(&mut self) {
        let own = self.table.clone();
        for n in &mut self.netns {
            let mut events = Vec::new();
            if !netlink::drain(&n.sub, &mut |ty, msg| {
                if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_TRACE
                    && let Some(e) = parse_event(msg)
                    && e.table != own
                {
                    events.push(e);
                }
            }) {
                n.lost = true;
            }
            for e in events {
                n.add(e);
            }
        }
    }

    /// The drops traced in namespace `ino`, with its path (to read its
    /// rules in), and whether events were lost there.
    pub fn drops(&self, ino: u32) -> Option<(&PathBuf, Vec<TraceDrop>, bool)> {
        let n = self.netns.iter().find(|n| n.ino == ino)?;
        Some((&n.path, n.drops.iter().cloned().collect(), n.lost))
    }

    /// The gotos followed packets took in namespace `ino`.
    pub fn gotos(&self, ino: u32) -> Vec<TracedGoto> {
        self.netns
            .iter()
            .find(|n| n.ino == ino)
            .map(|n| n.gotos.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The drops traced in namespace `ino` with their rules named among
    /// `rules` (its nf_tables rules, dumped by the caller); the verdict
    /// maps the packets went through are read in it now. Empty when it is
    /// not traced or nothing dropped there.
    pub fn resolved(&self, ino: u32) -> Vec<NfTraced> {
        let Some((path, drops, _)) = self.drops(ino) else {
            return Vec::new();
        };
        if drops.is_empty() {
            return Vec::new();
        }
        let Ok(_in) = NetnsGuard::enter(path) else {
            return Vec::new();
        };
        resolve(&drops, &mut |family, table, chain| {
            nftables::chain_rules(family, table, chain).unwrap_or_default()
        })
    }
}

impl Traced {
    fn add(&mut self, e: Event) {
        if !self.pending.contains_key(&e.id) {
            if self.order.len() >= PENDING_MAX
                && let Some(old) = self.order.pop_front()
            {
                self.pending.remove(&old);
            }
            self.order.push_back(e.id);
        }
        let p = self.pending.entry(e.id).or_default();
        if e.tuple.is_some() {
            p.0 = e.tuple;
        }
        match e.code {
            Some((code @ (NFT_JUMP | NFT_GOTO), _)) => {
                if code == NFT_GOTO
                    && let Some(tuple) = p.0
                {
                    let g = TracedGoto {
                        tuple,
                        table: e.table.clone(),
                        chain: e.chain.clone(),
                        verdict: e.verdict_text(),
                    };
                    // The same packet's goto, seen again for its next packet.
                    if !self.gotos.iter().rev().take(32).any(|o| *o == g) {
                        if self.gotos.len() >= DROPS_MAX {
                            self.gotos.pop_front();
                        }
                        self.gotos.push_back(g);
                    }
                }
                // A trace id is the skb's: a reused skb must not grow it.
                if p.1.len() >= JUMPS_MAX {
                    p.1.remove(0);
                }
                p.1.push(Jump {
                    verdict: e.verdict_text(),
                    table: e.table,
                    chain: e.chain,
                    handle: e.handle,
                    tuple: p.0,
                });
            }
            Some((NF_DROP | NF_QUEUE, _)) => {
                let Some(tuple) = p.0 else { return };
                let via = path_to(&p.1, &e.table, &e.chain);
                if self.drops.len() >= DROPS_MAX {
                    self.drops.pop_front();
                }
                self.drops.push_back(TraceDrop {
                    tuple,
                    family: e.family,
                    table: e.table.clone(),
                    chain: e.chain.clone(),
                    handle: e.handle,
                    policy: e.policy,
                    verdict: e.verdict_text(),
                    via,
                });
            }
            _ => {}
        }
    }
}

/// The jumps and gotos that led to `chain` of `table`, first first: from
/// the last jump into it back to a base chain (the others returned).
fn path_to(jumps: &[Jump], table: &str, chain: &str) -> Vec<Jump> {
    let mut path = Vec::new();
    let mut at = chain;
    for j in jumps.iter().rev().filter(|j| j.table == table) {
        let target = j.verdict.split_once(' ').map_or("", |(_, c)| c);
        if target == at {
            path.push(j.clone());
            at = &j.chain;
        }
    }
    path.reverse();
    path
}

impl Drop for NfTrace {
    /// Delete each table on the socket that owns it (closing the socket
    /// would too, where the owner flag was accepted).
    fn drop(&mut self) {
        for n in &self.netns {
            let _ = netlink::nft_batch(&n.ctl, &[del_table(&self.table)]);
        }
    }
}

/// One trace event (NFT_MSG_TRACE).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    id: u32,
    family: u8,
    table: String,
    chain: String,
    handle: u64,
    policy: bool,
    /// Verdict code and jump target.
    code: Option<(i32, String)>,
    tuple: Option<TracedTuple>,
}

impl Event {
    fn verdict_text(&self) -> String {
        match &self.code {
            Some((NF_DROP, _)) => "drop".into(),
            Some((NF_QUEUE, _)) => "queue".into(),
            Some((NFT_JUMP, c)) => format!("jump {c}"),
            Some((NFT_GOTO, c)) => format!("goto {c}"),
            Some((c, _)) => format!("verdict {c}"),
            None => String::new(),
        }
    }
}

/// Parse one NFT_MSG_TRACE message (nlmsghdr, nfgenmsg, attributes).
fn parse_event(msg: &[u8]) -> Option<Event> {
    let family = *msg.get(NLMSG_HDRLEN)?;
    let a = msg.get(NLMSG_HDRLEN + 4..)?;
    let code = attr(a, NFTA_TRACE_VERDICT).and_then(|v| {
        let code = be32(attr(v, 1)?)? as i32;
        Some((code, attr(v, 2).map(string).unwrap_or_default()))
    });
    // A policy event carries the policy as the verdict (nft_trace_notify():
    // NFTA_TRACE_POLICY, with no NFTA_TRACE_VERDICT on older kernels).
    let policy = attr(a, NFTA_TRACE_TYPE).and_then(be32) == Some(NFT_TRACETYPE_POLICY);
    let code = code.or_else(|| {
        policy
            .then(|| attr(a, NFTA_TRACE_POLICY).and_then(be32))
            .flatten()
            .map(|p| (p as i32, String::new()))
    });
    Some(Event {
        id: attr(a, NFTA_TRACE_ID).and_then(be32)?,
        family,
        table: string(attr(a, NFTA_TRACE_TABLE)?),
        chain: string(attr(a, NFTA_TRACE_CHAIN)?),
        handle: attr(a, NFTA_TRACE_RULE_HANDLE).and_then(be64).unwrap_or(0),
        policy,
        code,
        tuple: attr(a, NFTA_TRACE_NETWORK_HEADER)
            .and_then(|nh| tuple(nh, attr(a, NFTA_TRACE_TRANSPORT_HEADER).unwrap_or(&[]))),
    })
}

/// Addresses and ports from a traced network and transport header.
fn tuple(nh: &[u8], th: &[u8]) -> Option<TracedTuple> {
    let (proto, src, dst) = match nh.first()? >> 4 {
        4 => {
            let a: [u8; 4] = nh.get(12..16)?.try_into().ok()?;
            let b: [u8; 4] = nh.get(16..20)?.try_into().ok()?;
            (*nh.get(9)?, IpAddr::from(a), IpAddr::from(b))
        }
        6 => {
            let a: [u8; 16] = nh.get(8..24)?.try_into().ok()?;
            let b: [u8; 16] = nh.get(24..40)?.try_into().ok()?;
            (*nh.get(6)?, IpAddr::from(a), IpAddr::from(b))
        }
        _ => return None,
    };
    let port =
        |r: std::ops::Range<usize>| th.get(r).map_or(0, |p| u16::from_be_bytes([p[0], p[1]]));
    let ports = matches!(proto, 6 | 17 | 132 | 136);
    Some(TracedTuple {
        proto,
        src,
        sport: if ports { port(0..2) } else { 0 },
        dst,
        dport: if ports { port(2..4) } else { 0 },
    })
}

/// In namespace `path`: when it has nf_tables tables, add ours and
/// subscribe to its trace events: (owner socket, subscription).
fn set_up(
    table: &str,
    target: &Followed,
    path: &std::path::Path,
) -> Result<Option<(OwnedFd, OwnedFd)>, NfTraceError> {
    let _in = NetnsGuard::enter(path)?;
    if tables().is_empty() {
        return Ok(None);
    }
    let sub = netlink::subscribe(libc::NETLINK_NETFILTER, &[NFNLGRP_NFTRACE])
        .ok_or(NfTraceError::Subscribe)?;
    grow_buffer(&sub);
    let ctl = netlink::netfilter_socket().ok_or(NfTraceError::Socket)?;
    let failed = |e: i32| NfTraceError::Table {
        table: table.into(),
        err: std::io::Error::from_raw_os_error(e),
    };
    match netlink::nft_batch(&ctl, &table_messages(table, target, NFT_TABLE_F_OWNER)) {
        Ok(()) => Ok(Some((ctl, sub))),
        // Before 5.12 there is no owner flag: the table then outlives a
        // SIGKILL and `tracer cleanup` removes it. A new socket: the
        // refused batch's other answers are still queued on the first.
        Err(e) if e == libc::EOPNOTSUPP || e == libc::EINVAL => {
            let ctl = netlink::netfilter_socket().ok_or(NfTraceError::Socket)?;
            netlink::nft_batch(&ctl, &table_messages(table, target, 0)).map_err(failed)?;
            Ok(Some((ctl, sub)))
        }
        Err(e) => Err(failed(e)),
    }
}

/// The nf_tables tables of this thread's namespace: (family, name).
fn tables() -> Vec<(u8, String)> {
    let mut out = Vec::new();
    let _ = netlink::dump(
        libc::NETLINK_NETFILTER,
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE,
        &[0u8; 4],
        &mut |ty, msg| {
            if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE
                && let Some(&family) = msg.get(NLMSG_HDRLEN)
                && let Some(n) = msg.get(NLMSG_HDRLEN + 4..).and_then(|a| attr(a, 1))
            {
                out.push((family, string(n)));
            }
        },
    );
    out
}

/// Trace events come in bursts (one per matching rule): room for many.
fn grow_buffer(sock: &OwnedFd) {
    let size: libc::c_int = 8 << 20;
    // SAFETY: setsockopt with an int of its size; SO_RCVBUFFORCE needs
    // CAP_NET_ADMIN, which adding the table needs too.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            std::ptr::from_ref(&size).cast(),
            size_of::<libc::c_int>() as u32,
        );
    }
}

fn nfgen(family: u8) -> Vec<u8> {
    vec![family, 0, 0, 0]
}

fn nested(out: &mut Vec<u8>, ty: u16, inner: &[u8]) {
    put_attr(out, ty | NLA_F_NESTED, inner);
}

fn be32_attr(out: &mut Vec<u8>, ty: u16, v: u32) {
    put_attr(out, ty, &v.to_be_bytes());
}

/// The two base chains of the table: NF_INET_PRE_ROUTING and
/// NF_INET_LOCAL_OUT.
const CHAINS: [(&str, u32); 2] = [("prerouting", 0), ("output", 3)];

/// The batch that makes table `name`: two base chains whose rules set
/// nftrace for packets to `target` and for its replies.
fn table_messages(name: &str, target: &Followed, flags: u32) -> Vec<(u16, u16, Vec<u8>)> {
    let ty = |m: u16| (NFNL_SUBSYS_NFTABLES << 8) | m;
    let mut v = Vec::new();
    v.push(add_table(name, flags));
    for (chain, hook) in CHAINS {
        let mut c = nfgen(NFPROTO_INET);
        put_attr(&mut c, 1, &nul(name)); // NFTA_CHAIN_TABLE
        put_attr(&mut c, 3, &nul(chain)); // NFTA_CHAIN_NAME
        let mut h = Vec::new();
        be32_attr(&mut h, 1, hook); // NFTA_HOOK_HOOKNUM
        be32_attr(&mut h, 2, (-500i32) as u32); // NFTA_HOOK_PRIORITY
        nested(&mut c, 4, &h); // NFTA_CHAIN_HOOK
        be32_attr(&mut c, 5, 1); // NFTA_CHAIN_POLICY: accept
        put_attr(&mut c, 7, &nul("filter")); // NFTA_CHAIN_TYPE
        v.push((ty(NFT_MSG_NEWCHAIN), NLM_F_CREATE, c));
    }
    v.extend(rule_messages(name, target));
    v
}

/// The batch that adds the endpoint set and the rules that look it up to
/// table `name`: sent with the first endpoint, so that a namespace pays
/// for the lookups only once the target was translated somewhere.
fn endpoint_messages(name: &str, v6: bool, vxlan: VxlanPorts) -> Vec<(u16, u16, Vec<u8>)> {
    let mut v = vec![endpoint_set(name, v6)];
    v.extend(endpoint_rules(name, v6, vxlan));
    v
}

/// The rules that look the endpoint set up, in each base chain and for
/// each side; for the VXLAN packets that carry them too, on `vxlan`'s
/// ports.
fn endpoint_rules(name: &str, v6: bool, vxlan: VxlanPorts) -> Vec<(u16, u16, Vec<u8>)> {
    rules_and_vxlan_rules(name, vxlan, |side, port| endpoint_rule(v6, side, port))
}

/// The set of endpoints traced besides the target (DNAT destinations,
/// [`NfTrace::follow_also`]): `typeof ip daddr . meta l4proto . th dport`
/// of the target's family, made with the first. One lookup per packet and
/// side, however many endpoints it holds.
const ENDPOINTS: &str = "endpoints";

/// NFT_MSG_NEWSET of [`ENDPOINTS`]: a hash set keyed by address, protocol
/// and port, each in its own 4-byte register (NFT_REG32_00 on).
fn endpoint_set(table: &str, v6: bool) -> (u16, u16, Vec<u8>) {
    const NFT_MSG_NEWSET: u16 = 9;
    let mut m = nfgen(NFPROTO_INET);
    put_attr(&mut m, 1, &nul(table)); // NFTA_SET_TABLE
    put_attr(&mut m, 2, &nul(ENDPOINTS)); // NFTA_SET_NAME
    be32_attr(&mut m, 3, 0); // NFTA_SET_FLAGS: a plain (hash) set
    // NFTA_SET_KEY_TYPE, as nft composes a concatenation (6 bits a
    // type): ipv4_addr (7) or ipv6_addr (8) . inet_proto (12) .
    // inet_service (13). Only userspace reads it.
    const INET_PROTO: u32 = 0xc;
    const INET_SERVICE: u32 = 0xd;
    let addr_type: u32 = if v6 { 8 } else { 7 };
    be32_attr(
        &mut m,
        4,
        (((addr_type << 6) + INET_PROTO) << 6) + INET_SERVICE,
    );
    be32_attr(&mut m, 5, endpoint_key_len(v6)); // NFTA_SET_KEY_LEN
    be32_attr(&mut m, 10, 1); // NFTA_SET_ID
    (
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSET,
        NLM_F_CREATE,
        m,
    )
}

/// The key: the address, then the protocol and the port each padded to a
/// register (what nft_reg_store8() and a 2-byte payload load leave).
fn endpoint_key_len(v6: bool) -> u32 {
    if v6 { 24 } else { 12 }
}

/// The set element for endpoint `to` (None without a protocol and port:
/// only DNAT destinations with both are traced this way).
fn endpoint_key(to: &Followed) -> Option<Vec<u8>> {
    let mut k = match to.addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    k.extend_from_slice(&[to.l4proto?, 0, 0, 0]);
    let port = to.port?.to_be_bytes();
    k.extend_from_slice(&[port[0], port[1], 0, 0]);
    Some(k)
}

/// NFT_MSG_NEWSETELEM adding `key` to [`ENDPOINTS`] of `table`.
fn endpoint_element(table: &str, key: &[u8]) -> (u16, u16, Vec<u8>) {
    const NFT_MSG_NEWSETELEM: u16 = 12;
    let mut m = nfgen(NFPROTO_INET);
    put_attr(&mut m, 1, &nul(table)); // NFTA_SET_ELEM_LIST_TABLE
    put_attr(&mut m, 2, &nul(ENDPOINTS)); // NFTA_SET_ELEM_LIST_SET
    let mut value = Vec::new();
    put_attr(&mut value, 1, key); // NFTA_DATA_VALUE
    let mut k = Vec::new();
    nested(&mut k, 1, &value); // NFTA_SET_ELEM_KEY
    let mut elems = Vec::new();
    nested(&mut elems, 1, &k); // NFTA_LIST_ELEM
    nested(&mut m, 3, &elems); // NFTA_SET_ELEM_LIST_ELEMENTS
    (
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM,
        NLM_F_CREATE,
        m,
    )
}

const NFPROTO_INET: u8 = 1;

/// The rules, one per base chain and side, that set nftrace on packets
/// to `to` and on their replies (from `to`); one more per port of
/// `to.vxlan` for the VXLAN packets that carry them.
fn rule_messages(name: &str, to: &Followed) -> Vec<(u16, u16, Vec<u8>)> {
    rules_and_vxlan_rules(name, to.vxlan, |side, port| match port {
        None => trace_rule(to, side),
        Some(p) => vxlan_rule(to, side, p),
    })
}

/// [`rules_per_chain_and_side`] of `exprs(side, None)`, and of
/// `exprs(side, Some(port))` for each port of `vxlan`.
fn rules_and_vxlan_rules(
    name: &str,
    vxlan: VxlanPorts,
    exprs: impl Fn(Side, Option<u16>) -> Vec<u8>,
) -> Vec<(u16, u16, Vec<u8>)> {
    let ports = std::iter::once(None).chain(vxlan.ports().map(Some));
    ports
        .flat_map(|port| rules_per_chain_and_side(name, |side| exprs(side, port)))
        .collect()
}

/// The usual UDP ports of VXLAN: IANA's and the Linux default (flannel's,
/// Cilium's).
pub const VXLAN_PORTS: [u16; 2] = [4789, 8472];

/// Where a VXLAN packet's inner headers are, from its UDP header: UDP
/// (8 bytes), the VXLAN header (8), the inner Ethernet header (14, its
/// type at 12), then the inner IP header (RFC 7348 section 5).
const VXLAN_INNER_ETH: u32 = 16;
const VXLAN_INNER_IP: u32 = VXLAN_INNER_ETH + 14;

/// The inner IP header's protocol field (IPv4's protocol, IPv6's next
/// header) and its length without options: where the inner ports are.
fn inner_ip(v6: bool) -> (u32, u32) {
    if v6 { (6, 40) } else { (9, 20) }
}

/// The expressions of a VXLAN rule: `meta l4proto udp th dport PORT
/// @th,ETHERTYPE == ipv4 @th,INNER_DADDR == A [@th,INNER_PROTO == P
/// @th,INNER_DPORT == N] limit ... meta nftrace set 1`: the outer packet
/// of a followed one, whatever the outer addresses (the source port is
/// the inner flow's hash, vxlan_xmit_one()). The inner IPv4 header is
/// taken to be 20 bytes (no options), as the inner port's offset needs.
fn vxlan_rule(target: &Followed, side: Side, vxlan_port: u16) -> Vec<u8> {
    const TH: u32 = 2; // NFT_PAYLOAD_TRANSPORT_HEADER
    let v6 = target.addr.is_ipv6();
    let (_, addr_off, port_off) = side.offsets(v6);
    let (proto_off, hdr) = inner_ip(v6);
    let mut e = Exprs::default();
    e.vxlan_inner(vxlan_port, v6);
    e.addr_eq(TH, VXLAN_INNER_IP + addr_off, target.addr, target.prefix);
    if let Some(p) = target.l4proto {
        e.payload(TH, VXLAN_INNER_IP + proto_off, 1, 1);
        e.cmp_eq(1, &[p]);
    }
    if let Some(port) = target.port {
        e.payload(TH, VXLAN_INNER_IP + hdr + port_off, 2, 1);
        e.cmp_eq(1, &port.to_be_bytes());
    }
    e.trace_limited();
    e.0
}

/// NFT_MSG_DELRULE of every rule of `chain` in table `name` (no handle:
/// nft_delrule_by_chain()).
fn flush_chain(name: &str, chain: &str) -> (u16, u16, Vec<u8>) {
    let mut m = nfgen(NFPROTO_INET);
    put_attr(&mut m, 1, &nul(name)); // NFTA_RULE_TABLE
    put_attr(&mut m, 2, &nul(chain)); // NFTA_RULE_CHAIN
    ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELRULE, 0, m)
}

/// NFT_MSG_NEWRULE appending, to each base chain of table `name`, the
/// rule `exprs` gives for each side.
fn rules_per_chain_and_side(
    name: &str,
    exprs: impl Fn(Side) -> Vec<u8>,
) -> Vec<(u16, u16, Vec<u8>)> {
    let mut v = Vec::new();
    for (chain, _) in CHAINS {
        for side in [Side::Dst, Side::Src] {
            let mut r = nfgen(NFPROTO_INET);
            put_attr(&mut r, 1, &nul(name)); // NFTA_RULE_TABLE
            put_attr(&mut r, 2, &nul(chain)); // NFTA_RULE_CHAIN
            nested(&mut r, 4, &exprs(side)); // NFTA_RULE_EXPRESSIONS
            v.push((
                (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE,
                NLM_F_CREATE | NLM_F_APPEND,
                r,
            ));
        }
    }
    v
}

/// Which end of a packet a trace rule matches: the followed address as
/// destination (requests), or as source (their replies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Dst,
    Src,
}

impl Side {
    /// Where this side's address and port are: the NFPROTO_* the rule
    /// checks first, the address's offset in the network header (IPv4:
    /// saddr 12, daddr 16; IPv6: saddr 8, daddr 24) and the port's in the
    /// transport header (sport 0, dport 2).
    fn offsets(self, v6: bool) -> (u8, u32, u32) {
        match (v6, self) {
            (false, Side::Dst) => (2, 16, 2),
            (false, Side::Src) => (2, 12, 0),
            (true, Side::Dst) => (10, 24, 2),
            (true, Side::Src) => (10, 8, 0),
        }
    }
}

/// The message that adds table `inet name` with `flags`.
fn add_table(name: &str, flags: u32) -> (u16, u16, Vec<u8>) {
    let mut t = nfgen(1);
    put_attr(&mut t, 1, &nul(name)); // NFTA_TABLE_NAME
    be32_attr(&mut t, 2, flags); // NFTA_TABLE_FLAGS
    (
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE,
        NLM_F_CREATE,
        t,
    )
}

/// Whether nftrace can be set up in this thread's namespace (`tracer
/// doctor`): a table of ours is added and deleted at once, and the trace
/// group subscribed to. Ok(true) when the kernel took the owner flag.
pub fn probe() -> Result<bool, NfTraceError> {
    let ctl = netlink::netfilter_socket().ok_or(NfTraceError::Socket)?;
    let table = table_name();
    let failed = |e: i32| NfTraceError::Table {
        table: table.clone(),
        err: std::io::Error::from_raw_os_error(e),
    };
    let owner = match netlink::nft_batch(&ctl, &[add_table(&table, NFT_TABLE_F_OWNER)]) {
        Ok(()) => true,
        Err(e) if e == libc::EOPNOTSUPP || e == libc::EINVAL => {
            let ctl = netlink::netfilter_socket().ok_or(NfTraceError::Socket)?;
            netlink::nft_batch(&ctl, &[add_table(&table, 0)]).map_err(failed)?;
            let _ = netlink::nft_batch(&ctl, &[del_table(&table)]);
            return netlink::subscribe(libc::NETLINK_NETFILTER, &[NFNLGRP_NFTRACE])
                .map(|_| false)
                .ok_or(NfTraceError::Subscribe);
        }
        Err(e) => return Err(failed(e)),
    };
    let _ = netlink::nft_batch(&ctl, &[del_table(&table)]);
    netlink::subscribe(libc::NETLINK_NETFILTER, &[NFNLGRP_NFTRACE])
        .ok_or(NfTraceError::Subscribe)?;
    Ok(owner)
}

/// The message that deletes table `name`.
fn del_table(name: &str) -> (u16, u16, Vec<u8>) {
    let mut t = nfgen(1);
    put_attr(&mut t, 1, &nul(name));
    ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE, 0, t)
}

/// Delete every table named `tracer_*` of this thread's namespace
/// (`tracer cleanup`: tables a tracer killed on a pre-5.12 kernel left);
/// the names deleted. Tables `keep` says are a live tracer's are left.
pub fn delete_left_tables(keep: &dyn Fn(&str) -> bool) -> Vec<String> {
    let names: Vec<String> = tables()
        .into_iter()
        .filter(|(family, _)| *family == 1)
        .map(|(_, n)| n)
        .collect();
    let Some(sock) = netlink::netfilter_socket() else {
        return Vec::new();
    };
    names
        .into_iter()
        .filter(|n| n.starts_with(TABLE_PREFIX) && !keep(n))
        // A live tracer's table is owned by its socket: EPERM.
        .filter(|n| netlink::nft_batch(&sock, &[del_table(n)]).is_ok())
        .collect()
}

/// The expressions of an endpoint rule: `meta nfproto ipv4 ip daddr .
/// meta l4proto . th dport @endpoints limit rate 250/second burst 250
/// packets meta nftrace set 1` (`saddr . ... . th sport` for
/// [`Side::Src`]; ip6 for IPv6). With `vxlan` (a port), the same of the
/// inner headers of a VXLAN packet on that port, as in [`vxlan_rule`].
fn endpoint_rule(v6: bool, side: Side, vxlan: Option<u16>) -> Vec<u8> {
    // NFT_REG32_00.. : the key's registers, 4 bytes each.
    const REG32_00: u32 = 8;
    let (nfproto, off, port_off) = side.offsets(v6);
    let len = if v6 { 16 } else { 4 };
    let proto_reg = REG32_00 + len / 4;
    let mut e = Exprs::default();
    if let Some(port) = vxlan {
        const TH: u32 = 2; // NFT_PAYLOAD_TRANSPORT_HEADER
        let (proto_off, hdr) = inner_ip(v6);
        e.vxlan_inner(port, v6);
        e.payload(TH, VXLAN_INNER_IP + off, len, REG32_00);
        // A load shorter than its registers zeroes the rest of the last
        // one (nft_payload_eval()), as the key's padding needs.
        e.payload(TH, VXLAN_INNER_IP + proto_off, 1, proto_reg);
        e.payload(TH, VXLAN_INNER_IP + hdr + port_off, 2, proto_reg + 1);
    } else {
        e.meta_load(15, 1); // NFT_META_NFPROTO
        e.cmp_eq(1, &[nfproto]);
        e.payload(1, off, len, REG32_00); // NFT_PAYLOAD_NETWORK_HEADER
        e.meta_load(16, proto_reg); // NFT_META_L4PROTO
        e.payload(2, port_off, 2, proto_reg + 1); // NFT_PAYLOAD_TRANSPORT_HEADER
    }
    let mut lookup = Vec::new();
    put_attr(&mut lookup, 1, &nul(ENDPOINTS)); // NFTA_LOOKUP_SET
    be32_attr(&mut lookup, 2, REG32_00); // NFTA_LOOKUP_SREG
    be32_attr(&mut lookup, 4, 1); // NFTA_LOOKUP_SET_ID
    e.expr("lookup", lookup);
    e.trace_limited();
    e.0
}

/// A rule's expressions (NFTA_RULE_EXPRESSIONS), as they are added.
#[derive(Default)]
struct Exprs(Vec<u8>);

impl Exprs {
    fn expr(&mut self, name: &str, data: Vec<u8>) {
        let mut e = Vec::new();
        put_attr(&mut e, 1, &nul(name)); // NFTA_EXPR_NAME
        nested(&mut e, 2, &data); // NFTA_EXPR_DATA
        nested(&mut self.0, 1, &e); // NFTA_LIST_ELEM
    }

    fn meta_load(&mut self, key: u32, dreg: u32) {
        let mut d = Vec::new();
        be32_attr(&mut d, 1, dreg); // NFTA_META_DREG
        be32_attr(&mut d, 2, key); // NFTA_META_KEY
        self.expr("meta", d);
    }

    fn cmp_eq(&mut self, sreg: u32, value: &[u8]) {
        let mut d = Vec::new();
        be32_attr(&mut d, 1, sreg); // NFTA_CMP_SREG
        be32_attr(&mut d, 2, 0); // NFTA_CMP_OP: NFT_CMP_EQ
        let mut data = Vec::new();
        put_attr(&mut data, 1, value); // NFTA_DATA_VALUE
        nested(&mut d, 3, &data); // NFTA_CMP_DATA
        self.expr("cmp", d);
    }

    /// A UDP packet to VXLAN port `port` whose inner frame is IPv4 (IPv6
    /// with `v6`): `meta l4proto udp th dport PORT @th,ETHERTYPE == T`.
    fn vxlan_inner(&mut self, port: u16, v6: bool) {
        const TH: u32 = 2; // NFT_PAYLOAD_TRANSPORT_HEADER
        self.meta_load(16, 1); // NFT_META_L4PROTO
        self.cmp_eq(1, &[17]);
        self.payload(TH, 2, 2, 1);
        self.cmp_eq(1, &port.to_be_bytes());
        self.payload(TH, VXLAN_INNER_ETH + 12, 2, 1);
        self.cmp_eq(1, &(if v6 { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    }

    /// `addr` (its first `prefix` bits) at `offset` of payload `base`,
    /// through register 1: a load, a mask for a prefix, a compare.
    fn addr_eq(&mut self, base: u32, offset: u32, addr: IpAddr, prefix: u8) {
        let addr = match addr {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        self.payload(base, offset, addr.len() as u32, 1);
        let bits = addr.len() * 8;
        let prefix = usize::from(prefix).min(bits);
        let mask: Vec<u8> = (0..addr.len())
            .map(|i| {
                let have = prefix.saturating_sub(i * 8).min(8);
                if have == 0 { 0 } else { 0xffu8 << (8 - have) }
            })
            .collect();
        if prefix < bits {
            let mut d = Vec::new();
            be32_attr(&mut d, 1, 1); // NFTA_BITWISE_SREG
            be32_attr(&mut d, 2, 1); // NFTA_BITWISE_DREG
            be32_attr(&mut d, 3, addr.len() as u32); // NFTA_BITWISE_LEN
            let mut m = Vec::new();
            put_attr(&mut m, 1, &mask);
            nested(&mut d, 4, &m); // NFTA_BITWISE_MASK
            let mut x = Vec::new();
            put_attr(&mut x, 1, &vec![0u8; addr.len()]);
            nested(&mut d, 5, &x); // NFTA_BITWISE_XOR
            self.expr("bitwise", d);
        }
        let masked: Vec<u8> = addr.iter().zip(&mask).map(|(a, m)| a & m).collect();
        self.cmp_eq(1, &masked);
    }

    fn payload(&mut self, base: u32, offset: u32, len: u32, dreg: u32) {
        let mut d = Vec::new();
        be32_attr(&mut d, 1, dreg); // NFTA_PAYLOAD_DREG
        be32_attr(&mut d, 2, base); // NFTA_PAYLOAD_BASE
        be32_attr(&mut d, 3, offset); // NFTA_PAYLOAD_OFFSET
        be32_attr(&mut d, 4, len); // NFTA_PAYLOAD_LEN
        self.expr("payload", d);
    }

    /// `limit rate 250/second burst 250 packets meta nftrace set 1`. At
    /// most TRACE_RATE matching packets a second (after a burst as large)
    /// get the trace bit: each traced packet costs the kernel a netlink
    /// message per rule and chain it meets (nft_trace_notify()), which at
    /// line rate took followed UDP from 0.85 to 0.22 of its baseline rate
    /// in the bench. A drop repeats for every packet of a failing flow, so
    /// the first ones name its rule.
    fn trace_limited(&mut self) {
        let mut lim = Vec::new();
        put_attr(&mut lim, 1, &TRACE_RATE.to_be_bytes()); // NFTA_LIMIT_RATE
        put_attr(&mut lim, 2, &1u64.to_be_bytes()); // NFTA_LIMIT_UNIT: per second
        be32_attr(&mut lim, 3, TRACE_RATE as u32); // NFTA_LIMIT_BURST
        be32_attr(&mut lim, 4, 0); // NFTA_LIMIT_TYPE: NFT_LIMIT_PKTS
        self.expr("limit", lim);
        let mut imm = Vec::new();
        be32_attr(&mut imm, 1, 1); // NFTA_IMMEDIATE_DREG
        let mut data = Vec::new();
        put_attr(&mut data, 1, &[1]);
        nested(&mut imm, 2, &data); // NFTA_IMMEDIATE_DATA
        self.expr("immediate", imm);
        let mut set = Vec::new();
        be32_attr(&mut set, 2, 12); // NFTA_META_KEY: NFT_META_NFTRACE
        be32_attr(&mut set, 3, 1); // NFTA_META_SREG
        self.expr("meta", set);
    }
}

/// Followed packets per second (and burst) that get the trace bit.
const TRACE_RATE: u64 = 250;

/// The expressions of the rule: `meta nfproto ipv4 ip daddr A [th dport
/// P] limit rate 250/second burst 250 packets meta nftrace set 1` (ip6
/// for IPv6; a prefix is masked); for [`Side::Src`], `ip saddr A [th
/// sport P]`.
fn trace_rule(target: &Followed, side: Side) -> Vec<u8> {
    let (nfproto, off, port_off) = side.offsets(target.addr.is_ipv6());
    let mut e = Exprs::default();
    e.meta_load(15, 1); // NFT_META_NFPROTO
    e.cmp_eq(1, &[nfproto]);
    e.addr_eq(1, off, target.addr, target.prefix); // NFT_PAYLOAD_NETWORK_HEADER
    if let Some(p) = target.l4proto {
        e.meta_load(16, 1); // NFT_META_L4PROTO
        e.cmp_eq(1, &[p]);
    }
    if let Some(port) = target.port {
        e.payload(2, port_off, 2, 1); // NFT_PAYLOAD_TRANSPORT_HEADER
        e.cmp_eq(1, &port.to_be_bytes());
    }
    e.trace_limited();
    e.0
}

/// The rules of one chain, by (family, table, chain): read only for the
/// chains a traced packet passed.
pub type ChainRules<'a> = dyn FnMut(u8, &str, &str) -> Vec<NftRule> + 'a;

/// Name the rules of `drops` (traced in this thread's namespace, which
/// the caller entered): the rule text and comment by handle, and the
/// verdict-map element that sent the packet on. `chain_rules` is asked
/// once per chain.
pub fn resolve(drops: &[TraceDrop], chain_rules: &mut ChainRules<'_>) -> Vec<NfTraced> {
    let mut elems: HashMap<(u8, String, String), Vec<SetElem>> = HashMap::new();
    let mut chains: HashMap<(u8, String, String), Vec<NftRule>> = HashMap::new();
    for d in drops {
        let passed = d.via.iter().map(|j| (&j.table, &j.chain));
        for (table, chain) in passed.chain([(&d.table, &d.chain)]) {
            chains
                .entry((d.family, table.clone(), chain.clone()))
                .or_insert_with(|| chain_rules(d.family, table, chain));
        }
    }
    let hooks = nftables::base_chain_hooks();
    drops
        .iter()
        .map(|d| {
            let family = nftables::family_name(d.family);
            let find = |table: &str, chain: &str, handle: u64| {
                chains
                    .get(&(d.family, table.to_string(), chain.to_string()))?
                    .iter()
                    .find(|r| r.family == family && r.handle == handle)
            };
            let rule = (!d.policy)
                .then(|| find(&d.table, &d.chain, d.handle))
                .flatten();
            let verdict = if d.policy {
                format!("policy {}", d.verdict)
            } else {
                rule.and_then(|r| r.verdict.clone())
                    .filter(|v| v == "reject")
                    .unwrap_or_else(|| d.verdict.clone())
            };
            let element = d.via.iter().rev().find_map(|j| {
                let r = find(&j.table, &j.chain, j.handle)?;
                let (fields, map) = vmap_of(&r.text)?;
                let all = elems
                    .entry((d.family, j.table.clone(), map.clone()))
                    .or_insert_with(|| {
                        nftables::set_elements(d.family, &j.table, &map).unwrap_or_default()
                    });
                element_for(&fields, &map, all, &j.verdict, j.tuple.as_ref()?)
            });
            NfTraced {
                tuple: d.tuple,
                family: family.clone(),
                table: d.table.clone(),
                chain: d.chain.clone(),
                handle: d.handle,
                rule: rule.map(|r| r.text.clone()).unwrap_or_default(),
                comment: rule.and_then(|r| r.comment.clone()),
                verdict,
                via: d
                    .via
                    .iter()
                    .map(|j| format!("{}: {}", j.chain, j.verdict))
                    .collect(),
                element,
                // The jumps start at the base chain; without any, the
                // drop's own chain is one.
                hook: {
                    let (table, chain) = d
                        .via
                        .first()
                        .map_or((&d.table, &d.chain), |j| (&j.table, &j.chain));
                    hooks
                        .get(&(family.clone(), table.clone(), chain.clone()))
                        .cloned()
                },
            }
        })
        .collect()
}

/// A verdict-map rule's key fields and map name: `ip daddr . meta
/// l4proto . th dport vmap @service-ips` gives (["ip daddr", "meta
/// l4proto", "th dport"], "service-ips").
fn vmap_of(text: &str) -> Option<(Vec<String>, String)> {
    let (lhs, rest) = text.split_once(" vmap @")?;
    let map: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
    let mut fields: Vec<String> = lhs.split(" . ").map(|f| f.trim().to_string()).collect();
    // The first field is the last two words before the first " . ".
    if let Some(first) = fields.first_mut() {
        let words: Vec<&str> = first.split_whitespace().collect();
        *first = words[words.len().saturating_sub(2)..].join(" ");
    }
    Some((fields, map))
}

/// A key field: its width in the key (registers are 4-byte units) and
/// the packet's value of it.
fn field_bytes(field: &str, t: &TracedTuple) -> Option<Vec<u8>> {
    let word = field.rsplit(' ').next()?;
    let mut v = match word {
        "daddr" | "saddr" => {
            let a = if word == "daddr" { t.dst } else { t.src };
            match a {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            }
        }
        "dport" => t.dport.to_be_bytes().to_vec(),
        "sport" => t.sport.to_be_bytes().to_vec(),
        "l4proto" | "protocol" if field.starts_with("meta") || field.starts_with("ip") => {
            vec![t.proto]
        }
        "nexthdr" => vec![t.proto],
        _ => return None,
    };
    v.resize(v.len().div_ceil(4) * 4, 0);
    Some(v)
}

/// The element of `map` the packet `t` matched, among those whose verdict
/// is the one traced: by key when every field is known, else the only one.
fn element_for(
    fields: &[String],
    map: &str,
    elems: &[SetElem],
    verdict: &str,
    t: &TracedTuple,
) -> Option<MapElement> {
    let same: Vec<&SetElem> = elems
        .iter()
        .filter(|e| e.verdict.as_deref() == Some(verdict))
        .collect();
    let key: Option<Vec<u8>> = fields
        .iter()
        .map(|f| field_bytes(f, t))
        .collect::<Option<Vec<Vec<u8>>>>()
        .map(|v| v.concat());
    let e = match &key {
        Some(k) => same.iter().find(|e| &e.key == k).copied(),
        None if same.len() == 1 => Some(same[0]),
        None => None,
    }?;
    Some(MapElement {
        map: format!("@{map}"),
        key: render_key(fields, &e.key),
        verdict: verdict.to_string(),
        comment: e.comment.clone(),
    })
}

/// A key as nft prints it, field by field (hex for fields it cannot
/// type).
fn render_key(fields: &[String], mut key: &[u8]) -> String {
    let mut parts = Vec::new();
    for f in fields {
        let word = f.rsplit(' ').next().unwrap_or("");
        let v6 = f.starts_with("ip6");
        let width = match word {
            "daddr" | "saddr" if v6 => 16,
            _ => 4,
        };
        let Some(v) = key.get(..width) else { break };
        key = &key[width..];
        parts.push(match word {
            "daddr" | "saddr" if v6 => {
                IpAddr::from(<[u8; 16]>::try_from(v).unwrap_or([0; 16])).to_string()
            }
            "daddr" | "saddr" => IpAddr::from([v[0], v[1], v[2], v[3]]).to_string(),
            "dport" | "sport" => u16::from_be_bytes([v[0], v[1]]).to_string(),
            "l4proto" | "protocol" | "nexthdr" => nftables::proto_name(v[0]),
            _ => nftables::hex(v),
        });
    }
    parts.join(" . ")
}

#[cfg(test)]
mod tests;
