//! Function hooks shared by the fentry/fexit (fentry.rs) and
//! kprobe/kretprobe (kprobe.rs) backends: both call the same code, so the
//! same packet gives the same record whichever backend served.
//!
//! A function whose return value matters is followed in two steps: at entry
//! the skb is parsed and the follow decision taken (the skb may be freed
//! before the function returns: nf_hook_slow() frees dropped packets), and
//! the record is parked in `CALLS`; at return it is completed and sent, or
//! dropped when the return value is uninteresting (an ACCEPT).

use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
    bpf_probe_read_kernel_str_bytes,
};
use tracer_common::{FuncEvent, Hook, func, kind, stat};

use crate::{
    filter::{follow_skb, follow_tracked, netns_allowed},
    kread::{dev_info, read, skb_dev, skb_packet, sock_netns},
    maps::{CALLS, EVENTS, FUNC_SCRATCH, bump},
    offsets,
};

/// Pending calls are keyed by task and function: a kretprobe sees no
/// arguments, only the task it returns in. tgid < 2^22 (PID_MAX_LIMIT), so
/// the top byte of pid_tgid is free for the function id. A function that
/// re-enters itself in the same task before returning (a packet looped
/// back through the same hook in softirq on top of a process) overwrites
/// its own pending entry: the outer call is then reported as the inner one.
#[inline(always)]
fn call_key(f: u8) -> u64 {
    bpf_get_current_pid_tgid() ^ ((f as u64) << 56)
}

/// How a function hook decides whether an skb is followed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Decide {
    /// Only skbs already followed (received ones were seen by
    /// netif_receive_skb or tc first): one hash lookup, no parsing, for
    /// every other packet of the node; a followed one keeps the direction
    /// its entry hook gave it (filter::follow_tracked).
    Tracked,
    /// Only skbs already followed, as `Tracked`, but decided by the full
    /// match of `Match`: nf_hook_slow, whose program takes `Match` at
    /// LOCAL_OUT ([`nf_decide`]) and would otherwise hold both decisions
    /// (Debian 6.1: 29,900 instructions against 22,900).
    TrackedMatch,
    /// Parse and match (the first sight of locally generated packets:
    /// LOCAL_OUT, IPVS's local requests).
    Match,
}

/// Parse `skb`, decide, and fill a zeroed record's header and packet.
/// Returns false when the skb is not followed (or its netns is not).
#[inline(always)]
pub(crate) fn fill(
    ev: &mut FuncEvent,
    f: u8,
    backend: u8,
    skb: u64,
    location: u64,
    how: Decide,
) -> bool {
    if how != Decide::Match && crate::filter::is_tracked(skb) == 0 {
        return false;
    }
    skb_packet(skb, &mut ev.pkt);
    let dir = match how {
        Decide::Tracked => follow_tracked(skb, &ev.pkt),
        Decide::TrackedMatch | Decide::Match => follow_skb(skb, &ev.pkt),
    };
    if dir == 0 {
        return false;
    }
    ev.pkt.reply = (dir == crate::filter::DIR_REPLY) as u8;
    ev.hdr.kind = kind::FUNC;
    ev.hdr.hook = Hook::Func as u8;
    ev.hdr.cpu = unsafe { bpf_get_smp_processor_id() };
    ev.hdr.ts_ns = unsafe { bpf_ktime_get_ns() };
    ev.hdr.skb = skb;
    let d = dev_info(skb_dev(skb), &mut ev.hdr.ifname);
    ev.hdr.ifindex = d.ifindex;
    ev.hdr.netns = d.netns;
    if ev.hdr.netns == 0 {
        let sk: u64 = read(skb, offsets().skb_sk).unwrap_or(0);
        ev.hdr.netns = sock_netns(sk);
    }
    ev.func = f;
    ev.backend = backend;
    ev.location = location;
    netns_allowed(ev.hdr.netns)
}

