//! The run's summary: one typed record, the last line of `-o json` and
//! the closing lines of text output.

use std::{collections::BTreeMap, net::IpAddr};

use serde::{Deserialize, Serialize};

use crate::{
    kernel::loader::Counters, kernel::loader::probes::ProbeStatus, node::unseen::NothingSeen,
    node::vip::OwnerChange,
};

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    /// Always "summary".
    #[serde(rename = "type")]
    pub type_: String,
    pub flows: usize,
    pub events: u64,
    pub lost_events: u64,
    pub untracked_evictions: u64,
    pub flow_key_insert_failures: u64,
    pub stale_skb_reuse: u64,
    pub packets_filtered: u64,
    /// Hook passages counted in the kernel, all flows.
    pub counted_in_kernel: u64,
    /// Of those, passages of no flow in the table.
    pub counted_unattributed: u64,
    pub flows_evicted: u64,
    pub duration_ms: u64,
    pub probes: Vec<ProbeStatus>,
    pub tc: TcSummary,
    pub verdicts: BTreeMap<String, usize>,
    /// DNS queries of all flows by result: the reply's RCODE name, or
    /// `unanswered`; `not_dns` counts payloads to or from port 53 that
    /// were not DNS messages.
    #[serde(default)]
    pub dns: BTreeMap<String, usize>,
    /// The traced namespaces ("all" by default).
    pub netns: Vec<String>,
    /// The process's peak resident set (VmHWM), KiB, when readable.
    pub peak_rss_kib: Option<u64>,
    /// Why tracing stopped.
    pub stop: String,
    pub decode_errors: u64,
    pub packed_flows: usize,
    pub packed_bytes: usize,
    pub vip: VipSummary,
    /// Set by `tracer replay`: the recording this summary was rebuilt from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayInfo>,
    /// Set with `--pcap FILE`: what the pcapng file holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcap: Option<PcapSummary>,
    /// The node this run traced (`--node`, default the hostname); absent
    /// in recordings made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The target followed, as given (`ADDR[:PORT]` or CIDR, with
    /// `/proto` when `--proto` was given): what `tracer merge` checks the
    /// runs it stitches agree on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// How hop times convert to wall-clock time on this node, and how
    /// sure that is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<WallClock>,
    /// When the run traced, by this node's wall clock (ns since the
    /// epoch): from the moment every probe was attached to the final
    /// drain. A path no hop of this run saw within it never reached the
    /// node; outside it, nobody knows (`tracer merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced_from_unix_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced_to_unix_ns: Option<i64>,
    /// Set when no flow was seen: what the node knows of the target
    /// instead (its Services, sockets to it, the cgroup and XDP programs
    /// that could hide it, the traced namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nothing_seen: Option<NothingSeen>,
    /// tracer's own CPU while following, against `--max-cpu`, and what
    /// it left out over that budget (absent in replays and in recordings
    /// of tracers before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<super::cpu::CpuSummary>,
}

/// The node's wall clock against the kernel programs' clock
/// (CLOCK_MONOTONIC): a hop's `ts_ns` plus `ktime_to_unix_ns` is its time
/// in ns since the epoch, by this node's wall clock.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct WallClock {
    /// Wall clock (CLOCK_REALTIME) minus CLOCK_MONOTONIC, ns, read at start.
    pub ktime_to_unix_ns: i64,
    /// How far off that offset may be from reading the two clocks, ns:
    /// half the tightest of several monotonic reads bracketing a wall
    /// clock read (it says nothing of how far this node's wall clock is
    /// from other nodes': `tracer merge` estimates that).
    pub uncertainty_ns: u64,
    /// The offset at the end of the run minus at the start, ns (the wall
    /// clock stepped or was slewed while tracing); set in the summary only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_ns: Option<i64>,
}

