//! Overlay encapsulations, as both sides tell them: the kernel programs
//! (tracer-ebpf filter.rs classify_matched) follow a tracked packet into
//! its tunnel, and the flow table (tracer model/table.rs) keeps the
//! outer tuple's hops on the packet's flow without taking them for NAT.

/// UDP ports of the overlays CNIs run: VXLAN (IANA's 4789, Calico's; the
/// Linux default 8472, flannel's), Geneve (6081), WireGuard (Calico's
/// 51820, Cilium's 51871).
pub const TUNNEL_UDP_PORTS: [u16; 5] = [4789, 8472, 6081, 51820, 51871];

/// IP in IP (Calico's IPIP, tunl0), IPv6 in IPv4 (sit), GRE.
pub const TUNNEL_IP_PROTOS: [u8; 3] = [4, 41, 47];

/// Is a packet of `proto` to `dport` a tunnel's outer packet: one of the
/// IP protocols that carry IP, or UDP to an overlay's port? A VXLAN
/// device on another port is recognised by [`is_tunnel_or`], given the
/// node's ports (`FilterConfig::tunnel_ports`).
#[expect(
    clippy::inline_always,
    reason = "called from the kernel programs, where every call is inlined"
)]
#[inline(always)]
pub fn is_tunnel(proto: u8, dport: u16) -> bool {
    match proto {
        17 => {
            dport == TUNNEL_UDP_PORTS[0]
                || dport == TUNNEL_UDP_PORTS[1]
                || dport == TUNNEL_UDP_PORTS[2]
                || dport == TUNNEL_UDP_PORTS[3]
                || dport == TUNNEL_UDP_PORTS[4]
        }
        p => p == TUNNEL_IP_PROTOS[0] || p == TUNNEL_IP_PROTOS[1] || p == TUNNEL_IP_PROTOS[2],
    }
}

/// [`is_tunnel`], or UDP to one of `extra` (the node's VXLAN devices'
/// own ports; 0 is none).
#[expect(
    clippy::inline_always,
    reason = "called from the kernel programs, where every call is inlined"
)]
#[inline(always)]
pub fn is_tunnel_or(proto: u8, dport: u16, extra: [u16; 2]) -> bool {
    is_tunnel(proto, dport)
        || (proto == 17 && dport != 0 && (dport == extra[0] || dport == extra[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlays_are_told_from_other_traffic() {
        assert!(is_tunnel(17, 4789) && is_tunnel(17, 8472) && is_tunnel(17, 51871));
        assert!(is_tunnel(4, 0) && is_tunnel(47, 0) && is_tunnel(41, 0));
        assert!(!is_tunnel(17, 53) && !is_tunnel(6, 4789) && !is_tunnel(1, 0));
        assert!(is_tunnel_or(17, 4799, [4799, 0]) && is_tunnel_or(17, 8472, [0, 0]));
        assert!(!is_tunnel_or(17, 4799, [0, 0]) && !is_tunnel_or(6, 4799, [4799, 0]));
        assert!(!is_tunnel_or(17, 0, [0, 0]));
    }
}
