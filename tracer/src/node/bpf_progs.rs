//! BPF programs of others that decide a packet's fate before or beside
//! tracer's hooks: cgroup programs (sock_addr ones rewrite a socket's
//! destination in connect()/sendmsg() before any packet exists, as
//! Cilium's and Calico's socket load balancing do; cgroup_skb ones drop)
//! and XDP programs on a namespace's devices. Read with BPF_PROG_QUERY on
//! every cgroup of the node's cgroup2 hierarchy and RTM_GETLINK's
//! IFLA_XDP; tracer's own programs (`tracer_*`) are left out.

use std::{
    ops::ControlFlow,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// One attached program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttachedProgram {
    pub id: u32,
    /// The program's name as the kernel keeps it (16 bytes at most).
    pub name: String,
    /// The hook: `connect4`, `sendmsg6`, `cgroup_skb egress`, `xdp` ...
    pub hook: String,
    /// Where it is attached: the cgroup (path below the cgroup2 mount),
    /// or `DEV (mode)` for XDP.
    pub at: String,
}

/// Cgroup attach types worth naming (`enum bpf_attach_type`,
/// include/uapi/linux/bpf.h), with how they are shown.
const CGROUP_HOOKS: &[(u32, &str)] = &[
    (0, "cgroup_skb ingress"),
    (1, "cgroup_skb egress"),
    (10, "connect4"),
    (11, "connect6"),
    (14, "sendmsg4"),
    (15, "sendmsg6"),
    (19, "recvmsg4"),
    (20, "recvmsg6"),
    (29, "getpeername4"),
    (30, "getpeername6"),
];

/// At most this many cgroups are queried (a node has one per pod and
/// container; a walk past this says so in the result's `truncated`).
const MAX_CGROUPS: usize = 20_000;

/// The cgroup2 mount of this mount namespace (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` with hybrid cgroups), from /proc/self/mounts.
pub fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2"))
            .then(|| f.get(1).map(PathBuf::from))
            .flatten()
    })
}

/// The programs attached (directly, not inherited) to `root` and every
/// cgroup below it, for the hooks of [`CGROUP_HOOKS`]; and whether the
/// walk stopped at [`MAX_CGROUPS`].
pub fn cgroup_programs(root: &Path) -> (Vec<AttachedProgram>, bool) {
    let mut out = Vec::new();
    let truncated = walk_cgroups(root, |dir| {
        out.extend(attached_to(root, dir, |_| true));
        ControlFlow::Continue(())
    });
    (out, truncated)
}

