//! Text and JSON renderings of one flow and its verdict.

use std::io::Write;

use serde::Serialize;

use crate::{
    model::dns::{self, DnsLog, Query},
    model::event::{Tuple, proto_name},
    model::flow::{Flow, NatBy},
    model::hop::{Dir, HopData, hook_name},
    model::names::PodNames,
    node::services::ServiceSource,
    output::{NodeStamp, WallClock},
    verdict::{Kind, QueryVerdict, Verdict, service::FlowService},
};

/// A flow record as written: serialized straight to text. Going through a
/// `serde_json::Value` (a BTreeMap per object, a String per key) made
/// printing 20 000 settled flows take the loop away from the ring buffer
/// long enough to lose events.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct FlowOut<'a> {
    #[serde(rename = "type")]
    type_: &'static str,
    id: u64,
    #[serde(rename = "final")]
    final_: bool,
    /// The node that traced it (`follow --node`, default the hostname).
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    /// That node's clock: what dates `hops[].unix_ns`, and how sure.
    #[serde(skip_serializing_if = "Option::is_none")]
    clock: Option<WallClock>,
    proto: String,
    original: &'a Tuple,
    translated: Option<&'a Tuple>,
    nat_at: Option<usize>,
    nat_by: Option<&'static str>,
    /// The Service the flow is for, where kube-proxy's rules (nftables
    /// maps, iptables rule comments) in a namespace on its path name its
    /// destination.
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<&'a FlowService>,
    verdict: &'a Verdict,
    packets: u32,
    replies: u32,
    counted_in_kernel: u32,
    /// DNS read from the flow's packets (flows to port 53).
    #[serde(skip_serializing_if = "Option::is_none")]
    dns: Option<DnsOut<'a>>,
    hops: Vec<HopOut<'a>>,
}

/// A flow's DNS: its queries with what came back.
#[derive(Serialize, schemars::JsonSchema)]
struct DnsOut<'a> {
    queries: Vec<QueryOut<'a>>,
    /// Queries past the ones kept.
    more: u32,
}

#[derive(Serialize, schemars::JsonSchema)]
struct QueryOut<'a> {
    id: u16,
    /// The question's name, type and class (null when only a reply whose
    /// question could not be read was seen).
    name: Option<String>,
    qtype: Option<String>,
    qclass: Option<u16>,
    /// Times the query was seen sent (0: only its reply was seen).
    sent: u32,
    /// The reply's RCODE name (`NOERROR`, `NXDOMAIN`, ...); null: no reply.
    rcode: Option<String>,
    /// The reply had the TC bit (retry over TCP).
    truncated: bool,
    answer_count: u16,
    answers: Vec<AnswerOut>,
    /// From the first sending to the reply.
    latency_ms: Option<f64>,
    /// The reply was cut by the snap length (its header alone was read).
    partial: bool,
    /// The client (the flow's source) and the server it asked.
    client: String,
    server: String,
    /// The query judged as its own flow, on the packets that carried it
    /// and its reply: where an unanswered query went.
    verdict: Option<&'a QueryVerdict>,
    text: String,
}

#[derive(Serialize, schemars::JsonSchema)]
struct AnswerOut {
    name: String,
    #[serde(rename = "type")]
    type_: String,
    ttl: u32,
    data: String,
}

fn dns_out<'a>(log: &DnsLog, flow: &Flow, v: &'a Verdict) -> DnsOut<'a> {
    let (client, server) = endpoints(flow);
    DnsOut {
        queries: log
            .queries
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let qv = v.queries.get(i);
                let r = q.reply.as_ref();
                QueryOut {
                    id: q.id,
                    name: q.question.as_ref().map(|x| x.name.clone()),
                    qtype: q.question.as_ref().map(|x| dns::qtype_name(x.qtype)),
                    qclass: q.question.as_ref().map(|x| x.qclass),
                    sent: q.sent,
                    rcode: r.map(|r| dns::rcode_name(r.rcode)),
                    truncated: r.is_some_and(|r| r.truncated),
                    answer_count: r.map_or(0, |r| r.answer_count),
                    answers: r.map_or_else(Vec::new, |r| {
                        r.answers
                            .iter()
                            .map(|a| AnswerOut {
                                name: a.name.clone(),
                                type_: dns::qtype_name(a.rtype),
                                ttl: a.ttl,
                                data: a.data.clone(),
                            })
                            .collect()
                    }),
                    latency_ms: latency_ms(q),
                    partial: r.is_some_and(|r| r.partial),
                    client: client.clone(),
                    server: server.clone(),
                    verdict: qv,
                    text: query_text(q, (&client, &server), qv),
                }
            })
            .collect(),
        more: log.more,
    }
}

