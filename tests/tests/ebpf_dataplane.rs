//! An eBPF dataplane's programs, as Cilium and Calico install them, built
//! by the tests (tests/src/sockprog.rs): a cgroup connect4 program that
//! rewrites a Service address to its backend before any packet exists, and
//! an XDP program on a device. `tracer follow` of the Service address
//! follows the connection from the rewritten connect(); a Service address
//! nothing was sent to gets what the node knows instead of `0 flows`
//! alone.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests and their tools report on the terminal"
)]

use serde_json::Value;
use tracer_tests::{
    netns::{Netns, unique_prefix, veth},
    require_privileges, scaled_arg,
    sockprog::{Call, SockLb, Xdp},
    tracer::{TracerRun, netprobe_bin},
};

/// A client and a server namespace on one veth, 10.236.0.0/24.
fn pair() -> (Netns, Netns) {
    let p = unique_prefix();
    let c = Netns::new(format!("{p}-sockc")).expect("netns");
    let s = Netns::new(format!("{p}-socks")).expect("netns");
    veth(&c, "c0", &s, "s0").expect("veth");
    c.ip(&["addr", "add", "10.236.0.1/24", "dev", "c0"])
        .unwrap();
    s.ip(&["addr", "add", "10.236.0.2/24", "dev", "s0"])
        .unwrap();
    (c, s)
}

/// The pair, a server on 10.236.0.2:8080, and a connect4 program sending
/// the "ClusterIP" 10.236.9.9:80 there.
/// Fields drop in order: the program's cgroup, the server, then the
/// namespaces.
struct Scene {
    lb: SockLb,
    _srv: tracer_tests::netns::Child,
    s: Netns,
    c: Netns,
}

fn scene() -> Scene {
    let (c, s, srv) = pair_serving();
    Scene {
        lb: connect4(),
        _srv: srv,
        s,
        c,
    }
}

/// The pair and the server.
fn pair_serving() -> (Netns, Netns, tracer_tests::netns::Child) {
    let (c, s) = pair();
    let probe = netprobe_bin();
    let srv = s
        .spawn(&[
            probe.to_str().unwrap(),
            "tcp-listen",
            "10.236.0.2:8080",
            "--for",
            "30",
        ])
        .expect("server");
    std::thread::sleep(std::time::Duration::from_millis(300));
    (c, s, srv)
}

/// The connect4 program sending 10.236.9.9:80 to the server.
fn connect4() -> SockLb {
    SockLb::install(
        "10.236.9.9:80".parse().unwrap(),
        "10.236.0.2:8080".parse().unwrap(),
        "test_sock4_conn",
        Call::Connect,
    )
    .expect("connect4 program")
}

/// The client's connect() to the "ClusterIP", from the program's cgroup.
fn connect(lb: &SockLb, c: &Netns) -> std::process::Output {
    let probe = netprobe_bin();
    let t = scaled_arg(2000);
    lb.exec(
        c,
        &[
            probe.to_str().unwrap(),
            "tcp-connect",
            "10.236.9.9:80",
            "--timeout-ms",
            &t,
            "--count",
            "1",
        ],
    )
    .expect("client")
}

