//! DNS read from the first bytes of followed packets (kind BYTES records):
//! each flow to port 53 keeps its queries, paired with their answers by
//! DNS id, retries of the same question counted. Numbers (types, classes,
//! rcodes) stay numbers here; `qtype_name` and `rcode_name` name them for
//! output.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use simple_dns::{Packet, rdata::RData};
use thiserror::Error;

/// The DNS port; flows to it (UDP or TCP) have their payloads read.
pub use tracer_common::DNS_PORT;
/// Queries kept per flow (one client socket may ask many); more are
/// counted in `DnsLog::more`.
pub const MAX_QUERIES: usize = 32;
/// Answers kept per reply (all are counted).
pub const MAX_ANSWERS: usize = 4;

/// Why a payload to or from port 53 was not read as DNS.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DnsError {
    #[error("packet bytes end before the transport header")]
    NoTransport,
    #[error("shorter than a DNS header ({0} bytes)")]
    Short(usize),
    #[error("not a DNS message: {0}")]
    Malformed(String),
}

/// A question: name, type, class (numbers as on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
}

/// One answer record: its name, type, TTL and data as text (an address,
/// a name, or `N bytes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub name: String,
    pub rtype: u16,
    pub ttl: u32,
    pub data: String,
}

/// One DNS message as read from a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub id: u16,
    pub response: bool,
    pub rcode: u16,
    /// The TC bit: the answer did not fit (the client should retry over TCP).
    pub truncated: bool,
    pub question: Option<Question>,
    pub answer_count: u16,
    pub answers: Vec<Answer>,
    /// Only the 12-byte header could be read: the capture (snap length)
    /// ended inside the message.
    pub partial: bool,
}

/// A reply to a query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub ts_ns: u64,
    pub rcode: u16,
    pub truncated: bool,
    pub answer_count: u16,
    pub answers: Vec<Answer>,
    pub partial: bool,
}

/// A query of the flow and what came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Query {
    pub id: u16,
    /// None when only its reply was seen, and the reply's question could
    /// not be read.
    pub question: Option<Question>,
    /// When it was first sent (or its reply seen, when `sent` is 0).
    pub first_ns: u64,
    /// Times it was seen sent (retries of the same id and question).
    pub sent: u32,
    pub reply: Option<Reply>,
    /// Where its packets' bytes were read: the request's and the reply's
    /// skbs, each from that time on (a NAT rewrite reads them again, on
    /// the same skb). The hops of those skbs are this query's own
    /// (`dns_flow::query_flow`).
    #[serde(default)]
    pub captures: Vec<Capture>,
}

/// A packet of a query read at `ts_ns` on the skb at `skb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capture {
    pub skb: u64,
    pub ts_ns: u64,
}

/// Captures kept per query: a request and its reply, each read again
/// after a NAT or two.
pub const MAX_CAPTURES: usize = 8;

/// The same request read again on the same skb within this time is one
/// sending seen after NAT, not a retry (a resolver retries after hundreds
/// of milliseconds at least; an skb crosses a node in microseconds, a few
/// milliseconds under emulation).
const SAME_SENDING_NS: u64 = 100_000_000;

impl Query {
    fn capture(&mut self, skb: u64, ts_ns: u64) {
        if skb != 0 && self.captures.len() < MAX_CAPTURES {
            self.captures.push(Capture { skb, ts_ns });
        }
    }

    /// Was this request's packet already read on `skb` just before?
    fn seen_on(&self, skb: u64, ts_ns: u64) -> bool {
        skb != 0
            && self
                .captures
                .iter()
                .any(|c| c.skb == skb && ts_ns.saturating_sub(c.ts_ns) < SAME_SENDING_NS)
    }
}

/// The DNS of one flow.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsLog {
    pub queries: Vec<Query>,
    /// Queries past `MAX_QUERIES`.
    pub more: u32,
}

