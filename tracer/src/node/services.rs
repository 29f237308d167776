//! The Services kube-proxy serves in a namespace, read from its own
//! rules (no API access): which Service an address and port are.
//!
//! - nftables mode (pkg/proxy/nftables/proxier.go): the verdict maps of
//!   table `kube-proxy` are keyed `address . protocol . port`
//!   (`service-ips`, `no-endpoint-services`, `firewall-ips`) or
//!   `protocol . port` (`service-nodeports`, `no-endpoint-nodeports`);
//!   an element names its Service by its comment (`ns/svc:port`) or by
//!   the chain it goes to (`service-HASH-ns/svc/proto/port`,
//!   `external-HASH-...`). The set `cluster-ips` holds the ClusterIPs.
//! - iptables mode (pkg/proxy/iptables/proxier.go), read as iptables-nft
//!   leaves it in nf_tables: the rules of `nat KUBE-SERVICES` are
//!   commented `ns/svc:port cluster IP` (`loadbalancer IP`, `external
//!   IP`) and match `-d IP/32 -p PROTO --dport N`; `nat KUBE-NODEPORTS`
//!   commented `ns/svc:port` match the node port; `filter
//!   KUBE-SERVICES`/`KUBE-EXTERNAL-SERVICES` reject or drop a Service
//!   without (local) endpoints, commented `ns/svc:port has no ...`.
//!
//! IPVS mode's virtual services carry no names (its iptables rules match
//! ipsets, uncommented per Service): a virtual service is named only when
//! one of the above names its address and port.

use std::{
    collections::HashSet,
    net::{IpAddr, SocketAddr},
    path::Path,
};

use serde::{Deserialize, Serialize};

use super::nftables::{self, NFPROTO_IPV4, NFPROTO_IPV6, NftRule, SetElem};

/// How a Service is reached at that address (its `spec.type` part).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::IntoStaticStr,
)]
pub enum ServiceKind {
    ClusterIP,
    NodePort,
    LoadBalancer,
    ExternalIP,
    /// A LoadBalancer or external IP: kube-proxy's nftables table and its
    /// no-local-endpoints rules do not say which.
    #[serde(rename = "LoadBalancer or ExternalIP")]
    #[strum(serialize = "LoadBalancer or ExternalIP")]
    External,
}

/// Where the name was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ServiceSource {
    /// An element of a map (or set) of kube-proxy's nftables table.
    NftablesMap { family: String, map: String },
    /// A kube-proxy rule (iptables mode, in nf_tables through
    /// iptables-nft).
    IptablesRule {
        family: String,
        table: String,
        chain: String,
        handle: u64,
    },
}

/// One address and port kube-proxy serves a Service on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAddr {
    /// 6, 17 or 132.
    pub proto: u8,
    /// None for a NodePort (every address of the node).
    pub addr: Option<IpAddr>,
    pub port: u16,
    /// `namespace/name:port` (the port's name, or its number when it has
    /// none), as kube-proxy names it.
    pub service: String,
    pub kind: ServiceKind,
    pub source: ServiceSource,
    /// The endpoints kube-proxy's rules send it to now (`IP:PORT`), read
    /// from its nftables mode's endpoint chains; empty for a Service
    /// without endpoints; None where not read (iptables mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<String>>,
}

impl ServiceAddr {
    /// Whether a packet to `dst:dport` is for it; `local` says whether
    /// `dst` is an address of the namespace (a NodePort's).
    pub fn serves(&self, proto: u8, dst: IpAddr, dport: u16, local: bool) -> bool {
        self.proto == proto
            && self.port == dport
            && self.addr.map_or(local, |a| a == dst.to_canonical())
    }
}

/// The Service that serves `dst:dport`: an entry for the address first,
/// then a NodePort when `local(dst)`.
pub fn find(
    table: &[ServiceAddr],
    proto: u8,
    dst: IpAddr,
    dport: u16,
    local: bool,
) -> Option<&ServiceAddr> {
    table
        .iter()
        .find(|s| s.addr.is_some() && s.serves(proto, dst, dport, false))
        .or_else(|| table.iter().find(|s| s.serves(proto, dst, dport, local)))
}

