//! Running the real tracer binary and reading its JSON output.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The tracer binary: $TRACER_BIN, else target/{release,debug}/tracer.
pub fn tracer_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACER_BIN") {
        return p.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for profile in ["release", "debug"] {
        let p = root.join("target").join(profile).join("tracer");
        if p.exists() {
            return p;
        }
    }
    panic!("tracer binary not found: build it (cargo xtask build) or set TRACER_BIN");
}

thread_local! {
    /// A command line that runs tracer instead of [`tracer_bin`] on this
    /// thread (each test runs on its own): e.g. `podman run ... IMAGE
    /// tracer`, to which tracer's arguments are appended.
    static LAUNCHER: std::cell::RefCell<Option<Vec<String>>> =
        const { std::cell::RefCell::new(None) };
}

/// Run `f` with tracer started through `launcher` (see [`LAUNCHER`]).
pub fn with_launcher<T>(launcher: Vec<String>, f: impl FnOnce() -> T) -> T {
    LAUNCHER.with(|l| *l.borrow_mut() = Some(launcher));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            LAUNCHER.with(|l| *l.borrow_mut() = None);
        }
    }
    let _reset = Reset;
    f()
}

/// How long (before [`crate::time_scale`]) [`TracerRun::start`] waits for
/// tracer's ready file: the longest start-up a test accepts (a scene's
/// servers outlive it, scenarios::serve).
pub const READY_TIMEOUT_MS: u64 = 30_000;

/// Whether this thread starts tracer through a launcher.
pub fn launcher_active() -> bool {
    LAUNCHER.with(|l| l.borrow().is_some())
}

/// The command that starts tracer: the launcher of this thread, if any,
/// else the binary.
pub fn tracer_command() -> Command {
    LAUNCHER.with(|l| match l.borrow().as_deref() {
        Some([program, args @ ..]) => {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
        _ => Command::new(tracer_bin()),
    })
}

/// The netprobe helper built next to this test binary.
/// A `/proc/PID/status` line's value in KiB (`VmHWM:`, `VmRSS:`).
pub fn status_kib(pid: i32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

pub fn netprobe_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("NETPROBE_BIN") {
        return p.into();
    }
    // Integration tests live in target/<profile>/deps; bins in target/<profile>.
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    for cand in [dir.join("netprobe"), dir.join("..").join("netprobe")] {
        if cand.exists() {
            return cand;
        }
    }
    panic!(
        "netprobe not found near {}: cargo build -p tracer-tests --bins",
        exe.display()
    );
}

/// What a run keeps of tracer's stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// All of it.
    All,
    /// The summary line only (and the count of all lines): with 100k flows
    /// tracer prints ~200k records, hundreds of MiB.
    Summary,
}

pub struct TracerRun {
    child: Option<Child>,
    /// Readers draining stdout/stderr while tracer runs (a full pipe would
    /// block its writes, and with them its exit): what they kept, and how
    /// many lines they read.
    readers: Vec<std::thread::JoinHandle<(String, u64)>>,
    ready: PathBuf,
    pub stdout: String,
    /// Lines tracer wrote to stdout (kept or not).
    pub stdout_lines: u64,
    pub stderr: String,
    pub status: Option<std::process::ExitStatus>,
    /// How the stop went: time from the signal to exit, and, when the
    /// tracer did not exit in time, where its threads were in the kernel.
    pub stop_note: String,
    /// Started with `--debug-bpf`: the kernel programs' log may be on
    /// stderr. Without it, every run's [`TracerRun::stop`] refuses that
    /// log (the programs' log level is off unless asked for).
    debug_bpf: bool,
}

/// Each thread's state and kernel stack: what a tracer that does not exit
/// after SIGINT is waiting for (read before it is killed).
fn thread_stacks(pid: u32) -> String {
    let mut s = String::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return s;
    };
    for t in tasks.flatten() {
        let p = t.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
        let stat = read("stat");
        // The state letter follows the ")" that closes the command name.
        let state = stat
            .rsplit_once(')')
            .map_or('?', |(_, r)| r.trim().chars().next().unwrap_or('?'));
        s += &format!(
            "thread {} ({}) state {state} wchan {}\n{}",
            t.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan"),
            read("stack")
        );
    }
    // Children too (a helper command it waits for), with their command line.
    for c in children(pid) {
        let cmdline = std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default();
        let cmdline: String = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        s += &format!("child {c}: {cmdline}\n{}", thread_stacks(c));
    }
    s
}

/// Processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(d) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    d.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| {
                    // After ") S ": the parent pid.
                    st.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse::<u32>()
                        .ok()
                })
                == Some(pid)
        })
        .collect()
}

impl TracerRun {
    /// Start `tracer follow TARGET -o json --ready-file F [extra]` and wait
    /// until every probe is attached.
    pub fn start(target: &str, extra: &[&str]) -> Result<TracerRun> {
        TracerRun::start_fmt(target, "json", extra)
    }

    /// Same with another output format (`text` for the demo).
    pub fn start_fmt(target: &str, format: &str, extra: &[&str]) -> Result<TracerRun> {
        TracerRun::start_env(target, format, extra, &[])
    }

