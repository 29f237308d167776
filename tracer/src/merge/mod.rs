//! `tracer merge`: several nodes' `follow -o json` runs stitched into one
//! story per flow. Pure: text in, [`Merged`] out (rendered by
//! `output::merge`).
//!
//! - [`read_run`] reads one run's JSON lines (its flows' last records, its
//!   summary, its node and clock);
//! - [`stitch`] groups the flows of all runs that carried the same packet
//!   (by tuple, through each node's NAT translations);
//! - [`skew`] bounds each node's clock against a reference from the
//!   packets that went between nodes (received after sent), and corrects
//!   hop times by the estimate;
//! - [`story`] tells each path as one verdict, each node's own beneath.

pub mod skew;
pub mod stitch;
pub mod story;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::event::Tuple;

/// Why the runs could not be merged: each one line, exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: empty: no tracer JSON records")]
    Empty { file: String },
    #[error("{file}:{line}: not tracer JSON (`tracer follow -o json`): {why}")]
    NotTracer {
        file: String,
        line: usize,
        why: String,
    },
    #[error(
        "{file}: its hops have no wall-clock times (`unix_ns`): made by a tracer before `--node`; rerun `tracer follow --node NAME -o json`"
    )]
    NoClock { file: String },
    #[error("{first} and {second} both name node {node}: give each run its own `--node`")]
    SameNode {
        node: String,
        first: String,
        second: String,
    },
    #[error("nothing to merge: give the JSON output of at least two nodes' runs")]
    TooFew,
    #[error("{file}:{line}: {what} {value} is out of range (wall-clock ns from 1970 to 2200)")]
    OutOfRange {
        file: String,
        line: usize,
        what: &'static str,
        value: i64,
    },
}

/// The latest wall-clock time merge takes (2200-01-01, ns since the
/// epoch): far from i64's end, so that corrections never wrap.
const UNIX_NS_MAX: i64 = 7_258_118_400_000_000_000;

/// `value` as a wall-clock time merge can correct and order without
/// wrapping; else why not.
fn in_range(
    file: &str,
    line: usize,
    what: &'static str,
    value: Option<i64>,
) -> Result<(), MergeError> {
    match value {
        Some(v) if !(0..=UNIX_NS_MAX).contains(&v) => Err(MergeError::OutOfRange {
            file: file.into(),
            line,
            what,
            value: v,
        }),
        _ => Ok(()),
    }
}

/// A hop as `follow -o json` wrote it (the fields merge reads).
#[derive(Debug, Clone, Deserialize)]
pub struct HopIn {
    pub ts_ns: u64,
    #[serde(default)]
    pub unix_ns: Option<i64>,
    pub hook: String,
    pub netns: String,
    #[serde(default)]
    pub dev: String,
    pub dir: String,
    pub tuple: Tuple,
    #[serde(default)]
    pub detail: String,
}

/// A flow's verdict as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerdictIn {
    pub kind: String,
    pub reason: String,
    #[serde(rename = "where")]
    pub where_: String,
    #[serde(default)]
    pub incomplete: bool,
    #[serde(default, skip_serializing)]
    pub evidence: Vec<serde_json::Value>,
}

/// The wall clock a run dated its hops with (`output::WallClock`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ClockIn {
    pub ktime_to_unix_ns: i64,
    pub uncertainty_ns: u64,
    #[serde(default)]
    pub drift_ns: Option<i64>,
}

/// A flow record as written (its last one: the final report's when the
/// run got that far).
#[derive(Debug, Clone, Deserialize)]
pub struct FlowIn {
    pub id: u64,
    #[serde(rename = "final")]
    pub final_: bool,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub clock: Option<ClockIn>,
    pub proto: String,
    pub original: Tuple,
    pub translated: Option<Tuple>,
    #[serde(default)]
    pub nat_by: Option<String>,
    pub verdict: VerdictIn,
    pub hops: Vec<HopIn>,
    /// The Service the node's kube-proxy rules name for it.
    #[serde(default)]
    pub service: Option<ServiceIn>,
}

/// A flow's `service` (the fields merge reads).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ServiceIn {
    pub name: String,
    pub kind: String,
}

