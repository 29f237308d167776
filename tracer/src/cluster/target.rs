//! What `kubectl tracer follow` follows, and where: `svc/NAME[:PORT]`
//! resolved from the Service (its ClusterIP, LoadBalancer ingress and
//! external IPs, its ports) and its EndpointSlices (the nodes of its
//! endpoints), or an address as `tracer follow` takes it.

use std::{collections::BTreeSet, net::IpAddr};

use serde_json::Value;

/// Why a target or node choice cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("bad target '{0}': expected svc/NAME[:PORT], ADDR or ADDR:PORT")]
    Syntax(String),
    #[error("Service {0} has no port {1} (its ports: {2})")]
    NoSuchPort(String, String, String),
    #[error("Service {0} has no {1} address (it has: {2})")]
    NoAddress(String, &'static str, String),
    #[error(
        "Service {0} is headless (clusterIP None) and has no other address: follow a pod's address instead"
    )]
    Headless(String),
    #[error("not a Kubernetes {0} object: {1}")]
    NotAnObject(&'static str, String),
    #[error("no node matches: {0}")]
    NoNodes(String),
}

/// The target as typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// `svc/NAME` or `service/NAME`, with `:PORT` (a number or a port's
    /// name).
    Service { name: String, port: Option<String> },
    /// An address, `ADDR:PORT` or `[V6]:PORT`, given to `tracer follow`
    /// as is.
    Address(String),
}

impl TargetSpec {
    pub fn parse(s: &str) -> Result<TargetSpec, TargetError> {
        let bad = || TargetError::Syntax(s.to_string());
        if let Some(rest) = s
            .strip_prefix("svc/")
            .or_else(|| s.strip_prefix("service/"))
            .or_else(|| s.strip_prefix("services/"))
        {
            let (name, port) = match rest.split_once(':') {
                Some((n, p)) if !p.is_empty() => (n, Some(p.to_string())),
                Some(_) => return Err(bad()),
                None => (rest, None),
            };
            let dns_label = |n: &str| {
                !n.is_empty()
                    && n.len() <= 63
                    && n.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            };
            if !dns_label(name) {
                return Err(bad());
            }
            return Ok(TargetSpec::Service {
                name: name.to_string(),
                port,
            });
        }
        crate::model::target::Target::parse(s, None).map_err(|_| bad())?;
        Ok(TargetSpec::Address(s.to_string()))
    }
}

/// Which of a Service's addresses to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AddressKind {
    /// spec.clusterIP
    Cluster,
    /// status.loadBalancer.ingress[].ip
    Lb,
    /// spec.externalIPs
    External,
}

/// A Service as resolved: its addresses, the port to follow, the nodes
/// of its endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedService {
    /// `namespace/name`.
    pub name: String,
    pub cluster_ips: Vec<IpAddr>,
    pub load_balancer: Vec<IpAddr>,
    pub external: Vec<IpAddr>,
    /// The port followed, None to follow every port of the address.
    pub port: Option<u16>,
    /// Nodes with an endpoint of the Service (EndpointSlices' nodeName).
    pub endpoint_nodes: BTreeSet<String>,
}

