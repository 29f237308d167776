//! Output: everything tracer prints goes through here. A [`Sink`] renders
//! flows and the summary (text or JSON lines on stdout); [`diag`] writes
//! the one-line progress, warning and error messages on stderr.

pub mod cpu;
pub mod diag;
pub mod doctor;
pub mod files;
pub mod merge;
pub mod pcap;
pub mod render;
pub mod summary;

use std::io::Write;

use crate::{
    kernel::loader::probes::ProbeStatus,
    model::{capture::Captured, flow::Flow, names::PodNames},
    verdict::Verdict,
};

pub use render::emit;
pub use summary::{Summary, WallClock};

/// What `follow` tags its JSON flow records with: the node (`--node`,
/// default the hostname) and its clock, which dates each hop in wall-clock
/// time (`hops[].unix_ns`) for `tracer merge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStamp {
    pub node: String,
    pub clock: WallClock,
}

/// Where flows and the summary go.
pub trait Sink {
    /// Hooks that could not be attached (JSON: one `probe_error` line each).
    fn probe_errors(&mut self, _plan: &[ProbeStatus]) {}
    /// A flow and its verdict: as soon as it is settled (`final_` false),
    /// or in the final report; `pods` names the pods that own namespaces.
    fn flow(&mut self, flow: &Flow, v: &Verdict, final_: bool, pods: &PodNames);
    /// The final report begins.
    fn report_start(&mut self, _flows: usize, _target: &str, _stop: &str) {}
    fn summary(&mut self, s: &Summary);
    /// Whether [`Sink::packets`] wants the followed packets' bytes
    /// (`--pcap`): the run captures none otherwise.
    fn wants_packets(&self) -> bool {
        false
    }
    /// Packets captured since the last call, each with its flow; handed
    /// over before that flow is printed.
    fn packets(&mut self, _packets: Vec<Captured>) {}
    /// The node and its clock, for the flow records printed from now on
    /// (JSON only; `follow` sets it once its clock is read).
    fn stamp(&mut self, _stamp: NodeStamp) {}
    /// Hand what is buffered to its file (`--pcap`), every tick of a live
    /// run: what a killed tracer leaves.
    fn flush(&mut self) {}
}

/// Human-readable text.
pub struct TextSink<W: Write> {
    out: W,
}

/// One JSON object per line (schema in docs/json-schema.md).
pub struct JsonSink<W: Write> {
    out: W,
    stamp: Option<NodeStamp>,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W) -> Self {
        TextSink { out }
    }
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W) -> Self {
        JsonSink { out, stamp: None }
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn flow(&mut self, flow: &Flow, v: &Verdict, _final: bool, pods: &PodNames) {
        emit(&mut self.out, &render::flow_text(flow, v, pods));
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
            let line = ProbeErrorOut {
                type_: "probe_error",
                hook: &p.hook,
                core: p.core,
                error: p.error.as_deref(),
            };
            emit(
                &mut self.out,
                &serde_json::to_string(&line).expect("a probe error serializes"),
            );
        }
    }

    fn flow(&mut self, flow: &Flow, v: &Verdict, final_: bool, pods: &PodNames) {
        emit(
            &mut self.out,
            &render::flow_json_line(flow, v, final_, pods, self.stamp.as_ref()),
        );
    }

    fn stamp(&mut self, stamp: NodeStamp) {
        self.stamp = Some(stamp);
    }

    fn summary(&mut self, s: &Summary) {
        emit(
            &mut self.out,
            &serde_json::to_string(s).expect("a summary serializes"),
        );
    }
}

/// `--pcap FILE`: another sink's output, and the captured packets
/// written to a pcapng file as their flows are printed (each with its
/// verdict); the summary says what the file holds.
pub struct PcapSink {
    inner: Box<dyn Sink>,
    pcap: Option<pcap::PcapWriter>,
}

impl PcapSink {
    pub fn new(inner: Box<dyn Sink>, pcap: pcap::PcapWriter) -> Self {
        PcapSink {
            inner,
            pcap: Some(pcap),
        }
    }
}

impl Sink for PcapSink {
    fn probe_errors(&mut self, plan: &[ProbeStatus]) {
        self.inner.probe_errors(plan);
    }

