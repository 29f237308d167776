//! The verdicts the suites already reached, per scenario and scope, so
//! that the `--netns` sweep (tests/tests/netns_scope.rs) compares against
//! them instead of tracing every scenario again in the same mode.
//!
//! `TRACER_VERDICT_LOG=DIR` (set by `cargo xtask test` and in the
//! kernel-matrix guests, fresh for each run): every plain traced run of a
//! scenario (its own arguments, no extra flags or environment) writes
//! `DIR/NAME.unscoped` or `DIR/NAME.scoped` holding the verdict of its flow
//! to the scenario's target. Unset, nothing is kept and the sweep traces
//! both modes itself.

use std::path::PathBuf;

fn file(name: &str, netns_scope: bool) -> Option<PathBuf> {
    let dir = std::env::var_os("TRACER_VERDICT_LOG")?;
    let scope = if netns_scope { "scoped" } else { "unscoped" };
    Some(PathBuf::from(dir).join(format!("{name}.{scope}")))
}

/// The verdict (kind and reason) of a flow, as the sweep compares it.
pub fn of_flow(flow: &serde_json::Value) -> (String, String) {
    let v = &flow["verdict"];
    (v["kind"].to_string(), v["reason"].to_string())
}

/// Keep a run's verdict (see the module's doc).
pub fn record(name: &str, netns_scope: bool, verdict: &(String, String)) {
    let Some(path) = file(name, netns_scope) else {
        return;
    };
    let _ = std::fs::create_dir_all(path.parent().expect("log dir"));
    std::fs::write(&path, format!("{}\n{}\n", verdict.0, verdict.1))
        .unwrap_or_else(|e| panic!("TRACER_VERDICT_LOG: write {}: {e}", path.display()));
}

/// The verdict an earlier test of this run reached, if any.
pub fn lookup(name: &str, netns_scope: bool) -> Option<(String, String)> {
    let text = std::fs::read_to_string(file(name, netns_scope)?).ok()?;
    let mut l = text.lines();
    Some((l.next()?.to_string(), l.next()?.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_and_finds_a_verdict_per_scope() {
        let dir = std::env::temp_dir().join(format!("verdict-log-{}", std::process::id()));
        // SAFETY: this crate's only test of the variable; set before use.
        unsafe { std::env::set_var("TRACER_VERDICT_LOG", &dir) };
        let v =
            of_flow(&serde_json::json!({"verdict": {"kind": "dropped", "reason": "NO_SOCKET"}}));
        record("x", false, &v);
        assert_eq!(lookup("x", false), Some(v));
        assert_eq!(lookup("x", true), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