/// The program's cgroup directory, as the reports end its path.
fn cgroup_name(lb: &SockLb) -> String {
    lb.cgroup
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn names(list: &Value) -> Vec<(&str, &str)> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or(""),
                        p["hook"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A ClusterIP that only a socket program translates: the connection
/// works and no packet ever carries the ClusterIP, yet the flow to it is
/// followed from the connect() (a `sock_addr` hop, `nat_by: socket`)
/// under the backend's tuple to its delivery, and the rewrite names the
/// call, the program and its cgroup, as kube-proxy's DNAT would be named.
#[test]
fn socket_lb_rewrite_is_followed_to_the_backend() {
    if !require_privileges("socket_lb_rewrite_is_followed_to_the_backend") {
        return;
    }
    let Scene { lb, _srv, s, c } = scene();
    let run = TracerRun::start("10.236.9.9:80", &["--netns", &c.name, "--netns", &s.name])
        .expect("start tracer");
    let seen = connect(&lb, &c);
    let out = run.stop().expect("stop");
    let client = String::from_utf8_lossy(&seen.stdout);
    assert!(
        client.starts_with("connected"),
        "the rewritten connection failed: {client} {}",
        String::from_utf8_lossy(&seen.stderr)
    );
    let f = out.flow_to(80);
    assert_eq!(f["original"]["dst"], "10.236.9.9", "{}", out.dump());
    assert_eq!(f["translated"]["dst"], "10.236.0.2", "{}", out.dump());
    assert_eq!(f["translated"]["dport"], 8080, "{}", out.dump());
    assert_eq!(f["nat_by"], "socket", "{}", out.dump());
    assert_eq!(f["hops"][0]["hook"], "sock_addr", "{}", out.dump());
    assert_eq!(f["hops"][0]["netns"], c.name.as_str(), "{}", out.dump());
    assert_eq!(f["verdict"]["kind"], "delivered", "{}", out.dump());
    let rewrite = tracer_tests::evidence_of(f, "socket_rewrite");
    assert_eq!(rewrite["call"], "connect", "{}", out.dump());
    assert!(
        names(&rewrite["programs"]).contains(&("test_sock4_conn", "connect4")),
        "{}",
        out.dump()
    );
    let cg = cgroup_name(&lb);
    assert!(
        rewrite["cgroup"].as_str().is_some_and(|a| a.ends_with(&cg)),
        "{}",
        out.dump()
    );
}

/// A socket program loaded after tracer started (no cgroup
/// socket-address program was loaded then, so its hooks were left out):
/// they are attached once it is, said on stderr, and the rewritten
/// connection is followed as when the program was there first.
#[test]
fn a_socket_program_loaded_after_the_start_is_followed() {
    if !require_privileges("a_socket_program_loaded_after_the_start_is_followed") {
        return;
    }
    let (c, s, _srv) = pair_serving();
    let run = TracerRun::start("10.236.9.9:80", &["--netns", &c.name, "--netns", &s.name])
        .expect("start tracer");
    let lb = connect4();
    // The node is asked every 2 s (kernel/session.rs NEEDS_EVERY).
    std::thread::sleep(tracer_tests::scaled_ms(3000));
    let seen = connect(&lb, &c);
    let out = run.stop().expect("stop");
    assert!(
        String::from_utf8_lossy(&seen.stdout).starts_with("connected"),
        "the rewritten connection failed"
    );
    assert!(
        out.stderr.contains(
            "a cgroup socket-address program was loaded on this node after the start: attaching sock_addr"
        ),
        "(a socket-address program of others loaded before the test would make this fail) {}",
        out.dump()
    );
    let f = out.flow_to(80);
    assert_eq!(f["translated"]["dst"], "10.236.0.2", "{}", out.dump());
    assert_eq!(f["nat_by"], "socket", "{}", out.dump());
    assert_eq!(f["verdict"]["kind"], "delivered", "{}", out.dump());
    assert!(
        names(&tracer_tests::evidence_of(f, "socket_rewrite")["programs"])
            .contains(&("test_sock4_conn", "connect4")),
        "{}",
        out.dump()
    );
}

/// A server in `s` (netprobe `server`), a `call` program named `name`
/// sending `vip` to `backend`, and tracer following `vip` while the client
/// (netprobe `client`) runs from the program's cgroup in `c`: tracer's
/// output and what the client printed.
fn rewritten(
    (c, s): (&Netns, &Netns),
    server: &[&str],
    (vip, backend): (&str, &str),
    (name, call): (&str, Call),
    client: &[&str],
) -> (tracer_tests::tracer::TracerOutput, String) {
    let probe = netprobe_bin();
    let p = probe.to_str().unwrap();
    let _srv = s
        .spawn(&[&[p][..], server, &["--for", "30"]].concat())
        .expect("server");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let lb = SockLb::install(vip.parse().unwrap(), backend.parse().unwrap(), name, call)
        .expect("sock_addr program");
    let run =
        TracerRun::start(vip, &["--netns", &c.name, "--netns", &s.name]).expect("start tracer");
    let t = scaled_arg(2000);
    let seen = lb
        .exec(c, &[&[p][..], client, &["--timeout-ms", &t]].concat())
        .expect("client");
    let out = run.stop().expect("stop");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&seen.stdout),
        String::from_utf8_lossy(&seen.stderr)
    );
    (out, said)
}

