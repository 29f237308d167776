//! Userspace cost per event: decoding ring-buffer records and adding them to
//! the flow table, on one core, and the memory 100k flows take.
//! `cargo bench -p tracer --bench pipeline` prints figures (no timing
//! assertions: goals are judged from these numbers, in BENCHMARKS.md).
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use std::time::Instant;

use tracer::{model::event::decode, model::names::Names, model::table::FlowTable};
use tracer_common::{CtTuple, EventHeader, Hook, PacketEvent, PacketInfo, kind};

fn record(flow: u32, hop: u32) -> Vec<u8> {
    let mut pkt = PacketInfo::zeroed();
    pkt.family = 4;
    pkt.proto = 6;
    pkt.saddr[..4].copy_from_slice(&[10, 1, (flow >> 16) as u8, (flow >> 8) as u8]);
    pkt.daddr[..4].copy_from_slice(&[10, 96, 0, 10]);
    pkt.sport = 1024 + (flow & 0xff) as u16 + ((flow >> 8) & 0x3f) as u16 * 256;
    pkt.dport = 53;
    pkt.tcp_flags = 0x02;
    pkt.len = 60;
    let hooks = [Hook::Xmit, Hook::NetifReceive, Hook::TcIngress, Hook::Xmit];
    let ev = PacketEvent {
        hdr: EventHeader {
            kind: kind::PACKET,
            hook: hooks[(hop % 4) as usize] as u8,
            _pad: [0; 2],
            ifindex: 2 + hop % 3,
            netns: 4026531840 + hop % 3,
            cpu: 0,
            ts_ns: 1_000_000 + (flow as u64) * 1000 + hop as u64,
            skb: 0xffff_8880_0000_0000 + (flow as u64) * 0x100,
            ifname: *b"veth0\0\0\0\0\0\0\0\0\0\0\0",
        },
        pkt,
        location: 0,
        reason: 0,
        mark: 0,
        ct_orig: CtTuple::zeroed(),
        ct_reply: CtTuple::zeroed(),
    };
    // SAFETY: viewing a repr(C) plain struct as bytes, as the ring buffer does.
    unsafe {
        std::slice::from_raw_parts(
            (&raw const ev).cast::<u8>(),
            std::mem::size_of::<PacketEvent>(),
        )
    }
    .to_vec()
}

fn rss_kib(key: &str) -> u64 {
    tracer::node::procstat::self_status_kib(key).unwrap_or(0)
}

fn main() {
    let flows: u32 = std::env::var("BENCH_FLOWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let hops: u32 = 4;
    let records: Vec<Vec<u8>> = (0..flows)
        .flat_map(|f| (0..hops).map(move |h| record(f, h)))
        .collect();
    let mut names = Names::default();
    let rss0 = rss_kib("VmRSS:");

    // Decode only.
    let t = Instant::now();
    let mut n = 0u64;
    for r in &records {
        if decode(r).is_ok() {
            n += 1;
        }
    }
    let decode_s = t.elapsed().as_secs_f64();

    // Decode + flow table.
    let mut table = FlowTable::new(flows as usize);
    let t = Instant::now();
    for r in &records {
        if let Ok(ev) = decode(r) {
            table.ingest(&ev, &mut names);
        }
    }
    let ingest_s = t.elapsed().as_secs_f64();
    let rss1 = rss_kib("VmRSS:");
    println!("events: {n} ({flows} flows x {hops} hops)");
    println!(
        "decode only:          {:>10.0} events/s",
        n as f64 / decode_s
    );
    println!(
        "decode + flow table:  {:>10.0} events/s",
        n as f64 / ingest_s
    );
    println!("flows in table:       {}", table.len());
    println!(
        "memory for the flow table: {} KiB RSS ({} KiB before, {} KiB after; input records {} KiB)",
        rss1.saturating_sub(rss0),
        rss0,
        rss1,
        records.len() * records[0].len() / 1024
    );
    // Quiet flows are packed (tracer::model::frozen): what the table keeps of
    // 100k flows once their events are over.
    let t = Instant::now();
    table.pack_quiet(u64::MAX);
    let pack_s = t.elapsed().as_secs_f64();
    let (packed, bytes) = table.packed_size();
    // The unpacked flows' memory goes back to the system (in the tracer,
    // the next live flows reuse it instead).
    // SAFETY: malloc_trim only releases free heap memory. (musl's
    // allocator hands freed pages back by itself and has no malloc_trim.)
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
    let rss2 = rss_kib("VmRSS:");
    println!(
        "packed {packed} flows in {:.0} ms: {} bytes each on average; RSS {} KiB (over {} KiB before the table)",
        pack_s * 1000.0,
        bytes / packed.max(1),
        rss2,
        rss2.saturating_sub(rss0)
    );
    println!("peak RSS (VmHWM): {} KiB", rss_kib("VmHWM:"));
}
