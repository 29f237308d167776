//! Pods by name, from the node alone (no Kubernetes API): the processes
//! in a network namespace (`/proc/PID/ns/net` links to `net:[INODE]`),
//! the pod UID in their cgroup path (kubelet's layouts), and the pod's
//! `namespace/name` from kubelet's log directories
//! (`/var/log/pods/NAMESPACE_NAME_UID`). Everything is read under the
//! node's root ([`crate::node::hostroot`]); whatever is missing or
//! unreadable names no pod, silently.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
};

/// Where kubelet keeps a directory per pod (`NAMESPACE_NAME_UID`).
pub const POD_LOGS: &str = "var/log/pods";

/// The namespace inode of a `/proc/PID/ns/net` link target
/// (`net:[4026532189]`), as the kernel programs report it (u32).
pub fn netns_of_link(target: &str) -> Option<u32> {
    let n = target.strip_prefix("net:[")?.strip_suffix(']')?;
    n.parse::<u64>().ok().map(|i| i as u32)
}

/// The pod UID (lowercase, with `-` as the API writes it) in a
/// `/proc/PID/cgroup` text: the first line whose path, below a
/// `kubepods` component, has a pod's component. kubelet's layouts, cgroup
/// v2 (`0::PATH`) and v1 (`N:CONTROLLERS:PATH`):
/// - systemd driver: `/kubepods.slice/kubepods-burstable.slice/
///   kubepods-burstable-pod3f1c9a2e_1b2c_..._123456789abc.slice/
///   cri-containerd-ID.scope` (the UID's `-` written `_`; guaranteed
///   pods directly under `kubepods.slice` as `kubepods-podUID.slice`;
///   CRI-O's `crio-ID.scope`);
/// - cgroupfs driver: `/kubepods/besteffort/podUID/ID`, guaranteed pods
///   as `/kubepods/podUID/ID`;
/// - under another root (kind's `/kubelet.slice/kubelet-kubepods.slice/...`)
///   or seen from a cgroup namespace (`/../../kubepods/...`).
///
/// Static pods' UIDs are 32 hex digits (a hash of the manifest), the API's
/// a UUID: both are taken.
pub fn pod_uid_of_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.split('/')
            .skip_while(|c| !c.contains("kubepods"))
            .find_map(pod_uid_of_component)
    })
}

/// `podUID`, `kubepods-podUID.slice`, `kubepods-QOS-podUID.slice` (with
/// `_` for `-`) -> the UID; None for any other component.
fn pod_uid_of_component(c: &str) -> Option<String> {
    let c = c.strip_suffix(".slice").unwrap_or(c);
    let uid = match c.strip_prefix("pod") {
        Some(rest) => rest,
        None => c.rsplit_once("-pod")?.1,
    };
    let uid = uid.replace('_', "-").to_ascii_lowercase();
    let hex = uid.bytes().filter(u8::is_ascii_hexdigit).count();
    let dashes = uid.bytes().filter(|b| *b == b'-').count();
    (hex == 32 && hex + dashes == uid.len() && dashes <= 4).then_some(uid)
}

/// A directory of /var/log/pods, `NAMESPACE_NAME_UID` -> (UID lowercase,
/// `NAMESPACE/NAME`). Neither Kubernetes names nor UIDs have `_`.
pub fn pod_of_log_dir(dir: &str) -> Option<(String, String)> {
    let mut it = dir.split('_');
    let (ns, name, uid) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || ns.is_empty() || name.is_empty() || uid.is_empty() {
        return None;
    }
    Some((uid.to_ascii_lowercase(), format!("{ns}/{name}")))
}

/// The node's pods by UID, from kubelet's log directories in `dir`
/// (empty when it is missing: not a kubelet's node).
pub fn pods_by_uid(dir: &Path) -> HashMap<String, String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return HashMap::new();
    };
    rd.flatten()
        .filter_map(|e| pod_of_log_dir(e.file_name().to_str()?))
        .collect()
}

