//! Kernel time of tracer's programs per packet, from the kernel's own
//! per-program counters (bpf_stats: `run_cnt` and `run_time_ns` of each
//! program, kept while `kernel.bpf_stats_enabled` is 1): what `cargo
//! xtask bench` reports per hook program, beside the same hooks with empty
//! programs (the floor no program body can go below).

use std::collections::BTreeMap;

use anyhow::{Context, Result};

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// `kernel.bpf_stats_enabled` on for the guard's life, and put back as it
/// was on drop (the counters cost two clock reads per program run).
pub struct StatsOn(String);

impl StatsOn {
    pub fn new() -> Result<Self> {
        let old = std::fs::read_to_string(STATS_SYSCTL).context("read bpf_stats_enabled")?;
        std::fs::write(STATS_SYSCTL, "1").context("enable bpf_stats")?;
        Ok(StatsOn(old.trim().to_string()))
    }
}

impl Drop for StatsOn {
    fn drop(&mut self) {
        let _ = std::fs::write(STATS_SYSCTL, &self.0);
    }
}

/// Runs and nanoseconds of each loaded program named `tracer_*` (names
/// as the kernel keeps them: 15 characters), summed by name.
pub type Snapshot = BTreeMap<String, (u64, u64)>;

/// The counters now (`bpftool -j prog show`).
pub fn snapshot() -> Result<Snapshot> {
    let out = std::process::Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .context("run bpftool prog show")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("bpftool JSON")?;
    Ok(parse(&v))
}

fn parse(v: &serde_json::Value) -> Snapshot {
    let mut m = Snapshot::new();
    for p in v.as_array().into_iter().flatten() {
        let Some(name) = p["name"].as_str().filter(|n| n.starts_with("tracer_")) else {
            continue;
        };
        let e = m.entry(name.to_string()).or_insert((0, 0));
        e.0 += p["run_cnt"].as_u64().unwrap_or(0);
        e.1 += p["run_time_ns"].as_u64().unwrap_or(0);
    }
    m
}

/// One program's share of a packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub runs_per_packet: f64,
    pub ns_per_run: f64,
}

impl Cost {
    pub fn ns_per_packet(self) -> f64 {
        self.runs_per_packet * self.ns_per_run
    }
}

/// What each program that ran between `before` and `after` cost per
/// packet, over `packets` packets.
pub fn per_packet(before: &Snapshot, after: &Snapshot, packets: u64) -> BTreeMap<String, Cost> {
    let packets = packets.max(1) as f64;
    after
        .iter()
        .filter_map(|(name, &(cnt, ns))| {
            let (c0, n0) = before.get(name).copied().unwrap_or((0, 0));
            let runs = cnt.saturating_sub(c0);
            (runs > 0).then(|| {
                (
                    name.clone(),
                    Cost {
                        runs_per_packet: runs as f64 / packets,
                        ns_per_run: ns.saturating_sub(n0) as f64 / runs as f64,
                    },
                )
            })
        })
        .collect()
}

/// All programs' nanoseconds per packet.
pub fn total(costs: &BTreeMap<String, Cost>) -> f64 {
    costs.values().map(|c| c.ns_per_packet()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_tracer_programs_between_two_snapshots() {
        let before = parse(&serde_json::json!([
            {"name": "tracer_fib_look", "run_cnt": 10, "run_time_ns": 1000},
            {"name": "other", "run_cnt": 5, "run_time_ns": 5},
        ]));
        let after = parse(&serde_json::json!([
            {"name": "tracer_fib_look", "run_cnt": 610, "run_time_ns": 61000},
            {"name": "tracer_tc_ingre", "run_cnt": 100, "run_time_ns": 8500},
            {"name": "tracer_idle", "run_cnt": 0, "run_time_ns": 0},
            {"name": "other", "run_cnt": 500, "run_time_ns": 500},
        ]));
        let c = per_packet(&before, &after, 100);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(
            c["tracer_fib_look"],
            Cost {
                runs_per_packet: 6.0,
                ns_per_run: 100.0
            }
        );
        assert!((c["tracer_tc_ingre"].ns_per_packet() - 85.0).abs() < 1e-9);
        assert!((total(&c) - 685.0).abs() < 1e-9);
    }
}
