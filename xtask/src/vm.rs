//! The kernel-matrix tier: boot Debian's own kernels under qemu (software
//! emulation, `-accel tcg`; KVM does not work on these machines) and run the
//! tracer's integration tests inside, with the real binaries.
//!
//! How the guest is built (the virtme approach, no disk image):
//! - the kernel package is fetched with `apt-get download`, unpacked and
//!   `depmod`ed under /var/cache/tracer-vm (cached between runs);
//! - a small initramfs (static busybox + the virtio/9p modules of *that*
//!   kernel) mounts the host's `/` read-only over 9p, puts tmpfs on /tmp,
//!   /run, /var/tmp and /root, mounts the kernel's own module tree over
//!   /usr/lib/modules, then `switch_root`s into it. Because PID 1 then lives
//!   in the host tree, the kernel's module auto-loading (request_module →
//!   /sbin/modprobe) finds ip_vs, veth, dummy, nf_conntrack ... by itself;
//! - the test script prints `test NAME ... ok|FAILED` lines on the serial
//!   console, which this side parses per kernel.

use std::{
    fs,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, ExitCode, Stdio},
    sync::mpsc,
    thread,
};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::cmd::{TestClock, TestOutcome, is_root, ok, output, root, run as sh, show, target_dir};

const CACHE: &str = "/var/cache/tracer-vm";

/// Host packages the VM tier needs (qemu, busybox for the initramfs, kmod
/// for depmod/modprobe, cpio, and ipvsadm, which the guest runs from the
/// host's tree).
const VM_APT: &[&str] = &[
    "qemu-system-x86",
    // qemu-system-aarch64, for the arm64 boot test (vm_arm.rs).
    "qemu-system-arm",
    "busybox-static",
    "kmod",
    "cpio",
    "ipvsadm",
];

/// The kernels of the matrix: a name, the apt package-name pattern (the
/// newest package matching is used) and the Debian suite to take it from
/// when it is not the host's (a private apt list, [`suite_apt`]).
const KERNELS: &[(&str, &str, Option<&str>)] = &[
    // Debian 11's kernel: no drop reasons in skb:kfree_skb (5.17+), no tcx
    // (6.6+): the inferred reasons and the tc netlink fallback.
    (
        "5.10",
        r"^linux-image-5\.10\.0-[0-9]+-amd64$",
        Some("bullseye"),
    ),
    ("6.1", r"^linux-image-6\.1\.0-[0-9]+-amd64$", None),
    ("6.12", r"^linux-image-6\.12\.[0-9]+\+deb12-amd64$", None),
];

/// The suites run inside each kernel: the incident suite, the verdict
/// suite, IPVS, the backends and the eBPF dataplane's (cleanup/safety/soak
/// stay on the host: the soak alone is minutes natively, hours under TCG;
/// so does the `--netns` sweep, netns_scope.rs: 373-389 s a guest under
/// load on 6.1 and 6.12 in rehearsal 23, the longest test of the matrix,
/// which put CI over its 40 minutes at stop 44, 2,505 s. The guests still
/// trace with `--netns`, clsact where there is no tcx, in the incidents'
/// incident4_with_netns_scope, `follow` and the dataplane's tests).
const SUITES: &[&str] = &["incidents", "follow", "ipvs", "backends", "ebpf_dataplane"];

/// The guests of the matrix, one per kernel, and the suites each runs:
/// [`GUESTS_AT_ONCE`] of them at a time, one vCPU each. 5.10 runs the
/// incidents, `follow` (its drop reasons are inferred there) and the
/// backends (its kprobe and fentry programs); IPVS's verdicts do not
/// depend on drop reasons and run on 6.1 and 6.12. The eBPF dataplane's
/// XDP and socket-level tests run on 5.10 (the xdp tracepoints' older
/// layout, the syscall tracepoints, cgroup sock_addr programs), its XDP
/// tests on 6.1 too (whose verifier refuses what 6.18's takes); on every
/// kernel they took 160-200 s a guest under load (rehearsal 22, session
/// 29). The tests whose work is userspace's (the DNS messages read from
/// packets, `--debug-bpf`'s explanation) run on 5.10 and the host only,
/// and the incidents on 5.10, 6.1 and the host: 6.12 runs `follow`, IPVS
/// and the backends, with tcx and fentry together, which no other kernel
/// here has (the guests are the suite's critical path: 2,300 s of CPU
/// in rehearsal 26, the host's stages beside them 1,940 s, on two
/// cores). Until session 33 each kernel ran in two guests one after the
/// other: a boot costs 14 s of CPU (6.12, alone), and the split balanced
/// nothing one guest does not.
const GUESTS: &[(&str, &[&str])] = &[
    (
        "6.1",
        &[
            "incidents",
            "follow:!dns|debug_bpf",
            "ipvs",
            "backends",
            "ebpf_dataplane:xdp",
        ],
    ),
    ("6.12", &["follow:!dns|debug_bpf", "ipvs", "backends"]),
    (
        "5.10",
        &[
            "follow",
            "incidents",
            "backends",
            "ebpf_dataplane:xdp|socket|nothing_seen",
        ],
    ),
];

