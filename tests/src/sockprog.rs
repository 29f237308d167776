//! BPF programs of the tests' own, built as Cilium's and Calico's eBPF
//! dataplanes install theirs (raw instructions, as redirect.rs builds its
//! tc program): a cgroup connect4 program that rewrites a Service address
//! to a backend before any packet exists (socket-level load balancing),
//! and an XDP program on a device. Each is removed on drop: the cgroup
//! (emptied first) with its program, the XDP program with its device's
//! attachment.

use std::{os::fd::RawFd, path::PathBuf};

use anyhow::{Context, Result};

use crate::{
    netns::{Netns, unique_prefix},
    redirect::{bpf, insn, load},
};

/// include/uapi/linux/bpf.h
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
const BPF_CGROUP_INET4_CONNECT: u32 = 10;
const BPF_PROG_ATTACH: i64 = 8;

/// The bytes of `a` as the u32 a BPF load of them reads (little endian).
fn le(a: std::net::Ipv4Addr) -> i32 {
    i32::from_le_bytes(a.octets())
}

/// A cgroup (below the cgroup2 mount) whose sockets' connect() to `vip`
/// goes to `backend` instead, by a connect4 program named `name`.
pub struct SockLb {
    pub cgroup: PathBuf,
    fd: RawFd,
}

impl SockLb {
    pub fn install(
        vip: std::net::SocketAddrV4,
        backend: std::net::SocketAddrV4,
        name: &str,
    ) -> Result<SockLb> {
        let prog: Vec<u8> = [
            // struct bpf_sock_addr: user_ip4 at 4, user_port at 24 (both
            // network order).
            insn(0x61, 2, 1, 4, 0),                 // r2 = ctx->user_ip4
            insn(0x56, 2, 0, 4, le(*vip.ip())),     // if w2 != vip goto +4
            insn(0xb4, 3, 0, 0, le(*backend.ip())), // w3 = backend
            insn(0x63, 1, 3, 4, 0),                 // ctx->user_ip4 = r3
            insn(0xb4, 3, 0, 0, i32::from(backend.port().to_be())), // w3 = port
            insn(0x63, 1, 3, 24, 0),                // ctx->user_port = r3
            insn(0xb7, 0, 0, 0, 1),                 // r0 = 1: allow
            insn(0x95, 0, 0, 0, 0),
        ]
        .concat();
        let fd = load(
            BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
            BPF_CGROUP_INET4_CONNECT,
            &prog,
            name,
        )?;
        let root = cgroup2_root().context("no cgroup2 mount")?;
        let cgroup = root.join(format!("tracer-test-{}", unique_prefix()));
        std::fs::create_dir(&cgroup).with_context(|| format!("mkdir {}", cgroup.display()))?;
        let lb = SockLb { cgroup, fd };
        let dir = std::fs::File::open(&lb.cgroup)?;
        let mut attr = [0u8; 16];
        attr[0..4].copy_from_slice(&(std::os::fd::AsRawFd::as_raw_fd(&dir) as u32).to_le_bytes());
        attr[4..8].copy_from_slice(&(fd as u32).to_le_bytes());
        attr[8..12].copy_from_slice(&BPF_CGROUP_INET4_CONNECT.to_le_bytes());
        bpf(BPF_PROG_ATTACH, &mut attr).context("BPF_PROG_ATTACH connect4")?;
        Ok(lb)
    }

    /// Run `args` in `ns` as a process of this cgroup; its output.
    pub fn exec(&self, ns: &Netns, args: &[&str]) -> Result<std::process::Output> {
        let procs = self.cgroup.join("cgroup.procs");
        let script = format!(
            "echo $$ > '{}' && exec ip netns exec {} \"$@\"",
            procs.display(),
            ns.name
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &script, "sh"])
            .args(args)
            .output()?;
        Ok(out)
    }
}

impl Drop for SockLb {
    fn drop(&mut self) {
        // The processes it ran have exited: the empty cgroup goes, and its
        // program with it.
        let _ = std::fs::remove_dir(&self.cgroup);
        unsafe { libc::close(self.fd) };
    }
}

/// The cgroup2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` with
/// hybrid cgroups).
pub fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2"))
            .then(|| f.get(1).map(PathBuf::from))
            .flatten()
    })
}

/// An XDP program named `name` on `dev` of `ns` (generic mode) that
/// passes every packet; detached on drop.
pub struct Xdp {
    ns: String,
    dev: String,
    pin: String,
}

impl Xdp {
    pub fn install(ns: &Netns, dev: &str, name: &str) -> Result<Xdp> {
        let prog: Vec<u8> = [
            insn(0xb7, 0, 0, 0, 2), // r0 = XDP_PASS
            insn(0x95, 0, 0, 0, 0),
        ]
        .concat();
        let fd = load(BPF_PROG_TYPE_XDP, 0, &prog, name)?;
        let pin = format!("/sys/fs/bpf/{}-xdp", ns.name);
        let _ = std::fs::remove_file(&pin);
        let pinned = crate::redirect::pin(fd, &pin);
        unsafe { libc::close(fd) };
        pinned?;
        let x = Xdp {
            ns: ns.path(),
            dev: dev.into(),
            pin,
        };
        crate::bpfdrop::xdp_generic_pinned(&x.ns, dev, &x.pin)?;
        Ok(x)
    }
}

impl Drop for Xdp {
    fn drop(&mut self) {
        crate::bpfdrop::xdp_generic_off(&self.ns, &self.dev);
        let _ = std::fs::remove_file(&self.pin);
    }
}