fn latency_ms(q: &Query) -> Option<f64> {
    let r = q.reply.as_ref()?;
    (q.sent > 0).then(|| r.ts_ns.saturating_sub(q.first_ns) as f64 / 1e6)
}

/// The flow's client and server as `addr:port` (`[v6]:port`).
fn endpoints(flow: &Flow) -> (String, String) {
    let k = &flow.key;
    let ep = |a: std::net::IpAddr, p: u16| std::net::SocketAddr::new(a, p).to_string();
    (ep(k.src, k.sport), ep(k.dst, k.dport))
}

/// `A kubernetes.default.svc.cluster.local from 10.0.1.5:41234 ->
/// 169.254.25.10:53 (id 0x1a2b) => NOERROR 1 answer (10.96.0.1) 0.80 ms`,
/// or `=> no answer: MISROUTED reason (where)`: the query's own verdict.
/// `ends`: the flow's client and server ([`endpoints`]).
pub(crate) fn query_text(q: &Query, ends: (&str, &str), qv: Option<&QueryVerdict>) -> String {
    let mut s = match &q.question {
        Some(x) => format!("{} {}", dns::qtype_name(x.qtype), x.name),
        None => "(question not read)".to_string(),
    };
    let (client, server) = ends;
    s.push_str(&format!(" from {client} -> {server} (id {:#06x}", q.id));
    if q.sent > 1 {
        s.push_str(&format!(", sent {} times", q.sent));
    }
    s.push(')');
    let Some(r) = &q.reply else {
        s.push_str(" => no answer");
        if let Some(v) = qv {
            s.push_str(&format!(": {} ({})", label(v.kind, &v.reason), v.where_));
        }
        return s;
    };
    s.push_str(&format!(" => {}", dns::rcode_name(r.rcode)));
    if r.truncated {
        s.push_str(" truncated (TC: retry over TCP)");
    }
    s.push_str(&format!(
        " {} answer{}",
        r.answer_count,
        if r.answer_count == 1 { "" } else { "s" }
    ));
    if !r.answers.is_empty() {
        let a: Vec<&str> = r.answers.iter().map(|a| a.data.as_str()).collect();
        s.push_str(&format!(" ({})", a.join(", ")));
    }
    if let Some(ms) = latency_ms(q) {
        s.push_str(&format!(" {ms:.2} ms"));
    }
    if q.sent == 0 {
        s.push_str(" (its query was not seen)");
    }
    s
}

#[derive(Serialize, schemars::JsonSchema)]
struct HopOut<'a> {
    t_us: f64,
    ts_ns: u64,
    /// `ts_ns` by the node's wall clock, ns since the epoch (with the
    /// flow's `clock`).
    #[serde(skip_serializing_if = "Option::is_none")]
    unix_ns: Option<i64>,
    hook: &'static str,
    netns: &'a str,
    netns_inode: u32,
    /// The pod that owns the namespace (`namespace/name`), when the node
    /// says: a process of the namespace in a pod's cgroup, and kubelet's
    /// directory of that pod (/var/log/pods/NAMESPACE_NAME_UID).
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<&'a str>,
    dev: &'a str,
    ifindex: u32,
    dir: Dir,
    tuple: &'a Tuple,
    skb: String,
    detail: String,
    fields: &'a HopData,
}

fn flow_out<'a>(
    flow: &'a Flow,
    v: &'a Verdict,
    final_: bool,
    pods: &'a PodNames,
    stamp: Option<&'a NodeStamp>,
) -> FlowOut<'a> {
    let first = flow.hops.first().map_or(flow.first_ns, |h| h.ts_ns);
    let clock = stamp.map(|s| s.clock);
    FlowOut {
        type_: "flow",
        id: flow.id,
        final_,
        node: stamp.map(|s| s.node.as_str()),
        clock,
        proto: proto_name(flow.key.proto),
        original: &flow.key,
        translated: flow.translated.as_ref(),
        nat_at: flow.nat_at(),
        nat_by: flow.nat_by.map(NatBy::as_str),
        service: v.service.as_ref(),
        verdict: v,
        packets: flow.packets,
        replies: flow.replies,
        counted_in_kernel: flow.counted,
        dns: flow.dns.as_deref().map(|d| dns_out(d, flow, v)),
        hops: flow
            .hops
            .iter()
            .map(|h| HopOut {
                t_us: (h.ts_ns.saturating_sub(first)) as f64 / 1000.0,
                ts_ns: h.ts_ns,
                unix_ns: clock.map(|c| (h.ts_ns as i64).saturating_add(c.ktime_to_unix_ns)),
                hook: hook_name(h.hook),
                netns: &h.netns,
                netns_inode: h.netns_inode,
                pod: pods.get(h.netns_inode),
                dev: &h.dev,
                ifindex: h.ifindex,
                dir: h.dir,
                tuple: &h.tuple,
                skb: format!("{:#x}", h.skb),
                detail: h.detail(),
                fields: &h.data,
            })
            .collect(),
    }
}

