//! The follow pipeline as a library: raw ring records and the kernel's
//! counted totals in, flows and verdicts out. It makes no system call of
//! its own: time comes in as an argument, node facts through
//! [`crate::verdict::Env`], names through [`Names`] (which a recording
//! fills from its own tables). `tracer follow` drives it from a
//! [`crate::kernel::session::Session`], `tracer replay` from a recording.

use std::{collections::BTreeMap, net::IpAddr};

use tracer_common::{AggKey, BytesHeader, Hook, kind};

use crate::{
    model::capture::{Captured, ip_len},
    model::counted::Counted,
    model::event::cname_str,
    model::event::{Event, decode, decode_bytes, ip_from},
    model::hop::hook_name,
    model::names::{Names, PodNames},
    model::target::Target,
    model::{flow::Flow, table::FlowTable},
    verdict::{Completeness, Env, Verdict, evaluate},
};

/// How long a flow must be quiet before its verdict is printed as it is
/// known (before the final report).
const SETTLE_NS: u64 = 500_000_000;

pub struct Pipeline {
    target: Target,
    flows: FlowTable,
    names: Names,
    counted: Counted,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// Link-layer addresses that answered for the target (neighbour
    /// events), not yet taken by [`Pipeline::take_macs`].
    macs: Vec<(IpAddr, String)>,
    /// Flows whose verdict was printed before the final report.
    settled: u64,
    /// Packets' bytes with their flow, kept for `--pcap` until taken
    /// ([`Pipeline::take_captured`]); `None`: not kept.
    captured: Option<Capture>,
    /// Packet records decoded, and of those drops: how fast followed
    /// packets come, for nftrace (run/trace_load.rs).
    packets_seen: u64,
    drops_seen: u64,
}

/// What [`Pipeline::capture_packets`] keeps.
struct Capture {
    /// Wall clock minus ktime (CLOCK_MONOTONIC), ns.
    ktime_to_unix_ns: i64,
    packets: Vec<Captured>,
}

/// What the final report knows of the run beyond each flow's verdict.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub flows: usize,
    pub evicted: u64,
    pub packed_flows: usize,
    pub packed_bytes: usize,
    pub counted_total: u64,
    pub counted_unattributed: u64,
    pub verdicts: BTreeMap<String, usize>,
    /// DNS queries by result, and payloads that were not DNS
    /// (`Summary::dns`).
    pub dns: BTreeMap<String, usize>,
}

impl Pipeline {
    pub fn new(target: Target, names: Names, max_flows: usize) -> Pipeline {
        Pipeline {
            target,
            flows: FlowTable::new(max_flows),
            names,
            counted: Counted::default(),
            decode_errors: 0,
            packets_seen: 0,
            drops_seen: 0,
            macs: Vec::new(),
            settled: 0,
            captured: None,
        }
    }

    /// Also read DNS on this port (`--dns-port`), besides 53.
    #[must_use]
    pub fn with_dns_port(mut self, port: Option<u16>) -> Pipeline {
        self.flows.dns_port = port.unwrap_or(0);
        self
    }

    /// UDP to these ports is a tunnel's outer packet too (the node's VXLAN
    /// devices' own ports: `FilterConfig::tunnel_ports`, or a recording's
    /// header; the first two, 0 for none).
    #[must_use]
    pub fn with_tunnel_ports(mut self, ports: &[u16]) -> Pipeline {
        for (o, p) in self.flows.tunnel_ports.iter_mut().zip(ports) {
            *o = *p;
        }
        self
    }

    /// Keep each captured packet's bytes, with its flow, for
    /// [`Pipeline::take_captured`]; `ktime_to_unix_ns` (wall clock minus
    /// ktime) dates them.
    pub fn capture_packets(&mut self, ktime_to_unix_ns: i64) {
        self.captured = Some(Capture {
            ktime_to_unix_ns,
            packets: Vec::new(),
        });
    }

