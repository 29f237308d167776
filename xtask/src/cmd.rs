//! Running commands loudly.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

/// The workspace root (xtask lives one level below it).
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Cargo's target directory: $CARGO_TARGET_DIR (relative to the
/// workspace root when relative), else target/ of the workspace.
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => root().join(d),
        _ => root().join("target"),
    }
}

pub(crate) fn show(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Run with inherited stdio; fail with the command line.
pub(crate) fn run(c: &mut Command) -> Result<()> {
    eprintln!("+ {}", show(c));
    let st = c.status().with_context(|| format!("spawn {}", show(c)))?;
    if !st.success() {
        bail!("`{}` failed: {st}", show(c));
    }
    Ok(())
}

/// A test's result line as libtest prints it (`test NAME ... ok`): the
/// name and whether it passed, failed or was ignored.
pub(crate) fn test_line(line: &str) -> Option<(&str, TestOutcome)> {
    let rest = line.strip_prefix("test ")?;
    [
        (" ... ok", TestOutcome::Passed),
        (" ... FAILED", TestOutcome::Failed),
        (" ... ignored", TestOutcome::Ignored),
    ]
    .into_iter()
    .find_map(|(suffix, o)| rest.strip_suffix(suffix).map(|n| (n, o)))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TestOutcome {
    Passed,
    Failed,
    Ignored,
}

/// Wall time of each test of a libtest run, read from its output as it
/// streams: with `--test-threads=1` a test's line ends when it does, so
/// its time is from the previous result (or the `running N tests` line).
/// A test that prints (a `--nocapture` run, or output the harness does
/// not capture) splits its line: `test NAME ... ` then its output, then
/// `ok` alone on a line; the outcome is still its.
#[derive(Default)]
pub(crate) struct TestClock {
    mark: Option<std::time::Instant>,
    pub(crate) times: Vec<(String, f64)>,
    /// The test whose line was split, waiting for its outcome.
    pending: Option<String>,
}

impl TestClock {
    /// Read one line; the test it ends and how, if it ends one.
    pub(crate) fn line(&mut self, prefix: &str, line: &str) -> Option<(String, TestOutcome)> {
        let now = std::time::Instant::now();
        if line.starts_with("running ") {
            self.mark = Some(now);
            self.pending = None;
            return None;
        }
        let done = if let Some((name, o)) = test_line(line) {
            self.pending = None;
            Some((name.to_string(), o))
        } else if let Some((name, _)) = line
            .strip_prefix("test ")
            .and_then(|r| r.split_once(" ... "))
        {
            self.pending = Some(name.to_string());
            None
        } else {
            let o = match line.trim() {
                "ok" => Some(TestOutcome::Passed),
                "FAILED" => Some(TestOutcome::Failed),
                "ignored" => Some(TestOutcome::Ignored),
                _ => None,
            };
            o.and_then(|o| self.pending.take().map(|n| (n, o)))
        };
        if let Some((name, _)) = &done {
            let since = self.mark.unwrap_or(now);
            self.times
                .push((format!("{prefix}{name}"), (now - since).as_secs_f64()));
            self.mark = Some(now);
        }
        done
    }
}

/// [`run_tee`], timing each test (see [`TestClock`]).
pub(crate) fn run_tee_timed(c: &mut Command, clock: &mut TestClock) -> Result<(bool, String)> {
    eprintln!("+ {}", show(c));
    let mut child = c
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn {}", show(c)))?;
    let mut captured = String::new();
    for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let line = line?;
        println!("{line}");
        let _ = clock.line("", &line);
        captured.push_str(&line);
        captured.push('\n');
    }
    Ok((child.wait()?.success(), captured))
}

/// Does the command run and succeed (output discarded)?
pub(crate) fn ok(c: &mut Command) -> bool {
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn output(c: &mut Command) -> String {
    c.output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

pub(crate) fn is_root() -> bool {
    output(Command::new("id").arg("-u")).trim() == "0"
}

/// The machine's CPU time so far, from /proc/stat's first line (USER_HZ
/// ticks): all of it, the busy part, and the niced part (the kernel
/// matrix's guests run niced, the host's work does not).
#[derive(Clone, Copy, Default)]
pub(crate) struct CpuTicks {
    total: u64,
    busy: u64,
    niced: u64,
}

impl CpuTicks {
    pub(crate) fn now() -> CpuTicks {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        CpuTicks::parse(stat.lines().next().unwrap_or(""))
    }

    /// `cpu  user nice system idle iowait irq softirq steal ...`
    fn parse(line: &str) -> CpuTicks {
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|n| n.parse().ok())
            .collect();
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        let total: u64 = v.iter().take(8).sum();
        CpuTicks {
            total,
            busy: total - at(3) - at(4),
            niced: at(1),
        }
    }

    /// Since `earlier`, in cores: (busy, of which niced, cores).
    pub(crate) fn cores_since(&self, earlier: &CpuTicks, secs: f64) -> (f64, f64, f64) {
        let per_core = |ticks: u64| ticks as f64 / 100.0 / secs.max(0.001);
        (
            per_core(self.busy.saturating_sub(earlier.busy)),
            per_core(self.niced.saturating_sub(earlier.niced)),
            per_core(self.total.saturating_sub(earlier.total)),
        )
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::CpuTicks;

    #[test]
    fn busy_cores_come_from_proc_stat() {
        let a = CpuTicks::parse("cpu  100 50 20 800 30 0 0 0 0 0");
        let b = CpuTicks::parse("cpu  250 150 40 820 30 0 0 0 0 0");
        // 1 s: 270 busy ticks (2.7 core-seconds), 100 niced, 290 in all.
        let (busy, niced, cores) = b.cores_since(&a, 1.0);
        assert!((busy - 2.7).abs() < 1e-9 && (niced - 1.0).abs() < 1e-9);
        assert!((cores - 2.9).abs() < 1e-9);
    }
}