/// One flow record, as a JSON line (hops name their pod when `pods`
/// knows it; the record names its node and dates its hops by the wall
/// clock with a `stamp`).
pub fn flow_json_line(
    flow: &Flow,
    v: &Verdict,
    final_: bool,
    pods: &PodNames,
    stamp: Option<&NodeStamp>,
) -> String {
    serde_json::to_string(&flow_out(flow, v, final_, pods, stamp))
        .expect("a flow record serializes")
}

/// A verdict as text output heads a flow with it: `DROPPED NETFILTER_DROP`.
pub fn verdict_label(v: &Verdict) -> String {
    label(v.kind, &v.reason)
}

fn label(kind: Kind, reason: &crate::verdict::Reason) -> String {
    format!("{} {reason}", kind.as_str().to_uppercase())
}

/// A flow as text: its verdict, then its hops, each in its namespace,
/// shown as the pod that owns it when `pods` knows it (the verdict's
/// `where` keeps namespace names).
pub fn flow_text(flow: &Flow, v: &Verdict, pods: &PodNames) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "flow #{} {}  =>  {}{}{}\n",
        flow.id,
        flow.key,
        verdict_label(v),
        if v.reason_inferred {
            " (reason inferred from drop location)"
        } else {
            ""
        },
        if v.incomplete { " (incomplete)" } else { "" }
    ));
    if let Some(t) = flow.translated {
        s.push_str(&format!(
            "  translated: {t} (by {})\n",
            flow.nat_by.map_or("?", NatBy::as_str)
        ));
    }
    if let Some(svc) = &v.service {
        s.push_str(&format!("  service: {}\n", service_text(svc)));
    }
    s.push_str(&format!("  where: {}\n", v.where_));
    if let Some(log) = flow.dns.as_deref() {
        let (client, server) = endpoints(flow);
        for (i, q) in log.queries.iter().enumerate() {
            s.push_str(&format!(
                "  dns {}\n",
                query_text(q, (&client, &server), v.queries.get(i))
            ));
        }
        if log.more > 0 {
            s.push_str(&format!("  dns: {} more queries not kept\n", log.more));
        }
    }
    s.push_str(&format!("  hint:  {}\n", v.hint));
    for e in &v.evidence {
        s.push_str(&format!("  - {e}\n"));
    }
    let first = flow.hops.first().map_or(0, |h| h.ts_ns);
    for h in &flow.hops {
        s.push_str(&format!(
            "    {:>9.3}ms  {:<18} {:<12} {:<13} {:<3} {}  {}\n",
            h.ts_ns.saturating_sub(first) as f64 / 1e6,
            trunc(pods.get(h.netns_inode).unwrap_or(h.netns.as_str()), 18),
            if h.dev.is_empty() { "-" } else { &h.dev },
            hook_name(h.hook),
            match h.dir {
                crate::model::hop::Dir::Request => "->",
                crate::model::hop::Dir::Reply => "<-",
            },
            h.tuple,
            h.detail()
        ));
    }
    s
}

/// `default/web:http (ClusterIP; kube-proxy nftables map ip service-ips
/// in netns node)`.
fn service_text(s: &FlowService) -> String {
    let kind: &'static str = s.kind.into();
    let from = match &s.source {
        ServiceSource::NftablesMap { family, map } => {
            format!("kube-proxy nftables map {family} {map}")
        }
        ServiceSource::IptablesRule {
            family,
            table,
            chain,
            handle,
        } => format!("kube-proxy rule {family} {table} {chain} handle {handle}"),
    };
    format!("{} ({kind}; {from} in netns {})", s.name, s.netns)
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

pub fn emit(out: &mut impl Write, line: &str) {
    // A closed stdout (e.g. `| head`) must not kill the run before cleanup.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