/// IPv6: a connect6 program sends the Service [fd00:236:9::9]:80 to the
/// backend [fd00:236::2]:8080; the connection is followed from the
/// connect() as IPv4's is.
#[test]
fn socket_lb_rewrite_of_ipv6_is_followed_to_the_backend() {
    if !require_privileges("socket_lb_rewrite_of_ipv6_is_followed_to_the_backend") {
        return;
    }
    let (c, s) = pair();
    c.ip(&["addr", "add", "fd00:236::1/64", "dev", "c0", "nodad"])
        .unwrap();
    s.ip(&["addr", "add", "fd00:236::2/64", "dev", "s0", "nodad"])
        .unwrap();
    let (out, client) = rewritten(
        (&c, &s),
        &["tcp-listen", "[fd00:236::2]:8080"],
        ("[fd00:236:9::9]:80", "[fd00:236::2]:8080"),
        ("test_sock6_conn", Call::Connect),
        &["tcp-connect", "[fd00:236:9::9]:80"],
    );
    assert!(
        client.starts_with("connected"),
        "the rewritten connection failed: {client}"
    );
    let f = out.flow_to(80);
    assert_eq!(f["original"]["dst"], "fd00:236:9::9", "{}", out.dump());
    assert_eq!(f["translated"]["dst"], "fd00:236::2", "{}", out.dump());
    assert_eq!(f["translated"]["dport"], 8080, "{}", out.dump());
    assert_eq!(f["nat_by"], "socket", "{}", out.dump());
    assert_eq!(f["hops"][0]["hook"], "sock_addr", "{}", out.dump());
    assert_eq!(f["verdict"]["kind"], "delivered", "{}", out.dump());
    let rewrite = tracer_tests::evidence_of(f, "socket_rewrite");
    assert!(
        names(&rewrite["programs"]).contains(&("test_sock6_conn", "connect6")),
        "{}",
        out.dump()
    );
}

/// A datagram sent by sendmmsg(2) (a batch, as resolvers send their
/// queries) that a sendmsg4 program sends to a backend: parked from the
/// batch's first message, followed under the backend's tuple, the call
/// named.
#[test]
fn a_sendmmsg_datagram_a_socket_program_rewrote_is_followed() {
    if !require_privileges("a_sendmmsg_datagram_a_socket_program_rewrote_is_followed") {
        return;
    }
    let (c, s) = pair();
    let (out, client) = rewritten(
        (&c, &s),
        &["udp-echo", "10.236.0.2:5353"],
        ("10.236.9.10:53", "10.236.0.2:5353"),
        ("test_sock4_send", Call::Sendmsg),
        &["udp-send", "10.236.9.10:53", "--sendmmsg"],
    );
    assert!(
        client.starts_with("reply"),
        "the rewritten datagram got no answer: {client}"
    );
    let f = out.flow_to(53);
    assert_eq!(f["translated"]["dst"], "10.236.0.2", "{}", out.dump());
    assert_eq!(f["nat_by"], "socket", "{}", out.dump());
    assert_eq!(f["hops"][0]["hook"], "sock_addr", "{}", out.dump());
    let rewrite = tracer_tests::evidence_of(f, "socket_rewrite");
    assert_eq!(rewrite["call"], "sendmmsg", "{}", out.dump());
    assert!(
        names(&rewrite["programs"]).contains(&("test_sock4_send", "sendmsg4")),
        "{}",
        out.dump()
    );
    assert_eq!(f["verdict"]["kind"], "delivered", "{}", out.dump());
}

