//! The IPsec policies and states of a namespace, as `ip xfrm policy` and
//! `ip xfrm state` list them: XFRM_MSG_GETPOLICY and XFRM_MSG_GETSA dumps
//! on NETLINK_XFRM (include/uapi/linux/xfrm.h, net/xfrm/xfrm_user.c). Read
//! where a followed packet vanished into xfrm: a policy that blocks it,
//! or one whose template has no state to encrypt it with (XfrmOutNoStates).

use std::{fmt, net::IpAddr, path::Path};

use serde::{Deserialize, Serialize};

use super::netlink::{NLMSG_HDRLEN, attr, be32, dump, ne32};

/// XFRM_MSG_NEWSA, XFRM_MSG_GETSA, XFRM_MSG_NEWPOLICY, XFRM_MSG_GETPOLICY
/// (enum in include/uapi/linux/xfrm.h).
const XFRM_MSG_NEWSA: u16 = 0x10;
const XFRM_MSG_GETSA: u16 = 0x12;
const XFRM_MSG_NEWPOLICY: u16 = 0x13;
const XFRM_MSG_GETPOLICY: u16 = 0x15;
/// XFRMA_TMPL, XFRMA_MARK (enum xfrm_attr_type_t, include/uapi/linux/xfrm.h).
const XFRMA_TMPL: u16 = 5;
const XFRMA_MARK: u16 = 21;

/// sizeof(struct xfrm_selector): daddr, saddr (xfrm_address_t, 16 bytes
/// each), dport, dport_mask, sport, sport_mask (be16), family (u16) at 40,
/// prefixlen_d at 42, prefixlen_s at 43, proto at 44, ifindex (int) at 48,
/// user at 52.
const SELECTOR_LEN: usize = 56;
const SEL_SADDR: usize = 16;
const SEL_FAMILY: usize = 40;
const SEL_PREFIXLEN_D: usize = 42;
const SEL_PREFIXLEN_S: usize = 43;
const SEL_PROTO: usize = 44;
/// sizeof(struct xfrm_userpolicy_info): sel, lft (xfrm_lifetime_cfg, 64
/// bytes), curlft (xfrm_lifetime_cur, 32), priority at 152, index at 156,
/// dir at 160, action at 161, flags, share.
const USERPOLICY_INFO_LEN: usize = 168;
const POL_PRIORITY: usize = 152;
const POL_DIR: usize = 160;
const POL_ACTION: usize = 161;
/// sizeof(struct xfrm_user_tmpl): id (struct xfrm_id: daddr, spi be32 at
/// 16, proto at 20; 24 bytes), family (u16) at 24, saddr at 28, reqid at
/// 44, mode at 48, share at 49, optional at 50, aalgos, ealgos, calgos.
const USER_TMPL_LEN: usize = 64;
const TMPL_PROTO: usize = 20;
const TMPL_FAMILY: usize = 24;
const TMPL_SADDR: usize = 28;
const TMPL_REQID: usize = 44;
const TMPL_MODE: usize = 48;
const TMPL_OPTIONAL: usize = 50;
/// sizeof(struct xfrm_usersa_info) on 64-bit kernels: sel, id (xfrm_id)
/// at 56 (its spi at 72, proto at 76), saddr at 80, lft, curlft, stats,
/// seq, reqid at 208, family (u16) at 212, mode at 214, replay_window,
/// flags, padded to 224 by the u64s of lft.
const USERSA_INFO_LEN: usize = 224;
const SA_ID: usize = 56;
const SA_SADDR: usize = 80;
const SA_REQID: usize = 208;
const SA_FAMILY: usize = 212;
const SA_MODE: usize = 214;

/// A namespace's IPsec configuration: its security policy database and
/// its security associations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Xfrm {
    /// The policies (XFRM_MSG_NEWPOLICY replies), as the kernel lists them.
    pub policies: Vec<XfrmPolicy>,
    /// The states (XFRM_MSG_NEWSA replies).
    pub states: Vec<XfrmState>,
}

