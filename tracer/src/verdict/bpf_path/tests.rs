use super::*;
use crate::verdict::rules::tests::{facts, judge, load};
#[allow(unused_imports, reason = "not every test file names both")]
use crate::verdict::{DropReason, Found};

/// The verdict's sites as (direction, hook, device, outcome, names).
fn sites(name: &str, clear: bool) -> Vec<(Dir, String, String, Outcome, Vec<String>)> {
    let (f, mut env) = load(name);
    if clear {
        env.dev_programs.clear();
    }
    let v = judge(&f, &env);
    facts(&v)
        .filter_map(|e| match e {
            Evidence::BpfPath(p) => Some(p.sites.clone()),
            _ => None,
        })
        .flatten()
        .map(|s| {
            (
                s.dir,
                s.hook,
                s.dev,
                s.outcome,
                s.programs.into_iter().map(|p| p.name).collect(),
            )
        })
        .collect()
}

fn site(
    dir: Dir,
    hook: &str,
    dev: &str,
    o: Outcome,
    name: &str,
) -> (Dir, String, String, Outcome, Vec<String>) {
    (dir, hook.into(), dev.into(), o, vec![name.into()])
}

// On recordings of the dataplane scenes (tests/src/dataplane_scenes.rs,
// blind_bpf.rs), made without tracer's tc programs: the sites are read
// from the device tracepoints around them.

/// cilium/cilium#21391: the query passes the client's from-container
/// program; its answer is dropped by the to-container one on the same
/// veth.
#[test]
fn a_query_passes_one_program_and_its_answer_is_dropped_by_another() {
    assert_eq!(
        sites("blind_bpf_dns_answer_denied", false),
        [
            site(
                Dir::Request,
                "tc ingress",
                "lxc0",
                Outcome::Passed,
                "cil_from_contai"
            ),
            site(
                Dir::Reply,
                "tc egress",
                "lxc0",
                Outcome::Dropped,
                "cil_to_containe"
            ),
        ]
    );
}

/// A drop at tc ingress (clsact) and one at tc egress (tcx).
#[test]
fn the_program_that_dropped_is_the_last_site() {
    assert_eq!(
        sites("dp_tc_from_pod_drop", false),
        [site(
            Dir::Request,
            "tc ingress",
            "r0",
            Outcome::Dropped,
            "cil_from_contai"
        )]
    );
    assert_eq!(
        sites("dp_tcx_to_pod_drop", false),
        [site(
            Dir::Request,
            "tc egress",
            "r1",
            Outcome::Dropped,
            "cil_to_contain"
        )]
    );
}

/// The honest trap: the program drops another port; this connection
/// passed it (and was refused by the server's kernel). Recorded before
/// every device's programs were read: r0's is given here.
#[test]
fn a_program_that_let_it_through_passed_it() {
    let (f, mut env) = load("dp_tc_passes_closed_port");
    let r0 = f.hops.iter().find(|h| &*h.dev == "r0").unwrap().netns_inode;
    env.dev_programs.insert(
        (r0, "r0".into()),
        vec![AttachedProgram {
            id: 1,
            name: "cil_from_contai".into(),
            hook: "tc ingress".into(),
            at: "r0 (clsact prio 49152)".into(),
        }],
    );
    let v = judge(&f, &env);
    let p: Vec<&BpfPath> = facts(&v)
        .filter_map(|e| match e {
            Evidence::BpfPath(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(p.len(), 1, "{v:?}");
    assert_eq!(p[0].sites.len(), 1, "{v:?}");
    let s = &p[0].sites[0];
    assert_eq!(
        (s.dir, s.hook.as_str(), s.dev.as_str(), s.outcome),
        (Dir::Request, "tc ingress", "r0", Outcome::Passed)
    );
    assert_eq!(v.reason, DropReason::NoSocket, "{v:?}");
}

/// Near miss: no program of others on the devices, no evidence.
#[test]
fn no_programs_no_path() {
    for n in ["blind_bpf_dns_answer_denied", "dp_tc_from_pod_drop"] {
        assert!(sites(n, true).is_empty(), "{n}");
    }
}

#[test]
fn sites_read_as_a_path() {
    let p = BpfPath {
        sites: vec![ProgramSite {
            dir: Dir::Request,
            hook: "tc ingress".into(),
            dev: "lxc0".into(),
            netns: "node".into(),
            programs: vec![AttachedProgram {
                id: 42,
                name: "cil_from_contai".into(),
                hook: "tcx ingress".into(),
                at: "lxc0".into(),
            }],
            outcome: Outcome::Redirected,
            to_dev: Some("lxc1".into()),
            xdp: None,
        }],
    };
    assert_eq!(
        p.to_string(),
        "BPF programs on the path: request at tc ingress of lxc0 in netns node: tcx BPF program cil_from_contai (id 42) (redirected it to lxc1)"
    );
}

/// XDP's sites: XDP_TX read from the hops (generic_xdp_tx() fires no
/// tracepoint: the packet is next received where it came from), and a
/// refused redirect from the xdp tracepoint's record, with its target.
#[test]
fn xdp_sites_say_what_the_program_did() {
    let first_site = |name: &str| {
        let (f, env) = load(name);
        let v = judge(&f, &env);
        facts(&v)
            .find_map(|e| match e {
                Evidence::BpfPath(p) => p.sites.first().cloned(),
                _ => None,
            })
            .expect("a site")
    };
    let s = first_site("dp_xdp_tx_back");
    assert_eq!(
        (s.hook.as_str(), s.dev.as_str(), s.outcome),
        ("XDP", "r0", Outcome::SentBack)
    );
    assert!(
        s.to_string()
            .ends_with("(XDP_TX: sent it back out the device it came in on)"),
        "{s}"
    );
    let s = first_site("dp_xdp_redirect_down");
    assert_eq!(s.outcome, Outcome::Dropped);
    assert_eq!(s.to_dev.as_deref(), Some("r2"));
    assert_eq!(s.xdp.map(|x| x.err), Some(-100));
}
