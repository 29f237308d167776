//! kprobe/kretprobe backend of the function hooks (func.rs), for kernels
//! without fentry (or functions fentry cannot reach: aya 0.14 attaches
//! fentry only to vmlinux functions, so module functions such as IPVS's
//! and nf_tables' come here). The loader attaches each program to the
//! function named in its comment; argument positions are the function's C
//! prototype on Linux 6.1-6.12.

use aya_ebpf::{
    EbpfContext,
    helpers::bpf_get_func_ip,
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use tracer_common::{backend::KPROBE, func};

use crate::func::{Decide, Extra, call, enter, leave, nf_decide, nf_state, nft_chain, xt_table};

/// The probed function's address (kprobes on a function entry), 0 before
/// Linux 5.15: the verifier refuses the helper there, and skips this dead
/// branch (`has_func_ip` is in .rodata).
#[inline(always)]
fn ip(ctx: &ProbeContext) -> u64 {
    if crate::offsets().has_func_ip != 0 {
        unsafe { bpf_get_func_ip(ctx.as_ptr()) }
    } else {
        0
    }
}

#[inline(always)]
fn arg(ctx: &ProbeContext, n: usize) -> u64 {
    ctx.arg::<u64>(n).unwrap_or(0)
}

/// nf_hook_slow(struct sk_buff *skb, struct nf_hook_state *state, ...)
#[kprobe]
pub fn tracer_kp_nf_hook_slow(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let x = nf_state(arg(&ctx, 1));
    let _ = enter(
        func::NF_HOOK_SLOW,
        KPROBE,
        arg(&ctx, 0),
        ip(&ctx),
        x,
        nf_decide(&x),
    );
    0
}

#[kretprobe]
pub fn tracer_krp_nf_hook_slow(ctx: RetProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::NF_HOOK_SLOW, ctx.ret::<i32>() as i64);
    0
}

/// nft_do_chain(struct nft_pktinfo *pkt, void *priv /* struct nft_chain */)
#[kprobe]
pub fn tracer_kp_nft_do_chain(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let (skb, x) = nft_chain(arg(&ctx, 0), arg(&ctx, 1));
    let _ = enter(
        func::NFT_DO_CHAIN,
        KPROBE,
        skb,
        ip(&ctx),
        x,
        Decide::Tracked,
    );
    0
}

#[kretprobe]
pub fn tracer_krp_nft_do_chain(ctx: RetProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::NFT_DO_CHAIN, ctx.ret::<u32>() as i64);
    0
}

/// ipt_do_table(void *priv /* struct xt_table */, struct sk_buff *skb, ...)
#[kprobe]
pub fn tracer_kp_ipt_do_table(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let x = xt_table(arg(&ctx, 0));
    let _ = enter(
        func::IPT_DO_TABLE,
        KPROBE,
        arg(&ctx, 1),
        ip(&ctx),
        x,
        Decide::Tracked,
    );
    0
}

#[kretprobe]
pub fn tracer_krp_ipt_do_table(ctx: RetProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::IPT_DO_TABLE, ctx.ret::<u32>() as i64);
    0
}

/// fib_validate_source(struct sk_buff *skb, __be32 src, ...)
#[kprobe]
pub fn tracer_kp_fib_validate_source(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = enter(
        func::FIB_VALIDATE_SOURCE,
        KPROBE,
        arg(&ctx, 0),
        ip(&ctx),
        Extra::NONE,
        Decide::Tracked,
    );
    0
}

#[kretprobe]
pub fn tracer_krp_fib_validate_source(ctx: RetProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::FIB_VALIDATE_SOURCE, ctx.ret::<i32>() as i64);
    0
}

/// ip_route_input_noref(struct sk_buff *skb, __be32 daddr, ...)
#[kprobe]
pub fn tracer_kp_ip_route_input(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = enter(
        func::IP_ROUTE_INPUT,
        KPROBE,
        arg(&ctx, 0),
        ip(&ctx),
        Extra::NONE,
        Decide::Tracked,
    );
    0
}

#[kretprobe]
pub fn tracer_krp_ip_route_input(ctx: RetProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::IP_ROUTE_INPUT, ctx.ret::<i32>() as i64);
    0
}

/// ip_forward(struct sk_buff *skb)
#[kprobe]
pub fn tracer_kp_ip_forward(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = call(func::IP_FORWARD, KPROBE, arg(&ctx, 0), ip(&ctx), [0; 2]);
    0
}

/// ip_local_deliver(struct sk_buff *skb)
#[kprobe]
pub fn tracer_kp_ip_local_deliver(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = call(
        func::IP_LOCAL_DELIVER,
        KPROBE,
        arg(&ctx, 0),
        ip(&ctx),
        [0; 2],
    );
    0
}

/// __icmp_send(struct sk_buff *skb_in, int type, int code, __be32 info, ...)
#[kprobe]
pub fn tracer_kp_icmp_send(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let a = [arg(&ctx, 1) as u32, arg(&ctx, 2) as u32];
    let _ = call(func::ICMP_SEND, KPROBE, arg(&ctx, 0), ip(&ctx), a);
    0
}

/// ip_vs_conn_in_get_proto(struct netns_ipvs *ipvs, int af,
/// const struct sk_buff *skb, const struct ip_vs_iphdr *iph)
#[kprobe]
pub fn tracer_kp_ipvs_conn_in(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = enter(
        func::IPVS_CONN_IN,
        KPROBE,
        arg(&ctx, 2),
        ip(&ctx),
        Extra::NONE,
        Decide::Match,
    );
    0
}

#[kretprobe]
pub fn tracer_krp_ipvs_conn_in(ctx: RetProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::IPVS_CONN_IN, ctx.ret::<u64>() as i64);
    0
}

/// ip_vs_schedule(struct ip_vs_service *svc, struct sk_buff *skb, ...)
#[kprobe]
pub fn tracer_kp_ipvs_schedule(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = enter(
        func::IPVS_SCHEDULE,
        KPROBE,
        arg(&ctx, 1),
        ip(&ctx),
        Extra::NONE,
        Decide::Match,
    );
    0
}

#[kretprobe]
pub fn tracer_krp_ipvs_schedule(ctx: RetProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::IPVS_SCHEDULE, ctx.ret::<u64>() as i64);
    0
}

/// ip_vs_{nat,dr,tunnel,bypass}_xmit(struct sk_buff *skb,
/// struct ip_vs_conn *cp, ...): one program attached to each; the function
/// address tells which.
#[kprobe]
pub fn tracer_kp_ipvs_xmit(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = call(func::IPVS_XMIT, KPROBE, arg(&ctx, 0), ip(&ctx), [0; 2]);
    0
}

/// sock_def_readable(struct sock *sk): the default sk->sk_data_ready, for
/// kernels without the sock:sk_data_ready tracepoint (before 6.10).
#[kprobe]
pub fn tracer_kp_sock_def_readable(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    crate::tracepoint::sk_data_ready(arg(&ctx, 0));
    0
}

/// tcp_v4_send_reset(const struct sock *sk, struct sk_buff *skb, ...): for
/// kernels whose tcp:tcp_send_reset tracepoint skips resets without a
/// socket (before 6.10).
#[kprobe]
pub fn tracer_kp_tcp_v4_send_reset(ctx: ProbeContext) -> u32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = call(func::TCP_RESET, KPROBE, arg(&ctx, 1), ip(&ctx), [0; 2]);
    0
}
