//! A pod as kubelet and the container runtime leave it on a node, made of
//! a namespace a test owns: a process living in the namespace, moved into
//! the pod's cgroup (systemd driver, containerd:
//! `kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podUID.slice/cri-containerd-ID.scope`,
//! the UID's `-` written `_`), and kubelet's directory of the pod,
//! `/var/log/pods/NAMESPACE_NAME_UID`.
//!
//! The cgroup tree goes in the cgroup v2 hierarchy (`/sys/fs/cgroup`, or
//! `/sys/fs/cgroup/unified` on a hybrid host), else in cgroup v1's
//! `name=systemd` one. Only what the fixture made is removed, on drop,
//! panics included: the process first, then the cgroup directories
//! (deepest first), then the log directory, and /var/log/pods when it
//! did not exist before.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::netns::{Child, Netns, unique_prefix};

/// Where kubelet keeps a directory per pod.
pub const POD_LOGS: &str = "/var/log/pods";

pub struct KubePod {
    /// The pod's namespace and name, as `tracer` shows it:
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    /// The process in the pod's namespace and cgroup (its sandbox).
    process: Option<Child>,
    /// Cgroup directories the fixture made, shallowest first.
    cgroups: Vec<PathBuf>,
    /// kubelet's directory of the pod, once made.
    log_dir: Option<PathBuf>,
    /// /var/log/pods was made by the fixture.
    made_pod_logs: bool,
}

/// The hierarchy the pod's cgroup goes in: cgroup v2's mount (the
/// unified one at /sys/fs/cgroup first), else cgroup v1's `name=systemd`.
pub fn cgroup_hierarchy() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let fields: Vec<Vec<&str>> = mounts
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| f.len() >= 4)
        .collect();
    let v2: Vec<&str> = fields
        .iter()
        .filter(|f| f[2] == "cgroup2")
        .map(|f| f[1])
        .collect();
    if let Some(p) = v2.iter().find(|p| **p == "/sys/fs/cgroup").or(v2.first()) {
        return Some(PathBuf::from(p));
    }
    fields
        .iter()
        .find(|f| f[2] == "cgroup" && f[3].split(',').any(|o| o == "name=systemd"))
        .map(|f| PathBuf::from(f[1]))
}

/// A fresh pod UID (a UUID, as the API server gives).
fn fresh_uid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let pid = u128::from(std::process::id());
    // Spread over all 128 bits (an odd multiplier).
    let x = (nanos ^ (pid << 40)).wrapping_mul(0x2545_f491_4f6c_dd1d_9e37_79b9_7f4a_7c15);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (x >> 96) as u32,
        (x >> 80) as u16,
        (x >> 64) as u16 & 0xfff,
        (x >> 48) as u16 & 0xfff,
        x as u64 & 0xffff_ffff_ffff
    )
}

/// The inode of a process's network namespace, from its `ns/net` link.
fn netns_of_pid(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|t| t.display().to_string())
}

impl KubePod {
    /// Make `netns` a pod: `sleep` started in it (`ip netns exec`), moved
    /// into a new besteffort pod's container cgroup, and the pod's
    /// directory under /var/log/pods. The pod is `e2e/c-PREFIX`.
    pub fn new(netns: &Netns) -> Result<KubePod> {
        let hierarchy = cgroup_hierarchy().context("no cgroup hierarchy mounted")?;
        let uid = fresh_uid();
        let mut pod = KubePod {
            pod: format!("e2e/c-{}", unique_prefix()),
            uid,
            process: None,
            cgroups: Vec::new(),
            log_dir: None,
            made_pod_logs: false,
        };
        // The sandbox: a process whose namespace is the pod's.
        let child = netns.spawn(&["sleep", "120"])?;
        let pid = child.0.id();
        pod.process = Some(child);
        let ino = std::fs::metadata(netns.path())
            .context("namespace inode")?
            .ino();
        let want = format!("net:[{ino}]");
        let deadline = Instant::now() + crate::scaled_ms(5000);
        while netns_of_pid(pid).as_deref() != Some(want.as_str()) {
            if Instant::now() > deadline {
                bail!("process {pid} never entered {} ({want})", netns.name);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // The cgroup tree, each level made unless it is there (a node's
        // own kubepods.slice is left alone).
        let u = pod.uid.replace('-', "_");
        // A container ID: 64 hex digits.
        let container = format!("{0}{0}", pod.uid.replace('-', ""));
        let mut dir = hierarchy;
        for level in [
            "kubepods.slice".to_string(),
            "kubepods-besteffort.slice".to_string(),
            format!("kubepods-besteffort-pod{u}.slice"),
            format!("cri-containerd-{container}.scope"),
        ] {
            dir.push(level);
            if !dir.exists() {
                std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
                pod.cgroups.push(dir.clone());
            }
        }
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("move {pid} to {}", dir.display()))?;
        // kubelet's directory of the pod.
        let logs = Path::new(POD_LOGS);
        if !logs.exists() {
            pod.made_pod_logs = true;
            std::fs::create_dir_all(logs).context("mkdir /var/log/pods")?;
        }
        let (ns, name) = pod.pod.split_once('/').expect("namespace/name");
        let log_dir = logs.join(format!("{ns}_{name}_{}", pod.uid));
        std::fs::create_dir(&log_dir).with_context(|| format!("mkdir {}", log_dir.display()))?;
        pod.log_dir = Some(log_dir);
        Ok(pod)
    }

    /// Everything the fixture made (to check it is gone after drop).
    pub fn made(&self) -> Vec<PathBuf> {
        let mut v = self.cgroups.clone();
        v.extend(self.log_dir.clone());
        if self.made_pod_logs {
            v.push(POD_LOGS.into());
        }
        v
    }
}

impl Drop for KubePod {
    fn drop(&mut self) {
        // The process first: a cgroup with a process in it stays.
        self.process = None;
        for dir in self.cgroups.iter().rev() {
            // An exiting process leaves its cgroup a moment after it is
            // reaped.
            let deadline = Instant::now() + Duration::from_secs(5);
            while let Err(e) = std::fs::remove_dir(dir) {
                if e.kind() == std::io::ErrorKind::NotFound || Instant::now() > deadline {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        eprintln!("could not remove cgroup {}: {e}", dir.display());
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some(d) = &self.log_dir {
            let _ = std::fs::remove_dir_all(d);
        }
        if self.made_pod_logs {
            // Only if nothing else was put there meanwhile.
            let _ = std::fs::remove_dir(POD_LOGS);
        }
    }
}
