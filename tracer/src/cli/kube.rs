//! `tracer kube follow` (also the kubectl plugin: `kubectl tracer
//! follow`, when this binary runs as `kubectl-tracer`): arguments, then
//! the cluster layer's resolution, pods and streams.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use super::{Output, parse_duration};
use crate::cluster::{
    kubectl::Kubectl,
    pod::PodTemplate,
    session::{NodeOutput, PodRun},
    target::{
        AddressKind, NodeChoice, ResolvedService, TargetError, TargetSpec, node_names, resolve,
    },
};
use crate::merge::{merge_runs, read_run};

#[derive(Debug, Args)]
pub struct KubeArgs {
    #[command(subcommand)]
    pub cmd: KubeCmd,
}

#[derive(Debug, Subcommand)]
pub enum KubeCmd {
    /// Follow a Service (or an address) on the cluster's nodes: one
    /// short-lived privileged tracer pod per node, their output merged.
    Follow(KubeFollowArgs),
}

#[derive(Debug, Args)]
pub struct KubeFollowArgs {
    /// svc/NAME[:PORT] (PORT: a number or the port's name) or
    /// ADDR[:PORT] as `tracer follow` takes it.
    pub target: String,
    /// The Service's namespace.
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Nodes to run on: `all`, a label selector (`role=edge`) or names
    /// (`a,b`). Default: the nodes of the Service's endpoints; every
    /// node for an address.
    #[arg(long, value_name = "all|SELECTOR|NAME,...")]
    pub nodes: Option<String>,
    /// Which of the Service's addresses to follow.
    #[arg(long, value_enum, default_value = "cluster")]
    pub address: AddressKind,
    /// How long each node's tracer follows.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// The tracer image the nodes pull (push dist/tracer-image-*.tar
    /// to a registry they can reach).
    #[arg(long, default_value = concat!("tracer:", env!("CARGO_PKG_VERSION")))]
    pub image: String,
    /// The namespace of the tracer pods (default: kubectl's current one).
    #[arg(long, value_name = "NS")]
    pub pod_namespace: Option<String>,
    /// kubectl's --context.
    #[arg(long)]
    pub context: Option<String>,
    /// kubectl's --kubeconfig.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Print the pods that would be created (a List, JSON) and create
    /// nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also keep each node's JSON in DIR/NODE.json (for `tracer merge`).
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: Output,
    /// More `tracer follow` options for every node, after `--`
    /// (e.g. `-- --proto tcp`).
    #[arg(last = true, value_name = "FOLLOW_ARGS")]
    pub follow_args: Vec<String>,
}

/// Seconds the kubelet adds to the run before it kills a pod (image
/// pull, tracer's start and its final report).
const DEADLINE_MARGIN: u64 = 300;

pub fn run(cmd: KubeCmd) -> Result<ExitCode> {
    match cmd {
        KubeCmd::Follow(a) => follow(a),
    }
}

/// A usage error: one line, exit 2.
fn usage(msg: &str) -> ExitCode {
    crate::output::diag::error(msg);
    ExitCode::from(2)
}

