//! Dropping programs of the tests' own, as an eBPF dataplane enforces a
//! NetworkPolicy deny (Cilium's and Calico's tc programs on a pod's
//! host-side veth) or filters at XDP (Cilium's prefilter, Calico's XDP
//! do-not-track policy): a few raw instructions (as redirect.rs builds its
//! tc program) that drop IPv4 TCP or UDP to one destination port and let
//! everything else through (ARP too: the scene must fail at the program,
//! not at neighbour resolution). Attached by clsact (`tc filter ... bpf
//! direct-action object-pinned`), by a tcx link (BPF_LINK_CREATE, Linux
//! 6.6+) or as XDP, generic or native (veth runs native XDP); each is
//! removed on drop.

use std::os::fd::RawFd;

use anyhow::{Result, bail};

use crate::{
    netns::Netns,
    redirect::{bpf, insn, load, pin},
};

/// include/uapi/linux/bpf.h
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_LINK_CREATE: i64 = 28;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;

/// The program's hook type: tc (`struct __sk_buff`: data at 76, data_end
/// at 80; TC_ACT_SHOT 2, TC_ACT_UNSPEC -1) or XDP (`struct xdp_md`: data
/// at 0, data_end at 4; XDP_DROP 1, XDP_PASS 2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hook {
    Tc,
    Xdp,
}

/// IPPROTO_TCP / IPPROTO_UDP.
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

/// Drop IPv4 packets of `proto` to destination port `port` (a 20-byte IP
/// header assumed: the tests' packets have no options), pass the rest.
fn port_dropper(hook: Hook, proto: u8, port: u16) -> Vec<u8> {
    let drop = match hook {
        Hook::Tc => 2,
        Hook::Xdp => 1,
    };
    port_program(hook, proto, port, &[insn(0xb7, 0, 0, 0, drop)])
}

/// What an XDP program of [`Dropper::xdp`] does with the packets it
/// matches (enum xdp_action).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum XdpVerdict {
    /// XDP_ABORTED: the program's error exit.
    Aborted,
    /// XDP_TX: back out the device it came in on, unchanged.
    Tx,
    /// bpf_redirect(ifindex, 0): XDP_REDIRECT to that device of the
    /// program's namespace.
    Redirect(u32),
    /// bpf_redirect_map(map, key, 0): XDP_REDIRECT to the device a device
    /// map (its fd here, as the loader holds it) has at `key`.
    RedirectMap { map_fd: RawFd, key: u32 },
}

/// A program that runs `hit` (which leaves its return value in r0) for
/// IPv4 packets of `proto` to destination port `port`, and passes the
/// rest.
fn port_program(hook: Hook, proto: u8, port: u16, hit: &[[u8; 8]]) -> Vec<u8> {
    let (data, end, pass) = match hook {
        Hook::Tc => (76, 80, -1),
        Hook::Xdp => (0, 4, 2),
    };
    // A little-endian u16 load of the port's two network-order bytes.
    let port_le = i32::from(port.swap_bytes());
    // The jumps to `pass` skip the hit's instructions and its exit.
    let skip = hit.len() as i16 + 1;
    let mut p = vec![
        insn(0x61, 2, 1, data, 0),                    // r2 = data
        insn(0x61, 3, 1, end, 0),                     // r3 = data_end
        insn(0xbf, 4, 2, 0, 0),                       // r4 = r2
        insn(0x07, 4, 0, 0, 38),                      // r4 += 14 + 20 + 4 (through the ports)
        insn(0x2d, 4, 3, 6 + skip, 0),                // if r4 > r3 goto pass
        insn(0x69, 5, 2, 12, 0),                      // r5 = *(u16 *)(r2 + 12): EtherType
        insn(0x55, 5, 0, 4 + skip, 0x0008),           // if r5 != htons(ETH_P_IP) goto pass
        insn(0x71, 5, 2, 23, 0),                      // r5 = *(u8 *)(r2 + 23): protocol
        insn(0x55, 5, 0, 2 + skip, i32::from(proto)), // if r5 != proto goto pass
        insn(0x69, 5, 2, 36, 0),                      // r5 = *(u16 *)(r2 + 36): dest port
        insn(0x55, 5, 0, skip, port_le),              // if r5 != port goto pass
    ];
    p.extend_from_slice(hit);
    p.extend([
        insn(0x95, 0, 0, 0, 0),    // exit
        insn(0xb7, 0, 0, 0, pass), // pass: r0 = pass
        insn(0x95, 0, 0, 0, 0),    // exit
    ]);
    p.concat()
}

