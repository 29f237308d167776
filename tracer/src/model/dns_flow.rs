//! Each DNS query as its own flow: the hops of the packets that carried it
//! and its reply, cut out of the flow of its client socket (which may ask
//! many), so that a query that got no answer is judged on its own packets.

use crate::model::{dns::Query, flow::Flow, hop::Hop};

/// Hops without an skb (route lookups, neighbour events) this long before
/// a query's first packet was read belong to it too: the client's output
/// route lookup comes just before its packet is sent.
const LEAD_NS: u64 = 2_000_000;

/// A read skb address is another packet's after this long (the flow
/// table's own staleness rule).
const STALE_NS: u64 = 200_000_000;

/// The flow of query `i` of `flow`'s DNS log. A flow that carried one
/// query is that query's flow, whole (TCP's handshake included); with
/// several, each query keeps the hops of the skbs its request and reply
/// were read from (from that time on, and until another query's packet
/// was read on the same skb address), and the hops without an skb within
/// its time.
pub fn query_flow(flow: &Flow, i: usize) -> Option<Flow> {
    let log = flow.dns.as_deref()?;
    let q = log.queries.get(i)?;
    let mut sub = Flow {
        dns: None,
        hops_truncated: 0,
        counted: 0,
        packets: q.sent + u32::from(q.reply.is_some()),
        replies: u32::from(q.reply.is_some()),
        ..flow.clone_meta()
    };
    if log.queries.len() == 1 && log.more == 0 {
        sub.hops.clone_from(&flow.hops);
        return Some(sub);
    }
    // Per hop: one of this query's packets (hops without an skb: none).
    let mine: Vec<bool> = flow
        .hops
        .iter()
        .map(|h| h.skb != 0 && owner(&log.queries, h) == Some(i))
        .collect();
    let start = q.captures.iter().map(|c| c.ts_ns).min()?;
    let end = flow
        .hops
        .iter()
        .zip(&mine)
        .filter(|(_, m)| **m)
        .map(|(h, _)| h.ts_ns)
        .max()
        .unwrap_or(start);
    sub.hops = flow
        .hops
        .iter()
        .zip(&mine)
        .filter(|(h, m)| {
            if h.skb == 0 {
                h.ts_ns + LEAD_NS >= start && h.ts_ns <= end
            } else {
                **m
            }
        })
        .map(|(h, _)| h.clone())
        .collect();
    sub.first_ns = sub.hops.first().map_or(start, |h| h.ts_ns);
    sub.last_ns = sub.hops.last().map_or(start, |h| h.ts_ns);
    Some(sub)
}

/// The query whose packet was last read on this hop's skb before the hop.
fn owner(queries: &[Query], h: &Hop) -> Option<usize> {
    queries
        .iter()
        .enumerate()
        .flat_map(|(i, q)| q.captures.iter().map(move |c| (i, c)))
        .filter(|(_, c)| c.skb == h.skb && c.ts_ns <= h.ts_ns && h.ts_ns - c.ts_ns < STALE_NS)
        .max_by_key(|(_, c)| c.ts_ns)
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dns::{Capture, DnsLog, Reply};
    use crate::model::event::tests::v4;
    use crate::model::hop::Dir;
    use crate::model::names::Names;
    use crate::model::table::{FlowTable, tests::pkt};
    use tracer_common::Hook;

    /// A flow of one UDP packet to :53, its hops then replaced.
    fn base() -> Flow {
        let mut t = FlowTable::new(10);
        let req = v4([10, 0, 0, 1], 40000, [10, 0, 0, 2], 53, 17);
        let id = t
            .ingest(&pkt(Hook::Xmit, 0xa, 1, req), &mut Names::default())
            .unwrap();
        t.get(id).unwrap().into_owned()
    }

    fn hop(f: &Flow, ts_ns: u64, skb: u64, dir: Dir) -> Hop {
        let mut h = f.hops[0].clone();
        h.ts_ns = ts_ns;
        h.skb = skb;
        h.dir = dir;
        h
    }

    fn query(id: u16, captures: &[(u64, u64)], answered: bool) -> Query {
        Query {
            id,
            question: None,
            first_ns: captures[0].1,
            sent: 1,
            reply: answered.then(|| Reply {
                ts_ns: captures[1].1,
                rcode: 0,
                truncated: false,
                answer_count: 1,
                answers: Vec::new(),
                partial: false,
            }),
            captures: captures
                .iter()
                .map(|&(skb, ts_ns)| Capture { skb, ts_ns })
                .collect(),
        }
    }

    #[test]
    fn each_query_keeps_its_own_packets() {
        // Query 1 (skb 0xa at 1 ms) answered on skb 0xb; query 2 reuses
        // skb address 0xa at 10 ms and gets no answer.
        let mut f = base();
        f.hops = vec![
            hop(&f, 900_000, 0, Dir::Request),
            hop(&f, 1_000_000, 0xa, Dir::Request),
            hop(&f, 1_100_000, 0xa, Dir::Request),
            hop(&f, 2_000_000, 0xb, Dir::Reply),
            hop(&f, 9_500_000, 0, Dir::Request),
            hop(&f, 10_000_000, 0xa, Dir::Request),
            hop(&f, 10_200_000, 0xa, Dir::Request),
        ];
        f.dns = Some(Box::new(DnsLog {
            queries: vec![
                query(1, &[(0xa, 1_000_000), (0xb, 2_000_000)], true),
                query(2, &[(0xa, 10_000_000)], false),
            ],
            more: 0,
        }));
        let ts = |g: &Flow| g.hops.iter().map(|h| h.ts_ns).collect::<Vec<_>>();
        let one = query_flow(&f, 0).unwrap();
        assert_eq!(ts(&one), [900_000, 1_000_000, 1_100_000, 2_000_000]);
        assert_eq!((one.packets, one.replies, one.dns.is_none()), (2, 1, true));
        let two = query_flow(&f, 1).unwrap();
        assert_eq!(ts(&two), [9_500_000, 10_000_000, 10_200_000]);
        assert_eq!(two.replies, 0);
        assert!(query_flow(&f, 2).is_none());
    }

    #[test]
    fn a_single_query_is_its_whole_flow() {
        let mut f = base();
        f.hops = vec![hop(&f, 1, 0xa, Dir::Request), hop(&f, 2, 0xc, Dir::Request)];
        f.dns = Some(Box::new(DnsLog {
            queries: vec![query(1, &[(0xa, 1)], false)],
            more: 0,
        }));
        assert_eq!(query_flow(&f, 0).unwrap().hops.len(), 2);
    }
}
