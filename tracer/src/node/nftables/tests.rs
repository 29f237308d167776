use super::*;

/// NFT_MSG_NEWRULE messages captured from a namespace holding the ruleset
/// of [`RULESET`] plus rules added with iptables-nft (v1.8.9) and
/// ip6tables-nft, and what `nft list ruleset` (1.0.6) printed for each,
/// counters left out; iptables-nft's xt matches and targets as tracer
/// names them (nft prints its own translation there, or nothing).
const CAPTURED: &[(&str, &str)] = &[
    (
        "ct state established,related accept",
        concat!(
            "34010000060a020801000000fb53000001000006060001007400000006000200630000000c0003000000000000000007",
            "0c0006000000000000000006f80004002000010007000100637400001400020008000100000000010800020000000000",
            "4c0001000c00010062697477697365003c00020008000100000000010800020000000001080003000000000408000600",
            "000000000c00040008000100060000000c00050008000100000000002c00010008000100636d70002000020008000100",
            "0000000108000200000000010c00030008000100000000002c0001000c000100636f756e746572001c0002000c000100",
            "00000000000000000c0002000000000000000000300001000e000100696d6d6564696174650000001c00020008000100",
            "00000000100002000c0002000800010000000001",
        ),
    ),
    (
        "ip daddr 1.2.3.4 tcp dport 80 reject with tcp reset comment \"hi there\"",
        concat!(
            "f8010000060a020801000000fb53000001000006060001007400000006000200630000000c000300000000000000000a",
            "0c0006000000000000000009ac01040024000100090001006d6574610000000014000200080002000000000f08000100",
            "000000012c00010008000100636d700020000200080001000000000108000200000000000c0003000500010002000000",
            "340001000c0001007061796c6f6164002400020008000100000000010800020000000001080003000000001008000400",
            "000000042c00010008000100636d700020000200080001000000000108000200000000000c0003000800010001020304",
            "24000100090001006d6574610000000014000200080002000000001008000100000000012c00010008000100636d7000",
            "20000200080001000000000108000200000000000c0003000500010006000000340001000c0001007061796c6f616400",
            "2400020008000100000000010800020000000002080003000000000208000400000000022c00010008000100636d7000",
            "20000200080001000000000108000200000000000c00030006000100005000002c0001000c000100636f756e74657200",
            "1c0002000c00010000000000000000000c00020000000000000000001c0001000b00010072656a65637400000c000200",
            "08000100000000010f000700000968692074686572650000",
        ),
    ),
    (
        "limit rate 10/second burst 20 packets drop",
        concat!(
            "e0000000060a020801000000fb53000001000006060001007400000006000200630000000c000300000000000000000d",
            "0c000600000000000000000ca4000400440001000a0001006c696d6974000000340002000c000100000000000000000a",
            "0c00020000000000000000010800030000000014080004000000000008000500000000002c0001000c000100636f756e",
            "746572001c0002000c00010000000000000000000c0002000000000000000000300001000e000100696d6d6564696174",
            "650000001c0002000800010000000000100002000c0002000800010000000000",
        ),
    ),
    (
        "meta mark 0x00000010 drop",
        concat!(
            "ec000000060a020801000000fb53000001000006060001007400000006000200630000000c0003000000000000000010",
            "0c000600000000000000000fb000040024000100090001006d6574610000000014000200080002000000000308000100",
            "000000012c00010008000100636d700020000200080001000000000108000200000000000c0003000800010010000000",
            "2c0001000c000100636f756e746572001c0002000c00010000000000000000000c000200000000000000000030000100",
            "0e000100696d6d6564696174650000001c0002000800010000000000100002000c0002000800010000000000",
        ),
    ),
    (
        "tcp dport 1000-2000 drop",
        concat!(
            "78010000060a020801000000fb53000001000006060001007400000006000200630000000c0003000000000000000011",
            "0c00060000000000000000103c01040024000100090001006d6574610000000014000200080002000000001008000100",
            "000000012c00010008000100636d700020000200080001000000000108000200000000000c0003000500010006000000",
            "340001000c0001007061796c6f6164002400020008000100000000010800020000000002080003000000000208000400",
            "000000022c00010008000100636d700020000200080001000000000108000200000000050c0003000600010003e80000",
            "2c00010008000100636d700020000200080001000000000108000200000000030c0003000600010007d000002c000100",
            "0c000100636f756e746572001c0002000c00010000000000000000000c0002000000000000000000300001000e000100",
            "696d6d6564696174650000001c0002000800010000000000100002000c0002000800010000000000",
        ),
    ),
    (
        "ip saddr . tcp dport @pairs drop",
        concat!(
            "d4010000060a020801000000fb53000001000006060001007400000006000200630000000c0003000000000000000017",
            "0c00060000000000000000169801040024000100090001006d6574610000000014000200080002000000000f08000100",
            "000000012c00010008000100636d700020000200080001000000000108000200000000000c0003000500010002000000",
            "24000100090001006d6574610000000014000200080002000000001008000100000000012c00010008000100636d7000",
            "20000200080001000000000108000200000000000c0003000500010006000000340001000c0001007061796c6f616400",
            "2400020008000100000000010800020000000001080003000000000c0800040000000004340001000c0001007061796c",
            "6f616400240002000800010000000009080002000000000208000300000000020800040000000002300001000b000100",
            "6c6f6f6b75700000200002000a0001007061697273000000080002000000000108000500000000002c0001000c000100",
            "636f756e746572001c0002000c00010000000000000000000c0002000000000000000000300001000e000100696d6d65",
            "64696174650000001c0002000800010000000000100002000c0002000800010000000000",
        ),
    ),
    (
        "ip saddr 10.16.0.0/12 jump d",
        concat!(
            "a0010000060a020801000000fb53000001000006060001007400000006000200630000000c0003000000000000000019",
            "0c00060000000000000000186401040024000100090001006d6574610000000014000200080002000000000f08000100",
            "000000012c00010008000100636d700020000200080001000000000108000200000000000c0003000500010002000000",
            "340001000c0001007061796c6f6164002400020008000100000000010800020000000001080003000000000c08000400",
            "000000044c0001000c00010062697477697365003c000200080001000000000108000200000000010800030000000004",
            "08000600000000000c00040008000100fff000000c00050008000100000000002c00010008000100636d700020000200",
            "080001000000000108000200000000000c000300080001000a1000002c0001000c000100636f756e746572001c000200",
            "0c00010000000000000000000c0002000000000000000000380001000e000100696d6d65646961746500000024000200",
            "0800010000000000180002001400020008000100fffffffd0600020064000000",
        ),
    ),
    (
        "ip6 saddr fd00::/64 goto d",
        concat!(
            "58010000060a020801000000fb53000001000006060001007400000006000200630000000c000300000000000000001a",
            "0c00060000000000000000191c01040024000100090001006d6574610000000014000200080002000000000f08000100",
            "000000012c00010008000100636d700020000200080001000000000108000200000000000c000300050001000a000000",
            "340001000c0001007061796c6f6164002400020008000100000000010800020000000001080003000000000808000400",
            "000000083000010008000100636d70002400020008000100000000010800020000000000100003000c000100fd000000",
            "000000002c0001000c000100636f756e746572001c0002000c00010000000000000000000c0002000000000000000000",
            "380001000e000100696d6d656469617465000000240002000800010000000000180002001400020008000100fffffffc",
            "0600020064000000",
        ),
    ),
    (
        "tcp dport 80 dnat to 10.0.0.1:8080",
        concat!(
            "84010000060a020801000000fb53000002000006060001006e00000006000200700000000c0003000000000000000003",
            "5401040024000100090001006d6574610000000014000200080002000000001008000100000000012c00010008000100",
            "636d700020000200080001000000000108000200000000000c0003000500010006000000340001000c0001007061796c",
            "6f6164002400020008000100000000010800020000000002080003000000000208000400000000022c00010008000100",
            "636d700020000200080001000000000108000200000000000c00030006000100005000002c0001000e000100696d6d65",
            "64696174650000001800020008000100000000010c000200080001000a0000012c0001000e000100696d6d6564696174",
            "650000001800020008000100000000020c000200060001001f90000048000100080001006e6174003c00020008000100",
            "000000010800020000000002080003000000000108000400000000010800050000000002080006000000000208000700",
            "00000003",
        ),
    ),
    (
        "meta l4proto tcp ip daddr 10.16.0.1 comment \"default/nginx:http has no local endpoints\" tcp dport 80 drop",
        concat!(
            "d4020000060a020801000000fb530000020000060b00010066696c74657200000a000200494e5055540000000c000300",
            "00000000000000049c02040024000100090001006d657461000000001400020008000200000000100800010000000001",
            "2c00010008000100636d700020000200080001000000000108000200000000000c000300050001000600000034000100",
            "0c0001007061796c6f616400240002000800010000000001080002000000000108000300000000100800040000000004",
            "2c00010008000100636d700020000200080001000000000108000200000000000c000300080001000a1000012c010100",
            "0a0001006d617463680000001c0102000c000100636f6d6d656e740008000200000000000401030064656661756c742f",
            "6e67696e783a6874747020686173206e6f206c6f63616c20656e64706f696e7473000000000000000000000000000000",
            "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
            "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
            "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
            "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
            "0000000000000000340001000c0001007061796c6f616400240002000800010000000001080002000000000208000300",
            "0000000208000400000000022c00010008000100636d700020000200080001000000000108000200000000000c000300",
            "06000100005000002c0001000c000100636f756e746572001c0002000c00010000000000000000000c00020000000000",
            "00000000300001000e000100696d6d6564696174650000001c0002000800010000000000100002000c00020008000100",
            "00000000",
        ),
    ),
    (
        "xt match \"conntrack\" accept",
        concat!(
            "7c010000060a020801000000fb530000020000060b00010066696c74657200000a000200494e5055540000000c000300",
            "00000000000000050c000600000000000000000438010400d80001000a0001006d61746368000000c80002000e000100",
            "636f6e6e747261636b0000000800020000000003ac000300000000000000000000000000000000000000000000000000",
            "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
            "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
            "000000000000000000000000000000000000000000000000000001000000080000000000000000000000000000000000",
            "2c0001000c000100636f756e746572001c0002000c00010000000000000000000c000200000000000000000030000100",
            "0e000100696d6d6564696174650000001c0002000800010000000000100002000c0002000800010000000001",
        ),
    ),
    (
        "udp dport 53 reject",
        concat!(
            "4c010000060a020801000000fb5300000a0000060b00010066696c74657200000a000200494e5055540000000c000300",
            "00000000000000021401040024000100090001006d657461000000001400020008000200000000100800010000000001",
            "2c00010008000100636d700020000200080001000000000108000200000000000c000300050001001100000034000100",
            "0c0001007061796c6f616400240002000800010000000001080002000000000208000300000000020800040000000002",
            "2c00010008000100636d700020000200080001000000000108000200000000000c00030006000100003500002c000100",
            "0c000100636f756e746572001c0002000c00010000000000000000000c0002000000000000000000340001000b000100",
            "7461726765740000240002000b00010052454a454354000008000200000000000c0003000400000000000000",
        ),
    ),
    // Raw payload (`@th,OFFSET,LEN`), as nft 1.0.6 printed it: one
    // big-endian number (a DNS id, a 32-bit word), not host-order words.
    (
        "udp dport 53 @th,64,16 0x1001 drop comment \"x\"",
        concat!(
            "b4010000060a020801000000fe4c0000020000020c000100646e7364726f70000f00020066696c7465725f646e730000",
            "0c00030000000000000000027001040024000100090001006d6574610000000014000200080002000000001008000100",
            "000000012c00010008000100636d700020000200080001000000000108000200000000000c0003000500010011000000",
            "340001000c0001007061796c6f6164002400020008000100000000010800020000000002080003000000000208000400",
            "000000022c00010008000100636d700020000200080001000000000108000200000000000c0003000600010000350000",
            "340001000c0001007061796c6f6164002400020008000100000000010800020000000002080003000000000808000400",
            "000000022c00010008000100636d700020000200080001000000000108000200000000000c0003000600010010010000",
            "2c0001000c000100636f756e746572001c0002000c00010000000000000000000c000200000000000000000030000100",
            "0e000100696d6d6564696174650000001c0002000800010000000000100002000c000200080001000000000008000700",
            "00027800",
        ),
    ),
    (
        "ip daddr 10.0.0.1 @th,64,32 0x12345678 drop",
        concat!(
            "3c010000060a020801000000fe4c0000020000020c000100646e7364726f70000f00020066696c7465725f646e730000",
            "0c00030000000000000000030c0006000000000000000002f4000400340001000c0001007061796c6f61640024000200",
            "08000100000000010800020000000001080003000000001008000400000000042c00010008000100636d700020000200",
            "080001000000000108000200000000000c000300080001000a000001340001000c0001007061796c6f61640024000200",
            "08000100000000010800020000000002080003000000000808000400000000042c00010008000100636d700020000200",
            "080001000000000108000200000000000c0003000800010012345678300001000e000100696d6d656469617465000000",
            "1c0002000800010000000000100002000c0002000800010000000000",
        ),
    ),
];

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn parse(m: &[u8]) -> Option<NftRule> {
    parse_rule(m, &|i| (i == 1).then(|| "lo".to_string()))
}