fn follow(a: KubeFollowArgs) -> Result<ExitCode> {
    let spec = match TargetSpec::parse(&a.target) {
        Ok(s) => s,
        Err(e) => return Ok(usage(&e.to_string())),
    };
    let mut global = Vec::new();
    if let Some(c) = &a.context {
        global.extend(["--context".to_string(), c.clone()]);
    }
    if let Some(k) = &a.kubeconfig {
        global.extend(["--kubeconfig".to_string(), k.display().to_string()]);
    }
    let kubectl = Kubectl::new(global);
    let (target, service) = match &spec {
        TargetSpec::Address(t) => (t.clone(), None),
        TargetSpec::Service { name, port } => {
            let svc = match resolve_service(&kubectl, a.namespace.as_deref(), name, port.as_deref())
            {
                Ok(s) => s,
                // The Service is not what was asked for: a usage error.
                Err(e) => match e.downcast_ref::<TargetError>() {
                    Some(t) => return Ok(usage(&t.to_string())),
                    None => return Err(e),
                },
            };
            match svc.target(a.address) {
                Ok(t) => (t, Some(svc)),
                Err(e) => return Ok(usage(&e.to_string())),
            }
        }
    };
    let nodes = match choose_nodes(&kubectl, a.nodes.as_deref(), service.as_ref())? {
        Ok(n) => n,
        Err(msg) => return Ok(usage(&msg)),
    };
    if let Some(s) = &service {
        crate::output::diag::info(&format!(
            "Service {} ({}): following {target} on {}",
            s.name,
            s.addresses(),
            nodes.join(", ")
        ));
    }
    let mut follow_args = vec![
        "--duration".to_string(),
        format!("{}ms", a.duration.as_millis()),
    ];
    follow_args.extend(a.follow_args.iter().cloned());
    let template = PodTemplate {
        run: run_id(),
        image: a.image.clone(),
        namespace: a.pod_namespace.clone(),
        follow_args,
        deadline_secs: a.duration.as_secs() + DEADLINE_MARGIN,
    };
    if a.dry_run {
        let items: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| template.pod(i, n, &target))
            .collect();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        crate::output::emit_stdout(&serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut pods = PodRun::start(kubectl, &template, &nodes, &target)?;
    let json = a.output == super::Output::Json;
    let mut live = LiveMerge::new(json);
    let outs = pods.stream(&mut |node, line| {
        live_line(json, node, line);
        live.line(node, line);
    })?;
    pods.delete();
    if let Some(dir) = &a.save {
        save(dir, &outs)?;
    }
    Ok(report(&outs, a.output))
}

/// The Service `name` and its EndpointSlices.
fn resolve_service(
    kubectl: &Kubectl,
    namespace: Option<&str>,
    name: &str,
    port: Option<&str>,
) -> Result<ResolvedService> {
    let mut ns = Vec::new();
    if let Some(n) = namespace {
        ns.extend(["-n", n]);
    }
    let mut args = vec!["get", "service", name];
    args.extend(&ns);
    let svc = kubectl.get_json(&args)?;
    let selector = format!("kubernetes.io/service-name={name}");
    let mut args = vec!["get", "endpointslices", "-l", &selector];
    args.extend(&ns);
    let slices = kubectl.get_json(&args)?;
    Ok(resolve(&svc, &slices, port)?)
}

/// The nodes to run on; Err(message) for a choice that names none.
fn choose_nodes(
    kubectl: &Kubectl,
    choice: Option<&str>,
    service: Option<&ResolvedService>,
) -> Result<Result<Vec<String>, String>> {
    let choice = match (choice, service) {
        (Some(c), _) => NodeChoice::parse(c),
        (None, Some(s)) if !s.endpoint_nodes.is_empty() => {
            return Ok(Ok(s.endpoint_nodes.iter().cloned().collect()));
        }
        (None, Some(s)) => {
            return Ok(Err(format!(
                "Service {} has no endpoint on any node: choose nodes with --nodes (all, a selector or names)",
                s.name
            )));
        }
        (None, None) => NodeChoice::All,
    };
    let nodes = match &choice {
        NodeChoice::All => node_names(&kubectl.get_json(&["get", "nodes"])?)?,
        NodeChoice::Selector(sel) => node_names(&kubectl.get_json(&["get", "nodes", "-l", sel])?)?,
        NodeChoice::Names(names) => {
            let known = node_names(&kubectl.get_json(&["get", "nodes"])?)?;
            if let Some(missing) = names.iter().find(|n| !known.contains(n)) {
                return Ok(Err(format!("no node named {missing}")));
            }
            names.clone()
        }
    };
    if nodes.is_empty() {
        return Ok(Err(format!("no node matches --nodes {choice:?}")));
    }
    Ok(Ok(nodes))
}

/// The nodes' streams merged as they come: a path is printed when the
/// streams first stitch it, and again when its verdict or its nodes
/// change (at most one merge a second; the final one follows the run).
struct LiveMerge {
    json: bool,
    /// Each node's JSON lines so far.
    text: BTreeMap<String, String>,
    last: Option<Instant>,
    /// Each path's (tuple) verdict and nodes as last printed.
    shown: HashMap<String, String>,
}

/// The least time between two live merges.
const LIVE_EVERY: Duration = Duration::from_secs(1);

impl LiveMerge {
    fn new(json: bool) -> LiveMerge {
        LiveMerge {
            json,
            text: BTreeMap::new(),
            last: None,
            shown: HashMap::new(),
        }
    }

    fn line(&mut self, node: &str, line: &str) {
        if !line.starts_with('{') {
            return;
        }
        let t = self.text.entry(node.to_string()).or_default();
        t.push_str(line);
        t.push('\n');
        if !line.contains("\"type\":\"flow\"")
            || self.last.is_some_and(|t| t.elapsed() < LIVE_EVERY)
        {
            return;
        }
        self.last = Some(Instant::now());
        let runs: Vec<_> = self
            .text
            .iter()
            .filter_map(|(node, text)| read_run(&format!("node {node}"), text).ok())
            .collect();
        let Ok(m) = merge_runs(runs) else { return };
        for p in &m.paths {
            let key = format!("{} {}", p.proto, p.original.endpoints());
            let nodes: Vec<&str> = p.nodes.iter().map(|n| n.node.as_str()).collect();
            let sig = format!(
                "{} {} {} {}",
                p.verdict.kind,
                p.verdict.reason,
                p.verdict.node,
                nodes.join(",")
            );
            if self.shown.get(&key) != Some(&sig) {
                crate::output::merge::live_path(p, self.json);
                self.shown.insert(key, sig);
            }
        }
    }
}

/// A short id for the run's pods: time and PID, hex.
fn run_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "{:x}",
        (t << 16 ^ u64::from(std::process::id())) & 0xff_ffff_ffff
    )
}

