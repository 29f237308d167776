//! `tracer replay`: a recording through the same [`Pipeline`] as `follow`,
//! with no root, BTF or kernel: the records in the order they arrived,
//! the flows `follow` printed as they settled, where it printed them, then
//! the final report against the node facts the run read. (Flows printed
//! as they settled are judged against the facts read at the end: the
//! run's facts at that moment are not kept.)

use std::path::Path;

use crate::{
    model::names::{Kallsyms, Names, NetnsNames},
    model::target::{Target, TargetError},
    node::vip::VipWatch,
    output::{
        NodeStamp, Sink, WallClock, diag,
        summary::{ReplayInfo, Summary},
    },
    run::pipeline::{Pipeline, PreparedEnv},
    run::record::{Frame, Header, RecordError, RecordedVerdict, Recording},
    verdict::{Completeness, Env, IfAddr, Inventory},
};

/// Why a recording could not be replayed: it could not be read, or its
/// header names a target this tracer does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Target(#[from] TargetError),
}

/// The node as the recorded run read it: its namespaces' facts, and the
/// owners of the followed address rebuilt from the summary.
struct ReplayEnv {
    inventory: Inventory,
    vip: VipWatch,
}

impl PreparedEnv for ReplayEnv {
    fn prepare(&mut self, _names: &mut Names, _flow: &crate::model::flow::Flow) {}

    fn env(&self) -> &dyn Env {
        self
    }
}

impl Env for ReplayEnv {
    fn addrs(&self, netns: u32) -> Option<&[IfAddr]> {
        self.inventory.addrs(netns)
    }

    fn nf_moved(&self, netns: u32) -> &[(crate::node::netfilter::NfRule, u64)] {
        self.inventory.nf_moved(netns)
    }

    fn tc_filters(&self, netns: u32, dev: &str) -> Vec<String> {
        self.inventory.tc_filters(netns, dev)
    }

    fn dev_programs(&self, netns: u32, dev: &str) -> Vec<crate::verdict::AttachedProgram> {
        self.inventory.dev_programs(netns, dev)
    }

    fn cgroup_programs(&self, id: u64) -> Option<crate::verdict::CgroupPrograms> {
        self.inventory.cgroup_programs(id)
    }

    fn cgroup_skb(&self, ids: &[u64]) -> crate::verdict::CgroupSkb {
        self.inventory.cgroup_skb(ids)
    }

    fn qdiscs(&self, netns: u32, dev: &str, ifindex: u32) -> Vec<crate::verdict::Qdisc> {
        self.inventory.qdiscs(netns, dev, ifindex)
    }

    fn xfrm(&self, netns: u32) -> Option<crate::verdict::Xfrm> {
        self.inventory.xfrm(netns)
    }

    fn frag_time(&self, netns: u32) -> Option<u32> {
        self.inventory.frag_time(netns)
    }

    fn devmap_target(&self, map_id: u32, key: u32) -> Option<u32> {
        self.inventory.devmap_target(map_id, key)
    }

    fn dst_facts(&self, dst: std::net::IpAddr) -> Vec<crate::verdict::Evidence> {
        crate::verdict::node_facts::owner_facts(&self.vip, dst)
    }

    fn ipvs(&self, netns: u32) -> &[crate::node::ipvs::VirtualService] {
        self.inventory.ipvs(netns)
    }

    fn links(&self, netns: u32) -> &[crate::node::link::LinkConf] {
        self.inventory.links(netns)
    }

    fn bound(&self, netns: u32) -> &[crate::node::sockets::Bound] {
        self.inventory.bound(netns)
    }

    fn nf_traced(&self, netns: u32) -> &[crate::node::nftrace::NfTraced] {
        self.inventory.nf_traced(netns)
    }

    fn nf_gotos(&self, netns: u32) -> &[crate::node::nftrace::TracedGoto] {
        self.inventory.nf_gotos(netns)
    }

    fn conntrack(&self, netns: u32) -> Option<&crate::node::conntrack::ConntrackTable> {
        self.inventory.conntrack(netns)
    }

    fn listen_stats(&self, netns: u32) -> Option<crate::node::sockets::ListenStats> {
        self.inventory.listen_stats(netns)
    }

    fn routing(&self, netns: u32) -> Option<&crate::node::route::Routing> {
        self.inventory.routing(netns)
    }

