//! Network namespaces: entering one on the current thread, and what is in it.

use std::{
    fs::File,
    net::IpAddr,
    os::fd::{AsFd, AsRawFd},
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use nix::sched::{CloneFlags, setns};

/// The inode that identifies a network namespace (what the kernel
/// programs report as `netns`).
pub fn netns_inode(path: &Path) -> Option<u32> {
    std::fs::metadata(path).ok().map(|m| m.ino() as u32)
}

/// An address on an interface of a namespace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IfAddr {
    pub dev: String,
    pub addr: IpAddr,
    pub prefix: u8,
}

/// A namespace the user asked for: a name under /run/netns, a path, or a
/// PID. It is held open for as long as a clone of this lives: `path`
/// (`/proc/self/fd/N`) reaches it even once its name is deleted (`ip
/// netns del`) while a process keeps it alive, so tracer detaches there.
#[derive(Debug, Clone)]
pub struct NetnsRef {
    pub label: String,
    pub path: PathBuf,
    pub inode: u32,
    /// The open namespace file that `path` names.
    pub fd: std::sync::Arc<std::os::fd::OwnedFd>,
}

/// Why a namespace could not be named or entered. The underlying error is
/// part of the message (not a `source`), so it is said once however the
/// error is printed.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error(
        "network namespace '{spec}' not found ({path} does not exist); give a name under {dir}, a path, or a PID"
    )]
    NotFound {
        spec: String,
        path: String,
        dir: String,
    },
    #[error("cannot open {path}: {err}")]
    Open { path: String, err: std::io::Error },
    #[error("open own netns: {0}")]
    Own(std::io::Error),
    #[error("setns into {path}: {err}")]
    Setns { path: String, err: nix::Error },
    #[error(
        "'{spec}' is not a network namespace ({path} is {what}); give a name under {dir}, a namespace file (/proc/PID/ns/net), or a PID"
    )]
    NotNetns {
        spec: String,
        path: String,
        what: &'static str,
        dir: String,
    },
    #[error("an empty --netns: give a name under {dir}, a path, or a PID")]
    Empty { dir: String },
}

/// NS_GET_NSTYPE (linux/nsfs.h: _IO(0xb7, 0x3)): the CLONE_NEW* type of a
/// namespace file; ENOTTY for any other file.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// Whether `f` is a network namespace file; else what it is.
fn net_namespace(f: &File) -> Result<(), &'static str> {
    use std::os::fd::AsRawFd;
    // SAFETY: an ioctl without argument on an fd `f` owns.
    let t = unsafe { libc::ioctl(f.as_raw_fd(), NS_GET_NSTYPE as _) };
    match t {
        t if t == libc::CLONE_NEWNET => Ok(()),
        t if t >= 0 => Err("another kind of namespace"),
        _ => Err("not a namespace file"),
    }
}

pub fn resolve_netns(spec: &str) -> Result<NetnsRef, NetnsError> {
    if spec.trim().is_empty() {
        return Err(NetnsError::Empty {
            dir: named_dir().display().to_string(),
        });
    }
    let path = if spec.bytes().all(|b| b.is_ascii_digit()) {
        PathBuf::from(format!("/proc/{spec}/ns/net"))
    } else if spec.contains('/') {
        PathBuf::from(spec)
    } else {
        crate::node::hostroot::get().join(NAMED_DIR).join(spec)
    };
    let Some(inode) = netns_inode(&path) else {
        return Err(NetnsError::NotFound {
            spec: spec.into(),
            path: path.display().to_string(),
            dir: named_dir().display().to_string(),
        });
    };
    // O_NONBLOCK: a FIFO named by mistake must not hang the start.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|err| NetnsError::Open {
            path: path.display().to_string(),
            err,
        })?;
    // It must really be a network namespace.
    net_namespace(&file).map_err(|what| NetnsError::NotNetns {
        spec: spec.into(),
        path: path.display().to_string(),
        what,
        dir: named_dir().display().to_string(),
    })?;
    let inode = file.metadata().map_or(inode, |m| m.ino() as u32);
    let fd = std::sync::Arc::new(std::os::fd::OwnedFd::from(file));
    Ok(NetnsRef {
        label: spec.to_string(),
        path: PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
        inode,
        fd,
    })
}

/// The calling thread's namespace; entering another restores it on drop.
pub struct NetnsGuard {
    orig: File,
}

