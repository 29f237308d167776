//! Builds the kernel programs (`tracer-ebpf`, nightly, bpfel-unknown-none,
//! linked by bpf-linker) and leaves the object in OUT_DIR for
//! `include_bytes_aligned!`.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let ebpf_dir = manifest.join("../tracer-ebpf").canonicalize()?;
    let root_dir = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non UTF-8 path {}", ebpf_dir.display()))?;
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("../tracer-common/src").display()
    );
    // aya-build runs a cargo of its own for the eBPF crate and hands every
    // line of its stderr to us as a `cargo:warning`, so its "Compiling
    // ..." status lines became a wall of "warning: tracer@0.1.0:" in every
    // build. That cargo inherits this environment: quiet, it prints only
    // what matters (compiler warnings and errors, still shown).
    // SAFETY: the build script is single-threaded here; nothing else reads
    // the environment concurrently.
    unsafe { std::env::set_var("CARGO_TERM_QUIET", "true") };
    println!("cargo::rustc-check-cfg=cfg(tracer_no_ebpf)");
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        // The pure crates' tests with the stable toolchain alone (no
        // nightly, no bpf-linker): an empty object, and a binary that says
        // it cannot trace (loader::EBPF_OBJECT).
        let out = PathBuf::from(std::env::var("OUT_DIR")?);
        std::fs::write(out.join("tracer"), [])?;
        println!("cargo:rustc-cfg=tracer_no_ebpf");
        return Ok(());
    }
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "tracer-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
