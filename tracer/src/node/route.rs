//! The policy routing of a namespace, for a packet that found no route:
//! its rules (RTM_GETRULE, what `ip rule` lists) and how many routes each
//! table holds (RTM_GETROUTE), IPv4 and IPv6. Read where a followed packet
//! was dropped for want of a route.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
};

use serde::{Deserialize, Serialize};

use super::netlink;

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRule {
    /// 4 or 6.
    pub family: u8,
    pub priority: u32,
    /// `from` and `to` selectors (None: all).
    pub src: Option<(IpAddr, u8)>,
    pub dst: Option<(IpAddr, u8)>,
    pub iif: Option<String>,
    pub oif: Option<String>,
    /// fwmark and its mask (0/0: none).
    pub fwmark: u32,
    pub fwmask: u32,
    /// `not`: the selectors' result is inverted.
    pub invert: bool,
    /// FR_ACT_*: 1 lookup, 2 goto, 3 nop, 6 blackhole, 7 unreachable,
    /// 8 prohibit.
    pub action: u8,
    pub table: u32,
}

/// How many routes a table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSize {
    pub family: u8,
    pub table: u32,
    pub routes: u32,
}

/// A namespace's rules and table sizes, and the route lookups of the
/// destinations followed packets were dropped for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routing {
    pub rules: Vec<RouteRule>,
    pub tables: Vec<TableSize>,
    /// `ip route get` of each such destination (recordings made before
    /// they were kept have none).
    #[serde(default)]
    pub lookups: Vec<RouteLookup>,
}

/// What a lookup of one destination asks: as the kernel routes a packet
/// from `src` that came in by `iif` (forwarded), or one sent from the
/// namespace itself (`iif` None).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteQuery {
    pub dst: IpAddr,
    pub src: IpAddr,
    pub iif: Option<String>,
}

/// A lookup and what the routing table answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteLookup {
    pub query: RouteQuery,
    pub outcome: RouteOutcome,
}

/// The answer to a route lookup. The refusals are the route types (or
/// `ip rule` actions) `blackhole`, `unreachable` and `prohibit`, which the
/// kernel answers with an error of its own (fib_props[],
/// net/ipv4/fib_semantics.c: -EINVAL, -EHOSTUNREACH, -EACCES);
/// `no_route` is -ENETUNREACH (no route matches).
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RouteOutcome {
    /// A usable route: out by `dev`, via `gw` when not on-link.
    Via {
        dev: String,
        gw: Option<IpAddr>,
        table: u32,
    },
    /// The destination is an address of the namespace.
    Local,
    Blackhole,
    Unreachable,
    Prohibit,
    NoRoute,
    /// Another error (its errno), or no answer.
    Failed(i32),
}

impl RouteOutcome {
    /// The kernel refused to route it.
    pub fn refused(&self) -> bool {
        matches!(
            self,
            RouteOutcome::Blackhole
                | RouteOutcome::Unreachable
                | RouteOutcome::Prohibit
                | RouteOutcome::NoRoute
        )
    }

    /// As said in a verdict: "a blackhole route", "no route" ...
    pub fn said(&self) -> String {
        match self {
            RouteOutcome::Via { dev, gw, table } => match gw {
                Some(g) => format!("a route via {g} dev {dev} (table {})", table_name(*table)),
                None => format!("a route dev {dev} (table {})", table_name(*table)),
            },
            RouteOutcome::Local => "a local route".into(),
            RouteOutcome::Blackhole => "a blackhole route (or rule)".into(),
            RouteOutcome::Unreachable => "an unreachable route (or rule)".into(),
            RouteOutcome::Prohibit => "a prohibit route (or rule)".into(),
            RouteOutcome::NoRoute => "no route".into(),
            RouteOutcome::Failed(e) => format!("no answer (errno {e})"),
        }
    }
}