/// A Service address nothing sent to while socket and XDP programs are
/// attached: the report names the programs that could hide it, the XDP
/// program on the way and the traced namespaces, instead of `0 flows`.
#[test]
fn nothing_seen_names_the_programs_that_could_hide_it() {
    if !require_privileges("nothing_seen_names_the_programs_that_could_hide_it") {
        return;
    }
    let Scene { lb, _srv, s, c } = scene();
    let _xdp = Xdp::install(&s, "s0", "test_xdp_pass").expect("xdp program");
    let run = TracerRun::start("10.236.9.10:80", &["--netns", &c.name, "--netns", &s.name])
        .expect("start tracer");
    connect(&lb, &c);
    let out = run.stop().expect("stop");
    let summary = out.summary().expect("summary");
    assert_eq!(summary["flows"], 0, "{}", out.dump());
    let n = &summary["nothing_seen"];
    assert!(
        names(&n["cgroup_programs"]).contains(&("test_sock4_conn", "connect4")),
        "{}",
        out.dump()
    );
    let cg = cgroup_name(&lb);
    assert!(
        n["cgroup_programs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["at"].as_str().is_some_and(|a| a.ends_with(&cg))),
        "{}",
        out.dump()
    );
    let xdp = n["xdp_programs"].as_array().expect("xdp list");
    assert!(
        xdp.iter().any(|p| p["name"] == "test_xdp_pass"
            && p["netns"] == s.name.as_str()
            && p["at"] == "s0 (generic)"),
        "{}",
        out.dump()
    );
    assert_eq!(
        n["netns"],
        serde_json::json!([c.name.clone(), s.name.clone()]),
        "{}",
        out.dump()
    );
}

/// Text output says the same in words, with the hint to follow the
/// backend; a run that saw flows has no such report.
#[test]
fn nothing_seen_text_names_the_program_and_hints_at_the_backend() {
    if !require_privileges("nothing_seen_text_names_the_program_and_hints_at_the_backend") {
        return;
    }
    let Scene { lb, _srv, s: _s, c } = scene();
    let mut run = TracerRun::start_fmt("10.236.9.10:80", "text", &["--netns", &c.name])
        .expect("start tracer");
    connect(&lb, &c);
    let text = run.stop_raw().expect("stop");
    assert!(
        text.contains("nothing seen: no packet to 10.236.9.10:80 passed a traced hook"),
        "{text}"
    );
    assert!(
        text.contains("test_sock4_conn (id ") && text.contains("follow the backend"),
        "{text}"
    );

    // The backend itself is seen: no report.
    let run = TracerRun::start("10.236.0.2:8080", &["--netns", &c.name]).expect("start tracer");
    connect(&lb, &c);
    let out = run.stop().expect("stop");
    let summary = out.summary().expect("summary");
    assert_ne!(summary["flows"], 0, "{}", out.dump());
    assert!(summary.get("nothing_seen").is_none(), "{}", out.dump());
}

/// A tc BPF program's drop names the program, its hook and device, and
/// the hint sends the operator to the dataplane's own drop monitor: the
/// client pod's egress deny (clsact ingress of its host-side veth) and
/// the server pod's ingress deny (tc egress of its veth, a tcx link where
/// the kernel has tcx).
#[test]
fn tc_program_drops_name_the_program() {
    for (scene, reason, at, prog) in [
        (
            "dp_tc_from_pod_drop",
            "TC_INGRESS",
            "tc ingress of r0",
            "tc BPF program cil_from_contai (id ",
        ),
        (
            "dp_tcx_to_pod_drop",
            "TC_EGRESS",
            "tc egress of r1",
            if tracer_tests::bpfdrop::tcx_supported() {
                "tcx BPF program cil_to_contain (id "
            } else {
                "tc BPF program cil_to_contain (id "
            },
        ),
    ] {
        let Some((f, dump)) = tracer_tests::trace_scenario(scene, 8080) else {
            return;
        };
        assert_eq!(
            tracer_tests::verdict_said(&f, "kind"),
            "dropped",
            "{scene}: {dump}"
        );
        assert_eq!(
            tracer_tests::verdict_said(&f, "reason"),
            reason,
            "{scene}: {dump}"
        );
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(
            w.contains(at) && w.contains(&format!("dropped by {prog}")),
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&"bpf_program_drop"),
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::verdict_said(&f, "hint").contains("cilium monitor"),
            "{scene}: {dump}"
        );
    }
}

/// An XDP program's drop names the XDP program on that device and its
/// mode: in generic mode (generic XDP frees the skb with no reason of its
/// own), and in native mode (veth frees what its program dropped in its
/// own XDP path, veth_xdp_rcv_skb()).
#[test]
fn xdp_program_drop_names_the_program() {
    for (scene, mode) in [("dp_xdp_drop", "generic"), ("dp_xdp_native_drop", "driver")] {
        let Some((f, dump)) = tracer_tests::trace_scenario(scene, 53) else {
            return;
        };
        assert_eq!(tracer_tests::verdict_said(&f, "kind"), "dropped", "{dump}");
        let w = tracer_tests::verdict_said(&f, "where");
        assert!(
            w.contains("XDP of r0")
                && w.contains("dropped by XDP program cil_xdp_entry (id ")
                && w.contains(&format!(", {mode})")),
            "{scene}: {dump}"
        );
        assert!(
            tracer_tests::evidence_kinds(&f).contains(&"bpf_program_drop"),
            "{scene}: {dump}"
        );
    }
}

