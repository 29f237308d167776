//! The flow table: events become hops of flows.
//!
//! A flow is keyed by its original request tuple. A packet event finds its
//! flow by (1) the conntrack original tuple it carries, (2) the skb address
//! already seen in a flow (NAT cannot hide it), (3) its tuple, reversed for
//! replies, or a translated tuple learnt from conntrack. Events without an
//! skb (fib lookups, socket state, neighbours) are tied by tuple/address.

use std::{borrow::Cow, collections::VecDeque, sync::Arc};

use foldhash::HashMap;

use tracer_common::{Hook, PacketEvent, SockAddrEvent};

use crate::{
    model::drop_reason::DropReason,
    model::event::{Event, Tuple, ip_from},
    model::flow::{Flow, NatBy},
    model::frozen::{self, Codec},
    model::hop::{
        Dir, DropData, FibData, Hop, HopData, NeighData, NeighEvent, Nud, ReasonFrom, SockAddrData,
        SockCall, SockData, TcpState, icmp_desc,
    },
    model::inferred::{self, Inferred},
    model::names::{Names, func_of},
};

/// An skb seen again with unreadable headers after this long is another
/// packet reusing a freed address.
const STALE_NS: u64 = 200_000_000;
/// How long a packet can be held (a neighbour queue: ARP's probes, 3 s by
/// default) and still be answered by an ICMP error of the node's
/// ([`FlowTable::held_skb_flow`]).
const HELD_NS: u64 = 10_000_000_000;
/// A flow with no event for this long is packed (frozen.rs). NAT rewrites
/// an skb between two hooks microseconds apart, so a packed flow's hops are
/// not needed to tell NAT from a reused skb address (`skb_flow`). An event
/// for a packed flow unpacks it; a sparse flow (a packet every few hundred
/// ms) is packed and unpacked each time, at ~1 us per hop.
pub const PACK_NS: u64 = 100_000_000;
/// Outer tuples kept at most ([`FlowTable::note_outer`]); past it the
/// entries of flows no longer in the table go. A flow's wrapped packets
/// have one outer tuple each way (the sender's UDP source port is a hash
/// of the inner flow), so this is tens of thousands of tunnelled flows.
const OUTER_ALIASES_MAX: usize = 65_536;
/// How long an unclaimed fib lookup waits for its flow (connect() looks up
/// the route before the first packet exists).
const PENDING_NS: u64 = 2_000_000_000;

/// A flow in the table: live (recent events), or packed once quiet.
#[derive(Debug)]
enum Slot {
    /// Boxed: a map sized for 100k flows holds ~130k slots, and an empty
    /// slot of an unboxed `Flow` costs the whole struct.
    Live(Box<Flow>),
    Packed(Box<[u8]>),
}

/// What the table tells of a flow without unpacking it.
#[derive(Debug, Clone, Copy)]
pub struct FlowMeta {
    pub id: u64,
    pub last_ns: u64,
    pub printed: u64,
    pub printed_at: u64,
}

impl Slot {
    fn meta(&self) -> FlowMeta {
        match self {
            Slot::Live(f) => FlowMeta {
                id: f.id,
                last_ns: f.last_ns,
                printed: f.printed,
                printed_at: f.printed_at,
            },
            Slot::Packed(b) => FlowMeta {
                id: frozen::id(b),
                last_ns: frozen::last_ns(b),
                printed: frozen::printed(b),
                printed_at: frozen::printed_at(b),
            },
        }
    }

    fn key(&self) -> Tuple {
        match self {
            Slot::Live(f) => f.key,
            Slot::Packed(b) => frozen::key(b),
        }
    }

    fn tuples(&self) -> (Tuple, Option<Tuple>) {
        match self {
            Slot::Live(f) => (f.key, f.translated),
            Slot::Packed(b) => frozen::tuples(b),
        }
    }
}

/// Flows packed now and the bytes they take (without allocator overhead):
/// added to when a flow is packed, taken from when one is unpacked or
/// removed.
#[derive(Debug, Default)]
struct PackedSize {
    flows: usize,
    bytes: usize,
}

impl PackedSize {
    fn add(&mut self, b: &[u8]) {
        self.flows += 1;
        self.bytes += b.len();
    }

    fn sub(&mut self, b: &[u8]) {
        self.flows -= 1;
        self.bytes -= b.len();
    }
}

/// Translations kept for the taking (replay takes none).
const DNAT_LOG_MAX: usize = 1024;

#[derive(Debug, Default)]
pub struct FlowTable {
    flows: HashMap<u64, Slot>,
    /// Names as numbers for packed flows.
    codec: Codec,
    /// Live flows, by when they were last checked for packing (event-clock
    /// ns): (flow, last_ns then). A flow is here once while live.
    live_fifo: VecDeque<(u64, u64)>,
    /// Flows packed now, and their bytes.
    packed: PackedSize,
    /// Original request tuple -> flow, by a 64-bit hash of the tuple: a
    /// slot is 16 bytes instead of 48 (100k flows: 2 MiB instead of 6). The
    /// flow's own key confirms a hit; a tuple whose hash another live flow
    /// holds goes to `by_key_spill`.
    by_key: HashMap<u64, u64>,
    by_key_spill: HashMap<Tuple, u64>,
    key_hasher: foldhash::fast::RandomState,
    /// Translated request tuples -> flow.
    alias: HashMap<Tuple, u64>,
    /// Outer tuples of a flow's packets wrapped by a tunnel, request
    /// orientation (a reply's reversed) -> flow ([`OUTER_ALIASES_MAX`]).
    outer_alias: HashMap<Tuple, u64>,
    /// Outer tuples of port-less tunnels (IPIP, SIT, GRE) a flow's packet
    /// was seen wrapped in, request orientation: one per pair of nodes,
    /// shared by every flow between them, so no flow's alias; a packet
    /// under one that no skb ties to a flow opens none
    /// ([`FlowTable::note_outer`]).
    shared_outer: std::collections::HashSet<Tuple>,
    /// skb address -> (flow, time last seen, the low bit set once the skb
    /// ended: see `note_skb`). The kernel reuses freed skb memory, so an
    /// entry only vouches for a packet seen recently, and after the end
    /// only for events that cannot name their own flow.
    by_skb: HashMap<u64, (u64, u64)>,
    skb_fifo: VecDeque<u64>,
    /// Flows by their last event, most recent at the back; may repeat.
    recent: VecDeque<u64>,
    pending_fib: Vec<Hop>,
    /// Eviction candidates (last_ns, flow), quietest last (`quietest`).
    evict_batch: Vec<(u64, u64)>,
    next_id: u64,
    pub max_flows: usize,
    /// Flows dropped because of the cap.
    pub evicted: u64,
    /// Payloads to or from a DNS port that were not DNS.
    pub dns_malformed: u64,
    /// A DNS port read besides 53 (`--dns-port`), 0 for none.
    pub dns_port: u16,
    /// The node's VXLAN ports beyond the overlay ports every tracer knows
    /// (`FilterConfig::tunnel_ports`, the recording's header): UDP to them
    /// is a tunnel's outer packet.
    pub tunnel_ports: [u16; 2],
    /// ICMP errors filed under the flow they are about
    /// (`fold_icmp_error`): (skb, when), the newest at the back.
    folded_errors: VecDeque<(u64, u64)>,
    /// Neighbour events for the target, flow or not.
    pub neigh_log: Vec<Hop>,
    /// Translated request tuples whose destination is not the key's (DNAT
    /// to an endpoint), first seen since the last take: nftrace traces
    /// the endpoints too.
    pub dnat_log: Vec<Tuple>,
}

/// skb addresses remembered for `skb_flow`: at the ring buffer's ~300k
/// records/s, the last ~100 ms of them (NAT happens within microseconds).
const MAX_SKBS: usize = 32768;
/// ICMP errors remembered as folded into their flows (their skbs).
const FOLDED_ERRORS_MAX: usize = 64;

/// Flows a route lookup without ports is matched against, most recently
/// active first (`find_fib_flow`).
const RECENT_FLOWS: usize = 1024;

/// Where and which way an event with readable headers saw its packet
/// (FlowTable::skb_flow).
#[derive(Clone, Copy)]
struct SkbSeen {
    dir: Dir,
    hook: Hook,
    ifindex: u32,
    netns: u32,
}

/// The hooks a packet passes on its way (devices in and out): each passage
/// counts in `Flow::packets`.
fn is_packet_hook(hook: Hook) -> bool {
    matches!(
        hook,
        Hook::NetifReceive | Hook::Xmit | Hook::TcIngress | Hook::TcEgress
    )
}

/// A packet's tuple in its flow's request orientation (a reply carries
/// the request's reversed).
fn as_request(t: Tuple, dir: Dir) -> Tuple {
    match dir {
        Dir::Request => t,
        Dir::Reply => t.reversed(),
    }
}

