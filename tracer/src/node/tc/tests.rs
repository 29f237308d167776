use super::*;

/// The RTM_NEWTFILTER messages of `tc filter show dev lxc0 ingress` in a
/// namespace with, on lxc0's clsact: a BPF program named tracer_tc_ingress
/// (pref 1), a u32 filter with `action mirred egress redirect dev eth0`
/// (eth0 was ifindex 2) and a BPF program hostroute_redir, direct-action
/// (the chain-head messages of each priority included).
const CAPTURED: &[&str] = &[
    concat!(
        "340000002c00020001000000ac620000000000000300000000000000f2ffffff00030100080001006270660008000b00",
        "00000000",
    ),
    concat!(
        "740000002c00020001000000ac620000000000000300000001000000f2ffffff00030100080001006270660008000b00",
        "00000000400002001600070074722e6f3a5b636c61737369666965725d00000008000b00933f00000c000a0059f4a931",
        "744dcdc608000800010000000800090008000000",
    ),
    concat!(
        "340000002c00020001000000ac620000000000000300000000000000f2ffffff0800ffbf080001007533320008000b00",
        "00000000",
    ),
    concat!(
        "400000002c00020001000000ac620000000000000300000000000080f2ffffff0800ffbf080001007533320008000b00",
        "000000000c0002000800040001000000",
    ),
    concat!(
        "140100002c00020001000000ac620000000000000300000000080080f2ffffff0800ffbf080001007533320008000b00",
        "00000000e000020024000500010001000000000000000000000000000000000000000000000000000000000008000200",
        "0000008008000b0008000000a8000700a40001000b0001006d6972726564000044000400140001000000000000000000",
        "000000000000000014000700000000000000000000000000000000001800030000000000000000000000000000000000",
        "0000000008000a0000000000480002002000020001000000000000000400000001000000010000000100000002000000",
        "240001007702000000000000770200000000000000000000000000000000000000000000",
    ),
    concat!(
        "340000002c00020001000000ac620000000000000300000000000000f2ffffff000300c0080001006270660008000b00",
        "00000000",
    ),
    concat!(
        "740000002c00020001000000ac620000000000000300000001000000f2ffffff000300c0080001006270660008000b00",
        "00000000400002001600070068722e6f3a5b636c61737369666965725d00000008000b008f3f00000c000a0059f4a931",
        "744dcdc608000800010000000800090008000000",
    ),
];

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn names(i: u32) -> String {
    if i == 2 {
        "eth0".into()
    } else {
        format!("if{i}")
    }
}

/// The programs' names as the kernel had them (BPF_OBJ_NAME_LEN: 15
/// characters).
fn progs(id: u32) -> Option<String> {
    match id {
        16271 => Some("hostroute_redir".into()),
        16275 => Some("tracer_tc_ingre".into()),
        _ => None,
    }
}

#[test]
fn captured_filters_are_named_as_tc_shows_them() {
    let msgs: Vec<Vec<u8>> = CAPTURED.iter().map(|h| bytes(h)).collect();
    let got = describe(&msgs, &names, &progs);
    // tracer's own program is left out; the others in dump order.
    assert_eq!(
        got,
        vec![
            "tc action mirred (Egress Redirect to device eth0)".to_string(),
            "tc BPF program hostroute_redir (id 16271)".to_string(),
        ]
    );
    // Without the program's name, the filter's (here tc's object and
    // section; aya names a filter by its program).
    assert_eq!(
        describe(&msgs, &names, &|_| None),
        vec![
            "tc BPF program tr.o:[classifier] (id 16275)".to_string(),
            "tc action mirred (Egress Redirect to device eth0)".to_string(),
            "tc BPF program hr.o:[classifier] (id 16271)".to_string(),
        ]
    );
}

#[test]
fn truncated_and_corrupt_messages_do_not_panic() {
    for hex in CAPTURED {
        let m = bytes(hex);
        for n in 0..m.len() {
            let _ = describe(&[m[..n].to_vec()], &names, &progs);
        }
        for i in (0..m.len()).step_by(3) {
            for v in [0u8, 0xff, 0x05] {
                let mut c = m.clone();
                c[i] = v;
                let _ = describe(&[c], &names, &progs);
            }
        }
    }
    // Cut inside the mirred parameters: the action is left out.
    let u32_msg = bytes(CAPTURED.iter().max_by_key(|h| h.len()).unwrap());
    let cut = u32_msg.len() - 100;
    assert!(describe(&[u32_msg[..cut].to_vec()], &names, &progs).is_empty());
    assert!(mirred(&[0u8; 24], &names).is_none());
}

#[test]
fn parents_are_those_of_tc() {
    assert_eq!(INGRESS_PARENT, 0xFFFF_FFF2);
    assert_eq!(EGRESS_PARENT, 0xFFFF_FFF3);
}

/// In a fresh namespace: a u32 filter with a mirred redirect is named
/// with its device, the filters make the device not empty, and the clsact
/// qdisc is deleted by netlink. Needs root and tc.
#[test]
fn filters_of_a_fresh_namespace_and_qdisc_delete() {
    use std::process::Command;
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED filters_of_a_fresh_namespace_and_qdisc_delete: not root");
        return;
    }
    if Command::new("tc").arg("-V").output().is_err() {
        eprintln!("SKIPPED filters_of_a_fresh_namespace_and_qdisc_delete: no tc");
        return;
    }
    let ns = crate::node::netns::TestNetns::add("tracer-tc");
    let sh = |cmd: &str| assert!(ns.run(&["sh", "-c", cmd]), "{cmd}");
    sh("ip link add lxc0 type veth peer name up0 && ip link set lxc0 up && ip link set up0 up");
    let path = std::path::PathBuf::from(format!("/run/netns/{}", ns.0));
    assert!(ingress_filters(&path, "lxc0").is_empty());
    sh(
        "tc qdisc add dev lxc0 clsact && tc filter add dev lxc0 ingress protocol ip u32 match u32 0 0 action mirred egress redirect dev up0",
    );
    assert_eq!(
        ingress_filters(&path, "lxc0"),
        vec!["tc action mirred (Egress Redirect to device up0)".to_string()]
    );
    let inside = crate::node::netns::NetnsGuard::enter(&path).unwrap();
    assert!(!no_filters("lxc0"));
    assert!(no_filters("up0"));
    del_clsact("lxc0").unwrap();
    assert!(no_filters("lxc0"));
    // Deleting it again: the kernel's error, not a silent success.
    assert!(del_clsact("lxc0").is_err());
    assert!(del_clsact("nonexistent0").is_err());
    drop(inside);
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, "tc", "qdisc", "show", "dev", "lxc0"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("clsact"));
}