/// A program on the path that let the packet through is not blamed: the
/// connection to a closed port is refused by the server's kernel.
#[test]
fn a_passing_program_is_not_blamed() {
    let Some((f, dump)) = tracer_tests::trace_scenario("dp_tc_passes_closed_port", 8081) else {
        return;
    };
    assert!(
        !tracer_tests::evidence_kinds(&f).contains(&"bpf_program_drop"),
        "{dump}"
    );
    assert!(
        !tracer_tests::verdict_said(&f, "where").contains("cil_"),
        "{dump}"
    );
    assert!(
        tracer_tests::verdict_said(&f, "reason").contains("NO_SOCKET")
            || tracer_tests::verdict_said(&f, "kind") == "refused",
        "{dump}"
    );
}

/// Incident 3's fix, Cilium's Local Redirect Policy for node-local DNS
/// (tests/src/dataplane_scenes.rs): the pod's DNS to 169.254.25.10:53 is
/// rewritten in sendto() to the node-local-dns pod, which answers; the
/// flow to the link-local address is followed there and delivered, with
/// the rewrite and both programs' hook named, and no missing-recvmsg
/// fact (the recvmsg4 program restores the answer's source).
#[test]
fn incident3_fix_behind_a_socket_redirect_is_followed() {
    let Some((f, dump)) = tracer_tests::trace_scenario("incident3_lrp", 53) else {
        return;
    };
    assert_eq!(f["original"]["dst"], "169.254.25.10", "{dump}");
    assert_eq!(f["translated"]["dst"], "10.190.51.2", "{dump}");
    assert_eq!(f["nat_by"], "socket", "{dump}");
    assert_eq!(f["verdict"]["kind"], "delivered", "{dump}");
    let rewrite = tracer_tests::evidence_of(&f, "socket_rewrite");
    assert_eq!(rewrite["call"], "sendto", "{dump}");
    assert!(
        names(&rewrite["programs"]).contains(&("cil_sock4_sendm", "sendmsg4")),
        "{dump}"
    );
    assert!(rewrite.get("reply_source_kept").is_none(), "{dump}");
    assert!(f["replies"].as_u64().unwrap_or(0) > 0, "{dump}");
}

/// The tc NAT programs of the tc BPF NAT blind scenes (tests/src/bpfnat.rs)
/// work: a client pod's connection and datagram to a ClusterIP are
/// translated to the backend on its lxc0's ingress, and the replies back
/// on its egress (checksums fixed: the kernels on both ends accept them),
/// so the client is answered by the Service address. No tracer.
#[test]
fn tc_nat_programs_answer_through_the_rewrite() {
    if !require_privileges("tc_nat_programs_answer_through_the_rewrite") {
        return;
    }
    for (scene, answered) in [
        ("bpfnat_answered_tcp", "connected, echo"),
        ("bpfnat_answered_udp", "reply 8 bytes from 10.241.104.10:53"),
    ] {
        let sc = tracer_tests::scenarios::build(scene).expect("build scene");
        let seen = sc.traffic().expect("traffic");
        assert!(seen.trim().starts_with(answered), "{scene}: {seen:?}");
    }
}

