//! What tracer writes survives any death and goes only where it was
//! asked: recordings and pcaps are streamed (flushed every tick), so a
//! SIGKILLed run leaves a replayable recording; SIGHUP ends a run as
//! SIGTERM does; output paths are never followed through a symbolic link,
//! an existing file is not replaced without --force, the ready file is a
//! new file of tracer's own, and one path cannot take two outputs.

use std::{path::Path, process::Command, time::Duration};

use tracer_tests::{
    require_privileges, scenarios,
    tracer::{TracerRun, tracer_bin},
};

/// A directory of this test, removed on drop.
fn dir(name: &str) -> tracer_tests::scenarios::ScratchDir {
    tracer_tests::scenarios::ScratchDir::new(name).expect("scratch dir")
}

/// `tracer replay FILE`: exit code, stdout, stderr.
fn replay(file: &str) -> (i32, String, String) {
    let out = Command::new(tracer_bin())
        .args(["replay", file])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// SIGKILL cannot be handled: what was flushed (every tick) stays, and
/// replay shows the flows it holds and says the recording was cut short.
#[test]
fn sigkill_leaves_a_replayable_recording_and_pcap() {
    if !require_privileges("sigkill_leaves_a_replayable_recording_and_pcap") {
        return;
    }
    let dir = dir("sigkill");
    let (rec, pcap) = (dir.at("run.rec"), dir.at("run.pcapng"));
    let sc = scenarios::build("tcp_closed_port").unwrap();
    let run = TracerRun::start(&sc.target, &["--record", &rec, "--pcap", &pcap]).unwrap();
    sc.traffic().unwrap();
    // The flow settles (500 ms quiet), is printed, and the next tick
    // flushes both files.
    std::thread::sleep(Duration::from_millis(1500));
    run.signal(libc::SIGKILL);
    drop(run);
    assert!(
        std::fs::metadata(&pcap).unwrap().len() > 28,
        "the pcap holds no packet after SIGKILL"
    );
    let (code, out, err) = replay(&rec);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("flow #1 tcp") && out.contains("NO_SOCKET"),
        "replay shows no flow: {out}\n{err}"
    );
    let cut: Vec<&str> = err.lines().filter(|l| l.contains("cut short")).collect();
    assert_eq!(cut.len(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// SIGHUP (a closed terminal) ends the run as SIGTERM does: detached,
/// the recording finished, the ready file removed, exit 0.
#[test]
fn sighup_ends_the_run_cleanly() {
    if !require_privileges("sighup_ends_the_run_cleanly") {
        return;
    }
    let dir = dir("sighup");
    let rec = dir.at("run.rec");
    let sc = scenarios::build("tcp_closed_port").unwrap();
    let server = sc.ns("server").name.clone();
    let mut run = TracerRun::start(
        &sc.target,
        &[
            "--record",
            &rec,
            "--netns",
            &server,
            "--tc-attach",
            "netlink",
        ],
    )
    .unwrap();
    sc.traffic().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let ready = run.ready_file().to_path_buf();
    assert!(ready.exists(), "the ready file is there while tracing");
    run.signal(libc::SIGHUP);
    run.collect().unwrap();
    assert!(!ready.exists(), "the ready file was left after SIGHUP");
    assert_eq!(run.status.and_then(|s| s.code()), Some(0), "{}", run.stderr);
    assert!(run.stderr.contains("stopped (hangup)"), "{}", run.stderr);
    let (code, out, err) = replay(&rec);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("NO_SOCKET"), "{out}");
    assert!(!err.contains("cut short"), "{err}");
    let tc = Command::new("tc")
        .args(["-n", &server, "filter", "show", "dev", "s0", "ingress"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&tc.stdout).contains("tracer"),
        "filters left after SIGHUP"
    );
}

/// Run `tracer follow` expecting a refusal before anything is attached:
/// exit 2 and one line (a tracer that does not refuse stops after its
/// --duration).
fn refused(args: &[&str]) -> String {
    let out = Command::new(tracer_bin())
        .args(["follow", "10.0.0.1", "--duration", "300ms"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

/// A symbolic link planted at an output path by an unprivileged user (in
/// a sticky, world-writable directory, as /tmp) is never followed: the
/// file it points to keeps its bytes, whatever the output.
#[test]
fn a_planted_symlink_is_not_followed() {
    if !require_privileges("a_planted_symlink_is_not_followed") {
        return;
    }
    let dir = dir("symlink");
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let victim = dir.at("victim");
    std::fs::write(&victim, "precious").unwrap();
    for (flag, name) in [
        ("--record", "out.rec"),
        ("--pcap", "out.pcapng"),
        ("--ready-file", "ready"),
    ] {
        let link = dir.at(name);
        let made = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["ln", "-s", &victim, &link])
            .status()
            .unwrap();
        assert!(made.success());
        // Not even with --force.
        for force in [&[][..], &["--force"][..]] {
            let mut args = vec![flag, link.as_str()];
            args.extend_from_slice(force);
            let err = refused(&args);
            assert!(
                err.contains("symbolic link") || err.contains("already exists"),
                "{flag}: {err}"
            );
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        }
    }
}

/// An existing file is left as it is without --force; the ready file must
/// not be there (tracer removes it, so it must be its own); one path for
/// two outputs is refused.
#[test]
fn existing_files_and_shared_paths_are_refused() {
    if !require_privileges("existing_files_and_shared_paths_are_refused") {
        return;
    }
    let dir = dir("exists");
    let old = dir.at("old");
    std::fs::write(&old, "keep").unwrap();
    for flag in ["--record", "--pcap", "--ready-file"] {
        let err = refused(&[flag, &old]);
        assert!(err.contains("exists"), "{flag}: {err}");
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "keep");
    }
    let x = dir.at("x");
    let err = refused(&["--record", &x, "--pcap", &x]);
    assert!(err.contains("given for both --record and --pcap"), "{err}");
    let err = refused(&["--record", &x, "--ready-file", &x]);
    assert!(err.contains("given for both"), "{err}");
    assert!(!Path::new(&x).exists());
}

/// With --force an existing recording is replaced; the ready file tracer
/// created is removed at exit, and a file that was at that path before is
/// never removed (it is refused instead).
#[test]
fn force_replaces_and_the_ready_file_is_only_ours() {
    if !require_privileges("force_replaces_and_the_ready_file_is_only_ours") {
        return;
    }
    let dir = dir("force");
    let rec = dir.at("run.rec");
    std::fs::write(&rec, "old bytes").unwrap();
    let run = TracerRun::start(
        "10.0.0.1",
        &["--record", &rec, "--force", "--duration", "300ms"],
    )
    .unwrap();
    let out = run.stop().unwrap();
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.dump());
    assert!(std::fs::read(&rec).unwrap().starts_with(b"TRACEREC"));
    let ready = dir.at("ready");
    std::fs::write(&ready, "someone else's").unwrap();
    refused(&["--ready-file", &ready]);
    assert_eq!(std::fs::read_to_string(&ready).unwrap(), "someone else's");
}
