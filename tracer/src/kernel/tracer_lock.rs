//! The lock a live tracer holds for its lifetime, and what it created: a
//! file `/run/tracer/PID-START.lock`, flock()ed exclusively while the
//! process lives (the kernel drops the lock when it dies, SIGKILL
//! included), naming the tc programs it loaded (`prog ID`) and the clsact
//! qdiscs it added (`qdisc NETNS_INODE IFINDEX DEV`). `tracer cleanup`
//! reads every such file: a file it cannot lock is a live tracer's, whose
//! filters (by program id) and qdiscs it leaves alone; a file it can lock
//! is a dead tracer's, whose leftovers it removes, then the file.
//!
//! A qdisc that cannot go yet because another tracer's filters are on it
//! is handed over: recorded in that tracer's file, which removes it in
//! turn once it is left empty.

use std::{
    collections::HashSet,
    fs::{File, OpenOptions},
    io::Write,
    os::{
        fd::AsRawFd,
        unix::fs::{DirBuilderExt, OpenOptionsExt},
    },
    path::{Path, PathBuf},
};

/// Where the lock files are.
pub const LOCK_DIR: &str = "/run/tracer";

/// This process's lock, held until dropped (then its file is removed).
pub struct TracerLock {
    file: File,
    path: PathBuf,
}

/// A clsact qdisc a tracer added: its namespace, device index and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QdiscRecord {
    pub netns: u32,
    pub ifindex: u32,
    pub dev: String,
}

/// What one lock file says.
#[derive(Debug, Default)]
pub struct Recorded {
    /// The lock file.
    pub path: PathBuf,
    pub pid: u32,
    pub progs: HashSet<u32>,
    pub qdiscs: Vec<QdiscRecord>,
}

/// A dead tracer's lock file (locked now by the reader, so no tracer can
/// be using it) and what it recorded.
pub struct DeadTracer {
    pub recorded: Recorded,
    path: PathBuf,
    _lock: File,
}