/// A guest's suite entry: a suite, or a part of one
/// (`ebpf_dataplane:xdp`).
fn suite_part(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once(':') {
        Some((suite, part)) => (suite, Some(part)),
        None => (spec, None),
    }
}

/// The tests of a part, among `listed` (the suite's tests) that contain
/// `filter`: those whose name contains one of its `|` alternatives
/// (`ebpf_dataplane:xdp|socket`: the tests whose name contains `xdp` or
/// `socket`), or after a `!` none of them (`follow:!dns`).
fn part_tests<'a>(listed: &'a [String], part: &str, filter: Option<&str>) -> Vec<&'a str> {
    let (keep, names) = match part.strip_prefix('!') {
        Some(p) => (false, p),
        None => (true, part),
    };
    listed
        .iter()
        .map(String::as_str)
        .filter(|n| filter.is_none_or(|f| n.contains(f)))
        .filter(|n| names.split('|').any(|p| n.contains(p)) == keep)
        .collect()
}

/// The tests a test executable has (`--list`).
fn listed(bin: &Path) -> Result<Vec<String>> {
    let o = Command::new(bin).args(["--list"]).output()?;
    if !o.status.success() {
        bail!("{} --list failed", bin.display());
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect())
}

/// Guests running at once, one vCPU each, on the host's two cores: with
/// two, a third of the cores' time was idle while the guests ran (their
/// tests wait for servers, for tracer's ready file, for packets to
/// settle; session 19, /proc/stat sampled every 30 s), so a third guest
/// runs in that time.
const GUESTS_AT_ONCE: usize = 3;

#[derive(Args, Clone)]
pub(crate) struct VmArgs {
    /// Kernels to run: 5.10, 6.1, 6.12 (default: all).
    #[arg(long = "kernel")]
    pub kernels: Vec<String>,
    /// Only tests whose name contains this.
    #[arg(long)]
    pub filter: Option<String>,
    /// x86_64: the kernel matrix; aarch64: the arm64 boot test of the
    /// static binary (vm_arm.rs).
    #[arg(long, default_value = "x86_64")]
    pub arch: String,
}

#[derive(Default)]
pub(crate) struct KernelResult {
    pub kernel: String,
    pub passed: Vec<String>,
    pub failed: Vec<String>,
    pub booted: bool,
    /// Each test's wall time in the guest (`[kernel] suite::name`).
    pub times: Vec<(String, f64)>,
    /// Tests that said they skipped (`!!!!! SKIPPED` lines) or were ignored.
    pub skipped: u64,
    /// CPU seconds the guest's qemu used (user and system, wait4(2)).
    pub cpu_secs: f64,
}

