//! Network namespaces owned by a test: created with `ip netns add`, removed
//! (with everything in them) on drop, even when the test panics. What can
//! be done from this process (a device set up, a sysctl, a program
//! started in the namespace, the namespace removed) is, through setns(2):
//! each `ip` started costs 0.1 to 0.2 s of CPU in the kernel matrix's
//! emulated guests.

use std::{
    os::fd::AsRawFd,
    process::{Command, Output},
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Context, Result, bail};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short prefix unique to this process and call, so parallel tests and
/// leftovers of killed runs never collide.
pub fn unique_prefix() -> String {
    // The demo names its namespaces readably (and clears its leftovers).
    if let Ok(p) = std::env::var("TRACER_NS_PREFIX") {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        return if n == 0 { p } else { format!("{p}{n}") };
    }
    format!(
        "tt{}x{}",
        std::process::id() % 100_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Run a command; fail with the command line and its stderr.
pub fn run(cmd: &[&str]) -> Result<Output> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .with_context(|| format!("spawn {}", cmd.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            cmd.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: String) -> Result<Netns> {
        run(&["ip", "netns", "add", &name])?;
        let ns = Netns { name };
        ns.set_up("lo")?;
        Ok(ns)
    }

    /// The namespace's file, open (for setns(2)).
    fn open(&self) -> Result<std::fs::File> {
        std::fs::File::open(self.path()).with_context(|| format!("open {}", self.path()))
    }

    /// Run `f` on a thread of this process that has entered the
    /// namespace (setns(2) on one thread, what `ip -n` does for its whole
    /// process): no `ip` started. Under the kernel matrix's emulation each
    /// `ip` started took 0.1 to 0.2 s of CPU (exec, dynamic linking); `ip`
    /// was 15% of a 6.1 guest's busy time (docs/testing.md).
    pub fn within<T: Send>(&self, f: impl FnOnce() -> std::io::Result<T> + Send) -> Result<T> {
        let ns = self.open()?;
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(ns.as_raw_fd())?;
                f()
            })
            .join()
            .expect("netns thread")
        })
        .with_context(|| format!("in netns {}", self.name))
    }

    /// `ip -n NAME link set DEV up`, in process (SIOCSIFFLAGS).
    pub fn set_up(&self, dev: &str) -> Result<()> {
        self.within(|| link_up(dev))
            .with_context(|| format!("set {dev} up"))
    }

    /// A command that runs in the namespace, entered with setns(2) between
    /// fork and exec: `ip netns exec` without `ip` and without its mount
    /// namespace (its /sys shows the host's devices; `exec` keeps `ip
    /// netns exec` for the commands that read /sys). The namespace's fd
    /// is returned with it and must live until the command has started.
    fn command(&self, args: &[&str]) -> Result<(Command, std::fs::File)> {
        use std::os::unix::process::CommandExt;
        let ns = self.open()?;
        let fd = ns.as_raw_fd();
        let mut c = Command::new(args[0]);
        c.args(&args[1..]);
        // SAFETY: enter() makes one syscall and reads errno, both
        // async-signal-safe; the fd is open in the child until exec
        // (O_CLOEXEC).
        unsafe {
            c.pre_exec(move || enter(fd));
        }
        Ok((c, ns))
    }

    /// Run a program in the namespace without failing on its exit code
    /// (`ip netns exec`'s mount namespace left out: see [`Netns::command`]).
    pub fn run_status(&self, args: &[&str]) -> Output {
        let (mut c, _ns) = self.command(args).expect("open the namespace");
        c.output()
            .unwrap_or_else(|e| panic!("spawn {} in {}: {e}", args.join(" "), self.name))
    }

    /// `ip -n NAME ARGS...`
    pub fn ip(&self, args: &[&str]) -> Result<Output> {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Several `ip -n NAME ...` commands in one `ip` ([`ip_batch`]; it
    /// stops at the first that fails).
    pub fn ip_batch(&self, cmds: &[&[&str]]) -> Result<()> {
        let lines: String = cmds.iter().map(|c| c.join(" ") + "\n").collect();
        ip_batch(Some(&self.name), &lines, false)
    }

    /// Run a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Result<Output> {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Run a command inside the namespace with `text` in a temporary file
    /// whose path is its last argument (`nft -f`, `iptables-restore`); the
    /// file is removed whatever the command did.
    pub fn exec_file(&self, args: &[&str], text: &str) -> Result<Output> {
        let file = std::env::temp_dir().join(format!("tracer-{}-{}.in", self.name, args[0]));
        std::fs::write(&file, text)?;
        let mut v = args.to_vec();
        v.push(file.to_str().context("temp path")?);
        let r = self.exec(&v);
        let _ = std::fs::remove_file(&file);
        r
    }

    /// Run a command inside the namespace without failing on its exit code.
    pub fn exec_status(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("spawn ip netns exec")
    }

    /// `sysctl -w KEY=VAL` in the namespace, written in process: a thread
    /// in the namespace sees its own /proc/sys/net (as CNI plugins set
    /// theirs). The key is read as sysctl(8) reads it: `.` separates, and
    /// a `/` stands for a dot in a name (`net.ipv4.conf.eth0/100.rp_filter`
    /// for the interface `eth0.100`).
    pub fn sysctl(&self, key: &str, val: &str) -> Result<()> {
        let path = sysctl_path(key);
        self.within(|| std::fs::write(&path, val))
            .with_context(|| format!("sysctl {key}={val}"))
    }

    /// Spawn a background process inside the namespace (killed on drop of
    /// the returned guard).
    pub fn spawn(&self, args: &[&str]) -> Result<Child> {
        let (mut c, _ns) = self.command(args)?;
        let child = c
            .spawn()
            .with_context(|| format!("spawn {} in {}", args.join(" "), self.name))?;
        Ok(Child(child))
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace destroys its veths (and their peers):
        // what `ip netns del` does (netns_delete(): a lazy unmount of its
        // file, then unlink), without starting it; `ip` if that fails.
        let path = self.path();
        let c = std::ffi::CString::new(path.as_str()).expect("netns path");
        // SAFETY: a valid NUL-terminated path.
        let unmounted = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0;
        if !(unmounted && std::fs::remove_file(&path).is_ok()) {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.name])
                .output();
        }
    }
}