impl DnsLog {
    /// A message of the flow read at `ts_ns` from the skb at `skb`.
    pub fn note(&mut self, ts_ns: u64, skb: u64, m: Message) {
        let same_question = |q: &Query| m.question.is_none() || q.question == m.question;
        if m.response {
            let reply = Reply {
                ts_ns,
                rcode: m.rcode,
                truncated: m.truncated,
                answer_count: m.answer_count,
                answers: m.answers,
                partial: m.partial,
            };
            // The latest query with its id still waiting (a retry's reply
            // answers the same query).
            if let Some(q) = self
                .queries
                .iter_mut()
                .rev()
                .find(|q| q.id == m.id && same_question(q))
            {
                if q.reply.is_none() {
                    q.reply = Some(reply);
                }
                q.capture(skb, ts_ns);
                return;
            }
            let mut q = Query {
                id: m.id,
                question: m.question,
                first_ns: ts_ns,
                sent: 0,
                reply: Some(reply),
                captures: Vec::new(),
            };
            q.capture(skb, ts_ns);
            self.push(q);
            return;
        }
        if let Some(q) = self
            .queries
            .iter_mut()
            .rev()
            .find(|q| q.id == m.id && q.reply.is_none() && same_question(q))
        {
            if !q.seen_on(skb, ts_ns) {
                q.sent += 1;
            }
            q.capture(skb, ts_ns);
            return;
        }
        let mut q = Query {
            id: m.id,
            question: m.question,
            first_ns: ts_ns,
            sent: 1,
            reply: None,
            captures: Vec::new(),
        };
        q.capture(skb, ts_ns);
        self.push(q);
    }

    fn push(&mut self, q: Query) {
        if self.queries.len() >= MAX_QUERIES {
            self.more += 1;
        } else {
            self.queries.push(q);
        }
    }
}

/// The DNS message in a packet's bytes, which start at its IP header.
/// None when the packet is not to or from port 53 (or `extra_port`, when
/// not 0).
pub fn from_packet(ip: &[u8], extra_port: u16) -> Option<Result<Message, DnsError>> {
    let (proto, l4) = transport(ip)?;
    let ports = |b: &[u8]| {
        (b.len() >= 4).then(|| {
            (
                u16::from_be_bytes([b[0], b[1]]),
                u16::from_be_bytes([b[2], b[3]]),
            )
        })
    };
    let (sport, dport) = ports(l4)?;
    let dns = |p: u16| p == DNS_PORT || (p != 0 && p == extra_port);
    if !dns(sport) && !dns(dport) {
        return None;
    }
    let payload = match proto {
        // UDP: an 8-byte header.
        17 => l4.get(8..),
        // TCP: the data offset, then each message has a 2-byte length
        // (RFC 1035 4.2.2, RFC 7766 8), read up to that length; a segment
        // without data (a bare ACK) has none, and one with the length
        // alone (a client that wrote the two apart) none yet.
        6 => {
            let off = usize::from(l4.get(12)? >> 4) * 4;
            let data = l4.get(off..)?;
            if data.len() <= 2 {
                return None;
            }
            let len = usize::from(u16::from_be_bytes([data[0], data[1]]));
            data.get(2..data.len().min(2 + len))
        }
        _ => return None,
    };
    Some(payload.ok_or(DnsError::NoTransport).and_then(parse))
}

/// (protocol, transport header on) of an IPv4 or IPv6 packet; IPv6
/// extension headers are not walked (the next header must be TCP/UDP).
/// The bytes end where the IP header's length says: a short frame's
/// Ethernet padding (a bare ACK is 54 bytes, sent as 60), which tc and
/// the device hooks see before the stack trims it, is not transport data.
/// A length of 0 (BIG TCP, IPv6 jumbograms) does not bound them.
fn transport(ip: &[u8]) -> Option<(u8, &[u8])> {
    let (proto, l4_off) = match ip.first()? >> 4 {
        4 => (*ip.get(9)?, usize::from(ip[0] & 0x0f) * 4),
        6 => (*ip.get(6)?, 40),
        _ => return None,
    };
    let total = crate::model::event::ip_total_len(ip)?;
    let end = if total == 0 {
        ip.len()
    } else {
        ip.len().min(total)
    };
    Some((proto, ip.get(l4_off..end)?))
}

