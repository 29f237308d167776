//! One cluster run: the tracer pods it created, their output streamed
//! back (`kubectl logs -f`), and the pods removed on every exit path (by
//! [`Drop`], after Ctrl-C too: a first SIGINT/SIGTERM deletes the pods,
//! whose tracers then print their final report, still read; a second one
//! stops reading).

use std::{process::Stdio, time::Duration};

use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    signal::unix::{SignalKind, signal},
    sync::mpsc,
};

use super::{
    kubectl::{Kubectl, KubectlError},
    pod::{PodTemplate, RUN_LABEL},
};

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Kubectl(#[from] KubectlError),
    #[error("start the runtime or the signal handlers: {0}")]
    Runtime(std::io::Error),
}

/// What one node's pod printed.
#[derive(Debug, Default)]
pub struct NodeOutput {
    pub node: String,
    pub pod: String,
    /// Its JSON lines (tracer's records) as they came, each ended by a
    /// newline: what `tracer merge` reads.
    pub json: String,
    /// Its other lines (tracer's notes and errors, kubectl's).
    pub text: Vec<String>,
    /// Whether `kubectl logs` ended cleanly (the pod ran and its log was
    /// read to the end).
    pub complete: bool,
}

/// The pods of one run.
pub struct PodRun {
    kubectl: Kubectl,
    namespace: Option<String>,
    run: String,
    pods: Vec<(String, String)>,
    /// Pods may exist (a create was tried) and were not deleted yet.
    live: bool,
}

/// How long `kubectl logs -f` waits for a pod to run (image pull
/// included).
const RUNNING_TIMEOUT: &str = "--pod-running-timeout=3m";

/// After the pods were deleted, how long their last lines are awaited.
const DRAIN: Duration = Duration::from_secs(20);

impl PodRun {
    /// Create a pod following `target` on each of `nodes`.
    pub fn start(
        kubectl: Kubectl,
        template: &PodTemplate,
        nodes: &[String],
        target: &str,
    ) -> Result<PodRun, KubectlError> {
        let mut run = PodRun {
            kubectl,
            namespace: template.namespace.clone(),
            run: template.run.clone(),
            pods: Vec::new(),
            live: false,
        };
        for (i, node) in nodes.iter().enumerate() {
            let pod = template.pod(i, node, target);
            run.live = true;
            run.kubectl.create(&pod)?;
            run.pods.push((node.clone(), template.name(i, node)));
        }
        Ok(run)
    }

    /// Read every pod's output until each ends, handing each line to
    /// `each` as it comes (node, line).
    pub fn stream(
        &mut self,
        each: &mut dyn FnMut(&str, &str),
    ) -> Result<Vec<NodeOutput>, SessionError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(SessionError::Runtime)?;
        rt.block_on(self.stream_async(each))
    }

    async fn stream_async(
        &mut self,
        each: &mut dyn FnMut(&str, &str),
    ) -> Result<Vec<NodeOutput>, SessionError> {
        let mut sigint = signal(SignalKind::interrupt()).map_err(SessionError::Runtime)?;
        let mut sigterm = signal(SignalKind::terminate()).map_err(SessionError::Runtime)?;
        let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Option<String>, bool)>();
        for (i, (_, pod)) in self.pods.iter().enumerate() {
            let mut args = vec!["logs", "-f", RUNNING_TIMEOUT, pod.as_str()];
            if let Some(ns) = &self.namespace {
                args.extend(["-n", ns]);
            }
            let mut cmd = tokio::process::Command::from(self.kubectl.command(&args));
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            let mut child = cmd
                .spawn()
                .map_err(|e| KubectlError::Spawn("kubectl logs".into(), e))?;
            let out = child.stdout.take().expect("piped stdout");
            let err = child.stderr.take().expect("piped stderr");
            let tx2 = tx.clone();
            let errs = tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    let _ = tx2.send((i, Some(l), false));
                }
            });
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(out).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    let _ = tx.send((i, Some(l), false));
                }
                // Its last words on stderr before its end.
                let _ = errs.await;
                let ok = child.wait().await.is_ok_and(|s| s.success());
                let _ = tx.send((i, None, ok));
            });
        }
        drop(tx);
        let mut outs: Vec<NodeOutput> = self
            .pods
            .iter()
            .map(|(node, pod)| NodeOutput {
                node: node.clone(),
                pod: pod.clone(),
                ..NodeOutput::default()
            })
            .collect();
        let mut open = outs.len();
        let mut stopping: Option<tokio::time::Instant> = None;
        while open > 0 {
            let deadline = stopping.map(|t| t + DRAIN);
            tokio::select! {
                m = rx.recv() => match m {
                    Some((i, Some(line), _)) => {
                        each(&outs[i].node, &line);
                        match serde_json::from_str::<Value>(&line) {
                            Ok(v) if v.is_object() => {
                                outs[i].json.push_str(&line);
                                outs[i].json.push('\n');
                            }
                            _ => outs[i].text.push(line),
                        }
                    }
                    Some((i, None, ok)) => {
                        outs[i].complete = ok;
                        open -= 1;
                    }
                    None => break,
                },
                _ = sigint.recv() => if self.interrupted(&mut stopping) { break },
                _ = sigterm.recv() => if self.interrupted(&mut stopping) { break },
                () = async { tokio::time::sleep_until(deadline.unwrap()).await },
                    if deadline.is_some() => break,
            }
        }
        Ok(outs)
    }

    /// A signal: the first deletes the pods (their tracers report and
    /// exit; reading goes on); true when reading should stop.
    fn interrupted(&mut self, stopping: &mut Option<tokio::time::Instant>) -> bool {
        if stopping.is_some() {
            return true;
        }
        *stopping = Some(tokio::time::Instant::now());
        crate::output::diag::note(
            "stopping: deleting the tracer pods (they print their final report)",
        );
        self.delete();
        false
    }

    /// Delete the run's pods (once).
    pub fn delete(&mut self) {
        if !self.live {
            return;
        }
        self.live = false;
        if let Err(e) = self
            .kubectl
            .delete_pods(self.namespace.as_deref(), RUN_LABEL, &self.run)
        {
            crate::output::diag::warn(&format!(
                "{e}: delete the pods by hand: kubectl delete pod -l {RUN_LABEL}={}",
                self.run
            ));
        }
    }
}

impl Drop for PodRun {
    fn drop(&mut self) {
        self.delete();
    }
}