// include/uapi/linux/fib_rules.h
const FRA_DST: u16 = 1;
const FRA_SRC: u16 = 2;
const FRA_IIFNAME: u16 = 3;
const FRA_PRIORITY: u16 = 6;
const FRA_FWMARK: u16 = 10;
const FRA_TABLE: u16 = 15;
const FRA_FWMASK: u16 = 16;
const FRA_OIFNAME: u16 = 17;
const FIB_RULE_INVERT: u32 = 2;
pub const FR_ACT_TO_TBL: u8 = 1;
// include/uapi/linux/rtnetlink.h
const RTA_TABLE: u16 = 15;

impl RouteRule {
    /// As `ip rule` prints it: `100: from all to 10.1.0.0/24 lookup 100`.
    pub fn text(&self) -> String {
        let sel = |s: &Option<(IpAddr, u8)>| match s {
            Some((a, l)) if (a.is_ipv4() && *l == 32) || (a.is_ipv6() && *l == 128) => {
                a.to_string()
            }
            Some((a, l)) => format!("{a}/{l}"),
            None => "all".into(),
        };
        let mut t = format!("{}: ", self.priority);
        if self.invert {
            t.push_str("not ");
        }
        t.push_str(&format!("from {}", sel(&self.src)));
        if self.dst.is_some() {
            t.push_str(&format!(" to {}", sel(&self.dst)));
        }
        if self.fwmark != 0 || self.fwmask != 0 {
            t.push_str(&format!(" fwmark {:#x}", self.fwmark));
            if self.fwmask != u32::MAX {
                t.push_str(&format!("/{:#x}", self.fwmask));
            }
        }
        if let Some(i) = &self.iif {
            t.push_str(&format!(" iif {i}"));
        }
        if let Some(o) = &self.oif {
            t.push_str(&format!(" oif {o}"));
        }
        match self.action {
            FR_ACT_TO_TBL => t.push_str(&format!(" lookup {}", table_name(self.table))),
            2 => t.push_str(" goto"),
            3 => t.push_str(" nop"),
            6 => t.push_str(" blackhole"),
            7 => t.push_str(" unreachable"),
            8 => t.push_str(" prohibit"),
            a => t.push_str(&format!(" action {a}")),
        }
        t
    }

    /// Whether the rule selects a packet from `src` to `dst` that came in
    /// by `iif` ("" for a locally sent one), with no mark and no output
    /// device (a forwarded or input packet).
    pub fn selects(&self, src: IpAddr, dst: IpAddr, iif: &str) -> bool {
        if self.family != if dst.is_ipv4() { 4 } else { 6 } {
            return false;
        }
        let within = |sel: &Option<(IpAddr, u8)>, a: IpAddr| {
            sel.is_none_or(|(net, len)| contains(a, net, len))
        };
        let m = within(&self.src, src)
            && within(&self.dst, dst)
            && self.iif.as_deref().is_none_or(|i| i == iif)
            && self.oif.is_none()
            && self.fwmark & self.fwmask == 0;
        m != self.invert
    }
}

impl Routing {
    /// Routes in `table` of `family` (0 when the table has none, or does
    /// not exist: a lookup rule for it is then passed over).
    pub fn routes(&self, family: u8, table: u32) -> u32 {
        self.tables
            .iter()
            .find(|t| t.family == family && t.table == table)
            .map_or(0, |t| t.routes)
    }
}

