//! nf_tables rules by NETLINK_NETFILTER (NFT_MSG_GETRULE, every family),
//! in this thread's namespace: what native nftables and iptables-nft (what
//! nodes run) hold, without `nft` or `iptables-save`.
//!
//! Each rule keeps its family, table, chain, handle, packet counter,
//! verdict and comment, and its text rendered as `nft list ruleset` prints
//! it, minus the counter: `tcp dport 8082 drop`, `ip daddr 10.16.0.1 tcp
//! dport 80 drop comment "x"`. The common expressions are rendered (payload,
//! cmp, range, bitwise masks, meta, ct, fib, lookup, immediate verdicts,
//! reject, nat, masq, redir, log, limit, queue, xt matches and targets);
//! any other is `<expr NAME>`. Nothing in the input can make it panic: a
//! malformed attribute ends that walk.

use std::{collections::BTreeMap, fmt::Write as _, net::IpAddr};

use super::netlink::{Dumps, NLMSG_HDRLEN, attr, attrs, be32, be64, dump, put_attr, string};

pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_GETRULE: u16 = 7;

const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;

pub const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

/// One nf_tables rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftRule {
    /// `ip`, `ip6`, `inet`, `arp`, `bridge`, `netdev`.
    pub family: String,
    pub table: String,
    pub chain: String,
    pub handle: u64,
    /// Its counter expression's packets; None without a counter.
    pub packets: Option<u64>,
    /// `drop`, `reject`, `accept`, `jump X`, `goto X`, `return`, `queue`,
    /// ...; None when the rule has no verdict (it continues).
    pub verdict: Option<String>,
    /// The rule's comment (nft's, or iptables-nft's `comment` match).
    pub comment: Option<String>,
    /// As `nft list ruleset` prints it, without the counter.
    pub text: String,
    /// The destination it matches exactly, where it does (kube-proxy's
    /// per-Service rules: `-d IP/32 -p tcp --dport N`).
    pub dst: Dst,
}

/// What a rule's equality matches say of the destination: address,
/// transport protocol, port (each None when not matched exactly).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dst {
    pub addr: Option<IpAddr>,
    pub l4: Option<u8>,
    pub port: Option<u16>,
}

pub fn family_name(f: u8) -> String {
    match f {
        NFPROTO_INET => "inet".into(),
        NFPROTO_IPV4 => "ip".into(),
        3 => "arp".into(),
        5 => "netdev".into(),
        7 => "bridge".into(),
        NFPROTO_IPV6 => "ip6".into(),
        n => format!("family{n}"),
    }
}

/// The NFT_MSG_NEWRULE messages of a GETRULE dump with `body` (nfgenmsg
/// and the attributes that filter it).
fn rule_dump(body: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    dump(
        libc::NETLINK_NETFILTER,
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETRULE,
        body,
        &mut |ty, msg| {
            if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE {
                out.push(msg.to_vec());
            }
        },
    )?;
    Some(out)
}

const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_GETCHAIN: u16 = 4;

/// The hook of each base chain of this thread's namespace, by (family
/// name, table, chain), as its name (`INPUT`, `POSTROUTING`, `ingress`):
/// which hook a traced rule ran at. Empty on error.
pub fn base_chain_hooks() -> BTreeMap<(String, String, String), String> {
    let mut out = BTreeMap::new();
    let _ = dump(
        libc::NETLINK_NETFILTER,
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETCHAIN,
        &[0u8; 4],
        &mut |ty, msg| {
            if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWCHAIN
                && let Some((key, hook)) = parse_base_chain(msg)
            {
                out.insert(key, hook);
            }
        },
    );
    out
}

/// The names of the chains of table `table` (family `family`) among
/// `chains` (a namespace's, [`chains`]).
pub fn names_of(chains: &[(u8, String, String)], family: u8, table: &str) -> Vec<String> {
    chains
        .iter()
        .filter(|(f, t, _)| *f == family && t == table)
        .map(|(_, _, c)| c.clone())
        .collect()
}

/// One NFT_MSG_NEWCHAIN message: its key and hook name, for a base chain
/// (NFTA_CHAIN_TABLE 1, NFTA_CHAIN_NAME 3, NFTA_CHAIN_HOOK 4 with
/// NFTA_HOOK_HOOKNUM 1).
fn parse_base_chain(msg: &[u8]) -> Option<((String, String, String), String)> {
    let family = *msg.get(NLMSG_HDRLEN)?;
    let a = msg.get(NLMSG_HDRLEN + 4..)?;
    let hooknum = be32(attr(attr(a, 4)?, 1)?)?;
    let key = (
        family_name(family),
        string(attr(a, 1)?),
        string(attr(a, 3)?),
    );
    Some((key, hook_name(family, hooknum)?.to_string()))
}

/// A hook number's name in `family` (enum nf_inet_hooks for ip, ip6,
/// inet and bridge; NF_ARP_*; enum nf_dev_hooks for netdev).
pub fn hook_name(family: u8, hooknum: u32) -> Option<&'static str> {
    const NFPROTO_ARP: u8 = 3;
    const NFPROTO_NETDEV: u8 = 5;
    Some(match (family, hooknum) {
        (NFPROTO_ARP, 0) => "input",
        (NFPROTO_ARP, 1) => "output",
        (NFPROTO_ARP, 2) => "forward",
        // inet's ingress hook is NF_INET_INGRESS (5).
        (NFPROTO_NETDEV, 0) | (_, 5) => "ingress",
        (NFPROTO_NETDEV, 1) => "egress",
        (_, h) => return inet_hook_name(h),
    })
}

/// NF_INET_PRE_ROUTING .. NF_INET_POST_ROUTING (include/uapi/linux/
/// netfilter.h), named as the iptables chains are.
pub fn inet_hook_name(h: u32) -> Option<&'static str> {
    Some(match h {
        0 => "PREROUTING",
        1 => "INPUT",
        2 => "FORWARD",
        3 => "OUTPUT",
        4 => "POSTROUTING",
        _ => return None,
    })
}

/// The rules of this thread's namespace; None on error.
pub fn rules() -> Option<Vec<NftRule>> {
    rules_where(&|_| true)
}

/// The rules whose NFT_MSG_NEWRULE message `keep` takes, parsed, dumped
/// chain by chain on one socket. One GETRULE dump of every rule costs the
/// kernel the square of a table's rules: each 32 KiB datagram of the dump
/// walks the table's chains and rules from the start to the one it
/// stopped at (nf_tables_dump_rules()); a dump of one chain finds it by
/// hash (rhltable_lookup() on the table's chains_ht) and walks only its
/// rules. Measured on 6.18 with kube-proxy's rules for 5,000 Services
/// (32,509 rules in 10,011 chains), see BENCHMARKS.md. Streamed: only the
/// rules kept are held.
pub fn rules_where(keep: &dyn Fn(&[u8]) -> bool) -> Option<Vec<NftRule>> {
    rules_and_chains_where(keep).map(|(r, _)| r)
}

