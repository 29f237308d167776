//! A node with N pods: N network namespaces, each joined by a veth pair to
//! a bridge on the node, the way a container runtime's bridge plugin lays
//! them out. The node is the host namespace (what `tracer follow` without
//! `--netns` hooks) or a namespace the fixture owns.
//!
//! Everything it made goes on drop, even when a test panics: the node-side
//! veth ends and the bridge first (in the host namespace they would
//! otherwise outlive a failed namespace deletion), then the pod
//! namespaces, then the node namespace.

use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::netns::{Netns, ip_batch, unique_prefix};

/// Where the bridge and the node-side veth ends live.
pub enum Node {
    /// The host namespace (tracer's own, when it runs without `--netns`).
    Host,
    /// A namespace created for (and removed with) the fixture.
    Owned,
}

pub struct Pods {
    pub prefix: String,
    /// The node namespace; None: the host namespace.
    pub node: Option<Netns>,
    pub bridge: String,
    /// Pod namespace names, in creation order.
    pub pods: Vec<String>,
    /// Node-side veth ends, one per pod, same order.
    pub veths: Vec<String>,
    /// Whether the bridge was created (and so is ours to delete).
    bridge_made: bool,
}

/// Linux's IFNAMSIZ less the NUL.
const IFNAME_MAX: usize = 15;

impl Pods {
    /// `n` pods on a new bridge in `node`. Pod `i` has eth0 (10.251.x.y/16)
    /// and lo up; its node-side end is enslaved to the bridge and up.
    pub fn new(n: usize, node: Node) -> Result<Pods> {
        let prefix = unique_prefix();
        let node = match node {
            Node::Host => None,
            Node::Owned => Some(Netns::new(format!("{prefix}-node"))?),
        };
        let mut pods = Pods {
            bridge: format!("{prefix}br"),
            prefix,
            node,
            pods: Vec::new(),
            veths: Vec::new(),
            bridge_made: false,
        };
        if pods.bridge.len() > IFNAME_MAX {
            bail!("bridge name {} is too long", pods.bridge);
        }
        // Marked as made before it is: deleting a bridge that is not there
        // is harmless, leaving one behind is not.
        pods.bridge_made = true;
        ip_batch(
            pods.node_name(),
            &format!(
                "link add {b} type bridge\nlink set {b} up\n",
                b = pods.bridge
            ),
            true,
        )?;
        pods.add(n)?;
        Ok(pods)
    }

    fn node_name(&self) -> Option<&str> {
        self.node.as_ref().map(|n| n.name.as_str())
    }

    /// `ip netns exec` argument for the node (None: the host).
    pub fn node_netns_path(&self) -> Option<String> {
        self.node.as_ref().map(super::netns::Netns::path)
    }