/// The summary fields merge reads.
#[derive(Debug, Clone, Deserialize)]
struct SummaryIn {
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    clock: Option<ClockIn>,
    #[serde(default)]
    stop: String,
    #[serde(default)]
    lost_events: u64,
    #[serde(default)]
    traced_from_unix_ns: Option<i64>,
    #[serde(default)]
    traced_to_unix_ns: Option<i64>,
}

/// One node's run, read.
#[derive(Debug, Clone)]
pub struct Run {
    pub file: String,
    pub node: String,
    /// From the summary; `None` when the stream was cut short.
    pub target: Option<String>,
    pub clock: ClockIn,
    /// The summary line was there: the run reached its final report.
    pub complete: bool,
    pub stop: Option<String>,
    pub lost_events: u64,
    /// When it traced, by its wall clock (from its summary).
    pub traced: Option<(i64, i64)>,
    pub flows: Vec<FlowIn>,
}

/// Read one run's `follow -o json` output (`file` names it in errors).
pub fn read_run(file: &str, text: &str) -> Result<Run, MergeError> {
    let bad = |line: usize, why: String| MergeError::NotTracer {
        file: file.into(),
        line,
        why,
    };
    let mut flows: BTreeMap<u64, FlowIn> = BTreeMap::new();
    let mut summary: Option<SummaryIn> = None;
    let mut records = 0;
    for (i, line) in whole_lines(text)
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(i + 1, format!("not JSON ({e})")))?;
        let kind = v.get("type").and_then(|t| t.as_str()).unwrap_or_default();
        match kind {
            "flow" => {
                let f: FlowIn = serde_json::from_value(v)
                    .map_err(|e| bad(i + 1, format!("a bad flow record ({e})")))?;
                for h in &f.hops {
                    in_range(file, i + 1, "hop unix_ns", h.unix_ns)?;
                }
                if let Some(c) = f.clock {
                    in_range(
                        file,
                        i + 1,
                        "clock ktime_to_unix_ns",
                        Some(c.ktime_to_unix_ns),
                    )?;
                }
                // The last record of a flow is what the run knew last; a
                // final one is never replaced by an earlier print.
                if !flows.get(&f.id).is_some_and(|old| old.final_ && !f.final_) {
                    flows.insert(f.id, f);
                }
            }
            "summary" => {
                let s: SummaryIn = serde_json::from_value(v)
                    .map_err(|e| bad(i + 1, format!("a bad summary ({e})")))?;
                in_range(file, i + 1, "traced_from_unix_ns", s.traced_from_unix_ns)?;
                in_range(file, i + 1, "traced_to_unix_ns", s.traced_to_unix_ns)?;
                if let Some(c) = s.clock {
                    in_range(
                        file,
                        i + 1,
                        "clock ktime_to_unix_ns",
                        Some(c.ktime_to_unix_ns),
                    )?;
                }
                summary = Some(s);
            }
            "probe_error" => {}
            "" => return Err(bad(i + 1, "a JSON object without \"type\"".into())),
            other => return Err(bad(i + 1, format!("a record of type {other:?}"))),
        }
        records += 1;
    }
    if records == 0 {
        return Err(MergeError::Empty { file: file.into() });
    }
    let flows: Vec<FlowIn> = flows.into_values().collect();
    let dated = flows
        .iter()
        .flat_map(|f| &f.hops)
        .all(|h| h.unix_ns.is_some());
    let clock = summary
        .as_ref()
        .and_then(|s| s.clock)
        .or_else(|| flows.iter().find_map(|f| f.clock));
    let (Some(clock), true) = (clock, dated) else {
        return Err(MergeError::NoClock { file: file.into() });
    };
    let node = summary
        .as_ref()
        .and_then(|s| s.node.clone())
        .or_else(|| flows.iter().find_map(|f| f.node.clone()))
        .ok_or_else(|| MergeError::NoClock { file: file.into() })?;
    Ok(Run {
        file: file.into(),
        node,
        target: summary.as_ref().and_then(|s| s.target.clone()),
        clock,
        complete: summary.is_some(),
        stop: summary.as_ref().map(|s| s.stop.clone()),
        lost_events: summary.as_ref().map_or(0, |s| s.lost_events),
        traced: summary
            .as_ref()
            .and_then(|s| Some((s.traced_from_unix_ns?, s.traced_to_unix_ns?))),
        flows,
    })
}

