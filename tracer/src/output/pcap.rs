//! `--pcap FILE`: the followed packets' captured bytes as pcapng, for
//! Wireshark. One Interface Description Block per (namespace, device)
//! (raw IP link type: the bytes start at the IP header; nanosecond
//! timestamps), one Enhanced Packet Block per packet and hop where its
//! bytes were captured, commented with the hop, the namespace, the flow
//! and the flow's verdict.
//!
//! Streaming and bounded: a packet is held until its flow is printed
//! (settled, or in the final report), then written with that verdict;
//! packets of flows never printed are written at the end with "no
//! verdict". Held and written bytes together stay within `max_bytes`:
//! past it, packets are counted, not written, and the file stays valid.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    time::Duration,
};

use pcap_file::{
    DataLink,
    pcapng::{
        PcapNgWriter,
        blocks::{
            enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption},
            interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption},
        },
    },
};

use crate::{
    model::{capture::Captured, names::PodNames},
    output::files::{self, FileError, Overwrite},
    output::summary::PcapSummary,
};

/// if_tsresol 9: timestamps in nanoseconds (what pcap-file writes).
const TSRESOL_NS: u8 = 9;
/// The longest verdict text in a comment (a kind and a reason are far
/// shorter): what a held packet's size is reckoned with.
const VERDICT_MAX: usize = 96;

#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("cannot write pcap file {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A path refused (a symbolic link, an existing file without --force).
    #[error("pcap file")]
    Refused(#[source] FileError),
}

/// Writes the pcapng file as flows are printed.
pub struct PcapWriter {
    path: PathBuf,
    out: PcapNgWriter<BufWriter<File>>,
    /// (netns inode, device) -> interface id.
    interfaces: HashMap<(u32, String), u32>,
    /// Packets waiting for their flow's verdict, by flow (`None`: no flow).
    held: BTreeMap<Option<u64>, Vec<Captured>>,
    held_bytes: u64,
    written_bytes: u64,
    max_bytes: u64,
    packets: u64,
    dropped: u64,
    /// The first write error; nothing is written after it.
    error: Option<std::io::Error>,
    /// The pods that own namespaces, as of the last flow printed: named
    /// in packet comments and interface descriptions.
    pods: PodNames,
}

impl PcapWriter {
    /// Create `path` (its section header written at once, so an unwritable
    /// path fails here) holding at most `max_bytes`; an existing file is
    /// replaced only as `overwrite` says, a symbolic link never followed.
    pub fn create(
        path: &Path,
        max_bytes: u64,
        overwrite: Overwrite,
    ) -> Result<PcapWriter, PcapError> {
        let err = |source| PcapError::Write {
            path: path.into(),
            source,
        };
        let file = files::create(path, overwrite).map_err(|e| match e {
            FileError::Io { source, .. } => err(source),
            e => PcapError::Refused(e),
        })?;
        let out = PcapNgWriter::new(BufWriter::with_capacity(1 << 16, file))
            .map_err(|e| err(io_error(e)))?;
        Ok(PcapWriter {
            path: path.into(),
            out,
            interfaces: HashMap::new(),
            held: BTreeMap::new(),
            held_bytes: 0,
            // The section header block (28 bytes, no options).
            written_bytes: 28,
            max_bytes,
            packets: 0,
            dropped: 0,
            error: None,
            pods: PodNames::default(),
        })
    }

    /// Hold a packet until its flow is printed; counted, not held, once
    /// the file would outgrow its cap.
    pub fn hold(&mut self, p: Captured) {
        let size = held_size(&p);
        if self.written_bytes + self.held_bytes + size > self.max_bytes {
            self.over_cap();
            return;
        }
        self.held_bytes += size;
        self.held.entry(p.flow).or_default().push(p);
    }

    /// Flow `id` was printed with this verdict: its held packets go out
    /// (their namespaces named by the pods that own them, where known).
    pub fn flow_printed(&mut self, id: u64, verdict: &str, pods: &PodNames) {
        if pods.len() != self.pods.len() {
            self.pods = pods.clone();
        }
        if let Some(packets) = self.held.remove(&Some(id)) {
            self.write_all(packets, verdict);
        }
    }

    /// Hand what is written to the file (the live run calls this every
    /// tick): a killed tracer leaves the packets of the flows it printed.
    pub fn flush(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.out.get_mut().flush()
        {
            self.error = Some(e);
        }
    }

    /// Write what is still held ("no verdict"), flush, and say what the
    /// file holds.
    pub fn finish(mut self) -> (PcapSummary, Result<(), PcapError>) {
        for packets in std::mem::take(&mut self.held).into_values() {
            self.write_all(packets, "no verdict");
        }
        self.flush();
        let summary = PcapSummary {
            file: self.path.display().to_string(),
            packets: self.packets,
            interfaces: self.interfaces.len(),
            dropped_over_cap: self.dropped,
        };
        let result = match self.error {
            None => Ok(()),
            Some(source) => Err(PcapError::Write {
                path: self.path,
                source,
            }),
        };
        (summary, result)
    }

