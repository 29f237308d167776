//! Where the node's own filesystem is. On the host it is `/`. In a
//! container (`docker run --privileged --pid=host --network=host`,
//! `kubectl debug node/NAME --profile=sysadmin`) tracer's `/` is the
//! image's, and the node's named namespaces (/run/netns) and, when sysfs
//! is not the host's, its BTF are found under the host root:
//! - `--host-root DIR` (or `TRACER_HOST_ROOT`), when given;
//! - else, when tracer's mount namespace is not PID 1's and PID 1 is the
//!   node's init (the host PID namespace: `--pid=host`, `hostPID`),
//!   `/proc/1/root`, PID 1's view of the filesystem (no volume needed);
//! - else `/host` when it holds a root (`kubectl debug node` mounts the
//!   node there) and tracer runs in a container;
//! - else `/`.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::OnceLock,
};

/// How the host root was found (what `doctor` reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Found {
    /// `--host-root` or `TRACER_HOST_ROOT`.
    Given,
    /// In a container sharing the host's PID namespace: `/proc/1/root`.
    Pid1Root,
    /// In a container with the node's root mounted at `/host`.
    HostMount,
    /// Not in a container: `/`.
    Own,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    pub path: PathBuf,
    pub found: Found,
}

impl HostRoot {
    /// A path of the node (`rel` absolute, as on the node).
    pub fn join(&self, rel: &str) -> PathBuf {
        if self.found == Found::Own {
            return PathBuf::from(rel);
        }
        self.path.join(rel.trim_start_matches('/'))
    }

    pub fn describe(&self) -> String {
        match self.found {
            Found::Given => format!("{} (given)", self.path.display()),
            Found::Pid1Root => format!(
                "{} (in a container sharing the host's PID namespace)",
                self.path.display()
            ),
            Found::HostMount => format!(
                "{} (in a container, the node's root mounted there)",
                self.path.display()
            ),
            Found::Own => "/ (not in a container)".to_string(),
        }
    }
}

static ROOT: OnceLock<HostRoot> = OnceLock::new();

/// An error of `--host-root`.
#[derive(Debug, thiserror::Error)]
#[error("--host-root {0}: not a directory")]
pub struct NotADirectory(pub String);

/// Fix the host root to `given` (the `--host-root` flag), or to what
/// `TRACER_HOST_ROOT` or detection says. Later calls keep the first.
pub fn init(given: Option<&Path>) -> Result<&'static HostRoot, NotADirectory> {
    let env = std::env::var_os("TRACER_HOST_ROOT").map(PathBuf::from);
    if let Some(p) = given.map(Path::to_path_buf).or(env) {
        if !p.is_dir() {
            return Err(NotADirectory(p.display().to_string()));
        }
        return Ok(ROOT.get_or_init(|| HostRoot {
            path: p,
            found: Found::Given,
        }));
    }
    Ok(get())
}

/// The host root (detected on first use unless [`init`] fixed it).
pub fn get() -> &'static HostRoot {
    ROOT.get_or_init(detect)
}

fn inode(p: &str) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.ino())
}

/// Signs of running in a container: the engines' marker files, or a
/// mount namespace other than PID 1's.
fn detect() -> HostRoot {
    let own = |found| HostRoot {
        path: PathBuf::from("/"),
        found,
    };
    let (mine, init) = (inode("/proc/self/ns/mnt"), inode("/proc/1/ns/mnt"));
    if mine.is_some() && init.is_some() && mine != init {
        // PID 1 lives in another mount namespace: it is the node's init
        // (a container's own PID 1 shares the container's namespace).
        let p = PathBuf::from("/proc/1/root");
        if p.join("run").is_dir() || p.join("etc").is_dir() {
            return HostRoot {
                path: p,
                found: Found::Pid1Root,
            };
        }
    }
    let container = ["/.dockerenv", "/run/.containerenv"]
        .iter()
        .any(|m| Path::new(m).exists())
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let host = Path::new("/host");
    if container && host.join("etc").is_dir() && host.join("run").is_dir() {
        return HostRoot {
            path: host.to_path_buf(),
            found: Found::HostMount,
        };
    }
    own(Found::Own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_node_paths_under_the_root() {
        let r = HostRoot {
            path: "/host".into(),
            found: Found::HostMount,
        };
        assert_eq!(r.join("/run/netns"), PathBuf::from("/host/run/netns"));
        let own = HostRoot {
            path: "/".into(),
            found: Found::Own,
        };
        assert_eq!(own.join("/run/netns"), PathBuf::from("/run/netns"));
    }

    /// The test runs on the host (the suite's machine or a VM guest): it
    /// is not in a container, so the root is its own.
    #[test]
    fn on_the_host_the_root_is_own() {
        if Path::new("/.dockerenv").exists() || Path::new("/run/.containerenv").exists() {
            eprintln!("SKIPPED on_the_host_the_root_is_own: running in a container");
            return;
        }
        assert_eq!(detect().found, Found::Own);
    }
}
