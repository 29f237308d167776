//! kube-proxy's rules read as Kubernetes: what nf_tables tracing saw in
//! its table means for a Service, from the names and comments kube-proxy
//! gives its chains, maps and rules (pkg/proxy/nftables/proxier.go, and
//! the iptables mode's comments).

use std::{fmt, net::IpAddr};

use super::{Env, Evidence, evidence::PolicyDirection};
use crate::{
    model::flow::Flow,
    node::nftrace::{NfTraced, TracedTuple},
    node::services::{endpoint_of_chain, service_of_chain, service_of_firewall_chain},
};

/// Whether a traced packet is one of `flow`'s: its tuple, before or after
/// NAT.
pub(super) fn is_flows(flow: &Flow, t: &TracedTuple) -> bool {
    let tuples: Vec<_> = std::iter::once(&flow.key).chain(&flow.translated).collect();
    let ends = |src, dst| {
        tuples.iter().any(|k| (k.src, k.sport) == src)
            && tuples.iter().any(|k| (k.dst, k.dport) == dst)
    };
    let (src, dst) = ((t.src, t.sport), (t.dst, t.dport));
    // A request, or a reply (nftrace traces the target's replies too).
    t.proto == flow.key.proto && (ends(src, dst) || ends(dst, src))
        // The outer packet of a tunnel the flow went into (nftrace traces
        // VXLAN packets by their inner headers): one of the flow's hops.
        || flow.hops.iter().any(|h| {
            flow.is_outer(&h.tuple)
                && (h.tuple.src, h.tuple.sport, h.tuple.dst, h.tuple.dport)
                    == (t.src, t.sport, t.dst, t.dport)
                && t.proto == 17
        })
}