    /// Same with extra environment for the tracer (TRACER_BACKENDS, ...).
    pub fn start_env(
        target: &str,
        format: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<TracerRun> {
        TracerRun::start_keep(target, format, extra, env, Keep::All)
    }

    /// Same, keeping only what `keep` says of stdout.
    pub fn start_keep(
        target: &str,
        format: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        keep: Keep,
    ) -> Result<TracerRun> {
        let ready = std::env::temp_dir().join(format!(
            "tracer-ready-{}-{}",
            std::process::id(),
            crate::netns::unique_prefix()
        ));
        let _ = std::fs::remove_file(&ready);
        let mut cmd = tracer_command();
        cmd.args(["follow", target, "-o", format, "--ready-file"])
            .arg(&ready)
            .args(extra)
            // No CPU budget unless the test sets one: what tracer leaves
            // out over it (packet bytes, nftrace) would make verdicts
            // depend on how fast the machine runs (the guests emulate).
            .args(
                (!extra.contains(&"--max-cpu"))
                    .then_some(["--max-cpu", "0"])
                    .into_iter()
                    .flatten(),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("spawn tracer")?;
        let drain = |mut r: Box<dyn std::io::Read + Send>, keep: Keep| {
            std::thread::spawn(move || {
                let mut s = String::new();
                if keep == Keep::All {
                    let _ = r.read_to_string(&mut s);
                    let n = s.lines().count() as u64;
                    return (s, n);
                }
                let mut n = 0;
                use std::io::BufRead;
                for l in std::io::BufReader::new(r).lines().map_while(Result::ok) {
                    n += 1;
                    if l.contains("\"type\":\"summary\"") {
                        s = l;
                    }
                }
                (s, n)
            })
        };
        let readers = vec![
            drain(Box::new(child.stdout.take().expect("stdout")), keep),
            drain(Box::new(child.stderr.take().expect("stderr")), Keep::All),
        ];
        let mut run = TracerRun {
            child: Some(child),
            readers,
            ready: ready.clone(),
            stdout: String::new(),
            stdout_lines: 0,
            stderr: String::new(),
            status: None,
            stop_note: String::new(),
            debug_bpf: extra.contains(&"--debug-bpf"),
        };
        let t0 = Instant::now();
        while !ready.exists() {
            if let Some(st) = run.child.as_mut().unwrap().try_wait()? {
                run.collect()?;
                bail!("tracer exited before ready ({st}): {}", run.stderr);
            }
            if t0.elapsed() > crate::scaled_ms(READY_TIMEOUT_MS) {
                run.signal(libc::SIGKILL);
                run.collect()?;
                bail!("tracer not ready after {:?}: {}", t0.elapsed(), run.stderr);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(run)
    }

    /// The ready file tracer was given (`--ready-file`).
    pub fn ready_file(&self) -> &std::path::Path {
        &self.ready
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    pub fn signal(&self, sig: i32) {
        if self.pid() > 0 {
            unsafe { libc::kill(self.pid(), sig) };
        }
    }

    /// Wait for exit (bounded) and read both streams.
    pub fn collect(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            let t0 = Instant::now();
            loop {
                if let Some(st) = c.try_wait()? {
                    self.status = Some(st);
                    break;
                }
                if t0.elapsed() > crate::scaled_ms(30_000) {
                    self.stop_note = format!(
                        "tracer had not exited {} ms after the stop signal; killed. Its threads:\n{}",
                        t0.elapsed().as_millis(),
                        thread_stacks(c.id())
                    );
                    let _ = c.kill();
                    self.status = Some(c.wait()?);
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if self.stop_note.is_empty() {
                self.stop_note = format!(
                    "exited {} ms after the stop signal",
                    t0.elapsed().as_millis()
                );
            }
            let mut readers = std::mem::take(&mut self.readers).into_iter();
            if let Some(o) = readers.next() {
                (self.stdout, self.stdout_lines) = o.join().unwrap_or_default();
            }
            if let Some(e) = readers.next() {
                self.stderr = e.join().unwrap_or_default().0;
            }
        }
        Ok(())
    }

    /// Let in-flight events settle, stop with SIGINT, and return stdout.
    pub fn stop_raw(&mut self) -> Result<String> {
        std::thread::sleep(crate::scaled_ms(700));
        self.signal(libc::SIGINT);
        self.collect()?;
        Ok(std::mem::take(&mut self.stdout))
    }

    /// Let in-flight events settle, stop with SIGINT, and parse the JSON.
    pub fn stop(mut self) -> Result<TracerOutput> {
        std::thread::sleep(crate::scaled_ms(700));
        self.signal(libc::SIGINT);
        self.collect()?;
        let lines: Vec<Value> = self
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).with_context(|| format!("bad JSON line: {l}")))
            .collect::<Result<_>>()?;
        // aya-log's lines name the eBPF crate ("tracer_ebpf::filter").
        if !self.debug_bpf && self.stderr.contains("tracer_ebpf") {
            bail!(
                "kernel programs' debug log without --debug-bpf:\n{}",
                self.stderr
            );
        }
        Ok(TracerOutput {
            lines,
            stderr: std::mem::take(&mut self.stderr),
            status: self.status,
            stop_note: std::mem::take(&mut self.stop_note),
        })
    }
}

impl Drop for TracerRun {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.ready);
    }
}

pub struct TracerOutput {
    pub lines: Vec<Value>,
    pub stderr: String,
    pub status: Option<std::process::ExitStatus>,
    pub stop_note: String,
}

impl TracerOutput {
    pub fn final_flows(&self) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|l| l["type"] == "flow" && l["final"] == true)
            .collect()
    }

    pub fn summary(&self) -> Option<&Value> {
        self.lines.iter().find(|l| l["type"] == "summary")
    }

    /// The final flow whose original destination port is `dport`.
    pub fn flow_to(&self, dport: u64) -> &Value {
        self.final_flows()
            .into_iter()
            .find(|f| f["original"]["dport"] == dport)
            .unwrap_or_else(|| panic!("no flow to port {dport}:\n{}", self.dump()))
    }

    pub fn dump(&self) -> String {
        let mut s = format!(
            "status: {:?}, {}\nstderr: {}\n",
            self.status, self.stop_note, self.stderr
        );
        for l in &self.lines {
            s.push_str(&l.to_string());
            s.push('\n');
        }
        s
    }
}
