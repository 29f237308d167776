//! The kernel/user ABI of tracer.
//!
//! Everything here is shared byte-for-byte between the eBPF programs
//! (`tracer-ebpf`, built for `bpfel-unknown-none`) and the userspace loader.
//! Rules: `#[repr(C)]`, `Clone + Copy`, no `bool`, explicit padding so that no
//! byte is left uninitialised, and a size/offset test for each struct.
#![no_std]

pub mod agg;
pub mod config;
pub mod event;
pub mod tunnel;

pub use agg::*;
pub use config::*;
pub use event::*;
