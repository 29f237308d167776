//! Per-device configuration of a namespace that explains drops: each
//! link's MTU, MAC, kind, bridge and VXLAN settings (RTM_GETLINK; a VXLAN
//! device's FDB and neighbours, RTM_GETNEIGH) and its forwarding,
//! reverse-path, route_localnet and disable_ipv6 sysctls
//! (/proc/sys/net/ipv{4,6}/conf/DEV/..., which show the namespace of the
//! reading thread).

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// One device's facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkConf {
    pub dev: String,
    /// Its ifindex in its namespace (what a veth peer's IFLA_LINK names).
    #[serde(default)]
    pub ifindex: u32,
    pub mtu: u32,
    /// Administratively up (IFF_UP of ifi_flags; `ip link set DEV up`).
    /// None: not read (an older recording).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
    /// Carrier (IFF_LOWER_UP): a veth has none while its other end is
    /// down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<bool>,
    /// net.ipv4.conf.DEV.forwarding (None: unreadable, e.g. no IPv4).
    #[serde(default)]
    pub forwarding_v4: Option<bool>,
    /// Whether IPv6 forwards what DEV receives: ip6_forward() reads
    /// net.ipv6.conf.all.forwarding (and, since 6.17, the device's
    /// force_forwarding), not the device's own `forwarding`.
    #[serde(default)]
    pub forwarding_v6: Option<bool>,
    /// The reverse-path filter mode that applies on DEV: the larger of
    /// net.ipv4.conf.DEV.rp_filter and net.ipv4.conf.all.rp_filter
    /// (IN_DEV_RPFILTER() is IN_DEV_MAXCONF(), include/linux/inetdevice.h);
    /// 0 off, 1 strict, 2 loose.
    #[serde(default)]
    pub rp_filter: Option<u8>,
    /// net.ipv4.conf.DEV.route_localnet, or `all`'s
    /// (IN_DEV_NET_ROUTE_LOCALNET() is IN_DEV_ORCONF()): off, the kernel
    /// drops what comes in by DEV to or from 127.0.0.0/8 (IP_LOCALNET,
    /// ip_route_input_slow()).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_localnet: Option<bool>,
    /// net.ipv6.conf.DEV.disable_ipv6: on, ip6_rcv_core() and
    /// ip6_output() drop every IPv6 packet of DEV (IPV6DISABLED).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_ipv6: Option<bool>,
    /// Its kind (IFLA_INFO_KIND: `veth`, `bridge`, `vxlan`, ...), empty
    /// for none (a physical device, loopback).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Its settings as a bridge's port, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge_port: Option<BridgePort>,
    /// A bridge's own settings, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<BridgeConf>,
    /// Its hardware address (IFLA_ADDRESS), for Ethernet-like devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// A VXLAN device's settings, FDB and neighbours, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vxlan: Option<VxlanConf>,
    /// The other end of a veth, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<VethPeer>,
}

/// The other end of a veth: its ifindex (IFLA_LINK) and namespace
/// (IFLA_LINK_NETNSID, the id this namespace gives the peer's:
/// veth_get_link_net() and rtnl_fill_link_netnsid()). A pod's eth0 and
/// its host-side device are the two ends of one veth: what one end's
/// namespace does to a frame (a bridge port, a sysctl) shows as a failure
/// at the other end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VethPeer {
    pub ifindex: u32,
    /// IFLA_LINK_NETNSID; None: the peer is in the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netnsid: Option<i32>,
    /// The peer namespace's inode, found by [`nsids_in`]; None when
    /// `netnsid` is None (the same namespace) or it was not found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<u32>,
    /// That namespace's name, for the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns_name: Option<String>,
}

