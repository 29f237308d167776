use super::*;

fn t4() -> TracedTuple {
    TracedTuple {
        proto: 6,
        src: "10.0.1.5".parse().unwrap(),
        sport: 41234,
        dst: "10.96.0.10".parse().unwrap(),
        dport: 80,
    }
}

#[test]
fn vmap_rules_give_fields_and_map() {
    assert_eq!(
        vmap_of("ip daddr . meta l4proto . th dport vmap @no-endpoint-services"),
        Some((
            vec!["ip daddr".into(), "meta l4proto".into(), "th dport".into()],
            "no-endpoint-services".into()
        ))
    );
    assert_eq!(
        vmap_of("ct state new ip daddr vmap @x comment \"c\""),
        Some((vec!["ip daddr".into()], "x".into()))
    );
    assert_eq!(vmap_of("ip daddr 10.0.0.1 drop"), None);
}

#[test]
fn the_element_is_found_by_key_among_those_with_the_verdict() {
    let fields: Vec<String> = vec!["ip daddr".into(), "meta l4proto".into(), "th dport".into()];
    let key = |a: [u8; 4], p: u8, port: u16| {
        let mut k = a.to_vec();
        k.extend([p, 0, 0, 0]);
        k.extend(port.to_be_bytes());
        k.extend([0, 0]);
        k
    };
    let elems = vec![
        SetElem {
            key: key([10, 96, 0, 11], 6, 80),
            verdict: Some("goto reject-chain".into()),
            comment: Some("ns/other:http".into()),
        },
        SetElem {
            key: key([10, 96, 0, 10], 6, 80),
            verdict: Some("goto reject-chain".into()),
            comment: Some("ns/web:http".into()),
        },
    ];
    let e = element_for(
        &fields,
        "no-endpoint-services",
        &elems,
        "goto reject-chain",
        &t4(),
    )
    .unwrap();
    assert_eq!(e.key, "10.96.0.10 . tcp . 80");
    assert_eq!(e.comment.as_deref(), Some("ns/web:http"));
    assert_eq!(e.map, "@no-endpoint-services");
    // Another verdict, or a packet no element has, finds none.
    assert!(element_for(&fields, "m", &elems, "goto other", &t4()).is_none());
    let mut t = t4();
    t.dport = 81;
    assert!(element_for(&fields, "m", &elems, "goto reject-chain", &t).is_none());
    // A key of fields it cannot compute: the only element with the verdict.
    let odd: Vec<String> = vec!["meta mark".into()];
    assert!(element_for(&odd, "m", &elems, "goto reject-chain", &t4()).is_none());
    assert!(element_for(&odd, "m", &elems[..1], "goto reject-chain", &t4()).is_some());
}

/// A trace event as nft_trace_notify() builds it.
fn event(
    id: u32,
    chain: &str,
    handle: u64,
    verdict: Option<(i32, &str)>,
    headers: bool,
) -> Vec<u8> {
    let mut a = Vec::new();
    put_attr(&mut a, NFTA_TRACE_TABLE, b"filter\0");
    put_attr(&mut a, NFTA_TRACE_CHAIN, &nul(chain));
    put_attr(&mut a, NFTA_TRACE_RULE_HANDLE, &handle.to_be_bytes());
    put_attr(&mut a, NFTA_TRACE_TYPE, &3u32.to_be_bytes());
    if let Some((code, target)) = verdict {
        let mut v = Vec::new();
        put_attr(&mut v, 1, &(code as u32).to_be_bytes());
        if !target.is_empty() {
            put_attr(&mut v, 2, &nul(target));
        }
        put_attr(&mut a, NFTA_TRACE_VERDICT | NLA_F_NESTED, &v);
    }
    put_attr(&mut a, NFTA_TRACE_ID, &id.to_be_bytes());
    if headers {
        let mut ip = vec![0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 6, 0, 0];
        ip.extend([10, 0, 1, 5, 10, 96, 0, 10]);
        put_attr(&mut a, NFTA_TRACE_NETWORK_HEADER, &ip);
        let mut th = 41234u16.to_be_bytes().to_vec();
        th.extend(80u16.to_be_bytes());
        th.extend([0u8; 16]);
        put_attr(&mut a, NFTA_TRACE_TRANSPORT_HEADER, &th);
    }
    let mut m = vec![0u8; NLMSG_HDRLEN];
    m.extend([1, 0, 0, 0]);
    m.extend(a);
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m
}

