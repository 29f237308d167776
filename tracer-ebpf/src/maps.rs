//! Maps shared by all programs.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, LruPerCpuHashMap, PerCpuArray, RingBuf},
};
use tracer_common::{
    AGG_HOT_SLOTS, AGG_MAX, AggHot, AggKey, AggVal, BytesHeader, CtTuple, FLOW_KEYS_MAX,
    PacketInfo, RING_BYTES, SNAP_MAX, TRACKED_SKBS_MAX, TrackInfo, stat,
};

/// Events for userspace.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// sk_buff addresses being followed -> direction (1 request, 2 reply) and
/// the ports seen when it matched.
/// Once a packet matched, it is followed by its address so that NAT cannot
/// lose it. Entries are removed when the skb is freed (kfree_skb/consume_skb).
#[map]
pub static TRACKED: LruHashMap<u64, TrackInfo> = LruHashMap::with_max_entries(TRACKED_SKBS_MAX, 0);

/// Extra tuples to follow (learnt from conntrack when NAT rewrites a followed
/// flow, or inserted by userspace) -> direction flag.
#[map]
pub static FLOW_KEYS: HashMap<CtTuple, u8> = HashMap::with_max_entries(FLOW_KEYS_MAX, 0);

/// Slot 0 is 1 once `FLOW_KEYS` holds a tuple: until then (no NAT seen on
/// a followed flow, the common case), packets skip that map's 40-byte-key
/// hash lookup. An array lookup is inlined by the verifier (array_map_gen_lookup()).
#[map]
pub static FLOW_KEYS_USED: Array<u32> = Array::with_max_entries(1, 0);

/// Slot 0: bpf_jiffies64() of the last insert into `TRACKED` (0: never);
/// see filter::tracked_within().
#[map]
pub static TRACKED_AT: Array<u64> = Array::with_max_entries(1, 0);

/// Slot 0: live entries of `TRACKED` (filter::live()).
#[map]
pub static TRACKED_LIVE: Array<u64> = Array::with_max_entries(1, 0);

/// Counted packets of followed flows and the budget of full records per
/// key (agg.rs, tracer_common::agg). Per CPU: no atomics, no lock.
#[map]
pub static AGG: LruPerCpuHashMap<AggKey, AggVal> = LruPerCpuHashMap::with_max_entries(AGG_MAX, 0);

/// The key last counted per hook, per CPU (tracer_common::AggHot).
#[map]
pub static AGG_HOT: PerCpuArray<AggHot> = PerCpuArray::with_max_entries(AGG_HOT_SLOTS, 0);

/// Working copies of the packet and its aggregation key for the busiest
/// programs (tc, the skb tracepoints), one slot per hook and CPU (a program
/// can be interrupted by another hook's, never by its own). In map memory
/// rather than on the stack, the verifier does not track their bytes: on
/// Debian's 6.1 the header-parse branches (IPv4/IPv6, TCP/UDP/ICMP, direct
/// or helper reads) otherwise stayed apart through the rest of the program,
/// and tc_ingress took 80 s to verify under qemu.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Scratch {
    pub pkt: PacketInfo,
    pub key: AggKey,
    /// Conntrack tuples and the original-direction packet: zeroed where
    /// used (followed packets, conntrack lookups), not for every packet.
    pub ct: CtScratch,
    /// What the record half of an skb program takes from its decision
    /// half ([`Handoff`]), stored and loaded again here.
    pub handoff: Handoff,
}

/// The decision half's results, handed to the record half of an skb
/// program (emit::skb_event, tc::try_tc) through map memory. The verifier
/// does not track map bytes: a value loaded again is an unknown scalar on
/// every path, so the paths that reached the record (matched as request or
/// reply, tracked or not, counted or not, device from the argument or
/// from the skb) meet in one state there and the record half is verified
/// once, not once per combination (tc_egress on 6.18: 128k instructions
/// verified, 32k of them the decision).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Handoff {
    pub dev: u64,
    /// [`Handoff::REPLY`], [`Handoff::TRACK`], [`Handoff::BUDGETED`].
    pub flags: u64,
}

impl Handoff {
    pub const REPLY: u64 = 1;
    pub const TRACK: u64 = 2;
    pub const BUDGETED: u64 = 4;

