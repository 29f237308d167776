//! fentry/fexit backend of the function hooks (func.rs): cheaper than
//! kprobes (a BPF trampoline, no breakpoint), preferred where the kernel
//! allows it. Each program is loaded against its target function's BTF
//! (the name in the attribute is what the loader passes).

use aya_ebpf::{
    EbpfContext,
    helpers::bpf_get_func_ip,
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use tracer_common::{backend::FENTRY, func};

use crate::func::{Decide, Extra, call, enter, leave, nf_decide, nf_state};

/// The traced function's address, 0 before Linux 5.15 (no
/// bpf_get_func_ip(); the dead branch is skipped by the verifier).
#[inline(always)]
fn ip(ctx: &FEntryContext) -> u64 {
    if crate::offsets().has_func_ip != 0 {
        unsafe { bpf_get_func_ip(ctx.as_ptr()) }
    } else {
        0
    }
}

/// The traced function's return value (bpf_get_func_ret(), Linux 5.17+).
#[inline(always)]
fn ret(ctx: &FExitContext) -> i64 {
    ctx.ret::<i64>().unwrap_or(0)
}

#[fentry(function = "nf_hook_slow")]
pub fn tracer_fe_nf_hook_slow(ctx: FEntryContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let x = nf_state(ctx.arg(1));
    let _ = enter(
        func::NF_HOOK_SLOW,
        FENTRY,
        ctx.arg(0),
        ip(&ctx),
        x,
        nf_decide(&x),
    );
    0
}

#[fexit(function = "nf_hook_slow")]
pub fn tracer_fx_nf_hook_slow(ctx: FExitContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::NF_HOOK_SLOW, ret(&ctx) as i32 as i64);
    0
}

#[fentry(function = "fib_validate_source")]
pub fn tracer_fe_fib_validate_source(ctx: FEntryContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = enter(
        func::FIB_VALIDATE_SOURCE,
        FENTRY,
        ctx.arg(0),
        ip(&ctx),
        Extra::NONE,
        Decide::Tracked,
    );
    0
}

#[fexit(function = "fib_validate_source")]
pub fn tracer_fx_fib_validate_source(ctx: FExitContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::FIB_VALIDATE_SOURCE, ret(&ctx) as i32 as i64);
    0
}

#[fentry(function = "ip_route_input_noref")]
pub fn tracer_fe_ip_route_input(ctx: FEntryContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = enter(
        func::IP_ROUTE_INPUT,
        FENTRY,
        ctx.arg(0),
        ip(&ctx),
        Extra::NONE,
        Decide::Tracked,
    );
    0
}

#[fexit(function = "ip_route_input_noref")]
pub fn tracer_fx_ip_route_input(ctx: FExitContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = leave(func::IP_ROUTE_INPUT, ret(&ctx) as i32 as i64);
    0
}

#[fentry(function = "ip_forward")]
pub fn tracer_fe_ip_forward(ctx: FEntryContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = call(func::IP_FORWARD, FENTRY, ctx.arg(0), ip(&ctx), [0; 2]);
    0
}

#[fentry(function = "ip_local_deliver")]
pub fn tracer_fe_ip_local_deliver(ctx: FEntryContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = call(func::IP_LOCAL_DELIVER, FENTRY, ctx.arg(0), ip(&ctx), [0; 2]);
    0
}

#[fentry(function = "__icmp_send")]
pub fn tracer_fe_icmp_send(ctx: FEntryContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let a = [ctx.arg::<u64>(1) as u32, ctx.arg::<u64>(2) as u32];
    let _ = call(func::ICMP_SEND, FENTRY, ctx.arg(0), ip(&ctx), a);
    0
}

/// sock_def_readable(struct sock *sk): see kprobe.rs.
#[fentry(function = "sock_def_readable")]
pub fn tracer_fe_sock_def_readable(ctx: FEntryContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    crate::tracepoint::sk_data_ready(ctx.arg(0));
    0
}

/// tcp_v4_send_reset(sk, skb, ...): see kprobe.rs.
#[fentry(function = "tcp_v4_send_reset")]
pub fn tracer_fe_tcp_v4_send_reset(ctx: FEntryContext) -> i32 {
    if crate::empty_programs() {
        return 0;
    }
    let _ = call(func::TCP_RESET, FENTRY, ctx.arg(1), ip(&ctx), [0; 2]);
    0
}
