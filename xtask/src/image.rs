//! `cargo xtask image`: a container image of the static binary, built
//! offline (no registry, no container engine) as an OCI archive per
//! architecture in dist/, loadable with `podman load` and `docker load`.
//!
//! The image holds one file, /usr/local/bin/tracer, and the directories a
//! runtime mounts over. The archive is an OCI image layout (oci-layout,
//! index.json, blobs/sha256/...) with docker's manifest.json beside it, as
//! `docker save` writes since Docker 25, so both engines read it. Entries
//! carry fixed times and owners and the image the commit's time: the same
//! binary gives the same archive.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context, Result};
use clap::Args;
use sha2::{Digest, Sha256};

use crate::cmd::root;

#[derive(Debug, Args)]
pub(crate) struct ImageArgs {
    /// Only these architectures (x86_64, aarch64); default both.
    #[arg(long = "arch")]
    arches: Vec<String>,
}

/// The name the archive loads as.
pub(crate) fn reference() -> String {
    format!("tracer:{}", env!("CARGO_PKG_VERSION"))
}

/// The archive's path for an architecture.
pub(crate) fn archive(arch: &str) -> PathBuf {
    root().join("dist").join(format!("tracer-image-{arch}.tar"))
}

/// OCI's name for an architecture.
fn oci_arch(arch: &str) -> &'static str {
    if arch == "aarch64" { "arm64" } else { "amd64" }
}

/// The SHA-256 of `bytes` in lower-case hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(bytes)
        .iter()
        .fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A tar header with fixed metadata (root-owned, time 0).
fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h
}

/// The single layer: the binary and the mount-point directories.
fn layer(binary: &[u8]) -> Result<Vec<u8>> {
    let mut t = tar::Builder::new(Vec::new());
    for d in [
        "usr/",
        "usr/local/",
        "usr/local/bin/",
        "tmp/",
        "run/",
        "proc/",
        "sys/",
        "dev/",
        "host/",
    ] {
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        t.append_data(&mut h, d, std::io::empty())?;
    }
    let mut h = header(tar::EntryType::Regular, 0o755, binary.len() as u64);
    t.append_data(&mut h, "usr/local/bin/tracer", binary)?;
    Ok(t.into_inner()?)
}

/// Add a file of the archive (fixed metadata).
fn add(t: &mut tar::Builder<impl Write>, path: &str, bytes: &[u8]) -> Result<()> {
    let mut h = header(tar::EntryType::Regular, 0o644, bytes.len() as u64);
    t.append_data(&mut h, path, bytes)?;
    Ok(())
}

/// Write the OCI archive of `binary` for `arch` to `out`.
pub(crate) fn write(binary: &Path, arch: &str, out: &Path) -> Result<()> {
    let bin = std::fs::read(binary).with_context(|| format!("read {}", binary.display()))?;
    let layer = layer(&bin)?;
    let layer_digest = sha256_hex(&layer);
    // The commit's time (not the build's): the same commit gives the
    // same image.
    let created = crate::cmd::output(std::process::Command::new("git").current_dir(root()).args([
        "log",
        "-1",
        "--format=%cI",
    ]));
    let created = match created.trim() {
        "" => "1970-01-01T00:00:00Z",
        t => t,
    };
    let config = serde_json::json!({
        "architecture": oci_arch(arch),
        "os": "linux",
        "created": created,
        "config": {
            "Env": ["PATH=/usr/local/bin"],
            "Cmd": ["tracer", "doctor"],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": "tracer",
                "org.opencontainers.image.description":
                    "eBPF datapath tracer for Kubernetes nodes: needs --privileged --pid=host --network=host",
                "org.opencontainers.image.version": env!("CARGO_PKG_VERSION"),
            },
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_digest}")] },
        "history": [{ "created": created, "created_by": "cargo xtask image" }],
    });
    let config = serde_json::to_vec(&config)?;
    let config_digest = sha256_hex(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len(),
        }],
    }))?;
    let manifest_digest = sha256_hex(&manifest);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "platform": { "architecture": oci_arch(arch), "os": "linux" },
            "annotations": {
                "org.opencontainers.image.ref.name": reference(),
                "io.containerd.image.name": reference(),
            },
        }],
    }))?;
    let docker = serde_json::to_vec(&serde_json::json!([{
        "Config": format!("blobs/sha256/{config_digest}"),
        "RepoTags": [reference()],
        "Layers": [format!("blobs/sha256/{layer_digest}")],
    }]))?;

    let tmp = out.with_extension("tmp");
    let file = std::fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    let mut t = tar::Builder::new(std::io::BufWriter::new(file));
    for d in ["blobs/", "blobs/sha256/"] {
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        t.append_data(&mut h, d, std::io::empty())?;
    }
    add(&mut t, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add(&mut t, "index.json", &index)?;
    add(&mut t, "manifest.json", &docker)?;
    add(&mut t, &format!("blobs/sha256/{layer_digest}"), &layer)?;
    add(&mut t, &format!("blobs/sha256/{config_digest}"), &config)?;
    add(
        &mut t,
        &format!("blobs/sha256/{manifest_digest}"),
        &manifest,
    )?;
    t.into_inner()?.flush()?;
    std::fs::rename(&tmp, out)?;
    Ok(())
}

/// Build the static binaries (if needed) and their image archives.
pub(crate) fn build(arches: &[String]) -> Result<Vec<PathBuf>> {
    let bins = crate::dist::build(arches)?;
    let mut out = Vec::new();
    for (_, arch) in crate::dist::TARGETS {
        let bin = crate::dist::artifact(arch);
        if bins.contains(&bin) {
            let a = archive(arch);
            write(&bin, arch, &a)?;
            out.push(a);
        }
    }
    Ok(out)
}

pub(crate) fn run(a: ImageArgs) -> Result<ExitCode> {
    crate::setup::ensure()?;
    for p in build(&a.arches)? {
        let size = std::fs::metadata(&p)?.len();
        eprintln!(
            "image: {} ({:.1} MiB, loads as {}; `podman load -i {}`)",
            p.display(),
            size as f64 / 1_048_576.0,
            reference(),
            p.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