/// A VXLAN device (IFLA_INFO_DATA of kind `vxlan`, IFLA_VXLAN_*), as `ip
/// -d link show` prints it, with what decides where it sends a frame:
/// its FDB (`bridge fdb show dev DEV`: the remote VTEP for each inner
/// destination MAC; vxlan_xmit() drops a frame whose MAC has no entry
/// when there is no default, all-zeros, entry either) and its neighbours
/// (`ip neigh show dev DEV`: the MAC each inner next hop resolves to;
/// flannel and Calico add them as permanent entries, one per remote node).
#[expect(
    clippy::struct_excessive_bools,
    reason = "the device's flags as IFLA_VXLAN_* gives them: each is a fact"
)]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VxlanConf {
    /// IFLA_VXLAN_ID.
    pub vni: u32,
    /// The UDP port it sends to and listens on (IFLA_VXLAN_PORT; 0: the
    /// kernel's default, 8472).
    pub port: u16,
    /// Its fixed remote or multicast group (IFLA_VXLAN_GROUP/GROUP6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<IpAddr>,
    /// Its local address (IFLA_VXLAN_LOCAL/LOCAL6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<IpAddr>,
    /// Learning of remote MACs from received frames (IFLA_VXLAN_LEARNING).
    #[serde(default)]
    pub learning: bool,
    /// The Group Policy extension (IFLA_VXLAN_GBP, `ip link ... gbp`):
    /// its frames carry a policy id in header bits a device without it
    /// refuses (vxlan_rcv(): VXLAN_INVALID_HDR).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gbp: bool,
    /// The Generic Protocol Extension (IFLA_VXLAN_GPE, `gpe`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpe: bool,
    /// Metadata mode (IFLA_VXLAN_COLLECT_METADATA, `external`: Cilium's
    /// cilium_vxlan, Calico eBPF's): no VNI or remote of its own, it sends
    /// only what carries a tunnel key (a BPF program's
    /// bpf_skb_set_tunnel_key(), a route's `encap ip`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
    #[serde(default)]
    pub fdb: Vec<FdbEntry>,
    #[serde(default)]
    pub neighbours: Vec<NeighEntry>,
}

/// One FDB entry of a VXLAN device: an inner MAC and the VTEP it is sent
/// to (NDA_LLADDR, NDA_DST of a PF_BRIDGE neighbour).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbEntry {
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<IpAddr>,
}

/// The all-zeros MAC of a VXLAN device's default FDB entry (where frames
/// for MACs without their own entry go).
pub const DEFAULT_FDB_MAC: &str = "00:00:00:00:00:00";

/// One neighbour entry of a device: an address and the MAC it resolves
/// to (NDA_DST, NDA_LLADDR), its NUD state (ndm_state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighEntry {
    pub addr: IpAddr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    pub state: u16,
}

/// A bridge port's settings (IFLA_INFO_SLAVE_DATA of a port whose master
/// is a bridge; include/uapi/linux/if_link.h, IFLA_BRPORT_*), as `bridge
/// -d link show` prints them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgePort {
    /// The bridge it is a port of.
    pub bridge: String,
    /// Its STP state (BR_STATE_*: 0 disabled, 1 listening, 2 learning, 3
    /// forwarding, 4 blocking): br_handle_frame_finish() drops what a port
    /// not forwarding receives, should_deliver() sends nothing out of it.
    pub state: u8,
    /// Hairpin mode (IFLA_BRPORT_MODE): without it should_deliver() does
    /// not send a frame back out the port it came in by.
    pub hairpin: bool,
    /// Isolated (IFLA_BRPORT_ISOLATED): br_skb_isolated() stops frames
    /// between two isolated ports.
    #[serde(default)]
    pub isolated: bool,
    /// The VLANs it is a member of, read when its bridge filters VLANs
    /// (`bridge vlan show`: [`port_vlans`]); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<u16>,
    /// Its PVID: the VLAN untagged frames it receives are put in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvid: Option<u16>,
}

/// BR_STATE_FORWARDING (include/uapi/linux/if_bridge.h).
pub const BR_STATE_FORWARDING: u8 = 3;

/// The kernel's tunnel drivers (their module names, /sys/module/NAME,
/// present once loaded, and for a built-in one with parameters).
const TUNNEL_DRIVERS: &[&str] = &[
    "vxlan",
    "geneve",
    "ipip",
    "ip_gre",
    "sit",
    "ip6_tunnel",
    "ip6_gre",
    "wireguard",
    "fou",
];

/// Is a tunnel driver loaded on the node (read once at start)? Only then
/// can a followed packet be wrapped in a tunnel's outer headers, which
/// tracer's skb programs then follow (tracer-ebpf filter.rs
/// classify_matched); its VXLAN devices' ports are read then.
pub fn tunnel_drivers_loaded() -> bool {
    let sys = crate::node::hostroot::get().join("/sys/module");
    TUNNEL_DRIVERS.iter().any(|m| sys.join(m).exists())
}

