//! The `kubectl` calls of a cluster run: kubectl brings the user's
//! kubeconfig, context and auth plugins, and is what the cluster's
//! operators already have (a plugin runs beside it). `$KUBECTL` names
//! another binary.

use std::{
    ffi::OsString,
    io::Write,
    process::{Command, Stdio},
};

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum KubectlError {
    #[error("could not run {0}: {1} (install kubectl, or set KUBECTL to its path)")]
    Spawn(String, std::io::Error),
    #[error("kubectl {0} failed: {1}")]
    Failed(String, String),
    #[error("kubectl {0} printed no JSON: {1}")]
    BadJson(String, serde_json::Error),
}

/// How kubectl is run: its binary and the arguments every call gets
/// (`--context`, `--kubeconfig`).
#[derive(Debug, Clone)]
pub struct Kubectl {
    bin: OsString,
    global: Vec<String>,
}

impl Kubectl {
    /// `$KUBECTL` or `kubectl`, with `global` before every call's own
    /// arguments.
    pub fn new(global: Vec<String>) -> Kubectl {
        Kubectl {
            bin: std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()),
            global,
        }
    }

    /// A command for `args` (kubectl's stdin closed).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(&self.global).args(args).stdin(Stdio::null());
        c
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<Value, KubectlError> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.output(&all, None)?;
        serde_json::from_slice(&out).map_err(|e| KubectlError::BadJson(args.join(" "), e))
    }

    /// `kubectl create -f -` with `manifest` on its stdin.
    pub fn create(&self, manifest: &Value) -> Result<(), KubectlError> {
        self.output(
            &["create", "-f", "-"],
            Some(manifest.to_string().as_bytes()),
        )
        .map(drop)
    }

    /// Delete the pods labelled `label=value` (not waiting for them to
    /// go: their tracer gets SIGTERM and prints its final report).
    pub fn delete_pods(
        &self,
        namespace: Option<&str>,
        label: &str,
        value: &str,
    ) -> Result<(), KubectlError> {
        let selector = format!("{label}={value}");
        let mut args = vec![
            "delete",
            "pod",
            "-l",
            &selector,
            "--wait=false",
            "--ignore-not-found",
        ];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        self.output(&args, None).map(drop)
    }

    fn output(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Vec<u8>, KubectlError> {
        let what = || self.bin.to_string_lossy().into_owned();
        let mut c = self.command(args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        if stdin.is_some() {
            c.stdin(Stdio::piped());
        }
        let mut child = c.spawn().map_err(|e| KubectlError::Spawn(what(), e))?;
        if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
            w.write_all(data)
                .map_err(|e| KubectlError::Spawn(what(), e))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| KubectlError::Spawn(what(), e))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let line = err
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("no message")
                .to_string();
            return Err(KubectlError::Failed(args.join(" "), line));
        }
        Ok(out.stdout)
    }
}
