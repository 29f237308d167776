//! Recordings: `tracer follow --record FILE` writes the raw ring records
//! and the kernel's counted totals as they arrive, then, at the end, what
//! replaying them needs (name tables, the node facts the verdicts read,
//! the run's completeness and summary) and the verdicts it printed.
//! `tracer replay FILE` runs the same [`crate::run::pipeline::Pipeline`] over
//! it without root, BTF or a kernel.
//!
//! Layout: the magic `TRACEREC`, a u16 format version (little endian),
//! then frames of `tag: u8, len: u32 LE, payload`: one header (JSON), ring
//! records (raw bytes, as the kernel wrote them), counted polls (binary:
//! see [`Recorder::counted`]), printed marks (a flow `follow` printed as
//! settled: [`Recorder::printed`]; version 2 had ticks instead, when
//! `follow` looked for settled flows, still read), and one trailer (JSON)
//! last. A recording
//! without its trailer was cut short (tracer killed).

use std::{
    collections::BTreeMap,
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tracer_common::AggKey;

use crate::{
    node::conntrack::ConntrackTable,
    node::ipvs::VirtualService,
    node::link::LinkConf,
    node::netfilter::NfRule,
    node::nftrace::{NfTraced, TracedGoto},
    node::route::Routing,
    node::services::ServiceAddr,
    node::sockets::{Bound, ListenStats},
    output::Summary,
    output::files::{self, FileError, Overwrite},
    verdict::{AttachedProgram, Completeness, IfAddr, Inventory, Verdict},
};

pub const MAGIC: &[u8; 8] = b"TRACEREC";
/// Bumped when a reader of the previous version could not read it.
/// Version 2 added tick frames, version 3 printed frames.
pub const VERSION: u16 = 3;
/// The oldest version this tracer still reads (version 1 has no ticks:
/// its replay prints the final report only).
pub const MIN_VERSION: u16 = 1;

const TAG_HEADER: u8 = 1;
const TAG_RING: u8 = 2;
const TAG_COUNTED: u8 = 3;
const TAG_TRAILER: u8 = 4;
const TAG_TICK: u8 = 5;
const TAG_PRINTED: u8 = 6;

/// Bytes of one counted total: the key, the total (u64), the netns (u32).
const COUNTED_ITEM: usize = size_of::<AggKey>() + 8 + 4;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot write recording {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read recording {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A path refused: a symbolic link or an existing file to write (no
    /// --force), a FIFO, device or oversized file to read.
    #[error("recording")]
    Refused(#[source] FileError),
    #[error("{0} is not a tracer recording (no TRACEREC magic)")]
    NotARecording(PathBuf),
    #[error(
        "{path} is recording format version {found}; this tracer reads versions {MIN_VERSION} to {VERSION} (replay it with the tracer that recorded it)"
    )]
    Version { path: PathBuf, found: u16 },
    #[error(
        "{path} was cut short at byte {at} (the recording tracer stopped before it finished writing: killed?)"
    )]
    Truncated { path: PathBuf, at: usize },
    #[error("{path}: bad {what} at byte {at}: {why}")]
    Corrupt {
        path: PathBuf,
        what: &'static str,
        at: usize,
        why: String,
    },
}

/// What the run was asked, written first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub tracer_version: String,
    /// `uname -r` of the recording machine.
    pub kernel: String,
    pub target: String,
    pub proto: Option<String>,
    pub max_flows: usize,
    /// Wall clock at start, ms since the epoch.
    pub started_unix_ms: u64,
    /// `--dns-port`: a DNS port read besides 53 (absent before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_port: Option<u16>,
    /// The node's VXLAN ports beyond the overlay ports every tracer knows,
    /// which the kernel side followed packets into (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tunnel_ports: Vec<u16>,
    /// Wall clock minus the records' clock (bpf_ktime_get_ns(),
    /// CLOCK_MONOTONIC), ns: a record's `ts_ns` plus this is ns since the
    /// epoch (`--pcap`). Absent in recordings of tracers before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ktime_to_unix_ns: Option<i64>,
    /// The kernel's drop and reset reason names, known at start: what a
    /// recording cut short (no trailer) names drops with. Absent in
    /// recordings of tracers before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Reasons>,
}

