//! Test support for tracer: network namespaces a test creates and removes,
//! bounded traffic, and running the real `tracer` binary against them.

pub mod netns;
pub mod redirect;
pub mod scenarios;
pub mod tracer;

/// Privileged tests need root and the kernel's BTF. Returns false (after a
/// loud SKIPPED line) only when TRACER_SKIP_PRIVILEGED=1 says skipping is
/// wanted; otherwise a missing privilege fails the test.
pub fn require_privileges(test: &str) -> bool {
    let reason = if unsafe { libc::geteuid() } != 0 {
        Some("not running as root")
    } else if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        Some("kernel has no BTF (/sys/kernel/btf/vmlinux)")
    } else {
        None
    };
    match reason {
        None => true,
        Some(r) if std::env::var("TRACER_SKIP_PRIVILEGED").as_deref() == Ok("1") => {
            eprintln!("\n!!!!! SKIPPED (privileged) {test}: {r} !!!!!\n");
            false
        }
        Some(r) => panic!(
            "{test} needs root and BTF: {r}. Run as root, or set TRACER_SKIP_PRIVILEGED=1 to skip it loudly"
        ),
    }
}