/// One policy: an XFRM_MSG_NEWPOLICY message (struct
/// xfrm_userpolicy_info, then XFRMA_* attributes; copy_to_user_policy()).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XfrmPolicy {
    /// `in`, `out` or `fwd` (XFRM_POLICY_IN/OUT/FWD).
    pub dir: String,
    /// `allow` or `block` (XFRM_POLICY_ALLOW/BLOCK): a blocked packet is
    /// dropped (XfrmInPolBlock, XfrmOutPolBlock, XfrmFwdHdrError...).
    pub action: String,
    /// The selector's source prefix (xfrm_selector.saddr/prefixlen_s),
    /// `10.1.0.0/16`.
    pub src: String,
    /// The selector's destination prefix (daddr/prefixlen_d).
    pub dst: String,
    /// The selector's IP protocol (xfrm_selector.proto), 0 for any.
    pub proto: u8,
    /// xfrm_userpolicy_info.priority: the lower, the earlier it matches.
    pub priority: u32,
    /// XFRMA_MARK (struct xfrm_mark): value and mask the packet's mark
    /// must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<(u32, u32)>,
    /// XFRMA_TMPL: the transforms an allowed packet must go through (out)
    /// or have gone through (in, fwd).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<XfrmTmpl>,
}

/// One template of a policy (struct xfrm_user_tmpl).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XfrmTmpl {
    /// xfrm_id.proto: `esp`, `ah`, `comp` (IPPROTO_*), else its number.
    pub proto: String,
    /// `transport`, `tunnel`, `ro`, `in_trigger`, `beet`, `iptfs`
    /// (XFRM_MODE_*).
    pub mode: String,
    /// The request id a state must have to serve it; 0 for any.
    pub reqid: u32,
    /// The tunnel's outer source (saddr); None when unset (all zeros, as
    /// in transport mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<IpAddr>,
    /// The tunnel's outer destination (id.daddr); None when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<IpAddr>,
    /// `level use` (xfrm_user_tmpl.optional): the packet may skip it.
    pub optional: bool,
}

/// One security association: an XFRM_MSG_NEWSA message (struct
/// xfrm_usersa_info; copy_to_user_state()).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XfrmState {
    /// xfrm_usersa_info.saddr.
    pub src: IpAddr,
    /// xfrm_usersa_info.id.daddr.
    pub dst: IpAddr,
    /// id.proto: `esp`, `ah`, `comp`, else its number.
    pub proto: String,
    /// id.spi, in host order.
    pub spi: u32,
    /// xfrm_usersa_info.reqid: what ties it to policies' templates.
    pub reqid: u32,
    /// xfrm_usersa_info.mode, XFRM_MODE_* as in [`XfrmTmpl::mode`].
    pub mode: String,
}

/// The policies and states of the namespace at `path` (entered on this
/// thread), or of this thread's namespace when None. None when the
/// namespace cannot be entered or either dump fails (no CONFIG_XFRM_USER;
/// no CAP_NET_ADMIN: xfrm_user_rcv_msg() wants it even for a dump).
pub fn xfrm_in(path: Option<&Path>) -> Option<Xfrm> {
    let _g = match path.map(crate::node::netns::NetnsGuard::enter) {
        Some(Ok(g)) => Some(g),
        Some(Err(_)) => return None,
        None => None,
    };
    let mut x = Xfrm::default();
    // Both dumps take an empty body: xfrm_user_rcv_msg() starts a dump of
    // GETSA/GETPOLICY with NLM_F_DUMP before parsing any, xfrm_dump_sa()
    // parses optional attributes right after the header
    // (XFRMA_ADDRESS_FILTER, XFRMA_PROTO), as iproute2 sends them.
    dump(
        libc::NETLINK_XFRM,
        XFRM_MSG_GETPOLICY,
        &[],
        &mut |ty, msg| {
            if ty == XFRM_MSG_NEWPOLICY
                && let Some(p) = parse_policy(msg)
            {
                x.policies.push(p);
            }
        },
    )?;
    dump(libc::NETLINK_XFRM, XFRM_MSG_GETSA, &[], &mut |ty, msg| {
        if ty == XFRM_MSG_NEWSA
            && let Some(s) = parse_state(msg)
        {
            x.states.push(s);
        }
    })?;
    Some(x)
}

