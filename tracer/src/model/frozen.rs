//! Quiet flows, packed: a flow with no event for a while is kept as one
//! byte string instead of a `Flow` with a vector of `Hop`s, and unpacked
//! when an event or a reader needs it (flow.rs `Slot`).
//!
//! A DNS-like flow (route lookup, two veths, the reply back, 6 hops) takes
//! ~1.1 KiB as a `Flow`: 72 bytes a hop, a boxed `FibData` per route
//! lookup, an `Arc` per distinct tuple. Packed it takes ~150 bytes: names
//! become small numbers (`Codec` keeps each once), times are deltas, the
//! skb address, place and tuple are written only when they change, and a
//! hop's tuple is mostly "the key" or "the key reversed". This is what lets
//! 100k flows fit the 64 MiB budget of issue 5.
//!
//! Layout: a fixed header the table reads without unpacking (`last_ns`,
//! `printed`, `printed_at`, `id`, little-endian u64 each), then LEB128
//! varints for the rest (signed values zigzag-encoded).

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
};

use foldhash::HashMap;
use tracer_common::Hook;

use crate::{
    model::drop_reason::DropReason,
    model::event::Tuple,
    model::flow::{Flow, NatBy},
    model::hop::{
        DropData, FibData, FuncBackend, FuncData, Hop, HopData, NeighData, NeighEvent, Nud,
        ReasonFrom, SockAddrData, SockCall, SockData, TcpState, XdpAction, XdpData,
    },
    model::intern::Name,
};

/// Bytes of the fixed header.
pub const HEADER: usize = 32;

/// Where a hop was: namespace name and inode, device name and ifindex.
type Place = (Name, u32, Name, u32);

/// Names and places as numbers, both ways. They are few on a node
/// (namespaces, devices, drop reasons, code locations), and kept for the
/// whole run.
#[derive(Debug, Default)]
pub struct Codec {
    names: Numbered<Name>,
    reasons: Numbered<DropReason>,
    places: Numbered<Place>,
}

/// Values numbered in the order first seen.
#[derive(Debug)]
struct Numbered<T> {
    list: Vec<T>,
    ids: HashMap<T, u32>,
}

impl<T> Default for Numbered<T> {
    fn default() -> Self {
        Numbered {
            list: Vec::new(),
            ids: HashMap::default(),
        }
    }
}

impl<T: Clone + Eq + std::hash::Hash + Default> Numbered<T> {
    fn id(&mut self, v: &T) -> u64 {
        if let Some(id) = self.ids.get(v) {
            return *id as u64;
        }
        let id = self.list.len() as u32;
        self.list.push(v.clone());
        self.ids.insert(v.clone(), id);
        id as u64
    }

    /// The value numbered `id` (a default one for a number never given:
    /// the bytes never leave the process, so that would be a bug).
    fn get(&self, id: u64) -> T {
        self.list.get(id as usize).cloned().unwrap_or_default()
    }
}

/// The header fields, read without unpacking.
pub fn last_ns(b: &[u8]) -> u64 {
    u64_at(b, 0)
}
pub fn printed(b: &[u8]) -> u64 {
    u64_at(b, 8)
}
pub fn printed_at(b: &[u8]) -> u64 {
    u64_at(b, 16)
}
pub fn id(b: &[u8]) -> u64 {
    u64_at(b, 24)
}