#[test]
fn trace_events_become_drops_with_the_jumps_before_them() {
    let e = parse_event(&event(7, "input", 4, Some((NFT_JUMP, "svc")), true)).unwrap();
    assert_eq!(e.tuple, Some(t4()));
    assert_eq!(e.verdict_text(), "jump svc");
    assert_eq!(e.family, 1);
    let sock = || netlink::netfilter_socket().expect("a netlink socket");
    let mut n = Traced {
        label: "t".into(),
        path: PathBuf::new(),
        ctl: sock(),
        sub: sock(),
        ino: 1,
        pending: HashMap::new(),
        order: VecDeque::new(),
        drops: VecDeque::new(),
        gotos: VecDeque::new(),
        lost: false,
    };
    n.add(e);
    // A rule that only counted (no verdict) changes nothing.
    n.add(parse_event(&event(7, "svc", 8, Some((-1, "")), true)).unwrap());
    n.add(parse_event(&event(7, "svc", 9, Some((NF_DROP, "")), false)).unwrap());
    // Another packet's accept is not a drop.
    n.add(parse_event(&event(8, "input", 4, Some((1, "")), true)).unwrap());
    assert_eq!(n.drops.len(), 1);
    let d = &n.drops[0];
    assert_eq!(
        (d.chain.as_str(), d.handle, d.verdict.as_str()),
        ("svc", 9, "drop")
    );
    assert_eq!(d.tuple, t4());
    assert_eq!(d.via.len(), 1);
    assert_eq!(d.via[0].verdict, "jump svc");
    // Every truncation of an event parses or is refused, never panics.
    let m = event(7, "svc", 9, Some((NF_DROP, "")), true);
    for i in 0..m.len() {
        let _ = parse_event(&m[..i]);
    }
}

#[test]
fn resolving_names_rule_reject_and_policy() {
    let rule = |chain: &str, handle: u64, text: &str, verdict: &str| NftRule {
        family: "inet".into(),
        table: "filter".into(),
        chain: chain.into(),
        handle,
        packets: None,
        verdict: Some(verdict.into()),
        comment: Some("no way".into()),
        text: text.into(),
        dst: Default::default(),
    };
    let rules = [rule(
        "svc",
        9,
        "tcp dport 80 reject comment \"no way\"",
        "reject",
    )];
    let drop = |chain: &str, handle: u64, policy: bool| TraceDrop {
        tuple: t4(),
        family: 1,
        table: "filter".into(),
        chain: chain.into(),
        handle,
        policy,
        verdict: "drop".into(),
        via: vec![],
    };
    let mut asked = Vec::new();
    let r = resolve(
        &[drop("svc", 9, false), drop("input", 0, true)],
        &mut |f, t, c| {
            asked.push((f, t.to_string(), c.to_string()));
            rules
                .iter()
                .filter(|r| r.table == t && r.chain == c)
                .cloned()
                .collect()
        },
    );
    // Each chain a drop passed, once.
    assert_eq!(
        asked,
        [
            (1, "filter".into(), "svc".into()),
            (1, "filter".into(), "input".into())
        ]
    );
    assert_eq!(r[0].verdict, "reject");
    assert_eq!(r[0].rule, "tcp dport 80 reject comment \"no way\"");
    assert_eq!(r[0].comment.as_deref(), Some("no way"));
    assert_eq!(r[1].verdict, "policy drop");
    assert_eq!(r[1].rule, "");
}

/// The (base, offset, length) of a rule's payload loads, in order.
fn payloads(exprs: &[u8]) -> Vec<(u32, u32, u32)> {
    netlink::attrs(exprs)
        .filter(|(_, el)| netlink::attr(el, 1).map(string).as_deref() == Some("payload"))
        .filter_map(|(_, el)| {
            let d = netlink::attr(el, 2)?;
            let at = |t| netlink::be32(netlink::attr(d, t)?);
            Some((at(2)?, at(3)?, at(4)?))
        })
        .collect()
}