/// A kernel string (NUL-terminated) into `dst`; empty when unreadable.
#[inline(always)]
fn read_str(src: u64, dst: &mut [u8; 32]) {
    if src != 0 {
        let _ = unsafe { bpf_probe_read_kernel_str_bytes(src as *const u8, dst) };
    }
}

/// Extras read at entry.
#[derive(Clone, Copy)]
pub struct Extra {
    pub arg: [u32; 2],
    /// Address of the table / chain name string, 0 for none.
    pub table: u64,
    pub chain: u64,
}

impl Extra {
    pub const NONE: Extra = Extra {
        arg: [0; 2],
        table: 0,
        chain: 0,
    };
}

/// This CPU's `FUNC_SCRATCH` slot for function `f`, zeroed: where
/// [`enter`] and [`call`] build their record.
#[inline(always)]
pub(crate) fn zeroed_slot(f: u8) -> Option<&'static mut FuncEvent> {
    let ev = FUNC_SCRATCH.get_ptr_mut(f as u32)?;
    // SAFETY: this CPU's slot for `f` (maps::FUNC_SCRATCH); zeroes are a
    // valid FuncEvent.
    unsafe {
        crate::zero::zero_in_place(ev);
        Some(&mut *ev)
    }
}

/// Entry of a function whose return matters: park the record.
#[inline(always)]
pub fn enter(f: u8, backend: u8, skb: u64, location: u64, x: Extra, how: Decide) -> Option<()> {
    if skb == 0 {
        return None;
    }
    let ev = zeroed_slot(f)?;
    // The names' addresses wait in the names' own buffers while the skb is
    // parsed and decided, and are loaded back (volatile) after: held in
    // registers, their values went through every path of the parse, and
    // Debian's 6.1 processed 80,600 instructions for nft_do_chain (two
    // names) against 22,800 for ipt_do_table (one).
    ev.arg = x.arg;
    let (table, chain) = (
        ev.table.as_mut_ptr().cast::<u64>(),
        ev.chain.as_mut_ptr().cast::<u64>(),
    );
    // SAFETY: 32-byte buffers at 8-byte aligned offsets of a #[repr(C)]
    // record that holds u64 fields before them.
    unsafe {
        table.write_volatile(x.table);
        chain.write_volatile(x.chain);
    }
    if !fill(ev, f, backend, skb, location, how) {
        return None;
    }
    // SAFETY: as above. The address's bytes are cleared: a name shorter
    // than 8 bytes would keep some past its NUL.
    let (t, c) = unsafe {
        let tc = (table.read_volatile(), chain.read_volatile());
        table.write_volatile(0);
        chain.write_volatile(0);
        tc
    };
    read_str(t, &mut ev.table);
    read_str(c, &mut ev.chain);
    CALLS.insert(&call_key(f), ev, 0).ok()
}

/// Only what an operator needs: verdicts other than ACCEPT, failed checks,
/// and every IPVS decision.
#[inline(always)]
fn interesting(f: u8, ret: i64) -> bool {
    match f {
        // 1: the okfn may run (all hooks accepted).
        func::NF_HOOK_SLOW => ret != 1,
        // The low byte is the NF_* verdict; NF_ACCEPT is 1.
        func::NFT_DO_CHAIN | func::IPT_DO_TABLE => ret & 0xff != 1,
        func::FIB_VALIDATE_SOURCE => ret < 0,
        func::IP_ROUTE_INPUT => ret != 0,
        _ => true,
    }
}

/// Return of a function entered with [`enter`]: send the record when the
/// return value is worth it.
#[inline(always)]
pub fn leave(f: u8, ret: i64) -> Option<()> {
    let key = call_key(f);
    let parked = unsafe { CALLS.get(&key) }?;
    if interesting(f, ret) {
        match EVENTS.reserve::<FuncEvent>(0) {
            Some(mut e) => {
                // One helper copy from the map value into the ring buffer:
                // a struct copy would go through the stack and memcpy.
                let dst = e.as_mut_ptr();
                let n = core::mem::size_of::<FuncEvent>() as u32;
                let r = unsafe {
                    aya_ebpf::helpers::generated::bpf_probe_read_kernel(
                        dst as *mut _,
                        n,
                        parked as *const FuncEvent as *const _,
                    )
                };
                if r == 0 {
                    let ev = unsafe { e.assume_init_mut() };
                    ev.ret = ret;
                    ev.has_ret = 1;
                    e.submit(0);
                    bump(stat::EVENTS);
                } else {
                    e.discard(0);
                }
            }
            None => bump(stat::LOST),
        }
    }
    let _ = CALLS.remove(&key);
    Some(())
}

