//! The aarch64 boot test: the static `dist/tracer-aarch64-linux-musl` on
//! Debian's arm64 kernel, under `qemu-system-aarch64 -M virt` (TCG).
//!
//! The guest is one initramfs, no 9p (the host's tree holds x86 binaries):
//! the arm64 static busybox, the tracer, and the modules the scene needs
//! (veth; sch_ingress and cls_bpf for a netlink tc fallback), all from
//! Debian's arm64 packages, fetched with apt's own options for another
//! architecture and a private list directory under /var/cache/tracer-vm.
//! The guest runs `tracer --version`, `tracer doctor`, and one scene: a
//! veth pair into a namespace (`unshare -n`, the peer moved by PID) and a
//! TCP connection to a port nothing listens on, followed with `-o json`.
//! Its console carries markers (`VM-RC step N`, `VM-OUT step line`) that
//! this side turns into tests; the verdict is read from the JSON here.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{
    cmd::{ok, run as sh},
    vm::{self, KernelResult},
};

const DIR: &str = "/var/cache/tracer-vm/arm64";

/// The newest Debian arm64 kernel of the host's suite (versioned images
/// only: not the meta-packages, cloud or rt flavours).
const KERNEL: &str = r"^linux-image-[0-9]+\.[0-9]+\.[0-9]+(-[0-9]+)?(\+deb[0-9]+)?-arm64$";

/// Modules loaded before the scene (with their dependencies).
const MODULES: &[&str] = &["veth", "sch_ingress", "cls_bpf"];

/// The followed address and port (the namespace's end of the veth pair).
const TARGET: &str = "10.99.0.2:9";

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t bpf bpf /sys/fs/bpf; mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug; mount -t tmpfs tmpfs /tmp
for m in $(cat /mods/order); do insmod /mods/$m || echo "insmod $m failed"; done
echo "VM-READY $(uname -r) $(uname -m)"
step() { name=$1; shift; "$@" > /tmp/$name 2>&1; rc=$?; sed "s/^/VM-OUT $name /" /tmp/$name; echo "VM-RC $name $rc"; }
step version tracer --version
step doctor tracer doctor
# The scene: vta (10.99.0.1) here, its peer (10.99.0.2) in a namespace of
# its own; busybox ip names the peer veth0 and moves links by PID.
ip link set lo up
unshare -n sleep 3600 & NS=$!
sleep 1
ip link add vta type veth && ip link set veth0 netns $NS
nsenter -n -t $NS sh -c 'ip link set lo up; ip addr add 10.99.0.2/24 dev veth0; ip link set veth0 up'
ip addr add 10.99.0.1/24 dev vta; ip link set vta up
tracer follow TARGET --proto tcp -o json --count 1 --duration 120s --ready-file /tmp/ready > /tmp/follow.json 2> /tmp/follow.err & TP=$!
i=0; while [ ! -e /tmp/ready ] && [ $i -lt 240 ] && kill -0 $TP 2>/dev/null; do sleep 0.5; i=$((i+1)); done
echo "VM-OUT follow ready after $i half-seconds"
nc -w 5 10.99.0.2 9 < /dev/null; echo "VM-OUT follow nc exit $?"
wait $TP; rc=$?
sed 's/^/VM-OUT follow /' /tmp/follow.err
sed 's/^/VM-JSON /' /tmp/follow.json
echo "VM-RC follow $rc"
kill $NS
echo "VM-EXIT"
poweroff -f
"#;

/// apt options for arm64 packages of the host's suite, with lists of their
/// own (the host's apt state is left alone).
fn apt_opts() -> Vec<String> {
    [
        "APT::Architecture=arm64",
        "APT::Architectures::=arm64",
        &format!("Dir::State::Lists={DIR}/lists"),
        &format!("Dir::Etc::sourcelist={DIR}/sources.list"),
        "Dir::Etc::sourceparts=-",
        &format!("Dir::Cache={DIR}/apt-cache"),
    ]
    .iter()
    .flat_map(|o| ["-o".to_string(), (*o).to_string()])
    .collect()
}

/// The host's Debian suite (VERSION_CODENAME of /etc/os-release).
fn suite() -> Result<String> {
    let os = fs::read_to_string("/etc/os-release")?;
    os.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|s| s.trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .context("no VERSION_CODENAME in /etc/os-release: not Debian?")
}

