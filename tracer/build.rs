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
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "tracer-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
