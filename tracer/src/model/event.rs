//! Decoding ring-buffer records into typed events.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tracer_common::{
    BytesHeader, CtTuple, EventHeader, FibEvent, FuncEvent, Hook, NeighEvent, PacketEvent,
    PacketInfo, SockAddrEvent, SockEvent, kind,
};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than an event header")]
    Short(usize),
    #[error("record kind {kind} needs {need} bytes, got {got}")]
    Truncated { kind: u8, need: usize, got: usize },
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    #[error("unknown hook {0}")]
    UnknownHook(u8),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    Packet(PacketEvent),
    Fib(FibEvent),
    Sock(SockEvent),
    Neigh(NeighEvent),
    Func(FuncEvent),
    SockAddr(SockAddrEvent),
}

impl Event {
    pub fn header(&self) -> &EventHeader {
        match self {
            Event::Packet(e) => &e.hdr,
            Event::Fib(e) => &e.hdr,
            Event::Sock(e) => &e.hdr,
            Event::Neigh(e) => &e.hdr,
            Event::Func(e) => &e.hdr,
            Event::SockAddr(e) => &e.hdr,
        }
    }

    pub fn hook(&self) -> Hook {
        Hook::from_u8(self.header().hook).expect("validated at decode")
    }
}

fn read<T: Copy>(buf: &[u8], k: u8) -> Result<T, DecodeError> {
    let need = std::mem::size_of::<T>();
    if buf.len() < need {
        return Err(DecodeError::Truncated {
            kind: k,
            need,
            got: buf.len(),
        });
    }
    // SAFETY: T is a plain-old-data ABI struct (repr(C), no invalid bit
    // patterns) and the slice holds at least size_of::<T>() bytes.
    Ok(unsafe { std::ptr::read_unaligned(buf.as_ptr().cast::<T>()) })
}

pub fn decode(buf: &[u8]) -> Result<Event, DecodeError> {
    if buf.len() < std::mem::size_of::<EventHeader>() {
        return Err(DecodeError::Short(buf.len()));
    }
    let k = buf[0];
    let hook = buf[1];
    if Hook::from_u8(hook).is_none() {
        return Err(DecodeError::UnknownHook(hook));
    }
    Ok(match k {
        kind::PACKET => Event::Packet(read(buf, k)?),
        kind::FIB => Event::Fib(read(buf, k)?),
        kind::SOCK => Event::Sock(read(buf, k)?),
        kind::NEIGH => Event::Neigh(read(buf, k)?),
        kind::FUNC => Event::Func(read(buf, k)?),
        kind::SOCK_ADDR => Event::SockAddr(read(buf, k)?),
        other => return Err(DecodeError::UnknownKind(other)),
    })
}

/// A kind BYTES record: its header and the `caplen` packet bytes after it
/// (variable length, so not an [`Event`]).
pub fn decode_bytes(buf: &[u8]) -> Result<(BytesHeader, &[u8]), DecodeError> {
    let h: BytesHeader = read(buf, kind::BYTES)?;
    let n = std::mem::size_of::<BytesHeader>();
    let need = n + usize::from(h.caplen);
    let data = buf.get(n..need).ok_or(DecodeError::Truncated {
        kind: kind::BYTES,
        need,
        got: buf.len(),
    })?;
    Ok((h, data))
}

/// A NUL-padded kernel name.
pub fn cname(b: &[u8]) -> String {
    cname_str(b).to_string()
}

/// [`cname`] without the allocation.
pub fn cname_str(b: &[u8]) -> &str {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    let s = &b[..end];
    if s.iter().all(u8::is_ascii_graphic) {
        std::str::from_utf8(s).unwrap_or("")
    } else {
        // skb->dev reused as scratch (UDP dev_scratch): not a name.
        ""
    }
}

/// What the IP header at the start of `ip` says of the packet's length:
/// IPv4's total length, or IPv6's payload length plus its 40-byte
/// header; 0 when IPv6's payload length is 0 (jumbograms, BIG TCP: not
/// told). None when no IPv4/IPv6 header can be read.
pub fn ip_total_len(ip: &[u8]) -> Option<usize> {
    let field = |i: usize| {
        ip.get(i..i + 2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    };
    match ip.first()? >> 4 {
        4 => field(2),
        6 => field(4).map(|n| if n == 0 { 0 } else { n + 40 }),
        _ => None,
    }
}

pub fn ip_from(family: u8, b: &[u8; 16]) -> IpAddr {
    if family == 6 {
        IpAddr::V6(Ipv6Addr::from(*b))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

/// A flow tuple in userspace form.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub struct Tuple {
    pub src: IpAddr,
    pub sport: u16,
    pub dst: IpAddr,
    pub dport: u16,
    /// Carried by the flow record (`proto`), not repeated per tuple.
    #[serde(skip)]
    pub proto: u8,
}

impl Tuple {
    /// Is this the outer packet of a tunnel carrying the flow `key` (a
    /// tunnel's tuple, where the flow's own is not;
    /// tracer_common::tunnel::is_tunnel)? The flow table keeps such hops
    /// on the flow, not as its NAT; verdict/tunnel.rs judges them.
    pub fn is_outer_of(&self, key: &Tuple) -> bool {
        self.is_outer_with(key, [0; 2])
    }

    /// [`Tuple::is_outer_of`], UDP to one of `ports` (a VXLAN device's own
    /// port: `FilterConfig::tunnel_ports`) counting as a tunnel's too.
    pub fn is_outer_with(&self, key: &Tuple, ports: [u16; 2]) -> bool {
        use tracer_common::tunnel::is_tunnel_or;
        is_tunnel_or(self.proto, self.dport, ports) && !is_tunnel_or(key.proto, key.dport, ports)
    }

    pub fn from_pkt(p: &PacketInfo) -> Tuple {
        Tuple {
            src: ip_from(p.family, &p.saddr),
            sport: p.sport,
            dst: ip_from(p.family, &p.daddr),
            dport: p.dport,
            proto: p.proto,
        }
    }

    pub fn from_ct(t: &CtTuple) -> Option<Tuple> {
        if t.family == 0 {
            return None;
        }
        Some(Tuple {
            src: ip_from(t.family, &t.saddr),
            sport: t.sport,
            dst: ip_from(t.family, &t.daddr),
            dport: t.dport,
            proto: t.proto,
        })
    }

    #[must_use]
    pub fn reversed(&self) -> Tuple {
        Tuple {
            src: self.dst,
            sport: self.dport,
            dst: self.src,
            dport: self.sport,
            proto: self.proto,
        }
    }
}

pub fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmpv6".into(),
        // The outer packets of the tunnels a flow is followed into
        // (tracer_common::tunnel), and SCTP's ports.
        4 => "ipip".into(),
        41 => "ipv6".into(),
        47 => "gre".into(),
        132 => "sctp".into(),
        0 => "any".into(),
        n => n.to_string(),
    }
}