/// The rules and table sizes of the namespace at `path` (entered on this
/// thread), or of this thread's when None. Empty when unreadable.
pub fn routing_in(path: Option<&Path>) -> Routing {
    let _g = match path.map(crate::node::netns::NetnsGuard::enter) {
        Some(Ok(g)) => Some(g),
        Some(Err(_)) => return Routing::default(),
        None => None,
    };
    let mut r = Routing::default();
    for (af, fam) in [(libc::AF_INET, 4u8), (libc::AF_INET6, 6u8)] {
        // fib_rule_hdr / rtmsg: family first, 12 bytes.
        let mut body = [0u8; 12];
        body[0] = af as u8;
        let _ = netlink::dump(
            libc::NETLINK_ROUTE,
            libc::RTM_GETRULE,
            &body,
            &mut |ty, msg| {
                if ty == libc::RTM_NEWRULE
                    && let Some(rule) = parse_rule(msg.get(netlink::NLMSG_HDRLEN..).unwrap_or(&[]))
                {
                    r.rules.push(rule);
                }
            },
        );
        let _ = netlink::dump(
            libc::NETLINK_ROUTE,
            libc::RTM_GETROUTE,
            &body,
            &mut |ty, msg| {
                if ty != libc::RTM_NEWROUTE {
                    return;
                }
                let Some(table) = route_table(msg.get(netlink::NLMSG_HDRLEN..).unwrap_or(&[]))
                else {
                    return;
                };
                match r
                    .tables
                    .iter_mut()
                    .find(|t| t.family == fam && t.table == table)
                {
                    Some(t) => t.routes += 1,
                    None => r.tables.push(TableSize {
                        family: fam,
                        table,
                        routes: 1,
                    }),
                }
            },
        );
    }
    r.rules.sort_by_key(|x| (x.family, x.priority));
    r
}

/// `ip route get DST [from SRC iif DEV]` in the namespace at `path`
/// (entered on this thread): RTM_GETROUTE of one destination, answered by
/// the kernel's own lookup (inet_rtm_getroute(): ip_route_input_rcu()
/// with an input device, else ip_route_output_key()), policy rules
/// included.
pub fn lookup_in(path: &Path, q: &RouteQuery) -> RouteLookup {
    let outcome = match crate::node::netns::NetnsGuard::enter(path) {
        Ok(_g) => lookup(q),
        Err(_) => RouteOutcome::Failed(libc::EBADF),
    };
    RouteLookup {
        query: q.clone(),
        outcome,
    }
}

/// [`lookup_in`] in this thread's namespace.
fn lookup(q: &RouteQuery) -> RouteOutcome {
    // include/uapi/linux/rtnetlink.h
    const RTA_DST: u16 = 1;
    const RTA_SRC: u16 = 2;
    const RTA_IIF: u16 = 3;
    const RTA_OIF: u16 = 4;
    const RTA_GATEWAY: u16 = 5;
    const RTN_LOCAL: u8 = 2;
    let octets = |a: IpAddr| match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let (af, full) = if q.dst.is_ipv4() {
        (libc::AF_INET, 32)
    } else {
        (libc::AF_INET6, 128)
    };
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let mut body = vec![0u8; 12];
    body[0] = af as u8;
    body[1] = full;
    netlink::put_attr(&mut body, RTA_DST, &octets(q.dst));
    if let Some(dev) = &q.iif {
        let Ok(index) = nix::net::if_::if_nametoindex(dev.as_str()) else {
            return RouteOutcome::Failed(libc::ENODEV);
        };
        body[2] = full;
        netlink::put_attr(&mut body, RTA_SRC, &octets(q.src));
        netlink::put_attr(&mut body, RTA_IIF, &index.to_ne_bytes());
    }
    let mut answer = None;
    let r = netlink::query(
        libc::NETLINK_ROUTE,
        libc::RTM_GETROUTE,
        &body,
        &mut |ty, msg| {
            if ty != libc::RTM_NEWROUTE {
                return;
            }
            let m = msg.get(netlink::NLMSG_HDRLEN..).unwrap_or(&[]);
            let fam = if q.dst.is_ipv4() { 4 } else { 6 };
            let (mut dev, mut gw) = (String::new(), None);
            for (aty, data) in netlink::attrs(m.get(12..).unwrap_or(&[])) {
                match aty {
                    RTA_OIF => {
                        dev = netlink::ne32(data)
                            .and_then(|i| nix::net::if_::if_indextoname(i).ok())
                            .map(|c| c.to_string_lossy().into_owned())
                            .unwrap_or_default();
                    }
                    RTA_GATEWAY => gw = addr(fam, data),
                    _ => {}
                }
            }
            answer = Some(if m.get(7) == Some(&RTN_LOCAL) {
                RouteOutcome::Local
            } else {
                RouteOutcome::Via {
                    dev,
                    gw,
                    table: route_table(m).unwrap_or(0),
                }
            });
        },
    );
    match (r, answer) {
        (Ok(()), Some(a)) => a,
        (Ok(()), None) => RouteOutcome::Failed(0),
        (Err(libc::EINVAL), _) => RouteOutcome::Blackhole,
        (Err(libc::EHOSTUNREACH), _) => RouteOutcome::Unreachable,
        (Err(libc::EACCES), _) => RouteOutcome::Prohibit,
        (Err(libc::ENETUNREACH), _) => RouteOutcome::NoRoute,
        (Err(e), _) => RouteOutcome::Failed(e),
    }
}