    fn services(&self, netns: u32) -> &[crate::node::services::ServiceAddr] {
        self.inventory.services(netns)
    }
}

/// What replay found.
#[derive(Debug)]
pub struct Replayed {
    /// Each flow's verdict now.
    pub verdicts: Vec<RecordedVerdict>,
    /// What the recording says `follow` printed.
    pub recorded: Vec<RecordedVerdict>,
}

impl Replayed {
    /// Lines saying where the replayed verdicts differ from the recorded.
    pub fn differences(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.verdicts.len() != self.recorded.len() {
            out.push(format!(
                "{} flows replayed, {} recorded",
                self.verdicts.len(),
                self.recorded.len()
            ));
        }
        for r in &self.recorded {
            match self.verdicts.iter().find(|v| v.id == r.id) {
                None => out.push(format!("flow #{}: recorded, not replayed", r.id)),
                Some(v) if v != r => out.push(format!(
                    "flow #{}: recorded {} {} ({}), replayed {} {} ({})",
                    r.id, r.kind, r.reason, r.where_, v.kind, v.reason, v.where_
                )),
                Some(_) => {}
            }
        }
        out
    }
}

/// What dates the recording's records in wall-clock time: the offset the
/// run kept, or, for a recording made before it was kept, the start time
/// given to its first record (off by the run's start-up, under a second).
fn ktime_to_unix_ns(header: &Header, frames: &[Frame]) -> i64 {
    if let Some(o) = header.ktime_to_unix_ns {
        return o;
    }
    let first = frames.iter().find_map(|f| match f {
        Frame::Ring(b) => b
            .get(TS_AT..TS_AT + 8)
            .map(|ts| i64::from_le_bytes(ts.try_into().expect("8 bytes"))),
        _ => None,
    });
    diag::note(
        "this recording predates the clock offset: pcap times are the recording's start time \
         given to its first record (off by the run's start-up, under a second)",
    );
    header.started_unix_ms as i64 * 1_000_000 - first.unwrap_or(0)
}

/// Where every record's header keeps its `ts_ns`.
const TS_AT: usize = std::mem::offset_of!(tracer_common::EventHeader, ts_ns);

/// A recording replayed up to its final report: the pipeline with every
/// frame behind it, the node as the recorded run read it, and what else
/// the recording kept for the report.
struct Replaying {
    header: Header,
    target: Target,
    pipeline: Pipeline,
    env: ReplayEnv,
    completeness: Completeness,
    summary: Summary,
    recorded: Vec<RecordedVerdict>,
}