/// An xfrm_address_t of `family` (AF_INET: its first 4 bytes). None for
/// another family or a short buffer.
fn address(b: &[u8], family: u16) -> Option<IpAddr> {
    match i32::from(family) {
        libc::AF_INET => Some(IpAddr::from(<[u8; 4]>::try_from(b.get(..4)?).ok()?)),
        libc::AF_INET6 => Some(IpAddr::from(<[u8; 16]>::try_from(b.get(..16)?).ok()?)),
        _ => None,
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// An IPsec protocol's name, as `ip xfrm` writes it.
fn proto_name(p: u8) -> String {
    match i32::from(p) {
        libc::IPPROTO_ESP => "esp".into(),
        libc::IPPROTO_AH => "ah".into(),
        libc::IPPROTO_COMP => "comp".into(),
        libc::IPPROTO_ROUTING => "route2".into(),
        libc::IPPROTO_DSTOPTS => "hao".into(),
        p => p.to_string(),
    }
}

/// XFRM_MODE_* (include/uapi/linux/xfrm.h; XFRM_MODE_IPTFS since 6.14).
fn mode_name(m: u8) -> String {
    match m {
        0 => "transport".into(),
        1 => "tunnel".into(),
        2 => "ro".into(),
        3 => "in_trigger".into(),
        4 => "beet".into(),
        5 => "iptfs".into(),
        m => m.to_string(),
    }
}

/// A struct xfrm_selector's source and destination prefixes and its
/// family. None for a family other than AF_INET/AF_INET6
/// (verify_newpolicy_info() accepts no other) or a short buffer.
fn selector(sel: &[u8]) -> Option<(String, String, u16)> {
    let family = u16_at(sel, SEL_FAMILY)?;
    let dst = address(sel, family)?;
    let src = address(sel.get(SEL_SADDR..)?, family)?;
    let (plen_d, plen_s) = (*sel.get(SEL_PREFIXLEN_D)?, *sel.get(SEL_PREFIXLEN_S)?);
    Some((format!("{src}/{plen_s}"), format!("{dst}/{plen_d}"), family))
}

/// An XFRM_MSG_NEWPOLICY message, header included. None when it is too
/// short or its selector's family is unknown.
fn parse_policy(msg: &[u8]) -> Option<XfrmPolicy> {
    let info = msg.get(NLMSG_HDRLEN..NLMSG_HDRLEN + USERPOLICY_INFO_LEN)?;
    let (src, dst, family) = selector(&info[..SELECTOR_LEN])?;
    let attrs = &msg[NLMSG_HDRLEN + USERPOLICY_INFO_LEN..];
    let templates = attr(attrs, XFRMA_TMPL).map_or_else(Vec::new, |t| {
        t.chunks_exact(USER_TMPL_LEN)
            .filter_map(|c| template(c, family))
            .collect()
    });
    let mark = attr(attrs, XFRMA_MARK).and_then(|m| Some((ne32(m)?, ne32(m.get(4..)?)?)));
    Some(XfrmPolicy {
        // XFRM_POLICY_IN, _OUT, _FWD; XFRM_POLICY_ALLOW, _BLOCK
        // (include/uapi/linux/xfrm.h).
        dir: match info[POL_DIR] {
            0 => "in".into(),
            1 => "out".into(),
            2 => "fwd".into(),
            d => d.to_string(),
        },
        action: match info[POL_ACTION] {
            0 => "allow".into(),
            1 => "block".into(),
            a => a.to_string(),
        },
        src,
        dst,
        proto: info[SEL_PROTO],
        priority: ne32(&info[POL_PRIORITY..])?,
        mark,
        templates,
    })
}

/// One struct xfrm_user_tmpl; its addresses of its own family, or of the
/// policy's (`family`) when it has none.
fn template(t: &[u8], family: u16) -> Option<XfrmTmpl> {
    let fam = match u16_at(t, TMPL_FAMILY)? {
        0 => family,
        f => f,
    };
    let set = |a: Option<IpAddr>| a.filter(|a| !a.is_unspecified());
    Some(XfrmTmpl {
        proto: proto_name(*t.get(TMPL_PROTO)?),
        mode: mode_name(*t.get(TMPL_MODE)?),
        reqid: ne32(t.get(TMPL_REQID..)?)?,
        src: set(address(t.get(TMPL_SADDR..)?, fam)),
        dst: set(address(t, fam)),
        optional: *t.get(TMPL_OPTIONAL)? != 0,
    })
}

/// An XFRM_MSG_NEWSA message, header included. None when it is too short
/// or its family is unknown.
fn parse_state(msg: &[u8]) -> Option<XfrmState> {
    let info = msg.get(NLMSG_HDRLEN..NLMSG_HDRLEN + USERSA_INFO_LEN)?;
    let family = u16_at(info, SA_FAMILY)?;
    let id = &info[SA_ID..];
    Some(XfrmState {
        src: address(&info[SA_SADDR..], family)?,
        dst: address(id, family)?,
        // struct xfrm_id: spi (be32) at 16, proto at 20.
        proto: proto_name(id[20]),
        spi: be32(&id[16..])?,
        reqid: ne32(&info[SA_REQID..])?,
        mode: mode_name(info[SA_MODE]),
    })
}

/// `10.1.0.0/16` as an address and a prefix length.
fn prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (a, l) = s.split_once('/')?;
    Some((a.parse().ok()?, l.parse().ok()?))
}

/// Whether `addr` is in the prefix `net/len` (of the same family).
fn in_prefix(net: IpAddr, len: u8, addr: IpAddr) -> bool {
    match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

impl XfrmPolicy {
    /// Whether a packet from `src` to `dst` falls under this policy's
    /// selector, as xfrm_selector_match() decides by addresses: the same
    /// family and both prefixes. The selector's protocol, ports, ifindex
    /// and the policy's mark are not checked.
    pub fn matches(&self, src: IpAddr, dst: IpAddr) -> bool {
        let (Some((s, sl)), Some((d, dl))) = (prefix(&self.src), prefix(&self.dst)) else {
            return false;
        };
        in_prefix(s, sl, src) && in_prefix(d, dl, dst)
    }
}

impl Xfrm {
    /// The state that would serve template `t`, roughly as
    /// xfrm_state_find() looks for one: the same protocol and mode, the
    /// same reqid when the template has one, and the template's tunnel
    /// addresses when it has them. Simplified: a template of reqid 0
    /// takes a state of any reqid (the kernel wants equal reqids); the
    /// SPI, marks, if_id, the state's family and validity, and a
    /// transport template's addresses (the packet's) are not compared.
    pub fn state_for(&self, t: &XfrmTmpl) -> Option<&XfrmState> {
        self.states.iter().find(|s| {
            s.proto == t.proto
                && s.mode == t.mode
                && (t.reqid == 0 || s.reqid == t.reqid)
                && t.dst.is_none_or(|d| d == s.dst)
                && t.src.is_none_or(|a| a == s.src)
        })
    }
}

/// One line as `ip xfrm policy` prints a policy: `src 10.1.0.0/24 dst
/// 10.2.0.0/24 dir out priority 0 tmpl src 192.0.2.1 dst 192.0.2.2 proto
/// esp reqid 11 mode tunnel`.
impl fmt::Display for XfrmPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "src {} dst {}", self.src, self.dst)?;
        if self.proto != 0 {
            write!(f, " proto {}", self.proto)?;
        }
        write!(f, " dir {}", self.dir)?;
        if self.action != "allow" {
            write!(f, " action {}", self.action)?;
        }
        write!(f, " priority {}", self.priority)?;
        if let Some((v, m)) = self.mark {
            write!(f, " mark {v:#x}/{m:#x}")?;
        }
        for t in &self.templates {
            write!(f, " tmpl")?;
            if let Some(s) = t.src {
                write!(f, " src {s}")?;
            }
            if let Some(d) = t.dst {
                write!(f, " dst {d}")?;
            }
            write!(f, " proto {} reqid {} mode {}", t.proto, t.reqid, t.mode)?;
            if t.optional {
                write!(f, " level use")?;
            }
        }
        Ok(())
    }
}