/// A DNS message (RFC 1035 4.1). A message cut short by the capture
/// still gives its header.
pub fn parse(b: &[u8]) -> Result<Message, DnsError> {
    if b.len() < 12 {
        return Err(DnsError::Short(b.len()));
    }
    let id = u16::from_be_bytes([b[0], b[1]]);
    let flags = u16::from_be_bytes([b[2], b[3]]);
    let header_only = Message {
        id,
        response: flags & 0x8000 != 0,
        rcode: flags & 0x000f,
        truncated: flags & 0x0200 != 0,
        question: None,
        answer_count: u16::from_be_bytes([b[6], b[7]]),
        answers: Vec::new(),
        partial: true,
    };
    // The opcode must be a query (0), status (2), notify (4) or update (5),
    // and a query asks one question: other bytes to port 53 are not DNS.
    let opcode = (flags >> 11) & 0x0f;
    let qdcount = u16::from_be_bytes([b[4], b[5]]);
    if !matches!(opcode, 0 | 2 | 4 | 5) || qdcount > 1 {
        return Err(DnsError::Malformed(format!(
            "opcode {opcode}, {qdcount} questions"
        )));
    }
    let p = match Packet::parse(b) {
        Ok(p) => p,
        // Cut short by the snap length: what the header says.
        Err(simple_dns::SimpleDnsError::InsufficientData) => return Ok(header_only),
        Err(e) => return Err(DnsError::Malformed(e.to_string())),
    };
    let question = p.questions.first().map(|q| Question {
        name: q.qname.to_string(),
        qtype: u16::from(q.qtype),
        qclass: u16::from(q.qclass),
    });
    let answers = p
        .answers
        .iter()
        .take(MAX_ANSWERS)
        .map(|rr| Answer {
            name: rr.name.to_string(),
            rtype: u16::from(rr.rdata.type_code()),
            ttl: rr.ttl,
            data: rdata_text(&rr.rdata),
        })
        .collect();
    Ok(Message {
        question,
        answer_count: u16::try_from(p.answers.len()).unwrap_or(u16::MAX),
        answers,
        partial: false,
        ..header_only
    })
}

fn rdata_text(r: &RData<'_>) -> String {
    match r {
        RData::A(a) => IpAddr::from(std::net::Ipv4Addr::from(a.address)).to_string(),
        RData::AAAA(a) => IpAddr::from(std::net::Ipv6Addr::from(a.address)).to_string(),
        RData::CNAME(n) => n.0.to_string(),
        RData::PTR(n) => n.0.to_string(),
        RData::NS(n) => n.0.to_string(),
        other => format!("({} record)", qtype_name(u16::from(other.type_code()))),
    }
}

/// A query type's mnemonic (RFC 1035, 3596, 2782, 9460), else `TYPEn`
/// (RFC 3597's spelling).
pub fn qtype_name(t: u16) -> String {
    let s = match t {
        1 => "A",
        2 => "NS",
        5 => "CNAME",
        6 => "SOA",
        12 => "PTR",
        15 => "MX",
        16 => "TXT",
        28 => "AAAA",
        33 => "SRV",
        64 => "SVCB",
        65 => "HTTPS",
        255 => "ANY",
        _ => return format!("TYPE{t}"),
    };
    s.to_string()
}