/// Visit `root` and every cgroup below it (depth first) until `visit`
/// breaks; true when the walk stopped at [`MAX_CGROUPS`].
fn walk_cgroups(root: &Path, mut visit: impl FnMut(&Path) -> ControlFlow<()>) -> bool {
    let mut dirs = vec![root.to_path_buf()];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        seen += 1;
        if seen > MAX_CGROUPS {
            return true;
        }
        if visit(&dir).is_break() {
            return false;
        }
        if let Ok(rd) = std::fs::read_dir(&dir) {
            dirs.extend(
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    false
}

/// The programs of others attached directly to cgroup `dir` for the
/// hooks of [`CGROUP_HOOKS`] whose attach type `keep` takes; `at` is the
/// cgroup's path below `root`.
fn attached_to(root: &Path, dir: &Path, keep: impl Fn(u32) -> bool) -> Vec<AttachedProgram> {
    let Ok(fd) = std::fs::File::open(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (attach, hook) in CGROUP_HOOKS.iter().filter(|(a, _)| keep(*a)) {
        for id in prog_query(fd.as_raw_fd(), *attach) {
            let name = prog_name(id).unwrap_or_default();
            if name.starts_with("tracer_") {
                continue;
            }
            out.push(AttachedProgram {
                id,
                name,
                hook: (*hook).to_string(),
                at: below(root, dir),
            });
        }
    }
    out
}

/// `dir` as a path below the cgroup2 mount `root` (`/` for the root).
fn below(root: &Path, dir: &Path) -> String {
    format!("/{}", dir.strip_prefix(root).unwrap_or(dir).display())
}

/// A cgroup (its path below the cgroup2 mount) and the socket-address
/// programs (connect, sendmsg, recvmsg hooks) attached to it or to a
/// cgroup above it: those a socket call of a task in it runs through
/// (BPF_F_ALLOW_MULTI programs of every ancestor take part; a program
/// attached without it below overrides the ones above).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CgroupPrograms {
    pub path: String,
    pub programs: Vec<AttachedProgram>,
}

/// The [`CgroupPrograms`] of the cgroup whose id (the kernfs inode of its
/// directory, what bpf_get_current_cgroup_id() returns) is `id`; None
/// when no such cgroup is below the cgroup2 mount now (the task's cgroup
/// was removed, or the walk stopped at [`MAX_CGROUPS`]).
pub fn cgroup_sock_programs(id: u64) -> Option<CgroupPrograms> {
    use std::os::unix::fs::MetadataExt;
    let root = cgroup2_root()?;
    let mut found = None;
    walk_cgroups(&root, |dir| {
        if std::fs::metadata(dir).is_ok_and(|m| m.ino() == id) {
            found = Some(dir.to_path_buf());
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    let found = found?;
    let programs = found
        .ancestors()
        .take_while(|d| d.starts_with(&root))
        .flat_map(|d| attached_to(&root, d, is_sock_addr_attach))
        .collect();
    Some(CgroupPrograms {
        path: below(&root, &found),
        programs,
    })
}

/// The cgroup_skb programs of the node (BPF_CGROUP_INET_INGRESS and
/// _EGRESS, attached anywhere in the cgroup2 hierarchy: systemd's
/// IPAddressDeny=/IPAddressAllow= as `sd_fw_ingress`/`sd_fw_egress`, a
/// dataplane's or a security agent's), and the paths of the cgroups whose
/// ids are `ids` (the cgroups of the sockets concerned), in one walk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupSkb {
    pub programs: Vec<AttachedProgram>,
    /// Cgroup id (the kernfs inode of its directory) -> path below the
    /// cgroup2 mount.
    pub paths: std::collections::BTreeMap<u64, String>,
    /// The ids asked for (found or not).
    #[serde(default)]
    pub asked: Vec<u64>,
    /// The walk stopped at [`MAX_CGROUPS`].
    #[serde(default)]
    pub truncated: bool,
}

/// [`CgroupSkb`] of the node, the cgroups `ids` named.
pub fn cgroup_skb(ids: &[u64]) -> CgroupSkb {
    use std::os::unix::fs::MetadataExt;
    let Some(root) = cgroup2_root() else {
        return CgroupSkb::default();
    };
    let (mut programs, mut paths) = (Vec::new(), std::collections::BTreeMap::new());
    let truncated = walk_cgroups(&root, |dir| {
        // BPF_CGROUP_INET_INGRESS (0) and BPF_CGROUP_INET_EGRESS (1).
        programs.extend(attached_to(&root, dir, |a| a == 0 || a == 1));
        if !ids.is_empty()
            && let Ok(m) = std::fs::metadata(dir)
            && ids.contains(&m.ino())
        {
            paths.insert(m.ino(), below(&root, dir));
        }
        ControlFlow::Continue(())
    });
    CgroupSkb {
        programs,
        paths,
        asked: ids.to_vec(),
        truncated,
    }
}

/// Is cgroup `path` (below the cgroup2 mount) `at` or below it? A
/// cgroup_skb program attached at `at` runs for the sockets of `path`
/// (with BPF_F_ALLOW_MULTI, as systemd attaches, every ancestor's runs).
pub fn under(path: &str, at: &str) -> bool {
    at == "/" || path == at || path.starts_with(&format!("{}/", at.trim_end_matches('/')))
}

/// The kinds of programs of others loaded on the node that decide which
/// of tracer's hooks and code a run needs (read once at start).
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadedKinds {
    /// A cgroup socket-address program (BPF_PROG_TYPE_CGROUP_SOCK_ADDR:
    /// connect, sendmsg, recvmsg, bind, getpeername hooks).
    pub sock_addr: bool,
    /// An XDP program of others: only then can the xdp tracepoints fire
    /// for a followed packet (tracer has no XDP program of its own).
    /// tracer's own `tracer_*` programs are not counted.
    pub xdp: bool,
}

/// [`LoadedKinds`], from one walk of the loaded programs
/// (BPF_PROG_GET_NEXT_ID): a node with Cilium has hundreds.
pub fn loaded_kinds() -> LoadedKinds {
    let mut k = LoadedKinds::default();
    for p in aya::programs::loaded_programs().flatten() {
        // enum bpf_prog_type (include/uapi/linux/bpf.h).
        match p.program_type() as u32 {
            BPF_PROG_TYPE_CGROUP_SOCK_ADDR => k.sock_addr = true,
            BPF_PROG_TYPE_XDP if !p.name_as_str().is_some_and(|n| n.starts_with("tracer_")) => {
                k.xdp = true;
            }
            _ => {}
        }
    }
    k
}

const BPF_PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
const BPF_PROG_TYPE_XDP: u32 = 6;

/// connect4/6, sendmsg4/6, recvmsg4/6 (enum bpf_attach_type).
fn is_sock_addr_attach(attach: u32) -> bool {
    matches!(attach, 10 | 11 | 14 | 15 | 19 | 20)
}

/// BPF_PROG_QUERY (bpf(2) command 16) of `target_fd` for `attach_type`:
/// the ids of the programs attached there. `union bpf_attr`'s query
/// member: target_fd, attach_type, query_flags, attach_flags, prog_ids
/// (pointer), prog_cnt.
fn prog_query(target_fd: i32, attach_type: u32) -> Vec<u32> {
    const BPF_PROG_QUERY: libc::c_long = 16;
    let mut ids = [0u32; 64];
    let mut attr = [0u8; 40];
    attr[0..4].copy_from_slice(&target_fd.to_ne_bytes());
    attr[4..8].copy_from_slice(&attach_type.to_ne_bytes());
    attr[16..24].copy_from_slice(&(ids.as_mut_ptr() as u64).to_ne_bytes());
    attr[24..28].copy_from_slice(&(ids.len() as u32).to_ne_bytes());
    // SAFETY: attr is a valid bpf_attr prefix of the size passed; the
    // kernel writes at most prog_cnt ids into `ids`, which outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_QUERY,
            attr.as_mut_ptr(),
            attr.len() as u32,
        )
    };
    if r < 0 {
        return Vec::new();
    }
    let n = u32::from_ne_bytes(attr[24..28].try_into().expect("4 bytes")) as usize;
    ids[..n.min(ids.len())].to_vec()
}

/// The name of loaded program `id`.
fn prog_name(id: u32) -> Option<String> {
    aya::programs::loaded_programs()
        .flatten()
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_string))
}