/// Wait for `child` (`nice timeout qemu ...`: the same process, which
/// waits for qemu) and take its CPU time with its reaped children's, as
/// wait4(2) reports it: how much of the two cores a guest used.
fn wait_with_cpu(child: &mut std::process::Child) -> (String, f64) {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter for wait4.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own unwaited child; both pointers are live.
    let pid = unsafe { libc::wait4(child.id() as i32, &raw mut status, 0, &raw mut ru) };
    if pid < 0 {
        return (format!("{:?}", child.wait()), 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        format!("wait status {status:#x}"),
        secs(ru.ru_utime) + secs(ru.ru_stime),
    )
}

pub(crate) fn ensure_tools() -> Result<()> {
    let missing: Vec<&str> = VM_APT
        .iter()
        .copied()
        .filter(|p| {
            !output(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
                .contains("install ok installed")
        })
        .collect();
    if !missing.is_empty() {
        if !is_root() {
            bail!("the VM tier needs {missing:?} and root");
        }
        sh(Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    // The guest mounts its module tree over the host's /usr/lib/modules,
    // which must exist as a mount point (this machine ships no modules).
    fs::create_dir_all("/usr/lib/modules")?;
    Ok(())
}

/// apt options for the packages of another Debian suite (amd64), with a
/// sources list, package lists and cache of their own under
/// /var/cache/tracer-vm/SUITE: the host's apt state is left alone. The
/// lists are refreshed (`apt-get update` with the same options) at most
/// daily.
fn suite_apt(suite: &str) -> Result<Vec<String>> {
    let dir = Path::new(CACHE).join(suite);
    let opts: Vec<String> = [
        format!("Dir::Etc::sourcelist={}/sources.list", dir.display()),
        "Dir::Etc::sourceparts=-".to_string(),
        format!("Dir::State::Lists={}/lists", dir.display()),
        format!("Dir::Cache={}/apt-cache", dir.display()),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_string(), o])
    .collect();
    for d in ["lists/partial", "apt-cache/archives/partial"] {
        fs::create_dir_all(dir.join(d))?;
    }
    let sources = format!("deb http://deb.debian.org/debian {suite} main\n");
    let list = dir.join("sources.list");
    let same = fs::read_to_string(&list).is_ok_and(|old| old == sources);
    let fresh = fs::read_dir(dir.join("lists"))?
        .filter_map(std::result::Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("_Packages"))
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .any(|t| {
            std::time::SystemTime::now()
                .duration_since(t)
                .is_ok_and(|age| age < std::time::Duration::from_secs(86_400))
        });
    if !same || !fresh {
        fs::write(&list, sources)?;
        sh(Command::new("apt-get").args(&opts).args(["-q", "update"]))?;
    }
    Ok(opts)
}

/// Fetch, unpack and depmod one kernel; returns (dir, version). `apt`:
/// extra apt options (another architecture's package lists), or none.
pub(crate) fn kernel(apt: &[String], pattern: &str) -> Result<(PathBuf, String)> {
    let list =
        output(
            Command::new("apt-cache")
                .args(apt)
                .args(["search", "--names-only", pattern]),
        );
    let mut pkgs: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    pkgs.sort_by_key(|p| version_key(p));
    let pkg = pkgs
        .last()
        .with_context(|| format!("no package matches {pattern} (apt-get update?)"))?
        .clone();
    let version = pkg.trim_start_matches("linux-image-").to_string();
    let dir = Path::new(CACHE).join(&pkg);
    let vmlinuz = dir.join(format!("boot/vmlinuz-{version}"));
    let depfile = dir.join(format!("lib/modules/{version}/modules.dep"));
    if !vmlinuz.exists() || !depfile.exists() {
        fs::create_dir_all(CACHE)?;
        let deb = download(apt, &pkg, Path::new(CACHE))?;
        sh(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&dir))?;
        sh(Command::new("depmod").arg("-b").arg(&dir).arg(&version))?;
        let _ = fs::remove_file(deb);
    }
    Ok((dir, version))
}

/// `apt-get download PKG` into `into`; returns the .deb's path.
pub(crate) fn download(apt: &[String], pkg: &str, into: &Path) -> Result<PathBuf> {
    sh(Command::new("apt-get")
        .args(apt)
        .args(["download", pkg])
        .current_dir(into))?;
    fs::read_dir(into)?
        .filter_map(std::result::Result::ok)
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb")
        })
        .context("downloaded .deb not found")
}