/// Write the sources list and refresh the arm64 lists (at most daily).
fn update_lists(apt: &[String]) -> Result<()> {
    let s = suite()?;
    let key = "signed-by=/usr/share/keyrings/debian-archive-keyring.gpg";
    let sources = format!(
        "deb [arch=arm64 {key}] http://deb.debian.org/debian {s} main\n\
         deb [arch=arm64 {key}] http://deb.debian.org/debian {s}-updates main\n\
         deb [arch=arm64 {key}] http://deb.debian.org/debian-security {s}-security main\n"
    );
    for d in ["lists/partial", "apt-cache/archives/partial"] {
        fs::create_dir_all(Path::new(DIR).join(d))?;
    }
    let list = Path::new(DIR).join("sources.list");
    let same = fs::read_to_string(&list).is_ok_and(|old| old == sources);
    let fresh = fs::read_dir(Path::new(DIR).join("lists"))?
        .filter_map(std::result::Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("_Packages"))
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .any(|t| {
            SystemTime::now()
                .duration_since(t)
                .is_ok_and(|age| age < Duration::from_secs(86_400))
        });
    if same && fresh {
        return Ok(());
    }
    fs::write(&list, sources)?;
    sh(Command::new("apt-get").args(apt).args(["-q", "update"]))
}

/// The arm64 static busybox, unpacked once.
fn busybox(apt: &[String]) -> Result<PathBuf> {
    let bin = Path::new(DIR).join("busybox/bin/busybox");
    if !bin.exists() {
        let deb = vm::download(apt, "busybox-static", Path::new(DIR))?;
        sh(Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(Path::new(DIR).join("busybox")))?;
        let _ = fs::remove_file(deb);
    }
    Ok(bin)
}

/// busybox, tracer, the modules and the init script, packed.
fn initramfs(kdir: &Path, version: &str, busybox: &Path, tracer: &Path) -> Result<PathBuf> {
    let work = Path::new(DIR).join("initrd");
    let out = Path::new(DIR).join("initrd.gz");
    let _ = fs::remove_dir_all(&work);
    for d in ["bin", "proc", "sys", "dev", "tmp"] {
        fs::create_dir_all(work.join(d))?;
    }
    fs::copy(busybox, work.join("bin/busybox"))?;
    fs::copy(tracer, work.join("bin/tracer"))?;
    let order = vm::modules(kdir, version, MODULES, &work.join("mods"))?;
    if !order.iter().any(|m| m.starts_with("veth.")) {
        bail!("no veth module in {version}");
    }
    fs::write(work.join("mods/order"), order.join("\n") + "\n")?;
    fs::write(work.join("init"), INIT.replace("TARGET", TARGET))?;
    vm::pack(&work, &out)?;
    Ok(out)
}

/// Fetch, build, boot and judge; the stage fails (Err) when a prerequisite
/// is missing, and the result counts every check that did not pass.
pub(crate) fn run() -> Result<KernelResult> {
    let t0 = Instant::now();
    if !ok(Command::new("qemu-system-aarch64").arg("--version")) {
        bail!("qemu-system-aarch64 does not run (apt-get install qemu-system-arm)");
    }
    let tracer = crate::dist::build(&["aarch64".to_string()])?
        .pop()
        .context("no aarch64 artifact")?;
    let t_dist = t0.elapsed();
    let apt = apt_opts();
    update_lists(&apt)?;
    let (kdir, version) = vm::kernel(&apt, KERNEL)?;
    let bb = busybox(&apt)?;
    let t_fetch = t0.elapsed();
    let initrd = initramfs(&kdir, &version, &bb, &tracer)?;
    let t_initrd = t0.elapsed();
    let mut c = Command::new("timeout");
    c.args(["900", "qemu-system-aarch64", "-M", "virt", "-accel", "tcg"])
        // pauth-impdef: QEMU's cheap pointer-authentication hash, several
        // times faster under TCG than the architected one.
        .args(["-cpu", "max,pauth-impdef=on", "-smp", "2", "-m", "2048"])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(kdir.join(format!("boot/vmlinuz-{version}")))
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", "console=ttyAMA0 quiet panic=-1"])
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let name = "aarch64";
    let r = KernelResult {
        kernel: format!("aarch64 ({version}, static musl binary)"),
        ..Default::default()
    };
    let mut seen = Vec::new();
    let mut t_ready = None;
    let mut r = vm::console(name, &mut c, r, |line, r| {
        if r.booted && t_ready.is_none() {
            t_ready = Some(t0.elapsed());
        }
        if line.starts_with("VM-") {
            seen.push(line.to_string());
        }
        // The JSON is long: shown only when the verdict check fails.
        !line.starts_with("VM-JSON ")
    });
    let t_end = t0.elapsed();
    judge(&seen, &mut r);
    eprintln!(
        "aarch64 timings: dist {:.0?}, fetch {:.0?}, initramfs {:.0?}, boot to init {:.0?}, boot and scenario {:.0?}",
        t_dist,
        t_fetch.saturating_sub(t_dist),
        t_initrd.saturating_sub(t_fetch),
        t_ready.unwrap_or_default().saturating_sub(t_initrd),
        t_end.saturating_sub(t_initrd)
    );
    Ok(r)
}