/// The kernel's reason names (the trailer has them too).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reasons {
    pub drop: BTreeMap<u32, String>,
    pub rst: BTreeMap<u32, String>,
    pub no_drop_reason: bool,
}

/// What replay needs beyond the records, written last. A recording cut
/// short (tracer killed) has none: replay then reads its records with
/// the default, empty tables.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trailer {
    pub drop_reasons: BTreeMap<u32, String>,
    /// The recording kernel's skb:kfree_skb has no reason (before 5.17):
    /// replay infers them from the drop locations as `follow` did.
    #[serde(default)]
    pub no_drop_reason: bool,
    pub rst_reasons: BTreeMap<u32, String>,
    /// Namespace inode -> name, as the run named them.
    pub netns_names: BTreeMap<u32, String>,
    /// Namespace inode -> the pod owning it (`namespace/name`), where the
    /// run found one (absent in recordings of tracers before pods were
    /// named: replay then names none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub netns_pods: BTreeMap<u32, String>,
    /// Code address -> `function+0xoff`, every address the run named.
    pub locations: BTreeMap<u64, String>,
    pub facts: Facts,
    pub completeness: Completeness,
    pub summary: Summary,
    /// The final verdict of every flow, as `follow` printed it.
    pub verdicts: Vec<RecordedVerdict>,
}

/// The node facts the final report's verdicts read ([`Inventory`], in a
/// form JSON keeps), but for the owners of the followed address: those
/// are rebuilt from the summary's `vip` (owner changes and MACs).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Facts {
    pub addrs: BTreeMap<u32, Vec<IfAddr>>,
    pub nf_moved: BTreeMap<u32, Vec<(NfRule, u64)>>,
    pub tc_filters: Vec<(u32, String, Vec<String>)>,
    /// BPF programs of others on devices where packets were dropped at a
    /// tc or XDP hook (format 2; absent before they were read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dev_programs: Vec<(u32, String, Vec<AttachedProgram>)>,
    /// Cgroups of socket calls a program rewrote, with their programs
    /// (format 2; absent before they were read).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cgroups: BTreeMap<u64, crate::verdict::CgroupPrograms>,
    /// The node's cgroup_skb programs and the sockets' cgroups, where a
    /// cgroup program or socket filter dropped (format 2; absent before
    /// they were read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_skb: Option<crate::verdict::CgroupSkb>,
    /// The qdiscs of devices where a qdisc dropped (format 2; absent
    /// before they were read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qdiscs: Vec<(u32, String, Vec<crate::verdict::Qdisc>)>,
    /// IPsec policies and states where an XFRM policy dropped (format 2;
    /// absent before they were read).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub xfrm: BTreeMap<u32, crate::verdict::Xfrm>,
    /// net.ipv4.ipfrag_time where a reassembly timed out (format 2;
    /// absent before it was read).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub frag_time: BTreeMap<u32, u32>,
    /// Device maps' entries an XDP redirect went through (absent before
    /// they were read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devmaps: Vec<DevmapEntry>,
    pub ipvs: BTreeMap<u32, Vec<VirtualService>>,
    /// Devices' MTU and sysctls where packets were dropped (format 2).
    #[serde(default)]
    pub links: BTreeMap<u32, Vec<LinkConf>>,
    /// Bound sockets where packets were dropped (format 2).
    #[serde(default)]
    pub bound: BTreeMap<u32, Vec<Bound>>,
    /// Drops nf_tables tracing named, per namespace.
    #[serde(default)]
    pub nftrace: BTreeMap<u32, Vec<NfTraced>>,
    /// Gotos nf_tables tracing saw followed packets take, per namespace.
    #[serde(default)]
    pub nf_gotos: BTreeMap<u32, Vec<TracedGoto>>,
    /// Conntrack tables where packets were dropped by netfilter (format 2).
    #[serde(default)]
    pub conntrack: BTreeMap<u32, ConntrackTable>,
    /// Listen-queue counters where a SYN went unanswered (format 2).
    #[serde(default)]
    pub listen: BTreeMap<u32, ListenStats>,
    /// Routing rules and table sizes where a packet found no route
    /// (format 2).
    #[serde(default)]
    pub routing: BTreeMap<u32, Routing>,
    /// The addresses and ports kube-proxy serves Services on, in the
    /// namespaces flows crossed (format 2; absent before Services were
    /// named).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub services: BTreeMap<u32, Vec<ServiceAddr>>,
}

