//! The pod that runs tracer on one node for `kubectl tracer follow`: as
//! `kubectl debug node --profile=sysadmin` would run it (privileged, the
//! node's network and PID namespaces, the node's root at /host), pinned
//! to the node by `nodeName` (no scheduler, any taint), never restarted,
//! and killed by the kubelet if it outlives the run.

use serde_json::{Value, json};

/// The label every pod of a run carries, valued with the run's id: what
/// the run deletes them by.
pub const RUN_LABEL: &str = "tracer.dev/run";

/// What every pod of a run shares.
#[derive(Debug, Clone)]
pub struct PodTemplate {
    /// The run's id (lowercase hex): pod names and [`RUN_LABEL`].
    pub run: String,
    pub image: String,
    /// The pods' namespace (None: kubectl's current one).
    pub namespace: Option<String>,
    /// `tracer follow` arguments after its target (`--duration 30s`, ...).
    pub follow_args: Vec<String>,
    /// How long the kubelet lets a pod run before killing it.
    pub deadline_secs: u64,
}

/// Longest pod name kept of a node's name (pod names are DNS subdomains,
/// 253 characters; kept short for `kubectl get pods`).
const NODE_PART: usize = 40;

impl PodTemplate {
    /// The pod's name for the `i`th node.
    pub fn name(&self, i: usize, node: &str) -> String {
        let node: String = node
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(NODE_PART)
            .collect();
        format!("tracer-{}-{i}-{}", self.run, node.trim_end_matches('-'))
    }

    /// The pod that follows `target` on `node`.
    pub fn pod(&self, i: usize, node: &str, target: &str) -> Value {
        let mut command = vec![
            "tracer".to_string(),
            "follow".into(),
            target.into(),
            "--node".into(),
            node.into(),
            "-o".into(),
            "json".into(),
        ];
        command.extend(self.follow_args.iter().cloned());
        let mut metadata = json!({
            "name": self.name(i, node),
            "labels": {
                "app.kubernetes.io/name": "tracer",
                RUN_LABEL: self.run,
            },
        });
        if let Some(ns) = &self.namespace {
            metadata["namespace"] = json!(ns);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                "nodeName": node,
                "hostNetwork": true,
                "hostPID": true,
                "dnsPolicy": "ClusterFirstWithHostNet",
                "restartPolicy": "Never",
                "activeDeadlineSeconds": self.deadline_secs,
                "terminationGracePeriodSeconds": 10,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{
                    "name": "tracer",
                    "image": self.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "securityContext": {"privileged": true},
                    "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": true}],
                }],
                "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_per_node_runs_tracer_there() {
        let t = PodTemplate {
            run: "1a2b3c".into(),
            image: "registry.example/tracer:0.1.0".into(),
            namespace: Some("kube-system".into()),
            follow_args: vec!["--duration".into(), "30s".into()],
            deadline_secs: 150,
        };
        let p = t.pod(0, "Worker_1.example.com", "10.96.0.10:53");
        assert_eq!(
            p["metadata"]["name"],
            "tracer-1a2b3c-0-worker-1-example-com"
        );
        assert_eq!(p["metadata"]["namespace"], "kube-system");
        assert_eq!(p["metadata"]["labels"][RUN_LABEL], "1a2b3c");
        assert_eq!(p["spec"]["nodeName"], "Worker_1.example.com");
        assert_eq!(p["spec"]["hostNetwork"], true);
        assert_eq!(p["spec"]["hostPID"], true);
        assert_eq!(p["spec"]["restartPolicy"], "Never");
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["securityContext"]["privileged"], true);
        assert_eq!(
            c["command"],
            json!([
                "tracer",
                "follow",
                "10.96.0.10:53",
                "--node",
                "Worker_1.example.com",
                "-o",
                "json",
                "--duration",
                "30s"
            ])
        );
        assert!(t.pod(1, "b", "x")["metadata"]["name"] == "tracer-1a2b3c-1-b");
    }
}
