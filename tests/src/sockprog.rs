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

/// The socket call a [`SockLb`] program rewrites.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Call {
    /// connect(2): a connect4/connect6 program (TCP and connected UDP).
    Connect,
    /// sendto/sendmsg/sendmmsg(2) of UDP with an address: a
    /// sendmsg4/sendmsg6 program.
    Sendmsg,
}

/// A cgroup (below the cgroup2 mount) whose sockets' `call` to `vip`
/// goes to `backend` instead, by a program named `name` (connect4,
/// connect6, sendmsg4 or sendmsg6, by the call and the family).
pub struct SockLb {
    pub cgroup: PathBuf,
    fd: RawFd,
}

/// enum bpf_attach_type (include/uapi/linux/bpf.h).
const BPF_CGROUP_INET6_CONNECT: u32 = 11;
const BPF_CGROUP_UDP4_SENDMSG: u32 = 14;
const BPF_CGROUP_UDP6_SENDMSG: u32 = 15;

/// A program that sets a struct bpf_sock_addr's address and port to
/// `backend`'s when its address is `vip`'s: user_ip4 at 4, user_ip6 at 8
/// (four words), user_port at 24, all in network order.
fn rewriter(vip: std::net::SocketAddr, backend: std::net::SocketAddr) -> Vec<u8> {
    let words = |a: std::net::IpAddr| -> Vec<i32> {
        match a {
            std::net::IpAddr::V4(a) => vec![le(a)],
            std::net::IpAddr::V6(a) => a
                .octets()
                .chunks(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        }
    };
    let (vw, bw) = (words(vip.ip()), words(backend.ip()));
    let base: i16 = if vip.is_ipv4() { 4 } else { 8 };
    let n = vw.len() as i16;
    let mut p = Vec::new();
    for (i, w) in vw.iter().enumerate() {
        let i = i as i16;
        p.push(insn(0x61, 2, 1, base + 4 * i, 0)); // r2 = ctx->user_ip[i]
        // if w2 != vip[i] goto out (after the rest of the compares, the
        // stores and the port's two).
        p.push(insn(0x56, 2, 0, 2 * (n - 1 - i) + 2 * n + 2, *w));
    }
    for (i, w) in bw.iter().enumerate() {
        let i = i as i16;
        p.push(insn(0xb4, 3, 0, 0, *w)); // w3 = backend[i]
        p.push(insn(0x63, 1, 3, base + 4 * i, 0)); // ctx->user_ip[i] = r3
    }
    p.push(insn(0xb4, 3, 0, 0, i32::from(backend.port().to_be()))); // w3 = port
    p.push(insn(0x63, 1, 3, 24, 0)); // ctx->user_port = r3
    p.push(insn(0xb7, 0, 0, 0, 1)); // out: r0 = 1 (allow)
    p.push(insn(0x95, 0, 0, 0, 0));
    p.concat()
}

impl SockLb {
    pub fn install(
        vip: std::net::SocketAddr,
        backend: std::net::SocketAddr,
        name: &str,
        call: Call,
    ) -> Result<SockLb> {
        let attach = match (call, vip.is_ipv4()) {
            (Call::Connect, true) => BPF_CGROUP_INET4_CONNECT,
            (Call::Connect, false) => BPF_CGROUP_INET6_CONNECT,
            (Call::Sendmsg, true) => BPF_CGROUP_UDP4_SENDMSG,
            (Call::Sendmsg, false) => BPF_CGROUP_UDP6_SENDMSG,
        };
        let fd = load(
            BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
            attach,
            &rewriter(vip, backend),
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
        attr[8..12].copy_from_slice(&attach.to_le_bytes());
        bpf(BPF_PROG_ATTACH, &mut attr).context("BPF_PROG_ATTACH sock_addr")?;
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
