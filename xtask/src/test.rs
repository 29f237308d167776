//! Everything CI checks, continuing after a failure so the summary is
//! complete: formatting, the release build, then the kernel matrix's
//! guests in the background while clippy (host and eBPF), the unit tests,
//! the other release artifacts, the privileged integration tests against
//! the release binary and the arm64 boot run. Each stage is timed; the run
//! ends with a table of the stages (wall seconds, tests
//! passed/failed/skipped, cores busy and niced) and the ten slowest tests,
//! which CI's log keeps (docs/testing.md: the budget).

use std::{
    process::{Command, ExitCode},
    thread,
    time::Instant,
};

use clap::Args;

use crate::cmd::{CpuTicks, TestClock, is_root, root, run as sh, run_tee_timed};

#[derive(Args)]
pub(crate) struct TestArgs {
    /// Skip `setup` (tools already installed).
    #[arg(long)]
    no_setup: bool,
    /// Only formatting, clippy and unit tests.
    #[arg(long)]
    unit_only: bool,
    /// Only integration tests whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// Skip the kernel-matrix tier (Debian 5.10, 6.1 and 6.12 under qemu).
    #[arg(long)]
    no_vm: bool,
    /// Run only these stages (repeatable): setup, fmt, clippy,
    /// clippy-ebpf, unit, release, dist, integration, vm,
    /// arm. The stages they need (a release build, the dist binaries) are
    /// built on the way when missing.
    #[arg(long = "stage", value_parser = clap::builder::PossibleValuesParser::new(STAGES))]
    stages: Vec<String>,
}

/// The stages' keys, in the order they run.
const STAGES: [&str; 10] = [
    "setup",
    "fmt",
    "clippy",
    "clippy-ebpf",
    "unit",
    "release",
    "dist",
    "integration",
    "vm",
    "arm",
];

/// One stage's row of the closing table.
struct Row {
    name: String,
    ok: bool,
    secs: f64,
    passed: u64,
    failed: u64,
    skipped: u64,
    /// Cores busy on average while the stage ran, and of those the niced
    /// ones (the kernel matrix's guests): where the two cores went.
    busy: f64,
    niced: f64,
}

/// What a stage counted of its tests.
#[derive(Default)]
struct Counts {
    passed: u64,
    failed: u64,
    skipped: u64,
    /// Each test's wall time, where the runner lets us see it.
    times: Vec<(String, f64)>,
}

impl Counts {
    /// Add the counts of cargo's "test result:" lines.
    fn cargo_results(&mut self, out: &str) {
        for l in out.lines().filter(|l| l.starts_with("test result:")) {
            let num = |key: &str| -> u64 {
                l.split(';')
                    .find(|p| p.contains(key))
                    .and_then(|p| p.split_whitespace().rev().nth(1))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            };
            self.passed += num(" passed");
            self.failed += num(" failed");
            self.skipped += num(" ignored");
        }
    }
}

#[derive(Default)]
struct Tally {
    rows: Vec<Row>,
    times: Vec<(String, f64)>,
    /// Tests that skipped themselves for a missing kernel feature.
    skipped: Vec<String>,
    only: Vec<String>,
    /// When the run began: the closing table's wall total.
    started: Option<Instant>,
}

impl Tally {
    fn wanted(&self, key: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == key)
    }

    /// Run stage `key` (named `name` in the table) when wanted: `f` says
    /// whether it passed and fills in its test counts.
    fn stage(&mut self, key: &str, name: &str, f: impl FnOnce(&mut Counts) -> bool) -> bool {
        if !self.wanted(key) {
            return true;
        }
        eprintln!("\n==> {name} ...");
        let (t0, cpu) = (Instant::now(), CpuTicks::now());
        let mut c = Counts::default();
        let ok = f(&mut c);
        self.record(name, ok, t0.elapsed().as_secs_f64(), &cpu, c);
        ok
    }

    /// A stage's row: its result, wall seconds and tests.
    fn record(&mut self, name: &str, ok: bool, secs: f64, cpu: &CpuTicks, mut c: Counts) {
        let (busy, niced, cores) = CpuTicks::now().cores_since(cpu, secs);
        eprintln!(
            "==> {name}: {} in {secs:.0} s ({busy:.2} of {cores:.0} cores busy, {niced:.2} niced)",
            if ok { "ok" } else { "FAILED" }
        );
        self.times.append(&mut c.times);
        self.rows.push(Row {
            name: name.to_string(),
            ok,
            secs,
            passed: c.passed,
            failed: c.failed,
            skipped: c.skipped,
            busy,
            niced,
        });
    }

    /// The closing table: stages, then the slowest ten tests.
    fn print(&mut self) {
        eprintln!("\n==== stages ====");
        eprintln!(
            "{:<52} {:>7} {:>7} {:>7} {:>7} {:>5} {:>5}  result",
            "stage", "seconds", "passed", "failed", "skipped", "busy", "niced"
        );
        for r in &self.rows {
            eprintln!(
                "{:<52} {:>7.0} {:>7} {:>7} {:>7} {:>5.2} {:>5.2}  {}",
                r.name,
                r.secs,
                r.passed,
                r.failed,
                r.skipped,
                r.busy,
                r.niced,
                if r.ok { "ok" } else { "FAILED" }
            );
        }
        // Not the rows' sum: the kernel matrix runs beside the host's
        // integration tests and the arm64 boot.
        eprintln!(
            "{:<52} {:>7.0}",
            "total (wall)",
            self.started.map_or(0.0, |t0| t0.elapsed().as_secs_f64())
        );
        self.times.sort_by(|a, b| b.1.total_cmp(&a.1));
        eprintln!("\n==== slowest tests (wall seconds) ====");
        for (name, secs) in self.times.iter().take(10) {
            eprintln!("{secs:>7.1}  {name}");
        }
    }
}

