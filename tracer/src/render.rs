//! Text and JSON renderers of flows, probe reports and the summary.

use std::io::Write;

use serde_json::{Value, json};

use serde::Serialize;

use crate::{
    event::{Tuple, proto_name},
    flow::{Flow, NatBy},
    hop::{Dir, HopData, hook_name},
    loader::{Counters, probes::ProbeStatus},
    verdict::Verdict,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// A flow record as written: serialized straight to text. Going through a
/// `serde_json::Value` (a BTreeMap per object, a String per key) made
/// printing 20 000 settled flows take the loop away from the ring buffer
/// long enough to lose events.
#[derive(Serialize)]
struct FlowOut<'a> {
    #[serde(rename = "type")]
    type_: &'static str,
    id: u64,
    #[serde(rename = "final")]
    final_: bool,
    proto: String,
    original: &'a Tuple,
    translated: Option<&'a Tuple>,
    nat_at: Option<usize>,
    nat_by: Option<&'static str>,
    verdict: &'a Verdict,
    packets: u32,
    replies: u32,
    counted_in_kernel: u32,
    hops: Vec<HopOut<'a>>,
}

#[derive(Serialize)]
struct HopOut<'a> {
    t_us: f64,
    ts_ns: u64,
    hook: &'static str,
    netns: &'a str,
    netns_inode: u32,
    dev: &'a str,
    ifindex: u32,
    dir: Dir,
    tuple: &'a Tuple,
    skb: String,
    detail: String,
    fields: &'a HopData,
}

fn flow_out<'a>(flow: &'a Flow, v: &'a Verdict, final_: bool) -> FlowOut<'a> {
    let first = flow.hops.first().map(|h| h.ts_ns).unwrap_or(flow.first_ns);
    FlowOut {
        type_: "flow",
        id: flow.id,
        final_,
        proto: proto_name(flow.key.proto),
        original: &flow.key,
        translated: flow.translated.as_ref(),
        nat_at: flow.nat_at(),
        nat_by: flow.nat_by.map(NatBy::as_str),
        verdict: v,
        packets: flow.packets,
        replies: flow.replies,
        counted_in_kernel: flow.counted,
        hops: flow
            .hops
            .iter()
            .map(|h| HopOut {
                t_us: (h.ts_ns.saturating_sub(first)) as f64 / 1000.0,
                ts_ns: h.ts_ns,
                hook: hook_name(h.hook),
                netns: &h.netns,
                netns_inode: h.netns_inode,
                dev: &h.dev,
                ifindex: h.ifindex,
                dir: h.dir,
                tuple: &h.tuple,
                skb: format!("{:#x}", h.skb),
                detail: h.detail(),
                fields: &h.data,
            })
            .collect(),
    }
}

/// One flow record, as a JSON line.
pub fn flow_json_line(flow: &Flow, v: &Verdict, final_: bool) -> String {
    serde_json::to_string(&flow_out(flow, v, final_)).expect("a flow record serializes")
}

pub fn flow_text(flow: &Flow, v: &Verdict) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "flow #{} {}  =>  {} {}{}\n",
        flow.id,
        flow.key,
        v.kind.as_str().to_uppercase(),
        v.reason,
        if v.incomplete { " (incomplete)" } else { "" }
    ));
    if let Some(t) = flow.translated {
        s.push_str(&format!(
            "  translated: {t} (by {})\n",
            flow.nat_by.map_or("?", NatBy::as_str)
        ));
    }
    s.push_str(&format!("  where: {}\n", v.where_));
    s.push_str(&format!("  hint:  {}\n", v.hint));
    for e in &v.evidence {
        s.push_str(&format!("  - {e}\n"));
    }
    let first = flow.hops.first().map(|h| h.ts_ns).unwrap_or(0);
    for h in &flow.hops {
        s.push_str(&format!(
            "    {:>9.3}ms  {:<18} {:<12} {:<13} {:<3} {}  {}\n",
            h.ts_ns.saturating_sub(first) as f64 / 1e6,
            trunc(&h.netns, 18),
            if h.dev.is_empty() { "-" } else { &h.dev },
            hook_name(h.hook),
            match h.dir {
                crate::hop::Dir::Request => "->",
                crate::hop::Dir::Reply => "<-",
            },
            h.tuple,
            h.detail()
        ));
    }
    s
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