/// A node's line as it comes: JSON records are forwarded (`-o json`);
/// other lines (tracer's notes, kubectl's) go to stderr with the node.
fn live_line(json: bool, node: &str, line: &str) {
    if line.starts_with('{') {
        if json {
            crate::output::emit_stdout(line);
        }
    } else {
        crate::output::diag::info(&format!("{node}: {line}"));
    }
}

fn save(dir: &std::path::Path, outs: &[NodeOutput]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    for o in outs {
        let path = dir.join(format!("{}.json", o.node));
        std::fs::write(&path, &o.json).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// The merged story of the nodes' runs (`-o json`: after the records
/// streamed as they came).
fn report(outs: &[NodeOutput], output: Output) -> ExitCode {
    for o in outs.iter().filter(|o| !o.complete) {
        crate::output::diag::warn(&format!(
            "node {}: pod {}'s output ended early or could not be read{}",
            o.node,
            o.pod,
            o.text.last().map(|l| format!(": {l}")).unwrap_or_default()
        ));
    }
    let mut runs = Vec::new();
    for o in outs.iter().filter(|o| !o.json.is_empty()) {
        match read_run(&format!("pod {}", o.pod), &o.json) {
            Ok(r) => runs.push(r),
            Err(e) => crate::output::diag::warn(&format!("node {}: {e}", o.node)),
        }
    }
    if runs.is_empty() {
        crate::output::diag::error("no node's tracer printed anything to merge");
        return ExitCode::from(1);
    }
    match merge_runs(runs) {
        Ok(m) => {
            crate::output::merge::print(&m, output == Output::Json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            crate::output::diag::error(&e.to_string());
            ExitCode::from(1)
        }
    }
}