    /// Add `n` more pods; returns the node-side veth names of the new ones.
    pub fn add(&mut self, n: usize) -> Result<Vec<String>> {
        let first = self.pods.len();
        let mut netns_lines = String::new();
        let mut link_lines = String::new();
        for i in first..first + n {
            let pod = format!("{}-p{i}", self.prefix);
            let veth = format!("{}v{i}", self.prefix);
            if veth.len() > IFNAME_MAX {
                bail!("veth name {veth} is too long (prefix {})", self.prefix);
            }
            netns_lines += &format!("netns add {pod}\n");
            link_lines += &format!(
                "link add {veth} type veth peer name eth0 netns {pod}\n\
                 link set {veth} master {} up\n",
                self.bridge
            );
            // Recorded before creation so that a failure half-way still
            // removes what was made.
            self.pods.push(pod);
            self.veths.push(veth);
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        ip_batch(None, &netns_lines, true)?;
        ip_batch(self.node_name(), &link_lines, true)?;
        for i in first..first + n {
            ip_batch(
                Some(&self.pods[i]),
                &format!(
                    "link set lo up\nlink set eth0 up\naddr add 10.251.{}.{}/16 dev eth0\n",
                    i / 250,
                    i % 250 + 1
                ),
                true,
            )?;
        }
        Ok(self.veths[first..].to_vec())
    }

    /// Every interface of the node namespace (name), read with `ip link`.
    pub fn node_interfaces(&self) -> Result<Vec<String>> {
        let mut cmd = vec!["ip"];
        if let Some(n) = self.node_name() {
            cmd.extend_from_slice(&["-n", n]);
        }
        cmd.extend_from_slice(&["-j", "link", "show"]);
        let out = crate::netns::run(&cmd)?;
        let v: Value = serde_json::from_slice(&out.stdout).context("ip -j link")?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }
}

impl Drop for Pods {
    #[expect(clippy::format_collect, reason = "a few lines of `ip -batch`, once")]
    fn drop(&mut self) {
        // The node-side ends (deleting one end of a veth deletes both)
        // and the bridge, then the pod namespaces; -force goes on past the
        // ones never made.
        let mut links: String = self
            .veths
            .iter()
            .map(|v| format!("link del {v}\n"))
            .collect();
        if self.bridge_made {
            links += &format!("link del {}\n", self.bridge);
        }
        if !links.is_empty() {
            let _ = ip_batch(self.node_name(), &links, true);
        }
        let netns: String = self
            .pods
            .iter()
            .map(|p| format!("netns del {p}\n"))
            .collect();
        if !netns.is_empty() {
            let _ = ip_batch(None, &netns, true);
        }
        // self.node (a Netns) is removed by its own Drop, after this.
    }
}

/// Names of the programs tc runs on `dev` (in the namespace at
/// `netns_path`, None: this one): tcx programs of both directions (by
/// BPF_PROG_QUERY, which the bpftool of Debian 12 lacks) and clsact
/// filters (bpftool net).
pub fn tc_programs(netns_path: Option<&str>, dev: &str) -> Vec<String> {
    let names = prog_names();
    let mut out: Vec<String> = [BPF_TCX_INGRESS, BPF_TCX_EGRESS]
        .into_iter()
        .flat_map(|t| tcx_prog_ids(netns_path, dev, t))
        .filter_map(|id| names.get(&id).cloned())
        .collect();
    let mut cmd = Command::new(if netns_path.is_some() {
        "nsenter"
    } else {
        "bpftool"
    });
    if let Some(p) = netns_path {
        cmd.arg(format!("--net={p}")).arg("bpftool");
    }
    if let Ok(o) = cmd.args(["-j", "net", "show", "dev", dev]).output() {
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        out.extend(
            v.as_array()
                .into_iter()
                .flatten()
                .flat_map(|e| e["tc"].as_array().cloned().unwrap_or_default())
                .filter_map(|t| t["name"].as_str().map(str::to_string)),
        );
    }
    out
}

/// Whether tracer's two tc programs (ingress and egress) are on `dev`.
pub fn tracer_hooked(netns_path: Option<&str>, dev: &str) -> bool {
    tc_programs(netns_path, dev)
        .iter()
        .filter(|n| n.starts_with("tracer_tc_"))
        .count()
        >= 2
}

/// Loaded programs: id to name.
fn prog_names() -> std::collections::HashMap<u32, String> {
    let Ok(o) = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
    else {
        return Default::default();
    };
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_u64()? as u32, p["name"].as_str()?.to_string())))
        .collect()
}

const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;

/// `union bpf_attr` for BPF_PROG_QUERY.
#[repr(C)]
#[derive(Default)]
struct ProgQuery {
    target_ifindex: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
    prog_attach_flags: u64,
    link_ids: u64,
    link_attach_flags: u64,
    revision: u64,
}

/// Ids of the tcx programs of `dev` for `attach_type`, queried from a
/// thread that entered the namespace (tcx queries resolve the ifindex in
/// the caller's namespace).
fn tcx_prog_ids(netns_path: Option<&str>, dev: &str, attach_type: u32) -> Vec<u32> {
    let netns_path = netns_path.map(str::to_string);
    let dev = dev.to_string();
    std::thread::spawn(move || {
        if let Some(p) = netns_path {
            let Ok(f) = std::fs::File::open(&p) else {
                return Vec::new();
            };
            use std::os::fd::AsRawFd;
            // SAFETY: setns on this (throwaway) thread with an open fd.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Vec::new();
            }
        }
        let Ok(name) = std::ffi::CString::new(dev) else {
            return Vec::new();
        };
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Vec::new();
        }
        let mut ids = [0u32; 64];
        let mut q = ProgQuery {
            target_ifindex: ifindex,
            attach_type,
            prog_ids: ids.as_mut_ptr() as u64,
            prog_cnt: ids.len() as u32,
            ..Default::default()
        };
        // SAFETY: q is a valid bpf_attr prefix; prog_ids points at
        // prog_cnt u32s that live through the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_QUERY,
                &raw mut q,
                std::mem::size_of::<ProgQuery>(),
            )
        };
        if r != 0 {
            return Vec::new();
        }
        ids[..(q.prog_cnt as usize).min(ids.len())].to_vec()
    })
    .join()
    .unwrap_or_default()
}