/// `text` without a last line cut in the middle (no newline after it, not
/// JSON): what a run killed while printing leaves.
fn whole_lines(text: &str) -> &str {
    if text.ends_with('\n') {
        return text;
    }
    let start = text.rfind('\n').map_or(0, |i| i + 1);
    if serde_json::from_str::<serde_json::Value>(&text[start..]).is_ok() {
        return text;
    }
    &text[..start]
}

/// What a run brought to the merge, and what is wrong with it.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub file: String,
    pub node: String,
    pub target: Option<String>,
    /// Reached its final report (its summary line is there).
    pub complete: bool,
    pub stop: Option<String>,
    pub flows: usize,
    pub lost_events: u64,
    /// Stitched with the others (false: a different target).
    pub merged: bool,
    /// What is wrong, each one sentence: cut short, a different target,
    /// lost events.
    pub problems: Vec<String>,
}

/// Everything `tracer merge` found.
#[derive(Debug, Clone, Serialize)]
pub struct Merged {
    /// The target the merged runs followed (`None`: no run said, all cut
    /// short).
    pub target: Option<String>,
    pub runs: Vec<RunReport>,
    pub clocks: Vec<skew::NodeClock>,
    pub paths: Vec<story::Path>,
}

/// Merge the runs read by [`read_run`]: check them, stitch their flows,
/// estimate the clocks, tell each path.
pub fn merge(runs: Vec<Run>) -> Result<Merged, MergeError> {
    if runs.len() < 2 {
        return Err(MergeError::TooFew);
    }
    merge_runs(runs)
}

/// [`merge`] of any number of runs: one is told as its own story (what
/// `tracer kube follow` prints when the Service lives on one node).
pub fn merge_runs(runs: Vec<Run>) -> Result<Merged, MergeError> {
    for (i, a) in runs.iter().enumerate() {
        if let Some(b) = runs[i + 1..].iter().find(|b| b.node == a.node) {
            return Err(MergeError::SameNode {
                node: a.node.clone(),
                first: a.file.clone(),
                second: b.file.clone(),
            });
        }
    }
    let target = runs.iter().find_map(|r| r.target.clone());
    let reports: Vec<RunReport> = runs.iter().map(|r| report(r, target.as_deref())).collect();
    let merged: Vec<Run> = runs
        .into_iter()
        .zip(&reports)
        .filter(|(_, rep)| rep.merged)
        .map(|(r, _)| r)
        .collect();
    let groups = stitch::paths(&merged);
    let clocks = skew::estimate(&merged, &groups);
    let paths = groups
        .iter()
        .enumerate()
        .map(|(i, g)| story::tell(i + 1, &merged, g, &clocks))
        .collect();
    Ok(Merged {
        target,
        runs: reports,
        clocks,
        paths,
    })
}

/// A run's report: its problems said, not guessed around.
fn report(r: &Run, target: Option<&str>) -> RunReport {
    let mut problems = Vec::new();
    let mut merged = true;
    match (&r.target, target) {
        (Some(t), Some(want)) if t != want => {
            problems.push(format!(
                "followed {t}, not {want}: a different target, not stitched"
            ));
            merged = false;
        }
        _ => {}
    }
    if !r.complete {
        problems.push(
            "cut short: no summary line (the run was killed or its output truncated); its flows are as last printed, and where a path is not seen on this node it is not known whether it got there".into(),
        );
    }
    if r.lost_events > 0 {
        problems.push(format!(
            "{} events lost: its timeline may miss hops",
            r.lost_events
        ));
    }
    if let Some(d) = r.clock.drift_ns.filter(|d| d.unsigned_abs() > 1_000_000) {
        problems.push(format!(
            "its wall clock moved {:.3} ms against the kernel's while tracing",
            d as f64 / 1e6
        ));
    }
    RunReport {
        file: r.file.clone(),
        node: r.node.clone(),
        target: r.target.clone(),
        complete: r.complete,
        stop: r.stop.clone(),
        flows: r.flows.len(),
        lost_events: r.lost_events,
        merged,
        problems,
    }
}