    /// The packets captured since the last call (none unless
    /// [`Pipeline::capture_packets`]).
    pub fn take_captured(&mut self) -> Vec<Captured> {
        self.captured
            .as_mut()
            .map(|c| std::mem::take(&mut c.packets))
            .unwrap_or_default()
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Flows in the table now.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    pub fn names(&self) -> &Names {
        &self.names
    }

    /// One ring record, as the kernel wrote it.
    pub fn ingest(&mut self, record: &[u8]) {
        if record.first() == Some(&kind::BYTES) {
            match decode_bytes(record) {
                Ok((h, data)) => {
                    let flow = self.flows.ingest_bytes(h.hdr.skb, h.hdr.ts_ns, data);
                    self.keep_captured(&h, flow, data);
                }
                Err(e) => {
                    self.decode_errors += 1;
                    log::debug!("undecodable record: {e}");
                }
            }
            return;
        }
        match decode(record) {
            Ok(ev) => {
                if let Event::Packet(_) = ev {
                    self.packets_seen += 1;
                    self.drops_seen += u64::from(ev.hook() == Hook::Drop);
                }
                self.note_neighbour(&ev);
                self.flows.ingest(&ev, &mut self.names);
            }
            Err(e) => {
                self.decode_errors += 1;
                log::debug!("undecodable record: {e}");
            }
        }
    }

    /// A BYTES record's packet, for `--pcap` when asked.
    fn keep_captured(&mut self, h: &BytesHeader, flow: Option<u64>, data: &[u8]) {
        let Some(c) = self.captured.as_mut() else {
            return;
        };
        let hdr = &h.hdr;
        c.packets.push(Captured {
            flow,
            hook: Hook::from_u8(hdr.hook).map_or("unknown", hook_name),
            reply: h.reply != 0,
            netns: hdr.netns,
            netns_name: self.names.netns.name(hdr.netns).to_string(),
            dev: cname_str(&hdr.ifname).to_string(),
            ts_unix_ns: hdr.ts_ns.saturating_add_signed(c.ktime_to_unix_ns),
            len: ip_len(data),
            data: data.to_vec(),
        });
    }

    /// A neighbour entry for the target got a link-layer address.
    fn note_neighbour(&mut self, ev: &Event) {
        if let Event::Neigh(n) = ev {
            let addr = ip_from(n.family, &n.addr);
            if self.target.contains(addr) && n.lladdr[..6].iter().any(|b| *b != 0) {
                let mac: Vec<String> = n.lladdr[..6].iter().map(|b| format!("{b:02x}")).collect();
                self.macs.push((addr, mac.join(":")));
            }
        }
    }

    /// Packet records decoded so far, and of those drops.
    pub fn packets_seen(&self) -> (u64, u64) {
        (self.packets_seen, self.drops_seen)
    }

    /// Request tuples DNAT'd to a new destination since the last call
    /// (nftrace traces the endpoints too).
    pub fn take_dnat(&mut self) -> Vec<crate::model::event::Tuple> {
        std::mem::take(&mut self.flows.dnat_log)
    }

    /// MACs seen since the last call (the node-facts side keeps them).
    pub fn take_macs(&mut self) -> Vec<(IpAddr, String)> {
        std::mem::take(&mut self.macs)
    }

    /// Does the counted-packet state know this key (a key whose total is
    /// 0 matters only then: see counted.rs)?
    pub fn counted_knows(&self, k: &AggKey) -> bool {
        self.counted.knows(k)
    }

    /// One poll of the kernel's counted totals `(key, total, netns)`.
    pub fn fold_counted(&mut self, totals: Vec<(AggKey, u64, u32)>) {
        self.counted.fold(totals, &mut self.flows);
    }

    /// Pack flows quiet since before `now_ns` (CLOCK_MONOTONIC) less the
    /// table's packing age: what keeps 100k flows within 64 MiB.
    pub fn pack_quiet(&mut self, now_ns: u64) {
        self.flows.pack_quiet(now_ns);
    }

    /// Flows quiet for 500 ms whose verdict should be (re)considered: never
    /// printed, or with hops since they were, or all of them when
    /// `recheck` (the target's owner changed). In id order.
    pub fn quiet_flows(&self, now_ns: u64, recheck: bool) -> Vec<u64> {
        let mut ready: Vec<u64> = self
            .flows
            .metas()
            .filter(|f| now_ns.saturating_sub(f.last_ns) > SETTLE_NS)
            .filter(|f| recheck || f.printed == 0 || f.printed_at != f.last_ns)
            .map(|f| f.id)
            .collect();
        ready.sort_unstable();
        ready
    }

    /// Judge one flow before the final report: its verdict when settled
    /// and not already printed the same. A printed flow with no hop since
    /// is not judged again (see [`Pipeline::quiet_flows`]).
    pub fn judge(
        &mut self,
        id: u64,
        env: &mut dyn PreparedEnv,
        c: &Completeness,
    ) -> Option<(Flow, Verdict)> {
        self.judge_as(id, env, c, false)
    }

    /// Judge a flow `follow` printed at this point of a recording (its
    /// printed frame): its verdict whether or not it is settled with the
    /// facts replay has (the run's final ones).
    pub fn judge_printed(
        &mut self,
        id: u64,
        env: &mut dyn PreparedEnv,
        c: &Completeness,
    ) -> Option<(Flow, Verdict)> {
        self.judge_as(id, env, c, true)
    }

    /// `printed`: `follow` printed it here, settled or not (replay).
    fn judge_as(
        &mut self,
        id: u64,
        env: &mut dyn PreparedEnv,
        c: &Completeness,
        printed: bool,
    ) -> Option<(Flow, Verdict)> {
        let f = self.flows.get(id)?.into_owned();
        env.prepare(&mut self.names, &f);
        let v = evaluate(&f, env.env(), c);
        if !printed && !v.settled {
            return None;
        }
        let key = verdict_key(&v);
        self.flows.set_printed(id, key);
        if !printed && f.printed == key {
            return None;
        }
        if f.printed == 0 {
            self.settled += 1;
        }
        Some((f, v))
    }

    /// Flows whose verdict was printed before the final report.
    pub fn settled_count(&self) -> u64 {
        self.settled
    }

    /// The final report: every flow with its verdict, one unpacked at a
    /// time, in id order, handed to `each` (with the pods known to own
    /// namespaces); then the run's tally.
    pub fn report(
        self,
        env: &mut dyn PreparedEnv,
        c: &Completeness,
        mut each: impl FnMut(&Flow, &Verdict, &PodNames),
    ) -> Tally {
        let Pipeline {
            flows,
            mut names,
            counted,
            ..
        } = self;
        let (packed_flows, packed_bytes) = flows.packed_size();
        let mut tally = Tally {
            flows: flows.len(),
            evicted: flows.evicted,
            packed_flows,
            packed_bytes,
            counted_total: counted.total,
            counted_unattributed: counted.unattributed,
            verdicts: BTreeMap::new(),
            dns: BTreeMap::new(),
        };
        if flows.dns_malformed > 0 {
            tally
                .dns
                .insert("not_dns".into(), flows.dns_malformed as usize);
        }
        for f in flows.into_flows() {
            for q in f.dns.iter().flat_map(|d| &d.queries) {
                let result = q.reply.as_ref().map_or_else(
                    || "unanswered".to_string(),
                    |r| crate::model::dns::rcode_name(r.rcode),
                );
                *tally.dns.entry(result).or_default() += 1;
            }
            env.prepare(&mut names, &f);
            let v = evaluate(&f, env.env(), c);
            *tally
                .verdicts
                .entry(v.kind.as_str().to_string())
                .or_default() += 1;
            each(&f, &v, names.netns.pods());
        }
        tally
    }
}

/// Node facts that must be read for a flow before it is judged (the live
/// node reads namespaces on demand; a recording has them already).
pub trait PreparedEnv {
    fn prepare(&mut self, names: &mut Names, flow: &Flow);
    fn env(&self) -> &dyn Env;
}

/// What a flow's printed verdict is compared on: (kind, reason), hashed;
/// never 0 (0 means "not printed").
fn verdict_key(v: &Verdict) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one((v.kind.as_str(), v.reason.as_str()))
        | 1
}
