//! `tracer replay` against what `tracer follow` printed.

use std::{path::Path, process::Command};

use serde_json::Value;

use crate::tracer::{TracerOutput, tracer_bin};

/// What a final flow record is compared on: id, kind, reason, where, the
/// evidence and the hop count.
fn key(f: &Value) -> (Value, Value, Value, Value, Value, usize) {
    let v = &f["verdict"];
    (
        f["id"].clone(),
        v["kind"].clone(),
        v["reason"].clone(),
        v["where"].clone(),
        v["evidence"].clone(),
        f["hops"].as_array().map_or(0, Vec::len),
    )
}

/// Run `tracer replay FILE -o json --check` (no root needed) and parse its
/// lines; panics with its output when it fails.
pub fn replay_json(recording: &Path) -> Vec<Value> {
    replay_json_with(recording, &["--check".as_ref()])
}

/// `tracer replay FILE -o json` with more arguments, its lines parsed;
/// panics with its output when it fails.
pub fn replay_json_with(recording: &Path, args: &[&std::ffi::OsStr]) -> Vec<Value> {
    let out = Command::new(tracer_bin())
        .args(["replay", "-o", "json"])
        .args(args)
        .arg(recording)
        .output()
        .expect("run tracer replay");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tracer replay {} failed ({}): {}\n{stdout}",
        recording.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("replay prints JSON lines"))
        .collect()
}

/// The replay of `recording` prints the same final flows (id, verdict
/// kind, reason, where, evidence, hops) and summary counts as `followed`,
/// and the same flows as they settled.
pub fn assert_replays_as_followed(recording: &Path, followed: &TracerOutput, name: &str) {
    let lines = replay_json(recording);
    let replayed: Vec<_> = lines
        .iter()
        .filter(|l| l["type"] == "flow" && l["final"] == true)
        .map(key)
        .collect();
    let original: Vec<_> = followed.final_flows().into_iter().map(key).collect();
    assert_eq!(
        replayed,
        original,
        "{name}: replay of {} differs from follow:\n{}",
        recording.display(),
        followed.dump()
    );
    // The flows printed as they settled: the same flows (their verdicts
    // at a tick may differ, replay judging them with the run's final
    // facts).
    let settled = |ls: &mut dyn Iterator<Item = &Value>| {
        ls.filter(|l| l["type"] == "flow" && l["final"] == false)
            .filter_map(|l| l["id"].as_u64())
            .collect::<std::collections::BTreeSet<u64>>()
    };
    assert_eq!(
        settled(&mut lines.iter()),
        settled(&mut followed.lines.iter()),
        "{name}: replay of {} printed other flows as they settled:\n{}",
        recording.display(),
        followed.dump()
    );
    let summary = lines
        .iter()
        .find(|l| l["type"] == "summary")
        .expect("replay summary");
    let followed_summary = followed.summary().expect("summary");
    for k in ["flows", "verdicts", "events", "counted_in_kernel", "probes"] {
        assert_eq!(summary[k], followed_summary[k], "{name}: summary {k}");
    }
    assert!(
        summary["replay"]["file"].is_string(),
        "replay summary names its file: {summary}"
    );
}