/// Whether the VXLAN driver is loaded (nftrace traces into VXLAN only
/// then: node/nftrace.rs).
pub fn vxlan_loaded() -> bool {
    crate::node::hostroot::get()
        .join("/sys/module/vxlan")
        .exists()
}

/// The UDP ports of the VXLAN devices in this thread's namespace and in
/// `netns` (one link dump each), beyond the overlay ports every tracer
/// knows ([`tracer_common::tunnel::TUNNEL_UDP_PORTS`]), at most `N`:
/// where the skb programs follow a packet into a VXLAN device made with
/// another `dstport` (`FilterConfig::tunnel_ports`). Read at start, only
/// when a tunnel driver is loaded.
pub fn extra_tunnel_ports<const N: usize>(netns: &[PathBuf]) -> Vec<u16> {
    let mut ports = Vec::new();
    let mut take = || {
        each_link(&mut |_, attrs| {
            let mut l = LinkConf::default();
            if let Some(info) = super::netlink::attr(attrs, IFLA_LINKINFO) {
                link_info(info, &mut l);
            }
            // Port 0: the kernel's default, 8472 (vxlan_newlink()).
            let Some(port) = l.vxlan.map(|v| v.port).filter(|p| *p != 0) else {
                return;
            };
            if !tracer_common::tunnel::TUNNEL_UDP_PORTS.contains(&port) && !ports.contains(&port) {
                ports.push(port);
            }
        })
    };
    take();
    for path in netns {
        if let Ok(_g) = crate::node::netns::NetnsGuard::enter(path) {
            take();
        }
    }
    ports.truncate(N);
    ports
}

/// A bridge's STP state name.
pub fn stp_state_name(state: u8) -> &'static str {
    match state {
        0 => "disabled",
        1 => "listening",
        2 => "learning",
        3 => "forwarding",
        4 => "blocking",
        _ => "unknown",
    }
}

/// A bridge device's own settings (IFLA_INFO_DATA of kind `bridge`,
/// IFLA_BR_*).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeConf {
    /// STP on (IFLA_BR_STP_STATE).
    pub stp: bool,
    /// VLAN filtering on (IFLA_BR_VLAN_FILTERING): br_allowed_ingress()
    /// and br_allowed_egress() drop frames of VLANs a port is not in.
    pub vlan_filtering: bool,
}

/// The sysctl `key` (`net/ipv4/ipfrag_time`) of the namespace at `path`
/// (entered on this thread: /proc/sys/net shows the reading thread's
/// namespace).
pub fn sysctl_in(path: &Path, key: &str) -> Option<String> {
    let _g = crate::node::netns::NetnsGuard::enter(path).ok()?;
    std::fs::read_to_string(format!("/proc/sys/{key}")).ok()
}

/// The links of the namespace at `path` (entered on this thread), or of
/// this thread's namespace when None. Empty when nothing can be read.
pub fn links_in(path: Option<&Path>) -> Vec<LinkConf> {
    let _g = match path.map(crate::node::netns::NetnsGuard::enter) {
        Some(Ok(g)) => Some(g),
        Some(Err(_)) => return Vec::new(),
        None => None,
    };
    let mut out = rtnl_links().unwrap_or_default();
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u8>().ok())
    };
    let all_rp = read("/proc/sys/net/ipv4/conf/all/rp_filter".into()).unwrap_or(0);
    let all_localnet =
        read("/proc/sys/net/ipv4/conf/all/route_localnet".into()).is_some_and(|v| v != 0);
    let all_v6 = read("/proc/sys/net/ipv6/conf/all/forwarding".into());
    for l in &mut out {
        l.forwarding_v4 =
            read(format!("/proc/sys/net/ipv4/conf/{}/forwarding", l.dev)).map(|v| v != 0);
        let force = read(format!(
            "/proc/sys/net/ipv6/conf/{}/force_forwarding",
            l.dev
        ));
        l.forwarding_v6 = all_v6.map(|v| v != 0 || force.is_some_and(|f| f != 0));
        l.rp_filter =
            read(format!("/proc/sys/net/ipv4/conf/{}/rp_filter", l.dev)).map(|v| v.max(all_rp));
        l.route_localnet = read(format!("/proc/sys/net/ipv4/conf/{}/route_localnet", l.dev))
            .map(|v| v != 0 || all_localnet);
        l.disable_ipv6 =
            read(format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", l.dev)).map(|v| v != 0);
    }
    out
}