    fn flow(&mut self, flow: &Flow, v: &Verdict, final_: bool, pods: &PodNames) {
        self.inner.flow(flow, v, final_, pods);
        if let Some(p) = self.pcap.as_mut() {
            p.flow_printed(flow.id, &render::verdict_label(v), pods);
        }
    }

    fn report_start(&mut self, flows: usize, target: &str, stop: &str) {
        self.inner.report_start(flows, target, stop);
    }

    fn stamp(&mut self, stamp: NodeStamp) {
        self.inner.stamp(stamp);
    }

    /// Finish the file (the packets of flows never printed go last), then
    /// the summary with what it holds.
    fn summary(&mut self, s: &Summary) {
        let Some(p) = self.pcap.take() else {
            return self.inner.summary(s);
        };
        let (written, result) = p.finish();
        if let Err(e) = result {
            diag::warn(&crate::kernel::error_chain(&e));
        }
        let mut s = s.clone();
        s.pcap = Some(written);
        self.inner.summary(&s);
    }

    fn wants_packets(&self) -> bool {
        self.pcap.is_some()
    }

    fn flush(&mut self) {
        if let Some(p) = self.pcap.as_mut() {
            p.flush();
        }
    }

    fn packets(&mut self, packets: Vec<Captured>) {
        if let Some(p) = self.pcap.as_mut() {
            for c in packets {
                p.hold(c);
            }
        }
    }
}

/// The sink for `-o text|json` on stdout.
/// One line on stdout as it came (a node's record passed through).
pub fn emit_stdout(line: &str) {
    render::emit(&mut std::io::stdout().lock(), line);
}

pub fn stdout_sink(json: bool) -> Box<dyn Sink> {
    if json {
        Box::new(JsonSink::new(Stdout))
    } else {
        Box::new(TextSink::new(Stdout))
    }
}

/// Set once a write to stdout failed with EPIPE (its reader is gone):
/// the live run then ends as on SIGTERM.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether stdout's reader is gone (a write failed with EPIPE).
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// stdout, noting a closed pipe in [`STDOUT_CLOSED`].
struct Stdout;

impl Stdout {
    fn note<T>(r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Stdout::note(std::io::stdout().write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Stdout::note(std::io::stdout().flush())
    }
}

/// A `{"type":"probe_error", ...}` line: a hook that could not be attached.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub(crate) struct ProbeErrorOut<'a> {
    #[serde(rename = "type")]
    type_: &'static str,
    hook: &'a str,
    /// Part of the timeline every verdict relies on.
    core: bool,
    error: Option<&'a str>,
}

/// The JSON schema of `-o json`'s lines (`flow`, `summary`,
/// `probe_error`), generated from the types that write them
/// (docs/json-schema.json; docs/json-schema.md says what the fields mean).
pub fn json_schema() -> serde_json::Value {
    let mut g = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let lines = [
        ("flow", g.subschema_for::<render::FlowOut<'static>>()),
        ("summary", g.subschema_for::<Summary>()),
        ("probe_error", g.subschema_for::<ProbeErrorOut<'static>>()),
    ];
    let defs = g.take_definitions(true);
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tracer follow -o json: one object per line",
        "oneOf": lines.iter().map(|(_, s)| s).collect::<Vec<_>>(),
        "$defs": defs,
    })
}

#[cfg(test)]
mod schema_tests {
    /// docs/json-schema.json is what the types generate now. After a change
    /// to an output type: `TRACER_BLESS=1 cargo test -p tracer schema` rewrites
    /// it (and docs/json-schema.md should say what changed).
    #[test]
    fn schema_file_is_generated_from_the_types() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/json-schema.json");
        let now = serde_json::to_string_pretty(&super::json_schema()).unwrap() + "\n";
        if std::env::var_os("TRACER_BLESS").is_some() {
            std::fs::write(path, &now).unwrap();
        }
        let file = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            file == now,
            "docs/json-schema.json is not what the output types generate: run TRACER_BLESS=1 cargo test -p tracer schema"
        );
        for line in ["flow", "summary", "probe_error"] {
            assert!(now.contains(&format!("\"const\": \"{line}\"")) || now.contains(line));
        }
    }
}