fn addr(fam: u8, data: &[u8]) -> Option<IpAddr> {
    match fam {
        4 => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(data).ok()?))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(data).ok()?))),
        _ => None,
    }
}

/// A fib_rule_hdr and its attributes.
pub fn parse_rule(m: &[u8]) -> Option<RouteRule> {
    let fam = match i32::from(*m.first()?) {
        libc::AF_INET => 4,
        libc::AF_INET6 => 6,
        _ => return None,
    };
    let flags = u32::from_ne_bytes(m.get(8..12)?.try_into().ok()?);
    let (dst_len, src_len, table8, action) = (m[1], m[2], m[4], m[7]);
    let mut r = RouteRule {
        family: fam,
        priority: 0,
        src: None,
        dst: None,
        iif: None,
        oif: None,
        fwmark: 0,
        fwmask: 0,
        invert: flags & FIB_RULE_INVERT != 0,
        action,
        table: u32::from(table8),
    };
    for (ty, data) in netlink::attrs(m.get(12..)?) {
        match ty {
            FRA_DST => r.dst = addr(fam, data).map(|a| (a, dst_len)),
            FRA_SRC => r.src = addr(fam, data).map(|a| (a, src_len)),
            FRA_IIFNAME => r.iif = Some(netlink::string(data)),
            FRA_OIFNAME => r.oif = Some(netlink::string(data)),
            FRA_PRIORITY => r.priority = netlink::ne32(data)?,
            FRA_FWMARK => r.fwmark = netlink::ne32(data)?,
            FRA_FWMASK => r.fwmask = netlink::ne32(data)?,
            FRA_TABLE => r.table = netlink::ne32(data)?,
            _ => {}
        }
    }
    if r.fwmark != 0 && r.fwmask == 0 {
        r.fwmask = u32::MAX;
    }
    Some(r)
}

/// The table of an rtmsg (RTA_TABLE, else the header's 8-bit one).
fn route_table(m: &[u8]) -> Option<u32> {
    let t8 = u32::from(*m.get(4)?);
    Some(
        netlink::attr(m.get(12..)?, RTA_TABLE)
            .and_then(netlink::ne32)
            .unwrap_or(t8),
    )
}

/// A routing table's name as `ip route` gives it.
pub fn table_name(t: u32) -> String {
    match t {
        255 => "local".into(),
        254 => "main".into(),
        253 => "default".into(),
        n => n.to_string(),
    }
}