/// Every link of this thread's namespace, by one RTM_GETLINK dump: its
/// name and its attributes (include/uapi/linux/if_link.h) to `each`.
pub fn each_link(each: &mut dyn FnMut(&str, &[u8])) -> Option<()> {
    each_link_indexed(&mut |m| each(m.name, m.attrs))
}

/// One RTM_NEWLINK message of a dump.
struct LinkMsg<'a> {
    index: u32,
    /// ifi_flags (IFF_*).
    flags: u32,
    name: &'a str,
    attrs: &'a [u8],
}

/// [`each_link`] with each link's ifindex and flags.
fn each_link_indexed(each: &mut dyn FnMut(&LinkMsg<'_>)) -> Option<()> {
    const IFLA_IFNAME: u16 = 3;
    // ifinfomsg: family, pad, type, index, flags, change (16 bytes).
    let body = [0u8; 16];
    super::netlink::dump(
        libc::NETLINK_ROUTE,
        libc::RTM_GETLINK,
        &body,
        &mut |ty, msg| {
            if ty != libc::RTM_NEWLINK {
                return;
            }
            // nlmsghdr (16 bytes), then ifinfomsg: its index at 4, its
            // flags at 8.
            let index = msg.get(20..24).and_then(super::netlink::ne32).unwrap_or(0);
            let flags = msg.get(24..28).and_then(super::netlink::ne32).unwrap_or(0);
            let attrs = msg.get(32..).unwrap_or(&[]);
            if let Some(name) = super::netlink::attr(attrs, IFLA_IFNAME) {
                each(&LinkMsg {
                    index,
                    flags,
                    name: &super::netlink::string(name),
                    attrs,
                });
            }
        },
    )
}

/// IFLA_* and IFLA_INFO_* (include/uapi/linux/if_link.h).
const IFLA_ADDRESS: u16 = 1;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_INFO_SLAVE_KIND: u16 = 4;
const IFLA_INFO_SLAVE_DATA: u16 = 5;

/// Every link's name, MTU, kind and bridge settings.
fn rtnl_links() -> Option<Vec<LinkConf>> {
    let mut out = Vec::new();
    let mut masters = Vec::new();
    let mut indexes = Vec::new();
    let mut names = std::collections::HashMap::new();
    each_link_indexed(&mut |m| {
        let (index, flags, dev, attrs) = (m.index, m.flags, m.name, m.attrs);
        names.insert(index, dev.to_string());
        let Some(mtu) = super::netlink::attr(attrs, IFLA_MTU).and_then(super::netlink::ne32) else {
            return;
        };
        let mut l = LinkConf {
            dev: dev.to_string(),
            ifindex: index,
            mtu,
            up: Some(flags & libc::IFF_UP as u32 != 0),
            carrier: Some(flags & libc::IFF_LOWER_UP as u32 != 0),
            mac: super::netlink::attr(attrs, IFLA_ADDRESS)
                .filter(|a| a.len() == 6)
                .map(mac_string),
            ..LinkConf::default()
        };
        if let Some(info) = super::netlink::attr(attrs, IFLA_LINKINFO) {
            link_info(info, &mut l);
        }
        if l.kind == "veth" {
            l.peer = veth_peer(attrs);
        }
        masters.push(super::netlink::attr(attrs, IFLA_MASTER).and_then(super::netlink::ne32));
        indexes.push(index);
        out.push(l);
    })?;
    for (l, m) in out.iter_mut().zip(masters) {
        if let (Some(p), Some(m)) = (l.bridge_port.as_mut(), m) {
            p.bridge = names.get(&m).cloned().unwrap_or_default();
        }
    }
    // The ports' VLANs: one more dump, only where a bridge filters them.
    if out
        .iter()
        .any(|l| l.bridge.as_ref().is_some_and(|b| b.vlan_filtering))
    {
        let vlans = port_vlans();
        for (l, index) in out.iter_mut().zip(&indexes) {
            if let (Some(p), Some((v, pvid))) = (l.bridge_port.as_mut(), vlans.get(index)) {
                p.vlans.clone_from(v);
                p.pvid = *pvid;
            }
        }
    }
    // A VXLAN device's FDB and neighbours: two dumps, only in a
    // namespace that has one.
    let vxlans: Vec<(u32, usize)> = indexes
        .iter()
        .enumerate()
        .filter(|(i, _)| out[*i].vxlan.is_some())
        .map(|(i, index)| (*index, i))
        .collect();
    if !vxlans.is_empty() {
        neighbours(libc::AF_BRIDGE as u8, &mut |index, n| {
            if let Some(&(_, i)) = vxlans.iter().find(|(x, _)| *x == index)
                && let Some(v) = out[i].vxlan.as_mut()
                && let Some(mac) = n.mac
            {
                v.fdb.push(FdbEntry {
                    mac,
                    dst: Some(n.addr).filter(|a| !a.is_unspecified()),
                });
            }
        });
        neighbours(libc::AF_UNSPEC as u8, &mut |index, n| {
            if let Some(&(_, i)) = vxlans.iter().find(|(x, _)| *x == index)
                && let Some(v) = out[i].vxlan.as_mut()
            {
                v.neighbours.push(n);
            }
        });
    }
    Some(out)
}

/// Every bridge port's VLANs and PVID, by ifindex, as `bridge vlan show`
/// reads them: an RTM_GETLINK dump of family AF_BRIDGE with IFLA_EXT_MASK
/// RTEXT_FILTER_BRVLAN, each port's IFLA_AF_SPEC holding one
/// IFLA_BRIDGE_VLAN_INFO (struct bridge_vlan_info: flags, vid) per VLAN
/// (include/uapi/linux/if_bridge.h; br_fill_ifinfo()).
fn port_vlans() -> std::collections::HashMap<u32, (Vec<u16>, Option<u16>)> {
    const IFLA_AF_SPEC: u16 = 26;
    const IFLA_EXT_MASK: u16 = 29;
    const RTEXT_FILTER_BRVLAN: u32 = 1 << 1;
    const IFLA_BRIDGE_VLAN_INFO: u16 = 2;
    const BRIDGE_VLAN_INFO_PVID: u16 = 1 << 1;
    // ifinfomsg (16 bytes, family AF_BRIDGE), then IFLA_EXT_MASK.
    let mut body = vec![0u8; 16];
    body[0] = libc::AF_BRIDGE as u8;
    super::netlink::put_attr(&mut body, IFLA_EXT_MASK, &RTEXT_FILTER_BRVLAN.to_ne_bytes());
    let mut out = std::collections::HashMap::new();
    let _ = super::netlink::dump(
        libc::NETLINK_ROUTE,
        libc::RTM_GETLINK,
        &body,
        &mut |ty, msg| {
            if ty != libc::RTM_NEWLINK {
                return;
            }
            let index = msg.get(20..24).and_then(super::netlink::ne32).unwrap_or(0);
            let attrs = msg.get(32..).unwrap_or(&[]);
            let Some(spec) = super::netlink::attr(attrs, IFLA_AF_SPEC) else {
                return;
            };
            let (mut vids, mut pvid) = (Vec::new(), None);
            for (ty, v) in super::netlink::attrs(spec) {
                if ty != IFLA_BRIDGE_VLAN_INFO || v.len() < 4 {
                    continue;
                }
                let flags = u16::from_ne_bytes([v[0], v[1]]);
                let vid = u16::from_ne_bytes([v[2], v[3]]);
                vids.push(vid);
                if flags & BRIDGE_VLAN_INFO_PVID != 0 {
                    pvid = Some(vid);
                }
            }
            out.insert(index, (vids, pvid));
        },
    );
    out
}

/// A veth's other end from its link attributes (IFLA_LINK: the peer's
/// ifindex, veth_get_iflink(); IFLA_LINK_NETNSID when the peer is in
/// another namespace). None without IFLA_LINK (the peer is gone).
fn veth_peer(attrs: &[u8]) -> Option<VethPeer> {
    let ifindex = super::netlink::attr(attrs, IFLA_LINK).and_then(super::netlink::ne32)?;
    let netnsid = super::netlink::attr(attrs, IFLA_LINK_NETNSID)
        .and_then(super::netlink::ne32)
        .map(|v| v as i32)
        .filter(|v| *v >= 0);
    Some(VethPeer {
        ifindex,
        netnsid,
        ..VethPeer::default()
    })
}

/// The ids the namespace at `path` gives the namespaces of `candidates`
/// (inode, a path that opens it), as `ip netns list-id` shows them: id ->
/// inode. One RTM_GETNSID with NETNSA_FD each (rtnl_net_getid(): it looks
/// the id up with peernet2id() and assigns none; a namespace without one
/// answers NETNSA_NSID_NOT_ASSIGNED, -1, and is left out).
pub fn nsids_in(
    path: &Path,
    candidates: &[(u32, std::path::PathBuf)],
) -> std::collections::HashMap<i32, u32> {
    // RTM_GETNSID, NETNSA_NSID, NETNSA_FD (include/uapi/linux/net_namespace.h).
    const RTM_GETNSID: u16 = 90;
    const RTM_NEWNSID: u16 = 88;
    const NETNSA_NSID: u16 = 1;
    const NETNSA_FD: u16 = 3;
    let mut ids = std::collections::HashMap::new();
    let Ok(_g) = crate::node::netns::NetnsGuard::enter(path) else {
        return ids;
    };
    for (ino, p) in candidates {
        let Ok(f) = std::fs::File::open(p) else {
            continue;
        };
        // rtgenmsg (family, padded to 4), then NETNSA_FD.
        let mut body = vec![0u8; 4];
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f) as u32;
        super::netlink::put_attr(&mut body, NETNSA_FD, &fd.to_ne_bytes());
        let _ = super::netlink::query(libc::NETLINK_ROUTE, RTM_GETNSID, &body, &mut |ty, msg| {
            if ty != RTM_NEWNSID {
                return;
            }
            // nlmsghdr (16 bytes), rtgenmsg (4), then the attributes.
            let id = msg
                .get(20..)
                .and_then(|a| super::netlink::attr(a, NETNSA_NSID))
                .and_then(super::netlink::ne32)
                .map(|v| v as i32);
            if let Some(id) = id.filter(|v| *v >= 0) {
                ids.insert(id, *ino);
            }
        });
    }
    ids
}

