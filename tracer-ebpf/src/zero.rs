//! Zeroing and copying records in place, without `memset` or `memmove`.
//!
//! LLVM lowers `T::zeroed()`-style literals of large records to calls to
//! aya-ebpf's `memset`, a byte loop that the verifier walks once per byte:
//! on Debian's 6.1 the `xmit` program hit "processed 904781 insns (limit
//! 1000000)" from those loops alone. Volatile 8-byte stores cannot be turned
//! back into a `memset` call and cost one instruction per 8 bytes.

use core::mem::{align_of, size_of};

/// Zero `*p` with volatile stores as wide as `T`'s alignment allows.
///
/// # Safety
/// `p` must be valid for writes of `size_of::<T>()` bytes, and every bit
/// pattern of zeroes must be a valid `T` (true of the `#[repr(C)]` ABI
/// records, which hold only integers and arrays of them).
#[inline(always)]
pub unsafe fn zero_in_place<T>(p: *mut T) {
    let n = size_of::<T>();
    match align_of::<T>() {
        a if a >= 8 => unsafe { stores::<u64>(p as *mut u64, n / 8) },
        4 => unsafe { stores::<u32>(p as *mut u32, n / 4) },
        2 => unsafe { stores::<u16>(p as *mut u16, n / 2) },
        _ => unsafe { stores::<u8>(p as *mut u8, n) },
    }
}

#[inline(always)]
unsafe fn stores<W: Copy + Default>(w: *mut W, count: usize) {
    let mut i = 0;
    while i < count {
        unsafe { core::ptr::write_volatile(w.add(i), W::default()) };
        i += 1;
    }
}

/// `*dst = *src` without `memmove`: LLVM lowers a plain copy of a
/// 48-byte PacketInfo to a call to aya-ebpf's `memmove`, a byte loop in a
/// BPF-to-BPF subprogram that the verifier walks byte by byte on every
/// path that reaches the copy; and before Linux 6.4 a call makes precision
/// backtracking mark every scalar precise, so states stop pruning
/// (docs/architecture.md). Volatile word copies, as wide as `T`'s
/// alignment allows, cost two instructions per word.
///
/// # Safety
/// `dst` and `src` must be valid for `size_of::<T>()` bytes, aligned for
/// `T`, and not overlap.
#[inline(always)]
pub unsafe fn copy_in_place<T>(dst: *mut T, src: *const T) {
    let n = size_of::<T>();
    match align_of::<T>() {
        a if a >= 8 => unsafe { copies::<u64>(dst as *mut u64, src as *const u64, n / 8) },
        4 => unsafe { copies::<u32>(dst as *mut u32, src as *const u32, n / 4) },
        2 => unsafe { copies::<u16>(dst as *mut u16, src as *const u16, n / 2) },
        _ => unsafe { copies::<u8>(dst as *mut u8, src as *const u8, n) },
    }
}

#[inline(always)]
unsafe fn copies<W: Copy>(d: *mut W, s: *const W, count: usize) {
    let mut i = 0;
    while i < count {
        unsafe { core::ptr::write_volatile(d.add(i), core::ptr::read_volatile(s.add(i))) };
        i += 1;
    }
}

/// `*dst = *src` for a packet ([`copy_in_place`]).
#[inline(always)]
pub fn copy_pkt(dst: &mut tracer_common::PacketInfo, src: &tracer_common::PacketInfo) {
    // SAFETY: two PacketInfo, references: valid, aligned, apart.
    unsafe { copy_in_place(dst, src) };
}

/// `let_zeroed!(ev: PacketEvent);` declares `ev: &mut PacketEvent` pointing
/// at a zeroed record on the stack (no `memset`, see the module comment).
#[macro_export]
macro_rules! let_zeroed {
    ($name:ident : $t:ty) => {
        let mut $name = core::mem::MaybeUninit::<$t>::uninit();
        // SAFETY: the ABI records are plain integers; all-zero is valid.
        unsafe { $crate::zero::zero_in_place($name.as_mut_ptr()) };
        #[allow(unused_mut)]
        let mut $name: &mut $t = unsafe { $name.assume_init_mut() };
    };
}
