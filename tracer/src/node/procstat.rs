//! This process's memory figures from /proc/self/status (kernel
//! fs/proc/task_mmu.c, task_mem()): the summary's peak RSS and the
//! pipeline bench; and the processes of a /proc.

use std::path::{Path, PathBuf};

/// The process directories of the /proc at `proc`: (PID, its directory).
/// Nothing when it cannot be read.
pub fn pids(proc: &Path) -> impl Iterator<Item = (String, PathBuf)> {
    std::fs::read_dir(proc)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().into_string().ok()?;
            (!pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())).then(|| (pid, e.path()))
        })
}

/// A `kB` line of /proc/self/status (`VmRSS:`, `VmHWM:` ...), in KiB.
pub fn self_status_kib(key: &str) -> Option<u64> {
    parse_kib(&std::fs::read_to_string("/proc/self/status").ok()?, key)
}

fn parse_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_kib_line() {
        let s = "Name:\ttracer\nVmHWM:\t   53968 kB\nVmRSS:\t   22100 kB\n";
        assert_eq!(parse_kib(s, "VmHWM:"), Some(53968));
        assert_eq!(parse_kib(s, "VmRSS:"), Some(22100));
        assert_eq!(parse_kib(s, "VmSwap:"), None);
    }

    #[test]
    fn this_process_has_a_resident_set() {
        assert!(self_status_kib("VmRSS:").is_some_and(|k| k > 0));
    }
}