/// Set the printed verdict of a packed flow in place.
pub fn set_printed(b: &mut [u8], key: u64, at: u64) {
    b[8..16].copy_from_slice(&key.to_le_bytes());
    b[16..24].copy_from_slice(&at.to_le_bytes());
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The request tuple of a packed flow (the first field after the header).
pub fn key(b: &[u8]) -> Tuple {
    let mut r = Reader { b, at: HEADER };
    r.tuple()
}

/// The request tuple and the translated one.
pub fn tuples(b: &[u8]) -> (Tuple, Option<Tuple>) {
    let mut r = Reader { b, at: HEADER };
    let key = r.tuple();
    (key, (r.byte() == 1).then(|| r.tuple()))
}

// Hop flags: the low 5 bits are the hook.
const REPLY: u8 = 1 << 5;
const SAME_SKB: u8 = 1 << 6;
const SAME_PLACE: u8 = 1 << 7;

// How a hop's tuple is written (the low 3 bits of its second byte).
const T_KEY: u8 = 0;
const T_KEY_REV: u8 = 1;
const T_TR: u8 = 2;
const T_TR_REV: u8 = 3;
const T_SAME: u8 = 4;
const T_INLINE: u8 = 5;
/// The fields that differ from the key (or the key reversed), after a
/// mask of those equal: a route lookup's tuple is the key's addresses
/// without ports.
const T_DIFF: u8 = 6;
// The same byte's high bit: the hop has no skb (route lookups before the
// packet exists, socket state).
const SKB_ZERO: u8 = 1 << 7;

// T_DIFF mask bits.
const D_SRC: u8 = 1;
const D_SPORT: u8 = 2;
const D_DST: u8 = 4;
const D_DPORT: u8 = 8;
const D_PROTO: u8 = 16;
const D_REVERSED: u8 = 32;

/// The T_DIFF mask of `t` against `base`.
fn diff_mask(t: &Tuple, base: &Tuple) -> u8 {
    let mut m = 0;
    if t.src == base.src {
        m |= D_SRC;
    }
    if t.sport == base.sport {
        m |= D_SPORT;
    }
    if t.dst == base.dst {
        m |= D_DST;
    }
    if t.dport == base.dport {
        m |= D_DPORT;
    }
    if t.proto == base.proto {
        m |= D_PROTO;
    }
    m
}

impl Codec {
    fn name(&mut self, n: &Name) -> u64 {
        self.names.id(n)
    }

    #[expect(clippy::ref_option, reason = "called on the field as the hop holds it")]
    fn opt_name(&mut self, n: &Option<Name>) -> u64 {
        n.as_ref().map_or(0, |n| self.name(n) + 1)
    }

    fn place(&mut self, h: &Hop) -> u64 {
        self.places
            .id(&(h.netns.clone(), h.netns_inode, h.dev.clone(), h.ifindex))
    }

    /// Pack a flow.
    pub fn pack(&mut self, f: &Flow) -> Box<[u8]> {
        let mut w = Vec::with_capacity(HEADER + 48 + f.hops.len() * 16);
        for v in [f.last_ns, f.printed, f.printed_at, f.id] {
            w.extend_from_slice(&v.to_le_bytes());
        }
        put_tuple(&mut w, &f.key);
        match &f.translated {
            Some(t) => {
                w.push(1);
                put_tuple(&mut w, t);
            }
            None => w.push(0),
        }
        w.push(match f.nat_by {
            None => 0,
            Some(NatBy::Netfilter) => 1,
            Some(NatBy::Ipvs) => 2,
            Some(NatBy::Bpf) => 3,
            Some(NatBy::Socket) => 4,
        });
        put(&mut w, u64::from(f.outer_port));
        for v in [f.hops_truncated, f.packets, f.replies, f.counted] {
            put(&mut w, v as u64);
        }
        put(&mut w, f.first_ns);
        put(&mut w, f.hops.len() as u64);
        let key_rev = f.key.reversed();
        let tr_rev = f.translated.map(|t| t.reversed());
        let mut prev: Option<&Hop> = None;
        let mut prev_ts = f.first_ns;
        for h in &f.hops {
            let same_skb = prev.is_some_and(|p| p.skb == h.skb);
            let same_place = prev.is_some_and(|p| {
                p.netns == h.netns
                    && p.netns_inode == h.netns_inode
                    && p.dev == h.dev
                    && p.ifindex == h.ifindex
            });
            let mut flags = h.hook as u8 & 0x1f;
            if h.dir == crate::model::hop::Dir::Reply {
                flags |= REPLY;
            }
            if same_skb {
                flags |= SAME_SKB;
            }
            if same_place {
                flags |= SAME_PLACE;
            }
            w.push(flags);
            put_signed(&mut w, h.ts_ns.wrapping_sub(prev_ts) as i64);
            prev_ts = h.ts_ns;
            let t = &*h.tuple;
            let (kind, diff) = if prev.is_some_and(|p| *p.tuple == *t) {
                (T_SAME, None)
            } else if *t == f.key {
                (T_KEY, None)
            } else if *t == key_rev {
                (T_KEY_REV, None)
            } else if f.translated.as_ref() == Some(t) {
                (T_TR, None)
            } else if tr_rev.as_ref() == Some(t) {
                (T_TR_REV, None)
            } else {
                let (m, mr) = (diff_mask(t, &f.key), diff_mask(t, &key_rev));
                let both = D_SRC | D_DST;
                if mr & both == both && mr.count_ones() > m.count_ones() {
                    (T_DIFF, Some(mr | D_REVERSED))
                } else if m & both == both {
                    (T_DIFF, Some(m))
                } else {
                    (T_INLINE, None)
                }
            };
            let skb_zero = !same_skb && h.skb == 0;
            w.push(kind | if skb_zero { SKB_ZERO } else { 0 });
            if !same_skb && !skb_zero {
                w.extend_from_slice(&h.skb.to_le_bytes());
            }
            if !same_place {
                let p = self.place(h);
                put(&mut w, p);
            }
            match (kind, diff) {
                (T_INLINE, _) => put_tuple(&mut w, t),
                (T_DIFF, Some(m)) => {
                    w.push(m);
                    if m & D_SRC == 0 {
                        put_ip(&mut w, &t.src);
                    }
                    if m & D_SPORT == 0 {
                        put(&mut w, t.sport as u64);
                    }
                    if m & D_DST == 0 {
                        put_ip(&mut w, &t.dst);
                    }
                    if m & D_DPORT == 0 {
                        put(&mut w, t.dport as u64);
                    }
                    if m & D_PROTO == 0 {
                        w.push(t.proto);
                    }
                }
                _ => {}
            }
            self.put_data(&mut w, &h.data);
            prev = Some(h);
        }
        // The DNS log (flows to port 53 only) as JSON: a few queries.
        match f.dns.as_deref().and_then(|d| serde_json::to_vec(d).ok()) {
            Some(j) => {
                w.push(1);
                put(&mut w, j.len() as u64);
                w.extend_from_slice(&j);
            }
            None => w.push(0),
        }
        w.into_boxed_slice()
    }

    fn put_data(&mut self, w: &mut Vec<u8>, d: &HopData) {
        match d {
            HopData::Packet {
                tcp_flags,
                len,
                mark,
            } => {
                w.push(0);
                w.push(*tcp_flags);
                put(w, *len as u64);
                put(w, *mark as u64);
            }
            HopData::Drop(d) => {
                w.push(1);
                let (r, l) = (self.reasons.id(&d.reason), self.name(&d.location));
                put(w, r);
                // The reason's origin above the 32 bits of its code.
                let from = match d.reason_from {
                    ReasonFrom::Kernel => 0u64,
                    ReasonFrom::Location => 1,
                    ReasonFrom::Unknown => 2,
                    ReasonFrom::Site => 3,
                };
                put(w, u64::from(d.reason_code) | from << 32);
                put(w, l);
            }
            HopData::Consume { location } => {
                w.push(2);
                let l = self.name(location);
                put(w, l);
            }
            HopData::IcmpSend {
                icmp_type,
                icmp_code,
                desc,
            } => {
                w.push(3);
                w.push(*icmp_type);
                w.push(*icmp_code);
                let d = self.name(desc);
                put(w, d);
            }
            HopData::TcpReset { reason } => {
                w.push(4);
                let r = self.opt_name(reason);
                put(w, r);
            }
            HopData::Fib(f) => {
                w.push(5);
                put(w, f.table as u64);
                put_signed(w, f.err as i64);
                put(w, f.oif as u64);
                put(w, f.iif as u64);
                let d = self.name(&f.nh_dev);
                put(w, d);
                put(w, f.nh_ifindex as u64);
                put_opt_ip(w, &f.gw);
                w.push(f.nh_scope);
                w.push(f.rtype);
            }
            HopData::Sock(s) => {
                w.push(6);
                w.push(s.old_state as u8);
                w.push(s.new_state as u8);
            }
            HopData::SockRecv => w.push(7),
            HopData::SockQueue => w.push(8),
            HopData::Func(f) => {
                w.push(9);
                let v = [
                    self.name(&f.func),
                    self.opt_name(&f.nf_hook),
                    self.opt_name(&f.table),
                    self.opt_name(&f.chain),
                ];
                for x in v {
                    put(w, x);
                }
                w.push(f.backend as u8);
                match f.ret {
                    Some(r) => {
                        w.push(1);
                        put_signed(w, r);
                    }
                    None => w.push(0),
                }
                put_str(w, &f.detail);
            }
            HopData::SockAddr(a) => {
                w.push(11);
                w.push(a.call as u8);
                put_ip(w, &a.asked);
                put(w, u64::from(a.asked_port));
                put(w, u64::from(a.pid));
                put_str(w, &a.comm);
                put(w, a.cgroup_id);
            }
            HopData::Neigh(n) => put_neigh(w, n),
            HopData::Xdp(x) => {
                w.push(12);
                w.push(x.action as u8);
                put(w, u64::from(x.prog_id));
                put(w, u64::from(x.to_ifindex));
                put_signed(w, i64::from(x.err));
                put(w, u64::from(x.map_id));
                put(w, u64::from(x.map_key));
            }
        }
    }

    /// Unpack a flow packed by `pack`.
    pub fn unpack(&self, b: &[u8]) -> Flow {
        let mut r = Reader { b, at: HEADER };
        let key = r.tuple();
        let translated = (r.byte() == 1).then(|| r.tuple());
        let nat_by = match r.byte() {
            1 => Some(NatBy::Netfilter),
            2 => Some(NatBy::Ipvs),
            3 => Some(NatBy::Bpf),
            4 => Some(NatBy::Socket),
            _ => None,
        };
        let outer_port = r.get() as u16;
        let hops_truncated = r.get() as u32;
        let packets = r.get() as u32;
        let replies = r.get() as u32;
        let counted = r.get() as u32;
        let first_ns = r.get();
        let n = r.get() as usize;
        // One Arc per distinct tuple, shared by the hops that carry it (as
        // Flow::share does).
        let key_a = Arc::new(key);
        let key_rev = Arc::new(key.reversed());
        let tr_a = translated.map(Arc::new);
        let tr_rev = translated.map(|t| Arc::new(t.reversed()));
        let mut hops: Vec<Hop> = Vec::with_capacity(n);
        let mut ts = first_ns;
        for _ in 0..n {
            let flags = r.byte();
            let hook = Hook::from_u8(flags & 0x1f).unwrap_or(Hook::Xmit);
            let dir = if flags & REPLY != 0 {
                crate::model::hop::Dir::Reply
            } else {
                crate::model::hop::Dir::Request
            };
            ts = ts.wrapping_add(r.signed() as u64);
            let prev = hops.last();
            let kind = r.byte();
            let skb = match prev {
                Some(p) if flags & SAME_SKB != 0 => p.skb,
                _ if kind & SKB_ZERO != 0 => 0,
                _ => r.u64_le(),
            };
            let (netns, netns_inode, dev, ifindex) = match prev {
                Some(p) if flags & SAME_PLACE != 0 => {
                    (p.netns.clone(), p.netns_inode, p.dev.clone(), p.ifindex)
                }
                _ => self.places.get(r.get()),
            };
            let tuple = match kind & 0x7 {
                T_KEY => key_a.clone(),
                T_KEY_REV => key_rev.clone(),
                T_TR => tr_a.clone().unwrap_or_else(|| key_a.clone()),
                T_TR_REV => tr_rev.clone().unwrap_or_else(|| key_rev.clone()),
                T_SAME => prev.map_or_else(|| key_a.clone(), |p| p.tuple.clone()),
                T_DIFF => {
                    let m = r.byte();
                    let base = if m & D_REVERSED != 0 { *key_rev } else { key };
                    let src = if m & D_SRC != 0 { base.src } else { r.ip() };
                    let sport = if m & D_SPORT != 0 {
                        base.sport
                    } else {
                        r.get() as u16
                    };
                    let dst = if m & D_DST != 0 { base.dst } else { r.ip() };
                    let dport = if m & D_DPORT != 0 {
                        base.dport
                    } else {
                        r.get() as u16
                    };
                    let proto = if m & D_PROTO != 0 {
                        base.proto
                    } else {
                        r.byte()
                    };
                    Arc::new(Tuple {
                        src,
                        sport,
                        dst,
                        dport,
                        proto,
                    })
                }
                _ => Arc::new(r.tuple()),
            };
            let data = self.data(&mut r);
            hops.push(Hop {
                ts_ns: ts,
                hook,
                netns,
                netns_inode,
                dev,
                ifindex,
                dir,
                tuple,
                skb,
                data,
            });
        }
        let dns = (r.byte() == 1)
            .then(|| {
                let n = r.get() as usize;
                let j = r.b.get(r.at..r.at + n)?;
                r.at += n;
                serde_json::from_slice(j).ok().map(Box::new)
            })
            .flatten();
        Flow {
            id: id(b),
            key,
            translated,
            nat_by,
            outer_port,
            hops,
            hops_truncated,
            packets,
            replies,
            counted,
            first_ns,
            last_ns: last_ns(b),
            printed: printed(b),
            printed_at: printed_at(b),
            dns,
        }
    }

    fn name_of(&self, id: u64) -> Name {
        self.names.get(id)
    }

    fn opt_name_of(&self, id: u64) -> Option<Name> {
        (id != 0).then(|| self.name_of(id - 1))
    }

    fn data(&self, r: &mut Reader) -> HopData {
        match r.byte() {
            0 => {
                let tcp_flags = r.byte();
                let len = r.get() as u32;
                HopData::Packet {
                    tcp_flags,
                    len,
                    mark: r.get() as u32,
                }
            }
            1 => {
                let reason = self.reasons.get(r.get());
                let code = r.get();
                HopData::Drop(Box::new(DropData {
                    reason,
                    reason_code: code as u32,
                    location: self.name_of(r.get()),
                    reason_from: match code >> 32 {
                        1 => ReasonFrom::Location,
                        2 => ReasonFrom::Unknown,
                        3 => ReasonFrom::Site,
                        _ => ReasonFrom::Kernel,
                    },
                }))
            }
            2 => HopData::Consume {
                location: self.name_of(r.get()),
            },
            3 => {
                let icmp_type = r.byte();
                let icmp_code = r.byte();
                HopData::IcmpSend {
                    icmp_type,
                    icmp_code,
                    desc: self.name_of(r.get()),
                }
            }
            4 => HopData::TcpReset {
                reason: self.opt_name_of(r.get()),
            },
            5 => {
                let table = r.get() as u32;
                let err = r.signed() as i32;
                let oif = r.get() as u32;
                let iif = r.get() as u32;
                let nh_dev = self.name_of(r.get());
                let nh_ifindex = r.get() as u32;
                let gw = r.opt_ip();
                let nh_scope = r.byte();
                HopData::Fib(Box::new(FibData {
                    table,
                    err,
                    oif,
                    iif,
                    nh_dev,
                    nh_ifindex,
                    gw,
                    nh_scope,
                    rtype: r.byte(),
                }))
            }
            6 => {
                let old_state = TcpState::of(u32::from(r.byte()));
                HopData::Sock(Box::new(SockData {
                    old_state,
                    new_state: TcpState::of(u32::from(r.byte())),
                }))
            }
            7 => HopData::SockRecv,
            8 => HopData::SockQueue,
            9 => {
                let func = self.name_of(r.get());
                let nf_hook = self.opt_name_of(r.get());
                let table = self.opt_name_of(r.get());
                let chain = self.opt_name_of(r.get());
                let backend = FuncBackend::from_repr(r.byte()).unwrap_or(FuncBackend::Unknown);
                let ret = (r.byte() == 1).then(|| r.signed());
                HopData::Func(Box::new(FuncData {
                    func,
                    backend,
                    ret,
                    nf_hook,
                    table,
                    chain,
                    detail: r.string(),
                }))
            }
            11 => {
                let call = SockCall::from_repr(r.byte()).unwrap_or(SockCall::Connect);
                let asked = r.ip();
                let asked_port = r.get() as u16;
                let pid = r.get() as u32;
                let comm = r.string();
                HopData::SockAddr(Box::new(SockAddrData {
                    call,
                    asked,
                    asked_port,
                    pid,
                    comm,
                    cgroup_id: r.get(),
                }))
            }
            12 => HopData::Xdp(Box::new(XdpData {
                action: XdpAction::from_repr(r.byte()).unwrap_or(XdpAction::Invalid),
                prog_id: r.get() as u32,
                to_ifindex: r.get() as u32,
                err: r.signed() as i32,
                map_id: r.get() as u32,
                map_key: r.get() as u32,
            })),
            _ => HopData::Neigh(Box::new(neigh_of(r))),
        }
    }
}

/// A neighbour hop's data, after its tag 10.
fn put_neigh(w: &mut Vec<u8>, n: &NeighData) {
    w.push(10);
    put_ip(w, &n.addr);
    w.push(n.state.0);
    match n.new_state {
        Some(s) => {
            w.push(1);
            w.push(s.0);
        }
        None => w.push(0),
    }
    w.push(n.event as u8);
    match &n.lladdr {
        Some(l) => {
            w.push(1);
            put_str(w, l);
        }
        None => w.push(0),
    }
    put_signed(w, n.err as i64);
}

/// What [`put_neigh`] wrote.
fn neigh_of(r: &mut Reader) -> NeighData {
    let addr = r.ip();
    let state = Nud(r.byte());
    let new_state = (r.byte() == 1).then(|| Nud(r.byte()));
    let event = NeighEvent::from_repr(r.byte()).unwrap_or(NeighEvent::Created);
    let lladdr = (r.byte() == 1).then(|| r.string());
    NeighData {
        addr,
        state,
        new_state,
        lladdr,
        err: r.signed() as i32,
        event,
    }
}

fn put(w: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        w.push(v as u8 | 0x80);
        v >>= 7;
    }
    w.push(v as u8);
}

