//! Install what tracer needs on a fresh machine of this kind (Debian 12,
//! rustup with stable and nightly): Debian packages, the nightly rust-src,
//! bpf-linker 0.13 against LLVM 22, and the kernel filesystems. Each step is
//! checked first, so a second run does nothing and is fast.

use std::{path::Path, process::Command, process::ExitCode};

use anyhow::{Result, bail};

use crate::cmd::{is_root, ok, output, run as sh};

/// Debian packages: LLVM 22 for bpf-linker, and the network tools the
/// tests and demo drive (iproute2, iptables/nft, bpftool, tc, dnsmasq).
pub(crate) const APT: &[&str] = &[
    "llvm-22-dev",
    "libclang-cpp22-dev",
    "libpolly-22-dev",
    "zlib1g-dev",
    "libzstd-dev",
    "iproute2",
    "iptables",
    "nftables",
    "bpftool",
    "tcpdump",
    // Reads back `--pcap` files in the pcap test (its debconf question,
    // whether non-root users may capture, is answered by the default
    // under DEBIAN_FRONTEND=noninteractive).
    "tshark",
    "iperf3",
    "util-linux",
    // The node-local DNS scene (`dns_node_local`) answers with a real
    // server: dnsmasq-base is the binary alone, no system service that
    // would start on install.
    "dnsmasq-base",
    // The image test: podman loads and runs `cargo xtask image`'s archive
    // (runc: crun refuses this machine's hybrid cgroups).
    "podman",
    "runc",
];

const BPF_LINKER: &str = "0.13.0";

fn installed(pkg: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
        .contains("install ok installed")
}

fn apt() -> Result<()> {
    let missing: Vec<&str> = APT.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        eprintln!("setup: apt packages present");
        return Ok(());
    }
    if !is_root() {
        bail!("missing Debian packages {missing:?}: run `cargo xtask setup` as root");
    }
    eprintln!("setup: installing {missing:?}");
    sh(Command::new("apt-get").arg("update").arg("-q"))?;
    sh(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn rust() -> Result<()> {
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]));
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        eprintln!("setup: installing the nightly toolchain");
        sh(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let nightly = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]));
    if !nightly.lines().any(|l| l.starts_with("rust-src")) {
        sh(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    let stable = output(Command::new("rustup").args(["component", "list", "--installed"]));
    for c in ["clippy", "rustfmt"] {
        if !stable.lines().any(|l| l.starts_with(c)) {
            sh(Command::new("rustup").args(["component", "add", c]))?;
        }
    }
    let nightly_tools = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]));
    if !nightly_tools.lines().any(|l| l.starts_with("clippy")) {
        sh(Command::new("rustup").args(["component", "add", "clippy", "--toolchain", "nightly"]))?;
    }
    // The static release binaries (`cargo xtask dist`): musl std for both
    // architectures; aarch64 links with rustup's rust-lld.
    let targets = output(Command::new("rustup").args(["target", "list", "--installed"]));
    for (t, _) in crate::dist::TARGETS {
        if !targets.lines().any(|l| l.trim() == *t) {
            sh(Command::new("rustup").args(["target", "add", t]))?;
        }
    }
    eprintln!("setup: rust toolchains ready");
    Ok(())
}

fn bpf_linker() -> Result<()> {
    let have = output(Command::new("bpf-linker").arg("--version"));
    if have.contains(BPF_LINKER) {
        eprintln!("setup: {}", have.trim());
        return Ok(());
    }
    eprintln!("setup: building bpf-linker {BPF_LINKER} against LLVM 22 (takes a few minutes)");
    let path = format!(
        "/usr/lib/llvm-22/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    sh(Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER,
            "--locked",
            "--no-default-features",
            "--features",
            "llvm-22",
        ])
        .env("LLVM_PREFIX", "/usr/lib/llvm-22")
        .env("PATH", path))
}

fn mounted(path: &str) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .is_ok_and(|m| m.lines().any(|l| l.split_whitespace().nth(1) == Some(path)))
}

fn mounts() {
    if !is_root() {
        return;
    }
    for (fs, path) in [
        ("bpf", "/sys/fs/bpf"),
        ("tracefs", "/sys/kernel/tracing"),
        ("debugfs", "/sys/kernel/debug"),
        ("securityfs", "/sys/kernel/security"),
    ] {
        if !mounted(path) && Path::new(path).exists() {
            let done = ok(Command::new("mount").args(["-t", fs, fs, path]));
            eprintln!(
                "setup: mount {fs} on {path}: {}",
                if done { "ok" } else { "not possible here" }
            );
        }
    }
}

pub(crate) fn ensure() -> Result<()> {
    // The toolchains download while apt installs (both mostly wait on the
    // network and the disk on a new machine); bpf-linker needs both.
    let toolchains = std::thread::spawn(rust);
    let packages = apt();
    toolchains
        .join()
        .map_err(|_| anyhow::anyhow!("setup: the toolchain thread panicked"))??;
    packages?;
    bpf_linker()?;
    mounts();
    Ok(())
}

pub(crate) fn run_setup() -> Result<()> {
    ensure()?;
    eprintln!("setup: done");
    Ok(())
}

pub(crate) fn run() -> Result<ExitCode> {
    run_setup()?;
    Ok(ExitCode::SUCCESS)
}