/// The Services of the namespace at `netns_path` (empty when it cannot
/// be entered or kube-proxy has no rules there).
pub fn services_in(netns_path: &Path) -> Vec<ServiceAddr> {
    let Ok(_in) = crate::node::netns::NetnsGuard::enter(netns_path) else {
        return Vec::new();
    };
    let mut out = nftables_mode(None);
    for family in [NFPROTO_IPV4, NFPROTO_IPV6] {
        for (table, chain) in IPTABLES_CHAINS {
            if let Some(rules) = nftables::chain_rules(family, table, chain) {
                out.extend(rules.iter().filter_map(from_iptables_rule));
            }
        }
    }
    dedup(out)
}

/// The Services of kube-proxy's nftables mode in this thread's
/// namespace, with their endpoints from the names of its chains: those
/// `listed` (the namespace's, dumped already), or listed now, once, where
/// one of its maps has elements (a node in iptables mode lists none).
fn nftables_mode(listed: Option<&[(u8, String, String)]>) -> Vec<ServiceAddr> {
    let mut out = Vec::new();
    let mut read: Option<nftables::Chains> = None;
    for family in [NFPROTO_IPV4, NFPROTO_IPV6] {
        if listed.is_some_and(|c| nftables::names_of(c, family, "kube-proxy").is_empty()) {
            continue;
        }
        let mut nft = from_nftables(family, &|set| {
            nftables::set_elements(family, "kube-proxy", set)
        });
        if nft.is_empty() {
            continue;
        }
        let chains = match listed {
            Some(c) => c,
            None => read
                .get_or_insert_with(|| nftables::chains().unwrap_or_default())
                .as_slice(),
        };
        add_endpoints(&mut nft, &nftables::names_of(chains, family, "kube-proxy"));
        out.extend(nft);
    }
    out
}

/// A Service's endpoints, each with its protocol (6, 17, 132).
pub type Endpoints = Vec<(SocketAddr, u8)>;

/// Whether a rule message is one of KUBE-SERVICES that holds `addr`'s
/// bytes (a match on it): the rules worth rendering to find a Service by
/// address. The chain is looked at first, so that a node's tens of
/// thousands of other rules cost a compare each.
pub fn names_addr(addr: IpAddr) -> impl Fn(&[u8]) -> bool {
    let bytes = match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    move |m: &[u8]| {
        m.get(crate::node::netlink::NLMSG_HDRLEN + 4..)
            .and_then(|a| crate::node::netlink::attr(a, 2)) // NFTA_RULE_CHAIN
            .is_some_and(|c| c == b"KUBE-SERVICES\0")
            && m.windows(bytes.len()).any(|w| w == bytes.as_slice())
    }
}