pub struct Summary<'a> {
    pub flows: usize,
    pub counters: Counters,
    /// Hook passages counted in the kernel: all, and those of no flow.
    pub counted: (u64, u64),
    pub evicted: u64,
    pub duration_ms: u64,
    pub probes: &'a [ProbeStatus],
    pub tc: Value,
    pub verdicts: Vec<(String, usize)>,
    pub netns: Vec<String>,
    /// The process's peak resident set (VmHWM), KiB, when readable.
    pub peak_rss_kib: Option<u64>,
}

pub fn summary_json(s: &Summary) -> Value {
    let verdicts: serde_json::Map<String, Value> = s
        .verdicts
        .iter()
        .map(|(k, n)| (k.clone(), json!(n)))
        .collect();
    json!({
        "type": "summary",
        "flows": s.flows,
        "events": s.counters.events,
        "lost_events": s.counters.lost,
        "untracked_evictions": s.counters.track_fail,
        "flow_key_insert_failures": s.counters.flowkey_fail,
        "stale_skb_reuse": s.counters.stale,
        "packets_filtered": s.counters.filtered,
        "counted_in_kernel": s.counted.0,
        "counted_unattributed": s.counted.1,
        "flows_evicted": s.evicted,
        "duration_ms": s.duration_ms,
        "probes": s.probes,
        "tc": s.tc,
        "verdicts": verdicts,
        "netns": s.netns,
        "peak_rss_kib": s.peak_rss_kib,
    })
}

/// A list for a line of text: the items joined with ", ", or "none" when
/// there are none, so that no line ends in a dangling "MACs seen: ".
pub fn list_or_none<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<&str>>()
        .join(", ")
}

pub fn summary_text(s: &Summary) -> String {
    let mut out = format!(
        "summary: {} flows, {} events, {} lost, {} ms",
        s.flows, s.counters.events, s.counters.lost, s.duration_ms
    );
    if let Some(k) = s.peak_rss_kib {
        out.push_str(&format!(", peak RSS {:.1} MiB", k as f64 / 1024.0));
    }
    let v: Vec<String> = s.verdicts.iter().map(|(k, n)| format!("{k}={n}")).collect();
    if !v.is_empty() {
        out.push_str(&format!(" [{}]", v.join(" ")));
    }
    if s.counters.lost > 0 {
        out.push_str(
            "\nWARNING: events were lost (ring buffer full): verdicts are marked incomplete",
        );
    }
    let missing: Vec<&str> = s
        .probes
        .iter()
        .filter(|p| p.missing())
        .map(|p| p.hook.as_str())
        .collect();
    if !missing.is_empty() {
        out.push_str(&format!("\nhooks not attached: {}", list_or_none(&missing)));
    }
    out
}

pub fn emit(out: &mut impl Write, line: &str) {
    // A closed stdout (e.g. `| head`) must not kill the run before cleanup.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_lists_say_none() {
        assert_eq!(list_or_none::<&str>(&[]), "none");
        assert_eq!(list_or_none(&["a", "b"]), "a, b");
        assert_eq!(list_or_none(&[String::from("x")]), "x");
    }

    #[test]
    fn no_summary_line_ends_in_a_colon() {
        let empty = Summary {
            flows: 0,
            counters: Counters::default(),
            counted: (0, 0),
            evicted: 0,
            duration_ms: 5,
            probes: &[],
            tc: Value::Null,
            verdicts: vec![],
            netns: vec![],
            peak_rss_kib: Some(1024),
        };
        let text = summary_text(&empty);
        for line in text.lines() {
            assert!(!line.trim_end().ends_with(':'), "{line:?} in {text}");
        }
    }
}