/// The VXLAN rules read the inner headers at RFC 7348's offsets from the
/// UDP header: the VXLAN port at 2, the inner Ethernet type at 28, the
/// inner IPv4 header from 30 (daddr 46, saddr 42, protocol 39, the ports
/// past 20 bytes); IPv6 from the same place (daddr 54, next header 36,
/// ports past 40 bytes); the endpoint rule loads the same into its key's
/// registers for the set lookup.
#[test]
fn vxlan_rules_match_the_inner_headers() {
    let t = Followed {
        addr: "10.184.2.2".parse().unwrap(),
        prefix: 32,
        port: Some(8080),
        l4proto: Some(6),
        vxlan: VxlanPorts::usual_and(&[]),
    };
    assert_eq!(
        payloads(&vxlan_rule(&t, Side::Dst, 8472)),
        [(2, 2, 2), (2, 28, 2), (2, 46, 4), (2, 39, 1), (2, 52, 2)]
    );
    assert_eq!(
        payloads(&vxlan_rule(&t, Side::Src, 4789)),
        [(2, 2, 2), (2, 28, 2), (2, 42, 4), (2, 39, 1), (2, 50, 2)]
    );
    let v6 = Followed {
        addr: "fd00::a".parse().unwrap(),
        prefix: 128,
        ..t
    };
    assert_eq!(
        payloads(&vxlan_rule(&v6, Side::Dst, 4789)),
        [(2, 2, 2), (2, 28, 2), (2, 54, 16), (2, 36, 1), (2, 72, 2)]
    );
    let names = expr_names(&vxlan_rule(&t, Side::Dst, 8472));
    assert_eq!(names[..2], ["meta", "cmp"]);
    assert_eq!(names[names.len() - 3..], ["limit", "immediate", "meta"]);
    assert_eq!(
        payloads(&endpoint_rule(false, Side::Dst, Some(8472))),
        [(2, 2, 2), (2, 28, 2), (2, 46, 4), (2, 39, 1), (2, 52, 2)]
    );
    assert!(expr_names(&endpoint_rule(false, Side::Dst, Some(8472))).contains(&"lookup".into()));
    // One trace rule per chain and side, and as many again per VXLAN
    // port; none without.
    assert_eq!(rule_messages("t", &t).len(), 4 * (1 + VXLAN_PORTS.len()));
    assert_eq!(
        rule_messages(
            "t",
            &Followed {
                vxlan: VxlanPorts::NONE,
                ..t
            }
        )
        .len(),
        4
    );
    // A node's device on a port of its own (Antrea's tunnelPort 10789) is
    // traced into too; the usual ports are not repeated.
    let own = VxlanPorts::usual_and(&[10789, 4789, 0]);
    assert_eq!(own.ports().collect::<Vec<_>>(), [4789, 8472, 10789]);
    assert_eq!(
        rule_messages("t", &Followed { vxlan: own, ..t }).len(),
        4 * (1 + 3)
    );
}

/// The names of a rule's expressions, in order.
fn expr_names(exprs: &[u8]) -> Vec<String> {
    netlink::attrs(exprs)
        .filter_map(|(_, el)| netlink::attr(el, 1).map(string))
        .collect()
}

#[test]
fn endpoints_are_one_set_lookup_keyed_by_address_protocol_and_port() {
    assert_eq!(
        expr_names(&endpoint_rule(false, Side::Src, None)),
        [
            "meta",
            "cmp",
            "payload",
            "meta",
            "payload",
            "lookup",
            "limit",
            "immediate",
            "meta"
        ]
    );
    let ep = Followed {
        addr: "10.96.0.10".parse().unwrap(),
        prefix: 32,
        port: Some(53),
        l4proto: Some(17),
        vxlan: VxlanPorts::NONE,
    };
    // Each part in its own 4-byte register, as the rule loads them.
    assert_eq!(
        endpoint_key(&ep).unwrap(),
        [10, 96, 0, 10, 17, 0, 0, 0, 0, 53, 0, 0]
    );
    assert_eq!(endpoint_key_len(false), 12);
    let v6 = Followed {
        addr: "fd00::a".parse().unwrap(),
        ..ep
    };
    assert_eq!(
        endpoint_key(&v6).unwrap().len(),
        endpoint_key_len(true) as usize
    );
    // No port or protocol: not an endpoint this set can hold.
    assert_eq!(endpoint_key(&Followed { port: None, ..ep }), None);
}

