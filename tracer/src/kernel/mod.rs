//! The kernel side: BTF (offsets and names), the probe registry and
//! loader, tc attachment, and the session that owns them while tracing.

pub mod btf;
pub mod loader;
pub mod session;
