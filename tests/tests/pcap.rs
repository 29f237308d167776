//! `--pcap FILE`: the followed packets' bytes as pcapng, read back by
//! Wireshark's tshark (which `cargo xtask setup` installs): one packet per
//! BYTES record the run captured, one interface per namespace and device,
//! the DNS the scenario sent, and each packet's flow and verdict.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::{SystemTime, UNIX_EPOCH},
};

use serde_json::Value;

/// `tshark -r FILE ARGS`: its stdout lines. tshark missing fails the test:
/// it is part of what `cargo xtask setup` installs.
fn tshark(file: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("tshark not runnable ({e}): install it with `cargo xtask setup` (Debian package tshark)")
        });
    assert!(
        out.status.success(),
        "tshark -r {} {args:?}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// One tab-separated line per packet with these fields.
fn fields(file: &Path, names: &[&str]) -> Vec<Vec<String>> {
    let mut args = vec!["-T", "fields", "-E", "separator=/t"];
    for n in names {
        args.extend(["-e", n]);
    }
    tshark(file, &args)
        .iter()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// Kind BYTES ring records in a recording (each one captured packet):
/// `TRACEREC`, a u16 version, then frames `tag u8, len u32 LE, payload`;
/// ring frames (tag 2) whose record starts with kind 6.
fn bytes_records(recording: &Path) -> usize {
    let data = std::fs::read(recording).expect("read recording");
    assert_eq!(&data[..8], b"TRACEREC");
    let (mut at, mut n) = (10, 0);
    while at + 5 <= data.len() {
        let len = u32::from_le_bytes(data[at + 1..at + 5].try_into().unwrap()) as usize;
        if data[at] == 2 && data.get(at + 5) == Some(&6) {
            n += 1;
        }
        at += 5 + len;
    }
    assert_eq!(at, data.len(), "recording frames");
    n
}

/// `tracer replay REC --pcap FILE -o json`: its summary's `pcap`.
fn replay_pcap(recording: &Path, pcap: &Path) -> Value {
    tracer_tests::replay::replay_json_with(recording, &["--pcap".as_ref(), pcap.as_os_str()])
        .into_iter()
        .find(|l| l["type"] == "summary")
        .expect("a summary line")["pcap"]
        .clone()
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tracer-pcap-{}-{name}.pcapng", std::process::id()))
}

/// Removes the files it names when dropped (a failed assertion included).
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The DNS questions and the RCODE of their answers, as tshark reads them.
fn assert_dns(file: &Path) {
    let dns: BTreeSet<(String, String)> = fields(file, &["dns.qry.name", "dns.flags.rcode"])
        .into_iter()
        .map(|f| (f[0].clone(), f.get(1).cloned().unwrap_or_default()))
        .collect();
    for (name, rcode) in [
        ("kubernetes.default.svc.cluster.local", "0"),
        ("nx.example.com", "3"),
    ] {
        assert!(
            dns.contains(&(name.to_string(), rcode.to_string())),
            "no answer {rcode} to {name} in {dns:?}"
        );
    }
    let names: BTreeSet<&str> = dns.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains("silent.example.com"), "{names:?}");
}

/// Every packet of the scenario's one flow says its hop, namespace, flow
/// and the flow's verdict; the interfaces are the client's and the
/// server's devices, each described with its namespace.
fn assert_interfaces_and_comments(file: &Path) {
    let rows = fields(
        file,
        &[
            "frame.interface_name",
            "frame.interface_description",
            "frame.comment",
        ],
    );
    let ifaces: BTreeSet<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(ifaces, BTreeSet::from(["c0", "s0"]), "{rows:?}");
    for r in &rows {
        let side = if r[0] == "c0" {
            "-client (inode "
        } else {
            "-server (inode "
        };
        assert!(r[1].starts_with("netns ") && r[1].contains(side), "{r:?}");
        assert!(
            r[2].contains(&format!("; {}; flow #", r[1]))
                && r[2].ends_with("; verdict: DELIVERED local_socket")
                && (r[2].starts_with("xmit ") || r[2].starts_with("tc_egress ")),
            "{r:?}"
        );
    }
}

#[test]
fn follow_writes_the_captured_packets_with_their_verdicts() {
    let live = temp("follow");
    let replayed = temp("follow-replayed");
    let _cleanup = Cleanup(vec![live.clone(), replayed.clone()]);
    let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let live_arg = live.display().to_string();
    let (mut captures, mut replay_summary) = (0, Value::Null);
    let Some((out, _)) =
        tracer_tests::trace_scenario_with("dns_queries", &["--pcap", &live_arg], &mut |rec| {
            captures = bytes_records(rec);
            replay_summary = replay_pcap(rec, &replayed);
        })
    else {
        return;
    };
    let dump = out.dump();
    let pcap = &out.summary().expect("summary")["pcap"];
    let packets = tshark(&live, &[]).len();
    eprintln!(
        "pcap: {captures} BYTES records, {packets} packets in the file, summary {pcap}, replay {replay_summary}"
    );
    assert!(captures > 0, "{dump}");
    assert_eq!(packets, captures, "{dump}");
    assert_eq!(pcap["packets"], captures, "{dump}");
    assert_eq!(pcap["interfaces"], 2, "{dump}");
    assert_eq!(pcap["dropped_over_cap"], 0, "{dump}");
    assert_eq!(pcap["file"], live_arg, "{dump}");
    assert_dns(&live);
    assert_interfaces_and_comments(&live);
    // Wall-clock times: within the run.
    let ended = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    for t in fields(&live, &["frame.time_epoch"]) {
        let t: f64 = t[0].parse().unwrap();
        assert!(
            t >= started.as_secs_f64() - 1.0 && t <= ended.as_secs_f64() + 1.0,
            "packet time {t} outside the run ({started:?}..{ended:?})"
        );
    }
    // The replay of the run's recording writes the same packets, at the
    // same times, on the same interfaces.
    assert_eq!(replay_summary["packets"], captures, "{replay_summary}");
    let same = [
        "frame.interface_name",
        "frame.interface_description",
        "frame.time_epoch",
        "frame.len",
        "frame.cap_len",
        "ip.src",
        "ip.dst",
        "ip.id",
        "dns.id",
        "frame.comment",
    ];
    let sorted = |f: &Path| {
        let mut v = fields(f, &same);
        v.sort();
        v
    };
    assert_eq!(sorted(&replayed), sorted(&live));
}

/// A committed recording (made before recordings kept the clock offset)
/// replays to the same packets: one per BYTES record, no root needed.
#[test]
fn replay_writes_the_recordings_packets() {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/dns_queries-6.18.rec");
    let file = temp("replay");
    let _cleanup = Cleanup(vec![file.clone()]);
    let pcap = replay_pcap(&rec, &file);
    let captures = bytes_records(&rec);
    let packets = tshark(&file, &[]).len();
    eprintln!("pcap: {captures} BYTES records, {packets} packets in the file, summary {pcap}");
    assert!(captures > 0);
    assert_eq!(packets, captures);
    assert_eq!(pcap["packets"], captures, "{pcap}");
    assert_eq!(pcap["interfaces"], 2, "{pcap}");
    assert_dns(&file);
    assert_interfaces_and_comments(&file);
}

/// Through a router that DNATs a Service address: the request's bytes are
/// captured before and after the DNAT, the reply's before and after its
/// reverse translation; the same query read twice is one sending.
#[test]
fn packets_are_captured_again_after_nat() {
    let file = temp("dnat");
    let _cleanup = Cleanup(vec![file.clone()]);
    let arg = file.display().to_string();
    let Some((out, _)) =
        tracer_tests::trace_scenario_with("dns_service_dnat", &["--pcap", &arg], &mut |_| {})
    else {
        return;
    };
    let dump = out.dump();
    let f = out.flow_to(53);
    let q = &f["dns"]["queries"][0];
    assert_eq!(
        (&q["rcode"], &q["sent"]),
        (&serde_json::json!("NOERROR"), &serde_json::json!(1)),
        "{dump}"
    );
    let seen: Vec<(String, String, String)> =
        fields(&file, &["ip.src", "ip.dst", "dns.flags.response"])
            .into_iter()
            .map(|v| (v[0].clone(), v[1].clone(), v[2].clone()))
            .collect();
    for (src, dst, response) in [
        ("10.252.1.2", "10.96.0.10", "False"),
        ("10.252.1.2", "10.252.2.2", "False"),
        ("10.252.2.2", "10.252.1.2", "True"),
        ("10.96.0.10", "10.252.1.2", "True"),
    ] {
        assert!(
            seen.iter().any(|(s, d, r)| s == src
                && d == dst
                && (r == response || r == if response == "True" { "1" } else { "0" })),
            "no {src} -> {dst} (response {response}) in {seen:?}\n{dump}"
        );
    }
}