/// Read a recording and replay its frames through a [`Pipeline`] named as
/// the recorded run named things: its packets and the flows `follow`
/// printed before the report go to `sink`, the report is the caller's.
fn replay_frames(path: &Path, sink: &mut dyn Sink) -> Result<Replaying, ReplayError> {
    let Recording {
        header,
        frames,
        mut trailer,
        cut_short,
    } = Recording::open(path)?;
    if let Some(at) = cut_short {
        diag::warn(&format!(
            "{} was cut short at byte {at} (the recording tracer was killed before its final report): \
             replaying the {} record(s) it holds, without the run's name tables, node facts and verdicts",
            path.display(),
            frames.len()
        ));
        trailer.summary.stop = "cut short".into();
        if let Some(r) = header.reasons.clone() {
            trailer.drop_reasons = r.drop;
            trailer.rst_reasons = r.rst;
            trailer.no_drop_reason = r.no_drop_reason;
        }
    }
    let target = Target::parse(&header.target, header.proto.as_deref())?;
    let names = Names {
        drop_reasons: trailer.drop_reasons.into_iter().collect(),
        no_drop_reason: trailer.no_drop_reason,
        icmp_unhooked: trailer
            .completeness
            .missing_hooks
            .iter()
            .any(|h| h == "icmp_send"),
        rst_reasons: trailer.rst_reasons.into_iter().collect(),
        kallsyms: Kallsyms::fixed(trailer.locations.into_iter().collect()),
        netns: NetnsNames::fixed(trailer.netns_names, trailer.netns_pods),
        interned: Default::default(),
    };
    let mut pipeline = Pipeline::new(target, names, header.max_flows)
        .with_dns_port(header.dns_port)
        .with_tunnel_ports(&header.tunnel_ports);
    if sink.wants_packets() {
        pipeline.capture_packets(ktime_to_unix_ns(&header, &frames));
    }
    let summary = trailer.summary;
    // A run that named its node and clock: its flows as it printed them
    // (`tracer merge` reads a replay's JSON as the run's).
    if let (Some(node), Some(clock)) = (summary.node.clone(), summary.clock) {
        sink.stamp(NodeStamp {
            node,
            clock: WallClock {
                drift_ns: None,
                ..clock
            },
        });
    }
    let mut env = ReplayEnv {
        inventory: trailer.facts.into(),
        vip: VipWatch::replayed(
            summary.vip.changes.clone(),
            summary
                .vip
                .macs
                .iter()
                .map(|m| (m.addr, m.mac.clone()))
                .collect(),
        ),
    };
    let completeness = trailer.completeness;
    for f in frames {
        match f {
            Frame::Ring(b) => {
                pipeline.ingest(&b);
                let captured = pipeline.take_captured();
                if !captured.is_empty() {
                    sink.packets(captured);
                }
            }
            Frame::Counted(totals) => pipeline.fold_counted(totals),
            // Version 2: the flows settled by then are found again.
            Frame::Tick { now_ns, recheck } => {
                for id in pipeline.quiet_flows(now_ns, recheck) {
                    if let Some((f, v)) = pipeline.judge(id, &mut env, &completeness) {
                        sink.flow(&f, &v, false, pipeline.names().netns.pods());
                    }
                }
            }
            // Version 3: the flow `follow` printed here.
            Frame::Printed(id) => {
                if let Some((f, v)) = pipeline.judge_printed(id, &mut env, &completeness) {
                    sink.flow(&f, &v, false, pipeline.names().netns.pods());
                }
            }
        }
    }
    Ok(Replaying {
        header,
        target,
        pipeline,
        env,
        completeness,
        summary,
        recorded: trailer.verdicts,
    })
}

pub fn replay(path: &Path, sink: &mut dyn Sink) -> Result<Replayed, ReplayError> {
    let Replaying {
        header,
        target,
        pipeline,
        mut env,
        completeness,
        mut summary,
        recorded,
    } = replay_frames(path, sink)?;
    sink.report_start(pipeline.flow_count(), &target.to_string(), &summary.stop);
    let decode_errors = pipeline.decode_errors;
    let mut verdicts = Vec::new();
    let tally = pipeline.report(&mut env, &completeness, |f, v, pods| {
        sink.flow(f, v, true, pods);
        verdicts.push(RecordedVerdict::of(f.id, v));
    });
    summary.flows = tally.flows;
    summary.verdicts = tally.verdicts;
    summary.dns = tally.dns;
    summary.flows_evicted = tally.evicted;
    summary.counted_in_kernel = tally.counted_total;
    summary.counted_unattributed = tally.counted_unattributed;
    summary.decode_errors = decode_errors;
    // Replay packs nothing: the packing figures are the recording run's.
    summary.replay = Some(ReplayInfo {
        file: path.display().to_string(),
        kernel: header.kernel,
        tracer_version: header.tracer_version,
    });
    sink.summary(&summary);
    Ok(Replayed { verdicts, recorded })
}

/// Every flow of a recording as its final report has it (unpacked, after
/// the flows `follow` printed before), with the node facts the run read
/// and what the run could not see: the rule tests judge real timelines.
#[cfg(test)]
pub(crate) fn flows_of(
    path: &Path,
) -> Result<(Vec<crate::model::flow::Flow>, Inventory, Completeness), ReplayError> {
    /// Replay's output, not wanted here.
    struct Discard;
    impl Sink for Discard {
        fn flow(
            &mut self,
            _: &crate::model::flow::Flow,
            _: &crate::verdict::Verdict,
            _: bool,
            _: &crate::model::names::PodNames,
        ) {
        }
        fn summary(&mut self, _: &Summary) {}
    }
    let Replaying {
        pipeline,
        mut env,
        completeness,
        ..
    } = replay_frames(path, &mut Discard)?;
    let mut flows = Vec::new();
    pipeline.report(&mut env, &completeness, |f, _, _| flows.push(f.clone()));
    Ok((flows, env.inventory, completeness))
}