/// The instructions of an XDP program's matched packets for `v`.
fn xdp_hit(v: XdpVerdict) -> Vec<[u8; 8]> {
    match v {
        XdpVerdict::Aborted => vec![insn(0xb7, 0, 0, 0, 0)],
        XdpVerdict::Tx => vec![insn(0xb7, 0, 0, 0, 3)],
        XdpVerdict::Redirect(ifindex) => vec![
            insn(0xb7, 1, 0, 0, ifindex as i32), // r1 = ifindex
            insn(0xb7, 2, 0, 0, 0),              // r2 = 0 (flags)
            insn(0x85, 0, 0, 0, 23),             // call bpf_redirect
        ],
        XdpVerdict::RedirectMap { map_fd, key } => vec![
            insn(0x18, 1, 1, 0, map_fd), // r1 = the map (ld_imm64, BPF_PSEUDO_MAP_FD)
            insn(0x00, 0, 0, 0, 0),      // (its upper half)
            insn(0xb7, 2, 0, 0, key as i32), // r2 = key
            insn(0xb7, 3, 0, 0, 0),      // r3 = 0 (flags)
            insn(0x85, 0, 0, 0, 51),     // call bpf_redirect_map
        ],
    }
}

/// How a dropper is attached.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Attach {
    /// A clsact filter (`tc filter add dev D ingress|egress bpf da`).
    Clsact { ingress: bool },
    /// A tcx link (Linux 6.6+), appended after the hook's programs.
    Tcx { ingress: bool },
    /// Generic XDP (`ip link set dev D xdpgeneric`).
    XdpGeneric,
    /// Native (driver) XDP (`ip link set dev D xdpdrv`): veth runs it in
    /// its NAPI poll, veth_xdp_rcv(), before the skb enters the stack.
    XdpDriver,
}

impl Attach {
    /// `ip link`'s keyword for an XDP attachment's mode.
    fn xdp_mode(self) -> Option<&'static str> {
        match self {
            Attach::XdpGeneric => Some("xdpgeneric"),
            Attach::XdpDriver => Some("xdpdrv"),
            Attach::Clsact { .. } | Attach::Tcx { .. } => None,
        }
    }
}

/// A dropping program attached to a device of a namespace; detached on
/// drop (the tcx link's fd closed, the XDP program and the clsact qdisc
/// removed, the pin unlinked).
pub struct Dropper {
    ns: String,
    dev: String,
    attach: Attach,
    pin: Option<String>,
    link: Option<RawFd>,
}

impl Dropper {
    /// Attach a program named `name` (at most 15 bytes are kept) dropping
    /// IPv4 `proto` to `port` on `dev` of `ns`.
    pub fn install(
        ns: &Netns,
        dev: &str,
        attach: Attach,
        name: &str,
        proto: u8,
        port: u16,
    ) -> Result<Dropper> {
        if !std::path::Path::new("/sys/fs/bpf").join(".").exists() {
            bail!("bpffs is not mounted at /sys/fs/bpf (cargo xtask setup mounts it)");
        }
        let (hook, prog_type) = match attach.xdp_mode() {
            Some(_) => (Hook::Xdp, BPF_PROG_TYPE_XDP),
            None => (Hook::Tc, BPF_PROG_TYPE_SCHED_CLS),
        };
        Dropper::with_program(
            ns,
            dev,
            attach,
            prog_type,
            &port_dropper(hook, proto, port),
            name,
        )
    }