/// One line as `ip xfrm state` prints a state's first two: `src 192.0.2.1
/// dst 192.0.2.2 proto esp spi 0x00000100 reqid 11 mode tunnel`.
impl fmt::Display for XfrmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "src {} dst {} proto {} spi {:#010x} reqid {} mode {}",
            self.src, self.dst, self.proto, self.spi, self.reqid, self.mode
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::netlink::put_attr;
    use std::mem::{offset_of, size_of};

    /// include/uapi/linux/xfrm.h's structs, to check the offsets the
    /// parsers use against the compiler's layout.
    #[repr(C)]
    struct Selector {
        daddr: [u32; 4],
        saddr: [u32; 4],
        ports: [u16; 4],
        family: u16,
        prefixlen_d: u8,
        prefixlen_s: u8,
        proto: u8,
        ifindex: i32,
        user: u32,
    }
    #[repr(C)]
    struct Id {
        daddr: [u32; 4],
        spi: u32,
        proto: u8,
    }
    #[repr(C)]
    struct UserpolicyInfo {
        sel: Selector,
        lft: [u64; 8],
        curlft: [u64; 4],
        priority: u32,
        index: u32,
        dir: u8,
        action: u8,
        flags: u8,
        share: u8,
    }
    #[repr(C)]
    struct UserTmpl {
        id: Id,
        family: u16,
        saddr: [u32; 4],
        reqid: u32,
        mode: u8,
        share: u8,
        optional: u8,
        algos: [u32; 3],
    }
    #[repr(C)]
    struct UsersaInfo {
        sel: Selector,
        id: Id,
        saddr: [u32; 4],
        lft: [u64; 8],
        curlft: [u64; 4],
        stats: [u32; 3],
        seq: u32,
        reqid: u32,
        family: u16,
        mode: u8,
        replay_window: u8,
        flags: u8,
    }

    #[test]
    fn layouts_are_the_kernels() {
        assert_eq!(size_of::<Selector>(), SELECTOR_LEN);
        assert_eq!(offset_of!(Selector, saddr), SEL_SADDR);
        assert_eq!(offset_of!(Selector, family), SEL_FAMILY);
        assert_eq!(offset_of!(Selector, prefixlen_d), SEL_PREFIXLEN_D);
        assert_eq!(offset_of!(Selector, prefixlen_s), SEL_PREFIXLEN_S);
        assert_eq!(offset_of!(Selector, proto), SEL_PROTO);
        assert_eq!(size_of::<UserpolicyInfo>(), USERPOLICY_INFO_LEN);
        assert_eq!(offset_of!(UserpolicyInfo, priority), POL_PRIORITY);
        assert_eq!(offset_of!(UserpolicyInfo, dir), POL_DIR);
        assert_eq!(offset_of!(UserpolicyInfo, action), POL_ACTION);
        assert_eq!(size_of::<UserTmpl>(), USER_TMPL_LEN);
        assert_eq!(offset_of!(UserTmpl, id) + offset_of!(Id, proto), TMPL_PROTO);
        assert_eq!(offset_of!(UserTmpl, family), TMPL_FAMILY);
        assert_eq!(offset_of!(UserTmpl, saddr), TMPL_SADDR);
        assert_eq!(offset_of!(UserTmpl, reqid), TMPL_REQID);
        assert_eq!(offset_of!(UserTmpl, mode), TMPL_MODE);
        assert_eq!(offset_of!(UserTmpl, optional), TMPL_OPTIONAL);
        assert_eq!(size_of::<UsersaInfo>(), USERSA_INFO_LEN);
        assert_eq!(offset_of!(UsersaInfo, id), SA_ID);
        assert_eq!(offset_of!(Id, spi), 16);
        assert_eq!(offset_of!(Id, proto), 20);
        assert_eq!(offset_of!(UsersaInfo, saddr), SA_SADDR);
        assert_eq!(offset_of!(UsersaInfo, reqid), SA_REQID);
        assert_eq!(offset_of!(UsersaInfo, family), SA_FAMILY);
        assert_eq!(offset_of!(UsersaInfo, mode), SA_MODE);
    }

    /// A netlink message of `ty`: header, `body`, `attrs`.
    fn message(ty: u16, body: &[u8], attrs: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; NLMSG_HDRLEN];
        m[4..6].copy_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(body);
        m.extend_from_slice(attrs);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    /// An IPv4 struct xfrm_selector.
    fn selector_v4(src: [u8; 4], plen_s: u8, dst: [u8; 4], plen_d: u8) -> Vec<u8> {
        let mut s = vec![0u8; SELECTOR_LEN];
        s[..4].copy_from_slice(&dst);
        s[SEL_SADDR..SEL_SADDR + 4].copy_from_slice(&src);
        s[SEL_FAMILY..SEL_FAMILY + 2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        s[SEL_PREFIXLEN_D] = plen_d;
        s[SEL_PREFIXLEN_S] = plen_s;
        s
    }

    /// An IPv4 struct xfrm_user_tmpl.
    fn tmpl_v4(src: [u8; 4], dst: [u8; 4], proto: u8, reqid: u32, mode: u8) -> Vec<u8> {
        let mut t = vec![0u8; USER_TMPL_LEN];
        t[..4].copy_from_slice(&dst);
        t[TMPL_PROTO] = proto;
        t[TMPL_FAMILY..TMPL_FAMILY + 2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        t[TMPL_SADDR..TMPL_SADDR + 4].copy_from_slice(&src);
        t[TMPL_REQID..TMPL_REQID + 4].copy_from_slice(&reqid.to_ne_bytes());
        t[TMPL_MODE] = mode;
        t
    }

    /// `src 10.1.0.0/24 dst 10.2.0.0/24 dir out priority 7 mark 0x1/0xff`
    /// with an ESP tunnel template and an optional transport one.
    fn out_policy() -> Vec<u8> {
        let mut info = vec![0u8; USERPOLICY_INFO_LEN];
        info[..SELECTOR_LEN].copy_from_slice(&selector_v4([10, 1, 0, 0], 24, [10, 2, 0, 0], 24));
        info[POL_PRIORITY..POL_PRIORITY + 4].copy_from_slice(&7u32.to_ne_bytes());
        info[POL_DIR] = 1;
        let mut tmpls = tmpl_v4([192, 0, 2, 1], [192, 0, 2, 2], 50, 11, 1);
        let mut transport = tmpl_v4([0; 4], [0; 4], 51, 0, 0);
        transport[TMPL_OPTIONAL] = 1;
        tmpls.extend(transport);
        let mut attrs = Vec::new();
        put_attr(&mut attrs, XFRMA_TMPL, &tmpls);
        let mut mark = 1u32.to_ne_bytes().to_vec();
        mark.extend_from_slice(&0xffu32.to_ne_bytes());
        put_attr(&mut attrs, XFRMA_MARK, &mark);
        message(XFRM_MSG_NEWPOLICY, &info, &attrs)
    }

    /// An ESP tunnel state 192.0.2.1 -> 192.0.2.2, SPI 0x100, reqid 11.
    fn state() -> Vec<u8> {
        let mut info = vec![0u8; USERSA_INFO_LEN];
        info[SA_ID..SA_ID + 4].copy_from_slice(&[192, 0, 2, 2]);
        info[SA_ID + 16..SA_ID + 20].copy_from_slice(&0x100u32.to_be_bytes());
        info[SA_ID + 20] = 50;
        info[SA_SADDR..SA_SADDR + 4].copy_from_slice(&[192, 0, 2, 1]);
        info[SA_REQID..SA_REQID + 4].copy_from_slice(&11u32.to_ne_bytes());
        info[SA_FAMILY..SA_FAMILY + 2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        info[SA_MODE] = 1;
        message(XFRM_MSG_NEWSA, &info, &[])
    }

    #[test]
    fn reads_a_policy_with_templates_and_a_mark() {
        let p = parse_policy(&out_policy()).expect("a policy");
        assert_eq!(
            p,
            XfrmPolicy {
                dir: "out".into(),
                action: "allow".into(),
                src: "10.1.0.0/24".into(),
                dst: "10.2.0.0/24".into(),
                proto: 0,
                priority: 7,
                mark: Some((1, 0xff)),
                templates: vec![
                    XfrmTmpl {
                        proto: "esp".into(),
                        mode: "tunnel".into(),
                        reqid: 11,
                        src: Some(IpAddr::from([192, 0, 2, 1])),
                        dst: Some(IpAddr::from([192, 0, 2, 2])),
                        optional: false,
                    },
                    XfrmTmpl {
                        proto: "ah".into(),
                        mode: "transport".into(),
                        reqid: 0,
                        src: None,
                        dst: None,
                        optional: true,
                    },
                ],
            }
        );
        assert_eq!(
            p.to_string(),
            "src 10.1.0.0/24 dst 10.2.0.0/24 dir out priority 7 mark 0x1/0xff \
             tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 11 mode tunnel \
             tmpl proto ah reqid 0 mode transport level use"
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(p.matches(ip("10.1.0.5"), ip("10.2.0.255")));
        assert!(!p.matches(ip("10.1.1.5"), ip("10.2.0.1")));
        assert!(!p.matches(ip("10.2.0.1"), ip("10.1.0.5")));
        assert!(!p.matches(ip("::1"), ip("::2")));
        let any = XfrmPolicy {
            src: "::/0".into(),
            dst: "fd00::/8".into(),
            ..p.clone()
        };
        assert!(any.matches(ip("2001:db8::1"), ip("fd12::1")));
        assert!(!any.matches(ip("10.1.0.5"), ip("fd12::1")));
        assert!(!any.matches(ip("2001:db8::1"), ip("fe80::1")));
    }

    #[test]
    fn reads_a_state_and_finds_it_for_a_template() {
        let s = parse_state(&state()).expect("a state");
        assert_eq!(
            s,
            XfrmState {
                src: IpAddr::from([192, 0, 2, 1]),
                dst: IpAddr::from([192, 0, 2, 2]),
                proto: "esp".into(),
                spi: 0x100,
                reqid: 11,
                mode: "tunnel".into(),
            }
        );
        assert_eq!(
            s.to_string(),
            "src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x00000100 reqid 11 mode tunnel"
        );
        let p = parse_policy(&out_policy()).unwrap();
        let x = Xfrm {
            policies: vec![p.clone()],
            states: vec![s.clone()],
        };
        assert_eq!(x.state_for(&p.templates[0]), Some(&s));
        // The AH template has none; neither has one of another reqid, nor
        // one of reqid 0 to another destination.
        assert_eq!(x.state_for(&p.templates[1]), None);
        let mut t = p.templates[0].clone();
        t.reqid = 12;
        assert_eq!(x.state_for(&t), None);
        t.reqid = 0;
        assert_eq!(x.state_for(&t), Some(&s));
        t.dst = Some(IpAddr::from([192, 0, 2, 3]));
        assert_eq!(x.state_for(&t), None);
    }

    #[test]
    fn short_or_unknown_messages_are_skipped() {
        let p = out_policy();
        for n in 0..NLMSG_HDRLEN + USERPOLICY_INFO_LEN {
            assert!(parse_policy(&p[..n]).is_none(), "{n}");
        }
        // A template array with a partial one keeps the whole ones.
        let info = &p[NLMSG_HDRLEN..NLMSG_HDRLEN + USERPOLICY_INFO_LEN];
        let mut tmpls = tmpl_v4([192, 0, 2, 1], [192, 0, 2, 2], 50, 11, 1);
        tmpls.extend([0u8; 10]);
        let mut attrs = Vec::new();
        put_attr(&mut attrs, XFRMA_TMPL, &tmpls);
        let one = parse_policy(&message(XFRM_MSG_NEWPOLICY, info, &attrs)).unwrap();
        assert_eq!(one.templates.len(), 1);
        let s = state();
        for n in 0..s.len() {
            assert!(parse_state(&s[..n]).is_none(), "{n}");
        }
        // An unknown family is no policy.
        let mut bad = out_policy();
        bad[NLMSG_HDRLEN + SEL_FAMILY] = 99;
        assert!(parse_policy(&bad).is_none());
        assert_eq!(proto_name(99), "99");
        assert_eq!(mode_name(4), "beet");
        assert!(!in_prefix(
            IpAddr::from([10, 0, 0, 0]),
            0,
            "::1".parse().unwrap()
        ));
        assert!(in_prefix(
            IpAddr::from([10, 0, 0, 0]),
            0,
            IpAddr::from([1, 2, 3, 4])
        ));
        assert!(in_prefix(
            IpAddr::from([10, 0, 0, 1]),
            32,
            IpAddr::from([10, 0, 0, 1])
        ));
    }

    /// Policies made by `ip xfrm policy add` in a namespace of the test's
    /// own, read back; a state too when this kernel can make one (ESP may
    /// be missing: then said loudly).
    #[test]
    fn reads_the_policies_ip_xfrm_added() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("!!!!! SKIPPED reads_the_policies_ip_xfrm_added: not root !!!!!");
            return;
        }
        let ns = crate::node::netns::TestNetns::add("tracer-xfrm");
        let path = crate::node::netns::named_dir().join(&ns.0);
        let out = "ip xfrm policy add src 10.1.0.0/24 dst 10.2.0.0/24 dir out \
                   tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 11 mode tunnel";
        let fwd = "ip xfrm policy add src 10.3.0.0/24 dst 10.4.0.0/16 dir fwd action block \
                   priority 5 mark 7 mask 0xff";
        for cmd in [out, fwd] {
            let args: Vec<&str> = cmd.split_whitespace().collect();
            assert!(ns.run(&args), "{cmd}");
        }
        let state = "ip xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x100 \
                     reqid 11 mode tunnel enc cbc(aes) 0x00112233445566778899aabbccddeeff";
        let with_state = ns.run(&state.split_whitespace().collect::<Vec<_>>());
        let x = xfrm_in(Some(&path)).expect("XFRM dumps");
        assert_eq!(x.policies.len(), 2, "{x:?}");
        let o = x.policies.iter().find(|p| p.dir == "out").unwrap();
        assert_eq!(
            o.to_string(),
            "src 10.1.0.0/24 dst 10.2.0.0/24 dir out priority 0 \
             tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 11 mode tunnel"
        );
        assert!(o.matches("10.1.0.9".parse().unwrap(), "10.2.0.1".parse().unwrap()));
        let f = x.policies.iter().find(|p| p.dir == "fwd").unwrap();
        assert_eq!(
            (f.action.as_str(), f.priority, f.mark, f.templates.len()),
            ("block", 5, Some((7, 0xff)), 0),
            "{f}"
        );
        assert_eq!(f.dst, "10.4.0.0/16");
        if with_state {
            let s = x.state_for(&o.templates[0]).expect("the state");
            assert_eq!((s.spi, s.reqid, s.mode.as_str()), (0x100, 11, "tunnel"));
        } else {
            eprintln!(
                "!!!!! SKIPPED the state part of reads_the_policies_ip_xfrm_added: \
                 `ip xfrm state add ... proto esp` failed (no ESP in this kernel) !!!!!"
            );
            assert!(x.states.is_empty(), "{x:?}");
        }
        for p in &x.policies {
            eprintln!("{p}");
        }
        assert!(xfrm_in(None).is_some());
        assert!(xfrm_in(Some(Path::new("/nonexistent"))).is_none());
    }
}
