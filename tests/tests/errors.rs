//! Bad input gets one clear line and a non-zero exit, never a panic.
//! These run unprivileged too: arguments are checked before anything else.

use std::process::Command;

use tracer_tests::tracer::tracer_bin;

fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(tracer_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{args:?}: {err}"
    );
    (out.status.code().unwrap_or(-1), err)
}

#[test]
fn bad_inputs_are_one_clear_error() {
    let cases: &[(&[&str], i32, &str)] = &[
        (&["follow", "10.0.0.300"], 1, "not an IPv4/IPv6 address"),
        (&["follow", "10.0.0.1:0"], 1, "bad port"),
        (&["follow", "10.0.0.1:99999"], 1, "bad port"),
        (&["follow", "10.0.0.1/33"], 1, "bad prefix length"),
        (&["follow", "[fd00::1"], 1, "not an IPv4/IPv6 address"),
        (
            &["follow", "10.0.0.1:53", "--proto", "icmp"],
            1,
            "a port only applies to tcp or udp",
        ),
        (
            &["follow", "10.0.0.1", "--proto", "sctp"],
            2,
            "invalid value",
        ),
        (
            &["follow", "10.0.0.1", "--netns", "no-such-netns-xyz"],
            1,
            "not found",
        ),
        (
            &["follow", "10.0.0.1", "--netns", "999999999"],
            1,
            "not found",
        ),
        (
            &["follow", "10.0.0.1", "-o", "yaml"],
            2,
            "invalid value 'yaml'",
        ),
        (
            &["follow", "10.0.0.1", "--duration", "5x"],
            2,
            "bad duration",
        ),
        (
            &["follow", "10.0.0.1", "--duration", "0s"],
            2,
            "out of range",
        ),
        (&["follow"], 2, "required"),
        (&["follow", "10.0.0.1", "--bogus"], 2, "unexpected argument"),
        (&["frobnicate"], 2, "unrecognized subcommand"),
    ];
    for (args, code, needle) in cases {
        let (c, err) = run(args, &[]);
        assert_eq!(c, *code, "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
    }
}

#[test]
fn missing_btf_is_explained() {
    if unsafe { libc::geteuid() } != 0 {
        // Without root the privilege check answers first; that is covered below.
        return;
    }
    let (c, err) = run(
        &["follow", "10.0.0.1"],
        &[("TRACER_BTF", "/nonexistent/vmlinux")],
    );
    assert_eq!(c, 1);
    assert!(
        err.contains("no BTF") && err.contains("CONFIG_DEBUG_INFO_BTF"),
        "{err}"
    );
}

#[test]
fn not_root_is_explained() {
    if unsafe { libc::geteuid() } != 0 {
        let (c, err) = run(&["follow", "10.0.0.1"], &[]);
        assert_eq!(c, 1);
        assert!(err.contains("needs root"), "{err}");
        return;
    }
    // As root: drop to nobody for the one call.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(tracer_bin())
        .args(["follow", "10.0.0.1"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs root") && err.contains("sudo"), "{err}");
}