/// A response code's name (RFC 1035, 2136), else `RCODEn`.
pub fn rcode_name(r: u16) -> String {
    let s = match r {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        _ => return format!("RCODE{r}"),
    };
    s.to_string()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use simple_dns::{CLASS, Name, PacketFlag, QCLASS, QTYPE, ResourceRecord, TYPE, rdata};

    use super::*;

    fn query(id: u16, name: &str, qtype: TYPE) -> Vec<u8> {
        let mut p = Packet::new_query(id);
        p.set_flags(PacketFlag::RECURSION_DESIRED);
        p.questions.push(simple_dns::Question::new(
            Name::new_unchecked(name),
            QTYPE::TYPE(qtype),
            QCLASS::CLASS(CLASS::IN),
            false,
        ));
        p.build_bytes_vec().unwrap()
    }

    fn reply(id: u16, name: &str, rcode: simple_dns::RCODE, addrs: &[[u8; 4]]) -> Vec<u8> {
        let q = query(id, name, TYPE::A);
        let mut p = Packet::parse(&q).unwrap().into_reply();
        *p.rcode_mut() = rcode;
        for a in addrs {
            p.answers.push(ResourceRecord::new(
                Name::new_unchecked(name),
                CLASS::IN,
                30,
                RData::A(rdata::A {
                    address: u32::from_be_bytes(*a),
                }),
            ));
        }
        p.build_bytes_vec().unwrap()
    }

    /// An IPv4 header of protocol `proto` before `l4`, its total length set.
    fn ipv4(proto: u8, l4: &[u8]) -> Vec<u8> {
        let total = u16::try_from(20 + l4.len()).unwrap().to_be_bytes();
        let mut b = vec![
            0x45, 0, total[0], total[1], 0, 0, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        b.extend_from_slice(l4);
        b
    }

    /// An IPv4/UDP packet around `dns`.
    fn udp(sport: u16, dport: u16, dns: &[u8]) -> Vec<u8> {
        let mut l4 = Vec::new();
        l4.extend_from_slice(&sport.to_be_bytes());
        l4.extend_from_slice(&dport.to_be_bytes());
        l4.extend_from_slice(&[0, 0, 0, 0]);
        l4.extend_from_slice(dns);
        ipv4(17, &l4)
    }

    /// An IPv4/TCP segment (20-byte header, PSH|ACK) carrying `data`.
    fn tcp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
        let mut l4 = Vec::new();
        l4.extend_from_slice(&sport.to_be_bytes());
        l4.extend_from_slice(&dport.to_be_bytes());
        l4.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        l4.extend_from_slice(data);
        ipv4(6, &l4)
    }

    /// `dns` after its 2-byte length, as DNS over TCP sends it.
    fn framed(dns: &[u8]) -> Vec<u8> {
        let mut b = u16::try_from(dns.len()).unwrap().to_be_bytes().to_vec();
        b.extend_from_slice(dns);
        b
    }

    #[test]
    fn a_tcp_segment_gives_its_first_message_up_to_its_length() {
        let big = reply(
            0x1000,
            "big.example.com",
            simple_dns::RCODE::NoError,
            &[[192, 0, 2, 1], [192, 0, 2, 2]],
        );
        // Two messages in one segment (RFC 7766 pipelining): the first.
        let mut two = framed(&big);
        two.extend_from_slice(&framed(&query(0x1001, "x.example", TYPE::A)));
        let m = from_packet(&tcp(53, 40000, &two), 0).unwrap().unwrap();
        assert_eq!((m.id, m.answer_count, m.partial), (0x1000, 2, false));
        assert_eq!(m.answers[1].data, "192.0.2.2");
        // A segment holding the length alone (the client wrote it apart
        // from the message) is no message yet, and no error.
        assert!(from_packet(&tcp(40000, 53, &framed(&big)[..2]), 0).is_none());
        // A capture cut inside the message keeps its header.
        let cut = tcp(53, 40000, &framed(&big));
        let m = from_packet(&cut[..cut.len() - 5], 0).unwrap().unwrap();
        assert!(m.partial && !m.truncated && m.answer_count == 2);
    }

    #[test]
    fn ethernet_padding_is_not_data() {
        // A bare ACK from port 53 (40 bytes of IP) padded to a 60-byte
        // frame, as tc ingress sees it: no data, so no message and no
        // "not DNS".
        let mut ack = tcp(53, 40000, &[]);
        ack.extend_from_slice(&[0; 6]);
        assert!(from_packet(&ack, 0).is_none());
        // A UDP answer padded the same way reads as the answer alone.
        let r = reply(5, "a.example", simple_dns::RCODE::NoError, &[[1, 2, 3, 4]]);
        let mut p = udp(53, 40000, &r);
        p.extend_from_slice(&[0; 6]);
        assert_eq!(from_packet(&p, 0).unwrap().unwrap().answer_count, 1);
    }

    #[test]
    fn a_query_and_its_reply_pair_by_id() {
        let q = from_packet(
            &udp(
                41234,
                53,
                &query(0x1234, "kubernetes.default.svc.cluster.local", TYPE::A),
            ),
            0,
        )
        .unwrap()
        .unwrap();
        assert_eq!(q.id, 0x1234);
        assert!(!q.response);
        assert_eq!(
            q.question,
            Some(Question {
                name: "kubernetes.default.svc.cluster.local".into(),
                qtype: 1,
                qclass: 1,
            })
        );
        let r = from_packet(
            &udp(
                53,
                41234,
                &reply(
                    0x1234,
                    "kubernetes.default.svc.cluster.local",
                    simple_dns::RCODE::NoError,
                    &[[10, 96, 0, 1]],
                ),
            ),
            0,
        )
        .unwrap()
        .unwrap();
        assert!(r.response);
        assert_eq!(r.answers[0].data, "10.96.0.1");
        let mut log = DnsLog::default();
        log.note(1_000, 0xa0, q.clone());
        // The same packet read again after NAT (same skb): not a retry.
        log.note(1_200, 0xa0, q.clone());
        log.note(2_000, 0xb0, q);
        log.note(2_800, 0xc0, r);
        assert_eq!(log.queries.len(), 1);
        let got = &log.queries[0];
        assert_eq!(got.sent, 2);
        let skbs: Vec<u64> = got.captures.iter().map(|c| c.skb).collect();
        assert_eq!(skbs, [0xa0, 0xa0, 0xb0, 0xc0]);
        let reply = got.reply.as_ref().unwrap();
        assert_eq!(
            (reply.rcode, reply.answer_count, reply.ts_ns),
            (0, 1, 2_800)
        );
    }

    #[test]
    fn another_dns_port_is_read_only_when_asked() {
        let b = udp(40000, 5353, &query(3, "printer.local", TYPE::A));
        assert!(from_packet(&b, 0).is_none());
        let m = from_packet(&b, 5353).unwrap().unwrap();
        assert_eq!(m.question.unwrap().name, "printer.local");
    }

    #[test]
    fn nxdomain_and_names() {
        let r = parse(&reply(7, "nope.example", simple_dns::RCODE::NameError, &[])).unwrap();
        assert_eq!(rcode_name(r.rcode), "NXDOMAIN");
        assert_eq!(r.answer_count, 0);
        assert_eq!(qtype_name(28), "AAAA");
        assert_eq!(qtype_name(99), "TYPE99");
        assert_eq!(rcode_name(12), "RCODE12");
    }

    #[test]
    fn a_message_cut_by_the_snap_length_keeps_its_header() {
        let r = reply(
            9,
            "a.example",
            simple_dns::RCODE::NoError,
            &[[1, 2, 3, 4], [5, 6, 7, 8]],
        );
        let m = parse(&r[..r.len() - 3]).unwrap();
        assert!(m.partial && m.response);
        assert_eq!((m.id, m.answer_count), (9, 2));
    }

    #[test]
    fn other_bytes_to_port_53_are_malformed_not_dns() {
        assert_eq!(parse(b"hello"), Err(DnsError::Short(5)));
        assert!(matches!(
            parse(b"0123456789abcdefghij"),
            Err(DnsError::Malformed(_))
        ));
        // Not to or from port 53: not read at all.
        assert!(from_packet(&udp(1000, 2000, &query(1, "x", TYPE::A)), 0).is_none());
    }

    #[test]
    fn queries_past_the_cap_are_counted() {
        let mut log = DnsLog::default();
        for id in 0..(MAX_QUERIES as u16 + 3) {
            log.note(
                u64::from(id),
                0,
                parse(&query(id, "x.example", TYPE::A)).unwrap(),
            );
        }
        assert_eq!((log.queries.len(), log.more), (MAX_QUERIES, 3));
    }

    proptest! {
        /// Any bytes: a message, or an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse(&b);
            let _ = from_packet(&b, 0);
        }

        /// A real query with its bytes flipped: never a panic either.
        #[test]
        fn corrupted_queries_never_panic(i in 0usize..60, v in any::<u8>()) {
            let mut q = query(3, "corrupt.example.com", TYPE::AAAA);
            let n = q.len();
            q[i % n] = v;
            let _ = parse(&q);
        }
    }
}