/// A Service translated in tc, as Cilium's bpf_lxc does without socket
/// LB (tests/src/dataplane_scenes.rs), traced by the device tracepoints
/// and, with `--netns`, by tracer's own tc programs (first at each hook):
/// the flow to 10.189.9.9:80 is followed to the backend (translated with
/// no conntrack entry: `nat_by: bpf`), the program that rewrote it is
/// named at the client veth's tc ingress, the reply is seen leaving the
/// server pod under the backend's address (before any program translates
/// it back: the kernel side learnt that tuple from the rewrite), and the
/// path lists both programs and what each did.
#[test]
fn tc_service_dnat_is_followed_and_the_program_named() {
    for scoped in [false, true] {
        let Some((out, _)) = tracer_tests::trace_scenario_scoped("dp_tc_service_dnat", scoped)
        else {
            return;
        };
        let (f, dump) = (
            out.flow_to(80),
            format!("--netns: {scoped}: {}", out.dump()),
        );
        assert_eq!(f["verdict"]["kind"], "delivered", "{dump}");
        assert!(
            f["verdict"]["where"]
                .as_str()
                .unwrap_or("")
                .contains("10.189.2.2:8080"),
            "{dump}"
        );
        assert_eq!(f["translated"]["dst"], "10.189.2.2", "{dump}");
        assert_eq!(f["translated"]["dport"], 8080, "{dump}");
        assert_eq!(f["nat_by"], "bpf", "{dump}");
        let rw = tracer_tests::evidence_of(f, "bpf_rewrite");
        assert_eq!(rw["hook"], "tc ingress", "{dump}");
        assert_eq!(rw["dev"], "r0", "{dump}");
        assert!(
            names(&rw["programs"])
                .iter()
                .any(|(n, h)| *n == "cil_from_contai" && h.ends_with("ingress")),
            "{dump}"
        );
        let hops = f["hops"].as_array().expect("hops");
        assert!(
            hops.iter().any(|h| h["dir"] == "reply"
                && h["dev"] == "s0"
                && h["tuple"]["src"] == "10.189.2.2"
                && h["tuple"]["sport"] == 8080),
            "{dump}"
        );
        let path = tracer_tests::evidence_of(f, "bpf_path");
        let sites: Vec<(&str, &str, &str)> = path["sites"]
            .as_array()
            .expect("sites")
            .iter()
            .map(|s| {
                (
                    s["dir"].as_str().unwrap_or(""),
                    s["dev"].as_str().unwrap_or(""),
                    s["outcome"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert!(sites.contains(&("request", "r0", "rewrote")), "{dump}");
        assert!(sites.contains(&("reply", "r1", "rewrote")), "{dump}");
    }
}

/// A redirect the kernel refused (an XDP program's target is down): the
/// program, its target and the kernel's error, from the xdp tracepoints.
#[test]
fn a_refused_xdp_redirect_names_its_target_and_error() {
    let Some((f, dump)) = tracer_tests::trace_scenario("dp_xdp_redirect_down", 53) else {
        return;
    };
    assert_eq!(tracer_tests::verdict_said(&f, "kind"), "dropped", "{dump}");
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains("XDP of r0")
            && w.contains("XDP program xdp_lb_redir (id ")
            && w.contains("returned XDP_REDIRECT to r2, which failed: ENETDOWN"),
        "{dump}"
    );
    assert!(
        tracer_tests::evidence_kinds(&f).contains(&"xdp_action"),
        "{dump}"
    );
    assert!(
        tracer_tests::verdict_said(&f, "hint").contains("ENETDOWN"),
        "{dump}"
    );
}

/// The same refused redirect through a device map (bpf_redirect_map()):
/// the tracepoint names the map and key; the map's entry names r2.
#[test]
fn a_refused_xdp_devmap_redirect_names_the_maps_target() {
    let Some((f, dump)) = tracer_tests::trace_scenario("dp_xdp_devmap_down", 53) else {
        return;
    };
    assert_eq!(tracer_tests::verdict_said(&f, "kind"), "dropped", "{dump}");
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains("XDP program xdp_lb_map (id ")
            && w.contains("returned XDP_REDIRECT to r2 (device map id ")
            && w.contains(", key 7), which failed: ENETDOWN"),
        "{dump}"
    );
}

/// An XDP program loaded after tracer started (a Cilium agent that
/// starts, or restarts, after it): the node is asked again while tracing,
/// the xdp hooks are attached then and said on stderr, and the refused
/// redirect is named as when the program was there first; with `--netns`,
/// where tc covers the devices and netif_receive is taken back from it.
#[test]
fn an_xdp_program_loaded_after_the_start_is_seen() {
    if !require_privileges("an_xdp_program_loaded_after_the_start_is_seen") {
        return;
    }
    let late = tracer_tests::dataplane_scenes::LateXdp::new(182).expect("namespaces");
    let mut args = Vec::new();
    for n in &late.nss {
        args.extend(["--netns", n.name.as_str()]);
    }
    let run = TracerRun::start("10.182.2.2:53", &args).expect("start tracer");
    let _xdp = late.load().expect("XDP program");
    // The node is asked every 2 s (kernel/session.rs NEEDS_EVERY).
    std::thread::sleep(tracer_tests::scaled_ms(3000));
    let probe = netprobe_bin();
    late.nss[0].exec_status(&[
        probe.to_str().expect("path"),
        "udp-send",
        "10.182.2.2:53",
        "--timeout-ms",
        &scaled_arg(1000),
    ]);
    let out = run.stop().expect("stop tracer");
    assert!(
        out.stderr
            .contains("an XDP program was loaded on this node after the start: attaching"),
        "(an XDP program of others loaded before the test would make this fail) {}",
        out.dump()
    );
    let f = out.flow_to(53);
    let w = tracer_tests::verdict_said(f, "where");
    assert!(
        w.contains("XDP program xdp_lb_redir (id ")
            && w.contains("returned XDP_REDIRECT to r2, which failed: ENETDOWN"),
        "{}",
        out.dump()
    );
}

/// A Service's tc programs loaded after tracer started (a Cilium agent in
/// native routing that starts or restarts after it; with `--netns`,
/// tracer's own tc programs are on the devices first): the rewritten
/// connection is followed to its backend and answered, the rewrite told
/// as the program's.
#[test]
fn a_tc_nat_program_loaded_after_the_start_is_followed() {
    if !require_privileges("a_tc_nat_program_loaded_after_the_start_is_followed") {
        return;
    }
    let late = tracer_tests::dataplane_scenes::LateNat::new(187).expect("namespaces");
    let mut args = Vec::new();
    for n in &late.nss {
        args.extend(["--netns", n.name.as_str()]);
    }
    let run = TracerRun::start("10.187.9.9:80", &args).expect("start tracer");
    let _pins = late.load().expect("tc programs");
    let probe = netprobe_bin();
    late.nss[0].exec_status(&[
        probe.to_str().expect("path"),
        "tcp-connect",
        "10.187.9.9:80",
        "--timeout-ms",
        &scaled_arg(2000),
    ]);
    let out = run.stop().expect("stop tracer");
    let f = out.flow_to(80);
    assert_eq!(f["verdict"]["kind"], "delivered", "{}", out.dump());
    assert_eq!(f["translated"]["dst"], "10.187.2.2", "{}", out.dump());
    assert_eq!(f["translated"]["dport"], 8080, "{}", out.dump());
    assert_eq!(f["nat_by"], "bpf", "{}", out.dump());
    let hops = f["hops"].as_array().expect("hops");
    assert!(
        hops.iter().any(|h| h["dir"] == "reply"
            && h["dev"] == "s0"
            && h["tuple"]["src"] == "10.187.2.2"
            && h["tuple"]["sport"] == 8080),
        "{}",
        out.dump()
    );
}

/// XDP_TX of an unchanged frame: the client gets its own packet back,
/// addressed to the node's MAC, and drops it; the verdict says which
/// program sent it back (no tracepoint fires for a successful XDP_TX: the
/// hops show it).
#[test]
fn a_packet_xdp_sent_back_names_the_program() {
    let Some((f, dump)) = tracer_tests::trace_scenario("dp_xdp_tx_back", 53) else {
        return;
    };
    assert_eq!(tracer_tests::verdict_said(&f, "kind"), "dropped", "{dump}");
    // A kernel before 5.17 gives no reason (the drop's `reason_from`).
    let no_reason = f["hops"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|h| h["fields"]["reason_from"].is_string());
    let reason = tracer_tests::verdict_said(&f, "reason");
    assert!(
        reason == "OTHERHOST" || no_reason && reason == "NOT_SPECIFIED",
        "{dump}"
    );
    let w = tracer_tests::verdict_said(&f, "where");
    assert!(
        w.contains("XDP program xdp_responder (id ")
            && w.contains("had sent it back out r0 (XDP_TX), unchanged"),
        "{dump}"
    );
    assert!(
        tracer_tests::evidence_kinds(&f).contains(&"xdp_moved"),
        "{dump}"
    );
}
