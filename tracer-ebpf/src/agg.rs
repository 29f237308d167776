//! Counting a followed flow's steady-state packets instead of recording
//! them (tracer_common::agg): the per-packet cost of following drops from
//! a ring-buffer record per hook (reservation, device, netns, conntrack and
//! mark reads, tracked-skb insert, ~5 records per packet) to one per-CPU
//! hash lookup and an increment.

use aya_ebpf::helpers::bpf_jiffies64;
use tracer_common::{AGG_BUDGET, AGG_REFRESH_JIFFIES, AggKey, AggVal, Hook, PacketInfo, stat};

use crate::{
    kread::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP},
    maps::{AGG, AGG_HOT, LAST},
};

/// TCP FIN, SYN, RST: packets that change a connection's story.
const TCP_STORY_FLAGS: u8 = 0x01 | 0x02 | 0x04;

/// May this packet be counted instead of recorded? Not when it is an ICMP
/// message, a TCP SYN/FIN/RST, or unparsed.
#[inline(always)]
pub fn countable(pkt: &PacketInfo) -> bool {
    pkt.family != 0
        && pkt.proto != IPPROTO_ICMP
        && pkt.proto != IPPROTO_ICMPV6
        && !(pkt.proto == IPPROTO_TCP && pkt.tcp_flags & TCP_STORY_FLAGS != 0)
}

/// Fill the (zeroed) key of `pkt` at `hook`/`site`.
#[inline(always)]
pub fn key(k: &mut AggKey, pkt: &PacketInfo, reply: u8, hook: Hook, site: u64, aux: u32) {
    k.tuple.saddr = pkt.saddr;
    k.tuple.daddr = pkt.daddr;
    k.tuple.sport = pkt.sport;
    k.tuple.dport = pkt.dport;
    k.tuple.proto = pkt.proto;
    k.tuple.family = pkt.family;
    k.site = site;
    k.aux = aux;
    k.hook = hook as u8;
    k.reply = reply;
}

/// True when the key's budget of full records is spent (and no refresh is
/// due): the packet is counted here and needs no record. For a packet hook
/// it also clears this CPU's "last followed skb" (maps::LAST), so that
/// sk_data_ready does not take this uncounted packet's delivery for the
/// last recorded one's. A route lookup counted leaves it: it runs inside
/// the processing of that very skb (fib_table_lookup() from
/// ip_route_input_slow()), and a local delivery's lookup has no ports, so
/// all flows to one address share its key and spend its budget at once.
/// Clearing LAST there cost every DNS-like flow past the first 8 per CPU
/// its "queued to a local socket" hop.
#[inline(always)]
pub fn counted(k: &AggKey) -> bool {
    // bpf_jiffies64() is inlined by the verifier (a load, no call).
    let now = unsafe { bpf_jiffies64() };
    let Some(h) = AGG_HOT.get_ptr_mut(k.hook as u32) else {
        return false;
    };
    // SAFETY: this CPU's slot of a per-CPU array; no other writer.
    let h = unsafe { &mut *h };
    if now < h.until && same_key(&h.key, k) {
        h.pending += 1;
        forget_last(k);
        crate::maps::bump(stat::COUNTED);
        return true;
    }
    let Some(v) = AGG.get_ptr_mut(k) else {
        return false;
    };
    // SAFETY: this CPU's value of a per-CPU map; no other writer.
    let v = unsafe { &mut *v };
    if v.full < AGG_BUDGET || now.wrapping_sub(v.last_full) >= AGG_REFRESH_JIFFIES {
        return false;
    }
    v.packets += 1;
    // The key takes this hook's slot; what the previous key had pending
    // goes to its AGG entry (lost if the LRU evicted that meanwhile).
    if h.pending != 0 {
        crate::let_zeroed!(old: AggKey);
        *old = h.key;
        if let Some(o) = AGG.get_ptr_mut(&*old) {
            unsafe { (*o).packets += h.pending };
        }
    }
    h.key = *k;
    h.until = v.last_full + AGG_REFRESH_JIFFIES;
    h.pending = 0;
    forget_last(k);
    crate::maps::bump(stat::COUNTED);
    true
}

#[inline(always)]
fn forget_last(k: &AggKey) {
    if k.hook == Hook::FibLookup as u8 {
        return;
    }
    if let Some(p) = LAST.get_ptr_mut(0) {
        unsafe { (*p).skb = 0 };
    }
}

/// Keys compared as seven words (a derived `==` compares field by field,
/// bytes of the addresses included: dozens of branches for the verifier).
#[inline(always)]
fn same_key(a: &AggKey, b: &AggKey) -> bool {
    // SAFETY: AggKey is 56 bytes, 8-aligned (its u64 field), no padding
    // left unwritten (keys are zeroed before they are filled).
    let (a, b) = unsafe {
        (
            &*(a as *const AggKey as *const [u64; 7]),
            &*(b as *const AggKey as *const [u64; 7]),
        )
    };
    (a[0] ^ b[0])
        | (a[1] ^ b[1])
        | (a[2] ^ b[2])
        | (a[3] ^ b[3])
        | (a[4] ^ b[4])
        | (a[5] ^ b[5])
        | (a[6] ^ b[6])
        == 0
}

/// A full record for `k` was sent from this device.
#[inline(always)]
pub fn recorded(k: &AggKey, ifindex: u32, netns: u32) {
    let ts = unsafe { bpf_jiffies64() };
    if let Some(v) = AGG.get_ptr_mut(k) {
        // SAFETY: as in `counted`.
        unsafe {
            (*v).full += 1;
            (*v).last_full = ts;
            (*v).ifindex = ifindex;
            (*v).netns = netns;
        }
        return;
    }
    let v = AggVal {
        packets: 0,
        last_full: ts,
        full: 1,
        ifindex,
        netns,
        _pad: 0,
    };
    let _ = AGG.insert(k, &v, 0);
}
