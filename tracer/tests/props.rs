//! Property tests: whatever an operator types or the kernel sends, parsing
//! answers with a value or an error, never a panic.

use proptest::prelude::*;
use tracer::{
    cli::parse_duration,
    model::event::decode,
    model::names::Kallsyms,
    model::target::Target,
    node::{netfilter::parse_save, nftables::parse_rule, tc::describe},
};

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn target_parse_never_panics(s in ".{0,64}", proto in prop::option::of("(tcp|udp|icmp|sctp|.{0,5})")) {
        let _ = Target::parse(&s, proto.as_deref());
    }

    #[test]
    fn target_round_trips(a in any::<[u8; 4]>(), prefix in 0u8..=32, port in prop::option::of(1u16..)) {
        let addr = std::net::Ipv4Addr::from(a);
        let text = match port {
            Some(p) => format!("{addr}/{prefix}:{p}"),
            None => format!("{addr}/{prefix}"),
        };
        let t = Target::parse(&text, None).unwrap();
        prop_assert_eq!(t.prefix, prefix);
        prop_assert_eq!(t.port, port);
        prop_assert!(t.contains(std::net::IpAddr::V4(addr)));
        let again = Target::parse(&t.to_string(), None).unwrap();
        prop_assert_eq!(again, t);
    }

    #[test]
    fn ipv6_targets_parse(a in any::<[u8; 16]>(), port in 1u16..) {
        let addr = std::net::Ipv6Addr::from(a);
        let t = Target::parse(&format!("[{addr}]:{port}"), Some("tcp")).unwrap();
        prop_assert_eq!(t.port, Some(port));
        prop_assert_eq!(t.filter(false).family, 6);
    }

    #[test]
    fn duration_parse_never_panics(s in ".{0,24}") {
        if let Ok(d) = parse_duration(&s) {
            prop_assert!(d.as_secs_f64() > 0.0);
        }
    }

    #[test]
    fn decode_never_panics(b in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = decode(&b);
    }

    #[test]
    fn decode_accepts_any_payload_of_a_valid_packet_record(mut b in prop::collection::vec(any::<u8>(), 192..=192), hook in 1u8..=16) {
        b[0] = tracer_common::kind::PACKET;
        b[1] = hook;
        prop_assert!(decode(&b).is_ok());
    }

    #[test]
    fn text_parsers_never_panic(s in "(\\[[0-9:]{0,8}\\] -A [A-Z]{0,6} .{0,40}\n|\\*[a-z]{0,6}\n|.{0,60}\n){0,8}") {
        let _ = parse_save(&s, "ip");
        let _ = Kallsyms::parse(&s);
    }

    /// Netlink messages as the kernel might send them, or not: the
    /// nf_tables rule and tc filter decoders answer without panicking.
    /// Attribute headers of small lengths and types make nested walks
    /// likely.
    #[test]
    fn netlink_decoders_never_panic(
        attrs in prop::collection::vec((0u16..40, 0u16..12, prop::collection::vec(any::<u8>(), 0..24)), 0..24)
    ) {
        let mut m = vec![0u8; 16 + 20];
        for (len, ty, data) in &attrs {
            m.extend_from_slice(&len.to_ne_bytes());
            m.extend_from_slice(&ty.to_ne_bytes());
            m.extend_from_slice(data);
        }
        let _ = parse_rule(&m, &|_| None);
        let _ = describe(&[m], &|i| i.to_string(), &|_| None);
    }
}
