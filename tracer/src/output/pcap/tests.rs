use std::fs::File;

use pcap_file::pcapng::{Block, PcapNgReader};

use super::*;

fn packet(flow: Option<u64>, netns: u32, dev: &str, ts: u64) -> Captured {
    // An IPv4 header saying 84 bytes, of which 20 are captured.
    let mut data = vec![0x45, 0, 0, 84];
    data.resize(20, 0);
    Captured {
        flow,
        hook: "tc_ingress",
        reply: ts % 2 == 1,
        netns,
        netns_name: format!("ns{netns}"),
        dev: dev.into(),
        ts_unix_ns: ts,
        len: 84,
        data,
    }
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tracer-pcap-{name}-{}.pcapng", std::process::id()))
}

/// The interfaces (name, description, tsresol) and packets (interface,
/// ns, original length, comment) the file holds, read with pcap-file.
#[allow(clippy::type_complexity)]
fn read_back(path: &Path) -> (Vec<(String, String, u8)>, Vec<(u32, u128, u32, String)>) {
    let mut r = PcapNgReader::new(File::open(path).unwrap()).unwrap();
    let (mut ifs, mut pkts) = (Vec::new(), Vec::new());
    while let Some(b) = r.next_block() {
        match b.unwrap() {
            Block::InterfaceDescription(i) => {
                assert_eq!(i.linktype, DataLink::RAW);
                let (mut name, mut desc, mut res) = (String::new(), String::new(), 0);
                for o in i.options {
                    match o {
                        InterfaceDescriptionOption::IfName(n) => name = n.into_owned(),
                        InterfaceDescriptionOption::IfDescription(d) => desc = d.into_owned(),
                        InterfaceDescriptionOption::IfTsResol(t) => res = t,
                        _ => {}
                    }
                }
                ifs.push((name, desc, res));
            }
            Block::EnhancedPacket(p) => {
                let [EnhancedPacketOption::Comment(c)] = &p.options[..] else {
                    panic!("one comment: {:?}", p.options);
                };
                assert_eq!(p.data.len(), 20);
                pkts.push((
                    p.interface_id,
                    p.timestamp.as_nanos(),
                    p.original_len,
                    c.to_string(),
                ));
            }
            other => panic!("unexpected block {other:?}"),
        }
    }
    (ifs, pkts)
}

/// Packets go out when their flow is printed, with its verdict; those of
/// flows never printed (and of no flow) at the end; one interface per
/// (namespace, device).
#[test]
fn round_trip_interfaces_packets_and_comments() {
    let path = temp("round");
    let mut w = PcapWriter::create(&path, 1 << 20, Overwrite::Replace).unwrap();
    w.hold(packet(Some(1), 7, "eth0", 1_000));
    w.hold(packet(Some(2), 7, "eth0", 2_000));
    w.hold(packet(Some(1), 8, "veth1", 1_001));
    w.hold(packet(None, 8, "", 3_000));
    // Namespace 8 is a pod's: named with it.
    let pods: PodNames = [(8, "shop/web-0".to_string())].into_iter().collect();
    w.flow_printed(1, "DELIVERED local_socket", &pods);
    // A flow printed again with nothing new held writes nothing.
    w.flow_printed(1, "DELIVERED local_socket", &pods);
    let (summary, result) = w.finish();
    result.unwrap();
    assert_eq!(
        summary,
        PcapSummary {
            file: path.display().to_string(),
            packets: 4,
            interfaces: 3,
            dropped_over_cap: 0,
        }
    );
    let (ifs, pkts) = read_back(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        ifs,
        [
            ("eth0".into(), "netns ns7 (inode 7)".into(), 9),
            (
                "veth1".into(),
                "pod shop/web-0, netns ns8 (inode 8)".into(),
                9
            ),
            ("-".into(), "pod shop/web-0, netns ns8 (inode 8)".into(), 9),
        ]
    );
    let comments: Vec<(u32, u128, u32, &str)> = pkts
        .iter()
        .map(|(i, t, l, c)| (*i, *t, *l, c.as_str()))
        .collect();
    assert_eq!(
        comments,
        [
            (
                0,
                1_000,
                84,
                "tc_ingress request; netns ns7 (inode 7); flow #1; verdict: DELIVERED local_socket"
            ),
            (
                1,
                1_001,
                84,
                "tc_ingress reply; pod shop/web-0, netns ns8 (inode 8); flow #1; verdict: DELIVERED local_socket"
            ),
            (
                2,
                3_000,
                84,
                "tc_ingress request; pod shop/web-0, netns ns8 (inode 8); no flow; verdict: no verdict"
            ),
            (
                0,
                2_000,
                84,
                "tc_ingress request; netns ns7 (inode 7); flow #2; verdict: no verdict"
            ),
        ]
    );
}

/// Past the cap, packets are counted and not written; the file stays
/// within the cap and readable.
#[test]
fn the_cap_bounds_the_file_and_keeps_it_valid() {
    let path = temp("cap");
    let cap = 1024;
    let mut w = PcapWriter::create(&path, cap, Overwrite::Replace).unwrap();
    for i in 0..20 {
        w.hold(packet(Some(i % 3), 7, "eth0", i));
    }
    assert!(w.held_bytes + w.written_bytes <= cap);
    w.flow_printed(0, "DROPPED NETFILTER_DROP", &PodNames::default());
    let (summary, result) = w.finish();
    result.unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let (ifs, pkts) = read_back(&path);
    let _ = std::fs::remove_file(&path);
    assert!(size <= cap, "{size} bytes");
    assert_eq!(ifs.len(), 1);
    assert_eq!(pkts.len() as u64, summary.packets);
    assert!(
        summary.packets > 0 && summary.dropped_over_cap > 0,
        "{summary:?}"
    );
    assert_eq!(summary.packets + summary.dropped_over_cap, 20);
}

#[test]
fn an_unwritable_path_is_an_error() {
    let e = PcapWriter::create(
        Path::new("/nonexistent/dir/x.pcapng"),
        1 << 20,
        Overwrite::Replace,
    )
    .err()
    .unwrap();
    assert_eq!(
        crate::kernel::error_chain(&e),
        "cannot write pcap file /nonexistent/dir/x.pcapng: No such file or directory (os error 2)"
    );
}

#[test]
fn block_sizes_are_what_is_written() {
    let path = temp("sizes");
    let mut w = PcapWriter::create(&path, 1 << 20, Overwrite::Replace).unwrap();
    w.hold(packet(Some(1), 7, "eth0", 5));
    w.hold(packet(Some(1), 7, "eth0", 6));
    w.flow_printed(1, "FORWARDED routed", &PodNames::default());
    let written = w.written_bytes;
    assert_eq!(w.held_bytes, 0);
    w.finish().1.unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let _ = std::fs::remove_file(&path);
    assert_eq!(written, size);
}
