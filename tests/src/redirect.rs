//! A tc program of the test's own, as Cilium's BPF host routing installs:
//! `bpf_redirect(ifindex, 0)` of everything arriving on a device to another
//! device's egress. Loaded with the raw bpf(2) syscall (4 instructions),
//! pinned in bpffs and attached with `tc filter ... bpf object-pinned`.

use std::{ffi::CString, os::fd::RawFd};

use anyhow::{Result, bail};

use crate::netns::Netns;

const BPF_PROG_LOAD: i64 = 5;
const BPF_OBJ_PIN: i64 = 6;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
/// bpf_redirect() helper id (include/uapi/linux/bpf.h).
const BPF_FUNC_REDIRECT: i32 = 23;

pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0x0f);
    b[2..4].copy_from_slice(&off.to_le_bytes());
    b[4..8].copy_from_slice(&imm.to_le_bytes());
    b
}

pub(crate) fn bpf(cmd: i64, attr: &mut [u8]) -> std::io::Result<i64> {
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Load a program named `name` that redirects IPv4 packets to `ifindex`'s
/// egress and lets everything else (ARP) through, as host routing does.
pub fn load_redirect(ifindex: u32, name: &str) -> Result<RawFd> {
    let prog: Vec<u8> = [
        insn(0x61, 2, 1, 16, 0),     // r2 = *(u32 *)(r1 + 16): __sk_buff.protocol
        insn(0x55, 2, 0, 4, 0x0008), // if r2 != htons(ETH_P_IP) goto +4
        insn(0xb7, 1, 0, 0, ifindex as i32), // mov64 r1, ifindex
        insn(0xb7, 2, 0, 0, 0),      // mov64 r2, 0 (egress)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT),
        insn(0x95, 0, 0, 0, 0), // exit: r0 = TC_ACT_REDIRECT
        insn(0xb7, 0, 0, 0, 0), // r0 = TC_ACT_OK
        insn(0x95, 0, 0, 0, 0), // exit
    ]
    .concat();
    load(BPF_PROG_TYPE_SCHED_CLS, 0, &prog, name)
}

/// BPF_PROG_LOAD of `prog` (raw instructions) as `prog_type`, with
/// `expected_attach_type` (cgroup sock_addr programs need theirs), named
/// `name`; the verifier's log in the error.
pub(crate) fn load(
    prog_type: u32,
    expected_attach_type: u32,
    prog: &[u8],
    name: &str,
) -> Result<RawFd> {
    raise_memlock();
    let license = CString::new("GPL").unwrap();
    // Room for the whole log of a program with helper calls (a 4 KiB
    // log made the load of blind_xdp's xdp_router fail).
    let mut log = vec![0u8; 1 << 20];
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&prog_type.to_le_bytes());
    attr[4..8].copy_from_slice(&((prog.len() / 8) as u32).to_le_bytes());
    attr[8..16].copy_from_slice(&(prog.as_ptr() as u64).to_le_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_le_bytes());
    attr[24..28].copy_from_slice(&1u32.to_le_bytes()); // log_level
    attr[28..32].copy_from_slice(&(log.len() as u32).to_le_bytes());
    attr[32..40].copy_from_slice(&(log.as_mut_ptr() as u64).to_le_bytes());
    let n = name.as_bytes();
    attr[48..48 + n.len().min(15)].copy_from_slice(&n[..n.len().min(15)]);
    attr[68..72].copy_from_slice(&expected_attach_type.to_le_bytes());
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(fd as RawFd),
        Err(e) => bail!(
            "BPF_PROG_LOAD: {e}: {}",
            String::from_utf8_lossy(&log).trim_end_matches('\0')
        ),
    }
}

/// No RLIMIT_MEMLOCK for this process's loads: before Linux 5.11 a
/// program's memory is charged to its user's locked memory
/// (bpf_prog_charge_memlock() in kernel/bpf/syscall.c, user->locked_vm),
/// which every process of that user shares, so a load after a running
/// tracer's (root's) maps failed with EPERM on 5.10 under the default
/// 8 MiB limit. What aya does for tracer (with_raised_rlimit_retry()).
fn raise_memlock() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit with a valid rlimit; failing leaves the limit.
    unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const unlimited);
    }
}

/// Pin `fd` at `path` (bpffs must be mounted).
pub fn pin(fd: RawFd, path: &str) -> Result<()> {
    let p = CString::new(path).unwrap();
    let mut attr = [0u8; 16];
    attr[0..8].copy_from_slice(&(p.as_ptr() as u64).to_le_bytes());
    attr[8..12].copy_from_slice(&(fd as u32).to_le_bytes());
    bpf(BPF_OBJ_PIN, &mut attr).map_err(|e| anyhow::anyhow!("BPF_OBJ_PIN {path}: {e}"))?;
    Ok(())
}

/// A redirect program attached to `dev`'s tc ingress in `ns`, sending
/// everything to `to_dev`'s egress. The pin is removed on drop; the filter
/// goes with the namespace.
pub struct Redirect {
    pin: String,
}

impl Redirect {
    pub fn install(ns: &Netns, dev: &str, to_dev: &str) -> Result<Redirect> {
        let idx = crate::bpfdrop::ifindex(ns, to_dev)?;
        if !std::path::Path::new("/sys/fs/bpf").join(".").exists() {
            bail!("bpffs is not mounted at /sys/fs/bpf (cargo xtask setup mounts it)");
        }
        let fd = load_redirect(idx, "hostroute_redir")?;
        let pin_path = format!("/sys/fs/bpf/{}-redir", ns.name);
        let _ = std::fs::remove_file(&pin_path);
        pin(fd, &pin_path)?;
        unsafe { libc::close(fd) };
        crate::bpfdrop::clsact_add(&ns.path(), dev)?;
        crate::bpfdrop::tc_filter_pinned(&ns.path(), dev, "ingress", &pin_path)?;
        Ok(Redirect { pin: pin_path })
    }
}

impl Drop for Redirect {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pin);
    }
}
