//! The release artifacts of `cargo xtask dist` and `cargo xtask image`:
//! the static binary runs where there is nothing else (an empty root with
//! only /proc, /sys and /dev: no libc, no helper tool), and the container
//! image traces an incident as the host binary does.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use std::{
    ffi::CString,
    os::unix::{ffi::OsStrExt, process::CommandExt},
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;
use tracer_tests::{require_privileges, trace_scenario, tracer::with_launcher};

/// dist/ as `cargo xtask dist` leaves it ($TRACER_DIST_DIR overrides).
fn dist_dir() -> PathBuf {
    std::env::var_os("TRACER_DIST_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist"),
        PathBuf::from,
    )
}

fn artifact(name: &str) -> PathBuf {
    let p = dist_dir().join(name);
    assert!(
        p.exists(),
        "{} missing: build it with `cargo xtask image` (cargo xtask test does)",
        p.display()
    );
    p
}

/// A `tracer --version` line names version, commit, aya, the eBPF
/// object's build id and the target.
fn check_version(line: &str, target: &str) {
    let re = |k: &str| {
        line.split(&format!("{k} "))
            .nth(1)
            .and_then(|r| r.split([',', ')']).next())
            .unwrap_or("")
            .to_string()
    };
    assert!(line.starts_with("tracer 0."), "{line}");
    assert!(re("commit").len() >= 7, "{line}");
    assert!(re("aya").starts_with("0.14"), "{line}");
    let id = re("ebpf");
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{line}"
    );
    assert!(line.contains(target), "{line}");
}

/// No program interpreter: nothing to load, no libc needed (ELF64 LE,
/// program headers, PT_INTERP = 3).
fn has_interpreter(bytes: &[u8]) -> bool {
    let u16_at = |o: usize| usize::from(u16::from_le_bytes([bytes[o], bytes[o + 1]]));
    let phoff = usize::try_from(u64::from_le_bytes(bytes[0x20..0x28].try_into().unwrap())).unwrap();
    (0..u16_at(0x38)).any(|i| {
        let o = phoff + i * u16_at(0x36);
        u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) == 3
    })
}

#[test]
fn dist_binaries_are_static_with_sums() {
    let sums = std::fs::read_to_string(artifact("SHA256SUMS")).unwrap();
    for (arch, machine) in [("x86_64", 62u16), ("aarch64", 183)] {
        let name = format!("tracer-{arch}-linux-musl");
        let bytes = std::fs::read(artifact(&name)).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF", "{name}");
        assert_eq!(
            u16::from_le_bytes([bytes[18], bytes[19]]),
            machine,
            "{name}: e_machine"
        );
        assert!(!has_interpreter(&bytes), "{name} asks for a dynamic loader");
        // The sum listed is the file's (sha256sum -c, which tracer's users run).
        assert!(sums.contains(&format!("  {name}\n")), "{sums}");
    }
    let st = Command::new("sha256sum")
        .arg("-c")
        .arg("SHA256SUMS")
        .current_dir(dist_dir())
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
}

