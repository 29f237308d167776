//! tracer's own CPU budget (`follow --max-cpu PERCENT`, of one CPU).
//!
//! Every tick (250 ms) the live loop gives [`Budget::sample`] the
//! process's user and system time so far ([`own_cpu_secs`]). Over the
//! last [`WINDOW_MS`], more than the budget leaves out one more kind of
//! detail ([`Shed`], in its order: packet bytes, nftrace, route lookups
//! that found their route), at most one step per window so that each
//! takes effect before the next is judged; under half the budget for
//! [`RESTORE_MS`] takes the last one back. Traffic is never touched: what
//! is left out is what tracer records of it. Samples start at ready, so
//! the start (BTF, the verifier) and the final report do not count.

use std::collections::VecDeque;

use strum::VariantArray;

use crate::output::cpu::{CpuSummary, Shed, ShedSpan};

/// The window the usage is judged over, ms.
pub const WINDOW_MS: u64 = 2000;
/// How long under half the budget before a step is taken back, ms.
pub const RESTORE_MS: u64 = 5000;
/// The default budget, percent of one CPU.
pub const DEFAULT_MAX_CPU: f64 = 5.0;

/// A step of the budget: what to leave out, or take back, and the usage
/// (percent of one CPU) that decided it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    Shed(Shed, f64),
    Restore(Shed, f64),
}

pub struct Budget {
    /// Percent of one CPU; None: no budget (`--max-cpu 0`), only measured.
    max: Option<f64>,
    /// (ms since start, CPU s) over the last window.
    window: VecDeque<(u64, f64)>,
    first: Option<(u64, f64)>,
    last: (u64, f64),
    peak: f64,
    /// How many of [`Shed::VARIANTS`] are left out now.
    level: usize,
    changed_ms: u64,
    under_since: Option<u64>,
    spans: Vec<ShedSpan>,
}

impl Budget {
    /// `max_percent` of one CPU; 0 for none.
    pub fn new(max_percent: f64) -> Budget {
        Budget {
            max: (max_percent > 0.0).then_some(max_percent),
            window: VecDeque::new(),
            first: None,
            last: (0, 0.0),
            peak: 0.0,
            level: 0,
            changed_ms: 0,
            under_since: None,
            spans: Vec::new(),
        }
    }

    /// The budget, percent of one CPU (None: `--max-cpu 0`).
    pub fn max(&self) -> Option<f64> {
        self.max
    }

    /// What is left out now.
    pub fn shed(&self) -> &'static [Shed] {
        &Shed::VARIANTS[..self.level]
    }

    /// One sample: `ms` since start, `cpu_s` the process's CPU seconds so
    /// far. The step to take now, if any.
    pub fn sample(&mut self, ms: u64, cpu_s: f64) -> Option<Step> {
        self.first.get_or_insert((ms, cpu_s));
        self.last = (ms, cpu_s);
        self.window.push_back((ms, cpu_s));
        while self
            .window
            .get(1)
            .is_some_and(|(t, _)| ms.saturating_sub(*t) >= WINDOW_MS)
        {
            self.window.pop_front();
        }
        let &(t0, c0) = self.window.front()?;
        // Judged on a full window only.
        if ms.saturating_sub(t0) < WINDOW_MS * 3 / 4 {
            return None;
        }
        let pct = (cpu_s - c0).max(0.0) * 100_000.0 / (ms - t0) as f64;
        self.peak = self.peak.max(pct);
        let max = self.max?;
        if pct > max {
            self.under_since = None;
            if self.level < Shed::VARIANTS.len() && ms.saturating_sub(self.changed_ms) >= WINDOW_MS
            {
                let what = Shed::VARIANTS[self.level];
                self.level += 1;
                self.changed_ms = ms;
                self.spans.push(ShedSpan {
                    what,
                    from_ms: ms,
                    to_ms: None,
                    percent: pct,
                });
                return Some(Step::Shed(what, pct));
            }
            return None;
        }
        if pct >= max / 2.0 || self.level == 0 {
            self.under_since = None;
            return None;
        }
        let since = *self.under_since.get_or_insert(ms);
        if ms - since < RESTORE_MS || ms.saturating_sub(self.changed_ms) < RESTORE_MS {
            return None;
        }
        self.level -= 1;
        self.changed_ms = ms;
        self.under_since = Some(ms);
        let what = Shed::VARIANTS[self.level];
        if let Some(s) = self.spans.iter_mut().rev().find(|s| s.what == what) {
            s.to_ms = Some(ms);
        }
        Some(Step::Restore(what, pct))
    }

    /// The summary's `cpu` object.
    pub fn summary(&self) -> CpuSummary {
        let mean = match self.first {
            Some((t0, c0)) if self.last.0 > t0 => {
                (self.last.1 - c0).max(0.0) * 100_000.0 / (self.last.0 - t0) as f64
            }
            _ => 0.0,
        };
        CpuSummary {
            max_percent: self.max,
            mean_percent: mean,
            peak_percent: self.peak,
            shed: self.spans.clone(),
            nftrace_floods: Vec::new(),
        }
    }
}