/// The endpoints kube-proxy's rules in this thread's namespace send
/// `addr` (to `port` over `proto`, where given) to now: its nftables
/// mode's endpoint chains, or its iptables mode's KUBE-SERVICES rule for
/// the address (among `rules`, which hold at least the rules that name
/// it: [`names_addr`]; `chains` are the namespace's), the KUBE-SVC-*/KUBE-SVL-* chain it jumps to and
/// the DNAT of each KUBE-SEP-* chain that one jumps to (pkg/proxy/
/// iptables/proxier.go), with the Service's protocol.
pub fn endpoints_from(
    (rules, chains): (&[NftRule], &[(u8, String, String)]),
    addr: IpAddr,
    port: Option<u16>,
    proto: Option<u8>,
) -> Endpoints {
    let wanted = |p: u8, a: Option<IpAddr>, n: u16| {
        a == Some(addr) && port.is_none_or(|q| q == n) && proto.is_none_or(|q| q == p)
    };
    let mut out: Endpoints = nftables_mode(Some(chains))
        .iter()
        .filter(|s| wanted(s.proto, s.addr, s.port))
        .flat_map(|s| {
            s.endpoints
                .iter()
                .flatten()
                .filter_map(move |e| Some((e.parse().ok()?, s.proto)))
        })
        .collect();
    let jumps = |r: &NftRule, prefixes: &[&str]| -> Option<String> {
        let to = r.verdict.as_deref()?.strip_prefix("jump ")?;
        prefixes
            .iter()
            .any(|p| to.starts_with(p))
            .then(|| to.to_string())
    };
    for (family, svc, l4) in rules.iter().filter_map(|r| {
        let l4 = r.dst.l4?;
        (r.table == "nat" && r.chain == "KUBE-SERVICES" && wanted(l4, r.dst.addr, r.dst.port?))
            .then_some(())?;
        let family = if r.family == "ip6" {
            NFPROTO_IPV6
        } else {
            NFPROTO_IPV4
        };
        Some((family, jumps(r, &["KUBE-SVC-", "KUBE-SVL-"])?, l4))
    }) {
        let chain = |c: &str| nftables::chain_rules(family, "nat", c).unwrap_or_default();
        for sep in chain(&svc).iter().filter_map(|r| jumps(r, &["KUBE-SEP-"])) {
            out.extend(
                chain(&sep)
                    .iter()
                    .filter_map(|r| Some((dnat_to(&r.text)?, l4))),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The destination of a rule's `dnat to A:P` (`[A]:P` for IPv6).
fn dnat_to(text: &str) -> Option<SocketAddr> {
    let rest = text.split_once("dnat ")?.1;
    let rest = rest
        .strip_prefix("ip ")
        .or_else(|| rest.strip_prefix("ip6 "))
        .unwrap_or(rest);
    rest.strip_prefix("to ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The chains of kube-proxy's iptables mode whose rules name Services.
const IPTABLES_CHAINS: [(&str, &str); 4] = [
    ("nat", "KUBE-SERVICES"),
    ("nat", "KUBE-NODEPORTS"),
    ("filter", "KUBE-SERVICES"),
    ("filter", "KUBE-EXTERNAL-SERVICES"),
];

/// One entry per (proto, address, port): the first read (nftables maps,
/// then rules in chain order).
fn dedup(v: Vec<ServiceAddr>) -> Vec<ServiceAddr> {
    let mut seen = HashSet::new();
    v.into_iter()
        .filter(|s| seen.insert((s.proto, s.addr, s.port)))
        .collect()
}

/// The maps of kube-proxy's nftables table (family `family`), elements
/// read by `elements(set)`.
fn from_nftables(family: u8, elements: &dyn Fn(&str) -> Option<Vec<SetElem>>) -> Vec<ServiceAddr> {
    let alen = if family == NFPROTO_IPV6 { 16 } else { 4 };
    let cluster: HashSet<IpAddr> = elements("cluster-ips")
        .unwrap_or_default()
        .iter()
        .filter_map(|e| addr(&e.key, alen))
        .collect();
    let source = |map: &str| ServiceSource::NftablesMap {
        family: nftables::family_name(family),
        map: map.to_string(),
    };
    let mut out = Vec::new();
    for map in ["service-ips", "no-endpoint-services", "firewall-ips"] {
        for e in elements(map).unwrap_or_default() {
            // ipv4_addr . inet_proto . inet_service: each part in 32-bit
            // registers (the port big-endian, then padding).
            let (Some(a), Some(&proto), Some(port)) = (
                addr(&e.key, alen),
                e.key.get(alen),
                e.key.get(alen + 4..alen + 6),
            ) else {
                continue;
            };
            let Some(service) = element_service(&e) else {
                continue;
            };
            let kind = if map == "firewall-ips" {
                ServiceKind::LoadBalancer
            } else if cluster.contains(&a) {
                ServiceKind::ClusterIP
            } else {
                ServiceKind::External
            };
            out.push(ServiceAddr {
                proto,
                addr: Some(a),
                port: u16::from_be_bytes([port[0], port[1]]),
                service,
                kind,
                source: source(map),
                endpoints: None,
            });
        }
    }
    for map in ["service-nodeports", "no-endpoint-nodeports"] {
        for e in elements(map).unwrap_or_default() {
            let (Some(&proto), Some(port)) = (e.key.first(), e.key.get(4..6)) else {
                continue;
            };
            let Some(service) = element_service(&e) else {
                continue;
            };
            out.push(ServiceAddr {
                proto,
                addr: None,
                port: u16::from_be_bytes([port[0], port[1]]),
                service,
                kind: ServiceKind::NodePort,
                source: source(map),
                endpoints: None,
            });
        }
    }
    out
}

/// Each Service port's endpoints, from the names of kube-proxy's endpoint
/// chains (`endpoint-HASH-ns/svc/proto/port__IP/PORT`,
/// pkg/proxy/nftables/proxier.go servicePortEndpointChainName()).
fn add_endpoints(services: &mut [ServiceAddr], chains: &[String]) {
    let mut by_service: std::collections::HashMap<(String, u8), Vec<String>> =
        std::collections::HashMap::new();
    for c in chains {
        let Some((tail, ep)) = endpoint_of_chain(c) else {
            continue;
        };
        let proto = match tail.rsplit('/').nth(1) {
            Some("tcp") => 6,
            Some("udp") => 17,
            Some("sctp") => 132,
            _ => continue,
        };
        let Some(service) = service_of_tail(tail) else {
            continue;
        };
        by_service.entry((service, proto)).or_default().push(ep);
    }
    for s in services.iter_mut() {
        let mut eps = by_service
            .get(&(s.service.clone(), s.proto))
            .cloned()
            .unwrap_or_default();
        eps.sort();
        s.endpoints = Some(eps);
    }
}

fn addr(key: &[u8], len: usize) -> Option<IpAddr> {
    match len {
        4 => <[u8; 4]>::try_from(key.get(..4)?).ok().map(IpAddr::from),
        _ => <[u8; 16]>::try_from(key.get(..16)?).ok().map(IpAddr::from),
    }
}

/// An element's Service: its comment, or the chain it goes to.
fn element_service(e: &SetElem) -> Option<String> {
    if let Some(c) = e.comment.as_deref().filter(|c| is_service_port(c)) {
        return Some(c.to_string());
    }
    let chain = e.verdict.as_deref()?;
    let chain = chain
        .strip_prefix("goto ")
        .or_else(|| chain.strip_prefix("jump "))?;
    service_of_chain(chain).or_else(|| service_of_firewall_chain(chain))
}

/// `firewall-HASH-ns/svc/proto/port` (the chain of a Service's
/// loadBalancerSourceRanges) -> `ns/svc:port`.
pub fn service_of_firewall_chain(chain: &str) -> Option<String> {
    service_of_tail(chain.strip_prefix("firewall-")?.split_once('-')?.1)
}

/// `service-HASH-ns/svc/proto/port` or `external-HASH-...` (kube-proxy's
/// nftables chains a Service port's traffic goes to) -> `ns/svc:port`.
pub fn service_of_chain(chain: &str) -> Option<String> {
    let tail = ["service-", "external-"]
        .iter()
        .find_map(|p| chain.strip_prefix(p))?
        .split_once('-')?
        .1;
    service_of_tail(tail)
}

/// `endpoint-HASH-ns/svc/proto/port__IP/PORT` (kube-proxy's nftables
/// chain of one endpoint) -> (`ns/svc/proto/port`, `IP:PORT`, or
/// `[IP]:PORT` for IPv6).
pub fn endpoint_of_chain(chain: &str) -> Option<(&str, String)> {
    let (_, rest) = chain.strip_prefix("endpoint-")?.split_once('-')?;
    let (tail, ep) = rest.split_once("__")?;
    let (ip, port) = ep.rsplit_once('/')?;
    Some((
        tail,
        if ip.contains(':') {
            format!("[{ip}]:{port}")
        } else {
            format!("{ip}:{port}")
        },
    ))
}

/// `ns/svc/proto/port` -> `ns/svc:port`.
fn service_of_tail(tail: &str) -> Option<String> {
    let mut parts = tail.rsplitn(3, '/');
    let (port, _proto, name) = (parts.next()?, parts.next()?, parts.next()?);
    name.contains('/').then(|| format!("{name}:{port}"))
}

/// `ns/svc:port` (kube-proxy's ServicePortName): one word, a namespace,
/// a name and a port.
fn is_service_port(s: &str) -> bool {
    !s.contains(char::is_whitespace)
        && s.split_once('/')
            .is_some_and(|(ns, rest)| !ns.is_empty() && rest.contains(':'))
}

/// A rule of kube-proxy's iptables mode that names the Service of the
/// destination it matches.
fn from_iptables_rule(r: &NftRule) -> Option<ServiceAddr> {
    let comment = r.comment.as_deref()?.trim_matches('"');
    let (service, rest) = comment.split_once(' ').unwrap_or((comment, ""));
    if !is_service_port(service) {
        return None;
    }
    let kind = match (r.chain.as_str(), rest) {
        (_, "cluster IP") | ("KUBE-SERVICES", "has no endpoints") => ServiceKind::ClusterIP,
        (_, "loadbalancer IP") => ServiceKind::LoadBalancer,
        (_, "external IP") => ServiceKind::ExternalIP,
        ("KUBE-NODEPORTS", _) => ServiceKind::NodePort,
        ("KUBE-EXTERNAL-SERVICES", _) if r.dst.addr.is_none() => ServiceKind::NodePort,
        ("KUBE-EXTERNAL-SERVICES", _) => ServiceKind::External,
        _ => return None,
    };
    let addr = if kind == ServiceKind::NodePort {
        None
    } else {
        Some(r.dst.addr?)
    };
    Some(ServiceAddr {
        proto: r.dst.l4?,
        addr,
        port: r.dst.port?,
        service: service.to_string(),
        kind,
        source: ServiceSource::IptablesRule {
            family: r.family.clone(),
            table: r.table.clone(),
            chain: r.chain.clone(),
            handle: r.handle,
        },
        endpoints: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::nftables::Dst;

    fn elem(key: Vec<u8>, verdict: Option<&str>, comment: Option<&str>) -> SetElem {
        SetElem {
            key,
            verdict: verdict.map(str::to_string),
            comment: comment.map(str::to_string),
        }
    }

    /// `a.b.c.d . proto . port` as the kernel keeps it.
    fn key(a: [u8; 4], proto: u8, port: u16) -> Vec<u8> {
        let mut k = a.to_vec();
        k.extend([proto, 0, 0, 0]);
        k.extend(port.to_be_bytes());
        k.extend([0, 0]);
        k
    }

    #[test]
    fn nftables_maps_name_services_by_comment_or_chain() {
        let elements = |set: &str| -> Option<Vec<SetElem>> {
            Some(match set {
                "cluster-ips" => vec![elem(vec![10, 96, 0, 10], None, None)],
                "service-ips" => vec![
                    elem(
                        key([10, 96, 0, 10], 17, 53),
                        Some("goto service-NWBZK7IH-kube-system/kube-dns/udp/dns"),
                        None,
                    ),
                    elem(
                        key([192, 0, 2, 7], 6, 443),
                        Some("goto external-42NFTM6N-shop/front/tcp/https"),
                        None,
                    ),
                ],
                "no-endpoint-services" => vec![elem(
                    key([10, 96, 0, 3], 6, 80),
                    Some("goto reject-chain"),
                    Some("default/empty:http"),
                )],
                "service-nodeports" => vec![elem(
                    vec![6, 0, 0, 0, 0x75, 0x30, 0, 0],
                    Some("goto external-ABCDEFGH-shop/front/tcp/https"),
                    None,
                )],
                _ => return None,
            })
        };
        let t = from_nftables(NFPROTO_IPV4, &elements);
        let dns = find(&t, 17, "10.96.0.10".parse().unwrap(), 53, false).unwrap();
        assert_eq!(dns.service, "kube-system/kube-dns:dns");
        assert_eq!(dns.kind, ServiceKind::ClusterIP);
        let front = find(&t, 6, "192.0.2.7".parse().unwrap(), 443, false).unwrap();
        assert_eq!(
            (front.service.as_str(), front.kind),
            ("shop/front:https", ServiceKind::External)
        );
        let empty = find(&t, 6, "10.96.0.3".parse().unwrap(), 80, false).unwrap();
        assert_eq!(empty.service, "default/empty:http");
        // The node port only on the node's own addresses.
        let np: IpAddr = "10.0.0.5".parse().unwrap();
        assert!(find(&t, 6, np, 30000, false).is_none());
        let nodeport = find(&t, 6, np, 30000, true).unwrap();
        assert_eq!(
            (nodeport.service.as_str(), nodeport.kind),
            ("shop/front:https", ServiceKind::NodePort)
        );
        assert!(find(&t, 17, "10.96.0.10".parse().unwrap(), 54, false).is_none());
    }

    fn rule(chain: &str, comment: &str, dst: Dst) -> NftRule {
        NftRule {
            family: "ip".into(),
            table: "nat".into(),
            chain: chain.into(),
            handle: 7,
            packets: None,
            verdict: Some("jump KUBE-SVC-X".into()),
            comment: Some(comment.into()),
            text: String::new(),
            dst,
        }
    }

    /// kube-proxy's endpoint chains give each Service port its endpoints
    /// (by its name and protocol); a Service with none gets an empty list,
    /// other chains are ignored.
    #[test]
    fn endpoint_chains_give_each_service_its_endpoints() {
        let svc = |service: &str, proto| ServiceAddr {
            proto,
            addr: Some("10.96.0.10".parse().unwrap()),
            port: 53,
            service: service.into(),
            kind: ServiceKind::ClusterIP,
            source: ServiceSource::NftablesMap {
                family: "ip".into(),
                map: "service-ips".into(),
            },
            endpoints: None,
        };
        let mut v = vec![
            svc("kube-system/kube-dns:dns", 17),
            svc("kube-system/kube-dns:dns-tcp", 6),
            svc("default/empty:http", 6),
        ];
        let chains: Vec<String> = [
            "endpoint-ZGD4UX6L-kube-system/kube-dns/udp/dns__10.0.1.9/53",
            "endpoint-ABCDEF12-kube-system/kube-dns/udp/dns__10.0.1.8/53",
            "endpoint-Q7XJUEYT-kube-system/kube-dns/tcp/dns-tcp__fd00::9/53",
            "service-ERIFXISQ-kube-system/kube-dns/udp/dns",
            "services",
        ]
        .map(String::from)
        .to_vec();
        add_endpoints(&mut v, &chains);
        assert_eq!(
            v[0].endpoints.as_deref(),
            Some(&["10.0.1.8:53".to_string(), "10.0.1.9:53".to_string()][..])
        );
        assert_eq!(
            v[1].endpoints.as_deref(),
            Some(&["[fd00::9]:53".to_string()][..])
        );
        assert_eq!(v[2].endpoints.as_deref(), Some(&[][..]));
    }

    #[test]
    fn iptables_rules_name_services_by_their_comments() {
        let d = |a: Option<&str>, port: u16| Dst {
            addr: a.map(|a| a.parse().unwrap()),
            l4: Some(6),
            port: Some(port),
        };
        let cluster = from_iptables_rule(&rule(
            "KUBE-SERVICES",
            "default/kubernetes:https cluster IP",
            d(Some("10.96.0.1"), 443),
        ))
        .unwrap();
        assert_eq!(cluster.service, "default/kubernetes:https");
        assert_eq!(cluster.kind, ServiceKind::ClusterIP);
        let lb = from_iptables_rule(&rule(
            "KUBE-SERVICES",
            "shop/front:https loadbalancer IP",
            d(Some("192.0.2.7"), 443),
        ))
        .unwrap();
        assert_eq!(lb.kind, ServiceKind::LoadBalancer);
        let np = from_iptables_rule(&rule("KUBE-NODEPORTS", "shop/front:https", d(None, 30443)))
            .unwrap();
        assert_eq!((np.kind, np.addr), (ServiceKind::NodePort, None));
        let local = from_iptables_rule(&rule(
            "KUBE-EXTERNAL-SERVICES",
            "default/nginx:http has no local endpoints",
            d(Some("10.16.222.1"), 80),
        ))
        .unwrap();
        assert_eq!(local.kind, ServiceKind::External);
        // Other comments, or a rule that does not match one destination.
        assert!(
            from_iptables_rule(&rule(
                "KUBE-SERVICES",
                "kubernetes service nodeports; NOTE: this must be the last rule in this chain",
                d(None, 0)
            ))
            .is_none()
        );
        assert!(
            from_iptables_rule(&rule(
                "KUBE-SERVICES",
                "default/kubernetes:https cluster IP",
                d(None, 443)
            ))
            .is_none()
        );
    }

    #[test]
    fn chain_names_give_the_service_port() {
        assert_eq!(
            service_of_chain("external-4BQ3ZKGA-default/lb/tcp/http").as_deref(),
            Some("default/lb:http")
        );
        assert_eq!(
            service_of_chain("firewall-4BQ3ZKGA-default/lb/tcp/http"),
            None
        );
        assert_eq!(service_of_chain("reject-chain"), None);
        assert_eq!(service_of_chain("services"), None);
    }

    /// `args` run in namespace `ns` with `text` on their stdin.
    fn feed_in(ns: &str, args: &[&str], text: &str) {
        use std::{io::Write, process::Command, process::Stdio};
        let mut c = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        assert!(c.wait().unwrap().success(), "{args:?} failed on:\n{text}");
    }

    /// Read from a namespace's real rules: kube-proxy's nftables table
    /// (IPv4 and IPv6 maps, a NodePort) and its iptables mode's chains
    /// through iptables-nft.
    #[test]
    fn services_of_a_namespace_from_its_rules() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED services_of_a_namespace_from_its_rules: not root");
            return;
        }
        let ns = crate::node::netns::TestNetns::add("tracer-services");
        let feed = |args: &[&str], text: &str| feed_in(&ns.0, args, text);
        feed(
            &["nft", "-f", "-"],
            r"table ip kube-proxy {
  set cluster-ips { type ipv4_addr; elements = { 10.96.0.10 } }
  map service-ips {
    type ipv4_addr . inet_proto . inet_service : verdict
    elements = { 10.96.0.10 . udp . 53 : goto service-NWBZK7IH-kube-system/kube-dns/udp/dns,
                 192.0.2.7 . tcp . 443 : goto external-42NFTM6N-shop/front/tcp/https }
  }
  map service-nodeports {
    type inet_proto . inet_service : verdict
    elements = { tcp . 30443 : goto external-42NFTM6N-shop/front/tcp/https }
  }
  chain service-NWBZK7IH-kube-system/kube-dns/udp/dns { }
  chain external-42NFTM6N-shop/front/tcp/https { }
}
table ip6 kube-proxy {
  set cluster-ips { type ipv6_addr; elements = { fd00:96::10 } }
  map service-ips {
    type ipv6_addr . inet_proto . inet_service : verdict
    elements = { fd00:96::10 . tcp . 53 : goto service-AAAAAAAA-kube-system/kube-dns/tcp/dns-tcp }
  }
  chain service-AAAAAAAA-kube-system/kube-dns/tcp/dns-tcp { }
}
",
        );
        feed(
            &["iptables-restore", "-w", "--noflush"],
            r#"*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
-A KUBE-SERVICES -d 10.43.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A KUBE-NODEPORTS -p udp -m comment --comment "shop/syslog:udp" -m udp --dport 30514 -j KUBE-SVC-NPX46M4PTMTKRN6Y
COMMIT
*filter
:KUBE-EXTERNAL-SERVICES - [0:0]
-A KUBE-EXTERNAL-SERVICES -d 10.16.222.1/32 -p tcp -m comment --comment "default/nginx:http has no local endpoints" -m tcp --dport 80 -j DROP
COMMIT
"#,
        );
        let t = services_in(Path::new(&format!("/run/netns/{}", ns.0)));
        let at = |proto: u8, addr: &str, port: u16, local: bool| {
            find(&t, proto, addr.parse().unwrap(), port, local)
                .map(|s| (s.service.as_str(), s.kind))
        };
        assert_eq!(
            at(17, "10.96.0.10", 53, false),
            Some(("kube-system/kube-dns:dns", ServiceKind::ClusterIP)),
            "{t:#?}"
        );
        assert_eq!(
            at(6, "192.0.2.7", 443, false),
            Some(("shop/front:https", ServiceKind::External))
        );
        assert_eq!(
            at(6, "10.0.0.5", 30443, true),
            Some(("shop/front:https", ServiceKind::NodePort))
        );
        assert_eq!(
            at(6, "fd00:96::10", 53, false),
            Some(("kube-system/kube-dns:dns-tcp", ServiceKind::ClusterIP))
        );
        assert_eq!(
            at(6, "10.43.0.1", 443, false),
            Some(("default/kubernetes:https", ServiceKind::ClusterIP))
        );
        assert_eq!(
            at(17, "10.0.0.5", 30514, true),
            Some(("shop/syslog:udp", ServiceKind::NodePort))
        );
        assert_eq!(
            at(6, "10.16.222.1", 80, false),
            Some(("default/nginx:http", ServiceKind::External))
        );
        assert_eq!(at(6, "10.43.0.1", 80, false), None);
        assert_eq!(t.len(), 7, "{t:#?}");
    }

    #[test]
    fn dnat_destinations_are_read_from_the_rule() {
        assert_eq!(
            dnat_to("meta l4proto tcp dnat to 10.244.0.2:8080"),
            Some("10.244.0.2:8080".parse().unwrap())
        );
        assert_eq!(
            dnat_to("meta l4proto tcp dnat ip6 to [fd00::2]:53"),
            Some("[fd00::2]:53".parse().unwrap())
        );
        assert_eq!(dnat_to("ip saddr 10.244.0.2 jump KUBE-MARK-MASQ"), None);
        assert_eq!(dnat_to("dnat to 10.244.0.2"), None);
    }

    /// [`endpoints_from`] of the KUBE-SERVICES rules that name `addr` in
    /// this thread's namespace.
    fn endpoints_here(addr: IpAddr, port: Option<u16>, proto: Option<u8>) -> Endpoints {
        let family = if addr.is_ipv4() {
            NFPROTO_IPV4
        } else {
            NFPROTO_IPV6
        };
        let rules = nftables::chain_rules_where(family, "nat", "KUBE-SERVICES", &names_addr(addr))
            .unwrap_or_default();
        let chains = nftables::chains().unwrap_or_default();
        endpoints_from((&rules, &chains), addr, port, proto)
    }

    /// A Service's endpoints from its rules: iptables mode's KUBE-SVC and
    /// KUBE-SEP chains (two endpoints; another Service's left out), and
    /// nftables mode's endpoint chains.
    #[test]
    fn endpoints_of_a_service_from_its_rules() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED endpoints_of_a_service_from_its_rules: not root");
            return;
        }
        let ns = crate::node::netns::TestNetns::add("tracer-endpoints");
        let feed = |args: &[&str], text: &str| feed_in(&ns.0, args, text);
        feed(
            &["iptables-restore", "-w", "--noflush"],
            r#"*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SVC-B - [0:0]
:KUBE-SEP-A1 - [0:0]
:KUBE-SEP-A2 - [0:0]
:KUBE-SEP-B1 - [0:0]
-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment "ns/a:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-A
-A KUBE-SERVICES -d 10.96.0.21/32 -p tcp -m comment --comment "ns/b:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-B
-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SEP-A1
-A KUBE-SVC-A -j KUBE-SEP-A2
-A KUBE-SVC-B -j KUBE-SEP-B1
-A KUBE-SEP-A1 -s 10.244.1.2/32 -j MARK --set-xmark 0x4000/0x4000
-A KUBE-SEP-A1 -p tcp -m tcp -j DNAT --to-destination 10.244.1.2:8080
-A KUBE-SEP-A2 -p tcp -m tcp -j DNAT --to-destination 10.244.2.2:8080
-A KUBE-SEP-B1 -p tcp -m tcp -j DNAT --to-destination 10.244.3.2:8080
COMMIT
"#,
        );
        feed(
            &["nft", "-f", "-"],
            r"table ip kube-proxy {
  map service-ips {
    type ipv4_addr . inet_proto . inet_service : verdict
    elements = { 10.96.0.10 . udp . 53 : goto service-NWBZK7IH-kube-system/kube-dns/udp/dns }
  }
  chain endpoint-AAAAAAAA-kube-system/kube-dns/udp/dns__10.244.5.3/53 { }
  chain service-NWBZK7IH-kube-system/kube-dns/udp/dns {
    numgen random mod 1 vmap { 0 : goto endpoint-AAAAAAAA-kube-system/kube-dns/udp/dns__10.244.5.3/53 }
  }
}
",
        );
        let _in = crate::node::netns::NetnsGuard::enter(Path::new(&format!("/run/netns/{}", ns.0)))
            .unwrap();
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            endpoints_here("10.96.0.20".parse().unwrap(), Some(80), Some(6)),
            [(sa("10.244.1.2:8080"), 6), (sa("10.244.2.2:8080"), 6)]
        );
        assert_eq!(
            endpoints_here("10.96.0.20".parse().unwrap(), None, None).len(),
            2
        );
        assert!(endpoints_here("10.96.0.20".parse().unwrap(), Some(81), Some(6)).is_empty());
        assert_eq!(
            endpoints_here("10.96.0.10".parse().unwrap(), Some(53), Some(17)),
            [(sa("10.244.5.3:53"), 17)]
        );
    }
}