impl From<Inventory> for Facts {
    fn from(i: Inventory) -> Facts {
        let mut tc_filters: Vec<_> = i.tc.into_iter().map(|((n, d), v)| (n, d, v)).collect();
        tc_filters.sort();
        let mut dev_programs: Vec<_> = i
            .dev_programs
            .into_iter()
            .map(|((n, d), v)| (n, d, v))
            .collect();
        dev_programs.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut qdiscs: Vec<_> = i.qdiscs.into_iter().map(|((n, d), v)| (n, d, v)).collect();
        qdiscs.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        Facts {
            addrs: i.by_netns.into_iter().collect(),
            nf_moved: i.nf.into_iter().collect(),
            tc_filters,
            dev_programs,
            cgroups: i.cgroups.into_iter().collect(),
            cgroup_skb: i.cgroup_skb,
            qdiscs,
            xfrm: i.xfrm.into_iter().collect(),
            frag_time: i.frag_time.into_iter().collect(),
            devmaps: {
                let mut v: Vec<DevmapEntry> = i
                    .devmaps
                    .into_iter()
                    .map(|((map_id, key), ifindex)| DevmapEntry {
                        map_id,
                        key,
                        ifindex,
                    })
                    .collect();
                v.sort_by_key(|e| (e.map_id, e.key));
                v
            },
            ipvs: i.ipvs.into_iter().collect(),
            links: i.links.into_iter().collect(),
            bound: i.bound.into_iter().collect(),
            nftrace: i.nftrace.into_iter().collect(),
            nf_gotos: i.nf_gotos.into_iter().collect(),
            conntrack: i.conntrack.into_iter().collect(),
            listen: i.listen.into_iter().collect(),
            routing: i.routing.into_iter().collect(),
            services: i.services.into_iter().collect(),
        }
    }
}

impl From<Facts> for Inventory {
    fn from(f: Facts) -> Inventory {
        Inventory {
            by_netns: f.addrs.into_iter().collect(),
            nf: f.nf_moved.into_iter().collect(),
            tc: f
                .tc_filters
                .into_iter()
                .map(|(n, d, v)| ((n, d), v))
                .collect(),
            dev_programs: f
                .dev_programs
                .into_iter()
                .map(|(n, d, v)| ((n, d), v))
                .collect(),
            cgroups: f.cgroups.into_iter().collect(),
            cgroup_skb: f.cgroup_skb,
            qdiscs: f.qdiscs.into_iter().map(|(n, d, v)| ((n, d), v)).collect(),
            xfrm: f.xfrm.into_iter().collect(),
            frag_time: f.frag_time.into_iter().collect(),
            devmaps: f
                .devmaps
                .into_iter()
                .map(|e| ((e.map_id, e.key), e.ifindex))
                .collect(),
            facts: Default::default(),
            ipvs: f.ipvs.into_iter().collect(),
            links: f.links.into_iter().collect(),
            bound: f.bound.into_iter().collect(),
            nftrace: f.nftrace.into_iter().collect(),
            nf_gotos: f.nf_gotos.into_iter().collect(),
            conntrack: f.conntrack.into_iter().collect(),
            listen: f.listen.into_iter().collect(),
            routing: f.routing.into_iter().collect(),
            services: f.services.into_iter().collect(),
        }
    }
}

/// A device map's entry as read: map `map_id` held `ifindex` at `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevmapEntry {
    pub map_id: u32,
    pub key: u32,
    pub ifindex: u32,
}