impl fmt::Display for Tuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", proto_name(self.proto), self.endpoints())
    }
}

impl Tuple {
    /// `10.0.0.1:40000 -> 10.0.0.2:80` (`[v6]:port`; no port when 0):
    /// the tuple without its protocol.
    pub fn endpoints(&self) -> String {
        let ep = |a: IpAddr, p: u16| match (a, p) {
            (_, 0) => a.to_string(),
            (IpAddr::V6(_), p) => format!("[{a}]:{p}"),
            (_, p) => format!("{a}:{p}"),
        };
        format!(
            "{} -> {}",
            ep(self.src, self.sport),
            ep(self.dst, self.dport)
        )
    }
}

pub fn tcp_flags(f: u8) -> String {
    const NAMES: [(u8, &str); 6] = [
        (0x02, "SYN"),
        (0x10, "ACK"),
        (0x01, "FIN"),
        (0x04, "RST"),
        (0x08, "PSH"),
        (0x20, "URG"),
    ];
    let v: Vec<&str> = NAMES
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    v.join("|")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tracer_common::{EventHeader, PacketInfo};

    pub(crate) fn header(k: u8, hook: Hook) -> EventHeader {
        EventHeader {
            kind: k,
            hook: hook as u8,
            _pad: [0; 2],
            ifindex: 2,
            netns: 4026531840,
            cpu: 0,
            ts_ns: 1000,
            skb: 0xffff_8880_0000_1000,
            ifname: *b"eth0\0\0\0\0\0\0\0\0\0\0\0\0",
        }
    }

    pub(crate) fn v4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, proto: u8) -> PacketInfo {
        let mut p = PacketInfo::zeroed();
        p.family = 4;
        p.proto = proto;
        p.saddr[..4].copy_from_slice(&src);
        p.daddr[..4].copy_from_slice(&dst);
        p.sport = sport;
        p.dport = dport;
        p
    }

    fn bytes<T>(v: &T) -> Vec<u8> {
        // SAFETY: test-only view of a repr(C) struct as bytes.
        unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref::<T>(v).cast::<u8>(),
                std::mem::size_of::<T>(),
            )
        }
        .to_vec()
    }

    #[test]
    fn decodes_packet_event() {
        let ev = PacketEvent {
            hdr: header(kind::PACKET, Hook::Drop),
            pkt: v4([10, 0, 0, 1], 40000, [10, 0, 0, 2], 80, 6),
            location: 0xffffffff81000000,
            reason: 3,
            mark: 0,
            ct_orig: CtTuple::zeroed(),
            ct_reply: CtTuple::zeroed(),
        };
        let e = decode(&bytes(&ev)).unwrap();
        assert_eq!(e, Event::Packet(ev));
        assert_eq!(e.hook(), Hook::Drop);
        let t = Tuple::from_pkt(&ev.pkt);
        assert_eq!(t.to_string(), "tcp 10.0.0.1:40000 -> 10.0.0.2:80");
        assert_eq!(
            t.reversed().to_string(),
            "tcp 10.0.0.2:80 -> 10.0.0.1:40000"
        );
    }

    #[test]
    fn rejects_bad_records() {
        assert_eq!(decode(&[1, 2, 3]), Err(DecodeError::Short(3)));
        let mut b = bytes(&header(kind::PACKET, Hook::Xmit));
        assert!(matches!(decode(&b), Err(DecodeError::Truncated { .. })));
        b[0] = 99;
        assert_eq!(decode(&b), Err(DecodeError::UnknownKind(99)));
        b[1] = 0;
        assert_eq!(decode(&b), Err(DecodeError::UnknownHook(0)));
    }

    #[test]
    fn decodes_bytes_records() {
        let h = BytesHeader {
            hdr: header(kind::BYTES, Hook::TcIngress),
            caplen: 3,
            reply: 0,
            _pad: [0; 5],
        };
        let mut b = bytes(&h);
        b.extend_from_slice(&[0x45, 0, 0]);
        let (got, data) = decode_bytes(&b).unwrap();
        assert_eq!((got, data), (h, &[0x45u8, 0, 0][..]));
        assert!(matches!(
            decode_bytes(&b[..b.len() - 1]),
            Err(DecodeError::Truncated { need: 59, .. })
        ));
        assert!(matches!(
            decode_bytes(&b[..10]),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn names_and_flags() {
        assert_eq!(cname(b"veth0\0\0garbage"), "veth0");
        assert_eq!(cname(&[0xff, 0x01, 0]), "");
        assert_eq!(tcp_flags(0x12), "SYN|ACK");
        assert_eq!(proto_name(17), "udp");
    }
}
