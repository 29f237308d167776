//! `tracer merge`'s output: one `merge` line (runs, clocks) then one `path`
//! line per stitched path (`-o json`), or the same as text.

use serde::Serialize;

use super::emit;
use crate::merge::{Merged, RunReport, skew::NodeClock, story::Path};

/// The first JSON line: what was merged and how the clocks were set.
#[derive(Serialize)]
struct MergeOut<'a> {
    #[serde(rename = "type")]
    type_: &'static str,
    target: Option<&'a str>,
    runs: &'a [RunReport],
    clocks: &'a [NodeClock],
    paths: usize,
}

#[derive(Serialize)]
struct PathOut<'a> {
    #[serde(rename = "type")]
    type_: &'static str,
    #[serde(flatten)]
    path: &'a Path,
}

/// Write the merge to stdout, as JSON lines or text.
pub fn print(m: &Merged, json: bool) {
    let mut out = std::io::stdout();
    if json {
        let head = MergeOut {
            type_: "merge",
            target: m.target.as_deref(),
            runs: &m.runs,
            clocks: &m.clocks,
            paths: m.paths.len(),
        };
        emit(&mut out, &serde_json::to_string(&head).expect("serializes"));
        for p in &m.paths {
            let line = PathOut {
                type_: "path",
                path: p,
            };
            emit(&mut out, &serde_json::to_string(&line).expect("serializes"));
        }
        return;
    }
    emit(&mut out, &text(m));
}

/// A path as the nodes' streams stitch it so far (`tracer kube follow`
/// while its pods run): `{"type":"live_path", ...}` with the path's
/// fields, or one text line.
pub fn live_path(p: &Path, json: bool) {
    let mut out = std::io::stdout();
    if json {
        let line = PathOut {
            type_: "live_path",
            path: p,
        };
        emit(&mut out, &serde_json::to_string(&line).expect("serializes"));
        return;
    }
    let nodes: Vec<&str> = p.nodes.iter().map(|n| n.node.as_str()).collect();
    emit(
        &mut out,
        &format!(
            "live: {} (seen on {}): {}",
            heading(p),
            nodes.join(", "),
            p.verdict.text
        ),
    );
}

/// `tcp 10.0.0.1:40000 -> 10.0.0.2:80  =>  DROPPED NETFILTER_DROP on
/// master`: a path and the verdict that decides it.
fn heading(p: &Path) -> String {
    format!(
        "{} {}  =>  {} {} on {}",
        p.proto,
        p.original.endpoints(),
        p.verdict.kind.to_uppercase(),
        p.verdict.reason,
        p.verdict.node
    )
}

/// The merge as text: runs and their problems, clocks, then each path.
pub fn text(m: &Merged) -> String {
    let mut s = format!(
        "==== {} path(s) to {} across {} run(s) ====\n",
        m.paths.len(),
        m.target
            .as_deref()
            .unwrap_or("(target not said: every run cut short)"),
        m.runs.len()
    );
    for r in &m.runs {
        s.push_str(&format!(
            "run {} ({}): {} flow(s){}\n",
            r.node,
            r.file,
            r.flows,
            if r.merged { "" } else { ", not merged" }
        ));
        for p in &r.problems {
            s.push_str(&format!("  ! {p}\n"));
        }
    }
    for c in &m.clocks {
        s.push_str(&format!("clock {}: {}\n", c.node, clock_text(c)));
    }
    for p in &m.paths {
        s.push('\n');
        s.push_str(&path_text(p));
    }
    s
}

fn clock_text(c: &NodeClock) -> String {
    let ms = |ns: i64| format!("{:.3} ms", ns as f64 / 1e6);
    match c.basis {
        "reference" => "reference".into(),
        "none" => "no packet seen crossing to the other nodes: not corrected".into(),
        "one_way" if c.correction_ns == 0 => format!(
            "not corrected: every receipt already after its sending ({} crossing(s) with {}, one way only: a clock ahead of it would look like a slow wire)",
            c.crossings,
            c.against.as_deref().unwrap_or("?")
        ),
        basis => {
            let mut s = format!(
                "{} ahead of {} ({basis}, {} crossing(s))",
                ms(-c.correction_ns),
                c.against.as_deref().unwrap_or("?"),
                c.crossings
            );
            match c.uncertainty_ns {
                Some(u) => s.push_str(&format!(" ± {}", ms(u as i64))),
                None => s.push_str(": a bound, the least shift that keeps receipts after sendings"),
            }
            if c.inconsistent {
                s.push_str(" (bounds contradict: clocks moved or tuples reused)");
            }
            s
        }
    }
}

fn path_text(p: &Path) -> String {
    let mut s = format!("path #{} {}\n  {}\n", p.id, heading(p), p.verdict.text);
    if let Some(svc) = &p.service {
        s.push_str(&format!(
            "  service: {} ({}; named by node {}'s kube-proxy rules)\n",
            svc.name, svc.kind, svc.node
        ));
    }
    for n in &p.nat {
        s.push_str(&format!(
            "  nat on {}: {} => {} (by {})\n",
            n.node,
            n.from.endpoints(),
            n.to.endpoints(),
            n.by.as_deref().unwrap_or("?")
        ));
    }
    for n in &p.nodes {
        s.push_str(&format!(
            "  node {} (flow #{}): {} {}{}: {}\n",
            n.node,
            n.flow,
            n.verdict.kind.to_uppercase(),
            n.verdict.reason,
            if n.verdict.incomplete {
                " (incomplete)"
            } else {
                ""
            },
            n.verdict.where_
        ));
    }
    for u in &p.unknown {
        s.push_str(&format!("  ? {}\n", u.why));
    }
    for h in &p.hops {
        s.push_str(&format!(
            "    {:>10.3}ms  {:<10} {:<18} {:<12} {:<13} {:<3} {}\n",
            h.t_us / 1000.0,
            h.node,
            h.netns,
            if h.dev.is_empty() { "-" } else { &h.dev },
            h.hook,
            if h.dir == "reply" { "<-" } else { "->" },
            h.tuple.endpoints()
        ));
    }
    s
}
