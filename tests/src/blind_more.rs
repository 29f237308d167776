//! Blind scenes of more of the node's own state: IP fragments a
//! stateless filter on the way cannot match by port, a Service rule
//! whose DNAT names 0.0.0.0. Each rebuilds, in namespaces of its own, a
//! failure reported in a public thread, cited in its doc comment,
//! written without knowledge of tracer's rules. One scene is an honest
//! trap: fragments are there and all arrive, but nothing listens on the
//! port.
//!
//! Not staged here: a neighbour table overflow. The thresholds
//! (`net.ipv4.neigh.default.gc_thresh1/2/3`) and the count they are
//! compared with belong to the kernel's one ARP table, shared by every
//! namespace; a child namespace has no `neigh/default` at all. Lowering
//! them, or filling the table to the machine's 1024, would change the
//! machine's own state. Nor a TCP accept queue that overflows at the
//! handshake's final ACK: netprobe's clients connect one at a time, and
//! the SYN of the next is dropped already (the SYN-time overflow that
//! `listen_overflow` shows); ordering two handshakes deterministically
//! needed more than the time allowed.
//!
//! Address ranges: 10.140 to 10.142. `scenarios::build` falls back
//! (through the other blind modules and [`crate::blind_stack::build`])
//! to [`build`], which falls back to [`crate::blind_ovl::build`] (then
//! [`crate::blind_proto::build`]).

use anyhow::Result;

use crate::{
    blind_scenes::fast_arp,
    netns::Netns,
    scenarios::{Scenario, listen, routed, serve, simple, strings, tcp_connect},
};

pub const BLIND_MORE: &[&str] = &[
    "blind_more_dns_fragments_stateless_acl",
    "blind_more_service_dnat_zero_address",
    "blind_more_trap_fragments_arrive_no_listener",
];

pub fn build(name: &str) -> Option<Result<Scenario>> {
    Some(match name {
        "blind_more_dns_fragments_stateless_acl" => dns_fragments_stateless_acl(),
        "blind_more_service_dnat_zero_address" => service_dnat_zero_address(),
        "blind_more_trap_fragments_arrive_no_listener" => trap_fragments_arrive_no_listener(),
        _ => return crate::blind_ovl::build(name),
    })
}

/// `routed(b)` (client 10.B.1.2 — r0 10.B.1.1 router r1 10.B.2.1 —
/// server 10.B.2.2, MTU 1500 everywhere) with a stateless filter on the
/// router, a subnet ACL on the way into the client's subnet that allows
/// DNS answers by their source port (no conntrack in the router's
/// namespace, so no defragmentation before the filter): from r1 only
/// `udp sport 53` passes, plus, when `frag_rule`, every non-first
/// fragment and ICMP. A DNS server (an echo: the answer as large as the
/// query) on `server_addr`, the client's reassembly timeout 1 s.
fn stateless_acl(
    b: u8,
    frag_rule: bool,
    server_addr: &str,
) -> Result<(Vec<Netns>, crate::netns::Child)> {
    let nss = routed(b)?;
    for (n, dev) in [(0, "c0"), (1, "r0"), (1, "r1"), (2, "s0")] {
        fast_arp(&nss[n], dev)?;
    }
    nss[0].sysctl("net.ipv4.ipfrag_time", "1")?;
    nss[2].sysctl("net.ipv4.ipfrag_time", "1")?;
    let fix = if frag_rule {
        "\t\tiifname \"r1\" ip frag-off & 0x1fff != 0 accept\n\t\tiifname \"r1\" ip protocol icmp accept\n"
    } else {
        ""
    };
    nss[1].exec_file(
        &["nft", "-f"],
        &format!(
            "table ip subnet_acl {{\n\tchain forward {{\n\t\ttype filter hook forward priority 0; policy accept;\n\t\tiifname \"r1\" udp sport 53 accept\n{fix}\t\tiifname \"r1\" drop\n\t}}\n}}\n"
        ),
    )?;
    let srv = serve(&nss[2], "udp-echo", server_addr, 15)?;
    Ok((nss, srv))
}