/// [`rules_where`], with the chains it listed ([`chains`]).
pub fn rules_and_chains_where(keep: &dyn Fn(&[u8]) -> bool) -> Option<(Vec<NftRule>, Chains)> {
    let mut out = Vec::new();
    let mut dumps = Dumps::new(libc::NETLINK_NETFILTER)?;
    let all = chains()?;
    for (family, table, chain) in &all {
        let (family, table, chain) = (*family, table.as_str(), chain.as_str());
        let mut body = vec![family, 0, 0, 0];
        put_attr(&mut body, NFTA_RULE_TABLE, &nul(table));
        put_attr(&mut body, NFTA_RULE_CHAIN, &nul(chain));
        let got = dumps.dump(
            (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETRULE,
            &body,
            &mut |ty, msg| {
                if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE
                    && keep(msg)
                    && let Some(r) = parse_rule(msg, &if_name)
                {
                    out.push(r);
                }
            },
        );
        // A chain deleted since the list (ENOENT) ends its own dump; a
        // socket that failed otherwise may hold the rest of one: the next
        // chain gets a new one.
        if got.is_none() {
            dumps = Dumps::new(libc::NETLINK_NETFILTER)?;
        }
    }
    Some((out, all))
}

/// Chains as (family, table, chain).
pub type Chains = Vec<(u8, String, String)>;

/// Every chain of this thread's namespace, as (family, table, chain), in
/// the kernel's order (tables, then their chains); None on error.
pub fn chains() -> Option<Chains> {
    let mut out = Vec::new();
    dump(
        libc::NETLINK_NETFILTER,
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETCHAIN,
        &[0u8; 4],
        &mut |ty, msg| {
            if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWCHAIN
                && let Some(&family) = msg.get(NLMSG_HDRLEN)
                && let Some(a) = msg.get(NLMSG_HDRLEN + 4..)
                && let (Some(table), Some(name)) = (attr(a, 1), attr(a, 3))
            {
                out.push((family, string(table), string(name)));
            }
        },
    )?;
    Some(out)
}

/// Whether a rule message's verdict is `drop` or `reject`, read without
/// rendering it: the last of its verdict-setting expressions decides, as
/// in [`parse_rule`] (an immediate verdict, `reject`, an xt target, a
/// verdict map, `queue`).
pub fn may_drop(msg: &[u8]) -> bool {
    let Some(exprs) = msg
        .get(NLMSG_HDRLEN + 4..)
        .and_then(|a| attr(a, NFTA_RULE_EXPRESSIONS))
    else {
        return false;
    };
    let mut drops = false;
    for (_, e) in attrs(exprs) {
        let data = attr(e, NFTA_EXPR_DATA).unwrap_or(&[]);
        let name = attr(e, NFTA_EXPR_NAME).unwrap_or(&[]);
        let name = name.split(|&b| b == 0).next().unwrap_or(name);
        match name {
            b"immediate" => {
                // NFTA_IMMEDIATE_DREG 1 (0: the verdict register),
                // NFTA_IMMEDIATE_DATA 2; NF_DROP is 0.
                if attr(data, 1).and_then(be32) == Some(0)
                    && let Some(v) = attr(data, 2).and_then(|d| attr(d, NFTA_DATA_VERDICT))
                    && let Some(code) = attr(v, 1).and_then(be32)
                {
                    drops = code == 0;
                }
            }
            b"reject" => drops = true,
            // NFTA_TARGET_NAME 1.
            b"target" => drops = attr(data, 1).map(string).as_deref() == Some("REJECT"),
            // NFTA_LOOKUP_DREG 3, 0 for a verdict map.
            b"lookup" if attr(data, 3).and_then(be32) == Some(0) => drops = false,
            b"queue" => drops = false,
            _ => {}
        }
    }
    drops
}

fn if_name(i: u32) -> Option<String> {
    nix::net::if_::if_indextoname(i)
        .map(|c| c.to_string_lossy().into_owned())
        .ok()
}

/// The rules of one chain of this thread's namespace (the kernel filters
/// the dump by table and chain: nf_tables_dump_rules_start()); None on
/// error, as when there is no such table.
pub fn chain_rules(family: u8, table: &str, chain: &str) -> Option<Vec<NftRule>> {
    chain_rules_where(family, table, chain, &|_| true)
}

/// [`chain_rules`], of the messages `keep` takes (the others are not
/// rendered).
pub fn chain_rules_where(
    family: u8,
    table: &str,
    chain: &str,
    keep: &dyn Fn(&[u8]) -> bool,
) -> Option<Vec<NftRule>> {
    let mut body = vec![family, 0, 0, 0];
    put_attr(&mut body, NFTA_RULE_TABLE, &nul(table));
    put_attr(&mut body, NFTA_RULE_CHAIN, &nul(chain));
    Some(
        rule_dump(&body)?
            .iter()
            .filter(|m| keep(m))
            .filter_map(|m| parse_rule(m, &if_name))
            .collect(),
    )
}

/// One element of a set or map: its key's bytes, its data's verdict (a
/// verdict map's `jump X`/`goto X`/`drop`/...), its comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetElem {
    pub key: Vec<u8>,
    pub verdict: Option<String>,
    pub comment: Option<String>,
}

const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_GETSETELEM: u16 = 13;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_USERDATA: u16 = 6;

/// The elements of set `set` of table `table` (family `family`) in this
/// thread's namespace; None on error.
pub fn set_elements(family: u8, table: &str, set: &str) -> Option<Vec<SetElem>> {
    let mut body = vec![family, 0, 0, 0];
    put_attr(&mut body, NFTA_SET_ELEM_LIST_TABLE, &nul(table));
    put_attr(&mut body, NFTA_SET_ELEM_LIST_SET, &nul(set));
    let mut out = Vec::new();
    dump(
        libc::NETLINK_NETFILTER,
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETSETELEM,
        &body,
        &mut |ty, msg| {
            if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM {
                out.extend(parse_set_elements(msg));
            }
        },
    )?;
    Some(out)
}

