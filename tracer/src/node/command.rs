//! External commands with a time limit: iptables-legacy-save and
//! ip6tables-legacy-save, the only ones tracer runs, and only for a
//! namespace with legacy iptables tables (everything else is read by
//! netlink in-process). They run from the event loop (between two ticks) and again
//! for the final report, so one that never finishes (seen once under qemu:
//! a tracer still in poll(2) on a helper's pipe 150 s after SIGINT) would
//! stop the loop from seeing Ctrl-C at all. Past the limit the command is
//! killed and its output left out, with a warning; a tool that hung once
//! is not run again in this trace (each call would stall the loop again).

use std::{
    collections::BTreeSet,
    io::Read,
    process::{Command, Stdio},
    sync::Mutex,
    time::{Duration, Instant},
};

/// Whether `tool` is an executable file in a directory of $PATH.
pub fn installed(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            std::fs::metadata(d.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Tools that hung in this process.
static HUNG: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// How long a helper may take. iptables-save on a node with ~20k rules takes
/// 1-2 s; ten times that is a hung command, not a slow one.
pub const LIMIT: Duration = Duration::from_secs(10);

/// Why [`output_within`] returned nothing.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("could not start {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("{0} exited with {1}")]
    Failed(String, std::process::ExitStatus),
    #[error("{0} did not finish within {1:?}; killed, and not run again")]
    TimedOut(String, Duration),
    #[error("{0} hung earlier in this trace; not run")]
    Skipped(&'static str),
}

/// Run `cmd` (the tool `tool`), return its stdout if it succeeds within
/// `limit`. Stdout is read on a thread while waiting: a large ruleset fills
/// the pipe, and a child blocked on a full pipe would never exit.
pub fn output_within(
    tool: &'static str,
    cmd: &mut Command,
    limit: Duration,
) -> Result<Vec<u8>, CommandError> {
    if HUNG.lock().is_ok_and(|h| h.contains(tool)) {
        return Err(CommandError::Skipped(tool));
    }
    let mut what = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        what.push(' ');
        what.push_str(&a.to_string_lossy());
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| CommandError::Spawn(what.clone(), e))?;
    let mut out = child.stdout.take().expect("stdout is piped");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(reader.join().unwrap_or_default()),
            Ok(Some(st)) => return Err(CommandError::Failed(what, st)),
            Ok(None) if t0.elapsed() < limit => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                if let Ok(mut h) = HUNG.lock() {
                    h.insert(tool);
                }
                // The reader thread ends when the pipe closes; not joined,
                // in case a grandchild still holds it open.
                return Err(CommandError::TimedOut(what, limit));
            }
        }
    }
}

/// [`output_within`] at [`LIMIT`] for a helper whose output is optional:
/// its stdout, or None. A timeout is said on stderr with what the trace
/// goes without (`left_out`); a missing tool or a failure is silent (no
/// iptables on this node, no such table).
pub fn output_or_warn(tool: &'static str, cmd: &mut Command, left_out: &str) -> Option<Vec<u8>> {
    match output_within(tool, cmd, LIMIT) {
        Ok(o) => Some(o),
        Err(e @ CommandError::TimedOut(..)) => {
            #[allow(
                clippy::print_stderr,
                reason = "the node layer is below output: a hung helper is said where it is noticed, in output::diag's form"
            )]
            {
                eprintln!("tracer: warning: {e}: {left_out}");
            }
            None
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_of_a_quick_command() {
        let out = output_within("echo", Command::new("echo").arg("hi"), LIMIT).unwrap();
        assert_eq!(out, b"hi\n");
    }

    #[test]
    fn large_output_does_not_block() {
        // 1 MiB: far past a pipe's 64 KiB.
        let out = output_within(
            "head",
            Command::new("head").args(["-c", "1048576", "/dev/zero"]),
            LIMIT,
        )
        .unwrap();
        assert_eq!(out.len(), 1 << 20);
    }

    #[test]
    fn a_hung_command_is_killed_at_the_limit() {
        let t0 = Instant::now();
        let e = output_within(
            "sleep",
            Command::new("sleep").arg("30"),
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(matches!(e, CommandError::TimedOut(..)), "{e}");
        assert!(e.to_string().contains("sleep 30"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        // Not run again: at once, even with a command that would succeed.
        let t1 = Instant::now();
        let e = output_within("sleep", Command::new("sleep").arg("0"), LIMIT).unwrap_err();
        assert!(matches!(e, CommandError::Skipped("sleep")), "{e}");
        assert!(t1.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn installed_tools_are_found_on_the_path() {
        assert!(installed("sh"));
        assert!(!installed("definitely-not-a-tool-xyz"));
    }

    #[test]
    fn failure_and_missing_program_are_errors() {
        assert!(matches!(
            output_within("false", &mut Command::new("false"), LIMIT),
            Err(CommandError::Failed(..))
        ));
        assert!(matches!(
            output_within("nonexistent", &mut Command::new("/nonexistent/tool"), LIMIT),
            Err(CommandError::Spawn(..))
        ));
    }
}
