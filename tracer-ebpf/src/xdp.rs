//! XDP programs' actions on a followed packet: the tracepoints
//! xdp:xdp_redirect, xdp:xdp_redirect_err and xdp:xdp_exception
//! (include/trace/events/xdp.h) name the device, the program and, for a
//! redirect, its target and error, but not the packet.
//!
//! In generic (skb) mode they fire inside do_xdp_generic(), which
//! __netif_receive_skb_core() calls right after the netif_receive_skb
//! tracepoint, for the same skb on the same CPU (xdp_do_generic_redirect()
//! traces the redirect; netif_receive_generic_xdp() an XDP_ABORTED or an
//! unknown action; generic_xdp_tx() an XDP_TX the device would not take).
//! So the packet is this CPU's last followed skb (maps::LAST) when that
//! was seen by netif_receive_skb on the same device, moments ago. A
//! followed packet that XDP passed is next seen by tracer's own tc ingress
//! program (first at its hook), which takes LAST over; one counted there
//! clears it (agg.rs). A successful XDP_TX has no tracepoint: userspace
//! reads it from the hops (verdict/bpf_path.rs).
//!
//! Not matched (the tracepoint fired for a packet tracer does not follow):
//! one per-CPU array lookup, a device read and three compares.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::btf_tracepoint, programs::BtfTracePointContext};
use tracer_common::{FuncEvent, Hook, backend, func, stat};

use crate::{
    func::{Decide, fill, zeroed_slot},
    kread::{dev_info, read, skb_dev},
    maps::{EVENTS, LAST, bump},
    offsets,
};

/// enum xdp_action (include/uapi/linux/bpf.h).
const XDP_REDIRECT: u32 = 4;
/// bpf_redirect()'s target in the tracepoint: map type
/// BPF_MAP_TYPE_UNSPEC and map id INT_MAX, the ifindex in `index`
/// (_trace_xdp_redirect(), include/linux/filter.h since 5.17).
const MAP_ID_IFINDEX: u32 = i32::MAX as u32;
/// How long after its netif_receive_skb an skb's XDP action may come: it
/// runs synchronously on the same CPU, microseconds on hardware, a few
/// milliseconds under qemu TCG (as tracepoint.rs's fib lookup borrows).
const SAME_PACKET_NS: u64 = 20_000_000;

/// xdp:xdp_redirect(dev, xdp, tgt, err, map_type, map_id, index).
#[btf_tracepoint(function = "xdp_redirect")]
pub fn tracer_xdp_redirect(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = redirect(&ctx);
    0
}

/// xdp:xdp_redirect_err: as xdp_redirect, `err` < 0 (the target is not
/// there, is down, or takes no packet that large: xdp_ok_fwd_dev()).
#[btf_tracepoint(function = "xdp_redirect_err")]
pub fn tracer_xdp_redirect_err(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = redirect(&ctx);
    0
}

/// xdp:xdp_exception(dev, xdp, act): XDP_ABORTED, an action the kernel
/// does not know, or an XDP_TX the device did not take.
#[btf_tracepoint(function = "xdp_exception")]
pub fn tracer_xdp_exception(ctx: BtfTracePointContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let dev: u64 = ctx.arg(0);
    let prog: u64 = ctx.arg(1);
    let act: u32 = ctx.arg(2);
    let _ = send(dev, prog, act, 0, 0, (0, 0));
    0
}

/// The redirect tracepoints' target ifindex (0 when not told: a device
/// map's entry, an AF_XDP socket, a CPU map) and error.
#[inline(always)]
fn redirect(ctx: &BtfTracePointContext) -> Option<()> {
    let dev: u64 = ctx.arg(0);
    let prog: u64 = ctx.arg(1);
    // Not `tgt` (argument 2): a `const void *`, which the verifier of
    // kernels before 6.x refuses to let a tp_btf program read ("arg2 type
    // UNKNOWN is not a struct", Debian's 5.10 and 6.1): a device map's
    // target goes unnamed.
    let err: i32 = ctx.arg(3);
    // The arity is a load-time constant: the branch for the other layout
    // is dead code (reading past the TP_PROTO fails verification).
    // `(to, map_id, key)`: a device map's entry is named from its id and
    // key in userspace (node/devmap.rs).
    let arity = offsets().tp_xdp_redirect_arity;
    let (to, map_id, key) = if arity >= 7 {
        let map_type: u32 = ctx.arg(4);
        let map_id: u32 = ctx.arg(5);
        let index: u32 = ctx.arg(6);
        if map_type == 0 && map_id == MAP_ID_IFINDEX {
            (index, 0, 0)
        } else {
            (0, map_id, index)
        }
    } else if arity == 6 {
        // 5.10: (dev, xdp, tgt, err, map, index), index the ifindex
        // when no map was used, else the map's key (bpf_map.id by BTF).
        let map: u64 = ctx.arg(4);
        let index: u32 = ctx.arg(5);
        if map == 0 {
            (index, 0, 0)
        } else {
            (
                0,
                read::<u32>(map, offsets().bpf_map_id).unwrap_or(0),
                index,
            )
        }
    } else {
        (0, 0, 0)
    };
    send(dev, prog, XDP_REDIRECT, to, err, (map_id, key))
}

/// Send the action of the program `prog` on `dev` as a func::XDP record of
/// the followed skb this CPU received on `dev` right before, if any;
/// `map`: a redirect's map id and key.
#[inline(always)]
fn send(dev: u64, prog: u64, act: u32, to: u32, err: i32, map: (u32, u32)) -> Option<()> {
    let last = LAST.get(0)?;
    if last.skb == 0 || last.hook != Hook::NetifReceive as u8 {
        return None;
    }
    let o = offsets();
    let ifindex: u32 = read(dev, o.dev_ifindex)?;
    if ifindex != last.ifindex
        || unsafe { bpf_ktime_get_ns() }.wrapping_sub(last.ts_ns) > SAME_PACKET_NS
    {
        return None;
    }
    let skb = last.skb;
    // Still on the program's device; or, redirected, already on its
    // target (xdp_do_generic_redirect() sets skb->dev before tracing).
    let on = skb_dev(skb);
    if on != dev && !(err == 0 && to != 0 && read::<u32>(on, o.dev_ifindex) == Some(to)) {
        return None;
    }
    let id: u32 = read::<u64>(prog, o.prog_aux)
        .and_then(|aux| read(aux, o.prog_aux_id))
        .unwrap_or(0);
    let ev: &mut FuncEvent = zeroed_slot(func::XDP)?;
    if !fill(
        ev,
        func::XDP,
        backend::TRACEPOINT,
        skb,
        id as u64,
        Decide::Tracked,
    ) {
        return None;
    }
    // The device the program ran on, whatever skb->dev is now.
    let d = dev_info(dev, &mut ev.hdr.ifname);
    if d.netns != last.netns {
        return None;
    }
    ev.hdr.ifindex = d.ifindex;
    ev.hdr.netns = d.netns;
    ev.arg = [act, to];
    ev.set_xdp_map(map.0, map.1);
    ev.ret = err as i64;
    ev.has_ret = 1;
    if EVENTS.output::<FuncEvent>(ev, 0).is_ok() {
        bump(stat::EVENTS);
    } else {
        bump(stat::LOST);
    }
    Some(())
}
