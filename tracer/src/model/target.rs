//! Parsing what to follow: `ADDR`, `ADDR:PORT`, `[V6]:PORT`, `CIDR`,
//! `CIDR:PORT`, plus `--proto`.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
};

use thiserror::Error;
use tracer_common::FilterConfig;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TargetError {
    #[error(
        "empty target: give an address like 10.96.0.10, 10.96.0.10:53, [fd00::1]:443 or 10.96.0.0/12"
    )]
    Empty,
    #[error("'{0}' is not an IPv4/IPv6 address or CIDR")]
    BadAddr(String),
    #[error("bad port '{0}': expected 1-65535")]
    BadPort(String),
    #[error("bad prefix length '{0}' (IPv4: 0-32, IPv6: 0-128)")]
    BadPrefix(String),
    #[error("unknown protocol '{0}': expected tcp, udp or icmp")]
    BadProto(String),
    #[error("a port only applies to tcp or udp, not {0}")]
    PortWithoutL4(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
    Icmp,
}

impl Proto {
    pub fn number(self, v6: bool) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
            Proto::Icmp if v6 => 58,
            Proto::Icmp => 1,
        }
    }
    fn name(self) -> &'static str {
        self.into()
    }
}

impl FromStr for Proto {
    type Err = TargetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Proto::Tcp),
            "udp" => Ok(Proto::Udp),
            "icmp" | "icmpv6" | "icmp6" => Ok(Proto::Icmp),
            _ => Err(TargetError::BadProto(s.to_string())),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub addr: IpAddr,
    pub prefix: u8,
    pub port: Option<u16>,
    pub proto: Option<Proto>,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = match self.single_addr() {
            Some(a) => a.to_string(),
            None => format!("{}/{}", self.addr, self.prefix),
        };
        match (self.port, self.addr) {
            (Some(p), IpAddr::V6(_)) => write!(f, "[{a}]:{p}")?,
            (Some(p), _) => write!(f, "{a}:{p}")?,
            (None, _) => write!(f, "{a}")?,
        }
        if let Some(p) = self.proto {
            write!(f, " ({})", p.name())?;
        }
        Ok(())
    }
}

fn parse_port(s: &str) -> Result<u16, TargetError> {
    match s.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(TargetError::BadPort(s.to_string())),
    }
}

fn parse_cidr(s: &str) -> Result<(IpAddr, u8), TargetError> {
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().map_err(|_| TargetError::BadAddr(s.to_string()))?;
    let full = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match p {
        None => full,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= full => n,
            _ => return Err(TargetError::BadPrefix(p.to_string())),
        },
    };
    Ok((mask_addr(addr, prefix), prefix))
}