/// Run `args` of the binary chrooted into a directory holding only it and
/// /proc, /sys (with its sub-mounts: BTF, bpffs) and /dev, in a mount
/// namespace of its own (the mounts go with the process).
fn in_empty_root(bin: &Path, args: &[&str]) -> std::process::Output {
    let root = std::env::temp_dir().join(format!("tracer-emptyroot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for d in ["proc", "sys", "dev"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy(bin, root.join("tracer")).unwrap();
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
    let mounts: Vec<(CString, CString)> = ["proc", "sys", "dev"]
        .iter()
        .map(|d| (c(&Path::new("/").join(d)), c(&root.join(d))))
        .collect();
    let (slash, croot) = (c(Path::new("/")), c(&root));
    let mut cmd = Command::new("/tracer");
    cmd.args(args).env_clear();
    // SAFETY: only async-signal-safe syscalls between fork and exec, on
    // strings prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fail = || Err(std::io::Error::last_os_error());
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return fail();
            }
            let none = std::ptr::null();
            if libc::mount(
                none,
                slash.as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return fail();
            }
            for (from, to) in &mounts {
                if libc::mount(
                    from.as_ptr(),
                    to.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                {
                    return fail();
                }
            }
            if libc::chroot(croot.as_ptr()) != 0 || libc::chdir(slash.as_ptr()) != 0 {
                return fail();
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run tracer in the empty root");
    let _ = std::fs::remove_dir_all(&root);
    out
}

#[test]
fn static_binary_runs_in_an_empty_root() {
    if !require_privileges("static_binary_runs_in_an_empty_root") {
        return;
    }
    let bin = artifact("tracer-x86_64-linux-musl");
    let out = in_empty_root(&bin, &["--version"]);
    assert!(out.status.success(), "{out:?}");
    check_version(
        String::from_utf8_lossy(&out.stdout).trim(),
        "x86_64-unknown-linux-musl",
    );
    let out = in_empty_root(&bin, &["doctor", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "doctor failed in the empty root: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&text).unwrap();
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} check: {text}"))
            .clone()
    };
    assert_eq!(check("btf")["status"], "ok", "{text}");
    assert_eq!(check("hooks")["status"], "ok", "{text}");
    // Nothing under /run: no named namespace directory, said plainly.
    assert!(
        check("named netns")["detail"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{text}"
    );
    assert_eq!(report["ok"], true, "{text}");
}

fn podman(args: &[&str]) -> std::process::Output {
    Command::new("podman")
        .args(args)
        .output()
        .expect("podman runs (cargo xtask setup installs it)")
}

/// The image, loaded into podman, traces incident 3 (node-local DNS sent
/// out by a tc redirect) with the verdict the host binary gives. The
/// container is started the way `kubectl debug node/NAME --profile=sysadmin`
/// starts one: privileged, host PID and network, the node's root at /host
/// (tracer finds /run/netns there by itself).
#[test]
fn image_traces_an_incident_like_the_host_binary() {
    if !require_privileges("image_traces_an_incident_like_the_host_binary") {
        return;
    }
    let archive = artifact("tracer-image-x86_64.tar");
    let load = podman(&["load", "-q", "-i", &archive.display().to_string()]);
    assert!(load.status.success(), "podman load: {load:?}");
    let loaded = String::from_utf8_lossy(&load.stdout);
    let image = loaded
        .lines()
        .find_map(|l| l.strip_prefix("Loaded image: "))
        .unwrap_or_else(|| panic!("podman load said: {loaded}"))
        .trim()
        .to_string();
    let tmp = std::env::temp_dir().display().to_string();
    let launcher: Vec<String> = [
        "podman",
        // This machine's cgroups are hybrid v1/v2, which crun refuses; its
        // hard limits are below podman's default ulimits.
        "--runtime",
        "runc",
        "--cgroup-manager",
        "cgroupfs",
        "run",
        "--rm",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "--privileged",
        "--pid=host",
        "--network=host",
        "-v",
        "/:/host:ro",
        // The ready file and the recording, at the paths the test reads.
        "-v",
        &format!("{tmp}:{tmp}"),
        &image,
        "tracer",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    let Some((boxed, dump)) = with_launcher(launcher, || trace_scenario("incident3", 53)) else {
        return;
    };
    let Some((host, _)) = trace_scenario("incident3", 53) else {
        return;
    };
    let _ = podman(&["rmi", &image]);
    // Each run builds its own scene: its namespaces' prefix and the
    // redirecting program's id differ; the rest must not.
    let v = |f: &Value| {
        let netns = f["verdict"]["netns"].as_str().unwrap_or_default();
        let prefix = netns.rsplit_once('-').map_or("", |(p, _)| p);
        let mut where_ = f["verdict"]["where"]
            .as_str()
            .unwrap_or_default()
            .replace(prefix, "SCENE");
        if let Some(i) = where_.find("(id ") {
            let end = where_[i..].find(')').map_or(where_.len(), |e| i + e);
            where_.replace_range(i..end, "(id N");
        }
        (
            f["verdict"]["kind"].clone(),
            f["verdict"]["reason"].clone(),
            where_,
        )
    };
    assert_eq!(v(&boxed), v(&host), "{dump}");
    assert_eq!(boxed["verdict"]["kind"], "misrouted", "{dump}");
    // The redirect was named without tc or nsenter in the image.
    assert!(
        boxed["verdict"]["where"]
            .as_str()
            .unwrap()
            .contains("by tc BPF program hostroute_redir"),
        "{dump}"
    );
}