/// A flow's final verdict, for the golden comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedVerdict {
    pub id: u64,
    pub kind: String,
    pub reason: String,
    #[serde(rename = "where")]
    pub where_: String,
}

impl RecordedVerdict {
    pub fn of(id: u64, v: &Verdict) -> RecordedVerdict {
        RecordedVerdict {
            id,
            kind: v.kind.as_str().to_string(),
            reason: v.reason.to_string(),
            where_: v.where_.clone(),
        }
    }
}

/// Writes a recording as the run goes. A write error is kept, further
/// writes are skipped, and [`Recorder::finish`] reports it: a full disk
/// must not stop the trace.
pub struct Recorder {
    path: PathBuf,
    out: BufWriter<File>,
    buf: BytesMut,
    error: Option<std::io::Error>,
    /// Bytes written so far.
    pub bytes: u64,
}

impl Recorder {
    /// Open `path` for a recording, before anything is attached: never
    /// through a symbolic link, an existing file replaced only as
    /// `overwrite` says.
    pub fn open_file(path: &Path, overwrite: Overwrite) -> Result<File, RecordError> {
        files::create(path, overwrite).map_err(|e| match e {
            FileError::Io { source, .. } => RecordError::Write {
                path: path.into(),
                source,
            },
            e => RecordError::Refused(e),
        })
    }

    /// A recording to `path` (replaced if there).
    pub fn create(path: &Path, header: &Header) -> Result<Recorder, RecordError> {
        Ok(Recorder::new(
            path,
            Recorder::open_file(path, Overwrite::Replace)?,
            header,
        ))
    }

    /// A recording to `file` (opened by [`Recorder::open_file`]), its
    /// header written first.
    pub fn new(path: &Path, file: File, header: &Header) -> Recorder {
        let mut r = Recorder {
            path: path.into(),
            out: BufWriter::with_capacity(1 << 16, file),
            buf: BytesMut::with_capacity(1 << 12),
            error: None,
            bytes: 0,
        };
        r.put(MAGIC);
        r.put(&VERSION.to_le_bytes());
        let json = serde_json::to_vec(header).expect("a header serializes");
        r.frame(TAG_HEADER, &json);
        r
    }

    fn put(&mut self, b: &[u8]) {
        if self.error.is_some() {
            return;
        }
        match self.out.write_all(b) {
            Ok(()) => self.bytes += b.len() as u64,
            Err(e) => self.error = Some(e),
        }
    }

    fn frame(&mut self, tag: u8, payload: &[u8]) {
        let mut head = [0u8; 5];
        head[0] = tag;
        head[1..].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        self.put(&head);
        self.put(payload);
    }

    /// One ring record, as read.
    pub fn ring(&mut self, record: &[u8]) {
        self.frame(TAG_RING, record);
    }

    /// One poll of counted totals: each item the key's bytes
    /// (`tracer_common::AggKey`, `#[repr(C)]`), the total (u64 LE) and the
    /// namespace inode (u32 LE).
    pub fn counted(&mut self, totals: &[(AggKey, u64, u32)]) {
        self.buf.clear();
        for (k, total, netns) in totals {
            self.buf.put_slice(agg_key_bytes(k));
            self.buf.put_u64_le(*total);
            self.buf.put_u32_le(*netns);
        }
        let payload = self.buf.split().freeze();
        self.frame(TAG_COUNTED, &payload);
    }

    /// `follow` printed flow `id` as settled, here in the record stream
    /// (u64 LE). Replay prints the same flows at the same points: judged
    /// again with the run's final facts, a flow's settledness can differ
    /// from what the facts of that moment gave (seen under emulation).
    pub fn printed(&mut self, id: u64) {
        self.frame(TAG_PRINTED, &id.to_le_bytes());
    }

