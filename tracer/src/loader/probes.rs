//! The probe registry: which hooks this kernel offers, with which backend,
//! and what happened when attaching them.

use serde::Serialize;

use crate::btf::Btf;

/// A kernel hook the tracer wants, and the program serving it.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSpec {
    /// Name shown to the user (also the `hook` of hops it produces).
    pub hook: &'static str,
    /// Program name in the eBPF object.
    pub program: &'static str,
    /// Tracepoint name (tp_btf target).
    pub tracepoint: &'static str,
    /// Without it no packet can be followed at all.
    pub required: bool,
    /// What verdicts lose when it is missing.
    pub feeds: &'static str,
}

pub const TRACEPOINTS: &[ProbeSpec] = &[
    ProbeSpec {
        hook: "netif_receive",
        program: "tracer_netif_receive",
        tracepoint: "netif_receive_skb",
        required: true,
        feeds: "receive hops",
    },
    ProbeSpec {
        hook: "xmit",
        program: "tracer_xmit",
        tracepoint: "net_dev_start_xmit",
        required: true,
        feeds: "transmit hops, forwarded verdicts",
    },
    ProbeSpec {
        hook: "drop",
        program: "tracer_kfree_skb",
        tracepoint: "kfree_skb",
        required: true,
        feeds: "dropped verdicts",
    },
    ProbeSpec {
        hook: "consume",
        program: "tracer_consume_skb",
        tracepoint: "consume_skb",
        required: false,
        feeds: "end of followed packets",
    },
    ProbeSpec {
        hook: "sock_recv",
        program: "tracer_sock_recv",
        tracepoint: "skb_copy_datagram_iovec",
        required: false,
        feeds: "delivered verdicts (data read by a socket)",
    },
    ProbeSpec {
        hook: "sock_queue",
        program: "tracer_sk_data_ready",
        tracepoint: "sk_data_ready",
        required: false,
        feeds: "delivered verdicts (queued to a socket; UDP)",
    },
    ProbeSpec {
        hook: "icmp_send",
        program: "tracer_icmp_send",
        tracepoint: "icmp_send",
        required: false,
        feeds: "ICMP errors sent by the kernel",
    },
    ProbeSpec {
        hook: "tcp_reset",
        program: "tracer_tcp_reset",
        tracepoint: "tcp_send_reset",
        required: false,
        feeds: "TCP resets sent by the kernel",
    },
    ProbeSpec {
        hook: "fib_lookup",
        program: "tracer_fib_lookup",
        tracepoint: "fib_table_lookup",
        required: false,
        feeds: "routing decisions, misrouted verdicts",
    },
    ProbeSpec {
        hook: "fib6_lookup",
        program: "tracer_fib6_lookup",
        tracepoint: "fib6_table_lookup",
        required: false,
        feeds: "IPv6 routing decisions",
    },
    ProbeSpec {
        hook: "sock_state",
        program: "tracer_sock_state",
        tracepoint: "inet_sock_set_state",
        required: false,
        feeds: "delivered verdicts (TCP handshakes)",
    },
    ProbeSpec {
        hook: "neigh_update",
        program: "tracer_neigh_update",
        tracepoint: "neigh_update",
        required: false,
        feeds: "neighbour state of the target",
    },
    ProbeSpec {
        hook: "neigh_timer",
        program: "tracer_neigh_timer",
        tracepoint: "neigh_timer_handler",
        required: false,
        feeds: "neighbour resolution failures",
    },
    ProbeSpec {
        hook: "neigh_dead",
        program: "tracer_neigh_dead",
        tracepoint: "neigh_event_send_dead",
        required: false,
        feeds: "packets sent to a failed neighbour",
    },
];

/// What was decided and what happened for one hook.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeStatus {
    pub hook: String,
    pub backend: String,
    pub target: String,
    pub attached: bool,
    pub error: Option<String>,
    #[serde(skip)]
    pub required: bool,
    #[serde(skip)]
    pub feeds: String,
}

/// The plan for this kernel, before attaching: a tracepoint is usable as
/// tp_btf when the kernel's BTF has its `btf_trace_<name>` typedef.
pub fn plan(btf: &Btf) -> Vec<ProbeStatus> {
    // TRACER_SKIP_HOOKS=a,b makes hooks unavailable on purpose (to see what
    // verdicts lose without them, and to test that path).
    let skip: Vec<String> = std::env::var("TRACER_SKIP_HOOKS")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    TRACEPOINTS
        .iter()
        .map(|p| {
            let skipped = skip.iter().any(|s| s == p.hook);
            let present = btf.tracepoint_arity(p.tracepoint).is_some() && !skipped;
            ProbeStatus {
                hook: p.hook.into(),
                backend: if present {
                    "tp_btf".into()
                } else {
                    "none".into()
                },
                target: p.tracepoint.into(),
                attached: false,
                error: (!present).then(|| {
                    if skipped {
                        "disabled by TRACER_SKIP_HOOKS".to_string()
                    } else {
                        format!(
                            "kernel has no tracepoint {} (btf_trace_{} not in BTF)",
                            p.tracepoint, p.tracepoint
                        )
                    }
                }),
                required: p.required,
                feeds: p.feeds.into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_marks_missing_tracepoints() {
        let btf = Btf::parse(&crate::btf::fixture::sample_btf()).unwrap();
        let p = plan(&btf);
        let drop = p.iter().find(|s| s.hook == "drop").unwrap();
        assert_eq!(drop.backend, "tp_btf");
        assert!(drop.error.is_none());
        let fib = p.iter().find(|s| s.hook == "fib_lookup").unwrap();
        assert_eq!(fib.backend, "none");
        assert!(fib.error.as_ref().unwrap().contains("fib_table_lookup"));
    }

    #[test]
    fn registry_names_are_unique() {
        let mut names: Vec<_> = TRACEPOINTS.iter().map(|p| p.program).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), TRACEPOINTS.len());
    }
}