    /// Attach a generic XDP program named `name` that does `v` with IPv4
    /// `proto` to `port` on `dev` of `ns`, and passes the rest.
    pub fn xdp(
        ns: &Netns,
        dev: &str,
        name: &str,
        proto: u8,
        port: u16,
        v: XdpVerdict,
    ) -> Result<Dropper> {
        Dropper::xdp_as(ns, dev, Attach::XdpGeneric, name, proto, port, v)
    }

    /// [`Dropper::xdp`], attached as `attach` says (generic or native).
    pub fn xdp_as(
        ns: &Netns,
        dev: &str,
        attach: Attach,
        name: &str,
        proto: u8,
        port: u16,
        v: XdpVerdict,
    ) -> Result<Dropper> {
        if attach.xdp_mode().is_none() {
            bail!("{attach:?} is not an XDP attachment");
        }
        let prog = port_program(Hook::Xdp, proto, port, &xdp_hit(v));
        Dropper::with_program(ns, dev, attach, BPF_PROG_TYPE_XDP, &prog, name)
    }

    /// Load `prog` as `prog_type` named `name` and attach it to `dev` of
    /// `ns` as `attach` says.
    fn with_program(
        ns: &Netns,
        dev: &str,
        attach: Attach,
        prog_type: u32,
        prog: &[u8],
        name: &str,
    ) -> Result<Dropper> {
        let fd = load(prog_type, 0, prog, name)?;
        let mut d = Dropper {
            ns: ns.path(),
            dev: dev.into(),
            attach,
            pin: None,
            link: None,
        };
        let done = d.attach(fd, ns);
        unsafe { libc::close(fd) };
        done?;
        Ok(d)
    }

    fn attach(&mut self, fd: RawFd, ns: &Netns) -> Result<()> {
        let dev = self.dev.clone();
        match self.attach {
            Attach::Tcx { ingress } => {
                let ifindex = ifindex(ns, &dev)?;
                self.link = Some(tcx_link(&self.ns, fd, ifindex, !ingress)?);
            }
            Attach::Clsact { ingress } => {
                let p = self.pin_at(fd, ns)?;
                // The qdisc may be there already (another program's).
                let _ = clsact_add(&self.ns, &dev);
                let dir = if ingress { "ingress" } else { "egress" };
                tc_filter_pinned(&self.ns, &dev, dir, &p)?;
            }
            Attach::XdpGeneric | Attach::XdpDriver => {
                let p = self.pin_at(fd, ns)?;
                xdp_pinned(&self.ns, &dev, self.attach, &p)?;
            }
        }
        Ok(())
    }

    /// Pin `fd` under bpffs for `tc`/`ip` to attach; unlinked on drop.
    fn pin_at(&mut self, fd: RawFd, ns: &Netns) -> Result<String> {
        let p = format!("/sys/fs/bpf/{}-{}-drop", ns.name, self.dev);
        let _ = std::fs::remove_file(&p);
        pin(fd, &p)?;
        self.pin = Some(p.clone());
        Ok(p)
    }
}

/// A tcx link of program `fd` on device `ifindex` of the namespace at
/// `netns`, on its egress hook or its ingress one: BPF_LINK_CREATE takes
/// the ifindex in the caller's namespace, so it is made from a thread
/// that entered that one (setns() moves only the calling thread). The
/// link's fd is the process's; closing it (and unpinning it, if pinned)
/// detaches the program.
pub(crate) fn tcx_link(netns: &str, fd: RawFd, ifindex: u32, egress: bool) -> Result<RawFd> {
    let ty = if egress {
        BPF_TCX_EGRESS
    } else {
        BPF_TCX_INGRESS
    };
    in_netns(netns, || {
        let mut attr = [0u8; 64];
        attr[0..4].copy_from_slice(&(fd as u32).to_le_bytes());
        attr[4..8].copy_from_slice(&ifindex.to_le_bytes());
        attr[8..12].copy_from_slice(&ty.to_le_bytes());
        let link = bpf(BPF_LINK_CREATE, &mut attr)
            .map_err(|e| anyhow::anyhow!("BPF_LINK_CREATE (tcx) in {netns}: {e}"))?;
        Ok(link as RawFd)
    })
}

