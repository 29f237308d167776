//! kube-proxy's rules read as Kubernetes: what nf_tables tracing saw in
//! its table means for a Service, from the names and comments kube-proxy
//! gives its chains, maps and rules (pkg/proxy/nftables/proxier.go, and
//! the iptables mode's comments).

use super::{Env, Evidence};
use crate::{
    model::flow::Flow,
    node::nftrace::{NfTraced, TracedTuple},
};

/// Whether a traced packet is one of `flow`'s: its tuple, before or after
/// NAT.
pub(super) fn is_flows(flow: &Flow, t: &TracedTuple) -> bool {
    let tuples: Vec<_> = std::iter::once(&flow.key).chain(&flow.translated).collect();
    t.proto == flow.key.proto
        && tuples.iter().any(|k| (k.src, k.sport) == (t.src, t.sport))
        && tuples.iter().any(|k| (k.dst, k.dport) == (t.dst, t.dport))
}

/// What a drop in kube-proxy's nftables table means, read as kube-proxy
/// writes it (pkg/proxy/nftables/proxier.go): the no-endpoints map's
/// element comment is the Service port (`ns/svc:port`), the unallocated
/// ClusterIP rule has its own comment, and a Service's firewall chain is
/// `firewall-HASH-ns/svc/proto/port`.
pub(super) fn drop_reading(t: &NfTraced) -> Option<Evidence> {
    // Its iptables and nftables modes comment the rule "ns/svc:port has
    // no local endpoints".
    const NO_LOCAL: &str = " has no local endpoints";
    if let Some(c) = t.comment.as_deref().filter(|c| c.contains(NO_LOCAL)) {
        let service = c.split(NO_LOCAL).next().unwrap_or(c).trim_matches('"');
        return Some(Evidence::KubeNoLocalEndpoints {
            service: service.to_string(),
        });
    }
    if t.table != "kube-proxy" {
        return None;
    }
    if let Some(e) = &t.element
        && matches!(
            e.map.as_str(),
            "@no-endpoint-services" | "@no-endpoint-nodeports"
        )
    {
        return Some(Evidence::KubeServiceNoEndpoints {
            service: e.comment.clone().unwrap_or_else(|| e.key.clone()),
        });
    }
    if t.comment.as_deref() == Some("Drop traffic to unallocated ClusterIPs") {
        return Some(Evidence::KubeClusterIpUnallocated { addr: t.tuple.dst });
    }
    let svc = service_of(t.chain.strip_prefix("firewall-")?.split_once('-')?.1)?;
    Some(Evidence::KubeSourceRangesDrop {
        service: t
            .element
            .as_ref()
            .and_then(|e| e.comment.clone())
            .unwrap_or(svc),
        src: t.tuple.src,
    })
}

/// `ns/svc/proto/port` (a kube-proxy chain name's tail) as `ns/svc:port`.
fn service_of(tail: &str) -> Option<String> {
    let mut parts = tail.rsplitn(3, '/');
    let (port, _proto, name) = (parts.next()?, parts.next()?, parts.next()?);
    Some(format!("{name}:{port}"))
}

/// The Service (and endpoint) kube-proxy's nftables rules sent the flow
/// to: its gotos to `service-HASH-ns/svc/proto/port` (or `external-...`)
/// and `endpoint-HASH-ns/svc/proto/port__IP/PORT`.
pub fn routed(flow: &Flow, env: &dyn Env) -> Option<Evidence> {
    let mut netns: Vec<(u32, &str)> = flow
        .hops
        .iter()
        .map(|h| (h.netns_inode, h.netns.as_str()))
        .collect();
    netns.dedup();
    for (ino, label) in netns {
        let gotos: Vec<&str> = env
            .nf_gotos(ino)
            .iter()
            .filter(|g| g.table == "kube-proxy" && is_flows(flow, &g.tuple))
            .filter_map(|g| g.verdict.strip_prefix("goto "))
            .collect();
        let service = gotos.iter().find_map(|c| {
            let tail = c
                .strip_prefix("service-")
                .or_else(|| c.strip_prefix("external-"))?;
            service_of(tail.split_once('-')?.1)
        });
        let Some(service) = service else { continue };
        let endpoint = gotos.iter().find_map(|c| {
            let (_, ep) = c.strip_prefix("endpoint-")?.split_once("__")?;
            let (ip, port) = ep.rsplit_once('/')?;
            Some(if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            })
        });
        return Some(Evidence::KubeServiceRouted {
            service,
            endpoint,
            netns: label.to_string(),
        });
    }
    None
}