/// A hardware address as `aa:bb:cc:dd:ee:ff` (also the neighbour hops'
/// lladdr, model/table.rs).
pub fn mac_string(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// An address attribute (4 or 16 bytes).
fn ip_of(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

/// The neighbour entries (ARP's, NDP's) of `addr` in the namespace at
/// `path`, with their device's name: `ip neigh show to ADDR`.
pub fn neighbours_of(path: &Path, addr: IpAddr) -> Vec<(String, NeighEntry)> {
    let Ok(_g) = crate::node::netns::NetnsGuard::enter(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    neighbours(libc::AF_UNSPEC as u8, &mut |index, e| {
        if e.addr == addr {
            let dev = nix::net::if_::if_indextoname(index)
                .map_or_else(|_| index.to_string(), |c| c.to_string_lossy().into_owned());
            out.push((dev, e));
        }
    });
    out
}

/// Every neighbour of `family` in this thread's namespace (RTM_GETNEIGH
/// dump; AF_BRIDGE: the FDB entries, AF_UNSPEC: ARP's and NDP's), with
/// its device's ifindex. An FDB entry without NDA_DST has the unspecified
/// address.
fn neighbours(family: u8, each: &mut dyn FnMut(u32, NeighEntry)) {
    // NDA_* (include/uapi/linux/neighbour.h).
    const NDA_DST: u16 = 1;
    const NDA_LLADDR: u16 = 2;
    // ndmsg: family, pad, pad, ifindex, state, flags, type (12 bytes).
    let mut body = [0u8; 12];
    body[0] = family;
    let _ = super::netlink::dump(
        libc::NETLINK_ROUTE,
        libc::RTM_GETNEIGH,
        &body,
        &mut |ty, msg| {
            if ty != libc::RTM_NEWNEIGH {
                return;
            }
            // nlmsghdr (16 bytes), then ndmsg: ifindex at 4, state at 8.
            let Some(index) = msg.get(20..24).and_then(super::netlink::ne32) else {
                return;
            };
            let state = msg
                .get(24..26)
                .map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]));
            let attrs = msg.get(28..).unwrap_or(&[]);
            let addr = super::netlink::attr(attrs, NDA_DST)
                .and_then(ip_of)
                .unwrap_or(IpAddr::from([0u8; 4]));
            let mac = super::netlink::attr(attrs, NDA_LLADDR)
                .filter(|a| a.len() == 6)
                .map(mac_string);
            each(index, NeighEntry { addr, mac, state });
        },
    );
}