/// `ip [-n NS] [-force] -batch -` with `lines` on its stdin: one `ip`
/// for many commands (`-force`: past a failed one, which still fails the
/// whole).
pub fn ip_batch(netns: Option<&str>, lines: &str, force: bool) -> Result<()> {
    use std::io::Write;
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    if force {
        cmd.arg("-force");
    }
    let mut child = cmd
        .args(["-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("spawn ip -batch")?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(lines.as_bytes())
        .context("write to ip -batch")?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "`ip -batch` in {} failed ({}): {}\n{lines}",
            netns.unwrap_or("this namespace"),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The /proc/sys file of a sysctl(8) key (see [`Netns::sysctl`]).
fn sysctl_path(key: &str) -> String {
    let rel: String = key
        .chars()
        .map(|c| match c {
            '.' => '/',
            '/' => '.',
            c => c,
        })
        .collect();
    format!("/proc/sys/{rel}")
}

/// Move the calling thread (or a child between fork and exec) into the
/// network namespace open at `fd`.
fn enter(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: setns(2) on an fd the caller keeps open.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Set `dev` up in the calling thread's namespace (SIOCGIFFLAGS, then
/// SIOCSIFFLAGS with IFF_UP: `ip link set DEV up`).
fn link_up(dev: &str) -> std::io::Result<()> {
    use std::os::fd::FromRawFd;
    if dev.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    // SAFETY: socket(2); the fd is owned from here.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd of ours.
    let sock = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in ifr.ifr_name.iter_mut().zip(dev.bytes()) {
        *d = b as libc::c_char;
    }
    let ioctl = |req, ifr: &mut libc::ifreq| {
        // SAFETY: an ifreq for SIOC[GS]IFFLAGS on our socket.
        if unsafe { libc::ioctl(sock.as_raw_fd(), req, std::ptr::from_mut(ifr)) } < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    ioctl(libc::SIOCGIFFLAGS, &mut ifr)?;
    // SAFETY: SIOCGIFFLAGS filled in the flags member.
    unsafe { ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    ioctl(libc::SIOCSIFFLAGS, &mut ifr)
}

/// A background process killed on drop.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A veth pair `a_dev` in `a` and `b_dev` in `b`, both up.
pub fn veth(a: &Netns, a_dev: &str, b: &Netns, b_dev: &str) -> Result<()> {
    // One `ip` (`up` for the peer in the same command is refused:
    // ENOTCONN, iproute2 6.1), the peer set up in process.
    a.ip(&[
        "link", "add", a_dev, "up", "type", "veth", "peer", "name", b_dev, "netns", &b.name,
    ])?;
    b.set_up(b_dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_unique_and_short() {
        let a = unique_prefix();
        let b = unique_prefix();
        assert_ne!(a, b);
        assert!(a.len() <= 12, "{a}");
        assert!(a.starts_with("tt"));
    }

    #[test]
    fn sysctl_keys_are_read_as_sysctl_reads_them() {
        assert_eq!(
            sysctl_path("net.ipv4.ip_forward"),
            "/proc/sys/net/ipv4/ip_forward"
        );
        assert_eq!(
            sysctl_path("net.ipv4.neigh.vxlan/calico.retrans_time_ms"),
            "/proc/sys/net/ipv4/neigh/vxlan.calico/retrans_time_ms"
        );
    }

    #[test]
    fn failing_command_reports_itself() {
        let e = run(&["false"]).unwrap_err().to_string();
        assert!(e.contains("`false` failed"), "{e}");
    }
}
