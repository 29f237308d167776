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
    let mut seen = Vec::new();
    for h in &flow.hops {
        if h.netns_inode == 0 || seen.contains(&h.netns_inode) {
            continue;
        }
        seen.push(h.netns_inode);
        let table = env.services(h.netns_inode);
        if table.is_empty() {
            continue;
        }
        let local = env
            .addrs(h.netns_inode)
            .is_some_and(|a| a.iter().any(|a| a.addr == k.dst));
        if let Some(s) = services::find(table, k.proto, k.dst, k.dport, local) {
            return Some(FlowService {
                name: s.service.clone(),
                kind: s.kind,
                netns: h.netns.to_string(),
                source: s.source.clone(),
            });
        }
    }
    None
}
