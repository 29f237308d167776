//! tracer's kernel programs.
//!
//! One module per hook family; every entry point is a thin wrapper calling a
//! `try_*` function. Programs never modify packets and tc programs always
//! return "continue" (TCX_NEXT / TC_ACT_UNSPEC).
#![no_std]
#![no_main]
// Atomic add on a map value (filter::live_add()): see there.
#![feature(core_intrinsics)]
#![allow(internal_features)]
// Map keys are passed by reference on purpose: handing them to the
// `Borrow`-generic map API by value made LLVM emit a spill of an undefined
// register that the verifier rejects ("R2 !read_ok").
#![allow(clippy::needless_borrows_for_generic_args)]

mod agg;
mod debug;
mod emit;
mod fentry;
mod filter;
mod func;
mod kprobe;
mod kread;
mod maps;
mod sockaddr;
mod tc;
mod tracepoint;
mod xdp;
mod zero;

use tracer_common::{FilterConfig, KernelOffsets};

/// What to follow. Overridden by the loader (`EbpfLoader::override_global`);
/// lives in .rodata so the verifier treats it as constant.
#[unsafe(no_mangle)]
static FILTER: FilterConfig = FilterConfig::empty();

/// Kernel struct field offsets resolved from the running kernel's BTF by the
/// loader. No kernel struct offset is hard-coded in this crate.
#[unsafe(no_mangle)]
static OFFSETS: KernelOffsets = KernelOffsets::none();

/// 1 when the loader was asked for empty programs (TRACER_EMPTY_PROGRAMS=1,
/// a benchmark of what the kernel's hooks cost by themselves): every entry
/// point returns at once and nothing is traced. In .rodata like FILTER: the
/// verifier knows the value, and with 1 drops everything after the return
/// as dead code (opt_remove_dead_code()). With the default 0 the check stays
/// (its jump target, the plain return, is reached from other paths too, so
/// opt_hard_wire_dead_code_branches() leaves it): three instructions.
#[unsafe(no_mangle)]
static EMPTY_PROGRAMS: u8 = 0;

#[inline(always)]
pub(crate) fn empty_programs() -> bool {
    // SAFETY: a read-only global (see filter()).
    unsafe { core::ptr::read_volatile(&EMPTY_PROGRAMS) != 0 }
}

#[inline(always)]
pub(crate) fn filter() -> &'static FilterConfig {
    // SAFETY: a read-only global; read_volatile keeps LLVM from folding the
    // compile-time default into the code.
    unsafe { core::ptr::read_volatile(&&FILTER) }
}

#[inline(always)]
pub(crate) fn offsets() -> &'static KernelOffsets {
    unsafe { core::ptr::read_volatile(&&OFFSETS) }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