#[test]
fn the_trace_rule_for_a_prefix_masks_the_address() {
    let t = Followed {
        addr: "10.96.0.0".parse().unwrap(),
        prefix: 12,
        port: None,
        l4proto: None,
        vxlan: VxlanPorts::NONE,
    };
    assert_eq!(
        expr_names(&trace_rule(&t, Side::Dst)),
        [
            "meta",
            "cmp",
            "payload",
            "bitwise",
            "cmp",
            "limit",
            "immediate",
            "meta"
        ]
    );
    let t = Followed {
        addr: "169.254.25.10".parse().unwrap(),
        prefix: 32,
        port: Some(53),
        l4proto: Some(17),
        vxlan: VxlanPorts::NONE,
    };
    let names = expr_names(&trace_rule(&t, Side::Dst));
    // The reply side loads the source address (offset 12) and port (0).
    let payloads = |side| -> Vec<(u32, u32)> {
        netlink::attrs(&trace_rule(&t, side))
            .filter(|(_, el)| netlink::attr(el, 1).map(string).as_deref() == Some("payload"))
            .filter_map(|(_, el)| {
                let d = netlink::attr(el, 2)?;
                Some((
                    netlink::be32(netlink::attr(d, 2)?)?,
                    netlink::be32(netlink::attr(d, 3)?)?,
                ))
            })
            .collect()
    };
    assert_eq!(payloads(Side::Dst), [(1, 16), (2, 2)]);
    assert_eq!(payloads(Side::Src), [(1, 12), (2, 0)]);
    assert_eq!(
        names,
        [
            "meta",
            "cmp",
            "payload",
            "cmp",
            "meta",
            "cmp",
            "payload",
            "cmp",
            "limit",
            "immediate",
            "meta"
        ]
    );
}

/// `nft -f -` of `script` in namespace `ns`.
fn nft_in(ns: &str, script: &str) {
    use std::io::Write;
    let mut c = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(c.wait().unwrap().success(), "nft -f failed on:\n{script}");
}

