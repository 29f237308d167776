//! Builds the kernel programs (`tracer-ebpf`, nightly, bpfel-unknown-none,
//! linked by bpf-linker) and leaves the object in OUT_DIR for
//! `include_bytes_aligned!`.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use sha2::{Digest, Sha256};

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
        return version_line(&manifest);
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let shared = shared_ebpf_dir(&manifest)?;
    // aya-build builds the eBPF crate in a target dir under OUT_DIR, which
    // differs per profile and host target: it is given one shared dir per
    // architecture instead, so the kernel programs (and `core` through
    // build-std) are built once whatever the host build (debug, release,
    // clippy, dist's musl targets); a later build finds them fresh.
    // SAFETY: the build script is single-threaded here.
    unsafe { std::env::set_var("OUT_DIR", &shared) };
    // The nested cargo inherits this environment: a profile override of
    // the host build (dist's CARGO_PROFILE_RELEASE_STRIP) would change
    // the eBPF build's fingerprint and rebuild it; it is not theirs.
    let profile_env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("CARGO_PROFILE_"))
        .collect();
    for (k, _) in &profile_env {
        // SAFETY: as above.
        unsafe { std::env::remove_var(k) };
    }
    let built = aya_build::build_ebpf(
        [aya_build::Package {
            name: "tracer-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    );
    // SAFETY: as above.
    unsafe { std::env::set_var("OUT_DIR", &out) };
    for (k, v) in &profile_env {
        // SAFETY: as above.
        unsafe { std::env::set_var(k, v) };
    }
    built?;
    std::fs::copy(shared.join("tracer"), out.join("tracer"))?;
    strip_debug(&out.join("tracer"));
    version_line(&manifest)
}

/// Where the kernel programs of this build's architecture are built:
/// $TRACER_EBPF_DIR/ARCH, else target/ebpf/ARCH of the workspace (its
/// target dir when CARGO_TARGET_DIR is unset; a relocated target dir
/// still shares this one).
fn shared_ebpf_dir(manifest: &Path) -> anyhow::Result<PathBuf> {
    println!("cargo:rerun-if-env-changed=TRACER_EBPF_DIR");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH")?;
    let base = std::env::var_os("TRACER_EBPF_DIR")
        .map_or_else(|| manifest.join("../target/ebpf"), PathBuf::from);
    let dir = base.join(arch);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Drop the DWARF sections from the kernel object (3.1 MB -> 0.7 MB):
/// bpf-linker needs the debug info to generate BTF, but the loader reads
/// only .BTF and .BTF.ext, which `--strip-debug` keeps. The object is
/// embedded in the binary, and its pages count in tracer's memory. With
/// no llvm-objcopy (it comes with LLVM 22, which bpf-linker needs), the
/// object stays as it is, with a warning.
fn strip_debug(object: &Path) {
    for tool in [
        "llvm-objcopy-22",
        "/usr/lib/llvm-22/bin/llvm-objcopy",
        "llvm-objcopy",
    ] {
        let ok = Command::new(tool)
            .arg("--strip-debug")
            .arg(object)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
    }
    println!(
        "cargo:warning=llvm-objcopy not found: the embedded eBPF object keeps its DWARF sections (larger binary)"
    );
}

/// `tracer --version`: the crate version, the commit it was built from
/// ($TRACER_COMMIT when there is no git checkout), the aya it links
/// (from Cargo.lock), the first 16 hex digits of the SHA-256 of the
/// embedded eBPF object (which build of the kernel programs this is) and
/// the target. Passed to the crate as TRACER_VERSION_LINE.
fn version_line(manifest: &Path) -> anyhow::Result<()> {
    let root = manifest.join("..");
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    println!("cargo:rerun-if-env-changed=TRACER_COMMIT");
    let commit = if let Ok(c) = std::env::var("TRACER_COMMIT") {
        c
    } else {
        // Rebuild when HEAD moves: HEAD itself, the branch it names,
        // and packed-refs. Only files that exist: cargo takes a missing
        // one (no packed-refs yet, a branch only packed) as always
        // changed, and would rebuild tracer on every build.
        let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
        watch.extend(git(&["symbolic-ref", "-q", "HEAD"]));
        for w in watch {
            if let Some(p) = git(&["rev-parse", "--git-path", &w]).map(|p| root.join(p))
                && p.exists()
            {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
        git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
    };
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
    let aya = lock
        .split("[[package]]")
        .find(|p| p.lines().any(|l| l.trim() == "name = \"aya\""))
        .and_then(|p| p.lines().find_map(|l| l.trim().strip_prefix("version = ")))
        .map_or_else(
            || "unknown".to_string(),
            |v| v.trim_matches('"').to_string(),
        );
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let object = std::fs::read(out.join("tracer"))?;
    let id: String = if object.is_empty() {
        "none".into()
    } else {
        Sha256::digest(&object)[..8]
            .iter()
            .fold(String::new(), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            })
    };
    let target = std::env::var("TARGET")?;
    println!(
        "cargo:rustc-env=TRACER_VERSION_LINE={} (commit {commit}, aya {aya}, ebpf {id}, {target})",
        std::env::var("CARGO_PKG_VERSION")?
    );
    Ok(())
}