fn cargo(args: &[&str]) -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root()).args(args);
    c
}

/// Run a cargo test command, counting and timing its tests.
fn cargo_tests(c: &mut Command, n: &mut Counts) -> bool {
    let mut clock = TestClock::default();
    match run_tee_timed(c, &mut clock) {
        Ok((ok, out)) => {
            n.cargo_results(&out);
            n.times.append(&mut clock.times);
            ok
        }
        Err(e) => {
            eprintln!("{e:#}");
            false
        }
    }
}

pub(crate) fn run(a: TestArgs) -> ExitCode {
    let mut t = Tally {
        only: a.stages.clone(),
        started: Some(Instant::now()),
        ..Tally::default()
    };
    if !a.no_setup {
        t.stage("setup", "setup", |_| {
            let r = crate::setup::ensure();
            if let Err(e) = &r {
                eprintln!("setup failed: {e:#}");
            }
            r.is_ok()
        });
    }
    fmt(&mut t);
    let run_vm = !a.unit_only && !a.no_vm && t.wanted("vm");
    let fetching = run_vm.then(crate::vm::prefetch);
    let built = !a.unit_only && release(&mut t);
    // The guests boot now and run in the background, niced, while clippy,
    // the unit tests, the rest of the release artifacts (aarch64, images),
    // the host's integration tests (--test-threads=1: a core mostly idle)
    // and the arm64 boot run: the kernel matrix is the longest stage, and
    // its guests take the CPU the host's work leaves (the compiler's
    // serial phases left a core idle for part of clippy and the unit
    // build).
    if let Some(Ok(Err(e))) = fetching.map(thread::JoinHandle::join) {
        eprintln!(
            "kernel matrix: fetching its kernels in the background failed ({e:#}); trying again"
        );
    }
    let guests = run_vm.then(|| start_matrix(&a));
    clippy(&mut t);
    unit(&mut t);
    if !a.unit_only {
        dist(&mut t);
        if built {
            integration(&a, &mut t);
        }
        if !a.no_vm {
            arm(&mut t);
        }
        if let Some(g) = guests {
            finish_matrix(g, &mut t);
        }
    }

    if !t.skipped.is_empty() {
        eprintln!(
            "\n!!!!! {} test(s) SKIPPED on this kernel (they run in the kernel matrix) !!!!!",
            t.skipped.len()
        );
        for l in &t.skipped {
            eprintln!("    SKIPPED {l}");
        }
    }
    t.print();
    let failed_stages = t.rows.iter().filter(|r| !r.ok).count() as u64;
    let failed: u64 = t.rows.iter().map(|r| r.failed).sum();
    let passed: u64 = t.rows.iter().map(|r| r.passed).sum();
    // Failed stages that ran no test (fmt, clippy, build) count as failures.
    println!(
        "tests: {passed} passed, {} failed ({} skipped here for kernel features, run in the VMs)",
        failed.max(failed_stages),
        t.skipped.len()
    );
    if failed_stages == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Formatting, first: a second's check that fails a badly formatted
/// change before anything is built.
fn fmt(t: &mut Tally) {
    t.stage("fmt", "fmt", |_| {
        sh(&mut cargo(&["fmt", "--all", "--", "--check"])).is_ok()
    });
}

/// Clippy, host and eBPF.
fn clippy(t: &mut Tally) {
    t.stage("clippy", "clippy (host)", |_| {
        sh(&mut cargo(&[
            "clippy",
            "--workspace",
            "--exclude",
            "tracer-ebpf",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
        .is_ok()
    });
    t.stage("clippy-ebpf", "clippy (ebpf)", |_| {
        let mut ebpf = Command::new("rustup");
        ebpf.current_dir(root()).args([
            "run",
            "nightly",
            "cargo",
            "clippy",
            "-p",
            "tracer-ebpf",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--",
            "-D",
            "warnings",
        ]);
        sh(&mut ebpf).is_ok()
    });
}

/// Unit and property tests of every crate but tracer-tests, whose unit
/// tests run with its integration tests (one release build of it and of
/// its dev-dependencies, k8s-openapi and jsonschema, not two). They run
/// with the stable toolchain alone: no nightly, no bpf-linker
/// (AYA_BUILD_SKIP=1 builds tracer without its kernel object, which no
/// unit test loads), so they stay runnable for anyone, in one debug
/// build (a second run with the kernel object embedded, the former
/// `unit-stable` stage, rebuilt tracer to run the same tests again).
fn unit(t: &mut Tally) {
    t.stage(
        "unit",
        "unit and property tests (stable, no eBPF toolchain)",
        |n| {
            let mut c = cargo(&[
                "+stable",
                "test",
                "--workspace",
                "--exclude",
                "tracer-ebpf",
                "--exclude",
                "tracer-tests",
                "--lib",
                "--bins",
                "--tests",
            ]);
            c.env("AYA_BUILD_SKIP", "1");
            // A build made once and thrown away: no incremental state, and
            // line tables for a failing test's backtrace instead of full
            // debug information. Measured on a clean target directory
            // (session 33): 136 s against 173 s.
            c.env("CARGO_INCREMENTAL", "0");
            c.env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only");
            c.env("CARGO_PROFILE_TEST_DEBUG", "line-tables-only");
            // rustup's proxy picks the toolchain from "+stable" only when cargo
            // is started through it.
            c.env_remove("RUSTUP_TOOLCHAIN");
            cargo_tests(&mut c, n)
        },
    );
}

/// The release build the tests run (build::for_tests: the static x86_64
/// binary and the test helpers); true when it was built.
fn release(t: &mut Tally) -> bool {
    if t.wanted("release") {
        t.stage(
            "release",
            "release build (static x86_64 binary, test helpers)",
            |_| crate::build::for_tests().is_ok(),
        )
    } else {
        // `--stage integration` alone: the binary it runs, built quietly.
        t.wanted("integration") && crate::build::for_tests().is_ok()
    }
}

/// The release artifacts the dist tests check (static binaries of both
/// architectures, images); their failure shows in those tests too. The
/// x86_64 binary is already built (release): this is aarch64's build and
/// the images, beside the kernel matrix's guests.
fn dist(t: &mut Tally) {
    t.stage("dist", "static binaries and images (dist/)", |_| {
        let dist = crate::image::build(&[]);
        if let Err(e) = &dist {
            eprintln!("dist: {e:#}");
        }
        dist.is_ok()
    });
}

/// The privileged integration tests on this kernel.
fn integration(a: &TestArgs, t: &mut Tally) {
    let mut skipped = Vec::new();
    t.stage(
        "integration",
        "integration tests (netns, real binary, kernel 6.x)",
        |n| {
            if !is_root() {
                eprintln!(
                    "\n!!!!! integration tests need root (network namespaces, eBPF); {} !!!!!\n",
                    if std::env::var("TRACER_SKIP_PRIVILEGED").as_deref() == Ok("1") {
                        "TRACER_SKIP_PRIVILEGED=1: they will print SKIPPED"
                    } else {
                        "they will FAIL (set TRACER_SKIP_PRIVILEGED=1 to skip them loudly)"
                    }
                );
            }
            let mut c = cargo(&crate::build::TEST_ARGS);
            // The static binary (build::for_tests), as the guests run it.
            c.env("TRACER_BIN", crate::dist::artifact("x86_64"));
            // The verdicts each test reached, for the `--netns` sweep
            // (tracer_tests::verdict_log): fresh for this run.
            let verdicts =
                std::env::temp_dir().join(format!("tracer-verdicts-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&verdicts);
            c.env("TRACER_VERDICT_LOG", &verdicts);
            // Tests of kernel features this machine lacks (IPVS, kprobes,
            // fentry) list themselves here; the summary names them.
            let skips = std::env::temp_dir().join(format!("tracer-skips-{}", std::process::id()));
            let _ = std::fs::remove_file(&skips);
            c.env("TRACER_SKIP_LOG", &skips);
            c.arg("--");
            if let Some(f) = &a.filter {
                c.arg(f);
            }
            c.arg("--test-threads=1");
            let ok = cargo_tests(&mut c, n);
            skipped = std::fs::read_to_string(&skips)
                .map(|s| s.lines().map(str::to_string).collect())
                .unwrap_or_default();
            n.skipped += skipped.len() as u64;
            let _ = std::fs::remove_file(&skips);
            let _ = std::fs::remove_dir_all(&verdicts);
            ok
        },
    );
    t.skipped.extend(skipped);
}

/// The kernel matrix, started: its guests run in the background from
/// here (vm::prepare builds what they need first, in the foreground).
struct Matrix {
    t0: Instant,
    cpu: CpuTicks,
    guests: Result<crate::vm::Running, String>,
}

fn start_matrix(a: &TestArgs) -> Matrix {
    eprintln!("\n==> kernel matrix: starting its guests (they run in the background) ...");
    let vm = crate::vm::VmArgs {
        kernels: vec![],
        filter: a.filter.clone(),
        arch: "x86_64".into(),
    };
    let (t0, cpu) = (Instant::now(), CpuTicks::now());
    let guests = crate::vm::prepare(&vm)
        .map(crate::vm::Prepared::start)
        .map_err(|e| format!("{e:#}"));
    Matrix { t0, cpu, guests }
}

/// Wait for the matrix's guests; their stage's time runs from
/// [`start_matrix`].
fn finish_matrix(m: Matrix, t: &mut Tally) {
    let mut c = Counts::default();
    let ok = match m.guests {
        Ok(g) => kernel_counts("kernel matrix", &g.results(), &mut c),
        Err(e) => {
            eprintln!("kernel matrix: {e}");
            false
        }
    };
    t.record(
        "kernel matrix (qemu TCG: Debian 5.10, 6.1, 6.12; beside the host's tests)",
        ok,
        m.t0.elapsed().as_secs_f64(),
        &m.cpu,
        c,
    );
}

/// The aarch64 boot test of the static binary.
fn arm(t: &mut Tally) {
    t.stage(
        "arm",
        "aarch64 boot (qemu TCG: Debian arm64, static binary)",
        |n| match crate::vm::ensure_tools().and_then(|()| crate::vm_arm::run()) {
            Ok(r) => kernel_counts("aarch64 boot", std::slice::from_ref(&r), n),
            Err(e) => {
                eprintln!("aarch64 boot: {e:#}");
                false
            }
        },
    );
}

/// Count guests' results into a stage; true when none failed.
fn kernel_counts(title: &str, results: &[crate::vm::KernelResult], n: &mut Counts) -> bool {
    let (p, f) = crate::vm::report(title, results);
    n.passed += p;
    n.failed += f;
    for r in results {
        n.skipped += r.skipped;
        n.times.extend(r.times.iter().cloned());
    }
    f == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::{TestOutcome, test_line};

    #[test]
    fn sums_cargo_result_lines() {
        let mut t = Counts::default();
        t.cargo_results(
            "running 3 tests\ntest result: ok. 40 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.2s\n\
             test result: FAILED. 8 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 17s\n",
        );
        assert_eq!((t.passed, t.failed, t.skipped), (48, 1, 2));
    }

    #[test]
    fn times_tests_from_their_lines() {
        assert_eq!(
            test_line("test a::b ... FAILED"),
            Some(("a::b", TestOutcome::Failed))
        );
        assert_eq!(test_line("test result: ok. 1 passed"), None);
        let mut c = TestClock::default();
        assert!(c.line("", "running 4 tests").is_none());
        assert_eq!(
            c.line("", "test one ... ok"),
            Some(("one".into(), TestOutcome::Passed))
        );
        assert!(c.line("", "some output").is_none());
        assert!(c.line("k::", "test two ... ignored").is_some());
        // A test that printed: its outcome comes alone on a later line.
        assert!(
            c.line("", "test three ... connected to 10.0.0.1:80")
                .is_none()
        );
        assert!(c.line("", "ok, said the server").is_none());
        assert_eq!(
            c.line("", "ok"),
            Some(("three".into(), TestOutcome::Passed))
        );
        assert!(c.line("", "test four ... ").is_none());
        assert_eq!(
            c.line("", "FAILED"),
            Some(("four".into(), TestOutcome::Failed))
        );
        // A bare `ok` with no test waiting is nobody's.
        assert!(c.line("", "ok").is_none());
        let names: Vec<&str> = c.times.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["one", "k::two", "three", "four"]);
        assert!(c.times.iter().all(|(_, s)| *s >= 0.0));
    }
}