/// Lines of a step (`VM-OUT step ...`) and its exit code (`VM-RC step N`).
fn step<'a>(lines: &'a [String], name: &str) -> (Vec<&'a str>, Option<i32>) {
    let out = format!("VM-OUT {name} ");
    let rc = format!("VM-RC {name} ");
    let text = lines.iter().filter_map(|l| l.strip_prefix(&out)).collect();
    let code = lines
        .iter()
        .find_map(|l| l.strip_prefix(&rc)?.trim().parse().ok());
    (text, code)
}

/// The guest's markers, turned into the three tests.
fn judge(lines: &[String], r: &mut KernelResult) {
    let mut check = |test: &str, why: Option<String>| match why {
        None => r.passed.push(format!("aarch64::{test}")),
        Some(w) => {
            eprintln!("[aarch64] FAILED {test}: {w}");
            r.failed.push(format!("aarch64::{test}"));
        }
    };
    let (out, rc) = step(lines, "version");
    check(
        "version",
        (rc != Some(0) || !out.iter().any(|l| l.contains("aarch64-unknown-linux-musl")))
            .then(|| format!("exit {rc:?}, output {out:?}")),
    );
    let (out, rc) = step(lines, "doctor");
    let has = |p: &str| out.iter().any(|l| l.starts_with(p));
    check(
        "doctor",
        (rc != Some(0) || !has("ok   btf") || !has("ok   tc"))
            .then(|| format!("exit {rc:?}; wanted exit 0 with `ok btf` and `ok tc`")),
    );
    let (_, rc) = step(lines, "follow");
    let json: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("VM-JSON "))
        .collect();
    let why = follow_verdict(&json).err().map(|e| {
        format!(
            "exit {rc:?}: {e:#}\n{}",
            json.iter().fold(String::new(), |mut s, l| {
                let _ = writeln!(s, "    {l}");
                s
            })
        )
    });
    let why = why.or_else(|| (rc != Some(0)).then(|| format!("tracer exit {rc:?}")));
    check("follow_tcp_closed_port_dropped_no_socket", why);
}

/// The flow to the target must be dropped with NO_SOCKET in the
/// namespace, no event lost.
fn follow_verdict(json: &[&str]) -> Result<()> {
    let values: Vec<Value> = json
        .iter()
        .map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}")))
        .collect::<Result<_>>()?;
    let summary = values
        .iter()
        .find(|v| v["type"] == "summary")
        .context("no summary line")?;
    if summary["lost_events"] != 0 {
        bail!("lost events: {}", summary["lost_events"]);
    }
    let (addr, port) = TARGET.split_once(':').expect("ADDR:PORT");
    let port: u64 = port.parse()?;
    let flow = values
        .iter()
        .find(|v| {
            v["type"] == "flow"
                && v["final"] == true
                && v["original"]["dst"] == addr
                && v["original"]["dport"] == port
        })
        .context("no final flow to the target")?;
    let v = &flow["verdict"];
    if v["kind"] != "dropped" || v["reason"] != "NO_SOCKET" {
        bail!(
            "verdict {} / {}, wanted dropped / NO_SOCKET",
            v["kind"],
            v["reason"]
        );
    }
    let where_ = v["where"].as_str().unwrap_or_default();
    if !where_.starts_with("tcp_v4_rcv in netns") {
        bail!("dropped at {where_:?}, wanted tcp_v4_rcv in the namespace");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_markers() {
        let lines: Vec<String> = [
            "VM-OUT version tracer 0.1.0 (commit x, aya 0.14.0, ebpf y, aarch64-unknown-linux-musl)",
            "VM-RC version 0",
            "VM-OUT doctor ok   btf           126694 types",
            "VM-OUT doctor ok   tc            tcx links",
            "VM-RC doctor 0",
            r#"VM-JSON {"type":"flow","final":true,"original":{"src":"10.99.0.1","sport":4,"dst":"10.99.0.2","dport":9},"verdict":{"kind":"dropped","reason":"NO_SOCKET","where":"tcp_v4_rcv in netns pid:9(sleep)"}}"#,
            r#"VM-JSON {"type":"summary","lost_events":0}"#,
            "VM-RC follow 0",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        let mut r = KernelResult {
            booted: true,
            ..Default::default()
        };
        judge(&lines, &mut r);
        assert_eq!(r.passed.len(), 3, "{:?}", r.failed);
        let mut r2 = KernelResult {
            passed: vec![],
            failed: vec![],
            ..r
        };
        judge(&lines[..4], &mut r2);
        assert_eq!(r2.passed.len(), 1);
        assert_eq!(r2.failed.len(), 2);
    }
}
