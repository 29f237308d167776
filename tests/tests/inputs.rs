//! What tracer reads is checked before it is read: `replay` and `merge`
//! take bounded regular files (a device, a FIFO or a huge file is one
//! line and exit 2, at once), `--netns` only network namespaces; a
//! closed stdout ends a run cleanly; and mutated recordings and JSON
//! never make replay or merge panic (a bounded fuzz loop, fixed seed).

use std::{
    io::Write,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tracer_tests::{
    require_privileges, scenarios,
    tracer::{TracerRun, tracer_bin},
};

const RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/recordings/tcp_closed_port-6.18.rec"
);

/// A directory of this test, removed on drop.
fn dir(name: &str) -> tracer_tests::scenarios::ScratchDir {
    tracer_tests::scenarios::ScratchDir::new(name).expect("scratch dir")
}

/// Run tracer with `args`, killed after `limit`: (exit code, stdout,
/// stderr); a run still going at the limit fails the test.
fn run_within(args: &[&str], limit: Duration) -> (i32, String, String) {
    let mut child = Command::new(tracer_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tracer {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        err,
    )
}

/// A refusal: exit 2, one error line holding `needle` (clap adds a
/// hint to its own), at once.
fn refused(args: &[&str], needle: &str) {
    let (code, _, err) = run_within(args, Duration::from_secs(5));
    assert_eq!(code, 2, "{args:?}: {err}");
    assert_eq!(
        err.lines().filter(|l| l.contains("error")).count(),
        1,
        "{args:?}: {err}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: expected {needle:?} in {err}"
    );
}

/// A recording of a run that named its node and clock.
const NODE_RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/recordings/conntrack_snat_clash-6.18.rec"
);

/// One node's JSON (`replay -o json` of a recording that names its node).
fn node_json(dir: &tracer_tests::scenarios::ScratchDir) -> String {
    let (code, out, err) = run_within(
        &["replay", NODE_RECORDING, "-o", "json"],
        Duration::from_secs(10),
    );
    assert_eq!(code, 0, "{err}");
    let p = dir.at("node.json");
    std::fs::write(&p, out).unwrap();
    p
}

#[test]
fn devices_fifos_and_huge_files_are_refused_at_once() {
    let dir = dir("inputs");
    let json = node_json(&dir);
    let fifo = dir.at("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let huge = dir.at("huge");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    refused(
        &["replay", "/dev/zero"],
        "a character device, not a regular file",
    );
    refused(&["replay", &fifo], "a FIFO, not a regular file");
    refused(&["replay", &huge], "more than tracer reads");
    refused(&["merge", &json, "/dev/zero"], "a character device");
    refused(&["merge", &json, &fifo], "a FIFO");
    refused(&["merge", &json, &huge], "more than tracer reads");
}

/// `--netns` takes network namespaces only; a bad target, `--count 0`
/// and `--max-flows 0` are usage errors (exit 2). Checked before the
/// privilege check, so unprivileged too.
#[test]
fn bad_arguments_are_usage_errors() {
    for spec in ["/etc/passwd", "/dev/null", "/proc/self/ns/mnt"] {
        refused(
            &["follow", "10.0.0.1", "--netns", spec],
            "is not a network namespace",
        );
    }
    refused(&["follow", "10.0.0.1", "--netns", ""], "an empty --netns");
    refused(&["follow", "10.0.0.300"], "not an IPv4/IPv6 address");
    refused(&["follow", "10.0.0.1", "--count", "0"], "--count");
    refused(
        &["follow", "10.0.0.1", "--max-flows", "0"],
        "bad flow count '0'",
    );
}

/// merge refuses a wall-clock time it would wrap when correcting it.
#[test]
fn merge_refuses_out_of_range_times() {
    let dir = dir("merge-range");
    let json = node_json(&dir);
    let text = std::fs::read_to_string(&json).unwrap();
    let (head, tail) = text.split_once("\"unix_ns\":").expect("a dated hop");
    let rest = &tail[tail.find(',').unwrap()..];
    let bad = dir.at("bad.json");
    std::fs::write(&bad, format!("{head}\"unix_ns\":9223372036854775807{rest}")).unwrap();
    let other = dir.at("other.json");
    std::fs::write(&other, text.replace("\"node\":\"", "\"node\":\"x")).unwrap();
    refused(&["merge", &other, &bad], "out of range");
}

