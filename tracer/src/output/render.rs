//! Text and JSON renderings of one flow and its verdict.

use std::io::Write;

use serde::Serialize;

use crate::{
    model::event::{Tuple, proto_name},
    model::flow::{Flow, NatBy},
    model::hop::{Dir, HopData, hook_name},
    verdict::Verdict,
};

/// A flow record as written: serialized straight to text. Going through a
/// `serde_json::Value` (a BTreeMap per object, a String per key) made
/// printing 20 000 settled flows take the loop away from the ring buffer
/// long enough to lose events.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct FlowOut<'a> {
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

#[derive(Serialize, schemars::JsonSchema)]
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
    let first = flow.hops.first().map_or(flow.first_ns, |h| h.ts_ns);
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
        "flow #{} {}  =>  {} {}{}{}\n",
        flow.id,
        flow.key,
        v.kind.as_str().to_uppercase(),
        v.reason,
        if v.reason_inferred {
            " (reason inferred from drop location)"
        } else {
            ""
        },
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
    let first = flow.hops.first().map_or(0, |h| h.ts_ns);
    for h in &flow.hops {
        s.push_str(&format!(
            "    {:>9.3}ms  {:<18} {:<12} {:<13} {:<3} {}  {}\n",
            h.ts_ns.saturating_sub(first) as f64 / 1e6,
            trunc(&h.netns, 18),
            if h.dev.is_empty() { "-" } else { &h.dev },
            hook_name(h.hook),
            match h.dir {
                crate::model::hop::Dir::Request => "->",
                crate::model::hop::Dir::Reply => "<-",
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

pub fn emit(out: &mut impl Write, line: &str) {
    // A closed stdout (e.g. `| head`) must not kill the run before cleanup.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
