//! The Service a flow is for, as kube-proxy's rules in the namespaces it
//! crossed name its destination (node::services).

use serde::Serialize;

use super::Env;
use crate::{
    model::flow::Flow,
    node::services::{self, ServiceKind, ServiceSource},
};

/// A flow's Service: JSON `service` on a flow.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct FlowService {
    /// `namespace/name:port` as kube-proxy names the Service port.
    pub name: String,
    /// How the flow's destination reaches it.
    pub kind: ServiceKind,
    /// The namespace whose kube-proxy rules name it.
    pub netns: String,
    /// The map element or rule that names it.
    pub source: ServiceSource,
}

/// The first namespace on the flow's path (in hop order) where
/// kube-proxy's state names the flow's original destination.
pub fn of_flow(flow: &Flow, env: &dyn Env) -> Option<FlowService> {
    let k = &flow.key;
    flow.path_netns().into_iter().find_map(|(ino, label)| {
        let table = env.services(ino);
        if table.is_empty() {
            return None;
        }
        let local = env
            .addrs(ino)
            .is_some_and(|a| a.iter().any(|a| a.addr == k.dst));
        let s = services::find(table, k.proto, k.dst, k.dport, local)?;
        Some(FlowService {
            name: s.service.clone(),
            kind: s.kind,
            netns: label.to_string(),
            source: s.source.clone(),
        })
    })
}