/// The XDP programs on the devices of this thread's namespace: one
/// RTM_GETLINK dump, IFLA_XDP's nested IFLA_XDP_ATTACHED and the program
/// ids per mode (include/uapi/linux/if_link.h).
pub fn xdp_programs() -> Vec<AttachedProgram> {
    const IFLA_XDP: u16 = 43;
    const IFLA_XDP_PROG_ID: u16 = 4;
    const IFLA_XDP_DRV_PROG_ID: u16 = 5;
    const IFLA_XDP_SKB_PROG_ID: u16 = 6;
    const IFLA_XDP_HW_PROG_ID: u16 = 7;
    let mut found: Vec<(String, u32, &str)> = Vec::new();
    let _ = super::link::each_link(&mut |dev, attrs| {
        let Some(xdp) = super::netlink::attr(attrs, IFLA_XDP) else {
            return;
        };
        let mut modes = Vec::new();
        for (aty, data) in super::netlink::attrs(xdp) {
            let mode = match aty {
                IFLA_XDP_DRV_PROG_ID => "driver",
                IFLA_XDP_SKB_PROG_ID => "generic",
                IFLA_XDP_HW_PROG_ID => "offload",
                IFLA_XDP_PROG_ID => "",
                _ => continue,
            };
            if let Some(id) = super::netlink::ne32(data).filter(|id| *id != 0) {
                modes.push((id, mode));
            }
        }
        // IFLA_XDP_PROG_ID repeats the one program of a single mode.
        let named: Vec<(u32, &str)> = modes.iter().filter(|m| !m.1.is_empty()).copied().collect();
        let list = if named.is_empty() { modes } else { named };
        found.extend(list.into_iter().map(|(id, m)| (dev.to_string(), id, m)));
    });
    found
        .into_iter()
        .map(|(dev, id, mode)| AttachedProgram {
            id,
            name: prog_name(id).unwrap_or_default(),
            hook: "xdp".into(),
            at: if mode.is_empty() {
                dev
            } else {
                format!("{dev} ({mode})")
            },
        })
        .collect()
}

/// [`xdp_programs`] of the namespace at `path`.
pub fn xdp_programs_in(path: &Path) -> Vec<AttachedProgram> {
    match super::netns::NetnsGuard::enter(path) {
        Ok(_g) => xdp_programs(),
        Err(_) => Vec::new(),
    }
}

/// The BPF programs on the tc hooks (clsact and tcx, both directions) of
/// every device of this thread's namespace (super::tc::bpf_programs).
pub fn tc_programs() -> Vec<AttachedProgram> {
    let mut devs = Vec::new();
    let _ = super::link::each_link(&mut |dev, _| devs.push(dev.to_string()));
    devs.iter()
        .flat_map(|d| super::tc::bpf_programs(d))
        .collect()
}

/// The BPF programs of others on device `dev` of the namespace at `path`:
/// its XDP programs ([`xdp_programs`]) and the programs on its tc hooks,
/// both directions (super::tc::bpf_programs). What may have dropped a
/// packet at that device's tc or XDP hook.
pub fn dev_programs_in(path: &Path, dev: &str) -> Vec<AttachedProgram> {
    let Ok(_g) = super::netns::NetnsGuard::enter(path) else {
        return Vec::new();
    };
    let mut out: Vec<AttachedProgram> = xdp_programs()
        .into_iter()
        .filter(|p| p.at == dev || p.at.starts_with(&format!("{dev} (")))
        .collect();
    out.extend(super::tc::bpf_programs(dev));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without privileges the query fails quietly: nothing, never an
    /// error; with them, tracer's own programs are never listed.
    #[test]
    fn queries_never_fail_loudly() {
        if let Some(root) = cgroup2_root() {
            let (progs, _) = cgroup_programs(&root);
            assert!(progs.iter().all(|p| !p.name.starts_with("tracer_")));
        }
        assert!(xdp_programs().iter().all(|p| p.hook == "xdp"));
    }
}