impl ResolvedService {
    /// The `tracer follow` target for the chosen address.
    pub fn target(&self, kind: AddressKind) -> Result<String, TargetError> {
        let (list, what) = match kind {
            AddressKind::Cluster => (&self.cluster_ips, "ClusterIP"),
            AddressKind::Lb => (&self.load_balancer, "LoadBalancer"),
            AddressKind::External => (&self.external, "external IP"),
        };
        let Some(addr) = list.first() else {
            if self.cluster_ips.is_empty()
                && self.load_balancer.is_empty()
                && self.external.is_empty()
            {
                return Err(TargetError::Headless(self.name.clone()));
            }
            return Err(TargetError::NoAddress(
                self.name.clone(),
                what,
                self.addresses(),
            ));
        };
        Ok(match (addr, self.port) {
            (a, None) => a.to_string(),
            (IpAddr::V4(a), Some(p)) => format!("{a}:{p}"),
            (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        })
    }

    /// `ClusterIP 10.96.0.10, LoadBalancer 192.0.2.7` (for messages).
    pub fn addresses(&self) -> String {
        let mut v = Vec::new();
        for (what, list) in [
            ("ClusterIP", &self.cluster_ips),
            ("LoadBalancer", &self.load_balancer),
            ("external IP", &self.external),
        ] {
            v.extend(list.iter().map(|a| format!("{what} {a}")));
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }
}

/// Resolve a Service object (`kubectl get service -o json`) and its
/// EndpointSlices (`kubectl get endpointslices -l
/// kubernetes.io/service-name=NAME -o json`, a List) for `port` (a
/// number or a port's name; None: its only port, or every port when it
/// has several).
pub fn resolve(
    service: &Value,
    slices: &Value,
    port: Option<&str>,
) -> Result<ResolvedService, TargetError> {
    if service["kind"] != "Service" {
        return Err(TargetError::NotAnObject("Service", short(service)));
    }
    let name = format!(
        "{}/{}",
        service["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default"),
        service["metadata"]["name"].as_str().unwrap_or("?")
    );
    let spec = &service["spec"];
    let ips = |v: &Value| -> Vec<IpAddr> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str()?.parse().ok())
            .collect()
    };
    let mut cluster_ips = ips(&spec["clusterIPs"]);
    if cluster_ips.is_empty() {
        cluster_ips = spec["clusterIP"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .into_iter()
            .collect();
    }
    let load_balancer = status_ingress(service);
    let external = ips(&spec["externalIPs"]);
    let ports: Vec<(Option<&str>, u16)> = spec["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["name"].as_str(), u16::try_from(p["port"].as_u64()?).ok()?)))
        .collect();
    let port = match port {
        None if ports.len() == 1 => Some(ports[0].1),
        None => None,
        Some(want) => Some(
            ports
                .iter()
                .find(|(n, p)| *n == Some(want) || p.to_string() == want)
                .map(|(_, p)| *p)
                .ok_or_else(|| {
                    let list: Vec<String> = ports
                        .iter()
                        .map(|(n, p)| n.map_or(p.to_string(), |n| format!("{n}={p}")))
                        .collect();
                    TargetError::NoSuchPort(name.clone(), want.to_string(), list.join(", "))
                })?,
        ),
    };
    let endpoint_nodes = slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
        .filter_map(|e| e["nodeName"].as_str().map(str::to_string))
        .collect();
    Ok(ResolvedService {
        name,
        cluster_ips,
        load_balancer,
        external,
        port,
        endpoint_nodes,
    })
}

/// status.loadBalancer.ingress[].ip (hostname-only ingresses have no
/// address to follow).
fn status_ingress(service: &Value) -> Vec<IpAddr> {
    service["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["ip"].as_str()?.parse().ok())
        .collect()
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}...", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

/// `--nodes`: every node, a label selector, or names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeChoice {
    All,
    Selector(String),
    Names(Vec<String>),
}

impl NodeChoice {
    pub fn parse(s: &str) -> NodeChoice {
        if s == "all" {
            NodeChoice::All
        } else if s.contains('=') || s.contains('!') {
            NodeChoice::Selector(s.to_string())
        } else {
            NodeChoice::Names(
                s.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect(),
            )
        }
    }
}

/// The names of a NodeList (`kubectl get nodes -o json`).
pub fn node_names(list: &Value) -> Result<Vec<String>, TargetError> {
    if list["kind"] != "List" && list["kind"] != "NodeList" {
        return Err(TargetError::NotAnObject("NodeList", short(list)));
    }
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn svc() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "clusterIP": "10.96.4.20", "clusterIPs": ["10.96.4.20"],
                "externalIPs": ["198.51.100.9"],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                          {"name": "https", "port": 443, "protocol": "TCP"}],
                "type": "LoadBalancer"
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}, {"hostname": "lb.example"}]}}
        })
    }

    fn slices() -> Value {
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"kind": "EndpointSlice", "endpoints": [
                {"addresses": ["10.244.1.5"], "nodeName": "worker-1"},
                {"addresses": ["10.244.2.5"], "nodeName": "worker-2"}]},
            {"kind": "EndpointSlice", "endpoints": [
                {"addresses": ["10.244.1.6"], "nodeName": "worker-1"}]}
        ]})
    }

    #[test]
    fn targets_parse() {
        assert_eq!(
            TargetSpec::parse("svc/web:http"),
            Ok(TargetSpec::Service {
                name: "web".into(),
                port: Some("http".into())
            })
        );
        assert_eq!(
            TargetSpec::parse("service/kube-dns"),
            Ok(TargetSpec::Service {
                name: "kube-dns".into(),
                port: None
            })
        );
        assert_eq!(
            TargetSpec::parse("169.254.25.10:53"),
            Ok(TargetSpec::Address("169.254.25.10:53".into()))
        );
        for bad in [
            "svc/",
            "svc/Web",
            "svc/web:",
            "pod/web",
            "web",
            "10.0.0.1:99999",
        ] {
            assert!(TargetSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_service_resolves_to_its_addresses_port_and_endpoint_nodes() {
        let r = resolve(&svc(), &slices(), Some("http")).unwrap();
        assert_eq!(r.name, "shop/web");
        assert_eq!(r.target(AddressKind::Cluster).unwrap(), "10.96.4.20:80");
        assert_eq!(r.target(AddressKind::Lb).unwrap(), "192.0.2.7:80");
        assert_eq!(r.target(AddressKind::External).unwrap(), "198.51.100.9:80");
        assert_eq!(
            r.endpoint_nodes.iter().collect::<Vec<_>>(),
            ["worker-1", "worker-2"]
        );
        assert_eq!(
            resolve(&svc(), &slices(), Some("443")).unwrap().port,
            Some(443)
        );
        // Two ports and none asked for: every port of the address.
        assert_eq!(
            resolve(&svc(), &slices(), None)
                .unwrap()
                .target(AddressKind::Cluster)
                .unwrap(),
            "10.96.4.20"
        );
        assert_eq!(
            resolve(&svc(), &slices(), Some("dns")),
            Err(TargetError::NoSuchPort(
                "shop/web".into(),
                "dns".into(),
                "http=80, https=443".into()
            ))
        );
    }

    #[test]
    fn missing_addresses_are_said() {
        let mut s = svc();
        s["status"] = json!({});
        let r = resolve(&s, &json!({"items": []}), Some("http")).unwrap();
        assert!(r.endpoint_nodes.is_empty());
        assert!(matches!(
            r.target(AddressKind::Lb),
            Err(TargetError::NoAddress(_, "LoadBalancer", _))
        ));
        s["spec"]["clusterIP"] = json!("None");
        s["spec"]["clusterIPs"] = json!(["None"]);
        s["spec"]["externalIPs"] = json!([]);
        let r = resolve(&s, &json!({"items": []}), Some("http")).unwrap();
        assert_eq!(
            r.target(AddressKind::Cluster),
            Err(TargetError::Headless("shop/web".into()))
        );
        assert!(resolve(&json!({"kind": "Pod"}), &slices(), None).is_err());
    }

    #[test]
    fn node_choices() {
        assert_eq!(NodeChoice::parse("all"), NodeChoice::All);
        assert_eq!(
            NodeChoice::parse("node-role.kubernetes.io/worker="),
            NodeChoice::Selector("node-role.kubernetes.io/worker=".into())
        );
        assert_eq!(
            NodeChoice::parse("a, b"),
            NodeChoice::Names(vec!["a".into(), "b".into()])
        );
        let list = json!({"kind": "List", "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]});
        assert_eq!(node_names(&list).unwrap(), ["a", "b"]);
        assert!(node_names(&json!({"kind": "Status"})).is_err());
    }
}