/// What a drop in kube-proxy's nftables table means, read as kube-proxy
/// writes it (pkg/proxy/nftables/proxier.go): the no-endpoints map's
/// element comment is the Service port (`ns/svc:port`), the unallocated
/// ClusterIP rule has its own comment, and a Service's firewall chain is
/// `firewall-HASH-ns/svc/proto/port`.
pub(super) fn drop_reading(t: &NfTraced) -> Option<Evidence> {
    if let Some(e) = policy_reading(t) {
        return Some(e);
    }
    // Its iptables and nftables modes comment the rule "ns/svc:port has
    // no local endpoints".
    const NO_LOCAL: &str = " has no local endpoints";
    if let Some(c) = t.comment.as_deref().filter(|c| c.contains(NO_LOCAL)) {
        let service = c.split(NO_LOCAL).next().unwrap_or(c).trim_matches('"');
        return Some(Evidence::KubeNoLocalEndpoints {
            service: service.to_string(),
        });
    }
    // Its iptables mode rejects traffic to a Service without endpoints
    // by a rule commented "ns/svc:port has no endpoints".
    const NONE: &str = " has no endpoints";
    if let Some(c) = t.comment.as_deref().filter(|c| c.ends_with(NONE)) {
        return Some(Evidence::KubeServiceNoEndpoints {
            service: c.trim_end_matches(NONE).trim_matches('"').to_string(),
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
    let svc = service_of_firewall_chain(&t.chain)?;
    Some(Evidence::KubeSourceRangesDrop {
        service: t
            .element
            .as_ref()
            .and_then(|e| e.comment.clone())
            .unwrap_or(svc),
        src: t.tuple.src,
    })
}

/// A NetworkPolicy controller's default deny, read as it writes it:
/// kube-router comments its per-pod firewall chain's last rule "rule to
/// REJECT traffic destined for POD name:NAME namespace: NS" (ingress; "from
/// POD" for egress; pkg/controllers/netpol/pod_fw.go), Calico ends a
/// workload's chains `cali-tw-IFACE` (to the workload) and `cali-fw-IFACE`
/// (from it) with a rule commented "Drop if no policies passed packet"
/// (felix rules/endpoints.go).
fn policy_reading(t: &NfTraced) -> Option<Evidence> {
    let comment = t.comment.as_deref()?.trim_matches('"');
    if let Some((head, pod)) = comment.split_once(" POD name:")
        && head.contains("rule to REJECT traffic")
    {
        let (name, ns) = pod.split_once("namespace:")?;
        return Some(Evidence::NetworkPolicyDrop {
            enforcer: "kube-router".into(),
            direction: if head.ends_with("destined for") {
                PolicyDirection::Ingress
            } else {
                PolicyDirection::Egress
            },
            pod: Some(format!("{}/{}", ns.trim(), name.trim())),
            iface: None,
        });
    }
    if comment.ends_with("Drop if no policies passed packet") {
        let (direction, iface) = if let Some(i) = t.chain.strip_prefix("cali-tw-") {
            (PolicyDirection::Ingress, i)
        } else if let Some(i) = t.chain.strip_prefix("cali-fw-") {
            (PolicyDirection::Egress, i)
        } else {
            return None;
        };
        return Some(Evidence::NetworkPolicyDrop {
            enforcer: "calico".into(),
            direction,
            pod: None,
            iface: Some(iface.to_string()),
        });
    }
    None
}

/// The Service (and endpoint) kube-proxy's nftables rules sent the flow
/// to: its gotos to `service-HASH-ns/svc/proto/port` (or `external-...`)
/// and `endpoint-HASH-ns/svc/proto/port__IP/PORT`.
pub fn routed(flow: &Flow, env: &dyn Env) -> Option<Evidence> {
    for (ino, label) in flow.path_netns() {
        let gotos: Vec<&str> = env
            .nf_gotos(ino)
            .iter()
            .filter(|g| g.table == "kube-proxy" && is_flows(flow, &g.tuple))
            .filter_map(|g| g.verdict.strip_prefix("goto "))
            .collect();
        let service = gotos.iter().find_map(|c| service_of_chain(c));
        let Some(service) = service else { continue };
        let endpoint = gotos
            .iter()
            .find_map(|c| endpoint_of_chain(c).map(|(_, ep)| ep));
        return Some(Evidence::KubeServiceRouted {
            service,
            endpoint,
            netns: label.to_string(),
        });
    }
    None
}

// The sentences of the facts read here (verdict/evidence.rs).

/// [`Evidence::KubeServiceRouted`].
pub(super) fn service_routed(
    f: &mut fmt::Formatter<'_>,
    service: &str,
    endpoint: Option<&str>,
    netns: &str,
) -> fmt::Result {
    write!(f, "kube-proxy sent it to Service {service}")?;
    if let Some(e) = endpoint {
        write!(f, ", endpoint {e}")?;
    }
    write!(f, " (netns {netns})")
}

/// [`Evidence::KubeNoLocalEndpoints`].
pub(super) fn no_local_endpoints(f: &mut fmt::Formatter<'_>, service: &str) -> fmt::Result {
    write!(
        f,
        "kube-proxy: Service {service} has no local endpoints on this node (externalTrafficPolicy: Local)"
    )
}

/// [`Evidence::KubeServiceNoEndpoints`].
pub(super) fn service_no_endpoints(f: &mut fmt::Formatter<'_>, service: &str) -> fmt::Result {
    write!(
        f,
        "kube-proxy: Service {service} has no endpoints, so its rule rejects connections to it"
    )
}

/// [`Evidence::KubeClusterIpUnallocated`].
pub(super) fn cluster_ip_unallocated(f: &mut fmt::Formatter<'_>, addr: &IpAddr) -> fmt::Result {
    write!(
        f,
        "kube-proxy: {addr} is in the Service CIDR but no Service has it (rule \"Drop traffic to unallocated ClusterIPs\")"
    )
}

/// [`Evidence::KubeSourceRangesDrop`].
pub(super) fn source_ranges_drop(
    f: &mut fmt::Formatter<'_>,
    service: &str,
    src: &IpAddr,
) -> fmt::Result {
    write!(
        f,
        "kube-proxy: {src} is not in Service {service}'s loadBalancerSourceRanges (its firewall chain drops it)"
    )
}

/// [`Evidence::NetworkPolicyDrop`].
pub(super) fn network_policy_drop(
    f: &mut fmt::Formatter<'_>,
    enforcer: &str,
    direction: PolicyDirection,
    pod: Option<&str>,
    iface: Option<&str>,
) -> fmt::Result {
    let dir: &str = direction.into();
    write!(f, "{enforcer}: no NetworkPolicy ")?;
    match (pod, iface) {
        (Some(p), _) => write!(f, "selecting pod {p}")?,
        (None, Some(i)) => write!(f, "of the pod on {i}")?,
        (None, None) => f.write_str("of the pod")?,
    }
    write!(f, " allows this {dir} traffic (its default deny)")
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::{
        model::event::Tuple,
        node::nftrace::{MapElement, TracedGoto},
        verdict::Inventory,
    };

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn tuple(dst: &str) -> TracedTuple {
        TracedTuple {
            proto: 6,
            src: ip("10.0.1.5"),
            sport: 41000,
            dst: ip(dst),
            dport: 80,
        }
    }

    fn traced(chain: &str, comment: Option<&str>, element: Option<(&str, &str)>) -> NfTraced {
        NfTraced {
            tuple: tuple("10.96.0.3"),
            family: "ip".into(),
            table: "kube-proxy".into(),
            chain: chain.into(),
            handle: 7,
            rule: "reject".into(),
            comment: comment.map(Into::into),
            verdict: "drop".into(),
            via: vec![],
            element: element.map(|(map, c)| MapElement {
                map: map.into(),
                key: "10.96.0.3 . tcp . 80".into(),
                verdict: "goto reject-chain".into(),
                comment: Some(c.into()),
            }),
            hook: None,
        }
    }

    #[test]
    fn network_policy_default_denies_read_as_pods() {
        let mut t = traced(
            "KUBE-POD-FW-24CAQJ4LYSAY3PHB",
            Some("rule to REJECT traffic destined for POD name:web-0 namespace: shop"),
            None,
        );
        t.table = "filter".into();
        assert_eq!(
            drop_reading(&t),
            Some(Evidence::NetworkPolicyDrop {
                enforcer: "kube-router".into(),
                direction: PolicyDirection::Ingress,
                pod: Some("shop/web-0".into()),
                iface: None,
            })
        );
        // Newer kube-router: no space after "namespace:", egress.
        t.comment = Some("rule to REJECT traffic from POD name:job-1 namespace:batch".into());
        assert!(matches!(
            drop_reading(&t),
            Some(Evidence::NetworkPolicyDrop { direction: PolicyDirection::Egress, pod: Some(p), .. }) if p == "batch/job-1"
        ));
        t.chain = "cali-fw-cali0ef24b1".into();
        t.comment = Some("End of tier default. Drop if no policies passed packet".into());
        assert_eq!(
            drop_reading(&t),
            Some(Evidence::NetworkPolicyDrop {
                enforcer: "calico".into(),
                direction: PolicyDirection::Egress,
                pod: None,
                iface: Some("cali0ef24b1".into()),
            })
        );
        // The same words in another chain are not read as a policy.
        t.chain = "FORWARD".into();
        assert_eq!(drop_reading(&t), None);
    }

    #[test]
    fn drops_in_kube_proxys_table_read_as_services() {
        let e = drop_reading(&traced(
            "reject-chain",
            None,
            Some(("@no-endpoint-services", "default/empty:http")),
        ));
        assert_eq!(
            e,
            Some(Evidence::KubeServiceNoEndpoints {
                service: "default/empty:http".into()
            })
        );
        let e = drop_reading(&traced(
            "cluster-ips-check",
            Some("Drop traffic to unallocated ClusterIPs"),
            None,
        ));
        assert_eq!(
            e,
            Some(Evidence::KubeClusterIpUnallocated {
                addr: ip("10.96.0.3")
            })
        );
        // A firewall chain without a map element: the Service from its name.
        let e = drop_reading(&traced("firewall-4BQ3ZKGA-ns/lb/tcp/https", None, None));
        assert_eq!(
            e,
            Some(Evidence::KubeSourceRangesDrop {
                service: "ns/lb:https".into(),
                src: ip("10.0.1.5")
            })
        );
        // iptables mode's comment, in any table.
        let mut t = traced(
            "KUBE-EXTERNAL-SERVICES",
            Some("default/nginx:http has no local endpoints"),
            None,
        );
        t.table = "filter".into();
        assert_eq!(
            drop_reading(&t),
            Some(Evidence::KubeNoLocalEndpoints {
                service: "default/nginx:http".into()
            })
        );
        t.comment = Some("default/empty:http has no endpoints".into());
        assert_eq!(
            drop_reading(&t),
            Some(Evidence::KubeServiceNoEndpoints {
                service: "default/empty:http".into()
            })
        );
        // Another table's rule, or another chain of kube-proxy's: nothing.
        t.comment = None;
        assert_eq!(drop_reading(&t), None);
        assert_eq!(drop_reading(&traced("filter-forward", None, None)), None);
    }

    #[test]
    fn gotos_name_the_service_and_endpoint_of_the_flows_packets() {
        let key = Tuple {
            src: ip("10.0.1.5"),
            sport: 41000,
            dst: ip("10.96.0.1"),
            dport: 80,
            proto: 6,
        };
        let (mut flow, _) = crate::verdict::rules::tests::load("tcp_delivered");
        flow.key = key;
        flow.translated = None;
        let ino = flow.hops[0].netns_inode;
        let goto = |t: TracedTuple, verdict: &str| TracedGoto {
            tuple: t,
            table: "kube-proxy".into(),
            chain: "services".into(),
            verdict: verdict.into(),
        };
        let mut inv = Inventory::default();
        inv.nf_gotos.insert(
            ino,
            vec![
                // Another flow's.
                goto(tuple("10.96.0.9"), "goto service-AAAA-ns/other/tcp/http"),
                goto(
                    tuple("10.96.0.1"),
                    "goto service-ULMVA6XW-default/web/tcp/http",
                ),
                goto(
                    tuple("10.96.0.1"),
                    "goto endpoint-5OJB2KTY-default/web/tcp/http__10.180.0.1/8080",
                ),
            ],
        );
        let e = routed(&flow, &inv).expect("routed");
        assert_eq!(
            e.to_string(),
            format!(
                "kube-proxy sent it to Service default/web:http, endpoint 10.180.0.1:8080 (netns {})",
                flow.hops[0].netns
            )
        );
        // Another protocol: not this flow's.
        flow.key.proto = 17;
        assert!(routed(&flow, &inv).is_none());
    }
}
