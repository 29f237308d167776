//! Output: everything tracer prints goes through here. A [`Sink`] renders
//! flows and the summary (text or JSON lines on stdout); [`diag`] writes
//! the one-line progress, warning and error messages on stderr.

pub mod diag;
pub mod doctor;
pub mod render;
pub mod summary;

use std::io::Write;

use crate::{kernel::loader::probes::ProbeStatus, model::flow::Flow, verdict::Verdict};

pub use render::emit;
pub use summary::Summary;

/// Where flows and the summary go.
pub trait Sink {
    /// Hooks that could not be attached (JSON: one `probe_error` line each).
    fn probe_errors(&mut self, _plan: &[ProbeStatus]) {}
    /// A flow and its verdict: as soon as it is settled (`final_` false),
    /// or in the final report.
    fn flow(&mut self, flow: &Flow, v: &Verdict, final_: bool);
    /// The final report begins.
    fn report_start(&mut self, _flows: usize, _target: &str, _stop: &str) {}
    fn summary(&mut self, s: &Summary);
}

/// Human-readable text.
pub struct TextSink<W: Write> {
    out: W,
}

/// One JSON object per line (schema in docs/json-schema.md).
pub struct JsonSink<W: Write> {
    out: W,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W) -> Self {
        TextSink { out }
    }
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W) -> Self {
        JsonSink { out }
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn flow(&mut self, flow: &Flow, v: &Verdict, _final: bool) {
        emit(&mut self.out, &render::flow_text(flow, v));
    }

    fn report_start(&mut self, flows: usize, target: &str, stop: &str) {
        emit(
            &mut self.out,
            &format!("==== {flows} flow(s) to {target} ({stop}) ===="),
        );
    }

    fn summary(&mut self, s: &Summary) {
        emit(&mut self.out, &s.text());
    }
}

impl<W: Write> Sink for JsonSink<W> {
    fn probe_errors(&mut self, plan: &[ProbeStatus]) {
        for p in plan.iter().filter(|p| p.missing()) {
            let line = serde_json::json!({
                "type": "probe_error",
                "hook": p.hook,
                "core": p.core,
                "error": p.error,
            });
            emit(&mut self.out, &line.to_string());
        }
    }

    fn flow(&mut self, flow: &Flow, v: &Verdict, final_: bool) {
        emit(&mut self.out, &render::flow_json_line(flow, v, final_));
    }

    fn summary(&mut self, s: &Summary) {
        emit(
            &mut self.out,
            &serde_json::to_string(s).expect("a summary serializes"),
        );
    }
}

/// The sink for `-o text|json` on stdout.
pub fn stdout_sink(json: bool) -> Box<dyn Sink> {
    if json {
        Box::new(JsonSink::new(std::io::stdout()))
    } else {
        Box::new(TextSink::new(std::io::stdout()))
    }
}
