//! `cargo xtask dist`: the release artifacts an operator copies to a node.
//!
//! One static binary per architecture (musl, the eBPF object of that
//! architecture embedded, no dynamic section needing a loader or a libc),
//! stripped, plus `SHA256SUMS`, into `dist/`. aarch64 is cross-linked with
//! rust-lld (shipped with rustup), so no cross C toolchain is needed.

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::cmd::{root, run as sh};

/// (rust target, architecture name used in the artifact's file name).
pub(crate) const TARGETS: &[(&str, &str)] = &[
    ("x86_64-unknown-linux-musl", "x86_64"),
    ("aarch64-unknown-linux-musl", "aarch64"),
];

#[derive(Debug, Args)]
pub(crate) struct DistArgs {
    /// Only these architectures (x86_64, aarch64); default both.
    #[arg(long = "arch")]
    arches: Vec<String>,
}

/// The artifact's path for an architecture.
pub(crate) fn artifact(arch: &str) -> PathBuf {
    root()
        .join("dist")
        .join(format!("tracer-{arch}-linux-musl"))
}

/// Build the static binary of one target into dist/ and return its path.
pub(crate) fn build_one(target: &str, arch: &str) -> Result<PathBuf> {
    let mut c = Command::new("cargo");
    c.current_dir(root())
        .args(["build", "--release", "-p", "tracer", "--target", target])
        // Its own target dir: the stripped profile must not rebuild (or be
        // rebuilt by) the development build in target/release.
        .env("CARGO_TARGET_DIR", root().join("target/dist"))
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER", "rust-lld");
    sh(&mut c)?;
    let built = root()
        .join("target/dist")
        .join(target)
        .join("release/tracer");
    let out = artifact(arch);
    std::fs::create_dir_all(out.parent().expect("dist dir"))?;
    // Unchanged: left alone (the kernel matrix's guests may be running
    // it while `dist` runs beside them).
    let built_bytes = std::fs::read(&built).with_context(|| format!("read {}", built.display()))?;
    if std::fs::read(&out).is_ok_and(|b| b == built_bytes) {
        check_static(&out)?;
        return Ok(out);
    }
    // Copy through a temporary name: a running copy of the old binary
    // (ETXTBSY) or a half-written file never sits under the final name.
    let tmp = out.with_extension("tmp");
    std::fs::copy(&built, &tmp).with_context(|| format!("copy {}", built.display()))?;
    std::fs::rename(&tmp, &out)?;
    check_static(&out)?;
    Ok(out)
}

/// Refuse a binary that asks for a program interpreter (a dynamic
/// loader, hence a libc on the node): ELF program header PT_INTERP.
pub(crate) fn check_static(path: &Path) -> Result<()> {
    let b = std::fs::read(path)?;
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        bail!("{}: not a 64-bit little-endian ELF file", path.display());
    }
    let phoff = usize::try_from(u64_at(0x20))?;
    let phentsize = usize::from(u16_at(0x36));
    const PT_INTERP: u32 = 3;
    for i in 0..usize::from(u16_at(0x38)) {
        let o = phoff + i * phentsize;
        let p_type = u32::from_le_bytes(b[o..o + 4].try_into()?);
        if p_type == PT_INTERP {
            bail!(
                "{} needs a program interpreter: not a static binary",
                path.display()
            );
        }
    }
    Ok(())
}

/// Write dist/SHA256SUMS for every artifact present, in `sha256sum -c`
/// format.
fn write_sums() -> Result<String> {
    let mut sums = String::new();
    for (_, arch) in TARGETS {
        let p = artifact(arch);
        if let Ok(bytes) = std::fs::read(&p) {
            let hex = crate::image::sha256_hex(&bytes);
            let name = p.file_name().expect("file name").to_string_lossy();
            sums.push_str(&format!("{hex}  {name}\n"));
        }
    }
    std::fs::write(root().join("dist/SHA256SUMS"), &sums)?;
    Ok(sums)
}

/// Build the artifacts (both architectures unless `arches` names some).
pub(crate) fn build(arches: &[String]) -> Result<Vec<PathBuf>> {
    for a in arches {
        if !TARGETS.iter().any(|(_, x)| x == a) {
            bail!("unknown architecture {a:?}: x86_64 or aarch64");
        }
    }
    let mut out = Vec::new();
    for (target, arch) in TARGETS {
        if arches.is_empty() || arches.iter().any(|a| a == arch) {
            out.push(build_one(target, arch)?);
        }
    }
    write_sums()?;
    Ok(out)
}

pub(crate) fn run(a: DistArgs) -> Result<ExitCode> {
    crate::setup::ensure()?;
    let built = build(&a.arches)?;
    for p in &built {
        let size = std::fs::metadata(p)?.len();
        eprintln!(
            "dist: {} ({:.1} MiB, static)",
            p.display(),
            size as f64 / 1_048_576.0
        );
    }
    eprint!(
        "{}",
        std::fs::read_to_string(root().join("dist/SHA256SUMS"))?
    );
    Ok(ExitCode::SUCCESS)
}
