//! A flow: the hops of one request tuple and its replies, with what NAT
//! made of it. The table that builds flows from events is in table.rs.

use std::sync::Arc;

use crate::model::{
    event::Tuple,
    hop::{Hop, HopData},
};

/// Hops kept per flow; more are counted in `hops_truncated`.
pub const MAX_HOPS: usize = 256;

/// What translated a flow's request tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum NatBy {
    /// The skb's conntrack entry holds both tuples.
    Netfilter,
    /// IPVS (its function hooks were on the path), without conntrack.
    Ipvs,
    /// Rewritten with no conntrack entry: a tc/XDP program.
    Bpf,
    /// Rewritten in the socket call, before any packet existed: a cgroup
    /// sock_addr program (socket-level load balancing).
    Socket,
}

impl NatBy {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone)]
pub struct Flow {
    pub id: u64,
    /// Original request tuple.
    pub key: Tuple,
    /// Request tuple after NAT, when it differs.
    pub translated: Option<Tuple>,
    /// What translated it: `netfilter` (the skb's conntrack entry holds
    /// both tuples) or `bpf` (rewritten with no conntrack entry: a tc/XDP
    /// program, e.g. a kube-proxy replacement).
    pub nat_by: Option<NatBy>,
    /// The UDP port of its tunnel when that is not an overlay port every
    /// tracer knows (a VXLAN device's own `dstport`; the flow table's
    /// `tunnel_ports`), 0 otherwise: [`Flow::is_outer`].
    pub outer_port: u16,
    pub hops: Vec<Hop>,
    pub hops_truncated: u32,
    pub packets: u32,
    pub replies: u32,
    /// Hook passages counted in the kernel without a record (agg.rs in
    /// tracer-ebpf: past the budget of full records per hook and device).
    /// The packet hooks among them are also in `packets`/`replies`.
    pub counted: u32,
    pub first_ns: u64,
    pub last_ns: u64,
    /// A hash of the verdict (kind, reason) last printed for this flow, 0
    /// if none: on a busy node most flows are printed live, and two
    /// `String`s each cost 100k flows ~10 MiB.
    pub printed: u64,
    /// `last_ns` when it was printed: a printed flow with no hop since is
    /// not judged again (follow.rs print_settled).
    pub printed_at: u64,
    /// DNS queries and answers read from its packets' bytes (flows to
    /// port 53 only; boxed: 8 bytes for every other flow).
    pub dns: Option<Box<crate::model::dns::DnsLog>>,
}

impl Flow {
    /// Is `t` this flow's packet wrapped in a tunnel (its outer tuple)?
    pub fn is_outer(&self, t: &Tuple) -> bool {
        t.is_outer_with(&self.key, [self.outer_port, 0])
    }

    /// A copy without its hops and DNS (a query's own flow starts so).
    pub(crate) fn clone_meta(&self) -> Flow {
        Flow {
            id: self.id,
            key: self.key,
            translated: self.translated,
            nat_by: self.nat_by,
            outer_port: self.outer_port,
            hops: Vec::new(),
            hops_truncated: self.hops_truncated,
            packets: self.packets,
            replies: self.replies,
            counted: self.counted,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
            printed: self.printed,
            printed_at: self.printed_at,
            dns: None,
        }
    }

    pub(crate) fn push(&mut self, hop: Hop) {
        self.last_ns = self.last_ns.max(hop.ts_ns);
        self.first_ns = self.first_ns.min(hop.ts_ns);
        if self.hops.len() >= MAX_HOPS {
            self.hops_truncated += 1;
            return;
        }
        // Ring-buffer order is near time order across CPUs; keep it exact.
        let pos = self.hops.partition_point(|h| h.ts_ns <= hop.ts_ns);
        self.hops.insert(pos, hop);
    }

    /// The tuple `t` as a shared handle: the one a recent hop already holds
    /// when equal (a flow's hops carry two or three distinct tuples: the
    /// request, the reply, a translation), else a new one.
    pub fn share(&self, t: Tuple) -> Arc<Tuple> {
        self.hops
            .iter()
            .rev()
            .take(8)
            .find(|h| *h.tuple == t)
            .map_or_else(|| Arc::new(t), |h| h.tuple.clone())
    }

    /// Index of the first hop whose tuple differs from the original (NAT).
    pub fn nat_at(&self) -> Option<usize> {
        self.hops.iter().position(|h| {
            h.is_request() && matches!(h.data, HopData::Packet { .. }) && *h.tuple != self.key
        })
    }

    /// The namespaces its hops went through, each once, in the order
    /// first seen: (inode, label). Inode 0 (not known) is left out.
    pub fn path_netns(&self) -> Vec<(u32, &str)> {
        let mut v: Vec<(u32, &str)> = Vec::new();
        for h in &self.hops {
            if h.netns_inode != 0 && !v.iter().any(|(i, _)| *i == h.netns_inode) {
                v.push((h.netns_inode, h.netns.as_str()));
            }
        }
        v
    }

    /// Destination addresses this flow is known under (original, translated).
    pub fn dsts(&self) -> Vec<std::net::IpAddr> {
        let mut v = vec![self.key.dst];
        if let Some(t) = self.translated {
            v.push(t.dst);
        }
        v
    }
}