fn put_signed(w: &mut Vec<u8>, v: i64) {
    put(w, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_str(w: &mut Vec<u8>, s: &str) {
    put(w, s.len() as u64);
    w.extend_from_slice(s.as_bytes());
}

fn put_ip(w: &mut Vec<u8>, a: &IpAddr) {
    match a {
        IpAddr::V4(a) => {
            w.push(4);
            w.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            w.push(6);
            w.extend_from_slice(&a.octets());
        }
    }
}

#[expect(clippy::ref_option, reason = "called on the field as the hop holds it")]
fn put_opt_ip(w: &mut Vec<u8>, a: &Option<IpAddr>) {
    match a {
        Some(a) => put_ip(w, a),
        None => w.push(0),
    }
}

fn put_tuple(w: &mut Vec<u8>, t: &Tuple) {
    put_ip(w, &t.src);
    put(w, t.sport as u64);
    put_ip(w, &t.dst);
    put(w, t.dport as u64);
    w.push(t.proto);
}

/// Reads what `Codec::pack` wrote. The bytes never leave the process, so
/// a short read is a bug: it panics on the slice bounds.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let v = self.b[self.at];
        self.at += 1;
        v
    }

    fn get(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.byte();
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    fn signed(&mut self) -> i64 {
        let v = self.get();
        ((v >> 1) as i64) ^ -((v & 1) as i64)
    }

    fn u64_le(&mut self) -> u64 {
        let v = u64_at(self.b, self.at);
        self.at += 8;
        v
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let v: [u8; N] = self.b[self.at..self.at + N].try_into().expect("N bytes");
        self.at += N;
        v
    }

    fn ip(&mut self) -> IpAddr {
        match self.byte() {
            6 => IpAddr::V6(Ipv6Addr::from(self.bytes::<16>())),
            _ => IpAddr::V4(Ipv4Addr::from(self.bytes::<4>())),
        }
    }

    fn opt_ip(&mut self) -> Option<IpAddr> {
        match self.b[self.at] {
            0 => {
                self.at += 1;
                None
            }
            _ => Some(self.ip()),
        }
    }

    fn tuple(&mut self) -> Tuple {
        let src = self.ip();
        let sport = self.get() as u16;
        let dst = self.ip();
        let dport = self.get() as u16;
        Tuple {
            src,
            sport,
            dst,
            dport,
            proto: self.byte(),
        }
    }

    fn string(&mut self) -> String {
        let n = self.get() as usize;
        let s = String::from_utf8_lossy(&self.b[self.at..self.at + n]).into_owned();
        self.at += n;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hop::Dir;

    fn hop(ts: u64, hook: Hook, dir: Dir, tuple: Tuple, skb: u64, data: HopData) -> Hop {
        Hop {
            ts_ns: ts,
            hook,
            netns: "pod-a".into(),
            netns_inode: 4026532246,
            dev: "eth0".into(),
            ifindex: 2,
            dir,
            tuple: Arc::new(tuple),
            skb,
            data,
        }
    }

    /// Every kind of hop data, tuple and place comes back as it went in,
    /// IPv4 and IPv6.
    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one hop of every kind, built in place, then the round trip"
    )]
    fn every_kind_of_hop_round_trips() {
        let v6: IpAddr = "fd00::1".parse().unwrap();
        for (src, dst, other) in [
            (
                IpAddr::from([10, 0, 0, 1]),
                IpAddr::from([10, 96, 0, 10]),
                IpAddr::from([192, 168, 1, 9]),
            ),
            (
                v6,
                "fd00::a".parse().unwrap(),
                "2001:db8::9".parse().unwrap(),
            ),
        ] {
            let key = Tuple {
                src,
                sport: 40000,
                dst,
                dport: 53,
                proto: 17,
            };
            let tr = Tuple { dst: other, ..key };
            let fib_t = Tuple {
                sport: 0,
                dport: 0,
                proto: 0,
                ..key
            };
            let unrelated = Tuple {
                src: other,
                sport: 7,
                dst: other,
                dport: 9,
                proto: 6,
            };
            let mut hops = vec![
                hop(
                    100,
                    Hook::FibLookup,
                    Dir::Request,
                    fib_t,
                    0,
                    HopData::Fib(Box::new(FibData {
                        table: 254,
                        err: -101,
                        oif: 3,
                        iif: 1,
                        nh_dev: "eth0".into(),
                        nh_ifindex: 3,
                        gw: Some(other),
                        nh_scope: 0,
                        rtype: 2,
                    })),
                ),
                hop(
                    150,
                    Hook::TcEgress,
                    Dir::Request,
                    key,
                    0xffff_8881_0284_7000,
                    HopData::Packet {
                        tcp_flags: 0x12,
                        len: 65_000,
                        mark: 0xdead_beef,
                    },
                ),
                hop(
                    160,
                    Hook::Func,
                    Dir::Request,
                    tr,
                    0xffff_8881_0284_7000,
                    HopData::Func(Box::new(FuncData {
                        func: "nft_do_chain".into(),
                        backend: FuncBackend::Fentry,
                        ret: Some(-1),
                        nf_hook: Some("ipv4 INPUT".into()),
                        table: Some("filter".into()),
                        chain: None,
                        detail: "verdict DROP ü".into(),
                    })),
                ),
                hop(
                    170,
                    Hook::Drop,
                    Dir::Request,
                    tr,
                    0xffff_8881_0284_7000,
                    HopData::Drop(Box::new(DropData {
                        reason: "NETFILTER_DROP".into(),
                        reason_code: 6,
                        location: "nf_hook_slow+0x9c".into(),
                        reason_from: ReasonFrom::Kernel,
                    })),
                ),
                hop(
                    180,
                    Hook::Consume,
                    Dir::Reply,
                    tr.reversed(),
                    1,
                    HopData::Consume {
                        location: "skb_free".into(),
                    },
                ),
                hop(
                    190,
                    Hook::IcmpSend,
                    Dir::Reply,
                    key.reversed(),
                    2,
                    HopData::IcmpSend {
                        icmp_type: 3,
                        icmp_code: 3,
                        desc: "port-unreachable".into(),
                    },
                ),
                hop(
                    200,
                    Hook::TcpReset,
                    Dir::Reply,
                    unrelated,
                    3,
                    HopData::TcpReset { reason: None },
                ),
                hop(
                    210,
                    Hook::TcpReset,
                    Dir::Reply,
                    unrelated,
                    3,
                    HopData::TcpReset {
                        reason: Some("NO_SOCKET".into()),
                    },
                ),
                hop(
                    220,
                    Hook::SockState,
                    Dir::Request,
                    key,
                    0,
                    HopData::Sock(Box::new(SockData {
                        old_state: TcpState::SynSent,
                        new_state: TcpState::Close,
                    })),
                ),
                hop(
                    230,
                    Hook::SockQueue,
                    Dir::Request,
                    key,
                    4,
                    HopData::SockQueue,
                ),
                hop(240, Hook::SockRecv, Dir::Request, key, 4, HopData::SockRecv),
                hop(
                    250,
                    Hook::NeighUpdate,
                    Dir::Request,
                    Tuple {
                        src: dst,
                        sport: 0,
                        dst,
                        dport: 0,
                        proto: 0,
                    },
                    0,
                    HopData::Neigh(Box::new(NeighData {
                        addr: dst,
                        state: Nud::INCOMPLETE,
                        new_state: Some(Nud::FAILED),
                        lladdr: Some("02:00:00:00:00:01".into()),
                        err: -113,
                        event: NeighEvent::Update,
                    })),
                ),
                hop(
                    260,
                    Hook::NeighTimer,
                    Dir::Request,
                    key,
                    0,
                    HopData::Neigh(Box::new(NeighData {
                        addr: dst,
                        state: Nud::FAILED,
                        new_state: None,
                        lladdr: None,
                        err: 0,
                        event: NeighEvent::Timer,
                    })),
                ),
                hop(
                    270,
                    Hook::Xdp,
                    Dir::Request,
                    key,
                    4,
                    HopData::Xdp(Box::new(XdpData {
                        action: XdpAction::XdpRedirect,
                        prog_id: 87_000,
                        to_ifindex: 0,
                        err: -90,
                        map_id: 41,
                        map_key: 3,
                    })),
                ),
            ];
            // Another place, then back.
            hops[4].netns = "node".into();
            hops[4].netns_inode = 4026531840;
            hops[4].dev = "cni0".into();
            hops[4].ifindex = 7;
            let f = Flow {
                id: 77,
                key,
                translated: Some(tr),
                nat_by: Some(NatBy::Bpf),
                outer_port: 4799,
                hops_truncated: 3,
                packets: 9,
                replies: 4,
                counted: 1000,
                first_ns: 100,
                last_ns: 260,
                printed: 42,
                printed_at: 250,
                hops,
                dns: Some(Box::new(crate::model::dns::DnsLog {
                    queries: vec![crate::model::dns::Query {
                        id: 7,
                        question: None,
                        first_ns: 120,
                        sent: 2,
                        reply: None,
                        captures: vec![crate::model::dns::Capture {
                            skb: 0xffff_8880_0000_1000,
                            ts_ns: 120,
                        }],
                    }],
                    more: 1,
                })),
            };
            let mut c = Codec::default();
            let b = c.pack(&f);
            let g = c.unpack(&b);
            assert_eq!(g.dns, f.dns);
            assert_eq!(g.hops, f.hops);
            assert_eq!(
                (g.id, g.key, g.translated, g.nat_by, g.hops_truncated),
                (f.id, f.key, f.translated, f.nat_by, f.hops_truncated)
            );
            assert_eq!(
                (g.packets, g.replies, g.counted, g.first_ns, g.last_ns),
                (f.packets, f.replies, f.counted, f.first_ns, f.last_ns)
            );
            assert_eq!((g.printed, g.printed_at), (42, 250));
            assert_eq!(
                (id(&b), last_ns(&b), super::key(&b), tuples(&b)),
                (77, 260, key, (key, Some(tr)))
            );
            // The printed verdict is set without unpacking.
            let mut b = b.into_vec();
            set_printed(&mut b, 43, 260);
            assert_eq!((printed(&b), printed_at(&b)), (43, 260));
            assert_eq!(c.unpack(&b).hops, f.hops);
        }
    }
}