/// Sort key: the numbers in a package name, so -56 > -9.
fn version_key(p: &str) -> Vec<u64> {
    p.split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod /mods/$m || echo "insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /host || { echo "VM-ERROR mount host root"; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 kmods /host/usr/lib/modules || echo "VM-ERROR mount modules"
for d in tmp run var/tmp root; do mount -t tmpfs tmpfs /host/$d; done
# The checkout (binaries, test fixtures) again, on top: a clone under /tmp or
# /root would otherwise be hidden by the tmpfs just mounted there.
REPO=$(sed -n 's/.*tracer.repo=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p "/host$REPO" 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose repo "/host$REPO" || echo "VM-ERROR mount repo $REPO"
mount -t proc proc /host/proc; mount -t sysfs sys /host/sys; mount -t devtmpfs dev /host/dev
mount -t bpf bpf /host/sys/fs/bpf; mount -t tracefs tracefs /host/sys/kernel/tracing; mount -t debugfs debugfs /host/sys/kernel/debug
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup || echo "VM-ERROR mount cgroup2"
SCRIPT=$(sed -n 's/.*tracer.script=\([^ ]*\).*/\1/p' /proc/cmdline)
echo "VM-READY $(uname -r)"
exec switch_root /host /bin/bash -c "cd /; export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; bash $SCRIPT; echo VM-EXIT \$?; echo o > /proc/sysrq-trigger; read -t 30 x"
"#;

/// The initramfs for one kernel: busybox, the init above, and the modules
/// (decompressed: busybox insmod takes plain ELF) that mounting 9p needs.
fn initramfs(dir: &Path, version: &str) -> Result<PathBuf> {
    let out = dir.join("initrd.gz");
    let work = dir.join("initrd");
    let _ = fs::remove_dir_all(&work);
    for d in ["bin", "mods", "proc", "sys", "dev", "host"] {
        fs::create_dir_all(work.join(d))?;
    }
    fs::copy("/bin/busybox", work.join("bin/busybox"))?;
    let order = modules(
        dir,
        version,
        &["virtio_pci", "9pnet_virtio", "9p"],
        &work.join("mods"),
    )?;
    if order.is_empty() {
        bail!("no 9p modules found for {version}");
    }
    fs::write(work.join("mods/order"), order.join("\n") + "\n")?;
    fs::write(work.join("init"), INIT)?;
    pack(&work, &out)?;
    Ok(out)
}

/// The modules `names` of the kernel in `dir` and their dependencies,
/// decompressed (busybox insmod takes plain ELF) into `dest`; returns
/// their file names in load order.
pub(crate) fn modules(
    dir: &Path,
    version: &str,
    names: &[&str],
    dest: &Path,
) -> Result<Vec<String>> {
    fs::create_dir_all(dest)?;
    let mut order: Vec<String> = Vec::new();
    for m in names {
        let deps = output(Command::new("modprobe").arg("-d").arg(dir).args([
            "-S",
            version,
            "--show-depends",
            m,
        ]));
        for l in deps.lines() {
            let mut w = l.split_whitespace();
            if w.next() != Some("insmod") {
                continue; // "builtin virtio_pci"
            }
            let path = PathBuf::from(w.next().context("insmod path")?);
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let plain = name
                .trim_end_matches(".xz")
                .trim_end_matches(".zst")
                .to_string();
            if order.contains(&plain) {
                continue;
            }
            let target = dest.join(&plain);
            let unpack = |tool: &str| -> Result<()> {
                let data = Command::new(tool).arg("-dc").arg(&path).output()?;
                if !data.status.success() {
                    bail!("{tool} -dc {} failed", path.display());
                }
                Ok(fs::write(&target, data.stdout)?)
            };
            if name.ends_with(".xz") {
                unpack("xz")?;
            } else if name.ends_with(".zst") {
                unpack("zstd")?;
            } else {
                fs::copy(&path, &target)?;
            }
            order.push(plain);
        }
    }
    Ok(order)
}

/// `work/init` made executable and `work` packed as a gzip'd newc cpio.
pub(crate) fn pack(work: &Path, out: &Path) -> Result<()> {
    sh(Command::new("chmod").arg("755").arg(work.join("init")))?;
    let cpio = format!(
        "cd '{}' && find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
        work.display(),
        out.display()
    );
    sh(Command::new("sh").args(["-c", &cpio]))
}

/// Test executables of the given suites (built by `cargo test --no-run`,
/// as [`crate::build::for_tests`] built them: nothing is built again).
fn test_binaries() -> Result<Vec<(String, PathBuf)>> {
    let o = Command::new("cargo")
        .current_dir(root())
        .args(crate::build::test_build())
        .stderr(Stdio::piped())
        .output()?;
    if !o.status.success() {
        bail!(
            "building the test binaries failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let mut bins = Vec::new();
    // "  Executable tests/follow.rs (target/release/deps/follow-0123abcd)"
    for l in err.lines() {
        let l = l.trim();
        let Some(rest) = l.strip_prefix("Executable tests/") else {
            continue;
        };
        let (file, path) = rest.split_once(' ').context("executable line")?;
        let suite = file.trim_end_matches(".rs").to_string();
        let path = path.trim_matches(|c| c == '(' || c == ')');
        if SUITES.contains(&suite.as_str()) {
            bins.push((suite, root().join(path)));
        }
    }
    Ok(bins)
}

/// How much slower than the host a TCG guest is taken to be: boot, program
/// verification and netns setup measured 4-8x slower in the guests.
const TIME_SCALE: u32 = 5;

fn script(
    kernel: &str,
    bins: &[(String, PathBuf, Vec<String>)],
    suites: &[&str],
    filter: Option<&str>,
) -> String {
    let mut s = String::from("set -u\n");
    // The static binary (build::for_tests): what an operator copies to a
    // node, run by every guest as by the host's tests.
    s += &format!(
        "export TRACER_BIN={} NETPROBE_BIN={}/release/netprobe\n",
        crate::dist::artifact("x86_64").display(),
        target_dir().display()
    );
    // Emulated guests run several times slower than the host: stretch the
    // tests' waits and timeouts (tests/src/lib.rs time_scale()).
    s += &format!("export TRACER_TIME_SCALE={TIME_SCALE}\n");
    // These kernels have IPVS, kprobes and fentry: a test that finds one
    // missing fails here instead of skipping.
    // 5.10 lacks some (bpf_get_func_ip, the neigh_update tp_btf program's
    // pointer-to-int argument): there its tests skip loudly.
    if kernel != "5.10" {
        s += "export TRACER_REQUIRE_KERNEL_FEATURES=1\n";
    }
    // Pass through a backend restriction given to `cargo xtask vm`.
    if let Ok(b) = std::env::var("TRACER_BACKENDS") {
        s += &format!("export TRACER_BACKENDS='{b}'\n");
    }
    // `TRACER_KEEP_RECORDINGS=DIR` on the host: the guest keeps each
    // scenario's recording in its tmpfs and prints them at the end
    // (`VM-RECORDING NAME BASE64`), written to DIR by run_kernel().
    if std::env::var_os("TRACER_KEEP_RECORDINGS").is_some() {
        s += "export TRACER_KEEP_RECORDINGS=/tmp/tracer-recordings\n";
    }
    // Said once per kernel: the `--netns` sweep is not among the guests'
    // suites ([`SUITES`]), so no guest logs verdicts for it.
    s += &format!(
        "echo '!!!!! SKIPPED ({kernel}, wall time) the netns_scope suite (every_scenario_is_judged_the_same_with_netns_scope): it runs on the host only !!!!!'\n"
    );
    if !suites.contains(&"incidents") {
        s += &format!(
            "echo '!!!!! SKIPPED ({kernel}, wall time) the incidents suite: it runs on 5.10, 6.1 and the host !!!!!'\n"
        );
    }
    s += &format!("cd {}/tests\n", root().display());
    // The modules a kube-proxy node has loaded, before tracer starts (it
    // resolves module functions and types once, at start).
    s += "for m in veth dummy bridge br_netfilter nf_conntrack nf_tables nft_compat ip_tables iptable_filter iptable_nat ip_vs ip_vs_rr; do modprobe -q $m || echo \"modprobe $m failed\"; done\n";
    s += "uname -r; $TRACER_BIN --version\n";
    // `TRACER_VM_VERIFIED=1`: the verifier's work per program on this
    // kernel (one start of `follow`, its debug log), to compare builds;
    // off in CI, where it would cost a start per guest.
    if std::env::var_os("TRACER_VM_VERIFIED").is_some() {
        s += "RUST_LOG=tracer=debug $TRACER_BIN follow 10.9.9.9:80 --duration 1 2>&1 | grep -E 'verified|ready|parsed|resolved|read:|created|loaded:|attached|started' | sed 's/^/verified: /'\n";
    }
    // What tracer makes of the kernel (one guest per kernel): a doctor is
    // a full plan with trial loads, seconds of CPU under emulation.
    s += "$TRACER_BIN doctor 2>&1 | sed 's/^/doctor: /'\n";
    // Issue 29's `N of M drop reasons explained`, per kernel.
    s += "$TRACER_BIN doctor --reasons 2>&1 | tail -n 1 | sed 's/^/doctor --reasons: /'\n";
    for spec in suites {
        let (suite, part) = suite_part(spec);
        let Some((_, path, tests)) = bins.iter().find(|(s, _, _)| s == suite) else {
            continue;
        };
        let args = match part {
            None => filter.unwrap_or("").to_string(),
            Some(p) => {
                let names = part_tests(tests, p, filter);
                if let Some(left) = p.strip_prefix('!')
                    && let out = part_tests(tests, left, filter)
                    && !out.is_empty()
                {
                    s += &format!(
                        "echo '!!!!! SKIPPED ({kernel}, wall time) {suite}: {}: run on other kernels (GUESTS, xtask/src/vm.rs) !!!!!'\n",
                        out.join(", ")
                    );
                }
                if names.is_empty() {
                    continue;
                }
                format!("--exact {}", names.join(" "))
            }
        };
        s += &format!(
            "echo \"VM-SUITE {suite}\"; {} --test-threads=1 --color never {args} 2>&1\n",
            path.display(),
        );
    }
    s += "for f in /tmp/tracer-recordings/*.rec; do [ -f \"$f\" ] && echo \"VM-RECORDING $(basename \"$f\") $(base64 -w0 \"$f\")\"; done\n";
    s
}

/// Boot one kernel and run the suites; every guest line is echoed with a
/// `[6.1]` prefix.
fn run_kernel(name: &str, dir: &Path, version: &str, initrd: &Path, script: &Path) -> KernelResult {
    let r = KernelResult {
        kernel: format!("{name} ({version})"),
        ..Default::default()
    };
    // Niced: `cargo xtask test` runs the host's integration tests while
    // the guests boot, and those take the CPU first (a guest's test waits
    // TIME_SCALE times longer; the host's do not).
    let mut c = Command::new("nice");
    c.args(["-n", "10", "timeout", "3600"])
        // qemu64, not max: a guest that sees fewer CPU features is cheaper
        // to emulate. Measured side by side, 6.12, one core each: tracer
        // ready in 3.8 and 4.2 s against 6.7 and 5.5 s, five `follow`
        // tests in 89 s against 94 s. Nothing the tests check depends on
        // the CPU's features (the BPF JIT and ftrace work on either).
        .args(["qemu-system-x86_64", "-accel", "tcg", "-cpu", "qemu64"])
        .args([
            "-smp",
            "1",
            "-m",
            "2048",
            "-nographic",
            "-no-reboot",
            "-nic",
            "none",
        ])
        .arg("-kernel")
        .arg(dir.join(format!("boot/vmlinuz-{version}")))
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        // mitigations=off: no retpolines in a throwaway test guest; three
        // tracer runs on 6.1 took 32.9 s of CPU against 35.6 s with them
        // (side by side, session 25). No test depends on them.
        // no_timer_check: a qemu64 guest starved by the host's compiler
        // failed the IO-APIC timer check and panicked at boot ("IO-APIC +
        // timer doesn't work!", 6.12, session 25); what every VM kernel is
        // told.
        .arg(format!(
            "console=ttyS0 quiet panic=-1 mitigations=off no_timer_check tracer.script={} tracer.repo={}",
            script.display(),
            root().display()
        ))
        .args([
            "-fsdev",
            "local,id=r,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device",
            "virtio-9p-pci,fsdev=r,mount_tag=hostroot",
            "-fsdev",
        ])
        .arg(format!(
            "local,id=m,path={},security_model=none,readonly=on",
            dir.join("lib/modules").display()
        ))
        .args(["-device", "virtio-9p-pci,fsdev=m,mount_tag=kmods"])
        .arg("-fsdev")
        .arg(format!(
            "local,id=p,path={},security_model=none,readonly=on,multidevs=remap",
            root().display()
        ))
        .args(["-device", "virtio-9p-pci,fsdev=p,mount_tag=repo"])
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    console(name, &mut c, r, |line, _| {
        if let Some(rec) = line.strip_prefix("VM-RECORDING ") {
            keep_recording(name, rec);
            return false;
        }
        true
    })
}

/// Run a guest (`c`, its console on stdout) and parse its console into
/// `r`: `VM-READY` (booted), `VM-SUITE NAME` (the suite of the test lines
/// that follow), `test NAME ... ok|FAILED`. Every line after boot is echoed
/// with a `[name]` prefix unless `on_line` (given the line and the result so
/// far) returns false; a guest that does not boot has its last lines shown.
pub(crate) fn console(
    name: &str,
    c: &mut Command,
    mut r: KernelResult,
    mut on_line: impl FnMut(&str, &mut KernelResult) -> bool,
) -> KernelResult {
    let mut child = match c.stdout(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("[{name}] could not start {}: {e}", show(c));
            return r;
        }
    };
    let mut suite = String::new();
    let mut clock = TestClock::default();
    let mut early: Vec<String> = Vec::new();
    // Every echoed line carries the seconds since the guest was started,
    // so the log shows where a guest's time goes (boot, each suite, each
    // test's setup, start and stop).
    let t0 = std::time::Instant::now();
    for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let Ok(line) = line else { break };
        let line = strip_ansi(&line.replace('\r', ""));
        if line.contains("VM-READY") {
            r.booted = true;
        }
        if !on_line(&line, &mut r) {
            continue;
        }
        if let Some(s) = line.strip_prefix("VM-SUITE ") {
            suite = s.trim().to_string();
            let _ = clock.line("", "running");
        }
        if line.contains("!!!!! SKIPPED") {
            r.skipped += 1;
        }
        match clock.line(&format!("[{name}] {suite}::"), &line) {
            Some((t, TestOutcome::Passed)) => r.passed.push(format!("{suite}::{t}")),
            Some((t, TestOutcome::Failed)) => r.failed.push(format!("{suite}::{t}")),
            Some((_, TestOutcome::Ignored)) => r.skipped += 1,
            None => {}
        }
        // A suite that failed with no failed test read (its `FAILED` glued
        // to a test's last output line) still fails the guest.
        let prefix = format!("{suite}::");
        if line.starts_with("test result: FAILED")
            && !r.failed.iter().any(|f| f.starts_with(&prefix))
        {
            r.failed.push(format!(
                "{suite}::(a test whose result line was not read: see the log)"
            ));
        }
        if r.booted && !line.trim().is_empty() {
            println!("[{name} {:>4.0}s] {line}", t0.elapsed().as_secs_f64());
        } else if !r.booted {
            early.push(line);
        }
    }
    let (status, cpu) = wait_with_cpu(&mut child);
    r.cpu_secs = cpu;
    r.times = clock.times;
    if !r.booted {
        eprintln!("[{name}] the guest did not boot ({status}); its last console lines:");
        for l in &early[early.len().saturating_sub(40)..] {
            eprintln!("[{name}]   {l}");
        }
    }
    r
}

/// `NAME BASE64` from a guest: written to $TRACER_KEEP_RECORDINGS/NAME.
fn keep_recording(kernel: &str, line: &str) {
    use base64::Engine;
    let (Some(dir), Some((file, data))) = (
        std::env::var_os("TRACER_KEEP_RECORDINGS"),
        line.split_once(' '),
    ) else {
        return;
    };
    let file = Path::new(file)
        .file_name()
        .map(std::borrow::ToOwned::to_owned);
    match (
        file,
        base64::engine::general_purpose::STANDARD.decode(data.trim()),
    ) {
        (Some(f), Ok(bytes)) => {
            let dest = Path::new(&dir).join(f);
            if let Err(e) = fs::create_dir_all(&dir).and_then(|()| fs::write(&dest, bytes)) {
                eprintln!("[{kernel}] keep recording {}: {e}", dest.display());
            }
        }
        _ => eprintln!("[{kernel}] a VM-RECORDING line that does not decode"),
    }
}

/// Drop terminal escape sequences (ESC [ ... letter) that the guest's
/// console output may carry.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            if it.peek() == Some(&'[') {
                it.next();
                for d in it.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Run the matrix; returns one result per kernel.
pub(crate) fn matrix(a: &VmArgs) -> Result<Vec<KernelResult>> {
    Ok(prepare(a)?.start().results())
}

/// One guest to boot: its label, kernel tree, version, initramfs and
/// script.
type Job = (String, PathBuf, String, PathBuf, PathBuf);

/// The guests of a matrix run, built and written, not yet booted.
pub(crate) struct Prepared {
    jobs: std::collections::VecDeque<Job>,
}

/// Guests running in the background ([`Prepared::start`]).
pub(crate) struct Running {
    rx: mpsc::Receiver<KernelResult>,
}

impl Running {
    /// Wait for every guest; one result per guest, by kernel.
    pub(crate) fn results(self) -> Vec<KernelResult> {
        let mut results: Vec<KernelResult> = self.rx.iter().collect();
        results.sort_by(|a, b| a.kernel.cmp(&b.kernel));
        results
    }
}

/// Kernel `name` of [`KERNELS`], fetched, unpacked and depmod'ed (cached
/// under [`CACHE`]); returns (dir, version).
fn fetch(name: &str) -> Result<(PathBuf, String)> {
    let (_, pattern, suite) = KERNELS
        .iter()
        .find(|(k, _, _)| *k == name)
        .expect("a kernel of the matrix");
    let apt = match suite {
        Some(s) => suite_apt(s)?,
        None => Vec::new(),
    };
    kernel(&apt, pattern)
}

/// The matrix's tools and kernels, fetched in the background while the
/// release build runs: on a fresh machine the qemu packages and three
/// kernel packages are downloaded and unpacked, which [`prepare`] would
/// otherwise do after the build, between it and the first guest's boot.
/// [`prepare`] finds them in the cache (it fetches again whatever this
/// could not, and reports the error then).
pub(crate) fn prefetch() -> thread::JoinHandle<Result<()>> {
    thread::spawn(|| {
        ensure_tools()?;
        for (name, _, _) in KERNELS {
            fetch(name)?;
        }
        Ok(())
    })
}

/// Everything the guests need, built and written before the first boots:
/// the release binaries and test executables, the static binary, the
/// kernels and their initramfs, each guest's script. Nothing is built
/// once the guests run, so cargo may run the host's tests meanwhile.
pub(crate) fn prepare(a: &VmArgs) -> Result<Prepared> {
    if !is_root() {
        bail!("the VM tier needs root (apt, /var/cache, qemu)");
    }
    ensure_tools()?;
    if !ok(Command::new("qemu-system-x86_64").arg("--version")) {
        bail!("qemu-system-x86_64 does not run");
    }
    crate::build::for_tests()?;
    let mut bins = Vec::new();
    for (suite, path) in test_binaries()? {
        let tests = listed(&path)?;
        bins.push((suite, path, tests));
    }
    let run_dir = Path::new(CACHE).join("run");
    fs::create_dir_all(&run_dir)?;
    let mut jobs = std::collections::VecDeque::new();
    // One guest per kernel (`one_guest_per_kernel`): each kernel is
    // fetched and packed once.
    for (name, suites) in GUESTS {
        if !a.kernels.is_empty() && !a.kernels.iter().any(|k| k == name) {
            continue;
        }
        let (dir, version) = fetch(name)?;
        let initrd = initramfs(&dir, &version)?;
        let sc = run_dir.join(format!("{name}.sh"));
        fs::write(&sc, script(name, &bins, suites, a.filter.as_deref()))?;
        jobs.push_back(((*name).to_string(), dir, version, initrd, sc));
    }
    Ok(Prepared { jobs })
}

impl Prepared {
    /// Boot the guests in the background: [`GUESTS_AT_ONCE`] workers take
    /// them in turn (longest first).
    pub(crate) fn start(self) -> Running {
        let jobs = std::sync::Arc::new(std::sync::Mutex::new(self.jobs));
        let (tx, rx) = mpsc::channel();
        for _ in 0..GUESTS_AT_ONCE {
            let (tx, jobs) = (tx.clone(), jobs.clone());
            thread::spawn(move || {
                loop {
                    let Some((name, dir, version, initrd, sc)) =
                        jobs.lock().expect("guest queue").pop_front()
                    else {
                        break;
                    };
                    let t0 = std::time::Instant::now();
                    let r = run_kernel(&name, &dir, &version, &initrd, &sc);
                    eprintln!(
                        "[{name}] guest done in {:.0} s, {:.0} s of CPU",
                        t0.elapsed().as_secs_f64(),
                        r.cpu_secs
                    );
                    let _ = tx.send(r);
                }
            });
        }
        Running { rx }
    }
}

/// Print the results under `title`; returns (passed, failed).
pub(crate) fn report(title: &str, results: &[KernelResult]) -> (u64, u64) {
    let (mut p, mut f) = (0u64, 0u64);
    eprintln!("\n==== {title} (qemu TCG) ====");
    for r in results {
        if !r.booted {
            eprintln!("{}: did NOT boot", r.kernel);
            f += 1;
            continue;
        }
        eprintln!(
            "{}: {} passed, {} failed",
            r.kernel,
            r.passed.len(),
            r.failed.len()
        );
        for t in &r.failed {
            eprintln!("    FAILED {t}");
        }
        if r.passed.is_empty() && r.failed.is_empty() {
            eprintln!("    no test ran: counted as a failure");
            f += 1;
        }
        p += r.passed.len() as u64;
        f += r.failed.len() as u64;
    }
    (p, f)
}

pub(crate) fn run(a: VmArgs) -> Result<ExitCode> {
    let (title, results) = match a.arch.as_str() {
        "x86_64" => ("kernel matrix", matrix(&a)?),
        "aarch64" => {
            if !is_root() {
                bail!("the VM tier needs root (apt, /var/cache, qemu)");
            }
            ensure_tools()?;
            ("aarch64 boot", vec![crate::vm_arm::run()?])
        }
        other => bail!("unknown architecture {other:?}: x86_64 or aarch64"),
    };
    let (p, f) = report(title, &results);
    println!("vm tests: {p} passed, {f} failed");
    Ok(if f == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part takes the tests whose name has one of its `|` alternatives,
    /// or after `!` those whose name has none.
    #[test]
    fn a_named_part_takes_the_tests_that_name_it() {
        let listed: Vec<String> = ["a_refused_xdp_redirect", "socket_lb_rewrite", "tc_drops"]
            .iter()
            .map(|s| (*s).to_string())
            .collect();
        assert_eq!(
            part_tests(&listed, "xdp|socket", None),
            ["a_refused_xdp_redirect", "socket_lb_rewrite"]
        );
        assert_eq!(part_tests(&listed, "xdp", None), ["a_refused_xdp_redirect"]);
        assert!(part_tests(&listed, "xdp", Some("socket")).is_empty());
        assert_eq!(part_tests(&listed, "!xdp|socket", None), ["tc_drops"]);
        assert_eq!(
            part_tests(&listed, "!tc", Some("_")),
            ["a_refused_xdp_redirect", "socket_lb_rewrite"]
        );
    }

    /// One guest per kernel, and a suite's part is a suite.
    #[test]
    fn one_guest_per_kernel() {
        for (k, _, _) in KERNELS {
            assert_eq!(GUESTS.iter().filter(|(g, _)| g == k).count(), 1, "{k}");
        }
        for (_, suites) in GUESTS {
            for s in *suites {
                assert!(SUITES.contains(&suite_part(s).0), "{s}");
            }
        }
        assert_eq!(
            suite_part("ebpf_dataplane:xdp"),
            ("ebpf_dataplane", Some("xdp"))
        );
        assert_eq!(suite_part("ipvs"), ("ipvs", None));
    }

    #[test]
    fn strips_escapes_and_orders_versions() {
        assert_eq!(
            strip_ansi("test a ... \x1b[31mFAILED\x1b[m"),
            "test a ... FAILED"
        );
        let mut v = ["linux-image-6.1.0-9-amd64", "linux-image-6.1.0-56-amd64"];
        v.sort_by_key(|p| version_key(p));
        assert_eq!(v[1], "linux-image-6.1.0-56-amd64");
    }
}
