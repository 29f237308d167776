//! Text and JSON renderers of flows, probe reports and the summary.

use std::io::Write;

use serde_json::{Value, json};

use crate::{
    event::{Tuple, proto_name},
    flow::Flow,
    hop::hook_name,
    loader::{Counters, probes::ProbeStatus},
    verdict::Verdict,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

fn tuple_json(t: &Tuple) -> Value {
    json!({"src": t.src.to_string(), "sport": t.sport, "dst": t.dst.to_string(), "dport": t.dport})
}

pub fn flow_json(flow: &Flow, v: &Verdict, final_: bool) -> Value {
    let first = flow.hops.first().map(|h| h.ts_ns).unwrap_or(flow.first_ns);
    let hops: Vec<Value> = flow
        .hops
        .iter()
        .map(|h| {
            json!({
                "t_us": (h.ts_ns.saturating_sub(first)) as f64 / 1000.0,
                "ts_ns": h.ts_ns,
                "hook": hook_name(h.hook),
                "netns": h.netns,
                "netns_inode": h.netns_inode,
                "dev": h.dev,
                "ifindex": h.ifindex,
                "dir": h.dir,
                "tuple": tuple_json(&h.tuple),
                "skb": format!("{:#x}", h.skb),
                "detail": h.detail(),
                "fields": serde_json::to_value(&h.data).unwrap_or(Value::Null),
            })
        })
        .collect();
    json!({
        "type": "flow",
        "id": flow.id,
        "final": final_,
        "proto": proto_name(flow.key.proto),
        "original": tuple_json(&flow.key),
        "translated": flow.translated.as_ref().map(tuple_json),
        "nat_at": flow.nat_at(),
        "nat_by": flow.nat_by,
        "verdict": v,
        "packets": flow.packets,
        "replies": flow.replies,
        "counted_in_kernel": flow.counted,
        "hops": hops,
    })
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
            flow.nat_by.unwrap_or("?")
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
    })
}

pub fn summary_text(s: &Summary) -> String {
    let mut out = format!(
        "summary: {} flows, {} events, {} lost, {} ms",
        s.flows, s.counters.events, s.counters.lost, s.duration_ms
    );
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
        out.push_str(&format!("\nhooks not attached: {}", missing.join(", ")));
    }
    out
}

pub fn emit(out: &mut impl Write, line: &str) {
    // A closed stdout (e.g. `| head`) must not kill the run before cleanup.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
