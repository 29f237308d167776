//! tracer on a cluster, with what the cluster already has: `kubectl`
//! (its kubeconfig, its auth plugins) resolves a Service and its
//! endpoints' nodes, starts one short-lived privileged tracer pod per
//! node, streams their JSON back and removes them (`tracer kube follow`,
//! also run as the kubectl plugin `kubectl tracer follow`).
//!
//! - [`target`]: what to follow (a Service, or an address) and on which
//!   nodes, from the Service, EndpointSlice and Node objects;
//! - [`pod`]: the pod spec each node runs;
//! - [`kubectl`]: the `kubectl` calls;
//! - [`session`]: the pods of one run, removed on every exit path.

pub mod kubectl;
pub mod pod;
pub mod session;
pub mod target;