fn mask_addr(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl Target {
    pub fn parse(s: &str, proto: Option<&str>) -> Result<Target, TargetError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(TargetError::Empty);
        }
        let proto = proto.map(Proto::from_str).transpose()?;
        let (addr_part, port) = if let Some(rest) = s.strip_prefix('[') {
            // [v6]:port or [v6/len]:port
            let (a, after) = rest
                .split_once(']')
                .ok_or_else(|| TargetError::BadAddr(s.to_string()))?;
            let port = match after {
                "" => None,
                p => Some(parse_port(
                    p.strip_prefix(':')
                        .ok_or_else(|| TargetError::BadAddr(s.to_string()))?,
                )?),
            };
            (a, port)
        } else if s.matches(':').count() == 1 {
            let (a, p) = s.split_once(':').expect("one colon");
            (a, Some(parse_port(p)?))
        } else {
            (s, None)
        };
        let (addr, prefix) = parse_cidr(addr_part)?;
        if port.is_some()
            && let Some(p @ Proto::Icmp) = proto
        {
            return Err(TargetError::PortWithoutL4(p.name()));
        }
        Ok(Target {
            addr,
            prefix,
            port,
            proto,
        })
    }

    pub fn filter(&self, netns_filter: bool) -> FilterConfig {
        let mut f = FilterConfig::empty();
        let full: u32 = if self.addr.is_ipv4() { 32 } else { 128 };
        let bytes: Vec<u8> = match self.addr {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        f.addr[..bytes.len()].copy_from_slice(&bytes);
        for bit in 0..full.min(self.prefix as u32) {
            f.mask[(bit / 8) as usize] |= 0x80 >> (bit % 8);
        }
        f.family = if self.addr.is_ipv4() { 4 } else { 6 };
        f.proto = self.proto.map_or(0, |p| p.number(self.addr.is_ipv6()));
        if let Some(p) = self.port {
            f.has_port = 1;
            f.port = p;
        }
        f.netns_filter = netns_filter as u8;
        f
    }

    /// The one address the target is (its prefix full length); None for
    /// a range.
    pub fn single_addr(&self) -> Option<IpAddr> {
        let full = if self.addr.is_ipv4() { 32 } else { 128 };
        (self.prefix == full).then_some(self.addr)
    }

    pub fn contains(&self, a: IpAddr) -> bool {
        a.is_ipv4() == self.addr.is_ipv4() && mask_addr(a, self.prefix) == self.addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_port() {
        let t = Target::parse("169.254.25.10:53", None).unwrap();
        assert_eq!(t.addr, "169.254.25.10".parse::<IpAddr>().unwrap());
        assert_eq!((t.prefix, t.port), (32, Some(53)));
        let f = t.filter(false);
        assert_eq!(&f.addr[..4], &[169, 254, 25, 10]);
        assert_eq!(&f.mask[..5], &[255, 255, 255, 255, 0]);
        assert_eq!((f.family, f.has_port, f.port, f.proto), (4, 1, 53, 0));
        assert_eq!(t.to_string(), "169.254.25.10:53");
    }

    #[test]
    fn cidr_is_masked() {
        let t = Target::parse("10.96.12.1/12", Some("tcp")).unwrap();
        assert_eq!(t.addr, "10.96.0.0".parse::<IpAddr>().unwrap());
        let f = t.filter(true);
        assert_eq!(&f.mask[..4], &[255, 240, 0, 0]);
        assert_eq!((f.proto, f.netns_filter), (6, 1));
        assert!(t.contains("10.100.1.1".parse().unwrap()));
        assert!(!t.contains("10.112.0.1".parse().unwrap()));
        assert!(!t.contains("fd00::1".parse().unwrap()));
    }

    #[test]
    fn ipv6_forms() {
        let t = Target::parse("[fd00::10]:443", Some("tcp")).unwrap();
        assert_eq!(t.port, Some(443));
        assert_eq!(t.filter(false).family, 6);
        let t = Target::parse("fd00::/64", None).unwrap();
        assert_eq!((t.prefix, t.port), (64, None));
        let t = Target::parse("fd00::1", Some("icmp")).unwrap();
        assert_eq!(t.filter(false).proto, 58);
        assert_eq!(t.to_string(), "fd00::1 (icmp)");
    }

    #[test]
    fn errors() {
        assert_eq!(Target::parse("", None), Err(TargetError::Empty));
        assert!(matches!(
            Target::parse("10.0.0.300", None),
            Err(TargetError::BadAddr(_))
        ));
        assert!(matches!(
            Target::parse("10.0.0.1:0", None),
            Err(TargetError::BadPort(_))
        ));
        assert!(matches!(
            Target::parse("10.0.0.1:70000", None),
            Err(TargetError::BadPort(_))
        ));
        assert!(matches!(
            Target::parse("10.0.0.1/33", None),
            Err(TargetError::BadPrefix(_))
        ));
        assert!(matches!(
            Target::parse("10.0.0.1", Some("sctp")),
            Err(TargetError::BadProto(_))
        ));
        assert!(matches!(
            Target::parse("10.0.0.1:80", Some("icmp")),
            Err(TargetError::PortWithoutL4(_))
        ));
        assert!(matches!(
            Target::parse("[fd00::1", None),
            Err(TargetError::BadAddr(_))
        ));
        assert!(matches!(
            Target::parse("host.example:80", None),
            Err(TargetError::BadAddr(_))
        ));
    }
}