/// A NUL-terminated string attribute's payload.
pub(crate) fn nul(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// The elements of one NFT_MSG_NEWSETELEM message.
pub fn parse_set_elements(msg: &[u8]) -> Vec<SetElem> {
    let Some(a) = msg.get(NLMSG_HDRLEN + 4..) else {
        return Vec::new();
    };
    let Some(list) = attr(a, NFTA_SET_ELEM_LIST_ELEMENTS) else {
        return Vec::new();
    };
    attrs(list)
        .filter_map(|(_, e)| {
            Some(SetElem {
                key: data_value(attr(e, NFTA_SET_ELEM_KEY)?)?.to_vec(),
                verdict: attr(e, NFTA_SET_ELEM_DATA)
                    .and_then(|d| attr(d, NFTA_DATA_VERDICT))
                    .and_then(verdict),
                comment: attr(e, NFTA_SET_ELEM_USERDATA).and_then(udata_comment),
            })
        })
        .collect()
}

/// One NFT_MSG_NEWRULE message (nlmsghdr, nfgenmsg, attributes); None when
/// it has no table or chain. `ifname` names interface indexes (`iif`).
pub fn parse_rule(msg: &[u8], ifname: &dyn Fn(u32) -> Option<String>) -> Option<NftRule> {
    let family = *msg.get(NLMSG_HDRLEN)?;
    let a = msg.get(NLMSG_HDRLEN + 4..)?;
    let table = string(attr(a, NFTA_RULE_TABLE)?);
    let chain = string(attr(a, NFTA_RULE_CHAIN)?);
    let handle = attr(a, NFTA_RULE_HANDLE).and_then(be64).unwrap_or(0);
    let mut r = Render::new(family, ifname);
    if let Some(exprs) = attr(a, NFTA_RULE_EXPRESSIONS) {
        for (_, e) in attrs(exprs) {
            let name = attr(e, NFTA_EXPR_NAME).map(string).unwrap_or_default();
            let data = attr(e, NFTA_EXPR_DATA).unwrap_or(&[]);
            if r.expr(&name, data).is_none() {
                r.push(format!("<expr {name}>"));
            }
        }
    }
    let udata_comment = attr(a, NFTA_RULE_USERDATA).and_then(udata_comment);
    let mut text = r.text();
    if let Some(c) = &udata_comment {
        if !text.is_empty() {
            text.push(' ');
        }
        let _ = write!(text, "comment {}", quote(c));
    }
    Some(NftRule {
        family: family_name(family),
        table,
        chain,
        handle,
        packets: r.packets,
        verdict: r.verdict,
        comment: udata_comment.or(r.comment),
        text,
        dst: Dst { l4: r.l4, ..r.dst },
    })
}

/// NFTNL_UDATA_RULE_COMMENT (type 0) of a rule's userdata: TLVs of a type
/// byte, a length byte and the value.
pub(crate) fn udata_comment(mut u: &[u8]) -> Option<String> {
    while u.len() >= 2 {
        let (ty, len) = (u[0], u[1] as usize);
        let v = u.get(2..2 + len)?;
        if ty == 0 {
            return Some(string(v));
        }
        u = &u[2 + len..];
    }
    None
}

fn quote(s: &str) -> String {
    format!("\"{s}\"")
}

/// What a register holds: a load and its byte length.
#[derive(Debug, Clone)]
enum Src {
    Payload {
        base: u32,
        off: u32,
        len: u32,
    },
    Meta(u32),
    Ct {
        key: u32,
        dir: Option<u8>,
    },
    Fib {
        flags: u32,
        result: u32,
    },
    Masked {
        src: Box<Src>,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Data(Vec<u8>),
    /// Already rendered (a map's result).
    Text(String),
}

/// How a value loaded from a source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Ip4,
    Ip6,
    Port,
    Proto,
    NfProto,
    EtherType,
    Mac,
    IfName,
    IfIndex,
    Hex,
    /// Raw packet bytes (`@th,64,16`): nft prints them as one big-endian
    /// number.
    Raw,
    Dec,
    CtState,
    CtStatus,
    CtDir,
    TcpFlags,
    PktType,
    IcmpType,
    Icmp6Type,
    AddrType,
}

struct Render<'a> {
    family: u8,
    ifname: &'a dyn Fn(u32) -> Option<String>,
    /// Registers in 32-bit units (NFT_REG32_00 = 8; the 128-bit
    /// NFT_REG_1..4 are units 8, 12, 16, 20).
    regs: BTreeMap<u32, (Src, u32)>,
    parts: Vec<Option<String>>,
    /// The network and transport protocols known so far.
    l3: Option<u8>,
    l4: Option<u8>,
    /// A `meta nfproto`/`meta l4proto` match (part index) that a later
    /// header match implies, left out as nft leaves it out; a statement in
    /// between keeps it.
    dep_l3: Option<usize>,
    dep_l4: Option<usize>,
    /// The last `>=` match: (part, register, rendered source, value), for
    /// a following `<=` that makes it a range.
    gte: Option<(usize, u32, String, String)>,
    packets: Option<u64>,
    verdict: Option<String>,
    comment: Option<String>,
    /// The destination address and port matched exactly.
    dst: Dst,
}

fn unit(reg: u32) -> u32 {
    if (1..=4).contains(&reg) {
        8 + (reg - 1) * 4
    } else {
        reg
    }
}