/// The same namespace named twice is traced once (no `File exists` from tc).
#[test]
fn a_namespace_named_twice_is_traced_once() {
    if !require_privileges("a_namespace_named_twice_is_traced_once") {
        return;
    }
    let sc = scenarios::build("tcp_closed_port").unwrap();
    let server = sc.ns("server").name.clone();
    let path = sc.ns("server").path();
    // Twice by name (a tcx link of the same program twice on a device is
    // refused: EEXIST), once more by path.
    let run = TracerRun::start(
        &sc.target,
        &["--netns", &server, "--netns", &server, "--netns", &path],
    )
    .unwrap();
    let out = run.stop().unwrap();
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.dump());
    assert!(!out.stderr.contains("exists"), "{}", out.stderr);
    assert!(!out.stderr.contains("warning: tc on"), "{}", out.stderr);
    assert!(
        out.stderr.contains("in 1 namespace(s)"),
        "traced once: {}",
        out.stderr
    );
}

/// `--record /dev/full`: the warning names the OS error.
#[test]
fn a_full_disk_warning_says_why() {
    if !require_privileges("a_full_disk_warning_says_why") {
        return;
    }
    let run = TracerRun::start(
        "10.0.0.1",
        &["--record", "/dev/full", "--duration", "300ms"],
    )
    .unwrap();
    let out = run.stop().unwrap();
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.dump());
    assert!(
        out.stderr.contains("No space left on device"),
        "{}",
        out.stderr
    );
}

/// A reader that goes away (`tracer follow ... | head -1`) ends the run
/// as SIGTERM does, once tracer next writes.
#[test]
fn a_closed_stdout_ends_the_run() {
    if !require_privileges("a_closed_stdout_ends_the_run") {
        return;
    }
    let sc = scenarios::build("tcp_closed_port").unwrap();
    let dir = dir("epipe");
    let ready = dir.at("ready");
    let mut child = Command::new(tracer_bin())
        .args(["follow", &sc.target, "--ready-file", &ready])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let t0 = Instant::now();
    while !std::path::Path::new(&ready).exists() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    sc.traffic().unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ended = child.try_wait().unwrap();
    if ended.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        ended.is_some(),
        "still running with its stdout closed: {err}"
    );
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!std::path::Path::new(&ready).exists(), "{err}");
}

/// A small deterministic generator (xorshift64*), so that a failure
/// replays with the same mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `data` cut, with bytes flipped, or with a frame length made huge.
fn mutate(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
    let mut d = data.to_vec();
    match rng.below(4) {
        0 => d.truncate(rng.below(d.len())),
        1 => {
            for _ in 0..=rng.below(8) {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
        }
        2 => {
            let i = rng.below(d.len().saturating_sub(4));
            d[i..i + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        }
        _ => {
            let i = rng.below(d.len());
            let n = rng.below(64).min(d.len() - i);
            d.drain(i..i + n);
        }
    }
    d
}

/// Mutated copies of a real recording (replay) and of a node's JSON
/// (merge), for a few seconds with a fixed seed: never a panic, and a
/// refusal is one line.
#[test]
fn mutated_inputs_never_panic() {
    let dir = dir("fuzz");
    let json = node_json(&dir);
    let rec = std::fs::read(RECORDING).unwrap();
    let text = std::fs::read(&json).unwrap();
    let other = dir.at("other.json");
    std::fs::write(
        &other,
        String::from_utf8_lossy(&text).replace("\"node\":\"", "\"node\":\"x"),
    )
    .unwrap();
    let mut rng = Rng(0x7ace_2026);
    let t0 = Instant::now();
    let mut runs = 0;
    while t0.elapsed() < Duration::from_secs(4) {
        let (input, args): (&[u8], Vec<String>) = if runs % 2 == 0 {
            (&rec, vec!["replay".into()])
        } else {
            (&text, vec!["merge".into(), other.clone()])
        };
        let path = dir.at(&format!("m{runs}"));
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&mutate(&mut rng, input))
            .unwrap();
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.push(&path);
        let (code, _, err) = run_within(&args, Duration::from_secs(10));
        if code != 0 {
            assert_eq!(err.lines().count(), 1, "run {runs} {args:?}: {err}");
            assert!(err.starts_with("tracer: error: "), "run {runs}: {err}");
        }
        let _ = std::fs::remove_file(&path);
        runs += 1;
    }
    assert!(runs >= 10, "only {runs} runs");
}