#[test]
fn captured_rules_render_as_nft_prints_them() {
    for (text, hex) in CAPTURED {
        let r = parse(&bytes(hex)).unwrap();
        assert_eq!(r.text, *text);
    }
}

#[test]
fn rule_fields() {
    let find = |s: &str| {
        let (_, h) = CAPTURED.iter().find(|(t, _)| t.contains(s)).unwrap();
        parse(&bytes(h)).unwrap()
    };
    let kube = find("no local endpoints");
    assert_eq!(
        (
            kube.family.as_str(),
            kube.table.as_str(),
            kube.chain.as_str()
        ),
        ("ip", "filter", "INPUT")
    );
    assert_eq!(kube.verdict.as_deref(), Some("drop"));
    assert_eq!(
        kube.comment.as_deref(),
        Some("default/nginx:http has no local endpoints")
    );
    assert_eq!(kube.packets, Some(0));
    assert!(kube.handle > 0);
    let reset = find("tcp reset");
    assert_eq!(reset.family, "inet");
    assert_eq!(reset.verdict.as_deref(), Some("reject"));
    assert_eq!(reset.comment.as_deref(), Some("hi there"));
    let jump = find("jump d");
    assert_eq!(jump.verdict.as_deref(), Some("jump d"));
    assert_eq!(find("goto d").verdict.as_deref(), Some("goto d"));
    // No counter expression: no packets; a nat rule has no verdict.
    let nat = find("dnat");
    assert_eq!((nat.packets, nat.verdict), (None, None));
    // The xt REJECT target of ip6tables-nft is a reject.
    assert_eq!(find("udp dport 53").verdict.as_deref(), Some("reject"));
    assert_eq!(find("udp dport 53").family, "ip6");
}