pub fn contains(addr: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix.min(32))
            };
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix.min(128))
            };
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's answers, each refusal told apart, for a forwarded
    /// packet (an input device) and a sent one.
    #[test]
    fn route_lookups_tell_refusals_apart() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED route_lookups_tell_refusals_apart: not root");
            return;
        }
        let ns = crate::node::netns::TestNetns::add("tracer-route-get");
        for args in [
            &[
                "ip", "link", "add", "a0", "type", "veth", "peer", "name", "b0",
            ][..],
            &["ip", "link", "set", "a0", "up"],
            &["ip", "link", "set", "b0", "up"],
            &["ip", "addr", "add", "10.9.0.1/24", "dev", "a0"],
            &["sysctl", "-qw", "net.ipv4.ip_forward=1"],
            &["ip", "route", "add", "blackhole", "10.9.1.0/24"],
            &["ip", "route", "add", "unreachable", "10.9.2.0/24"],
            &["ip", "rule", "add", "to", "10.9.3.0/24", "prohibit"],
            &["ip", "route", "add", "10.9.4.0/24", "via", "10.9.0.2"],
        ] {
            assert!(ns.run(args), "{args:?}");
        }
        let path = crate::node::netns::named_dir().join(&ns.0);
        let get = |dst: &str, iif: Option<&str>| {
            lookup_in(
                &path,
                &RouteQuery {
                    dst: dst.parse().unwrap(),
                    src: "10.9.0.7".parse().unwrap(),
                    iif: iif.map(str::to_string),
                },
            )
            .outcome
        };
        for iif in [None, Some("b0")] {
            assert_eq!(get("10.9.1.5", iif), RouteOutcome::Blackhole, "{iif:?}");
            assert_eq!(get("10.9.2.5", iif), RouteOutcome::Unreachable, "{iif:?}");
            assert_eq!(get("10.9.3.5", iif), RouteOutcome::Prohibit, "{iif:?}");
            assert_eq!(get("10.77.0.1", iif), RouteOutcome::NoRoute, "{iif:?}");
            assert_eq!(
                get("10.9.4.5", iif),
                RouteOutcome::Via {
                    dev: "a0".into(),
                    gw: Some("10.9.0.2".parse().unwrap()),
                    table: 254
                },
                "{iif:?}"
            );
        }
        assert_eq!(get("10.9.0.1", None), RouteOutcome::Local);
    }

    fn rule_msg(fam: u8, dst: Option<([u8; 4], u8)>, prio: u32, table: u32, action: u8) -> Vec<u8> {
        let mut m = vec![0u8; 12];
        m[0] = fam;
        m[7] = action;
        if let Some((_, l)) = dst {
            m[1] = l;
        }
        if let Some((a, _)) = dst {
            netlink::put_attr(&mut m, FRA_DST, &a);
        }
        netlink::put_attr(&mut m, FRA_PRIORITY, &prio.to_ne_bytes());
        netlink::put_attr(&mut m, FRA_TABLE, &table.to_ne_bytes());
        m
    }

    #[test]
    fn rules_parse_print_and_select() {
        let r = parse_rule(&rule_msg(
            libc::AF_INET as u8,
            Some(([10, 239, 9, 0], 24)),
            100,
            100,
            FR_ACT_TO_TBL,
        ))
        .unwrap();
        assert_eq!(r.text(), "100: from all to 10.239.9.0/24 lookup 100");
        let (c, vip, other) = (
            IpAddr::from([10, 239, 1, 2]),
            IpAddr::from([10, 239, 9, 9]),
            IpAddr::from([10, 239, 2, 2]),
        );
        assert!(r.selects(c, vip, "r0"));
        assert!(!r.selects(c, other, "r0"));
        assert!(!r.selects("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), "r0"));
        let main = parse_rule(&rule_msg(
            libc::AF_INET as u8,
            None,
            32766,
            254,
            FR_ACT_TO_TBL,
        ))
        .unwrap();
        assert_eq!(main.text(), "32766: from all lookup main");
        assert!(main.selects(c, other, ""));
        let unreach = parse_rule(&rule_msg(libc::AF_INET as u8, None, 5, 0, 7)).unwrap();
        assert_eq!(unreach.text(), "5: from all unreachable");
        // Too short: no rule, no panic.
        assert!(parse_rule(&[2, 0, 0]).is_none());
    }

    /// This namespace has the three default IPv4 rules, and a local table.
    #[test]
    fn own_rules_and_tables() {
        let r = routing_in(None);
        let v4: Vec<String> = r
            .rules
            .iter()
            .filter(|x| x.family == 4)
            .map(RouteRule::text)
            .collect();
        assert!(
            v4.contains(&"0: from all lookup local".to_string()),
            "{v4:?}"
        );
        assert!(r.routes(4, 255) > 0, "{r:?}");
    }
}