/// What `--pcap FILE` wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PcapSummary {
    pub file: String,
    /// Enhanced Packet Blocks written: one per captured packet and hop.
    pub packets: u64,
    /// Interface Description Blocks written: one per namespace and device.
    pub interfaces: usize,
    /// Packets not written: the file (with the packets held for flows not
    /// yet printed) had reached `--pcap-max-mb`.
    pub dropped_over_cap: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcSummary {
    /// "tcx" or "netlink".
    pub mode: String,
    pub interfaces: usize,
    pub detach_ms: u64,
    pub ready_ms: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VipSummary {
    /// Who holds the target at the end ("ADDR on DEV in netns NS").
    pub owners: Vec<String>,
    pub changes: Vec<OwnerChange>,
    pub macs: Vec<MacSeen>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MacSeen {
    pub addr: IpAddr,
    pub mac: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplayInfo {
    pub file: String,
    /// The kernel release the recording was made on.
    pub kernel: String,
    pub tracer_version: String,
}

impl Summary {
    pub fn counters(&mut self, c: &Counters) {
        self.events = c.events;
        self.lost_events = c.lost;
        self.untracked_evictions = c.track_fail;
        self.flow_key_insert_failures = c.flowkey_fail;
        self.stale_skb_reuse = c.stale;
        self.packets_filtered = c.filtered;
    }

    /// The closing lines of text output.
    pub fn text(&self) -> String {
        let mut out = format!(
            "summary: {} flows, {} events, {} lost, {} ms",
            self.flows, self.events, self.lost_events, self.duration_ms
        );
        if let Some(k) = self.peak_rss_kib {
            out.push_str(&format!(", peak RSS {:.1} MiB", k as f64 / 1024.0));
        }
        let v: Vec<String> = self
            .verdicts
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        if !v.is_empty() {
            out.push_str(&format!(" [{}]", v.join(" ")));
        }
        if !self.dns.is_empty() {
            let d: Vec<String> = self.dns.iter().map(|(k, n)| format!("{k}={n}")).collect();
            out.push_str(&format!("\ndns: {}", d.join(" ")));
        }
        if let Some(c) = &self.cpu {
            out.push('\n');
            out.push_str(&c.text(self.duration_ms));
        }
        if self.lost_events > 0 {
            out.push_str(
                "\nWARNING: events were lost (ring buffer full): verdicts are marked incomplete",
            );
        }
        let missing: Vec<&str> = self
            .probes
            .iter()
            .filter(|p| p.missing())
            .map(|p| p.hook.as_str())
            .collect();
        if !missing.is_empty() {
            out.push_str(&format!("\nhooks not attached: {}", missing.join(", ")));
        }
        let macs: Vec<&str> = self.vip.macs.iter().map(|m| m.mac.as_str()).collect();
        out.push_str(&format!(
            "\ntarget owners now: {}; {} owner change(s) while tracing; MACs seen: {}",
            if self.vip.owners.is_empty() {
                "none in the traced namespaces".to_string()
            } else {
                self.vip.owners.join(", ")
            },
            self.vip.changes.len(),
            list_or_none(&macs),
        ));
        if let Some(p) = &self.pcap {
            out.push_str(&format!(
                "\npcap: {} packet(s) on {} interface(s) written to {}",
                p.packets, p.interfaces, p.file
            ));
            if p.dropped_over_cap > 0 {
                out.push_str(&format!(
                    " ({} more not written: --pcap-max-mb reached)",
                    p.dropped_over_cap
                ));
            }
        }
        if let Some(n) = &self.nothing_seen {
            let target = self.target.as_deref().unwrap_or("the target");
            out.push('\n');
            out.push_str(&n.text(target, &self.vip.owners));
        }
        if let Some(r) = &self.replay {
            out.push_str(&format!(
                "\nreplayed from {} (recorded on Linux {} by tracer {})",
                r.file, r.kernel, r.tracer_version
            ));
        }
        out
    }
}

/// "a, b, c", or "none" for an empty list (never a dangling colon).
pub fn list_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Summary {
        Summary {
            type_: "summary".into(),
            flows: 0,
            events: 0,
            lost_events: 0,
            untracked_evictions: 0,
            flow_key_insert_failures: 0,
            stale_skb_reuse: 0,
            packets_filtered: 0,
            counted_in_kernel: 0,
            counted_unattributed: 0,
            flows_evicted: 0,
            duration_ms: 5,
            probes: Vec::new(),
            tc: TcSummary {
                mode: "tcx".into(),
                interfaces: 0,
                detach_ms: 0,
                ready_ms: 0,
            },
            verdicts: BTreeMap::new(),
            dns: BTreeMap::new(),
            netns: vec!["all".into()],
            node: None,
            target: None,
            clock: None,
            traced_from_unix_ns: None,
            traced_to_unix_ns: None,
            nothing_seen: None,
            peak_rss_kib: None,
            stop: "duration reached".into(),
            decode_errors: 0,
            packed_flows: 0,
            packed_bytes: 0,
            vip: VipSummary::default(),
            replay: None,
            pcap: None,
            cpu: None,
        }
    }

    #[test]
    fn empty_lists_say_none() {
        let t = empty().text();
        assert!(t.ends_with("MACs seen: none"), "{t}");
        assert!(!t.lines().any(|l| l.trim_end().ends_with(':')), "{t}");
    }

    #[test]
    fn round_trips_through_json() {
        let mut s = empty();
        s.vip.macs.push(MacSeen {
            addr: "10.0.0.1".parse().unwrap(),
            mac: "aa:bb:cc:dd:ee:ff".into(),
        });
        let j = serde_json::to_string(&s).unwrap();
        let back: Summary = serde_json::from_str(&j).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), j);
        assert!(j.contains(r#""type":"summary""#));
        assert!(!j.contains("replay") && !j.contains("pcap"));
    }
}