impl NetnsGuard {
    pub fn enter(path: &Path) -> Result<NetnsGuard, NetnsError> {
        let orig = File::open("/proc/thread-self/ns/net").map_err(NetnsError::Own)?;
        let target = File::open(path).map_err(|err| NetnsError::Open {
            path: path.display().to_string(),
            err,
        })?;
        setns(target.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|err| NetnsError::Setns {
            path: path.display().to_string(),
            err,
        })?;
        Ok(NetnsGuard { orig })
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        // Failing to return would leave this thread in the wrong namespace;
        // nothing sensible can continue after that.
        setns(self.orig.as_fd(), CloneFlags::CLONE_NEWNET)
            .expect("return to the original network namespace");
    }
}

/// Interfaces of the current namespace (name, ifindex).
pub fn interfaces() -> Vec<(String, u32)> {
    match nix::net::if_::if_nameindex() {
        Ok(list) => list
            .iter()
            .map(|i| (i.name().to_string_lossy().into_owned(), i.index()))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Addresses of the current namespace.
///
/// Read with one RTM_GETADDR dump per family: getifaddrs() dumps every
/// link first, which on a node of 250 pods is most of the work (and the
/// address dumps run without RTNL on recent kernels, while a tcx attach
/// holds it for two grace periods). getifaddrs() remains the fallback.
pub fn addresses() -> Vec<IfAddr> {
    rtnl_addresses().unwrap_or_else(getifaddrs_addresses)
}

fn getifaddrs_addresses() -> Vec<IfAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in addrs {
        let (Some(addr), Some(mask)) = (a.address, a.netmask) else {
            continue;
        };
        let (ip, prefix): (IpAddr, u8) =
            if let (Some(s), Some(m)) = (addr.as_sockaddr_in(), mask.as_sockaddr_in()) {
                (IpAddr::V4(s.ip()), u32::from(m.ip()).count_ones() as u8)
            } else if let (Some(s), Some(m)) = (addr.as_sockaddr_in6(), mask.as_sockaddr_in6()) {
                (IpAddr::V6(s.ip()), u128::from(m.ip()).count_ones() as u8)
            } else {
                continue;
            };
        out.push(IfAddr {
            dev: a.interface_name,
            addr: ip,
            prefix,
        });
    }
    out
}

/// The addresses of this thread's namespace by rtnetlink; None on any
/// error.
fn rtnl_addresses() -> Option<Vec<IfAddr>> {
    let mut out = Vec::new();
    let mut names: std::collections::HashMap<u32, String> = Default::default();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        // ifaddrmsg: family, prefixlen, flags, scope, index.
        let body = [family, 0, 0, 0, 0, 0, 0, 0];
        super::netlink::dump(
            libc::NETLINK_ROUTE,
            libc::RTM_GETADDR,
            &body,
            &mut |ty, msg| {
                if ty == libc::RTM_NEWADDR
                    && let Some(a) = parse_newaddr(msg, &mut names)
                {
                    out.push(a);
                }
            },
        )?;
    }
    return Some(out);

    /// One RTM_NEWADDR, its device named by its label or, without one
    /// (IPv6), by its index in this thread's namespace.
    fn parse_newaddr(
        msg: &[u8],
        names: &mut std::collections::HashMap<u32, String>,
    ) -> Option<IfAddr> {
        let a = parse_ifaddr(msg)?;
        let dev = match a.label {
            Some(l) => l,
            None => names
                .entry(a.index)
                .or_insert_with(|| {
                    nix::net::if_::if_indextoname(a.index)
                        .map(|c| c.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
                .clone(),
        };
        Some(IfAddr {
            dev,
            addr: a.addr,
            prefix: a.prefix,
        })
    }
}

/// An RTM_NEWADDR or RTM_DELADDR message as it came (a dump's reply, or a
/// notification).
pub struct IfAddrMsg {
    pub addr: IpAddr,
    pub prefix: u8,
    /// The device's index (ifa_index).
    pub index: u32,
    /// IFA_LABEL: the device's name (or an alias label); IPv4 only.
    pub label: Option<String>,
}

/// Parse an RTM_NEWADDR/RTM_DELADDR message: nlmsghdr, struct ifaddrmsg
/// (family, prefixlen, flags, scope, index), then IFA_* attributes
/// (include/uapi/linux/if_addr.h).
pub fn parse_ifaddr(msg: &[u8]) -> Option<IfAddrMsg> {
    const IFA_ADDRESS: u16 = 1;
    const IFA_LOCAL: u16 = 2;
    const IFA_LABEL: u16 = 3;
    let family = *msg.get(16)?;
    let prefix = *msg.get(17)?;
    let index = u32::from_ne_bytes(msg.get(20..24)?.try_into().ok()?);
    let (mut address, mut local, mut label) = (None, None, None);
    for (aty, data) in super::netlink::attrs(msg.get(24..)?) {
        match aty {
            IFA_ADDRESS => address = Some(data),
            IFA_LOCAL => local = Some(data),
            IFA_LABEL => label = Some(super::netlink::string(data)),
            _ => {}
        }
    }
    let addr: IpAddr = match family as i32 {
        // getifaddrs() too: IFA_LOCAL is the interface's own address
        // (IFA_ADDRESS the peer's on a point-to-point link).
        libc::AF_INET => {
            let b: [u8; 4] = local.or(address)?.try_into().ok()?;
            IpAddr::from(b)
        }
        libc::AF_INET6 => {
            let b: [u8; 16] = address.or(local)?.try_into().ok()?;
            IpAddr::from(b)
        }
        _ => return None,
    };
    Some(IfAddrMsg {
        addr,
        prefix,
        index,
        label,
    })
}

/// Addresses of another namespace, read by entering it on this thread.
pub fn addresses_in(path: &Path) -> Result<Vec<IfAddr>, NetnsError> {
    let _g = NetnsGuard::enter(path)?;
    Ok(addresses())
}

/// Where named namespaces live (`ip netns add NAME`).
pub const NAMED_DIR: &str = "/run/netns";

/// The node's directory of named namespaces (under the host root when
/// tracer runs in a container).
pub fn named_dir() -> PathBuf {
    crate::node::hostroot::get().join(NAMED_DIR)
}

/// Every named namespace: (name, path), in directory order.
pub fn named() -> Vec<(String, PathBuf)> {
    std::fs::read_dir(named_dir())
        .map(|rd| {
            rd.flatten()
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect()
        })
        .unwrap_or_default()
}

/// A namespace of `ip netns add` for the root-only unit tests of the
/// node layer, deleted on drop (panics included).
#[cfg(test)]
pub(crate) struct TestNetns(pub(crate) String);

#[cfg(test)]
impl TestNetns {
    /// Add `PREFIX-PID` (panics if `ip netns add` fails).
    pub(crate) fn add(prefix: &str) -> TestNetns {
        let name = format!("{prefix}-{}", std::process::id());
        assert!(
            std::process::Command::new("ip")
                .args(["netns", "add", &name])
                .status()
                .is_ok_and(|s| s.success()),
            "ip netns add {name}"
        );
        TestNetns(name)
    }

    /// Did `ip netns exec NAME ARGS...` succeed?
    pub(crate) fn run(&self, args: &[&str]) -> bool {
        std::process::Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    }
}

#[cfg(test)]
impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_network_namespaces_are_taken() {
        for spec in ["/etc/passwd", "/dev/null", "/proc/self/ns/mnt", ""] {
            let e = resolve_netns(spec).unwrap_err();
            assert!(
                matches!(e, NetnsError::NotNetns { .. } | NetnsError::Empty { .. }),
                "{spec}: {e}"
            );
        }
        let own = resolve_netns("/proc/self/ns/net").unwrap();
        assert_eq!(Some(own.inode), netns_inode(Path::new("/proc/self/ns/net")));
        // The fd it holds names the same namespace.
        assert_eq!(netns_inode(&own.path), Some(own.inode));
    }

    #[test]
    fn bad_netns_is_a_clear_error() {
        let e = resolve_netns("definitely-not-a-netns-xyz").unwrap_err();
        assert!(e.to_string().contains("not found"), "{e}");
        let e = resolve_netns("999999999").unwrap_err();
        assert!(e.to_string().contains("/proc/999999999/ns/net"), "{e}");
    }

    #[test]
    fn rtnetlink_addresses_match_getifaddrs() {
        let key = |v: Vec<IfAddr>| {
            let mut k: Vec<(String, IpAddr, u8)> =
                v.into_iter().map(|a| (a.dev, a.addr, a.prefix)).collect();
            k.sort();
            k
        };
        let ours = rtnl_addresses().expect("RTM_GETADDR dump");
        assert!(
            ours.iter()
                .any(|a| a.addr == IpAddr::from([127, 0, 0, 1]) && a.dev == "lo"),
            "{ours:?}"
        );
        assert_eq!(key(ours), key(getifaddrs_addresses()));
    }

    #[test]
    fn own_namespace_has_loopback() {
        assert!(interfaces().iter().any(|(n, _)| n == "lo"));
    }
}