    /// Hand what is buffered to the file (the live run calls this every
    /// tick): a tracer killed, even by SIGKILL, leaves a recording that
    /// holds every frame up to the last flush (replay reads it as cut
    /// short).
    pub fn flush(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.out.flush()
        {
            self.error = Some(e);
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The first write error, if any (the recording stopped there).
    pub fn failed(&self) -> Option<&std::io::Error> {
        self.error.as_ref()
    }

    /// Write the trailer and flush; the file is complete.
    pub fn finish(mut self, trailer: &Trailer) -> Result<u64, RecordError> {
        let json = serde_json::to_vec(trailer).expect("a trailer serializes");
        self.frame(TAG_TRAILER, &json);
        self.flush();
        match self.error {
            None => Ok(self.bytes),
            Some(source) => Err(RecordError::Write {
                path: self.path,
                source,
            }),
        }
    }
}

fn agg_key_bytes(k: &AggKey) -> &[u8] {
    // SAFETY: AggKey is #[repr(C)] plain data with explicit padding
    // fields (tracer-common's layout tests), so all its bytes are
    // initialised.
    unsafe {
        std::slice::from_raw_parts(
            std::ptr::from_ref::<AggKey>(k).cast::<u8>(),
            size_of::<AggKey>(),
        )
    }
}

/// What a recording feeds the pipeline, in the order it arrived.
#[derive(Debug, Clone)]
pub enum Frame {
    Ring(Bytes),
    Counted(Vec<(AggKey, u64, u32)>),
    /// Version 2: `follow` looked for the flows settled by `now_ns`
    /// (monotonic, u64 LE), and whether the target's owners had changed
    /// (u8). Version 3 writes printed frames instead.
    Tick {
        now_ns: u64,
        recheck: bool,
    },
    /// `follow` printed this flow as settled (version 3).
    Printed(u64),
}

/// A recording read whole.
#[derive(Debug)]
pub struct Recording {
    pub header: Header,
    pub frames: Vec<Frame>,
    /// The run's trailer; the default (empty tables, no facts) when the
    /// recording was cut short.
    pub trailer: Trailer,
    /// Where the recording ends without its trailer (the recording tracer
    /// was killed): the byte after its last whole frame.
    pub cut_short: Option<usize>,
}

impl Recording {
    pub fn open(path: &Path) -> Result<Recording, RecordError> {
        let data = files::read_input(path).map_err(|e| match e {
            FileError::Io { source, .. } => RecordError::Read {
                path: path.into(),
                source,
            },
            e => RecordError::Refused(e),
        })?;
        Recording::parse(path, Bytes::from(data))
    }

    pub fn parse(path: &Path, mut data: Bytes) -> Result<Recording, RecordError> {
        let total = data.len();
        if data.len() < MAGIC.len() || &data[..MAGIC.len()] != MAGIC {
            return Err(RecordError::NotARecording(path.into()));
        }
        data.advance(MAGIC.len());
        if data.remaining() < 2 {
            return Err(RecordError::Truncated {
                path: path.into(),
                at: total - data.remaining(),
            });
        }
        let found = data.get_u16_le();
        if !(MIN_VERSION..=VERSION).contains(&found) {
            return Err(RecordError::Version {
                path: path.into(),
                found,
            });
        }
        let corrupt = |what, at, why: String| RecordError::Corrupt {
            path: path.into(),
            what,
            at,
            why,
        };
        let (mut header, mut trailer, mut frames) = (None, None, Vec::new());
        let mut cut_short = None;
        while data.has_remaining() {
            let at = total - data.remaining();
            // A frame the file ends inside of: the recording tracer was
            // killed while writing (or before it flushed the rest).
            let whole = data.remaining() >= 5
                && data.remaining() - 5
                    >= u32::from_le_bytes(data[1..5].try_into().expect("4 bytes")) as usize;
            if !whole {
                cut_short = Some(at);
                break;
            }
            let tag = data.get_u8();
            let len = data.get_u32_le() as usize;
            let payload = data.split_to(len);
            match tag {
                TAG_HEADER => {
                    header = Some(
                        serde_json::from_slice(&payload)
                            .map_err(|e| corrupt("header", at, e.to_string()))?,
                    );
                }
                TAG_TRAILER => {
                    trailer = Some(
                        serde_json::from_slice(&payload)
                            .map_err(|e| corrupt("trailer", at, e.to_string()))?,
                    );
                }
                tag => {
                    frames.push(frame(tag, payload).map_err(|(what, why)| corrupt(what, at, why))?);
                }
            }
        }
        let Some(header) = header else {
            return Err(match cut_short {
                Some(at) => RecordError::Truncated {
                    path: path.into(),
                    at,
                },
                None => corrupt("header", 10, "missing".into()),
            });
        };
        // Frames after the trailer: not a recording this tracer wrote.
        let cut_short = match (&trailer, cut_short) {
            (None, None) => Some(total),
            (_, c) => c,
        };
        Ok(Recording {
            header,
            frames,
            trailer: trailer.unwrap_or_default(),
            cut_short,
        })
    }
}

/// A record-stream frame (ring record, counted poll, tick, printed mark)
/// from its tag and payload; else what is wrong with it.
fn frame(tag: u8, payload: Bytes) -> Result<Frame, (&'static str, String)> {
    let len = payload.len();
    Ok(match tag {
        TAG_RING => Frame::Ring(payload),
        TAG_COUNTED => {
            Frame::Counted(counted_items(&payload).map_err(|why| ("counted poll", why))?)
        }
        TAG_TICK => {
            let b: [u8; 9] = payload[..]
                .try_into()
                .map_err(|_| ("tick", format!("{len} bytes, not 9")))?;
            Frame::Tick {
                now_ns: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                recheck: b[8] != 0,
            }
        }
        TAG_PRINTED => {
            let b: [u8; 8] = payload[..]
                .try_into()
                .map_err(|_| ("printed", format!("{len} bytes, not 8")))?;
            Frame::Printed(u64::from_le_bytes(b))
        }
        other => return Err(("frame", format!("unknown tag {other}"))),
    })
}

fn counted_items(mut b: &[u8]) -> Result<Vec<(AggKey, u64, u32)>, String> {
    if !b.len().is_multiple_of(COUNTED_ITEM) {
        return Err(format!(
            "{} bytes is not a whole number of {COUNTED_ITEM}-byte items",
            b.len()
        ));
    }
    let mut v = Vec::with_capacity(b.len() / COUNTED_ITEM);
    while b.has_remaining() {
        // SAFETY: AggKey is #[repr(C)] plain integers: any bytes are a
        // valid value; read_unaligned copes with the buffer's alignment.
        let k = unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<AggKey>()) };
        b.advance(size_of::<AggKey>());
        let total = b.get_u64_le();
        let netns = b.get_u32_le();
        v.push((k, total, netns));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trailer() -> Trailer {
        Trailer {
            drop_reasons: BTreeMap::new(),
            no_drop_reason: false,
            rst_reasons: BTreeMap::new(),
            netns_names: BTreeMap::from([(7, "pod".to_string())]),
            netns_pods: BTreeMap::from([(7, "default/web-0".to_string())]),
            locations: BTreeMap::new(),
            facts: Facts::default(),
            completeness: Completeness::default(),
            summary: Summary::default(),
            verdicts: Vec::new(),
        }
    }

    /// A header written before the clock offset was kept still reads
    /// (replay then dates packets from the start time).
    #[test]
    fn headers_without_the_clock_offset_still_read() {
        let old = r#"{"tracer_version":"0.1.0","kernel":"6.18","target":"10.0.0.1:53","proto":null,"max_flows":10,"started_unix_ms":5}"#;
        let h: Header = serde_json::from_str(old).unwrap();
        assert_eq!((h.started_unix_ms, h.ktime_to_unix_ns), (5, None));
    }

    /// A trailer written before pods were named (no `netns_pods`) still
    /// reads: replay names no pod.
    #[test]
    fn trailers_without_pods_still_read() {
        let mut j = serde_json::to_value(trailer()).unwrap();
        assert_eq!(j["netns_pods"]["7"], "default/web-0");
        j.as_object_mut().unwrap().remove("netns_pods");
        let t: Trailer = serde_json::from_value(j).unwrap();
        assert!(t.netns_pods.is_empty());
        assert_eq!(t.netns_names[&7], "pod");
    }

    /// A recording without its trailer (the tracer killed after a flush),
    /// even one ending inside a frame, reads up to its last whole frame
    /// and says where it was cut; one cut before its header is refused.
    #[test]
    fn a_recording_cut_short_reads_up_to_its_last_whole_frame() {
        let path = std::env::temp_dir().join(format!("tracer-rec-cut-{}", std::process::id()));
        let mut header: Header = serde_json::from_str(
            r#"{"tracer_version":"t","kernel":"k","target":"10.0.0.1","proto":null,"max_flows":10,"started_unix_ms":5}"#,
        )
        .unwrap();
        header.dns_port = None;
        let mut r = Recorder::create(&path, &header).unwrap();
        r.ring(&[1, 2, 3]);
        r.printed(7);
        r.flush();
        let whole = std::fs::read(&path).unwrap();
        drop(r);
        let rec = Recording::parse(&path, Bytes::from(whole.clone())).unwrap();
        assert_eq!(rec.frames.len(), 2);
        assert_eq!(rec.cut_short, Some(whole.len()));
        assert!(rec.trailer.verdicts.is_empty());
        let rec = Recording::parse(&path, Bytes::from(whole[..whole.len() - 3].to_vec())).unwrap();
        assert_eq!(rec.frames.len(), 1);
        assert_eq!(rec.cut_short, Some(whole.len() - 13));
        let e = Recording::parse(&path, Bytes::from(whole[..14].to_vec())).unwrap_err();
        assert!(matches!(e, RecordError::Truncated { at: 10, .. }), "{e}");
        let _ = std::fs::remove_file(&path);
    }

    /// Every frame kind comes back as written, in order; a version-1 file
    /// (no ticks) is still read, a future version is refused.
    #[test]
    fn frames_round_trip() {
        let path = std::env::temp_dir().join(format!("tracer-rec-unit-{}", std::process::id()));
        let header = Header {
            tracer_version: "t".into(),
            kernel: "k".into(),
            target: "10.0.0.1:53".into(),
            proto: None,
            max_flows: 10,
            started_unix_ms: 1,
            dns_port: Some(5353),
            tunnel_ports: vec![4799],
            ktime_to_unix_ns: Some(-5),
            reasons: None,
        };
        let mut r = Recorder::create(&path, &header).unwrap();
        // Tick frames as version 2 wrote them (u64 LE time, u8 recheck).
        let tick = |r: &mut Recorder, now: u64, recheck: bool| {
            let mut b = now.to_le_bytes().to_vec();
            b.push(u8::from(recheck));
            r.frame(TAG_TICK, &b);
        };
        r.ring(&[1, 2, 3]);
        tick(&mut r, 42, true);
        r.printed(7);
        r.counted(&[]);
        tick(&mut r, 43, false);
        r.finish(&trailer()).unwrap();
        let mut data = std::fs::read(&path).unwrap();
        let rec = Recording::parse(&path, Bytes::from(data.clone())).unwrap();
        assert_eq!(rec.cut_short, None);
        let kinds: Vec<String> = rec
            .frames
            .iter()
            .map(|f| match f {
                Frame::Ring(b) => format!("ring {b:?}"),
                Frame::Counted(t) => format!("counted {}", t.len()),
                Frame::Tick { now_ns, recheck } => format!("tick {now_ns} {recheck}"),
                Frame::Printed(id) => format!("printed {id}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "ring b\"\\x01\\x02\\x03\"",
                "tick 42 true",
                "printed 7",
                "counted 0",
                "tick 43 false"
            ]
        );
        assert_eq!(rec.trailer.netns_names[&7], "pod");
        assert_eq!(rec.trailer.netns_pods[&7], "default/web-0");
        assert_eq!(rec.header.ktime_to_unix_ns, Some(-5));
        data[8..10].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let e = Recording::parse(&path, Bytes::from(data)).unwrap_err();
        assert!(matches!(e, RecordError::Version { .. }), "{e}");
        let _ = std::fs::remove_file(&path);
    }
}
