//! nftrace only while it can still teach something (issue 31 item 2).
//!
//! tracer's nf_tables table (node/nftrace.rs) runs its rules for every
//! packet of the traced namespaces; on a followed packet they match, take
//! a `limit` token and set nftrace. Measured on 6.18 (session 33, iperf3
//! UDP floods between two namespaces): chains whose rules match nothing
//! cost nothing the VM's noise shows, but a flood of followed packets ran
//! at 0.61 of its untraced rate with the rules, 0.88 without
//! (`--no-nftrace`), and tcpdump's 0.70. A flood teaches nothing its first
//! packets did not: its Service chains and endpoint were traced on its
//! first packets, and each of its drops is the same drop again.
//!
//! Every tick (250 ms) the live loop gives [`TraceLoad::sample`] how many
//! followed packets' hook passages were seen so far (records and packets
//! the kernel counted) and how many of them were drops. Above
//! [`FLOOD_PER_S`] the rules come out of tracer's chains
//! (`NfTrace::pause`); a new drop of a followed packet puts them back for
//! [`LEARN_MS`] (the burst of the `limit`, 250 packets, is traced at once,
//! the dropping rule among them), at most once per [`RELEARN_MS`]; under
//! half the rate puts them back for good. Traffic is never touched: what
//! is left out is which rules tracer names by nftrace; a drop meanwhile is
//! named by the rules' counters, as with `--no-nftrace`.

use crate::output::cpu::{CpuSummary, NftraceFlood};

/// Hook passages of followed packets per second above which nftrace
/// pauses: a packet of a flow crosses 4 to 12 hooks (tc, the stack's
/// tracepoints, route lookups), so about 500 to 1,200 packets a second.
/// An incident's retries (a SYN every second, DNS every 5 s), and every
/// test scene (bounded bursts), stay far below.
pub const FLOOD_PER_S: u64 = 6_000;
/// How long a new drop puts the rules back during a flood, ms.
pub const LEARN_MS: u64 = 1_000;
/// How often a drop may put them back during a flood, ms.
pub const RELEARN_MS: u64 = 10_000;

/// Why nftrace is back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Back {
    /// A followed packet was dropped during the flood: traced for
    /// [`LEARN_MS`] to name the rule.
    Drop,
    /// The rate fell under half of [`FLOOD_PER_S`].
    Quiet,
}

/// A change of nftrace's state, with the rate (passages per second) that
/// decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Paused(u64),
    Resumed(Back, u64),
}

#[derive(Debug, Default)]
pub struct TraceLoad {
    /// (ms since start, passages so far) at the last sample.
    last: Option<(u64, u64)>,
    /// Drops so far at the last sample.
    drops: u64,
    paused: bool,
    /// Traced again for a drop until then (ms).
    learning_until: u64,
    last_learn: Option<u64>,
    floods: Vec<NftraceFlood>,
}

impl TraceLoad {
    /// Sampled from `ms` since start on (the live loop's start): the
    /// first tick judges a flood already (a 4 s flood in the bench ran its
    /// first 500 ms at nftrace's full cost when the first tick only took
    /// the count).
    pub fn starting_at(ms: u64) -> TraceLoad {
        TraceLoad {
            last: Some((ms, 0)),
            ..TraceLoad::default()
        }
    }

    /// Are the rules out now?
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// One sample: `ms` since start, `seen` hook passages of followed
    /// packets so far, `drops` of them drops. The change to make now.
    pub fn sample(&mut self, ms: u64, seen: u64, drops: u64) -> Option<Change> {
        let (t0, s0) = self.last.replace((ms, seen)).unwrap_or((ms, seen));
        let dt = ms.saturating_sub(t0);
        if dt == 0 {
            return None;
        }
        let rate = seen.saturating_sub(s0) * 1000 / dt;
        let dropped = drops > self.drops;
        self.drops = drops;
        if self.paused {
            let may_learn = self.last_learn.is_none_or(|l| ms >= l + RELEARN_MS);
            let back = if dropped && may_learn {
                self.learning_until = ms + LEARN_MS;
                self.last_learn = Some(ms);
                Back::Drop
            } else if rate < FLOOD_PER_S / 2 {
                Back::Quiet
            } else {
                return None;
            };
            self.paused = false;
            if let Some(f) = self.floods.last_mut() {
                f.to_ms = Some(ms);
            }
            return Some(Change::Resumed(back, rate));
        }
        if rate > FLOOD_PER_S && ms >= self.learning_until {
            self.paused = true;
            self.floods.push(NftraceFlood {
                from_ms: ms,
                to_ms: None,
                per_s: rate,
            });
            return Some(Change::Paused(rate));
        }
        None
    }