/// `f` run by a thread that entered the namespace at `netns` (setns()
/// moves only the calling thread): for what the kernel resolves in the
/// caller's namespace, an ifindex above all (BPF_LINK_CREATE, a device
/// map's update, dev_map_update_elem()).
pub(crate) fn in_netns<T: Send>(netns: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let ns = std::fs::File::open(netns)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::fd::AsRawFd;
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                bail!("setns {netns}: {}", std::io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| bail!("the thread in {netns} panicked"))
    })
}

/// `args` run in the namespace at `netns` by nsenter, not `ip netns
/// exec`: the latter remounts /sys, hiding bpffs (and the pins on it).
pub(crate) fn nsenter(netns: &str, args: &[&str]) -> Result<std::process::Output> {
    let net = format!("--net={netns}");
    let mut cmd = vec!["nsenter", net.as_str()];
    cmd.extend_from_slice(args);
    crate::netns::run(&cmd)
}

/// The program pinned at `pin` as a direct-action `bpf` filter on `dev`'s
/// clsact `dir` (ingress, egress) in the namespace at `netns`.
pub(crate) fn tc_filter_pinned(netns: &str, dev: &str, dir: &str, pin: &str) -> Result<()> {
    nsenter(
        netns,
        &[
            "tc",
            "filter",
            "add",
            "dev",
            dev,
            dir,
            "bpf",
            "direct-action",
            "object-pinned",
            pin,
        ],
    )?;
    Ok(())
}

/// `tc qdisc add dev DEV clsact` in the namespace at `netns`.
pub(crate) fn clsact_add(netns: &str, dev: &str) -> Result<()> {
    nsenter(netns, &["tc", "qdisc", "add", "dev", dev, "clsact"])?;
    Ok(())
}

/// The XDP program pinned at `pin` on `dev` of the namespace at `netns`,
/// in generic mode.
pub(crate) fn xdp_generic_pinned(netns: &str, dev: &str, pin: &str) -> Result<()> {
    xdp_pinned(netns, dev, Attach::XdpGeneric, pin)
}

/// The XDP program pinned at `pin` on `dev` of the namespace at `netns`,
/// in `attach`'s mode.
fn xdp_pinned(netns: &str, dev: &str, attach: Attach, pin: &str) -> Result<()> {
    let Some(mode) = attach.xdp_mode() else {
        bail!("{attach:?} is not an XDP attachment");
    };
    nsenter(
        netns,
        &["ip", "link", "set", "dev", dev, mode, "pinned", pin],
    )?;
    Ok(())
}

/// Detach the XDP program `attach` put on `dev` in the namespace at
/// `netns`.
fn xdp_off(netns: &str, dev: &str, attach: Attach) {
    if let Some(mode) = attach.xdp_mode() {
        let _ = nsenter(netns, &["ip", "link", "set", "dev", dev, mode, "off"]);
    }
}

/// Detach the generic XDP program of `dev` in the namespace at `netns`.
pub(crate) fn xdp_generic_off(netns: &str, dev: &str) {
    xdp_off(netns, dev, Attach::XdpGeneric);
}

/// `dev`'s ifindex in `ns`.
pub(crate) fn ifindex(ns: &Netns, dev: &str) -> Result<u32> {
    Ok(String::from_utf8_lossy(
        &ns.exec(&["cat", &format!("/sys/class/net/{dev}/ifindex")])?
            .stdout,
    )
    .trim()
    .parse()?)
}

impl Drop for Dropper {
    fn drop(&mut self) {
        match self.attach {
            Attach::Tcx { .. } => {}
            Attach::Clsact { .. } => {
                let _ = nsenter(
                    &self.ns,
                    &["tc", "qdisc", "del", "dev", &self.dev, "clsact"],
                );
            }
            Attach::XdpGeneric | Attach::XdpDriver => xdp_off(&self.ns, &self.dev, self.attach),
        }
        if let Some(fd) = self.link.take() {
            unsafe { libc::close(fd) };
        }
        if let Some(p) = self.pin.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Can this kernel attach tcx links (Linux 6.6+)?
pub fn tcx_supported() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 6)
}