    fn over_cap(&mut self) {
        if self.dropped == 0 {
            crate::output::diag::warn(&format!(
                "pcap: {} reached --pcap-max-mb ({} MiB with the packets held for flows not yet printed): \
                 no more packets are written to it; it stays a valid pcapng file",
                self.path.display(),
                self.max_bytes >> 20
            ));
        }
        self.dropped += 1;
    }

    fn write_all(&mut self, packets: Vec<Captured>, verdict: &str) {
        let verdict = truncated(verdict, VERDICT_MAX);
        for p in packets {
            let text = comment(&p, verdict, self.pods.get(p.netns));
            self.held_bytes -= held_size(&p);
            self.write(&p, text);
        }
    }

    fn write(&mut self, p: &Captured, comment: String) {
        if self.error.is_some() {
            return;
        }
        let key = (p.netns, p.dev.clone());
        let new_if = if self.interfaces.contains_key(&key) {
            None
        } else {
            Some(interface(p, self.pods.get(p.netns)))
        };
        let size = epb_size(p.data.len(), comment.len()) + new_if.as_ref().map_or(0, idb_size);
        if self.written_bytes + size > self.max_bytes {
            self.over_cap();
            return;
        }
        let r = (|| {
            if let Some((block, _)) = new_if {
                self.out.write_pcapng_block(block)?;
                self.interfaces
                    .insert(key.clone(), self.interfaces.len() as u32);
            }
            self.out.write_pcapng_block(EnhancedPacketBlock {
                interface_id: self.interfaces[&key],
                timestamp: Duration::from_nanos(p.ts_unix_ns),
                original_len: p.len,
                data: Cow::Borrowed(&p.data),
                options: vec![EnhancedPacketOption::Comment(Cow::Owned(comment))],
            })
        })();
        match r {
            Ok(_) => {
                self.written_bytes += size;
                self.packets += 1;
            }
            Err(e) => self.error = Some(io_error(e)),
        }
    }
}

/// The packet's comment: the hop, its namespace (and the pod that owns
/// it), its flow and `verdict`.
fn comment(p: &Captured, verdict: &str, pod: Option<&str>) -> String {
    let flow = p
        .flow
        .map_or_else(|| "no flow".to_string(), |id| format!("flow #{id}"));
    format!(
        "{} {}; {}; {flow}; verdict: {verdict}",
        p.hook,
        if p.reply { "reply" } else { "request" },
        netns_desc(p, pod),
    )
}

/// `pod shop/web-0, netns cni-1234 (inode 4026532000)`, or without the
/// pod.
fn netns_desc(p: &Captured, pod: Option<&str>) -> String {
    let pod = pod.map(|n| format!("pod {n}, ")).unwrap_or_default();
    format!("{pod}netns {} (inode {})", p.netns_name, p.netns)
}

/// The IDB of a packet's (namespace, device), and its size.
fn interface(
    p: &Captured,
    pod: Option<&str>,
) -> (InterfaceDescriptionBlock<'static>, (usize, usize)) {
    let name = if p.dev.is_empty() { "-" } else { &p.dev }.to_string();
    let desc = netns_desc(p, pod);
    let lens = (name.len(), desc.len());
    let block = InterfaceDescriptionBlock {
        linktype: DataLink::RAW,
        snaplen: tracer_common::SNAP_MAX as u32,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Owned(name)),
            InterfaceDescriptionOption::IfDescription(Cow::Owned(desc)),
            InterfaceDescriptionOption::IfTsResol(TSRESOL_NS),
        ],
    };
    (block, lens)
}

/// What a held packet is reckoned to take once written: its EPB with the
/// longest verdict in its comment.
fn held_size(p: &Captured) -> u64 {
    epb_size(p.data.len(), comment(p, "", None).len() + VERDICT_MAX)
}

fn pad4(n: usize) -> u64 {
    n.div_ceil(4) as u64 * 4
}

/// Bytes of an EPB with `data` bytes and one comment of `comment` bytes:
/// block header and trailer (12), the fixed fields (20), the data padded,
/// the comment option (4 + padded) and the end of options (4).
fn epb_size(data: usize, comment: usize) -> u64 {
    12 + 20 + pad4(data) + 4 + pad4(comment) + 4
}

/// Bytes of an IDB with if_name, if_description and if_tsresol.
fn idb_size((_, (name, desc)): &(InterfaceDescriptionBlock<'static>, (usize, usize))) -> u64 {
    12 + 8 + (4 + pad4(*name)) + (4 + pad4(*desc)) + (4 + 4) + 4
}

fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn io_error(e: pcap_file::PcapError) -> std::io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        other => std::io::Error::other(other),
    }
}

#[cfg(test)]
mod tests;