    /// Store `dev` and `flags` and load them back (volatile: LLVM keeps
    /// neither the registers nor a folded copy of them).
    #[inline(always)]
    pub fn pass(&mut self, dev: u64, flags: u64) -> (u64, u64) {
        let (d, f) = (&raw mut self.dev, &raw mut self.flags);
        // SAFETY: two u64 fields of this CPU's scratch slot.
        unsafe {
            d.write_volatile(dev);
            f.write_volatile(flags);
            (d.read_volatile(), f.read_volatile())
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CtScratch {
    pub orig: CtTuple,
    pub reply: CtTuple,
    pub o: PacketInfo,
}

#[map]
pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(AGG_HOT_SLOTS, 0);

/// This CPU's scratch slot for `hook`, its packet and key zeroed.
#[inline(always)]
pub fn scratch(hook: tracer_common::Hook) -> Option<&'static mut Scratch> {
    scratch_at(hook as u32)
}

/// The slot no hook has (hooks count from 1): the IPv6 route lookup's,
/// which shares the IPv4 lookup's Hook but may interrupt its program.
pub const FIB6_SLOT: u32 = 0;

/// This CPU's scratch slot `idx`, its packet and key zeroed.
#[inline(always)]
pub fn scratch_at(idx: u32) -> Option<&'static mut Scratch> {
    let p = SCRATCH.get_ptr_mut(idx)?;
    // SAFETY: this CPU's slot; zeroes are valid (see zero.rs).
    unsafe {
        crate::zero::zero_in_place(&raw mut (*p).pkt);
        crate::zero::zero_in_place(&raw mut (*p).key);
        Some(&mut *p)
    }
}

/// Network namespace inodes to follow when `FILTER.netns_filter` is set.
#[map]
pub static NETNS: HashMap<u32, u8> = HashMap::with_max_entries(1024, 0);

/// What to leave out while tracer is over its CPU budget
/// (`tracer_common::shed` bits), written by userspace at run time.
#[map]
pub static SHED: Array<u32> = Array::with_max_entries(1, 0);

/// The `SHED` bits now (0 when unreadable): a lookup, read only on the
/// followed path.
#[inline(always)]
pub fn shed() -> u32 {
    SHED.get(0).copied().unwrap_or(0)
}

/// Per-CPU counters, indexed by `tracer_common::stat`.
#[map]
pub static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Per-CPU "last followed skb" context: lets hooks without an skb (the fib
/// lookup tracepoint) borrow the netns/skb of the packet being processed on
/// this CPU, since fib_table_lookup() runs synchronously inside the
/// receive/transmit path of that skb.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LastCtx {
    pub skb: u64,
    pub ts_ns: u64,
    pub netns: u32,
    pub ifindex: u32,
    pub sport: u16,
    pub dport: u16,
    pub dir: u8,
    /// The hook (tracer_common::Hook) that saw it: xdp.rs takes only a
    /// netif_receive_skb's, the one that fires right before generic XDP.
    pub hook: u8,
    pub _pad: [u8; 2],
}

#[map]
pub static LAST: PerCpuArray<LastCtx> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
pub fn bump(idx: u32) {
    if let Some(p) = STATS.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += 1 };
    }
}

/// Function calls parked between entry and return (func.rs), by task and
/// function. LRU: a return that never comes (a probe attached mid-call)
/// cannot fill it.
#[map]
pub static CALLS: LruHashMap<u64, tracer_common::FuncEvent> = LruHashMap::with_max_entries(4096, 0);

/// A function record being built at entry (func::enter), one slot per
/// function and CPU: a program is not interrupted by its own (see BYTES).
/// In map memory for the reason of `SCRATCH`: built on the stack, its
/// zeroed bytes, string reads and parse branches kept states apart, and
/// Debian's 6.1 processed 177,000 instructions per function hook (696,000
/// for nft_do_chain).
#[map]
pub static FUNC_SCRATCH: PerCpuArray<tracer_common::FuncEvent> =
    PerCpuArray::with_max_entries(tracer_common::func::COUNT as u32, 0);

/// A kind BYTES record being built (emit::packet_bytes): its header and
/// the packet's bytes, in map memory (1.6 kB is more than the BPF stack).
/// One slot per hook and CPU, as `SCRATCH`: a program can be interrupted
/// by another hook's, never by its own (the kernel skips a program that
/// would recurse: bpf_prog_active / prog->active).
#[repr(C)]
pub struct BytesRecord {
    pub hdr: BytesHeader,
    pub data: [u8; SNAP_MAX],
}

#[map]
pub static BYTES: PerCpuArray<BytesRecord> = PerCpuArray::with_max_entries(AGG_HOT_SLOTS, 0);

/// A socket call to the target, parked under its struct sock until the
/// socket's first packet tells whether a cgroup program rewrote it
/// (sockaddr.rs). Field order keeps `comm` and `asked` 8-aligned.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Parked {
    /// bpf_jiffies64() of the call.
    pub at: u64,
    pub cgroup_id: u64,
    pub comm: [u8; 16],
    /// Network order, as the u32 words of a PacketInfo address.
    pub asked: [u32; 4],
    pub tgid: u32,
    /// Host order.
    pub port: u16,
    pub family: u8,
    /// tracer_common::sockcall.
    pub call: u8,
}

/// struct sock address -> the call parked on it. LRU: calls whose socket
/// never sends (a UDP connect() to pick a source address) age out.
#[map]
pub static PARKED: LruHashMap<u64, Parked> = LruHashMap::with_max_entries(4096, 0);

/// Slot 0: bpf_jiffies64() of the last park (0: never); sockaddr.rs
/// parked_lately().
#[map]
pub static PARKED_AT: Array<u64> = Array::with_max_entries(1, 0);