/// The drops traced in namespace `ino`, polled for up to 2 s until
/// `enough` says so.
fn traced_drops(
    t: &mut NfTrace,
    ino: u32,
    enough: impl Fn(&[TraceDrop]) -> bool,
) -> Vec<TraceDrop> {
    let mut drops = Vec::new();
    for _ in 0..20 {
        t.poll();
        drops = t.drops(ino).unwrap().1;
        if enough(&drops) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drops
}

#[test]
fn drops_by_a_rule_and_through_a_verdict_map_are_traced_and_the_table_goes() {
    use std::process::Command;
    if unsafe { libc::geteuid() } != 0 || Command::new("nft").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED drops_by_a_rule_and_through_a_verdict_map_are_traced: not root, or no nft"
        );
        return;
    }
    let ns = crate::node::netns::TestNetns::add("tracer-nftrace");
    let sh = |script: &str| {
        let o = Command::new("ip")
            .args(["netns", "exec", &ns.0, "sh", "-c", script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    sh("ip link set lo up; ip addr add 10.239.0.1/32 dev lo; ip addr add 10.239.0.9/32 dev lo");
    nft_in(
        &ns.0,
        r#"table inet kp {
  map svc {
    type ipv4_addr . inet_proto . inet_service : verdict
    elements = { 10.239.0.1 . tcp . 81 comment "ns/web:http" : goto reject-chain,
                 10.239.0.2 . tcp . 81 comment "ns/other:http" : goto reject-chain }
  }
  chain reject-chain {
    reject
  }
  chain out {
    type filter hook output priority 0;
    ip daddr . meta l4proto . th dport vmap @svc
  }
}
table ip filter {
  chain out {
    type filter hook output priority 0;
    tcp dport 82 counter drop comment "no 82"
  }
}
"#,
    );
    let path = PathBuf::from(format!("/run/netns/{}", ns.0));
    let ino = crate::node::netns::netns_inode(&path).unwrap();
    let target = Followed {
        addr: "10.239.0.0".parse().unwrap(),
        prefix: 29,
        port: None,
        l4proto: None,
        // The kernel takes the VXLAN rules too (a prefix: masked).
        vxlan: VxlanPorts::usual_and(&[]),
    };
    let (mut t, failed) = NfTrace::start(&target, &[("t".into(), path.clone())]);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(t.labels(), ["t"]);
    assert!(sh("nft list tables").contains(&format!("table inet {}", table_name())));
    // Followed (81: rejected through the map; 82: dropped), and one to an
    // address outside the target, also dropped, not traced.
    sh(
        "for p in 81 82; do timeout 1 bash -c \"echo > /dev/tcp/10.239.0.1/$p\" 2>/dev/null; done; \
        timeout 1 bash -c 'echo > /dev/tcp/10.239.0.9/82' 2>/dev/null; true",
    );
    let drops = traced_drops(&mut t, ino, |d| d.len() >= 2);
    assert!(
        drops
            .iter()
            .all(|d| d.tuple.dst == "10.239.0.1".parse::<IpAddr>().unwrap()),
        "{drops:?}"
    );
    let resolved = {
        let _in = NetnsGuard::enter(&path).unwrap();
        resolve(&drops, &mut |f, t, c| {
            nftables::chain_rules(f, t, c).unwrap()
        })
    };
    let by_port = |p: u16| {
        resolved
            .iter()
            .find(|r| r.tuple.dport == p)
            .unwrap_or_else(|| panic!("{resolved:?}"))
    };
    let r = by_port(81);
    assert_eq!(
        (r.family.as_str(), r.table.as_str(), r.chain.as_str()),
        ("inet", "kp", "reject-chain")
    );
    assert_eq!((r.rule.as_str(), r.verdict.as_str()), ("reject", "reject"));
    assert_eq!(r.via, ["out: goto reject-chain"]);
    let e = r.element.as_ref().expect("the map element");
    assert_eq!(
        (e.map.as_str(), e.key.as_str()),
        ("@svc", "10.239.0.1 . tcp . 81")
    );
    assert_eq!(e.comment.as_deref(), Some("ns/web:http"));
    // Reached from the base chain `out`: its hook.
    assert_eq!(r.hook.as_deref(), Some("OUTPUT"));
    let r = by_port(82);
    assert_eq!(
        (r.family.as_str(), r.table.as_str(), r.chain.as_str()),
        ("ip", "filter", "out")
    );
    assert_eq!(r.rule, "tcp dport 82 drop comment \"no 82\"");
    assert_eq!(r.verdict, "drop");
    assert_eq!(r.hook.as_deref(), Some("OUTPUT"));
    // An endpoint traced besides the target (10.239.0.9, outside the
    // /29): its drops are traced from then on; once only.
    let nine = Followed {
        addr: "10.239.0.9".parse().unwrap(),
        prefix: 32,
        port: Some(82),
        l4proto: Some(6),
        vxlan: VxlanPorts::NONE,
    };
    let listed = || sh(&format!("nft list table inet {}", table_name()));
    learnt_while_paused_adds_no_rule(&mut t, nine, &listed);
    assert!(!t.follow_also(nine));
    sh("timeout 1 bash -c 'echo > /dev/tcp/10.239.0.9/82' 2>/dev/null; true");
    let nine_dropped = |d: &[TraceDrop]| d.iter().any(|d| d.tuple.dst == nine.addr);
    let drops = traced_drops(&mut t, ino, nine_dropped);
    assert!(nine_dropped(&drops), "{drops:?}");
    pause_takes_the_rules_out_and_back(&mut t, &listed);
    drop(t);
    // This process's table (another tracer may run beside the tests).
    let (tables, ours) = (
        sh("nft list tables"),
        format!("table inet {}", table_name()),
    );
    assert!(!tables.lines().any(|l| l.trim() == ours), "{tables}");
}

/// An endpoint learnt while paused (a flood, the CPU budget) adds the set
/// and its element, no rule; back, the rules that look it up come with the
/// target's.
fn learnt_while_paused_adds_no_rule(
    t: &mut NfTrace,
    endpoint: Followed,
    listed: &dyn Fn() -> String,
) {
    let rules = |l: &str| l.lines().filter(|l| l.contains("nftrace set 1")).count();
    let target_rules = rules(&listed());
    assert!(t.pause(true).is_empty());
    assert!(t.follow_also(endpoint));
    assert_eq!(rules(&listed()), 0, "{}", listed());
    assert!(listed().contains("10.239.0.9 . tcp . 82"), "{}", listed());
    assert!(t.pause(false).is_empty());
    assert!(rules(&listed()) > target_rules, "{}", listed());
}

/// Over the CPU budget the rules leave the chains (nothing traced), then
/// come back, the endpoints' too; twice the same is once.
fn pause_takes_the_rules_out_and_back(t: &mut NfTrace, listed: &dyn Fn() -> String) {
    let rules = |l: &str| l.lines().filter(|l| l.contains("nftrace set 1")).count();
    let before = rules(&listed());
    assert!(before >= 4, "{}", listed());
    let failed = t.pause(true);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(rules(&listed()), 0, "{}", listed());
    assert!(t.pause(true).is_empty());
    let failed = t.pause(false);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(rules(&listed()), before, "{}", listed());
    assert!(t.pause(false).is_empty());
    assert_eq!(rules(&listed()), before, "{}", listed());
}