    /// `cpu` (the budget's summary) with the stretches nftrace was
    /// paused for.
    pub fn with_floods(&self, mut cpu: CpuSummary) -> CpuSummary {
        cpu.nftrace_floods.clone_from(&self.floods);
        cpu
    }

    #[cfg(test)]
    fn floods(&self) -> Vec<NftraceFlood> {
        self.with_floods(CpuSummary::default()).nftrace_floods
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks of 250 ms at `per_s` passages a second from `from_ms`, with
    /// `drops` at each: the changes.
    fn run(
        l: &mut TraceLoad,
        seen: &mut u64,
        from_ms: u64,
        ticks: u64,
        per_s: u64,
        drops: &dyn Fn(u64) -> u64,
    ) -> Vec<(u64, Change)> {
        let mut out = Vec::new();
        for i in 0..ticks {
            let ms = from_ms + i * 250;
            *seen += per_s / 4;
            if let Some(c) = l.sample(ms, *seen, drops(ms)) {
                out.push((ms, c));
            }
        }
        out
    }

    #[test]
    fn an_incidents_traffic_is_always_traced() {
        let mut l = TraceLoad::default();
        let mut seen = 0;
        // A client retrying: 40 passages a second, each packet dropped.
        let changes = run(&mut l, &mut seen, 0, 200, 40, &|ms| ms / 1000);
        assert!(changes.is_empty(), "{changes:?}");
        assert!(!l.paused());
        // A burst of 500 packets in one tick (a test scene's) is 2,000 a
        // second over the tick: under the flood's rate.
        let changes = run(&mut l, &mut seen, 50_000, 1, 2_000, &|_| 0);
        assert!(changes.is_empty(), "{changes:?}");
    }

    #[test]
    fn a_flood_under_way_at_the_start_pauses_at_the_first_tick() {
        let mut l = TraceLoad::starting_at(400);
        assert_eq!(l.sample(650, 100_000, 0), Some(Change::Paused(400_000)));
    }

    #[test]
    fn a_flood_pauses_and_its_end_resumes() {
        let mut l = TraceLoad::default();
        let mut seen = 0;
        let changes = run(&mut l, &mut seen, 0, 20, 500_000, &|_| 0);
        assert_eq!(changes, [(250, Change::Paused(500_000))]);
        assert!(l.paused());
        let changes = run(&mut l, &mut seen, 5_000, 4, 100, &|_| 0);
        assert_eq!(changes, [(5_000, Change::Resumed(Back::Quiet, 100))]);
        let f = l.floods();
        assert_eq!(
            (f[0].from_ms, f[0].to_ms, f[0].per_s),
            (250, Some(5_000), 500_000)
        );
    }

    /// A drop during a flood puts the rules back for a second, then the
    /// flood pauses them again; the next drops within ten seconds do not.
    #[test]
    fn a_drop_during_a_flood_is_traced_once_per_window() {
        let mut l = TraceLoad::default();
        let mut seen = 0;
        let changes = run(&mut l, &mut seen, 0, 4, 500_000, &|_| 0);
        assert_eq!(changes, [(250, Change::Paused(500_000))]);
        // Every packet dropped from 1 s on.
        let changes = run(&mut l, &mut seen, 1_000, 42, 500_000, &|ms| ms);
        assert_eq!(
            changes,
            [
                (1_000, Change::Resumed(Back::Drop, 500_000)),
                (2_000, Change::Paused(500_000)),
                (11_000, Change::Resumed(Back::Drop, 500_000)),
            ]
        );
        assert_eq!(l.floods().len(), 2);
    }
}
