//! The packet an ICMP error is about, read from the error's own bytes (a
//! kind BYTES record, from its IP header on): ICMP errors quote the IP
//! header and at least 8 bytes of what they answer (RFC 792; RFC 4443 for
//! ICMPv6). The flow table files an error under the flow of the packet it
//! quotes (table.rs `fold_icmp_error`) when no conntrack entry related it.

use std::net::IpAddr;

use crate::model::event::Tuple;

/// The tuple of the packet an ICMP error quotes, as that packet went;
/// None when `data` is not an ICMP error (destination unreachable, time
/// exceeded, parameter problem; ICMPv6's packet too big too) or is cut
/// before the quoted addresses.
pub fn quoted(data: &[u8]) -> Option<Tuple> {
    match data.first()? >> 4 {
        4 => quoted_v4(data),
        6 => quoted_v6(data),
        _ => None,
    }
}

fn quoted_v4(d: &[u8]) -> Option<Tuple> {
    let ihl = usize::from(d.first()? & 0x0f) * 4;
    // IPPROTO_ICMP; types 3, 11, 12.
    if *d.get(9)? != 1 || !matches!(d.get(ihl)?, 3 | 11 | 12) {
        return None;
    }
    let q = d.get(ihl + 8..)?;
    if q.first()? >> 4 != 4 {
        return None;
    }
    let qihl = usize::from(q[0] & 0x0f) * 4;
    let proto = *q.get(9)?;
    let src: [u8; 4] = q.get(12..16)?.try_into().ok()?;
    let dst: [u8; 4] = q.get(16..20)?.try_into().ok()?;
    Some(tuple(src.into(), dst.into(), proto, q.get(qihl..)))
}

fn quoted_v6(d: &[u8]) -> Option<Tuple> {
    // Next header IPPROTO_ICMPV6 right after the fixed header (an error
    // behind extension headers is not read); types 1 to 4.
    if *d.get(6)? != 58 || !matches!(d.get(40)?, 1..=4) {
        return None;
    }
    let q = d.get(48..)?;
    if q.first()? >> 4 != 6 {
        return None;
    }
    let proto = *q.get(6)?;
    let src: [u8; 16] = q.get(8..24)?.try_into().ok()?;
    let dst: [u8; 16] = q.get(24..40)?.try_into().ok()?;
    Some(tuple(src.into(), dst.into(), proto, q.get(40..)))
}

/// The quoted packet's tuple; TCP, UDP and SCTP ports lead `l4`, other
/// protocols have none.
fn tuple(src: IpAddr, dst: IpAddr, proto: u8, l4: Option<&[u8]>) -> Tuple {
    let (sport, dport) = match (proto, l4) {
        (6 | 17 | 132, Some(p)) if p.len() >= 4 => (
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ),
        _ => (0, 0),
    };
    Tuple {
        src,
        sport,
        dst,
        dport,
        proto,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IPv4 ICMP error of `ty` from `from` to `to` quoting a packet of
    /// `proto` from `qsrc:sport` to `qdst:dport`.
    pub(crate) fn v4_error(
        ty: u8,
        from: [u8; 4],
        to: [u8; 4],
        proto: u8,
        (qsrc, sport): ([u8; 4], u16),
        (qdst, dport): ([u8; 4], u16),
    ) -> Vec<u8> {
        let mut d = vec![0x45, 0, 0, 56, 0, 0, 0, 0, 64, 1, 0, 0];
        d.extend(from);
        d.extend(to);
        d.extend([ty, 2, 0, 0, 0, 0, 0, 0]);
        let mut q = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, proto, 0, 0];
        q.extend(qsrc);
        q.extend(qdst);
        q.extend(sport.to_be_bytes());
        q.extend(dport.to_be_bytes());
        q.extend([0, 8, 0, 0]);
        d.extend(q);
        d
    }

    /// (src, dst, proto, sport, dport) of the quoted packet.
    fn said(d: &[u8]) -> (String, String, u8, u16, u16) {
        let t = quoted(d).expect("an ICMP error");
        (
            t.src.to_string(),
            t.dst.to_string(),
            t.proto,
            t.sport,
            t.dport,
        )
    }

    #[test]
    fn the_quoted_packet_is_read_from_v4_errors() {
        let d = v4_error(
            3,
            [10, 0, 0, 2],
            [10, 0, 0, 1],
            4,
            ([10, 0, 0, 1], 0),
            ([10, 0, 0, 2], 0),
        );
        assert_eq!(said(&d), ("10.0.0.1".into(), "10.0.0.2".into(), 4, 0, 0));
        let d = v4_error(
            3,
            [10, 0, 0, 2],
            [10, 0, 0, 1],
            17,
            ([10, 0, 0, 1], 40000),
            ([10, 0, 0, 2], 53),
        );
        assert_eq!(
            said(&d),
            ("10.0.0.1".into(), "10.0.0.2".into(), 17, 40000, 53)
        );
        // An echo reply (type 0) quotes nothing; a cut error is not read.
        let mut echo = d.clone();
        echo[20] = 0;
        assert_eq!(quoted(&echo), None);
        assert_eq!(quoted(&d[..30]), None);
        assert_eq!(quoted(&[]), None);
    }

    #[test]
    fn the_quoted_packet_is_read_from_v6_errors() {
        let a: [u8; 16] = "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let b: [u8; 16] = "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let mut d = vec![0x60, 0, 0, 0, 0, 56, 58, 64];
        d.extend(b);
        d.extend(a);
        d.extend([1, 4, 0, 0, 0, 0, 0, 0]);
        let mut q = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        q.extend(a);
        q.extend(b);
        q.extend(5353u16.to_be_bytes());
        q.extend(53u16.to_be_bytes());
        d.extend(q);
        assert_eq!(said(&d), ("fd00::1".into(), "fd00::2".into(), 17, 5353, 53));
        d[40] = 128; // echo request
        assert_eq!(quoted(&d), None);
    }
}