/// An xt DNAT target's destination (iptables-nft keeps kube-proxy's
/// `-j DNAT --to-destination` so): revision 0's IPv4 range, revision 2's
/// addresses of either family; none without an address.
#[test]
fn xt_dnat_destinations() {
    let mut r0 = vec![0u8; 20];
    r0[0..4].copy_from_slice(&1u32.to_ne_bytes()); // rangesize
    r0[4..8].copy_from_slice(&3u32.to_ne_bytes()); // MAP_IPS | PROTO_SPECIFIED
    r0[8..12].copy_from_slice(&[10, 244, 1, 2]);
    r0[12..16].copy_from_slice(&[10, 244, 1, 2]);
    r0[16..18].copy_from_slice(&8080u16.to_be_bytes());
    assert_eq!(xt_dnat(0, &r0, false).as_deref(), Some("10.244.1.2:8080"));
    let mut r2 = vec![0u8; 42];
    r2[0..4].copy_from_slice(&1u32.to_ne_bytes()); // MAP_IPS only
    r2[4..8].copy_from_slice(&[10, 244, 1, 2]);
    assert_eq!(xt_dnat(2, &r2, false).as_deref(), Some("10.244.1.2"));
    r2[0..4].copy_from_slice(&3u32.to_ne_bytes());
    r2[4..20].copy_from_slice(&"fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    r2[36..38].copy_from_slice(&53u16.to_be_bytes());
    assert_eq!(xt_dnat(2, &r2, true).as_deref(), Some("[fd00::2]:53"));
    r2[0..4].copy_from_slice(&2u32.to_ne_bytes());
    assert_eq!(xt_dnat(2, &r2, true), None);
    assert_eq!(xt_dnat(0, &r0[..10], false), None);
}

/// The quick look at a message (the baseline's filter, which renders
/// only what it keeps) agrees with the rendered verdict, rule by rule:
/// drops, rejects (nft's and iptables-nft's xt REJECT), and the jumps,
/// gotos, accepts, NATs and counters that are neither.
#[test]
fn may_drop_agrees_with_the_rendered_verdict() {
    let mut seen = [0; 2];
    for (text, hex) in CAPTURED {
        let m = bytes(hex);
        let r = parse(&m).unwrap();
        let drops = matches!(r.verdict.as_deref(), Some("drop" | "reject"));
        assert_eq!(may_drop(&m), drops, "{text}: {:?}", r.verdict);
        seen[usize::from(drops)] += 1;
    }
    assert!(seen[0] >= 3 && seen[1] >= 3, "{seen:?}");
}

/// Cut short or scribbled over, a message never panics the parser, and
/// what it yields is a rule or nothing.
#[test]
fn truncated_and_corrupt_messages_do_not_panic() {
    for (_, hex) in CAPTURED {
        let m = bytes(hex);
        for n in 0..m.len() {
            let _ = parse(&m[..n]);
            let _ = may_drop(&m[..n]);
        }
        assert!(parse(&m[..10]).is_none());
        for i in (NLMSG_HDRLEN..m.len()).step_by(3) {
            for v in [0u8, 0xff, 0x03] {
                let mut c = m.clone();
                c[i] = v;
                let _ = parse(&c);
                let _ = may_drop(&c);
            }
        }
    }
    // An expression of a kind not rendered, and a known one with its
    // data missing, are named.
    let mut e = Vec::new();
    crate::node::netlink::put_attr(&mut e, NFTA_EXPR_NAME, b"quota\0");
    let mut e2 = Vec::new();
    crate::node::netlink::put_attr(&mut e2, NFTA_EXPR_NAME, b"payload\0");
    let mut list = Vec::new();
    crate::node::netlink::put_attr(&mut list, 1, &e);
    crate::node::netlink::put_attr(&mut list, 1, &e2);
    let mut m = vec![0u8; NLMSG_HDRLEN];
    m.extend_from_slice(&[NFPROTO_IPV4, 0, 0, 0]);
    crate::node::netlink::put_attr(&mut m, NFTA_RULE_TABLE, b"t\0");
    crate::node::netlink::put_attr(&mut m, NFTA_RULE_CHAIN, b"c\0");
    crate::node::netlink::put_attr(&mut m, NFTA_RULE_EXPRESSIONS, &list);
    let r = parse(&m).unwrap();
    assert_eq!(r.text, "<expr quota> <expr payload>");
    assert_eq!((r.verdict, r.packets, r.handle), (None, None, 0));
}

#[test]
fn prefixes_of_masks() {
    assert_eq!(prefix_len(&[0xff, 0xf0]), Some(12));
    assert_eq!(prefix_len(&[0xff, 0xff, 0xff, 0xff]), Some(32));
    assert_eq!(prefix_len(&[0xff, 0x0f]), None);
    assert_eq!(prefix_len(&[0xf0, 0xff]), None);
}

/// Native nftables rules of these shapes, made in a fresh namespace by
/// `nft -f`, render as `nft -a list ruleset` prints them (matched by
/// handle, counters left out). Needs root and nft.
const RULESET: &str = r#"
table inet t {
  set blocked { type ipv4_addr; }
  set pairs { type ipv4_addr . inet_service; }
  chain d { }
  chain c {
    type filter hook input priority 0;
    tcp dport 22 counter drop
    ip saddr 10.0.0.0/8 counter accept
    ct state established,related counter accept
    ct state new counter drop
    meta l4proto udp counter reject
    ip daddr 1.2.3.4 tcp dport 80 counter reject with tcp reset comment "hi there"
    ip saddr @blocked counter drop
    limit rate 10/second counter drop
    limit rate 10/second burst 20 packets counter drop
    log prefix "x: " counter drop
    iifname "eth*" counter drop
    meta mark 0x10 counter drop
    tcp dport 1000-2000 counter drop
    ip6 daddr ::1 udp dport != 53 counter drop
    meta pkttype broadcast counter drop
    fib daddr type local counter drop
    th dport 9 drop
    tcp flags syn counter drop
    ip saddr . tcp dport @pairs counter drop
    iif "lo" counter accept
    ip saddr 10.16.0.0/12 counter jump d
    ip6 saddr fd00::/64 counter goto d
    oifname "eth0" counter return
  }
}
table ip n {
  chain p { type nat hook prerouting priority -100; tcp dport 80 dnat to 10.0.0.1:8080; }
  chain q { type nat hook postrouting priority 100; ip saddr 10.0.0.0/8 masquerade; }
}
"#;

use crate::node::netns::TestNetns;

#[test]
fn rules_made_by_nft_render_as_nft_lists_them() {
    use std::{io::Write, process::Command};
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED rules_made_by_nft_render_as_nft_lists_them: not root");
        return;
    }
    if Command::new("nft").arg("--version").output().is_err() {
        eprintln!("SKIPPED rules_made_by_nft_render_as_nft_lists_them: no nft");
        return;
    }
    let ns = TestNetns::add("tracer-nft");
    let in_ns = |args: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns.0]).args(args);
        c
    };
    let mut nft = in_ns(&["nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    nft.stdin
        .take()
        .unwrap()
        .write_all(RULESET.as_bytes())
        .unwrap();
    assert!(nft.wait().unwrap().success());
    let listed = in_ns(&["nft", "-a", "list", "ruleset"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    // "\t\tRULE # handle N" of the rules (not of tables, chains, sets).
    let mut expected = std::collections::BTreeMap::new();
    for l in listed.lines() {
        let l = l.trim();
        let Some((rule, handle)) = l.rsplit_once(" # handle ") else {
            continue;
        };
        if rule.ends_with('{') || rule.starts_with("type ") {
            continue;
        }
        // Counters are left out of the identity.
        let words: Vec<&str> = rule.split(' ').collect();
        let mut text = Vec::new();
        let mut i = 0;
        while i < words.len() {
            if words[i] == "counter" && words.get(i + 1) == Some(&"packets") {
                i += 5;
                continue;
            }
            text.push(words[i]);
            i += 1;
        }
        expected.insert(handle.parse::<u64>().unwrap(), text.join(" "));
    }
    assert!(expected.len() >= 20, "{listed}");
    let ours = {
        let _in = crate::node::netns::NetnsGuard::enter(std::path::Path::new(&format!(
            "/run/netns/{}",
            ns.0
        )))
        .unwrap();
        rules().expect("nf_tables dump as root")
    };
    assert_eq!(ours.len(), expected.len(), "{ours:#?}");
    for r in &ours {
        assert_eq!(Some(&r.text), expected.get(&r.handle), "{r:?}");
    }
    // The baseline's dump: the same rules, those that drop or reject.
    let dropping = {
        let _in = crate::node::netns::NetnsGuard::enter(std::path::Path::new(&format!(
            "/run/netns/{}",
            ns.0
        )))
        .unwrap();
        rules_where(&may_drop).unwrap()
    };
    let want: Vec<_> = ours
        .iter()
        .filter(|r| matches!(r.verdict.as_deref(), Some("drop" | "reject")))
        .collect();
    assert!(!want.is_empty() && want.len() < ours.len());
    assert_eq!(dropping.iter().collect::<Vec<_>>(), want);
    drop(ns);
}