/// The `tracer_common::shed` bits of what is left out in the kernel
/// programs (nftrace is left out in userspace).
pub fn kernel_bits(shed: &[Shed]) -> u32 {
    shed.iter()
        .map(|s| match s {
            Shed::PacketBytes => tracer_common::shed::BYTES,
            Shed::RouteLookups => tracer_common::shed::ROUTES,
            Shed::Nftrace => 0,
        })
        .fold(0, |a, b| a | b)
}

/// The process's user and system CPU seconds so far, all threads
/// (getrusage(RUSAGE_SELF)).
pub fn own_cpu_secs() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a live pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 250 ms at `pct` percent of one CPU, from `from` ms
    /// (CPU seconds `cpu` there) for `ms`; the steps taken and the CPU
    /// seconds at the end.
    fn run(b: &mut Budget, from: u64, cpu: f64, ms: u64, pct: f64) -> (Vec<Step>, f64) {
        let mut steps = Vec::new();
        let mut c = cpu;
        let mut t = from;
        while t < from + ms {
            t += 250;
            c += pct / 100.0 * 0.25;
            steps.extend(b.sample(t, c));
        }
        (steps, c)
    }

    /// What the steps left out (`shed`) or took back; a step of the other
    /// kind fails the test.
    fn kinds(steps: &[Step], shed: bool) -> Vec<Shed> {
        steps
            .iter()
            .map(|s| match (s, shed) {
                (Step::Shed(w, _), true) | (Step::Restore(w, _), false) => *w,
                _ => panic!("{s:?}"),
            })
            .collect()
    }

    #[test]
    fn over_budget_sheds_in_order_one_step_a_window_and_restores_in_reverse() {
        let mut b = Budget::new(5.0);
        let (s, c) = run(&mut b, 0, 0.0, 1000, 1.0);
        assert!(s.is_empty(), "{s:?}");
        // 20% for 7 s: a step a window, all three.
        let (s, c) = run(&mut b, 1000, c, 7000, 20.0);
        assert_eq!(kinds(&s, true), Shed::VARIANTS.to_vec());
        assert_eq!(b.shed().len(), 3);
        // Between half and the whole budget: nothing changes.
        let (s, c) = run(&mut b, 8000, c, 8000, 4.0);
        assert!(s.is_empty(), "{s:?}");
        // Quiet: one step back every 5 s, the last left out first back.
        let (s, _) = run(&mut b, 16000, c, 16000, 0.5);
        assert_eq!(
            kinds(&s, false),
            vec![Shed::RouteLookups, Shed::Nftrace, Shed::PacketBytes]
        );
        let sum = b.summary();
        assert_eq!(sum.shed.len(), 3);
        assert!(sum.shed.iter().all(|s| s.to_ms.is_some()), "{sum:?}");
        assert!(
            sum.peak_percent > 19.0 && sum.peak_percent < 21.0,
            "{sum:?}"
        );
        assert!(sum.mean_percent > 1.0 && sum.mean_percent < 20.0, "{sum:?}");
    }

    #[test]
    fn a_short_burst_sheds_nothing_and_no_budget_only_measures() {
        let mut b = Budget::new(5.0);
        // One busy half-second in a quiet window stays under 5%.
        let (_, c) = run(&mut b, 0, 0.0, 3000, 0.5);
        let (s1, c) = run(&mut b, 3000, c, 250, 30.0);
        let (s2, _) = run(&mut b, 3250, c, 3000, 0.5);
        assert!(s1.is_empty() && s2.is_empty(), "{s1:?} {s2:?}");
        let mut none = Budget::new(0.0);
        let (s, _) = run(&mut none, 0, 0.0, 10_000, 80.0);
        assert!(s.is_empty() && none.shed().is_empty());
        let sum = none.summary();
        assert_eq!(sum.max_percent, None);
        assert!(sum.peak_percent > 79.0, "{sum:?}");
    }

    #[test]
    fn kernel_bits_leave_nftrace_to_userspace() {
        assert_eq!(kernel_bits(&[]), 0);
        assert_eq!(
            kernel_bits(Shed::VARIANTS),
            tracer_common::shed::BYTES | tracer_common::shed::ROUTES
        );
        assert_eq!(
            kernel_bits(&[Shed::PacketBytes, Shed::Nftrace]),
            tracer_common::shed::BYTES
        );
    }

    #[test]
    fn own_cpu_grows_with_work() {
        let a = own_cpu_secs();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed().as_millis() < 50 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(7));
        }
        std::hint::black_box(x);
        assert!(own_cpu_secs() > a);
    }
}