/// The pod UIDs of the processes in each of `inodes`, read from `proc`
/// (a /proc): for every PID, `ns/net`'s link target, then, for one of
/// `inodes`, `cgroup`. Processes outside any pod (an operator's
/// `ip netns exec` shell) add nothing.
pub fn pod_uids_by_netns(proc: &Path, inodes: &BTreeSet<u32>) -> BTreeMap<u32, BTreeSet<String>> {
    let mut out: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for (_, dir) in crate::node::procstat::pids(proc) {
        let Some(ino) = std::fs::read_link(dir.join("ns/net"))
            .ok()
            .and_then(|t| netns_of_link(t.to_str()?))
            .filter(|i| inodes.contains(i))
        else {
            continue;
        };
        if let Some(uid) = std::fs::read_to_string(dir.join("cgroup"))
            .ok()
            .and_then(|t| pod_uid_of_cgroup(&t))
        {
            out.entry(ino).or_default().insert(uid);
        }
    }
    out
}

/// The pod (`namespace/name`) owning each of `inodes`, read from the
/// node whose root is `root` (`/`, or the host root in a container):
/// `proc` and kubelet's `var/log/pods` under it. A namespace whose
/// processes belong to no pod, or to several (the host's, with
/// hostNetwork pods), or to a pod kubelet has no directory for, is left
/// out. Nothing is read when `inodes` is empty or the node has no
/// /var/log/pods.
pub fn pods_of_netns(root: &Path, inodes: &BTreeSet<u32>) -> BTreeMap<u32, String> {
    if inodes.is_empty() {
        return BTreeMap::new();
    }
    let by_uid = pods_by_uid(&root.join(POD_LOGS));
    if by_uid.is_empty() {
        return BTreeMap::new();
    }
    pod_uids_by_netns(&root.join("proc"), inodes)
        .into_iter()
        .filter_map(|(ino, uids)| {
            let mut it = uids.iter();
            match (it.next(), it.next()) {
                (Some(uid), None) => Some((ino, by_uid.get(uid)?.clone())),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "3f1c9a2e-1b2c-4d5e-8f90-123456789abc";
    const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn namespace_of_a_link() {
        assert_eq!(netns_of_link("net:[4026532189]"), Some(4026532189));
        assert_eq!(netns_of_link("mnt:[4026532189]"), None);
        assert_eq!(netns_of_link("net:[x]"), None);
    }

    /// Every layout kubelet and the runtimes leave, v2 and v1.
    #[test]
    fn pod_uid_from_kubelets_cgroup_layouts() {
        let u = UID.replace('-', "_");
        let cases = [
            // cgroup v2, systemd driver, containerd, each QoS class.
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope\n"
            ),
            format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{CID}.scope\n"
            ),
            // Guaranteed: directly under kubepods.
            format!("0::/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{CID}.scope\n"),
            // CRI-O.
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/crio-{CID}.scope\n"
            ),
            // cgroupfs driver.
            format!("0::/kubepods/besteffort/pod{UID}/{CID}\n"),
            format!("0::/kubepods/pod{UID}/{CID}\n"),
            // cgroup v1: the pod's path on the controllers' lines.
            format!(
                "12:pids:/kubepods/burstable/pod{UID}/{CID}\n11:memory:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n0::/\n"
            ),
            format!(
                "5:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{CID}.scope\n"
            ),
            // kind: kubelet's root under /kubelet.slice.
            format!(
                "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice/cri-containerd-{CID}.scope\n"
            ),
            // Seen from a cgroup namespace.
            format!("0::/../../kubepods/besteffort/pod{UID}/{CID}\n"),
            // The UID in capitals is the same pod.
            format!("0::/kubepods/pod{}/{CID}\n", UID.to_uppercase()),
        ];
        for c in &cases {
            assert_eq!(pod_uid_of_cgroup(c).as_deref(), Some(UID), "{c}");
        }
        // A static pod's UID (a hash of its manifest).
        assert_eq!(
            pod_uid_of_cgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e2f7d5e1b4b6e4d8f4e5c3a2b1c0d9e.slice/cri-containerd-x.scope\n").as_deref(),
            Some("0e2f7d5e1b4b6e4d8f4e5c3a2b1c0d9e")
        );
        // A pod-like name outside kubelet's tree.
        let outside = format!("0::/system.slice/pod{UID}\n");
        for not_a_pod in [
            outside.as_str(),
            "0::/system.slice/containerd.service\n",
            "0::/user.slice/user-0.slice/session-3.scope\n",
            "0::/kubepods.slice/kubepods-burstable.slice\n",
            "0::/kubepods/besteffort/podnot-a-uid/x\n",
            "",
            "garbage",
        ] {
            assert_eq!(pod_uid_of_cgroup(not_a_pod), None, "{not_a_pod}");
        }
    }

    #[test]
    fn pod_from_its_log_directory() {
        assert_eq!(
            pod_of_log_dir(&format!("kube-system_coredns-5d78c9869d-x7k2p_{UID}")),
            Some((UID.into(), "kube-system/coredns-5d78c9869d-x7k2p".into()))
        );
        assert_eq!(pod_of_log_dir("a_b"), None);
        assert_eq!(pod_of_log_dir("a_b_c_d"), None);
        assert_eq!(pod_of_log_dir("_b_c"), None);
    }

    /// A fabricated node root: `proc/PID/{ns/net,cgroup}` and
    /// `var/log/pods/NS_NAME_UID`, removed on drop.
    struct FakeRoot(std::path::PathBuf);

    impl FakeRoot {
        fn new(tag: &str) -> FakeRoot {
            let p =
                std::env::temp_dir().join(format!("tracer-pods-unit-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(p.join(POD_LOGS)).unwrap();
            FakeRoot(p)
        }

        fn process(&self, pid: u32, netns: u32, cgroup: &str) {
            let d = self.0.join(format!("proc/{pid}/ns"));
            std::fs::create_dir_all(&d).unwrap();
            std::os::unix::fs::symlink(format!("net:[{netns}]"), d.join("net")).unwrap();
            std::fs::write(self.0.join(format!("proc/{pid}/cgroup")), cgroup).unwrap();
        }

        fn pod(&self, ns: &str, name: &str, uid: &str) {
            std::fs::create_dir_all(self.0.join(POD_LOGS).join(format!("{ns}_{name}_{uid}")))
                .unwrap();
        }
    }

    impl Drop for FakeRoot {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn namespaces_are_named_by_their_pods() {
        let r = FakeRoot::new("named");
        let other = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";
        let third = "11111111-2222-4333-8444-555555555555";
        r.pod("default", "web-0", UID);
        r.pod("kube-system", "coredns-abc", other);
        // Namespace 100: the pod's sandbox and a container (systemd
        // driver), and an operator's shell outside any pod.
        let slice = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
            UID.replace('-', "_")
        );
        r.process(10, 100, &format!("0::{slice}/cri-containerd-{CID}.scope\n"));
        r.process(
            11,
            100,
            &format!("0::{slice}/cri-containerd-{}.scope\n", "1".repeat(64)),
        );
        r.process(12, 100, "0::/user.slice/user-0.slice/session-1.scope\n");
        // Namespace 200: cgroupfs driver, v1.
        r.process(
            20,
            200,
            &format!("4:memory:/kubepods/pod{other}/{CID}\n0::/\n"),
        );
        // Namespace 300: the host's, with two hostNetwork pods: ambiguous.
        r.process(30, 300, &format!("0::/kubepods/pod{UID}/x\n"));
        r.process(31, 300, &format!("0::/kubepods/pod{other}/y\n"));
        // Namespace 400: a pod kubelet has no directory for.
        r.process(40, 400, &format!("0::/kubepods/pod{third}/z\n"));
        // Namespace 500: not asked about.
        r.process(50, 500, &format!("0::/kubepods/pod{UID}/x\n"));
        // Not processes.
        std::fs::create_dir_all(r.0.join("proc/self")).unwrap();
        std::fs::write(r.0.join("proc/uptime"), "1 2\n").unwrap();

        let all = BTreeSet::from([100, 200, 300, 400, 600]);
        let uids = pod_uids_by_netns(&r.0.join("proc"), &all);
        assert_eq!(uids[&100], BTreeSet::from([UID.to_string()]));
        assert_eq!(uids[&300].len(), 2);
        assert!(!uids.contains_key(&500));
        assert_eq!(
            pods_of_netns(&r.0, &all),
            BTreeMap::from([
                (100, "default/web-0".to_string()),
                (200, "kube-system/coredns-abc".to_string()),
            ])
        );
        assert!(pods_of_netns(&r.0, &BTreeSet::new()).is_empty());
        // Without kubelet's directories, nothing is named (and /proc is
        // not read).
        std::fs::remove_dir_all(r.0.join(POD_LOGS)).unwrap();
        assert!(pods_of_netns(&r.0, &all).is_empty());
        assert!(pods_by_uid(&r.0.join(POD_LOGS)).is_empty());
    }
}