impl FlowTable {
    pub fn new(max_flows: usize) -> FlowTable {
        // Sized for the cap at once: growing a map moves it into one twice
        // its size, both held for the move (at 100k flows, 3 + 6 MiB for
        // the two maps). Untouched slots of a reserved map cost address
        // space, not RSS.
        let cap = max_flows.min(1 << 20);
        FlowTable {
            max_flows,
            next_id: 1,
            flows: HashMap::with_capacity_and_hasher(cap, Default::default()),
            by_key: HashMap::with_capacity_and_hasher(cap, Default::default()),
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// A flow, unpacked into a copy if it is packed.
    pub fn get(&self, id: u64) -> Option<Cow<'_, Flow>> {
        Some(match self.flows.get(&id)? {
            Slot::Live(f) => Cow::Borrowed(&**f),
            Slot::Packed(b) => Cow::Owned(self.codec.unpack(b)),
        })
    }

    /// A flow to change: unpacked in place if packed, and live until it is
    /// quiet again.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut Flow> {
        let slot = self.flows.get_mut(&id)?;
        if let Slot::Packed(b) = slot {
            self.packed.sub(b);
            let f = self.codec.unpack(b);
            self.live_fifo.push_back((id, f.last_ns));
            *slot = Slot::Live(Box::new(f));
        }
        match slot {
            Slot::Live(f) => Some(&mut **f),
            Slot::Packed(_) => None,
        }
    }

    /// Record the verdict printed for a flow (a hash, see Flow::printed),
    /// without unpacking it.
    pub fn set_printed(&mut self, id: u64, key: u64) {
        match self.flows.get_mut(&id) {
            Some(Slot::Live(f)) => {
                f.printed = key;
                f.printed_at = f.last_ns;
            }
            Some(Slot::Packed(b)) => {
                let at = frozen::last_ns(b);
                frozen::set_printed(b, key, at);
            }
            None => {}
        }
    }