/// A function whose entry alone is the evidence: send at once.
///
/// Built in this function's `FUNC_SCRATCH` slot, as [`enter`] builds, and
/// copied out in one helper call: built in a ring buffer reservation, the
/// reference the verifier tracks for it went through every path of the
/// parse and the decision, and Debian's 6.1 processed 45,000 instructions
/// for each of these hooks (22,700 for the hooks built in the slot).
#[inline(always)]
pub fn call(f: u8, backend: u8, skb: u64, location: u64, arg: [u32; 2]) -> Option<()> {
    // Every function called with an skb-only entry hook (forwarding, local
    // delivery, ICMP errors, resets, IPVS xmit) runs after the skb was
    // received or transmitted once: only already followed skbs matter.
    if skb == 0 || crate::filter::is_tracked(skb) == 0 {
        return None;
    }
    let ev = zeroed_slot(f)?;
    if !fill(ev, f, backend, skb, location, Decide::Tracked) {
        return None;
    }
    ev.arg = arg;
    // bpf_ringbuf_output(): one copy from the slot into the ring buffer.
    if EVENTS.output::<FuncEvent>(ev, 0).is_ok() {
        bump(stat::EVENTS);
    } else {
        bump(stat::LOST);
    }
    Some(())
}

/// NF_INET_LOCAL_OUT: a locally generated packet, not seen by any other
/// hook yet.
pub const NF_INET_LOCAL_OUT: u32 = 3;

/// How nf_hook_slow decides: parse only at LOCAL_OUT (first sight of a
/// local packet); at every other hook the packet was received, so tracked.
#[inline(always)]
pub fn nf_decide(x: &Extra) -> Decide {
    if x.arg[1] == NF_INET_LOCAL_OUT {
        Decide::Match
    } else {
        Decide::TrackedMatch
    }
}

/// nf_hook_slow(skb, state, ...): state->pf and state->hook
/// (struct nf_hook_state).
#[inline(always)]
pub fn nf_state(state: u64) -> Extra {
    let o = offsets();
    let pf: u8 = read(state, o.nfhs_pf).unwrap_or(0xff);
    let hook: u8 = read(state, o.nfhs_hook).unwrap_or(0xff);
    Extra {
        arg: [pf as u32, hook as u32],
        table: 0,
        chain: 0,
    }
}

/// nft_do_chain(pkt, priv): pkt->skb, and the names of priv (a struct
/// nft_chain: chain->name, chain->table->name).
#[inline(always)]
pub fn nft_chain(pkt: u64, chain: u64) -> (u64, Extra) {
    let o = offsets();
    let skb: u64 = read(pkt, o.nftpi_skb).unwrap_or(0);
    let cname: u64 = read(chain, o.nft_chain_name).unwrap_or(0);
    let table: u64 = read(chain, o.nft_chain_table).unwrap_or(0);
    let tname: u64 = read(table, o.nft_table_name).unwrap_or(0);
    (
        skb,
        Extra {
            arg: [0; 2],
            table: tname,
            chain: cname,
        },
    )
}

/// ipt_do_table(priv, skb, state): priv is the struct xt_table, whose name
/// is an inline char array.
#[inline(always)]
pub fn xt_table(table: u64) -> Extra {
    let off = offsets().xt_table_name;
    Extra {
        arg: [0; 2],
        table: if table == 0 || off == tracer_common::OFFSET_NONE {
            0
        } else {
            table + off as u64
        },
        chain: 0,
    }
}
