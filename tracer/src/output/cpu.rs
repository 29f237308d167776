//! What tracer's own CPU budget (`follow --max-cpu`) did in a run: the
//! summary's `cpu` object and its text line. The budget itself is
//! run/budget.rs.

use serde::{Deserialize, Serialize};

/// What tracer leaves out while over its CPU budget, in the order it
/// leaves them out (and the reverse order it takes them back).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Shed {
    /// The followed packets' bytes (`--snaplen 0`): no DNS names read,
    /// nothing new in `--pcap`.
    PacketBytes,
    /// nftrace (tracer's nf_tables tables made dormant): a netfilter drop
    /// is then named by the rules' counters, as with `--no-nftrace`.
    Nftrace,
    /// The records of route lookups that found their route (three or more
    /// per datagram from an unconnected socket); failed lookups are still
    /// recorded.
    RouteLookups,
}

impl Shed {
    /// How the text output says it.
    pub fn said(self) -> &'static str {
        match self {
            Shed::PacketBytes => "packet bytes",
            Shed::Nftrace => "nftrace",
            Shed::RouteLookups => "route lookups that found their route",
        }
    }
}

/// One stretch of time with something left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShedSpan {
    pub what: Shed,
    /// ms since tracer started.
    pub from_ms: u64,
    /// When it was taken back; absent when it was still left out at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<u64>,
    /// tracer's CPU over the last window when it was left out, percent of
    /// one CPU.
    pub percent: f64,
}

/// A stretch of time nftrace set on no packet because followed packets
/// came as a flood (run/trace_load.rs): its first packets were traced; a
/// drop meanwhile is named by the rules' counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NftraceFlood {
    /// ms since tracer started.
    pub from_ms: u64,
    /// When nftrace was back; absent when the flood lasted to the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<u64>,
    /// Hook passages of followed packets per second when it paused.
    pub per_s: u64,
}

/// tracer's own CPU while it followed (user and system time of the
/// process, from ready to the final report), against `--max-cpu`, and
/// the floods nftrace stood aside for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuSummary {
    /// The budget, percent of one CPU; absent with `--max-cpu 0` (none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_percent: Option<f64>,
    /// Over the whole run.
    pub mean_percent: f64,
    /// The highest of any 2 s window.
    pub peak_percent: f64,
    /// What was left out, and when.
    #[serde(default)]
    pub shed: Vec<ShedSpan>,
    /// When nftrace stood aside for a flood of followed packets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nftrace_floods: Vec<NftraceFlood>,
}

impl CpuSummary {
    /// The summary's line: `cpu: 2.1% of one CPU on average, 7.9% at
    /// peak (budget 5%); over budget: packet bytes left out for 4.2 s`.
    pub fn text(&self, duration_ms: u64) -> String {
        let mut out = format!(
            "cpu: {:.1}% of one CPU on average, {:.1}% at peak",
            self.mean_percent, self.peak_percent
        );
        match self.max_percent {
            Some(m) => out.push_str(&format!(" (budget {m}%)")),
            None => out.push_str(" (no budget)"),
        }
        if !self.shed.is_empty() {
            let spans: Vec<String> = self
                .shed
                .iter()
                .map(|s| {
                    let to = s.to_ms.unwrap_or(duration_ms.max(s.from_ms));
                    format!(
                        "{} left out for {:.1} s{}",
                        s.what.said(),
                        (to - s.from_ms) as f64 / 1000.0,
                        if s.to_ms.is_none() {
                            " (to the end)"
                        } else {
                            ""
                        }
                    )
                })
                .collect();
            out.push_str(&format!("; over budget: {}", spans.join(", ")));
        }
        if !self.nftrace_floods.is_empty() {
            let off: u64 = self
                .nftrace_floods
                .iter()
                .map(|f| f.to_ms.unwrap_or(duration_ms.max(f.from_ms)) - f.from_ms)
                .sum();
            let peak = self
                .nftrace_floods
                .iter()
                .map(|f| f.per_s)
                .max()
                .unwrap_or(0);
            out.push_str(&format!(
                "\nnftrace: off for {:.1} s over {} flood(s) of followed packets (up to {peak} hook passages/s; their first packets traced, drops meanwhile named by rule counters)",
                off as f64 / 1000.0,
                self.nftrace_floods.len()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_what_was_left_out_and_for_how_long() {
        let c = CpuSummary {
            max_percent: Some(5.0),
            mean_percent: 3.04,
            peak_percent: 12.0,
            shed: vec![
                ShedSpan {
                    what: Shed::PacketBytes,
                    from_ms: 1000,
                    to_ms: Some(5200),
                    percent: 12.0,
                },
                ShedSpan {
                    what: Shed::Nftrace,
                    from_ms: 3000,
                    to_ms: None,
                    percent: 8.0,
                },
            ],
            nftrace_floods: Vec::new(),
        };
        assert_eq!(
            c.text(6000),
            "cpu: 3.0% of one CPU on average, 12.0% at peak (budget 5%); over budget: packet bytes left out for 4.2 s, nftrace left out for 3.0 s (to the end)"
        );
        let flood = CpuSummary {
            nftrace_floods: vec![
                NftraceFlood {
                    from_ms: 250,
                    to_ms: Some(1_250),
                    per_s: 90_000,
                },
                NftraceFlood {
                    from_ms: 2_000,
                    to_ms: None,
                    per_s: 120_000,
                },
            ],
            ..CpuSummary::default()
        };
        assert_eq!(
            flood.text(4_500),
            "cpu: 0.0% of one CPU on average, 0.0% at peak (no budget)\nnftrace: off for 3.5 s over 2 flood(s) of followed packets (up to 120000 hook passages/s; their first packets traced, drops meanwhile named by rule counters)"
        );
        let none = CpuSummary::default();
        assert_eq!(
            none.text(10),
            "cpu: 0.0% of one CPU on average, 0.0% at peak (no budget)"
        );
    }
}