impl DeadTracer {
    /// Its leftovers removed: the file goes.
    pub fn forget(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Every lock file of [`LOCK_DIR`]: what live tracers recorded, and the
/// dead ones.
#[derive(Default)]
pub struct Tracers {
    pub live: Vec<Recorded>,
    pub dead: Vec<DeadTracer>,
}

impl Tracers {
    /// The tc programs of live tracers (their filters are theirs).
    pub fn live_progs(&self) -> HashSet<u32> {
        self.live
            .iter()
            .flat_map(|r| r.progs.iter().copied())
            .collect()
    }

    /// The PIDs of live tracers.
    pub fn live_pids(&self) -> HashSet<u32> {
        self.live.iter().map(|r| r.pid).collect()
    }

    /// Hand qdisc `q` over to the live tracer running one of `progs` (its
    /// filters are on it): recorded in its lock file, it is that tracer's
    /// to remove once empty. False when no live tracer runs them.
    pub fn hand_over(&self, progs: &HashSet<u32>, q: &QdiscRecord) -> bool {
        let Some(heir) = self.live.iter().find(|r| !r.progs.is_disjoint(progs)) else {
            return false;
        };
        let line = format!("qdisc {} {} {}\n", q.netns, q.ifindex, q.dev);
        OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&heir.path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .is_ok()
    }
}

fn flock(f: &File, how: libc::c_int) -> std::io::Result<()> {
    // SAFETY: flock on an fd `f` owns.
    if unsafe { libc::flock(f.as_raw_fd(), how) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// This process's start time (clock ticks since boot, /proc/self/stat
/// field 22): with the PID, a name no other process has had since boot.
fn start_ticks() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(19)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

impl TracerLock {
    /// Create and lock this process's file in `dir`, naming `progs`.
    pub fn acquire_in(dir: &Path, progs: &[u32]) -> std::io::Result<TracerLock> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let pid = std::process::id();
        let name = format!("{pid}-{}", start_ticks());
        // Made under another name, locked and filled, then renamed: a
        // `.lock` file is never seen unlocked or empty while its tracer
        // lives. O_APPEND: another process handing a qdisc over appends.
        let fresh = dir.join(format!("{name}.new"));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o600)
            .open(&fresh)?;
        let mut lock = TracerLock { file, path: fresh };
        flock(&lock.file, libc::LOCK_EX | libc::LOCK_NB)?;
        let mut text = format!("pid {pid}\n");
        for p in progs {
            text += &format!("prog {p}\n");
        }
        lock.append(&text)?;
        let path = dir.join(format!("{name}.lock"));
        std::fs::rename(&lock.path, &path)?;
        lock.path = path;
        Ok(lock)
    }

    /// In [`LOCK_DIR`].
    pub fn acquire(progs: &[u32]) -> std::io::Result<TracerLock> {
        TracerLock::acquire_in(Path::new(LOCK_DIR), progs)
    }

    fn append(&mut self, text: &str) -> std::io::Result<()> {
        self.file.write_all(text.as_bytes())
    }

    /// A clsact qdisc this tracer added (before its first filter goes on it).
    pub fn note_qdisc(&mut self, q: &QdiscRecord) -> std::io::Result<()> {
        self.append(&format!("qdisc {} {} {}\n", q.netns, q.ifindex, q.dev))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The qdiscs this file records now: those this tracer added and
    /// those handed over to it.
    pub fn qdiscs(&self) -> Vec<QdiscRecord> {
        std::fs::read_to_string(&self.path)
            .map(|t| parse(&self.path, &t).qdiscs)
            .unwrap_or_default()
    }
}

impl Drop for TracerLock {
    fn drop(&mut self) {
        // Removed while still locked: cleanup never takes it for a dead
        // tracer's.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn parse(path: &Path, text: &str) -> Recorded {
    let mut r = Recorded {
        path: path.into(),
        ..Recorded::default()
    };
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match (w.next(), w.next(), w.next(), w.next()) {
            (Some("pid"), Some(p), None, None) => r.pid = p.parse().unwrap_or(0),
            (Some("prog"), Some(id), None, None) => {
                if let Ok(id) = id.parse() {
                    r.progs.insert(id);
                }
            }
            (Some("qdisc"), Some(ns), Some(idx), Some(dev)) => {
                if let (Ok(netns), Ok(ifindex)) = (ns.parse(), idx.parse()) {
                    r.qdiscs.push(QdiscRecord {
                        netns,
                        ifindex,
                        dev: dev.to_string(),
                    });
                }
            }
            _ => {}
        }
    }
    r
}

/// Read every lock file of `dir`: a file locked by another process is a
/// live tracer's; one this call could lock, a dead tracer's (held locked
/// until its [`DeadTracer`] is dropped).
pub fn tracers_in(dir: &Path) -> Tracers {
    let mut t = Tracers::default();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return t;
    };
    for e in rd.flatten() {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "new") {
            forget_unfinished(&path);
            continue;
        }
        if path.extension().is_none_or(|x| x != "lock") {
            continue;
        }
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if flock(&file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            t.live.push(parse(&path, &text));
            continue;
        }
        // Locked by us: its tracer is gone (a live one removes its file
        // before it lets go of the lock). Read again, now stable.
        let text = std::fs::read_to_string(&path).unwrap_or(text);
        t.dead.push(DeadTracer {
            recorded: parse(&path, &text),
            path,
            _lock: file,
        });
    }
    t
}

/// A lock file a tracer died before finishing (nobody holds it): removed.
fn forget_unfinished(path: &Path) {
    if let Ok(f) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        && flock(&f, libc::LOCK_EX | libc::LOCK_NB).is_ok()
    {
        let _ = std::fs::remove_file(path);
    }
}

/// [`tracers_in`] [`LOCK_DIR`].
pub fn tracers() -> Tracers {
    tracers_in(Path::new(LOCK_DIR))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held lock is seen as live with what it recorded; once dropped
    /// its file is gone; a file nobody holds is a dead tracer's.
    #[test]
    fn live_and_dead_tracers_are_told_apart() {
        let dir = std::env::temp_dir().join(format!("tracer-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut lock = TracerLock::acquire_in(&dir, &[11, 12]).unwrap();
        let q = QdiscRecord {
            netns: 4026531840,
            ifindex: 3,
            dev: "eth0".into(),
        };
        lock.note_qdisc(&q).unwrap();
        std::fs::write(dir.join("1-2.lock"), "pid 1\nprog 99\nqdisc 5 6 veth0\n").unwrap();
        let t = tracers_in(&dir);
        assert_eq!(t.live_progs(), HashSet::from([11, 12]));
        assert_eq!(t.live_pids(), HashSet::from([std::process::id()]));
        assert_eq!(t.live[0].qdiscs, vec![q]);
        assert_eq!(t.dead.len(), 1);
        assert_eq!(t.dead[0].recorded.progs, HashSet::from([99]));
        assert_eq!(t.dead[0].recorded.qdiscs[0].dev, "veth0");
        let moved = QdiscRecord {
            netns: 7,
            ifindex: 8,
            dev: "veth1".into(),
        };
        assert!(t.hand_over(&HashSet::from([12]), &moved));
        assert!(!t.hand_over(&HashSet::from([99]), &moved));
        assert_eq!(lock.qdiscs().last(), Some(&moved));
        for d in t.dead {
            d.forget();
        }
        let path = lock.path().to_path_buf();
        drop(lock);
        assert!(!path.exists());
        assert!(tracers_in(&dir).live.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