/// cilium/cilium#9755 ("When FQDN policy is applied, DNS A Records with
/// more than 24 IPs time out"): answers larger than the MTU arrive as
/// two fragments; the port-less second fragment "is then dropped by
/// policy" (`drop (Policy denied (L3))`) and the pod's stack answers
/// `TimeExceeded(FragmentReassemblyTimeExceeded)`: the lookup times
/// out while small answers work. (The same with a stateless ACL that
/// allows DNS by port, kubernetes/dns#205's subnet NACLs.) Here the
/// router's stateless filter allows traffic into the client's subnet
/// only by `udp sport 53`; the client (bound to 10.140.1.2:40053) asks
/// 10.140.2.2:53 with a 3000-byte datagram (its own three fragments
/// pass: the filter is only on the way in) and the server answers with
/// 2048 bytes (netprobe's echo buffer): two fragments, the first (with
/// the ports) passes, the second is dropped by the filter's `iifname
/// "r1" drop`. The client's reassembly queue expires after
/// `ipfrag_time` = 1 s. Checked by hand: the client's nstat shows
/// IpReasmTimeout 1 and IpReasmFails 1, the router's counters one
/// 1500-byte fragment accepted and one 596-byte fragment dropped; with
/// `ip frag-off & 0x1fff != 0 accept` added the answer arrives. True cause: the router's stateless filter drops the
/// answer's non-first fragments (no UDP header, so `udp sport 53` never
/// matches them); the client times out reassembling the answer. Allow
/// fragments (or filter statefully, after defragmentation), or keep
/// answers under the MTU (EDNS0 buffer 1232).
fn dns_fragments_stateless_acl() -> Result<Scenario> {
    let b = 140;
    let (nss, srv) = stateless_acl(b, false, &format!("10.{b}.2.2:53"))?;
    let mut sc = simple(
        "blind_more_dns_fragments_stateless_acl",
        "a 3000-byte DNS answer in three fragments; a stateless ACL allowing udp sport 53 drops the port-less fragments",
        nss,
        format!("10.{b}.1.2:40053"),
        strings(&[
            "udp-send",
            &format!("10.{b}.2.2:53"),
            "--size",
            "3000",
            "--bind",
            &format!("10.{b}.1.2:40053"),
            "--timeout-ms",
            &crate::scaled_arg(2000),
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// kubernetes/kubernetes#114537 ("kube-proxy generates the wrong
/// iptables dnat rule"): a KUBE-SEP chain of the node-exporter Service
/// came out as `-j DNAT --to-destination :0 --persistent ...
/// --to-destination 0.0.0.0:0` instead of the endpoint's
/// 10.6.214.12:9100; connections to the Service that picked that
/// endpoint failed. Here a pod (10.141.1.2) — node (forwarding) —
/// endpoint pod (10.141.2.2, listening on 9100); the node's nat
/// PREROUTING sends the Service 10.141.100.10:9100 through KUBE-SVC to
/// its one KUBE-SEP, whose DNAT says 0.0.0.0:0. The pod connects to
/// 10.141.100.10:9100. Checked by hand: the connect times out; with the
/// DNAT to the endpoint's address and port it is echoed. True cause:
/// the Service's endpoint rule DNATs to 0.0.0.0:0; after it, the
/// node's routing finds the destination 0.0.0.0 a martian (invalid
/// destination) and drops the SYN; fix the KUBE-SEP rule (kube-proxy's rule generation), not the
/// endpoint.
fn service_dnat_zero_address() -> Result<Scenario> {
    let b = 141;
    let nss = routed(b)?;
    for (n, dev) in [(0, "c0"), (1, "r0"), (1, "r1"), (2, "s0")] {
        fast_arp(&nss[n], dev)?;
    }
    nss[1].exec_file(
        &["iptables-restore"],
        &format!(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-OEYFLNX2UKKSAKI7 - [0:0]\n:KUBE-SEP-DASZGVVO7T2FMT4N - [0:0]\n\
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A KUBE-SERVICES -d 10.{b}.100.10/32 -p tcp -m tcp --dport 9100 -j KUBE-SVC-OEYFLNX2UKKSAKI7\n\
-A KUBE-SVC-OEYFLNX2UKKSAKI7 -j KUBE-SEP-DASZGVVO7T2FMT4N\n\
-A KUBE-SEP-DASZGVVO7T2FMT4N -p tcp -m tcp -j DNAT --to-destination 0.0.0.0:0\n\
COMMIT\n"
        ),
    )?;
    let srv = listen(&nss[2], &format!("10.{b}.2.2:9100"), 15)?;
    let target = format!("10.{b}.100.10:9100");
    let mut sc = simple(
        "blind_more_service_dnat_zero_address",
        "kube-proxy wrote a Service endpoint's DNAT as --to-destination 0.0.0.0:0; a pod connects to the Service",
        nss,
        target.clone(),
        tcp_connect(&target),
    );
    sc.servers.push(srv);
    Ok(sc)
}

/// An honest trap. kubernetes/dns#205 ("dnsmasq times out resolving
/// external names without query-port"): DNS through subnet NACLs times
/// out intermittently and the NACLs are suspected. Here the router's
/// stateless filter is that of `blind_more_dns_fragments_stateless_acl`
/// with the fix in place (non-first fragments and ICMP accepted), and
/// the large datagram is the client's 3000-byte query to 10.142.2.2:53,
/// in three fragments that all arrive and are reassembled; but the DNS
/// server listens on 10.142.2.2:5353, not 53. It looks like the
/// fragment failure (a large DNS message, a stateless ACL, no answer),
/// but nothing is lost on the way. True cause: nothing listens on
/// 10.142.2.2:53; the server answers port unreachable. The ACL and the
/// fragments are not at fault.
fn trap_fragments_arrive_no_listener() -> Result<Scenario> {
    let b = 142;
    let (nss, srv) = stateless_acl(b, true, &format!("10.{b}.2.2:5353"))?;
    let mut sc = simple(
        "blind_more_trap_fragments_arrive_no_listener",
        "a stateless ACL that lets fragments through; a 3000-byte DNS query in three fragments to a port nobody listens on",
        nss,
        format!("10.{b}.2.2:53"),
        strings(&[
            "udp-send",
            &format!("10.{b}.2.2:53"),
            "--size",
            "3000",
            "--timeout-ms",
            &crate::scaled_arg(1000),
        ]),
    );
    sc.servers.push(srv);
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_unknown_names_fall_through() {
        for n in BLIND_MORE {
            assert!(n.starts_with("blind_more_"), "{n}");
        }
        assert!(build("blind_nope").is_none());
    }
}