    /// Flows ordered by first appearance (packed ones unpacked into copies).
    pub fn flows(&self) -> Vec<Cow<'_, Flow>> {
        let mut ids: Vec<u64> = self.flows.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.get(id)).collect()
    }

    /// Flows packed now, and the bytes they take (without allocator
    /// overhead).
    pub fn packed_size(&self) -> (usize, usize) {
        (self.packed.flows, self.packed.bytes)
    }

    /// What the table knows of every flow without unpacking, in no order.
    pub fn metas(&self) -> impl Iterator<Item = FlowMeta> + '_ {
        self.flows.values().map(Slot::meta)
    }

    /// Pack the live flows with no event for `PACK_NS` before `now` (the
    /// event clock: CLOCK_MONOTONIC, bpf_ktime_get_ns()).
    pub fn pack_quiet(&mut self, now: u64) {
        let mut again = Vec::new();
        while let Some(&(id, checked)) = self.live_fifo.front() {
            if now.saturating_sub(checked) < PACK_NS {
                break;
            }
            self.live_fifo.pop_front();
            let Some(slot) = self.flows.get_mut(&id) else {
                continue;
            };
            let Slot::Live(f) = slot else { continue };
            if now.saturating_sub(f.last_ns) < PACK_NS {
                again.push((id, f.last_ns));
                continue;
            }
            let b = self.codec.pack(f);
            self.packed.add(&b);
            *slot = Slot::Packed(b);
        }
        self.live_fifo.extend(again);
    }

    /// All flows by first appearance, the table consumed and each flow
    /// unpacked only when it is its turn: the final report takes them
    /// without a copy of the table (a clone of 100k flows doubled the peak).
    pub fn into_flows(self) -> impl Iterator<Item = Flow> {
        let mut slots: Vec<(u64, Slot)> = self.flows.into_iter().collect();
        slots.sort_unstable_by_key(|(id, _)| *id);
        let codec = self.codec;
        slots.into_iter().map(move |(_, s)| match s {
            Slot::Live(f) => *f,
            Slot::Packed(b) => codec.unpack(&b),
        })
    }

    fn lookup(&self, t: &Tuple) -> Option<u64> {
        self.key_lookup(t)
            .or_else(|| self.alias.get(t).copied())
            .or_else(|| {
                self.outer_alias
                    .get(t)
                    .copied()
                    .filter(|id| self.flows.contains_key(id))
            })
    }

    /// The flow's packet was seen wrapped by a tunnel, under `outer` in
    /// direction `dir`: its later packets come under that tuple too (the
    /// kernel side follows it, filter.rs learn_rewritten), more than
    /// STALE_NS after the skb that tied the first one to the flow. Without
    /// this each way's outer packets made a flow of their own (`udp
    /// NODE1:P -> NODE2:8472 no_reply`, and the replies' reversed). A UDP
    /// tunnel's source port is a hash of the inner flow
    /// (udp_flow_src_port()), so its outer tuple is this flow's; IPIP, SIT
    /// and GRE carry every flow between two nodes under one pair of
    /// addresses: [`Self::shared_outer`].
    fn note_outer(&mut self, outer: Tuple, dir: Dir, id: u64) {
        let key = as_request(outer, dir);
        if outer.proto != 17 {
            if self.shared_outer.len() >= OUTER_ALIASES_MAX {
                self.shared_outer.clear();
            }
            self.shared_outer.insert(key);
            return;
        }
        if self.outer_alias.len() >= OUTER_ALIASES_MAX && !self.outer_alias.contains_key(&key) {
            let flows = &self.flows;
            self.outer_alias.retain(|_, f| flows.contains_key(f));
            if self.outer_alias.len() >= OUTER_ALIASES_MAX {
                return;
            }
        }
        self.outer_alias.insert(key, id);
    }

    /// The flow of a packet seen with tuple `t` in direction `dir` (a reply
    /// carries the request tuple reversed).
    fn lookup_seen(&self, t: &Tuple, dir: Dir) -> Option<u64> {
        self.lookup(&as_request(*t, dir))
    }

    fn key_hash(&self, t: &Tuple) -> u64 {
        use std::hash::BuildHasher;
        self.key_hasher.hash_one(t)
    }

    fn key_lookup(&self, t: &Tuple) -> Option<u64> {
        if let Some(&id) = self.by_key.get(&self.key_hash(t))
            && self.flows.get(&id).is_some_and(|f| f.key() == *t)
        {
            return Some(id);
        }
        self.by_key_spill.get(t).copied()
    }

    fn key_insert(&mut self, key: Tuple, id: u64) {
        let h = self.key_hash(&key);
        let taken = self
            .by_key
            .get(&h)
            .is_some_and(|o| *o != id && self.flows.get(o).is_some_and(|f| f.key() != key));
        if taken {
            self.by_key_spill.insert(key, id);
        } else {
            self.by_key.insert(h, id);
        }
    }

    fn key_remove(&mut self, key: &Tuple, id: u64) {
        let h = self.key_hash(key);
        if self.by_key.get(&h) == Some(&id) {
            self.by_key.remove(&h);
        }
        if self.by_key_spill.get(key) == Some(&id) {
            self.by_key_spill.remove(key);
        }
    }

    /// A new flow first seen at `ts` in namespace `netns` (0: unknown).
    fn create(&mut self, key: Tuple, ts: u64, netns: u32) -> u64 {
        if self.flows.len() >= self.max_flows
            && let Some(old) = self.quietest()
        {
            self.remove(old);
            self.evicted += 1;
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut flow = Flow {
            id,
            key,
            translated: None,
            nat_by: None,
            outer_port: 0,
            hops: Vec::new(),
            hops_truncated: 0,
            packets: 0,
            replies: 0,
            counted: 0,
            first_ns: ts,
            last_ns: ts,
            printed: 0,
            printed_at: 0,
            dns: None,
        };
        // Claim route lookups done before the first packet (connect()).
        let mut i = 0;
        while i < self.pending_fib.len() {
            let h = &self.pending_fib[i];
            if ts.saturating_sub(h.ts_ns) < PENDING_NS
                && fib_matches(&key, &h.tuple, h.dir)
                && (netns == 0 || h.netns_inode == 0 || h.netns_inode == netns)
            {
                flow.push(self.pending_fib.swap_remove(i));
            } else {
                i += 1;
            }
        }
        self.flows.insert(id, Slot::Live(Box::new(flow)));
        self.live_fifo.push_back((id, ts));
        self.key_insert(key, id);
        id
    }

    /// The flow quiet the longest. A scan of every flow per new flow made a
    /// full table (100k flows) cost ~0.3 ms per flow; instead one scan
    /// keeps the quietest sixteenth of the flows as candidates, quietest
    /// last, and they go first. A candidate that had an event since is
    /// skipped; every flow outside the batch was less quiet than all of it
    /// when it was taken (last_ns only grows), so the choice is exact.
    fn quietest(&mut self) -> Option<u64> {
        loop {
            if self.evict_batch.is_empty() {
                let mut all: Vec<(u64, u64)> = self.metas().map(|m| (m.last_ns, m.id)).collect();
                let k = (all.len() / 16).max(1).min(all.len());
                if k == 0 {
                    return None;
                }
                all.select_nth_unstable(k - 1);
                all.truncate(k);
                all.sort_unstable_by(|a, b| b.cmp(a));
                self.evict_batch = all;
            }
            let (last, id) = self.evict_batch.pop()?;
            if self
                .flows
                .get(&id)
                .is_some_and(|s| s.meta().last_ns == last)
            {
                return Some(id);
            }
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(slot) = self.flows.remove(&id) {
            if let Slot::Packed(b) = &slot {
                self.packed.sub(b);
            }
            let (key, translated) = slot.tuples();
            self.key_remove(&key, id);
            if let Some(t) = translated {
                self.alias.remove(&t);
            }
        }
    }

    /// `ended`: the skb's life on the path ended at this hop (dropped,
    /// consumed, or queued to a socket: the application's read frees it,
    /// skb_consume_udp() -> skb_attempt_defer_free(), with a consume_skb
    /// tracepoint only when the free is deferred to the allocating CPU,
    /// and the read may come long after). Its address is then free for the
    /// next packet: on a busy UDP server the slab hands it to the next
    /// datagram within microseconds, and that packet, another flow, must
    /// not be taken for this one rewritten by NAT.
    fn note_skb(&mut self, skb: u64, id: u64, ts: u64, ended: bool) {
        if skb == 0 {
            return;
        }
        let seen = (ts & !1) | ended as u64;
        if self.by_skb.insert(skb, (id, seen)).is_none() {
            self.skb_fifo.push_back(skb);
            if self.skb_fifo.len() > MAX_SKBS
                && let Some(old) = self.skb_fifo.pop_front()
            {
                self.by_skb.remove(&old);
            }
        }
    }

    /// The flow an skb address belongs to, if it was seen less than
    /// `STALE_NS` ago (before that, the address may be another packet's).
    /// `parsed`: the event carries its own headers (else None), which did
    /// not name a flow, so this is either the flow's packet rewritten by
    /// NAT or a new packet at a reused address. The kernel hands a freed
    /// skb's memory to the next packet within microseconds on a busy
    /// server (kmem_cache_alloc_node() of skbuff_head_cache), so it is a
    /// new packet when:
    /// - the skb's life ended in that flow (`note_skb`),
    /// - it goes the other way than that flow's last hop with this skb (NAT
    ///   keeps the direction),
    /// - that flow already saw this skb at the same hook and device: one
    ///   packet passes each once (route lookups excepted: one input route
    ///   lookup tries several tables, fib_table_lookup() each).
    fn skb_flow(&self, skb: u64, ts: u64, parsed: Option<SkbSeen>) -> Option<u64> {
        if skb == 0 {
            return None;
        }
        let (id, seen) = *self.by_skb.get(&skb)?;
        if ts.saturating_sub(seen) >= STALE_NS {
            return None;
        }
        let Some(at) = parsed else {
            return Some(id);
        };
        let ended = seen & 1 == 1;
        if ended {
            return None;
        }
        // A packed flow has been quiet for PACK_NS: far longer than a NAT
        // rewrite between two hooks takes, so this is a new packet.
        let Some(Slot::Live(f)) = self.flows.get(&id) else {
            return None;
        };
        let mut same_skb = f
            .hops
            .iter()
            .rev()
            .take_while(|h| ts.saturating_sub(h.ts_ns) < STALE_NS)
            .filter(|h| h.skb == skb)
            .peekable();
        if same_skb.peek().is_some_and(|h| h.dir != at.dir) {
            return None;
        }
        let passed = |h: &Hop| {
            at.hook != Hook::FibLookup
                && h.hook == at.hook
                && h.ifindex == at.ifindex
                && h.netns_inode == at.netns
        };
        (!same_skb.any(passed)).then_some(id)
    }

    /// The flow of a packet the kernel held and now answers with an ICMP
    /// error (`icmp_send`): a packet queued while its neighbour was
    /// resolved, and sent back as host-unreachable when resolution failed
    /// (ipv4_link_failure(), after seconds of ARP probes), is seen again
    /// long past [`STALE_NS`], under its tuple after DNAT, before the drop
    /// that would teach that tuple. Its skb address still names the flow
    /// while that skb's life has not ended there and the error's packet has
    /// the flow's source (DNAT keeps it): without this the error made a
    /// flow of its own, `no_reply`, that the client never sent.
    ///
    /// The same holds for a packet a tunnel device wrapped in place and the
    /// underlay then held: the outer packet of a metadata-mode VXLAN device
    /// (Cilium's cilium_vxlan) whose remote endpoint no one answers waits
    /// in the underlay's neighbour queue, and its host-unreachable and its
    /// NEIGH_FAILED drop come seconds after the inner packet's last hop,
    /// under the outer tuple (the kernel side keeps such an skb tracked:
    /// filter::still_tracked()). Without this they made a flow of their
    /// own and the followed flow stayed `forwarded` into the tunnel.
    fn held_skb_flow(&self, skb: u64, ts: u64, seen: &Tuple) -> Option<u64> {
        if skb == 0 {
            return None;
        }
        let (id, at) = *self.by_skb.get(&skb)?;
        if at & 1 == 1 || ts.saturating_sub(at) >= HELD_NS {
            return None;
        }
        // The key only: a packed flow is not unpacked for it.
        let (k, _) = self.flows.get(&id)?.tuples();
        let same_source = k.src == seen.src && k.sport == seen.sport && k.proto == seen.proto;
        (same_source || seen.is_outer_with(&k, self.tunnel_ports)).then_some(id)
    }

    /// The flow an ICMP error is about, when `id` is the error's own new
    /// flow (an ICMP flow holding only this skb's hops: its first bytes
    /// come right after its first record) and `data` quotes a packet of
    /// another, non-ICMP, flow of the table (model/icmp_error.rs). Without
    /// a conntrack entry relating it (a node without conntrack, a protocol
    /// it does not track) the error came as a flow of its own, `delivered
    /// reply_seen`, that the client never sent (issue 29: an IPIP node's
    /// protocol unreachable).
    fn icmp_error_owner(&self, id: u64, skb: u64, data: &[u8]) -> Option<u64> {
        let Some(Slot::Live(f)) = self.flows.get(&id) else {
            return None;
        };
        if !matches!(f.key.proto, 1 | 58) || f.hops.iter().any(|h| h.skb != skb) {
            return None;
        }
        let q = crate::model::icmp_error::quoted(data)?;
        let owner = self.lookup(&q).or_else(|| self.lookup(&q.reversed()))?;
        if owner == id {
            return None;
        }
        // Only where the owner saw the kernel send it (`icmp_send`): an
        // error from a node not traced is the only trace of its cause (a
        // router's fragmentation needed) and stays a flow of its own.
        let o = self.get(owner)?;
        (!matches!(o.key.proto, 1 | 58) && o.hops.iter().any(|h| h.hook == Hook::IcmpSend))
            .then_some(owner)
    }

    /// Drop ICMP error flow `id`: its owner holds the error as the hop
    /// that sent it (`icmp_send`, with its type and code). The error's
    /// later hops (its way back to the client) are left out by their skb
    /// ([`FlowTable::icmp_folded`]), not filed as the owner's replies,
    /// which would say it was answered.
    fn fold_icmp_error(&mut self, id: u64, owner: u64, skb: u64, ts: u64) {
        log::debug!("flow {id}: an ICMP error about flow {owner}, which sent it");
        self.remove(id);
        self.by_skb.remove(&skb);
        self.folded_errors.push_back((skb, ts));
        if self.folded_errors.len() > FOLDED_ERRORS_MAX {
            self.folded_errors.pop_front();
        }
    }

    /// Is `skb` an ICMP error folded into the flow it is about, seen less
    /// than [`STALE_NS`] before `ts`?
    fn icmp_folded(&self, skb: u64, ts: u64) -> bool {
        skb != 0
            && self
                .folded_errors
                .iter()
                .any(|(s, at)| *s == skb && ts.saturating_sub(*at) < STALE_NS)
    }

    /// The first bytes of a followed packet (a kind BYTES record, which
    /// comes right after the packet's own record): the DNS message in
    /// them, if it is to or from port 53, joins the flow of that skb.
    /// Returns that flow (what `--pcap` files the packet under).
    pub fn ingest_bytes(&mut self, skb: u64, ts_ns: u64, data: &[u8]) -> Option<u64> {
        let id = self.skb_flow(skb, ts_ns, None)?;
        if let Some(owner) = self.icmp_error_owner(id, skb, data) {
            self.fold_icmp_error(id, owner, skb, ts_ns);
            return Some(owner);
        }
        let m = match crate::model::dns::from_packet(data, self.dns_port) {
            None => return Some(id),
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                // Counted for the run, not kept per flow: a flood of
                // non-DNS datagrams to port 53 must not grow every flow.
                log::debug!("flow {id}: not DNS: {e}");
                self.dns_malformed += 1;
                return Some(id);
            }
        };
        if let Some(f) = self.get_mut(id) {
            f.dns.get_or_insert_with(Box::default).note(ts_ns, skb, m);
        }
        Some(id)
    }

    /// Add an event; returns the flow it went to, if any.
    pub fn ingest(&mut self, ev: &Event, names: &mut Names) -> Option<u64> {
        let id = self.ingest_event(ev, names)?;
        if self.recent.back() != Some(&id) {
            self.recent.push_back(id);
            if self.recent.len() > RECENT_FLOWS {
                self.recent.pop_front();
            }
        }
        Some(id)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one match over the event kinds, each arm building its hop"
    )]
    fn ingest_event(&mut self, ev: &Event, names: &mut Names) -> Option<u64> {
        match ev {
            Event::Packet(p) => self.ingest_packet(p, names, None),
            Event::Func(f) => {
                let (hook, data) = crate::model::funcs::hop_data(f, names);
                let mut hdr = f.hdr;
                hdr.hook = hook as u8;
                let p = PacketEvent {
                    hdr,
                    pkt: f.pkt,
                    location: f.location,
                    reason: 0,
                    mark: 0,
                    ct_orig: tracer_common::CtTuple::zeroed(),
                    ct_reply: tracer_common::CtTuple::zeroed(),
                };
                self.ingest_packet(&p, names, Some(data))
            }
            Event::Fib(f) => {
                let dir = if f.pkt.reply != 0 {
                    Dir::Reply
                } else {
                    Dir::Request
                };
                let gw = (f.gw_family != 0)
                    .then(|| ip_from(if f.gw_family == 10 { 6 } else { 4 }, &f.gw));
                let hop = Hop {
                    ts_ns: f.hdr.ts_ns,
                    hook: Hook::FibLookup,
                    netns: names.netns.name(f.hdr.netns),
                    netns_inode: f.hdr.netns,
                    dev: names.dev(&f.nh_dev),
                    ifindex: f.nh_ifindex,
                    dir,
                    tuple: Arc::new(Tuple::from_pkt(&f.pkt)),
                    skb: f.hdr.skb,
                    data: HopData::Fib(Box::new(FibData {
                        table: f.table,
                        err: f.err,
                        oif: f.oif,
                        iif: f.iif,
                        nh_dev: names.dev(&f.nh_dev),
                        nh_ifindex: f.nh_ifindex,
                        gw,
                        nh_scope: f.nh_scope,
                        rtype: f.rtype,
                    })),
                };
                let id = self
                    .skb_flow(
                        f.hdr.skb,
                        f.hdr.ts_ns,
                        Some(SkbSeen {
                            dir,
                            hook: Hook::FibLookup,
                            ifindex: f.nh_ifindex,
                            netns: f.hdr.netns,
                        }),
                    )
                    .or_else(|| self.find_fib_flow(&hop.tuple, dir, hop.netns_inode));
                if let Some(id) = id {
                    self.get_mut(id)?.push(hop);
                    Some(id)
                } else {
                    let now = hop.ts_ns;
                    self.pending_fib
                        .retain(|h| now.saturating_sub(h.ts_ns) < PENDING_NS);
                    if self.pending_fib.len() < 1024 {
                        self.pending_fib.push(hop);
                    }
                    None
                }
            }
            Event::Sock(s) => {
                // pkt: local -> remote. Server side (reply flag): the flow is
                // remote -> local.
                let t = Tuple::from_pkt(&s.pkt);
                let (key, dir) = if s.pkt.reply != 0 {
                    (t.reversed(), Dir::Reply)
                } else {
                    (t, Dir::Request)
                };
                let hop = Hop {
                    ts_ns: s.hdr.ts_ns,
                    hook: Hook::SockState,
                    netns: names.netns.name(s.hdr.netns),
                    netns_inode: s.hdr.netns,
                    dev: names.intern(""),
                    ifindex: 0,
                    dir,
                    tuple: Arc::new(key),
                    skb: 0,
                    data: HopData::Sock(Box::new(SockData {
                        old_state: TcpState::of(s.old_state),
                        new_state: TcpState::of(s.new_state),
                    })),
                };
                let id = match self.lookup(&key) {
                    Some(id) => id,
                    // A listener's state change with no remote yet is not a flow.
                    None if key.sport == 0 || key.dport == 0 => return None,
                    None => self.create(key, hop.ts_ns, hop.netns_inode),
                };
                self.get_mut(id)?.push(hop);
                Some(id)
            }
            Event::SockAddr(a) => Some(self.ingest_sock_addr(a, names)),
            Event::Neigh(n) => {
                let addr = ip_from(n.family, &n.addr);
                let lladdr = (n.has_lladdr != 0 || n.lladdr[..6].iter().any(|b| *b != 0))
                    .then(|| crate::node::link::mac_string(&n.lladdr[..6]));
                let hop = Hop {
                    ts_ns: n.hdr.ts_ns,
                    hook: Hook::from_u8(n.hdr.hook).unwrap_or(Hook::NeighUpdate),
                    netns: names.netns.name(n.hdr.netns),
                    netns_inode: n.hdr.netns,
                    dev: names.dev(&n.hdr.ifname),
                    ifindex: n.hdr.ifindex,
                    dir: Dir::Request,
                    tuple: Arc::new(Tuple {
                        src: addr,
                        sport: 0,
                        dst: addr,
                        dport: 0,
                        proto: 0,
                    }),
                    skb: 0,
                    data: HopData::Neigh(Box::new(NeighData {
                        addr,
                        state: Nud(n.old_state),
                        new_state: (Hook::from_u8(n.hdr.hook) == Some(Hook::NeighUpdate))
                            .then_some(Nud(n.new_state)),
                        lladdr,
                        err: n.err,
                        event: NeighEvent::of(Hook::from_u8(n.hdr.hook)),
                    })),
                };
                // Attach to the most recent flow heading to that address.
                let id = self
                    .flows
                    .values()
                    .filter(|s| {
                        let (k, t) = s.tuples();
                        k.dst == addr || t.is_some_and(|t| t.dst == addr)
                    })
                    .map(Slot::meta)
                    .max_by_key(|m| m.last_ns)
                    .map(|m| m.id);
                if let Some(id) = id {
                    self.get_mut(id)?.push(hop.clone());
                }
                if self.neigh_log.len() < 4096 {
                    self.neigh_log.push(hop);
                }
                id
            }
        }
    }

    /// Fold `n` passages of `hook` that the kernel counted instead of
    /// recording (tracer_common::agg) into the flow of `seen`, the packet's
    /// tuple at that hook. Returns false when no flow has that tuple (it
    /// was evicted, or its full records were lost).
    pub fn fold_counted(&mut self, seen: &Tuple, dir: Dir, hook: Hook, netns: u32, n: u64) -> bool {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let id = match (self.lookup_seen(seen, dir), hook) {
            (Some(id), _) => Some(id),
            // Route lookups may carry no ports.
            (None, Hook::FibLookup) => self.find_fib_flow(seen, dir, netns),
            (None, _) => None,
        };
        let Some(f) = id.and_then(|id| self.get_mut(id)) else {
            return false;
        };
        f.counted = f.counted.saturating_add(n);
        if is_packet_hook(hook) {
            f.packets = f.packets.saturating_add(n);
            if dir == Dir::Reply {
                f.replies = f.replies.saturating_add(n);
            }
        }
        true
    }

    /// The flow of a route lookup `t` in `netns` that no skb ties to one
    /// (an output lookup from connect()/sendmsg() runs before the skb
    /// exists), among flows already seen in that namespace: lookups made
    /// for other reasons (ARP processing, address type checks) in
    /// namespaces the flow never entered are not its own. With the whole
    /// tuple it is a lookup; a tuple with no ports or source goes to the
    /// most recently active flow it fits, among the last `RECENT_FLOWS`
    /// that got an event. A scan of every flow, per lookup, made the table
    /// quadratic: with 20 000 DNS-like flows in a second, the loop fell
    /// behind the ring buffer and lost 40% of the events.
    fn find_fib_flow(&self, t: &Tuple, dir: Dir, netns: u32) -> Option<u64> {
        if netns == 0 {
            return None;
        }
        let here = |f: &Flow| f.hops.iter().any(|h| h.netns_inode == netns);
        if t.sport != 0 && t.dport != 0 && t.proto != 0 && !t.src.is_unspecified() {
            return self
                .lookup_seen(t, dir)
                .filter(|id| self.get(*id).is_some_and(|f| here(&f)));
        }
        self.recent
            .iter()
            .rev()
            .filter(|id| {
                self.flows.get(id).is_some_and(|s| {
                    let (k, tr) = s.tuples();
                    fib_matches(&k, t, dir) || tr.is_some_and(|tr| fib_matches(&tr, t, dir))
                })
            })
            .find(|id| self.get(**id).is_some_and(|f| here(&f)))
            .copied()
    }

    /// `data`: the hop data when the caller has it (function hooks).
    #[expect(
        clippy::too_many_lines,
        reason = "the packet path of the flow lookup in its documented order (conntrack tuple, skb address, tuple, translated tuple), kept in one place"
    )]
    fn ingest_packet(
        &mut self,
        p: &PacketEvent,
        names: &mut Names,
        data: Option<HopData>,
    ) -> Option<u64> {
        let hook = Hook::from_u8(p.hdr.hook).unwrap_or(Hook::Xmit);
        // family 0: the headers were not readable at this hook (e.g. after
        // the socket layer pulled them); the skb address still ties it.
        let parsed = p.pkt.family != 0;
        let mut seen = Tuple::from_pkt(&p.pkt);
        let dir = if p.pkt.reply != 0 {
            Dir::Reply
        } else {
            Dir::Request
        };
        let ct_orig = Tuple::from_ct(&p.ct_orig);
        let ct_reply = Tuple::from_ct(&p.ct_reply);
        // Conntrack's original tuple first, then the packet's own tuple;
        // the skb address only for packets NAT rewrote without conntrack
        // (or whose headers were unreadable), and only if seen recently.
        let id = ct_orig
            .and_then(|t| self.lookup(&t))
            .or_else(|| {
                if parsed {
                    self.lookup_seen(&seen, dir)
                } else {
                    None
                }
            })
            .or_else(|| {
                let at = parsed.then_some(SkbSeen {
                    dir,
                    hook,
                    ifindex: p.hdr.ifindex,
                    netns: p.hdr.netns,
                });
                self.skb_flow(p.hdr.skb, p.hdr.ts_ns, at)
            })
            .or_else(|| {
                (matches!(hook, Hook::IcmpSend | Hook::Drop) && parsed)
                    .then(|| self.held_skb_flow(p.hdr.skb, p.hdr.ts_ns, &seen))
                    .flatten()
            });
        let id = match id {
            Some(id) => id,
            // Nothing to tie an unreadable packet to.
            None if !parsed && ct_orig.is_none() => return None,
            // The end of life of a tracked skb whose flow is gone (evicted
            // by --max-flows: the soak test saw a TCP skb freed by
            // skb_defer_free_flush() after its flow was evicted): alone it
            // would open a flow with no packet in it, judged "no reply".
            None if hook == Hook::Consume => return None,
            // An ICMP error folded into the flow it is about: its way back.
            None if self.icmp_folded(p.hdr.skb, p.hdr.ts_ns) => return None,
            // A port-less tunnel's packet of some followed flow, which one
            // its outer header cannot say.
            None if parsed && self.shared_outer.contains(&as_request(seen, dir)) => return None,
            None => {
                let key = ct_orig.unwrap_or(as_request(seen, dir));
                self.create(key, p.hdr.ts_ns, p.hdr.netns)
            }
        };
        let ended = matches!(
            hook,
            Hook::Drop | Hook::Consume | Hook::SockQueue | Hook::SockRecv
        );
        self.note_skb(p.hdr.skb, id, p.hdr.ts_ns, ended);
        let mut netns_inode = p.hdr.netns;
        if let Some(f) = self.get_mut(id) {
            let earlier = f
                .hops
                .iter()
                .rev()
                .find(|h| h.skb == p.hdr.skb && h.tuple.proto != 0);
            if !parsed {
                // Unreadable headers long after this skb address was last
                // seen: the address was freed without a tracepoint and
                // reused by another packet (e.g. a netlink message).
                match earlier {
                    Some(h) if p.hdr.ts_ns.saturating_sub(h.ts_ns) < STALE_NS => seen = *h.tuple,
                    _ => return Some(id),
                }
            }
            // Once a socket owns the skb, skb->dev no longer names a device:
            // the packet is still in the namespace it was last seen in.
            if netns_inode == 0
                && let Some(h) = earlier
            {
                netns_inode = h.netns_inode;
            }
        }
        // The reply tuple of a NATed connection, reversed, is the translated
        // request tuple.
        if let (Some(o), Some(r)) = (ct_orig, ct_reply) {
            let tr = r.reversed();
            if tr != o {
                self.alias.insert(tr, id);
                let mut new_dst = false;
                if let Some(f) = self.get_mut(id) {
                    new_dst = f
                        .translated
                        .is_none_or(|t| (t.dst, t.dport) != (tr.dst, tr.dport))
                        && (tr.dst, tr.dport) != (f.key.dst, f.key.dport);
                    f.translated = Some(tr);
                    f.nat_by = Some(NatBy::Netfilter);
                }
                self.note_dnat(new_dst.then_some(tr));
            }
        }
        let data = match (data, hook) {
            (Some(d), _) => d,
            (None, Hook::Drop) => {
                let location = names.location(p.location);
                let (reason, reason_from) = if names.no_drop_reason {
                    let c = self
                        .get_mut(id)
                        .map(|f| drop_context(f, p.hdr.skb, netns_inode))
                        .unwrap_or_default();
                    let c = inferred::Context {
                        icmp_unhooked: names.icmp_unhooked,
                        ..c
                    };
                    match inferred::infer(func_of(&location), &c) {
                        Inferred::Reason(r) => (r, ReasonFrom::Location),
                        Inferred::OneOf(_) | Inferred::Unknown => {
                            (DropReason::NotSpecified, ReasonFrom::Unknown)
                        }
                    }
                } else {
                    let r = names.drop_reason(p.reason);
                    match inferred::unreasoned(func_of(&location)) {
                        Some(n) if r == DropReason::NotSpecified => (n, ReasonFrom::Site),
                        _ => (r, ReasonFrom::Kernel),
                    }
                };
                HopData::Drop(Box::new(DropData {
                    reason,
                    reason_code: p.reason,
                    location,
                    reason_from,
                }))
            }
            (None, Hook::Consume) => HopData::Consume {
                location: names.location(p.location),
            },
            (None, Hook::IcmpSend) => {
                let (ty, code) = ((p.reason >> 8) as u8, p.reason as u8);
                HopData::IcmpSend {
                    icmp_type: ty,
                    icmp_code: code,
                    desc: names.intern(&icmp_desc(p.pkt.family == 6, ty, code)),
                }
            }
            (None, Hook::TcpReset) => HopData::TcpReset {
                reason: names.rst_reason(p.reason),
            },
            (None, Hook::SockRecv) => HopData::SockRecv,
            (None, Hook::SockQueue) => HopData::SockQueue,
            (None, _) => HopData::Packet {
                tcp_flags: p.pkt.tcp_flags,
                len: p.pkt.len,
                mark: p.mark,
            },
        };
        let tuple = match self.get_mut(id) {
            Some(f) => f.share(seen),
            None => Arc::new(seen),
        };
        let hop = Hop {
            ts_ns: p.hdr.ts_ns,
            hook,
            netns: names.netns.name(netns_inode),
            netns_inode,
            dev: names.dev(&p.hdr.ifname),
            ifindex: p.hdr.ifindex,
            dir,
            tuple,
            skb: p.hdr.skb,
            data,
        };
        let pending = !self.pending_fib.is_empty();
        let mut wrapped = None;
        let mut dnat = None;
        let mut rewritten = None;
        let tunnel_ports = self.tunnel_ports;
        if let Some(f) = self.get_mut(id) {
            if is_packet_hook(hook) {
                f.packets += 1;
                if dir == Dir::Reply {
                    f.replies += 1;
                }
            }
            // Without conntrack, a request seen with another tuple than the
            // key was translated by something else (e.g. a BPF program).
            // Not an ICMP error about it (recordings made before the
            // kernel side stopped following those by conntrack).
            // Nor the packet wrapped in a tunnel (its outer tuple: the
            // kernel side follows it into the tunnel).
            let outer = seen.is_outer_with(&f.key, tunnel_ports);
            if outer && !seen.is_outer_of(&f.key) {
                f.outer_port = seen.dport;
            }
            if outer && parsed {
                wrapped = Some(seen);
            }
            if parsed
                && dir == Dir::Request
                && seen != f.key
                && seen.proto == f.key.proto
                && !outer
                && f.translated.is_none()
            {
                f.translated = Some(seen);
                if (seen.dst, seen.dport) != (f.key.dst, f.key.dport) {
                    dnat = Some(seen);
                }
                // IPVS rewrites without conntrack too; its hooks say so.
                let ipvs = f
                    .hops
                    .iter()
                    .any(|h| matches!(&h.data, HopData::Func(d) if d.func.starts_with("ip_vs")));
                f.nat_by = Some(if ipvs { NatBy::Ipvs } else { NatBy::Bpf });
                // IPVS's backend side stays a flow of its own, as the
                // guests' recordings of it hold (ipvs_nat-6.1.rec).
                rewritten = (!ipvs).then_some(seen);
            }
            let first_here = pending && !f.hops.iter().any(|h| h.netns_inode == hop.netns_inode);
            let (ns, ts) = (hop.netns_inode, hop.ts_ns);
            f.push(hop);
            if first_here {
                self.claim_pending_fib(id, ns, ts);
            }
        }
        // A program's new tuple is the flow's from now on: the kernel side
        // follows it (tracer-ebpf filter.rs learn_rewritten), and the
        // backend's side of the path (its replies, before a program
        // translates them back) comes under it.
        if let Some(t) = rewritten {
            self.alias.insert(t, id);
        }
        if let Some(t) = wrapped {
            self.note_outer(t, dir, id);
        }
        self.note_dnat(dnat);
        Some(id)
    }

    /// A socket call's destination a cgroup program rewrote: the flow is
    /// the tuple the application asked for, translated to the packet's;
    /// that packet and its replies come to it by the alias.
    fn ingest_sock_addr(&mut self, a: &SockAddrEvent, names: &mut Names) -> u64 {
        let seen = Tuple::from_pkt(&a.pkt);
        let key = Tuple {
            dst: ip_from(a.asked_family, &a.asked),
            dport: a.asked_port,
            ..seen
        };
        let id = match self.lookup(&key) {
            Some(id) => id,
            None => self.create(key, a.hdr.ts_ns, a.hdr.netns),
        };
        self.alias.insert(seen, id);
        let hop = Hop {
            ts_ns: a.hdr.ts_ns,
            hook: Hook::SockAddr,
            netns: names.netns.name(a.hdr.netns),
            netns_inode: a.hdr.netns,
            dev: names.dev(&a.hdr.ifname),
            ifindex: a.hdr.ifindex,
            dir: Dir::Request,
            tuple: Arc::new(seen),
            skb: a.hdr.skb,
            data: HopData::SockAddr(Box::new(SockAddrData {
                call: SockCall::from_repr(a.call).unwrap_or(SockCall::Connect),
                asked: key.dst,
                asked_port: key.dport,
                pid: a.tgid,
                comm: crate::model::event::cname(&a.comm),
                cgroup_id: a.cgroup_id,
            })),
        };
        if let Some(f) = self.get_mut(id) {
            f.translated = Some(seen);
            f.nat_by = Some(NatBy::Socket);
            f.push(hop);
        }
        self.note_dnat(Some(seen));
        id
    }

    /// Keep a translation to a new destination for the taking.
    fn note_dnat(&mut self, t: Option<Tuple>) {
        if let Some(t) = t
            && self.dnat_log.len() < DNAT_LOG_MAX
        {
            self.dnat_log.push(t);
        }
    }

    /// Route lookups in namespace `netns` that were read before the flow's
    /// first packet there (ring-buffer order across CPUs is not time order,
    /// and a loaded node skews it by milliseconds) join the flow now.
    fn claim_pending_fib(&mut self, id: u64, netns: u32, ts: u64) {
        // Unpacked first; then borrowed apart from pending_fib.
        if self.get_mut(id).is_none() {
            return;
        }
        let Some(Slot::Live(f)) = self.flows.get_mut(&id) else {
            return;
        };
        let (key, tr) = (f.key, f.translated);
        let mut i = 0;
        while i < self.pending_fib.len() {
            let h = &self.pending_fib[i];
            if h.netns_inode == netns
                && h.ts_ns.abs_diff(ts) < PENDING_NS
                && (fib_matches(&key, &h.tuple, h.dir)
                    || tr.is_some_and(|t| fib_matches(&t, &h.tuple, h.dir)))
            {
                f.push(self.pending_fib.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }
}

/// Is fib lookup tuple `t` (ports/source possibly 0) a lookup for `key`?
fn fib_matches(key: &Tuple, t: &Tuple, dir: Dir) -> bool {
    let k = match dir {
        Dir::Request => *key,
        Dir::Reply => key.reversed(),
    };
    k.dst == t.dst
        && (t.proto == 0 || t.proto == k.proto)
        && (t.dport == 0 || t.dport == k.dport)
        && (t.sport == 0 || t.sport == k.sport)
        && (t.src.is_unspecified() || t.src == k.src)
}

/// What the packet's own hops in the namespace where it is dropped say
/// about the drop site, for a kernel that gives no drop reason
/// ([`inferred`]): the ICMP error or TCP reset the kernel sent for that
/// skb, the errno of its input route lookup, whether it came in there,
/// and whether other packets of the flow were queued to a socket there.
fn drop_context(f: &Flow, skb: u64, netns: u32) -> inferred::Context {
    let mut c = inferred::Context::default();
    for h in f.hops.iter().filter(|h| h.netns_inode == netns) {
        // Any skb: a queued packet's address may be reused by the next.
        c.queued_before |= h.hook == Hook::SockQueue;
        if h.skb != skb {
            continue;
        }
        match &h.data {
            HopData::IcmpSend {
                icmp_type,
                icmp_code,
                ..
            } if !h.tuple.dst.is_ipv6() => c.icmp = Some((*icmp_type, *icmp_code)),
            HopData::TcpReset { .. } => c.tcp_reset = true,
            HopData::Func(d) if d.func.as_str() == "ip_route_input_noref" && d.ret.is_some() => {
                c.route_input_err = d.ret;
            }
            _ => {}
        }
        c.ingress |= h.is_ingress();
    }
    c
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::event::tests::{header, v4};
    use tracer_common::{CtTuple, FibEvent, PacketInfo, kind};

    /// A packet record at `hook` (shared with counted.rs's tests).
    pub(crate) fn pkt(hook: Hook, skb: u64, ts: u64, p: PacketInfo) -> Event {
        let mut hdr = header(kind::PACKET, hook);
        hdr.skb = skb;
        hdr.ts_ns = ts;
        Event::Packet(PacketEvent {
            hdr,
            pkt: p,
            location: 0,
            reason: 0,
            mark: 0,
            ct_orig: CtTuple::zeroed(),
            ct_reply: CtTuple::zeroed(),
        })
    }

    /// A main-table lookup record: `err` and input interface given, no
    /// nexthop.
    fn fib_event(p: PacketInfo, err: i32, iif: u32) -> FibEvent {
        FibEvent {
            hdr: header(kind::FIB, Hook::FibLookup),
            pkt: p,
            table: 254,
            err,
            oif: 0,
            iif,
            nh_ifindex: 0,
            gw_family: 0,
            nh_scope: 0,
            rtype: 0,
            _pad: 0,
            gw: [0; 16],
            nh_dev: [0; 16],
        }
    }

    #[test]
    fn request_and_reply_share_a_flow() {
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        let req = v4([10, 0, 0, 1], 40000, [10, 0, 0, 2], 80, 6);
        let mut rep = v4([10, 0, 0, 2], 80, [10, 0, 0, 1], 40000, 6);
        rep.reply = 1;
        let a = t.ingest(&pkt(Hook::Xmit, 1, 10, req), &mut n).unwrap();
        let b = t
            .ingest(&pkt(Hook::NetifReceive, 2, 20, rep), &mut n)
            .unwrap();
        assert_eq!(a, b);
        let f = t.get(a).unwrap();
        assert_eq!((f.packets, f.replies, f.hops.len()), (2, 1, 2));
        assert_eq!(f.key.dport, 80);
    }

    /// An IPIP packet dropped by a node without the ipip module, which
    /// answers protocol unreachable (projectcalico/calico#3507), with no
    /// conntrack to relate the error: the error is not a flow of its own
    /// once its bytes quote the flow's packet, and the rest of its way is
    /// left out. Near misses: an error whose cause no traced hook saw
    /// sent (no `icmp_send` on the flow) and an echo reply stay flows.
    #[test]
    fn an_icmp_error_about_a_flow_that_sent_it_is_not_a_flow() {
        use crate::model::icmp_error::tests::v4_error;
        let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let error = v4_error(3, b, a, 4, (a, 0), (b, 0));
        let icmp_back = |ty: u8| {
            let mut p = v4(b, 0, a, 0, 1);
            p.reply = 1;
            p.icmp_type = ty;
            p
        };
        for sent_by_kernel in [true, false] {
            let mut t = FlowTable::new(10);
            let mut n = Names::default();
            let ipip = v4(a, 0, b, 0, 4);
            let f = t.ingest(&pkt(Hook::Xmit, 1, 10, ipip), &mut n).unwrap();
            if sent_by_kernel {
                let mut ev = pkt(Hook::IcmpSend, 1, 15, ipip);
                if let Event::Packet(p) = &mut ev {
                    p.reason = (3 << 8) | 2;
                }
                assert_eq!(t.ingest(&ev, &mut n), Some(f));
            }
            let e = t
                .ingest(&pkt(Hook::Xmit, 2, 20, icmp_back(3)), &mut n)
                .unwrap();
            assert_ne!(e, f);
            let filed = t.ingest_bytes(2, 21, &error);
            let later = t.ingest(&pkt(Hook::NetifReceive, 2, 30, icmp_back(3)), &mut n);
            if sent_by_kernel {
                assert_eq!(filed, Some(f));
                assert_eq!(later, None);
                assert_eq!(t.len(), 1);
                let flow = t.get(f).unwrap();
                assert_eq!((flow.packets, flow.replies, flow.hops.len()), (1, 0, 2));
            } else {
                assert_eq!((filed, later), (Some(e), Some(e)));
                assert_eq!(t.len(), 2);
            }
        }
        // An echo reply quotes nothing.
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        t.ingest(&pkt(Hook::Xmit, 1, 10, v4(a, 0, b, 0, 4)), &mut n);
        let e = t
            .ingest(&pkt(Hook::Xmit, 2, 20, icmp_back(0)), &mut n)
            .unwrap();
        let mut echo = error.clone();
        echo[20] = 0;
        assert_eq!(t.ingest_bytes(2, 21, &echo), Some(e));
    }

    /// A connection carried by a VXLAN tunnel: its first wrapped packet
    /// joins it by skb address, later ones (past STALE_NS, on other skbs)
    /// by their outer tuple, each way; and a packet held in the underlay's
    /// neighbour queue joins it by skb address seconds later
    /// (held_skb_flow). Near misses: IPIP's outer tuple (one per node
    /// pair, shared by every flow between them) is no alias (an untied
    /// packet under it joins no flow and opens none), and a held
    /// packet under a tuple neither the flow's source nor an outer one
    /// opens a flow of its own.
    #[test]
    fn a_flows_outer_packets_stay_its_own() {
        let (p1, p2) = ([10, 0, 1, 2], [10, 0, 2, 2]);
        let (n1, n2) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        // The underlay's device (the inner packets' is the tunnel's).
        let under = |hook: Hook, skb: u64, ts: u64, p: PacketInfo| {
            let mut e = pkt(hook, skb, ts, p);
            if let Event::Packet(p) = &mut e {
                p.hdr.ifindex += 100;
            }
            e
        };
        let req = v4(p1, 40000, p2, 80, 6);
        let f = t.ingest(&pkt(Hook::Xmit, 1, 10, req), &mut n).unwrap();
        let outer = v4(n1, 53294, n2, 8472, 17);
        assert_eq!(t.ingest(&under(Hook::Xmit, 1, 20, outer), &mut n), Some(f));
        let later = 10 * STALE_NS;
        assert_eq!(
            t.ingest(&under(Hook::Xmit, 7, later, outer), &mut n),
            Some(f)
        );
        // The reply's way: wrapped by the far node, its own source port.
        let mut back = v4(p2, 80, p1, 40000, 6);
        back.reply = 1;
        assert_eq!(
            t.ingest(&pkt(Hook::Xmit, 2, later + 10, back), &mut n),
            Some(f)
        );
        let mut back_outer = v4(n2, 37569, n1, 8472, 17);
        back_outer.reply = 1;
        assert_eq!(
            t.ingest(&under(Hook::Xmit, 2, later + 20, back_outer), &mut n),
            Some(f)
        );
        assert_eq!(
            t.ingest(&under(Hook::NetifReceive, 9, 2 * later, back_outer), &mut n),
            Some(f)
        );
        assert_eq!(t.len(), 1);
        // Held in a neighbour queue: the drop seconds later, by skb.
        let q = t.ingest(&pkt(Hook::Xmit, 3, 3 * later, req), &mut n);
        assert_eq!(q, Some(f));
        let held = v4(n1, 41000, n2, 8472, 17);
        let drop_at = 3 * later + 2 * STALE_NS;
        assert_eq!(
            t.ingest(&under(Hook::Drop, 3, drop_at, held), &mut n),
            Some(f)
        );
        // Near miss: IPIP's outer tuple is no alias.
        let ipip = v4(n1, 0, n2, 0, 4);
        assert_eq!(
            t.ingest(&pkt(Hook::Xmit, 4, 4 * later, req), &mut n),
            Some(f)
        );
        assert_eq!(
            t.ingest(&under(Hook::Xmit, 4, 4 * later + 10, ipip), &mut n),
            Some(f)
        );
        assert_eq!(
            t.ingest(&under(Hook::Xmit, 11, 5 * later, ipip), &mut n),
            None
        );
        assert_eq!(t.len(), 1);
        // Near miss: a held packet of another tuple is not the flow's.
        assert_eq!(
            t.ingest(&pkt(Hook::Xmit, 5, 6 * later, req), &mut n),
            Some(f)
        );
        let stranger = v4([10, 9, 9, 9], 1234, n2, 53, 17);
        let g = t.ingest(
            &under(Hook::Drop, 5, 6 * later + 2 * STALE_NS, stranger),
            &mut n,
        );
        assert!(g.is_some_and(|g| g != f));
    }

    #[test]
    fn a_lone_consume_opens_no_flow() {
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        let req = v4([10, 0, 0, 1], 40000, [10, 0, 0, 2], 80, 6);
        assert_eq!(t.ingest(&pkt(Hook::Consume, 1, 10, req), &mut n), None);
        assert!(t.flows().is_empty());
        // Once the flow exists, its skb's end of life joins it.
        let a = t.ingest(&pkt(Hook::TcEgress, 1, 20, req), &mut n).unwrap();
        assert_eq!(t.ingest(&pkt(Hook::Consume, 1, 30, req), &mut n), Some(a));
        assert_eq!(t.get(a).unwrap().hops.len(), 2);
    }

    #[test]
    fn nat_follows_the_skb_and_conntrack() {
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        let orig = v4([10, 0, 0, 1], 40000, [10, 43, 0, 1], 443, 6);
        let a = t.ingest(&pkt(Hook::Xmit, 7, 10, orig), &mut n).unwrap();
        // same skb after DNAT to 192.168.1.10:6443
        let dnat = v4([10, 0, 0, 1], 40000, [192, 168, 1, 10], 6443, 6);
        let mut ev = pkt(Hook::Xmit, 7, 20, dnat);
        if let Event::Packet(p) = &mut ev {
            p.ct_orig = CtTuple {
                saddr: orig.saddr,
                daddr: orig.daddr,
                sport: 40000,
                dport: 443,
                proto: 6,
                family: 4,
                _pad: [0; 2],
            };
            p.ct_reply = CtTuple {
                saddr: dnat.daddr,
                daddr: dnat.saddr,
                sport: 6443,
                dport: 40000,
                proto: 6,
                family: 4,
                _pad: [0; 2],
            };
        }
        let b = t.ingest(&ev, &mut n).unwrap();
        assert_eq!(a, b);
        let f = t.get(a).unwrap();
        assert_eq!(f.translated.unwrap().dport, 6443);
        assert_eq!(f.nat_at(), Some(1));
        // A reply from the backend, on another skb, finds the flow through the alias.
        let mut rep = v4([192, 168, 1, 10], 6443, [10, 0, 0, 1], 40000, 6);
        rep.reply = 1;
        assert_eq!(
            t.ingest(&pkt(Hook::NetifReceive, 9, 30, rep), &mut n),
            Some(a)
        );
    }

    /// A UDP skb queued to a socket is freed when the application reads
    /// it, not always with a tracepoint, and the slab gives its address to
    /// the next datagram (the 100k-flow bench saw
    /// 20 000 DNS-like flows fold into 2 622 "bpf NAT" flows). After the
    /// end of an skb, a packet at its address with its own headers is a
    /// new flow; without readable headers it still joins the old one.
    /// Before the end, a rewritten tuple on the same skb is NAT.
    #[test]
    fn a_reused_skb_address_is_a_new_flow_not_nat() {
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        let a_t = v4([10, 0, 0, 1], 1025, [10, 0, 0, 2], 53, 17);
        let b_t = v4([10, 0, 0, 1], 1058, [10, 0, 0, 2], 53, 17);
        let a = t.ingest(&pkt(Hook::TcEgress, 7, 10, a_t), &mut n).unwrap();
        assert_eq!(t.ingest(&pkt(Hook::SockQueue, 7, 20, a_t), &mut n), Some(a));
        assert_eq!(
            t.ingest(&pkt(Hook::SockRecv, 7, 22, PacketInfo::zeroed()), &mut n),
            Some(a)
        );
        let b = t.ingest(&pkt(Hook::TcEgress, 7, 30, b_t), &mut n).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.get(a).unwrap().translated, None);
        assert_eq!(t.get(b).unwrap().key.sport, 1058);
        // The same after a drop, and for a route lookup of the new packet.
        let c_t = v4([10, 0, 0, 1], 1100, [10, 0, 0, 2], 53, 17);
        assert_eq!(t.ingest(&pkt(Hook::Drop, 7, 40, b_t), &mut n), Some(b));
        let mut f = fib_event(c_t, 0, 2);
        f.hdr.skb = 7;
        f.hdr.ts_ns = 50;
        assert_eq!(t.ingest(&Event::Fib(f), &mut n), None);
        assert_eq!(t.get(b).unwrap().hops.len(), 2);
        // Rewritten on a live skb (a BPF DNAT between two hooks): NAT.
        let d_t = v4([10, 0, 0, 1], 1200, [10, 96, 0, 10], 53, 17);
        let dnat = v4([10, 0, 0, 1], 1200, [10, 0, 0, 2], 53, 17);
        let d = t.ingest(&pkt(Hook::TcEgress, 9, 60, d_t), &mut n).unwrap();
        assert_eq!(
            t.ingest(&pkt(Hook::TcIngress, 9, 70, dnat), &mut n),
            Some(d)
        );
        assert_eq!(t.get(d).unwrap().nat_by, Some(NatBy::Bpf));
        // No end seen (sk_data_ready's hop can be missing): a packet at the
        // same hook and device again, or going the other way, is new.
        let e_t = v4([10, 0, 0, 1], 1300, [10, 0, 0, 2], 53, 17);
        let f_t = v4([10, 0, 0, 1], 1301, [10, 0, 0, 2], 53, 17);
        let e = t
            .ingest(&pkt(Hook::TcEgress, 11, 100, e_t), &mut n)
            .unwrap();
        let f = t
            .ingest(&pkt(Hook::TcEgress, 11, 110, f_t), &mut n)
            .unwrap();
        assert_ne!(e, f);
        let mut g_t = v4([10, 0, 0, 2], 53, [10, 0, 0, 1], 1400, 17);
        g_t.reply = 1;
        let g = t
            .ingest(&pkt(Hook::TcIngress, 11, 120, g_t), &mut n)
            .unwrap();
        assert_ne!(g, f);
        assert_eq!(t.get(g).unwrap().key.sport, 1400);
        assert!(
            [e, f]
                .iter()
                .all(|id| t.get(*id).unwrap().translated.is_none())
        );
    }

    /// Quiet flows are packed; an event for one unpacks it and joins it,
    /// readers see it whole, the cap evicts it like any other, and the
    /// final report gets every flow unpacked, in order.
    #[test]
    fn quiet_flows_are_packed_and_come_back() {
        let mut t = FlowTable::new(3);
        let mut n = Names::default();
        let a_t = v4([10, 0, 0, 1], 1025, [10, 0, 0, 2], 53, 17);
        let b_t = v4([10, 0, 0, 1], 1026, [10, 0, 0, 2], 53, 17);
        let a = t.ingest(&pkt(Hook::TcEgress, 7, 10, a_t), &mut n).unwrap();
        t.ingest(&pkt(Hook::TcIngress, 7, 20, a_t), &mut n);
        let ms = 1_000_000;
        let b = t
            .ingest(&pkt(Hook::TcEgress, 8, 50 * ms, b_t), &mut n)
            .unwrap();
        // Only a has been quiet for PACK_NS.
        t.pack_quiet(20 + PACK_NS);
        assert_eq!(t.packed_size().0, 1);
        assert!(matches!(t.flows.get(&a), Some(Slot::Packed(_))));
        assert!(matches!(t.flows.get(&b), Some(Slot::Live(_))));
        assert_eq!(t.get(a).unwrap().hops.len(), 2);
        t.set_printed(a, 99);
        assert_eq!(t.metas().find(|m| m.id == a).unwrap().printed, 99);
        // b's turn comes later; a's reply finds a through its key.
        t.pack_quiet(50 * ms + PACK_NS);
        assert_eq!(t.packed_size().0, 2);
        let mut rep = v4([10, 0, 0, 2], 53, [10, 0, 0, 1], 1025, 17);
        rep.reply = 1;
        assert_eq!(
            t.ingest(&pkt(Hook::TcEgress, 9, 300 * ms, rep), &mut n),
            Some(a)
        );
        assert_eq!(t.packed_size().0, 1);
        let fa = t.get(a).unwrap();
        assert_eq!((fa.hops.len(), fa.replies, fa.printed), (3, 1, 99));
        drop(fa);
        // A new flow at the cap evicts the quietest: packed b.
        let c_t = v4([10, 0, 0, 1], 1027, [10, 0, 0, 2], 53, 17);
        let d_t = v4([10, 0, 0, 1], 1028, [10, 0, 0, 2], 53, 17);
        let c = t
            .ingest(&pkt(Hook::TcEgress, 10, 301 * ms, c_t), &mut n)
            .unwrap();
        let d = t
            .ingest(&pkt(Hook::TcEgress, 11, 302 * ms, d_t), &mut n)
            .unwrap();
        assert_eq!((t.len(), t.evicted, t.packed_size()), (3, 1, (0, 0)));
        assert_eq!(t.lookup(&Tuple::from_pkt(&b_t)), None);
        t.pack_quiet(u64::MAX);
        let ids: Vec<(u64, usize)> = t.into_flows().map(|f| (f.id, f.hops.len())).collect();
        assert_eq!(ids, [(a, 3), (c, 1), (d, 1)]);
    }

    #[test]
    fn fib_before_first_packet_is_claimed() {
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        let mut f = fib_event(v4([0, 0, 0, 0], 0, [10, 43, 0, 1], 443, 6), 0, 0);
        f.nh_ifindex = 3;
        f.gw_family = 2;
        f.nh_dev = *b"glob\0\0\0\0\0\0\0\0\0\0\0\0";
        f.hdr.skb = 0;
        f.hdr.ts_ns = 5;
        assert_eq!(t.ingest(&Event::Fib(f), &mut n), None);
        let id = t
            .ingest(
                &pkt(
                    Hook::Xmit,
                    3,
                    10,
                    v4([10, 0, 0, 1], 40000, [10, 43, 0, 1], 443, 6),
                ),
                &mut n,
            )
            .unwrap();
        let flow = t.get(id).unwrap();
        assert_eq!(flow.hops[0].hook, Hook::FibLookup);
        assert_eq!(flow.hops[0].dev, "glob");
    }

    /// A router's failed lookup read before the router's first packet of the
    /// flow (another CPU's ring-buffer record came first) still joins it.
    #[test]
    fn fib_read_before_the_flow_reaches_its_namespace_is_claimed() {
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        let req = v4([10, 0, 0, 1], 40000, [10, 43, 0, 1], 443, 6);
        let id = t.ingest(&pkt(Hook::Xmit, 3, 10, req), &mut n).unwrap();
        let mut f = fib_event(req, -101, 2);
        f.hdr.skb = 0;
        f.hdr.ts_ns = 30;
        f.hdr.netns = 4026530000;
        // No hop of the flow in the router's namespace yet: parked.
        assert_eq!(t.ingest(&Event::Fib(f), &mut n), None);
        assert_eq!(t.get(id).unwrap().hops.len(), 1);
        let mut rx = pkt(Hook::NetifReceive, 3, 20, req);
        if let Event::Packet(p) = &mut rx {
            p.hdr.netns = 4026530000;
        }
        assert_eq!(t.ingest(&rx, &mut n), Some(id));
        let flow = t.get(id).unwrap();
        let hooks: Vec<Hook> = flow.hops.iter().map(|h| h.hook).collect();
        assert_eq!(hooks, [Hook::Xmit, Hook::NetifReceive, Hook::FibLookup]);
        // A lookup in a namespace the flow never enters stays parked.
        f.hdr.netns = 4026539999;
        f.hdr.ts_ns = 40;
        assert_eq!(t.ingest(&Event::Fib(f), &mut n), None);
        assert_eq!(t.get(id).unwrap().hops.len(), 3);
    }
    /// Two tuples whose hashes collide: the second goes to the spill map
    /// and both still find their own flow.
    #[test]
    fn tuple_hash_collision_spills() {
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        let t1 = v4([10, 0, 0, 1], 40000, [10, 43, 0, 1], 443, 6);
        let t2 = v4([10, 0, 0, 1], 40001, [10, 43, 0, 1], 443, 6);
        let a = t.ingest(&pkt(Hook::Xmit, 1, 10, t1), &mut n).unwrap();
        // Make t2's hash slot look taken by flow `a`.
        let h2 = t.key_hash(&Tuple::from_pkt(&t2));
        t.by_key.insert(h2, a);
        let b = t.ingest(&pkt(Hook::Xmit, 2, 20, t2), &mut n).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.by_key_spill.len(), 1);
        assert_eq!(t.ingest(&pkt(Hook::Xmit, 3, 30, t1), &mut n), Some(a));
        assert_eq!(t.ingest(&pkt(Hook::Xmit, 4, 40, t2), &mut n), Some(b));
        t.remove(b);
        assert!(t.by_key_spill.is_empty());
        assert_eq!(t.lookup(&Tuple::from_pkt(&t1)), Some(a));
    }

    #[test]
    fn flows_stay_small() {
        // With 4 hops, 100k flows must fit the 64 MiB budget (issue 5);
        // 8 of these bytes are the DNS log's box (0.8 MB at 100k flows).
        assert!(
            std::mem::size_of::<Flow>() <= 176,
            "{}",
            std::mem::size_of::<Flow>()
        );
    }

    #[test]
    fn hops_of_a_flow_share_their_tuple() {
        let mut t = FlowTable::new(10);
        let mut n = Names::default();
        let req = v4([10, 0, 0, 1], 40000, [10, 0, 0, 2], 80, 6);
        let id = t.ingest(&pkt(Hook::Xmit, 1, 10, req), &mut n).unwrap();
        t.ingest(&pkt(Hook::NetifReceive, 1, 20, req), &mut n);
        let f = t.get(id).unwrap();
        assert!(Arc::ptr_eq(&f.hops[0].tuple, &f.hops[1].tuple));
    }

    #[test]
    fn cap_evicts_oldest() {
        let mut t = FlowTable::new(2);
        let mut n = Names::default();
        for i in 0..3u16 {
            t.ingest(
                &pkt(
                    Hook::Xmit,
                    i as u64 + 1,
                    i as u64,
                    v4([10, 0, 0, 1], 1000 + i, [10, 0, 0, 2], 80, 6),
                ),
                &mut n,
            );
        }
        assert_eq!((t.len(), t.evicted), (2, 1));
        assert!(t.flows().iter().all(|f| f.key.sport != 1000));
    }

    /// At the cap, each new flow evicts the one quiet the longest, flows
    /// that had an event since the candidates were taken excepted.
    #[test]
    fn eviction_takes_the_quietest_flow_each_time() {
        let mut t = FlowTable::new(32);
        let mut n = Names::default();
        let flow = |i: u16| v4([10, 0, 0, 1], 1000 + i, [10, 0, 0, 2], 80, 6);
        for i in 0..32u16 {
            t.ingest(
                &pkt(Hook::Xmit, i as u64 + 1, i as u64 * 10, flow(i)),
                &mut n,
            );
        }
        // The first new flow takes the candidates (the quietest 2 of 32);
        // then flows 1-4 see traffic again.
        t.ingest(&pkt(Hook::Xmit, 100, 500, flow(100)), &mut n);
        for i in 1..5u16 {
            t.ingest(
                &pkt(Hook::Xmit, i as u64 + 1, 1000 + i as u64, flow(i)),
                &mut n,
            );
        }
        for j in 0..10u16 {
            t.ingest(
                &pkt(Hook::Xmit, 200 + j as u64, 2000 + j as u64, flow(200 + j)),
                &mut n,
            );
        }
        assert_eq!((t.len(), t.evicted), (32, 11));
        let kept: std::collections::BTreeSet<u16> =
            t.flows().iter().map(|f| f.key.sport - 1000).collect();
        // Gone: 0 (the quietest), then 5-14; 1-4 stay for their new events.
        let want: std::collections::BTreeSet<u16> =
            (1..5).chain(15..32).chain([100]).chain(200..210).collect();
        assert_eq!(kept, want);
    }
}
