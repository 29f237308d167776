//! The kernel side: BTF (offsets and names), the probe registry and
//! loader, tc attachment, and the session that owns them while tracing.

pub mod btf;
pub mod loader;
pub mod session;
pub mod tracer_lock;

/// An error with its causes, each after ": " (as the error line of a
/// failed command prints them): aya's errors keep the why in their
/// `source` ("`bpf_link_create` failed" says nothing by itself), and a
/// warning line or a fallback reason made with `{e}` alone would drop it.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s += &format!(": {c}");
        src = c.source();
    }
    s
}