/// A link's kind, its bridge port settings and a bridge's own, from its
/// IFLA_LINKINFO.
fn link_info(info: &[u8], l: &mut LinkConf) {
    use super::netlink::{attr, string};
    let flag = |data: &[u8], ty: u16| attr(data, ty).and_then(|v| v.first()).copied();
    l.kind = attr(info, IFLA_INFO_KIND).map(string).unwrap_or_default();
    if l.kind == "bridge" {
        // IFLA_BR_STP_STATE (u32), IFLA_BR_VLAN_FILTERING (u8).
        let data = attr(info, IFLA_INFO_DATA).unwrap_or(&[]);
        l.bridge = Some(BridgeConf {
            stp: attr(data, 5)
                .and_then(super::netlink::ne32)
                .is_some_and(|v| v != 0),
            vlan_filtering: flag(data, 7).is_some_and(|v| v != 0),
        });
    }
    if l.kind == "vxlan" {
        // IFLA_VXLAN_ID (u32), _GROUP (in_addr), _LOCAL (in_addr),
        // _LEARNING (u8), _PORT (be16), _GROUP6, _LOCAL6 (in6_addr).
        let data = attr(info, IFLA_INFO_DATA).unwrap_or(&[]);
        let ip = |v4: u16, v6: u16| {
            attr(data, v4)
                .or_else(|| attr(data, v6))
                .and_then(ip_of)
                .filter(|a| !a.is_unspecified())
        };
        l.vxlan = Some(VxlanConf {
            vni: attr(data, 1).and_then(super::netlink::ne32).unwrap_or(0),
            port: attr(data, 15)
                .and_then(|b| Some(u16::from_be_bytes([*b.first()?, *b.get(1)?])))
                .unwrap_or(0),
            remote: ip(2, 16),
            local: ip(4, 17),
            learning: flag(data, 7).is_some_and(|v| v != 0),
            // IFLA_VXLAN_GBP (23) and _GPE (27) are flags (present or
            // not), _COLLECT_METADATA (25) a u8 (include/uapi/linux/
            // if_link.h).
            gbp: attr(data, 23).is_some(),
            gpe: attr(data, 27).is_some(),
            external: flag(data, 25).is_some_and(|v| v != 0),
            fdb: Vec::new(),
            neighbours: Vec::new(),
        });
    }
    if attr(info, IFLA_INFO_SLAVE_KIND).map(string).as_deref() == Some("bridge") {
        // IFLA_BRPORT_STATE, _MODE (hairpin), _ISOLATED: u8 each.
        let data = attr(info, IFLA_INFO_SLAVE_DATA).unwrap_or(&[]);
        l.bridge_port = Some(BridgePort {
            bridge: String::new(),
            state: flag(data, 1).unwrap_or(BR_STATE_FORWARDING),
            hairpin: flag(data, 4).is_some_and(|v| v != 0),
            isolated: flag(data, 33).is_some_and(|v| v != 0),
            ..BridgePort::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This namespace's loopback is listed with its MTU and sysctls.
    #[test]
    fn own_links_have_mtus() {
        let links = links_in(None);
        let lo = links
            .iter()
            .find(|l| l.dev == "lo")
            .unwrap_or_else(|| panic!("no lo in {links:?}"));
        assert_eq!(lo.mtu, 65536);
        assert!(lo.forwarding_v4.is_some(), "{lo:?}");
        assert!(lo.kind.is_empty() && lo.bridge_port.is_none(), "{lo:?}");
    }

    /// A VXLAN device's IFLA_LINKINFO (VNI 42, remote 192.0.2.9, port
    /// 4789 in network order, learning off, GBP on, metadata mode off),
    /// as the kernel nests it.
    #[test]
    fn reads_vxlan_settings() {
        use crate::node::netlink::put_attr;
        let mut data = Vec::new();
        put_attr(&mut data, 1, &42u32.to_ne_bytes());
        put_attr(&mut data, 2, &[192, 0, 2, 9]);
        put_attr(&mut data, 4, &[0, 0, 0, 0]);
        put_attr(&mut data, 7, &[0]);
        put_attr(&mut data, 15, &4789u16.to_be_bytes());
        put_attr(&mut data, 23, &[]);
        put_attr(&mut data, 25, &[0]);
        let mut info = Vec::new();
        put_attr(&mut info, IFLA_INFO_KIND, b"vxlan\0");
        put_attr(&mut info, IFLA_INFO_DATA | 0x8000, &data);
        let mut l = LinkConf::default();
        link_info(&info, &mut l);
        assert_eq!(
            l.vxlan,
            Some(VxlanConf {
                vni: 42,
                port: 4789,
                remote: Some(IpAddr::from([192, 0, 2, 9])),
                local: None,
                learning: false,
                gbp: true,
                gpe: false,
                external: false,
                fdb: Vec::new(),
                neighbours: Vec::new(),
            })
        );
        assert_eq!(mac_string(&[0x0e, 0, 0, 0, 2, 0x99]), "0e:00:00:00:02:99");
    }

    /// A veth's other end: IFLA_LINK (its ifindex) and, when it is in
    /// another namespace, IFLA_LINK_NETNSID (that namespace's id here).
    #[test]
    fn reads_the_other_end_of_a_veth() {
        use crate::node::netlink::put_attr;
        let mut attrs = Vec::new();
        put_attr(&mut attrs, IFLA_LINK, &7u32.to_ne_bytes());
        put_attr(&mut attrs, IFLA_LINK_NETNSID, &2i32.to_ne_bytes());
        assert_eq!(
            veth_peer(&attrs),
            Some(VethPeer {
                ifindex: 7,
                netnsid: Some(2),
                netns: None,
                netns_name: None,
            })
        );
        let mut same = Vec::new();
        put_attr(&mut same, IFLA_LINK, &7u32.to_ne_bytes());
        assert_eq!(veth_peer(&same).and_then(|p| p.netnsid), None);
        assert_eq!(veth_peer(&[]), None);
    }

    /// A bridge port's IFLA_LINKINFO (kind veth, port of a bridge in STP
    /// state learning, hairpin off, isolated) and a bridge's (STP and
    /// VLAN filtering on), as the kernel nests them.
    #[test]
    fn reads_bridge_settings() {
        use crate::node::netlink::put_attr;
        let mut port = Vec::new();
        put_attr(&mut port, 1, &[2]);
        put_attr(&mut port, 4, &[0]);
        put_attr(&mut port, 33, &[1]);
        let mut info = Vec::new();
        put_attr(&mut info, IFLA_INFO_KIND, b"veth\0");
        put_attr(&mut info, IFLA_INFO_SLAVE_KIND, b"bridge\0");
        put_attr(&mut info, IFLA_INFO_SLAVE_DATA | 0x8000, &port);
        let mut l = LinkConf::default();
        link_info(&info, &mut l);
        assert_eq!(l.kind, "veth");
        assert_eq!(
            l.bridge_port,
            Some(BridgePort {
                bridge: String::new(),
                state: 2,
                hairpin: false,
                isolated: true,
                ..BridgePort::default()
            })
        );
        assert!(l.bridge.is_none());
        let mut br = Vec::new();
        put_attr(&mut br, 5, &1u32.to_ne_bytes());
        put_attr(&mut br, 7, &[1]);
        let mut info = Vec::new();
        put_attr(&mut info, IFLA_INFO_KIND, b"bridge\0");
        put_attr(&mut info, IFLA_INFO_DATA | 0x8000, &br);
        let mut l = LinkConf::default();
        link_info(&info, &mut l);
        assert_eq!(
            l.bridge,
            Some(BridgeConf {
                stp: true,
                vlan_filtering: true,
            })
        );
        assert_eq!(stp_state_name(2), "learning");
    }
}