impl<'a> Render<'a> {
    fn new(family: u8, ifname: &'a dyn Fn(u32) -> Option<String>) -> Render<'a> {
        let l3 = match family {
            NFPROTO_IPV4 | NFPROTO_IPV6 => Some(family),
            _ => None,
        };
        Render {
            family,
            ifname,
            regs: BTreeMap::new(),
            parts: Vec::new(),
            l3,
            l4: None,
            dep_l3: None,
            dep_l4: None,
            gte: None,
            packets: None,
            verdict: None,
            comment: None,
            dst: Dst::default(),
        }
    }

    fn push(&mut self, s: String) {
        self.parts.push(Some(s));
    }

    /// A statement: what comes after it no longer implies what came before.
    fn statement(&mut self, s: String) {
        self.dep_l3 = None;
        self.dep_l4 = None;
        self.push(s);
    }

    fn text(&self) -> String {
        self.parts
            .iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn load(&mut self, dreg: u32, src: Src, len: u32) {
        self.regs.insert(unit(dreg), (src, len));
    }

    fn reg(&self, r: u32) -> Option<&(Src, u32)> {
        self.regs.get(&unit(r))
    }

    /// One expression; None when it cannot be rendered.
    fn expr(&mut self, name: &str, d: &[u8]) -> Option<()> {
        let u32a = |t: u16| attr(d, t).and_then(be32);
        if name != "cmp" {
            self.gte = None;
        }
        match name {
            "payload" => {
                let (base, off, len) = (u32a(2)?, u32a(3)?, u32a(4)?);
                let dreg = u32a(1)?;
                self.load(dreg, Src::Payload { base, off, len }, len);
            }
            "meta" => {
                let key = u32a(2)?;
                if let Some(dreg) = u32a(1) {
                    self.load(dreg, Src::Meta(key), meta_len(key));
                } else {
                    // meta set: `meta mark set ...`.
                    let v = self.value_of(u32a(3)?);
                    self.statement(format!("{} set {v}", meta_name(key)));
                }
            }
            "ct" => {
                let key = u32a(2)?;
                let dir = attr(d, 3).and_then(|b| b.first().copied());
                if let Some(dreg) = u32a(1) {
                    self.load(dreg, Src::Ct { key, dir }, ct_len(key));
                } else {
                    let v = self.value_of(u32a(4)?);
                    self.statement(format!("{} set {v}", ct_name(key, dir)));
                }
            }
            "fib" => {
                let (dreg, result, flags) = (u32a(1)?, u32a(2)?, u32a(3)?);
                let len = if result == 2 { 16 } else { 4 };
                self.load(dreg, Src::Fib { flags, result }, len);
            }
            "bitwise" => {
                let (sreg, dreg) = (u32a(1)?, u32a(2)?);
                // Only the mask-and-xor form (NFT_BITWISE_BOOL, op 0).
                if u32a(6).unwrap_or(0) != 0 {
                    return None;
                }
                let mask = data_value(attr(d, 4)?)?.to_vec();
                let xor = data_value(attr(d, 5)?)?.to_vec();
                let (src, len) = self.reg(sreg)?.clone();
                let src = Src::Masked {
                    src: Box::new(src),
                    mask,
                    xor,
                };
                self.load(dreg, src, len);
            }
            "immediate" => {
                let dreg = u32a(1)?;
                let data = attr(d, 2)?;
                if dreg == 0 {
                    let v = verdict(attr(data, NFTA_DATA_VERDICT)?)?;
                    self.push(v.clone());
                    self.verdict = Some(v);
                } else {
                    let v = data_value(data)?.to_vec();
                    let len = v.len() as u32;
                    self.load(dreg, Src::Data(v), len);
                }
            }
            "cmp" => self.cmp(u32a(1)?, u32a(2)?, data_value(attr(d, 3)?)?)?,
            "range" => {
                let (sreg, op) = (u32a(1)?, u32a(2)?);
                let (src, _) = self.reg(sreg)?.clone();
                let ty = self.ty(&src);
                let from = self.value(ty, data_value(attr(d, 3)?)?);
                let to = self.value(ty, data_value(attr(d, 4)?)?);
                let lhs = self.lhs(&src);
                let neq = if op == 1 { "!= " } else { "" };
                self.push(format!("{lhs} {neq}{from}-{to}"));
            }
            "lookup" => {
                let set = string(attr(d, 1)?);
                let sreg = u32a(2)?;
                let inv = u32a(5).unwrap_or(0) & 1 == 1;
                let lhs = self.concat(sreg)?;
                let neq = if inv { "!= " } else { "" };
                match u32a(3) {
                    None => self.push(format!("{lhs} {neq}@{set}")),
                    Some(0) => {
                        let v = format!("{lhs} vmap @{set}");
                        self.verdict = Some(format!("vmap @{set}"));
                        self.push(v);
                    }
                    Some(dreg) => {
                        self.load(dreg, Src::Text(format!("{lhs} map @{set}")), 16);
                    }
                }
            }
            "counter" => self.packets = Some(attr(d, 2).and_then(be64).unwrap_or(0)),
            "reject" => {
                let s = self.reject(u32a(1)?, attr(d, 2).and_then(|c| c.first().copied()));
                self.statement(s);
                self.verdict = Some("reject".into());
            }
            "nat" => self.nat(d)?,
            "masq" | "redir" => self.masq_redir(name, d),
            "log" => self.log(d),
            "limit" => self.limit(d)?,
            "queue" => self.queue(d),
            "match" | "target" => self.xt(name, d)?,
            _ => return None,
        }
        Some(())
    }

    /// `masquerade` or `redirect`, with their port range and flags.
    fn masq_redir(&mut self, name: &str, d: &[u8]) {
        let u32a = |t: u16| attr(d, t).and_then(be32);
        let (min, max, flags) = if name == "masq" {
            (u32a(2), u32a(3), u32a(1))
        } else {
            (u32a(1), u32a(2), u32a(3))
        };
        let mut s = if name == "masq" {
            "masquerade".to_string()
        } else {
            "redirect".to_string()
        };
        if let Some(p) = min.and_then(|r| self.port_reg(r)) {
            let _ = write!(s, " to :{p}");
            if let Some(q) = max.and_then(|r| self.port_reg(r))
                && q != p
            {
                let _ = write!(s, "-{q}");
            }
        }
        s.push_str(&nat_flags(flags.unwrap_or(0)));
        self.statement(s);
    }

    fn log(&mut self, d: &[u8]) {
        let mut s = "log".to_string();
        if let Some(p) = attr(d, 2) {
            let _ = write!(s, " prefix {}", quote(&string(p)));
        }
        if let Some(g) = attr(d, 1).and_then(|g| g.get(..2)) {
            let _ = write!(s, " group {}", u16::from_be_bytes([g[0], g[1]]));
        }
        if let Some(l) = attr(d, 5).and_then(be32)
            && l != 4
        {
            let _ = write!(s, " level {}", log_level(l));
        }
        self.statement(s);
    }

    fn limit(&mut self, d: &[u8]) -> Option<()> {
        let u32a = |t: u16| attr(d, t).and_then(be32);
        let rate = attr(d, 1).and_then(be64)?;
        let unit = attr(d, 2).and_then(be64)?;
        let burst = u32a(3).unwrap_or(0);
        let bytes = u32a(4) == Some(1);
        let over = if u32a(5).unwrap_or(0) & 1 == 1 {
            "over "
        } else {
            ""
        };
        let unit = match unit {
            1 => "second",
            60 => "minute",
            3600 => "hour",
            86400 => "day",
            604_800 => "week",
            _ => "?",
        };
        let mut s = if bytes {
            format!("limit rate {over}{rate} bytes/{unit}")
        } else {
            format!("limit rate {over}{rate}/{unit}")
        };
        if bytes && burst != 0 {
            let _ = write!(s, " burst {burst} bytes");
        } else if !bytes && burst != 5 && burst != 0 {
            let _ = write!(s, " burst {burst} packets");
        }
        self.statement(s);
        Some(())
    }

    fn queue(&mut self, d: &[u8]) {
        let num = attr(d, 1)
            .and_then(|n| n.get(..2))
            .map(|n| u16::from_be_bytes([n[0], n[1]]));
        let flags = attr(d, 3)
            .and_then(|n| n.get(..2))
            .map_or(0, |n| u16::from_be_bytes([n[0], n[1]]));
        let mut s = "queue".to_string();
        let f: Vec<&str> = [(1, "bypass"), (2, "fanout")]
            .iter()
            .filter(|(b, _)| flags & b != 0)
            .map(|(_, n)| *n)
            .collect();
        if !f.is_empty() {
            let _ = write!(s, " flags {}", f.join(","));
        }
        if let Some(n) = num {
            let _ = write!(s, " to {n}");
        }
        self.statement(s);
        self.verdict = Some("queue".into());
    }

    /// The value in register `r` (for `set` statements).
    fn value_of(&mut self, r: u32) -> String {
        match self.reg(r).cloned() {
            Some((Src::Data(v), _)) => hex(&v),
            Some((s, _)) => self.lhs(&s),
            None => format!("reg {r}"),
        }
    }

    fn cmp(&mut self, sreg: u32, op: u32, v: &[u8]) -> Option<()> {
        let (src, _) = self.reg(sreg)?.clone();
        let opstr = match op {
            0 => "",
            1 => "!= ",
            2 => "< ",
            3 => "<= ",
            4 => "> ",
            5 => ">= ",
            _ => return None,
        };
        // `>= a` then `<= b` on the same register: nft's `a-b`.
        if op == 3
            && let Some((part, r, lhs, from)) = self.gte.take()
            && r == unit(sreg)
        {
            let to = self.value(self.ty(&src), v);
            self.parts[part] = Some(format!("{lhs} {from}-{to}"));
            return Some(());
        }
        if let Src::Masked {
            src: inner,
            mask,
            xor,
        } = &src
        {
            let s = self.masked(inner, mask, xor, op, v);
            self.push(s);
            return Some(());
        }
        let ty = self.ty(&src);
        let mut val = self.value(ty, v);
        // An address prefix of whole bytes is a shorter load.
        if let Src::Payload { len, .. } = src
            && ((ty == Ty::Ip4 && len < 4) || (ty == Ty::Ip6 && len < 16))
        {
            val = format!("{val}/{}", len * 8);
        }
        let lhs = self.lhs(&src);
        // What the match tells of the protocols, and whether it is one
        // that a later header match implies.
        let idx = self.parts.len();
        if op == 0 {
            match src {
                Src::Meta(15) => {
                    self.l3 = v.first().copied();
                    if self.family != NFPROTO_IPV4 && self.family != NFPROTO_IPV6 {
                        self.dep_l3 = Some(idx);
                    }
                }
                Src::Meta(16) => {
                    self.l4 = v.first().copied();
                    self.dep_l4 = Some(idx);
                }
                Src::Payload {
                    base: 1,
                    off: 9,
                    len: 1,
                } if self.l3 == Some(NFPROTO_IPV4) => {
                    self.l4 = v.first().copied();
                }
                Src::Payload {
                    base: 1,
                    off: 6,
                    len: 1,
                } if self.l3 == Some(NFPROTO_IPV6) => {
                    self.l4 = v.first().copied();
                }
                // ip daddr / ip6 daddr (the whole address), th dport.
                Src::Payload {
                    base: 1,
                    off: 16,
                    len: 4,
                } if self.l3 == Some(NFPROTO_IPV4) => {
                    self.dst.addr = <[u8; 4]>::try_from(v).ok().map(IpAddr::from);
                }
                Src::Payload {
                    base: 1,
                    off: 24,
                    len: 16,
                } if self.l3 == Some(NFPROTO_IPV6) => {
                    self.dst.addr = <[u8; 16]>::try_from(v).ok().map(IpAddr::from);
                }
                Src::Payload {
                    base: 2,
                    off: 2,
                    len: 2,
                } => {
                    self.dst.port = <[u8; 2]>::try_from(v).ok().map(u16::from_be_bytes);
                }
                _ => {}
            }
        }
        self.push(format!("{lhs} {opstr}{val}"));
        if op == 5 {
            self.gte = Some((idx, unit(sreg), lhs, val));
        }
        Some(())
    }

    /// A masked match: an address prefix, flags set, or `& mask == value`.
    fn masked(&mut self, inner: &Src, mask: &[u8], xor: &[u8], op: u32, v: &[u8]) -> String {
        let ty = self.ty(inner);
        let lhs = self.lhs(inner);
        let xor_zero = xor.iter().all(|&b| b == 0);
        if xor_zero
            && matches!(ty, Ty::Ip4 | Ty::Ip6)
            && let Some(bits) = prefix_len(mask)
        {
            let neq = if op == 1 { "!= " } else { "" };
            return format!("{lhs} {neq}{}/{bits}", self.value(ty, v));
        }
        let zero = v.iter().all(|&b| b == 0);
        if xor_zero && op == 1 && zero && matches!(ty, Ty::CtState | Ty::CtStatus | Ty::TcpFlags) {
            return format!("{lhs} {}", self.value(ty, mask));
        }
        if xor_zero && op == 0 && zero && matches!(ty, Ty::CtState | Ty::CtStatus | Ty::TcpFlags) {
            return format!("{lhs} ! {}", self.value(ty, mask));
        }
        let opstr = if op == 1 { "!=" } else { "==" };
        format!(
            "{lhs} & {} {opstr} {}",
            self.value(ty, mask),
            self.value(ty, v)
        )
    }

    /// `a . b . c`: the loads from register `sreg` on (a concatenation).
    fn concat(&mut self, sreg: u32) -> Option<String> {
        let mut u = unit(sreg);
        let mut out = Vec::new();
        while let Some((src, len)) = self.regs.remove(&u) {
            out.push(self.lhs(&src));
            u = u.saturating_add(len.div_ceil(4).max(1));
            if u > 23 {
                break;
            }
        }
        (!out.is_empty()).then(|| out.join(" . "))
    }

    /// How a source is written on the left of a match.
    fn lhs(&mut self, src: &Src) -> String {
        match src {
            Src::Payload { base, off, len } => self.payload_name(*base, *off, *len),
            Src::Meta(k) => meta_name(*k),
            Src::Ct { key, dir } => ct_name(*key, *dir),
            Src::Fib { flags, result } => {
                let f: Vec<&str> = [
                    (1, "saddr"),
                    (2, "daddr"),
                    (4, "mark"),
                    (8, "iif"),
                    (16, "oif"),
                ]
                .iter()
                .filter(|(b, _)| flags & b != 0)
                .map(|(_, n)| *n)
                .collect();
                let r = match result {
                    1 => "oif",
                    2 => "oifname",
                    3 => "type",
                    _ => "?",
                };
                format!("fib {} {r}", f.join(" . "))
            }
            Src::Masked { src, mask, .. } => {
                let ty = self.ty(src);
                let s = self.lhs(src);
                format!("{s} & {}", self.value(ty, mask))
            }
            Src::Data(v) => hex(v),
            Src::Text(t) => t.clone(),
        }
    }

    /// A payload field's name, leaving out the protocol match it implies.
    fn payload_name(&mut self, base: u32, off: u32, len: u32) -> String {
        let field = |n: &str| n.to_string();
        let named = match base {
            0 => match (off, len) {
                (0, 6) => Some(field("ether daddr")),
                (6, 6) => Some(field("ether saddr")),
                (12, 2) => Some(field("ether type")),
                _ => None,
            },
            1 => {
                let r = match (self.l3, off, len) {
                    (Some(NFPROTO_IPV4), 12, 1..=4) => Some("ip saddr"),
                    (Some(NFPROTO_IPV4), 16, 1..=4) => Some("ip daddr"),
                    (Some(NFPROTO_IPV4), 9, 1) => Some("ip protocol"),
                    (Some(NFPROTO_IPV4), 8, 1) => Some("ip ttl"),
                    (Some(NFPROTO_IPV6), 8, 1..=16) => Some("ip6 saddr"),
                    (Some(NFPROTO_IPV6), 24, 1..=16) => Some("ip6 daddr"),
                    (Some(NFPROTO_IPV6), 6, 1) => Some("ip6 nexthdr"),
                    (Some(NFPROTO_IPV6), 7, 1) => Some("ip6 hoplimit"),
                    _ => None,
                };
                if r.is_some()
                    && let Some(i) = self.dep_l3.take()
                {
                    self.parts[i] = None;
                }
                r.map(field)
            }
            2 => {
                let proto = match self.l4 {
                    Some(6) => Some("tcp"),
                    Some(17) => Some("udp"),
                    Some(136) => Some("udplite"),
                    Some(132) => Some("sctp"),
                    Some(33) => Some("dccp"),
                    Some(1) => Some("icmp"),
                    Some(58) => Some("icmpv6"),
                    _ => None,
                };
                let f = match (proto, off, len) {
                    (Some("icmp" | "icmpv6"), 0, 1) => Some("type"),
                    (Some("icmp" | "icmpv6"), 1, 1) => Some("code"),
                    (Some("icmp" | "icmpv6"), _, _) => None,
                    (Some("tcp"), 13, 1) => Some("flags"),
                    (_, 0, 2) => Some("sport"),
                    (_, 2, 2) => Some("dport"),
                    _ => None,
                };
                match (proto, f) {
                    (Some(p), Some(f)) => {
                        if let Some(i) = self.dep_l4.take() {
                            self.parts[i] = None;
                        }
                        Some(format!("{p} {f}"))
                    }
                    (None, Some(f @ ("sport" | "dport"))) => Some(format!("th {f}")),
                    _ => None,
                }
            }
            _ => None,
        };
        named.unwrap_or_else(|| {
            let b = ["@ll", "@nh", "@th", "@ih"]
                .get(base as usize)
                .copied()
                .unwrap_or("@?");
            format!("{b},{},{}", u64::from(off) * 8, u64::from(len) * 8)
        })
    }

    fn ty(&self, src: &Src) -> Ty {
        match src {
            Src::Payload { base, off, len } => match (base, off, len) {
                (0, 0 | 6, 6) => Ty::Mac,
                (0, 12, 2) => Ty::EtherType,
                (1, 12 | 16, 1..=4) if self.l3 == Some(NFPROTO_IPV4) => Ty::Ip4,
                (1, 8 | 24, 1..=16) if self.l3 == Some(NFPROTO_IPV6) => Ty::Ip6,
                (1, 9, 1) if self.l3 == Some(NFPROTO_IPV4) => Ty::Proto,
                (1, 6, 1) if self.l3 == Some(NFPROTO_IPV6) => Ty::Proto,
                (1, 7 | 8, 1) => Ty::Dec,
                (2, 0 | 2, 2) => Ty::Port,
                (2, 13, 1) if self.l4 == Some(6) => Ty::TcpFlags,
                (2, 0, 1) if self.l4 == Some(1) => Ty::IcmpType,
                (2, 0, 1) if self.l4 == Some(58) => Ty::Icmp6Type,
                (2, 1, 1) if matches!(self.l4, Some(1 | 58)) => Ty::Dec,
                _ => Ty::Raw,
            },
            Src::Meta(k) => match k {
                1 => Ty::EtherType,
                4 | 5 => Ty::IfIndex,
                6 | 7 | 17 | 18 | 34 => Ty::IfName,
                15 => Ty::NfProto,
                16 => Ty::Proto,
                19 => Ty::PktType,
                0 | 10 | 11 | 20 | 21 | 22 => Ty::Dec,
                _ => Ty::Hex,
            },
            Src::Ct { key, .. } => match key {
                0 => Ty::CtState,
                1 => Ty::CtDir,
                2 => Ty::CtStatus,
                7 => Ty::NfProto,
                10 => Ty::Proto,
                11 | 12 => Ty::Port,
                19 | 20 => Ty::Ip4,
                21 | 22 => Ty::Ip6,
                14 | 15 | 16 | 17 | 5 => Ty::Dec,
                _ => Ty::Hex,
            },
            Src::Fib { result: 3, .. } => Ty::AddrType,
            Src::Fib { result: 1, .. } => Ty::IfIndex,
            Src::Fib { result: 2, .. } => Ty::IfName,
            Src::Masked { src, .. } => self.ty(src),
            _ => Ty::Hex,
        }
    }

    /// A value as nft writes it for its type.
    #[expect(clippy::too_many_lines, reason = "one arm per type of value")]
    fn value(&self, ty: Ty, v: &[u8]) -> String {
        let host32 = || {
            let mut b = [0u8; 4];
            let n = v.len().min(4);
            b[..n].copy_from_slice(&v[..n]);
            u32::from_ne_bytes(b)
        };
        let flags = |names: &[(u32, &str)]| {
            let x = host32();
            let f: Vec<&str> = names
                .iter()
                .filter(|(b, _)| x & b != 0)
                .map(|(_, n)| *n)
                .collect();
            if f.is_empty() {
                format!("0x{x:x}")
            } else {
                f.join(",")
            }
        };
        match ty {
            Ty::Ip4 => {
                let mut b = [0u8; 4];
                let n = v.len().min(4);
                b[..n].copy_from_slice(&v[..n]);
                IpAddr::from(b).to_string()
            }
            Ty::Ip6 => {
                let mut b = [0u8; 16];
                let n = v.len().min(16);
                b[..n].copy_from_slice(&v[..n]);
                IpAddr::from(b).to_string()
            }
            Ty::Port => match v {
                [a, b, ..] => u16::from_be_bytes([*a, *b]).to_string(),
                _ => hex(v),
            },
            Ty::EtherType => match v {
                [a, b, ..] => match u16::from_be_bytes([*a, *b]) {
                    0x0800 => "ip".into(),
                    0x86dd => "ip6".into(),
                    0x0806 => "arp".into(),
                    0x8100 => "8021q".into(),
                    n => format!("0x{n:04x}"),
                },
                _ => hex(v),
            },
            Ty::Proto => v.first().map_or_else(|| hex(v), |p| proto_name(*p)),
            Ty::NfProto => match v.first() {
                Some(2) => "ipv4".into(),
                Some(10) => "ipv6".into(),
                _ => hex(v),
            },
            Ty::Mac => v
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":"),
            Ty::IfName => {
                let s = string(v);
                if v.contains(&0) {
                    quote(&s)
                } else {
                    quote(&format!("{s}*"))
                }
            }
            Ty::IfIndex => {
                let i = host32();
                (self.ifname)(i).map_or_else(|| i.to_string(), |n| quote(&n))
            }
            Ty::Dec => match v.len() {
                1 => v[0].to_string(),
                2 => u16::from_ne_bytes([v[0], v[1]]).to_string(),
                _ => host32().to_string(),
            },
            Ty::CtState => flags(&[
                (1, "invalid"),
                (2, "established"),
                (4, "related"),
                (8, "new"),
                (64, "untracked"),
            ]),
            Ty::CtStatus => flags(&[
                (1, "expected"),
                (2, "seen-reply"),
                (4, "assured"),
                (8, "confirmed"),
                (16, "snat"),
                (32, "dnat"),
                (512, "dying"),
            ]),
            Ty::CtDir => match v.first() {
                Some(0) => "original".into(),
                Some(1) => "reply".into(),
                _ => hex(v),
            },
            Ty::TcpFlags => flags(&[
                (1, "fin"),
                (2, "syn"),
                (4, "rst"),
                (8, "psh"),
                (16, "ack"),
                (32, "urg"),
                (64, "ecn"),
                (128, "cwr"),
            ]),
            Ty::PktType => match v.first() {
                Some(0) => "host".into(),
                Some(1) => "broadcast".into(),
                Some(2) => "multicast".into(),
                Some(3) => "other".into(),
                _ => hex(v),
            },
            Ty::IcmpType => v.first().map_or_else(|| hex(v), |t| icmp_type(*t, false)),
            Ty::Icmp6Type => v.first().map_or_else(|| hex(v), |t| icmp_type(*t, true)),
            Ty::AddrType => match host32() {
                0 => "unspec".into(),
                1 => "unicast".into(),
                2 => "local".into(),
                3 => "broadcast".into(),
                4 => "anycast".into(),
                5 => "multicast".into(),
                6 => "blackhole".into(),
                7 => "unreachable".into(),
                8 => "prohibit".into(),
                n => n.to_string(),
            },
            Ty::Hex => hex(v),
            Ty::Raw => be_hex(v),
        }
    }

    fn reject(&self, ty: u32, code: Option<u8>) -> String {
        let code = code.unwrap_or(0);
        match ty {
            1 => "reject with tcp reset".into(),
            // ICMPX: port-unreachable is the default.
            2 => match code {
                1 => "reject".into(),
                0 => "reject with icmpx no-route".into(),
                2 => "reject with icmpx host-unreachable".into(),
                3 => "reject with icmpx admin-prohibited".into(),
                c => format!("reject with icmpx {c}"),
            },
            0 => {
                let v6 = self.l3 == Some(NFPROTO_IPV6) || self.family == NFPROTO_IPV6;
                let (default, names): (u8, &[(u8, &str)]) = if v6 {
                    (
                        4,
                        &[
                            (0, "no-route"),
                            (1, "admin-prohibited"),
                            (3, "addr-unreachable"),
                            (4, "port-unreachable"),
                            (5, "policy-fail"),
                            (6, "reject-route"),
                        ],
                    )
                } else {
                    (
                        3,
                        &[
                            (0, "net-unreachable"),
                            (1, "host-unreachable"),
                            (2, "prot-unreachable"),
                            (3, "port-unreachable"),
                            (9, "net-prohibited"),
                            (10, "host-prohibited"),
                            (13, "admin-prohibited"),
                        ],
                    )
                };
                if code == default && (self.family == NFPROTO_IPV4 || self.family == NFPROTO_IPV6) {
                    return "reject".into();
                }
                let name = names
                    .iter()
                    .find(|(c, _)| *c == code)
                    .map_or_else(|| code.to_string(), |(_, n)| (*n).to_string());
                format!("reject with {} {name}", if v6 { "icmpv6" } else { "icmp" })
            }
            t => format!("reject type {t}"),
        }
    }

    fn port_reg(&self, r: u32) -> Option<u16> {
        match self.reg(r)? {
            (Src::Data(v), _) if v.len() >= 2 => Some(u16::from_be_bytes([v[0], v[1]])),
            _ => None,
        }
    }

    fn nat(&mut self, d: &[u8]) -> Option<()> {
        let u32a = |t: u16| attr(d, t).and_then(be32);
        let kind = if u32a(1)? == 0 { "snat" } else { "dnat" };
        let fam = u32a(2).unwrap_or(0) as u8;
        let ty = if fam == NFPROTO_IPV6 {
            Ty::Ip6
        } else {
            Ty::Ip4
        };
        let addr = |r: Option<u32>| match r.and_then(|r| self.reg(r)) {
            Some((Src::Data(v), _)) => Some(self.value(ty, v)),
            _ => None,
        };
        let (amin, amax) = (addr(u32a(3)), addr(u32a(4)));
        let (pmin, pmax) = (
            u32a(5).and_then(|r| self.port_reg(r)),
            u32a(6).and_then(|r| self.port_reg(r)),
        );
        let mut to = match (&amin, &amax) {
            (Some(a), Some(b)) if a != b => format!("{a}-{b}"),
            (Some(a), _) => a.clone(),
            _ => String::new(),
        };
        if ty == Ty::Ip6 && pmin.is_some() && !to.is_empty() {
            to = format!("[{to}]");
        }
        if let Some(p) = pmin {
            let _ = write!(to, ":{p}");
            if let Some(q) = pmax
                && q != p
            {
                let _ = write!(to, "-{q}");
            }
        }
        let fam_word = if self.family == NFPROTO_INET {
            if ty == Ty::Ip6 { " ip6" } else { " ip" }
        } else {
            ""
        };
        let flags = nat_flags(u32a(7).unwrap_or(0));
        self.statement(format!("{kind}{fam_word} to {to}{flags}"));
        Some(())
    }

    /// An iptables extension run by nf_tables (iptables-nft): the comment
    /// match and the REJECT target are read, others named.
    fn xt(&mut self, name: &str, d: &[u8]) -> Option<()> {
        let xname = string(attr(d, 1)?);
        let info = attr(d, 3).unwrap_or(&[]);
        match (name, xname.as_str()) {
            ("match", "comment") => {
                let c = string(info);
                self.statement(format!("comment {}", quote(&c)));
                self.comment = Some(c);
            }
            ("target", "REJECT") => {
                self.statement("reject".into());
                self.verdict = Some("reject".into());
            }
            // kube-proxy's KUBE-SEP-* DNAT where iptables-nft keeps the
            // xt target: its destination, as nft's own `dnat to` reads.
            ("target", "DNAT")
                if let Some(to) = xt_dnat(
                    attr(d, 2).and_then(be32).unwrap_or(0),
                    info,
                    self.family == NFPROTO_IPV6,
                ) =>
            {
                self.statement(format!("dnat to {to}"));
                self.verdict = Some(xname);
            }
            // iptables-nft before 1.8.8 runs `-m tcp/udp --dport N` as the
            // xt match: struct xt_tcp/xt_udp begin with spts[2], dpts[2]
            // (host order), and their invflags has XT_TCP_INV_DSTPT
            // (0x02; XT_UDP_INV_DSTPT too) for `! --dport`.
            ("match", proto @ ("tcp" | "udp")) => {
                let word = |i: usize| info.get(i..i + 2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
                let inv = info.get(if proto == "tcp" { 11 } else { 8 }).copied();
                if let (Some(lo), Some(hi), Some(inv)) = (word(4), word(6), inv)
                    && lo == hi
                    && inv & 0x02 == 0
                {
                    self.dst.port = Some(lo);
                    self.push(format!("{proto} dport {lo}"));
                } else {
                    self.statement(format!("xt match {}", quote(proto)));
                }
            }
            _ => {
                self.statement(format!("xt {name} {}", quote(&xname)));
                if name == "target" {
                    self.verdict = Some(xname);
                }
            }
        }
        Some(())
    }
}

/// The destination of an xt DNAT target's info, by revision: 0 is
/// struct nf_nat_ipv4_multi_range_compat (rangesize, then flags, min_ip,
/// max_ip, min and max port), 1 and 2 struct nf_nat_range(2) (flags, then
/// the min and max addresses of 16 bytes, the min and max port)
/// (include/uapi/linux/netfilter/nf_nat.h); ports in network order. None
/// without an address (NF_NAT_RANGE_MAP_IPS unset).
fn xt_dnat(rev: u32, info: &[u8], v6: bool) -> Option<String> {
    const MAP_IPS: u32 = 1;
    const PROTO_SPECIFIED: u32 = 2;
    let word = |at: usize| Some(u32::from_ne_bytes(info.get(at..at + 4)?.try_into().ok()?));
    let port = |at: usize| Some(u16::from_be_bytes(info.get(at..at + 2)?.try_into().ok()?));
    let (flags, addr, port) = if rev == 0 {
        let a: [u8; 4] = info.get(8..12)?.try_into().ok()?;
        (word(4)?, IpAddr::from(a), port(16))
    } else {
        let addr = if v6 {
            let a: [u8; 16] = info.get(4..20)?.try_into().ok()?;
            IpAddr::from(a)
        } else {
            let a: [u8; 4] = info.get(4..8)?.try_into().ok()?;
            IpAddr::from(a)
        };
        (word(0)?, addr, port(36))
    };
    if flags & MAP_IPS == 0 {
        return None;
    }
    Some(
        match (port.filter(|_| flags & PROTO_SPECIFIED != 0), addr) {
            (Some(p), IpAddr::V6(a)) => format!("[{a}]:{p}"),
            (Some(p), a) => format!("{a}:{p}"),
            (None, a) => a.to_string(),
        },
    )
}

/// NFTA_DATA_VALUE of a data attribute.
pub(crate) fn data_value(d: &[u8]) -> Option<&[u8]> {
    attr(d, NFTA_DATA_VALUE)
}

/// NFTA_DATA_VERDICT: the code, and the chain of a jump or goto.
pub(crate) fn verdict(d: &[u8]) -> Option<String> {
    let code = be32(attr(d, 1)?)? as i32;
    let chain = || attr(d, 2).map(string).unwrap_or_default();
    Some(match code {
        0 => "drop".into(),
        1 => "accept".into(),
        2 => "stolen".into(),
        3 => "queue".into(),
        4 => "repeat".into(),
        -1 => "continue".into(),
        -2 => "break".into(),
        -3 => format!("jump {}", chain()),
        -4 => format!("goto {}", chain()),
        -5 => "return".into(),
        c => format!("verdict {c}"),
    })
}

pub(crate) fn hex(v: &[u8]) -> String {
    // Registers hold host-order words; nft prints values as their number.
    if v.len() <= 4 {
        let mut b = [0u8; 4];
        b[..v.len()].copy_from_slice(v);
        format!("0x{:0w$x}", u32::from_ne_bytes(b), w = v.len() * 2)
    } else {
        be_hex(v)
    }
}

/// Bytes as one big-endian hex number, as nft prints raw payload.
fn be_hex(v: &[u8]) -> String {
    v.iter().fold("0x".to_string(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The prefix length of a contiguous mask, None if not one.
fn prefix_len(mask: &[u8]) -> Option<u32> {
    let mut bits = 0;
    let mut ended = false;
    for &b in mask {
        if ended && b != 0 {
            return None;
        }
        if b == 0xff {
            bits += 8;
        } else {
            if b.leading_ones() + b.trailing_zeros() != 8 {
                return None;
            }
            bits += b.leading_ones();
            ended = true;
        }
    }
    Some(bits)
}

pub(crate) fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        2 => "igmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        33 => "dccp".into(),
        41 => "ipv6".into(),
        47 => "gre".into(),
        50 => "esp".into(),
        51 => "ah".into(),
        58 => "ipv6-icmp".into(),
        132 => "sctp".into(),
        136 => "udplite".into(),
        n => n.to_string(),
    }
}

fn icmp_type(t: u8, v6: bool) -> String {
    let n = if v6 {
        match t {
            1 => "destination-unreachable",
            2 => "packet-too-big",
            3 => "time-exceeded",
            128 => "echo-request",
            129 => "echo-reply",
            133 => "nd-router-solicit",
            134 => "nd-router-advert",
            135 => "nd-neighbor-solicit",
            136 => "nd-neighbor-advert",
            _ => return t.to_string(),
        }
    } else {
        match t {
            0 => "echo-reply",
            3 => "destination-unreachable",
            5 => "redirect",
            8 => "echo-request",
            11 => "time-exceeded",
            _ => return t.to_string(),
        }
    };
    n.into()
}

fn meta_len(key: u32) -> u32 {
    match key {
        6 | 7 | 17 | 18 | 26 | 27 | 34 => 16,
        15 | 16 | 19 => 1,
        1 | 8 | 9 => 2,
        _ => 4,
    }
}

fn meta_name(key: u32) -> String {
    match key {
        0 => "meta length",
        1 => "meta protocol",
        2 => "meta priority",
        3 => "meta mark",
        4 => "iif",
        5 => "oif",
        6 => "iifname",
        7 => "oifname",
        8 => "iiftype",
        9 => "oiftype",
        10 => "meta skuid",
        11 => "meta skgid",
        12 => "meta nftrace",
        15 => "meta nfproto",
        16 => "meta l4proto",
        17 => "meta ibrname",
        18 => "meta obrname",
        19 => "meta pkttype",
        20 => "meta cpu",
        21 => "iifgroup",
        22 => "oifgroup",
        23 => "meta cgroup",
        24 => "meta random",
        26 => "meta iifkind",
        27 => "meta oifkind",
        34 => "meta sdifname",
        k => return format!("meta key{k}"),
    }
    .into()
}

fn ct_len(key: u32) -> u32 {
    match key {
        1 | 7 | 10 => 1,
        11 | 12 | 17 => 2,
        8 | 9 | 13 | 21 | 22 | 6 => 16,
        14..=16 => 8,
        _ => 4,
    }
}

fn ct_name(key: u32, dir: Option<u8>) -> String {
    let field = match key {
        0 => "state",
        1 => "direction",
        2 => "status",
        3 => "mark",
        4 => "secmark",
        5 => "expiration",
        6 => "helper",
        7 => "l3proto",
        8 => "saddr",
        9 => "daddr",
        10 => "protocol",
        11 => "proto-src",
        12 => "proto-dst",
        13 => "label",
        14 => "packets",
        15 => "bytes",
        16 => "avgpkt",
        17 => "zone",
        19 => "ip saddr",
        20 => "ip daddr",
        21 => "ip6 saddr",
        22 => "ip6 daddr",
        23 => "id",
        _ => return format!("ct key{key}"),
    };
    match dir {
        Some(0) => format!("ct original {field}"),
        Some(1) => format!("ct reply {field}"),
        _ => format!("ct {field}"),
    }
}

fn nat_flags(f: u32) -> String {
    let names: Vec<&str> = [(4, "random"), (16, "fully-random"), (8, "persistent")]
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" {}", names.join(","))
    }
}

fn log_level(l: u32) -> &'static str {
    match l {
        0 => "emerg",
        1 => "alert",
        2 => "crit",
        3 => "err",
        5 => "notice",
        6 => "info",
        7 => "debug",
        8 => "audit",
        _ => "warn",
    }
}

#[cfg(test)]
mod tests;
